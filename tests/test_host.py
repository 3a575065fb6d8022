"""host.py, the per-host coord process of a PostgreSQL project (issue 25, being built), and its
stdlib client in store.py (HostClient, RemoteStore): a real host process on a real PostgreSQL
server (support.require_postgres), spoken to over its real Unix socket."""

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid

import support
import store
import pg
import hostclient

HOST = os.path.join(support.ROOT, "host.py")


class HostCase(support.CoordTestCase):
    AUTO_START = True

    def setUp(self):
        super().setUp()
        server, self.psycopg = support.require_postgres(self)
        self.dsn = server.dsn()
        self.project = "hosttest-%s" % uuid.uuid4().hex[:12]
        self.addCleanup(self._drop_schema)
        self.sock = os.path.join(self.state, "fleet-agent-coord", "host.sock")
        self.host_env = dict(self.env, PYTHONPATH=support.psycopg_dir())
        if self.AUTO_START:
            self.proc = self.start_host()

    def _drop_schema(self):
        with self.psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute('DROP SCHEMA IF EXISTS "%s" CASCADE' % pg.pg_schema(self.project))

    def start_host(self, *extra):
        env = dict(self.env, PYTHONPATH=support.psycopg_dir())
        proc = subprocess.Popen([sys.executable, HOST, "serve", "--dsn", self.dsn, "--project", self.project,
                                 "--socket", self.sock] + list(extra), env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        self.addCleanup(self.stop_host, proc)
        line = proc.stdout.readline()  # printed once the socket listens
        self.assertIn("serving", line, proc.stderr.read() if proc.poll() is not None else line)
        return proc

    def stop_host(self, proc):
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        proc.stdout.close()
        proc.stderr.close()

    def remote(self):
        st = hostclient.RemoteStore(self.project, self.sock)
        self.addCleanup(st.close)
        return st


class HostProtocolTest(HostCase):
    def test_a_claim_is_one_request_and_a_conflict_is_the_same_refusal(self):
        a, b = self.remote(), self.remote()
        ra, rb = a.register(harness="x"), b.register(harness="y")
        leases = a.claim(ra["id"], ["src/a.py"], "exclusive", "mine")
        self.assertEqual([l["resource"] for l in leases], ["src/a.py"])
        with self.assertRaises(store.Refused) as caught:
            b.claim(rb["id"], ["src"])
        self.assertIn("src/a.py", caught.exception.message)
        self.assertIn("blocked by %s" % ra["handle"], caught.exception.message)
        self.assertEqual(caught.exception.exit_code, 3)
        self.assertTrue(caught.exception.details.get("conflicts"))
        with self.assertRaises(store.UsageError):
            a.claim(ra["id"], ["x"], mode="shared")

    def test_the_server_s_clock_is_measured_again(self):
        self.stop_host(self.proc)
        self.proc = self.start_host("--clock-every", "0.05")
        ping = lambda: self.remote().client.call("ping")
        support.retry_until(lambda: ping()["clock_measurements"] >= 3, timeout=60)

    def test_timestamps_are_the_server_s(self):
        a = self.remote()
        rt = a.register(harness="x")
        with self.psycopg.connect(self.dsn) as conn:
            server_now = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]
        self.assertLessEqual(rt["started_at"], server_now)
        self.assertEqual(a.client.call("ping")["project"], self.project)

    def test_a_transaction_spans_requests_and_a_closed_socket_rolls_back(self):
        a = self.remote()
        rt = a.register(harness="x")
        with a.transaction():
            a.claim(rt["id"], ["one"])
            a.claim(rt["id"], ["two"])
        self.assertEqual(sorted(l["resource"] for l in a.leases_of(rt["id"])), ["one", "two"])
        with self.assertRaises(store.Refused):
            with a.transaction():
                a.release(rt["id"], ["one"])
                raise store.Refused("changed my mind")
        self.assertEqual(sorted(l["resource"] for l in a.leases_of(rt["id"])), ["one", "two"])
        # A client that dies inside a transaction: nothing of it stays, and the project lock is free.
        gone = hostclient.RemoteStore(self.project, self.sock)
        gone.client.call("begin", write=True)
        gone.release(rt["id"], everything=True)
        gone.close()
        self.assertEqual(sorted(l["resource"] for l in a.leases_of(rt["id"])), ["one", "two"])
        a.claim(rt["id"], ["three"])

    def test_only_listed_operations_run(self):
        a = self.remote()
        for op in ("caller", "close", "transaction", "__init__", "conn"):
            with self.subTest(op=op):
                with self.assertRaises(store.UsageError):
                    a.client.call(op)

    def test_garbage_on_the_socket_is_dropped_and_the_server_goes_on(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.sock)
        s.sendall(struct.pack(">I", 5) + b"\xff\xfe{[x")
        self.assertEqual(s.recv(10), b"")  # closed on us
        s.close()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.sock)
        s.sendall(struct.pack(">I", 1 << 30))
        self.assertEqual(s.recv(10), b"")
        s.close()
        self.assertEqual(self.remote().client.call("ping")["project"], self.project)

    def test_a_request_nested_too_deep_gets_an_error_reply_and_no_traceback(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.sock)
        self.addCleanup(s.close)

        def ask(body):
            s.sendall(struct.pack(">I", len(body)) + body)
            (size,) = struct.unpack(">I", self._recv(s, 4))
            return json.loads(self._recv(s, size))
        for depth in (40, 200000):  # beyond the limit; beyond json's own recursion limit
            with self.subTest(depth=depth):
                nested = b"[" * depth + b"]" * depth
                reply = ask(b'{"v": 1, "id": 9, "project": "%s", "op": "ping", "args": %s}'
                            % (self.project.encode(), nested))
                self.assertFalse(reply["ok"])
                self.assertEqual(reply["error"]["class"], "UsageError")
                self.assertEqual(reply["error"]["message"], "bad request: nested deeper than 32 levels")
        ok = ask(json.dumps({"v": 1, "id": 10, "project": self.project, "op": "ping"}).encode())
        self.assertTrue(ok["ok"], "the same connection goes on")
        self.proc.terminate()
        self.proc.wait(30)
        log = self.proc.stderr.read()  # the host process's log
        self.assertNotIn("Traceback", log)
        self.assertNotIn("RecursionError", log)

    def _recv(self, s, n):
        data = b""
        while len(data) < n:
            chunk = s.recv(n - len(data))
            self.assertTrue(chunk, "the host process closed the connection")
            data += chunk
        return data

    def test_the_socket_is_private(self):
        import stat
        self.assertEqual(stat.S_IMODE(os.stat(self.sock).st_mode), 0o600)


class HostDownTest(HostCase):
    def test_a_command_gets_exit_4_naming_how_to_start_it(self):
        self.stop_host(self.proc)
        with self.assertRaises(store.EnvError) as caught:
            hostclient.RemoteStore(self.project, self.sock)
        self.assertEqual(caught.exception.exit_code, 4)
        self.assertIn("host process is not running", caught.exception.message)
        self.assertEqual("start it: coord db start", caught.exception.hint)

    def test_a_request_for_another_project_is_refused(self):
        other = hostclient.RemoteStore("someone-else", self.sock)
        self.addCleanup(other.close)
        with self.assertRaises(store.EnvError):
            other.register(harness="x")


class HostLifecycleTest(HostCase):
    """hostclient.start_host starts `host.py supervise` detached; one per state directory (flock); the
    supervisor starts the process again after a crash; SIGTERM ends both; --idle ends them."""

    AUTO_START = False

    def supervisor_pid(self):
        with open(self.sock + ".lock") as f:
            return int(f.read().strip())

    def stop_all(self):
        try:
            pid = self.supervisor_pid()
        except (OSError, ValueError):
            return
        try:
            os.kill(pid, 15)
        except ProcessLookupError:
            return
        support.retry_until(lambda: not store.process_alive(pid), timeout=30)

    def start(self):
        hostclient.start_host(self.project, self.dsn, self.sock, environ=self.host_env)
        self.addCleanup(self.stop_all)
        return hostclient.host_status(self.project, self.sock)

    def test_started_on_demand_once_restarted_after_a_crash_and_ended_by_sigterm(self):
        first = self.start()
        self.assertTrue(first["running"], first)
        hostclient.start_host(self.project, self.dsn, self.sock, environ=self.host_env)  # answers already: nothing new
        again = subprocess.run([sys.executable, HOST, "supervise", "--dsn", self.dsn, "--project", self.project,
                                "--socket", self.sock], env=self.host_env, capture_output=True, text=True, timeout=60)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn("already running", again.stdout)
        self.assertEqual(hostclient.host_status(self.project, self.sock)["pid"], first["pid"])
        rt = hostclient.RemoteStore(self.project, self.sock)
        me = rt.register(harness="x")
        rt.claim(me["id"], ["kept.txt"])
        rt.close()
        os.kill(first["pid"], 9)  # the host process crashes
        now = support.retry_until(lambda: (lambda s: s if s["running"] and s["pid"] != first["pid"] else None)(
            hostclient.host_status(self.project, self.sock)), timeout=60)
        self.assertNotEqual(now["pid"], first["pid"])
        rt = hostclient.RemoteStore(self.project, self.sock)
        self.addCleanup(rt.close)
        self.assertEqual([l["resource"] for l in rt.leases_of(me["id"])], ["kept.txt"])
        with open(self.sock + ".log") as f:
            self.assertIn("starting it again", f.read())
        supervisor = self.supervisor_pid()
        os.kill(supervisor, 15)
        support.retry_until(lambda: not store.process_alive(supervisor) and not store.process_alive(now["pid"]),
                            timeout=60)
        down = hostclient.host_status(self.project, self.sock)
        self.assertFalse(down["running"])
        with self.assertRaises(store.EnvError) as caught:
            hostclient.RemoteStore(self.project, self.sock)
        self.assertEqual(caught.exception.exit_code, 4)

    def test_an_idle_host_process_ends_and_starts_again_on_demand(self):
        proc = subprocess.Popen([sys.executable, HOST, "supervise", "--dsn", self.dsn, "--project", self.project,
                                 "--socket", self.sock, "--idle", "1"], env=self.host_env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        support.retry_until(lambda: hostclient.host_status(self.project, self.sock)["running"], timeout=60)
        self.assertEqual(proc.wait(60), 0)  # idle: the child ended cleanly, the supervisor with it
        self.assertFalse(os.path.exists(self.sock))
        self.assertTrue(self.start()["running"])

    def test_a_supervisor_killed_outright_takes_its_host_process_with_it(self):
        first = self.start()
        supervisor = self.supervisor_pid()
        os.kill(supervisor, 9)
        support.retry_until(lambda: not store.process_alive(first["pid"]), timeout=60)
        again = self.start()  # the lock was the dead supervisor's: a new one starts
        self.assertTrue(again["running"])
        self.assertNotEqual(again["pid"], first["pid"])
        self.assertNotEqual(self.supervisor_pid(), supervisor)


class HostBeatTest(HostCase):
    """The host heartbeat (issue 25, item 3): the host process beats on the server's clock and
    keeps the safe-mode file its hooks read when the database is out of reach."""
    AUTO_START = False

    def setUp(self):
        super().setUp()
        self.env = dict(self.env, COORD_HOST_TTL="1.2", COORD_HOST_LEASE_DELAY="1")
        self.proc = self.start_host()
        self.safe = os.path.join(os.path.dirname(self.sock), "host.safe")

    def safe_leases(self):
        try:
            with open(self.safe) as f:
                return json.load(f)["leases"]
        except (OSError, ValueError):
            return None

    def test_the_host_beats_and_keeps_the_safe_mode_file(self):
        st = self.remote()
        first = [h for h in st.hosts() if h["id"] == store.host_identity()["id"]]
        self.assertEqual(len(first), 1)
        self.assertEqual((first[0]["ttl"], first[0]["lease_delay"], first[0]["state"]), (1.2, 1.0, "live"))
        support.retry_until(lambda: st.hosts()[0]["heartbeat_at"] > first[0]["heartbeat_at"], timeout=30)
        rt = st.register(conversation="c-beat", harness="x", pid=os.getpid())
        st.claim(rt["id"], ["src/a.py"], ttl=600)
        st.claim(rt["id"], ["log"], mode="append", ttl=600)
        leases = support.retry_until(lambda: self.safe_leases(), timeout=30)
        self.assertEqual([(l["resource"], l["handle"]) for l in leases], [("src/a.py", rt["handle"])])
        self.assertEqual(oct(os.stat(self.safe).st_mode & 0o777), "0o600")
        self.assertEqual(hostclient.safe_mode_refusals(["src/a.py"], self.safe), [])  # beating: nothing lapses

    def test_a_paused_host_process_s_hooks_refuse_once_its_leases_may_have_lapsed(self):
        st = self.remote()
        rt = st.register(conversation="c-pause", harness="x", pid=os.getpid())
        st.claim(rt["id"], ["src/a.py"], ttl=600)
        support.retry_until(lambda: self.safe_leases(), timeout=30)
        os.kill(self.proc.pid, signal.SIGSTOP)
        try:
            got = support.retry_until(lambda: hostclient.safe_mode_refusals(["src/a.py", "README"], self.safe),
                                      timeout=30)
            self.assertEqual([r["name"] for r in got], ["src/a.py"])
        finally:
            os.kill(self.proc.pid, signal.SIGCONT)
        # Beating again: the file is confirmed afresh and the write is allowed again.
        support.retry_until(lambda: hostclient.safe_mode_refusals(["src/a.py"], self.safe) == [], timeout=30)


# --------------------------------------------------------------------------- several hosts on one machine
# (issue 25, item 3) Each "host" is its own network + PID namespace (unshare, as root) with its own
# host process; all reach one real PostgreSQL server over a Unix socket (a path, which no
# network namespace hides). A host's link to the server can go through a proxy in this test
# process, and cutting the proxy is the partition: bytes stop flowing, connections stay open,
# as when a link goes down. No traffic leaves the machine; no TCP at all.

# The first process of a host's namespaces (pid 1 there): starts the host process's supervisor and
# N idle "agents" (sleep), prints their pids in the namespace's numbering, then obeys one command a
# line on stdin: "kill PID" (an agent), "stop"/"cont" (SIGSTOP/SIGCONT the host processes), EOF: end.
NS_DRIVER = r"""
import json, os, signal, subprocess, sys
host, dsn, project, sock, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
sup = subprocess.Popen([sys.executable, host, "supervise", "--dsn", dsn, "--project", project, "--socket", sock],
                       stdout=subprocess.DEVNULL)
agents = [subprocess.Popen(["sleep", "3600"]) for _ in range(n)]
print(json.dumps({"supervisor": sup.pid, "agents": [a.pid for a in agents], "me": os.getpid(),
                  "pid_ns": os.readlink("/proc/self/ns/pid")}), flush=True)
def host_pids():
    out = [sup.pid]
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/stat" % p) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == sup.pid:
                        out.append(int(p))
            except (OSError, ValueError, IndexError):
                pass
    return out
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "kill":
        a = [a for a in agents if a.pid == int(cmd[1])][0]
        a.kill(); a.wait()
    elif cmd[0] in ("stop", "cont"):
        for p in host_pids():
            os.kill(p, signal.SIGSTOP if cmd[0] == "stop" else signal.SIGCONT)
    print("ok", flush=True)
for a in agents:
    a.kill()
for p in host_pids():
    os.kill(p, signal.SIGCONT)
sup.terminate()
sup.wait(30)
"""


class PgProxy:
    """A byte pump from a Unix socket `<dir>/.s.PGSQL.<port>` to the real server's; cut() stops every
    byte both ways (connections stay open, new ones are accepted and get nothing), heal() closes
    what was open during the cut (as a link that comes back finds its TCP connections dead)."""

    def __init__(self, directory, server):
        import threading
        self.dir, self.port, self.server = directory, server.port, server
        os.makedirs(directory, exist_ok=True)
        self.target = os.path.join(server.dir, ".s.PGSQL.%d" % server.port)
        self.path = os.path.join(directory, ".s.PGSQL.%d" % server.port)
        self.cut_now = threading.Event()
        self.conns = []
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(64)
        self.closed = False
        threading.Thread(target=self.accept, daemon=True).start()

    def dsn(self):
        return "host=%s port=%d user=coord dbname=postgres" % (self.dir, self.port)

    def accept(self):
        import threading
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.target)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self.pump, args=(a, b), daemon=True).start()

    def pump(self, a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                if not self.cut_now.is_set():
                    b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        self.cut_now.set()

    def heal(self):
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self.cut_now.clear()

    def close(self):
        self.closed = True
        self.heal()
        self.sock.close()


class NsHost:
    """One host: its own network + PID (+ mount, for its own /proc) namespace, its host process and
    its idle agents, spoken to over its socket from this test process."""

    def __init__(self, case, name, dsn, agents=2):
        self.name = name
        self.state = os.path.join(case.tmp, "host-" + name)
        os.makedirs(self.state, mode=0o700)
        self.sock = os.path.join(self.state, "host.sock")
        self.safe = os.path.join(self.state, "host.safe")
        env = dict(case.host_env, COORD_HOST_NAME=name)
        self.proc = subprocess.Popen(
            ["unshare", "--net", "--pid", "--mount", "--fork", "--mount-proc", sys.executable, "-c", NS_DRIVER,
             HOST, dsn, case.project, self.sock, str(agents)],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        case.addCleanup(self.end)
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError("host %s did not start (unshare exited %s)" % (name, self.proc.wait(30)))
        self.info = json.loads(line)
        self.agents = self.info["agents"]
        self.st = support.retry_until(lambda: self._connect(case.project), timeout=60)
        case.addCleanup(self.st.close)

    def _connect(self, project):
        try:
            return hostclient.RemoteStore(project, self.sock)
        except store.EnvError:  # not listening yet
            return None

    def client_fresh(self):
        """Whether this host process's lease copy may still answer (its ping's lease_copy)."""
        try:
            return bool(self.st.client.call("ping")["lease_copy"]["fresh"])
        except store.EnvError:
            return False

    def command(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"

    def end(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.proc.stdout.close()


def exclusive_overlaps(lines, key="id"):
    """The audit checker: every pair of exclusive holders of overlapping names whose holding
    intervals (from lease.claimed to the event that ended it: released, reaped, expired, lost, or
    moved by a supersession) overlap. Assumes no lease lapsed in between (the tests hold them
    with a long TTL), so a lease's end is always an audit row.

    The intervals are in the order of the audit IDs: the order in which the writing transactions
    held the project's lock, which is the order their effects took place in. (Before pgstamp a
    row's `at` was the time its operation read when it started, before it waited for that lock,
    so a claim that waited behind the reap that freed its name could carry an earlier `at` than
    the reap: seen, a claim stamped 3 ms before the host beat's reap it queued behind.) Each pair
    reported is ((name, runtime, first ID, last ID), ...).

    key="at" (pgstamp): the same intervals by the rows' stamps. Since a write records its time as
    of the project lock (pg._Stamp), the stamps follow the lock order too, and a claim that
    queued behind the reap that freed its name is stamped no earlier than that reap."""
    open_, done = {}, []
    for row in map(json.loads, lines):
        ev, rt, subject, at, data = row["event"], row["runtime"], row["subject"], row[key], row["data"]
        if ev == "lease.claimed" and data.get("mode") == "exclusive":
            open_.setdefault((subject, rt), at)
        elif ev in ("lease.released", "lease.reaped", "lease.expired", "lease.lost"):
            start = open_.pop((subject, rt), None)
            if start is not None:
                done.append((subject, rt, start, at))
        elif ev == "runtime.superseded":
            for name in data.get("moved_leases", []):
                start = open_.pop((name, subject), None)
                if start is not None:
                    done.append((name, subject, start, at))
                    open_[(name, rt)] = at
    done += [(name, rt, start, float("inf")) for (name, rt), start in open_.items()]
    bad = []
    for i, (n1, r1, s1, e1) in enumerate(done):
        for n2, r2, s2, e2 in done[i + 1:]:
            if r1 != r2 and store.overlaps(n1, n2) and s1 < e2 and s2 < e1:
                bad.append(((n1, r1, s1, e1), (n2, r2, s2, e2)))
    return bad


class MultiHostCase(support.CoordTestCase):
    HOST_TTL, LEASE_DELAY = "2", "1.5"

    def setUp(self):
        super().setUp()
        self.server, self.psycopg = support.require_postgres(self)
        support.require_tool(self, "unshare")
        probe = subprocess.run(["unshare", "--net", "--pid", "--mount", "--fork", "--mount-proc", "true"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        if probe.returncode != 0:
            msg = "unshare cannot make network + PID namespaces here: %s" % probe.stdout.strip()
            if support.IN_CI:
                self.fail(msg)
            self.skipTest(msg)
        self.project = "hosts-%s" % uuid.uuid4().hex[:12]
        self.addCleanup(self._drop_schema)
        self.host_env = dict(self.env, PYTHONPATH=support.psycopg_dir(), COORD_HOST_TTL=self.HOST_TTL,
                             COORD_HOST_LEASE_DELAY=self.LEASE_DELAY)
        # The schema once, before the hosts race to migrate it.
        pg.Store({"dsn": self.server.dsn(), "project": self.project}).close()

    def _drop_schema(self):
        with self.psycopg.connect(self.server.dsn(), autocommit=True) as conn:
            conn.execute('DROP SCHEMA IF EXISTS "%s" CASCADE' % pg.pg_schema(self.project))

    def host(self, name, proxy=False, agents=2):
        dsn = self.server.dsn()
        if proxy:
            p = PgProxy(os.path.join(self.tmp, "link-" + name), self.server)
            self.addCleanup(p.close)
            dsn = p.dsn()
        h = NsHost(self, name, dsn, agents)
        h.proxy = p if proxy else None
        return h

    def agent(self, h, i=0, conversation=None):
        return h.st.register(conversation=conversation or "%s-agent-%d" % (h.name, i), harness="x", pid=h.agents[i])

    def audit_ok(self):
        st = pg.Store({"dsn": self.server.dsn(), "project": self.project}, migrate=False)
        try:
            lines = list(st.audit_lines())
        finally:
            st.close()
        self.assertTrue(any('"lease.claimed"' in line for line in lines))
        self.assertEqual(exclusive_overlaps(lines), [])
        self.assertEqual(exclusive_overlaps(lines, key="at"), [])  # pgstamp: by the stamps too


class MultiHostTest(MultiHostCase):
    def test_three_hosts_record_the_same_pids_and_each_judges_only_its_own(self):
        hosts = [self.host(n) for n in ("a", "b", "c")]
        rts = [self.agent(h) for h in hosts]
        # The measured fact: same pid numbers and boot id; only the PID namespace tells them apart.
        self.assertEqual(len(set(rt["pid"] for rt in rts)), 1, rts)
        self.assertEqual(len(set(rt["host"] for rt in rts)), 3)
        self.assertEqual(len(set(rt["host"].split("/")[0] for rt in rts)), 1)
        rows = {h["name"]: h for h in hosts[0].st.hosts()}
        self.assertEqual(sorted(rows), ["a", "b", "c"])
        self.assertTrue(all(h["state"] == "live" for h in rows.values()))
        # Host a's agent dies: a's own host process (its reap timer) ends it; b's and c's runtimes,
        # with the very same pid, stay live for everyone.
        hosts[0].command("kill %d" % hosts[0].agents[0])
        ended = support.retry_until(lambda: hosts[1].st.runtime(rts[0]["id"])["ended_at"] is not None
                                    and hosts[1].st.runtime(rts[0]["id"]), timeout=60)
        self.assertEqual(ended["end_reason"], "process-gone")
        for h in hosts:
            for rt in rts[1:]:
                self.assertTrue(h.st.runtime_live(h.st.runtime(rt["id"])))
                self.assertIsNone(h.st.runtime(rt["id"])["ended_at"])

    def test_list_all_shows_each_runtime_s_host(self):
        hosts = [self.host(n, agents=1) for n in ("a", "b")]
        rts = {h.name: self.agent(h) for h in hosts}
        env = dict(self.host_env, COORD_DB=support.pg_url(self.server), COORD_PROJECT_ID=self.project,
                   COORD_PYTHON=sys.executable)
        self.addCleanup(support.stop_host_process, hostclient.project_host_socket(self.project, env))

        def coord(*args):
            proc = subprocess.run([support.COORD] + list(args), env=env, stdin=subprocess.DEVNULL, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            return proc.stdout
        listed = {r["id"]: r.get("host") for r in json.loads(coord("list", "--all", "--json"))["runtimes"]}
        self.assertEqual({name: listed[rt["id"]] for name, rt in rts.items()}, {"a": "a", "b": "b"})
        text = coord("list", "--all")
        for name, rt in rts.items():
            self.assertRegex(text, r"%s .*host %s" % (rt["handle"], name))

    def test_in_a_container_a_command_names_how_to_start_the_host_process_there(self):
        # A container: its own PID (and mount, for its /proc) namespace; its commands start no host
        # process on demand, and the hint's command, run in it, starts one that serves them.
        env = dict(self.host_env, COORD_DB=support.pg_url(self.server), COORD_PROJECT_ID=self.project,
                   COORD_PYTHON=sys.executable)
        self.addCleanup(support.stop_host_process, hostclient.project_host_socket(self.project, env))
        script = ('{c} list; echo "rc=$?"; {c} db start >/dev/null; echo "rc=$?"; {c} claim src/x.py >/dev/null;'
                  ' echo "rc=$?"'.format(c=support.COORD))
        proc = subprocess.run(["unshare", "--pid", "--mount", "--fork", "--mount-proc", "sh", "-c", script], env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=180)
        self.assertEqual(proc.stdout.split(), ["rc=4", "rc=0", "rc=0"], proc.stderr)
        err = " ".join(proc.stderr.split())
        self.assertIn("runs in a nested PID namespace (a sandbox or a container), where coord starts none on demand", err)
        self.assertRegex(err, r"next: in a container where the agents run, start it in the container once \(a terminal"
                              r" in it or its entrypoint\): \S*coord db start; under a harness's sandbox")

    def test_a_directory_against_files_below_it_from_three_hosts_has_one_winner(self):
        import threading
        hosts = [self.host(n, agents=1) for n in ("a", "b", "c")]
        rts = [self.agent(h) for h in hosts]
        rounds, results = 15, []
        for r in range(rounds):
            claims = [("r%d" % r,), ("r%d/x.py" % r,), ("r%d/y/z.py" % r,)]
            barrier = threading.Barrier(3)
            won = [None] * 3

            def go(i):
                st = hostclient.RemoteStore(self.project, hosts[i].sock)
                try:
                    barrier.wait(30)
                    try:
                        st.claim(rts[i]["id"], list(claims[i]), ttl=600)
                        won[i] = True
                    except store.Refused:
                        won[i] = False
                finally:
                    st.close()
            threads = [threading.Thread(target=go, args=(i,)) for i in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            results.append(tuple(won))
        for won in results:
            self.assertNotIn(None, won)
            # The directory's holder excludes both files' holders; the two files do not overlap.
            self.assertTrue(won[0] != (won[1] or won[2]) or not any(won), results)
            self.assertTrue(any(won), results)
        self.audit_ok()


class HostPartitionTest(MultiHostCase):
    """Host a is cut off (or its host process paused) while holding a file: b gets it only after
    a's TTL plus its lease delay, and never while a's hooks may still allow a write to it."""

    def run_cut_off(self, cut, restore):
        a, b = self.host("a", proxy=True), self.host("b")
        ra, rb = self.agent(a), self.agent(b)
        a.st.claim(ra["id"], ["src/x.py"], ttl=600)
        support.retry_until(lambda: [l["resource"] for l in json.load(open(a.safe))["leases"]] == ["src/x.py"],
                            timeout=60)
        cut(a)
        last_allowed = time.time()
        got = None
        deadline = time.monotonic() + 60  # bounded: TTL 2 s + delay 1.5 s, with room for a loaded machine
        while time.monotonic() < deadline:
            now = time.time()
            if not hostclient.safe_mode_refusals(["src/x.py"], a.safe):
                last_allowed = now  # a's hook would still allow its agent's write
            if got is None:
                try:
                    got = b.st.claim(rb["id"], ["src"], ttl=600)
                except store.Refused:
                    pass
            if got is not None and hostclient.safe_mode_refusals(["src/x.py"], a.safe):
                break
            time.sleep(0.02)
        self.assertIsNotNone(got, "b never got the directory")
        taken = got[0]["acquired_at"]
        beat = [h for h in b.st.hosts() if h["name"] == "a"][0]
        gap = taken - last_allowed
        print("\n%s: a's hooks stopped allowing %.2f s before b got the lease (host TTL %s + delay %s after a's"
              " last beat; b took it %.2f s after that beat)" % (self.id().rsplit(".", 1)[1], gap, self.HOST_TTL,
                                                                self.LEASE_DELAY, taken - beat["heartbeat_at"]),
              file=sys.stderr)
        # In server time (one machine, one clock): b's lease starts after a's last allowed write ...
        self.assertGreater(gap, 0)
        # ... and only after a's TTL and lease delay past a's last beat (a paused host is not a dead one).
        self.assertGreaterEqual(taken, beat["heartbeat_at"] + beat["ttl"] + beat["lease_delay"])
        self.assertEqual(b.st.runtime(ra["id"])["end_reason"], "host-gone")
        restore(a)
        # Back: a's agent is told its runtime ended; the audit shows no two holders at once.
        def refused():
            try:
                a.st.usable_runtime(ra["id"])
            except store.Refused as exc:
                return exc
            except store.EnvError:
                return None
        self.assertIn("has ended", support.retry_until(refused, timeout=60).message)
        self.audit_ok()

    def test_a_partition(self):
        self.run_cut_off(lambda h: h.proxy.cut(), lambda h: h.proxy.heal())

    def test_a_lease_that_lapses_in_a_partition_is_not_written_under_from_the_copy(self):
        # The writer's own lease lapses while its host's LISTEN connection has not noticed the cut
        # (the copy counts as fresh for 3 s more) and a peer takes the name: from the moment the
        # lease may have lapsed (safe mode's margin), no decision of a's host process allows the
        # write from its copy; a's hook gets the database's answer or, cut off, safe mode's refusal.
        a, b = self.host("a", proxy=True), self.host("b")
        ra, rb = self.agent(a), self.agent(b)
        quick = hostclient.RemoteStore(self.project, a.sock, timeout=0.3)  # a hook's short wait
        self.addCleanup(quick.close)

        def decide():
            try:
                return quick.hook_write_decision(ra["conversation"], None, ["src/x.py"])
            except store.EnvError:
                return None
        a.st.claim(ra["id"], ["src/x.py"], ttl=2.5)
        support.retry_until(lambda: (decide() or {}).get("from") == "copy", timeout=60)
        support.retry_until(lambda: [l["resource"] for l in json.load(open(a.safe))["leases"]] == ["src/x.py"],
                            timeout=60)  # as run_cut_off: the safe-mode file has the lease
        a.proxy.cut()
        # its expiry as the server has it once a is cut off (nothing of a's renews it since)
        expires = [l for l in b.st.all_leases() if l["resource"] == "src/x.py"][0]["expires_at"]
        late, taken, refused = [], None, 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (taken is None or a.client_fresh()):
            at = time.time()
            got = decide()
            if got is not None and got["from"] == "copy" and not got["blocking"] \
                    and at > expires - store.SAFE_MARGIN + 0.2:
                late.append(round(at - expires, 2))
            if got is None:
                refused += bool(hostclient.safe_mode_refusals(["src/x.py"], a.safe))
            if taken is None and time.time() > expires + 0.1:
                try:
                    taken = b.st.claim(rb["id"], ["src/x.py"], ttl=600)
                except store.Refused:
                    pass
            time.sleep(0.02)
        self.assertIsNotNone(taken, "b took the lapsed lease")
        self.assertEqual(late, [], "writes allowed from a's copy after the lease may have lapsed (s after it)")
        self.assertGreater(refused, 0, "a's hook, cut off, refused the write in safe mode")

    def test_a_paused_host_process(self):
        self.run_cut_off(lambda h: h.command("stop"), lambda h: h.command("cont"))


# A direct client of a login role (psql's equivalent, no coord in it): it takes the project's lock
# in a write transaction, says so, then waits for a line on stdin and tries to write and commit.
LOCK_HOLDER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import psycopg
conn = psycopg.connect(sys.argv[2], autocommit=True)
conn.execute("BEGIN")
conn.execute("SELECT pg_advisory_xact_lock(%s)" % sys.argv[3])
print("locked", flush=True)
sys.stdin.readline()
try:
    conn.execute("SELECT 1")
    conn.execute("COMMIT")
    print("committed", flush=True)
except psycopg.Error as exc:
    print("error %s" % type(exc).__name__, flush=True)
"""


# coord's own client (a command inside `with st.transaction()`): begins a write transaction over its
# host process's socket, claims, says so, then waits for a line on stdin and commits.
COORD_HOLDER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import store
import pg
import hostclient
st = hostclient.RemoteStore(sys.argv[2], sys.argv[3])
st.client.call("begin", write=True)
st.claim(sys.argv[4], ["src/x.py"], ttl=600)
print("claimed", flush=True)
sys.stdin.readline()
try:
    st.client.call("commit")
    print(json.dumps({"committed": True}), flush=True)
except store.CoordError as exc:
    print(json.dumps({"error": exc.message}), flush=True)
"""


class StoppedClientTest(MultiHostCase):
    """A client stopped inside a write transaction (Ctrl-Z, a suspended host) holds the project's
    advisory lock only until the server's idle-in-transaction bound ends its session
    (pg.PG_BOUNDS, set by coord on every session and by `coord db setup` on every login role):
    another host's claim of the very name goes through meanwhile, the stopped side learns of the
    cut as an error once it runs again, and what was acknowledged stays."""

    HOST_TTL, LEASE_DELAY = "120", "60"  # the stopped host is not taken for gone meanwhile

    def claim_in_thread(self, h, rt, names):
        import threading
        out = {}

        def go():
            began = time.monotonic()
            try:
                out["leases"] = h.st.claim(rt["id"], names, ttl=600)
            except Exception as exc:  # reported by the caller
                out["error"] = exc
            out["took"] = time.monotonic() - began
        t = threading.Thread(target=go, daemon=True)
        t.start()
        t.join(60)  # a failure bound only: the server's bounds end the wait within seconds
        self.assertFalse(t.is_alive(), "the claim still waits behind the stopped holder")
        self.assertNotIn("error", out)
        return out

    def holders(self, st, name):
        return [l["runtime"] for l in st.all_leases() if l["resource"] == name]

    def test_a_host_process_stopped_inside_a_write_transaction(self):
        a, b = self.host("a", agents=1), self.host("b", agents=1)
        ra, rb = self.agent(a), self.agent(b)
        a.st.claim(ra["id"], ["src/kept.py"], ttl=600)  # acknowledged before the stop
        held = hostclient.RemoteStore(self.project, a.sock)
        self.addCleanup(held.close)
        held.client.call("begin", write=True)
        held.claim(ra["id"], ["src/x.py"], ttl=600)  # inside a's open transaction: the lock is a's
        a.command("stop")  # a's host process stopped (SIGSTOP) inside that transaction
        try:
            got = self.claim_in_thread(b, rb, ["src/x.py"])
        finally:
            a.command("cont")
        print("\n%s: b's claim took %.2f s behind the stopped holder" % (self.id().rsplit(".", 1)[1], got["took"]),
              file=sys.stderr)
        self.assertEqual([l["resource"] for l in got["leases"]], ["src/x.py"])
        with self.assertRaises(store.EnvError):
            held.client.call("commit")  # a's side, running again: an error, never a success
        self.assertEqual(self.holders(b.st, "src/x.py"), [rb["id"]])
        self.assertEqual(self.holders(b.st, "src/kept.py"), [ra["id"]], "what a had acknowledged stays")
        self.assertEqual([l["resource"] for l in a.st.claim(ra["id"], ["src/y.py"], ttl=600)], ["src/y.py"])
        self.audit_ok()

    def test_a_direct_client_of_a_login_role_stopped_inside_a_write_transaction(self):
        role_url = support.pg_login_url(self, self.server, self.project, self.psycopg)
        with self.psycopg.connect(role_url) as conn:  # coord db setup gave the role the bounds
            self.assertEqual([conn.execute("SHOW %s" % name).fetchone()[0] for name, _ in pg.PG_BOUNDS],
                             [value for _, value in pg.PG_BOUNDS])
        b = self.host("b", agents=1)
        rb = self.agent(b)
        holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, support.psycopg_dir(), role_url,
                                   str(pg.pg_lock_key(self.project))], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        self.addCleanup(holder.wait, 30)
        self.addCleanup(holder.kill)
        self.assertEqual(holder.stdout.readline().strip(), "locked")
        self.claim_behind_stopped(holder, b, rb)
        self.assertTrue(holder.stdout.readline().startswith("error "), "the cut client sees an error")
        self.assertEqual(self.holders(b.st, "src/x.py"), [rb["id"]])
        self.audit_ok()

    def claim_behind_stopped(self, holder, b, rb):
        """Stop `holder` (inside its transaction), claim src/x.py on host b meanwhile, continue it
        and tell it to go on (it then reports what happened to its transaction)."""
        os.kill(holder.pid, signal.SIGSTOP)
        try:
            got = self.claim_in_thread(b, rb, ["src/x.py"])
        finally:
            os.kill(holder.pid, signal.SIGCONT)
        print("\n%s: b's claim took %.2f s behind the stopped holder" % (self.id().rsplit(".", 1)[1], got["took"]),
              file=sys.stderr)
        holder.stdin.write("go\n")
        holder.stdin.flush()

    def test_a_coord_client_stopped_inside_a_write_transaction(self):
        a, b = self.host("a", agents=1), self.host("b", agents=1)
        ra, rb = self.agent(a), self.agent(b)
        holder = subprocess.Popen([sys.executable, "-c", COORD_HOLDER, support.ROOT, self.project, a.sock, ra["id"]],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.addCleanup(holder.wait, 30)
        self.addCleanup(holder.kill)
        self.assertEqual(holder.stdout.readline().strip(), "claimed")
        self.claim_behind_stopped(holder, b, rb)  # Ctrl-Z inside the transaction
        said = json.loads(holder.stdout.readline())
        self.assertIn("nothing of it was written", said.get("error", ""), said)
        self.assertEqual(self.holders(b.st, "src/x.py"), [rb["id"]])
        self.audit_ok()

    @support.stress
    def test_host_processes_stopped_at_random_moments_lose_nothing_acknowledged(self):
        """A client on host a claims in write transactions of three requests each, as fast as it can, while a's host process is stopped at random moments for longer than the
        bounds and b claims the same names: every commit a's client was told of is in the audit,
        every cut one is an error, and no two exclusive holders ever overlap."""
        import random
        import threading
        a, b = self.host("a", agents=1), self.host("b", agents=1)
        ra, rb = self.agent(a), self.agent(b)
        done, told, failed = threading.Event(), [], []

        def churn():
            i = 0
            while not done.is_set():
                i += 1
                name = "churn/%d.py" % i
                st = None
                try:
                    st = hostclient.RemoteStore(self.project, a.sock)
                    st.client.call("begin", write=True)
                    st.claim(ra["id"], [name], ttl=600)
                    st.client.call("commit")
                    told.append(name)
                except store.CoordError:
                    failed.append(name)
                finally:
                    if st is not None:
                        st.close()
        t = threading.Thread(target=churn, daemon=True)
        t.start()
        for r in range(8):
            time.sleep(random.uniform(0.0, 0.3))
            a.command("stop")
            try:
                self.claim_in_thread(b, rb, ["round/%d.py" % r])
                time.sleep(random.uniform(0.0, 6.0))  # sometimes past the idle bound, sometimes not
            finally:
                a.command("cont")
        done.set()
        t.join(120)
        self.assertFalse(t.is_alive())
        mine = set(l["resource"] for l in b.st.all_leases() if l["runtime"] == ra["id"])
        self.assertEqual(sorted(set(told) - mine), [], "an acknowledged claim was lost")
        self.assertEqual(sorted(set(failed) & mine), [], "a claim reported failed was written")
        print("\n%s: %d acknowledged, %d cut" % (self.id().rsplit(".", 1)[1], len(told), len(failed)), file=sys.stderr)
        self.audit_ok()


class AuditCheckerTest(support.CoordTestCase):
    """The checker the multi-host tests run over the audit history finds what it must."""

    def line(self, i, at, event, runtime, subject, **data):
        return json.dumps({"id": i, "at": at, "event": event, "runtime": runtime, "subject": subject, "data": data})

    def test_it_finds_two_exclusive_holders_of_overlapping_names_at_once(self):
        ok = [self.line(1, 1.0, "lease.claimed", "a", "src/x.py", mode="exclusive"),
              self.line(2, 2.0, "lease.reaped", "a", "src/x.py", mode="exclusive"),
              self.line(3, 2.0, "lease.claimed", "b", "src", mode="exclusive"),
              self.line(4, 2.5, "lease.claimed", "c", "src/y", mode="append"),
              self.line(5, 3.0, "runtime.superseded", "d", "b", moved_leases=["src"])]
        self.assertEqual(exclusive_overlaps(ok), [])
        bad = ok + [self.line(6, 3.5, "lease.claimed", "e", "src/z/w.py", mode="exclusive")]
        self.assertEqual([(x[1], y[1]) for x, y in exclusive_overlaps(bad)], [("d", "e")])
        early = ok[:1] + [self.line(2, 1.5, "lease.claimed", "b", "src", mode="exclusive")]
        self.assertEqual(len(exclusive_overlaps(early)), 1)


class ReapTimerTest(HostCase):
    """On PostgreSQL the host process reaps the project on a timer (Server.keep_reaping): a
    runtime whose process died is ended without any operation touching its leases."""

    AUTO_START = False

    def test_a_dead_runtime_is_reaped_by_the_timer(self):
        self.proc = self.start_host("--reap-every", "0.05")
        a = self.remote()
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        self.addCleanup(proc.wait)
        self.addCleanup(proc.kill)
        rt = a.register(harness="x", pid=proc.pid)
        a.claim(rt["id"], ["src/a.py"])
        proc.kill()
        proc.wait()
        support.retry_until(lambda: a.runtime(rt["id"])["end_reason"] == "process-gone", timeout=60)
        self.assertEqual(a.leases_of(rt["id"]), [])
        # the timer counts a reap after its transaction commits: a reader can see the end first
        support.retry_until(lambda: a.client.call("ping")["reaps"] >= 1, timeout=30)


class StampAfterLockTest(HostCase):
    """pgstamp: an operation reads its time before its transaction waits for the project lock,
    yet what it records follows the lock order. Another process (this test, on its own server
    connection) holds the lock while the host process's claim and send wait for it; their stamps
    must not be earlier than the holder's last moment, read on the server just before it commits."""

    def hold_the_lock(self):
        conn = self.psycopg.connect(self.dsn, autocommit=True)
        self.addCleanup(conn.close)
        conn.execute("BEGIN")
        conn.execute("SELECT pg_advisory_xact_lock(%d)" % pg.pg_lock_key(self.project))
        return conn

    def waiting(self, conn):
        return conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                            ).fetchone()[0] > 0

    def run_behind(self, op):
        """op() in a thread while the lock is held; -> (its result, the holder's last server time)."""
        import threading
        holder = self.hold_the_lock()
        watch = self.psycopg.connect(self.dsn, autocommit=True)
        self.addCleanup(watch.close)
        out = {}

        def go():
            try:
                out["result"] = op()
            except Exception as exc:  # reported below
                out["error"] = exc
        t = threading.Thread(target=go)
        t.start()
        support.retry_until(lambda: self.waiting(watch) or not t.is_alive(), timeout=60)
        last = holder.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]
        holder.execute("COMMIT")
        t.join(60)
        self.assertNotIn("error", out)
        return out["result"], last

    def audit_at(self, st, event):
        return [json.loads(l)["at"] for l in st.audit_lines() if json.loads(l)["event"] == event]

    def test_a_claim_and_a_send_that_waited_for_the_lock_are_stamped_after_its_holder(self):
        st = self.remote()
        rt = st.register(conversation="c-stamp", harness="x", pid=os.getpid())
        peer = st.register(conversation="c-peer", harness="x", pid=os.getpid())
        st.claim(rt["id"], ["warm.py"], ttl=600)  # its record is known now: the next claim is one wait
        leases, last = self.run_behind(lambda: st.claim(rt["id"], ["src/a.py"], ttl=600))
        self.assertGreaterEqual(leases[0]["acquired_at"], last)
        self.assertGreaterEqual(self.audit_at(st, "lease.claimed")[-1], last)
        self.assertGreaterEqual(leases[0]["expires_at"], last + 600)
        sent, last = self.run_behind(lambda: st.send(rt["id"], "hello", peer["handle"]))
        self.assertGreaterEqual(self.audit_at(st, "message.sent")[-1], last)
        # Stamps in the order of the audit IDs (the lock order), from start to end.
        stamps = [json.loads(l)["at"] for l in st.audit_lines()]
        self.assertEqual(stamps, sorted(stamps))


class BeatWithoutReapTest(HostCase):
    """pgstamp: the host beat (on its timer and soon after each claim) does not reap: only the reap
    timer does. The beat after a claim was a scan of the whole project under the project lock,
    which the caller's next operation waited behind. Liveness is judged as it is read, so a dead
    holder blocks nobody in between."""
    AUTO_START = False

    def test_beats_leave_the_reaping_to_the_reap_timer(self):
        self.env = dict(self.env, COORD_HOST_TTL="1.2", COORD_HOST_LEASE_DELAY="1")  # a beat every 0.2 s
        self.proc = self.start_host("--reap-every", "600")
        a = self.remote()
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        self.addCleanup(proc.wait)
        self.addCleanup(proc.kill)
        rt = a.register(conversation="c-dead", harness="x", pid=proc.pid)
        peer = a.register(conversation="c-peer", harness="x", pid=os.getpid())
        a.claim(rt["id"], ["src/a.py"], ttl=600)
        proc.kill()
        proc.wait()
        a.claim(peer["id"], ["docs"], ttl=600)  # a claim: the host beats soon after it
        beats = a.client.call("ping")["host_beats"]
        support.retry_until(lambda: a.client.call("ping")["host_beats"] >= beats + 3, timeout=60)
        self.assertIsNone(a.runtime(rt["id"])["ended_at"], "a beat reaped it")
        self.assertEqual(a.client.call("ping")["reaps"], 0)
        # Judged as read: not live, and its lease is the peer's to take (the claim reaps what it touches).
        self.assertFalse(a.runtime_live(a.runtime(rt["id"])))
        self.assertEqual([l["resource"] for l in a.claim(peer["id"], ["src"], ttl=600)], ["src"])
        self.assertEqual(a.runtime(rt["id"])["end_reason"], "process-gone")


# --------------------------------------------------------------------------- the lease copy
# (issue 25, pglisten) The host process answers the hook's PreToolUse write decision from a copy
# of the project's leases, re-read on each wake-up (NOTIFY on commit, no payload) and on a timer.
# These tests run the timer slowly (--copy-every 600), so only wake-ups refresh the copy and a
# missing wake-up shows as a decision that never changes; every wait is bounded.

class LeaseCopyTest(HostCase):
    AUTO_START = False

    def setUp(self):
        super().setUp()
        self.proc = self.start_host("--copy-every", "600", "--listen-retry", "5")
        self.a = self.remote()
        start = store.process_start(os.getpid())
        self.me = self.a.register(conversation="mine", harness="x", pid=os.getpid(), pid_start=start)
        # the peer: another connection, the engine in this process (as another host process would be)
        self.peer_store = pg.Store({"dsn": self.dsn, "project": self.project}, environ=self.env)
        self.addCleanup(self.peer_store.close)
        self.peer = self.peer_store.register(conversation="peer", harness="x", pid=os.getpid(), pid_start=start)
        self.wait_fresh()

    def copy_status(self):
        return self.a.client.call("ping")["lease_copy"]

    def wait_fresh(self):
        support.retry_until(lambda: self.copy_status()["fresh"], timeout=60)

    def decide(self, names=("src/a.py",)):
        return self.a.hook_write_decision("mine", None, list(names))

    def from_copy(self, names=("src/a.py",)):
        """The decision once the copy answers it: a wake-up that lands after wait_fresh (the host
        process's own commits send them too) leaves the copy stale until its refresh, and on a
        loaded machine a decision made at once came from the database (1 suite in 3)."""
        return support.retry_until(lambda: (lambda d: d if d["from"] == "copy" else None)(self.decide(names)),
                                   timeout=60)

    def test_a_peer_s_claim_is_seen_after_its_wake_up_and_its_release_frees_the_name(self):
        first = self.from_copy()
        self.assertEqual((first["from"], first["blocking"], first["runtime"]["id"]), ("copy", [], self.me["id"]))
        self.peer_store.claim(self.peer["id"], ["src"])
        support.retry_until(lambda: self.decide()["from"] == "copy" and self.decide()["blocking"], timeout=60)
        got = self.decide()
        self.assertEqual([(b["resource"], b["runtime"], b["requested"], b["handle"]) for b in got["blocking"]],
                         [("src", self.peer["id"], "src/a.py", self.peer["handle"])])
        self.assertEqual(self.decide(["docs/x.md"])["blocking"], [])
        self.peer_store.release(self.peer["id"], ["src"])
        support.retry_until(lambda: self.decide()["from"] == "copy" and not self.decide()["blocking"], timeout=60)
        status = self.copy_status()
        self.assertGreaterEqual(status["hits"], 4)
        self.assertGreaterEqual(status["refreshes"], 3)

    def test_the_listen_connection_killed_falls_back_to_the_database_and_recovers(self):
        old = self.copy_status()["backend_pid"]
        self.assertIsNotNone(old)
        self.from_copy()
        with self.psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s, 30000)", (old,))  # waits for it to end
        support.retry_until(lambda: self.copy_status()["reconnects"] >= 1, timeout=60)
        # claimed while this host LISTENs nowhere (it connects again after --listen-retry 5 s; were
        # it quicker, this claim would merely wake it): the copy must not answer
        self.peer_store.claim(self.peer["id"], ["src/a.py"])
        got = self.decide()
        self.assertEqual(([b["runtime"] for b in got["blocking"]], got["from"]), ([self.peer["id"]], "database"))
        support.retry_until(lambda: self.copy_status()["backend_pid"] not in (None, old), timeout=60)
        support.retry_until(lambda: self.decide()["from"] == "copy", timeout=60)
        self.assertEqual([b["runtime"] for b in self.decide()["blocking"]], [self.peer["id"]])
        self.assertGreaterEqual(self.copy_status()["reconnects"], 1)

    def test_a_lease_the_copy_sees_expired_is_decided_by_the_database(self):
        # expired at once, and kept (its holder's process lives: its next heartbeat may renew it,
        # which sends no wake-up): the copy does not answer for it
        self.peer_store.claim(self.peer["id"], ["src/b.py"], ttl=1, now=time.time() - 10)
        support.retry_until(lambda: self.copy_status()["fresh"] and self.copy_status()["leases"] == 1, timeout=60)
        got = self.decide(["src/b.py"])
        self.assertEqual((got["from"], got["blocking"]), ("database", []))
        self.from_copy(["src/c.py"])


# --------------------------------------------------------------------------- a server crash
# (issue 25, pgcrash) Claimant processes claim, release and send through the host process in a
# loop and log every call that returned success (acknowledged) and every failure; the test's own
# PostgreSQL server is stopped with `pg_ctl stop -m immediate` mid-stream and started again.
#
# Its settings are the test server's: fsync=off, full_page_writes=off, synchronous_commit=off.
# fsync and full_page_writes only matter when the operating system itself goes down (page cache
# lost, torn pages): `-m immediate` ends the server's processes, and what they wrote to the kernel
# survives, so fsync=off does not weaken this test; a power cut cannot be tested here.
# synchronous_commit is different: with it off the server answers COMMIT before the commit's WAL
# leaves its own memory, and an immediate stop loses acknowledged commits. Left as the server's
# default, it is the product that must turn it on for its sessions (the engine does: "server
# crash" block in _PgConnection), and this test fails when it does not.

CLAIMANT = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import store
import pg
import hostclient
project, sock, log, me, peer_file, stop, deadline, pid = sys.argv[2:10]
deadline = time.monotonic() + float(deadline)
out = open(log, "a", buffering=1)
def note(**kw):
    out.write(json.dumps(kw) + "\n")
st, rt = None, None
i, held = 0, []  # held: names whose claim was acknowledged and not released since
while time.monotonic() < deadline and not os.path.exists(stop):  # bounded: the deadline, or the stop file
    start = time.time()
    step, name = "connect", None
    try:
        if st is None:
            st = hostclient.RemoteStore(project, sock)
        if rt is None:
            step = "register"
            rt = st.register(conversation=me, harness="x", pid=int(pid))  # an agent that outlives this loop
            note(op="register", id=rt["id"], handle=rt["handle"], start=start)
            continue
        peer = open(peer_file).read().strip() if os.path.exists(peer_file) else ""
        if not peer:
            time.sleep(0.01)
            continue
        i += 1
        step, name = "claim", "%s/f%d" % (me, i)
        st.claim(rt["id"], [name], ttl=600)
        note(op="claim", name=name, start=start)
        held.append(name)
        if i % 3 == 0 and len(held) > 2:
            step, name = "release", held.pop(0)
            st.release(rt["id"], [name])
            note(op="release", name=name, start=start)
        step, name = "send", None
        body = "%s says %d" % (me, i)
        st.send(rt["id"], body, peer)
        note(op="send", body=body, start=start)
        step = "shared"
        try:  # one name everyone wants, a directory against a file below it: the overlap checker's food
            st.claim(rt["id"], ["shared" if me.endswith("0") else "shared/x.py"], ttl=600)
            st.release(rt["id"], ["shared", "shared/x.py"])
        except store.Refused:
            pass
    except store.EnvError as exc:  # not acknowledged: it may or may not have happened
        note(op=step, name=name, error=type(exc).__name__, exit=exc.exit_code, message=exc.message, start=start,
             end=time.time())
        if "host process" in exc.message:
            try:
                st.close()
            except Exception:
                pass
            st = None
        time.sleep(0.02)
note(op="end")
"""


class ServerCrashTest(HostCase):
    """A real server crash under load: every acknowledged claim, release and message survives it,
    the audit has no two exclusive holders at once, and the host process comes back by itself."""
    AUTO_START = False
    CLAIMANTS = 3

    def setUp(self):
        super().setUp()
        bindir = support.postgres_bindir()
        # This test's own server, since it is crashed. The WAL writer's longest delay (10 s) leaves
        # an asynchronous commit in the server's memory long enough that a crash surely loses it.
        self.server = support.PostgresServer(bindir, options="-c wal_writer_delay=10000")
        self.addCleanup(self.server.stop)
        self.dsn = self.server.dsn()

    def _drop_schema(self):
        pass  # the server (and its directory) goes with the test

    def logs(self, i):
        path = os.path.join(self.tmp, "claimant-%d.log" % i)
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(line) for line in f if line.endswith("\n")]

    def acks(self, i):
        return [e for e in self.logs(i) if "error" not in e and e["op"] in ("claim", "release", "send")]

    def test_acknowledged_claims_and_messages_survive_an_immediate_stop(self):
        self.crash_under_load(1)

    def test_three_immediate_stops_in_a_row(self):  # support.STRESS
        self.crash_under_load(3)

    def crash_under_load(self, crashes):
        self.proc = self.start_host()
        inbox = self.remote()
        peer = inbox.register(conversation="the-peer", harness="x", pid=os.getpid())
        stop, peer_file = os.path.join(self.tmp, "stop"), os.path.join(self.tmp, "peer")
        procs = []
        for i in range(self.CLAIMANTS):
            agent = subprocess.Popen(["sleep", "3600"])
            self.addCleanup(lambda a=agent: (a.kill(), a.wait(30)))
            p = subprocess.Popen([sys.executable, "-c", CLAIMANT, support.ROOT, self.project, self.sock,
                                  os.path.join(self.tmp, "claimant-%d.log" % i), "claimant-%d" % i, peer_file,
                                  stop, "240", str(agent.pid)], env=self.env)
            procs.append(p)
            self.addCleanup(lambda p=p: (p.poll() is None and p.kill(), p.wait(30)))
        with open(peer_file, "w") as f:
            f.write(peer["handle"])
        # Mid-stream: every claimant has acknowledged calls, then the server dies at once.
        def going(enough):
            self.assertEqual([p.poll() for p in procs], [None] * len(procs), "a claimant ended")
            return all(len(self.acks(i)) >= enough[i] for i in range(self.CLAIMANTS))
        support.retry_until(lambda: going([15] * self.CLAIMANTS), timeout=120)
        up = []  # (server back, next crash): a call started in between must not fail
        for _ in range(crashes):
            if up:
                up[-1][1] = time.time()
            self.server.crash()
            down = [len(self.logs(i)) for i in range(self.CLAIMANTS)]
            # While it is down every claimant's calls fail (exit 4, saying the server cannot be reached).
            support.retry_until(lambda: all(any("error" in e for e in self.logs(i)[down[i]:])
                                            for i in range(self.CLAIMANTS)), timeout=60)
            self.server.start()
            up.append([time.time(), float("inf")])
            marks = [len(self.acks(i)) for i in range(self.CLAIMANTS)]
            support.retry_until(lambda: going([m + 15 for m in marks]), timeout=120)
        open(stop, "w").close()
        for p in procs:
            self.assertEqual(p.wait(60), 0)
        self.assertIsNone(self.proc.poll(), "the host process died with the server")  # it reconnected

        errors = [e for i in range(self.CLAIMANTS) for e in self.logs(i) if "error" in e]
        self.assertTrue(errors)
        for e in errors:
            self.assertEqual((e["error"], e["exit"]), ("EnvError", 4), e)
            self.assertTrue(e["message"].startswith(("the PostgreSQL server cannot be reached",
                                                     "cannot connect to the PostgreSQL server")), e)
        # A call made once the server accepts connections again succeeds: no stale connection
        # of the dead server is handed to it.
        late = [e for e in errors if any(back <= e["start"] and e["end"] < crash for back, crash in up)]
        self.assertEqual(late, [], "calls failed after the server was back")

        st = pg.Store({"dsn": self.dsn, "project": self.project}, migrate=False)
        self.addCleanup(st.close)
        bodies = {m["body"] for m in st.open_messages(peer["id"])}
        held = {}
        for lease in st.all_leases():
            held.setdefault(lease["handle"], set()).add(lease["resource"])
        for i in range(self.CLAIMANTS):
            log = self.logs(i)
            handle = [e["handle"] for e in log if e["op"] == "register"][-1]
            want, gone, sent = set(), set(), []
            for e in log:
                if "error" in e:  # a claim or release that failed may have committed: either state is right
                    want.discard(e.get("name"))
                    gone.discard(e.get("name"))
                    continue
                if e["op"] == "claim":
                    want.add(e["name"])
                    gone.discard(e["name"])
                elif e["op"] == "release":
                    want.discard(e["name"])
                    gone.add(e["name"])
                elif e["op"] == "send":
                    sent.append(e["body"])
            mine = {r for r in held.get(handle, ()) if not r.startswith("shared")}
            self.assertEqual(sorted(want - mine), [], "acknowledged claims lost by claimant-%d" % i)
            self.assertEqual(sorted(gone & mine), [], "acknowledged releases undone for claimant-%d" % i)
            self.assertEqual([b for b in sent if b not in bodies], [], "acknowledged messages lost")
        lines = list(st.audit_lines())
        self.assertTrue(any('"shared"' in line or '"shared/x.py"' in line for line in lines))
        self.assertEqual(exclusive_overlaps(lines), [])

    def test_the_first_request_after_a_restart_gets_a_fresh_connection(self):
        self.proc = self.start_host()
        clients = [self.remote() for _ in range(3)]
        rt = clients[0].register(conversation="c-restart", harness="x", pid=os.getpid())
        for c in clients:  # three connections at once: the pool then keeps three idle ones
            c.client.call("begin", write=False)
        for c in clients:
            c.client.call("commit")
        self.server.crash()
        with self.assertRaises(store.EnvError) as down:
            clients[0].runtime(rt["id"])
        self.assertEqual(down.exception.exit_code, 4)
        self.server.start()
        for c in clients:  # none is handed a connection of the server that died
            self.assertEqual(c.runtime(rt["id"])["id"], rt["id"])
        self.assertIsNone(self.proc.poll())


# --------------------------------------------------------------------------- a host clock set ahead
# (issue 25, pgcrash) A machine's clock cannot be changed by a test, so the host process runs with
# its wall clock a year ahead through a test-only sitecustomize (time.time and time.time_ns shifted,
# as settimeofday shifts CLOCK_REALTIME and not CLOCK_MONOTONIC). Nothing of it may reach a lease:
# the host process stamps and judges on the server's clock, and refuses a `now` from its clients.

CLOCK_AHEAD = r"""
import os, time
_ahead = float(os.environ.get("COORD_TEST_CLOCK_AHEAD") or 0)
if _ahead:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _ahead
    time.time_ns = lambda: _time_ns() + int(_ahead * 1e9)
"""
YEAR = 365 * 86400.0


class ClockAheadTest(HostCase):
    AUTO_START = False

    def test_a_host_clock_a_year_ahead_changes_no_lease_outcome(self):
        shim = os.path.join(self.tmp, "clock-ahead")
        os.makedirs(shim)
        with open(os.path.join(shim, "sitecustomize.py"), "w") as f:
            f.write(CLOCK_AHEAD)
        env = dict(self.env, PYTHONPATH=shim + os.pathsep + support.psycopg_dir(), COORD_TEST_CLOCK_AHEAD=str(YEAR))
        check = subprocess.run([sys.executable, "-c", "import time; print(time.time())"], env=env,
                               stdout=subprocess.PIPE, text=True, timeout=60)
        self.assertGreater(float(check.stdout) - time.time(), YEAR - 3600)  # the shim works
        proc = subprocess.Popen([sys.executable, HOST, "serve", "--dsn", self.dsn, "--project", self.project,
                                 "--socket", self.sock], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        self.addCleanup(self.stop_host, proc)
        self.assertIn("serving", proc.stdout.readline())
        a = self.remote()
        ra = a.register(conversation="c-ahead", harness="x", pid=os.getpid())
        mine = a.claim(ra["id"], ["src/a.py"], ttl=5)[0]
        # Stamped in server time (this machine's real clock: the server runs here), not a year on.
        self.assertLess(abs(mine["acquired_at"] - time.time()), 600, mine)
        self.assertEqual(mine["expires_at"] - mine["acquired_at"], 5)
        # Another host with a right clock (this process, the engine itself).
        b = pg.Store({"dsn": self.dsn, "project": self.project}, migrate=False)
        self.addCleanup(b.close)
        rb = b.register(conversation="c-right", harness="x", pid=os.getpid())
        b.claim(rb["id"], ["src/b.py"], ttl=600)
        with self.assertRaises(store.Refused):
            b.claim(rb["id"], ["src"], ttl=600)
        # The clock-ahead host reaps (its reap timer does too): b's lease is no more expired than before.
        a.reap()
        self.assertIn(("src/b.py", rb["handle"]), [(l["resource"], l["handle"]) for l in b.all_leases()])
        # A client on that host cannot hand its clock in either, by name or by position.
        for call in (lambda: a.reap(now=time.time() + YEAR),
                     lambda: a.claim(ra["id"], ["src/c.py"], "exclusive", "", 5, time.time() + YEAR),
                     lambda: a.renew(ra["id"], now=time.time() + YEAR)):
            with self.assertRaises(store.UsageError) as refused:
                call()
            self.assertIn("keeps the time", refused.exception.message)
        self.assertIn(("src/b.py", rb["handle"]), [(l["resource"], l["handle"]) for l in b.all_leases()])
        # The hook-side safe-mode check on that host, itself run with the clock a year ahead, reads
        # the monotonic clock plus the server's offset: a live lease does not lapse a year early.
        a.claim(ra["id"], ["docs/long.md"], ttl=600)
        safe = os.path.join(os.path.dirname(self.sock), "host.safe")

        def listed():
            try:
                with open(safe) as f:
                    return "docs/long.md" in [l["resource"] for l in json.load(f)["leases"]]
            except (OSError, ValueError):
                return False
        support.retry_until(listed, timeout=60)
        hook = subprocess.run([sys.executable, "-c", "import sys, json, hostclient; print(json.dumps("
                               "hostclient.safe_mode_refusals(['docs/long.md'], sys.argv[1])))", safe],
                              env=dict(env, PYTHONPATH=shim + os.pathsep + support.ROOT), cwd=support.ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual((hook.returncode, hook.stdout.strip()), (0, "[]"), hook.stderr)
        # a's lease ends by the server's clock: b gets the directory only at or after its expiry.
        def take():
            try:
                return b.claim(rb["id"], ["src"], ttl=600)
            except store.Refused:
                return None
        got = support.retry_until(take, timeout=60)
        self.assertGreaterEqual([l for l in got if l["resource"] == "src"][0]["acquired_at"], mine["expires_at"])


# --------------------------------------------------------------------------- README's PostgreSQL section, as written (issue 25, pgdocs)

class DriverDirTest(HostCase):
    """The driver where coord's printed command puts it: `pip install --target
    <state>/driver/pythonM.m` (a distribution's externally-managed python3 refuses a plain or
    --user install; Debian 12's pip 23.0.1 takes --target). The host process and --doctor's
    driver check find it there with nothing on PYTHONPATH; before, both needed PYTHONPATH or
    site-packages."""

    AUTO_START = False

    def test_the_host_process_imports_the_driver_from_the_state_directory(self):
        env = {k: v for k, v in self.env.items() if k != "PYTHONPATH"}
        where = hostclient.driver_dir(environ=env)
        self.assertTrue(where.startswith(os.path.join(self.state, "fleet-agent-coord", "driver", "python")), where)
        before = hostclient.driver_status(sys.executable, env)
        self.assertFalse(before["ok"], before)
        self.assertEqual(before["install"], "%s -m pip install --upgrade --target %s 'psycopg[binary]==%s'"
                         % (sys.executable, where, support.psycopg_pin()))
        os.makedirs(os.path.dirname(where))
        os.symlink(support.psycopg_dir(), where)  # the layout pip --target writes (tests/provision uses it)
        self.assertEqual(hostclient.driver_status(sys.executable, env)["version"], support.psycopg_pin())
        proc = subprocess.Popen([sys.executable, HOST, "serve", "--dsn", self.dsn, "--project", self.project,
                                 "--socket", self.sock], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        self.addCleanup(self.stop_host, proc)
        line = proc.stdout.readline()
        self.assertIn("serving", line, proc.stderr.read() if proc.poll() is not None else line)
        self.assertEqual(self.remote().claim(self.remote().register(conversation="c1")["id"], ["src/a.py"])
                         [0]["resource"], "src/a.py")


class JoinLeaveTest(support.CoordTestCase):
    """`coord db join URL` and `coord db leave` (the person's commands): a host joins only a
    project whose records the URL reaches, never while an agent is live in its own SQLite
    database of the project, and renames what it stops using aside; an agent may run neither."""

    def setUp(self):
        super().setUp()
        server, self.psycopg = support.require_postgres(self)
        self.server = server
        self.project = "jointest-%s" % uuid.uuid4().hex[:10]
        self.addCleanup(self._drop)
        self.plain = {k: v for k, v in self.env.items() if k != "COORD_DB"}
        self.plain.update(PYTHONPATH=support.psycopg_dir(), COORD_PYTHON=sys.executable,
                          COORD_PROJECT_ID=self.project)
        self.addCleanup(support.stop_host_process, hostclient.project_host_socket(self.project, self.plain))

    def _drop(self):
        with self.psycopg.connect(self.server.dsn(), autocommit=True) as conn:
            conn.execute('DROP SCHEMA IF EXISTS "%s" CASCADE' % pg.pg_schema(self.project))

    def test_join_checks_the_records_and_keeps_what_it_stops_using(self):
        url = support.pg_url(self.server)
        term = support.person_terminal(self, self.tmp, self.plain)
        rc, out = term.run("%s db join '%s'" % (support.COORD, url), timeout=120)
        self.assertEqual(rc, 3, out)
        self.assertIn("the server at that URL has no records of project %s" % self.project, out)
        self.assertIn("coord db migrate URL", out)
        self.assertFalse(os.path.exists(store.project_url_path(self.project, self.plain)), "nothing was written")
        # Records there (another host moved them: here a Store on the server), and a live agent in
        # this host's own SQLite database of the project.
        far = pg.Store({"dsn": url, "project": self.project})
        far.register(conversation="far-agent", harness="claude")
        far.close()
        local = store.Store(store.resolve_db_path(self.plain))
        agent = local.register(conversation="c-local", harness="claude", pid=os.getpid())
        local.close()
        rc, out = term.run("%s db join '%s'" % (support.COORD, url), timeout=120)
        self.assertEqual(rc, 3, out)
        self.assertIn("agent(s) are live in this host's SQLite database", out)
        self.assertIn(agent["handle"], out)
        self.assertFalse(os.path.exists(store.project_url_path(self.project, self.plain)))
        # An agent may not join.
        proc = subprocess.run([support.COORD, "db", "join", url], env=dict(self.plain, COORD_RUNTIME_ID=agent["id"]),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True, timeout=120)
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("is the person's decision", proc.stderr)
        local = store.Store(store.resolve_db_path(self.plain))
        local.bye(agent["id"])
        local.close()
        sqlite_path = store.resolve_db_path(self.plain)
        rc, out = term.run("%s db join '%s'" % (support.COORD, url), timeout=120)
        self.assertEqual(rc, 0, out)
        self.assertIn("now uses PostgreSQL", out)
        self.assertIn("1 runtimes", out)
        self.assertFalse(os.path.exists(sqlite_path))
        self.assertTrue([n for n in os.listdir(os.path.dirname(sqlite_path))
                         if n.startswith(os.path.basename(sqlite_path) + ".migrated-")], "the SQLite file is kept")
        self.assertEqual(store.project_database(self.plain)["engine"], "postgresql")
        rc, out = term.run("%s db join '%s'" % (support.COORD, url), timeout=120)
        self.assertEqual(rc, 3, out)
        self.assertIn("in PostgreSQL already on this host", out)
        rc, out = term.run("%s db leave" % support.COORD, timeout=120)
        self.assertEqual(rc, 0, out)
        self.assertIn("no longer uses PostgreSQL", out)
        self.assertEqual(store.project_database(self.plain)["engine"], "sqlite")
        url_file = store.project_url_path(self.project, self.plain)
        self.assertTrue([n for n in os.listdir(os.path.dirname(url_file))
                         if n.startswith(os.path.basename(url_file) + ".migrated-")], "the URL file is kept")

    def test_readme_s_order_the_driver_first_then_join_leaves_the_state_directory_private(self):
        # The driver command makes <state>/driver/pythonX.Y as pip does, under the usual umask: the
        # state directory comes out 0755; joining makes it 0700 again.
        state = store.state_dir(self.plain)
        self.assertFalse(os.path.exists(state))
        old = os.umask(0o022)
        try:
            os.makedirs(hostclient.driver_dir(None, self.plain))
        finally:
            os.umask(old)
        self.assertEqual(os.stat(state).st_mode & 0o777, 0o755)
        url = support.pg_url(self.server)
        far = pg.Store({"dsn": url, "project": self.project})
        far.register(conversation="far-agent", harness="claude")
        far.close()
        term = support.person_terminal(self, self.tmp, self.plain)
        missing = support.pg_url(self.server, "no_such_db")
        rc, out = term.run("%s db join '%s'" % (support.COORD, missing), timeout=120)
        self.assertEqual(rc, 4, out)
        self.assertIn("the database no_such_db that the URL names does not exist on that server", out)
        self.assertIn("CREATE DATABASE \"no_such_db\" ENCODING 'UTF8' TEMPLATE template0", " ".join(out.split()))
        rc, out = term.run("%s db join '%s'" % (support.COORD, url), timeout=120)
        self.assertEqual(rc, 0, out)
        self.assertEqual(os.stat(state).st_mode & 0o777, 0o700)


class ReadmePostgresTest(support.CoordTestCase):
    """README's "Several hosts: PostgreSQL" section run as written against the real test server:
    `coord db setup` with the admin URL typed at its prompt, the driver line (checked against the
    command coord prints, not run: no network here), `coord db migrate URL` by the person at a
    terminal, a second host (its own HOME and state directory) given its URL as README says, and
    the move back. The URLs are README's with the host part replaced by the test server's socket;
    the login roles are README's own, so a role the URL names that setup did not create fails.
    The project's records (leases, messages, the private audit export) survive each move."""

    START, END = "## Several hosts: PostgreSQL", "## Harnesses"

    def blocks(self):
        return support.readme_blocks(self.START, self.END)

    def setUp(self):
        super().setUp()
        import re
        self.re = re
        server, self.psycopg = support.require_postgres(self)
        self.server = server
        self.repo = os.path.join(self.tmp, "repo")
        os.mkdir(self.repo)
        subprocess.run(["git", "init", "-q", self.repo], check=True, env=self.env, timeout=60)
        subprocess.run(support.script_argv(os.path.join(support.ROOT, "install")) + [self.repo, "--project-id",
                        "my-project"], check=True, env=self.env, stdout=subprocess.DEVNULL, timeout=120)
        self.plain = {k: v for k, v in self.env.items() if k not in ("COORD_DB", "COORD_PROJECT_ID")}
        # The installed coord runs this interpreter, whose psycopg the test cache holds.
        self.plain.update(PYTHONPATH=support.psycopg_dir(), COORD_PYTHON=sys.executable)
        home2 = os.path.join(self.tmp, "home2")
        os.mkdir(home2)
        self.other = dict(self.plain, HOME=home2, XDG_STATE_HOME=os.path.join(self.tmp, "state2"))
        self.roles = []
        self.addCleanup(self._drop)
        for env in (self.plain, self.other):
            self.addCleanup(support.stop_host_process, hostclient.project_host_socket("my-project", env))

    def _drop(self):
        with self.psycopg.connect(self.server.dsn(), autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS %s CASCADE" % pg.pg_ident(pg.pg_schema("my-project")))
            for role in self.roles + list(pg.pg_role_names("my-project").values()):
                if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                    conn.execute("DROP OWNED BY %s CASCADE" % pg.pg_ident(role))
                    conn.execute("DROP ROLE %s" % pg.pg_ident(role))

    def url(self, readme_url):
        """README's URL with its user kept and its host replaced by the test server's socket."""
        user = self.re.match(r"postgresql://([^@/]+)@", readme_url)
        self.assertIsNotNone(user, readme_url)
        return support.pg_url(self.server).replace("postgresql://coord@", "postgresql://%s@" % user.group(1))

    def line(self, line):
        line = self.re.sub(r"\s{2,}# .*$", "", line)  # a trailing comment would hide the terminal's end marker
        return self.re.sub(r"'(postgresql://[^']*)'", lambda m: "'%s'" % self.url(m.group(1)), line)

    def typed(self, term, line, expect=0):
        rc, out = term.run(self.line(line), timeout=180)
        self.assertEqual(rc, expect, "%s\n%s" % (line, out))
        return out

    def coord(self, env, *args, **extra):
        proc = subprocess.run([".coord/coord"] + list(args), cwd=self.repo, env=dict(env, **extra), text=True,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True, timeout=120)
        self.assertEqual(proc.returncode, 0, "%s\n%s" % (args, proc.stderr))
        return proc.stdout

    def records(self, env=None):
        env = env or self.plain
        listed = json.loads(self.coord(env, "list", "--all", "--json"))
        return (self.coord(env, "audit", "--private"),
                sorted((l["resource"], l["handle"]) for l in listed["leases"]))

    def test_readme_postgresql_sequence_as_written(self):
        setup, driver, migrate, other_host, other_off, back = self.blocks()
        # Records on SQLite first: an agent's lease and a message to it.
        agent = json.loads(self.coord(self.plain, "hello", "--conversation", "c1", "--json"))["runtime"]
        self.coord(self.plain, "claim", "src/a.py", "-p", "fix", COORD_RUNTIME_ID=agent["id"])
        self.coord(self.plain, "send", "hello there", "--to", agent["handle"], COORD_RUNTIME_ID=agent["id"])
        before = self.records()
        term = support.person_terminal(self, self.repo, self.plain)

        # coord db setup, the admin URL typed at its prompt.
        self.assertEqual(len(setup), 1, setup)
        self.roles = self.re.findall(r"--login (\S+)", setup[0])
        self.assertTrue(self.roles, setup)
        os.write(term.fd, ("%s; echo %s$?%s\n" % (self.line(setup[0]), term._MARK, term._MARK)).encode())
        term._read_until(b"PostgreSQL admin URL")
        os.write(term.fd, (support.pg_url(self.server) + "\n").encode())
        buf, m = term._read_until((term._MARK + r"(\d+)" + term._MARK).encode(), timeout=180)
        self.assertEqual(int(m.group(1)), 0, buf.decode("utf-8", "replace"))

        # The driver: README's line is the command coord prints for `python3` 3.11 with the default
        # state directory, written with `~` (test_host.DriverDirTest runs that layout).
        home = os.path.expanduser("~")
        printed = hostclient.psycopg_install_command("python3", (3, 11), {"XDG_STATE_HOME": ""})
        self.assertEqual([self.re.sub(r"\s{2,}# .*$", "", l) for l in driver],
                         [printed.replace(" %s/" % home, " ~/")])

        # The move, by the person at a terminal, with README's first login role in the URL.
        out = "".join(self.typed(term, line) for line in migrate)
        self.assertIn("moved project my-project from sqlite to postgresql", out)
        self.assertIn("PostgreSQL (project my-project", out)
        self.assertEqual(self.records(), before, "every record, now through the host process")

        # Another host: its own HOME and state directory, README's lines, its own role.
        term2 = support.Terminal(self, self.other, self.repo)
        out = "".join(self.typed(term2, line) for line in other_host)
        self.assertIn("project my-project on this host now uses PostgreSQL", out)
        self.assertIn("src/a.py", out, "the lease claimed on the first host")
        self.assertIn(agent["handle"], out)
        self.assertEqual(self.records(self.other)[1], before[1])
        self.coord(self.other, "claim", "src/b.py")  # the second host's own record
        moved = self.records()
        self.assertIn("src/b.py", [r for r, _h in moved[1]])

        # Moving back: the other host lets go of the URL, then the first host moves the records.
        for line in other_off:
            self.typed(term2, line)
        self.assertEqual(json.loads(self.coord(self.other, "db", "status", "--json"))["engine"], "sqlite")
        out = "".join(self.typed(term, line) for line in back)
        self.assertIn("moved project my-project from postgresql to sqlite", out)
        self.assertEqual(json.loads(self.coord(self.plain, "db", "status", "--json"))["engine"], "sqlite")
        self.assertEqual(self.records(), moved, "every record, back in SQLite")


# pgpeer: a client's caller facts are taken only as far as the kernel shows them for the process
# that connected (SO_PEERCRED and its /proc ancestry). The forging client is a real process of
# the same user speaking the real protocol through hostclient.HostClient.
FORGER = r"""
import json, os, sys
import store
import pg
import hostclient
project, sock, victim, victim_start, how = sys.argv[1:6]
victim = int(victim)
client = hostclient.HostClient(project, sock)
facts = store.caller_facts(None, {}, complete=True)
try:
    if how == "chain":  # another process's ancestry in place of its own
        facts["chain"] = [[victim, victim_start]] + facts["chain"]
        out = client.call("decide_caller", facts)
    elif how == "tail":  # its own chain, and the victim appended above it
        facts["chain"] = facts["chain"] + [[victim, victim_start]]
        out = client.call("decide_caller", facts)
    elif how == "person":  # the person at a terminal whose session leader is the victim
        key = "person:%d:pts/77:%d:%s" % (os.getuid(), victim, victim_start)
        out = client.call("decide_person_runtime", [key, victim, victim_start, "pts/77"], register=False)
    elif how == "harness":  # the victim as its own harness process
        out = client.call("superseded_attachment", "c-victim", victim, victim_start)
    else:  # what it really is
        out = client.call("decide_caller", facts)
    print(json.dumps({"ok": out}))
except store.CoordError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": exc.message, "details": exc.details}))
"""


class PeerFactsTest(HostCase):
    def setUp(self):
        super().setUp()
        self.victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        self.addCleanup(self.victim.wait)
        self.addCleanup(self.victim.kill)
        self.victim_start = support.retry_until(lambda: store.process_start(self.victim.pid), timeout=30)
        st = self.remote()
        self.theirs = st.register(conversation="c-victim", harness="x", pid=self.victim.pid,
                                  pid_start=self.victim_start)
        self.mine = st.register(conversation="c-mine", harness="x", pid=os.getpid(),
                                pid_start=store.process_start(os.getpid()))

    def forge(self, how):
        run = subprocess.run([sys.executable, "-c", FORGER, self.project, self.sock, str(self.victim.pid),
                              self.victim_start, how], env=dict(self.env, PYTHONPATH=support.ROOT),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr)
        return json.loads(run.stdout)

    def test_the_real_chain_passes(self):
        self.assertEqual(self.forge("real")["ok"]["id"], self.mine["id"])

    def test_another_process_s_chain_is_refused(self):
        for how in ("chain", "tail"):
            with self.subTest(how=how):
                out = self.forge(how)
                self.assertEqual(out.get("error"), "Refused", out)
                self.assertEqual(out["details"].get("reason"), "caller-facts", out)
                self.assertIn("process %d" % self.victim.pid, out["message"])

    def test_a_forged_person_key_is_refused(self):
        out = self.forge("person")
        self.assertEqual(out.get("error"), "Refused", out)
        self.assertIn("person at a terminal", out["message"])

    def test_a_harness_pid_not_among_its_ancestors_is_refused(self):
        out = self.forge("harness")
        self.assertEqual(out.get("error"), "Refused", out)
        self.assertIn("not the connecting process", out["message"])


class RemotePidRuleTest(HostCase):
    """pgpeer: a command on a PostgreSQL project (a RemoteStore) applies Store.pid_judged_here's
    rule to the pid comparisons it makes in its own process, with its own host, and names its
    host for workspace.other_host (which read `st.host` and got a remote call instead)."""

    def test_only_this_host_s_runtimes_are_judged_here(self):
        import workspace
        st = self.remote()
        mine = st.register(conversation="c-here", harness="x", pid=os.getpid())
        self.assertEqual(st.host["id"], store.host_identity()["id"])
        self.assertTrue(st.pid_judged_here(mine))
        self.assertFalse(st.pid_judged_here(dict(mine, host="another-boot/pid:[4026531836]")))
        with st.transaction():
            w = st.insert_work("here", "active", "tok", path="/nonexistent/clone", runtime=mine["id"])
        self.assertIsNone(workspace.other_host(st, w))
