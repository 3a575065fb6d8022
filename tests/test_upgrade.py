"""Upgrades with live managed clones: two real releases, real jj clones, the real hooks.

The older release is built from this repository's own history (`git archive` of the commit
that set VERSION to OLD_VERSION); the newer one is this checkout, copied, with a throwaway
additive migration added to the copy only. Live clones keep the older committed `.coord/`
while the shared checkout installs the newer one, which is what happens to every running
agent when a person upgrades (DESIGN.md, "Upgrades").
"""

import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import time

import support
from support import CoordTestCase

import store

OLD_VERSION = "0.2.0"
PEER_FILE = "src/shared.py"
# The older release's runtime and docs (git archive of the commit that made it), for clones without history.
RELEASE_COMMIT = "548450aaee5fd7ba6fce429a4e4a68237e8dd665"  # git log -- VERSION: the commit that made 0.2.0
FIXTURE = os.path.join(support.ROOT, "tests", "fixtures", "release-0.2.0.tar.gz")
# The throwaway additive migration the test adds to its copy of the newer release (never to the
# product): a nullable column and a new table, which the older release's statements never see.
PROBE = ('\n_MIGRATIONS[SCHEMA_VERSION] = ["ALTER TABLE work ADD COLUMN upgrade_probe TEXT",\n'
         '                             "CREATE TABLE upgrade_probe (id INTEGER PRIMARY KEY, note TEXT)"]\n')


def _git(args, cwd, env=None):
    return subprocess.run(["git"] + args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=120)


class UpgradeTest(CoordTestCase):
    """Clones carrying the older .coord/ keep registering and denying after the newer install."""

    def setUp(self):
        super().setUp()
        self.use_jj()
        self.old = self.older_release()
        self.new = self.newer_release()

    # -- the two releases

    def older_release(self):
        """The commit that made OLD_VERSION, extracted with git archive (the fixture without history)."""
        found = _git(["cat-file", "-e", RELEASE_COMMIT + "^{commit}"], support.ROOT)
        commit = RELEASE_COMMIT if found.returncode == 0 else None
        dest = os.path.join(self.tmp, "release-old")
        if commit is None:
            # A shallow clone (as some CI checkouts are) lacks the history: use the same release's
            # files kept as a fixture, which the branch below checks against the history.
            self.extract(open(FIXTURE, "rb").read(), dest, "r:gz")
        else:
            archive = _git(["archive", "--format=tar", commit], support.ROOT)
            self.assertEqual(archive.returncode, 0, archive.stderr)
            self.extract(archive.stdout, dest, "r:")
            kept = os.path.join(self.tmp, "release-fixture")
            self.extract(open(FIXTURE, "rb").read(), kept, "r:gz")
            for base, _, files in os.walk(kept):
                for name in files:
                    rel = os.path.relpath(os.path.join(base, name), kept)
                    with open(os.path.join(kept, rel), "rb") as a, open(os.path.join(dest, rel), "rb") as b:
                        self.assertEqual(a.read(), b.read(), "fixture %s differs from %s in history" % (rel, commit))
        with open(os.path.join(dest, "VERSION")) as f:
            self.assertEqual(f.read().strip(), OLD_VERSION)
        return dest

    @staticmethod
    def extract(data, dest, mode):
        with tarfile.open(fileobj=io.BytesIO(data), mode=mode) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:
                tar.extractall(dest)

    def newer_release(self):
        """This checkout's release files, with the throwaway additive migration in store.py."""
        install = support.load_install()
        dest = os.path.join(self.tmp, "release-new")
        os.makedirs(dest)
        for name in install.RUNTIME_FILES:
            os.makedirs(os.path.dirname(os.path.join(dest, name)), exist_ok=True)  # bin/claude, bin/codex
            shutil.copy2(os.path.join(support.ROOT, name), os.path.join(dest, name))
        shutil.copytree(os.path.join(support.ROOT, install.SKILL_SOURCE), os.path.join(dest, install.SKILL_SOURCE))
        path = os.path.join(dest, "store.py")
        with open(path) as f:
            text = f.read()
        level = "SCHEMA_VERSION = %d " % store.SCHEMA_VERSION
        known = sorted(store.ADDITIVE_MIGRATIONS)
        additive = "ADDITIVE_MIGRATIONS = frozenset(%s)" % ("{%s}" % ", ".join(map(str, known)) if known else "")
        self.assertIn(level, text)
        self.assertIn(additive, text)
        text = text.replace(level, "SCHEMA_VERSION = %d " % (store.SCHEMA_VERSION + 1), 1)
        text = text.replace(additive, "ADDITIVE_MIGRATIONS = frozenset(%r)" % (known + [store.SCHEMA_VERSION + 1]), 1)
        with open(path, "w") as f:
            f.write(text + PROBE)
        return dest

    # -- helpers

    def sh(self, argv, cwd, env=None, check=0):
        e = dict(self.env)
        e.update(env or {})
        proc = subprocess.run(argv, cwd=cwd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=300)
        if check is not None and proc.returncode != check:
            self.fail("%s exited %d\nstdout: %s\nstderr: %s" % (" ".join(argv), proc.returncode, proc.stdout,
                                                                  proc.stderr))
        return proc

    def jj(self, cwd, *args):
        return self.sh(["jj", "--no-pager", "--color=never"] + list(args), cwd).stdout

    def coord_in(self, where, *args, env=None, check=0):
        """The coord CLI installed in `where` (its own .coord/), run from there."""
        return self.sh([sys.executable, os.path.join(where, ".coord", "coord")] + list(args), where, env, check)

    def hook(self, harness, clone, event, session, **extra):
        """Run the clone's installed Claude hook for `event` as `harness` (a FakeHarness) would."""
        command, _ = support.installed_hook(clone, "claude", event)
        payload = {"session_id": session, "transcript_path": os.path.join(self.tmp, session + ".jsonl"),
                   "cwd": clone, "hook_event_name": event}
        payload.update(extra)
        env = dict(self.env, CLAUDE_PROJECT_DIR=clone)
        return harness.run(["/bin/sh", "-c", command], json.dumps(payload), env, clone)

    def start_agent(self, clone, session):
        """A new harness process in clone whose SessionStart registers it: -> (harness, its handle)."""
        harness = support.FakeHarness(self)
        rc, out, err = self.hook(harness, clone, "SessionStart", session, source="startup")
        self.assertEqual(rc, 0, err)
        self.assertTrue(out.strip(), "SessionStart in %s registered nothing (the hook failed open): %s" % (clone, err))
        listed = json.loads(self.coord_in(self.canon, "list", "--json").stdout)
        mine = [r for r in listed["runtimes"] if r["conversation"] == session]
        self.assertEqual(len(mine), 1, listed)
        self.assertIn(mine[0]["handle"], json.loads(out)["hookSpecificOutput"]["additionalContext"])
        return harness, mine[0]["handle"]

    def write_attempt(self, harness, clone, session):
        """PreToolUse Write of PEER_FILE in clone: the hook's decoded reply, or None when it allows."""
        path = os.path.join(clone, PEER_FILE)
        rc, out, err = self.hook(harness, clone, "PreToolUse", session, tool_name="Write",
                                 tool_input={"file_path": path, "content": "x\n"}, tool_use_id="toolu_upgrade")
        self.assertEqual(rc, 0, err)
        return json.loads(out) if out.strip() else None

    # -- the test

    @support.slow
    def test_clones_with_the_older_coord_keep_working_after_the_newer_install_migrates(self):
        self.canon = canon = os.path.join(self.tmp, "canon")
        self.jj(self.tmp, "git", "init", "--colocate", canon)
        os.makedirs(os.path.join(canon, "src"))
        with open(os.path.join(canon, "src", "shared.py"), "w") as f:
            f.write("shared = 1\n")
        self.sh([sys.executable, os.path.join(self.old, "install"), canon, "--project-id", "upgrade"], canon)
        self.jj(canon, "commit", "-m", "coord %s installed" % OLD_VERSION)
        self.jj(canon, "bookmark", "create", "main", "-r", "@-")
        owner = json.loads(self.coord_in(canon, "hello", "--json").stdout)["runtime"]["id"]
        clones = {}
        for task in ("alpha", "beta"):
            proc = self.coord_in(canon, "work", "create", task, "--json", env={"COORD_RUNTIME_ID": owner})
            w = json.loads(proc.stdout)["work"]
            clones[task] = (w["handle"], w["path"])
            with open(os.path.join(w["path"], ".coord", "VERSION")) as f:
                self.assertEqual(f.read().strip(), OLD_VERSION)
        alpha, beta = clones["alpha"][1], clones["beta"][1]

        # The peer in beta holds the file; alpha's agent is denied it (the older release alone).
        peer, _ = self.start_agent(beta, "b0000000-0000-4000-8000-00000000000b")
        rc, out, err = peer.run([sys.executable, os.path.join(beta, ".coord", "coord"), "claim", PEER_FILE,
                                 "-p", "peer work"], "", dict(self.env, CLAUDE_CODE_SESSION_ID=
                                                               "b0000000-0000-4000-8000-00000000000b"), beta)
        self.assertEqual(rc, 0, err)
        agent, _ = self.start_agent(alpha, "a0000000-0000-4000-8000-00000000000a")
        reply = self.write_attempt(agent, alpha, "a0000000-0000-4000-8000-00000000000a")
        self.assertEqual(reply["hookSpecificOutput"]["permissionDecision"], "deny", reply)

        # The shared checkout installs the newer release, which lists both clones and how to
        # bring each up to date, and its first command migrates the database (additively).
        proc = self.sh([sys.executable, os.path.join(self.new, "install"), canon], canon)
        for task, (handle, path) in clones.items():
            line = [l for l in proc.stdout.splitlines() if l.strip().startswith(handle)]
            self.assertEqual(len(line), 1, proc.stdout)
            self.assertIn("cd %s && jj git fetch && jj rebase -b @ -d main@origin" % path, line[0])
            self.assertIn(".coord %s" % OLD_VERSION, line[0])
        self.assertNotIn("./install", proc.stdout)
        first = [l for l in proc.stdout.splitlines() if "first commit the installed files here" in l]
        self.assertEqual(len(first), 1, proc.stdout)
        retired = support.load_install().RETIRED_FILES  # removed by the newer install: a deletion to commit
        for name in first[0].split(": ", 1)[1].split(", "):
            self.assertTrue(os.path.exists(os.path.join(canon, name)) or name in retired, name)
        self.coord_in(canon, "list")

        # The clones still run the older .coord/: a new session registers, a write to the
        # peer's leased file is denied, and the older CLI claims and lists.
        again, _ = self.start_agent(alpha, "c0000000-0000-4000-8000-00000000000c")
        reply = self.write_attempt(again, alpha, "c0000000-0000-4000-8000-00000000000c")
        self.assertIsNotNone(reply, "the older hook let a write to a peer's leased file through after the upgrade")
        self.assertEqual(reply["hookSpecificOutput"]["permissionDecision"], "deny", reply)
        listed = json.loads(self.coord_in(alpha, "list", "--json").stdout)
        conversations = {r.get("conversation") for r in listed.get("runtimes", listed.get("agents", []))}
        self.assertIn("c0000000-0000-4000-8000-00000000000c", conversations, listed)
        rc, out, err = peer.run([sys.executable, os.path.join(beta, ".coord", "coord"), "claim", "src/other.py",
                                 "-p", "more"], "", dict(self.env, CLAUDE_CODE_SESSION_ID=
                                                          "b0000000-0000-4000-8000-00000000000b"), beta)
        self.assertEqual(rc, 0, err)

        # The newer release did migrate: the reader level stayed, the applied migration is in meta.
        conn = sqlite3.connect(self.db)
        try:
            level = conn.execute("PRAGMA user_version").fetchone()[0]
            applied = conn.execute("SELECT value FROM meta WHERE key = 'schema.applied'").fetchone()
            probe = conn.execute("SELECT name FROM sqlite_master WHERE name = 'upgrade_probe'").fetchone()
        finally:
            conn.close()
        reader = max(v for v in store._MIGRATIONS if v not in store.ADDITIVE_MIGRATIONS)
        self.assertEqual((level, applied, probe), (reader, (str(store.SCHEMA_VERSION + 1),),
                                                   ("upgrade_probe",)))

        # Checked from the shared checkout's newer installer, a clone is told how to catch up,
        # never to install into itself.
        check = self.sh([sys.executable, os.path.join(self.new, "install"), alpha, "--check"], canon, check=1)
        self.assertIn("jj git fetch && jj rebase -b @ -d", check.stdout)
        self.assertNotIn("--repair", check.stdout)

        # --doctor lists them too, with the same commands.
        doctor = json.loads(self.sh([sys.executable, os.path.join(self.new, "install"), canon, "--doctor",
                                      "--json"], canon, check=None).stdout)
        self.assertEqual(sorted(c["handle"] for c in doctor["clone_upgrades"]), sorted(h for h, _ in clones.values()))
        self.assertTrue(all(c["relation"] in ("older", "differs") for c in doctor["clone_upgrades"]))

        # A clone brought up to date (the printed command, after the install is committed) is no
        # longer listed.
        self.jj(canon, "commit", "-m", "coord upgraded")
        self.jj(canon, "bookmark", "set", "main", "-r", "@-")
        command = [c["command"] for c in doctor["clone_upgrades"] if c["handle"] == clones["alpha"][0]][0]
        self.sh(["/bin/sh", "-c", command], canon)
        doctor = json.loads(self.sh([sys.executable, os.path.join(self.new, "install"), canon, "--doctor",
                                      "--json"], canon, check=None).stdout)
        self.assertEqual([c["handle"] for c in doctor["clone_upgrades"]], [clones["beta"][0]])

    def test_the_older_release_never_reaps_what_the_newer_keeps_alive_without_the_clock(self):
        """The older release ends a runtime whose heartbeat is older than COORD_RUNTIME_TTL; this
        one never ends by the clock the person (at a terminal, or the user alone), a parked work's
        holder, or an agent whose harness process lives. Idle past the limit, they and their
        leases survive the older release's hello, claim and send; a dead agent is still reaped."""
        db = store.Store(self.db)
        self.addCleanup(db.close)
        idle = time.time() - db.runtime_ttl - 3600  # their last beat: an hour past the presence limit
        ttl = db.runtime_ttl + 7200  # leases that outlive that silence (unexpired now)

        def process():
            proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
            self.addCleanup(proc.wait)
            self.addCleanup(proc.stdin.close)
            return proc

        def end(proc):
            proc.stdin.close()
            proc.wait()

        terminal, harness, parked_harness, dying_old, dying_new = (process() for _ in range(5))
        uid = os.getuid()
        kept = {
            "src/person.py": db.register(conversation="person:%d:pts/9:%d:%s" % (
                uid, terminal.pid, store.process_start(terminal.pid)), harness=store.PERSON, pid=terminal.pid,
                source="person", now=idle),
            "src/alone.py": db.register(conversation="person:%d" % uid, harness=store.PERSON, source="person",
                                        now=idle),
            "src/idle.py": db.register(harness="claude", pid=harness.pid, now=idle),
        }
        parked = db.register(harness="codex", pid=parked_harness.pid, now=idle)
        for path, rt in kept.items():
            db.claim(rt["id"], [path], ttl=ttl, now=idle)
        db.claim(parked["id"], ["src/parked.py"], ttl=ttl, now=idle)
        kept["src/parked.py"] = db.hold_parked(parked["conversation"], "w-parked", now=idle)
        dead = {"src/dead-old.py": db.register(harness="claude", pid=dying_old.pid, now=idle),
                "src/dead-new.py": db.register(harness="codex", pid=dying_new.pid, now=idle)}
        for path, rt in dead.items():
            db.claim(rt["id"], [path], ttl=ttl, now=idle)
        end(dying_old)  # its harness is gone before the older release runs: both releases reap it

        # A clone still running the older release: an agent registers, claims and sends.
        def older(*args, check=0):
            return self.sh([sys.executable, os.path.join(self.old, "coord")] + list(args), self.tmp, check=check)
        me = json.loads(older("hello", "--harness", "claude", "--json").stdout)["runtime"]
        older("claim", "src/mine.py", "--runtime", me["id"])
        older("send", "status please", "--to", kept["src/idle.py"]["handle"], "--runtime", me["id"])
        older("claim", "src/dead-old.py", "--runtime", me["id"])  # the dead agent's lease was freed
        for path, rt in sorted(kept.items()):
            proc = older("claim", path, "--runtime", me["id"], check=3)
            self.assertIn(rt["handle"], proc.stdout + proc.stderr, path)
            blocking = json.loads(older("check", path, "--runtime", me["id"], "--json", check=3).stdout)
            self.assertEqual([c["runtime"] for c in blocking["conflicts"]], [rt["id"]], path)

        # This release agrees: every one of them is live and holds its lease.
        end(dying_new)
        listed = json.loads(self.coord("list", "--json", check=0).stdout)
        live = {r["id"] for r in listed["runtimes"] if r["live"]}
        holders = {l["resource"]: l["runtime"] for l in listed["leases"]}
        for path, rt in sorted(kept.items()):
            self.assertIn(rt["id"], live, path)
            self.assertEqual(holders.get(path), rt["id"], path)
            blocking = json.loads(self.coord("check", path, "--json", runtime=me["id"], check=3).stdout)
            self.assertEqual([c["runtime"] for c in blocking["conflicts"]], [rt["id"]], path)
        self.coord("claim", "src/dead-new.py", runtime=me["id"], check=0)  # and reaps a dead agent too
        for rt in dead.values():
            self.assertEqual(db.runtime(rt["id"])["end_reason"], "process-gone", rt)
        for rt in kept.values():
            self.assertIsNone(db.runtime(rt["id"])["ended_at"], rt)
