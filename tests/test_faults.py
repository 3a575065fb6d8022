"""Faults and hostile input against the store and the CLI, with real processes and files.

Each test asserts the invariants after the fault: integrity, no overlapping exclusive leases
between live runtimes, acknowledged writes kept, clear errors, nothing stored lost.
"""

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

import support
import store

STORM = r'''
import os, random, sys, time
sys.path.insert(0, os.environ["COORD_ROOT"])
import store
log_path = sys.argv[1]
rnd = random.Random(int(sys.argv[2]))
st = store.Store(timeout=30)
me = st.register(pid=os.getpid(), harness="storm")["id"]
log = open(log_path, "a")
names = ["src/%s" % x for x in ("a", "b", "c", "a/x.py", "b/y.py", "c/z")] + ["docs", "docs/readme.md"]
while True:
    op = rnd.random()
    try:
        if op < 0.35:
            st.claim(me, [rnd.choice(names)], rnd.choice(["exclusive", "exclusive", "append"]), ttl=30)
        elif op < 0.5:
            st.renew(me)
        elif op < 0.65:
            st.release(me, everything=True)
        elif op < 0.9:
            nonce = "%d-%d-%f" % (os.getpid(), rnd.getrandbits(48), time.time())
            msg = st.send(me, "storm " + nonce, "*")
            log.write("%d %s\n" % (msg["id"], nonce))
            log.flush()
        else:
            opened = st.inbox(me, peek=True)
            if opened:
                st.ack(me, [m["id"] for m in opened[:3]])
    except store.Refused:
        pass
'''


class StormTest(support.CoordTestCase):
    def test_kill_9_during_a_storm_keeps_every_invariant(self):
        store.Store(self.db).close()
        env = dict(self.env, COORD_ROOT=support.ROOT)
        rnd = random.Random(1234)
        logs = []
        procs = []
        killed = 0
        rounds = 12
        for r in range(rounds):
            while len(procs) < 6:
                log = os.path.join(self.tmp, "log-%d-%d" % (r, len(logs)))
                logs.append(log)
                procs.append(subprocess.Popen([sys.executable, "-c", STORM, log, str(rnd.getrandbits(32))],
                                              env=env, stderr=subprocess.PIPE))
            time.sleep(rnd.uniform(0.2, 0.5))
            for victim in rnd.sample(procs, 2):
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                err = victim.stderr.read().decode()
                victim.stderr.close()
                self.assertNotIn("Traceback", err)
                procs.remove(victim)
                killed += 1
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
            p.stderr.close()
        conn = sqlite3.connect(self.db)
        self.assertEqual(conn.execute("PRAGMA integrity_check").fetchone()[0], "ok")
        logged = {}
        for log in logs:
            if not os.path.exists(log):
                continue
            ids = []
            for line in open(log):
                mid, nonce = line.split()
                ids.append(int(mid))
                logged[int(mid)] = nonce
            self.assertEqual(ids, sorted(set(ids)), "IDs a writer saw must strictly increase")
        self.assertGreater(len(logged), 20, "the storm sent too little to prove anything")
        for mid, nonce in logged.items():
            rows = conn.execute("SELECT id FROM messages WHERE body = ?", ("storm " + nonce,)).fetchall()
            self.assertEqual(rows, [(mid,)])
        conn.close()
        st = store.Store(self.db)
        st.reap()
        live = {rt["id"] for rt in st.live_runtimes()}
        self.assertEqual(live, set(), "every storm process is dead; the reaper must end them all")
        self.assertEqual(st.q("SELECT count(*) FROM leases").fetchone()[0], 0)
        st.close()
        self.assertEqual(killed, rounds * 2)

    def test_no_overlapping_exclusive_leases_between_live_runtimes_mid_storm(self):
        store.Store(self.db).close()
        env = dict(self.env, COORD_ROOT=support.ROOT)
        procs = [subprocess.Popen([sys.executable, "-c", STORM, os.path.join(self.tmp, "l%d" % i), str(i)],
                                  env=env, stderr=subprocess.DEVNULL) for i in range(5)]
        try:
            st = store.Store(self.db)
            checks = 0
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                st.conn.execute("BEGIN")  # a read snapshot: WAL readers never wait for writers
                try:
                    rows = st.q("SELECT l.resource, l.runtime, l.mode, r.ended_at FROM leases l JOIN runtimes r"
                                " ON r.id = l.runtime WHERE l.expires_at > ?", (time.time(),)).fetchall()
                finally:
                    st.conn.execute("COMMIT")
                for a in rows:
                    for b in rows:
                        if a[1] != b[1] and store.overlaps(a[0], b[0]) and a[3] is None and b[3] is None:
                            self.assertFalse("exclusive" in (a[2], b[2]), (a, b))
                checks += 1
            self.assertGreater(checks, 10)
            st.close()
        finally:
            for p in procs:
                p.kill()
                p.wait()


class LockedDatabaseTest(support.CoordTestCase):
    def test_hung_writer_makes_cli_fail_with_busy_error_naming_the_holder(self):
        store.Store(self.db).close()
        holder = subprocess.Popen([sys.executable, "-c",
                                   "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None);"
                                   "c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); time.sleep(60)", self.db],
                                  stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(holder.stdout.readline().strip(), "locked")
            start = time.monotonic()
            proc = self.coord("hello", env={"COORD_BUSY_TIMEOUT": "0.5"})
            elapsed = time.monotonic() - start
            self.assertEqual(proc.returncode, 4, proc.stderr)
            self.assertIn("database busy for longer than the timeout: pid %d (python" % holder.pid, proc.stderr)
            self.assertIn("pid %d is not coord: the person who opened it can close it" % holder.pid, proc.stderr)
            self.assertNotIn("kill", proc.stderr)
            self.assertNotIn("Traceback", proc.stderr)
            self.assertLess(elapsed, 30)
        finally:
            holder.kill()
            holder.wait()
            holder.stdout.close()
        self.coord("hello", check=0)


# A peer that writes all the time: it holds the write lock for HOLD_MS and is back within 1 ms. Run as
# `python3 DIR/coord HOLD_MS`, so that /proc shows a coord process.
BUSY_PEER = r'''
import os, sys, time
sys.path.insert(0, os.environ["COORD_ROOT"])
import store
st = store.Store(timeout=60)
hold = float(sys.argv[1]) / 1000
print("busy", flush=True)
while True:
    with st.transaction():
        st.conn.execute("INSERT INTO meta (key, value) VALUES ('busy-peer', '1')"
                        " ON CONFLICT(key) DO UPDATE SET value = value + 1")
        time.sleep(hold)
    time.sleep(0.001)
'''


class WriteGateTest(support.CoordTestCase):
    """Writers queue at the write gate (store.py's turnstile), so a call next to busy live peers
    waits its turn instead of failing for contention, and a busy refusal never tells a model to
    end a process that is a coord user at work."""

    def _peer(self, hold_ms, timeout=None):
        d = os.path.join(self.tmp, "peer")
        os.makedirs(d, exist_ok=True)
        script = os.path.join(d, "coord")
        with open(script, "w") as f:
            f.write(BUSY_PEER)
        env = dict(self.env, COORD_ROOT=support.ROOT)
        proc = subprocess.Popen([sys.executable, script, str(hold_ms)], env=env, stdout=subprocess.PIPE, text=True)
        self.addCleanup(self._stop, proc)
        self.assertEqual(proc.stdout.readline().strip(), "busy")
        return proc

    @staticmethod
    def _stop(proc):
        proc.kill()
        proc.wait()
        proc.stdout.close()

    def test_a_call_beside_a_peer_that_commits_all_the_time_gets_its_turn(self):
        store.Store(self.db).close()
        self._peer(100)
        failed = []
        for i in range(10):
            proc = self.coord("hello", env={"COORD_BUSY_TIMEOUT": "2"})
            if proc.returncode != 0:
                failed.append(proc.stderr)
        # Without the gate SQLite's sleeping busy wait misses the peer's 1 ms gaps: most of the
        # 10 calls failed after 2 s.
        self.assertEqual(failed, [])

    def test_a_busy_refusal_beside_coord_peers_names_no_process_to_end(self):
        store.Store(self.db).close()
        peer = self._peer(3000)
        proc = self.coord("hello", env={"COORD_BUSY_TIMEOUT": "0.3"})
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertIn("database busy for longer than the timeout: 1 coord process at work", proc.stderr)
        self.assertIn("retry the command; COORD_BUSY_TIMEOUT=SECONDS makes it wait longer", proc.stderr)
        for word in ("kill", "stop", "end the", "stuck", str(peer.pid)):
            self.assertNotIn(word, proc.stderr)

    def test_many_concurrent_senders_at_default_settings_never_fail_for_contention(self):
        st = store.Store(self.db)
        recipients = [st.register(harness="test")["handle"] for _ in range(4)]
        st.close()
        senders, each = 16, 6
        script = "; ".join(['eval "$(%s %s hello --export)"' % (sys.executable, support.COORD)] + [
            '%s %s send --to %s "m%d from $1" || echo FAILED' % (sys.executable, support.COORD, recipients[i % 4], i)
            for i in range(each)])
        env = dict(self.env)
        env.pop("COORD_BUSY_TIMEOUT", None)
        procs = [subprocess.Popen(["/bin/sh", "-c", script, "sh", str(n)], env=env, cwd=self.tmp,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for n in range(senders)]
        outs = [p.communicate(timeout=600) for p in procs]
        self.assertEqual([p.returncode for p in procs], [0] * senders, outs)
        self.assertEqual([o for o in outs if "FAILED" in o[0] or "busy" in o[1]], [])
        st = store.Store(self.db)
        self.assertEqual(st.q("SELECT count(*) FROM messages").fetchone()[0], senders * each)
        st.close()


class DamagedDatabaseTest(support.CoordTestCase):
    def _populated(self):
        st = store.Store(self.db)
        rt = st.register()
        st.claim(rt["id"], ["kept/a.py"], purpose="precious")
        st.close()
        return rt

    def test_truncated_database_is_reported_and_left_untouched(self):
        self._populated()
        with open(self.db, "rb") as f:
            data = f.read()
        with open(self.db, "wb") as f:
            f.write(data[:len(data) // 3 + 100])
        before = open(self.db, "rb").read()
        proc = self.coord("list")
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)
        self.assertIn("next:", proc.stderr)
        self.assertEqual(open(self.db, "rb").read(), before, "a damaged database must never be rewritten")

    def test_garbage_database_is_reported(self):
        os.makedirs(os.path.dirname(self.db), mode=0o700)
        with open(self.db, "wb") as f:
            f.write(os.urandom(8192))
        proc = self.coord("claim", "x", "--runtime", store.new_uuid())
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertIn("damaged", proc.stderr)

    def test_unreadable_database_is_reported(self):
        self._populated()
        if os.getuid() == 0:
            # Root reads any file; run the CLI as an unprivileged user instead.
            run_as = support.demote_to_nobody()
            if run_as is None:
                self.skipTest("no unprivileged user to run as")
            os.chmod(self.tmp, 0o755)
            python = "/usr/bin/python3"
            if not os.access(python, os.X_OK):
                self.skipTest("no system python3 an unprivileged user can run")
            # A private copy of the CLI, so the checkout's own location needs no permissions.
            shared = [d for d in ("/var/tmp", "/dev/shm", "/tmp") if os.path.isdir(d) and os.stat(d).st_mode & 0o001]
            if not shared:
                self.skipTest("no directory an unprivileged user can reach")
            bindir = tempfile.mkdtemp(prefix="coord-bin-", dir=shared[0])
            os.chmod(bindir, 0o755)
            self.addCleanup(shutil.rmtree, bindir, True)
            for name in ("coord", "store.py", "harness_facts.py", "VERSION"):
                shutil.copy(os.path.join(support.ROOT, name), bindir)
            proc = subprocess.run([python, "-I", os.path.join(bindir, "coord"), "list"], env=self.env, cwd="/",
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=run_as)
        else:
            os.chmod(self.db, 0)
            proc = self.coord("list")
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)
        self.assertIn("next:", proc.stderr)


class SmallFilesystemTest(support.CoordTestCase):
    """A tmpfs of our own: read-only remounts and a full disk. Needs root (CI runs as root)."""

    def mount(self, size="2m"):
        if os.getuid() != 0:
            if support.IN_CI:
                self.fail("CI runs as root; mounting a test filesystem must work there")
            self.skipTest("mounting a tmpfs needs root")
        mnt = os.path.join(self.tmp, "mnt")
        os.makedirs(mnt)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0700" % size, "tmpfs", mnt], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", mnt])
        return mnt

    def test_read_only_directory_is_reported_and_data_survives(self):
        mnt = self.mount()
        db = os.path.join(mnt, "state", "db.sqlite3")
        env = {"COORD_DB": db}
        a = self.hello(env=env)["runtime"]
        self.coord("claim", "kept", runtime=a["id"], env=env, check=0)
        subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
        proc = self.coord("claim", "more", runtime=a["id"], env=env)
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)
        subprocess.run(["mount", "-o", "remount,rw", mnt], check=True)
        self.assertEqual([l["resource"] for l in self.coord_json("list", env=env)["leases"]], ["kept"])

    def test_full_disk_is_reported_and_data_survives(self):
        mnt = self.mount("1m")
        db = os.path.join(mnt, "state", "db.sqlite3")
        env = {"COORD_DB": db}
        a = self.hello(env=env)["runtime"]
        b = self.hello(env=env)["runtime"]
        sent = []
        for i in range(3):
            sent.append(self.coord_json("send", "before %d" % i, "--to", b["handle"], runtime=a["id"], env=env)["id"])
        filler = os.path.join(mnt, "filler")
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        failures = 0
        for i in range(40):
            proc = self.coord("send", ("x" * 8000) + str(i), "--to", b["handle"], runtime=a["id"], env=env)
            self.assertIn(proc.returncode, (0, 4), proc.stderr)
            self.assertNotIn("Traceback", proc.stderr)
            if proc.returncode == 4:
                failures += 1
                self.assertTrue("disk full" in proc.stderr or "database" in proc.stderr, proc.stderr)
        self.assertGreater(failures, 0, "the disk never filled up")
        os.unlink(filler)
        inbox = self.coord_json("inbox", "--peek", runtime=b["id"], env=env)["messages"]
        self.assertEqual([m["id"] for m in inbox][:3], sent)
        conn = sqlite3.connect(db)
        self.assertEqual(conn.execute("PRAGMA integrity_check").fetchone()[0], "ok")
        conn.close()


class ClockTest(support.CoordTestCase):
    def test_heartbeat_after_expiry_does_not_revive_and_future_beat_does_not_shorten(self):
        st = store.Store(self.db)
        a = st.register()["id"]
        b = st.register()["id"]
        t0 = time.time()
        st.claim(a, ["r"], ttl=10, now=t0)
        st.heartbeat(a, now=t0 + 20)  # too late: the lease expired at t0+10
        self.assertEqual(st.conflicts(["r"], as_runtime=b, now=t0 + 21), [])
        st.claim(a, ["s"], ttl=100, now=t0)
        st.heartbeat(a, now=t0 + 50)           # expiry now t0+150
        st.heartbeat(a, now=t0 - 3600)         # clock stepped back an hour
        self.assertTrue(st.conflicts(["s"], as_runtime=b, now=t0 + 140))
        self.assertEqual(st.conflicts(["s"], as_runtime=b, now=t0 + 151), [])
        st.close()


class HostileInputTest(support.CoordTestCase):
    def test_hostile_resource_names_are_refused_or_canonical(self):
        a = self.hello()["runtime"]
        repo = os.path.join(self.tmp, "repo")
        os.makedirs(os.path.join(repo, ".git"))
        outside = os.path.join(self.tmp, "outside")
        os.makedirs(outside)
        os.symlink(outside, os.path.join(repo, "escape"))
        refused = ["..", "a/../..", "/etc/shadow", os.path.join(repo, "escape", "f"), "a\x01b", "x" * 2000,
                   "a\x1b]0;t\x07"]
        for name in refused:
            proc = self.coord("claim", name, runtime=a["id"], cwd=repo)
            self.assertEqual(proc.returncode, 2, (name, proc.stderr))
            self.assertNotIn("Traceback", proc.stderr)
        canonical = {"./src//a.py/": "src/a.py", "%2e%2e/x": "%2e%2e/x", "\uff0e\uff0e/x": "\uff0e\uff0e/x",
                     "Src/A.py": "Src/A.py"}
        for given, want in canonical.items():
            self.coord("claim", given, runtime=a["id"], cwd=repo, check=0)
            self.assertIn(want, [l["resource"] for l in self.coord_json("list")["leases"]])

    def test_relative_names_through_symlinks_cannot_escape_or_split_a_file(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        repo = os.path.join(self.tmp, "repo")
        os.makedirs(os.path.join(repo, ".git"))
        os.makedirs(os.path.join(repo, "docs"))
        outside = os.path.join(self.tmp, "outside")
        os.makedirs(outside)
        os.symlink(outside, os.path.join(repo, "escape"))
        os.symlink("..", os.path.join(repo, "parent"))
        os.symlink("docs", os.path.join(repo, "manual"))
        for name in ("escape/f", "escape", "parent/outside/f", "manual/../escape/f", "manual/../../outside/f"):
            proc = self.coord("claim", name, runtime=a["id"], cwd=repo)
            self.assertEqual(proc.returncode, 2, (name, proc.stderr))
            self.assertNotIn("Traceback", proc.stderr)
        self.coord("claim", "manual/x.md", runtime=a["id"], cwd=repo, check=0)
        self.coord("claim", "docs/x.md", runtime=b["id"], cwd=repo, check=3)
        self.coord("claim", "parent/repo/docs", runtime=b["id"], cwd=repo, check=3)
        self.assertEqual([(l["resource"], l["handle"]) for l in self.coord_json("list")["leases"]],
                         [("docs/x.md", a["handle"])])

    def test_undecodable_and_escape_laden_input_never_breaks_output(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        body = b"caf\xff \x1b[2J\x1b[31mred\x1b[0m \x07\x00end".decode("utf-8", "surrogateescape").replace("\x00", "")
        proc = subprocess.run([sys.executable, support.COORD, "send", body, "--to", b["handle"], "--runtime", a["id"]],
                              env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.coord("claim", "x", "-p", "\x1b[31mevil\x1b[0m purpose", runtime=a["id"], check=0)
        for args in (["inbox", "--peek"], ["list"], ["list", "--verbose"]):
            out = subprocess.run([sys.executable, support.COORD] + args + ["--runtime", b["id"]], env=self.env,
                                 stdout=subprocess.PIPE).stdout
            self.assertNotIn(b"\x1b", out, args)
            self.assertNotIn(b"\x07", out, args)
            data = json.loads(subprocess.run([sys.executable, support.COORD] + args + ["--json", "--runtime", b["id"]],
                                             env=self.env, stdout=subprocess.PIPE).stdout)
            self.assertTrue(data["ok"])
        audit = self.coord("audit", check=0).stdout
        for line in audit.splitlines():
            json.loads(line)

    def test_huge_body_is_refused_cleanly(self):
        a = self.hello()["runtime"]
        proc = self.coord("send", "y" * (store.MAX_BODY + 10), "--to", "*", runtime=a["id"])
        self.assertEqual(proc.returncode, 2)
        self.assertIn("larger than", proc.stderr)


def strict_json(text):
    """Parse JSON as a strict parser would: Infinity, -Infinity and NaN are not JSON."""
    def refuse(name):
        raise ValueError("not JSON: %s" % name)
    return json.loads(text, parse_constant=refuse)


class HostileNumberTest(support.CoordTestCase):
    """Every number from a flag or the environment has a finite range; outside it, exit 2."""

    def assertUsage(self, proc, *needles):
        self.assertEqual(proc.returncode, 2, (proc.args[2:], proc.stdout, proc.stderr))
        self.assertNotIn("Traceback", proc.stderr)
        self.assertNotIn("internal error", proc.stderr)
        for needle in needles:
            self.assertIn(needle, proc.stderr)

    def test_ttl_flags_refuse_infinite_nan_and_out_of_range_values(self):
        a = self.hello()["runtime"]
        self.coord("claim", "held", runtime=a["id"], check=0)
        for value in ("inf", "1e309", "nan", "-inf", "-5", "0", "0.5", "604801", "1e9", "ten", ""):
            with self.subTest(ttl=value):
                flag = ["--ttl=" + value] if value.startswith("-") else ["--ttl", value]
                self.assertUsage(self.coord("claim", "x", *flag, runtime=a["id"]), "--ttl", "from 1 to 604800")
                self.assertUsage(self.coord("renew", *flag, runtime=a["id"]), "from 1 to 604800")
                self.assertUsage(self.coord("batch", "--runtime", a["id"], "claim", "y", *flag), "--ttl")
        listing = self.coord("list", "--json", check=0)
        self.assertEqual([l["resource"] for l in strict_json(listing.stdout)["leases"]], ["held"])
        self.coord("list", "--verbose", check=0)
        self.coord("claim", "edge", "--ttl", "604800", runtime=a["id"], check=0)
        lease = [l for l in strict_json(self.coord("list", "--json", check=0).stdout)["leases"]
                 if l["resource"] == "edge"][0]
        self.assertLessEqual(lease["expires_at"] - lease["acquired_at"], 604800)

    def test_numeric_environment_variables_are_checked_by_the_cli(self):
        a = self.hello()["runtime"]
        cases = {"COORD_LEASE_TTL": ("inf", "1e309", "nan", "0", "-1", "604801", "soon"),
                 "COORD_RUNTIME_TTL": ("inf", "nan", "59", "-inf", "1e309"),
                 "COORD_BUSY_TIMEOUT": ("inf", "nan", "-1", "601", "1e309")}
        for name, values in cases.items():
            for value in values:
                with self.subTest(var=name, value=value):
                    for args in (["list"], ["claim", "x"], ["send", "hi", "--to", "*"]):
                        self.assertUsage(self.coord(*args, runtime=a["id"], env={name: value}), name, "from ")
        self.assertEqual(self.coord_json("list")["leases"], [], "nothing was claimed under a bad value")
        self.coord("claim", "x", runtime=a["id"], env={"COORD_LEASE_TTL": "120", "COORD_BUSY_TIMEOUT": "0",
                                                       "COORD_RUNTIME_TTL": "60"}, check=0)
        lease = self.coord_json("list")["leases"][0]
        self.assertAlmostEqual(lease["expires_at"] - lease["acquired_at"], 120, places=3)

    def test_huge_and_negative_integers_are_usage_errors(self):
        a = self.hello()["runtime"]
        top = str((1 << 63) - 1)
        for ids in (["99999999999999999999"], [str(1 << 63)], ["0"], ["-1"], ["1e3"], ["1", "9" * 5000]):
            with self.subTest(ids=[i[:25] for i in ids]):
                self.assertUsage(self.coord("ack", *ids, runtime=a["id"]), "message ID", top)
        self.assertEqual(self.coord("ack", top, runtime=a["id"]).returncode, 3, "in range: not addressed to you")
        for since in ("99999999999999999999", str(1 << 63), "-1", "1.5", "inf"):
            with self.subTest(since=since):
                self.assertUsage(self.coord("audit", "--since", since), "--since", top)
        self.assertEqual(self.coord("audit", "--since", top, check=0).stdout, "")
        for pid in ("99999999999999999999", str(1 << 31), "0", "-1"):
            with self.subTest(pid=pid):
                self.assertUsage(self.coord("hello", "--pid", pid), "--pid")

    def test_only_ascii_digits_make_a_number(self):
        # int() and float() take `1_000`, Arabic-Indic and fullwidth digits: all in range here, all refused.
        a = self.hello()["runtime"]
        self.coord("send", "one", "--to", a["handle"], runtime=a["id"], check=0)
        odd = ("1_000", "\u0661\u0662\u0660", "\uff11\uff12\uff10", "\u00a0120")
        for value in odd:
            with self.subTest(value=value):
                self.assertUsage(self.coord("claim", "x", "--ttl", value, runtime=a["id"]), "--ttl", "from 1 to 604800")
                self.assertUsage(self.coord("renew", "--ttl", value, runtime=a["id"]), "--ttl")
                self.assertUsage(self.coord("hello", "--pid", value), "--pid")
                self.assertUsage(self.coord("audit", "--since", value), "--since")
                self.assertUsage(self.coord("ack", value.replace("120", "1").replace("1_000", "1_1"),
                                            runtime=a["id"]), "message ID")
                for name in ("COORD_LEASE_TTL", "COORD_RUNTIME_TTL", "COORD_BUSY_TIMEOUT"):
                    bad = value.replace("1_000", "1_00") if name == "COORD_BUSY_TIMEOUT" else value
                    self.assertUsage(self.coord("claim", "x", runtime=a["id"], env={name: bad}), name, "from ")
        for name in ("COORD_LEASE_TTL", "COORD_BUSY_TIMEOUT"):
            for value in ("nan", "-inf"):
                with self.subTest(var=name, value=value):
                    self.assertUsage(self.coord("list", runtime=a["id"], env={name: value}), name, "from ")
        self.assertEqual(self.coord_json("list")["leases"], [], "nothing was claimed under a bad value")
        self.assertEqual(len(self.coord_json("inbox", "--peek", runtime=a["id"])["messages"]), 1, "nothing was acked")
        self.coord("claim", "x", "--ttl", " 1000 ", runtime=a["id"], check=0)  # ASCII digits, spaces around

    def test_a_never_expiring_lease_from_an_older_coord_prints_valid_json_and_is_repaired(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        st = store.Store(self.db)
        self.addCleanup(st.close)
        with st.transaction():  # what 0.1.0 stored for `claim legacy --ttl inf`
            st.conn.execute("INSERT INTO leases (resource, runtime, mode, purpose, acquired_at, expires_at, ttl)"
                            " VALUES ('legacy', ?, 'exclusive', '', ?, ?, ?)",
                            (a["id"], time.time(), float("inf"), float("inf")))
        listing = strict_json(self.coord("list", "--json", check=0).stdout)
        self.assertEqual([l["resource"] for l in listing["leases"]], ["legacy"])
        self.assertIn("never expires", self.coord("list", "--verbose", check=0).stdout)
        blocked = self.coord("check", "legacy", "--json", "--as", b["handle"])
        self.assertEqual(blocked.returncode, 3)
        self.assertFalse(strict_json(blocked.stdout)["free"])
        strict_json(self.coord("claim", "legacy", "--json", runtime=b["id"], check=3).stdout)
        self.coord("claim", "other", runtime=b["id"], check=0)  # any write reaps: the lease gets an end
        expires, ttl = st.q("SELECT expires_at, ttl FROM leases WHERE resource = 'legacy'").fetchone()
        self.assertLessEqual(expires, time.time() + store.LEASE_TTL_RANGE[1])
        self.assertEqual(ttl, store.LEASE_TTL_RANGE[1])
        self.assertIn("expires in", self.coord("list", "--verbose", check=0).stdout)


if __name__ == "__main__":
    unittest.main()


class NestedPidNamespaceTest(support.CoordTestCase):
    """Codex's workspace-write sandbox runs commands in their own PID namespace, where the
    harness pids recorded from the host cannot be seen. A call from there must not take live
    peers for dead (reaping them and dropping their leases)."""

    def setUp(self):
        super().setUp()
        unshare = support.require_tool(self, "unshare")
        probe = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", "true"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if probe.returncode != 0:
            probe = subprocess.run([unshare, "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "true"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.prefix = [unshare, "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
        else:
            self.prefix = [unshare, "--pid", "--fork", "--mount-proc"]
        if probe.returncode != 0:
            msg = "this machine cannot create a PID namespace with unshare"
            if support.IN_CI:
                self.fail(msg)
            self.skipTest(msg)

    def nested(self, *args):
        return subprocess.run(self.prefix + [sys.executable, support.COORD] + list(args), env=self.env,
                              cwd=self.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)

    def test_a_nested_namespace_never_reaps_a_live_peer(self):
        peer_proc = subprocess.Popen(["sleep", "300"])
        self.addCleanup(peer_proc.wait)
        self.addCleanup(peer_proc.kill)
        st = store.Store(self.db)
        self.addCleanup(st.close)
        peer = st.register(conversation=store.new_uuid(), harness="codex", pid=peer_proc.pid)
        st.claim(peer["id"], ["src/mine.py"])
        # The sandboxed agent registers and lists: both reap inside their transaction.
        for args in (["hello", "--json"], ["list", "--json"], ["check", "src/mine.py", "--json"]):
            proc = self.nested(*args)
            self.assertNotIn("Traceback", proc.stderr)
        self.assertIsNone(st.runtime(peer["id"])["ended_at"])
        self.assertEqual([l["resource"] for l in st.leases_of(peer["id"])], ["src/mine.py"])
        proc = self.nested("check", "src/mine.py")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        # The host namespace still sees the truth: once the peer's process dies, it is reaped.
        peer_proc.kill()
        peer_proc.wait()
        self.coord("hello", check=0)
        self.assertEqual(st.runtime(peer["id"])["end_reason"], "process-gone")
        self.assertEqual(st.leases_of(peer["id"]), [])
