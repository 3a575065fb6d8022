"""coord's state: one private SQLite WAL database per project on this host (a project across
hosts is one PostgreSQL schema: pg.py, the engine, runs only in the host process, host.py, and
hostclient.py reaches it), and the facts every module shares.

Invariants this module keeps:
- Every read-check-write runs inside `transaction()` (BEGIN IMMEDIATE), so two processes
  can never both see a resource free and both take it.
- Full UUIDs are the only stored identities. Five-word handles are derived aliases that
  resolve only on an exact match; a prefix never resolves.
- Every change of ownership or delivery state appends one audit row inside the same
  transaction, and so does an explicit lease renewal (`renew`). Presence heartbeats are not
  audited, nor the lease extension each heartbeat carries (they move no ownership and would
  drown the log).
- A renewal never shortens a lease and an expired lease is never renewed: it is reaped and
  must be claimed again.
- The database directory is 0700 and the database files 0600, whatever the umask.

The hooks import this module on every tool call of every agent, so at import it loads only os,
time and SQLite's C module (_sqlite3: the sqlite3 package adds datetime, ~2 ms); json and re load
where a function needs them (a hook's write check needs neither: json with re costs a hook a few
ms, a third of a bare interpreter's start), and its patterns compile at first use. Hashes
(handles, subagent IDs) come from CPython's own sha1/sha256 modules, loaded on first use, not
from hashlib (OpenSSL, ~2 ms); a hook's write check hashes only for a subagent. subprocess loads
only where there is no /proc.
"""

import os
import time

import _sqlite3 as sqlite3  # the sqlite3 package's own C module: connect, Connection, the errors

from harness_facts import HARNESSES

SCHEMA_VERSION = 4  # the newest migration this coord knows (see _MIGRATIONS and ADDITIVE_MIGRATIONS)
DEFAULT_LEASE_TTL = 3600.0       # seconds a lease lives without renewal
DEFAULT_RUNTIME_TTL = 4 * 3600.0  # seconds a runtime stays live without a heartbeat
BUSY_TIMEOUT = 30.0              # CLI wait for a locked database (writers queue at the gate)
CONTEXT_BUDGET = 8 * 1024        # bytes of message context one hook boundary injects (see DESIGN.md)
MAX_BODY = 6 * 1024              # bytes of one message body: one maximal message fits one boundary
REMINDERS = 5                    # reminder lines per boundary; the rest are counted
REMINDER_BYTES = 160             # bytes of one reminder line at most (see reminder_line)
MAX_PURPOSE = 500                # characters of a lease purpose
MAX_RESOURCE = 1024              # characters of a resource name
HEARTBEAT_EVERY = 30.0           # hooks skip a heartbeat younger than this

# -- hosts (PostgreSQL projects: a SQLite project is one host by definition).
# A runtime's pid is judged only by its own host; another host judges it by its host's heartbeat
# on the server's clock. The host process beats every HOST_BEAT_EVERY seconds (at most a sixth
# of the host's TTL). DEFAULT_HOST_TTL is six beats: a host is given up only after five missed
# beats in a row, which rides out a managed server's failover or a pooler restart (tens of
# seconds) and a host process's restart by its supervisor (0.1-5 s) without ending every agent of
# a healthy host. After the TTL its runtimes are no longer live (not offered as recipients, not
# shown live), but their exclusive leases stay held for DEFAULT_HOST_LEASE_DELAY more: a host
# that stopped beating may be paused, not dead (a SIGSTOP, a suspended VM, a hook that decided
# "allowed" just before the pause and writes after it), and its own hooks keep writing until
# their safe-mode deadline (SAFE_MARGIN before the lease may lapse in server time). The delay is
# what separates that deadline from the moment another host may claim: it must exceed the
# longest time between a hook's decision and the write it allows, plus both hosts' clock
# uncertainty. Each host records its own TTL and delay in its row, so every other host judges
# it by the values its own hooks use (COORD_HOST_TTL, COORD_HOST_LEASE_DELAY override them).
HOST_BEAT_EVERY = 5.0
DEFAULT_HOST_TTL = 30.0
DEFAULT_HOST_LEASE_DELAY = 30.0
HOST_TTL_RANGE = (0.5, 86400.0)
HOST_LEASE_DELAY_RANGE = (0.0, 86400.0)
# Safe mode: a hook that cannot reach the database denies a write to a path its host holds
# exclusively once (its estimate of) the server's time is within SAFE_MARGIN of the moment the
# lease may lapse: the margin covers the offset error of both hosts' server clocks (each within
# half a round trip when measured, plus drift of some parts per million between measurements).
SAFE_MARGIN = 1.0

# Every number read from a flag or the environment is checked against one of these closed
# ranges (check_float / check_int); anything else, including inf and nan, is a usage error.
LEASE_TTL_RANGE = (1.0, 7 * 86400.0)       # --ttl, COORD_LEASE_TTL (seconds)
RUNTIME_TTL_RANGE = (60.0, 7 * 86400.0)    # COORD_RUNTIME_TTL: at least two heartbeat intervals
BUSY_TIMEOUT_RANGE = (0.0, 600.0)          # COORD_BUSY_TIMEOUT (0: fail at once when locked)
ID_RANGE = (1, (1 << 63) - 1)              # message IDs (SQLite INTEGER); audit --since starts at 0
PID_RANGE = (1, (1 << 31) - 1)             # hello --pid (pid_t)

EXIT_INTERNAL, EXIT_USAGE, EXIT_REFUSED, EXIT_ENV = 1, 2, 3, 4
EXIT_CONFLICTS = 5  # `work conflicts` found works that would conflict (a finding, not a failure)

# The next step for a superseded (stale) attachment, given the handle that replaced it.
STALE_HINT = ("this session is stale: stop acting for the conversation here; %s carries it on"
              " (resume the conversation in this session to take it back)")

DOMAIN_RUNTIME = "runtime"
DOMAIN_WORK = "work"


# --------------------------------------------------------------------------- errors

class CoordError(Exception):
    """A failure the user can act on: a message, a hint (the next command) and an exit code."""

    exit_code = EXIT_INTERNAL
    kind = "error"

    def __init__(self, message, hint=None, **details):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details

    def as_dict(self):
        d = {"ok": False, "error": self.kind, "message": self.message, "exit": self.exit_code}
        if self.hint:
            d["hint"] = self.hint
        d.update(self.details)
        return d


class UsageError(CoordError):
    exit_code = EXIT_USAGE
    kind = "usage"


class Refused(CoordError):
    """Refused by coordination state: a conflict, not the owner, a superseded runtime."""
    exit_code = EXIT_REFUSED
    kind = "refused"


WORK_LIST_HINT = "coord work list shows work handles and their tasks"


class TaskName(Refused):
    """A work named by its task: ambiguous (several live works have it), or where only the exact
    handle may name it (closing, landing, deleting). `token` is the name as given and `handles`
    the handles it stands for, so coord's main() can write the command to type with the handle."""

    def __init__(self, token, works, by_task):
        self.token = (token or "").strip()
        self.handles = [w["handle"] for w in works]
        which = ", ".join("%s (%s)" % (w["handle"], w["state"]) for w in works)
        if len(works) > 1:
            message = "task %r names %d live works: %s; name one by its handle" % (self.token, len(works), which)
        else:
            message = "%r is the task of work %s; this command needs the exact work handle, which is what " \
                      "carries authority (a task name only reads or launches)" % (self.token, which)
        super().__init__(message, WORK_LIST_HINT, handles=self.handles)
        self.by_task = by_task


class EnvError(CoordError):
    """The environment is not usable: database busy/corrupt/unreadable, no project ID, a missing tool."""
    exit_code = EXIT_ENV
    kind = "environment"


# --------------------------------------------------------------------------- identity

class Pattern:
    """A regular expression compiled at its first use. Each hook event is a new process, and
    compiling this module's patterns at import cost every event about 0.7 ms."""

    __slots__ = ("_args", "_compiled")

    def __init__(self, *args):
        self._args = args
        self._compiled = None

    def __getattr__(self, name):  # match, search, sub, ...: only attributes a Pattern lacks
        if self._compiled is None:
            import re
            self._compiled = re.compile(*self._args)
        return getattr(self._compiled, name)


WORDS = (
    "acorn amber anchor apple arrow autumn badge bamboo banjo basket beacon berry birch bison "
    "blanket bloom bottle bramble breeze brick bridge bronze bucket butter cabin cactus camel "
    "candle canyon carrot castle cedar cherry chimney cider circle cloud clover cobalt comet "
    "copper coral cotton crane crayon cricket crystal daisy delta desert dolphin dragon drum "
    "eagle ember falcon feather fern fiddle flint forest fossil fountain garden garnet ginger "
    "glacier goose granite grape gravel harbor hazel heron honey island ivory jacket jasper "
    "kettle kite ladder lantern lemon lily linen lizard maple marble meadow melon mirror molten "
    "moss mountain nectar needle nickel oak ocean olive onyx orchid otter owl paddle panda "
    "pebble pepper pillow pine planet plum pocket pond poppy quartz quill rabbit raven river "
    "robin rocket saddle salmon sapphire sparrow timber"
).split()
assert len(WORDS) == 128 and len(set(WORDS)) == 128
_WORD_SET = frozenset(WORDS)
_UUID_RE = Pattern(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
# Namespace for derived (subagent) runtime IDs; fixed forever.
_SUBAGENT_NS = bytes.fromhex("6c1f3d0a8e2b4c7d9a5e0f1b2c3d4e5f")


class _Hashes:
    sha1 = sha256 = None


def hashes():
    """An object with sha1 and sha256 constructors. CPython's own implementations (the modules
    hashlib falls back to) load in microseconds, where hashlib loads OpenSSL, about 2 ms, in
    every process that derives a handle. The digests are the same either way."""
    if _Hashes.sha256 is None:
        try:
            from _sha1 import sha1
            try:
                from _sha2 import sha256  # Python 3.12+
            except ImportError:
                from _sha256 import sha256  # Python 3.9-3.11
        except ImportError:  # an interpreter built without them
            from hashlib import sha1, sha256
        _Hashes.sha1, _Hashes.sha256 = staticmethod(sha1), staticmethod(sha256)
    return _Hashes


def _format_uuid(b):
    h = b.hex()
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:32])


def new_uuid():
    """A random version-4 UUID string."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    return _format_uuid(bytes(b))


def subagent_uuid(conversation, agent_id):
    """Deterministic runtime UUID of a subagent: RFC 4122 version 5 over parent conversation + agent_id."""
    name = ("%s\0%s" % (conversation, agent_id)).encode("utf-8", "surrogatepass")
    b = bytearray(hashes().sha1(_SUBAGENT_NS + name).digest()[:16])
    b[6] = (b[6] & 0x0F) | 0x50
    b[8] = (b[8] & 0x3F) | 0x80
    return _format_uuid(bytes(b))


def handle_for(full_id, domain):
    """The exact five-word handle of a full ID: 35 bits of a domain-separated SHA-256."""
    digest = hashes().sha256(b"coord-handle-v1\0" + domain.encode() + b"\0" + full_id.encode()).digest()
    n = int.from_bytes(digest[:5], "big") >> 5
    return "-".join(WORDS[(n >> (7 * (4 - i))) & 0x7F] for i in range(5))


def is_uuid(text):
    return isinstance(text, str) and bool(_UUID_RE.match(text))


def is_handle(text):
    if not isinstance(text, str):
        return False
    parts = text.split("-")
    return len(parts) == 5 and all(p in _WORD_SET for p in parts)


def _identity_kind(token, what):
    token = (token or "").strip().lower()
    if is_uuid(token):
        return "id", token
    if is_handle(token):
        return "handle", token
    raise UsageError(
        "%r is not an exact five-word %s handle or a full UUID (prefixes never resolve)" % (token, what),
        "coord list --verbose shows exact handles and IDs")


# --------------------------------------------------------------------------- paths and resources

def resolve_project_id(environ=None, start=None):
    """COORD_PROJECT_ID, else the installer's .coord/project-id found from `start` upwards."""
    env = os.environ if environ is None else environ
    pid = env.get("COORD_PROJECT_ID", "").strip()
    if not pid:
        root = find_repo_root(start)
        if root:
            try:
                with open(os.path.join(root, ".coord", "project-id"), encoding="utf-8") as f:
                    pid = f.read().strip()
            except OSError:
                pid = ""
    if not pid:
        raise EnvError("no project ID: this repository has no .coord/project-id",
                       CLONE_CATCH_UP if in_managed_clone(start) else
                       "install coord with ./install REPO --project-id ID, or set COORD_PROJECT_ID")
    if not valid_project_id(pid):
        raise EnvError("project ID %r must be letters, digits, '.', '_' or '-'" % pid,
                       "set COORD_PROJECT_ID to a simple name")
    return pid


_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_PROJECT_ID_CHARS = _ALNUM | frozenset("._-")


def valid_project_id(pid):
    """The project-ID rule: 1 to 128 letters, digits, '.', '_' or '-', not starting with a mark
    (as ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ matches it: one trailing newline passes; no re here,
    which the hook would load for it)."""
    body = pid[:-1] if pid.endswith("\n") else pid
    return 0 < len(body) <= 128 and body[0] in _ALNUM and _PROJECT_ID_CHARS.issuperset(body)


def state_dir(environ=None):
    """$XDG_STATE_HOME (or ~/.local/state)/fleet-agent-coord: databases and errors.log."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(os.path.abspath(base), "fleet-agent-coord")


def resolve_db_path(environ=None, start=None, project_id=None):
    """COORD_DB, else <state_dir>/<project-id>.sqlite3: COORD_PROJECT_ID, else `project_id`
    when given, else the .coord/project-id found from `start` upwards."""
    env = os.environ if environ is None else environ
    explicit = env.get("COORD_DB", "")
    if explicit:
        refuse_database_url(explicit, "COORD_DB")
        return os.path.abspath(os.path.expanduser(explicit))
    if not project_id or env.get("COORD_PROJECT_ID", "").strip():
        project_id = resolve_project_id(env, start)
    return os.path.join(state_dir(env), project_id + ".sqlite3")


_SCHEME_CHARS = _ALNUM | frozenset("+.-")


def url_scheme(value):
    """The scheme of `value` as written when it is a URL (^\\s*([A-Za-z][A-Za-z0-9+.-]*)://), else None."""
    head, sep, _rest = (value or "").lstrip().partition("://")
    if sep and head[:1] in _ALNUM and not head[:1].isdigit() and _SCHEME_CHARS.issuperset(head):
        return head
    return None


def refuse_database_url(value, source="COORD_DB"):
    """A database named by a URL (scheme://...) is refused, never taken for a file: made
    absolute, `postgresql://coord@host/db` would be a SQLite file in a directory `postgresql:`
    wherever coord ran, often inside the repository where agents write. Only the scheme is
    named (the rest of a URL may hold a password). A postgresql:// URL is a project in
    PostgreSQL, which only hostclient.open_project_store opens (through the host process)."""
    scheme = url_scheme(value)
    if scheme and scheme.lower() in ("postgresql", "postgres"):
        raise EnvError("%s is a PostgreSQL URL (%s://...), not a file: a PostgreSQL project is reached through"
                       " coord's host process, never opened as a file" % (source, scheme),
                       "run coord's commands and hooks on it; unset %s to use the project's own database" % source)
    if scheme:
        raise EnvError("%s is a URL (%s://...), not a file: coord keeps a project in a SQLite file or in"
                       " PostgreSQL (a postgresql:// URL); %s:// is not supported" % (source, scheme, scheme),
                       "unset %s to use the project's database in the state directory, "
                       "or set it to a file path or a postgresql:// URL" % source)


def log_traceback(what, environ=None):
    """Append `what` and the current exception's traceback to <state_dir>/errors.log (kept
    below about 1 MiB by rotating to errors.log.1); return its path, or None when unwritable."""
    import traceback
    return log_error(what, traceback.format_exc(), environ)


def log_error(what, text, environ=None):
    """Append `what` and `text` (another process's traceback, say) to errors.log, as
    log_traceback; -> its path, or None when unwritable."""
    try:
        d = state_dir(environ)
        make_private_dirs(d)  # parents too, 0700 whatever the umask
        path = os.path.join(d, "errors.log")
        if os.path.exists(path) and os.path.getsize(path) > 1 << 20:
            os.replace(path, path + ".1")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as f:
            f.write("%s\n%s\n" % (what, text))
        return path
    except Exception:
        return None


def find_repo_root(start=None):
    """The nearest directory at or above `start` holding .coord/, else .jj/ or .git/; None if none."""
    here = os.path.dirname(os.path.realpath(__file__))
    if os.path.basename(here) == ".coord" and start is None:
        return os.path.dirname(here)
    d = os.path.realpath(start or os.getcwd())
    fallback = None
    while True:
        if os.path.isdir(os.path.join(d, ".coord")):
            return d
        if fallback is None and (os.path.exists(os.path.join(d, ".git")) or
                                 os.path.isdir(os.path.join(d, ".jj"))):
            fallback = d
        parent = os.path.dirname(d)
        if parent == d:
            return fallback
        d = parent


_CONTROLS = frozenset(map(chr, list(range(32)) + [127]))  # [\x00-\x1f\x7f], no re on the hook's path


def json_text(value, sort=False, compact=False):
    """json.dumps(value, sort_keys=sort, separators=(",", ":") if compact) without importing json,
    which loads re, enum and functools with it (about 4 ms of a hook's start): json's own C
    encoder (_json), as json.dumps itself runs it. Anything it refuses goes to json.dumps, so the
    error is json's."""
    try:
        import _json

        def refuse(v):
            raise TypeError(type(v).__name__)
        encode = _json.make_encoder({}, refuse, _json.encode_basestring_ascii, None, ":" if compact else ": ",
                                    "," if compact else ", ", sort, False, True)
        return "".join(encode(value, 0))
    except Exception:
        import json
        return json.dumps(value, sort_keys=sort, separators=(",", ":") if compact else None)


def _quoted(name):
    return json_text(name)


def normalize_resource(name, root=None, resolve=True):
    """Map a resource name or path to its one canonical repository-relative name.

    `./`, duplicate and trailing slashes are dropped; an absolute path inside `root` becomes
    relative. With `root` known, a relative name that passes through a symbolic link inside the
    repository becomes the real repository-relative path (the existing part resolved, a missing
    tail kept), so one file has one name; a name that does not exist on disk (a named operation
    such as integration/main) stays as it is. `resolve=False` keeps relative names literal, as
    earlier versions stored them. Refused: empty names, `..`, control characters, names whose
    real location is outside the repository, names longer than MAX_RESOURCE.
    """
    if not isinstance(name, str) or not name.strip():
        raise UsageError("empty resource name", "name a repository-relative path such as src/a.py")
    if not _CONTROLS.isdisjoint(name):
        raise UsageError("resource name %s contains control characters" % _quoted(name))
    if text_in(name) != name:
        raise UsageError("resource name %s is not valid UTF-8" % _quoted(text_in(name)))
    if len(name) > MAX_RESOURCE:
        raise UsageError("resource name is longer than %d characters" % MAX_RESOURCE)
    if name.startswith("/"):
        if not root:
            raise UsageError("absolute path %s but no repository root is known" % name,
                             "run coord from inside the repository")
        rel = _relative_to(name, root)
        if rel is None:
            raise UsageError("%s is outside the repository %s" % (name, root),
                             "coordinate only paths inside the repository")
        name = rel
        if not name:
            raise UsageError("the repository root itself is not a resource name")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UsageError("resource %s contains '..'" % _quoted(name),
                         "use the plain repository-relative name")
    if not parts:
        raise UsageError("empty resource name", "name a repository-relative path such as src/a.py")
    name = "/".join(parts)
    if root and resolve:
        real = _relative_to(os.path.join(root, name), root)
        if real is None:
            raise UsageError("%s leads outside the repository through a symbolic link (to %s)"
                             % (name, os.path.realpath(os.path.join(root, name))),
                             "coordinate only paths inside the repository")
        if not real:
            raise UsageError("%s is a symbolic link to the repository root, not a resource name" % name,
                             "name a path inside the repository")
        if len(real) > MAX_RESOURCE:
            raise UsageError("resource name is longer than %d characters" % MAX_RESOURCE)
        name = real
    return name


def within(path, root):
    """True when `path` is `root` or lies below it, both taken literally (resolve them first
    where symbolic links matter): the one containment rule."""
    root = root.rstrip("/")
    return path == root or path.startswith(root + "/")


def _relative_to(path, root):
    """`path` relative to `root` after resolving symlinks (also in the existing prefix of a path
    that does not exist yet); None when the real location lies outside the repository."""
    real = os.path.realpath(path)
    base = os.path.realpath(root).rstrip("/")
    if not within(real, base):
        return None
    return real[len(base) + 1:]


def ancestors(resource):
    """The resource itself and every ancestor name: a/b/c -> [a, a/b, a/b/c]."""
    parts = resource.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def overlaps(a, b):
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def compatible(existing_mode, requested_mode):
    """The lease matrix: only append next to append is allowed."""
    return existing_mode == "append" and requested_mode == "append"


# --------------------------------------------------------------------------- processes

def process_start(pid):
    """An opaque start-time token for pid (so a reused pid never matches), or None."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2:].split()[19].decode()
    except (OSError, ValueError, IndexError):
        pass
    if not os.path.isdir("/proc"):
        import subprocess
        try:
            out = subprocess.run(["ps", "-o", "lstart=", "-p", str(int(pid))], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, timeout=5, text=True).stdout.strip()
            return out or None
        except (OSError, subprocess.SubprocessError):
            return None
    return None


def process_parent(pid):
    """(ppid, command name) of pid, or (None, None)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
        comm = data[data.index(b"(") + 1:data.rindex(b")")].decode("utf-8", "replace")
        return int(data[data.rindex(b")") + 2:].split()[1]), comm
    except (OSError, ValueError, IndexError):
        pass
    if not os.path.isdir("/proc"):
        import subprocess
        try:
            out = subprocess.run(["ps", "-o", "ppid=,comm=", "-p", str(int(pid))], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, timeout=5, text=True).stdout.split(None, 1)
            return int(out[0]), os.path.basename(out[1].strip())
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return None, None
    return None, None


# The kernel's initial PID namespace always has this inode (PROC_PID_INIT_INO).
_HOST_PID_NAMESPACE = "pid:[4026531836]"
_nested = []


def in_nested_pid_namespace():
    """True when this process runs in a PID namespace below the host's (Codex's sandbox, a
    container): recorded pids then name processes this process may not be able to see."""
    if not _nested:
        try:
            _nested.append(os.readlink("/proc/self/ns/pid") != _HOST_PID_NAMESPACE)
        except OSError:  # no /proc (macOS) or no namespaces: pids are global
            _nested.append(False)
    return _nested[0]


# --------------------------------------------------------------------------- hosts: who may judge a pid
# A pid means something only on the host that recorded it: two hosts (two
# machines, or two containers with their own PID namespace on one kernel) both record pid 1, and
# two namespaces on one kernel share the boot id. So a host is its boot id plus its PID
# namespace's inode; measured: two test hosts in network + PID namespaces recorded the same pid
# and boot id, and only the PID-namespace inode told them apart.

_host = []


def host_identity(environ=None):
    """{"id", "name", "boot_id", "pid_ns"} of the host this process runs on: id is
    "<boot id>/<PID namespace inode>" (without /proc: the node name), name is COORD_HOST_NAME or
    the node name (for display only). Two file reads, cached: cheap enough for a hook."""
    if not _host:
        env = os.environ if environ is None else environ
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                boot = f.read().strip() or None
        except OSError:
            boot = None
        try:
            ns = os.readlink("/proc/self/ns/pid")
            ns = ns[ns.index("[") + 1:ns.rindex("]")]
        except (OSError, ValueError):
            ns = None
        node = os.uname().nodename if hasattr(os, "uname") else "localhost"
        hid = "%s/%s" % (boot, ns) if boot and ns else "node:%s" % node
        name = "".join(c for c in (env.get("COORD_HOST_NAME") or node) if c.isprintable())[:80]
        _host.append({"id": hid, "name": name or hid,
                      "boot_id": boot, "pid_ns": ns})
    return _host[0]


def process_alive(pid, start=None):
    """True when pid exists and (if given) still has the recorded start token.

    From a nested PID namespace a missing or different process is no evidence of death (the
    recorded pid lives in the host's numbering), so the answer there is only ever "alive";
    such runtimes end by SessionEnd, by a caller in the host namespace, or by heartbeat TTL.
    """
    if not pid:
        return True
    alive = process_matches(pid, start)
    return alive or in_nested_pid_namespace()


def process_matches(pid, start):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except (OSError, OverflowError):  # OverflowError: no pid_t holds it (an older coord stored --pid 2**31)
        return False
    if start:
        now_start = process_start(pid)
        if now_start is not None and now_start != start:
            return False
    return True


# Names a harness process is known by (its command name, its executable, or the script a
# runtime such as node runs); shells that usually stand between the harness and its hooks.
# Gemini CLI 0.61.0 is node running .../bundle/gemini.js; OpenCode's native binary .../bin/opencode.exe.
HARNESS_NAMES = frozenset(name for name, row in HARNESSES.items() if row["program"])  # harness_facts.py
KNOWN_SHELLS = frozenset(("sh", "bash", "dash", "zsh", "fish", "ksh", "mksh"))
_SCRIPT_RUNNERS = frozenset(("node", "nodejs", "bun", "deno"))
_SCRIPT_INTERPRETERS = ("python", "pypy", "perl", "ruby", "php", "lua", "tclsh", "osascript")


def _harness_word(path):
    """'codex', 'claude', 'copilot' or 'qwen' when the file name at path names a harness, else None."""
    name = os.path.basename(path or "")
    if name.startswith(".") and name[1:] in HARNESS_NAMES:
        return name[1:]  # Kilo Code 7.7.7's native binary is .../bin/.kilo under its node launcher
    for suffix in (".exe", ".js", ".mjs", ".cjs"):
        if name.endswith(suffix):
            name = name[:-len(suffix)]
    return name if name in HARNESS_NAMES else None


def harness_of_process(pid):
    """'codex', 'claude', 'copilot' or 'qwen' when process pid is that harness itself, recognised by its
    command name, its executable, or (a node-style runtime) the CLI script it runs; else None.

    The pinned CLIs are native binaries: Codex's npm entry runs .../bin/codex (command name
    `codex`) under a node parent, Claude's runs .../claude-code/bin/claude.exe (`claude`);
    older Claude releases are node running .../claude-code/cli.js. Copilot CLI's npm entry is
    node running .../.bin/copilot, which runs the native .../copilot-linux-x64/copilot: its
    command name is `MainThread`, so it is known by its executable."""
    _parent, comm = process_parent(pid)
    found = _harness_word(comm)
    if found:
        return found
    try:
        found = _harness_word(os.readlink("/proc/%d/exe" % pid))
    except (OSError, ValueError):
        found = None
    if found:
        return found
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = [a.decode("utf-8", "replace") for a in f.read().split(b"\0")[:8]]
    except (OSError, ValueError):
        return None
    if not argv or not argv[0]:
        return None
    found = _harness_word(argv[0])
    if found:
        return found
    if os.path.basename(argv[0]) in _SCRIPT_RUNNERS or os.path.basename(comm or "") in _SCRIPT_RUNNERS:
        for arg in argv[1:]:
            if arg.startswith("-"):
                continue
            found = _harness_word(arg)
            if not found and os.path.basename(arg) in ("cli.js", "cli.mjs"):
                found = "claude" if "claude-code" in arg else ("qwen" if "qwen-code" in arg else (
                    "codex" if "codex" in arg else ("pi" if "pi-coding-agent" in arg else None)))
            return found
    return None


def runs_command_string(pid):
    """True when process pid was started the way a harness starts a shell for a hook or a tool
    call, `NAME [options] -c COMMAND` (-c, -lc, -ic, -Command...), whatever the shell's name."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = [a.decode("utf-8", "replace") for a in f.read().split(b"\0")[:8]]
    except (OSError, ValueError):
        return False
    name = os.path.basename(argv[0]) if argv else ""
    if name.startswith(_SCRIPT_INTERPRETERS) or name in _SCRIPT_RUNNERS:
        return False  # `python3 -c CODE` is a program, not a shell
    for arg in argv[1:]:
        if not arg.startswith("-") or arg == "-":
            return False
        flag = arg.lstrip("-").lower()
        if flag in ("c", "command") or (arg[1:2] != "-" and flag.isalpha() and "c" in flag and len(flag) <= 4):
            return True
    return False


def harness_process(pid, harness=None, limit=32):
    """The harness process that a hook started by pid runs under: the nearest of pid and its
    ancestors that is the harness itself (harness_of_process; `harness` narrows it to that
    one), walking past every shell between them, whatever its name: a known shell, or any
    program started with a command string (`$SHELL -lc ...`: tcsh, nu, xonsh, pwsh...).
    Without a recognisable harness, the walk ends at the first other process (today's rule:
    the nearest ancestor that is not a shell), so a hook under an unknown stand-in never
    climbs to an unrelated agent further up. None without process information."""
    cur = pid
    for _ in range(limit):
        if not cur or cur <= 1:
            return None
        found = harness_of_process(cur)
        if found and (harness is None or found == harness):
            return cur
        parent, comm = process_parent(cur)
        if not parent or parent <= 1:
            return cur
        if comm not in KNOWN_SHELLS and not runs_command_string(cur):
            return cur
        cur = parent
    return cur


def ancestor_processes(pid=None, limit=64):
    """[(pid, start)] of pid's ancestors, nearest first (excluding pid itself and pid 1)."""
    out = []
    cur = os.getpid() if pid is None else pid
    for _ in range(limit):
        parent, _comm = process_parent(cur)
        if not parent or parent <= 1:
            break
        out.append((parent, process_start(parent)))
        cur = parent
    return out


# --------------------------------------------------------------------------- hints as typed

# The words after `coord` that make a command in a hint (coord's commands and its two flags).
HINT_COMMANDS = ("hello", "heartbeat", "bye", "claim", "renew", "release", "check", "list", "send", "inbox", "ack",
                 "audit", "status", "batch", "trust", "work", "remote", "db", "--help", "--version")
_HINT_RE = []
_SHELL_SAFE = Pattern(r"^[A-Za-z0-9_./:@%+=,-]+$")


def pasteable(text, prefix):
    """`text` with every `coord COMMAND` in it written `PREFIX COMMAND`, so that a hint pasted
    into a shell runs the same coord (prefix from command_as_typed)."""
    if not text or not prefix or prefix == "coord":
        return text
    if not _HINT_RE:
        import re
        _HINT_RE.append(re.compile(r"(?<![\w./-])coord(?= (?:%s)(?![\w-]))" % "|".join(map(re.escape, HINT_COMMANDS))))
    return _HINT_RE[0].sub(lambda _m: prefix, text)


# A hint inside a command's normal output is marked, so that main() can write its commands as
# typed without touching anything else on the line (a message body, a task, a path): two control
# characters, which clean_text removes from any text that reaches a terminal, so nothing stored
# can forge or break a mark.
HINT_OPEN, HINT_CLOSE = "\x1e", "\x1f"
_HINT_SPAN_RE = Pattern("\x1e([^\x1e\x1f]*)\x1f")


def hint(text):
    """`text` (commands written `coord ...`) marked as a hint for typed_hints (empty: as it is)."""
    return HINT_OPEN + text + HINT_CLOSE if text else text


def typed_hints(text, prefix):
    """`text` with each marked hint made pasteable (pasteable with `prefix`) and every mark
    removed; the rest of the text is left exactly as it is."""
    if not text or HINT_OPEN not in text and HINT_CLOSE not in text:
        return text
    text = _HINT_SPAN_RE.sub(lambda m: pasteable(m.group(1), prefix), text)
    return text.replace(HINT_OPEN, "").replace(HINT_CLOSE, "")


def command_as_typed(typed, environ=None, cwd=None):
    """How to type the command the user ran as `typed` (sys.argv[0]) again from here: its bare
    name when PATH finds this very file by it, a relative path as typed (`.coord/coord`), the
    installed `.coord/coord` from the repository root, else the absolute path; quoted for a shell."""
    env = os.environ if environ is None else environ
    if not typed:
        return "coord"
    real = os.path.realpath(typed)
    base = os.path.basename(typed)
    out = None
    for d in env.get("PATH", "").split(os.pathsep):
        cand = os.path.join(d, base) if d else ""
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            if os.path.realpath(cand) == real:
                out = base
            break
    if out is None and not os.path.isabs(typed):
        out = typed if "/" in typed else "./" + typed  # `python3 coord`: the file here
    if out is None:
        try:
            here = cwd or os.getcwd()
        except OSError:
            here = None
        rel = os.path.relpath(typed, here) if here else typed
        out = ".coord/coord" if rel == ".coord/coord" else ("./" + rel if rel and "/" not in rel else typed)
    return out if _SHELL_SAFE.match(out) else "'%s'" % out.replace("'", "'\\''")


# --------------------------------------------------------------------------- a person's identity

PERSON = "person"   # harness label of a person's runtime: a terminal, or the user outside any
PARKED = "parked"   # harness label of the runtime that holds a parked work's leases and messages
UNCLOCKED = frozenset((PERSON, PARKED))  # pid-less runtimes the clock never ends (see runtime_live)
_PERSON_PREFIX = PERSON + ":"
# A runtime no clock ends (a recorded harness process, or a person or parked work without one:
# runtime_live) stores heartbeat_at BEAT_AHEAD seconds after its real last beat, which beat_time
# reads back. The previous release ends every runtime whose heartbeat_at is older than
# COORD_RUNTIME_TTL; to it such a runtime looks fresh for ever, so it too ends it only by its
# process (DESIGN.md, Upgrades, "Mixed versions"). A runtime the clock ends keeps the real time.
BEAT_AHEAD = 1e12


def prune_activity(st, environ=None, conversations=None):
    """Delete the activity files (Store.activity) of conversations that ended here: every runtime
    this project recorded for it ended, and the file is no newer than the last end (an event after
    it, a resumed session, keeps it). The directory is shared by every project of this user: a
    conversation this project never recorded is another's and stays. `conversations`: only those
    (SessionEnd), else every file (`work gc`). -> the number of files deleted."""
    folder = os.path.join(state_dir(environ), Store.ACTIVITY_DIR)
    names = ([c.encode("utf-8", "replace").hex() for c in conversations if c] if conversations is not None
             else [n for n in _names_in(folder) if "." not in n])
    convs = {}
    for n in names:
        try:
            convs[bytes.fromhex(n).decode("utf-8")] = n
        except ValueError:
            continue
    gone = 0
    for conv, last in (st.ended_conversations(sorted(convs)) if convs else {}).items():
        path = os.path.join(folder, convs[conv])
        try:
            if os.lstat(path).st_mtime <= last:
                os.unlink(path)
                gone += 1
        except OSError:
            continue
    return gone


def _names_in(folder):
    """os.listdir, or [] when the directory is missing or unreadable."""
    try:
        return os.listdir(folder)
    except OSError:
        return []


def beat_time(value):
    """The real time of a stored heartbeat_at (see BEAT_AHEAD)."""
    return value - BEAT_AHEAD if value is not None and value >= BEAT_AHEAD else value


def beat_value(now, pid, harness):
    """The heartbeat_at to store for a beat at `now` of a runtime with this pid and harness label."""
    return now + BEAT_AHEAD if pid or (harness or "") in UNCLOCKED else now


# Variables a harness sets in the commands its agent runs (COORD_WORK_ID: the resume wrapper
# and `work start` export it to the harness they launch): a caller carrying one is no person.
AGENT_MARKERS = ("CLAUDECODE", "CLAUDE_CODE_SESSION_ID", "CODEX_THREAD_ID", "CODEX_SESSION_ID", "COPILOT_CLI",
                 "COPILOT_AGENT_SESSION_ID", "QWEN_CODE_SESSION_ID", "COORD_WORK_ID")
AGENT_MARKERS += ("COORD_OPENCODE_SESSION", "OPENCODE_PID")  # coord's OpenCode plugin; OpenCode 1.18.33 itself (its shell)
AGENT_MARKERS += ("COORD_KILO_SESSION", "KILO_PID")  # coord's Kilo Code plugin; Kilo Code 7.7.7 itself (its shell)
AGENT_MARKERS += ("AUGMENT_AGENT",)  # Auggie 0.36.0's shell
AGENT_MARKERS += ("COORD_PI_SESSION", "PI_CODING_AGENT")  # coord's pi extension; pi 0.73.1 itself (its shell)
AGENT_MARKERS += ("GEMINI_CLI",)  # Gemini CLI 0.61.0 sets GEMINI_CLI=1 in its shell tool's commands


_DEV_TTY = os.makedev(5, 0)


def _own_terminal_facts():
    """(pgrp, session, controlling tty device, the tty's foreground process group) of this
    process; zeros where unknown."""
    try:
        with open("/proc/self/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()
        return int(fields[2]), int(fields[3]), int(fields[4]), int(fields[5])
    except (OSError, ValueError, IndexError):
        pass
    try:  # no /proc (macOS): the same facts through the terminal on a standard stream
        fd = next((fd for fd in (0, 1, 2) if os.isatty(fd)), None)
        if fd is None:
            return os.getpgrp(), os.getsid(0), 0, 0
        return os.getpgrp(), os.getsid(0), os.fstat(fd).st_rdev, os.tcgetpgrp(fd)
    except OSError:
        return 0, 0, 0, 0


def _terminal_name(tty):
    major, minor = os.major(tty), os.minor(tty)
    return "pts/%d" % ((major - 136) * 256 + minor) if 136 <= major <= 143 else "tty%d:%d" % (major, minor)


# The tmux user options coord puts on what it launches agents in (session.py sets them): the
# server option marks a server coord has launched an agent window in, for the server's life; the
# window option labels each window it created for an agent.
TMUX_AGENTS_OPTION = "@coord-agents"
TMUX_WORK_OPTION = "@coord-work"


def _tmux_server_socket(pid, environ):
    """The socket path tmux server `pid` listens on: the listening Unix socket among its file
    descriptors (/proc/net/unix), else $TMUX when it names this very server; None when unknown."""
    try:
        inodes = set()
        for fd in os.listdir("/proc/%d/fd" % pid):
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
        with open("/proc/net/unix") as f:
            for line in f.read().splitlines()[1:]:
                parts = line.split(None, 7)
                if len(parts) == 8 and parts[6] in inodes and parts[7].startswith("/"):
                    return parts[7]
    except (OSError, ValueError):
        pass
    value = (environ or {}).get("TMUX") or ""
    parts = value.rsplit(",", 2)
    return parts[0] if len(parts) == 3 and parts[0] and parts[1] == str(pid) else None


def agent_tmux_server(chain, environ=None):
    """(pid, why) of the nearest tmux server in `chain` ([(pid, start)]) that runs coord's agents:
    one coord launched an agent window in (TMUX_AGENTS_OPTION), or that has a window coord created
    for an agent (TMUX_WORK_OPTION); (None, None) when there is none. Any pane of such a server
    may be an agent's (`tmux new-window`, `split-window`, `new-session`, `respawn-pane`,
    `run-shell`, `send-keys` from an agent's window), so nothing below one is the person. A
    server that cannot be asked counts as one."""
    for pid, _start in chain:
        _parent, comm = process_parent(pid)
        if comm not in ("tmux: server", "tmux"):
            continue
        socket = _tmux_server_socket(pid, environ)
        if not socket:
            return pid, "it runs in a pane of tmux server %d, whose socket coord cannot find" % pid
        import subprocess
        env = {k: v for k, v in (environ or os.environ).items() if k not in ("TMUX", "TMUX_PANE")}
        try:
            out = subprocess.run(["tmux", "-S", socket, "show-options", "-sqv", TMUX_AGENTS_OPTION, ";",
                                  "list-windows", "-a", "-F", "#{%s}" % TMUX_WORK_OPTION],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=env, timeout=2.0, text=True)
        except (OSError, subprocess.SubprocessError):
            return pid, "it runs in a pane of tmux server %d (%s), which does not answer" % (pid, socket)
        if out.returncode != 0:
            return pid, "it runs in a pane of tmux server %d (%s), which does not answer" % (pid, socket)
        if any(line.strip() for line in out.stdout.splitlines()):
            return pid, "it runs in a pane of the tmux server coord runs agents in (%s, pid %d)" % (socket, pid)
        return None, None  # the nearest server is someone's own; an outer one holds no pane of this process
    return None, None


def person_user_key(uid):
    """The key of the user alone (`person:UID`: no process, no terminal to watch)."""
    return "%s%d" % (_PERSON_PREFIX, uid)


def person_terminal_key(uid, tty, sid, start):
    """The key of the person at terminal device `tty` whose session leader is `sid`, started at
    `start` (`person:UID:TTY:SID:START`): what person_evidence returns, and what the host
    process rebuilds from the kernel's facts of its peer to check a claimed person."""
    return "%s%d:%s:%d:%s" % (_PERSON_PREFIX, uid, _terminal_name(tty), sid, start)


def _harness_in(chain, skip):
    for pid, _start in chain:
        if pid in skip:
            continue
        found = harness_of_process(pid)
        if found:
            return pid, found
    return None, None


def person_evidence(environ=None, skip=()):
    """Who the person calling from here is, from positive evidence only: (key, pid, pid start,
    terminal name, why not) where

    - key None: an agent is evident (a harness variable, or a harness process among this
      process's ancestors; `skip`: pids not to count, e.g. a resume wrapper named `claude`), or
      this process runs in a pane of a tmux server coord runs agents in (agent_tmux_server: an
      agent reaches any pane of it with tmux itself, whatever terminal that pane has);
    - key `person:UID:TTY:SID:START` (why None): the person at that terminal, proven by all of:
      this process has a controlling terminal and one of its standard streams is that
      terminal; it descends from the terminal's session leader (the login shell of the
      window, pane or ssh session, whose exit ends the key) and sits in the terminal's
      foreground process group (it is what the terminal runs now, not a stray process left
      in the session); and no agent harness is the session leader or above it, nor the
      foreground group's leader or above it (a pty an agent opened, `script` under a harness,
      or a terminal whose foreground is the harness itself);
    - key `person:UID` (the user alone, no process to watch) with `why` the first missing
      proof: a caller that shows no agent but no terminal person either (cron, a detached or
      setsid'd process). It never has the authority of a person at a terminal.

    Within one user this is evidence, not proof: a process that first detaches from its
    harness and then opens a new terminal (script, tmux, a pty of its own) shows none of the
    harness (DESIGN.md, Authority and trust boundaries)."""
    env = os.environ if environ is None else environ
    skip = frozenset(skip)
    if any(env.get(name) for name in AGENT_MARKERS):
        return None, None, None, None, "%s is set" % next(n for n in AGENT_MARKERS if env.get(n))
    me = os.getpid()
    chain = ancestor_processes(me)
    if _harness_in(chain, skip)[0] is not None:
        return None, None, None, None, "an agent harness runs above this process"
    server, why = agent_tmux_server(chain, env)
    if server is not None:
        return None, None, None, None, why
    uid = os.getuid()
    alone = person_user_key(uid)

    def without(why):
        return alone, None, None, None, why
    pgrp, sid, tty, tpgid = _own_terminal_facts()
    if not tty or sid <= 1:
        return without("no controlling terminal")
    on_tty = False
    for fd in (0, 1, 2):
        try:  # the terminal's own device, or /dev/tty (5, 0), which is always the controlling terminal
            on_tty = on_tty or (os.isatty(fd) and os.fstat(fd).st_rdev in (tty, _DEV_TTY))
        except OSError:
            pass
    if not on_tty:
        return without("no standard stream is its terminal")
    start = process_start(sid)
    if start is None:
        return without("its terminal's session leader is gone")
    if sid != me and sid not in [pid for pid, _ in chain]:
        return without("not started from its terminal's session leader")
    if tpgid <= 0 or tpgid != pgrp:
        return without("not in its terminal's foreground process group")
    leader = [(sid, start)] + ancestor_processes(sid)
    hpid, harness = _harness_in(leader, skip)
    if hpid is None and tpgid != me and process_start(tpgid) is not None:
        hpid, harness = _harness_in([(tpgid, None)] + ancestor_processes(tpgid), skip)
    if hpid is not None:
        return without("its terminal belongs to %s (pid %d)" % (harness, hpid))
    return person_terminal_key(uid, tty, sid, start), sid, start, _terminal_name(tty), None


def person_key(environ=None, skip=()):
    """(conversation key, pid, pid start, terminal name) of the person calling from here
    (person_evidence): one key per login session on a controlling terminal, proven to be a
    person's, `person:UID:TTY:SID:START` (the session leader, usually the login shell, is the
    process whose exit ends it); `person:UID` for the user outside any proven terminal (no
    process to watch; pid None); a key of None when an agent is evident."""
    return person_evidence(environ, skip)[:4]


def is_terminal_person(rt):
    """True when runtime rt is a person at a terminal (a key person_evidence proved), not the
    user alone and no agent."""
    return person_uid(rt) is not None and person_terminal(rt) != "no terminal"


def require_person(what, command, environ=None):
    """Refuse (exit 3) unless the caller is positively the person at a terminal: the one test
    every person-only decision uses (the same as caller()'s person rule); `command` is what the
    person types for it. -> the key."""
    key, _pid, _start, _name, why = person_evidence(environ)
    if key is None or why is not None:
        raise Refused("%s is the person's decision; this caller is not positively the person at a terminal (%s)"
                      % (what, why), "the person runs `%s` themselves, in their own terminal%s" % (
                          command, " (not a pane of that tmux server)" if "tmux server" in str(why) else ""),
                      reason="not-the-person")
    return key


def person_uid(rt):
    """The user ID of a person's runtime, None for any other runtime."""
    if not rt or rt.get("harness") != PERSON or not str(rt.get("conversation") or "").startswith(_PERSON_PREFIX):
        return None
    try:
        return int(rt["conversation"][len(_PERSON_PREFIX):].split(":", 1)[0])
    except ValueError:
        return None


def person_terminal(rt):
    """The terminal of a person's runtime ("pts/3"), "no terminal" for the user alone, else None."""
    if person_uid(rt) is None:
        return None
    parts = rt["conversation"].split(":")
    return parts[2] if len(parts) > 2 else "no terminal"


def reserved_identity(conversation=None, harness=None):
    """A UsageError when `hello` is asked for a label coord keeps for itself (person, parked)."""
    if (harness or "") in UNCLOCKED or str(conversation or "").startswith((_PERSON_PREFIX, PARKED + ":")):
        raise UsageError("%r is coord's own label for a person or a parked work" % (harness or conversation),
                         "run coord hello with no options in a terminal; it finds the person by the terminal")


def harness_ancestor(chain):
    """(pid, harness) of the nearest process in `chain` ([(pid, start)]) that is an agent
    harness itself, or (None, None): a caller under a harness is an agent, never a person."""
    for pid, _start in chain:
        found = harness_of_process(pid)
        if found:
            return pid, found
    return None, None


_PLUGIN_ENV = tuple(row["plugin_env"] for row in HARNESSES.values() if row["plugin_env"])


def caller_facts(explicit=None, environ=None, complete=False):
    """What the calling process alone can see about itself, for Store.decide_caller: --runtime,
    its environment's identity variables, and (gathered now with `complete`, as a client of the
    host process must; else on first use, in this process) its ancestry `chain`, its
    `person` (person_key) and its `harness_ancestor`. JSON-safe when complete."""
    env = os.environ if environ is None else environ
    session = env.get("CLAUDE_CODE_SESSION_ID") or env.get("CODEX_SESSION_ID") \
        or env.get("COPILOT_AGENT_SESSION_ID")  # Copilot CLI's shell: its hooks' session_id
    thread = env.get("CODEX_THREAD_ID")
    for var, agent_var in _PLUGIN_ENV:  # coord's plugin in OpenCode or Kilo Code: a subagent's session too
        session = session or env.get(var)
        thread = thread or env.get(agent_var)
    if not session and not thread and env.get("QWEN_CODE_SESSION_ID"):
        # Qwen Code's shell: its hooks' session_id, and in a subagent its hooks' agent_id
        session = env["QWEN_CODE_SESSION_ID"]
        thread = env.get("QWEN_CODE_AGENT_ID") or None
    facts = {"explicit": explicit or None, "runtime_id": env.get("COORD_RUNTIME_ID") or None,
             "session": session or None, "thread": thread or None}
    if not complete:
        facts["_environ"] = env
        return facts
    facts["chain"] = [list(x) for x in ancestor_processes()]
    facts["person"] = list(person_key(env))
    facts["harness_ancestor"] = list(harness_ancestor(facts["chain"]))
    return facts


def _fact(facts, name):
    """facts[name], gathered in this process on first use when caller_facts left it out."""
    if name not in facts:
        if name == "chain":
            facts[name] = ancestor_processes()
        elif name == "person":
            facts[name] = person_key(facts["_environ"])
        else:
            facts[name] = harness_ancestor(_fact(facts, "chain"))
    return facts[name]


# --------------------------------------------------------------------------- database

_MIGRATIONS = {
    1: [
        """CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
        """CREATE TABLE runtimes (
            id TEXT PRIMARY KEY,
            handle TEXT NOT NULL UNIQUE,
            conversation TEXT NOT NULL,
            agent_id TEXT,
            harness TEXT NOT NULL DEFAULT '',
            pid INTEGER,
            pid_start TEXT,
            cwd TEXT,
            started_at REAL NOT NULL,
            heartbeat_at REAL NOT NULL,
            ended_at REAL,
            end_reason TEXT,
            superseded_by TEXT
        )""",
        """CREATE INDEX runtimes_conversation ON runtimes (conversation, agent_id)""",
        """CREATE INDEX runtimes_live ON runtimes (pid) WHERE ended_at IS NULL""",
        """CREATE TABLE leases (
            resource TEXT NOT NULL,
            runtime TEXT NOT NULL,
            mode TEXT NOT NULL CHECK (mode IN ('exclusive', 'append')),
            purpose TEXT NOT NULL DEFAULT '',
            acquired_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            ttl REAL NOT NULL,
            PRIMARY KEY (resource, runtime)
        )""",
        """CREATE INDEX leases_runtime ON leases (runtime)""",
        """CREATE INDEX leases_expiry ON leases (expires_at)""",
        """CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            sender TEXT NOT NULL,
            kind TEXT NOT NULL,
            body TEXT NOT NULL,
            digest TEXT NOT NULL,
            broadcast INTEGER NOT NULL,
            created_at REAL NOT NULL
        )""",
        """CREATE TABLE deliveries (
            message INTEGER NOT NULL,
            recipient TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('queued', 'delivered', 'acked')),
            delivered_at REAL,
            acked_at REAL,
            shown INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (message, recipient)
        )""",
        """CREATE INDEX deliveries_open ON deliveries (recipient, message) WHERE state != 'acked'""",
        """CREATE TABLE work (
            id TEXT PRIMARY KEY,
            handle TEXT NOT NULL UNIQUE,
            task TEXT NOT NULL,
            state TEXT NOT NULL,
            path TEXT,
            scratch_root TEXT,
            source TEXT,
            conversation TEXT,
            runtime TEXT,
            token TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            data TEXT NOT NULL DEFAULT '{}'
        )""",
        """CREATE TABLE audit (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            at REAL NOT NULL,
            event TEXT NOT NULL,
            runtime TEXT,
            subject TEXT,
            data TEXT NOT NULL
        )""",
    ],
    # Where each runtime's harness is in its turn, from the hook's lifecycle events (DESIGN.md,
    # "Messages to a work"): what `send --nudge` needs as positive evidence of an idle prompt.
    2: [
        """CREATE TABLE turns (
            runtime TEXT PRIMARY KEY,
            state TEXT NOT NULL,
            at REAL NOT NULL,
            began REAL
        )""",
    ],
    # Hosts: each runtime records the host that registered it (boot id and
    # PID namespace: hosts.id), whose pid only that host judges; a PostgreSQL project's host
    # process beats its row on the server's clock, and other hosts judge its runtimes by it,
    # with the TTL and lease delay the host recorded. A SQLite project is one host: it records
    # the host and judges every pid as before.
    3: [
        """ALTER TABLE runtimes ADD COLUMN host TEXT""",
        """CREATE TABLE hosts (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            boot_id TEXT,
            pid_ns TEXT,
            started_at REAL NOT NULL,
            heartbeat_at REAL NOT NULL,
            ttl REAL NOT NULL,
            lease_delay REAL NOT NULL
        )""",
    ],
    # Integration fencing: one row per integration/<bookmark> lease, whose
    # fence strictly increases each time a runtime newly acquires that lease (taken in the same
    # transaction as the claim); a landing records its number and checks it before it moves the
    # target, pushes or proves.
    4: [
        """CREATE TABLE fences (
            resource TEXT PRIMARY KEY,
            fence INTEGER NOT NULL,
            runtime TEXT NOT NULL,
            at REAL NOT NULL
        )""",
    ],
}


# Migrations an older coord can still use the database after: new tables, new indexes, new
# columns that are nullable or have a default; nothing an older coord's statements would trip
# on. PRAGMA user_version, which every coord since 0.1 compares with its own SCHEMA_VERSION,
# records only the newest migration that is NOT in this set (the oldest schema a reader must
# know); the newest migration applied is kept in meta under SCHEMA_APPLIED_KEY. So an agent in
# a clone still running the previous release keeps working after the shared checkout installs
# a release whose migrations are all additive (DESIGN.md, "Upgrades").
ADDITIVE_MIGRATIONS = frozenset({2, 3, 4})


def migration(target):
    """The statements of migration `target` (SQLite's DDL; pg.Store translates them, pg_ddl)."""
    return _MIGRATIONS[target]
SCHEMA_APPLIED_KEY = "schema.applied"


def in_managed_clone(cwd=None):
    """True when `cwd` (default: the current directory) is inside a managed clone: a directory at
    or above it holds coord's ownership marker .jj/coord-owner."""
    try:
        d = os.path.realpath(cwd or os.getcwd())
    except OSError:
        return False
    while True:
        if os.path.isfile(os.path.join(d, ".jj", "coord-owner")):
            return True
        parent = os.path.dirname(d)
        if parent == d:
            return False
        d = parent


CLONE_CATCH_UP = ("this is a managed clone: do not install here; take the shared checkout's committed .coord/ "
                  "into it: jj git fetch && jj rebase -b @ -d BOOKMARK@origin (the shared checkout's "
                  "install --doctor prints the exact command for each clone)")


def upgrade_hint(cwd=None):
    """The next step when this coord is older than the database: in a managed clone, bring the
    clone's committed .coord/ up to date from the shared checkout (never install into the clone);
    elsewhere, install the newer release."""
    if in_managed_clone(cwd):
        return CLONE_CATCH_UP
    return "install the newer coord in the shared checkout (NEWER/install REPO), commit .coord/, then retry"


def make_private_dirs(path):
    """Create `path` and every missing parent 0700 whatever the umask.

    os.makedirs applies its mode to the last component only: under umask 000 the parents
    it creates would be 0777. Existing directories are left as they are.
    """
    missing = []
    p = os.path.abspath(path)
    while not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            if not os.path.isdir(d):
                raise


def fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path, data, mode=0o600):
    """Replace `path` with the bytes `data` atomically: a temp file in the same directory
    (`.NAME.coord-tmp-PID`), fsync, chmod `mode`, rename, fsync the directory."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, ".%s.coord-tmp-%d" % (os.path.basename(path), os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(directory)


def _ensure_private_dir(directory):
    """Create the database directory 0700, or secure/refuse an existing one."""
    try:
        make_private_dirs(directory)
        st = os.stat(directory)
    except PermissionError as exc:
        raise EnvError("cannot create database directory %s: %s" % (directory, exc.strerror),
                       "set COORD_DB to a path in a private directory you own")
    except OSError as exc:
        raise EnvError("cannot use database directory %s: %s" % (directory, exc.strerror),
                       "set COORD_DB to a path in a private directory you own")
    if st.st_uid != os.getuid():
        raise EnvError("database directory %s belongs to another user" % directory,
                       "set COORD_DB to a path in a private directory you own")
    if st.st_mode & 0o077:
        try:
            os.chmod(directory, 0o700)
        except OSError as exc:
            raise EnvError("database directory %s is open to other users and cannot be secured: %s"
                           % (directory, exc.strerror),
                           "chmod 700 %s, or set COORD_DB to a private directory" % directory)


def _secure_files(path):
    for suffix in ("", "-wal", "-shm", "-turn", "-gate"):
        p = path + suffix
        try:
            st = os.stat(p)
        except OSError:
            continue
        if st.st_mode & 0o077:
            try:
                os.chmod(p, 0o600)
            except OSError:
                pass


def _translate(exc, path):
    """Turn a sqlite3 error into an EnvError that says what is wrong and how to recover."""
    text = str(exc)
    low = text.lower()
    if "locked" in low or "busy" in low:
        return _busy_error(path)
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return EnvError("database %s is damaged (%s)" % (path, text),
                        "move it aside (mv %s %s.damaged) and re-register agents; "
                        "run .coord/install . --doctor for details" % (path, path))
    if "readonly" in low or "read-only" in low:
        return EnvError("database %s is read-only (%s)" % (path, text),
                        "make the file and its directory writable by you, or set COORD_DB")
    if "disk" in low and "full" in low:
        return EnvError("disk full while writing %s" % path, "free space on that filesystem and retry")
    if "unable to open" in low or "disk i/o" in low:
        return EnvError("cannot open database %s (%s)" % (path, text),
                        "check the file and directory permissions, or set COORD_DB")
    return EnvError("database error on %s: %s" % (path, text), "run .coord/install . --doctor")


def _busy_error(path):
    """Busy past the timeout. Whoever has the database open is almost always a live coord user (a
    peer's command or hook) doing its work, and a model follows hints: the hint never says to end
    a process; it says to retry or wait longer, and names a process outside coord only so that the
    person who opened it can close it."""
    holders = _open_by(path)
    ours = [h for h in holders if h[2]]
    others = [h for h in holders if not h[2]]
    what = []
    if ours:
        what.append("%d coord process%s at work" % (len(ours), "" if len(ours) == 1 else "es"))
    if others:
        what.append(", ".join("pid %d (%s)" % (pid, name) for pid, name, _ in others))
    hint = "retry the command; COORD_BUSY_TIMEOUT=SECONDS makes it wait longer (default %g)" % BUSY_TIMEOUT
    if others:
        hint += "; %s %s not coord: the person who opened it can close it" % (
            ", ".join("pid %d" % pid for pid, _, _ in others), "is" if len(others) == 1 else "are")
    return EnvError("database busy for longer than the timeout: %s (%s)"
                    % ("; ".join(what) or "another process is writing", path), hint)


def _coord_process(pid):
    """True when pid runs coord (its CLI, a hook or its runtime copy), read from /proc."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = f.read(4096).split(b"\0")
    except OSError:
        return False
    return any(os.path.basename(a) in (b"coord", b"hook.py") for a in argv[:4])


def _open_by(path):
    """Other processes holding the database open, as (pid, command, is coord) (Linux /proc; else [])."""
    if not os.path.isdir("/proc"):
        return []
    targets = set()
    for suffix in ("", "-wal", "-shm"):
        try:
            st = os.stat(path + suffix)
            targets.add((st.st_dev, st.st_ino))
        except OSError:
            pass
    found = []
    me = os.getpid()
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        if pid == me:
            continue
        fd_dir = "/proc/%d/fd" % pid
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in targets:
                found.append((pid, process_parent(pid)[1] or "?", _coord_process(pid)))
                break
        if len(found) >= 20:
            break
    return found


def database_facts(path):
    """(journal mode, schema version), read without creating, locking or writing anything.

    A read-only SQLite connection to a WAL database leaves -wal/-shm files behind, so SQLite
    is used only while those already exist (the database is open somewhere, and the WAL may
    hold the newest schema version); otherwise the 100-byte file header answers.
    """
    if not os.path.exists(path):
        return None
    if os.path.exists(path + "-wal") and os.path.exists(path + "-shm"):
        from urllib.parse import quote
        try:
            conn = sqlite3.connect("file:%s?mode=ro" % quote(os.path.abspath(path)), uri=True,
                                   timeout=2)
            try:
                mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                check = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
            finally:
                conn.close()
            if check != "ok":
                return {"error": "damaged: %s" % check}
            return {"journal_mode": mode, "schema_version": version}
        except sqlite3.Error as e:
            return {"error": str(e)}
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError as e:
        return {"error": e.strerror or str(e)}
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        return {"error": "not an SQLite database"}
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    size = os.path.getsize(path)
    if header[24:28] == header[92:96] and size < page_size * pages:
        return {"error": "truncated: %d of %d bytes" % (size, page_size * pages)}
    # No -wal file: the file alone is the whole database, so an immutable read-only open
    # checks its pages without creating -wal/-shm files or taking locks.
    from urllib.parse import quote
    try:
        conn = sqlite3.connect("file:%s?mode=ro&immutable=1" % quote(os.path.abspath(path)), uri=True)
        try:
            check = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as e:
        return {"error": "damaged: %s" % e}
    if check != "ok":
        return {"error": "damaged: %s" % check}
    return {"journal_mode": "wal" if header[18] == 2 else "rollback",
            "schema_version": int.from_bytes(header[60:64], "big")}


def live_works_readonly(path):
    """[work record] of every work that is neither creating, failed nor removed, read as
    database_facts reads (never creating, locking or writing anything); [] when the database
    is absent, None when it cannot be read. For the installer, which lists out-of-date clones."""
    import json
    if not os.path.exists(path):
        return []
    from urllib.parse import quote
    uri = "file:%s?mode=ro" % quote(os.path.abspath(path))
    if not (os.path.exists(path + "-wal") and os.path.exists(path + "-shm")):
        uri += "&immutable=1"
    cols = Store._WORK_COLS
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=2)
        try:
            rows = conn.execute("SELECT %s FROM work WHERE state NOT IN ('creating', 'failed', 'removed') "
                                "ORDER BY created_at, id" % ", ".join(cols)).fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    out = []
    for row in rows:
        w = dict(zip(cols, row))
        try:
            w["data"] = json.loads(w["data"] or "{}")
        except ValueError:
            w["data"] = {}
        w.pop("token", None)
        out.append(w)
    return out
def work_conversation(w):
    """(conversation, harness) of the agent that runs work `w` now: the one a resume wrapper
    (`.coord/bin/claude`, `.coord/bin/codex`) recorded when run in the clone (`data.direct`,
    which a later tmux launch clears), else its tmux window's; (None, None) when neither knows."""
    direct = w["data"].get("direct") or {}
    if direct.get("conversation"):
        return direct["conversation"], direct.get("harness")
    rec = w["data"].get("tmux") or {}
    return rec.get("conversation"), rec.get("harness")


def work_conversations(w):
    """Every harness conversation recorded for work `w` now (its tmux window's and a wrapper's)."""
    out = []
    for key in ("direct", "tmux"):
        conv = (w["data"].get(key) or {}).get("conversation")
        if conv and conv not in out:
            out.append(conv)
    return out


class Store:
    """One connection to the coordination database plus every operation on it. The PostgreSQL
    engine (pg.Store, in the host process only) is a subclass that overrides what differs."""

    engine = "sqlite"

    def __init__(self, path=None, timeout=None, environ=None, migrate=True, strict_env=True):
        """strict_env=False (the hooks) ignores an out-of-range numeric variable and uses its
        default; otherwise (the CLI) it is a UsageError naming the variable and its range."""
        env = os.environ if environ is None else environ
        if path:
            refuse_database_url(path, "the database")
        self.path = path or resolve_db_path(env)
        self._settings(env, timeout, strict_env)
        _ensure_private_dir(os.path.dirname(self.path))
        self._open_sqlite(self.timeout, migrate)

    def _settings(self, env, timeout, strict_env):
        """The numbers a Store reads from the environment (both engines)."""
        if timeout is None:
            timeout = env_number(env, "COORD_BUSY_TIMEOUT", BUSY_TIMEOUT, BUSY_TIMEOUT_RANGE, strict_env)
        self.timeout = check_float(timeout, "busy timeout", *BUSY_TIMEOUT_RANGE)
        self.lease_ttl = env_number(env, "COORD_LEASE_TTL", DEFAULT_LEASE_TTL, LEASE_TTL_RANGE, strict_env)
        self.runtime_ttl = env_number(env, "COORD_RUNTIME_TTL", DEFAULT_RUNTIME_TTL, RUNTIME_TTL_RANGE, strict_env)
        self._host_env = env  # hosts: self.host, read at first use (a hook that registers nothing pays nothing)
        self.host_ttl = env_number(env, "COORD_HOST_TTL", DEFAULT_HOST_TTL, HOST_TTL_RANGE, strict_env)
        self.host_lease_delay = env_number(env, "COORD_HOST_LEASE_DELAY", DEFAULT_HOST_LEASE_DELAY,
                                           HOST_LEASE_DELAY_RANGE, strict_env)
        self.reading = False  # inside an outermost snapshot()
        self._gate = None  # (turn, gate) file descriptors, opened on the first write: the write gate

    def _open_sqlite(self, timeout, migrate):
        try:
            if not os.path.exists(self.path):
                os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
            self.conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
        except OSError as exc:
            raise EnvError("cannot open database %s: %s" % (self.path, exc.strerror),
                           "check permissions of %s, or set COORD_DB" % os.path.dirname(self.path))
        except sqlite3.Error as exc:
            raise _translate(exc, self.path)
        try:
            self.conn.execute("PRAGMA busy_timeout = %d" % int(timeout * 1000))
            if migrate:
                self._migrate()
            self.conn.execute("PRAGMA synchronous = FULL")
        except sqlite3.Error as exc:
            self.conn.close()
            raise _translate(exc, self.path)
        _secure_files(self.path)

    def close(self):
        self.conn.close()
        for fd in self._gate or ():
            os.close(fd)
        self._gate = None

    # -- schema

    def _migrate(self):
        """Bring the database to SCHEMA_VERSION. user_version is the reader level (the newest
        migration an older coord cannot ignore); meta SCHEMA_APPLIED_KEY the newest applied,
        when that is beyond it. A database whose reader level is newer than this coord is
        refused; one that is newer only by additive migrations is used as it is."""
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise EnvError("database %s has schema v%d, newer than this coord (v%d)"
                           % (self.path, version, SCHEMA_VERSION), upgrade_hint())
        if self._applied(version) >= SCHEMA_VERSION:
            return
        mode = self.conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode.lower() != "wal":
            self.conn.execute("PRAGMA journal_mode = WAL")
        if version > 0:
            self._backup(version)
        with self.transaction():
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
            applied = self._applied(version)
            for target in range(applied + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[target]:
                    self.conn.execute(statement)
                if target not in ADDITIVE_MIGRATIONS:
                    version = target
                    self.conn.execute("PRAGMA user_version = %d" % target)
            if version != SCHEMA_VERSION:
                self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                                  (SCHEMA_APPLIED_KEY, str(max(applied, SCHEMA_VERSION))))
            else:  # the newest migration is one every reader must know: user_version says it all
                self.conn.execute("DELETE FROM meta WHERE key = ?", (SCHEMA_APPLIED_KEY,))

    def _applied(self, version):
        """The newest migration applied to a database whose user_version is `version`."""
        if version < 1:
            return version
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (SCHEMA_APPLIED_KEY,)).fetchone()
        try:
            return max(version, int(row[0])) if row else version
        except ValueError:
            return version

    def _backup(self, version):
        dest = "%s.v%d-%d.bak" % (self.path, version, int(time.time()))
        os.close(os.open(dest, os.O_RDWR | os.O_CREAT, 0o600))
        target = sqlite3.connect(dest)
        try:
            self.conn.backup(target)
        finally:
            target.close()

    # -- the ID sequences of AUTOINCREMENT tables, for copying a project between engines (pg.copy_project)

    def id_sequence(self, table):
        """The highest ID `table` ever handed out (sqlite_sequence; pg.Store: its identity sequence)."""
        row = self.conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).fetchone()
        return row[0] if row else 0

    def set_id_sequence(self, table, value):
        """Make `table`'s next ID come after `value` (never lower what it is)."""
        if not self.conn.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (value, table)).rowcount:
            self.conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (table, value))

    # -- transactions

    def transaction(self):
        """BEGIN IMMEDIATE ... COMMIT: every read-check-write runs inside one."""
        return Transaction(self)

    def snapshot(self):
        """A read transaction (BEGIN DEFERRED ... COMMIT): every read inside it sees the same state
        of the database (under WAL without waiting for a writer). Read only; inside transaction()
        it is part of that transaction."""
        return Transaction(self, write=False)

    def q(self, sql, params=()):
        try:
            return self.conn.execute(sql, params)
        except sqlite3.Error as exc:
            raise _translate(exc, self.path)

    def audit(self, event, runtime=None, subject=None, now=None, **data):
        """Append one audit row; call inside a transaction."""
        self.conn.execute(
            "INSERT INTO audit (at, event, runtime, subject, data) VALUES (?, ?, ?, ?, ?)",
            (_now(now), event, runtime, subject, json_text(data, sort=True, compact=True)))

    def exclusive_claims_since(self, since, resources, limit=100000):
        """[{resource, runtime, at}] of the exclusive lease claims the audit recorded at or after
        `since` on a name overlapping any of `resources` (read only, oldest first)."""
        import json
        names = set(resources)
        rows = self.q("SELECT at, runtime, subject, data FROM audit WHERE event = 'lease.claimed' AND at >= ?"
                      " ORDER BY id LIMIT ?", (since, limit)).fetchall()
        out = []
        for at, runtime, subject, data in rows:
            try:
                if json.loads(data).get("mode") != "exclusive":
                    continue
            except ValueError:
                continue
            if subject and any(overlaps(subject, n) for n in names):
                out.append({"resource": subject, "runtime": runtime, "at": at})
        return out

    # -- runtimes

    def _row_runtime(self, row):
        if row is None:
            return None
        keys = ("id", "handle", "conversation", "agent_id", "harness", "pid", "pid_start", "cwd",
                "started_at", "heartbeat_at", "ended_at", "end_reason", "superseded_by", "host")
        rt = dict(zip(keys, row))
        rt["heartbeat_at"] = beat_time(rt["heartbeat_at"])
        return rt

    # SET heartbeat_at = this, one parameter (now): the later beat, stored as beat_value stores it.
    _BEAT = "max(heartbeat_at, ? + CASE WHEN pid OR harness IN ('%s', '%s') THEN %r ELSE 0 END)" % (
        PERSON, PARKED, BEAT_AHEAD)

    _RUNTIME_COLS = ("id, handle, conversation, agent_id, harness, pid, pid_start, cwd, started_at, "
                     "heartbeat_at, ended_at, end_reason, superseded_by, host")

    def runtime(self, runtime_id):
        return self._row_runtime(self.q(*self._runtime_read(runtime_id)).fetchone())

    def _runtime_read(self, runtime_id):
        return "SELECT %s FROM runtimes WHERE id = ?" % self._RUNTIME_COLS, (runtime_id,)

    def runtime_live(self, rt, now=None):
        """Live = not ended and, with a recorded harness process, that process still there
        (liveness beats the clock: an idle agent stays live however long it waits); without
        one, a heartbeat within the presence limit (COORD_RUNTIME_TTL)."""
        if rt is None or rt["ended_at"] is not None:
            return False
        if not rt["pid"] and rt.get("harness") in UNCLOCKED:
            return True  # the user outside any terminal, or a parked work: ended explicitly, never by the clock
        if rt["pid"]:
            return self.pid_live(rt, now)
        return beat_time(rt["heartbeat_at"]) + self.runtime_ttl > _now(now)

    # -- hosts: the one rule for what a recorded pid means

    @property
    def host(self):
        """The host this Store's pids belong to (host_identity), read at first use."""
        if getattr(self, "_host_id", None) is None:
            self._host_id = host_identity(self._host_env)
        return self._host_id

    @host.setter
    def host(self, value):
        self._host_id = value

    def pid_judged_here(self, rt):
        """True when rt's recorded pid (if any) names a process this process may judge and match
        against its own ancestry: on SQLite every runtime (a SQLite project is one host by
        definition, and nothing changes for it); on PostgreSQL only a runtime this host recorded
        (same boot id and PID namespace: hosts.id; pg.Store)."""
        return True

    def _here(self, column="host"):
        """(" AND <column> = ?", [this host]) on PostgreSQL (pg.Store), ("", []) on SQLite: a query
        that finds runtimes by pid finds only this host's (another host's pid 4242 is not this host's)."""
        return "", []

    def pid_live(self, rt, now=None):
        """Whether the runtime with a recorded pid lives: judged by its pid on its own host (on
        PostgreSQL the host process runs in its host's PID namespace, so a pid it cannot see is
        gone: pg.Store); by its host's heartbeat on the server's clock everywhere else."""
        if self.pid_judged_here(rt):
            return process_alive(rt["pid"], rt["pid_start"])
        return self.host_state(rt.get("host"), now, rt) == "live"

    def host_state(self, host_id, now=None, rt=None):
        """"live" while the host beat within its TTL; "dying" for its lease delay after that (its
        runtimes are not live, but their exclusive leases still hold); then "dead". A runtime
        whose host never beat (no row: recorded before hosts existed, or copied from SQLite) is
        judged by its own heartbeat and the presence limit, as a runtime without a pid."""
        now = _now(now)
        row = self.q("SELECT heartbeat_at, ttl, lease_delay FROM hosts WHERE id = ?", (host_id,)).fetchone() \
            if host_id else None
        if row is None:
            live = rt is not None and beat_time(rt["heartbeat_at"]) + self.runtime_ttl > now
            return "live" if live else "dead"
        beat, ttl, delay = row
        if beat + ttl > now:
            return "live"
        return "dying" if beat + ttl + delay > now else "dead"

    def _dying_holder(self, rt, now):
        """True when rt is another host's runtime whose host stopped beating less than its lease
        delay past its TTL: its exclusive leases still hold (a paused host is not a dead one)."""
        return bool(rt.get("pid")) and rt.get("ended_at") is None and not self.pid_judged_here(rt) \
            and self.host_state(rt.get("host"), now, rt) == "dying"

    def hosts(self, now=None):
        """Every host that ever beat: [{id, name, boot_id, pid_ns, started_at, heartbeat_at, ttl,
        lease_delay, state}]."""
        now = _now(now)
        keys = ("id", "name", "boot_id", "pid_ns", "started_at", "heartbeat_at", "ttl", "lease_delay")
        out = [dict(zip(keys, r)) for r in self.q("SELECT %s FROM hosts ORDER BY name, id" % ", ".join(keys))]
        for h in out:
            h["state"] = self.host_state(h["id"], now)
        return out

    # -- integration fencing: the fencing number of integration/<bookmark>

    def claim_integration(self, runtime_id, resource, purpose="", ttl=None, now=None):
        """Claim the exclusive integration lease `resource` and take its fencing number in the
        same transaction: the number goes up by one whenever the lease is newly acquired (the
        runtime did not hold it unexpired, or another runtime took a number since) and stays
        when the holder only renews it. -> {"fence", "new": whether it went up, "leases"}."""
        now = _now(now)
        with self.transaction():
            held = self.q("SELECT 1 FROM leases WHERE resource = ? AND runtime = ? AND expires_at > ?",
                          (resource, runtime_id, now)).fetchone() is not None
            leases = self.claim(runtime_id, [resource], "exclusive", purpose, ttl=ttl, now=now)
            row = self.q("SELECT fence, runtime FROM fences WHERE resource = ?", (resource,)).fetchone()
            if row is not None and held and row[1] == runtime_id:
                return {"fence": row[0], "new": False, "leases": leases}
            fence = (row[0] if row is not None else 0) + 1
            self.conn.execute(
                "INSERT INTO fences (resource, fence, runtime, at) VALUES (?, ?, ?, ?) ON CONFLICT (resource)"
                " DO UPDATE SET fence = excluded.fence, runtime = excluded.runtime, at = excluded.at",
                (resource, fence, runtime_id, now))
            self.audit("integration.fenced", runtime_id, resource, now, fence=fence)
            return {"fence": fence, "new": True, "leases": leases}

    def integration_fence(self, resource):
        """{"fence", "runtime", "handle", "at"} of the last acquisition of `resource`, or None."""
        row = self.q("SELECT f.fence, f.runtime, r.handle, f.at FROM fences f LEFT JOIN runtimes r ON r.id = f.runtime"
                     " WHERE f.resource = ?", (resource,)).fetchone()
        return None if row is None else dict(zip(("fence", "runtime", "handle", "at"), row))

    def confirm_fence(self, holder_id, resource, fence, now=None):
        """Just before a landing moves a target, pushes or proves: is `fence` still the current
        number of `resource`, with `holder_id` still holding the lease (its row not lost to
        anyone)? Then the lease is extended by its TTL (a holder that only paused, with nobody
        taking the lease meanwhile, keeps it) and {"ok": True}; else {"ok": False, "current",
        "holder" (handle of the last acquirer), "held": whether holder_id still has the lease}."""
        now = _now(now)
        with self.transaction():
            cur = self.integration_fence(resource)
            lease = self.q("SELECT expires_at, ttl FROM leases WHERE resource = ? AND runtime = ?",
                           (resource, holder_id)).fetchone()
            ok = cur is not None and cur["fence"] == fence and lease is not None
            if ok:
                self.conn.execute("UPDATE leases SET expires_at = max(expires_at, ?) WHERE resource = ? AND runtime = ?",
                                  (now + lease[1], resource, holder_id))
                return {"ok": True, "current": fence}
            return {"ok": False, "current": cur and cur["fence"], "holder": cur and (cur["handle"] or cur["runtime"]),
                    "held": lease is not None and lease[0] > now}

    # -- the host of each work: a clone, its tmux window and the shared checkout
    # are on one host; another host's work is shown with its host and acted on only there

    def work_hosts(self):
        """{"spans": how many hosts this project's runtimes were recorded on, "works": {work id:
        {"id", "name"}} of the host each work's recorded runtime (its creator or agent) ran on,
        "names": {host id: name}}."""
        names = dict(self.q("SELECT id, name FROM hosts").fetchall())
        spans = self.q("SELECT COUNT(DISTINCT host) FROM runtimes WHERE host IS NOT NULL").fetchone()[0]
        rows = self.q("SELECT w.id, r.host FROM work w JOIN runtimes r ON r.id = w.runtime"
                      " WHERE r.host IS NOT NULL").fetchall()
        return {"spans": spans, "works": {wid: {"id": h, "name": names.get(h) or h} for wid, h in rows},
                "names": names}

    def resolve_runtime(self, token):
        """A runtime by exact handle or full UUID; prefixes never match."""
        sql, params = self._resolve_read(token)
        rt = self._row_runtime(self.q(sql, params).fetchone())
        if rt is None:
            raise Refused("no runtime %s" % params[0], "coord list --all shows known runtimes; register with coord hello")
        return rt

    def _resolve_read(self, token):
        kind, value = _identity_kind(token, "runtime")
        return "SELECT %s FROM runtimes WHERE %s = ?" % (self._RUNTIME_COLS, "id" if kind == "id" else "handle"), (value,)

    def usable_runtime(self, runtime_id, now=None):
        """The runtime record if it may act (renew, release, claim, ack); else a clear refusal."""
        return self.check_usable(self.runtime(runtime_id), runtime_id, now)

    def check_usable(self, rt, runtime_id, now=None):
        """usable_runtime on the record `rt` of `runtime_id` (None: there is none), as read."""
        if rt is None:
            raise Refused("no runtime %s" % runtime_id, "register with coord hello")
        if rt["superseded_by"]:
            new = self.successor(rt)
            if self.runtime_live(new, now):
                raise Refused("runtime %s was superseded by %s (the conversation was resumed)" % (
                    rt["handle"], new["handle"]), STALE_HINT % new["handle"], superseded_by=new["handle"])
            raise Refused("runtime %s was superseded by %s (the conversation was resumed), which has ended too" % (
                rt["handle"], new["handle"]), "resume the conversation to attach it again, or register with"
                " coord hello", superseded_by=new["handle"])
        if rt["ended_at"] is not None:
            raise Refused("runtime %s has ended (%s)" % (rt["handle"], rt["end_reason"] or "bye"),
                          "register again with coord hello")
        if not self.runtime_live(rt, now):
            raise Refused("runtime %s is no longer live (no heartbeat or its process is gone)" % rt["handle"],
                          "register again with coord hello")
        return rt

    def successor(self, rt):
        """The newest attachment in rt's chain of successors (rt itself when not superseded)."""
        seen = {rt["id"]}
        while rt["superseded_by"] and rt["superseded_by"] not in seen:
            nxt = self.runtime(rt["superseded_by"])
            if nxt is None:
                break
            seen.add(nxt["id"])
            rt = nxt
        return rt

    def superseded_attachment(self, conversation, pid, pid_start):
        """The ID of the newest top-level attachment of `conversation` that the harness process
        (pid, pid_start) registered and that has been superseded since, or None."""
        here, hp = self._here()
        row = self.q("SELECT id, pid_start FROM runtimes WHERE conversation = ? AND agent_id IS NULL"
                     " AND pid = ?%s AND superseded_by IS NOT NULL ORDER BY started_at DESC LIMIT 1" % here,
                     [conversation, pid] + hp).fetchone()
        return row[0] if row and row[1] in (None, pid_start) else None

    def unended_subagents(self, conversation, pid):
        """IDs of the conversation's subagent runtimes, not ended, recorded with harness process pid."""
        here, hp = self._here()
        return [r[0] for r in self.q("SELECT id FROM runtimes WHERE conversation = ? AND agent_id IS NOT NULL"
                                     " AND ended_at IS NULL AND pid = ?" + here, [conversation, pid] + hp).fetchall()]

    def confirm_attachment(self, rt, chain=None):
        """Refuse a caller found through its conversation when it descends from the harness
        process of a superseded attachment of that conversation rather than from rt's own.

        Only positive evidence refuses: without a recorded harness pid, or with an ancestry that
        shows neither process (unreadable, or a sandbox's own PID namespace), the conversation
        alone identifies the caller."""
        if not rt["pid"] or not self.pid_judged_here(rt):
            return
        chain = ancestor_processes() if chain is None else [tuple(x) for x in chain]
        for pid, start in chain:
            if pid == rt["pid"] and (rt["pid_start"] is None or start is None or start == rt["pid_start"]):
                return
        mine = set((pid, start) for pid, start in chain if start is not None)
        if not mine:
            return
        here, hp = self._here()
        rows = self.q("SELECT %s FROM runtimes WHERE conversation = ? AND agent_id IS NULL AND superseded_by IS NOT"
                      " NULL AND pid IS NOT NULL%s ORDER BY started_at DESC" % (self._RUNTIME_COLS, here),
                      [rt["conversation"]] + hp).fetchall()
        for old in map(self._row_runtime, rows):
            if (old["pid"], old["pid_start"]) in mine:
                raise Refused("this process's attachment %s was superseded by %s: the conversation was resumed in"
                              " another process, which now holds its leases and messages" % (old["handle"], rt["handle"]),
                              STALE_HINT % rt["handle"], superseded_by=rt["handle"])

    def register(self, conversation=None, harness="", pid=None, pid_start=None, agent_id=None, cwd=None,
                 source=None, now=None, turn=None, live=None):
        """Register one live attachment and return its record.

        A top-level attachment of a conversation with a live runtime supersedes it: leases and
        open deliveries move to the new runtime; the same harness process (pid and start time)
        keeps its live runtime instead. A subagent (agent_id) gets a deterministic ID and never
        inherits anything. turn: also set_turn(its ID, turn) in the same transaction (SessionStart:
        one wait less on PostgreSQL). live: whether the caller saw an unended runtime of the
        conversation (SessionStart, on the host process's copy), so that PostgreSQL does not guess
        there is none (pg.Store._register_in_one_wait); None: not looked.
        """
        now = _now(now)
        conversation = conversation or new_uuid()
        if pid and pid_start is None:
            pid_start = process_start(pid)
        return self._register(conversation, harness, pid, pid_start, agent_id, cwd, source, now, turn,
                              guess=live is not True)

    def _register(self, conversation, harness, pid, pid_start, agent_id, cwd, source, now, turn,
                  expect=None, first=None, guess=False):
        """register's transaction. expect, first: pg.Store's guess in one wait (the server checks
        it) and the new runtime's ID it guessed with; guess: whether to try that guess."""
        taken = None
        with self.transaction():
            if expect is not None:
                self.conn.expect(*expect)
            first = self._prefetch_register(conversation, pid, pid_start, agent_id, first)
            self._reap_inline(now, conversation=conversation)
            if agent_id:
                rid = subagent_uuid(conversation, agent_id)
                existing = self.runtime(rid)
                if existing is not None:
                    if turn:
                        self._turn_row(rid, turn, now)
                    return self._rehello_subagent(existing, conversation, agent_id, harness, pid, pid_start,
                                                  source, now)
                handle = handle_for(rid, DOMAIN_RUNTIME)
                clash = self.q("SELECT id FROM runtimes WHERE handle = ?", (handle,)).fetchone()
                if clash:
                    raise Refused("handle %s of subagent runtime %s collides with runtime %s" % (handle, rid, clash[0]),
                                  "this is a 1-in-34-billion event; report it")
            else:
                # The same harness process is the same attachment: parallel first hooks after
                # a reap (or a repeated hello) must not supersede each other.
                same = self._same_process(conversation, pid, pid_start, now) if pid else None
                if same is not None:
                    if turn:
                        self._turn_row(same["id"], turn, now)
                    return same
                rid, handle = self._draw_runtime_id(first)
                taken = self._taken_before_insert(conversation, rid)
            self.conn.execute(
                "INSERT INTO runtimes (id, handle, conversation, agent_id, harness, pid, pid_start, cwd, started_at,"
                " heartbeat_at, host) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (rid, handle, conversation, agent_id, harness or "", pid, pid_start, cwd, now,
                 beat_value(now, pid, harness), self.host["id"]))
            self.audit("runtime.hello", rid, rid, now, conversation=conversation, agent_id=agent_id or "",
                       harness=harness or "", source=source or "")
            if not agent_id:
                self._take_over_conversation(conversation, rid, now, taken)
            if turn:
                self._turn_row(rid, turn, now)
            out = self._runtime_at_commit(rid)
            session = self._session_at_commit(rid)
        rt = out()
        if session is not None:
            session()
        return rt

    def _rehello_subagent(self, existing, conversation, agent_id, harness, pid, pid_start, source, now):
        """A subagent's runtime is deterministic: a second hello revives and renews the same one."""
        rid = existing["id"]
        beat = beat_value(max(existing["heartbeat_at"], now), pid, existing["harness"])
        self.conn.execute(
            "UPDATE runtimes SET heartbeat_at = ?, ended_at = NULL, end_reason = NULL,"
            " pid = ?, pid_start = ?, host = ? WHERE id = ?", (beat, pid, pid_start, self.host["id"], rid))
        if existing["ended_at"] is not None:
            self.audit("runtime.hello", rid, rid, now, conversation=conversation, agent_id=agent_id,
                       harness=harness, source=source or "")
        return self.runtime(rid)

    def _same_process(self, conversation, pid, pid_start, now):
        """The live top-level runtime of `conversation` that is this very process, renewed; else None."""
        row = self.q(*self._same_process_read(conversation, pid, pid_start)).fetchone()
        if not row:
            return None
        self.conn.execute("UPDATE runtimes SET heartbeat_at = %s WHERE id = ?" % self._BEAT, (now, row[0]))
        return self.runtime(row[0])

    def _same_process_read(self, conversation, pid, pid_start):
        here, hp = self._here()  # hosts: another host's pid is not this process
        return ("SELECT id FROM runtimes WHERE conversation = ? AND agent_id IS NULL AND"
                " ended_at IS NULL AND pid = ? AND (pid_start IS ? OR pid_start = ?)" + here,
                (conversation, pid, pid_start, pid_start) + tuple(hp))

    def _olds_read(self, conversation, rid):
        return ("SELECT id FROM runtimes WHERE conversation = ? AND agent_id IS NULL AND ended_at IS NULL"
                " AND id != ?", (conversation, rid))

    def _draw_runtime_id(self, first=None):
        """A new random runtime ID whose five-word handle no runtime has; -> (id, handle).
        first: the ID to try first (register's, drawn with its reads on PostgreSQL)."""
        for _ in range(16):
            rid, first = first or new_uuid(), None
            handle = handle_for(rid, DOMAIN_RUNTIME)
            if not self.q("SELECT 1 FROM runtimes WHERE handle = ?", (handle,)).fetchone():
                return rid, handle
        raise Refused("could not draw a runtime ID with a free handle")  # pragma: no cover

    _OLD_LEASES = "SELECT resource FROM leases WHERE runtime = ? ORDER BY resource"
    _OLDS_LEASES = ("SELECT runtime, resource FROM leases WHERE runtime IN (SELECT id FROM runtimes WHERE"
                    " conversation = ? AND agent_id IS NULL AND ended_at IS NULL AND id != ?) ORDER BY resource")

    def _taken_before_insert(self, conversation, rid):
        """What register reads before inserting runtime `rid` for _take_over_conversation: None on
        SQLite (it reads after the insert); pg.Store reads it with the reads sent with BEGIN."""
        return None

    def _take_over_conversation(self, conversation, rid, now, taken=None):
        """The new top-level runtime `rid` supersedes the conversation's live ones and inherits
        the open deliveries of its ended attachments. taken: _taken_before_insert, read earlier."""
        if taken is None:
            taken = [(old, None) for (old,) in self.q(*self._olds_read(conversation, rid)).fetchall()]
        for old, names in taken:
            self._supersede(old, rid, now, names)
        self._inherit_deliveries(conversation, rid, now)

    def _inherit_deliveries(self, conversation, rid, now):
        # Messages to an earlier attachment that ended without a successor (its harness
        # died, or it said bye) are still the conversation's: they follow it here.
        moved = self.conn.execute(
            "UPDATE deliveries SET recipient = ? WHERE state != 'acked' AND recipient IN (SELECT id FROM"
            " runtimes WHERE conversation = ? AND agent_id IS NULL AND id != ? AND superseded_by IS NULL)",
            (rid, conversation, rid)).rowcount
        if moved:
            self.audit("message.inherited", rid, rid, now, deliveries=moved)

    def _supersede(self, old, new, now, moved=None):
        if moved is None:  # else read before this transaction's first write (_taken_before_insert)
            moved = [r[0] for r in self.q(self._OLD_LEASES, (old,))]
        self.conn.execute("UPDATE leases SET runtime = ? WHERE runtime = ?", (new, old))
        self.conn.execute("UPDATE deliveries SET recipient = ? WHERE recipient = ? AND state != 'acked'", (new, old))
        self.conn.execute("UPDATE runtimes SET ended_at = ?, end_reason = 'superseded', superseded_by = ? WHERE id = ?",
                          (now, new, old))
        self.audit("runtime.superseded", new, old, now, moved_leases=moved)

    def hold_parked(self, conversation, work_id, now=None, source="park"):
        """Parking a work: a runtime labelled `parked` (no process, so no clock and no pid can end
        it) supersedes the conversation's unended top-level runtimes, taking over their leases
        and open messages, until that conversation registers again (resume: register() moves
        them to the new runtime) or end_parked ends it. -> the holder, or None when the
        conversation has no unended runtime."""
        now = _now(now)
        with self.transaction():
            olds = [r[0] for r in self.q("SELECT id FROM runtimes WHERE conversation = ? AND agent_id IS NULL AND"
                                         " ended_at IS NULL ORDER BY started_at", (conversation,)).fetchall()]
            if not olds:
                return None
            for _ in range(16):
                rid = new_uuid()
                handle = handle_for(rid, DOMAIN_RUNTIME)
                if not self.q("SELECT 1 FROM runtimes WHERE handle = ?", (handle,)).fetchone():
                    break
            self.conn.execute(
                "INSERT INTO runtimes (id, handle, conversation, agent_id, harness, pid, pid_start, cwd, started_at,"
                " heartbeat_at, host) VALUES (?, ?, ?, NULL, ?, NULL, NULL, NULL, ?, ?, ?)",
                (rid, handle, conversation, PARKED, now, beat_value(now, None, PARKED), self.host["id"]))
            self.audit("runtime.hello", rid, rid, now, conversation=conversation, agent_id="", harness=PARKED,
                       source=source, work=work_id)
            for old in olds:
                self._supersede(old, rid, now)
            # Held for the work, not on a clock: they block peers until resume, close or remove
            # (at most the longest lease lifetime; a lapsed one stays for the resumed runtime to renew).
            self.conn.execute("UPDATE leases SET expires_at = max(expires_at, ?) WHERE runtime = ?",
                              (now + LEASE_TTL_RANGE[1], rid))
            return self.runtime(rid)

    def unhold_parked(self, holder_id, now=None):
        """Undo hold_parked when parking failed: the newest runtime it superseded is unended again
        and gets its leases and open messages back; the holder ends."""
        now = _now(now)
        with self.transaction():
            row = self.q("SELECT id FROM runtimes WHERE superseded_by = ? ORDER BY started_at DESC LIMIT 1",
                         (holder_id,)).fetchone()
            if row:
                self.conn.execute("UPDATE runtimes SET ended_at = NULL, end_reason = NULL, superseded_by = NULL"
                                  " WHERE id = ?", (row[0],))
                self.conn.execute("UPDATE leases SET runtime = ? WHERE runtime = ?", (row[0], holder_id))
                self.conn.execute("UPDATE deliveries SET recipient = ? WHERE recipient = ? AND state != 'acked'",
                                  (row[0], holder_id))
                self.audit("runtime.unsuperseded", row[0], holder_id, now)
            self.conn.execute("UPDATE runtimes SET ended_at = ?, end_reason = 'park-failed' WHERE id = ?",
                              (now, holder_id))

    def end_parked(self, conversation, reason="work closed", now=None):
        """End the parked holder of `conversation` (releasing its leases, audited); -> the names released.
        Its open messages stay the conversation's (register() moves them to its next runtime)."""
        rows = self.q("SELECT id FROM runtimes WHERE conversation = ? AND harness = ? AND ended_at IS NULL",
                      (conversation, PARKED)).fetchall()
        released = []
        for (rid,) in rows:
            released += [l["resource"] for l in self.leases_of(rid)]
            self.bye(rid, reason=reason, now=now)
        return released

    def last_runtime_of(self, conversation):
        """The newest top-level runtime of `conversation`, ended or not, or None."""
        return self._row_runtime(self.q("SELECT %s FROM runtimes WHERE conversation = ? AND agent_id IS NULL"
                                        " ORDER BY started_at DESC, id LIMIT 1" % self._RUNTIME_COLS,
                                        (conversation,)).fetchone())

    _TOP_OF_CONVERSATION = ("SELECT %s FROM runtimes WHERE conversation = ? AND agent_id IS NULL AND ended_at IS NULL"
                            " ORDER BY started_at DESC")

    def find_conversation_runtime(self, conversation, agent_id=None, now=None):
        """The live runtime of a conversation (top level, or the given subagent), or None."""
        if agent_id:
            rt = self.runtime(subagent_uuid(conversation, agent_id))
            return rt if rt and self.runtime_live(rt, now) else None
        rows = self.q(self._TOP_OF_CONVERSATION % self._RUNTIME_COLS, (conversation,)).fetchall()
        for row in rows:
            rt = self._row_runtime(row)
            if self.runtime_live(rt, now):
                return rt
        return None

    # -- turns: the lifecycle boundary each harness reported last (hook.py writes, send --nudge reads)

    TURN_STATES = ("busy", "idle", "dialog", "nudged")

    def turn(self, runtime_id):
        """{"state", "at", "began"} of the runtime's last recorded boundary, or None (none seen)."""
        row = self.q("SELECT state, at, began FROM turns WHERE runtime = ?", (runtime_id,)).fetchone()
        return dict(zip(("state", "at", "began"), row)) if row else None

    def set_turn(self, runtime_id, state, now=None, began=False, only_from=None):
        """Record a boundary: `state` since now; began=True also marks the start of a turn (a
        prompt was submitted). With `only_from`, change only a row in that state (read first, so
        a hook that finds nothing to change takes no write lock). -> True when written."""
        now = _now(now)
        if only_from is not None:
            row = self.turn(runtime_id)
            if row is None or row["state"] != only_from:
                return False
        with self.transaction():
            if only_from is not None:
                cur = self.conn.execute("UPDATE turns SET state = ?, at = ? WHERE runtime = ? AND state = ?",
                                        (state, now, runtime_id, only_from))
                return cur.rowcount == 1
            self._turn_row(runtime_id, state, now, began)
        return True

    def _turn_row(self, runtime_id, state, now, began=False):
        """set_turn's write; call inside a transaction."""
        self.conn.execute(
            "INSERT INTO turns (runtime, state, at, began) VALUES (?, ?, ?, ?) ON CONFLICT (runtime) DO "
            "UPDATE SET state = excluded.state, at = excluded.at, began = CASE WHEN ? THEN excluded.began "
            "ELSE turns.began END", (runtime_id, state, now, now if began else None, 1 if began else 0))

    def wake_generation(self):
        """None: a Store in this process has no host process's wake-ups (RemoteStore.wake_generation)."""
        return None

    def data_version(self):
        """SQLite's PRAGMA data_version on this connection: it changes when another connection
        committed (the live view's wake-up); pg.Store's is None (the host process's wake-ups)."""
        return self.conn.execute("PRAGMA data_version").fetchone()[0]

    def turns(self):
        """{runtime id: {"state", "at", "began"}} of every recorded boundary (one read; the live
        view and `status` read all at once)."""
        return {r[0]: dict(zip(("state", "at", "began"), r[1:]))
                for r in self.q("SELECT runtime, state, at, began FROM turns").fetchall()}

    # -- an agent's state: the turn above plus the last hook event its conversation reported.
    # hook.py writes that event to a small file per conversation (ACTIVITY_DIR under the state
    # directory, named by the hex of its session ID: event, tool, subagent ID, tab-separated) on
    # every event it runs for, with no database write on the tool path; a file of this host only.

    ACTIVITY_DIR = "activity"
    AGENT_STATES = ("working", "idle", "waiting", "stuck", "done", "gone", "unknown")
    STUCK_AFTER = 600.0  # seconds in a turn with no event before an agent shows as stuck (COORD_STUCK_AFTER)
    _WORKING_EVENTS = ("PreToolUse", "PostToolUse", "UserPromptSubmit", "SubagentStart", "SubagentStop")

    @staticmethod
    def activity(conversation, environ=None):
        """{"event", "tool", "at"} of the last hook event the conversation reported on this host,
        or None (none, another host's, or unreadable). `at` is the file's mtime."""
        if not conversation:
            return None
        path = os.path.join(state_dir(environ), Store.ACTIVITY_DIR, conversation.encode("utf-8", "replace").hex())
        try:
            with open(path, "rb") as f:
                at, raw = os.fstat(f.fileno()).st_mtime, f.read(512)
        except (OSError, ValueError):
            return None
        parts = raw.decode("utf-8", "replace").rstrip("\n").split("\t")
        if not parts[0]:
            return None
        return {"event": parts[0], "tool": clean_text(parts[1], 40) if len(parts) > 1 and parts[1] else None,
                "at": at}

    def ended_conversations(self, conversations):
        """{conversation: the time its last runtime ended} of those of `conversations` this project
        recorded with every runtime ended (prune_activity)."""
        ended, keys = {}, sorted(set(c for c in conversations if c))
        for i in range(0, len(keys), 400):
            part = keys[i:i + 400]
            for conv, live, last in self.q(
                    "SELECT conversation, SUM(CASE WHEN ended_at IS NULL THEN 1 ELSE 0 END), MAX(ended_at)"
                    " FROM runtimes WHERE conversation IN (%s) GROUP BY conversation"
                    % ", ".join("?" * len(part)), tuple(part)).fetchall():
                if not live and last is not None:
                    ended[conv] = beat_time(last)
        return ended

    @staticmethod
    def agent_state(rt, turn, act, now, stuck_after=None):
        """(state, since, tool) of one runtime: `turn` its recorded boundary (Store.turn), `act`
        its conversation's last event (Store.activity). working: in a turn (tool: the tool it runs
        now, when its harness reported the call); idle: at its prompt; waiting: a permission
        dialog is open (the person must answer); stuck: in a turn with no event for stuck_after
        seconds; gone: ended; unknown: no boundary recorded. The last event on this host decides
        (an answered dialog is followed by the tool's PostToolUse); without one, the turn does.
        done is a work's (enqueued or landed), not a runtime's: the caller decides it."""
        stuck_after = Store.STUCK_AFTER if stuck_after is None else stuck_after
        if rt is None or rt.get("ended_at") is not None:
            return "gone", rt.get("ended_at") if rt else None, None
        ev = act["event"] if act else None
        t = turn["state"] if turn else None
        if ev == "SessionEnd":
            return "gone", act["at"], None
        if ev == "PermissionRequest" or (ev in (None, "SessionStart") and t == "dialog"):
            return "waiting", act["at"] if ev == "PermissionRequest" else turn["at"], act and act["tool"]
        if ev == "Stop" or (ev in (None, "SessionStart") and t in ("idle", "nudged")):
            return "idle", max(act["at"] if ev == "Stop" else 0, turn["at"] if turn else 0) or None, None
        if ev in Store._WORKING_EVENTS or (ev in (None, "SessionStart") and t == "busy"):
            last = max(x for x in (act and act["at"], turn and turn["at"], rt.get("heartbeat_at"), 0) if x is not None)
            began = (turn or {}).get("began") or (turn or {}).get("at") or last
            tool = act["tool"] if ev == "PreToolUse" else None
            if now - last > stuck_after:
                return "stuck", last, tool
            return "working", began, tool
        return "unknown", None, None

    def claim_nudge(self, runtime_id, idle_at, now=None):
        """Atomically turn the idle boundary seen at `idle_at` into "nudged" (one nudge per idle
        prompt: a second sender finds it taken). -> True when this caller may type."""
        with self.transaction():
            cur = self.conn.execute("UPDATE turns SET state = 'nudged', at = ? WHERE runtime = ? AND state = 'idle'"
                                    " AND at = ?", (_now(now), runtime_id, idle_at))
            return cur.rowcount == 1

    def heartbeat(self, runtime_id, now=None, min_interval=0.0, turn=None):
        """Renew presence and every lease held; skip the write when the last beat is younger than min_interval.
        turn: also set_turn(runtime_id, turn) in the same transaction (SessionStart: one wait less on
        PostgreSQL)."""
        now = _now(now)
        if min_interval:
            row = self.q("SELECT heartbeat_at FROM runtimes WHERE id = ? AND ended_at IS NULL",
                         (runtime_id,)).fetchone()
            last = beat_time(row[0]) if row else None
            if row and now - last < min_interval and now >= last:
                if turn:
                    self.set_turn(runtime_id, turn, now)
                return False
        return self._heartbeat(runtime_id, now, turn=turn)

    def _heartbeat(self, runtime_id, now, expect=None, turn=None):
        with self.transaction():
            if expect is not None:  # pg.Store's guess in one wait, checked by the server
                self.conn.expect(*expect)
            self._prefetch("heartbeat", runtime_id, now)
            rt = self.usable_runtime(runtime_id, now)
            # the lapsed leases, read before the writes below, which renew only unlapsed ones (on
            # PostgreSQL a read after a write waits for the server: the beat would wait twice)
            lapsed = self.q(self._LAPSED_OF, (runtime_id, now)).fetchall() if rt and rt["pid"] else []
            self.conn.execute("UPDATE runtimes SET heartbeat_at = %s WHERE id = ?" % self._BEAT, (now, runtime_id))
            self.conn.execute("UPDATE leases SET expires_at = max(expires_at, ? + ttl) WHERE runtime = ?"
                              " AND expires_at > ?", (now, runtime_id, now))
            self._revive(runtime_id, now, rt=rt, lapsed=lapsed)
            if turn:
                self._turn_row(runtime_id, turn, now)
            session = self._session_at_commit(runtime_id)
        if session is not None:
            session()
        return True

    def _revive(self, runtime_id, now, names=None, ttl=None, rt=None, lapsed=None):
        """Renew the runtime's lapsed leases (TTL passed, kept because its process lives) unless a
        live peer now holds a conflicting lease; such a lease is lost: dropped, audited and noted
        for the holder's next boundary. Returns the renewed names; call inside a transaction.
        A runtime without a recorded process keeps the clock's rule: nothing is revived.
        rt: the runtime's record read earlier in this transaction (its pid does not change),
        which saves reading it again (one round trip on PostgreSQL); lapsed: its lapsed leases
        (_LAPSED_OF's rows), read earlier in this transaction."""
        if rt is None:
            rt = self.runtime(runtime_id)
        if rt is None or not rt["pid"]:
            return []
        rows = self.q(self._LAPSED_OF, (runtime_id, now)).fetchall() if lapsed is None else lapsed
        renewed = []
        for resource, mode, old_ttl in rows:
            if names is not None and resource not in names:
                continue
            blocking = self.conflicts([resource], mode, runtime_id, now)
            if blocking:
                self._lose(runtime_id, resource, mode, blocking[0]["runtime"], blocking[0]["handle"], now)
                continue
            t = old_ttl if ttl is None else ttl
            self.conn.execute("UPDATE leases SET expires_at = ?, ttl = ? WHERE resource = ? AND runtime = ?",
                              (now + t, t, resource, runtime_id))
            self.audit("lease.renewed", runtime_id, resource, now, ttl=t, lapsed=True)
            renewed.append(resource)
        return renewed

    _LAPSED_OF = "SELECT resource, mode, ttl FROM leases WHERE runtime = ? AND expires_at <= ? ORDER BY resource"

    _LOST = "lease.lost:%s:"

    def _lose(self, holder, resource, mode, taker, taker_handle, now):
        """A lapsed lease of `holder` was taken by `taker`: drop it, audit it, and keep a note
        (in meta, so no schema change) that the holder's next boundary reports once."""
        self.conn.execute("DELETE FROM leases WHERE resource = ? AND runtime = ?", (resource, holder))
        self.audit("lease.lost", holder, resource, now, mode=mode, to=taker)
        self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (
            (self._LOST % holder) + resource,
            json_text({"resource": resource, "mode": mode, "to": taker_handle, "at": now})))

    def _lost_range(self, runtime_id):
        """(lo, hi): the meta keys of the runtime's lost-lease notes are lo <= key < hi."""
        lo = self._LOST % runtime_id
        return lo, lo[:-1] + chr(ord(":") + 1)

    def take_lost(self, runtime_id):
        """The runtime's lost-lease notes not yet reported ([{resource, mode, to, at}]), removed as
        they are returned so each is told once. One indexed read when there are none."""
        lo, hi = self._lost_range(runtime_id)
        if not self.q("SELECT 1 FROM meta WHERE key >= ? AND key < ? LIMIT 1", (lo, hi)).fetchone():
            return []
        import json
        with self.transaction():
            rows = self.q("SELECT key, value FROM meta WHERE key >= ? AND key < ? ORDER BY key", (lo, hi)).fetchall()
            self.conn.execute("DELETE FROM meta WHERE key >= ? AND key < ?", (lo, hi))
        out = []
        for _, value in rows:
            try:
                out.append(json.loads(value))
            except ValueError:
                pass
        return out

    def bye(self, runtime_id, reason="bye", now=None):
        """End an attachment: release its leases; its conversation and messages stay."""
        now = _now(now)
        with self.transaction():
            rt = self.runtime(runtime_id)
            if rt is None:
                raise Refused("no runtime %s" % runtime_id, "coord list --all")
            if rt["ended_at"] is not None:
                return rt
            released = self._drop_leases(runtime_id, "lease.released", now)
            self.conn.execute("UPDATE runtimes SET ended_at = ?, end_reason = ? WHERE id = ?", (now, reason, runtime_id))
            self.audit("runtime.bye", runtime_id, runtime_id, now, reason=reason, released=released)
        return self.runtime(runtime_id)

    def _drop_leases(self, runtime_id, event, now):
        rows = self.q("SELECT resource, mode FROM leases WHERE runtime = ? ORDER BY resource", (runtime_id,)).fetchall()
        self.conn.execute("DELETE FROM leases WHERE runtime = ?", (runtime_id,))
        for resource, mode in rows:
            self.audit(event, runtime_id, resource, now, mode=mode)
        return [r[0] for r in rows]

    def _reap(self, now):
        """End dead runtimes and drop expired leases; call inside a transaction."""
        rows = self.q("SELECT %s FROM runtimes WHERE ended_at IS NULL" % self._RUNTIME_COLS).fetchall()
        for row in rows:
            rt = self._row_runtime(row)
            if self.runtime_live(rt, now) or self._dying_holder(rt, now):
                continue  # hosts: a host past its TTL but within its lease delay may be paused, not dead
            self._reap_runtime(rt, now)
        # An older coord accepted --ttl inf: such a lease would never expire. Bring it within range.
        longest = LEASE_TTL_RANGE[1]
        self.conn.execute("UPDATE leases SET expires_at = ? + ?, ttl = min(ttl, ?) WHERE expires_at > ? + ?",
                          (now, longest, longest, now, longest))
        # A lease whose TTL passed lapses: it blocks nobody (every reader wants expires_at > now).
        # A runtime whose harness process lives keeps the row, to renew it at its next boundary
        # (or report it lost, see _revive and claim); any other expired lease is deleted.
        expired = self.q("SELECT l.resource, l.runtime, l.mode, r.pid FROM leases l JOIN runtimes r ON r.id = l.runtime"
                         " WHERE l.expires_at <= ? AND NOT (r.ended_at IS NULL AND (r.pid IS NOT NULL OR r.harness = '%s'))"
                         % PARKED +
                         " ORDER BY l.resource, l.runtime", (now,)).fetchall()
        for resource, runtime, mode, _ in expired:
            self.conn.execute("DELETE FROM leases WHERE resource = ? AND runtime = ?", (resource, runtime))
            self.audit("lease.expired", runtime, resource, now, mode=mode)

    def _reap_runtime(self, rt, now):
        """End runtime `rt`, found not live (its leases dropped, or held for its work)."""
        if self.q("SELECT ended_at FROM runtimes WHERE id = ?", (rt["id"],)).fetchone()[0] is not None:
            return  # superseded meanwhile by a holder this loop made
        reason = ("process-gone" if self.pid_judged_here(rt) else "host-gone") if rt["pid"] else "expired"
        held = self._hold_for_work(rt, now) if rt["pid"] else None
        if held is not None:  # superseded by the work's holder, which took its leases
            self.audit("runtime.reaped", None, rt["id"], now, reason=reason, released=[], held_by=held["id"],
                       work=held["work"])
            return
        released = self._drop_leases(rt["id"], "lease.reaped", now)
        self.conn.execute("UPDATE runtimes SET ended_at = ?, end_reason = ? WHERE id = ?", (now, reason, rt["id"]))
        self.audit("runtime.reaped", None, rt["id"], now, reason=reason, released=released)

    def reap(self, now=None):
        with self.transaction():
            self._reap(_now(now))

    # -- what the PostgreSQL engine (pg.Store) does otherwise on a hot path (docs/postgresql.md,
    #    "Round trips", "Reaping on a timer"): SQLite does nothing here, reads what it needs when it
    #    needs it and reaps the whole project first, as it always has.

    reap_on_timer = False  # pg.Store: the host process reaps on a timer; a hot operation only what it touches

    def _prefetch(self, reads, *args):
        """The reads a hot operation names ("claim": pg.Store._claim_reads, or a function listing
        them) before it makes them; pg.Store sends them in one round trip. SQLite: nothing, None."""
        return None

    def _session_at_commit(self, runtime_id):
        """In register's and heartbeat's transaction: SessionStart's reads for `runtime_id`, sent
        to come back with COMMIT (pg.Store.session_start) -> a function to call after COMMIT, or
        None. SQLite: None."""
        return None

    def _prefetch_register(self, conversation, pid, pid_start, agent_id, first=None):
        """register's reads before it makes them -> the new runtime's ID to try first (None: drawn
        when needed). SQLite: nothing, `first`."""
        return first

    def _draw_message_id(self, runtime_id, to):
        """send's reads before it makes them -> the new message's ID, or None: the insert draws it."""
        return None

    def _runtime_at_commit(self, runtime_id):
        """runtime(runtime_id) as this transaction leaves it (see _leases_at_commit)."""
        out = self.runtime(runtime_id)
        return lambda: out

    def _leases_at_commit(self, runtime_id, resources):
        """leases_of(runtime_id, resources) as this transaction leaves them, for its caller:
        -> a function returning them once the transaction has committed (SQLite reads them now;
        pg.Store sends the read just before COMMIT)."""
        out = self.leases_of(runtime_id, resources)
        return lambda: out

    def _reap_inline(self, now, names=(), runtime_id=None, conversation=None):
        """The reap a hot operation runs first: all of _reap (pg.Store: only what it touches)."""
        return self._reap(now)

    _HOLDING_STATES = ("active", "resumed")

    def _hold_for_work(self, rt, now):
        """A runtime whose process died while it ran a managed work's conversation (a crash, a
        kill -9, a reboot) leaves unlanded changes in the clone, which its leases protect: they
        belong to the work, not to the process. So a holder runtime (labelled `parked`, as when
        the work is parked) supersedes it and keeps them until the work resumes (the resumed
        conversation's registration takes them), closes or is removed. -> {id, work} or None
        when rt held no lease or runs no live work. Inside a transaction."""
        w = self._work_holding(rt, now)
        if w is None or not self.q("SELECT 1 FROM leases WHERE runtime = ? LIMIT 1", (rt["id"],)).fetchone():
            return None
        holder = self.hold_parked(rt["conversation"], w["id"], now=now, source="crash")
        return {"id": holder["id"], "work": w["handle"]} if holder else None

    def session_end(self, runtime_id, reason="session-end", now=None):
        """The harness said its session ended (SessionEnd). Asked for by coord (`work close` or
        `archive` marks the work `closing` before killing its window; `park` has already handed the
        leases to a holder) or outside any live work: end the attachment, releasing its leases,
        as bye does. Otherwise (a killed window, a hung-up terminal, a reboot, the person's /exit)
        it is a crash as far as the work is concerned: its leases protect unlanded changes in the
        clone, so a holder keeps them for the work, as _hold_for_work does for a dead process, until
        the work resumes (the resumed conversation takes them back), closes or is removed.
        -> {"held_by": holder ID, "work": handle} when kept, else {"released": [names]}."""
        now = _now(now)
        with self.transaction():
            rt = self.runtime(runtime_id)
            if rt is None or rt["ended_at"] is not None:
                return {"released": []}
            w = self._work_holding(rt, now)
            if w is not None and not w["data"].get("closing") and \
                    self.q("SELECT 1 FROM leases WHERE runtime = ? LIMIT 1", (runtime_id,)).fetchone():
                holder = self.hold_parked(rt["conversation"], w["id"], now=now, source=reason)
                if holder is not None:
                    self.audit("runtime.bye", runtime_id, runtime_id, now, reason=reason, released=[],
                               held_by=holder["id"], work=w["handle"])
                    return {"held_by": holder["id"], "work": w["handle"]}
            released = self._drop_leases(runtime_id, "lease.released", now)
            self.conn.execute("UPDATE runtimes SET ended_at = ?, end_reason = ? WHERE id = ?", (now, reason, runtime_id))
            self.audit("runtime.bye", runtime_id, runtime_id, now, reason=reason, released=released)
            return {"released": released}

    def held_again(self, runtime_id):
        """True when `runtime_id` took over from a holder that kept its work's leases (a parked or
        interrupted work resumed): SessionStart says which leases it holds again."""
        return self.q("SELECT 1 FROM runtimes WHERE superseded_by = ? AND harness = ? LIMIT 1",
                      (runtime_id, PARKED)).fetchone() is not None

    def _work_holding(self, rt, now):
        """The live work whose leases dead runtime `rt` holds (read only): rt is an unended
        top-level runtime with a process, its conversation is the one a live work records, and
        no other runtime of that conversation lives. Readers (conflicts, all_leases) count such a
        lease as held, as the next reap makes it (_hold_for_work), so `check` and the write hook
        never see a crashed agent's files free in between."""
        if rt is None or rt["ended_at"] is not None or rt["agent_id"] or not rt["conversation"] \
                or rt["pid"] is None or rt["harness"] in UNCLOCKED:
            return None
        other = self.find_conversation_runtime(rt["conversation"], now=now)
        if other is not None and other["id"] != rt["id"]:
            return None  # the conversation runs on elsewhere: its live attachment is the agent
        rows = self.q("SELECT id FROM work WHERE state IN (%s) ORDER BY created_at, id" % ", ".join(
            "?" * len(self._HOLDING_STATES)), self._HOLDING_STATES).fetchall()
        for (wid,) in rows:
            w = self.work(wid)
            if rt["conversation"] in work_conversations(w):
                return w
        return None

    # -- who is calling: the facts about the caller (its environment's identity variables, its
    #    process ancestry, a terminal's person) are gathered in the calling process
    #    (caller_facts, person_key, ancestor_processes); the decide_* methods take them as data,
    #    so the host process of a PostgreSQL project runs them for its clients. The methods
    #    named as before gather and decide in one process.

    def caller(self, explicit=None, environ=None, now=None, person=True):
        """Who is calling: --runtime, COORD_RUNTIME_ID, the harness session variable, then the
        registered harness process among the caller's ancestors (pid and start time), then,
        with no harness variable and no harness process above it, the person at this terminal
        (person_runtime: registered on first use; person=False finds one without registering)."""
        return self.decide_caller(caller_facts(explicit, environ), now=now, person=person)

    def decide_caller(self, facts, now=None, person=True):
        """caller() on the facts caller_facts gathered (in the calling process)."""
        explicit = facts.get("explicit")
        if explicit or facts.get("runtime_id"):
            named = self.resolve_runtime(explicit or facts["runtime_id"])
            chain = [tuple(x) for x in _fact(facts, "chain")]
            self.confirm_named(named, chain, key=lambda: _fact(facts, "person")[0])
            if not explicit:
                later = self.conversation_successor(named, now, chain)
                if later is not None:
                    return later
            return self.usable_runtime(named["id"], now)
        session, thread = facts.get("session"), facts.get("thread")
        tried = []
        if thread and session and thread != session:
            rt = self.find_conversation_runtime(session, agent_id=thread, now=now)
            tried.append("subagent %s of conversation %s" % (thread, session))
            if rt:
                return rt
        conversation = session or thread
        if conversation:
            tried.append("conversation %s" % conversation)
            rt = self.find_conversation_runtime(conversation, now=now)
            if rt:
                self.confirm_attachment(rt, facts.get("chain"))  # gathered by confirm_attachment locally
                return rt
        chain = [tuple(x) for x in _fact(facts, "chain")]
        here, hp = self._here()  # hosts: the caller's chain is this host's pids
        for pid, start in chain:
            rows = self.q("SELECT %s FROM runtimes WHERE pid = ? AND ended_at IS NULL AND agent_id IS NULL%s"
                          % (self._RUNTIME_COLS, here), [pid] + hp).fetchall()
            found = [rt for rt in map(self._row_runtime, rows)
                     if (rt["pid_start"] is None or start is None or rt["pid_start"] == start)
                     and self.runtime_live(rt, now)]
            if len(found) == 1:
                return found[0]
            if len(found) > 1:
                raise Refused("more than one live runtime belongs to process %d: %s" % (
                    pid, ", ".join(rt["handle"] for rt in found)), "name one with --runtime HANDLE")
        tried.append("process ancestry")
        if not conversation:
            hpid, harness = _fact(facts, "harness_ancestor")
            if hpid is None:
                rt = self.decide_person_runtime(_fact(facts, "person"), register=person, now=now)
                if rt is not None:
                    return rt
                tried.append("this terminal's person (not registered yet)" if _fact(facts, "person")[0] is not None
                             else "not a person: an agent's variable, or a pane of the tmux server coord runs agents in")
            else:
                tried.append("not a person: %s (pid %d) runs above this process" % (harness, hpid))
        raise Refused("cannot tell which runtime is calling (tried %s)" % ", ".join(tried),
                      "register with: coord hello, then pass --runtime HANDLE or export COORD_RUNTIME_ID=<id>")

    def person_runtime(self, register=True, now=None, environ=None, skip=()):
        """The live runtime of the person at this terminal (person_key: positive evidence of a
        terminal person, else the user alone), registered when there is none and `register`;
        else None (also when an agent is evident). One key, one runtime: every command from the
        same login session finds it, and it lives as long as that session's leader (no clock)."""
        return self.decide_person_runtime(list(person_key(environ, skip)), register=register, now=now)

    def decide_person_runtime(self, person, register=True, now=None):
        """person_runtime() on `person`, the (key, pid, start, name) person_key gave the caller."""
        key, pid, start, _name = person
        if key is None:
            return None
        rt = self.find_conversation_runtime(key, now=now)
        if rt is not None or not register:
            return rt
        # No recorded cwd: a person moves around; their shell's own working directory (the
        # session leader's) is what cleanup sees, and the user alone has none to pin.
        return self.register(conversation=key, harness=PERSON, pid=pid, pid_start=start, cwd=None,
                             source="person", now=now)

    def confirm_named(self, named, chain=None, environ=None, key=None):
        """Refuse a caller naming a runtime (--runtime, COORD_RUNTIME_ID) its processes may not
        act as: the ancestry decides, whatever is named.

        - A process that descends from the harness process of a superseded attachment (the
          newest attachment that process registered was superseded: its conversation was resumed
          elsewhere) acts as no runtime at all but the one its own harness process holds.
        - A person's runtime is acted as only from its own terminal: the caller's person_key
          (`key`, else gathered here from `environ`) must be that runtime's key (a terminal's
          person by positive evidence; the user alone by a caller that shows no agent)."""
        chain = ancestor_processes() if chain is None else [tuple(x) for x in chain]
        own = [pid for pid, _ in chain]
        if named["pid"] and self.pid_judged_here(named) and any(pid == named["pid"] and (named["pid_start"] is None or start is None
                                                         or start == named["pid_start"]) for pid, start in chain):
            own = own[:own.index(named["pid"])]  # below the named runtime's own harness process: it decides
        if own:
            here, hp = self._here()
            rows = self.q("SELECT %s FROM runtimes WHERE agent_id IS NULL AND pid IN (%s)%s ORDER BY started_at DESC"
                          % (self._RUNTIME_COLS, ",".join("?" * len(own)), here), list(own) + hp).fetchall()
            starts = dict(chain)
            newest = {}
            for rt in map(self._row_runtime, rows):
                if rt["pid_start"] is None or starts.get(rt["pid"]) is None or rt["pid_start"] == starts[rt["pid"]]:
                    newest.setdefault(rt["pid"], rt)
            for pid in own:
                old = newest.get(pid)
                if old is None:
                    continue
                if old["superseded_by"] and old["id"] != named["id"]:
                    new = self.successor(old)
                    raise Refused("this process's attachment %s was superseded by %s: the conversation was resumed in"
                                  " another process, so this process may not act as %s either" % (
                                      old["handle"], new["handle"], named["handle"]),
                                  STALE_HINT % new["handle"], superseded_by=new["handle"])
                break  # the nearest harness process with a live attachment decides
        if person_uid(named) is not None and named["harness"] == PERSON:
            key = key() if callable(key) else (person_key(environ)[0] if key is None else key)
            if key != named["conversation"]:
                raise Refused("%s is a person's runtime (%s): only a command typed there acts as it"
                              % (named["handle"], person_terminal(named)),
                              "register a runtime of your own: coord hello, then pass --runtime HANDLE",
                              reason="not-the-person")

    def conversation_successor(self, named, now=None, chain=None):
        """For a top-level runtime that ended without being superseded (reaped, bye), the live
        runtime its conversation has now (the hook registered it again), if the caller may act
        as it: the rule the hooks use (confirm_attachment) holds. Else None when there is none,
        or Refused with the export line of the successor."""
        if named["ended_at"] is None or named["superseded_by"] or named["agent_id"]:
            return None
        later = self.find_conversation_runtime(named["conversation"], now=now)
        if later is None or later["id"] == named["id"]:
            return None
        chain = ancestor_processes() if chain is None else [tuple(x) for x in chain]
        if later["pid"] and named["pid"] and later["pid"] != named["pid"] and self.pid_judged_here(named) and \
                any(pid == named["pid"] for pid, _ in chain):
            # The caller descends from the ended attachment's own process, not the successor's.
            raise Refused("runtime %s has ended (%s); its conversation now runs as %s in another process" % (
                named["handle"], named["end_reason"] or "bye", later["handle"]),
                "if this session is that conversation: export COORD_RUNTIME_ID=%s" % later["id"],
                successor=later["handle"])
        try:
            self.confirm_attachment(later, chain)
        except Refused as exc:
            raise Refused(exc.message, "%s; if this session is that conversation: export COORD_RUNTIME_ID=%s"
                          % (exc.hint, later["id"]), successor=later["handle"])
        return later

    def live_runtimes(self, include_ended=False, now=None):
        rows = self.q("SELECT %s FROM runtimes %s ORDER BY started_at, id" % (
            self._RUNTIME_COLS, "" if include_ended else "WHERE ended_at IS NULL")).fetchall()
        out = []
        for row in rows:
            rt = self._row_runtime(row)
            rt["live"] = self.runtime_live(rt, now)
            if rt["live"] or include_ended:
                out.append(rt)
        return out

    # -- leases

    def overlapping(self, resource, now=None, lapsed=False):
        """Unexpired (with lapsed: expired but kept, see _reap) leases overlapping `resource`
        (equal, ancestor or descendant), via the index: ancestors by equality, descendants by a
        key range."""
        rows = self.q(*self._overlapping_read(resource, _now(now), lapsed)).fetchall()
        keys = ("resource", "runtime", "mode", "purpose", "expires_at", "handle", "pid", "pid_start",
                "heartbeat_at", "ended_at", "harness", "host")
        return [dict(zip(keys, r)) for r in rows]

    def _overlapping_read(self, resource, now, lapsed=False):
        names = ancestors(resource)
        op = "<=" if lapsed else ">"
        sql = ("SELECT l.resource, l.runtime, l.mode, l.purpose, l.expires_at, r.handle, r.pid, r.pid_start,"
               " r.heartbeat_at, r.ended_at, r.harness, r.host FROM leases l JOIN runtimes r ON r.id = l.runtime"
               " WHERE l.resource IN (%s) AND l.expires_at " + op + " ?"
               " UNION ALL "
               "SELECT l.resource, l.runtime, l.mode, l.purpose, l.expires_at, r.handle, r.pid, r.pid_start,"
               " r.heartbeat_at, r.ended_at, r.harness, r.host FROM leases l JOIN runtimes r ON r.id = l.runtime"
               " WHERE l.resource > ? AND l.resource < ? AND l.expires_at " + op + " ?") % ",".join("?" * len(names))
        return sql, names + [now, resource + "/", resource + "0", now]

    def conflicts(self, resources, mode="exclusive", as_runtime=None, now=None):
        """Leases of other live runtimes that block `mode` on any of `resources` (read only)."""
        now = _now(now)
        out = []
        alive = {}
        for resource in resources:
            for lease in self.overlapping(resource, now):
                if lease["runtime"] == as_runtime or compatible(lease["mode"], mode):
                    continue
                rid = lease["runtime"]
                if rid not in alive:
                    alive[rid] = self.runtime_live(lease, now) or \
                        self._work_holding(self.runtime(rid), now) is not None
                if alive[rid] or (lease["mode"] == "exclusive" and self._dying_holder(lease, now)):
                    lease["requested"] = resource
                    out.append(lease)
        return out

    def write_conflicts(self, runtime_id, resources, now=None):
        """Leases of other live runtimes that block `runtime_id` (None: a writer coord does not
        know) from writing `resources`, each with the name it blocks as "requested"; every read
        in one snapshot, nothing written.

        A write is an exclusive request (the lease matrix), except that a writer whose own
        unexpired lease (of either mode) covers a name, itself or a directory above it, writes
        there as an appender: other runtimes' append leases on it do not block, exclusive ones do.
        """
        now = _now(now)
        with self.snapshot():
            self._prefetch("write_decision", resources, now)
            blocking = self.conflicts(resources, "exclusive", runtime_id, now)
            if runtime_id and any(b["mode"] == "append" for b in blocking):
                mine = [l["resource"] for l in self.leases_of(runtime_id) if l["expires_at"] > now]
                blocking = [b for b in blocking if b["mode"] != "append" or
                            not any(b["requested"] == m or b["requested"].startswith(m + "/") for m in mine)]
        return blocking

    _PEER_EXCLUSIVE_WHERE = (" FROM leases l JOIN runtimes r ON r.id = l.runtime WHERE l.mode = 'exclusive'"
                             " AND l.runtime != ? AND l.expires_at > ? AND r.ended_at IS NULL")

    def peer_exclusive_leases(self, runtime_id, limit, now=None):
        """Unexpired exclusive leases of runtimes other than `runtime_id` that have not ended:
        ([{resource, handle, purpose}] of the first `limit` by resource name, how many in all),
        read in one snapshot."""
        now = _now(now)
        where = self._PEER_EXCLUSIVE_WHERE
        with self.snapshot():
            rows = self.q("SELECT l.resource, r.handle, l.purpose" + where + " ORDER BY l.resource LIMIT ?",
                          (runtime_id, now, limit)).fetchall()
            total = self.q("SELECT count(*)" + where, (runtime_id, now)).fetchone()[0] if rows else 0
        return [dict(zip(("resource", "handle", "purpose"), r)) for r in rows], total

    # -- the host process's lease copy (docs/postgresql.md "The write
    #    decision from memory"): what the copy holds, read in one snapshot, and the hook's whole
    #    PreToolUse question as one operation, for when the copy cannot answer it

    _COPY_LEASES = "SELECT resource, runtime, mode, purpose, expires_at FROM leases ORDER BY resource, runtime"
    _COPY_HOSTS = "SELECT id, heartbeat_at, ttl, lease_delay FROM hosts"

    def lease_copy_read(self):
        """Every lease row (expired ones too, until reaped: a heartbeat may lengthen them without a
        wake-up, so the copy must know they are there), every runtime that has not ended or holds
        a lease, and the hosts' beats: one snapshot, one wait on PostgreSQL."""
        runtimes = ("SELECT %s FROM runtimes WHERE ended_at IS NULL OR id IN (SELECT runtime FROM leases)"
                    % self._RUNTIME_COLS)
        with self.snapshot():
            self._prefetch(lambda: [(self._COPY_LEASES, ()), (runtimes, ()), (self._COPY_HOSTS, ())])
            leases = self.q(self._COPY_LEASES).fetchall()
            rts = self.q(runtimes).fetchall()
            hosts = self.q(self._COPY_HOSTS).fetchall()
        return {"leases": [tuple(r) for r in leases], "runtimes": [tuple(r) for r in rts],
                "hosts": [tuple(r) for r in hosts]}

    def hook_write_decision(self, conversation, runtime_id, resources, now=None):
        """The hook's PreToolUse question in one operation: the conversation's live runtime (when
        runtime_id, a subagent's, is not given) and what blocks it from writing `resources`, in one
        snapshot. -> {"runtime", "blocking", "from": "database"}."""
        now = _now(now)
        with self.snapshot():
            rt = None
            if not runtime_id:
                rt = self.find_conversation_runtime(conversation, now=now)
            blocking = self.write_conflicts(runtime_id or (rt and rt["id"]), resources, now=now)
        return {"runtime": rt, "blocking": blocking, "from": "database"}

    # SessionStart's reads as operations the lease copy can answer (host.py COPY_OPS;
    # pg.LeaseCopy has the same methods), else one snapshot each.

    def hook_conversation_runtime(self, conversation, now=None):
        """find_conversation_runtime as one operation: -> {"runtime", "from": "database"}."""
        return {"runtime": self.find_conversation_runtime(conversation, now=now), "from": "database"}

    def hook_session_leases(self, runtime_id, limit, now=None):
        """SessionStart's lease lines in one operation: the names of the runtime's leases (leases_of)
        and peers' exclusive leases (peer_exclusive_leases), in one snapshot (one wait on
        PostgreSQL). -> {"mine": [names], "held": [...], "total": n, "from": "database"}."""
        now = _now(now)
        with self.snapshot():
            self._prefetch(lambda: self._session_lease_reads(runtime_id, limit, now))
            mine = [l["resource"] for l in self.leases_of(runtime_id)]
            held, total = self.peer_exclusive_leases(runtime_id, limit, now)
        return {"mine": mine, "held": held, "total": total, "from": "database"}

    def _session_lease_reads(self, runtime_id, limit, now):
        """SessionStart's lease reads, as (sql, params): the runtime's own leases (leases_of), and
        the peers' exclusive leases it is shown (peer_exclusive_leases) with their count."""
        where = self._PEER_EXCLUSIVE_WHERE
        return [(self._LEASES_OF, (runtime_id,)),
                ("SELECT l.resource, r.handle, l.purpose" + where + " ORDER BY l.resource LIMIT ?",
                 (runtime_id, now, limit)),
                ("SELECT count(*)" + where, (runtime_id, now))]

    # The same, never from the copy: right after this hook's own registration, which the copy may
    # not have seen yet (its wake-up can still be on the way), so it would list the leases the
    # new runtime took over as a peer's.
    session_leases = hook_session_leases

    def claim(self, runtime_id, resources, mode="exclusive", purpose="", ttl=None, now=None):
        """Take every lease or none. Returns the lease records."""
        if mode not in ("exclusive", "append"):
            raise UsageError("mode must be exclusive or append")
        purpose = clean_text(purpose or "", MAX_PURPOSE)
        ttl = self.lease_ttl if ttl is None else check_float(ttl, "--ttl", *LEASE_TTL_RANGE)
        now = _now(now)
        resources = unique(resources)
        return self._claim(runtime_id, resources, mode, purpose, ttl, now)

    def _claim(self, runtime_id, resources, mode, purpose, ttl, now, expect=None):
        with self.transaction():
            if expect is not None:  # pg.Store's guess in one wait, checked by the server
                self.conn.expect(*expect)
            self._prefetch("claim", runtime_id, resources, now)
            self.usable_runtime(runtime_id, now)
            self._reap_inline(now, resources, runtime_id)
            blocking = self.conflicts(resources, mode, runtime_id, now)
            if blocking:
                raise Refused(describe_conflicts(blocking),
                              conflict_hint(blocking[0]), conflicts=[public_lease(b) for b in blocking])
            me = None
            for resource in resources:
                for lease in self.overlapping(resource, now, lapsed=True):
                    if lease["runtime"] != runtime_id and not compatible(lease["mode"], mode):
                        me = me or self.runtime(runtime_id)
                        self._lose(lease["runtime"], lease["resource"], lease["mode"], runtime_id, me["handle"], now)
            for resource in resources:
                self.conn.execute(
                    "INSERT INTO leases (resource, runtime, mode, purpose, acquired_at, expires_at, ttl)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (resource, runtime) DO UPDATE SET"
                    " mode = excluded.mode, purpose = excluded.purpose, expires_at = max(expires_at, excluded.expires_at),"
                    " ttl = excluded.ttl", (resource, runtime_id, mode, purpose, now, now + ttl, ttl))
                self.audit("lease.claimed", runtime_id, resource, now, mode=mode, purpose=purpose, ttl=ttl)
            self.conn.execute("UPDATE runtimes SET heartbeat_at = %s WHERE id = ?" % self._BEAT, (now, runtime_id))
            out = self._leases_at_commit(runtime_id, resources)
        return out()

    _LEASES_OF = ("SELECT resource, mode, purpose, acquired_at, expires_at, ttl FROM leases WHERE runtime = ?"
                  " ORDER BY resource")

    def leases_of(self, runtime_id, resources=None):
        return self._lease_rows(self.q(self._LEASES_OF, (runtime_id,)).fetchall(), resources)

    def _lease_rows(self, rows, resources=None):
        keys = ("resource", "mode", "purpose", "acquired_at", "expires_at", "ttl")
        out = [dict(zip(keys, r)) for r in rows]
        if resources is not None:
            wanted = set(resources)
            out = [l for l in out if l["resource"] in wanted]
        return out

    def renew(self, runtime_id, resources=None, ttl=None, now=None):
        """Extend the named (or all) leases, lapsed ones too unless a peer took them meanwhile
        (see _revive). Refused, renewing nothing, when a named lease is not held or when there
        is nothing to renew; the refusal names the leases lost since the last boundary."""
        now = _now(now)
        if ttl is not None:
            ttl = check_float(ttl, "--ttl", *LEASE_TTL_RANGE)
        refusal = None
        with self.transaction():
            self._prefetch("renew", runtime_id, now)
            rt = self.usable_runtime(runtime_id, now)
            self._reap_inline(now, runtime_id=runtime_id)
            held = {l["resource"]: l for l in self.leases_of(runtime_id)}
            names = unique(resources) if resources else sorted(held)
            missing = [r for r in names if r not in held]
            if not missing and names:
                revived = self._revive(runtime_id, now, set(names), ttl, rt=rt)
                held = {l["resource"]: l for l in self.leases_of(runtime_id)}
                missing = [r for r in names if r not in held]
            if missing or not names:
                lost = self.take_lost(runtime_id)
                gone = set(l["resource"] for l in lost)
                told = ["%s (lost to %s)" % (l["resource"], l["to"]) for l in lost]
                told += [r for r in missing if r not in gone]
                again = unique([l["resource"] for l in lost] + missing)
                refusal = Refused("nothing renewed: %s" % ("not held (expired, lost or never claimed): %s"
                                                           % ", ".join(told) if told else "you hold no leases"),
                                  "claim again: coord claim %s" % " ".join(again) if again else
                                  "claim what you work on: coord claim PATH", lost=lost)
            else:
                for name in names:
                    if name in revived:
                        continue
                    t = held[name]["ttl"] if ttl is None else ttl
                    self.conn.execute("UPDATE leases SET expires_at = max(expires_at, ?), ttl = ? WHERE resource = ?"
                                      " AND runtime = ?", (now + t, t, name, runtime_id))
                    self.audit("lease.renewed", runtime_id, name, now, ttl=t)
                self.conn.execute("UPDATE runtimes SET heartbeat_at = %s WHERE id = ?" % self._BEAT,
                                  (now, runtime_id))
                out = self._leases_at_commit(runtime_id, names)
        if refusal is not None:
            raise refusal
        return out()

    def release(self, runtime_id, resources=None, everything=False, now=None):
        """Release the named leases (all of them must be held) or, with everything, all leases."""
        now = _now(now)
        with self.transaction():
            self._prefetch("release", runtime_id)
            self.usable_runtime(runtime_id, now)
            if everything:
                return self._drop_leases(runtime_id, "lease.released", now)
            names = unique(resources or [])
            held = {l["resource"] for l in self.leases_of(runtime_id)}
            missing = [r for r in names if r not in held]
            if missing:
                holders = []
                for r in missing:
                    for lease in self.overlapping(r, now):
                        if lease["resource"] == r:
                            holders.append("%s (held by %s)" % (r, lease["handle"]))
                raise Refused("not held by you: %s%s" % (", ".join(missing),
                              "; " + ", ".join(holders) if holders else ""),
                              "coord list shows who holds what")
            for name in names:
                self.conn.execute("DELETE FROM leases WHERE resource = ? AND runtime = ?", (name, runtime_id))
                self.audit("lease.released", runtime_id, name, now)
            return names

    def release_landed(self, runtime_id, resources, work_id, by, now=None):
        """Release `resources` of `runtime_id` because work `work_id` that they covered landed
        (proven by runtime `by`), each audited; held ones only, whatever the holder's state (a
        parked holder too). Meant for the proof's own transaction. -> the released names."""
        now = _now(now)
        with self.transaction():
            held = {l["resource"] for l in self.leases_of(runtime_id)}
            gone = [r for r in unique(resources) if r in held]
            for name in gone:
                self.conn.execute("DELETE FROM leases WHERE resource = ? AND runtime = ?", (name, runtime_id))
                self.audit("lease.released", runtime_id, name, now, landed=work_id, by=by)
            return gone

    def all_leases(self, now=None):
        now = _now(now)
        rows = self.q("SELECT l.resource, l.runtime, r.handle, l.mode, l.purpose, l.acquired_at, l.expires_at,"
                      " r.pid, r.pid_start, r.heartbeat_at, r.ended_at, r.harness, r.host"
                      " FROM leases l JOIN runtimes r ON r.id = l.runtime WHERE l.expires_at > ?"
                      " AND r.ended_at IS NULL ORDER BY l.resource, r.handle", (now,)).fetchall()
        keys = ("resource", "runtime", "handle", "mode", "purpose", "acquired_at", "expires_at")
        out, alive = [], {}
        for r in rows:
            # Held means what conflicts() would enforce: unexpired, and its runtime live. This
            # reads without reaping, so it never waits for the write lock or writes audit rows.
            holder = dict(zip(("pid", "pid_start", "heartbeat_at", "ended_at", "harness", "host"), r[7:]))
            if r[1] not in alive:
                alive[r[1]] = self.runtime_live(holder, now) or \
                    self._work_holding(self.runtime(r[1]), now) is not None
            if alive[r[1]] or (r[3] == "exclusive" and self._dying_holder(holder, now)):
                out.append(dict(zip(keys, r)))
        return out

    # -- messages

    def send(self, runtime_id, body, to, kind="note", now=None):
        """Store one message and queue it for its recipients (a broadcast snapshots live peers now)."""
        now = _now(now)
        if not isinstance(body, str) or not body.strip():
            raise UsageError("empty message body")
        body = text_in(body)
        size = len(body.encode("utf-8", "surrogatepass"))
        if size > MAX_BODY:
            raise UsageError("message body is %d bytes, larger than the limit of %d bytes (so that one message"
                             " always fits the %d bytes a hook shows at once)" % (size, MAX_BODY, CONTEXT_BUDGET),
                             "put long content in a file and send its path")
        kind = clean_text(kind or "note", 40) or "note"
        waiting = None
        with self.transaction():
            mid = self._draw_message_id(runtime_id, to)
            sender = self.usable_runtime(runtime_id, now)
            self._reap_inline(now)
            handles = {}  # recipient ID -> handle, from the records read here
            if to == "*":
                live = [rt for rt in self.live_runtimes(now=now) if rt["id"] != runtime_id]
                recipients = [rt["id"] for rt in live]
                handles.update((rt["id"], rt["handle"]) for rt in live)
            else:
                try:
                    target = self.resolve_runtime(to)
                except Refused:
                    token = to.strip().lower()
                    work = self.q("SELECT id FROM work WHERE handle = ? OR id = ?", (token, token)).fetchone()
                    if work is None:
                        raise
                    target = self.work_recipient(self.work(work[0]), now)
                    waiting = not self.runtime_live(target, now) or target["harness"] == PARKED
                else:
                    while target["superseded_by"]:
                        target = self.runtime(target["superseded_by"])
                    if not self.runtime_live(target, now):
                        raise Refused("%s is not live" % target["handle"], "coord list shows live runtimes")
                recipients = [target["id"]]
                handles[target["id"]] = target["handle"]
            digest = hashes().sha256(body.encode("utf-8", "surrogatepass")).hexdigest()
            if mid is None:
                cur = self.conn.execute(
                    "INSERT INTO messages (sender, kind, body, digest, broadcast, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (runtime_id, kind, body, digest, 1 if to == "*" else 0, now))
                mid = cur.lastrowid
            else:  # PostgreSQL: the ID was drawn with the reads (pg.Store), so the insert waits for nothing
                self.conn.execute(
                    "INSERT INTO messages (id, sender, kind, body, digest, broadcast, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (mid, runtime_id, kind, body, digest, 1 if to == "*" else 0, now))
            self.conn.executemany("INSERT INTO deliveries (message, recipient, state) VALUES (?, ?, 'queued')",
                                  [(mid, r) for r in recipients])
            self.audit("message.sent", runtime_id, str(mid), now, kind=kind, digest=digest,
                       recipients=sorted(recipients), broadcast=(to == "*"))
            out = {"id": mid, "sender": sender["handle"], "kind": kind, "digest": digest,
                   "recipients": [handles[r] if r in handles else self.runtime(r)["handle"] for r in recipients]}
            if waiting is not None:
                out["waiting"] = waiting  # to a work whose agent is parked or stopped: kept for its resume
            return out

    def work_recipient(self, w, now=None):
        """Who a message to work `w` is for: the agent that runs it (the live runtime of the
        conversation its tmux record names, a parked holder included), else, when that agent is
        not running, its newest runtime, which the conversation's next registration (resume)
        inherits the message from; for a work without a harness conversation, its owner (the
        recorded runtime or its successor) while live. Refused when there is no one."""
        if w["state"] in ("failed", "removed"):
            raise Refused("work %s is %s; nothing runs it" % (w["handle"], w["state"]), "coord list shows live runtimes")
        conv = work_conversation(w)[0]
        if conv:
            rt = self.find_conversation_runtime(conv, now=now) or self.last_runtime_of(conv)
            if rt is not None:
                return self.successor(rt)
        inside = self._agent_inside(w, now)
        if inside is not None:
            return inside
        start = self.runtime(w["runtime"]) if w["runtime"] else None
        owner = self.successor(start) if start is not None else None
        if owner is not None and self.runtime_live(owner, now) and (w["data"].get("adopted") or {}).get("by") == \
                owner["id"] and person_uid(owner) is not None:
            raise Refused("work %s was adopted by %s and records no agent, and no agent is registered inside %s"
                          % (w["handle"], owner["handle"], w["path"]),
                          "start its agent: coord work start %s, then send again" % w["handle"])
        if owner is not None and self.runtime_live(owner, now):
            return owner
        raise Refused("work %s has no runtime to deliver to: no harness conversation is recorded for it and its owner"
                      " has ended" % w["handle"], "coord work start %s, then send again" % w["handle"])

    def _agent_inside(self, w, now=None):
        """The live top-level agent registered inside work `w`'s clone (its recorded cwd; a
        person, a parked holder and a subagent are not it), the newest when several; None."""
        path = os.path.realpath(w["path"]) if w.get("path") else None
        if not path:
            return None
        found = None
        for rt in self.live_runtimes(now=now):
            cwd = os.path.realpath(rt["cwd"]) if rt.get("cwd") else None
            if cwd and (cwd == path or cwd.startswith(path + os.sep)) and not rt.get("agent_id") and \
                    rt.get("harness") not in (PERSON, PARKED) and person_uid(rt) is None:
                found = rt
        return found

    _MSG_SQL = ("SELECT m.id, m.kind, m.body, m.digest, m.created_at, s.handle, d.state, d.shown"
                " FROM deliveries d JOIN messages m ON m.id = d.message JOIN runtimes s ON s.id = m.sender"
                " WHERE d.recipient = ? AND d.state != 'acked' ORDER BY m.id")

    def open_messages(self, runtime_id):
        keys = ("id", "kind", "body", "digest", "created_at", "sender", "state", "shown")
        return [dict(zip(keys, r)) for r in self.q(self._MSG_SQL, (runtime_id,)).fetchall()]

    def unacked_counts(self):
        """{runtime id: number of messages for it not yet acknowledged}; a read, no lock."""
        return dict(self.q("SELECT recipient, COUNT(*) FROM deliveries WHERE state != 'acked'"
                           " GROUP BY recipient").fetchall())

    def inbox(self, runtime_id, peek=False, now=None):
        """Unacknowledged messages; without peek, queued ones become delivered."""
        now = _now(now)
        if peek:
            return self.open_messages(runtime_id)
        with self.transaction():
            self.usable_runtime(runtime_id, now)
            msgs = self.open_messages(runtime_id)
            self._mark_delivered(runtime_id, [m["id"] for m in msgs if m["state"] == "queued"], now)
            self.conn.execute("UPDATE deliveries SET shown = shown + 1 WHERE recipient = ? AND state != 'acked'",
                              (runtime_id,))
        return msgs

    def _mark_delivered(self, runtime_id, ids, now):
        for mid in ids:
            self.conn.execute("UPDATE deliveries SET state = 'delivered', delivered_at = ? WHERE message = ?"
                              " AND recipient = ? AND state = 'queued'", (now, mid, runtime_id))
            self.audit("message.delivered", runtime_id, str(mid), now)

    def ack(self, runtime_id, ids, now=None):
        """Acknowledge messages addressed to this runtime; already acknowledged ones are fine."""
        now = _now(now)
        ids = [_message_id(i) for i in ids]
        with self.transaction():
            self.usable_runtime(runtime_id, now)
            states = dict(self.q("SELECT message, state FROM deliveries WHERE recipient = ? AND message IN (%s)"
                                 % ",".join("?" * len(ids)), [runtime_id] + ids).fetchall())
            strangers = [i for i in ids if i not in states]
            if strangers:
                raise Refused("message %s is not addressed to you" % ", ".join(map(str, strangers)),
                              "coord inbox --peek lists your messages")
            acked = []
            for mid in ids:
                if states[mid] != "acked":
                    self.conn.execute("UPDATE deliveries SET state = 'acked', acked_at = ? WHERE message = ?"
                                      " AND recipient = ?", (now, mid, runtime_id))
                    self.audit("message.acked", runtime_id, str(mid), now)
                    acked.append(mid)
                    states[mid] = "acked"
            return acked

    def ack_shown(self, runtime_id, now=None):
        """`ack --all`: acknowledge every message addressed to this runtime whose body it was
        shown (state delivered: a hook injected it or `inbox` printed it), read and acked in one
        transaction, so a message that arrives after that read, or one still queued (never shown),
        stays open. -> (acked IDs, number of queued messages left open)."""
        now = _now(now)
        with self.transaction():
            self.usable_runtime(runtime_id, now)
            ids = [r[0] for r in self.q("SELECT message FROM deliveries WHERE recipient = ? AND state = 'delivered'"
                                        " ORDER BY message", (runtime_id,)).fetchall()]
            for mid in ids:
                self.conn.execute("UPDATE deliveries SET state = 'acked', acked_at = ? WHERE message = ?"
                                  " AND recipient = ?", (now, mid, runtime_id))
                self.audit("message.acked", runtime_id, str(mid), now, all=True)
            unseen = self.q("SELECT COUNT(*) FROM deliveries WHERE recipient = ? AND state = 'queued'",
                            (runtime_id,)).fetchone()[0]
        return ids, unseen

    _OPEN_SQL = ("SELECT m.id, m.kind, length(CAST(m.body AS BLOB)), m.digest, s.handle, d.state"
                 " FROM deliveries d JOIN messages m ON m.id = d.message JOIN runtimes s ON s.id = m.sender"
                 " WHERE d.recipient = ? AND d.state != 'acked' ORDER BY m.id")

    def pending_context(self, runtime_id, prefix=".coord/coord", now=None, budget=CONTEXT_BUDGET):
        """What a hook boundary should inject for this runtime now (at most `budget` bytes, see
        render_context), or None.

        A queued message's body is shown once and the message becomes delivered; later
        boundaries carry a compact reminder (ID, sender, kind, digest, recovery command) until
        it is acknowledged. A body that does not fit stays queued, counted and pointed to inbox:
        nothing is marked delivered that was not injected.
        """
        if not self.q("SELECT 1 FROM deliveries WHERE recipient = ? AND state != 'acked' LIMIT 1",
                      (runtime_id,)).fetchone():
            return None  # the common case: one indexed read, no write
        now = _now(now)
        keys = ("id", "kind", "size", "digest", "sender", "state")
        with self.transaction():
            # Re-read under the write lock, so parallel hooks never both show the same body.
            msgs = [dict(zip(keys, r)) for r in self.q(self._OPEN_SQL, (runtime_id,)).fetchall()]
            if not msgs:
                return None
            text, fresh, shown = render_context(
                msgs, prefix, budget,
                lambda m: self.q("SELECT body FROM messages WHERE id = ?", (m["id"],)).fetchone()[0])
            self._mark_delivered(runtime_id, fresh, now)
            if shown:
                self.conn.execute("UPDATE deliveries SET shown = shown + 1 WHERE recipient = ? AND message IN (%s)"
                                  % ",".join("?" * len(shown)), [runtime_id] + shown)
        return text

    def boundary_context(self, runtime_id, prefix=".coord/coord", budget=CONTEXT_BUDGET, now=None):
        """A hook boundary's notices for this runtime: (the lost-lease line, "" for none; the open
        messages' context in what is left of `budget`, or None), as lost_line(take_lost(...))
        and then pending_context(budget - that line)."""
        lost = lost_line(self.take_lost(runtime_id), prefix)
        used = len(lost.encode("utf-8", "replace")) + 1 if lost else 0
        return lost, self.pending_context(runtime_id, prefix=prefix, now=now, budget=max(0, budget - used))

    # -- work records (the `work` commands own their meaning; this is storage only)

    _WORK_COLS = ("id", "handle", "task", "state", "path", "scratch_root", "source", "conversation", "runtime",
                  "token", "created_at", "updated_at", "data")

    def _row_work(self, row):
        import json
        if row is None:
            return None
        w = dict(zip(self._WORK_COLS, row))
        w["data"] = json.loads(w["data"] or "{}")
        return w

    def insert_work(self, task, state, token, path=None, scratch_root=None, source=None, conversation=None,
                    runtime=None, data=None, now=None, work_id=None):
        """Insert a work record with a fresh ID whose handle is free; call inside a transaction."""
        import json
        now = _now(now)
        for _ in range(16):
            wid = work_id or new_uuid()
            handle = handle_for(wid, DOMAIN_WORK)
            if not self.q("SELECT 1 FROM work WHERE handle = ?", (handle,)).fetchone():
                break
            if work_id:
                raise Refused("work handle %s collides with an existing record" % handle)
        self.conn.execute(
            "INSERT INTO work (%s) VALUES (%s)" % (", ".join(self._WORK_COLS), ",".join("?" * len(self._WORK_COLS))),
            (wid, handle, task, state, path, scratch_root, source, conversation, runtime, token, now, now,
             json.dumps(data or {}, sort_keys=True)))
        return self.work(wid)

    def work(self, work_id):
        return self._row_work(self.q("SELECT %s FROM work WHERE id = ?" % ", ".join(self._WORK_COLS),
                                     (work_id,)).fetchone())

    def resolve_work(self, token, by_task=False):
        """A work record by exact handle or full UUID; with `by_task` (commands that only read or
        launch: inspect, attach, start, resume, `send --to`) also by the task of exactly one
        live work. A task name where the exact handle is needed (what closes, lands or deletes)
        is a TaskName refusal naming the handles it stands for; see docs/workspace.md, Names."""
        try:
            kind, value = _identity_kind(token, "work")
        except UsageError:
            named = self.works_by_task(token)
            if by_task and len(named) == 1:
                return named[0]
            if named:
                raise TaskName(token, named, by_task)
            raise UsageError("%r is not an exact five-word work handle, a full UUID or the task of a live work"
                             " (prefixes never resolve)" % (token or "").strip(), WORK_LIST_HINT)
        col = "id" if kind == "id" else "handle"
        w = self._row_work(self.q("SELECT %s FROM work WHERE %s = ?" % (", ".join(self._WORK_COLS), col),
                                  (value,)).fetchone())
        if w is None:
            raise Refused("no work record %s" % value, "coord work list shows work handles")
        return w

    # Works that a task name may stand for: not failed, removed or archived (finished).
    TASK_NAMED_EXCLUDED = ("failed", "removed", "archived")

    def works_by_task(self, task):
        """The live works (state not in TASK_NAMED_EXCLUDED) whose task is exactly `task`
        (surrounding blanks ignored), oldest first."""
        task = (task or "").strip()
        if not task:
            return []
        rows = self.q("SELECT %s FROM work WHERE task = ? AND state NOT IN (%s) ORDER BY created_at, id" % (
            ", ".join(self._WORK_COLS), ",".join("?" * len(self.TASK_NAMED_EXCLUDED))),
            (task,) + self.TASK_NAMED_EXCLUDED).fetchall()
        return [self._row_work(r) for r in rows]

    def update_work(self, work_id, now=None, data=None, **fields):
        """Update columns and merge `data` keys (None deletes a key); call inside a transaction."""
        import json
        w = self.work(work_id)
        if w is None:
            raise Refused("no work record %s" % work_id)
        allowed = set(self._WORK_COLS) - {"id", "handle", "created_at", "data", "updated_at"}
        bad = set(fields) - allowed
        if bad:
            raise ValueError("unknown work fields: %s" % ", ".join(sorted(bad)))
        merged = dict(w["data"])
        for k, v in (data or {}).items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        sets = ["updated_at = ?", "data = ?"]
        params = [_now(now), json.dumps(merged, sort_keys=True)]
        for k, v in fields.items():
            sets.append("%s = ?" % k)
            params.append(v)
        self.conn.execute("UPDATE work SET %s WHERE id = ?" % ", ".join(sets), params + [work_id])
        return self.work(work_id)

    def works(self, include_removed=False):
        rows = self.q("SELECT %s FROM work %s ORDER BY created_at, id" % (
            ", ".join(self._WORK_COLS), "" if include_removed else "WHERE state != 'removed'")).fetchall()
        return [self._row_work(r) for r in rows]

    def works_of_runtimes(self, runtimes):
        """{runtime id: the work record it is in}, for each of `runtimes` that works inside one: its
        recorded cwd is in the work's clone (the deepest clone holding it); a runtime with no
        recorded cwd (a parked work's holder) is in the live work that records its conversation.
        Never for having created or adopted a work: the creator is its owner, not an occupant.
        A read of the records only (no jj, no tmux)."""
        works = [w for w in self.works() if w["state"] not in ("failed", "removed") and w["path"]]
        clones = sorted(((os.path.realpath(w["path"]), w) for w in works), key=lambda pw: -len(pw[0]))
        out = {}
        for rt in runtimes:
            if rt["cwd"]:
                cwd = os.path.realpath(rt["cwd"])
                w = next((w for path, w in clones if within(cwd, path)), None)
            else:
                w = next((w for w in works if rt["conversation"] in work_conversations(w)), None)
            if w is not None:
                out[rt["id"]] = w
        return out

    # -- audit export

    def audit_lines(self, since=0, private=False):
        """Deterministic JSONL: stable order, sorted keys, no clock reads. Data keys containing
        "token" are redacted unless private; no event records one (work tokens stay in the work
        table and the clone's marker), so this guards against a future event leaking one."""
        import json
        for row in self.q("SELECT id, at, event, runtime, subject, data FROM audit WHERE id > ? ORDER BY id",
                          (check_int(since or 0, "--since", 0, ID_RANGE[1]),)):
            data = json.loads(row[5])
            if not private:
                data = redact(data)
            yield json.dumps({"id": row[0], "at": row[1], "event": row[2], "runtime": row[3], "subject": row[4],
                              "data": data}, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    def audit_story(self, subject, runtimes=(), kinds=("lease.", "runtime."), since=0, end_event=None,
                    private=False):
        """One subject's audit rows in ID order, as audit_lines' objects: every row about
        `subject`, and each row of one of `runtimes` whose event starts with one of `kinds`, from
        the subject's first row on and up to its first `end_event` row when it has one (what
        those runtimes did afterwards belongs to something else). Reads only."""
        import json
        first = self.q("SELECT min(id) FROM audit WHERE subject = ?", (subject,)).fetchone()[0]
        if first is None:
            return []
        last = None
        if end_event:
            last = self.q("SELECT min(id) FROM audit WHERE subject = ? AND event = ?", (subject, end_event)).fetchone()[0]
        runtimes = sorted(set(r for r in runtimes if r))
        rows = self.q("SELECT id, at, event, runtime, subject, data FROM audit WHERE id > ? AND id >= ? AND id <= ?"
                      " AND (subject = ? OR runtime IN (%s)) ORDER BY id" % ",".join("?" * len(runtimes)),
                      [check_int(since or 0, "--since", 0, ID_RANGE[1]), first, last or ID_RANGE[1], subject]
                      + runtimes).fetchall()
        out = []
        for row in rows:
            if row[4] != subject and not row[2].startswith(tuple(kinds)):
                continue
            data = json.loads(row[5])
            out.append({"id": row[0], "at": row[1], "event": row[2], "runtime": row[3], "subject": row[4],
                        "data": data if private else redact(data)})
        return out

    def runtimes_of(self, conversations=(), below=None):
        """Runtimes (ended ones too) of any of `conversations`, or whose recorded cwd is `below`
        or inside it, oldest first."""
        conversations = sorted(set(c for c in conversations if c))
        clauses, params = [], []
        if conversations:
            clauses.append("conversation IN (%s)" % ",".join("?" * len(conversations)))
            params += conversations
        if below:
            prefix = below.rstrip("/") + "/"
            clauses.append("cwd = ? OR substr(cwd, 1, ?) = ?")
            params += [below, len(prefix), prefix]
        if not clauses:
            return []
        rows = self.q("SELECT %s FROM runtimes WHERE %s ORDER BY started_at, id" % (
            self._RUNTIME_COLS, " OR ".join("(%s)" % c for c in clauses)), params).fetchall()
        return [self._row_runtime(r) for r in rows]


class Transaction:
    """BEGIN IMMEDIATE ... COMMIT (write=False: BEGIN DEFERRED, a read snapshot), rolled back on
    any exception; nests as a no-op. A write transaction never nests inside a read snapshot: its
    read-check-write would not hold the write lock from the start. pg.Transaction begins and
    ends it on PostgreSQL (begin, finish)."""

    def __init__(self, store, write=True):
        self.store = store
        self.write = write
        self.outer = False
        self.gated = False

    def __enter__(self):
        conn = self.store.conn
        if conn.in_transaction:
            if self.write and self.store.reading:
                raise RuntimeError("transaction() inside snapshot(): a read snapshot cannot become a write")
            return self
        self.gated = self.begin()
        self.outer = True
        self.store.reading = not self.write
        return self

    def begin(self):
        """Begin the outermost transaction -> whether it holds the write gate."""
        gated = self.write and _enter_gate(self.store)
        try:
            self.store.conn.execute("BEGIN IMMEDIATE" if self.write else "BEGIN DEFERRED")
        except sqlite3.Error as exc:
            if gated:
                _leave_gate(self.store)
            raise _translate(exc, self.store.path)
        return gated

    def __exit__(self, exc_type, exc, tb):
        if not self.outer:
            return False
        self.store.reading = False
        try:
            self.finish(exc_type, exc)
        finally:
            if self.gated:
                _leave_gate(self.store)
        return False

    def finish(self, exc_type, exc):
        conn = self.store.conn
        if exc_type is None:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as err:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise _translate(err, self.store.path)
        else:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            if isinstance(exc, sqlite3.Error):
                raise _translate(exc, self.store.path) from exc


# The write gate. SQLite's busy handler waits by sleeping and polling (up to 100 ms a sleep), so
# under many writers a process that has waited long keeps losing the lock to newcomers: with 32
# senders on 2 busy cores, 17 of 1,600 `coord send` calls failed after 5 s, and a CLI call next
# to one peer that commits every 50 ms failed 2 times in 10 within 2 s. Writers therefore queue
# in the kernel first, through a turnstile: a writer takes DB-turn, then DB-gate, then lets go of
# DB-turn, and holds DB-gate until COMMIT. The one writer waiting on DB-gate holds DB-turn, so a
# writer that just committed cannot take DB-gate again before it: each waiter gets in after at
# most one other writer per place in the queue, whatever the scheduler does. The gate only
# orders writers; SQLite's lock still decides (a coord that does not know the gate, an older
# release mid-upgrade, is serialised by it as before), and a gate that cannot be opened (a
# read-only directory) is skipped.

class _GateTimeout(Exception):
    pass


def _gate_alarm(signum, frame):
    raise _GateTimeout()


def _gate_fds(store):
    if store._gate is None:
        fds = []
        try:
            for suffix in ("-turn", "-gate"):
                fds.append(os.open(store.path + suffix, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
            store._gate = tuple(fds)
        except OSError:
            for fd in fds:
                os.close(fd)
            store._gate = ()
    return store._gate


def _enter_gate(store):
    """Pass the turnstile and take the write gate within the store's busy timeout; True when
    taken. Otherwise the caller goes on to BEGIN IMMEDIATE, whose own busy wait decides."""
    fds = _gate_fds(store)
    if not fds:
        return False
    import fcntl
    turn, gate = fds
    try:
        fcntl.flock(turn, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        finally:
            fcntl.flock(turn, fcntl.LOCK_UN)
    except BlockingIOError:
        pass
    except OSError:
        return False
    if store.timeout <= 0:
        return False
    return _wait_gate(store, fcntl, turn, gate)


def _wait_gate(store, fcntl, turn, gate):
    import signal
    try:  # blocking flocks, cut short by an alarm: the kernel wakes a waiter as the lock frees
        previous = signal.signal(signal.SIGALRM, _gate_alarm)
    except ValueError:  # not the main thread: poll instead
        return _poll_gate(store, fcntl, turn, gate)
    if previous not in (signal.SIG_DFL, signal.SIG_IGN, None):
        signal.signal(signal.SIGALRM, previous)  # someone else's alarm: leave it alone, poll
        return _poll_gate(store, fcntl, turn, gate)
    held = False
    try:
        signal.setitimer(signal.ITIMER_REAL, store.timeout)
        try:
            fcntl.flock(turn, fcntl.LOCK_EX)
            held = True
            fcntl.flock(gate, fcntl.LOCK_EX)
            return True
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except (_GateTimeout, OSError):
        return False
    finally:
        signal.signal(signal.SIGALRM, previous)
        if held:
            fcntl.flock(turn, fcntl.LOCK_UN)


def _poll_gate(store, fcntl, turn, gate):
    end = time.monotonic() + store.timeout
    pause = 0.0005
    held = False
    try:
        while True:
            try:
                if not held:
                    fcntl.flock(turn, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    held = True
                fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
            except OSError:
                return False
            if time.monotonic() >= end:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.005)
    finally:
        if held:
            fcntl.flock(turn, fcntl.LOCK_UN)


def _leave_gate(store):
    if store._gate:
        import fcntl
        try:
            fcntl.flock(store._gate[1], fcntl.LOCK_UN)
        except OSError:
            pass


# --------------------------------------------------------------------------- presentation helpers

# Terminal escapes, C0/C1 controls, and the bidirectional controls (U+061C, U+200E/F,
# U+202A-E, U+2066-9) that make text display in another order than it is read.
_ESCAPE_RE = Pattern(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?|[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]"
                        "|[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def text_in(text):
    """Text as it may be stored: undecodable bytes (surrogates from argv) become U+FFFD."""
    return str(text).encode("utf-8", "surrogatepass").decode("utf-8", "replace")


# Every match of _ESCAPE_RE starts with one of these: text without them is clean as it is, and
# cleaning it loads no re (a hook's deny: re costs it a few ms).
_ESCAPE_STARTS = frozenset([chr(c) for c in range(0x00, 0x09)] + [chr(c) for c in range(0x0b, 0x20)]
                           + [chr(c) for c in range(0x7f, 0xa0)] + list("\u061c\u200e\u200f")
                           + [chr(c) for c in range(0x202a, 0x202f)] + [chr(c) for c in range(0x2066, 0x206a)])


def clean_text(text, limit=None):
    """Text safe for a terminal or a model: escape sequences, control and bidi characters removed."""
    text = text_in(text)
    if not _ESCAPE_STARTS.isdisjoint(text):
        text = _ESCAPE_RE.sub("", text)
    if limit is not None and len(text) > limit:
        text = text[:limit - 1] + "\u2026"
    return text


def public_lease(lease):
    return {k: lease[k] for k in ("resource", "runtime", "handle", "mode", "purpose", "expires_at") if k in lease}


def blocked_by(lease):
    """Which requested name is blocked by whose lease on what, e.g.
    `src/a.py: blocked by H's exclusive lease on src/ ("purpose")`."""
    wanted, held = lease.get("requested") or lease["resource"], lease["resource"]
    if held == wanted:
        on = ""
    elif wanted.startswith(held + "/"):
        on = " on %s/" % held  # a lease on a directory holding the path
    else:
        on = " on %s" % held  # a lease on something inside the requested directory
    purpose = ' ("%s")' % clean_text(lease["purpose"], 120) if lease.get("purpose") else ""
    return "%s: blocked by %s's %s lease%s%s" % (wanted, lease["handle"], lease["mode"], on, purpose)


def describe_conflicts(blocking):
    return "; ".join(unique(blocked_by(b) for b in blocking))


def conflict_hint(lease):
    return ("ask the holder: coord send \"<request>\" --to %s ; or wait and retry; "
            "coord inbox shows replies" % lease["handle"])


def lost_line(lost, prefix=".coord/coord"):
    """One line telling a holder which lapsed leases peers took, and what to do; "" for none."""
    if not lost:
        return ""
    shown = ["%s to %s" % (clean_text(l.get("resource", ""), 200), clean_text(l.get("to", ""), 40)) for l in lost[:4]]
    more = " (+%d more)" % (len(lost) - 4) if len(lost) > 4 else ""
    first = clean_text(lost[0].get("to", ""), 40)
    return ("coord: lease lost while idle (its TTL passed and a peer took it): %s%s. Do not edit it; ask the holder"
            ": %s send \"<what you need>\" --to %s ; claim it again when it is free (%s claim PATH)."
            % ("; ".join(shown), more, prefix, first, prefix))


REMINDER_KIND = 12  # characters of a message's kind a reminder keeps (see REMINDER_BYTES)


def reminder_line(m, prefix=".coord/coord"):
    """One line for a delivered, unacknowledged message: ID, sender handle, kind, digest prefix and
    the command that rereads it. With `.coord/coord`, a five-word handle of the longest words and
    an ID below a million it stays within REMINDER_BYTES (tests check the worst case)."""
    return ("coord: unacked #%d from %s (%s, sha256:%s); read: %s inbox --peek, then ack %d"
            % (m["id"], m["sender"], clean_text(m["kind"], REMINDER_KIND), m["digest"][:8], prefix, m["id"]))


def render_context(msgs, prefix=".coord/coord", budget=CONTEXT_BUDGET, body_of=None):
    """Hook context for open messages in at most `budget` bytes of UTF-8 (when the budget can
    hold the two summary lines): (text or None, IDs whose body it shows, IDs it shows at all).

    `msgs` are open deliveries in ID order with id, kind, sender, digest, state and size (the
    body's bytes); `body_of(msg)` reads a body (default: msg["body"]). Queued bodies go first,
    oldest first; the first one that does not fit stops the rest, so they arrive in order.
    Then up to REMINDERS one-line reminders of delivered, unacknowledged messages. What is
    left is counted: one line for new messages (read them with inbox) and one for unacked ones.
    """
    body_of = body_of or (lambda m: m["body"])
    queued = [m for m in msgs if m["state"] == "queued"]
    older = [m for m in msgs if m["state"] != "queued"]

    def cost(text):
        return len(text.encode("utf-8", "surrogatepass")) + 1  # and its newline

    def waiting(ms):
        return ("coord: %d new message%s (%d bytes) not shown here; read %s with: %s inbox"
                % (len(ms), "" if len(ms) == 1 else "s", sum(m["size"] for m in ms),
                   "it" if len(ms) == 1 else "them", prefix))

    def unacked(n):
        return ("coord: %d more unacked message%s; read: %s inbox --peek, then ack ID..."
                % (n, "" if n == 1 else "s", prefix))

    # The summary lines are reserved first (at their largest), so the bound always holds.
    room = budget - (cost(waiting(queued)) if queued else 0) - (cost(unacked(len(older))) if older else 0)
    used, bodies, fresh = 0, [], []
    for m in queued:
        head = "coord message #%d from %s (%s), for your information:" % (m["id"], m["sender"], clean_text(m["kind"]))
        foot = "(acknowledge: %s ack %d)" % (prefix, m["id"])
        if used + cost(head) + m["size"] + 1 + cost(foot) > room:
            break  # cleaning only shortens a body, so its stored size bounds what it adds
        entry = "%s\n%s\n%s" % (head, clean_text(body_of(m)), foot)
        used += cost(entry)
        bodies.append(entry)
        fresh.append(m["id"])
    reminders, reminded = [], []
    for m in older[:REMINDERS]:
        line = reminder_line(m, prefix)
        if used + cost(line) > room:
            break
        used += cost(line)
        reminders.append(line)
        reminded.append(m["id"])
    lines = bodies
    if len(fresh) < len(queued):
        lines.append(waiting(queued[len(fresh):]))
    lines.extend(reminders)
    if len(reminded) < len(older):
        lines.append(unacked(len(older) - len(reminded)))
    return ("\n".join(lines) or None), fresh, fresh + reminded


def redact(value):
    """A copy of a JSON value with every key containing "token" (any case) redacted, at any depth."""
    if isinstance(value, dict):
        return {k: ("<redacted>" if "token" in k.lower() else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def unique(items):
    """Items in first-seen order, without repeats."""
    seen = []
    for i in items:
        if i not in seen:
            seen.append(i)
    return seen


def _shown(value):
    return json_text(clean_text(value, 40))


def number_text(x):
    return ("%d" % x) if x == int(x) else ("%g" % x)


# The only text a number may be written as: ASCII digits, an optional sign, and for a float a
# point and an exponent. float() and int() also take `1_000`, Arabic-Indic or fullwidth digits,
# surrounding Unicode spaces, `nan` and `inf`: none of those is a number here.
_INT_TEXT = Pattern(r"\A[+-]?[0-9]+\Z")
_FLOAT_TEXT = Pattern(r"\A[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_ASCII_SPACE = " \t\r\n"


def check_float(value, what, low, high, unit="seconds", hint=None):
    """`value` (text or number) as a finite float within [low, high]; else a UsageError that
    names `what` and the allowed range. Text must be ASCII digits (_FLOAT_TEXT): inf, nan,
    1e309, `1_000` and non-ASCII digits are refused."""
    number = None
    written = not isinstance(value, str) or _FLOAT_TEXT.match(value.strip(_ASCII_SPACE))
    if written and not isinstance(value, bool):
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            number = None
    if number is None or not low <= number <= high:  # nan fails every comparison
        raise UsageError("%s must be a number of %s from %s to %s, not %s"
                         % (what, unit, number_text(low), number_text(high), _shown(value)), hint)
    return number


def check_int(value, what, low, high, hint=None):
    """`value` (text or int) as a whole number within [low, high]; else a UsageError that names
    `what` and the allowed range."""
    number = None
    text = value.strip(_ASCII_SPACE) if isinstance(value, str) else value
    if isinstance(value, int) and not isinstance(value, bool) or isinstance(text, str) and _INT_TEXT.match(text):
        try:
            number = int(text)
        except ValueError:  # digit strings longer than int() accepts
            number = None
    if number is None or not low <= number <= high:
        raise UsageError("%s must be a whole number from %d to %d, not %s" % (what, low, high, _shown(value)), hint)
    return number


def env_number(env, name, default, bounds, strict=True):
    """A numeric environment variable: unset or empty gives `default`; a value outside `bounds`
    is a UsageError, or (strict=False, for hooks, which must fail open) the default."""
    raw = env.get(name, "")
    if not raw.strip():
        return default
    try:
        return check_float(raw, name, bounds[0], bounds[1])
    except UsageError as exc:
        if not strict:
            return default
        raise UsageError(exc.message, "unset %s or give it a value in that range" % name)


def _message_id(value):
    return check_int(str(value).strip(_ASCII_SPACE).lstrip("#"), "message ID", ID_RANGE[0], ID_RANGE[1],
                     "coord inbox --peek lists message IDs")


def now():
    """The current time as every stored timestamp records it (seconds since the epoch)."""
    return _CLOCK[0]()


def _now(now=None):
    if now is None:
        return _CLOCK[0]()
    return now if isinstance(now, float) else float(now)  # a clock reading keeps its tag (pg.Stamp)


# --------------------------------------------------------------------------- the clock
# The time every stored timestamp records: this host's, or in the host process of a PostgreSQL
# project the server's (pg.ServerClock, set with set_clock).

_CLOCK = [time.time]  # the clock _now() and now() read: the server's, in a PostgreSQL engine's process


def set_clock(clock):
    """Make `clock` (a function -> seconds since the epoch) the time every stored timestamp
    records in this process; None: this host's clock again."""
    _CLOCK[0] = clock or time.time


# --------------------------------------------------------------------------- a project's database: where it is, how it is reached
# A project lives in SQLite (<state>/<project>.sqlite3, or the file COORD_DB
# names) or in PostgreSQL: a postgresql:// (or postgres://) URL in COORD_DB, else in the
# project's settings file <state>/<project>.url (0600, in the 0700 state directory, beside where
# its SQLite file would be; never inside the repository). hostclient.open_project_store gives a Store
# for SQLite, a RemoteStore (the host process) for PostgreSQL; no process but host.py imports a driver.

PG_SCHEMES = ("postgresql", "postgres")


def database_scheme(value):
    """The scheme of a URL ("postgresql"), lower case; None for a file path."""
    scheme = url_scheme(value)
    return scheme.lower() if scheme else None


def url_password_free(url):
    """`url` without the password its user part or its query carries, or None when it carries
    none (`coord db migrate` and `db join` refuse a password on their command line)."""
    from urllib.parse import unquote, urlsplit, urlunsplit
    parts = urlsplit(url.strip())
    user, at, hostpart = parts.netloc.rpartition("@")
    query = [q for q in parts.query.split("&") if q]
    kept = [q for q in query if unquote(q.split("=", 1)[0]) != "password"]
    if not (at and ":" in user) and len(kept) == len(query):
        return None
    netloc = (user.split(":", 1)[0] + "@" if at else "") + hostpart
    return urlunsplit((parts.scheme, netloc, parts.path, "&".join(kept), parts.fragment))


def refuse_url_password(url, command):
    """UsageError when `url`, given as an argument of `command`, carries a password."""
    bare = url_password_free(url)
    if bare is not None:
        raise UsageError("%s: the URL on the command line carries a password, which every process of this host can"
                         " read (/proc) and your shell keeps in its history" % command,
                         "put the password in ~/.pgpass (HOST:PORT:DB:USER:PASSWORD, chmod 600; PGPASSFILE names"
                         " another file) or a service file (PGSERVICEFILE), which the host process's driver reads,"
                         " then: %s '%s'" % (command, bare))


def private_state_dir(path):
    """make_private_dirs(path), and `path` (the state directory, which holds the project's URL
    and the host process's socket) made 0700 when another program made it open first (pip,
    installing the driver below it)."""
    make_private_dirs(path)
    st = os.stat(path)
    if st.st_uid == os.getuid() and st.st_mode & 0o077:
        os.chmod(path, 0o700)


def project_url_path(project_id, environ=None):
    """<state_dir>/<project-id>.url: where a PostgreSQL project's URL is kept."""
    return os.path.join(state_dir(environ), project_id + ".url")


def read_project_url(project_id, environ=None):
    """The PostgreSQL URL in the project's settings, or None when it has none (a SQLite project)."""
    path = project_url_path(project_id, environ)
    try:
        with open(path, encoding="utf-8") as f:
            url = f.read().strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvError("cannot read the project's database URL %s: %s" % (path, getattr(exc, "strerror", exc)),
                       "check its permissions (0600, yours)")
    if database_scheme(url) not in PG_SCHEMES:
        raise EnvError("%s holds no postgresql:// URL" % path,
                       "the person runs: .coord/coord db migrate postgresql://... (or removes the file)")
    return url


def write_project_url(project_id, url, environ=None):
    path = project_url_path(project_id, environ)
    private_state_dir(os.path.dirname(path))
    atomic_write(path, (url.strip() + "\n").encode("utf-8"), 0o600)
    return path


def project_database(environ=None, start=None, project_id=None):
    """Where this project's records are: {"engine": "sqlite", "path"} or {"engine":
    "postgresql", "url", "project", "source"} (source: "COORD_DB" or the settings file). A URL
    of any other scheme is refused (refuse_database_url), never taken for a file."""
    env = os.environ if environ is None else environ
    explicit = env.get("COORD_DB", "")
    if explicit and database_scheme(explicit) not in PG_SCHEMES:
        return {"engine": "sqlite", "path": resolve_db_path(env, start, project_id)}
    if not project_id or env.get("COORD_PROJECT_ID", "").strip():
        project_id = resolve_project_id(env, start)
    if explicit:
        return {"engine": "postgresql", "url": explicit.strip(), "project": project_id, "source": "COORD_DB"}
    url = read_project_url(project_id, env)
    if url:
        return {"engine": "postgresql", "url": url, "project": project_id,
                "source": project_url_path(project_id, env)}
    return {"engine": "sqlite", "path": os.path.join(state_dir(env), project_id + ".sqlite3")}


# The command a person with admin rights types to set a PostgreSQL project up (one place), in the
# project's repository (coord finds the project there): `coord db setup` runs pg_setup in
# `host.py setup` (pg.py), the admin URL read from $COORD_ADMIN_URL or asked for at the terminal,
# never taken from the command line.
PG_SETUP_COMMAND = "coord db setup"
PG_ADMIN_URL_ENV = "COORD_ADMIN_URL"


def pg_setup_command(project_id=None, login=None):
    return PG_SETUP_COMMAND + (" --login %s" % login if login else "")


def move_aside(path, stamp):
    """Rename `path` (and a SQLite file's -wal and -shm beside it) to <path>.migrated-<stamp>
    (`coord db migrate`, `join`, `leave`: nothing is deleted)."""
    dest = "%s.migrated-%s" % (path, stamp)
    if os.path.exists(dest):
        raise EnvError("%s exists already" % dest, "retry in a second")
    os.rename(path, dest)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.rename(path + suffix, dest + suffix)
    fsync_dir(os.path.dirname(path))
    return dest
