"""host.py, the per-host coord process of a PostgreSQL project (issue 25, being built), and its
stdlib client in store.py (HostClient, RemoteStore): a real host process on a real PostgreSQL
server (support.require_postgres), spoken to over its real Unix socket."""

import os
import socket
import struct
import subprocess
import sys
import uuid

import support
import store

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
            conn.execute('DROP SCHEMA IF EXISTS "%s" CASCADE' % store.pg_schema(self.project))

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
        st = store.RemoteStore(self.project, self.sock)
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
        gone = store.RemoteStore(self.project, self.sock)
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

    def test_the_socket_is_private(self):
        import stat
        self.assertEqual(stat.S_IMODE(os.stat(self.sock).st_mode), 0o600)


class HostDownTest(HostCase):
    def test_a_command_gets_exit_4_naming_how_to_start_it(self):
        self.stop_host(self.proc)
        with self.assertRaises(store.EnvError) as caught:
            store.RemoteStore(self.project, self.sock)
        self.assertEqual(caught.exception.exit_code, 4)
        self.assertIn("host process is not running", caught.exception.message)
        self.assertEqual("start it: coord db start", caught.exception.hint)

    def test_a_request_for_another_project_is_refused(self):
        other = store.RemoteStore("someone-else", self.sock)
        self.addCleanup(other.close)
        with self.assertRaises(store.EnvError):
            other.register(harness="x")


class HostLifecycleTest(HostCase):
    """store.start_host starts `host.py supervise` detached; one per state directory (flock); the
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
        store.start_host(self.project, self.dsn, self.sock, environ=self.host_env)
        self.addCleanup(self.stop_all)
        return store.host_status(self.project, self.sock)

    def test_started_on_demand_once_restarted_after_a_crash_and_ended_by_sigterm(self):
        first = self.start()
        self.assertTrue(first["running"], first)
        store.start_host(self.project, self.dsn, self.sock, environ=self.host_env)  # answers already: nothing new
        again = subprocess.run([sys.executable, HOST, "supervise", "--dsn", self.dsn, "--project", self.project,
                                "--socket", self.sock], env=self.host_env, capture_output=True, text=True, timeout=60)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn("already running", again.stdout)
        self.assertEqual(store.host_status(self.project, self.sock)["pid"], first["pid"])
        rt = store.RemoteStore(self.project, self.sock)
        me = rt.register(harness="x")
        rt.claim(me["id"], ["kept.txt"])
        rt.close()
        os.kill(first["pid"], 9)  # the host process crashes
        now = support.retry_until(lambda: (lambda s: s if s["running"] and s["pid"] != first["pid"] else None)(
            store.host_status(self.project, self.sock)), timeout=60)
        self.assertNotEqual(now["pid"], first["pid"])
        rt = store.RemoteStore(self.project, self.sock)
        self.addCleanup(rt.close)
        self.assertEqual([l["resource"] for l in rt.leases_of(me["id"])], ["kept.txt"])
        with open(self.sock + ".log") as f:
            self.assertIn("starting it again", f.read())
        supervisor = self.supervisor_pid()
        os.kill(supervisor, 15)
        support.retry_until(lambda: not store.process_alive(supervisor) and not store.process_alive(now["pid"]),
                            timeout=60)
        down = store.host_status(self.project, self.sock)
        self.assertFalse(down["running"])
        with self.assertRaises(store.EnvError) as caught:
            store.RemoteStore(self.project, self.sock)
        self.assertEqual(caught.exception.exit_code, 4)

    def test_an_idle_host_process_ends_and_starts_again_on_demand(self):
        proc = subprocess.Popen([sys.executable, HOST, "supervise", "--dsn", self.dsn, "--project", self.project,
                                 "--socket", self.sock, "--idle", "1"], env=self.host_env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        support.retry_until(lambda: store.host_status(self.project, self.sock)["running"], timeout=60)
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
