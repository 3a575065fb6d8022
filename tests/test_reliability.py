"""Reliability gaps not covered elsewhere, with real processes, files, jj, git and tmux.

- tmux missing or failing part-way through `work start`, `work close` and `work resume`, and
  jj failing during `work integrate acquire` and `work remove`: the work record, its recorded
  window IDs, leases and audit rows stay either the old ones or the new ones.
- `./install TARGET --doctor` on a corrupt, a truncated and an unreadable database.
- Hostile identities given to the work commands: refused, nothing changed.
- The installed Claude and Codex hook commands while another process holds the database.
- Terminal escape sequences in task names, reasons, resources and message bodies never reach
  the operator or the model.

Failures are injected with tests/fixtures/reliability/flaky, a copy of which is put first on
PATH under the tool's name and forwards to the real binary except for the calls it must break.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import support
from support import CoordTestCase

import store
import test_workspace

FLAKY = os.path.join(support.FIXTURES, "reliability", "flaky")
INSTALL = os.path.join(support.ROOT, "install")
CONTROL = (b"\x1b", b"\x07", b"\x9b")


class FaultyToolCase(test_workspace.TmuxWorkCase):
    """TmuxWorkCase plus helpers to break jj or tmux on demand."""

    def setUp(self):
        super().setUp()
        self._hints = []

    def flaky(self, tool, on=None, after=None):
        """Environment overrides that put a breaking `tool` first on PATH; returns (env, call log path)."""
        real = shutil.which(tool, path=self.env["PATH"])
        self.assertTrue(real, "%s not on PATH" % tool)
        bindir = tempfile.mkdtemp(prefix="flaky-%s-" % tool, dir=self.tmp)
        shutil.copy(FLAKY, os.path.join(bindir, tool))
        log = os.path.join(bindir, "calls.log")
        env = {"PATH": bindir + os.pathsep + self.env["PATH"], "FLAKY_REAL": real, "FLAKY_LOG": log,
               "FLAKY_COUNTER": os.path.join(bindir, "count")}
        if on:
            env["FLAKY_ON"] = on
        if after is not None:
            env["FLAKY_AFTER"] = str(after)
        return env, log

    def calls(self, log):
        if not os.path.exists(log):
            return []
        with open(log) as f:
            return f.read().splitlines()

    def audit(self):
        return [json.loads(line) for line in self.coord("audit", "--private", check=0).stdout.splitlines()]

    def raw(self, handle):
        """The stored work row (token and all), read straight from the database."""
        st = store.Store(self.db)
        try:
            return st.resolve_work(handle)
        finally:
            st.close()

    def leases(self):
        return sorted((l["resource"], l["runtime"]) for l in self.coord_json("list", "--all")["leases"])

    def assert_clean_error(self, proc, code):
        self.assertEqual(proc.returncode, code, "stdout: %s\nstderr: %s" % (proc.stdout, proc.stderr))
        self.assertNotIn("Traceback", proc.stderr)
        self.assertTrue(proc.stderr.startswith("coord: "), proc.stderr)
        self._hints.append(proc)

    def assert_hints(self):
        for proc in self._hints:
            self.assertIn("next:", proc.stderr, "an error without the next command to run: %s" % proc.stderr)


class TmuxFaultTest(FaultyToolCase):

    def started(self, task="tmuxed"):
        handle, path, _ = self.create(task)
        self.work("start", handle, check=0)
        return handle, path

    def test_start_without_tmux_on_path_is_an_environment_error_and_changes_nothing(self):
        handle, path, _ = self.create("notmux")
        bindir = os.path.join(self.tmp, "no-tmux-bin")
        os.mkdir(bindir)
        for tool in ("jj", "git"):
            os.symlink(shutil.which(tool, path=self.env["PATH"]), os.path.join(bindir, tool))
        before, audit = self.raw(handle), self.audit()
        proc = self.work("start", handle, env={"PATH": bindir})
        self.assert_clean_error(proc, 4)
        self.assertIn("tmux not found", proc.stderr)
        self.assertEqual(self.raw(handle), before, "a start without tmux must leave the record as it was")
        self.assertNotIn("tmux", self.raw(handle)["data"])
        self.assertEqual(self.audit(), audit)
        self.assertEqual(self.windows(), [])

    def test_start_with_tmux_failing_at_labelling_leaves_no_window_and_no_record(self):
        handle, path, _ = self.create("labels")
        before, audit = self.raw(handle), self.audit()
        env, log = self.flaky("tmux", on="set-option")
        proc = self.work("start", handle, env=env)
        self.assert_clean_error(proc, 4)
        self.assertTrue(any(c.startswith("FAIL ") for c in self.calls(log)), "the failure was never injected")
        self.assertEqual(self.raw(handle), before)
        self.assertEqual(self.audit(), audit)
        self.assertEqual(self.windows(), [], "the unlabelled window must be killed, not left unrecorded")
        # Nothing half-done blocks the next attempt.
        self.work("start", handle, check=0)
        rec = self.record(handle)
        self.assertEqual(rec["state"], "active")
        self.assertEqual(self.windows(), [rec["data"]["tmux"]["window_id"]])

    def test_start_with_tmux_dying_after_the_window_opened_says_what_was_left(self):
        handle, path, _ = self.create("dying")
        before, audit = self.raw(handle), self.audit()
        env, log = self.flaky("tmux", after=1)  # new-session works, every later call fails
        proc = self.work("start", handle, env=env)
        self.assert_clean_error(proc, 4)
        self.assertTrue(any(c.startswith("FAIL ") for c in self.calls(log)), self.calls(log))
        self.assertEqual(self.raw(handle), before, "the record keeps the old state and IDs")
        self.assertEqual(self.audit(), audit)
        left = self.windows()
        if left:
            # tmux could not kill the window it failed to label, and the harness runs in it: the
            # operator must be told which window was left behind (its ID also appears in the
            # failed command line, so a bare ID is not enough: the message must say it was left).
            said = [l for l in proc.stderr.splitlines()
                    if any(w in l for w in left) and any(k in l for k in ("left", "still", "not closed", "orphan"))]
            self.assertTrue(said, "window %s was left running, unrecorded, and the error does not say so: %s"
                            % (left, proc.stderr))

    def test_close_with_tmux_failing_at_kill_keeps_the_recorded_window(self):
        handle, path = self.started()
        rec = self.record(handle)
        audit = self.audit()
        env, log = self.flaky("tmux", on="kill-window")
        proc = self.work("close", handle, env=env)
        self.assert_clean_error(proc, 4)
        self.assertTrue(any(c.startswith("FAIL kill-window") or " kill-window " in c for c in self.calls(log)))
        after = self.record(handle)
        self.assertEqual(after["state"], "active")
        self.assertEqual(after["data"]["tmux"], rec["data"]["tmux"])
        self.assertEqual(self.audit(), audit, "no work.closed row for a window that still runs")
        self.assertEqual(self.windows(), [rec["data"]["tmux"]["window_id"]])
        self.work("close", handle, check=0)
        self.assertEqual(self.record(handle)["state"], "closed")
        self.assertEqual(self.windows(), [])

    def test_server_killed_between_start_and_close_then_resume(self):
        handle, path = self.started()
        old = self.record(handle)["data"]["tmux"]
        self.kill_server()
        support.retry_until(lambda: not self.windows())
        proc = self.work("close", handle, "--json", check=0)
        self.assertIn("window not closed", json.loads(proc.stdout)["window"])
        rec = self.record(handle)
        self.assertEqual(rec["state"], "closed")
        closed = [a for a in self.audit() if a["event"] == "work.closed" and a["subject"] == rec["id"]]
        self.assertEqual(len(closed), 1)
        self.assertEqual(closed[0]["data"]["window"], old["window_id"])
        self.work("resume", handle, "--conversation", "conv-after-crash", check=0)
        rec = self.record(handle)
        new = rec["data"]["tmux"]
        self.assertEqual(rec["state"], "resumed")
        self.assertNotEqual(new["server_pid"], old["server_pid"])
        self.assertEqual(self.windows(), [new["window_id"]])
        self.assertIn("running", self.work("inspect", handle, check=0).stdout)
        resumed = [a for a in self.audit() if a["event"] == "work.resumed" and a["subject"] == rec["id"]]
        self.assertEqual([a["data"]["window"] for a in resumed], [new["window_id"]])

    def test_resume_with_tmux_failing_keeps_the_parked_record(self):
        handle, path = self.started()
        self.work("park", handle, "--reason", "review", check=0)
        before, audit = self.raw(handle), self.audit()
        self.assertEqual(self.windows(), [])
        for env_args in ({"on": "set-option"}, {"on": "new-session"}):
            with self.subTest(**env_args):
                env, log = self.flaky("tmux", **env_args)
                proc = self.work("resume", handle, "--conversation", "conv-1", env=env)
                self.assert_clean_error(proc, 4)
                self.assertTrue(any(c.startswith("FAIL ") for c in self.calls(log)), self.calls(log))
                self.assertEqual(self.raw(handle), before)
                self.assertEqual(self.audit(), audit)
                self.assertEqual(self.windows(), [])
        self.work("resume", handle, "--conversation", "conv-1", check=0)
        self.assertEqual(self.record(handle)["state"], "resumed")


class JjFaultTest(FaultyToolCase):

    def test_tool_failures_name_the_next_command(self):
        """Kept apart from the consistency tests so that one missing hint does not hide them."""
        handle, path, _ = self.create("hinted")
        self.write(path, "feature.txt", "feature\n")
        env, _ = self.flaky("jj", on="log")
        self.assert_clean_error(self.work("integrate", "acquire", handle, "--into", "main", env=env), 4)
        self.work("start", handle, check=0)
        env, _ = self.flaky("tmux", on="kill-window")
        self.assert_clean_error(self.work("close", handle, env=env), 4)
        env, _ = self.flaky("tmux", on="new-session")
        self.work("park", handle, "--reason", "r", check=0)
        self.assert_clean_error(self.work("resume", handle, "--conversation", "c", env=env), 4)
        self.assert_hints()

    def test_acquire_with_jj_failing_holds_no_lease_and_freezes_nothing(self):
        handle, path, _ = self.create("feature")
        self.write(path, "feature.txt", "feature\n")
        for word in ("log", "bookmark"):
            with self.subTest(failing="jj " + word):
                before, audit, leases = self.raw(handle), self.audit(), self.leases()
                env, log = self.flaky("jj", on=word)
                proc = self.work("integrate", "acquire", handle, "--into", "main", env=env)
                self.assert_clean_error(proc, 4)
                self.assertTrue(any(c.startswith("FAIL ") for c in self.calls(log)), self.calls(log))
                self.assertEqual(self.leases(), leases, "no integration lease without a frozen candidate")
                self.assertEqual(self.raw(handle)["data"]["integration"], before["data"]["integration"])
                self.assertEqual([a for a in self.audit() if a["event"].startswith("work.integration")],
                                 [a for a in audit if a["event"].startswith("work.integration")])
        reply = self.work_json("integrate", "acquire", handle, "--into", "main")
        self.assertEqual(reply["resource"], "integration/main")
        self.assertIn(("integration/main", self.rt["id"]), self.leases())

    def test_remove_with_jj_failing_keeps_directory_and_record(self):
        handle, path, _ = self.create("gone")
        self.gate(handle)
        before = self.raw(handle)
        env, log = self.flaky("jj", on="log")
        proc = self.work("remove", handle, "--confirm", handle, "--json", env=env)
        self.assert_clean_error(proc, 3)
        self.assertIn("jj-failed", [r["code"] for r in json.loads(proc.stdout)["reasons"]])
        self.assertTrue(os.path.isdir(os.path.join(path, ".jj")))
        after = self.raw(handle)
        self.assertEqual((after["state"], after["token"], after["path"]), (before["state"], before["token"],
                                                                          before["path"]))
        self.assertFalse([a for a in self.audit() if a["event"] == "work.removed"])
        self.work("remove", handle, "--confirm", handle, check=0)
        self.assertFalse(os.path.lexists(path))

    def test_remove_native_workspace_with_forget_failing_keeps_everything(self):
        proc = self.work("create", "shared", "--native-workspace", check=0)
        handle, path = proc.stdout.splitlines()[:2]
        wid = self.record(handle)["id"]
        self.gate(handle)
        before, audit = self.raw(handle), self.audit()
        env, log = self.flaky("jj", on="forget")
        proc = self.work("remove", handle, "--confirm", handle, env=env)
        self.assertIn(proc.returncode, (3, 4), proc.stderr)
        self.assert_clean_error(proc, proc.returncode)
        self.assertTrue(any(c.startswith("FAIL ") for c in self.calls(log)), self.calls(log))
        self.assertTrue(os.path.isdir(path), "the checkout must survive a failed forget")
        self.assertTrue(os.path.exists(os.path.join(path, ".jj", "coord-owner")))
        self.assertEqual(self.raw(handle)["state"], before["state"])
        self.assertEqual(self.audit(), audit)
        self.assertIn("agent-" + wid, self.jj(self.canon, "workspace", "list"))
        self.work("remove", handle, "--confirm", handle, check=0)
        self.assertFalse(os.path.lexists(path))
        self.assertNotIn("agent-" + wid, self.jj(self.canon, "workspace", "list"))


class HostileIdentityTest(FaultyToolCase):
    """Near-miss identities never resolve to a record, through any work command."""

    def snapshot(self):
        return (self.coord("work", "list", "--all", "--json", check=0).stdout, self.audit(), self.leases(),
                sorted(os.listdir(self.scratch)))

    def test_near_miss_identities_are_refused_and_change_nothing(self):
        handle, path, _ = self.create("target")
        wid = self.record(handle)["id"]
        words = handle.split("-")
        other = next(w for w in self.rt["handle"].split("-") + ["zebra", "apple"] if w not in words)
        changed = "-".join(words[:-1] + [other])
        hostile = {
            "handle prefix": "-".join(words[:3]),
            "handle minus one word": "-".join(words[:4]),
            "one word changed": changed,
            "uuid prefix": wid[:8],
            "uuid minus one char": wid[:-1],
            "runtime handle": self.rt["handle"],
            "runtime uuid": self.rt["id"],
            "handle with trailing junk": handle + "-x",
            "glob": words[0] + "-*",
        }
        commands = [
            ("inspect", "{}"), ("gate", "{}", "--pass"), ("park", "{}", "--reason", "r"), ("close", "{}"),
            ("start", "{}"), ("resume", "{}", "--conversation", "c"), ("attach", "{}"),
            ("integrate", "acquire", "{}", "--into", "main"), ("integrate", "enqueue", "{}", "--into", "main"),
            ("integrate", "prove", "{}", "--target", "a" * 40), ("integrate", "release", "{}"),
            ("remove", "{}", "--confirm", "{}"), ("remove", handle, "--confirm", "{}"),
            ("create", "other", "--depends", "{}"),
        ]
        before = self.snapshot()
        for name, token in hostile.items():
            for cmd in commands:
                argv = [token if a == "{}" else a for a in cmd]
                with self.subTest(identity=name, command=" ".join(cmd)):
                    proc = self.work(*argv)
                    self.assertIn(proc.returncode, (2, 3), "%s: %s %s" % (argv, proc.stdout, proc.stderr))
                    self.assertNotIn("Traceback", proc.stderr)
                    self.assertTrue(proc.stderr.startswith("coord: "), proc.stderr)
                    self.assertIn("next:", proc.stderr)
                    self.assertEqual(self.snapshot(), before, "%s changed state" % (argv,))
        self.assertEqual(self.windows(), [])


def _read(path):
    with open(path, "rb") as f:
        return f.read()


class DoctorDatabaseTest(CoordTestCase):
    """install --doctor names what is wrong with the database; drift alone sets its exit status."""

    def setUp(self):
        super().setUp()
        support.require_tool(self, "git")
        self.codex_home = os.path.join(self.tmp, "codex-home")
        os.makedirs(self.codex_home)
        self.env["CODEX_HOME"] = self.codex_home
        self.target = os.path.join(self.tmp, "target")
        subprocess.run(["git", "init", "-q", self.target], check=True, env=self.env)
        self.run_install(INSTALL, self.target, "--project-id", "demo", check=0)
        st = store.Store(self.db)
        rt = st.register()
        for i in range(200):  # several pages, so a cut loses real data
            st.claim(rt["id"], ["src/file%03d.py" % i], purpose="p" * 200)
        st.close()
        self.assertFalse(os.path.exists(self.db + "-wal"), "a closed store leaves no WAL behind")

    def run_install(self, install, target, *args, check=None, preexec_fn=None, python=sys.executable):
        proc = subprocess.run([python, install, target] + list(args), env=self.env, cwd="/",
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120,
                              preexec_fn=preexec_fn)
        if check is not None:
            self.assertEqual(proc.returncode, check, proc.stdout + proc.stderr)
        return proc

    def db_line(self, text):
        lines = [l for l in text.splitlines() if l.startswith("database:")]
        self.assertEqual(len(lines), 1, text)
        return lines[0]

    def doctor(self, **kw):
        proc = self.run_install(INSTALL, self.target, "--doctor", **kw)
        self.assertNotIn("Traceback", proc.stderr)
        return proc

    def test_healthy_database_line(self):
        proc = self.doctor(check=0)
        line = self.db_line(proc.stdout)
        self.assertIn(self.db, line)
        self.assertIn("journal wal", line)

    def test_corrupt_header_is_named(self):
        with open(self.db, "r+b") as f:
            f.write(b"this is no database header" * 4)
        before = _read(self.db)
        proc = self.doctor(check=0)
        line = self.db_line(proc.stdout)
        self.assertIn(self.db, line)
        self.assertIn("not an SQLite database", line)
        self.assertEqual(_read(self.db), before, "doctor never writes the database")

    def test_corrupt_pages_behind_a_good_header_are_named(self):
        size = os.path.getsize(self.db)
        with open(self.db, "r+b") as f:
            f.seek(4096)
            f.write(os.urandom(size - 4096))
        proc = self.doctor(check=0)
        line = self.db_line(proc.stdout)
        self.assertNotIn("journal wal, schema", line,
                         "a database whose pages are garbage is reported as healthy: %s" % line)
        self.assertRegex(line, r"damaged|corrupt|malformed|unreadable")

    def test_truncated_database_is_named(self):
        data = _read(self.db)
        with open(self.db, "wb") as f:
            f.write(data[:len(data) // 3 + 100])
        proc = self.doctor(check=0)
        line = self.db_line(proc.stdout)
        self.assertIn(self.db, line)
        self.assertNotIn("journal wal, schema", line,
                         "a database cut to a third of its size is reported as healthy: %s" % line)
        self.assertRegex(line, r"truncated|damaged|corrupt|malformed|unreadable")

    def test_unreadable_database_is_named(self):
        if os.getuid() != 0:
            os.chmod(self.db, 0)
            self.addCleanup(os.chmod, self.db, 0o600)
            proc = self.doctor(check=0)
        else:
            # Root reads any file: run a copy of the installer as `nobody`, against a copy of the
            # target and the database in a directory that user can reach (/tmp here is 0700).
            demote = support.demote_to_nobody()
            python = "/usr/bin/python3"
            if demote is None or not os.access(python, os.X_OK):
                self.skipTest("no unprivileged user or system python3 to run as")
            shared = [d for d in ("/var/tmp", "/dev/shm") if os.path.isdir(d) and os.stat(d).st_mode & 0o001]
            if not shared:
                self.skipTest("no directory an unprivileged user can reach")
            base = tempfile.mkdtemp(prefix="coord-doctor-", dir=shared[0])
            self.addCleanup(shutil.rmtree, base, True)
            src = os.path.join(base, "src")
            shutil.copytree(support.ROOT, src, ignore=shutil.ignore_patterns(".git", "__pycache__", "tests",
                                                                             "bench", ".ci"))
            target = os.path.join(base, "target")
            shutil.copytree(self.target, target, symlinks=True)
            state = os.path.join(base, "state", "fleet-agent-coord")
            os.makedirs(state)
            db = os.path.join(state, "demo.sqlite3")
            shutil.copy(self.db, db)
            home = os.path.join(base, "home")
            os.makedirs(os.path.join(home, "codex"))
            for dirpath, dirnames, filenames in os.walk(base):
                os.chmod(dirpath, 0o755)
                for fn in filenames:
                    p = os.path.join(dirpath, fn)
                    if not os.path.islink(p):
                        os.chmod(p, 0o755 if os.access(p, os.X_OK) else 0o644)
            os.chmod(db, 0o600)  # owned by root: nobody may see it but not open it
            self.env.update({"HOME": home, "XDG_STATE_HOME": os.path.join(base, "state"), "COORD_DB": db,
                             "COORD_PROJECT_ID": "demo", "CODEX_HOME": os.path.join(home, "codex")})
            probe = subprocess.run([python, "-c", "open(%r, 'rb')" % db], preexec_fn=demote,
                                   stderr=subprocess.PIPE, text=True)
            self.assertNotEqual(probe.returncode, 0, "nobody can read the copy; the test would prove nothing")
            proc = self.run_install(os.path.join(src, "install"), target, "--doctor", preexec_fn=demote,
                                    python=python)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            self.assertNotIn("Traceback", proc.stderr)
            self.db = db
        line = self.db_line(proc.stdout)
        self.assertIn(self.db, line)
        self.assertRegex(line, r"unreadable.*[Pp]ermission denied")


def _holder(db, how):
    """Start a process that holds the database the way `how` says; return it once it holds."""
    if how == "writer":  # BEGIN IMMEDIATE: writers wait; WAL readers still read
        script = ("import sqlite3,sys;c=sqlite3.connect(sys.argv[1],isolation_level=None);"
                  "c.execute('BEGIN IMMEDIATE');print('held',flush=True);sys.stdin.read()")
    else:  # an exclusive-locking-mode writer: nobody else can even read
        script = ("import sqlite3,sys;c=sqlite3.connect(sys.argv[1],isolation_level=None);"
                  "c.execute('PRAGMA locking_mode=EXCLUSIVE');c.execute('BEGIN EXCLUSIVE');"
                  "c.execute('CREATE TABLE IF NOT EXISTS coord_test_lock(x)');"
                  "print('held',flush=True);sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", script, db], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    line = proc.stdout.readline()
    if line.strip() != "held":
        proc.kill()
        proc.wait()
        raise AssertionError("lock holder did not start")
    return proc


class InstalledHookTest(CoordTestCase):
    """The hook commands exactly as the installer writes them, run by a shell."""

    SESSION = "0b5e6f0e-6c4e-4a43-9d87-5a1d1e7c0a11"

    def setUp(self):
        super().setUp()
        support.require_tool(self, "git")
        self.repo = os.path.join(self.tmp, "repo")
        subprocess.run(["git", "init", "-q", self.repo], check=True, env=self.env)
        self.env["CODEX_HOME"] = os.path.join(self.tmp, "codex-home")
        proc = subprocess.run([sys.executable, INSTALL, self.repo, "--project-id", "hooked"], env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for key in ("COORD_DB", "COORD_PROJECT_ID"):
            self.env.pop(key)
        self.db = os.path.join(self.state, "fleet-agent-coord", "hooked.sqlite3")
        os.makedirs(os.path.join(self.repo, "src"))
        self.held = os.path.join(self.repo, "src", "held.py")

    def hook(self, harness, event):
        """(command, timeout) of coord's handler for `event` in the installed config."""
        rel = ".claude/settings.json" if harness == "claude" else ".codex/hooks.json"
        with open(os.path.join(self.repo, rel)) as f:
            groups = json.load(f)["hooks"][event]
        own = [h for g in groups for h in g["hooks"] if ".coord/hook.py" in h["command"]]
        self.assertEqual(len(own), 1)
        return own[0]["command"], own[0]["timeout"]

    def payload(self, harness, event, path=None, **extra):
        p = {"session_id": self.SESSION if harness == "claude" else "01a22af1-31cf-7f50-a411-97b001022a84",
             "transcript_path": os.path.join(self.tmp, "transcript.jsonl"), "cwd": self.repo,
             "hook_event_name": event}
        if harness == "codex":
            p["turn_id"] = "01a22af1-31e6-7820-90fa-c089c2d29b7c"
        if event in ("PreToolUse", "PostToolUse"):
            rel = os.path.relpath(path, self.repo)
            if harness == "claude":
                p.update(tool_name="Write", tool_input={"file_path": path, "content": "x\n"},
                         tool_use_id="toolu_reliability")
            else:
                p.update(tool_name="apply_patch", tool_use_id="call_reliability",
                         tool_input={"command": "*** Begin Patch\n*** Add File: %s\n+x\n*** End Patch\n" % rel})
            if event == "PostToolUse":
                p["tool_response"] = {"type": "create", "filePath": path} if harness == "claude" else "Success"
        if event == "SessionStart":
            p["source"] = "startup"
        if event == "UserPromptSubmit":
            p["prompt"] = "go on"
        p.update(extra)
        return p

    def run_hook(self, harness, event, path=None):
        command, timeout = self.hook(harness, event)
        env = dict(self.env)
        if harness == "claude":
            env["CLAUDE_PROJECT_DIR"] = self.repo
        start = time.monotonic()
        proc = subprocess.run(["sh", "-c", command], input=json.dumps(self.payload(harness, event, path)).encode(),
                              env=env, cwd=self.repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout + 30)
        return proc, time.monotonic() - start, timeout

    def peer_holds(self, purpose="peer work"):
        st = store.Store(self.db)
        try:
            peer = st.register(harness="claude", pid=os.getpid())
            st.claim(peer["id"], ["src/held.py"], purpose=purpose)
            return peer
        finally:
            st.close()

    def assert_no_deny(self, proc):
        self.assertNotIn(b"deny", proc.stdout)
        self.assertNotIn(b'"block"', proc.stdout)

    def test_hooks_under_a_hung_writer_finish_within_their_bound_and_fail_open(self):
        peer = self.peer_holds()
        for harness in ("claude", "codex"):
            proc, _, _ = self.run_hook(harness, "SessionStart")
            self.assertEqual(proc.returncode, 0, proc.stderr)
        # Unlocked, the installed PreToolUse hook does deny: the checks below can fail.
        for harness in ("claude", "codex"):
            proc, _, _ = self.run_hook(harness, "PreToolUse", self.held)
            self.assertIn(b"deny", proc.stdout, (harness, proc.stdout, proc.stderr))
            self.assertIn(peer["handle"].encode(), proc.stdout)
        free = os.path.join(self.repo, "src", "free.py")
        for how in ("writer", "exclusive"):
            holder = _holder(self.db, how)
            try:
                for harness in ("claude", "codex"):
                    for event, path in (("PreToolUse", self.held), ("PreToolUse", free), ("PostToolUse", self.held),
                                        ("UserPromptSubmit", None)):
                        with self.subTest(lock=how, harness=harness, event=event, path=path):
                            proc, elapsed, bound = self.run_hook(harness, event, path)
                            self.assertEqual(proc.returncode, 0, proc.stderr)
                            self.assertLess(elapsed, bound, "%s %s took %.1fs under a %s lock (bound %ss)"
                                            % (harness, event, elapsed, how, bound))
                            if how == "writer" and path == self.held and event == "PreToolUse":
                                # WAL readers are not blocked by a writer: the check still knows.
                                self.assertIn(b"deny", proc.stdout)
                            else:
                                self.assert_no_deny(proc)
                            if how == "exclusive":
                                self.assertIn(b"allowed", proc.stderr, "fail open says so on stderr")
            finally:
                holder.stdin.close()
                holder.wait(timeout=10)
                holder.stdout.close()

    def test_escapes_in_bodies_and_purposes_never_reach_the_model(self):
        self.peer_holds(purpose="\x1b[31mred purpose\x1b[0m\x07")
        proc, _, _ = self.run_hook("claude", "SessionStart")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        st = store.Store(self.db)
        try:
            me = st.find_conversation_runtime(self.SESSION)
            sender = st.register(harness="codex")
            st.send(sender["id"], "look \x1b]0;pwned\x07 here \x1b[2J\x9b31m done\x07", to=me["handle"],
                    kind="note\x1b[5m")
        finally:
            st.close()
        seen = []
        for event, path in (("UserPromptSubmit", None), ("PostToolUse", self.held), ("SessionStart", None),
                            ("PreToolUse", self.held)):
            with self.subTest(event=event):
                proc, _, _ = self.run_hook("claude", event, path)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                for c in CONTROL:
                    self.assertNotIn(c, proc.stdout)
                    self.assertNotIn(c, proc.stderr)
                if proc.stdout.strip():
                    reply = json.loads(proc.stdout)
                    text = json.dumps(reply, ensure_ascii=False)
                    out = reply["hookSpecificOutput"]
                    shown = out.get("additionalContext") or out.get("permissionDecisionReason") or ""
                    for c in ("\x1b", "\x07", "\x9b"):
                        self.assertNotIn(c, shown, "decoded JSON carries a control character")
                    seen.append(text)
        joined = "\n".join(seen)
        self.assertIn("red purpose", joined)
        self.assertIn("here", joined, "the message body was delivered")


class EscapeInWorkTest(FaultyToolCase):

    def assert_clean_bytes(self, args, seen=None):
        proc = subprocess.run([sys.executable, support.COORD] + args, env=dict(self.env, COORD_RUNTIME_ID=self.rt["id"]),
                              cwd=self.canon, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        if seen is not None:
            seen.append(proc.stdout.decode("utf-8", "replace"))
        for c in CONTROL:
            self.assertNotIn(c, proc.stdout, (args, proc.stdout))
            self.assertNotIn(c, proc.stderr, (args, proc.stderr))
        return proc

    def test_escape_task_names_are_refused_and_leave_nothing(self):
        for task in ("\x1b[31mtask", "task\x07", "\x1b]0;title\x07", "ta\x9bsk", "task\x1b[0m"):
            with self.subTest(task=task):
                proc = self.assert_clean_bytes(["work", "create", task])
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertIn(b"next:", proc.stderr)
        self.assertEqual(self.work_json("list", "--all")["work"], [])
        self.assertEqual(os.listdir(self.scratch), [])

    def test_escapes_in_reasons_resources_and_failures_never_reach_the_operator(self):
        evil = "\x1b[31mred\x1b[0m \x1b]0;pwned\x07 \x9b2J end\x07"
        refused = self.assert_clean_bytes(["work", "create", "clean", "--resources", "src/\x1b[1mbold"])
        self.assertEqual(refused.returncode, 2, refused.stderr)
        self.assertEqual(self.work_json("list", "--all")["work"], [])
        handle, path, _ = self.create("clean")
        self.work("gate", handle, "--waive", "--reason", evil, check=0)
        self.work("park", handle, "--reason", evil, check=0)
        failed = self.assert_clean_bytes(["work", "create", "broken", "--from", "nope\x1b[31mx\x07"])
        self.assertEqual(failed.returncode, 4, failed.stderr)
        self.coord("claim", "src/x.py", "-p", evil, runtime=self.rt["id"], check=0)
        failed_handle = [w["handle"] for w in self.work_json("list")["work"] if w["state"] == "failed"][0]
        outputs = []
        for args in (["work", "list"], ["work", "list", "--all"], ["work", "inspect", handle],
                     ["work", "inspect", handle, "--verbose"], ["work", "inspect", failed_handle],
                     ["work", "inspect", failed_handle, "-v"], ["list", "--all"], ["list", "--all", "-v"],
                     ["work", "integrate", "queue"], ["work", "gc", "--dry-run"]):
            with self.subTest(args=args):
                self.assert_clean_bytes(args, outputs)
        joined = "\n".join(outputs)
        self.assertIn("red", joined, "the reason is still shown, cleaned")
        self.assertIn("parked:", joined)
        self.assertIn("failed at", joined)


if __name__ == "__main__":
    unittest.main()
