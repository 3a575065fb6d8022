"""The host process's client (docs/postgresql.md): how a hook or a command reaches a PostgreSQL
project, whose records only the per-host process (host.py) touches. Stdlib only, no driver:
the socket and its framing (HostClient), the Store whose operations run there (RemoteStore),
starting it and asking how it is (start_host, host_status, host_doctor), the driver's install
command, leaving a project, and safe mode's local file (the one fail-closed case of the hook).

coord's CLI and the hook import it only for a PostgreSQL project (store.project_database says
which): a hook on a SQLite project never loads it. host.py and pg.py import it for the same
facts from the other side (the protocol, the socket's path, the safe-mode file).
"""

import json
import os
import sys
import time

import store



# --------------------------------------------------------------------------- the host process's client
# Hooks and commands of a PostgreSQL project reach the database only through the per-host coord
# process (host.py) over a private Unix socket; this side is stdlib only (socket and struct
# imported at first use). Framing: a 4-byte big-endian length, then UTF-8 JSON, both ways.

HOST_PROTOCOL = 1
HOST_MAX_FRAME = 16 << 20
_HOST_ERRORS = {"UsageError": store.UsageError, "Refused": store.Refused, "EnvError": store.EnvError, "CoordError": store.CoordError}


def host_socket_path(environ=None):
    """<state_dir>/host.sock: the host process's socket (the state directory is 0700)."""
    return os.path.join(store.state_dir(environ), "host.sock")


class HostClient:
    """One connection to the host process; call(op, *args, **kwargs) -> the Store method's result,
    or its CoordError raised again here (same class, message, hint, details: exit codes hold)."""

    def __init__(self, project, path=None, timeout=30.0, environ=None):
        # the C module, not socket.py, whose enums of every constant cost a hook a few ms
        import _socket as socket
        self.project = project
        self.path = path or host_socket_path(environ)
        self.next_id = 0
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(self.path)
        except OSError as exc:
            sock.close()
            import errno
            if exc.errno in (errno.EPERM, errno.EACCES):  # a sandbox's refusal, not a host process down
                raise store.EnvError("connecting to coord's host process (%s) was refused: %s; inside Codex's"
                               " workspace-write sandbox a Unix socket needs network access" % (self.path, exc.strerror),
                               SANDBOX_SOCKET_HINT, sandboxed=True)
            raise store.EnvError("coord's host process is not running for this project (%s: %s)"
                           % (self.path, exc.strerror or exc), "start it: %s" % host_start_command("coord"))
        self.sock = sock

    def call(self, op, *args, **kwargs):
        import struct
        self.next_id += 1
        req = {"v": HOST_PROTOCOL, "id": self.next_id, "project": self.project, "op": op,
               "args": list(args), "kwargs": kwargs}
        data = json.dumps(req, separators=(",", ":")).encode("utf-8")
        try:
            self.sock.sendall(struct.pack(">I", len(data)) + data)
            head = self._read(4)
            (size,) = struct.unpack(">I", head)
            if size > HOST_MAX_FRAME:
                raise store.EnvError("the host process sent a reply of %d bytes" % size)
            reply = json.loads(self._read(size).decode("utf-8"))
        except OSError as exc:
            raise store.EnvError("lost the connection to coord's host process (%s: %s)" % (self.path, exc),
                           "retry; if it keeps failing: .coord/install . --doctor")
        if reply.get("ok"):
            return reply.get("result")
        err = reply.get("error") or {}
        cls = _HOST_ERRORS.get(err.get("class"), store.CoordError)
        raise cls(err.get("message") or "the host process failed", err.get("hint"), **(err.get("details") or {}))

    def _read(self, n):
        parts = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise OSError("connection closed")
            parts.append(chunk)
            n -= len(chunk)
        return b"".join(parts)

    def close(self):
        self.sock.close()


def host_doctor(project, path=None, timeout=10.0, environ=None):
    """For --doctor on a PostgreSQL project: pg_doctor_checks run by its host process (the only
    process with a server connection, as this host's role): [(ok, line)], or None when the host
    process does not answer (--doctor says so on its own line)."""
    try:
        client = HostClient(project, path, timeout, environ)
    except store.EnvError:
        return None
    try:
        return [(bool(ok), line) for ok, line in client.call("doctor")]
    except store.CoordError as exc:
        return [(False, "database security: not checked: %s" % exc.message)]
    finally:
        client.close()


def host_status(project, path=None, timeout=2.0, environ=None):
    """For --doctor: {"running": True, "pid", "project", "now", "round_trip_ms"} from a ping, or
    {"running": False, "reason"}."""
    try:
        t0 = time.perf_counter()
        client = HostClient(project, path, timeout, environ)
        try:
            out = dict(client.call("ping"), running=True)
        finally:
            client.close()
        out["round_trip_ms"] = round((time.perf_counter() - t0) * 1000, 2)
        return out
    except store.CoordError as exc:
        return {"running": False, "reason": exc.message}


def start_host(project, dsn, path=None, timeout=30.0, environ=None, python=None):
    """Start the host process (host.py supervise) detached, in a session of its own, its output
    appended to <socket>.log, unless one answers already; wait until it answers (or raise
    EnvError after `timeout` seconds). A second start racing this one finds the lock held and
    exits; both then find the one that serves."""
    path = path or host_socket_path(environ)
    if host_status(project, path, environ=environ)["running"]:
        return
    spawn_host(project, dsn, path, environ, python)
    started = time.monotonic()
    deadline = started + timeout
    seen = False
    while not host_status(project, path, environ=environ)["running"]:
        held = _host_lock_held(path)
        seen = seen or held
        if (not held and (seen or time.monotonic() - started > 5.0)) or time.monotonic() > deadline:
            # its supervisor ended (it exits when the worker cannot start) or never took the lock
            why, fix = _last_line(path + ".log")
            raise store.EnvError(why, "see %s.log" % path, **({"install": fix} if fix else {}))
        time.sleep(0.05)


def _host_lock_held(path):
    """Whether a host process (its supervisor) holds <socket>.lock."""
    import fcntl
    try:
        fd = os.open(path + ".lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def _last_line(path):
    """(the host process's last refusal in its log, or its last line; the driver install command
    when that refusal is the missing driver, else None)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            lines = [l for l in f.read().decode("utf-8", "replace").splitlines() if l.strip()]
    except OSError:
        return "it wrote no log", None
    at = max([i for i, l in enumerate(lines) if l.startswith("host.py: ")] or [-1])
    if at < 0:
        return (store.clean_text(lines[-1], 300) if lines else "it wrote nothing in its log"), None
    why = store.clean_text(lines[at][len("host.py: "):], 300)
    nxt = lines[at + 1] if at + 1 < len(lines) else ""
    fix = nxt[1:-1] if "psycopg" in why and nxt.startswith("(") and nxt.endswith(")") else None
    return why, fix


HOST_IDLE = 1800  # seconds: a host process started on demand ends after half an hour with no client


def spawn_host(project, dsn, path, environ=None, python=None):
    """Start `host.py supervise` detached (double fork: no zombie here) without waiting for it.
    The DSN goes in its environment (COORD_HOST_DSN), never its argv, which every user of the
    host can read in /proc."""
    import subprocess
    store.private_state_dir(os.path.dirname(path))
    argv = [python or sys_executable(), os.path.join(os.path.dirname(os.path.abspath(__file__)), "host.py"),
            "supervise", "--project", project, "--socket", path, "--idle", str(HOST_IDLE)]
    env = dict(os.environ if environ is None else environ, COORD_HOST_DSN=dsn)
    for name in store.AGENT_MARKERS + ("COORD_RUNTIME_ID", "COORD_DB"):  # the host process is no caller
        env.pop(name, None)
    log = os.open(path + ".log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        middle = os.fork()  # the supervisor is the child of a process that exits at once: no zombie here
        if middle == 0:
            try:
                subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                 env=env, cwd="/")
            finally:
                os._exit(0)
        os.waitpid(middle, 0)
    finally:
        os.close(log)


def sys_executable():
    import sys
    return sys.executable


class RemoteStore:
    """A Store whose operations run in the host process: st.claim(...) is one request. Only the
    operations the host process lists (host.HOST_OPS) answer; transaction()/snapshot() bind
    the operations inside them to one server transaction (begin ... commit)."""

    engine = "postgresql"

    def __init__(self, project, path=None, timeout=30.0, environ=None):
        self.client = HostClient(project, path, timeout, environ)
        self.path = self.client.path  # os.path.dirname(st.path): the state directory, as for SQLite
        self.depth = 0
        self._host_env = environ

    # the pid rule of Store.pid_judged_here for the comparisons a command makes in its own
    # process (its /proc, its tmux panes), answered here without a request: this process's host.

    @property
    def host(self):
        return store.host_identity(self._host_env)

    def pid_judged_here(self, rt):
        return rt.get("host") == self.host["id"]

    def wake_generation(self):
        """The host process's count of the project's wake-ups (every commit changing runtimes or
        leases, from any host, NOTIFYs it), from its ping: no database read; None while it does not
        listen. The live view's data_version on PostgreSQL."""
        copy = self.client.call("ping").get("lease_copy") or {}
        return (copy.get("reconnects"), copy.get("wakes")) if copy.get("listening") else None

    # The caller-side facts: gathered here, in the calling process, and decided by the
    # host process (Store.decide_caller, Store.decide_person_runtime).

    def caller(self, explicit=None, environ=None, now=None, person=True):
        return self.client.call("decide_caller", store.caller_facts(explicit, environ, complete=True), person=person,
                                **_client_time(now))

    def person_runtime(self, register=True, now=None, environ=None, skip=()):
        return self.client.call("decide_person_runtime", list(store.person_key(environ, skip)), register=register,
                                **_client_time(now))

    def __getattr__(self, op):
        if op.startswith("_"):
            raise AttributeError(op)
        client = self.client

        def call(*args, **kwargs):
            return client.call(op, *args, **kwargs)
        call.__name__ = op
        return call

    def transaction(self):
        return _RemoteTransaction(self, True)

    def snapshot(self):
        return _RemoteTransaction(self, False)

    def close(self):
        self.client.close()


def _client_time(now):
    """{} for now=None: the host process keeps the time and refuses a request that carries one
    (host.py, _refuse_client_time); a caller's explicit time is passed on, to be refused there."""
    return {} if now is None else {"now": now}


class _RemoteTransaction:
    def __init__(self, remote, write):
        self.remote, self.write, self.outer = remote, write, False

    def __enter__(self):
        if self.remote.depth == 0:
            self.remote.client.call("begin", write=self.write)
            self.outer = True
        self.remote.depth += 1
        return self

    def __exit__(self, exc_type, exc, tb):
        self.remote.depth -= 1
        if self.outer:
            self.remote.client.call("commit" if exc_type is None else "rollback")
        return False


def project_host_socket(project, environ=None):
    """<state_dir>/host-<digest>.sock: the socket of the host process serving `project` (one per
    project and user; a digest keeps the path within a Unix socket's 108 bytes)."""
    return os.path.join(store.state_dir(environ), "host-%s.sock" % store.hashes().sha256(project.encode("utf-8")).hexdigest()[:16])


def host_start_command(prefix=".coord/coord"):
    return "%s db start" % prefix


SANDBOX_SOCKET_HINT = ("the person sets network_access = true under [sandbox_workspace_write] in Codex's config.toml"
                       " (.coord/install . --doctor shows it), or approves running this command outside the sandbox;"
                       " meanwhile coord's hooks still check every write and deliver messages")


def host_down_error(project, path, why, hint=None):
    return store.EnvError("coord's host process for project %s is not running and did not start: %s" % (project, why),
                    hint or "start it: %s (its log: %s.log)" % (host_start_command("coord"), path))


def open_project_store(environ=None, start=None, timeout=None, command=True, prefix=".coord/coord", **kw):
    """The project's store: a Store (SQLite) or a RemoteStore through the host process
    (PostgreSQL), which a command (command=True) starts first when it is not running; a hook
    (command=False) never waits for it: EnvError, and it fails open."""
    env = os.environ if environ is None else environ
    db = store.project_database(env, start)
    if db["engine"] == "sqlite":
        return store.Store(db["path"], timeout=timeout, environ=env, **kw)
    project, path = db["project"], project_host_socket(db["project"], env)
    wait = timeout if timeout is not None else store.env_number(env, "COORD_BUSY_TIMEOUT", store.BUSY_TIMEOUT,
                                                          store.BUSY_TIMEOUT_RANGE, kw.get("strict_env", True))
    wait = max(float(wait), 1.0) + 30.0 if command else float(wait)
    try:
        return RemoteStore(project, path, timeout=wait, environ=env)
    except store.EnvError as exc:
        if not command or exc.details.get("sandboxed"):
            raise
        if store.in_nested_pid_namespace():  # a sandbox or container: a host process started here would live in it
            raise store.EnvError(exc.message + "; this process runs in a nested PID namespace (a sandbox or a container),"
                           " where coord starts none on demand",
                           "in a container where the agents run, start it in the container once (a terminal in it or"
                           " its entrypoint): %s; under a harness's sandbox, the person runs it in a terminal outside"
                           " the sandbox" % host_start_command("coord"))
    try:
        start_host(project, db["url"], path, timeout=30.0, environ=env)
        return RemoteStore(project, path, timeout=wait, environ=env)
    except store.EnvError as exc:
        fix = exc.details.get("install")
        raise host_down_error(project, path, exc.message, fix and "install the driver: %s ; then: %s"
                              % (fix, host_start_command("coord")))


def project_live_works(db, environ=None):
    """live_works_readonly for a project_database() `db`: for PostgreSQL through its host process
    when it runs (never starting it: the installer only reads); None when it cannot be read."""
    if db["engine"] == "sqlite":
        return store.live_works_readonly(db["path"])
    try:
        st = RemoteStore(db["project"], project_host_socket(db["project"], environ), timeout=5.0, environ=environ)
    except store.EnvError:
        return None
    try:
        works = st.works()
    except store.CoordError:
        return None
    finally:
        st.close()
    out = []
    for w in works:
        if w.get("state") not in ("creating", "failed", "removed"):
            w.pop("token", None)
            out.append(w)
    return out


def driver_dir(version=None, environ=None):
    """<state>/driver/python<major>.<minor>: where the command coord prints installs psycopg for one
    interpreter (`pip install --target`: nothing goes into the system's or the user's site-packages,
    so a distribution's externally-managed interpreter, Debian 12's python3 among them, takes it
    without an override; the binary wheel is built for one Python version, hence one directory
    each). The state directory is private and outside every repository."""
    import sys
    major, minor = tuple(version or sys.version_info[:2])[:2]
    return os.path.join(store.state_dir(environ), "driver", "python%d.%d" % (major, minor))


def psycopg_install_command(python, version=None, environ=None):
    """The exact command that installs the driver for interpreter `python` into driver_dir()
    (version: its (major, minor), default this interpreter's; psycopg 3.3 needs Python >= 3.10,
    so 3.9 gets 3.2)."""
    import shlex
    import sys
    version = tuple(version or sys.version_info[:2])
    pin = "==3.2.13" if version < (3, 10) else "==3.3.9"
    return "%s -m pip install --upgrade --target %s 'psycopg[binary]%s'" % (
        shlex.quote(python), shlex.quote(driver_dir(version, environ)), pin)


def driver_status(python=None, environ=None):
    """Whether `python` (default: this interpreter) imports psycopg 3 as the host process would
    (import_psycopg), checked in a child process (importing it here would cost the caller 100+
    ms): {"ok", "python", "version", "install"}."""
    import subprocess
    python = python or sys_executable()
    code = ("import os, sys\nv = sys.version_info[:2]\nprint('%%d.%%d' %% v)\n"
            "try:\n    import psycopg\nexcept ImportError:\n"
            "    sys.path.append(os.path.join(%r, 'python%%d.%%d' %% v))\n    import psycopg\n"
            "print(psycopg.__version__)" % os.path.join(store.state_dir(environ), "driver"))
    try:
        proc = subprocess.run([python, "-c", code], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60)
        lines = proc.stdout.decode("utf-8", "replace").split()
    except (OSError, subprocess.SubprocessError):
        proc, lines = None, []
    version = tuple(int(x) for x in lines[0].split(".")) if lines and lines[0].count(".") == 1 else None
    ok = proc is not None and proc.returncode == 0 and len(lines) >= 2
    return {"ok": ok, "python": python, "version": lines[1] if ok else None,
            "install": psycopg_install_command(python, version, environ)}


def start_host_in_background(environ=None, start=None):
    """SessionStart on a PostgreSQL project whose host process is down: start it without waiting
    (the next event finds it). Never raises."""
    try:
        env = os.environ if environ is None else environ
        db = store.project_database(env, start)
        if db["engine"] == "postgresql":
            spawn_host(db["project"], db["url"], project_host_socket(db["project"], env), env)
    except Exception:
        pass


# --------------------------------------------------------------------------- safe mode
# A host that cannot reach the database (its host process is down, paused or cut off from the
# server) cannot know whether its exclusive leases still hold: after the lease's own expiry, or
# after its host's heartbeat has been missed for the host TTL, another host may take them. So its
# hooks deny writes to paths it holds exclusively once those leases may have lapsed, and say why:
# the only fail-closed case (everything else fails open, as for an unreadable database). The
# hook cannot ask the server, so the host process keeps a small local file beside its socket,
# rewritten after every heartbeat it got through (and soon after every claim or renewal it
# served): this host's unexpired exclusive leases, each with the server time it may lapse at,
# and the offset from this machine's monotonic clock to the server's. The hook's check reads only
# that file (stdlib, no subprocess): a write is refused when the server's time, estimated from
# the monotonic clock, is within the margin of a lease's lapse. Reading it costs a hook only when
# the database is out of reach.

SAFE_STATE_VERSION = 1


def safe_state_path(socket_path=None, environ=None):
    """The host process's safe-mode file, beside its socket and named after it: <state>/host.safe
    for <state>/host.sock, <state>/host-<digest>.safe for a project's <state>/host-<digest>.sock
    (project_host_socket), so two projects' host processes in one state directory never write
    (or read) each other's leases."""
    sock = socket_path or host_socket_path(environ)
    base = sock[:-len(".sock")] if sock.endswith(".sock") else sock
    return base + ".safe"


def safe_state(beat, clock_offset, clock_rtt=0.0, host=None):
    """The safe-mode file's content from a host_beat() result (server times) and the host
    process's ServerClock (server time = time.monotonic() + clock_offset, within clock_rtt / 2).
    Each lease may lapse at the earlier of its expiry and the moment other hosts stop taking this
    host for live (its last confirmed beat plus its TTL); the lease delay after that is kept for
    writes already allowed, never spent by the hooks."""
    host = host or store.host_identity()
    gone_at = beat["heartbeat_at"] + beat["ttl"]
    return {"v": SAFE_STATE_VERSION, "host": host["id"], "boot_id": host["boot_id"],
            "offset": clock_offset, "margin": store.SAFE_MARGIN + clock_rtt / 2, "confirmed_at": beat["now"],
            "leases": [{"resource": l["resource"], "handle": l["handle"], "conversation": l["conversation"],
                        "lapse_at": min(l["expires_at"], gone_at)} for l in beat["leases"]]}


def write_safe_state(path, state):
    store.atomic_write(path, json.dumps(state, sort_keys=True, separators=(",", ":")).encode("utf-8"))


def safe_mode_refusals(names, path=None, mono=None):
    """For a hook that could not reach the database: [{name, resource, handle, lapse_at}] for each
    of `names` (resource names) under or above an exclusive lease of this host that may have
    lapsed by now (server time estimated from the monotonic clock, minus the file's margin).
    [] when nothing is refused, and when the file is missing, unreadable, from another boot (its
    monotonic clock means nothing now) or from another version: fail open."""
    try:
        with open(path or safe_state_path(), "rb") as f:
            state = json.loads(f.read().decode("utf-8"))
        if state.get("v") != SAFE_STATE_VERSION or state.get("boot_id") != store.host_identity()["boot_id"]:
            return []
        server_now = (time.monotonic() if mono is None else mono) + float(state["offset"])
        margin = float(state["margin"])
        out = []
        for lease in state["leases"]:
            if server_now + margin < float(lease["lapse_at"]):
                continue
            for name in names:
                if store.overlaps(name, lease["resource"]):
                    out.append({"name": name, "resource": lease["resource"], "handle": lease["handle"],
                                "lapse_at": float(lease["lapse_at"])})
        return out
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


def safe_mode_reason(refusals, command=".coord/coord"):
    """The hook's deny reason for safe_mode_refusals(...) (non-empty); `command`: how the agent
    runs coord from its cwd."""
    first = refusals[0]
    return ("coord cannot reach its database, and this host's exclusive lease on %s (held by %s) may have lapsed"
            " since %s (server time): another host may hold it now, so writes to %s are refused until this host"
            " reaches the database again (if its host process is down: %s; then the lease is renewed, or you"
            " are told who took it)" % (
                first["resource"], first["handle"],
                time.strftime("%H:%M:%S", time.gmtime(first["lapse_at"])) + " UTC",
                ", ".join(sorted(set(r["name"] for r in refusals))), host_start_command(command)))


# --------------------------------------------------------------------------- leaving a project, reading its works

def leave_project(project_id, environ=None):
    """This host stops using the project's PostgreSQL records (`coord db leave`): its URL file is
    renamed aside (never deleted); the records stay on the server. -> {"project", "aside"}."""
    env = os.environ if environ is None else environ
    here = store.project_database(dict(env, COORD_DB="", COORD_PROJECT_ID=project_id))
    if here["engine"] != "postgresql":
        raise store.Refused("project %s is in SQLite on this host (%s): nothing to leave" % (project_id, here["path"]))
    return {"project": project_id,
            "aside": store.move_aside(here["source"], time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))}


def read_works(path):
    """The live work records (id, handle, task, state, path, source), read as live_works_readonly
    reads; [] when there is no database or it cannot be read. `path` may be a project_database()
    of a PostgreSQL project (project_live_works)."""
    works = store.live_works_readonly(path) if isinstance(path, str) else project_live_works(path)
    return [{k: w.get(k) for k in ("id", "handle", "task", "state", "path", "source")} for w in works or []]
