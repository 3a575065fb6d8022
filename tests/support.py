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

# Variables a test must never inherit from the developer's own agent session.
_SCRUB = (
    "COORD_DB", "COORD_PROJECT_ID", "COORD_RUNTIME_ID", "COORD_WORK_ID",
    "CLAUDE_CODE_SESSION_ID", "CODEX_SESSION_ID", "CODEX_THREAD_ID", "CLAUDE_ENV_FILE",
    "CLAUDE_PROJECT_DIR", "TMUX", "TMUX_PANE", "TMUX_TMPDIR", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE",
    "COORD_TMUX_SOCKET", "COORD_CLAUDE_CMD", "COORD_CODEX_CMD", "COORD_SCRATCH_ROOT", "COORD_BUSY_TIMEOUT",
    "COORD_LEASE_TTL", "COORD_RUNTIME_TTL", "COORD_PYTHON", "COORD_REPO_ROOT", "CODEX_HOME",
)


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

    Mark by measured duration (`tests/run` prints the slowest tests), not by guess.
    """
    test.coord_slow = True
    return test


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


def retry_until(predicate, timeout=10.0, interval=0.02):
    """Poll predicate() until it returns a truthy value; return it, or raise on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met within %.1fs" % timeout)
        time.sleep(interval)


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
        })
        self._saved_env = dict(os.environ)
        self.addCleanup(self._restore_env)
        os.environ.clear()
        os.environ.update(self.env)

    def _restore_env(self):
        os.environ.clear()
        os.environ.update(self._saved_env)

    def coord(self, *args, runtime=None, env=None, cwd=None, input=None, check=None):
        """Run the real `coord` script; return CompletedProcess (text)."""
        e = dict(self.env)
        if runtime:
            e["COORD_RUNTIME_ID"] = runtime
        if env:
            e.update(env)
        proc = subprocess.run(
            [sys.executable, COORD] + [str(a) for a in args],
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
        return json.loads(proc.stdout)

    def hello(self, conversation=None, **kw):
        """Register a runtime through the CLI; return its full record (dict)."""
        args = ["hello"]
        if conversation:
            args += ["--conversation", conversation]
        return self.coord_json(*args, **kw)
