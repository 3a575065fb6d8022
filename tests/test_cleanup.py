"""cleanup.py against real jj/git repositories: what `work remove` and `work gc` delete and what
they refuse, adoption of clones after a lost database, and the field's lost-work cases
(docs/cleanup.md). The cases build on test_workspace's work fixtures.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import support
import store
import cleanup
import workspace
from test_workspace import TmuxWorkCase, WorkTestCase


class CleanupRefusalTest(WorkTestCase):

    def test_dirty_working_copy(self):
        handle, path, _ = self.create()
        self.gate(handle)
        self.write(path, "new.txt", "uncommitted\n")
        self.assertEqual(self.refused(handle), ["dirty"])

    def test_ungated(self):
        handle, path, _ = self.create()
        self.assertEqual(self.refused(handle), ["ungated"])

    def test_advanced_but_unintegrated(self):
        handle, path, _ = self.create()
        self.write(path, "feature.txt", "done\n")
        self.jj(path, "commit", "-m", "feature")
        self.gate(handle)
        self.assertEqual(self.refused(handle), ["unintegrated"])

    def test_token_mismatch(self):
        handle, path, _ = self.create()
        self.gate(handle)
        marker = os.path.join(path, ".jj", "coord-owner")
        with open(marker) as f:
            data = json.load(f)
        data["token"] = "0" * 64
        with open(marker, "w") as f:
            json.dump(data, f)
        self.assertEqual(self.refused(handle), ["token-mismatch"])
        os.unlink(marker)
        self.assertEqual(self.refused(handle), ["token-mismatch"])

    def test_path_outside_root_via_symlink(self):
        handle, path, _ = self.create()
        self.gate(handle)
        elsewhere = os.path.join(self.tmp, "elsewhere")
        os.rename(path, elsewhere)
        os.symlink(elsewhere, path)
        self.assertEqual(self.refused(handle), ["outside-root"])
        self.assertTrue(os.path.isdir(os.path.join(elsewhere, ".jj")))

    def test_owner_alive(self):
        handle, path, _ = self.create()
        self.gate(handle)
        other = self.hello()["runtime"]
        proc = self.work("remove", handle, "--confirm", handle, "--override", "--json", runtime=other["id"])
        self.assertEqual((proc.returncode, json.loads(proc.stdout)["reason"]), (3, "override-is-the-person-s"))
        # The person may override; the owner being alive still refuses it.
        person = support.person_terminal(self, self.canon)
        rc, out = person.coord("work", "remove", handle, "--confirm", handle, "--override", "--json", stderr=False)
        self.assertEqual(rc, 3, out)
        self.assertEqual([r["code"] for r in json.loads(out)["reasons"]], ["owner-alive"])
        self.assertTrue(os.path.isdir(path))
        self.coord("bye", runtime=self.rt["id"], check=0)
        self.assertEqual(person.coord("work", "remove", handle, "--confirm", handle, "--override")[0], 0)
        self.assertFalse(os.path.lexists(path))

    def test_changed_after_integration(self):
        handle, path = self.integrate()
        self.write(path, "later.txt", "after the proof\n")
        self.assertEqual(self.refused(handle), ["changed-after-integration"])

    def test_missing_directory_is_a_recovery_candidate(self):
        handle, path, _ = self.create()
        self.gate(handle)
        shutil.rmtree(path)
        self.assertEqual(self.refused(handle), ["missing"])
        self.work("remove", handle, "--confirm", handle, "--forget", check=0)
        self.assertEqual(self.record(handle)["state"], "removed")

    def test_gc_removes_only_what_passes_every_rule(self):
        clean, clean_path, _ = self.create("clean")
        dirty, dirty_path, _ = self.create("dirty")
        ungated, ungated_path, _ = self.create("ungated")
        self.gate(clean)
        self.gate(dirty)
        self.write(dirty_path, "wip.txt", "wip\n")
        proc = self.work("gc", check=0)
        self.assertIn("removed " + clean, proc.stdout)
        self.assertIn("recovery candidates:", proc.stdout)
        self.assertIn(dirty, proc.stdout)
        self.assertIn(ungated, proc.stdout)
        self.assertFalse(os.path.lexists(clean_path))
        self.assertTrue(os.path.isdir(dirty_path))
        self.assertTrue(os.path.isdir(ungated_path))
        kept = {k["handle"]: [r["code"] for r in k["reasons"]] for k in self.work_json("gc")["kept"]}
        self.assertEqual(kept, {dirty: ["dirty"], ungated: ["ungated"]})


class CleanupEvidenceTest(WorkTestCase):
    """Removal needs evidence that nothing on disk is lost and that nothing live works inside."""

    def reasons(self, handle, *extra):
        """The refusal's --json reasons, by code (the directory must survive)."""
        self.refused(handle, *extra)
        proc = self.work("remove", handle, "--confirm", handle, "--json", *extra)
        return {r["code"]: r for r in json.loads(proc.stdout)["reasons"]}

    def kept_by_gc(self, *extra):
        return {k["handle"]: [r["code"] for r in k["reasons"]] for k in self.work_json("gc", *extra)["kept"]}

    def ignore(self, *patterns):
        """Commit a .gitignore on canonical main, so that clones made afterwards carry it."""
        self.write(self.canon, ".gitignore", "".join(p + "\n" for p in patterns))
        self.jj(self.canon, "commit", "-m", "ignore rules")
        self.jj(self.canon, "bookmark", "set", "main", "-r", "@-")

    def ops(self, path):
        return self.jj(path, "--ignore-working-copy", "op", "log", "--no-graph", "-T", 'id ++ "\\n"').split()

    def in_head(self, path):
        return self.jj(path, "--ignore-working-copy", "file", "list", "-r", "@").split()

    def spawn(self, cwd):
        """A real process (sleep) working in cwd, ended when the test ends."""
        proc = subprocess.Popen(["sleep", "300"], cwd=cwd)
        self.addCleanup(proc.wait)
        self.addCleanup(proc.kill)
        return proc

    def test_file_over_the_snapshot_size_limit_blocks_remove_and_gc(self):
        handle, path, _ = self.create("data")
        self.gate(handle)
        big = os.path.join(path, "dataset.csv")
        with open(big, "wb") as f:
            f.write(b"id,value\n" * (2900 * 1024 // 9))  # 2.8 MiB, over jj's 1 MiB default
        reasons = self.reasons(handle)
        self.assertEqual(list(reasons), ["untracked"])
        self.assertEqual(reasons["untracked"]["paths"], ["dataset.csv"])
        self.assertIn("dataset.csv", reasons["untracked"]["message"])
        self.assertIn("max-new-file-size", reasons["untracked"]["next"])
        self.assertEqual(list(self.reasons(handle, "--discard-ignored")), ["untracked"], "no override")
        self.assertEqual(self.kept_by_gc(), {handle: ["untracked"]})
        self.assertEqual(self.kept_by_gc("--discard-ignored"), {handle: ["untracked"]})
        self.assertTrue(os.path.isfile(big))
        self.assertEqual(os.path.getsize(big), 2900 * 1024 // 9 * 9)
        os.rename(big, os.path.join(self.tmp, "dataset.csv"))
        # Other ways jj leaves a file out of @: auto-track off, a nested repository.
        self.jj(path, "config", "set", "--repo", "snapshot.auto-track", "none()")
        self.write(path, "notes/todo.txt", "not tracked\n")
        self.git(path, "init", "-q", "vendor/lib")
        self.write(path, "vendor/lib/code.c", "int x;\n")
        with open(os.path.join(os.fsencode(path), b"caf\xe9.txt"), "wb") as f:  # jj skips a non-UTF-8 name
            f.write(b"latin-1 name\n")
        reasons = self.reasons(handle)
        self.assertEqual(list(reasons), ["untracked"])
        paths = reasons["untracked"]["paths"]
        for name in ("notes/todo.txt", "vendor/lib/code.c", "vendor/lib/.git/HEAD", "caf\\xe9.txt"):
            self.assertIn(name, paths)  # a nested repository's .git may hold commits found nowhere else
        shutil.rmtree(os.path.join(path, "notes"))
        shutil.rmtree(os.path.join(path, "vendor"))
        os.unlink(os.path.join(os.fsencode(path), b"caf\xe9.txt"))
        self.work("remove", handle, "--confirm", handle, check=0)  # control: nothing left out
        self.assertFalse(os.path.lexists(path))

    def test_ignored_files_block_until_discarded_by_name(self):
        self.ignore(".env", "build/")
        handle, path, _ = self.create("secrets")
        clean, clean_path, _ = self.create("clean")
        self.gate(handle)
        self.gate(clean)
        self.write(path, ".env", "TOKEN=keep-me\n")
        self.write(path, "build/out.o", "object\n")
        proc = self.work("remove", handle, "--confirm", handle)
        self.assertEqual(proc.returncode, 3)
        self.assertIn(".env", proc.stderr)
        self.assertIn("--discard-ignored", proc.stderr)
        reasons = self.reasons(handle)
        self.assertEqual(list(reasons), ["ignored"])
        self.assertEqual(reasons["ignored"]["paths"], [".env", "build/out.o"])
        dry = self.work_json("gc", "--dry-run", "--discard-ignored")
        self.assertEqual(sorted(r["handle"] for r in dry["removed"]), sorted([handle, clean]))
        self.assertTrue(os.path.isdir(clean_path) and os.path.isfile(os.path.join(path, ".env")))
        gc = self.work_json("gc")
        self.assertEqual([r["handle"] for r in gc["removed"]], [clean], "control: a clean clone still goes")
        self.assertEqual({k["handle"]: [r["code"] for r in k["reasons"]] for k in gc["kept"]}, {handle: ["ignored"]})
        self.assertTrue(os.path.isfile(os.path.join(path, ".env")))
        reply = self.work_json("remove", handle, "--confirm", handle, "--discard-ignored")
        self.assertEqual(reply["discarded_ignored"], [".env", "build/out.o"])
        self.assertFalse(os.path.lexists(path))
        rows = [json.loads(l) for l in self.coord("audit", check=0).stdout.splitlines()]
        removed = [r for r in rows if r["event"] == "work.removed" and r["subject"] == self.record(handle)["id"]]
        self.assertEqual(removed[0]["data"]["discarded_ignored"], [".env", "build/out.o"])
        self.assertEqual(self.record(handle)["data"]["removed"]["discarded_ignored"], [".env", "build/out.o"])

    def test_gc_discards_ignored_files_only_when_told(self):
        self.ignore("*.log")
        handle, path, _ = self.create("logs")
        self.gate(handle)
        self.write(path, "run.log", "log\n")
        self.assertEqual(self.kept_by_gc(), {handle: ["ignored"]})
        gc = self.work_json("gc", "--discard-ignored")
        self.assertEqual(gc["removed"], [{"handle": handle, "task": "logs", "discarded_ignored": ["run.log"]}])
        self.assertFalse(os.path.lexists(path))
        rows = [json.loads(l) for l in self.coord("audit", check=0).stdout.splitlines()]
        self.assertIn(["run.log"], [r["data"].get("discarded_ignored") for r in rows if r["event"] == "work.removed"])

    def test_bytecode_of_a_committed_module_is_not_evidence_of_loss(self):
        self.write(self.canon, "tool.py", "X = 1\n")
        self.ignore("__pycache__/")
        handle, path, _ = self.create("pyc")
        self.gate(handle)
        subprocess.run([sys.executable, "-m", "py_compile", "tool.py"], cwd=path, env=self.env, check=True,
                       timeout=60)
        self.assertTrue(os.listdir(os.path.join(path, "__pycache__")))
        # A suffix-less script loaded with cached bytecode, as .coord/coord's /bin/sh start does.
        self.write(self.canon, "tool", "Y = 2\n")
        self.jj(self.canon, "commit", "-m", "script")
        self.jj(self.canon, "bookmark", "set", "main", "-r", "@-")
        self.jj(path, "git", "fetch")
        self.jj(path, "new", "main@origin")
        loader = ("import importlib.machinery as m, sys; sys.dont_write_bytecode = False; "
                  "m.SourceFileLoader('tool', 'tool').get_code('tool')")
        subprocess.run([sys.executable, "-c", loader], cwd=path, env=self.env, check=True, timeout=60)
        self.assertIn("tool%s.pyc" % sys.implementation.cache_tag, os.listdir(os.path.join(path, "__pycache__")))
        self.write(path, "__pycache__/gone.cpython-39.pyc", "bytecode of no committed file\n")
        reasons = self.reasons(handle)
        self.assertEqual(list(reasons), ["ignored"])
        self.assertEqual(reasons["ignored"]["paths"], ["__pycache__/gone.cpython-39.pyc"])
        os.unlink(os.path.join(path, "__pycache__", "gone.cpython-39.pyc"))
        self.work("remove", handle, "--confirm", handle, check=0)
        self.assertFalse(os.path.lexists(path))

    def test_live_runtime_inside_blocks_without_a_snapshot(self):
        handle, path, _ = self.create("busy")
        self.gate(handle)
        harness = self.spawn(path)
        by_process = self.coord_json("hello", "--pid", harness.pid)["runtime"]   # registered elsewhere
        by_cwd = self.hello(cwd=path)["runtime"]                                 # registered inside, no pid
        self.write(path, "half-written.txt", "an agent is still writing this\n")
        ops, head = self.ops(path), self.in_head(path)
        reasons = self.refused(handle)
        self.assertEqual(reasons, ["runtime-inside", "runtime-inside", "unexamined"])
        proc = self.work("remove", handle, "--confirm", handle)
        self.assertIn(by_process["handle"], proc.stderr)
        self.assertIn(by_cwd["handle"], proc.stderr)
        self.assertIn("not examined", proc.stderr)
        self.assertNotIn("process-inside", self.work("remove", handle, "--confirm", handle, "--json").stdout,
                         "the runtime's own process is named once, as the runtime")
        self.assertEqual(self.kept_by_gc(), {handle: ["runtime-inside", "runtime-inside", "unexamined"]})
        self.assertEqual(self.ops(path), ops, "a clone in use must not be snapshotted")
        self.assertNotIn("half-written.txt", self.in_head(path))
        self.assertEqual(self.in_head(path), head)
        harness.kill()
        harness.wait()
        self.assertEqual(self.refused(handle), ["runtime-inside", "unexamined"])
        self.coord("bye", runtime=by_cwd["id"], check=0)
        self.assertEqual(self.refused(handle), ["dirty"], "with nothing inside, the snapshot runs again")

    def test_unregistered_process_inside_blocks(self):
        handle, path, _ = self.create("shell")
        self.gate(handle)
        os.mkdir(os.path.join(path, "sub"))
        proc = self.spawn(os.path.join(path, "sub"))
        ops = self.ops(path)
        self.assertEqual(self.refused(handle), ["process-inside", "unexamined"])
        out = self.work("remove", handle, "--confirm", handle)
        self.assertIn("process %d (sleep)" % proc.pid, out.stderr)
        self.assertEqual(self.kept_by_gc(), {handle: ["process-inside", "unexamined"]})
        self.assertEqual(self.ops(path), ops)
        proc.kill()
        proc.wait()
        self.work("remove", handle, "--confirm", handle, check=0)
        self.assertFalse(os.path.lexists(path))

    def test_a_clone_jj_cannot_read_is_refused_never_deleted_by_a_fallback(self):
        # A stale-worktree cleanup that fell back to rm -rf deleted untracked code: here jj fails
        # on a real broken clone, then the clone has no .jj at all; both refuse, and gc keeps it.
        handle, path, _ = self.create("stale")
        self.gate(handle)
        self.write(path, "src/new.py", "uncommitted code\n")
        shutil.rmtree(os.path.join(path, ".jj", "repo", "op_heads"))
        self.assertEqual(self.refused(handle), ["jj-failed"])
        self.assertEqual(self.kept_by_gc(), {handle: ["jj-failed"]})
        shutil.rmtree(os.path.join(path, ".jj"))
        self.assertEqual(self.refused(handle), ["not-jj"])
        self.assertEqual(self.kept_by_gc(), {handle: ["not-jj"]})
        with open(os.path.join(path, "src", "new.py")) as f:
            self.assertEqual(f.read(), "uncommitted code\n")

    def test_gc_removes_the_idle_clone_and_spares_a_sibling_a_background_process_still_uses(self):
        # Recycling destroyed live sibling sessions' worktrees, and auto-cleanup removed one a
        # nested background agent still used: both siblings are gated and clean, one has a
        # detached process (no harness above it) in a subdirectory; gc takes only the idle one.
        idle, idle_path, _ = self.create("idle")
        busy, busy_path, _ = self.create("busy")
        self.write(busy_path, "src/kept.txt", "committed by the sibling\n")
        self.jj(busy_path, "describe", "-m", "the sibling's change")
        landed = self.commit_of(busy_path, "@")  # landed, so the sibling is clean and integrated
        self.git(self.canon, "fetch", "-q", busy_path, landed)
        self.git(self.canon, "update-ref", "refs/heads/main", landed)
        self.jj(busy_path, "git", "fetch")
        for h in (idle, busy):
            self.gate(h)
        background = subprocess.Popen(["sleep", "300"], cwd=os.path.join(busy_path, "src"), start_new_session=True)
        self.addCleanup(background.wait)
        self.addCleanup(background.kill)
        gc = self.work_json("gc")
        self.assertEqual([r["handle"] for r in gc["removed"]], [idle])
        self.assertEqual({k["handle"]: [r["code"] for r in k["reasons"]] for k in gc["kept"]},
                         {busy: ["process-inside", "unexamined"]})
        self.assertFalse(os.path.lexists(idle_path))
        self.assertIsNone(background.poll(), "the background process still runs")
        with open(os.path.join(busy_path, "src", "kept.txt")) as f:
            self.assertEqual(f.read(), "committed by the sibling\n")

    def test_changes_between_the_evidence_and_the_delete_put_the_clone_back(self):
        path = os.path.join(self.tmp, "late")
        os.makedirs(os.path.join(path, "src"))
        self.write(path, "src/kept.py", "kept\n")
        time.sleep(0.2)  # setup: the file is older than the evidence taken next
        w = {"path": path, "handle": "late-handle", "data": {}, "evidence_at": time.time()}
        self.write(path, "src/late.py", "written after the evidence\n")
        with self.assertRaises(store.Refused) as caught:
            cleanup._delete_checkout(None, w)
        self.assertIn("changed while being removed (src/late.py)", caught.exception.message)
        self.assertEqual(sorted(os.listdir(os.path.join(path, "src"))), ["kept.py", "late.py"])
        self.assertEqual(os.listdir(self.tmp).count("late"), 1)
        self.assertFalse([n for n in os.listdir(self.tmp) if ".removing-" in n])
        # A process that entered after the evidence puts it back too.
        time.sleep(0.2)
        w["evidence_at"] = time.time()
        proc = self.spawn(os.path.join(path, "src"))
        with self.assertRaises(store.Refused) as caught:
            cleanup._delete_checkout(None, w)
        self.assertIn("process %d" % proc.pid, caught.exception.message)
        self.assertTrue(os.path.isfile(os.path.join(path, "src", "late.py")))
        proc.kill()
        proc.wait()
        # Control: nothing changed after the evidence, so it is deleted.
        cleanup._delete_checkout(None, w)
        self.assertFalse(os.path.lexists(path))


class AdoptTest(WorkTestCase):

    def test_adopt_after_database_loss(self):
        handle, path, _ = self.create("survivor")
        wid = self.record(handle)["id"]
        with open(os.path.join(path, ".jj", "coord-owner")) as f:
            old_token = json.load(f)["token"]
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(self.db + suffix):
                os.unlink(self.db + suffix)
        self.rt = self.hello()["runtime"]
        self.assertEqual(self.work_json("list")["work"], [])
        proc = self.work("adopt", path, check=0)
        self.assertEqual(proc.stdout.strip(), handle)
        rec = self.record(handle)
        self.assertEqual(rec["id"], wid)
        self.assertEqual(rec["task"], "survivor")
        with open(os.path.join(path, ".jj", "coord-owner")) as f:
            self.assertNotEqual(json.load(f)["token"], old_token)
        proc = self.work("adopt", path)
        self.assertEqual(proc.returncode, 3)
        self.assertIn("already registered", proc.stderr)
        self.gate(handle)
        self.work("remove", handle, "--confirm", handle, check=0)
        self.assertFalse(os.path.lexists(path))

    def lose_database(self):
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(self.db + suffix):
                os.unlink(self.db + suffix)
        self.rt = self.hello()["runtime"]

    def test_a_clone_landed_by_a_rebase_adopts_as_integrated(self):
        handle, path, _ = self.create("rebased")
        self.write(path, "feature.txt", "feature\n")
        self.jj(path, "describe", "-m", "add feature.txt")
        mine = self.commit_of(path, "@")
        # main moved on, and the work landed rebased onto it (a scratch landing cherry-picks: new commit IDs)
        tree = os.path.join(self.tmp, "side-tree")
        self.git(self.canon, "worktree", "add", "-q", "--detach", tree, "main")
        self.write(tree, "upstream.txt", "upstream\n")
        self.git(tree, "add", "-A")
        who = ["-c", "user.name=Up Stream", "-c", "user.email=up@example.com"]
        self.git(tree, *who + ["commit", "-q", "-m", "upstream"])
        self.git(tree, "fetch", "-q", path, mine)
        self.git(tree, *who + ["cherry-pick", mine])
        landed = self.git(tree, "rev-parse", "HEAD").stdout.strip()
        self.git(self.canon, "update-ref", "refs/heads/main", landed)
        self.lose_database()
        self.work("adopt", path, check=0)
        integ = self.record(handle)["data"]["integration"]
        self.assertEqual((integ["state"], integ["proof"]["rebased"]), ("integrated", [mine]))
        self.work("remove", handle, "--confirm", handle, check=0)
        self.assertFalse(os.path.lexists(path))

    def test_a_clone_whose_change_is_not_on_main_is_not_taken_for_landed(self):
        handle, path, _ = self.create("unlanded")
        self.write(path, "feature.txt", "feature\n")
        self.jj(path, "describe", "-m", "add feature.txt")
        self.lose_database()
        self.work("adopt", path, check=0)
        self.assertEqual(self.record(handle)["data"]["integration"]["state"], "none")

    def test_send_to_an_adopted_work_reaches_the_agent_working_in_it(self):
        handle, path, _ = self.create("agented")
        self.lose_database()
        agent = self.hello(cwd=path)["runtime"]  # its next hook registers it again, in the clone
        self.work("adopt", path, check=0)
        reply = self.coord_json("send", "hello there", "--to", handle, runtime=self.rt["id"], cwd=self.canon)
        self.assertEqual(reply["recipients"], [agent["handle"]])
        # adopted by the person, with no agent in it: refused, naming how to get one, not delivered to the person
        other, other_path, _ = self.create("agentless")
        self.lose_database()
        person = support.person_terminal(self, self.canon)
        rc, out = person.coord("work", "adopt", other_path)
        self.assertEqual(rc, 0, out)
        rc, out = person.coord("send", "anyone?", "--to", other)
        self.assertEqual(rc, 3, out)
        self.assertIn("records no agent", out)
        self.assertIn("work start %s" % other, out)

    def test_work_list_with_no_records_names_the_clones_to_adopt(self):
        self.create("survivor")
        self.assertEqual(self.work("list", check=0).stdout, "".join(
            l + "\n" for l in self.work("list", check=0).stdout.splitlines()))
        self.lose_database()
        out = self.work("list", check=0).stdout.strip().splitlines()
        self.assertEqual(len(out), 1, out)
        self.assertIn("1 clone(s) to adopt", out[0])
        self.assertTrue(out[0].endswith("work adopt --list"), out[0])
        self.assertEqual(self.work_json("list")["adoptable"], 1)

    def test_adopt_refuses_what_it_cannot_prove(self):
        handle, path, _ = self.create("survivor")
        os.unlink(self.db)
        self.rt = self.hello()["runtime"]
        outside = os.path.join(self.tmp, "outside-clone")
        self.jj(self.tmp, "git", "clone", "--colocate", self.canon, outside)
        proc = self.work("adopt", outside)
        self.assertEqual(proc.returncode, 3)
        self.assertIn("not below the scratch root", proc.stderr)
        plain = os.path.join(self.scratch, "plain")
        self.jj(self.tmp, "git", "clone", "--colocate", self.canon, plain)
        proc = self.work("adopt", plain)
        self.assertEqual(proc.returncode, 3)
        self.assertIn("agent-<work id>", proc.stderr)
        proc = self.work("adopt", path, "--expect-commit", self.main0)
        self.assertEqual(proc.returncode, 3)
        self.assertIn("not the expected", proc.stderr)
        shutil.rmtree(os.path.join(path, ".git"))
        proc = self.work("adopt", path)
        self.assertEqual(proc.returncode, 3)
        self.assertIn("no .git", proc.stderr)
        self.assertEqual(self.work_json("list")["work"], [])


@support.slow
class AdoptLoopTest(WorkTestCase):
    """A clone adopted into another database: remove, adopt and --forget point at one way out that
    deletes nothing, and the other database still holds the clone."""

    def test_forget_is_the_way_out_and_deletes_nothing(self):
        handle, path, _ = self.create("moved")
        self.gate(handle)
        env2 = {"COORD_DB": os.path.join(self.tmp, "other", "db.sqlite3")}
        rt2 = self.coord_json("hello", "--conversation", "other-db", env=env2)["runtime"]
        self.assertEqual(self.coord("work", "adopt", path, runtime=rt2["id"], env=env2, cwd=self.canon,
                                    check=0).stdout.strip(), handle)
        proc = self.work("remove", handle, "--confirm", handle)
        self.assertEqual(proc.returncode, 3)
        self.assertIn("--forget", proc.stderr)
        proc = self.work("adopt", path)
        self.assertEqual(proc.returncode, 3)
        self.assertIn("already registered", proc.stderr)
        self.assertIn("coord work remove %s --confirm %s --forget" % (handle, handle), proc.stderr)
        proc = self.work("remove", handle, "--confirm", handle, "--forget", check=0)
        self.assertIn("its clone stays at %s" % path, proc.stdout)
        self.assertTrue(os.path.isdir(path))
        self.assertEqual(self.work_json("list")["work"], [])
        # The database that adopted it still holds it, with every proof it needs.
        self.coord("work", "gate", handle, "--pass", runtime=rt2["id"], env=env2, check=0)
        self.coord("work", "remove", handle, "--confirm", handle, runtime=rt2["id"], env=env2, cwd=self.canon,
                   check=0)
        self.assertFalse(os.path.lexists(path))

    def test_forget_refuses_a_clone_that_is_still_this_records(self):
        handle, path, _ = self.create("mine")
        proc = self.work("remove", handle, "--confirm", handle, "--forget")
        self.assertEqual(proc.returncode, 3)
        self.assertIn("carries this record's marker", proc.stderr)
        self.assertTrue(os.path.isdir(path))
        self.assertEqual(self.record(handle)["state"], "active")


class SessionEndLosesNothingTest(TmuxWorkCase):
    """The field's losses at a session's end (docs/cleanup.md, Nothing is lost): a harness ended
    by Ctrl-C or a killed window, a relaunch after the clone moved, a reboot. The clone, its
    commits and bookmark stay; a relaunch goes to the work's own clone or nowhere."""

    def setUp(self):
        super().setUp()
        os.environ["FAKE_HOOK"] = self.env["FAKE_HOOK"] = "1"  # the stand-in runs coord's SessionStart hook
        os.environ["FAKE_SESSION_END"] = self.env["FAKE_SESSION_END"] = "1"  # and SessionEnd when hung up
        self.addCleanup(os.environ.pop, "FAKE_HOOK", None)
        self.addCleanup(os.environ.pop, "FAKE_SESSION_END", None)

    def tmux(self, *args):
        subprocess.run([self.tmux_bin, "-S", self.sock] + list(args), check=True, timeout=10)

    def working(self, task):
        """A started work with a committed change and an uncommitted file; -> (handle, path, commit)."""
        handle, path, _ = self.create(task)
        self.write(path, "done.txt", "committed\n")
        self.jj(path, "commit", "-m", "the agent's committed change")
        self.write(path, "wip.txt", "uncommitted\n")
        self.gate(handle)
        self.work("start", handle, check=0)
        self.registered_window(handle)
        return handle, path, self.commit_of(path, "@-")

    @staticmethod
    def exited(pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                return f.read().rsplit(") ", 1)[1].startswith("Z")
        except FileNotFoundError:
            return True

    def launches(self):
        return sorted(f for f in os.listdir(self.rec) if f.endswith(".json") and f.count(".") == 1)

    def test_ctrl_c_twice_or_a_killed_window_keeps_the_clone_its_commits_and_bookmark(self):
        canon_refs = self.git(self.canon, "for-each-ref").stdout
        works = [self.working("ctrl-c"), self.working("hung-up")]
        pane = self.record(works[0][0])["data"]["tmux"]["pane_id"]
        self.tmux("send-keys", "-t", pane, "C-c", "C-c")  # Ctrl-C twice ends the harness
        self.tmux("kill-window", "-t", self.record(works[1][0])["data"]["tmux"]["window_id"])  # SIGHUP, SessionEnd
        support.retry_until(lambda: not self.windows(), timeout=30)
        for handle, _, _ in works:  # each harness exits in its own time (SessionEnd first, when hung up)
            support.retry_until(lambda: self.exited(self.record(handle)["data"]["tmux"]["pane_pid"]), timeout=30)
        for task, (handle, _, _) in zip(("ctrl-c", "hung-up"), works):
            support.retry_until(lambda: "%s  %s  interrupted" % (handle, task) in self.work("list", check=0).stdout,
                                timeout=30)
        for handle, path, commit in works:
            self.work("close", handle, check=0)
        kept = {k["handle"]: [r["code"] for r in k["reasons"]] for k in self.work_json("gc")["kept"]}
        self.assertEqual(kept, {h: ["dirty", "unintegrated"] for h, _, _ in works})
        for handle, path, commit in works:
            for name, text in (("done.txt", "committed\n"), ("wip.txt", "uncommitted\n")):
                with open(os.path.join(path, name)) as f:
                    self.assertEqual(f.read(), text)
            self.assertEqual(self.jj(path, "log", "--no-graph", "-r", commit, "-T", "description").strip(),
                             "the agent's committed change")
            bookmark = "agent/%s/%s" % (self.record(handle)["task"], self.record(handle)["id"])
            self.assertIn(bookmark, self.jj(path, "bookmark", "list", "-T", 'name ++ "\\n"').split())
        self.assertEqual(self.git(self.canon, "for-each-ref").stdout, canon_refs, "no shared branch touched")

    def test_resume_after_the_clone_moved_refuses_and_launches_nowhere(self):
        a, a_path, _ = self.create("first")
        b, b_path, _ = self.create("second")
        for h in (a, b):
            self.work("start", h, check=0)
            self.registered_window(h)
            self.work("park", h, "--reason", "later", check=0)
        started = self.launches()
        os.rename(a_path, a_path + ".moved")
        proc = self.work("resume", a, "--conversation", "conv-a")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        self.assertIn("is gone", proc.stderr)
        os.rename(b_path, a_path)  # another work's clone where this one's was
        for h, said in ((a, "ownership marker"), (b, "is gone")):
            proc = self.work("resume", h, "--conversation", "conv-x")
            self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
            self.assertIn(said, proc.stderr)
        self.assertEqual((self.windows(), self.launches()), ([], started), "nothing launched anywhere")
        os.rename(a_path, b_path)
        os.rename(a_path + ".moved", a_path)
        self.work("resume", a, "--conversation", "conv-a", check=0)  # back in place: its own clone only
        new = support.retry_until(lambda: [f for f in self.launches() if f not in started])
        run = []
        for name in new:
            with open(os.path.join(self.rec, name)) as f:
                run.append(json.load(f))
        self.assertEqual([(os.path.realpath(r["cwd"]), r["env"]["COORD_WORK_ID"]) for r in run],
                         [(a_path, self.record(a)["id"])])

    def test_a_reboot_leaves_the_clones_list_and_adopt_find_them(self):
        # Worktrees in the system temp directory were lost at reboot: coord's defaults are not there.
        for temporary in ("/tmp", "/run", "/dev/shm", "/var/run", "/var/lock", tempfile.gettempdir()):
            self.assertFalse(store.within(workspace.DEFAULT_SCRATCH_ROOT, temporary),
                             "the default scratch root is in %s, emptied at boot" % temporary)
        self.assertTrue(store.within(store.state_dir({}), os.path.expanduser("~")), "the database is in HOME")
        handle, path, _ = self.create("long")
        self.write(path, "wip.txt", "uncommitted\n")
        with open(os.path.join(self.scratch, "leftover.lock"), "w"):
            pass
        for name in os.listdir(self.scratch):  # the reboot: everything but the clones is gone
            if os.path.join(self.scratch, name) != path:
                os.unlink(os.path.join(self.scratch, name))
        self.assertIn("%s  long  active" % handle, self.work("list", check=0).stdout)
        self.assertEqual(self.refused(handle), ["ungated", "dirty"])
        for suffix in ("", "-wal", "-shm"):  # and the database is lost too
            if os.path.exists(self.db + suffix):
                os.unlink(self.db + suffix)
        self.rt = self.hello()["runtime"]
        self.assertIn("1 clone(s) to adopt", self.work("list", check=0).stdout)
        self.assertEqual(self.work("adopt", path, check=0).stdout.strip(), handle)
        with open(os.path.join(path, "wip.txt")) as f:
            self.assertEqual(f.read(), "uncommitted\n")
