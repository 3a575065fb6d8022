"""`coord work integrate land` against real git/jj canonical repositories and bare remotes.

Each test builds a canonical repository of one kind (plain git with the bookmark checked out,
plain git with it not checked out, or colocated jj), a bare `origin` it pushes to, managed
clones made by `coord work create`, and drives the real CLI.
"""

import json
import re
import shlex
import shutil
import signal
import os
import subprocess
import sys
import time
import unittest

import support
from support import CoordTestCase

import store
import land
import review
import workspace

LAND_KILL_ENV = "COORD_TEST_LAND_KILL_AFTER"


class LandCase(CoordTestCase):
    kind = "git"          # "git" (main checked out), "git-detached" (main not checked out), "jj"
    # Landing is the person's by default. The tests of the landing itself have the work's
    # owner (an agent registered by `hello`) land it, so their repository opts in, as a person
    # would: git config coord.agentsLand true in the shared checkout. LandAuthorityTest does not.
    agents_land = True

    def setUp(self):
        super().setUp()
        self.use_jj(git_user=True)
        self.canon = os.path.join(self.tmp, "canon")
        self.origin = os.path.join(self.tmp, "origin.git")
        # Built once per process and copied (support.copy_fixture): the same starting state.
        support.copy_fixture(self, ("land-canon", self.kind, self.agents_land), self._build_canon)
        self.rt = self.hello()["runtime"]

    def _build_canon(self, where):
        canon, origin = os.path.join(where, "canon"), os.path.join(where, "origin.git")
        if self.kind == "jj":
            self.run_tool(where, "jj", "git", "init", "--colocate", canon)
            self.write(canon, "README", "hello\n")
            self.write(canon, "shared.txt", "one\ntwo\nthree\n")
            self.run_tool(canon, "jj", "commit", "-m", "initial")
            self.run_tool(canon, "jj", "bookmark", "create", "main", "-r", "@-")
        else:
            self.run_tool(where, "git", "init", "-q", "-b", "main", canon)
            self.write(canon, "README", "hello\n")
            self.write(canon, "shared.txt", "one\ntwo\nthree\n")
            self.run_tool(canon, "git", "add", "-A")
            self.run_tool(canon, "git", "commit", "-q", "-m", "initial")
            if self.kind == "git-detached":
                self.run_tool(canon, "git", "checkout", "-q", "-b", "dev")
        self.run_tool(where, "git", "init", "-q", "--bare", origin)
        self.run_tool(canon, "git", "remote", "add", "origin", origin)
        self.run_tool(canon, "git", "push", "-q", "origin", "refs/heads/main:refs/heads/main")
        if self.agents_land:
            self.run_tool(canon, "git", "config", "coord.agentsLand", "true")

    # -- helpers

    def run_tool(self, cwd, *argv, check=True, input=None):
        if argv[0] == "jj":
            argv = ("jj", "--no-pager", "--color=never") + argv[1:]
        proc = subprocess.run(list(argv), cwd=cwd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=120, input=input)
        if check and proc.returncode != 0:
            self.fail("%s failed in %s: %s" % (" ".join(argv), cwd, proc.stderr))
        return proc.stdout

    def write(self, cwd, name, text):
        path = os.path.join(cwd, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def read(self, cwd, name):
        with open(os.path.join(cwd, name)) as f:
            return f.read()

    def main(self):
        return self.run_tool(self.canon, "git", "rev-parse", "refs/heads/main").strip()

    def remote_main(self):
        return self.run_tool(self.origin, "git", "rev-parse", "refs/heads/main").strip()

    def work(self, *args, runtime=None, env=None):
        return self.coord("work", *args, runtime=runtime or self.rt["id"], cwd=self.canon, env=env)

    def make(self, task, name="feature.txt", text="feature\n", describe="add a feature", runtime=None):
        proc = self.work("create", task, runtime=runtime)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        handle, path = proc.stdout.splitlines()[:2]
        self.write(path, name, text)
        if describe:
            self.run_tool(path, "jj", "describe", "-m", describe)
        return handle, path

    def land(self, handle, *extra, runtime=None, env=None):
        return self.work("integrate", "land", handle, "--into", "main", *extra, runtime=runtime, env=env)

    def person_land(self, handle, *extra):
        """The person lands from a terminal (an agent's --override is refused); -> (exit status,
        the JSON reply)."""
        if not hasattr(self, "_person"):
            self._person = support.person_terminal(self, self.canon)
        rc, out = self._person.coord("work", "integrate", "land", handle, "--into", "main", *(extra + ("--json",)),
                                     stderr=False)
        return rc, json.loads(out)

    def record(self, handle):
        return support.work_record(self.env, handle)  # `work inspect --json`'s record, read in process

    def advance_main(self, name, text, message="upstream change"):
        """Move main in the canonical repository the way a person would (a new commit on it)."""
        if self.kind == "jj":
            self.run_tool(self.canon, "jj", "new", "main")
            self.write(self.canon, name, text)
            self.run_tool(self.canon, "jj", "commit", "-m", message)
            self.run_tool(self.canon, "jj", "bookmark", "set", "main", "-r", "@-")
        elif self.kind == "git":
            self.write(self.canon, name, text)
            self.run_tool(self.canon, "git", "add", "-A")
            self.run_tool(self.canon, "git", "commit", "-q", "-m", message)
        else:
            tree = os.path.join(self.tmp, "side-tree")
            if not os.path.isdir(tree):
                self.run_tool(self.canon, "git", "worktree", "add", "-q", "--detach", tree, "main")
            self.run_tool(tree, "git", "checkout", "-q", "--detach", "main")
            self.write(tree, name, text)
            self.run_tool(tree, "git", "add", "-A")
            self.run_tool(tree, "git", "commit", "-q", "-m", message)
            self.run_tool(tree, "git", "update-ref", "refs/heads/main", "HEAD")
        self.run_tool(self.canon, "git", "push", "-q", "origin", "refs/heads/main:refs/heads/main")
        return self.main()

    def events(self):
        return [json.loads(l)["event"] for l in self.coord("audit", check=0).stdout.splitlines()]


class _LandKinds:
    """The same landing on each kind of canonical repository, with and without --push."""

    def test_land_without_push(self):
        handle, path = self.make("plain")
        before_remote = self.remote_main()
        proc = self.land(handle, "--check", "test -f feature.txt")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        rec = self.record(handle)
        landed = rec["data"]["landing"]["landed"]
        self.assertEqual(proc.stdout.strip(), "%s landed %s on main\nchecked: test -f feature.txt (in %s)"
                         % (handle, landed, rec["path"]))
        self.assertEqual(self.main(), landed)
        self.assertEqual(self.remote_main(), before_remote, "no --push: the remote is not touched")
        self.assertEqual(rec["data"]["integration"]["state"], "integrated")
        self.assertEqual(rec["data"]["integration"]["proof"]["target"], landed)
        self.assertEqual(rec["data"]["gate"]["state"], "passed")
        self.assertEqual(self.coord_json("list", runtime=self.rt["id"])["leases"], [])
        if self.kind == "git":
            self.assertEqual(self.read(self.canon, "feature.txt"), "feature\n", "the checkout fast-forwarded")
        for e in ("work.landing.acquired", "work.landing.moved", "work.integrated", "work.landing.released"):
            self.assertIn(e, self.events())
        # The clone is integrated evidence-wise: it can be removed.
        proc = self.work("remove", handle, "--confirm", handle)
        self.assertEqual(proc.returncode, 0, proc.stderr)

    def test_land_with_push(self):
        handle, path = self.make("pushed")
        proc = self.land(handle, "--push", "origin", "--check", "true", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        reply = json.loads(proc.stdout)
        self.assertEqual(reply["remote"], "origin")
        self.assertEqual(self.main(), reply["landed"])
        self.assertEqual(self.remote_main(), reply["landed"])
        self.assertEqual(self.coord_json("list", runtime=self.rt["id"])["leases"], [])
        self.assertIn("pushed", reply["steps"])


class LandGitCheckedOutTest(_LandKinds, LandCase):
    kind = "git"

    def test_stale_base_rebases_cleanly(self):
        handle, path = self.make("stale")
        moved = self.advance_main("upstream.txt", "upstream\n")
        proc = self.land(handle, "--push", "origin", "--check", "test -f upstream.txt", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        reply = json.loads(proc.stdout)
        self.assertTrue(reply["rebased"])
        self.assertEqual(self.main(), reply["landed"])
        self.assertEqual(self.run_tool(self.canon, "git", "rev-parse", reply["landed"] + "^").strip(), moved)
        self.assertEqual(self.remote_main(), reply["landed"])
        self.assertEqual(self.read(self.canon, "feature.txt"), "feature\n")

    def test_stale_base_conflict_moves_nothing_and_tells_the_owner(self):
        owner = self.hello()["runtime"]
        handle, path = self.make("clash", name="shared.txt", text="one\nTWO (clone)\nthree\n", runtime=owner["id"])
        moved = self.advance_main("shared.txt", "one\nTWO (upstream)\nthree\n")
        # another agent landing this runtime's work: refused, and its --override is refused too
        refused = self.land(handle, "--check", "true", "--json")
        self.assertEqual((refused.returncode, json.loads(refused.stdout)["reason"]), (3, "not-authorized"))
        self.assertNotIn("--override", refused.stderr, "an agent is never offered the override")
        refused = self.land(handle, "--check", "true", "--json", "--override")
        self.assertEqual((refused.returncode, json.loads(refused.stdout)["reason"]), (3, "override-is-the-person-s"))
        # the person, the integration owner, lands it deliberately (audited)
        rc, reply = self.person_land(handle, "--push", "origin", "--check", "true", "--override")
        self.assertEqual(rc, 3, reply)
        self.assertEqual(reply["paths"], ["shared.txt"])
        self.assertEqual(self.main(), moved)
        self.assertEqual(self.remote_main(), moved)
        self.assertEqual(self.read(self.canon, "shared.txt"), "one\nTWO (upstream)\nthree\n")
        rec = self.record(handle)
        self.assertEqual(rec["data"]["landing"]["state"], "conflict")
        self.assertEqual(rec["data"]["landing"]["paths"], ["shared.txt"])
        self.assertIn("conflict", self.run_tool(path, "jj", "log", "--no-graph", "-r", "@",
                                                "-T", 'if(conflict, "conflict", "clean")'))
        inbox = self.coord_json("inbox", runtime=owner["id"])
        bodies = json.dumps(inbox)
        self.assertIn("shared.txt", bodies)
        self.assertIn("coord work integrate land %s --into main" % handle, bodies)
        self.assertEqual(self.coord_json("list", runtime=self.rt["id"])["leases"], [])
        self.assertIn("conflicts in shared.txt", self.work("inspect", handle).stdout)

    def test_a_follow_up_edit_after_landing_lands_as_a_new_change(self):
        # An idle clone learns at once that its landed commit is on main, so the agent's next
        # edit starts a new change instead of amending the landed one (which made the change
        # divergent and the next landing fail with jj's "is divergent").
        handle, path = self.make("follow-up")
        first = json.loads(self.land(handle, "--check", "true", "--json").stdout)["landed"]
        status = json.loads(self.coord("status", "--json", "--changes", cwd=self.canon, check=0).stdout)
        row = [r for r in status["work"] if r["handle"] == handle][0]
        self.assertFalse(row["dirty"], row)
        for args in ((), ("--changes",)):  # a landed work reads as landed, never as dirty
            line = [l for l in self.coord("status", *args, cwd=self.canon, check=0).stdout.splitlines()
                    if l.strip().startswith(handle)][0]
            self.assertIn("landed", line)
            self.assertNotIn("dirty", line)
        with open(os.path.join(path, "feature.txt"), "a") as f:
            f.write("more\n")
        self.run_tool(path, "jj", "describe", "-m", "follow up")
        proc = self.land(handle, "--check", "true", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        second = json.loads(proc.stdout)["landed"]
        self.assertEqual(self.run_tool(self.canon, "git", "rev-parse", second + "^").strip(), first)
        self.assertEqual(self.run_tool(self.canon, "git", "show", "-s", "--format=%s", first).strip(), "add a feature")
        log = self.run_tool(path, "jj", "log", "-r", "all()", "--no-graph", "-T", 'if(divergent, "DIVERGENT\n")')
        self.assertEqual(log.strip(), "")

    def test_the_empty_create_time_commit_under_the_candidate_is_refused_not_landed(self):
        # `jj new` before the first edit leaves the commit `work create` made, empty and with
        # coord's placeholder description, under the candidate: it would land on main as is.
        proc = self.work("create", "new-first")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        handle, path = proc.stdout.splitlines()[:2]
        self.run_tool(path, "jj", "new")
        self.write(path, "feature.txt", "feature\n")
        self.run_tool(path, "jj", "describe", "-m", "add a feature")
        before = self.main()
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("undescribed commit(s) under it (first", proc.stderr)
        self.assertIn("abandon", proc.stderr)
        self.assertEqual(self.main(), before)

    def test_dirty_checkout_touching_the_landing_is_refused(self):
        handle, path = self.make("dirty", name="shared.txt", text="one\ntwo\nthree\nfour\n")
        self.write(self.canon, "shared.txt", "local edit\n")
        self.write(self.canon, "untouched.txt", "mine\n")
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("shared.txt", proc.stderr)
        self.assertNotIn("untouched.txt", proc.stderr)
        self.assertEqual(self.read(self.canon, "shared.txt"), "local edit\n")
        self.assertEqual(self.read(self.canon, "untouched.txt"), "mine\n")
        self.assertEqual(self.record(handle)["data"]["landing"]["state"], "refused")
        self.assertEqual(self.coord_json("list", runtime=self.rt["id"])["leases"], [])
        os.unlink(os.path.join(self.canon, "untouched.txt"))
        self.run_tool(self.canon, "git", "checkout", "--", "shared.txt")
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 0, proc.stderr)

    def test_a_landing_keeps_the_shared_checkout_s_own_uncommitted_work(self):
        # Agents that copied their files back into the main checkout overwrote its uncommitted
        # work: a landing only fast-forwards, so every change of the person's that it does not
        # touch (edited, staged, untracked, ignored) is there afterwards, as it was.
        handle, path = self.make("beside")
        self.write(self.canon, ".git/info/exclude", "*.local\n")
        self.write(self.canon, "shared.txt", "the person's edit\n")
        self.write(self.canon, "staged.txt", "staged, never committed\n")
        self.run_tool(self.canon, "git", "add", "staged.txt")
        self.write(self.canon, "notes/untracked.txt", "untracked\n")
        self.write(self.canon, "settings.local", "ignored\n")
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(self.read(self.canon, "feature.txt"), "feature\n", "the landing reached the checkout")
        for name, text in (("shared.txt", "the person's edit\n"), ("staged.txt", "staged, never committed\n"),
                           ("notes/untracked.txt", "untracked\n"), ("settings.local", "ignored\n")):
            self.assertEqual(self.read(self.canon, name), text)
        status = self.run_tool(self.canon, "git", "status", "--porcelain")
        self.assertIn(" M shared.txt", status)
        self.assertIn("A  staged.txt", status)

    def test_a_flagged_file_touching_the_landing_is_refused_with_a_hint_that_lists_it(self):
        # git status shows nothing for a file marked assume-unchanged or skip-worktree, and
        # git merge --ff-only refuses to overwrite it: the refusal's hint must list it otherwise.
        handle, path = self.make("flagged", name="shared.txt", text="one\ntwo\nthree\nfour\n")
        for flag in ("assume-unchanged", "skip-worktree"):
            with self.subTest(flag=flag):
                self.run_tool(self.canon, "git", "update-index", "--" + flag, "shared.txt")
                self.write(self.canon, "shared.txt", "local edit\n")
                self.assertEqual(self.run_tool(self.canon, "git", "status", "--porcelain"), "")
                proc = self.land(handle, "--check", "true", "--json")
                self.assertEqual(proc.returncode, 3, proc.stderr)
                reply = json.loads(proc.stdout)
                self.assertEqual((reply["reason"], reply["paths"]), ("dirty-checkout", ["shared.txt"]), reply)
                self.assertIn(flag, proc.stderr)
                hint = proc.stderr.split("next: ", 1)[1]
                lister = hint.split(" lists them", 1)[0]
                listed = subprocess.run(["/bin/sh", "-c", lister], cwd=self.tmp, env=self.env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, timeout=60)
                self.assertIn("shared.txt", listed.stdout, (lister, listed.stderr))
                self.assertEqual(self.read(self.canon, "shared.txt"), "local edit\n")
                self.assertEqual(self.record(handle)["data"]["landing"]["state"], "refused")
                self.run_tool(self.canon, "git", "update-index", "--no-" + flag, "shared.txt")
                self.run_tool(self.canon, "git", "checkout", "--", "shared.txt")
        # A skip-worktree file a sparse checkout left off the disk is no local change.
        self.run_tool(self.canon, "git", "update-index", "--skip-worktree", "shared.txt")
        os.unlink(os.path.join(self.canon, "shared.txt"))
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 0, proc.stderr)

    def test_failing_check_leaves_the_target(self):
        handle, path = self.make("checked")
        before = self.main()
        proc = self.land(handle, "--check", "echo some output; echo the failure >&2; exit 7")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("the failure", proc.stderr)
        self.assertIn("exit 7", proc.stderr)
        self.assertEqual(self.main(), before)
        gate = self.record(handle)["data"]["gate"]
        self.assertEqual((gate["state"], gate["check"]["exit"]), ("failed", 7))
        self.assertIn("the failure", gate["check"]["tail"])
        # The repository's configured check applies without --check.
        self.run_tool(self.canon, "git", "config", "coord.landCheck", "exit 5")
        proc = self.land(handle)
        self.assertEqual(proc.returncode, 3)
        self.assertIn("exit 5", proc.stderr)
        self.assertEqual(self.main(), before)

    def test_placeholder_description_is_refused(self):
        handle, path = self.make("nodesc", describe=None)
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("placeholder", proc.stderr)
        self.assertIn("describe -r", proc.stderr)
        proc = self.work("integrate", "acquire", handle, "--into", "main")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("placeholder", proc.stderr)
        self.assertEqual(self.coord_json("list", runtime=self.rt["id"])["leases"], [])

    def test_ungated_without_check_is_refused(self):
        handle, path = self.make("ungated")
        proc = self.land(handle)
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("gate", proc.stderr)
        self.work("gate", handle, "--pass")
        proc = self.land(handle)
        self.assertEqual(proc.returncode, 0, proc.stderr)

    def test_remote_moved_is_refused_and_the_push_lease_kept(self):
        handle, path = self.make("raced")
        # Someone else pushes to origin after coord read it: simulated with a pre-receive-free
        # bare remote moved by a second clone between the read and the push (a pre-push hook
        # of the shared checkout runs exactly there).
        other = os.path.join(self.tmp, "other")
        self.run_tool(self.tmp, "git", "clone", "-q", self.origin, other)
        self.write(other, "theirs.txt", "theirs\n")
        self.run_tool(other, "git", "add", "-A")
        self.run_tool(other, "git", "commit", "-q", "-m", "theirs")
        hook = os.path.join(self.canon, ".git", "hooks", "pre-push")
        with open(hook, "w") as f:
            f.write("#!/bin/sh\ngit -C %s push -q origin HEAD:refs/heads/main\n" % other)
        os.chmod(hook, 0o755)
        theirs = self.run_tool(other, "git", "rev-parse", "HEAD").strip()
        proc = self.land(handle, "--push", "origin", "--check", "true", "--json")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertEqual(self.remote_main(), theirs, "nothing was forced")
        rec = self.record(handle)
        self.assertEqual(rec["data"]["landing"]["state"], "publish-refused")
        held = [l["resource"] for l in self.coord_json("list", runtime=self.rt["id"])["leases"]]
        self.assertIn("push/origin/main", held)
        self.assertIn("integration/main", held)


class LandGitNotCheckedOutTest(_LandKinds, LandCase):
    kind = "git-detached"

    def test_stale_base_rebases_cleanly(self):
        handle, path = self.make("stale")
        moved = self.advance_main("upstream.txt", "upstream\n")
        proc = self.land(handle, "--check", "test -f upstream.txt", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        landed = json.loads(proc.stdout)["landed"]
        self.assertEqual(self.main(), landed)
        self.assertEqual(self.run_tool(self.canon, "git", "rev-parse", landed + "^").strip(), moved)
        self.assertEqual(self.run_tool(self.canon, "git", "symbolic-ref", "HEAD").strip(), "refs/heads/dev")


    def test_rerun_after_landing_and_a_second_landing(self):
        handle, path = self.make("twice")
        first = json.loads(self.land(handle, "--check", "true", "--json").stdout)["landed"]
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("(already)", proc.stdout)
        # No `jj new` is needed: the landing gave the idle clone a new empty @ on the landed
        # commit. An agent that runs it by habit gets that empty commit refused, not landed.
        self.run_tool(path, "jj", "new")
        self.write(path, "more.txt", "more\n")
        self.run_tool(path, "jj", "describe", "-m", "more")
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("undescribed commit(s) under it", proc.stderr)
        empty = self.run_tool(path, "jj", "log", "--no-graph", "-r", "@-", "-T", "change_id")
        self.assertIn("jj -R %s abandon %s" % (path, empty), proc.stderr)
        self.run_tool(path, "jj", "abandon", empty)
        proc = self.land(handle, "--check", "true", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        second = json.loads(proc.stdout)
        self.assertFalse(second["already"])
        self.assertEqual(self.main(), second["landed"])
        self.assertEqual(self.run_tool(self.canon, "git", "rev-parse", second["landed"] + "^").strip(), first)
        self.assertEqual(self.run_tool(self.canon, "git", "show", "-s", "--format=%s", second["landed"]).strip(), "more")


    def test_failed_push_is_ambiguous_keeps_the_lease_and_a_rerun_finishes(self):
        # the remote hangs up mid-push (git says nothing about our ref): the outcome is unknown;
        # a definite rejection is LandPushRejectedTest's
        handle, path = self.make("declined")
        hook = os.path.join(self.origin, "hooks", "pre-receive")
        with open(hook, "w") as f:
            f.write("#!/bin/sh\nkill -9 $PPID\n")
        os.chmod(hook, 0o755)
        before = self.remote_main()
        proc = self.land(handle, "--push", "origin", "--check", "true")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("git ls-remote origin refs/heads/main", proc.stderr)
        self.assertEqual(self.remote_main(), before)
        rec = self.record(handle)
        self.assertEqual(rec["data"]["landing"]["state"], "publish-ambiguous")
        self.assertEqual(self.main(), rec["data"]["landing"]["landed"], "the canonical bookmark moved")
        held = [l["resource"] for l in self.coord_json("list", runtime=self.rt["id"])["leases"]]
        self.assertIn("push/origin/main", held)
        self.assertIn("check: git ls-remote origin refs/heads/main", self.work("inspect", handle).stdout)
        os.unlink(hook)
        proc = self.land(handle, "--push", "origin", "--check", "true")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(self.remote_main(), self.main())
        self.assertEqual(self.coord_json("list", runtime=self.rt["id"])["leases"], [])


    def test_target_moved_during_the_landing_is_refused(self):
        handle, path = self.make("overtaken")
        before = self.main()
        theirs = self.run_tool(self.canon, "git", "commit-tree", "-p", before, "-m", "theirs",
                               before + "^{tree}").strip()
        # Someone moves main while the check runs, after coord read it.
        proc = self.land(handle, "--check", "git -C %s update-ref refs/heads/main %s" % (self.canon, theirs))
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("moved", proc.stderr)
        self.assertEqual(self.main(), theirs, "nothing was forced")
        self.assertEqual(self.record(handle)["data"]["landing"]["state"], "refused")
        self.assertEqual(self.coord_json("list", runtime=self.rt["id"])["leases"], [])


class LandJjTest(_LandKinds, LandCase):
    kind = "jj"

    def test_bookmark_follows_in_jj(self):
        handle, path = self.make("jjland")
        proc = self.land(handle, "--check", "true", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        landed = json.loads(proc.stdout)["landed"]
        self.assertEqual(self.run_tool(self.canon, "jj", "log", "--no-graph", "--ignore-working-copy", "-r", "main",
                                       "-T", "commit_id").strip(), landed)


@support.slow
class LandKillTest(LandCase):
    """kill -9 right after each recorded step, then a re-run finishes the landing."""
    kind = "git"

    def test_kill_after_every_step_then_rerun(self):
        steps = ["acquired", "fetched", "rebased", "checked", "push-read", "moved", "pushed", "proven", "released"]
        for i, step in enumerate(steps):
            handle, path = self.make("kill%d" % i, name="k%d.txt" % i, text="%d\n" % i)
            if i % 2:
                self.advance_main("up%d.txt" % i, "up\n")  # a stale base half of the time
            proc = self.land(handle, "--push", "origin", "--check", "true", env={LAND_KILL_ENV: step})
            self.assertEqual(proc.returncode, -9, "%s: %s" % (step, proc.stderr))
            rec = self.record(handle)
            self.assertEqual(rec["data"]["landing"]["step"], step)
            text = self.work("inspect", handle).stdout
            if step != "released":
                self.assertIn("after step %s" % step, text)
            proc = self.land(handle, "--push", "origin", "--check", "true", "--json")
            self.assertEqual(proc.returncode, 0, "%s: %s" % (step, proc.stderr))
            landed = json.loads(proc.stdout)["landed"]
            self.assertEqual(self.main(), landed, step)
            self.assertEqual(self.remote_main(), landed, step)
            rec = self.record(handle)
            self.assertEqual(rec["data"]["landing"]["state"], "landed", step)
            self.assertEqual(rec["data"]["integration"]["state"], "integrated", step)
            self.assertEqual(self.coord_json("list", runtime=self.rt["id"])["leases"], [], step)
            self.assertEqual(self.run_tool(self.canon, "git", "status", "--porcelain").strip(), "", step)


@support.slow
class LandRaceTest(LandCase):
    """Two integration owners land into main at once, with real processes, many rounds."""
    kind = "git"
    ROUNDS = 6

    def test_two_owners_race(self):
        other = self.hello()["runtime"]
        landed_all = []
        for r in range(self.ROUNDS):
            h1, _ = self.make("a%d" % r, name="a%d.txt" % r, text="a\n")
            h2, _ = self.make("b%d" % r, name="b%d.txt" % r, text="b\n", runtime=other["id"])
            procs = []
            for h, rt in ((h1, self.rt["id"]), (h2, other["id"])):
                env = dict(self.env, COORD_RUNTIME_ID=rt)
                procs.append((h, rt, subprocess.Popen(
                    [sys.executable, support.COORD, "work", "integrate", "land", h, "--into", "main", "--push",
                     "origin", "--check", "true", "--json"], cwd=self.canon, env=env,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
            pending = []
            for h, rt, p in procs:
                out, err = p.communicate(timeout=300)
                self.assertIn(p.returncode, (0, 3), err)
                if p.returncode == 0:
                    landed_all.append(json.loads(out)["landed"])
                else:
                    self.assertIn("integration/main", err)
                    pending.append((h, rt))
            self.assertLess(len(pending), 2, "one of two racing owners wins")
            for h, rt in pending:  # the loser, refused cleanly, lands afterwards (rebasing)
                proc = self.land(h, "--push", "origin", "--check", "true", "--json", runtime=rt)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                landed_all.append(json.loads(proc.stdout)["landed"])
        self.assertEqual(self.main(), self.remote_main())
        for c in landed_all:
            self.assertEqual(subprocess.run(["git", "merge-base", "--is-ancestor", c, "refs/heads/main"],
                                            cwd=self.canon, env=self.env).returncode, 0)
        merges = self.run_tool(self.canon, "git", "rev-list", "--merges", "refs/heads/main").strip()
        self.assertEqual(merges, "", "never a merge commit")
        self.assertEqual(len(landed_all), 2 * self.ROUNDS)


@support.slow
class LandCloneInUseTest(LandCase):
    """Something live works inside the clone: the rebase and the check happen in a private
    scratch copy and the clone is not touched."""
    kind = "git"

    def inside(self, path):
        proc = subprocess.Popen(["sleep", "300"], cwd=path)
        self.addCleanup(proc.wait)
        self.addCleanup(proc.kill)
        self._inside = getattr(self, "_inside", []) + [proc]
        return proc

    def clone_head(self, path):
        return self.run_tool(path, "jj", "log", "--no-graph", "--ignore-working-copy", "-r", "@", "-T", "commit_id")

    def test_stale_base_rebased_in_scratch(self):
        owner = self.hello()["runtime"]
        handle, path = self.make("busy", runtime=owner["id"])
        moved = self.advance_main("upstream.txt", "upstream\n")
        self.run_tool(path, "jj", "status")  # snapshot now, so the clone's head is settled
        head = self.clone_head(path)
        self.inside(path)
        rc, reply = self.person_land(handle, "--check", "test -f upstream.txt && test -f feature.txt", "--override")
        self.assertEqual(rc, 0, reply)
        self.assertTrue(reply["rebased"])
        self.assertEqual(self.main(), reply["landed"])
        self.assertEqual(self.run_tool(self.canon, "git", "rev-parse", reply["landed"] + "^").strip(), moved)
        self.assertEqual(self.run_tool(self.canon, "git", "log", "-1", "--format=%s", reply["landed"]).strip(),
                         "add a feature")
        self.assertEqual(self.clone_head(path), head, "the clone in use is not touched")
        self.assertEqual(self.record(handle)["data"]["landing"]["where"], "scratch")
        self.assertEqual([n for n in os.listdir(self.scratch) if n.startswith(".land-")], [],
                         "the scratch copy is gone")
        self.assertIn("skip-emptied", json.dumps(self.coord_json("inbox", runtime=owner["id"])))
        return handle, path, owner

    def test_a_clone_in_use_is_not_fetched_after_landing_and_its_agent_is_told(self):
        handle, path = self.make("busy-fresh")
        self.run_tool(path, "jj", "status")
        head = self.clone_head(path)
        self.inside(path)
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("before the next edit in the clone: jj git fetch", proc.stdout)
        self.assertEqual(self.clone_head(path), head, "the clone in use is not touched")

    def test_a_clone_landed_in_rebased_form_is_removable_once_nothing_works_in_it(self):
        handle, path, owner = self.test_stale_base_rebased_in_scratch()
        self.coord("bye", runtime=owner["id"], check=0)
        for proc in list(self._inside):
            proc.kill()
            proc.wait()
        rc, out = self._person.coord("work", "remove", handle, "--confirm", handle, "--override", stderr=False)
        self.assertEqual(rc, 0, out)
        self.assertFalse(os.path.lexists(path))

    def test_a_change_amended_after_the_rebased_landing_still_blocks(self):
        handle, path, owner = self.test_stale_base_rebased_in_scratch()
        self.coord("bye", runtime=owner["id"], check=0)
        for proc in list(self._inside):
            proc.kill()
            proc.wait()
        self.write(path, "feature.txt", "amended after the landing\n")
        rc, out = self._person.coord("work", "remove", handle, "--confirm", handle, "--json", "--override",
                                     stderr=False)
        self.assertEqual(rc, 3, out)
        self.assertEqual([r["code"] for r in json.loads(out)["reasons"]], ["changed-after-integration"])
        self.assertTrue(os.path.isdir(path))

    def test_conflict_in_scratch_moves_nothing(self):
        owner = self.hello()["runtime"]
        handle, path = self.make("busyclash", name="shared.txt", text="one\nclone\nthree\n", runtime=owner["id"])
        moved = self.advance_main("shared.txt", "one\nupstream\nthree\n")
        self.run_tool(path, "jj", "status")
        head = self.clone_head(path)
        self.inside(path)
        rc, reply = self.person_land(handle, "--check", "true", "--override")
        self.assertEqual(rc, 3, reply)
        self.assertEqual(reply["paths"], ["shared.txt"])
        self.assertEqual(self.main(), moved)
        self.assertEqual(self.clone_head(path), head)
        self.assertEqual(self.record(handle)["data"]["landing"]["state"], "conflict")
        self.assertIn("shared.txt", json.dumps(self.coord_json("inbox", runtime=owner["id"])))


class ScratchRebaseTest(CoordTestCase):
    """A scratch checkout's rebase (git merge-tree and commit-tree where git has merge-tree
    --merge-base) makes what cherry-pick made: the same trees, authors, committers and message
    bytes, and the same conflicted paths."""

    def setUp(self):
        super().setUp()
        self.use_jj(git_user=True)
        self.repo = os.path.join(self.tmp, "repo")
        self.git("init", "-q", "-b", "main", self.repo, cwd=self.tmp)
        self.commit("shared.txt", "one\ntwo\nthree\n", b"initial\n")
        self.base = self.git("rev-parse", "HEAD").strip()
        self.onto = self.commit("upstream.txt", "upstream\n", b"upstream\n")
        self.git("checkout", "-q", "-b", "work", self.base)
        self.addCleanup(land._MERGE_TREE_REBASE.clear)

    def git(self, *argv, cwd=None, input=None, check=True):
        proc = subprocess.run(["git"] + list(argv), cwd=cwd or self.repo, env=self.env, input=input,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=check)
        return proc.stdout.decode("utf-8", "surrogateescape")

    def commit(self, name, text, message, empty=False):
        if not empty:
            with open(os.path.join(self.repo, name), "w") as f:
                f.write(text)
            self.git("add", name)
        # The object written as is (git commit would re-encode bytes that are not UTF-8).
        parent = self.git("rev-parse", "-q", "--verify", "HEAD^{commit}", check=False).strip()
        obj = b"tree %s\n%sauthor Ann Author <ann@example.invalid> 1700000000 +0200\ncommitter Cy Committer " \
              b"<cy@example.invalid> 1700000100 +0000\n\n" % (self.git("write-tree").strip().encode(),
                                                              b"parent %s\n" % parent.encode() if parent else b"")
        oid = self.git("hash-object", "-t", "commit", "-w", "--stdin", input=obj + message).strip()
        self.git("update-ref", "HEAD", oid)
        return oid

    def rebase(self, replay, tip, checkout=True):
        land._MERGE_TREE_REBASE[:] = [replay]
        w = {"id": "0" * 32, "handle": "a-b-c-d-e", "source": self.repo, "scratch_root": self.scratch}
        with land._Scratch(w, self.env) as scratch:
            new, paths = scratch.rebase(self.onto, tip, checkout=checkout)
            if new is None:
                return None, paths
            shown = [self.git("--git-dir", os.path.join(scratch.path, ".git"), "cat-file", "commit", c)
                     for c in self.git("--git-dir", os.path.join(scratch.path, ".git"), "rev-list",
                                       "%s..%s" % (self.onto, new)).split()]
            # Committed now: the committer's time, and so the parents' IDs, differ from run to run.
            rows = [re.sub(r"^parent .*\n", "", re.sub(r"^(committer .*>) \d+ [-+]\d{4}$", r"\1", c, flags=re.M),
                           flags=re.M) for c in shown]
            if checkout:
                self.assertEqual(self.git("-C", scratch.path, "rev-parse", "HEAD").strip(), new)
                self.assertEqual(self.git("-C", scratch.path, "status", "--porcelain"), "")
            return rows, paths

    def test_merge_tree_makes_what_cherry_pick_makes(self):
        self.commit("feature.txt", "feature\n", b"add a feature\n\nwith a body, and bytes \xe9\xff not UTF-8\n")
        self.commit("", "", b"an empty commit\n", empty=True)
        tip = self.commit("shared.txt", "one\nTWO\nthree\n", "change shared, \u00e9t\u00e9\n".encode())
        picked, replayed = self.rebase(False, tip), self.rebase(True, tip)
        self.assertEqual(len(replayed[0]), 3)
        self.assertEqual(replayed, picked)
        self.assertIn("author Ann Author <ann@example.invalid> 1700000000 +0200\ncommitter Cy Committer "
                      "<cy@example.invalid>\n", replayed[0][0])
        self.assertIn("bytes \u00e9\u00ff not UTF-8", replayed[0][-1])  # git takes such bytes as Latin-1, both ways
        self.assertEqual(self.rebase(True, tip, checkout=False)[0], picked[0])

    def test_a_conflict_names_the_same_paths_both_ways(self):
        self.commit("feature.txt", "feature\n", b"add a feature\n")
        self.git("checkout", "-q", "main")
        self.onto = self.commit("shared.txt", "one\nupstream\nthree\n", b"upstream shared\n")
        self.git("checkout", "-q", "work")
        tip = self.commit("shared.txt", "one\nclone\nthree\n", b"clone shared\n")
        self.assertEqual(self.rebase(True, tip), (None, ["shared.txt"]))
        self.assertEqual(self.rebase(False, tip), (None, ["shared.txt"]))


class LandBatchJjTest(LandCase):
    """A batch in a jj repository, with a native workspace beside two clones: the clones'
    candidates come in one fetch, the native one's (its store is the repository's) by itself."""
    kind = "jj"

    def test_a_native_workspace_and_two_clones_land_in_one_batch(self):
        handles = []
        for i, native in enumerate((False, True, False)):
            extra = ("--native-workspace",) if native else ()
            proc = self.work("create", "mixed%d" % i, *extra)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            handle, path = proc.stdout.splitlines()[:2]
            self.write(path, "mixed%d.txt" % i, "mixed %d\n" % i)
            self.run_tool(path, "jj", "describe", "-m", "add mixed%d" % i)
            self.assertEqual(self.work("integrate", "enqueue", handle, "--into", "main").returncode, 0)
            handles.append(handle)
        self.assertEqual(self.record(handles[1])["data"]["kind"], "native")
        proc = self.work("integrate", "land", "--queued", "--batch", "3", "--into", "main", "--push", "origin",
                         "--check", "test -f mixed0.txt", "--json")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        r = json.loads(proc.stdout)
        self.assertEqual([(x["work"], x["outcome"]) for x in r["works"]], [(h, "landed") for h in handles])
        self.assertEqual((r["check_runs"], self.remote_main()), (1, self.main()))
        tree = self.run_tool(self.canon, "git", "ls-tree", "--name-only", "main").split()
        self.assertTrue({"mixed0.txt", "mixed1.txt", "mixed2.txt"} <= set(tree), tree)
        for h in handles:
            self.assertEqual(self.record(h)["data"]["integration"]["state"], "integrated")


class LandTellsTheWorksAgentTest(LandCase):
    """A person lands the work they created and launched an agent for: the conflict goes to that
    agent (the one that must resolve it), not back to the person, who is the caller."""
    kind = "git"

    def test_conflict_reaches_the_agent_running_the_work(self):
        handle, path = self.make("agented", name="shared.txt", text="one\nTWO (clone)\nthree\n")
        conversation = "agent-conv-%d" % os.getpid()
        st = store.Store(environ=self.env)
        self.addCleanup(st.close)
        w = st.resolve_work(handle)
        with st.transaction():  # as `work start` records the launched harness's conversation
            st.update_work(w["id"], data={"tmux": {"conversation": conversation}})
        agent = self.hello(conversation)["runtime"]
        self.advance_main("shared.txt", "one\nTWO (upstream)\nthree\n")
        proc = self.land(handle, "--check", "true", "--json")  # the creator, no override needed
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        reply = json.loads(proc.stdout)
        self.assertEqual(reply["reason"], "conflict")
        self.assertEqual(reply["owner_told"], agent["handle"])
        bodies = json.dumps(self.coord_json("inbox", runtime=agent["id"]))
        self.assertIn("shared.txt", bodies)
        self.assertIn("coord work integrate land %s --into main" % handle, bodies)
        self.assertEqual(self.coord_json("inbox", runtime=self.rt["id"]).get("messages", []), [],
                         "the person landing is not told about their own landing")


class LandReleasesTheAgentsLeasesTest(LandCase):
    """A proven landing releases the leases the work's agent held on what landed (peers waiting
    "until you land" go on at once) and tells that agent, at its next hook boundary."""
    kind = "git"

    def hook(self, conversation, event, cwd, **extra):
        payload = dict({"session_id": conversation, "hook_event_name": event, "cwd": cwd,
                        "transcript_path": os.path.join(self.tmp, "transcript.jsonl")}, **extra)
        proc = support.run_hook(support.hook_argv("claude"), payload, self.env, cwd)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc.stdout

    def test_a_peer_claims_right_after_the_landing_and_the_agent_is_told(self):
        handle, path = self.make("released", name="src/feature.txt")
        conversation = "agent-conv-%d" % os.getpid()
        st = store.Store(environ=self.env)
        self.addCleanup(st.close)
        w = st.resolve_work(handle)
        with st.transaction():  # as `work start` records the launched harness's conversation
            st.update_work(w["id"], data={"tmux": {"conversation": conversation}})
        self.hook(conversation, "SessionStart", path, source="startup")
        agent = st.find_conversation_runtime(conversation)
        self.coord("claim", "src/feature.txt", "notes.txt", runtime=agent["id"], cwd=self.canon, check=0)
        peer = self.hello()["runtime"]
        self.assertEqual(self.coord("check", "src/feature.txt", runtime=peer["id"], cwd=self.canon).returncode, 3,
                         "the peer waits until the work lands")
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("told %s, its leases on src/feature.txt released" % agent["handle"], proc.stdout)
        self.coord("check", "src/feature.txt", runtime=peer["id"], cwd=self.canon, check=0)
        self.coord("claim", "src/feature.txt", runtime=peer["id"], cwd=self.canon, check=0)
        self.assertEqual([l["resource"] for l in st.leases_of(agent["id"])], ["notes.txt"],
                         "a lease on what did not land stays: the agent may go on in the clone")
        released = [json.loads(l) for l in self.coord("audit", check=0).stdout.splitlines()]
        released = [e for e in released if e["event"] == "lease.released" and e.get("data", {}).get("landed")]
        self.assertEqual([e["subject"] for e in released], ["src/feature.txt"])
        context = self.hook(conversation, "UserPromptSubmit", path, prompt="go on")
        self.assertIn("work %s landed on main" % handle, context)
        self.assertIn("jj git fetch", context)


class LandRefusesBeforeTheCheckTest(LandCase):
    """What the move or the push would refuse after the check (a moved remote, a dirty shared
    checkout) is read first, for tens of milliseconds, so the check (minutes for a real test
    suite) never runs for a landing that cannot finish."""
    kind = "git"

    def slow_check(self):
        self.marker = os.path.join(self.tmp, "check-ran")
        return "touch %s && sleep 3" % self.marker

    def test_a_moved_remote_is_refused_before_the_check_runs(self):
        handle, path = self.make("remote-moved")
        other = os.path.join(self.tmp, "other")
        self.run_tool(self.tmp, "git", "clone", "-q", self.origin, other)
        self.write(other, "theirs.txt", "theirs\n")
        self.run_tool(other, "git", "add", "-A")
        self.run_tool(other, "git", "commit", "-q", "-m", "theirs")
        self.run_tool(other, "git", "push", "-q", "origin", "HEAD:refs/heads/main")
        before = self.main()
        proc = self.land(handle, "--push", "origin", "--check", self.slow_check(), "--json")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        reply = json.loads(proc.stdout)
        self.assertEqual(reply["reason"], "remote-moved")
        self.assertFalse(os.path.exists(self.marker), "the check never ran")
        self.assertEqual(self.main(), before)
        update = "git -C %s pull --ff-only origin main" % self.canon
        self.assertIn(update, reply["hint"])
        self.assertEqual(self.coord_json("list", runtime=self.rt["id"])["leases"], [], "the stop released them")
        # the hint's command, as given, brings main up to date; the landing then goes through
        self.run_tool(self.canon, *update.split())
        proc = self.land(handle, "--push", "origin", "--check", "true")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(self.remote_main(), self.main())

    def test_a_dirty_shared_checkout_is_refused_before_the_check_runs(self):
        handle, path = self.make("dirty-early", name="shared.txt", text="one\ntwo\nthree\nfour\n")
        self.write(self.canon, "shared.txt", "local edit\n")
        proc = self.land(handle, "--check", self.slow_check(), "--json")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        reply = json.loads(proc.stdout)
        self.assertEqual((reply["reason"], reply["paths"]), ("dirty-checkout", ["shared.txt"]))
        self.assertFalse(os.path.exists(self.marker), "the check never ran")
        self.assertEqual(self.read(self.canon, "shared.txt"), "local edit\n")

    def test_a_stale_candidate_is_judged_by_its_own_changes_only(self):
        handle, path = self.make("stale-clean")
        self.advance_main("upstream.txt", "upstream\n")
        self.write(self.canon, "upstream.txt", "local edit of a path only main changed\n")
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)


class LandRefusesInstalledFilesTest(LandCase):
    """A change to coord's installed files (a harness rewriting its config in the clone) never
    lands as a side effect of a work: refused before the check, with the command that drops it."""
    kind = "git"

    def test_a_change_to_an_installed_file_is_refused_with_the_command_that_drops_it(self):
        handle, path = self.make("qwen-rewrote")
        self.write(path, ".qwen/settings.json", '{\n  "hooks": {},\n  "$version": 4\n}\n')
        before = self.main()
        marker = os.path.join(self.tmp, "check-ran")
        proc = self.land(handle, "--check", "touch %s" % marker, "--json")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        reply = json.loads(proc.stdout)
        self.assertEqual((reply["reason"], reply["paths"]), ("installed-files", [".qwen/settings.json"]))
        self.assertFalse(os.path.exists(marker), "refused before the check")
        self.assertEqual(self.main(), before)
        drop = reply["hint"].split("drop them from the change: ", 1)[1].split(" ; then re-run: ")[0]
        self.assertIn("jj restore --from", drop)
        subprocess.run(drop, shell=True, env=self.env, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(self.run_tool(self.canon, "git", "show", "--name-only", "--format=", "main").split(),
                         ["feature.txt"])


class LandStoppedRemoveTest(LandCase):
    """`work remove` after a landing that stopped on a conflict (tried in a scratch copy, the
    clone being in use) says the work never landed and to land it again, not that a squash
    merge made its candidate unprovable."""
    kind = "git"

    def test_remove_after_a_stopped_landing_points_back_to_the_landing(self):
        handle, path = self.make("stopped", name="shared.txt", text="one\nclone\nthree\n")
        self.advance_main("shared.txt", "one\nupstream\nthree\n")
        self.run_tool(path, "jj", "status")
        sleeper = subprocess.Popen(["sleep", "300"], cwd=path)
        self.addCleanup(sleeper.wait)
        self.addCleanup(sleeper.kill)
        proc = self.land(handle, "--check", "true", "--json")
        self.assertEqual((proc.returncode, json.loads(proc.stdout)["reason"]), (3, "conflict"), proc.stderr)
        sleeper.kill()
        sleeper.wait()
        proc = self.work("remove", handle, "--confirm", handle)
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("its landing into main stopped before anything moved (rebasing onto main conflicts in "
                      "shared.txt): none of it landed", proc.stderr)
        self.assertIn("work integrate land %s --into main" % handle, proc.stderr)
        self.assertNotIn("squash", proc.stderr)
        # The clone holds no conflict yet: its agent fetches and rebases before it resolves.
        self.assertIn("in %s: jj git fetch; jj rebase -b @ -d main@origin; resolve (jj resolve --list)" % path,
                      proc.stderr)
        self.assertEqual(self.read(path, "shared.txt"), "one\nclone\nthree\n")


class LandStoppedInCloneRemoveTest(LandCase):
    """The same after a conflict rebased in the clone itself (nothing live inside it): the
    rebased, conflicted changes stay in the clone, and `work remove` still points back to the
    landing rather than to acquiring again."""
    kind = "git"

    def test_remove_after_a_conflict_in_the_clone_points_back_to_the_landing(self):
        handle, path = self.make("clash-here", name="shared.txt", text="one\nclone\nthree\n")
        self.advance_main("shared.txt", "one\nupstream\nthree\n")
        proc = self.land(handle, "--check", "true", "--json")
        self.assertEqual((proc.returncode, json.loads(proc.stdout)["reason"]), (3, "conflict"), proc.stderr)
        proc = self.work("remove", handle, "--confirm", handle)
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("its landing into main stopped before anything moved (rebasing onto main conflicts in "
                      "shared.txt): none of it landed", proc.stderr)
        self.assertIn("work integrate land %s --into main" % handle, proc.stderr)
        self.assertIn("resolve it in %s (jj resolve --list)" % path, proc.stderr)  # the conflict is in the clone
        self.assertNotIn("jj git fetch", proc.stderr)
        self.assertTrue(os.path.isdir(path))


class LandWhileGitBusyTest(LandCase):
    """A person's git holds the shared checkout's index (`.git/index.lock`) when the landing
    comes to move main: it must stop cleanly, move nothing, leave the lock alone, and a re-run
    once the lock is gone must land."""

    def test_an_index_lock_in_the_shared_checkout_stops_the_landing_cleanly(self):
        handle, path = self.make("busy")
        before, remote = self.main(), self.remote_main()
        lock = os.path.join(self.canon, ".git", "index.lock")
        with open(lock, "w") as f:
            f.write("held by another git\n")
        proc = self.land(handle, "--push", "origin", "--check", "true")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        self.assertIn("main was not moved: another git process holds the index of %s (its index.lock)"
                      % os.path.realpath(self.canon), proc.stderr)
        self.assertIn("then re-run: %s work integrate land %s --into main" % (support.COORD, handle), proc.stderr)
        self.assertEqual(self.record(handle)["data"]["landing"]["state"], "refused")
        self.assertEqual((self.main(), self.remote_main()), (before, remote))
        with open(lock) as f:
            self.assertEqual(f.read(), "held by another git\n", "the other git's lock is not coord's to touch")
        self.assertFalse(os.path.exists(os.path.join(self.canon, "feature.txt")))
        self.assertEqual(self.run_tool(self.canon, "git", "status", "--porcelain", "--untracked-files=no"), "")
        os.unlink(lock)
        proc = self.land(handle, "--push", "origin", "--check", "true", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        landed = json.loads(proc.stdout)["landed"]
        self.assertEqual((self.main(), self.remote_main()), (landed, landed))
        self.assertEqual(self.read(self.canon, "feature.txt"), "feature\n")


class RealShapeTest(LandCase):
    """What real repositories have and the synthetic ones lacked: a tag on a commit no branch
    contains, a release branch, a branch that exists only on `origin`, and state that lives only
    in a clone's own git (a stash, notes, a branch git made, a file under .git/)."""

    def setUp(self):
        super().setUp()
        git = lambda *a: self.run_tool(self.canon, "git", *a)  # noqa: E731
        # an old pre-release tagged on a side branch that was later deleted
        git("checkout", "-q", "-b", "prerelease")
        self.write(self.canon, "alpha.txt", "alpha\n")
        git("add", "-A")
        git("commit", "-q", "-m", "2.0.0a1")
        git("tag", "-a", "2.0.0a1", "-m", "pre-release")
        git("tag", "light-tag")
        git("checkout", "-q", "main")
        git("branch", "-q", "-D", "prerelease")
        # a release branch with its own fix
        git("checkout", "-q", "-b", "stable")
        self.write(self.canon, "fix.txt", "fix\n")
        git("add", "-A")
        git("commit", "-q", "-m", "fix on stable")
        git("checkout", "-q", "main")
        git("push", "-q", "origin", "stable", "--tags")
        # a branch only origin has (someone else pushed it); the shared checkout fetched it
        other = os.path.join(self.tmp, "other")
        self.run_tool(self.tmp, "git", "clone", "-q", self.origin, other)
        self.write(other, "theirs.txt", "theirs\n")
        self.run_tool(other, "git", "add", "-A")
        self.run_tool(other, "git", "commit", "-q", "-m", "their branch")
        self.run_tool(other, "git", "push", "-q", "origin", "HEAD:refs/heads/their-topic")
        git("fetch", "-q", "origin")

    def remove(self, handle, *extra):
        return self.work("remove", handle, "--confirm", handle, "--json", *extra)

    def test_empty_work_with_waived_gate_is_removable(self):
        proc = self.work("create", "nothing")
        handle, path = proc.stdout.splitlines()[:2]
        self.assertEqual(self.work("gate", handle, "--waive", "--reason", "not needed").returncode, 0)
        proc = self.remove(handle)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertFalse(os.path.lexists(path))

    def test_empty_work_has_nothing_to_integrate(self):
        proc = self.work("create", "nothing")
        handle, path = proc.stdout.splitlines()[:2]
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("nothing to integrate", proc.stderr)
        self.assertNotIn("jj new", proc.stderr)
        self.assertEqual(self.record(handle)["data"].get("landing", {}).get("state"), None)

    def test_landed_work_is_removable_and_release_branch_untouched(self):
        stable = self.run_tool(self.canon, "git", "rev-parse", "stable").strip()
        handle, path = self.make("feature")
        proc = self.land(handle, "--check", "test -f feature.txt", "--push", "origin")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        proc = self.remove(handle)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(self.run_tool(self.canon, "git", "rev-parse", "stable").strip(), stable)
        self.assertEqual(self.run_tool(self.canon, "git", "rev-parse", "refs/tags/2.0.0a1^{commit}").strip(),
                         self.run_tool(self.origin, "git", "rev-parse", "refs/tags/2.0.0a1^{commit}").strip())

    def test_work_on_the_release_branch_is_removable_once_landed_there(self):
        handle, path = self.make("backport")
        proc = self.work("integrate", "land", handle, "--into", "stable", "--check", "true")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(self.remove(handle).returncode, 0)

    def landed(self, task):
        handle, path = self.make(task, name=task + ".txt")
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return handle, path

    def refused_codes(self, handle, path):
        proc = self.remove(handle)
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        self.assertTrue(os.path.isdir(path), "a refused removal deleted the clone")
        return {r["code"]: r for r in json.loads(proc.stdout)["reasons"]}

    def test_git_stash_in_the_clone_blocks_removal(self):
        handle, path = self.landed("stash")
        self.run_tool(path, "jj", "new")  # the agent goes on: git's HEAD is now the landed change
        self.write(path, "README", "half-done edit\n")
        self.run_tool(path, "git", "stash", "-q")
        self.assertEqual(self.read(path, "README"), "hello\n", "git stash moved the edit out of sight of jj")
        reasons = self.refused_codes(handle, path)
        self.assertEqual(list(reasons), ["git-only-refs"])
        self.assertEqual(reasons["git-only-refs"]["paths"], ["refs/stash"])
        self.assertIn("stash pop", reasons["git-only-refs"]["next"])
        # following the hint: take the edit back, then drop the ref; jj then sees the edit itself
        self.run_tool(path, "git", "stash", "drop", "-q")
        self.assertEqual(self.remove(handle).returncode, 0)

    def test_git_notes_and_a_git_only_file_block_removal(self):
        handle, path = self.landed("notes")
        self.run_tool(path, "git", "notes", "add", "-m", "reviewed by me", "HEAD")
        self.write(path, ".git/my-notes.txt", "things to remember\n")
        reasons = self.refused_codes(handle, path)
        self.assertEqual(sorted(reasons), ["git-only-files", "git-only-refs"])
        self.assertEqual(reasons["git-only-refs"]["paths"], ["refs/notes/commits"])
        self.assertEqual(reasons["git-only-files"]["paths"], [".git/my-notes.txt"])

    def test_a_hook_only_the_clone_has_blocks_and_one_the_shared_checkout_has_does_not(self):
        handle, path = self.landed("hooks")
        hook = os.path.join(path, ".git", "hooks", "pre-commit")
        self.write(path, ".git/hooks/pre-commit", "#!/bin/sh\nexit 0\n")
        os.chmod(hook, 0o755)
        self.assertEqual(self.refused_codes(handle, path)["git-only-files"]["paths"], [".git/hooks/pre-commit"])
        self.write(self.canon, ".git/hooks/pre-commit", "#!/bin/sh\nexit 0\n")
        self.assertEqual(self.remove(handle).returncode, 0)

    def test_a_file_under_git_info_hooks_or_description_that_git_did_not_make_blocks_removal(self):
        """An agent that wants a file to vanish with the clone (or to survive a removal it
        should have stopped) writes it where git keeps its own files: .git/info, .git/hooks,
        .git/description. Each counts as git's only with the bytes of jj's fresh clone or of the
        shared checkout's file at that path."""
        handle, path = self.landed("gitinfo")
        exclude, sample, description = (self.read(path, ".git/" + rel) for rel in (
            "info/exclude", "hooks/pre-commit.sample", "description"))
        self.write(path, ".git/info/notes.txt", "kept only here\n")
        self.write(path, ".git/info/exclude", exclude + "secret-pattern\n")
        self.write(path, ".git/hooks/notes", "not executable, not a sample\n")
        self.write(path, ".git/hooks/pre-commit.sample", "a sample rewritten\n")
        self.write(path, ".git/description", "a description of my own\n")
        self.write(path, ".git/info/deep/more.txt", "deeper\n")
        os.symlink(os.path.join(self.tmp, "elsewhere"), os.path.join(path, ".git", "info", "link"))
        reasons = self.refused_codes(handle, path)
        self.assertEqual(list(reasons), ["git-only-files"])
        self.assertEqual(sorted(reasons["git-only-files"]["paths"]), [
            ".git/description", ".git/hooks/notes", ".git/hooks/pre-commit.sample", ".git/info/deep/more.txt",
            ".git/info/exclude", ".git/info/link", ".git/info/notes.txt"])
        self.assertRegex(reasons["git-only-files"]["next"], r"^move them out of \S+ \(a file of git.s own: put its bytes back\), then: coord work remove %s --confirm %s$" % (handle, handle))
        # the same bytes in the shared checkout capture a file; git's own, put back, are git's
        self.write(self.canon, ".git/info/notes.txt", "kept only here\n")
        for rel in ("hooks/notes", "info/link"):
            os.remove(os.path.join(path, ".git", rel))
        shutil.rmtree(os.path.join(path, ".git", "info", "deep"))
        for rel, text in (("info/exclude", exclude), ("hooks/pre-commit.sample", sample), ("description", description)):
            self.write(path, ".git/" + rel, text)
        self.assertEqual(self.remove(handle).returncode, 0)

    def test_a_file_in_git_s_object_store_or_refs_that_git_never_reads_blocks_removal(self):
        handle, path = self.landed("gitstore")
        self.run_tool(path, "git", "gc", "-q")  # what git itself writes there is git's
        self.run_tool(path, "git", "commit-graph", "write")
        self.write(path, ".git/objects/notes.txt", "kept only here\n")
        self.write(path, ".git/objects/pack/mine.tar", "an archive\n")
        self.write(path, ".git/refs/notes.txt", "not a ref\n")
        reasons = self.refused_codes(handle, path)
        self.assertEqual(sorted(reasons["git-only-files"]["paths"]), [
            ".git/objects/notes.txt", ".git/objects/pack/mine.tar", ".git/refs/notes.txt"])
        for rel in ("objects/notes.txt", "objects/pack/mine.tar", "refs/notes.txt"):
            os.remove(os.path.join(path, ".git", rel))
        self.assertEqual(self.remove(handle).returncode, 0)

    def test_opencodes_project_id_file_is_not_work_and_any_other_content_is(self):
        """OpenCode 1.18.33 writes .git/opencode in every repository it runs in: the root
        commit's ID, 40 hex digits (docs/harness-opencode.md). Exactly that does not block."""
        handle, path = self.landed("opencode")
        root = self.run_tool(path, "git", "rev-list", "--max-parents=0", "HEAD").split()[0]
        for content in (root + "\n", "f" * 40, root + " notes", "a note of my own"):
            with open(os.path.join(path, ".git", "opencode"), "w") as f:
                f.write(content)
            self.assertEqual(self.refused_codes(handle, path)["git-only-files"]["paths"], [".git/opencode"], content)
        os.remove(os.path.join(path, ".git", "opencode"))
        os.symlink(os.path.join(self.tmp, "id"), os.path.join(path, ".git", "opencode"))
        with open(os.path.join(self.tmp, "id"), "w") as f:
            f.write(root)
        self.assertEqual(self.refused_codes(handle, path)["git-only-files"]["paths"], [".git/opencode"])
        os.remove(os.path.join(path, ".git", "opencode"))
        with open(os.path.join(path, ".git", "opencode"), "w") as f:
            f.write(root)
        self.assertEqual(self.remove(handle).returncode, 0)

    def test_kilo_codes_snapshot_refs_go_only_when_the_shared_repository_holds_every_file(self):
        """Kilo Code 7.7.7 keeps working-tree snapshots as refs/kilo/materialize/ID, bare trees
        (docs/harness-kilo.md), and writes .git/kilo as OpenCode writes .git/opencode. A snapshot
        whose every file a branch of the shared repository holds is not work; one holding a file
        found nowhere else, or under another name, keeps the clone."""
        handle, path = self.landed("kilo")
        root = self.run_tool(path, "git", "rev-list", "--max-parents=0", "HEAD").split()[0]
        self.write(path, ".git/kilo", root)
        landed = self.run_tool(path, "git", "rev-parse", "HEAD^{tree}").strip()
        self.write(path, "draft.txt", "a draft only Kilo's snapshot holds\n")
        blob = self.run_tool(path, "git", "hash-object", "-w", "draft.txt").strip()
        os.remove(os.path.join(path, "draft.txt"))
        lone = self.run_tool(path, "git", "mktree", input="100644 blob %s\tdraft.txt\n" % blob).strip()
        name = "refs/kilo/materialize/" + "5d0cda59e8c465cc4c032fbadfe459b85315436c"
        for sha, blocks in ((lone, True), (landed, False)):
            self.run_tool(path, "git", "update-ref", name, sha)
            if blocks:
                self.assertEqual(self.refused_codes(handle, path)["git-only-refs"]["paths"], [name], sha)
        self.run_tool(path, "git", "update-ref", "refs/kilo/other", landed)
        self.assertEqual(self.refused_codes(handle, path)["git-only-refs"]["paths"], ["refs/kilo/other"])
        self.run_tool(path, "git", "update-ref", "-d", "refs/kilo/other")
        self.assertEqual(self.remove(handle).returncode, 0)

    def test_droids_scm_trigger_is_not_work_but_anything_else_under_that_name_is(self):
        """Factory Droid 0.225.2 writes .git/.factory-scm-trigger, a time in milliseconds, into a
        repository it runs in (docs/harness-droid.md): not work. Other bytes under that name are."""
        handle, path = self.landed("droid")
        self.write(path, ".git/.factory-scm-trigger", "my notes, not a time\n")
        self.assertIn("git-only-files", self.refused_codes(handle, path))
        self.write(path, ".git/.factory-scm-trigger", "1796589633983")
        self.assertEqual(self.remove(handle).returncode, 0)

    def test_the_whole_path_with_a_real_test_command(self):
        """Three works on the real shape: one lands with the project's own unittest suite as
        its check and is pushed; one lands over a stale base; one conflicts, is resolved in its
        clone and lands; then every clone is removed with the documented commands only."""
        self.write(self.canon, "calc.py", "def add(a, b):\n    return a + b\n")
        self.write(self.canon, "test_calc.py", "import unittest\nimport calc\n\n\nclass T(unittest.TestCase):\n"
                   "    def test_add(self):\n        self.assertEqual(calc.add(2, 2), 4)\n")
        self.write(self.canon, ".gitignore", "__pycache__/\n")
        self.run_tool(self.canon, "git", "add", "-A")
        self.run_tool(self.canon, "git", "commit", "-q", "-m", "calc and its tests")
        self.run_tool(self.canon, "git", "push", "-q", "origin", "main")
        check = "%s -m unittest -q test_calc" % sys.executable
        tested, tested_path = self.make("docs", name="calc_doc.txt", text="add adds\n")
        stale, stale_path = self.make("stale", name="more.txt", text="more\n")
        clash, clash_path = self.make("clash", name="calc.py", text="def add(a, b):\n    return b + a\n")
        proc = self.land(tested, "--check", check, "--push", "origin")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("checked: %s (in %s)" % (check, tested_path), proc.stdout)
        self.assertEqual(self.remote_main(), self.main())
        self.advance_main("calc.py", "def add(a, b):\n    return a + b  # upstream\n")
        proc = self.land(stale, "--check", check, "--push", "origin", "--json")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertTrue(json.loads(proc.stdout)["rebased"])
        proc = self.land(clash, "--check", check, "--push", "origin", "--json")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        self.assertEqual(json.loads(proc.stdout)["paths"], ["calc.py"])
        # resolve as the hint says (in the clone), then the printed re-run lands it
        self.write(clash_path, "calc.py", "def add(a, b):\n    return b + a  # upstream\n")
        self.run_tool(clash_path, "jj", "status")
        rerun = json.loads(proc.stdout)["hint"].split("then re-run: ", 1)[1].strip()
        self.assertIn("--push origin", rerun)
        proc = subprocess.run(rerun, shell=True,
                              cwd=self.canon, env=dict(self.env, COORD_RUNTIME_ID=self.rt["id"]),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(self.remote_main(), self.main())
        self.assertEqual(self.read(self.canon, "calc.py"), "def add(a, b):\n    return b + a  # upstream\n")
        for handle, path in ((tested, tested_path), (stale, stale_path), (clash, clash_path)):
            proc = self.remove(handle)
            self.assertEqual(proc.returncode, 0, "%s: %s" % (handle, proc.stdout + proc.stderr))
            self.assertFalse(os.path.lexists(path))
        self.assertEqual(self.work("gc").returncode, 0)

    def test_a_submodule_repository_only_the_clone_has_blocks_removal(self):
        # what `git submodule update --init`, a commit inside, then `git submodule deinit -f` leave
        handle, path = self.landed("submodule")
        modules = os.path.join(path, ".git", "modules", "vendor")
        tree = os.path.join(self.tmp, "vendor-tree")
        os.makedirs(os.path.dirname(modules))
        self.run_tool(self.tmp, "git", "init", "-q", "--separate-git-dir", modules, tree)
        self.write(tree, "lib.c", "int only_here;\n")
        self.run_tool(tree, "git", "add", "-A")
        self.run_tool(tree, "git", "commit", "-q", "-m", "a commit made only in the clone's submodule")
        shutil.rmtree(tree)
        reasons = self.refused_codes(handle, path)
        self.assertEqual(list(reasons), ["git-only-submodules"])
        self.assertEqual(reasons["git-only-submodules"]["paths"], [".git/modules/vendor"])
        # once the shared checkout's own copy of the submodule has the commit, nothing is lost
        self.run_tool(self.tmp, "git", "clone", "-q", "--bare", modules, os.path.join(self.canon, ".git", "modules",
                                                                                     "vendor"))
        self.assertEqual(self.remove(handle).returncode, 0)

    def test_an_lfs_object_only_the_clone_has_blocks_removal(self):
        handle, path = self.landed("lfs")
        oid = "ab" * 32
        rel = os.path.join(".git", "lfs", "objects", oid[:2], oid[2:4], oid)
        self.write(path, rel, "large content added in the clone\n")
        reasons = self.refused_codes(handle, path)
        self.assertEqual(reasons["git-only-files"]["paths"], [rel])
        self.write(self.canon, rel, "large content added in the clone\n")
        self.assertEqual(self.remove(handle).returncode, 0)

    def test_a_git_branch_on_shared_history_does_not_block_but_one_on_new_work_does(self):
        handle, path = self.landed("branches")
        self.run_tool(path, "git", "branch", "on-main", "HEAD")
        self.assertEqual(self.remove(handle).returncode, 0)
        handle, path = self.landed("branches2")
        self.write(path, "later.txt", "committed with git\n")
        self.run_tool(path, "git", "checkout", "-q", "-b", "side")
        self.run_tool(path, "git", "add", "later.txt")
        self.run_tool(path, "git", "commit", "-q", "-m", "made with git")
        self.run_tool(path, "git", "checkout", "-q", "--detach", "HEAD~1")
        self.assertTrue(self.refused_codes(handle, path))


class LandCheckProcessTest(LandCase):
    """The check runs in its own process group: coord waits for its exit status, then ends what
    it left running, and a coord killed mid-check takes its check down too."""

    def pid_in(self, path):
        def read():
            try:
                with open(path) as f:
                    return int(f.read().strip() or 0) or None
            except (OSError, ValueError):
                return None
        return support.retry_until(read, timeout=60)

    def alive(self, pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                return f.read().split(") ", 1)[1][0] != "Z"
        except OSError:
            return False

    def test_a_background_child_neither_holds_the_landing_nor_outlives_it(self):
        handle, path = self.make("server")
        pidfile = os.path.join(self.tmp, "server.pid")
        # a check that starts a "dev server" and exits 0; 0.3.0 waited for its output to close
        # (the test's 120 s bound, then a failure) and left it running
        check = "sleep 600 & echo $! > %s; exit 0" % pidfile
        proc = self.land(handle, "--check", check, "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        pid = self.pid_in(pidfile)
        self.assertTrue(support.retry_until(lambda: not self.alive(pid), timeout=30), "the check's server outlived it")
        self.assertEqual(self.main(), json.loads(proc.stdout)["landed"])

    def test_the_check_runs_nothing_when_coord_dies_before_the_guard_watches(self):
        import workspace
        marker = os.path.join(self.tmp, "ran")
        r, w = os.pipe()
        os.close(w)  # coord gone before its "go": the shell reads EOF
        try:
            proc = subprocess.run(["/bin/sh", "-c", land._GATED % (r, r), "sh", "touch %s" % marker],
                                  pass_fds=(r,), timeout=30)
        finally:
            os.close(r)
        self.assertEqual(proc.returncode, 125)
        self.assertFalse(os.path.exists(marker))

    def test_a_killed_coord_ends_its_check(self):
        handle, path = self.make("killed")
        pidfile = os.path.join(self.tmp, "check.pid")
        check = "echo $$ > %s; sleep 600" % pidfile
        e = dict(self.env, COORD_RUNTIME_ID=self.rt["id"])
        lander = subprocess.Popen([sys.executable, support.COORD, "work", "integrate", "land", handle, "--into",
                                   "main", "--check", check], cwd=self.canon, env=e, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            pid = self.pid_in(pidfile)
            self.assertTrue(self.alive(pid))
            lander.kill()
            lander.wait(timeout=30)
            self.assertTrue(support.retry_until(lambda: not self.alive(pid), timeout=30),
                            "the check outlived the coord that ran it")
        finally:
            if lander.poll() is None:
                lander.kill()
        self.assertEqual(self.main(), self.run_tool(self.origin, "git", "rev-parse", "main").strip())


class LandPushRejectedTest(LandCase):
    """A remote whose pre-receive hook refuses: a definite rejection, the remote unchanged."""

    def setUp(self):
        super().setUp()
        hook = os.path.join(self.origin, "hooks", "pre-receive")
        with open(hook, "w") as f:
            f.write("#!/bin/sh\necho 'policy: main is frozen for the release' >&2\nexit 1\n")
        os.chmod(hook, 0o755)
        self.hook = hook

    def test_rejected_push_finishes_locally_releases_and_says_how_to_publish(self):
        handle, path = self.make("rejected")
        before_remote = self.remote_main()
        proc = self.land(handle, "--push", "origin", "--check", "true", "--json")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        reply = json.loads(proc.stdout)
        self.assertEqual(reply["reason"], "publish-refused")
        self.assertNotIn("unknown outcome", proc.stderr)
        self.assertIn("frozen for the release", proc.stderr)
        self.assertEqual(self.remote_main(), before_remote, "the remote kept its commit")
        landed = self.main()
        self.assertNotEqual(landed, before_remote, "the shared checkout's main moved")
        self.assertIn("main of the shared checkout is at %s" % landed, proc.stderr)
        # nothing is held: another lander is not blocked
        self.assertEqual(self.coord_json("list", runtime=self.rt["id"])["leases"], [])
        rec = self.record(handle)
        self.assertEqual(rec["data"]["integration"]["state"], "integrated")
        self.assertEqual(rec["data"]["landing"]["published"], False)
        # the hint, as printed, publishes once the remote accepts
        self.assertIn("coord work integrate land %s --into main --push origin" % handle, reply["hint"])
        os.unlink(self.hook)
        proc = self.land(handle, "--push", "origin")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(self.remote_main(), landed)
        self.assertEqual(self.record(handle)["data"]["landing"]["published"], True)

    def test_the_publish_hint_repeats_the_landing_s_own_check(self):
        handle, path = self.make("rejected-check")
        proc = self.land(handle, "--push", "origin", "--check", "test -d .", "--json")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        reply = json.loads(proc.stdout)
        self.assertEqual(reply["reason"], "publish-refused")
        self.assertIn("coord work integrate land %s --into main --push origin --check 'test -d .'" % handle,
                      reply["hint"])

    def test_a_re_run_without_push_pushes_nothing(self):
        handle, path = self.make("local-only")
        before_remote = self.remote_main()
        self.assertEqual(self.land(handle, "--push", "origin", "--check", "true").returncode, 3)
        os.unlink(self.hook)
        proc = self.land(handle)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(self.remote_main(), before_remote, "no --push: nothing is published")
        self.assertEqual(self.work("remove", handle, "--confirm", handle).returncode, 0)

    def test_a_publish_refused_again_stays_landed_and_can_be_retried(self):
        handle, path = self.make("twice")
        self.assertEqual(self.land(handle, "--push", "origin", "--check", "true").returncode, 3)
        again = self.land(handle, "--push", "origin")
        self.assertEqual(again.returncode, 3, again.stdout + again.stderr)
        self.assertIn("--push origin", again.stderr)
        self.assertEqual(self.record(handle)["data"]["landing"]["state"], "landed")
        os.unlink(self.hook)
        self.assertEqual(self.land(handle, "--push", "origin").returncode, 0)
        self.assertEqual(self.remote_main(), self.main())


class LandOverPeersTest(LandCase):
    """A landing never moves the target over a peer's exclusive lease without an override, and
    two landings into one target never run at once."""

    def test_a_peer_lease_on_a_changed_path_stops_the_landing(self):
        handle, path = self.make("over-peer")
        peer = self.hello()["runtime"]
        self.coord("claim", "feature.txt", "--purpose", "peer is rewriting feature.txt", runtime=peer["id"],
                   cwd=self.canon, check=0)
        before = self.main()
        proc = self.land(handle, "--check", "true", "--json")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        reply = json.loads(proc.stdout)
        self.assertEqual((reply["reason"], reply["paths"], reply["holders"]),
                         ("peer-leased", ["feature.txt"], [peer["handle"]]))
        self.assertIn("peer is rewriting", proc.stderr)
        self.assertIn("coord send", reply["hint"])
        self.assertNotIn("--override", reply["hint"])
        self.assertEqual(self.main(), before, "nothing moved")
        self.assertEqual([l["resource"] for l in self.coord_json("list", runtime=self.rt["id"])["leases"]
                          if l["runtime"] == self.rt["id"]], [], "the lander holds nothing")
        # a lease on a path the candidate does not change does not stop it
        self.coord("release", "feature.txt", runtime=peer["id"], cwd=self.canon, check=0)
        self.coord("claim", "README", runtime=peer["id"], cwd=self.canon, check=0)
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

    def test_the_landing_says_which_changed_file_a_peer_held_while_the_work_ran(self):
        handle, path = self.make("held-before")
        peer = self.hello()["runtime"]
        self.coord("claim", "feature.txt", runtime=peer["id"], cwd=self.canon, check=0)
        self.coord("release", "feature.txt", runtime=peer["id"], cwd=self.canon, check=0)
        self.coord("claim", "README", runtime=peer["id"], cwd=self.canon, check=0)  # not changed: not named
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("note: %s changed feature.txt, which %s held exclusively while the work ran"
                      % (handle, peer["handle"]), proc.stdout)
        self.assertNotIn("README", proc.stdout)
        self.assertEqual(self.record(handle)["data"]["landing"]["held_by_peers"],
                         [{"path": "feature.txt", "holder": peer["handle"]}])

    def test_the_works_own_lease_is_not_a_peer(self):
        handle, path = self.make("own-lease")
        self.coord("claim", "feature.txt", runtime=self.rt["id"], cwd=self.canon, check=0)
        self.assertEqual(self.land(handle, "--check", "true").returncode, 0)

    def test_an_override_lands_over_the_peer_and_is_audited(self):
        handle, path = self.make("override-peer")
        peer = self.hello()["runtime"]
        self.coord("claim", "feature.txt", runtime=peer["id"], cwd=self.canon, check=0)
        refused = self.land(handle, "--check", "true", "--override")
        self.assertEqual(refused.returncode, 3, "an agent's override is refused")
        rc, reply = self.person_land(handle, "--check", "true", "--override")
        self.assertEqual(rc, 0, reply)
        self.assertIn("work.landing.override", self.events())

    def test_two_landings_into_main_at_once_both_land_one_after_the_other(self):
        for rnd in range(3):
            works = [self.make("race%d-%d" % (rnd, i), name="race%d-%d.txt" % (rnd, i)) for i in range(2)]
            e = dict(self.env, COORD_RUNTIME_ID=self.rt["id"])
            procs = [subprocess.Popen([sys.executable, support.COORD, "work", "integrate", "land", h, "--into", "main",
                                       "--check", "true"], cwd=self.canon, env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for h, _ in works]
            outs = [p.communicate(timeout=300) for p in procs]
            self.assertEqual([p.returncode for p in procs], [0, 0], outs)
            for i in range(2):
                self.assertEqual(self.read(self.canon, "race%d-%d.txt" % (rnd, i)), "feature\n")


class LandCheckWritesTest(LandCase):
    """What the check writes never reaches the target, and what it creates is coord's to clean."""

    def setUp(self):
        super().setUp()
        self.write(self.canon, ".gitignore", ".pytest_cache/\n*.log\n")
        self.run_tool(self.canon, "git", "add", "-A")
        self.run_tool(self.canon, "git", "commit", "-q", "-m", "ignore caches")

    def test_the_checks_writes_are_set_aside_and_the_candidate_lands_as_frozen(self):
        handle, path = self.make("report")
        check = ("echo report > test-report.txt && mkdir -p .pytest_cache/v && echo c > .pytest_cache/v/x "
                 "&& echo formatted > feature.txt && rm README && echo log > run.log")
        proc = self.land(handle, "--check", check, "--json")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        landed = json.loads(proc.stdout)["landed"]
        files = self.run_tool(self.canon, "git", "ls-tree", "-r", "--name-only", landed).split()
        self.assertNotIn("test-report.txt", files)
        self.assertIn("README", files)
        self.assertEqual(self.run_tool(self.canon, "git", "show", landed + ":feature.txt"), "feature\n")
        self.assertEqual(self.run_tool(self.canon, "git", "log", "-1", "--format=%s", landed).strip(), "add a feature")
        # the clone is back as the candidate has it; the check's files are kept aside, not deleted
        self.assertEqual(self.read(path, "feature.txt"), "feature\n")
        self.assertEqual(self.read(path, "README"), "hello\n")
        self.assertFalse(os.path.exists(os.path.join(path, "test-report.txt")))
        aside = [d for d in os.listdir(self.scratch) if d.startswith(".check-")]
        self.assertEqual(len(aside), 1)
        self.assertEqual(self.read(os.path.join(self.scratch, aside[0]), "test-report.txt"), "report\n")
        self.assertEqual(self.read(os.path.join(self.scratch, aside[0]), "feature.txt"), "formatted\n")
        # its ignored caches are coord's: remove needs no --discard-ignored
        proc = self.work("remove", handle, "--confirm", handle)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

    def test_a_cache_changed_after_the_check_is_the_works_again(self):
        handle, path = self.make("cache")
        proc = self.land(handle, "--check", "mkdir -p .pytest_cache && echo c > .pytest_cache/x")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.write(path, ".pytest_cache/x", "changed by the agent later\n")
        proc = self.work("remove", handle, "--confirm", handle, "--json")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        self.assertEqual([r["code"] for r in json.loads(proc.stdout)["reasons"]], ["ignored"])

    def test_an_undescribed_candidate_is_refused(self):
        handle, path = self.make("nodesc", describe=None)
        self.run_tool(path, "jj", "describe", "-m", "")
        proc = self.land(handle, "--check", "true", "--json")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        self.assertEqual(json.loads(proc.stdout)["reason"], "placeholder-description")


class LandRerunHintTest(LandCase):
    """Every re-run hint after a stopped landing carries the landing's own --check and --push."""

    def test_a_failed_check_names_the_rerun_with_its_options(self):
        handle, path = self.make("hinted")
        proc = self.land(handle, "--push", "origin", "--check", "test -f missing.txt", "--json")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        hint = json.loads(proc.stdout)["hint"]
        self.assertIn("coord work integrate land %s --into main --push origin --check 'test -f missing.txt'" % handle,
                      hint)
        # as printed (with the path the command was typed as), it is a command that runs
        typed = proc.stderr.split("then re-run: ", 1)[1].strip()
        self.write(path, "missing.txt", "now here\n")
        rerun = subprocess.run(typed, shell=True, cwd=self.canon, env=dict(self.env, COORD_RUNTIME_ID=self.rt["id"]),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(rerun.returncode, 0, rerun.stdout + rerun.stderr)
        self.assertEqual(self.remote_main(), self.main(), "the re-run pushed as the first run asked")
        self.assertIn("--push origin", self.work("inspect", handle).stdout + "--push origin")


class LandAuthorityTest(LandCase):
    """Landing is the integration owner's: the person's. The agent launched for a work (a runtime
    recorded as its harness) may queue it, not acquire, land or prove it, and its --override is
    refused; the person lands it; `git config coord.agentsLand true` in the shared checkout (its
    own .git/config, which no clone commits) lets a work's own agent land it, and the same key in
    a clone's config, the user's global config or the caller's environment does nothing."""
    kind = "git"
    agents_land = False

    def harness_of(self, handle):
        """A runtime recorded as the work's harness: its conversation recorded in the work as the
        resume wrapper records the harness it runs for the work (`data.direct`), then registered."""
        conversation = "harness-conv-%s" % handle
        st = store.Store(environ=self.env)
        self.addCleanup(st.close)
        w = st.resolve_work(handle)
        with st.transaction():
            st.update_work(w["id"], data={"direct": {"harness": "claude", "kind": "start",
                                                     "conversation": conversation}})
        harness = self.hello(conversation)["runtime"]
        self.assertEqual(workspace.authority(st, st.resolve_work(handle), st.runtime(harness["id"])), "harness")
        return harness

    def assert_refused_to_agent(self, proc, handle, into="main"):
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        self.assertIn("coord work integrate enqueue %s --into %s" % (handle, into),
                      proc.stderr.replace(support.COORD, "coord"))
        self.assertIn("the person lands it", proc.stderr)
        self.assertNotIn("--override", proc.stderr)

    def test_the_launched_harness_queues_its_work_and_may_not_land_acquire_or_prove_it(self):
        handle, path = self.make("agent-lands")
        harness = self.harness_of(handle)
        before = self.main()
        for args in (["land", handle, "--into", "main", "--check", "true"],
                     ["acquire", handle, "--into", "main"],
                     ["prove", handle, "--target", before]):
            with self.subTest(args=args):
                proc = self.work("integrate", *(args + ["--json"]), runtime=harness["id"])
                self.assert_refused_to_agent(proc, handle, "BOOKMARK" if args[0] == "prove" else "main")
                self.assertEqual(json.loads(proc.stdout)["reason"], "person-lands")
        # --override is the person's: refused to the agent, nothing audited as an override.
        proc = self.land(handle, "--check", "true", "--override", "--json", runtime=harness["id"])
        self.assertEqual((proc.returncode, json.loads(proc.stdout)["reason"]), (3, "override-is-the-person-s"))
        self.assert_refused_to_agent(proc, handle)
        # So is the work's creator when it is an agent too: any runtime that is not the person.
        self.assert_refused_to_agent(self.land(handle, "--check", "true"), handle)
        self.assertEqual(self.main(), before, "main did not move")
        rec = self.record(handle)
        self.assertEqual((rec["data"]["integration"]["state"], rec["data"]["gate"]["state"]), ("none", "pending"))
        self.assertNotIn("work.authority.override", self.events())
        # What the hint offers works: the agent queues it.
        proc = self.work("integrate", "enqueue", handle, "--into", "main", runtime=harness["id"])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(self.record(handle)["data"]["integration"]["state"], "queued")

    def test_the_person_lands_the_work_they_launched_an_agent_for(self):
        term = support.person_terminal(self, self.canon)
        rc, out = term.coord("work", "create", "by-the-person")
        self.assertEqual(rc, 0, out)
        handle, path = out.split()[:2]
        self.write(path, "feature.txt", "feature\n")
        self.run_tool(path, "jj", "describe", "-m", "add a feature")
        harness = self.harness_of(handle)
        self.assert_refused_to_agent(self.land(handle, "--check", "true", runtime=harness["id"]), handle)
        self.assertEqual(self.work("integrate", "enqueue", handle, "--into", "main",
                                   runtime=harness["id"]).returncode, 0)
        rc, out = term.coord("work", "integrate", "land", handle, "--into", "main", "--check", "test -f feature.txt")
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.main(), self.record(handle)["data"]["landing"]["landed"])
        self.assertEqual(self.record(handle)["data"]["integration"]["state"], "integrated")
        self.assertNotIn("work.authority.override", self.events())

    def test_a_person_alone_is_offered_the_override(self):
        handle, path = self.make("theirs")
        other = self.hello()["runtime"]
        proc = self.land(handle, "--check", "true", runtime=other["id"])
        self.assertEqual(proc.returncode, 3)
        self.assertIn("may not land %s" % handle, proc.stderr)
        self.assertNotIn("--override", proc.stderr)
        term = support.person_terminal(self, self.canon)
        rc, out = term.coord("work", "integrate", "land", handle, "--into", "main", "--check", "true")
        self.assertEqual(rc, 3, out)
        self.assertIn("add --override", out)

    def test_the_repository_opts_in_from_the_shared_checkout_only(self):
        handle, path = self.make("opted")
        harness = self.harness_of(handle)
        before = self.main()
        # A clone's own git config, the user's global config and the caller's environment do not count.
        self.run_tool(path, "git", "config", "coord.agentsLand", "true")
        self.run_tool(self.canon, "git", "config", "--global", "coord.agentsLand", "true")
        env = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "coord.agentsLand", "GIT_CONFIG_VALUE_0": "true",
               "GIT_CONFIG_PARAMETERS": "'coord.agentsland'='true'"}
        proc = self.land(handle, "--check", "true", runtime=harness["id"], env=env)
        self.assert_refused_to_agent(proc, handle)
        self.assertEqual(self.main(), before)
        # The person opts the repository in: the work's own harness lands it.
        self.run_tool(self.canon, "git", "config", "coord.agentsLand", "true")
        proc = self.land(handle, "--check", "true", "--json", runtime=harness["id"])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(self.main(), json.loads(proc.stdout)["landed"])
        # Still only its own: another agent is refused another's work, and offered no override.
        other, _ = self.make("someone-elses", name="other.txt")
        proc = self.land(other, "--check", "true", runtime=harness["id"])
        self.assertEqual(proc.returncode, 3)
        self.assertIn("may not land %s" % other, proc.stderr)
        self.assertNotIn("--override", proc.stderr)


class LandCheckAddsTest(LandCase):
    """`--check` adds to the repository's configured check (git config coord.landCheck in the
    shared checkout), never replaces it: both run, the configured one first, and the landing and
    the gate record every command that ran."""
    kind = "git"

    def test_a_given_check_never_replaces_the_configured_one(self):
        handle, path = self.make("checked-twice")
        before = self.main()
        self.run_tool(self.canon, "git", "config", "coord.landCheck", "false")
        proc = self.land(handle, "--check", "true", "--json")
        self.assertEqual((proc.returncode, json.loads(proc.stdout)["reason"]), (3, "check-failed"), proc.stderr)
        self.assertEqual(self.main(), before, "main did not move")
        gate = self.record(handle)["data"]["gate"]
        self.assertEqual((gate["state"], gate["check"]["command"]), ("failed", "false"))
        # Both pass: the configured one ran first, then the given one; both are recorded.
        self.run_tool(self.canon, "git", "config", "coord.landCheck", "test -f feature.txt")
        proc = self.land(handle, "--check", "test ! -f missing.txt", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        reply = json.loads(proc.stdout)
        self.assertEqual(reply["checks"], ["test -f feature.txt", "test ! -f missing.txt"])
        rec = self.record(handle)
        self.assertEqual(rec["data"]["landing"]["checks"], ["test -f feature.txt", "test ! -f missing.txt"])
        self.assertEqual(rec["data"]["gate"]["check"]["commands"], ["test -f feature.txt", "test ! -f missing.txt"])
        checked = [json.loads(l) for l in self.coord("audit", check=0).stdout.splitlines()
                   if json.loads(l)["event"] == "work.landing.checked"]
        self.assertEqual(checked[-1]["data"]["checks"], ["test -f feature.txt", "test ! -f missing.txt"])

    def test_the_configured_check_runs_first(self):
        handle, path = self.make("order")
        log = os.path.join(self.tmp, "order.log")
        self.run_tool(self.canon, "git", "config", "coord.landCheck", "echo configured >> %s" % log)
        proc = self.land(handle, "--check", "echo given >> %s" % log)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(self.read(self.tmp, "order.log"), "configured\ngiven\n")


class UserAloneLandsNothingTest(LandCase):
    """The user alone (a caller with no terminal: cron, or a process an agent detached with
    setsid) owns what it creates, but landing is the person's: it needs a terminal."""
    agents_land = False

    def test_a_caller_without_a_terminal_cannot_land_even_its_own_work(self):
        e = {k: v for k, v in self.env.items() if k != "COORD_RUNTIME_ID"}
        proc = self.coord("work", "create", "alone", env=e, cwd=self.canon)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        handle, path = proc.stdout.splitlines()[:2]
        self.write(path, "alone.txt", "alone\n")
        self.run_tool(path, "jj", "describe", "-m", "from no terminal")
        before = self.main()
        argv = [sys.executable, support.COORD, "work", "integrate", "land", handle, "--into", "main", "--check",
                "true", "--json"]
        proc = subprocess.run(["setsid", "-w"] + argv, cwd=self.canon, env=e, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        self.assertEqual(json.loads(proc.stdout)["reason"], "person-lands")
        self.assertEqual(self.main(), before)
        rc, reply = self.person_land(handle, "--check", "true", "--override")
        self.assertEqual(rc, 0, reply)


class LandIdentityTest(LandCase):
    """A person who configured git but never jj: the clone commits as the shared checkout's git
    identity, not as nobody."""

    def test_landed_commits_carry_the_git_identity(self):
        empty = os.path.join(self.tmp, "empty-jj.toml")
        with open(empty, "w") as f:
            f.write("")
        self.env["JJ_CONFIG"] = empty
        os.environ["JJ_CONFIG"] = empty
        self.run_tool(self.canon, "git", "config", "user.name", "Pat Person")
        self.run_tool(self.canon, "git", "config", "user.email", "pat@example.invalid")
        handle, path = self.make("who")
        proc = self.land(handle, "--check", "true", "--json")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        landed = json.loads(proc.stdout)["landed"]
        self.assertEqual(self.run_tool(self.canon, "git", "log", "-1", "--format=%an <%ae>|%cn <%ce>", landed).strip(),
                         "Pat Person <pat@example.invalid>|Pat Person <pat@example.invalid>")


class LandLfsTest(LandCase):
    """jj runs no git filters: raw content in a `filter=lfs` path never lands; a pointer does."""

    def setUp(self):
        super().setUp()
        self.write(self.canon, ".gitattributes", "*.bin filter=lfs diff=lfs merge=lfs -text\n")
        self.run_tool(self.canon, "git", "add", "-A")
        self.run_tool(self.canon, "git", "commit", "-q", "-m", "track *.bin with lfs")

    def test_raw_content_in_an_lfs_path_is_refused(self):
        handle, path = self.make("raw", name="model.bin", text="raw bytes that belong in LFS storage\n")
        before = self.main()
        proc = self.land(handle, "--check", "true", "--json")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        reply = json.loads(proc.stdout)
        self.assertEqual((reply["reason"], reply["paths"]), ("lfs-content", ["model.bin"]))
        self.assertEqual(self.main(), before)

    def test_a_pointer_lands(self):
        pointer = ("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize 12\n" % ("0" * 64))
        handle, path = self.make("pointer", name="model.bin", text=pointer)
        proc = self.land(handle, "--check", "true")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)


def _stopped(pid):
    """True once process `pid` is stopped (SIGSTOP): its /proc state is T."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except OSError:
        return False


class LandFencingTest(LandCase):
    """integration/main's fencing number (issue 25, item 4): a landing paused (SIGSTOP) past its
    lease's expiry, while another runtime acquires the lease, must not move main when it resumes."""
    kind = "git"

    def wait_for(self, what, cond, rounds=600):
        for _ in range(rounds):  # bounded: about 60 s
            if cond():
                return
            time.sleep(0.1)
        self.fail("never: %s" % what)

    def test_a_paused_holder_whose_lease_was_taken_moves_nothing(self):
        other = self.hello()["runtime"]
        mine, _ = self.make("mine", name="mine.txt", text="mine\n")
        theirs, _ = self.make("theirs", name="theirs.txt", text="theirs\n", runtime=other["id"])
        before = self.main()
        env = dict(self.env, COORD_RUNTIME_ID=self.rt["id"], COORD_LEASE_TTL="3",
                   **{land.LAND_STOP_ENV: "checked"})
        first = subprocess.Popen([sys.executable, support.COORD, "work", "integrate", "land", mine, "--into", "main",
                                  "--push", "origin", "--check", "true", "--json"], cwd=self.canon, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: first.poll() is None and (first.kill(), first.wait()))
        self.wait_for("the first landing stops after its check", lambda: _stopped(first.pid))
        st = store.Store(environ=self.env)
        self.addCleanup(st.close)
        lease = st.leases_of(self.rt["id"], ["integration/main"])[0]
        self.wait_for("the first landing's lease lapses", lambda: time.time() > lease["expires_at"])
        fence = self.record(mine)["data"]["integration"]["candidate"]["fence"]
        took = self.work("integrate", "acquire", theirs, "--into", "main", "--json", runtime=other["id"])
        self.assertEqual(took.returncode, 0, took.stderr)
        self.assertEqual(json.loads(took.stdout)["fence"], fence + 1)
        os.kill(first.pid, signal.SIGCONT)
        out, err = first.communicate(timeout=300)
        self.assertEqual(first.returncode, 3, out + err)
        self.assertEqual(self.main(), before, "the fenced-off landing moved main")
        self.assertEqual(self.remote_main(), before)
        self.assertIn("fencing number %d" % fence, err)
        self.assertIn("so it did not move main", err)
        self.assertIn("work integrate land %s --into main --push origin --check true" % mine, err)
        self.assertEqual(self.record(mine)["data"]["landing"]["state"], "refused")
        # the current holder lands; the fenced-off one, re-run once the lease is free, lands after it
        self.assertEqual(self.work("integrate", "release", theirs, runtime=other["id"]).returncode, 0)
        proc = self.land(mine, "--push", "origin", "--check", "true", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(self.main(), json.loads(proc.stdout)["landed"])

    def test_a_holder_paused_after_moving_its_target_does_not_push_once_fenced_off(self):
        other = self.hello()["runtime"]
        mine, _ = self.make("mine", name="mine.txt", text="mine\n")
        theirs, _ = self.make("theirs", name="theirs.txt", text="theirs\n", runtime=other["id"])
        before = self.remote_main()
        env = dict(self.env, COORD_RUNTIME_ID=self.rt["id"], COORD_LEASE_TTL="3",
                   **{land.LAND_STOP_ENV: "moved"})
        first = subprocess.Popen([sys.executable, support.COORD, "work", "integrate", "land", mine, "--into", "main",
                                  "--push", "origin", "--check", "true", "--json"], cwd=self.canon, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: first.poll() is None and (first.kill(), first.wait()))
        self.wait_for("the first landing stops after moving main", lambda: _stopped(first.pid))
        moved = self.main()
        self.assertNotEqual(moved, before)
        st = store.Store(environ=self.env)
        self.addCleanup(st.close)
        lease = st.leases_of(self.rt["id"], ["integration/main"])[0]
        self.wait_for("the first landing's lease lapses", lambda: time.time() > lease["expires_at"])
        took = self.work("integrate", "acquire", theirs, "--into", "main", "--json", runtime=other["id"])
        self.assertEqual(took.returncode, 0, took.stderr)
        os.kill(first.pid, signal.SIGCONT)
        out, err = first.communicate(timeout=300)
        self.assertEqual(first.returncode, 3, out + err)
        self.assertEqual(self.remote_main(), before, "the fenced-off landing pushed")
        self.assertIn("so it did not push to origin", err)
        self.assertIn("work integrate land %s --into main --push origin --check true" % mine, err)
        self.assertEqual(self.record(mine)["data"]["landing"]["step"], "moved")
        # once the lease is free, the re-run acquires it again (a new number) and publishes
        self.assertEqual(self.work("integrate", "release", theirs, runtime=other["id"]).returncode, 0)
        proc = self.land(mine, "--push", "origin", "--check", "true", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(self.remote_main(), moved)
        self.assertGreater(self.record(mine)["data"]["integration"]["candidate"]["fence"],
                           json.loads(took.stdout)["fence"])


class LandPushRaceTest(LandCase):
    """`land --push` is the cross-host integration point: its push carries the expected old value
    (git push --force-with-lease=refs/heads/main:OLD), a compare-and-swap the remote's
    receive-pack applies under its ref lock. Two shared checkouts (two hosts, here two projects
    that share no database, so no lease orders them) race to push to one bare remote."""
    kind = "git"

    def second_host(self):
        """A second shared checkout cloned from origin, with its own coord project and runtime."""
        canon2 = os.path.join(self.tmp, "canon2")
        self.run_tool(self.tmp, "git", "clone", "-q", self.origin, canon2)
        self.run_tool(canon2, "git", "config", "coord.agentsLand", "true")
        env2 = dict(self.env, COORD_DB=os.path.join(self.tmp, "state2", "coord", "host2.sqlite3"),
                    COORD_PROJECT_ID="test-project-2")
        rt2 = self.hello(env=env2)["runtime"]
        proc = self.coord("work", "create", "theirs", runtime=rt2["id"], cwd=canon2, env=env2)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        handle, path = proc.stdout.splitlines()[:2]
        self.write(path, "theirs.txt", "theirs\n")
        self.run_tool(path, "jj", "describe", "-m", "theirs")
        return canon2, dict(env2, COORD_RUNTIME_ID=rt2["id"]), handle

    def start(self, handle, cwd, env, stop):
        proc = subprocess.Popen([sys.executable, support.COORD, "work", "integrate", "land", handle, "--into", "main",
                                 "--push", "origin", "--check", "true", "--json"], cwd=cwd,
                                env=dict(env, **{land.LAND_STOP_ENV: stop}), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        for _ in range(1200):  # bounded: about 120 s
            if _stopped(proc.pid) or proc.poll() is not None:
                break
            time.sleep(0.1)
        self.assertTrue(_stopped(proc.pid), "the landing of %s never reached %s" % (handle, stop))
        return proc

    def finish(self, proc):
        os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=300)
        return proc.returncode, out, err

    def test_two_hosts_race_to_push_and_exactly_one_moves_the_remote(self):
        canon2, env2, theirs = self.second_host()
        mine, _ = self.make("mine", name="mine.txt", text="mine\n")
        before = self.remote_main()
        # both read origin's main (the same commit) for the last time, then wait right before git push
        a = self.start(mine, self.canon, dict(self.env, COORD_RUNTIME_ID=self.rt["id"]), "before-push")
        b = self.start(theirs, canon2, env2, "before-push")
        rc, out, err = self.finish(a)
        self.assertEqual(rc, 0, err)
        won = json.loads(out)["landed"]
        self.assertEqual(self.remote_main(), won)
        rc, out, err = self.finish(b)
        self.assertEqual(rc, 3, out + err)
        self.assertEqual(self.remote_main(), won, "the second push replaced the first one's commit on origin")
        self.assertIn("moved to %s while landing (expected %s); nothing was forced" % (won, before), err)
        self.assertIn("--push origin", err)
        record = support.work_record(env2, theirs)["data"]["landing"]
        self.assertEqual((record["state"], record["remote_after"]), ("publish-refused", won))

    def test_a_remote_rewound_under_the_landing_is_not_pushed_over(self):
        upstream = self.advance_main("up.txt", "up\n")
        mine, _ = self.make("mine", name="mine.txt", text="mine\n")
        a = self.start(mine, self.canon, dict(self.env, COORD_RUNTIME_ID=self.rt["id"]), "before-push")
        # meanwhile, someone rewinds origin's main by hand (a force push back to the first commit)
        first = self.run_tool(self.origin, "git", "rev-parse", "refs/heads/main~1").strip()
        self.run_tool(self.origin, "git", "update-ref", "refs/heads/main", first, upstream)
        rc, out, err = self.finish(a)
        self.assertEqual(rc, 3, out + err)
        self.assertEqual(self.remote_main(), first, "the landing pushed over a rewound remote")
        self.assertIn("moved to %s while landing (expected %s)" % (first, upstream), err)


class LandQueueTest(LandCase):
    """`work integrate land --queued`: every queued work lands in queue order with one command,
    each rebased onto the one before; what conflicts or fails the check goes back to its agent
    with its steps, the rest lands; nothing is lost and a re-run lands nothing twice."""
    kind = "git"

    def agent_work(self, task, name, text):
        """A work the person made and launched an agent for (as `work start` records its harness's
        conversation), edited and queued by that agent."""
        if not hasattr(self, "term"):
            self.term = support.person_terminal(self, self.canon)
        rc, out = self.term.coord("work", "create", task)
        self.assertEqual(rc, 0, out)
        handle, path = out.split()[:2]
        self.write(path, name, text)
        self.run_tool(path, "jj", "describe", "-m", "add " + name)
        conversation = "agent-%s" % handle
        st = self.open_project()
        with st.transaction():
            st.update_work(st.resolve_work(handle)["id"], data={"tmux": {"conversation": conversation}})
        agent = self.hello(conversation)["runtime"]
        proc = self.work("integrate", "enqueue", handle, "--into", "main", runtime=agent["id"])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return agent, handle, path

    def test_a_queue_lands_the_rest_and_sends_the_conflict_and_the_broken_check_back(self):
        a1, w1, _ = self.agent_work("first", "shared.txt", "one\nTWO (first)\nthree\n")
        a2, w2, p2 = self.agent_work("clash", "shared.txt", "one\nTWO (clash)\nthree\n")
        a3, w3, p3 = self.agent_work("breaks", "broken.txt", "broken\n")
        a4, w4, _ = self.agent_work("fourth", "fourth.txt", "fourth\n")
        self.coord("claim", "shared.txt", "notes.txt", runtime=a1["id"], cwd=self.canon, check=0)
        term = self.term
        rc, out = term.coord("work", "integrate", "land", "--queued", "--into", "main", "--push", "origin",
                             "--check", "test ! -f broken.txt", "--json", stderr=False)
        self.assertEqual(rc, 0, out)
        reply = json.loads(out)
        self.assertEqual([(x["work"], x["outcome"], x["reason"] if x["outcome"] != "landed" else None)
                          for x in reply["works"]],
                         [(w1, "landed", None), (w2, "sent-back", "conflict"), (w3, "sent-back", "check-failed"),
                          (w4, "landed", None)])
        self.assertEqual((reply["landed"], reply["sent_back"], reply["waiting"], reply["stopped"]), (2, 2, 0, None))
        first, fourth = reply["works"][0]["landed"], reply["works"][3]["landed"]
        self.assertEqual(self.main(), fourth)
        self.assertEqual(self.remote_main(), fourth, "--push published each landing")
        self.assertEqual(self.run_tool(self.canon, "git", "rev-parse", fourth + "^").strip(), first,
                         "the fourth was rebased onto the first's landing")
        for handle, landed in ((w1, first), (w4, fourth)):
            integ = self.record(handle)["data"]["integration"]
            self.assertEqual((integ["state"], integ["proof"]["target"]), ("integrated", landed))
        # The two sent back left the queue, their clones keep their changes, their agents have the steps.
        self.assertEqual(self.coord_json("work", "integrate", "queue", "--into", "main", runtime=a1["id"])["queue"], [])
        for agent, handle, path, step in ((a2, w2, p2, "jj resolve --list"), (a3, w3, p3, "fix it in")):
            self.assertEqual(self.record(handle)["data"]["integration"]["state"], "lock-released")
            body = json.dumps(self.coord_json("inbox", runtime=agent["id"]))
            self.assertIn("sent back work %s" % handle, body)
            self.assertIn(step, body)
            self.assertIn("coord work integrate enqueue %s --into main" % handle, body)
            self.assertNotIn("integrate land", body, "landing is the person's: the agent is told to enqueue")
        self.assertEqual(self.read(p3, "broken.txt"), "broken\n")
        self.assertIn("check ", json.dumps(self.coord_json("inbox", runtime=a3["id"])))
        # Those that landed: their agents are told, the first one's lease on what landed released.
        self.assertIn("work %s landed on main" % w1, json.dumps(self.coord_json("inbox", runtime=a1["id"])))
        self.assertIn("work %s landed on main" % w4, json.dumps(self.coord_json("inbox", runtime=a4["id"])))
        self.assertEqual([l["resource"] for l in self.coord_json("list", runtime=a1["id"])["leases"]
                          if l.get("handle") == a1["handle"]], ["notes.txt"])
        # Fixed and queued again, the broken one lands; a further run lands nothing twice.
        os.remove(os.path.join(p3, "broken.txt"))
        self.write(p3, "fixed.txt", "fixed\n")
        self.assertEqual(self.work("integrate", "enqueue", w3, "--into", "main", runtime=a3["id"]).returncode, 0)
        rc, out = term.coord("work", "integrate", "land", "--queued", "--into", "main", "--push", "origin",
                             "--check", "test ! -f broken.txt", stderr=False)
        self.assertEqual(rc, 0, out)
        self.assertEqual(out.strip().splitlines()[-1], "queue into main: 1 landed, 0 sent back, 0 waiting")
        self.assertEqual(self.remote_main(), self.record(w3)["data"]["landing"]["landed"])
        rc, out = term.coord("work", "integrate", "land", "--queued", "--into", "main", stderr=False)
        self.assertEqual((rc, out.strip()), (0, "queue into main: 0 landed, 0 sent back, 0 waiting"))
        integrated = [json.loads(l) for l in self.coord("audit", check=0).stdout.splitlines()]
        integrated = [e["subject"] for e in integrated if e["event"] == "work.integrated"]
        self.assertEqual(len(integrated), 3)
        self.assertEqual(len(set(integrated)), 3, "each work was proven once")

    def test_an_agent_may_not_land_the_queue_unless_the_repository_opts_in(self):
        self.run_tool(self.canon, "git", "config", "--unset", "coord.agentsLand")
        agent, handle, _ = self.agent_work("queued", "q.txt", "q\n")
        before = self.main()
        proc = self.work("integrate", "land", "--queued", "--into", "main", "--check", "true", "--json",
                         runtime=agent["id"])
        self.assertEqual((proc.returncode, json.loads(proc.stdout)["reason"]), (3, "person-lands"), proc.stderr)
        self.assertEqual(self.main(), before)
        self.assertEqual(self.record(handle)["data"]["integration"]["state"], "queued")

    def test_the_user_without_a_terminal_is_told_to_land_the_queue_at_one(self):
        """Found on pallets/click: a script of the person's (no terminal, no harness) was refused
        as if it were an agent ("X may not land the queue: agents queue it"), X being the person's
        own runtime."""
        self.run_tool(self.canon, "git", "config", "--unset", "coord.agentsLand")
        proc = self.coord("work", "create", "mine", cwd=self.canon)  # the user alone makes it: its owner
        self.assertEqual(proc.returncode, 0, proc.stderr)
        handle, path = proc.stdout.splitlines()[:2]
        self.write(path, "q.txt", "q\n")
        self.run_tool(path, "jj", "describe", "-m", "add q")
        proc = self.coord("work", "integrate", "enqueue", handle, "--into", "main", cwd=self.canon)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        before = self.main()
        for args in (("--queued",), (handle,)):
            proc = self.coord("work", "integrate", "land", *args, "--into", "main", "--check", "true", cwd=self.canon)
            self.assertEqual(proc.returncode, 3, proc.stderr)
            self.assertIn("is you without a terminal (a script, cron or a detached process) and may not land ",
                          proc.stderr)
            self.assertIn("next: the person does it in their own terminal; %s work integrate queue --into main "
                          "shows the queue" % support.COORD, proc.stderr)
            self.assertNotIn("integrate land", proc.stderr.split("next:")[1], "no hint hands over the landing")
        self.assertEqual(self.main(), before)
        self.assertEqual(self.record(handle)["data"]["integration"]["state"], "queued")

    def test_a_sent_back_line_ends_its_first_line_cleanly(self):
        import land
        r = {"into": "main", "landed": 0, "sent_back": 1, "waiting": 0, "stopped": None, "batches": [], "works": [
            {"work": "w", "outcome": "sent-back", "reason": "check-failed", "told": "a",
             "message": "check make failed on abc (exit 1); main did not move:\nFAILED t.py"}]}
        self.assertEqual(land.queue_lines(r)[0],
                         "w sent back (check-failed): check make failed on abc (exit 1); main did not move; told a")

    def test_sigint_during_a_check_then_a_rerun_lands_every_work_once(self):
        started, go_on = os.path.join(self.tmp, "check-started"), os.path.join(self.tmp, "go-on")
        check = "if [ -f slow.txt ] && [ ! -f %s ]; then touch %s; sleep 60; fi; true" % (go_on, started)
        handles = []
        for task, name in (("one", "one.txt"), ("slow", "slow.txt"), ("three", "three.txt")):
            handle, _ = self.make(task, name=name, text=task + "\n")
            self.assertEqual(self.work("integrate", "enqueue", handle, "--into", "main").returncode, 0)
            handles.append(handle)
        env = dict(self.env, COORD_RUNTIME_ID=self.rt["id"])
        child = subprocess.Popen([sys.executable, "-S", support.COORD, "work", "integrate", "land", "--queued",
                                  "--into", "main", "--push", "origin", "--check", check],
                                 env=env, cwd=self.canon, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 # as at a terminal: a runner started in the background ignores SIGINT,
                                 # and a child would inherit that
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.addCleanup(lambda: child.poll() is None and child.kill())
        support.retry_until(lambda: os.path.exists(started) or child.poll() is not None, timeout=120)
        self.assertIsNone(child.poll(), "coord was still checking the second work")
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
        self.assertEqual(child.returncode, 130, out + err)
        self.assertIn("%s landed" % handles[0], out)
        self.assertIn("%s interrupted the queue" % handles[1], out)
        self.assertEqual(self.record(handles[1])["data"]["integration"]["state"], "queued",
                         "the interrupted work is back in its place")
        self.assertEqual([r["handle"] for r in self.coord_json("work", "integrate", "queue", "--into", "main",
                                                                   runtime=self.rt["id"])["queue"]], handles[1:])
        open(go_on, "w").close()
        proc = self.work("integrate", "land", "--queued", "--into", "main", "--push", "origin", "--check", check)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(proc.stdout.strip().splitlines()[-1], "queue into main: 2 landed, 0 sent back, 0 waiting")
        landed = [self.record(h)["data"]["landing"]["landed"] for h in handles]
        self.assertEqual(self.main(), landed[2])
        self.assertEqual(self.remote_main(), landed[2])
        log = self.run_tool(self.canon, "git", "log", "--format=%s", "main").splitlines()
        self.assertEqual(sorted(log), sorted(["initial", "add a feature", "add a feature", "add a feature"]),
                         "every work landed exactly once")
        events = [json.loads(l) for l in self.coord("audit", check=0).stdout.splitlines()]
        self.assertEqual(sorted(e["subject"] for e in events if e["event"] == "work.integrated"),
                         sorted(self.record(h)["id"] for h in handles))


    def test_a_work_lands_after_the_queued_work_it_depends_on_even_when_queued_first(self):
        first, _ = self.make("base", name="base.txt", describe="add base")
        proc = self.work("create", "on-top", "--depends", first)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        later, path = proc.stdout.splitlines()[:2]
        self.write(path, "top.txt", "top\n")
        self.run_tool(path, "jj", "describe", "-m", "add top")
        for h in (later, first):  # the dependent work is queued first
            self.assertEqual(self.work("integrate", "enqueue", h, "--into", "main").returncode, 0)
        proc = self.work("integrate", "queue", "--into", "main", "--json")  # the listing is the landing order
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual([r["handle"] for r in json.loads(proc.stdout)["queue"]], [first, later])
        listed = self.work("integrate", "queue", "--into", "main").stdout.splitlines()
        self.assertEqual([line.split()[1] for line in listed if line[:2] in ("1.", "2.")], [first, later])
        proc = self.work("integrate", "land", "--queued", "--into", "main", "--check", "true", "--json")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual([(x["work"], x["outcome"]) for x in json.loads(proc.stdout)["works"]],
                         [(first, "landed"), (later, "landed")])

class QueueReviewTextTest(unittest.TestCase):
    """`work review --queued`'s last line counts the works that merge, not the works queued."""

    def queue(self, handles, left_out):
        work = {"frozen": False, "task": "t", "ahead": 1, "behind": 0, "description": "d", "commits": ["c"],
                "files": ["a.txt"], "leases": [], "forecast": {"target": None, "pairs": [], "error": None},
                "check": {"state": "pending"}, "landing": None, "stat": "", "diff": [], "diff_lines": 0,
                "into": "main", "candidate": "0" * 40}
        return {"into": "main", "works": [dict(work, work=h) for h in handles],
                "combined": {"stat": "", "diff": [], "diff_lines": 0, "left_out": left_out, "error": None}}

    def test_the_combined_line_counts_what_merges(self):
        cases = ((["a", "b"], ["b"], "combined (1 work onto main; would conflict, left out: b):"),
                 (["a", "b", "c"], ["b"], "combined (2 works onto main; would conflict, left out: b):"),
                 (["a"], [], "combined (1 work onto main):"))
        for handles, left_out, line in cases:
            lines = review.queue_review_lines(self.queue(handles, left_out))
            self.assertIn(line, lines)
            self.assertEqual(sum(1 for l in lines if l[:2] in ("1.", "2.", "3.")), len(handles))
        self.assertEqual(review.queue_review_lines(self.queue([], [])), ["nothing queued for main"])


class ReviewTest(LandCase):
    """`work review`: one screen of what the person decides a landing on, read only."""
    kind = "git"

    def test_one_work_and_the_queue_with_its_combined_diff(self):
        w1, p1 = self.make("first", name="shared.txt", text="one\nTWO (first)\nthree\n", describe="first change")
        w2, p2 = self.make("clash", name="shared.txt", text="one\nTWO (clash)\nthree\n", describe="clashing change")
        w3, p3 = self.make("third", name="third.txt", text="".join("line %d\n" % i for i in range(100)),
                           describe="third change\n\nwith a body")
        peer = self.hello()["runtime"]
        self.coord("claim", "third.txt", runtime=peer["id"], cwd=self.canon, check=0)
        self.assertEqual(self.land(w3, "--check", "false").returncode, 3)  # a failed check, recorded
        before = (self.main(), self.run_tool(self.canon, "git", "for-each-ref").strip())
        r = self.coord_json("work", "review", w3, runtime=self.rt["id"])
        self.assertEqual((r["files"], r["description"], r["frozen"]), (["third.txt"], "third change\n\nwith a body",
                                                                       False))
        self.assertEqual([(l["path"], l["holder"], l["now"]) for l in r["leases"]],
                         [("third.txt", peer["handle"], True)])
        self.assertEqual((r["check"]["state"], r["check"]["command"], r["check"]["exit"]), ("failed", "false", 1))
        self.assertEqual((len(r["diff"]), r["diff_lines"]), (40, 106))
        self.assertIn("third.txt | 100 +", r["stat"])
        r = self.coord_json("work", "review", w1, runtime=self.rt["id"])
        self.assertEqual([(p["a"], p["b"], p["conflicts"]) for p in r["forecast"]["pairs"]],
                         [(w1, w2, ["shared.txt"])])
        text = self.work("review", w1).stdout
        self.assertIn("forecast: would conflict with %s in shared.txt" % w2, text)
        self.assertIn("last check: none (gate pending)", text)
        self.assertIn("+TWO (first)", text)
        for h in (w1, w2, w3):
            self.assertEqual(self.work("integrate", "enqueue", h, "--into", "main").returncode, 0)
        q = self.coord_json("work", "review", "--queued", "--into", "main", runtime=self.rt["id"])
        self.assertEqual([x["work"] for x in q["works"]], [w1, w2, w3])
        self.assertEqual(q["combined"]["left_out"], [w2])
        self.assertIn("shared.txt", q["combined"]["stat"])
        self.assertIn("third.txt", q["combined"]["stat"])
        text = self.work("review", "--queued", "--into", "main").stdout
        self.assertIn("combined (2 works onto main; would conflict, left out: %s):" % w2, text)
        self.assertEqual((self.main(), self.run_tool(self.canon, "git", "for-each-ref").strip()), before,
                         "a review changes nothing")


class ReadmeQueueTest(LandCase):
    """README's "## Many agents" block as written, typed by the person at a terminal in the shared
    checkout (`.coord/coord` is this checkout's coord): agents queued three works, one of which
    breaks `make test`; the view shows them queued, the review lists them, and one landing command
    lands and pushes two and sends the third back to its agent with its steps."""
    kind = "git"
    agents_land = False
    START, END = "## Many agents", "Everyday commands"
    agent_work = LandQueueTest.agent_work

    def test_readme_queue_as_written(self):
        support.require_tool(self, "make")
        self.write(self.canon, "Makefile", "test:\n\ttest ! -f broken.txt\n")
        self.run_tool(self.canon, "git", "add", "Makefile")
        self.run_tool(self.canon, "git", "commit", "-q", "-m", "a test target")
        self.run_tool(self.canon, "git", "push", "-q", "origin", "main")
        a1, w1, _ = self.agent_work("first", "first.txt", "first\n")
        a2, w2, p2 = self.agent_work("breaks", "broken.txt", "broken\n")
        a3, w3, _ = self.agent_work("third", "third.txt", "third\n")
        blocks = support.readme_blocks(self.START, self.END)
        self.assertEqual(len(blocks), 1, blocks)
        watch, review, land_all = blocks[0]
        coord = "%s %s" % (shlex.quote(sys.executable), shlex.quote(support.COORD))

        def typed(line):
            line = re.sub(r"\s{2,}# .*$", "", line).replace(".coord/coord", coord)
            rc, out = self.term.run(line, timeout=300)
            self.assertEqual(rc, 0, "%s\n%s" % (line, out))
            return out
        out = typed(watch)
        for handle in (w1, w2, w3):
            self.assertRegex(out, r"%s\b.*queued" % handle)
        out = typed(review)
        self.assertLess(out.index(w1), out.index(w2))
        self.assertLess(out.index(w2), out.index(w3))
        for name in ("first.txt", "broken.txt", "third.txt"):
            self.assertIn(name, out)
        out = typed(land_all)
        self.assertIn("make test", out)
        self.assertEqual(self.remote_main(), self.main(), "pushed")
        files = self.run_tool(self.canon, "git", "ls-tree", "--name-only", "main").split()
        self.assertIn("first.txt", files)
        self.assertIn("third.txt", files)
        self.assertNotIn("broken.txt", files)
        self.assertEqual(self.read(p2, "broken.txt"), "broken\n", "the work sent back keeps its change")
        body = json.dumps(self.coord_json("inbox", runtime=a2["id"]))
        self.assertIn("sent back work %s" % w2, body)
        self.assertIn("coord work integrate enqueue %s --into main" % w2, body)


class LandBatchTest(LandCase):
    """`land --queued --batch N`: N works checked together; a failed check is bisected to the work
    that broke it, which goes back to its agent; the others land, each with its own proof."""
    kind = "git"

    def test_a_batch_bisects_to_the_work_that_broke_the_check_and_lands_the_rest(self):
        handles = []
        for task, name, text in (("b1", "shared.txt", "one\nTWO (b1)\nthree\n"), ("b2", "b2.txt", "b2\n"),
                                 ("b3", "broken.txt", "b3\n"), ("b4", "b4.txt", "b4\n"),
                                 ("b5", "shared.txt", "one\nTWO (b5)\nthree\n")):
            handle, _ = self.make(task, name=name, text=text, describe="change " + task)
            self.assertEqual(self.work("integrate", "enqueue", handle, "--into", "main").returncode, 0)
            handles.append(handle)
        proc = self.work("integrate", "land", "--queued", "--batch", "5", "--into", "main", "--push", "origin",
                         "--check", "test ! -f broken.txt", "--json")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        r = json.loads(proc.stdout)
        self.assertEqual([(x["work"], x["outcome"], x.get("reason")) for x in r["works"]],
                         [(handles[4], "sent-back", "conflict"), (handles[2], "sent-back", "check-failed"),
                          (handles[0], "landed", None), (handles[1], "landed", None), (handles[3], "landed", None)])
        # A batch rebases in a scratch copy whether or not anything works in the clone.
        self.assertIn("tried in a scratch copy, the clone was not touched", r["works"][0]["message"])
        self.assertEqual([b["check_runs"] for b in r["batches"]], [3, 1], "full, bisect 2 (pass) and 3 (fail); then "
                         "the rest")
        self.assertEqual(r["check_runs"], 4)
        landed = [self.record(h)["data"]["landing"]["landed"] for h in (handles[0], handles[1], handles[3])]
        self.assertEqual(self.main(), landed[2])
        self.assertEqual(self.remote_main(), landed[2])
        self.assertEqual(self.run_tool(self.canon, "git", "rev-list", "--reverse", "main", "^" + landed[0]).split(),
                         landed[1:])
        for h, commit in zip((handles[0], handles[1], handles[3]), landed):
            integ = self.record(h)["data"]["integration"]
            self.assertEqual((integ["state"], integ["proof"]["candidate"]), ("integrated", commit))
        self.assertNotIn("broken.txt", self.run_tool(self.canon, "git", "ls-tree", "--name-only", "main"))
        for h in (handles[2], handles[4]):
            self.assertEqual(self.record(h)["data"]["integration"]["state"], "lock-released")
        self.assertEqual(self.read(self.canon, "shared.txt"), "one\nTWO (b1)\nthree\n")

    def test_a_stale_work_in_a_batch_is_read_as_stale_beside_a_fresh_one(self):
        # The batch learns which candidates have the target below them in one read: a stale work
        # taken as fresh would count main's own newer files as its writes, and stop the queue on
        # the person's uncommitted edit of one of them.
        stale, _ = self.make("old", name="old.txt", describe="add old")
        self.advance_main("upstream.txt", "upstream\n")
        fresh, _ = self.make("new", name="new.txt", describe="add new")
        for handle in (stale, fresh):
            self.assertEqual(self.work("integrate", "enqueue", handle, "--into", "main").returncode, 0)
        self.write(self.canon, "upstream.txt", "the person's edit\n")
        proc = self.work("integrate", "land", "--queued", "--batch", "2", "--into", "main", "--check", "true",
                         "--json")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        r = json.loads(proc.stdout)
        self.assertEqual([(x["work"], x["outcome"]) for x in r["works"]], [(stale, "landed"), (fresh, "landed")])
        self.assertEqual(self.read(self.canon, "upstream.txt"), "the person's edit\n")
        self.assertEqual(self.run_tool(self.canon, "git", "ls-tree", "--name-only", "main").split(),
                         ["README", "new.txt", "old.txt", "shared.txt", "upstream.txt"])

    def test_a_batch_killed_after_moving_or_pushing_is_finished_by_a_rerun_each_work_once(self):
        for step in ("moved", "pushed"):
            with self.subTest(step=step):
                handles = []
                for i in range(3):
                    name = "%s%d" % (step, i)
                    handle, _ = self.make(name, name=name + ".txt", describe="add " + name)
                    self.assertEqual(self.work("integrate", "enqueue", handle, "--into", "main").returncode, 0)
                    handles.append(handle)
                argv = ("integrate", "land", "--queued", "--batch", "3", "--into", "main", "--push", "origin",
                        "--check", "true")
                killed = self.work(*argv, env={LAND_KILL_ENV: step})
                self.assertEqual(killed.returncode, -signal.SIGKILL, killed.stdout + killed.stderr)
                proc = self.work(*argv)
                self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
                landed = [self.record(h)["data"]["landing"]["landed"] for h in handles]
                self.assertEqual((self.main(), self.remote_main()), (landed[2], landed[2]))
                for h in handles:
                    self.assertEqual(self.record(h)["data"]["integration"]["state"], "integrated")
                events = [json.loads(l) for l in self.coord("audit", check=0).stdout.splitlines()]
                proofs = [e["subject"] for e in events if e["event"] == "work.integrated"]
                self.assertEqual(sorted(self.record(h)["id"] for h in handles),
                                 sorted(p for p in proofs if p in {self.record(h)["id"] for h in handles}))

    def test_sigint_during_a_batch_check_puts_the_batch_back_and_a_rerun_lands_it_once(self):
        started, go_on = os.path.join(self.tmp, "check-started"), os.path.join(self.tmp, "go-on")
        check = "if [ ! -f %s ]; then touch %s; sleep 60; fi; true" % (go_on, started)
        handles = []
        for i in range(3):
            handle, _ = self.make("int%d" % i, name="int%d.txt" % i, describe="add int%d" % i)
            self.assertEqual(self.work("integrate", "enqueue", handle, "--into", "main").returncode, 0)
            handles.append(handle)
        argv = ["work", "integrate", "land", "--queued", "--batch", "3", "--into", "main", "--push", "origin",
                "--check", check]
        child = subprocess.Popen([sys.executable, "-S", support.COORD] + argv,
                                 env=dict(self.env, COORD_RUNTIME_ID=self.rt["id"]), cwd=self.canon,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.addCleanup(lambda: child.poll() is None and child.kill())
        support.retry_until(lambda: os.path.exists(started) or child.poll() is not None, timeout=120)
        self.assertIsNone(child.poll(), "coord was still checking the batch")
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
        self.assertEqual(child.returncode, 130, out + err)
        before = self.main()
        self.assertEqual([r["handle"] for r in self.coord_json("work", "integrate", "queue", "--into", "main",
                                                                   runtime=self.rt["id"])["queue"]], handles)
        self.assertEqual([self.record(h)["data"]["integration"]["state"] for h in handles], ["queued"] * 3)
        self.assertEqual(self.coord_json("list", runtime=self.rt["id"])["leases"], [], "nothing held")
        open(go_on, "w").close()
        proc = self.work(*argv[1:])
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertNotEqual(self.main(), before)
        events = [json.loads(l) for l in self.coord("audit", check=0).stdout.splitlines()]
        self.assertEqual(sorted(e["subject"] for e in events if e["event"] == "work.integrated"),
                         sorted(self.record(h)["id"] for h in handles))
        self.assertEqual(self.remote_main(), self.main())


# The landing queue on a project whose records are in PostgreSQL (through its host process):
# the same tests, support.PostgresProject first.
class PgLandQueueTest(support.PostgresProject, LandQueueTest):
    pass


class PgLandBatchTest(support.PostgresProject, LandBatchTest):
    pass


class ManyTagsTest(LandCase):
    """A repository with thousands of tags on distinct commits: the revset naming the work's own
    commits lists every shared target, and one argument of a command holds at most 128 KB (about
    3,000 commit IDs), so jj could not start; only the heads of those targets are named."""

    def test_a_work_lands_and_goes_in_a_repository_with_3500_tags(self):
        n = 3500
        chunks = []
        for i in range(n):
            body = "release %d\n" % i
            chunks.append("commit refs/heads/main\nmark :%d\ncommitter R <r@example.invalid> %d +0000\ndata 8\n"
                          "release\n%sM 100644 inline releases.txt\ndata %d\n%s\n"
                          % (i + 1, 1700000000 + i, "from refs/heads/main^0\n" if i == 0 else "from :%d\n" % i,
                             len(body), body))
        chunks += ["reset refs/tags/r%d\nfrom :%d\n\n" % (i, i + 1) for i in range(n)]
        self.run_tool(self.canon, "git", "fast-import", "--quiet", input="".join(chunks))
        self.run_tool(self.canon, "git", "reset", "-q", "--hard", "main")
        handle, path = self.make("tagged")
        proc = self.land(handle, "--check", "true", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        self.assertEqual(self.run_tool(self.canon, "git", "show", "main:feature.txt"), "feature\n")
        self.assertEqual(self.work("remove", handle, "--confirm", handle).returncode, 0)
        self.assertFalse(os.path.exists(path))


class LandBenchTest(CoordTestCase):
    """bench/land and bench/land_queue run as written, at a size small enough for the suite: a
    bench that stopped working (a refusal it did not expect) says nothing when someone needs it."""

    def bench(self, name, *args):
        self.use_jj()
        proc = subprocess.run([sys.executable, os.path.join(support.ROOT, "bench", name), "--json",
                               "--dir", self.tmp] + list(args), env=dict(os.environ, **self.env),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        return json.loads(proc.stdout)

    def test_bench_land_lands_and_measures(self):
        figures = self.bench("land", "--files", "50", "--runs", "1")
        self.assertGreater(figures["land_s"], 0)
        self.assertGreater(figures["manual_s"], 0)

    def test_bench_land_queue_lands_every_work_in_one_check_run(self):
        figures = self.bench("land_queue", "--works", "3", "--batch", "3", "--check-seconds", "0",
                             "--files", "50", "--manual", "1")
        self.assertEqual((figures["landed"], figures["check_runs"]), (3, 1))
