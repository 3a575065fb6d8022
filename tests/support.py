"""Shared test scaffolding.

Every test gets a private HOME, XDG_STATE_HOME, COORD_DB and COORD_PROJECT_ID, so no
test can touch a real user's state. Real tools only: a tool the test needs and cannot
find fails the test under CI (CI=true) and skips it elsewhere.

Helpers more than one test module needs live here: running a hook command the way a
harness does (`run_hook`, `installed_hook`) and marking a test `slow` for quick runs.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COORD = os.path.join(ROOT, "coord")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# Bytes that would drive a terminal: no operator or model output may carry them.
CONTROL = (b"\x1b", b"\x07", b"\x9b")

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# Runs a suffix-less script (coord, install) the way .coord/coord's own start does: loaded like a
# module, so its bytecode is cached in __pycache__/ beside it (written even under the tests'
# PYTHONDONTWRITEBYTECODE=1, as the installed hooks' -I start does), not compiled on every call.
# `python3 SCRIPT` would compile the script and, for an installed copy, every module it imports.
_CACHED_RUN = ("import os,sys;sys.dont_write_bytecode=False;sys.path[:]=[x for x in sys.path if x];"
               "from importlib.machinery import SourceFileLoader as L;p=os.path.realpath(sys.argv[1]);"
               "del sys.argv[0];n=os.path.basename(p);exec(L(n,p).get_code(n),{'__name__':'__main__','__file__':p})")


def script_argv(path=None, python=None):
    """argv that runs the script at `path` (default: this checkout's coord) on `python` (default:
    this interpreter), with -S as the installed start does, from cached bytecode."""
    return [python or sys.executable, "-S", "-c", _CACHED_RUN, path or COORD]


# A hook.py imported as the installed hook command imports it (with its bytecode cached, under
# -I -S, and no interpreter teardown), not compiled as a script on every call; hook.REPO stays
# unset, so it finds the repository from its directory as a hook.py run by hand does.
_HOOK_RUN = ("import os,sys;p=os.path.realpath(sys.argv[1]);sys.path[:0]=[os.path.dirname(p)];"
             "del sys.argv[0];import hook;hook.main();os._exit(0)")


def hook_argv(harness, script=None, python=None):
    """argv that runs `script` (default: this checkout's hook.py) for `harness` on `python`."""
    return [python or sys.executable, "-I", "-S", "-c", _HOOK_RUN, script or os.path.join(ROOT, "hook.py"),
            "--harness", harness]


# Variables a test must never inherit from the developer's own agent session.
_SCRUB = (
    "COORD_DB", "COORD_PROJECT_ID", "COORD_RUNTIME_ID", "COORD_WORK_ID",
    "CLAUDE_CODE_SESSION_ID", "CODEX_SESSION_ID", "CODEX_THREAD_ID", "CLAUDE_ENV_FILE",
    "CLAUDE_PROJECT_DIR", "TMUX", "TMUX_PANE", "TMUX_TMPDIR", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE",
    "COORD_TMUX_SOCKET", "COORD_CLAUDE_CMD", "COORD_CODEX_CMD", "COORD_SCRATCH_ROOT", "COORD_BUSY_TIMEOUT",
    "COORD_LEASE_TTL", "COORD_RUNTIME_TTL", "COORD_PYTHON", "COORD_REPO_ROOT", "CODEX_HOME",
    "XDG_CONFIG_HOME", "CLAUDE_CONFIG_DIR", "CLAUDECODE", "COORD_REGISTER_GRACE",
    "COPILOT_CLI", "COPILOT_AGENT_SESSION_ID", "COPILOT_PROJECT_DIR", "COPILOT_HOME",
    # CI=true is the runner's (a test that cannot run fails: IN_CI), never a person's: in a harness
    # launched with it, Auggie 0.36.0 and Droid 0.225.2 (Ink) draw no typed keys
    "CI",
)


def load_install(path=None, name="coord_install"):
    """The installer script (it has no .py suffix) loaded as a module: this checkout's, or `path`."""
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader(name, path or os.path.join(ROOT, "install"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    return module


def require_tool(testcase, name):
    """Return the path of `name`, or fail (CI) / skip (elsewhere) when it is missing."""
    path = shutil.which(name)
    if path:
        return path
    msg = "%s not found on PATH; run tests/run, which provisions it" % name
    if IN_CI:
        testcase.fail(msg)
    testcase.skipTest(msg)


def demote_to_nobody():
    """A preexec_fn that runs the child as the unprivileged user `nobody`, or None without one."""
    try:
        import pwd
        pw = pwd.getpwnam("nobody")
    except (ImportError, KeyError):
        return None

    def demote():
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    return demote


def slow(test):
    """Mark a test method or class as slow: `tests/run --quick` leaves it out, `tests/run` runs it.

    Rarely needed: --quick leaves out every test whose last measured wall time reached
    COORD_TEST_QUICK_LIMIT (the runner records each test's durations under the test cache).
    """
    test.coord_slow = True
    return test


def stress(test):
    """Mark a test method or class as the stress tier (races, kill storms): it runs under
    `tests/run --stress`, `--all-pythons` and CI=true, not in the default run or --quick."""
    test.coord_stress = True
    return test


# The stress tier among existing tests (dotted ids; a class name covers its tests), listed here
# so that marking them touches no test module; the runner treats them as marked support.stress
# and names any entry that matches no test.
STRESS = frozenset([
    "test_cli.CliRaceTest",
    "test_cli.PgCliRaceTest",  # the same race on PostgreSQL
    "test_faults.StormTest",
    "test_land.LandKillTest",
    "test_land.LandRaceTest",
    "test_store.RaceTest.test_eight_processes_race_for_one_exclusive_lease_for_60_rounds",
    "test_store.RaceTest.test_thirty_two_simultaneous_senders_lose_nothing",
    "test_store.PgRaceTest.test_eight_processes_race_for_one_exclusive_lease_for_60_rounds",
    "test_store.PgRaceTest.test_thirty_two_simultaneous_senders_lose_nothing",
    "test_workspace.CreateRaceTest",
    "test_host.ServerCrashTest.test_three_immediate_stops_in_a_row",
])


# What the oldest and newest interpreters' suites (`runner.py --no-jj`) run whole: the modules
# whose noun meets the interpreter most directly (every product file compiled and imported; the
# sqlite3 module under the store; the hook's start on an agent's python3; argparse under the
# command line) and the TOML reader that only interpreters before 3.11 use. Every other class
# that does not drive jj runs its first test there (unittest's order): the rest run on the
# default interpreter, where they exercise the same code paths.
EVERY_INTERPRETER = frozenset([
    "test_compile",
    "test_store",
    "test_hook",
    "test_cli",
    "test_install.TomlReadingTest",
])


# A long-lived process standing in for a harness: it runs each requested command as its child
# (so it is that command's ancestor, as a harness is for its hooks and its agent's shell).
_HARNESS_DRIVER = r"""
import json, subprocess, sys
for line in sys.stdin:
    req = json.loads(line)
    p = subprocess.run(req["argv"], input=req.get("input", "").encode(), env=req["env"], cwd=req["cwd"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    print(json.dumps({"rc": p.returncode, "out": p.stdout.decode(), "err": p.stderr.decode()}), flush=True)
"""


class FakeHarness:
    """A real process whose children are the commands given to run() (so it is their harness)."""

    def __init__(self, testcase, name=None):
        self.testcase = testcase
        python = sys.executable
        if name:  # look like that harness by its command name: python started as NAME
            bindir = tempfile.mkdtemp(prefix="harness-", dir=testcase.tmp)
            python = os.path.join(bindir, name)
            os.symlink(os.path.realpath(sys.executable), python)
        self.proc = subprocess.Popen([python, "-c", _HARNESS_DRIVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.pid = self.proc.pid
        testcase.addCleanup(self.close)

    def run(self, argv, data, env, cwd):
        """Run argv as this process's child with `data` on stdin; return (exit status, stdout, stderr)."""
        self.proc.stdin.write(json.dumps({"argv": argv, "input": data or "", "env": env, "cwd": cwd}) + "\n")
        self.proc.stdin.flush()
        r = json.loads(self.proc.stdout.readline())
        return r["rc"], r["out"], r["err"]

    def coord(self, *args, env=None):
        """Run the real coord CLI as this process's child, in the test's environment."""
        e = dict(self.testcase.env)
        e.update(env or {})
        return self.run(script_argv() + [str(a) for a in args], "", e, self.testcase.tmp)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
            self.proc.stdout.close()


def run_hook(command, payload, env, cwd, timeout=60, text=True):
    """Run a hook once the way a harness does, with `payload` as its stdin; return CompletedProcess.

    `command` is an argv list, or a shell command line (as the installer writes it), which
    /bin/sh runs. `payload` is a JSON-able object, or str/bytes given as is. With `text` the
    output is decoded as UTF-8; otherwise stdout and stderr stay bytes.
    """
    if isinstance(payload, (dict, list)):
        payload = json.dumps(payload)
    if isinstance(payload, str):
        payload = payload.encode("utf-8", "surrogateescape")
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    proc = subprocess.run(argv, input=payload, env=env, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=timeout)
    if text:
        proc.stdout, proc.stderr = proc.stdout.decode(), proc.stderr.decode()
    return proc


def installed_hook(repo, harness, event):
    """(command, timeout) of coord's own handler for `event` in the hooks the installer wrote."""
    rel = os.path.join(".claude", "settings.json") if harness == "claude" else os.path.join(".codex", "hooks.json")
    with open(os.path.join(repo, rel)) as f:
        groups = json.load(f)["hooks"][event]
    own = [h for g in groups for h in g["hooks"] if ".coord/hook.py" in h.get("command", "")]
    if len(own) != 1:
        raise AssertionError("%s: %d coord handlers for %s, wanted 1" % (rel, len(own), event))
    return own[0]["command"], own[0].get("timeout")


def install_hook_runtime(contents=None, installer=None):
    """Create the hook runtime copy the installed hook command runs (as `install` does), under
    this process's HOME/XDG_DATA_HOME: this checkout's runtime files, or `contents`
    ({file name: bytes}); -> (digest, path)."""
    installer = installer or load_install()
    contents = contents if contents is not None else installer.read_runtime(ROOT)
    digest = installer.runtime_digest(contents)
    path = os.path.join(installer.runtime_base(), digest)
    if installer.runtime_state(path) != "ok":
        installer.install_runtime(installer.RuntimeStep(path, "missing", contents))
    return digest, path


def work_record(env, handle):
    """The work record `coord work inspect HANDLE --json` prints under "work", read in this process
    (store.resolve_work, workspace.public_work, the same JSON round trip): no coord start-up and
    none of inspect's jj/git reads (the observed head, the landing preview) that a test reading a
    record's state throws away. `work inspect` itself keeps its CLI tests (its text, --json,
    --verbose, the preview, COORD_WORK_ID defaulting). env: the test's environment (COORD_DB)."""
    import store
    import hostclient
    import workspace
    st = hostclient.open_project_store(env)  # on PostgreSQL through the host process, as coord
    try:
        return json.loads(json.dumps(workspace.public_work(st.resolve_work(handle), st), default=str))
    finally:
        st.close()


def pass_gate(env, handle, runtime):
    """Record the work's gate as passed for runtime `runtime` (its id), as `coord work gate HANDLE
    --pass` run with COORD_RUNTIME_ID does, in this process (workspace.gate_work, the caller found
    by Store.caller from that environment); -> the gate. For tests that only need a gated work;
    `work gate` itself keeps its CLI tests (test_workspace.AuthorityTest and others)."""
    import store
    import workspace
    e = dict(env, COORD_RUNTIME_ID=runtime)
    st = store.Store(environ=e)
    try:
        return workspace.gate_work(st, caller=st.caller(None, e), work=handle, passed=True)["gate"]
    finally:
        st.close()


POLL_CEILING = 0.25  # seconds: the longest pause retry_until grows to


def assert_shown(case, want, line, least=6):
    """`want` is in a line that coord fits to 100 columns, or the line is cut ("\u2026") inside it:
    handles are five random words, so the same text may or may not reach the cut."""
    if want in line:
        return
    if line.endswith("\u2026"):
        head = line[:-1]
        for n in range(len(want) - 1, least - 1, -1):
            if head.endswith(want[:n]):
                return
    case.fail("%r is not in %r, nor cut off at its end" % (want, line))


def retry_until(predicate, timeout=10.0, interval=0.02):
    """Poll predicate() until it returns a truthy value; return it, or raise on timeout.

    The pause starts at `interval` and grows by half each round up to POLL_CEILING (or
    `interval`, if longer), and is never shorter than the predicate itself took: most predicates
    run a process (coord, tmux, jj), and polling one every 20 ms kept a core busy for the whole
    wait, which on the 2-core CI host slowed every other suite."""
    deadline = time.monotonic() + timeout
    pause = interval
    while True:
        began = time.monotonic()
        value = predicate()
        if value:
            return value
        now = time.monotonic()
        if now > deadline:
            raise AssertionError("condition not met within %.1fs" % timeout)
        time.sleep(min(max(pause, now - began), deadline - now + 0.01))
        pause = min(pause * 1.5, max(interval, POLL_CEILING))


# -- fixture trees built once per process and copied per test

_TEMPLATES = {}       # key -> (directory, [relative paths of files that name it], values)
_TEMPLATE_ROOT = []   # this process's private directory for them (suites of several interpreters run at once)


def _template_root():
    if not _TEMPLATE_ROOT:
        import atexit
        root = tempfile.mkdtemp(prefix="coord-templates-")
        atexit.register(shutil.rmtree, root, True)
        _TEMPLATE_ROOT.append(root)
    return _TEMPLATE_ROOT[0]


def _git_system_config():
    """A system git config for every process a test starts: git's automatic maintenance off.
    git 2.55.0 (the tests' toolchain) ends a push, fetch or commit with `git maintenance run
    --auto --detach`, which takes objects/maintenance.lock after the command has returned: a
    fixture copied then met a file that vanished under it. A person's git keeps its own."""
    path = os.path.join(_template_root(), "gitconfig-system")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write("[maintenance]\n\tauto = false\n[gc]\n\tauto = 0\n")
    return path


def _files_naming(directory):
    """Relative paths of the files under `directory` whose bytes contain its path; None when one
    of them is binary or a symbolic link points through it (then the tree is not copyable)."""
    needle = os.fsencode(directory)
    out = []
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                if needle in os.fsencode(os.readlink(path)):
                    return None
                continue
            if name in dirnames:
                continue
            with open(path, "rb") as f:
                data = f.read()
            if needle in data:
                if b"\0" in data:
                    return None
                out.append(os.path.relpath(path, directory))
    return out


def copy_fixture(testcase, key, build):
    """Put the fixture tree `key` into testcase.tmp; -> the values build returned (a dict).

    build(directory) makes the tree's top-level entries (e.g. canon/, origin.git/) inside
    `directory` with the test's tools and environment, and returns a dict of values the test
    needs (commit ids, say). It runs once per process and key; every later test gets a copy
    (modes, times and symbolic links kept), so it starts from the same state as if it had run
    build itself: each text file that names the build directory (a remote's URL in .git/config)
    is rewritten to name testcase.tmp. A tree that names its directory in a binary file is built
    afresh for every test."""
    entry = _TEMPLATES.get(key)
    if entry is None:
        directory = tempfile.mkdtemp(prefix="fixture-", dir=_template_root())
        try:
            values = build(directory) or {}
        except BaseException:
            shutil.rmtree(directory, True)
            raise
        named = _files_naming(directory)
        if named is None:  # not copyable: build in place from now on
            shutil.rmtree(directory, True)
            entry = _TEMPLATES[key] = (None, None, None)
        else:
            entry = _TEMPLATES[key] = (directory, named, dict(values))
    directory, named, values = entry
    if directory is None:
        return dict(build(testcase.tmp) or {})
    for name in sorted(os.listdir(directory)):
        src, dst = os.path.join(directory, name), os.path.join(testcase.tmp, name)
        if os.path.isdir(src) and not os.path.islink(src):
            shutil.copytree(src, dst, symlinks=True)
        else:
            shutil.copy2(src, dst, follow_symlinks=False)
    old, new = os.fsencode(directory), os.fsencode(testcase.tmp)
    for rel in named:
        path = os.path.join(testcase.tmp, rel)
        with open(path, "rb") as f:
            data = f.read()
        st = os.stat(path)
        with open(path, "wb") as f:
            f.write(data.replace(old, new))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return dict(values)


class CoordTestCase(unittest.TestCase):
    """A test with private state directories and helpers to run the real CLI."""

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="coord-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.home = os.path.join(self.tmp, "home")
        self.state = os.path.join(self.tmp, "state")
        os.makedirs(self.home)
        self.db = os.path.join(self.state, "fleet-agent-coord", "test.sqlite3")
        self.env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
        self.env.update({
            "HOME": self.home,
            "XDG_STATE_HOME": self.state,
            "COORD_DB": self.db,
            "COORD_PROJECT_ID": "test-project",
            "PYTHONDONTWRITEBYTECODE": "1",
            "GIT_CONFIG_SYSTEM": _git_system_config(),
        })
        self.env.pop("GIT_CONFIG_NOSYSTEM", None)
        self._saved_env = dict(os.environ)
        self.addCleanup(self._restore_env)
        os.environ.clear()
        os.environ.update(self.env)
        self.configure_project()

    def configure_project(self):
        """Where the test's project lives, before any test class's own setUp uses it (SQLite at
        self.db here; PostgresProject overrides it)."""

    def _restore_env(self):
        os.environ.clear()
        os.environ.update(self._saved_env)

    def open_project(self):
        """The test's own store of its project (PostgresProject: through the host process)."""
        import store
        st = store.Store(self.db)
        self.addCleanup(st.close)
        return st

    def use_jj(self, git_user=False):
        """Require jj and git, give them a private identity (jj config; with git_user a git
        user and `main` as the default branch too) and a private 0700 scratch root for clones,
        in self.env and os.environ; -> the scratch root (also self.scratch)."""
        if os.environ.get("COORD_TEST_NO_JJ"):
            self.skipTest("drives jj: runs on the default interpreter")
        require_tool(self, "jj")
        require_tool(self, "git")
        cfg = os.path.join(self.tmp, "jjconfig.toml")
        with open(cfg, "w") as f:
            f.write('user.name = "Coord Test"\nuser.email = "coord-test@example.invalid"\n')
        gitcfg = os.path.join(self.home, ".gitconfig")
        if git_user:
            with open(gitcfg, "w") as f:
                f.write("[user]\n\tname = Coord Test\n\temail = coord-test@example.invalid\n"
                        "[init]\n\tdefaultBranch = main\n")
        self.scratch = os.path.join(self.tmp, "scratch")
        os.mkdir(self.scratch, 0o700)
        self.env.update({"JJ_CONFIG": cfg, "COORD_SCRATCH_ROOT": self.scratch, "GIT_CONFIG_GLOBAL": gitcfg})
        os.environ.update(self.env)
        return self.scratch

    def coord(self, *args, runtime=None, env=None, cwd=None, input=None, check=None):
        """Run the real `coord` script; return CompletedProcess (text)."""
        e = dict(self.env)
        if runtime:
            e["COORD_RUNTIME_ID"] = runtime
        if env:
            e.update(env)
        proc = subprocess.run(
            script_argv() + [str(a) for a in args],
            env=e, cwd=cwd or self.tmp, input=input,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120,
        )
        if check is not None and proc.returncode != check:
            self.fail("coord %s exited %d (wanted %d)\nstdout: %s\nstderr: %s" % (
                " ".join(map(str, args)), proc.returncode, check, proc.stdout, proc.stderr))
        return proc

    def coord_json(self, *args, **kw):
        """Run coord with --json and exit status 0 expected; return the parsed reply."""
        kw.setdefault("check", 0)
        proc = self.coord(*(list(args) + ["--json"]), **kw)
        try:
            return json.loads(proc.stdout)
        except ValueError:  # say what came instead (a reply once came back empty with exit 0 in CI)
            self.fail("coord %s --json exited %d without a JSON reply\nstdout: %r\nstderr: %r" % (
                " ".join(map(str, args)), proc.returncode, proc.stdout, proc.stderr))

    def coord_at_terminal(self, *args, env=None, cwd=None, check=None):
        """Run the real `coord` the way a person types it: in a shell on a terminal of its own
        (Terminal), since tests run with no terminal and only positive evidence makes a caller
        the person; -> (exit status, output: stdout and stderr)."""
        import shlex
        e = dict(self.env)
        e.update(env or {})
        term = Terminal(self, e, cwd or self.tmp)
        line = " ".join(shlex.quote(str(a)) for a in script_argv() + list(args))
        rc, out = term.run(line + " 2>&1")
        term.close()
        if check is not None and rc != check:
            self.fail("coord %s at a terminal exited %d (wanted %d): %s" % (" ".join(map(str, args)), rc, check, out))
        return rc, out

    def hello(self, conversation=None, **kw):
        """Register a runtime through the CLI; return its full record (dict). Each call without a
        conversation is a new agent (a fresh conversation), not the person at this terminal that
        a bare `coord hello` finds again."""
        import uuid
        args = ["hello"]
        if conversation or not (kw.get("runtime") or kw.get("env")):
            args += ["--conversation", conversation or str(uuid.uuid4())]
        return self.coord_json(*args, **kw)


class Terminal:
    """A person's terminal: a shell on its own pseudo-terminal, leading its own session (as a login
    shell in a terminal window does), so every command it runs shares its session and tty.
    run() types one command line and returns (exit status, output with the tty's \\r removed)."""

    _MARK = "__coord_terminal_done__"

    def __init__(self, testcase, env, cwd):
        import pty
        pid, fd = pty.fork()
        if pid == 0:  # the child: the session leader on the new terminal
            try:
                os.chdir(cwd)
                os.execve("/bin/sh", ["sh"], dict(env, PS1="", PS2=""))
            finally:
                os._exit(127)
        self.pid, self.fd, self.closed = pid, fd, False
        testcase.addCleanup(self.close)
        self.run("stty -echo")

    def _read_until(self, pattern, timeout=120):
        import re
        import select
        buf, deadline = b"", time.monotonic() + timeout
        while True:
            m = re.search(pattern, buf)
            if m:
                return buf, m
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("terminal output did not show %r: %r" % (pattern, buf[-400:]))
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise AssertionError("terminal closed: %r" % buf[-400:])
                buf += chunk

    def run(self, line, timeout=120):
        os.write(self.fd, ("%s; echo %s$?%s\n" % (line, self._MARK, self._MARK)).encode())
        # up to the end of the mark's line: a newline left unread would open the next command's output
        pattern = (self._MARK + r"(\d+)" + self._MARK + r"\r?\n").encode()
        buf, m = self._read_until(pattern, timeout)
        out = buf[:m.start()].decode("utf-8", "replace").replace("\r", "")
        return int(m.group(1)), out

    def coord(self, *args, stderr=True):
        """Run the real coord CLI at this terminal, as the person types it; -> (exit status,
        output: stdout, then stderr unless stderr=False)."""
        import shlex
        line = " ".join(shlex.quote(str(a)) for a in script_argv() + list(args))
        return self.run(line + (" 2>&1" if stderr else " 2>/dev/null"))

    def close(self):
        if self.closed:
            return
        self.closed = True
        try:
            os.write(self.fd, b"exit\n")
        except OSError:
            pass
        try:
            deadline = time.monotonic() + 30
            while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    os.kill(self.pid, 9)
                    os.waitpid(self.pid, 0)
                    break
                time.sleep(0.02)
        except ChildProcessError:
            pass
        os.close(self.fd)


def process_argvs():
    """(pid, argv as bytes) of every process this user can read in /proc, as it is now."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                yield int(pid), f.read().split(b"\0")
        except OSError:
            continue


class PtyDrain:
    """Reads and discards what arrives at a terminal's master end `fd` in a thread of its own.
    stop() ends that thread; call it before closing `fd`. A thread still reading a closed number
    reads whatever reuses it: once it was the stdout pipe of the test's next `coord --json`, which
    then came back empty with exit 0."""

    def __init__(self, fd):
        import threading
        self.fd, self._stopping = fd, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        import select
        while not self._stopping.is_set():
            try:
                ready, _, _ = select.select([self.fd], [], [], 0.1)
                if ready and not os.read(self.fd, 65536):
                    return
            except OSError:
                return

    def stop(self):
        self._stopping.set()
        self._thread.join()


class TmuxClient:
    """A person at a tmux client: `tmux attach` on its own pseudo-terminal. type() writes keys the
    way a keyboard does, so tmux counts them as that session's activity (send-keys does not)."""

    def __init__(self, testcase, socket, target, env=None):
        import pty
        pid, fd = pty.fork()
        if pid == 0:
            try:
                e = {k: v for k, v in (env or os.environ).items() if k not in ("TMUX", "TMUX_PANE")}
                e.setdefault("TERM", "xterm-256color")
                os.execvpe("tmux", ["tmux", "-S", socket, "attach-session", "-t", target], e)
            finally:
                os._exit(127)
        self.pid, self.fd, self.closed, self.socket = pid, fd, False, socket
        testcase.addCleanup(self.close)
        self._drain = PtyDrain(fd)  # what tmux draws, or it blocks once the terminal's buffer is full
        retry_until(lambda: self.tty() is not None, timeout=20)

    def tty(self):
        """This client's terminal as tmux lists it, None until it is attached."""
        out = subprocess.run(["tmux", "-S", self.socket, "list-clients", "-F", "#{client_pid} #{client_tty}"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, timeout=10).stdout
        for line in out.splitlines():
            pid, _, tty = line.partition(" ")
            if pid == str(self.pid):
                return tty
        return None

    def type(self, text):
        os.write(self.fd, text.encode("utf-8"))

    def close(self):
        if self.closed:
            return
        self.closed = True
        try:
            os.kill(self.pid, 15)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self._drain.stop()
        os.close(self.fd)


def person_terminal(testcase, cwd, env=None):
    """A person's Terminal (see Terminal) in `cwd` with the test's environment; the test is
    skipped when this process runs under an agent harness, where no caller of it is a person."""
    import store
    if store.harness_ancestor(store.ancestor_processes())[0] is not None:
        testcase.skipTest("this test process runs under an agent harness, so no caller of it is a person")
    if store.agent_tmux_server(store.ancestor_processes())[0] is not None:
        testcase.skipTest("this test process runs in a pane of a tmux server coord runs agents in, so no caller"
                          " of it is a person")
    return Terminal(testcase, dict(testcase.env if env is None else env), cwd)


# --------------------------------------------------------------------------- PostgreSQL
# A real PostgreSQL server for the tests of the PostgreSQL engine (docs/postgresql.md): one per
# test process, started at first use (initdb about 2 s, start 0.2 s), stopped at exit. It listens
# only on a Unix socket in its own private directory (listen_addresses='': no TCP at all), trusts
# that socket, and runs without fsync (a test server). initdb and postgres refuse to run as
# root, so as root the server runs as `nobody`, owning only its directory, which must then be
# reachable by `nobody` (this machine's /tmp is 0700: /var/tmp or /dev/shm instead). Its default
# collation is ICU en-US where available (mixed case sorts a, B, not B, a as bytes do), so a text
# column that lacks COLLATE "C" gives a different order than SQLite and fails a test. psycopg 3
# comes from tests/provision, per interpreter, in <test cache>/python/<major>.<minor>.

PSYCOPG_PINS = {"3.9": "3.2.13"}  # psycopg 3.3 needs Python >= 3.10; the others get PSYCOPG_PIN
PSYCOPG_PIN = "3.3.9"


def postgres_bindir():
    """The directory holding initdb and pg_ctl (COORD_TEST_PG_BIN, else Debian's newest
    /usr/lib/postgresql/N/bin, else initdb on PATH), or None."""
    import glob
    explicit = os.environ.get("COORD_TEST_PG_BIN")
    if explicit:
        return explicit if os.path.exists(os.path.join(explicit, "initdb")) else None
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if found:
        return os.path.dirname(found[-1])
    on_path = shutil.which("initdb")
    return os.path.dirname(on_path) if on_path else None


def psycopg_dir():
    """Where tests/provision put psycopg for this interpreter."""
    cache = os.environ.get("COORD_TEST_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "coord-tests")
    return os.path.join(cache, "python", "%d.%d" % sys.version_info[:2])


def readme_blocks(start, end):
    """The ```sh blocks of README.md between the headings `start` and `end`, each a list of its
    non-blank lines: what a test runs as README writes it."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    section = text.split(start, 1)[1].split(end, 1)[0]
    return [[l for l in b.split("```", 1)[0].strip().splitlines() if l.strip()]
            for b in section.split("```sh\n")[1:]]


def psycopg_pin():
    """The psycopg version tests/provision installs for this interpreter."""
    return PSYCOPG_PINS.get("%d.%d" % sys.version_info[:2], PSYCOPG_PIN)


def import_psycopg():
    """psycopg, from the test cache (tests/provision) or the interpreter's own; None when absent."""
    where = psycopg_dir()
    if os.path.isdir(where) and where not in sys.path:
        sys.path.append(where)
    try:
        import psycopg
        return psycopg
    except ImportError:
        return None


def _reachable_base(uid):
    """A temporary directory's parent that `uid` can traverse (every ancestor o+x), or None."""
    if uid == os.getuid():
        return tempfile.gettempdir()
    for base in (tempfile.gettempdir(), "/var/tmp", "/dev/shm"):
        path, ok = os.path.realpath(base), True
        while True:
            try:
                if not os.stat(path).st_mode & 0o001:
                    ok = False
                    break
            except OSError:
                ok = False
                break
            if path == "/":
                break
            path = os.path.dirname(path)
        if ok:
            return base
    return None


class PostgresServer:
    """One real PostgreSQL server in a private directory; `dsn(database)` connects to it over its
    Unix socket as the superuser `coord`."""

    def __init__(self, bindir, options=""):
        """options: more server settings ("-c name=value ..."), e.g. TLS on a TCP listener."""
        import atexit
        import random
        self.bindir = bindir
        self.demote = demote_to_nobody() if os.getuid() == 0 else None
        uid = os.getuid()
        if self.demote is not None:
            import pwd
            uid = pwd.getpwnam("nobody").pw_uid
        base = _reachable_base(uid)
        if base is None:
            raise RuntimeError("no temporary directory that the unprivileged server user can reach")
        self.dir = tempfile.mkdtemp(prefix="coord-pg-", dir=base)
        if self.demote is not None:
            os.chown(self.dir, uid, -1)
        os.chmod(self.dir, 0o700)
        self.data = os.path.join(self.dir, "data")
        self.port = random.randint(20000, 60000)  # names the socket file only: no TCP listener
        self.log = os.path.join(self.dir, "server.log")
        initdb = [os.path.join(bindir, "initdb"), "-D", self.data, "-A", "trust", "-U", "coord",
                  "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"]
        try:  # a default collation that does not sort by byte, so a text column without COLLATE "C" shows
            self._run(initdb + ["--locale-provider=icu", "--icu-locale=en-US"])
        except RuntimeError:  # built without ICU, or older than 15
            shutil.rmtree(self.data, True)
            self._run(initdb)
        self._start = [os.path.join(bindir, "pg_ctl"), "-D", self.data, "-l", self.log, "-w", "-t", "60", "-o",
                       "-c listen_addresses='' -k %s -p %d -c fsync=off -c synchronous_commit=off"
                       " -c full_page_writes=off -c max_connections=200 -c shared_buffers=16MB %s"
                       % (self.dir, self.port, options), "start"]
        self._run(self._start)
        atexit.register(self.stop)

    # server crash (issue 25, pgcrash): what a crash test does to its own server
    def crash(self):
        """`pg_ctl stop -m immediate`: every server process ends at once, nothing is checkpointed;
        the next start replays the WAL (crash recovery)."""
        self._run([os.path.join(self.bindir, "pg_ctl"), "-D", self.data, "-m", "immediate", "-w", "stop"])

    def start(self):
        self._run(self._start)

    def _run(self, argv):
        proc = subprocess.run(argv, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              preexec_fn=self.demote, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError("%s failed (%d): %s" % (os.path.basename(argv[0]), proc.returncode, proc.stdout[-2000:]))

    def dsn(self, database="postgres"):
        return "host=%s port=%d user=coord dbname=%s" % (self.dir, self.port, database)

    def stop(self):
        if self.dir is None:
            return
        try:
            subprocess.run([os.path.join(self.bindir, "pg_ctl"), "-D", self.data, "-m", "immediate", "-w", "stop"],
                           cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=self.demote,
                           timeout=60)
        finally:
            shutil.rmtree(self.dir, True)
            self.dir = None


_POSTGRES = []


def require_postgres(testcase):
    """(server, psycopg) for a test of the PostgreSQL engine: the server is started at first use
    in this process. Missing PostgreSQL or psycopg fails the test under CI=true, skips elsewhere."""
    psycopg = import_psycopg()
    bindir = postgres_bindir()
    missing = []
    if bindir is None:
        missing.append("PostgreSQL (initdb; Debian: apt-get install postgresql; .ci/run installs it)")
    if psycopg is None:
        missing.append("psycopg 3 in %s (tests/provision installs it)" % psycopg_dir())
    if missing:
        msg = "missing " + " and ".join(missing)
        if IN_CI:
            testcase.fail(msg)
        testcase.skipTest(msg)
    if not _POSTGRES:
        _POSTGRES.append(PostgresServer(bindir))
    return _POSTGRES[0], psycopg


# --------------------------------------------------------------------------- a CLI/hook test's project in PostgreSQL (issue 25, pgroute)

def pg_url(server, database="postgres"):
    """A postgresql:// URL for the test server (its Unix socket directory as the host)."""
    from urllib.parse import quote
    return "postgresql://coord@/%s?host=%s&port=%d" % (database, quote(server.dir, safe=""), server.port)


def pg_login_url(testcase, server, project, psycopg):
    """A URL for `project` as a login role of its own, set up by pg.pg_setup as the test
    server's superuser (roles, schema at the current version, grants, forced row-level security):
    the role a host is meant to run as, so --doctor's security checks pass. The project's schema
    and roles are dropped at cleanup (roles are the server's, not a database's)."""
    import re
    import store
    import pg
    login = "host_%s" % re.sub(r"[^a-z0-9_]", "_", project.lower())[:40]

    def drop():
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS %s CASCADE" % pg.pg_ident(pg.pg_schema(project)))
            for role in [login] + list(pg.pg_role_names(project).values()):
                if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                    conn.execute("DROP OWNED BY %s CASCADE" % pg.pg_ident(role))
                    conn.execute("DROP ROLE %s" % pg.pg_ident(role))
    drop()  # a role left by a killed run
    testcase.addCleanup(drop)
    pg.pg_setup(server.dsn(), project, [login])
    return pg_url(server).replace("postgresql://coord@", "postgresql://%s@" % login, 1)


def stop_host_process(socket_path, timeout=30.0):
    """SIGTERM to the host process's supervisor named in <socket>.lock, then wait (bounded) until
    the lock is free; a no-op when none holds it."""
    import fcntl
    import signal
    lock = socket_path + ".lock"

    def free():
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)
    if free():
        return
    with open(lock) as f:
        pid = int(f.read().strip() or 0)
    if pid > 1:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    retry_until(free, timeout)


class PostgresProject:
    """Mixin (first, before a CoordTestCase class): the test's project lives in PostgreSQL. COORD_DB
    is a postgresql:// URL to the test server, a fresh project (schema) per test, its host process
    started by coord itself on demand and stopped after the test; self.db names no file. With
    PG_PROJECT (a class whose project ID comes from an installed .coord/project-id) the URL is in
    that project's settings file instead (store.write_project_url), and COORD_DB is left alone."""

    PG_PROJECT = None

    @classmethod
    def mirrors(cls):
        """True when the class repeats a SQLite test class's own tests on PostgreSQL (a base other
        than this mixin defines test methods), rather than tests of its own."""
        return any(b not in (cls, PostgresProject) and issubclass(b, unittest.TestCase)
                   and any(n.startswith("test") for n in vars(b)) for b in cls.__mro__[1:])

    def configure_project(self):
        if os.environ.get("COORD_TEST_NO_JJ") and self.mirrors():  # the oldest and newest interpreters' suites
            self.skipTest("runs once: a SQLite class again on PostgreSQL runs on the default interpreter")
        server, self.psycopg = require_postgres(self)
        import store
        import hostclient
        import uuid
        self.pg_url = pg_url(server)
        # An installed .coord/coord (and the host process it starts) runs on this interpreter, the
        # one whose psycopg PYTHONPATH names (the first python3 on PATH may be another version).
        self.env["COORD_PYTHON"] = sys.executable
        if self.PG_PROJECT:
            self.pg_project = self.PG_PROJECT
            store.write_project_url(self.pg_project, self.pg_url, self.env)
            self.env.update({"PYTHONPATH": psycopg_dir(), "COORD_DB": "", "COORD_PROJECT_ID": self.pg_project})
        else:
            self.pg_project = "pgroute-%s" % uuid.uuid4().hex[:12]
            self.env.update({"COORD_DB": self.pg_url, "COORD_PROJECT_ID": self.pg_project,
                             "PYTHONPATH": psycopg_dir()})
        os.environ.update(self.env)
        self.db = self.pg_url
        self.host_socket = hostclient.project_host_socket(self.pg_project, self.env)
        self.addCleanup(self._drop_pg_project, server)
        self.addCleanup(stop_host_process, self.host_socket)
        self.addCleanup(self._no_url_became_a_file, os.getcwd())

    def _no_url_became_a_file(self, cwd):
        for where in (cwd, self.tmp, getattr(self, "repo", None)):
            if where and os.path.exists(os.path.join(where, "postgresql:")):
                self.fail("a file was made of the URL in %s (a SQLite-only step of the test on PostgreSQL)" % where)

    def _drop_pg_project(self, server):
        import store
        import pg
        with self.psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute('DROP SCHEMA IF EXISTS "%s" CASCADE' % pg.pg_schema(self.pg_project))

    def open_project(self):
        """The test's own store of the project, to arrange and inspect records (the PostgreSQL
        engine in this process, as a SQLite test opens the file); coord and the hooks under test
        reach the same project only through the host process."""
        import store
        import pg
        st = pg.Store({"dsn": self.pg_url, "project": self.pg_project}, environ=self.env)
        self.addCleanup(st.close)
        return st
