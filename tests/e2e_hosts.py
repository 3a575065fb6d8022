"""End-to-end tests across two hosts (issue 25, "Tested for real"): the real Claude Code and Codex
on host B, a peer on host A, one PostgreSQL project.

Each host is its own network + PID (+ mount, for its own /proc) namespace on this machine, as in
test_host.MultiHostCase, with its own state directory (the project's URL in its settings file,
store.write_project_url, as `coord db migrate` leaves it), its own HOME, its own checkout of the
repository (cloned from one origin that has coord installed and committed, as two machines
would have) and its own host process, started with `.coord/coord db start` inside the namespace
(coord never starts one on demand from a nested PID namespace: a person or a machine's boot does).
Both reach one real PostgreSQL server over its Unix socket (a path, which no network namespace
hides). Host B's loopback is its own, so the scripted model (tests/modelserver.py, in this test
process) is reached through a pump: B's 127.0.0.1:PORT -> a Unix socket -> this process's
127.0.0.1:PORT. No traffic leaves the machine; the model server still refuses anything that
tries to.

Scenario 1: on A a runtime (an idle process of A's: `sleep`) claims src/a.py exclusively with
`coord claim` through A's host process; on B the harness is told by the model to write src/a.py
and is denied by coord's PreToolUse hook, the reason naming A's handle; a free file is written.
Scenario 2: `coord send` on A to B's agent reaches B's model at its next tool boundary.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses as h  # noqa: E402
import support  # noqa: E402
from modelserver import say, shell, tool  # noqa: E402

import store  # noqa: E402 (support put the project root on sys.path)
import pg
import hostclient

# The first process of a host's namespaces (pid 1 there). It brings its loopback up, pumps its
# 127.0.0.1:PORT to the test's Unix socket (the scripted model), prints one line, then runs one
# request a line from stdin: {"op": "run", argv, env, cwd, timeout} -> the finished process's
# code and output; {"op": "idle"} -> the pid of a new idle process (an agent's process on this
# host). EOF: it exits, and the kernel ends every process left in its PID namespace.
NS_DRIVER = r"""
import fcntl, json, os, socket, struct, subprocess, sys, threading, time
port, bridge = int(sys.argv[1]), sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH22x", b"lo", 0))[:18])[1]  # SIOCGIFFLAGS
fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))  # SIOCSIFFLAGS: IFF_UP
s.close()
lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lst.bind(("127.0.0.1", port))
lst.listen(64)
def pump(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    for x in (a, b):
        try:
            x.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
def accept():
    while True:
        c, _ = lst.accept()
        u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            u.connect(bridge)
        except OSError:
            c.close()
            continue
        for a, b in ((c, u), (u, c)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()
threading.Thread(target=accept, daemon=True).start()
print(json.dumps({"me": os.getpid(), "pid_ns": os.readlink("/proc/self/ns/pid")}), flush=True)
idle = []
for line in sys.stdin:
    req = json.loads(line)
    if req["op"] == "idle":
        idle.append(subprocess.Popen(["sleep", "3600"]))
        reply = {"pid": idle[-1].pid}
    else:
        start = time.monotonic()
        p = subprocess.Popen(req["argv"], cwd=req["cwd"], env=req["env"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        timed_out = False
        try:
            out, err = p.communicate(timeout=req["timeout"])
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(p.pid, 9)
            out, err = p.communicate()
        reply = {"code": p.returncode, "stdout": out.decode("utf-8", "backslashreplace"),
                 "stderr": err.decode("utf-8", "backslashreplace"), "seconds": time.monotonic() - start,
                 "timed_out": timed_out}
    print(json.dumps(reply), flush=True)
"""


class ModelBridge:
    """A Unix socket in the test's directory whose every connection is pumped to the scripted
    model's 127.0.0.1:PORT in this process's network namespace."""

    def __init__(self, path, port):
        self.path, self.port, self.closed = path, port, False
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(64)
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.port), timeout=30)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self.pump, args=(a, b), daemon=True).start()

    @staticmethod
    def pump(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.closed = True
        self.sock.close()


class Machine:
    """One host: its namespaces (NS_DRIVER as their pid 1), state directory, HOME, checkout."""

    def __init__(self, case, name, origin):
        self.case, self.name = case, name
        base = os.path.join(case.tmp, "host-" + name)
        self.state, self.home = os.path.join(base, "state"), os.path.join(base, "home")
        self.codex_home = os.path.join(base, "codex-home")
        os.makedirs(self.home)
        os.makedirs(self.state, mode=0o700)
        subprocess.run(["git", "clone", "-q", origin, os.path.join(base, "repo")], check=True, env=case.git_env,
                       timeout=60)
        self.repo = os.path.realpath(os.path.join(base, "repo"))
        # This host's environment: its own state directory (where the project's URL is), no COORD_DB.
        self.env = dict(case.env, HOME=self.home, XDG_STATE_HOME=self.state, COORD_DB="",
                        COORD_PROJECT_ID=case.project, COORD_HOST_NAME=name, COORD_PYTHON=sys.executable,
                        PYTHONPATH=support.psycopg_dir())
        # The installer on this machine too: the hook runtime copy lives under this machine's HOME
        # (outside every checkout), which a clone does not carry.
        proc = subprocess.run(support.script_argv(os.path.join(h.ROOT, "install")) + [self.repo, "--project-id",
                               case.project], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=60)
        case.assertEqual(proc.returncode, 0, "install on host %s failed:\n%s%s" % (name, proc.stdout, proc.stderr))
        store.write_project_url(case.project, case.pg_url, self.env)
        self.socket = hostclient.project_host_socket(case.project, self.env)
        bridge = ModelBridge(os.path.join(base, "model.sock"), case.server.port)
        case.addCleanup(bridge.close)
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            ["unshare", "--net", "--pid", "--mount", "--fork", "--mount-proc", sys.executable, "-c", NS_DRIVER,
             str(case.server.port), bridge.path],
            env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        case.addCleanup(self.end)
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError("host %s did not start (unshare exited %s)" % (name, self.proc.wait(30)))
        self.info = json.loads(line)
        self.coord("db", "start")  # as a person starts it on a machine

    def ask(self, req):
        with self.lock:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise AssertionError("host %s's driver ended" % self.name)
        return json.loads(line)

    def run(self, argv, env, cwd=None, timeout=120):
        """Run argv inside this host's namespaces; -> harnesses.RunResult."""
        r = self.ask({"op": "run", "argv": argv, "env": env, "cwd": cwd or self.repo, "timeout": timeout})
        return h.RunResult(argv, r["code"], r["stdout"], r["stderr"], r["seconds"], r["timed_out"])

    def coord(self, *args, code=0):
        """This checkout's installed `.coord/coord ARGS --json`, run on this host; -> its reply (exit `code`)."""
        r = self.run(support.script_argv(os.path.join(self.repo, ".coord", "coord")) + list(args) + ["--json"],
                     self.env, timeout=90)
        if r.code != code or r.timed_out:
            raise AssertionError("coord %s on host %s: %s" % (" ".join(args), self.name, r.describe()))
        return json.loads(r.stdout)

    def idle_process(self):
        return self.ask({"op": "idle"})["pid"]

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


class TwoHosts(support.CoordTestCase):
    """A PostgreSQL project on two namespace hosts; the harness (`harness`) runs on host B."""

    harness = None

    def setUp(self):
        super().setUp()
        server, self.psycopg = support.require_postgres(self)
        self.pg_url = support.pg_url(server)
        self.cli = h.require_cli(self, self.harness) if self.harness else None
        support.require_tool(self, "unshare")
        support.require_tool(self, "git")
        probe = subprocess.run(["unshare", "--net", "--pid", "--mount", "--fork", "--mount-proc", "true"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        if probe.returncode != 0:
            msg = "unshare cannot make network + PID namespaces here: %s" % probe.stdout.strip()
            if support.IN_CI:
                self.fail(msg)
            self.skipTest(msg)
        self.project = "e2ehosts-%s" % uuid.uuid4().hex[:12]
        self.addCleanup(self._drop_schema)
        self.server = h.ModelServer()
        self.addCleanup(self.server.close)
        self.git_env = dict(self.env, GIT_AUTHOR_NAME="e2e", GIT_AUTHOR_EMAIL="e2e@example.invalid",
                            GIT_COMMITTER_NAME="e2e", GIT_COMMITTER_EMAIL="e2e@example.invalid")
        # The origin: coord installed by the real ./install and committed, as a team's repository.
        origin = h.git_repo(os.path.join(self.tmp, "origin"))
        throwaway = dict(self.env, COORD_DB="", COORD_PROJECT_ID="", XDG_STATE_HOME=os.path.join(self.tmp, "install"))
        proc = subprocess.run(support.script_argv(os.path.join(h.ROOT, "install")) + [origin, "--project-id", self.project],
                              env=throwaway, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, "install failed:\n%s%s" % (proc.stdout, proc.stderr))
        for name in ("src/a.py", "src/b.py"):
            os.makedirs(os.path.join(origin, "src"), exist_ok=True)
            with open(os.path.join(origin, name), "w") as f:
                f.write("original\n")
        for argv in (["add", "-A"], ["commit", "-q", "-m", "install coord"]):
            subprocess.run(["git", "-C", origin] + argv, check=True, env=self.git_env, timeout=60)
        self.a = Machine(self, "a", origin)
        self.b = Machine(self, "b", origin)
        # The test's own view of the project: the engine in this process, as in test_host.
        self.db = pg.Store({"dsn": server.dsn(), "project": self.project}, migrate=False)
        self.addCleanup(self.db.close)

    def _drop_schema(self):
        with self.psycopg.connect(support.require_postgres(self)[0].dsn(), autocommit=True) as conn:
            conn.execute('DROP SCHEMA IF EXISTS "%s" CASCADE' % pg.pg_schema(self.project))

    def peer_on_a(self, claim=True):
        """A runtime of host A (its process an idle process there) holding src/a.py exclusively,
        claimed with `coord claim` through A's host process; -> its record."""
        pid = self.a.idle_process()
        rt = self.a.coord("hello", "--conversation", "peer-on-a", "--pid", str(pid))["runtime"]
        if claim:
            self.a.coord("claim", "src/a.py", "--runtime", rt["id"], "-p", "peer work on host a")
        return rt

    def run_on_b(self, script, prompt="Do the scripted task.", timeout=120):
        """Load `script` and run the harness once in B's checkout, inside B's namespaces."""
        self.server.load(script)
        extra = {k: self.b.env[k] for k in ("XDG_STATE_HOME", "COORD_PROJECT_ID", "COORD_DB", "COORD_HOST_NAME")}
        if self.harness == "claude":
            argv = [self.cli, "-p", prompt, "--output-format", "stream-json", "--verbose",
                    "--permission-mode", "acceptEdits", "--allowedTools", "Bash"]
            env = h.claude_env(self.b.home, self.server, extra)
        else:
            h.trust_codex_repo(self.b.codex_home, self.server, self.b.repo)
            argv = [self.cli, "exec", "--json", prompt]
            env = h.codex_env(self.b.home, self.b.codex_home, self.server, extra)
        result = self.b.run(argv, env, timeout=timeout)
        self.assertEqual(self.server.refused, [], "the harness tried to leave the machine")
        self.assertFalse(result.timed_out, result.describe())
        self.assertEqual(result.code, 0, result.describe())
        self.assertEqual(self.server.errors, [], result.describe())
        return result

    def read_b(self, rel):
        path = os.path.join(self.b.repo, rel)
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return f.read()

    def b_agent(self, session=None):
        """B's live harness runtime, as host A lists it (`coord list` on A)."""
        rts = [rt for rt in self.a.coord("list")["runtimes"] if rt.get("conversation") != "peer-on-a"
               and not rt.get("agent_id") and (session is None or rt.get("conversation") == session)]
        self.assertEqual(len(rts), 1, rts)
        return rts[0]

    def assert_two_hosts(self, peer, session):
        """The peer's runtime is A's, B's agent is B's: two hosts, one boot, two PID namespaces;
        and B never ended A's runtime (whose pid means nothing on B)."""
        hosts = {row["name"]: row["id"] for row in self.db.hosts()}
        self.assertEqual(sorted(hosts), ["a", "b"])
        self.assertNotEqual(hosts["a"], hosts["b"])
        self.assertEqual(hosts["a"].split("/")[0], hosts["b"].split("/")[0])  # one kernel, one boot id
        a_rt = self.db.runtime(peer["id"])
        self.assertEqual(a_rt["host"], hosts["a"])
        self.assertIsNone(a_rt["ended_at"], a_rt)
        b_rts = [rt for rt in self.db.runtimes_of([session]) if not rt.get("agent_id")]
        self.assertEqual([rt["host"] for rt in b_rts], [hosts["b"]], b_rts)


class ClaudeOnTwoHosts(TwoHosts):
    harness = "claude"

    def test_a_peer_s_lease_on_host_a_denies_claude_s_write_on_host_b(self):
        peer = self.peer_on_a()
        a_py, free = os.path.join(self.b.repo, "src", "a.py"), os.path.join(self.b.repo, "src", "free.py")
        result = self.run_on_b([tool("Read", file_path=a_py),  # Claude Code writes only a file it has read
                                tool("Write", file_path=a_py, content="agent\n"),
                                tool("Edit", file_path=a_py, old_string="original", new_string="agent"),
                                tool("Write", file_path=free, content="free\n"),
                                say("done")])
        self.assertEqual(self.read_b("src/a.py"), "original\n")
        self.assertEqual(self.read_b("src/free.py"), "free\n")
        reqs = self.server.model_requests()
        for i, what in ((2, "Write"), (3, "Edit")):
            block = reqs[i].tail()[-1]["content"][0]
            self.assertEqual(block["type"], "tool_result", what)
            self.assertIs(block.get("is_error"), True, (what, block))
            self.assertIn(peer["handle"], h.flatten(block["content"]), what)
            self.assertIn("src/a.py", h.flatten(block["content"]), what)
        self.assertNotIn(peer["handle"], reqs[4].tail_text())  # the free file's write: no refusal
        self.assert_two_hosts(peer, result.session_id())

    def test_a_message_sent_on_host_a_reaches_claude_on_host_b(self):
        peer = self.peer_on_a(claim=False)
        body = "BODY-a2b: host a here, leave src/a.py to me"
        notes = os.path.join(self.b.repo, "src", "b.py")

        def send(req):  # B's agent is registered (SessionStart ran): A sends it a message
            self.a.coord("send", body, "--to", self.b_agent()["handle"], "--runtime", peer["id"])
            return tool("Read", file_path=notes)

        result = self.run_on_b([send, tool("Read", file_path=notes), say("done")])
        reqs = self.server.model_requests()
        self.assertIn(body, reqs[1].tail_text())  # at the next boundary after it was sent
        self.assertIn(peer["handle"], reqs[1].tail_text())
        self.assert_two_hosts(peer, result.session_id())


class CodexOnTwoHosts(TwoHosts):
    harness = "codex"

    @staticmethod
    def patch(*lines):
        from modelserver import apply_patch
        return apply_patch("*** Begin Patch\n%s\n*** End Patch" % "\n".join(lines))

    def test_a_peer_s_lease_on_host_a_denies_codex_s_patch_on_host_b(self):
        peer = self.peer_on_a()
        result = self.run_on_b([self.patch("*** Update File: src/a.py", "@@", "-original", "+agent"),
                                self.patch("*** Add File: src/free.py", "+free"),
                                say("done")])
        self.assertEqual(self.read_b("src/a.py"), "original\n")
        self.assertEqual(self.read_b("src/free.py"), "free\n")
        reqs = self.server.model_requests()
        item = reqs[1].tail()[-1]
        self.assertEqual(item["type"], "custom_tool_call_output")
        self.assertTrue(item["output"].startswith("Command blocked by PreToolUse hook: "), item["output"])
        self.assertIn(peer["handle"], item["output"])
        self.assertIn("src/a.py", item["output"].split(". Command: ")[0])
        self.assertNotIn("blocked", reqs[2].tail()[-1].get("output", ""))
        self.assert_two_hosts(peer, result.session_id())

    def test_a_message_sent_on_host_a_reaches_codex_on_host_b(self):
        peer = self.peer_on_a(claim=False)
        body = "BODY-a2b: host a here, leave src/a.py to me"

        def send(req):
            self.a.coord("send", body, "--to", self.b_agent()["handle"], "--runtime", peer["id"])
            return shell("true")

        result = self.run_on_b([send, shell("true"), say("done")])
        reqs = self.server.model_requests()
        self.assertIn(body, reqs[1].tail_text())
        self.assertIn(peer["handle"], reqs[1].tail_text())
        self.assert_two_hosts(peer, result.session_id())


class QueueOnTwoHosts(TwoHosts):
    """The landing queue of a PostgreSQL project on two hosts, pushed to one bare origin. A clone
    lives on its host, so each host's queue lands that host's works: A's lands A's and pushes,
    and B's work waits there (other-host); B's queue stops before any check because origin moved,
    naming the command that brings main up to date; once it ran, B's work lands on A's. Each work
    lands once and origin/main holds both. The repositories let agents land (coord.agentsLand):
    the hosts' commands run with no terminal."""

    def setUp(self):
        super().setUp()
        support.require_tool(self, "jj")
        self.bare = os.path.join(self.tmp, "origin.git")
        subprocess.run(["git", "clone", "-q", "--bare", os.path.join(self.tmp, "origin"), self.bare], check=True,
                       env=self.git_env, timeout=60)
        jjcfg = os.path.join(self.tmp, "jjconfig.toml")
        with open(jjcfg, "w") as f:
            f.write('user.name = "e2e"\nuser.email = "e2e@example.invalid"\n')
        for m in (self.a, self.b):
            scratch = os.path.join(self.tmp, "host-" + m.name, "scratch")
            os.mkdir(scratch, 0o700)
            m.env.update(COORD_SCRATCH_ROOT=scratch, JJ_CONFIG=jjcfg)
            for argv in (["remote", "set-url", "origin", self.bare], ["fetch", "-q", "origin"],
                         ["config", "coord.agentsLand", "true"], ["config", "user.name", "e2e"],
                         ["config", "user.email", "e2e@example.invalid"]):
                subprocess.run(["git", "-C", m.repo] + argv, check=True, env=self.git_env, timeout=60)

    def queued_work(self, m, name):
        w = m.coord("work", "create", "on-" + m.name)["work"]
        with open(os.path.join(w["path"], name), "w") as f:
            f.write("from host %s\n" % m.name)
        subprocess.run(["jj", "--no-pager", "describe", "-m", "add " + name], cwd=w["path"], check=True,
                       env=dict(self.env, JJ_CONFIG=m.env["JJ_CONFIG"]), stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60)
        m.coord("work", "integrate", "enqueue", w["handle"], "--into", "main")
        return w["handle"]

    def outcomes(self, reply):
        return {x["work"]: (x["outcome"], None if x["outcome"] == "landed" else x["reason"]) for x in reply["works"]}

    def test_each_host_lands_its_own_queue_and_pushes_and_each_work_lands_once(self):
        on_a, on_b = self.queued_work(self.a, "from-a.txt"), self.queued_work(self.b, "from-b.txt")
        one = self.a.coord("work", "integrate", "land", on_b, "--into", "main", code=3)  # its clone is on B
        self.assertEqual((one["reason"], one["hint"]), ("other-host", "on host b run: .coord/coord work integrate land %s "
                                                                       "--into main" % on_b), one)
        land = ("work", "integrate", "land", "--queued", "--into", "main", "--push", "origin", "--check", "true")
        ra = self.a.coord(*land)
        self.assertEqual(self.outcomes(ra), {on_a: ("landed", None), on_b: ("waiting", "other-host")}, ra)
        git = lambda *a: subprocess.run(["git"] + list(a), stdout=subprocess.PIPE, text=True, check=True,
                                        env=self.git_env, timeout=60).stdout.strip()
        a_landed = git("-C", self.a.repo, "rev-parse", "main")
        self.assertEqual(git("--git-dir", self.bare, "rev-parse", "main"), a_landed)
        rb = self.b.coord(*land, code=3)
        stop = next(x for x in rb["works"] if x["outcome"] == "stopped")
        self.assertEqual((stop["work"], stop["reason"]), (on_b, "remote-moved"), rb)
        update = stop["hint"].split("up to date: ", 1)[1].split("; then re-run", 1)[0]
        self.assertEqual(update, "git -C %s pull --ff-only origin main" % self.b.repo)
        r = self.b.run(["sh", "-c", update], self.b.env)
        self.assertEqual(r.code, 0, r.describe())
        rb = self.b.coord(*land)
        self.assertEqual(self.outcomes(rb), {on_b: ("landed", None)}, rb)
        b_landed = git("-C", self.b.repo, "rev-parse", "main")
        self.assertEqual(git("--git-dir", self.bare, "rev-parse", "main"), b_landed)
        self.assertEqual(git("--git-dir", self.bare, "rev-parse", b_landed + "^"), a_landed, "B's landed on A's")
        log = git("--git-dir", self.bare, "log", "--format=%s", "main").splitlines()
        self.assertEqual([l for l in log if l.startswith("add from-")], ["add from-b.txt", "add from-a.txt"])
        self.assertEqual(self.outcomes(self.a.coord(*land)), {}, "nothing left to land on A")


if __name__ == "__main__":
    unittest.main()
