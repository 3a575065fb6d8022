"""`coord work integrate land` against real git/jj canonical repositories and bare remotes.

Each test builds a canonical repository of one kind (plain git with the bookmark checked out,
plain git with it not checked out, or colocated jj), a bare `origin` it pushes to, managed
clones made by `coord work create`, and drives the real CLI.
"""

import json
import os
import subprocess
import sys

import support
from support import CoordTestCase

import store
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
        if self.kind == "jj":
            self.run_tool(self.tmp, "jj", "git", "init", "--colocate", self.canon)
            self.write(self.canon, "README", "hello\n")
            self.write(self.canon, "shared.txt", "one\ntwo\nthree\n")
            self.run_tool(self.canon, "jj", "commit", "-m", "initial")
            self.run_tool(self.canon, "jj", "bookmark", "create", "main", "-r", "@-")
        else:
            self.run_tool(self.tmp, "git", "init", "-q", "-b", "main", self.canon)
            self.write(self.canon, "README", "hello\n")
            self.write(self.canon, "shared.txt", "one\ntwo\nthree\n")
            self.run_tool(self.canon, "git", "add", "-A")
            self.run_tool(self.canon, "git", "commit", "-q", "-m", "initial")
            if self.kind == "git-detached":
                self.run_tool(self.canon, "git", "checkout", "-q", "-b", "dev")
        self.run_tool(self.tmp, "git", "init", "-q", "--bare", self.origin)
        self.run_tool(self.canon, "git", "remote", "add", "origin", self.origin)
        self.run_tool(self.canon, "git", "push", "-q", "origin", "refs/heads/main:refs/heads/main")
        if self.agents_land:
            self.run_tool(self.canon, "git", "config", "coord.agentsLand", "true")
        self.rt = self.hello()["runtime"]

    # -- helpers

    def run_tool(self, cwd, *argv, check=True):
        if argv[0] == "jj":
            argv = ("jj", "--no-pager", "--color=never") + argv[1:]
        proc = subprocess.run(list(argv), cwd=cwd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=120)
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
        proc = self.work("inspect", handle, "--json")
        return json.loads(proc.stdout)["work"]

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
        self.assertEqual(proc.stdout.strip(), "%s landed %s on main" % (handle, landed))
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
        self.run_tool(path, "jj", "new")
        self.write(path, "more.txt", "more\n")
        self.run_tool(path, "jj", "describe", "-m", "more")
        proc = self.land(handle, "--check", "true", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        second = json.loads(proc.stdout)
        self.assertFalse(second["already"])
        self.assertEqual(self.main(), second["landed"])
        self.assertEqual(self.run_tool(self.canon, "git", "rev-parse", second["landed"] + "^").strip(), first)


    def test_failed_push_is_ambiguous_keeps_the_lease_and_a_rerun_finishes(self):
        handle, path = self.make("declined")
        hook = os.path.join(self.origin, "hooks", "pre-receive")
        with open(hook, "w") as f:
            f.write("#!/bin/sh\necho declined by policy >&2\nexit 1\n")
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
