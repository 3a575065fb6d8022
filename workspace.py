"""coord's managed work: isolated jj clones, their integration evidence and their cleanup.

Invariants this module keeps:
- Every jj/git call goes through `run_tool`: an argv list (never a shell), a timeout, text
  decoded with errors="backslashreplace", a child environment without GIT_DIR and friends,
  and `ToolError` (command, exit code, output) on failure.
- A work record is written (state `creating`) before anything touches the disk, so a clone
  that fails half-way is recorded as `failed` with its reason, never left as a silent orphan.
- Nothing is ever found by scanning directories. A directory is ours only while its real path
  lies below the recorded scratch root and its `.jj/coord-owner` marker carries the private
  token stored in the registry. jj never runs in a directory that fails either check.
- Full change and commit IDs are the only evidence. Bookmarks, workspace names and
  descriptions are navigation aids; handles are aliases; prefixes never authorize anything.
- Releasing the integration lease is not integration evidence. Proof means: the candidate
  frozen at acquisition is an ancestor of an exact full target commit in the canonical
  repository, recorded by the runtime that holds the lease that froze it.
- Removal deletes a directory only when every rule holds; otherwise it says which rule fails
  and the next command. A squash or rebase merge creates a new commit, so its candidate is
  never proven: the work stays until kept, or explicitly waived and released.

Layout, top-down: external tools, paths and names, the ownership marker, records and
ownership, operations (keyword arguments: the Store, the caller and what they need; they
return plain dicts and raise store.CoordError subclasses), tmux glue, the `cmd_*` handlers
(unpack args, call one operation, render), and the parser registration.
"""

import json
import os
import re
import shlex
import stat as _stat
import subprocess
import time

import store
from store import EnvError, Refused, UsageError


# hmac, secrets and shutil cost a command about 5 ms of imports (hmac loads OpenSSL): tokens
# are os.urandom's, as secrets' are, tokens compare in constant time with the function hmac
# uses without OpenSSL, and shutil loads where a tree is deleted.
def _same_token(a, b):
    try:
        from _operator import _compare_digest
    except ImportError:
        from hmac import compare_digest as _compare_digest
    return _compare_digest(a, b)


def _rmtree(path, **kw):
    import shutil
    shutil.rmtree(path, **kw)


DEFAULT_SCRATCH_ROOT = "/var/tmp/fleet-audit"
MARKER = "coord-owner"          # inside the checkout's .jj/
TOOL_TIMEOUT = 120.0            # seconds for one ordinary jj/git call
CLONE_TIMEOUT = 1800.0          # seconds for `jj git clone` of a large repository
_TASK_RE = store.Pattern(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,47}$")
_BOOKMARK_RE = store.Pattern(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
_FULL_COMMIT_RE = store.Pattern(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_CHANGE_RE = store.Pattern(r"^[k-z]{32}$")
# __pycache__/NAME.TAG.pyc of NAME.py, or NAMETAG.pyc of a suffix-less script such as coord
# (importlib's cache_from_source); TAG is sys.implementation.cache_tag, e.g. cpython-311.
_BYTECODE_RE = store.Pattern(r"^((?:.*/)?)__pycache__/([^/]+?)\.?((?:cpython|pypy|graalpy)-[0-9A-Za-z_]+)"
                          r"(?:\.opt-[0-9]+)?\.pyc$")
# Work that exists only in a clone: its non-empty commits outside the ancestry of the
# `safe` commits, which are the clone's origin bookmarks that the canonical repository
# itself (not the clone's remote-tracking cache) still contains. See local_work_revset().
LOCAL_WORK = "(~::(%s)) ~ empty()"
# Refs of the shared repository whose history is never a work's own: its branches, its tags and
# what it fetched from its remotes (a branch that exists only on origin is still shared history).
CANONICAL_REFS = ("refs/heads", "refs/tags", "refs/remotes")
_ID_TEMPLATE = ('change_id ++ " " ++ commit_id ++ " " ++ if(empty, "empty", "changed") ++ " " ++ '
                'parents.map(|c| c.commit_id()).join(",") ++ "\\n"')
_ROW_TEMPLATE = 'commit_id ++ " " ++ change_id ++ " " ++ if(current_working_copy, "wc", "-") ++ "\\n"'
SQUASH_NOTE = ("a squash or rebase merge makes a new commit, so this candidate can never be proven; "
               "keep the clone, or discard it explicitly: coord work gate %s --waive --reason R ; "
               "coord work integrate release %s")

# Setup per clone (see run_setup): the committed hook, the include list, ports, bounds.
SETUP_HOOK = ".coord/setup"     # executable, committed; run in each new clone
INCLUDE_FILE = ".worktreeinclude"  # gitignore syntax, in the shared checkout: ignored files to copy
SETUP_TIMEOUT = 600.0           # seconds the setup hook may run (COORD_SETUP_TIMEOUT)
SETUP_TIMEOUT_RANGE = (1.0, 86400.0)
SETUP_TAIL = 2000               # characters of the hook's output kept in the work record
KEPT_COPIES = 5000              # copied include files recorded (with their hash) per work
PORT_FIRST = 20000              # COORD_PORT_BASE is PORT_FIRST + k * PORT_STRIDE, k < PORT_SLOTS
PORT_STRIDE = 10                # ports each work may use: base .. base + PORT_STRIDE - 1
PORT_SLOTS = 4000               # so bases run from 20000 to 59990

# Git variables that redirect git at another repository; a hook environment can leak them.
_GIT_KEEP = frozenset(("GIT_EXEC_PATH", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSL_CAINFO", "GIT_SSL_NO_VERIFY",
                       "GIT_ASKPASS", "GIT_ALLOW_PROTOCOL", "GIT_CONFIG_NOSYSTEM", "GIT_HTTP_PROXY_AUTHMETHOD"))


# Work states (a record's `state`) and integration/gate states, as the rules group them.
UNUSABLE = frozenset(("creating", "failed", "removed"))  # no window, no integration step
ENDED = frozenset(("failed", "removed"))                 # no gate, no look at @
RELAUNCHED = frozenset(("active", "resumed", "closed"))  # states that clear a parked reason
GATE_PENDING = {"state": "pending"}                      # copy before use (dict(...))
GATE_DONE = frozenset(("passed", "waived"))
INTEGRATION_NONE = {"state": "none"}                     # copy before use (dict(...))
ENQUEUEABLE = frozenset(("none", "lock-released"))       # integration states that may join the queue
QUEUED = frozenset(("queued", "integrating"))            # integration states the queue shows


# --------------------------------------------------------------------------- external tools

class ToolError(EnvError):
    """A jj/git command failed: carries argv, exit code (None on timeout) and output."""

    def __init__(self, argv, returncode, output, hint=None):
        self.argv = list(argv)
        self.returncode = returncode
        self.output = output or ""
        lines = [l for l in self.output.strip().splitlines() if l.strip()]
        first = next((l for l in lines if l.startswith("Error")), lines[0] if lines else "no output")
        why = "timed out" if returncode is None else "exit %d" % returncode
        super().__init__("%s failed (%s): %s" % (" ".join(self.argv[:3]), why, store.clean_text(first, 300)),
                         hint or "fix what %s reports and retry; coord work list shows what was recorded"
                         % os.path.basename(self.argv[0] if self.argv else "the tool"),
                         command=self.argv, returncode=returncode)


def tool_env(environ=None):
    """The child environment: no GIT_* that redirects git, no prompts, no pager, no colour."""
    env = dict(os.environ if environ is None else environ)
    for key in list(env):
        if key.startswith("GIT_") and key not in _GIT_KEEP and not key.startswith("GIT_CONFIG_"):
            del env[key]
    for key in ("GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT"):
        env.pop(key, None)
    for key in list(env):
        if key.startswith("GIT_CONFIG_KEY_") or key.startswith("GIT_CONFIG_VALUE_"):
            del env[key]
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["NO_COLOR"] = "1"
    env.pop("JJ_EDITOR", None)
    env["EDITOR"] = env["VISUAL"] = "false"  # a command that wants an editor fails instead of hanging
    return env


def run_tool(argv, cwd=None, timeout=TOOL_TIMEOUT, environ=None, check=True, input=None):
    """Run jj/git; return (exit code, stdout, stderr). Raise ToolError when check and it fails."""
    argv = [str(a) for a in argv]
    if cwd is not None and not os.path.isdir(cwd):
        raise EnvError("directory %s does not exist" % cwd, "coord work list shows recorded paths")
    try:
        proc = subprocess.run(argv, cwd=cwd, env=tool_env(environ), input=input,
                              stdin=subprocess.DEVNULL if input is None else None,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                              encoding="utf-8", errors="backslashreplace")
    except FileNotFoundError:
        what = {"jj": "Jujutsu (jj)", "git": "git (>= 2.42 for jj)"}.get(argv[0], argv[0])
        raise EnvError("%s not found: coord work needs %s on PATH" % (argv[0], what),
                       "install %s, or put it on PATH, then retry" % what)
    except subprocess.TimeoutExpired as exc:
        out = exc.stderr or exc.stdout or b""
        if isinstance(out, bytes):
            out = out.decode("utf-8", "backslashreplace")
        raise ToolError(argv, None, out, "retry; if it keeps timing out, run the command by hand in %s" % cwd)
    if check and proc.returncode != 0:
        raise ToolError(argv, proc.returncode, proc.stderr or proc.stdout)
    return proc.returncode, proc.stdout, proc.stderr


def jj(args, cwd, snapshot=True, timeout=TOOL_TIMEOUT, environ=None, check=True):
    """Run jj in cwd; without snapshot, read the last snapshot and never touch the working copy."""
    argv = ["jj", "--no-pager", "--color=never"] + ([] if snapshot else ["--ignore-working-copy"]) + list(args)
    return run_tool(argv, cwd=cwd, timeout=timeout, environ=environ, check=check)


def git(args, cwd, environ=None, check=True, timeout=TOOL_TIMEOUT, input=None):
    return run_tool(["git"] + list(args), cwd=cwd, timeout=timeout, environ=environ, check=check, input=input)


def head_ids(path, snapshot=True, environ=None):
    """{change, commit, empty, parents} of @ in a checkout (snapshotting it first by default)."""
    _, out, _ = jj(["log", "--no-graph", "-r", "@", "-T", _ID_TEMPLATE], path, snapshot, environ=environ)
    change, commit, empty, parents = (out.strip().split(" ") + [""])[:4]
    return {"change": change, "commit": commit, "empty": empty == "empty",
            "parents": [p for p in parents.split(",") if p]}


def local_changes(path, revset, environ=None):
    """[{commit, change, wc}] for a revset in a checkout, read from the last snapshot."""
    _, out, _ = jj(["log", "--no-graph", "-r", revset, "-T", _ROW_TEMPLATE], path, snapshot=False, environ=environ)
    rows = []
    for line in out.splitlines():
        parts = line.split(" ")
        if len(parts) == 3:
            rows.append({"commit": parts[0], "change": parts[1], "wc": parts[2] == "wc"})
    return rows



# --------------------------------------------------------------------------- paths and names

def resolve_scratch_root(option=None, environ=None, canonical=None):
    """The safe real directory holding managed clones (it and missing parents created 0700).

    Safe means: absolute; a directory owned by this user and writable by nobody else; every
    ancestor either not writable by others or sticky (so nobody can swap a component); and
    not inside the canonical repository (jj there would snapshot every clone). Everything
    that can be checked before the directory exists is checked first: a refused root is
    never created.
    """
    env = os.environ if environ is None else environ
    raw = option or env.get("COORD_SCRATCH_ROOT") or DEFAULT_SCRATCH_ROOT
    hint = "pass --scratch-root /a/private/dir (or set COORD_SCRATCH_ROOT)"
    if not os.path.isabs(raw):
        raise UsageError("scratch root %s is not an absolute path" % raw, hint)
    real = os.path.realpath(raw)  # resolves the part that exists; the rest is taken literally
    if canonical:
        croot = os.path.realpath(canonical)
        if store.within(real, croot):
            raise UsageError("scratch root %s is inside the repository %s" % (real, croot), hint)
    parent = os.path.dirname(real)
    while parent != os.path.dirname(parent):
        try:
            pst = os.stat(parent)
        except FileNotFoundError:
            parent = os.path.dirname(parent)
            continue  # created below, 0700
        if pst.st_mode & 0o002 and not pst.st_mode & _stat.S_ISVTX:
            raise EnvError("scratch root %s sits below %s, which anyone can write without the sticky bit"
                           % (real, parent), hint)
        parent = os.path.dirname(parent)
    try:
        store.make_private_dirs(real)
        st = os.stat(real)
    except OSError as exc:
        raise EnvError("cannot create scratch root %s: %s" % (raw, exc.strerror), hint)
    if os.path.realpath(raw) != real:
        raise EnvError("scratch root %s changed while it was being created" % raw, hint)
    if not _stat.S_ISDIR(st.st_mode):
        raise EnvError("scratch root %s is not a directory" % real, hint)
    if st.st_uid != os.getuid():
        raise EnvError("scratch root %s belongs to another user" % real, hint)
    if st.st_mode & 0o022:
        raise EnvError("scratch root %s is writable by other users (mode %o)" % (real, st.st_mode & 0o7777),
                       "chmod go-w %s, or %s" % (real, hint))
    return real


def below(path, root):
    """True when `path` lies strictly below `root` (both taken literally)."""
    return path != root and store.within(path, root)


def check_task(task):
    if not isinstance(task, str) or not _TASK_RE.match(task):
        raise UsageError("task name %r: use 1-48 letters, digits, '-' or '_' (it names a bookmark and a directory)"
                         % task, "coord work create cache-audit")
    return task


def check_bookmark(name):
    if not name or not _BOOKMARK_RE.match(name) or ".." in name or name.endswith("/") or "//" in name \
            or name.endswith(".lock") or "@" in name:
        raise UsageError("%r is not a plain bookmark name" % name, "name the target bookmark, e.g. --into main")
    return name


def full_commit(text, what="commit"):
    value = (text or "").strip().lower()
    if not _FULL_COMMIT_RE.match(value):
        raise UsageError("%s %r is not a full commit ID (40 or 64 hex digits; prefixes never count)" % (what, text),
                         "git rev-parse REV prints the full ID")
    return value


def workspace_name(work_id):
    return "agent-" + work_id


def bookmark_name(task, work_id):
    return "agent/%s/%s" % (task, work_id)


def description(task, work_id):
    return "coord work %s: %s\n\nCoord-Work-Id: %s\n" % (work_id, task, work_id)


def canonical_root(root, work_of):
    """The canonical checkout: root, or the recorded source when root is a managed clone.
    work_of: id -> work record (a Store's `work`), called only for a managed clone."""
    if not root:
        raise EnvError("not inside a repository", "run coord from the repository root")
    root = os.path.realpath(root)
    marker = read_marker(root)
    if marker is not None:
        w = work_of(marker.get("work", "")) if marker.get("work") else None
        if w is None or not w.get("source"):
            raise Refused("%s is a managed checkout whose record is unknown" % root,
                          "run this from the canonical checkout")
        return w["source"]
    return root


def git_dir_args(repo):
    """git arguments that address a repository's git store (colocated .git, else jj's own)."""
    if os.path.exists(os.path.join(repo, ".git")):
        return ["-C", repo]
    inner = os.path.join(repo, ".jj", "repo", "store", "git")
    if os.path.isdir(inner):
        return ["--git-dir", inner]
    raise EnvError("%s has neither .git nor a jj git store" % repo, "coord works only in jj/git repositories")


def clone_source(repo):
    if os.path.exists(os.path.join(repo, ".git")):
        return repo
    inner = os.path.join(repo, ".jj", "repo", "store", "git")
    if os.path.isdir(inner):
        return inner
    raise EnvError("%s is not a git or colocated jj repository" % repo, "run coord from the repository root")



# --------------------------------------------------------------------------- ownership marker

def marker_path(path):
    return os.path.join(path, ".jj", MARKER)


def read_marker(path):
    """The marker dict of a checkout, or None when there is none (never follows a symlink)."""
    try:
        fd = os.open(marker_path(path), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as f:
            data = json.loads(f.read(4096))
        return data if isinstance(data, dict) else {}
    except ValueError:
        return {}


def write_marker(path, work_id, token):
    """Atomically write .jj/coord-owner (mode 0600)."""
    data = json.dumps({"work": work_id, "token": token}, sort_keys=True) + "\n"
    store.atomic_write(marker_path(path), data.encode("utf-8"), 0o600)


def directory_problems(w):
    """Why the recorded directory is not provably this work's (path and marker), [] if it is.

    Each problem is (code, message, next command). jj must not run when this is non-empty.
    """
    h = w["handle"]
    path, root = w["path"], w["scratch_root"]
    if not path or not root:
        return [("no-path", "the record has no directory", "coord work inspect %s" % h)]
    if not os.path.lexists(path):
        return [("missing", "directory %s is gone" % path,
                 "if it was deleted on purpose: coord work remove %s --confirm %s --forget" % (h, h))]
    real, real_root = os.path.realpath(path), os.path.realpath(root)
    if real != path or real_root != root or not below(real, real_root):
        return [("outside-root", "%s resolves to %s, not below the recorded scratch root %s"
                 % (path, real, root), "inspect it by hand; coord never deletes outside its scratch root")]
    if not os.path.isdir(os.path.join(path, ".jj")):
        return [("not-jj", "%s has no .jj directory" % path, "inspect it by hand; coord work inspect %s" % h)]
    marker = read_marker(path)
    if marker is None or not _same_token(str(marker.get("token", "")), w["token"] or "") \
            or marker.get("work") != w["id"]:
        return [("token-mismatch", "the ownership marker in %s does not match the registry" % path,
                 "if another database adopted the clone, drop this record (deletes nothing): coord work remove %s"
                 " --confirm %s --forget ; if no other database holds it, take it back: the same, then coord work"
                 " adopt %s" % (h, h, path))]
    return []


def verified_path(w):
    problems = directory_problems(w)
    if problems:
        code, message, hint = problems[0]
        raise Refused("work %s: %s" % (w["handle"], message), hint, reason=code)
    return w["path"]



# --------------------------------------------------------------------------- records and ownership

def _now():
    return time.time()


def _who(caller):
    return caller["id"] if caller else None


def _history(w, state, caller, **extra):
    entry = {"state": state, "at": _now(), "by": _who(caller)}
    entry.update({k: v for k, v in extra.items() if v is not None})
    return list(w["data"].get("history", [])) + [entry]


def _owner_of(st, w):
    """The live runtime that owns the work (the recorded runtime or its resumed successor), or None."""
    rt = st.runtime(w["runtime"]) if w.get("runtime") else None
    if rt is None:
        return None
    rt = st.successor(rt)
    return rt if not rt.get("superseded_by") and st.runtime_live(rt) else None


def _owns(st, w, caller):
    """The caller created the work (or resumed its creator), or is the harness launched for it:
    the recorded conversation of its tmux window, or the pid of that window's live pane."""
    if not caller:
        return False
    owner = _owner_of(st, w)
    if caller["id"] == w.get("runtime") or (owner is not None and owner["id"] == caller["id"]):
        return True
    rec = w["data"].get("tmux") or {}
    if caller.get("conversation") in store.work_conversations(w):
        return True
    if caller.get("pid") and caller["pid"] == rec.get("pane_pid"):
        live, _ = _live_tmux(w)
        return live is not None
    return False


# Who may change a work's state (DESIGN.md, "Authority"): gate, park, resume, close, start, integrate
# enqueue, acquire and land, and remove each call authorize(); prove and release belong to the runtime that froze
# the candidate (_candidate_for). Everyone else is refused (exit 3) naming who may, unless the
# person passes --override, which is audited (an agent's --override is refused). Acquire, land
# and prove are the person's even on an agent's own work, unless the repository opts in
# (refuse_agent_integration).
AUTHORITY_VERBS = {"gate": "pass or waive the gate of", "park": "park", "resume": "resume", "close": "close",
                   "archive": "archive",
                   "acquire": "integrate", "land": "land", "remove": "remove", "start": "start",
                   "enqueue": "queue", "prove": "prove the integration of"}


def authority(st, w, caller):
    """Why `caller` may act on work `w`, or None: "owner" (the recorded runtime), "successor"
    (that runtime's resumed successor, or its conversation registered again), "harness" (the
    harness launched for the work: its recorded conversation, runtime or live pane),
    "person" (a person at a terminal, proven by store.person_evidence, of the same user as the
    person who owns it: any of their terminals, never the user alone without one) or
    "unowned" (a record without an owner, e.g. adopted with no identity)."""
    if not caller:
        return None
    if not w.get("runtime"):
        return "unowned"
    if caller["id"] == w["runtime"]:
        return "owner"
    start = st.runtime(w["runtime"])
    if start is not None:
        if st.successor(start)["id"] == caller["id"]:
            return "successor"
        if not start["agent_id"] and not caller.get("agent_id") and caller.get("conversation") == start["conversation"]:
            return "successor"
    rec = w["data"].get("tmux") or {}
    direct = w["data"].get("direct") or {}
    if not caller.get("agent_id") and (caller.get("conversation") in store.work_conversations(w)
                                       or caller["id"] in (rec.get("runtime_id"), direct.get("runtime_id"))):
        return "harness"
    if caller.get("pid") and caller["pid"] == rec.get("pane_pid") and _live_tmux(w)[0] is not None:
        return "harness"
    # A person at a terminal (a key only positive evidence gives, and caller() lets a process act
    # as only from that terminal) may act for the same user's works; the user alone (no
    # terminal: cron, a detached or setsid'd process) only for what it made itself.
    uid = store.person_uid(caller)
    if uid is not None and store.is_terminal_person(caller) and start is not None and store.person_uid(start) == uid:
        return "person"
    return None


def who_may(st, w):
    """The handles that may act on the work without --override, for a refusal's text."""
    out = []
    start = st.runtime(w["runtime"]) if w.get("runtime") else None
    if start is not None:
        last = st.successor(start)
        terminal = store.person_terminal(last)
        out.append("its owner %s%s" % (last["handle"], " (a person; any of their terminals)" if terminal else ""))
    rec = w["data"].get("tmux") or {}
    if rec.get("conversation"):
        rt = st.find_conversation_runtime(rec["conversation"])
        out.append("its harness %s" % (rt["handle"] if rt else "(conversation %s)" % rec["conversation"]))
    return out


def is_person(caller):
    """True when the caller is positively the person at a terminal (store.is_terminal_person;
    the user alone without a terminal, e.g. a process an agent detached with setsid, is not).
    Every rule that keeps a power for the person (landing, --override, the hints that offer
    them) asks this."""
    return store.is_terminal_person(caller)


AGENTS_LAND_CONFIG = "coord.agentsLand"  # git config key, read like coord.landCheck (see agents_land)
# The integration owner's steps (DESIGN.md, "Authority"): they move or prove a shared bookmark.
# The person's by default; the work's own agent's only where the person opted in (agents_land).
PERSON_ACTIONS = frozenset(("acquire", "land", "prove"))
_OWN = frozenset(("owner", "successor", "harness"))


def agents_land(source, environ=None):
    """True when the person lets agents land their own work in this repository: `git config
    coord.agentsLand true` in the shared checkout's own config (.git/config, which no clone can
    commit), read with --local exactly as coord.landCheck is, so neither a clone's config nor
    the caller's environment (GIT_CONFIG_*, which tool_env drops and --local ignores) counts."""
    try:
        code, out, _ = git(git_dir_args(source) + ["config", "--local", "--type=bool", "--get",
                                                   AGENTS_LAND_CONFIG], source, environ, check=False)
    except store.CoordError:
        return False
    return code == 0 and out.strip() == "true"


def _enqueue_hint(w, into):
    return ("coord work integrate enqueue %s --into %s ; the person lands it (agents queue work, they do not "
            "land it)" % (w["handle"], into or "BOOKMARK"))


def refuse_agent_integration(st, w, caller, action, into=None, why=None, environ=None):
    """Refuse an agent (any caller that is not the person) a step of the integration owner's
    (PERSON_ACTIONS), unless the repository opted in (agents_land) and the work is its own;
    -> the reason it may. The hint names what the agent may do: queue the work."""
    why = authority(st, w, caller) if why is None else why
    if is_person(caller):
        return why
    if why in _OWN and agents_land(w["source"], environ):
        return why
    verb = AUTHORITY_VERBS.get(action, action)
    raise Refused("%s may not %s %s: the person integrates and lands work, agents queue it"
                  % (caller["handle"], verb, w["handle"]), _enqueue_hint(w, into),
                  reason="person-lands", action=action)


def authorize(st, w, caller, action, override=False, into=None):
    """Refuse (exit 3, naming who may) unless `caller` may do `action` to the work; with
    `override` the person may, and the override is audited; an agent's --override is refused.
    The integration owner's steps (PERSON_ACTIONS) are the person's (refuse_agent_integration).
    -> the reason."""
    why = authority(st, w, caller)
    verb = AUTHORITY_VERBS.get(action, action)
    if not caller:
        if why:
            return why
        raise Refused("cannot %s %s without an identity" % (verb, w["handle"]),
                      "register first (coord hello), then retry")
    if override and not is_person(caller):
        allowed = bool(why) and (action not in PERSON_ACTIONS or why in _OWN and agents_land(w["source"]))
        owner = _owner_handle(st, w)
        raise Refused("an override is the person's: %s may not use one" % caller["handle"],
                      "retry without --override" if allowed else
                      _enqueue_hint(w, into) if action in PERSON_ACTIONS and why in _OWN else
                      "ask its owner: coord send \"...\" --to %s" % owner,
                      reason="override-is-the-person-s", action=action)
    if why:
        return refuse_agent_integration(st, w, caller, action, into, why) if action in PERSON_ACTIONS else why
    may = who_may(st, w) or ["its owner"]
    if override:
        with st.transaction():
            st.audit("work.authority.override", caller["id"], w["id"], action=action, allowed=may)
        return "override"
    owner = _owner_handle(st, w)
    hint = "ask it: coord send \"...\" --to %s" % owner
    if is_person(caller):  # only the person is offered the override (a model follows its hints)
        hint += " ; or, deliberately and audited, add --override"
    raise Refused("%s may not %s %s: only %s may" % (caller["handle"], verb, w["handle"], " or ".join(may)),
                  hint, reason="not-authorized", action=action)


def _owner_handle(st, w):
    start = st.runtime(w["runtime"]) if w.get("runtime") else None
    return st.successor(start)["handle"] if start is not None else w["handle"]


def public_work(w, st=None):
    """The machine view of a record: every field except the ownership token."""
    out = {k: v for k, v in w.items() if k not in ("token", "data")}
    out["data"] = store.redact(w["data"])
    if st is not None and w.get("runtime"):
        rt = st.runtime(w["runtime"])
        out["runtime_handle"] = rt["handle"] if rt else None
    return out


def _integration(w):
    return dict(w["data"].get("integration") or INTEGRATION_NONE)


def _gate(w):
    return dict(w["data"].get("gate") or GATE_PENDING)


def summary_line(w):
    bits = [w["handle"], store.clean_text(w["task"], 48), w["state"]]
    integ = _integration(w)
    if integ.get("state", "none") != "none":
        bits.append("%s->%s" % (integ["state"], integ.get("into", "?")))
    gate = _gate(w)
    if gate["state"] != "pending":
        bits.append("gate " + gate["state"])
    if w["data"].get("kind") == "native":
        bits.append("native")
    if (w["data"].get("setup") or {}).get("status") in ("failed", "timeout"):
        bits.append("setup " + w["data"]["setup"]["status"])
    return "  ".join(bits)



def _refuse_state(w, states):
    """Refuse work whose state is in `states` (one of the state sets above)."""
    if w["state"] in states:
        raise Refused("work %s is %s" % (w["handle"], w["state"]), "coord work list")


def _work_data(kind, caller, workspace, bookmark, history, depends=(), planned=(), **extra):
    """The `data` of a new work record (create and adopt), with everything each adds in extra."""
    data = {"kind": kind, "agent_id": caller.get("agent_id") if caller else None,
            "workspace_name": workspace, "bookmark": bookmark, "depends": list(depends),
            "resources": {"planned": list(planned), "actual": []},
            "gate": dict(GATE_PENDING), "integration": dict(INTEGRATION_NONE), "history": [history]}
    data.update(extra)
    return data


# =========================================================================== operations
# Each takes the Store and the caller (a runtime dict, or None where none is needed) as
# keyword arguments, returns plain records and raises store.CoordError subclasses.

# --------------------------------------------------------------------------- create

# What makes a checkout protected: coord's runtime and both harnesses' hook entries (each
# config must run .coord/hook.py). The installer writes them; the paths a commit must carry.
PROTECTING = (".coord/coord", ".coord/hook.py", ".coord/store.py", ".coord/project-id")
HOOK_CONFIGS = (".claude/settings.json", ".codex/hooks.json")
INSTALLED_PATHS = (".coord", ".claude/settings.json", ".claude/skills/coord", ".claude/coord", ".codex/hooks.json",
                   ".agents/skills/coord")
HOOK_CONFIGS += (".opencode/plugins/coord-hook.js",)  # OpenCode: coord's plugin runs the hook command
INSTALLED_PATHS += (".opencode/plugins/coord-hook.js", ".opencode/.gitignore")


def _release(path):
    """(version tuple or None, version text or None) of the coord installed at `path`."""
    try:
        with open(os.path.join(path, ".coord", "VERSION"), "rb") as f:
            text = f.read(200).decode("utf-8", "replace").strip()
    except OSError:
        return None, None
    m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", text)
    return (tuple(int(x or 0) for x in m.groups()) if m else None), text or None


def shared_installation(source):
    """The shared checkout's coord installation, {version, text}, or None when it has none (then a
    clone is as protected as the checkout it comes from, and nothing is checked)."""
    if not os.path.isfile(os.path.join(source, ".coord", "hook.py")):
        return None
    version, text = _release(source)
    return {"version": version, "text": text}


def protection_gaps(path, shared):
    """Why a checkout at `path` would run without the shared checkout's coord: missing runtime
    files, a hook config without coord's entries, an older (or unversioned) release. [] when
    protected. Reads files on disk only: what the clone's starting revision holds."""
    gaps = ["no %s" % rel for rel in PROTECTING if not os.path.isfile(os.path.join(path, rel))]
    for rel in HOOK_CONFIGS:
        try:
            with open(os.path.join(path, rel), "rb") as f:
                if b".coord/hook.py" in f.read(1 << 20):
                    continue
            gaps.append("%s without coord's hooks" % rel)
        except OSError:
            gaps.append("no %s" % rel)
    if shared and shared.get("version") and not gaps:
        version, text = _release(path)
        if version is None or version < shared["version"]:
            gaps.append("coord %s, older than the shared checkout's %s" % (text or "unversioned", shared["text"]))
    return gaps


def commit_command(source, from_rev=None, environ=None):
    """The command that commits coord's installation in the shared checkout so that clones
    start from it: jj (commit those paths, move the bookmark clones start from) or git."""
    paths = [p for p in INSTALLED_PATHS if os.path.lexists(os.path.join(source, p))] or [".coord"]
    _, version = _release(source)
    msg = shlex.quote("Install coord %s" % version if version else "Install coord")
    words = " ".join(shlex.quote(p) for p in paths)
    if os.path.isdir(os.path.join(source, ".jj")):
        bookmark = from_rev if from_rev and _BOOKMARK_RE.match(from_rev) and "@" not in from_rev else None
        if bookmark is None:
            bookmark = target_bookmark({"source": source, "data": {}}, environ) or "main"
        return "cd %s && jj commit -m %s %s && jj bookmark set %s -r @-" % (  # jj reads paths from the cwd
            shlex.quote(source), msg, words, shlex.quote(bookmark))
    return "git -C %s add -- %s && git -C %s commit -m %s" % (shlex.quote(source), words, shlex.quote(source), msg)


class _Unprotected(Exception):
    def __init__(self, gaps):
        super().__init__("; ".join(gaps))
        self.gaps = gaps


def create_work(st, *, caller, root, task, environ, scratch_root=None, from_rev=None, depends=(), resources=(),
                native=False, allow_unprotected=False, no_setup=False):
    """Clone the canonical repository of `root` for one task and record it; -> the work record.

    The record is written (`creating`) before the disk is touched; a failure marks it
    `failed` with the step and reason, removes what this create made, and raises EnvError.
    When the shared checkout has coord installed and the clone's starting revision does not
    carry it (or carries an older release), the clone's agents would run without hooks: that
    is refused (Refused, recorded the same way, with the commit command) unless
    allow_unprotected, which records the gaps in the work's `unprotected`.
    Unless no_setup, the clone is then set up (run_setup): a failed setup keeps the clone,
    records the result and raises Refused naming the next command.
    """
    task = check_task(task)
    if not no_setup:  # a bad COORD_SETUP_TIMEOUT is refused before anything is made
        store.env_number(os.environ if environ is None else environ, "COORD_SETUP_TIMEOUT", SETUP_TIMEOUT,
                         SETUP_TIMEOUT_RANGE)
    source = canonical_root(root, st.work)
    scratch = resolve_scratch_root(scratch_root, environ, source)
    dep_ids = []
    for h in depends or []:
        dep = st.resolve_work(h)
        if dep["id"] not in dep_ids:
            dep_ids.append(dep["id"])
    planned = [store.normalize_resource(n, root) for n in resources or []]
    native = bool(native)
    if from_rev is not None and (not from_rev.strip() or from_rev.startswith("-")):
        raise UsageError("--from %r is not a revision" % from_rev, "coord work create TASK --from main")
    if not native:
        clone_source(source)
    work_id = store.new_uuid()
    path = os.path.join(scratch, "%s.%s" % (task, work_id[:8]))
    if os.path.lexists(path):
        path = os.path.join(scratch, "%s.%s" % (task, work_id))
    token = os.urandom(32).hex()
    data = _work_data("native" if native else "clone", caller, workspace_name(work_id), bookmark_name(task, work_id),
                      {"state": "creating", "at": _now(), "by": caller["id"]}, dep_ids, planned, **{"from": from_rev})
    with st.transaction():
        data["port_base"] = port_base(st, work_id)
        w = st.insert_work(task, "creating", token, path=path, scratch_root=scratch, source=source,
                           conversation=caller["conversation"], runtime=caller["id"], data=data, work_id=work_id)
        st.audit("work.creating", caller["id"], work_id, task=task, path=path, source=source,
                 kind=data["kind"], depends=dep_ids, planned=planned)
    shared, gaps = shared_installation(source), []

    def check(checkout):
        gaps.extend(protection_gaps(checkout, shared))
        if gaps and not allow_unprotected:
            raise _Unprotected(gaps)
    try:
        ids = _make_checkout(w, token, from_rev, environ, check=check if shared else None,
                             lock_dir=os.path.dirname(st.path))
    except _CreateFailed as failed:
        _record_failed_create(st, w, caller, failed.step, failed.reason, environ)
    except _Unprotected as unprotected:
        _record_failed_create(st, w, caller, "protection check", "unprotected: %s" % unprotected, environ, refusal=(
            "work create %s refused: its agents would run without coord (the revision it starts from has %s)"
            % (task, unprotected),
            "commit coord's installation in the shared checkout, then retry (or pass --allow-unprotected): %s"
            % commit_command(source, from_rev, environ)))  # the command ends the line: pasted whole, it runs
    base = {"change": ids["change"], "commit": ids["commit"],
            "parent": ids["parents"][0] if len(ids["parents"]) == 1 else None, "parents": ids["parents"]}
    with st.transaction():
        cur = st.work(work_id)
        w = st.update_work(work_id, state="active", data={
            "base": base, "current": dict(base, empty=ids["empty"], at=_now()), "git": _git_kind(path),
            "history": _history(cur, "active", caller), "unprotected": gaps or None})
        st.audit("work.created", caller["id"], work_id, task=task, path=path, base_change=ids["change"],
                 base_commit=ids["commit"], kind=data["kind"], unprotected=gaps or None)
    w = carry_trust(st, w, caller, environ)
    if no_setup:
        with st.transaction():
            w = st.update_work(work_id, data={"setup": {"status": "skipped", "at": _now()}})
        return w
    w, result = run_setup(st, caller=caller, work=w, environ=environ)
    if result["status"] not in SETUP_OK:
        raise setup_refusal(w, result, created=True)
    return w


class _repo_lock:
    """One holder at a time of a named lock per shared repository, across coord processes: an
    flock on a file in coord's state directory (0700), released by the kernel if the holder
    dies. "native-create": one `jj workspace add` at a time (each writes jj's operation log and
    git's worktree records there, and under load concurrent ones were seen to fail part-way);
    "land-B": one landing into bookmark B at a time (see land_work)."""

    def __init__(self, source, directory, name="native-create"):
        key = store.hashes().sha256(os.path.realpath(source).encode("utf-8", "surrogateescape")).hexdigest()[:16]
        if name != "native-create":
            name = "%s-%s" % (name.split("-", 1)[0], store.hashes().sha256(name.encode("utf-8")).hexdigest()[:12])
        self.path = os.path.join(directory, "%s-%s.lock" % (name, key))
        self.fd = None

    def __enter__(self):
        import fcntl
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)  # closing releases the lock
        return False


def _adopt_git_identity(path, source, environ):
    """jj does not read git's user.name and user.email: a person who never configured jj would
    land commits by nobody (`JJ_EMPTY_STRING` on the target and the remote). When jj has no
    user.email here, copy the shared checkout's git identity into the clone's own jj config
    and re-author its first change with it. Nothing when git has none either."""
    code, out, _ = jj(["config", "get", "user.email"], path, snapshot=False, environ=environ, check=False)
    if code == 0 and out.strip():
        return
    found = {}
    for key in ("user.name", "user.email"):
        c, o, _ = git(git_dir_args(source) + ["config", "--get", key], source, environ, check=False)
        if c == 0 and o.strip():
            found[key] = o.strip()
    if "user.email" not in found:
        return
    for key, value in sorted(found.items()):
        jj(["config", "set", "--repo", key, value], path, snapshot=False, environ=environ)
    jj(["metaedit", "--update-author"], path, environ=environ)


class _CreateFailed(Exception):
    def __init__(self, step, reason):
        super().__init__(reason)
        self.step, self.reason = step, reason


def _make_checkout(w, token, from_rev, environ, check=None, lock_dir=None):
    """Make the recorded work's checkout on disk; -> head_ids of @. Raise _CreateFailed(step, reason).

    Few jj processes and one snapshot: the checkout is fresh (nothing but this command has the
    path), so after the one command that needs the working copy (the workspace rename, or
    `jj new`/`workspace add`, which check out) the description and bookmark are written with
    --ignore-working-copy (the tree does not change, so the next jj command finds it fresh) and
    the bookmark command prints the full IDs of @ (a commit_summary template), read instead of
    a separate `jj log`. check(path), when given, runs once the starting revision is on disk (it
    may raise _Unprotected)."""
    if w["data"]["kind"] == "native":  # every jj write in the shared repository, one create at a time
        with _repo_lock(w["source"], lock_dir or w["scratch_root"]):
            return _checkout_steps(w, token, from_rev, environ, check)
    return _checkout_steps(w, token, from_rev, environ, check)


def _checkout_steps(w, token, from_rev, environ, check):
    work_id, task, path, source = w["id"], w["task"], w["path"], w["source"]
    message = description(task, work_id)
    step = "mkdir"
    try:
        if w["data"]["kind"] == "native":
            step = "jj workspace add"
            argv = ["workspace", "add", "--name", workspace_name(work_id), "-m", message]
            if from_rev:
                argv += ["-r", from_rev]
            jj(argv + [path], source, environ=environ)
            described = True
        else:
            os.mkdir(path, 0o700)
            step = "jj git clone"
            jj(["git", "clone", "--colocate", clone_source(source), path], w["scratch_root"], timeout=CLONE_TIMEOUT,
               environ=environ)
            step = "jj workspace rename"
            jj(["workspace", "rename", workspace_name(work_id)], path, environ=environ)
            step = "identity"
            _adopt_git_identity(path, source, environ)
            described = False
        step = "write ownership marker"
        write_marker(path, work_id, token)
        if from_rev and not described:
            step = "jj new %s" % from_rev
            _new_from(path, from_rev, environ, message)
        elif not described:
            step = "jj describe"
            jj(["describe", "-m", message], path, snapshot=False, environ=environ)
        if check is not None:
            step = "protection check"
            check(path)
        step = "jj bookmark create"
        _, out, err = jj(["--config", _IDS_SUMMARY, "bookmark", "create", bookmark_name(task, work_id), "-r", "@"],
                         path, snapshot=False, environ=environ)
        ids = _summary_ids(out + "\n" + err)
        if ids is not None:
            return ids
        step = "jj log"
        return head_ids(path, snapshot=False, environ=environ)
    except (store.CoordError, OSError) as exc:
        raise _CreateFailed(step, exc.message if isinstance(exc, store.CoordError)
                            else "%s: %s" % (type(exc).__name__, exc))


# jj prints the commit a command leaves with its `templates.commit_summary`; this one carries
# head_ids' fields behind a sentinel, so `bookmark create` reports @ without a `jj log`.
_IDS_SUMMARY = ("templates.commit_summary='\"coord-ids \" ++ change_id ++ \" \" ++ commit_id ++ \" \" ++ "
                "if(empty, \"empty\", \"changed\") ++ \" \" ++ parents.map(|c| c.commit_id()).join(\",\")'")
_IDS_RE = store.Pattern(r"coord-ids ([k-z]+) ([0-9a-f]{40,64}) (empty|changed) ([0-9a-f,]*)$", re.M)


def _summary_ids(text):
    """head_ids' dict from a `coord-ids` summary line, or None when jj printed none."""
    m = _IDS_RE.search(text)
    if m is None:
        return None
    return {"change": m.group(1), "commit": m.group(2), "empty": m.group(3) == "empty",
            "parents": [p for p in m.group(4).split(",") if p]}


def _record_failed_create(st, w, caller, step, reason, environ, refusal=None):
    """Discard what a failed create made, record the work as failed, raise EnvError (or, with
    refusal=(message, hint), Refused)."""
    work_id, path = w["id"], w["path"]
    removed, left = _discard_half_created(w, w["data"]["kind"] == "native", environ)
    with st.transaction():
        cur = st.work(work_id)
        st.update_work(work_id, state="failed", data={
            "failure": {"step": step, "reason": reason, "at": _now(),
                        "directory": "removed" if removed else ("left at %s" % path if left else "never created")},
            "history": _history(cur, "failed", caller, reason=reason)})
        st.audit("work.failed", caller["id"], work_id, step=step, reason=reason, removed=removed)
    if refusal is not None:
        raise Refused("%s; recorded as failed (%s)" % (refusal[0], "directory removed" if removed else (
            "directory left at %s" % path if left else "nothing on disk")), refusal[1], reason="unprotected")
    raise EnvError("work create %s failed at %s: %s; recorded as failed (%s)" % (
        w["task"], step, reason, "directory removed" if removed else ("directory left at %s" % path if left
                                                                      else "nothing on disk")),
        "coord work inspect %s" % w["handle"])


def _new_from(path, rev, environ, message=None):
    """Start the clone's working copy on `rev` (also tried as `rev@origin`, the fetched bookmark),
    described with `message` when given."""
    extra = ["-m", message] if message is not None else []
    try:
        jj(["new", rev] + extra, path, environ=environ)
    except ToolError:
        if "@" in rev or not _BOOKMARK_RE.match(rev):
            raise
        jj(["new", "%s@origin" % rev] + extra, path, environ=environ)


def _git_kind(path):
    g = os.path.join(path, ".git")
    if os.path.islink(g):
        return "symlink"
    if os.path.isdir(g):
        return "directory"
    if os.path.isfile(g):
        return "worktree-file"
    return "none"


def native_note(source, git_kind):
    git_text = {"directory": "its own .git",
                "worktree-file": "a .git file linking a worktree of the shared git repository, not its own .git",
                "none": "no .git, so git-based tools (and nix flake discovery) do not see a repository"}.get(
        git_kind, "an unusual .git (%s)" % git_kind)
    return ("note: native jj workspace of %s: it shares the operation log, object store and bookmarks with every "
            "other workspace there, and every jj command in either snapshots into that shared store; it has %s. "
            "It is not an isolation boundary." % (source, git_text))


def _discard_half_created(w, native, environ):
    """Remove what a failed create left, only the directory this create made. -> (removed, left).
    A native workspace is also forgotten, and git's record of its worktree in the shared
    repository pruned once its directory is gone: a `jj workspace add` that failed part-way can
    leave that record (its HEAD still `refs/jj/root`), which git fsck reports and git would
    show as an unborn branch."""
    path = w["path"]
    if native:
        try:
            jj(["workspace", "forget", workspace_name(w["id"])], w["source"], environ=environ)
        except store.CoordError:
            pass
    removed, left = False, False
    if os.path.lexists(path):
        if os.path.islink(path) or not below(os.path.realpath(path), w["scratch_root"]):
            left = True
        else:
            try:
                _rmtree(path)
                removed = True
            except OSError:
                left = True
    if native and not os.path.lexists(path):
        try:  # prunes only records whose directory no longer exists; never touches a working tree
            git(["worktree", "prune"], w["source"], environ=environ)
        except store.CoordError:
            pass
    return removed, left



# --------------------------------------------------------------------------- setup per clone

SETUP_OK = frozenset(("ok", "none"))


def port_base(st, work_id):
    """The first of PORT_STRIDE ports this work may use: a slot derived from the work ID, moved on
    to the next free one while a live work (not failed or removed) holds it. Call inside the
    transaction that records the work, so two creates never get the same base."""
    taken = set(w["data"].get("port_base") for w in st.works() if w["state"] != "failed")
    first = int(store.hashes().sha256(work_id.encode("ascii")).hexdigest()[:8], 16) % PORT_SLOTS
    for i in range(PORT_SLOTS):
        base = PORT_FIRST + ((first + i) % PORT_SLOTS) * PORT_STRIDE
        if base not in taken:
            return base
    raise Refused("every one of the %d port bases is held by a live work" % PORT_SLOTS,
                  "remove finished work: coord work gc")


def _include_git(source):
    """git arguments for the shared checkout's working tree with its own ignore rules."""
    if os.path.exists(os.path.join(source, ".git")):
        return ["-C", source]
    inner = os.path.join(source, ".jj", "repo", "store", "git")
    if os.path.isdir(inner):
        return ["-C", source, "--git-dir", inner, "--work-tree", source]
    return None


def include_candidates(source, environ=None):
    """Paths (relative, sorted) that the shared checkout's .worktreeinclude names AND git ignores
    there; None when there is no .worktreeinclude. Tracked files and untracked files that are not
    ignored are never candidates; nothing under the top-level .jj or .git is."""
    inc = os.path.join(source, INCLUDE_FILE)
    if not os.path.isfile(inc):
        return None
    if not store.within(os.path.realpath(inc), source):
        raise EnvError("%s leads outside %s" % (inc, source), "make %s a plain file" % INCLUDE_FILE)
    gargs = _include_git(source)
    if gargs is None:
        raise EnvError("%s has no git store to read its ignore rules from" % source,
                       "coord works only in jj/git repositories")
    _, out, _ = git(gargs + ["ls-files", "-z", "--others", "--ignored", "--exclude-from=" + inc], source, environ)
    matched = sorted(p for p in out.split("\0") if p and p.split("/", 1)[0] not in (".jj", ".git"))
    if not matched:
        return []
    code, out, err = git(gargs + ["check-ignore", "--stdin", "-z"], source, environ, check=False,
                         input="\0".join(matched) + "\0")
    if code not in (0, 1):
        raise ToolError(["git", "check-ignore", "--stdin"], code, err)
    ignored = set(out.split("\0"))
    return [p for p in matched if p in ignored]


def _entry_digest(path):
    """sha256 of a regular file's bytes, "link:TARGET" for a symlink, None for anything else."""
    try:
        st_ = os.lstat(path)
        if _stat.S_ISLNK(st_.st_mode):
            return "link:" + os.readlink(path)
        if not _stat.S_ISREG(st_.st_mode):
            return None
        h = store.hashes().sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


def _plain_parents(root, rel):
    """True when every directory of `rel` below `root` is a real directory (or missing), no symlink."""
    cur = root
    for part in rel.split("/")[:-1]:
        cur = os.path.join(cur, part)
        if os.path.islink(cur) or (os.path.lexists(cur) and not os.path.isdir(cur)):
            return False
    return True


def copy_includes(w, environ=None):
    """Copy the shared checkout's included ignored files into the clone; -> {copied: [{path,
    sha256}], count, skipped: [{path, why}]} (None when there is no .worktreeinclude).

    Never through a symlinked directory on either side, never a symlink that is absolute or
    leads out of the shared checkout (a relative one inside it is recreated as a link), never
    over something already in the clone (a file there with the same content counts as copied)."""
    source, path = w["source"], w["path"]
    names = include_candidates(source, environ)
    if names is None:
        return None
    copied, skipped = [], []
    real_source = os.path.realpath(source)
    for rel in names:
        src, dest = os.path.join(source, rel), os.path.join(path, rel)
        if not _plain_parents(source, rel) or not _plain_parents(path, rel):
            skipped.append({"path": rel, "why": "a symlink in its directories"})
            continue
        try:
            info = os.lstat(src)
        except OSError as exc:
            skipped.append({"path": rel, "why": exc.strerror or str(exc)})
            continue
        if _stat.S_ISLNK(info.st_mode):
            target = os.readlink(src)
            if os.path.isabs(target) or not store.within(os.path.realpath(src), real_source):
                skipped.append({"path": rel, "why": "a symlink leading out of the repository"})
                continue
        elif not _stat.S_ISREG(info.st_mode):
            skipped.append({"path": rel, "why": "not a regular file"})
            continue
        digest = _entry_digest(src)
        if os.path.lexists(dest):
            if digest is not None and _entry_digest(dest) == digest:
                copied.append({"path": rel, "sha256": digest})
            else:
                skipped.append({"path": rel, "why": "the clone already has a different one"})
            continue
        try:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if _stat.S_ISLNK(info.st_mode):
                os.symlink(target, dest)
                digest = _entry_digest(dest)
            else:
                digest = _copy_file(src, dest, info.st_mode & 0o777)
        except OSError as exc:
            skipped.append({"path": rel, "why": exc.strerror or str(exc)})
            continue
        copied.append({"path": rel, "sha256": digest})
    return {"copied": copied[:KEPT_COPIES], "count": len(copied), "skipped": skipped[:KEPT_PATHS],
            "skipped_count": len(skipped)}


def _copy_file(src, dest, mode):
    """Copy a regular file without following a symlink at either end; -> sha256 of what was written."""
    h = store.hashes().sha256()
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    fin = os.open(src, os.O_RDONLY | nofollow)
    try:
        fout = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | nofollow, mode)
        try:
            while True:
                chunk = os.read(fin, 1 << 20)
                if not chunk:
                    break
                h.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fout, view):]
        finally:
            os.close(fout)
    finally:
        os.close(fin)
    os.chmod(dest, mode)
    return h.hexdigest()


def setup_env(w, environ):
    """The setup hook's environment: the caller's (without git redirections) plus the work's facts."""
    env = tool_env(environ)
    for key in ("EDITOR", "VISUAL"):
        env.pop(key, None)
        if environ.get(key):
            env[key] = environ[key]
    env.update({"COORD_WORK_ID": w["id"], "COORD_WORK_PATH": w["path"], "COORD_WORK_HANDLE": w["handle"],
                "COORD_WORK_TASK": w["task"], "COORD_SOURCE_PATH": w["source"] or "",
                "COORD_PORT_BASE": str(w["data"].get("port_base", "")), "COORD_PORT_COUNT": str(PORT_STRIDE)})
    return env


def _run_hook_script(w, environ, timeout):
    """Run the clone's .coord/setup; -> (status, exit code or None, output tail)."""
    import tempfile
    hook = os.path.join(w["path"], SETUP_HOOK)
    if not store.within(os.path.realpath(hook), w["path"]):
        return "failed", None, "%s leads outside the clone; not run" % SETUP_HOOK
    if not os.path.isfile(hook) or not os.access(hook, os.X_OK):
        return "failed", None, "%s is not an executable file (chmod +x it and commit it)" % SETUP_HOOK
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen([hook], cwd=w["path"], env=setup_env(w, environ), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            return "failed", None, "cannot run %s: %s" % (SETUP_HOOK, exc.strerror or exc)
        try:
            code = proc.wait(timeout=timeout)
            status = "ok" if code == 0 else "failed"
        except subprocess.TimeoutExpired:
            import signal
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            code = proc.wait()
            status = "timeout"
        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - 4 * SETUP_TAIL))
        tail = out.read().decode("utf-8", "replace")
    tail = store.clean_text(tail[-SETUP_TAIL:], SETUP_TAIL) if "\n" not in tail else \
        "\n".join(store.clean_text(l, SETUP_TAIL) for l in tail[-SETUP_TAIL:].splitlines())
    if status == "timeout":
        tail = (tail + "\n" if tail else "") + "coord: killed after %s s (COORD_SETUP_TIMEOUT)" % store._num(timeout)
    return status, (None if status == "timeout" else code), tail


def run_setup(st, *, caller, work, environ):
    """Set the clone up: copy the included ignored files, then run its committed .coord/setup with
    COORD_WORK_ID, COORD_WORK_PATH, COORD_WORK_HANDLE and COORD_PORT_BASE, bounded by
    COORD_SETUP_TIMEOUT. The result (status ok/failed/timeout/none, exit, output tail, duration,
    files copied) goes into the record and the audit; the clone is never deleted here.
    -> (work record, setup result)."""
    environ = os.environ if environ is None else environ
    timeout = store.env_number(environ, "COORD_SETUP_TIMEOUT", SETUP_TIMEOUT, SETUP_TIMEOUT_RANGE)
    w = st.resolve_work(work) if isinstance(work, str) else work
    _refuse_state(w, UNUSABLE)
    verified_path(w)
    if not os.path.isfile(os.path.join(w["source"] or "", INCLUDE_FILE)) and \
            not os.path.lexists(os.path.join(w["path"], SETUP_HOOK)):
        result = {"status": "none", "at": _now()}  # nothing to do: no audit row, one write
        with st.transaction():
            w = st.update_work(w["id"], data={"setup": result})
        return w, result
    with st.transaction():
        w = st.update_work(w["id"], data={"setup": {"status": "running", "at": _now()}})
    started = time.monotonic()
    result = {"status": "none", "exit": None, "output_tail": "", "includes": None}
    try:
        result["includes"] = copy_includes(w, environ)
    except store.CoordError as exc:
        result.update(status="failed", output_tail="copying %s files: %s" % (INCLUDE_FILE, exc.message))
    if result["status"] == "none" and os.path.lexists(os.path.join(w["path"], SETUP_HOOK)):
        status, code, tail = _run_hook_script(w, environ, timeout)
        result.update(status=status, exit=code, output_tail=tail)
    elif result["status"] == "none" and result["includes"] is not None:
        result["status"] = "ok"
    result["duration"] = round(time.monotonic() - started, 3)
    result["at"] = _now()
    copied = (result["includes"] or {}).get("count", 0)
    with st.transaction():
        w = st.update_work(w["id"], data={"setup": result})
        st.audit("work.setup", _who(caller), w["id"], status=result["status"], exit=result["exit"],
                 duration=result["duration"], copied=copied,
                 copied_paths=[c["path"] for c in (result["includes"] or {}).get("copied", [])])
    return w, result


def setup_refusal(w, result, created=False):
    """The Refused (exit 3) a failed setup raises: the clone is kept, and the next command."""
    h = w["handle"]
    last = [l for l in (result.get("output_tail") or "").splitlines() if l.strip()]
    why = {"timeout": "timed out"}.get(result["status"], "exit %s" % result["exit"] if result["exit"] is not None
                                       else "did not run")
    return Refused("%ssetup of %s failed (%s)%s; the clone is kept at %s" % (
        "work %s created, but its " % h if created else "", h, why,
        ": %s" % store.clean_text(last[-1], 200) if last else "", w["path"]),
        "coord work inspect %s --verbose shows its output; fix it, then: coord work setup %s" % (h, h),
        work=h, path=w["path"], setup=result)


def setup_line(setup):
    """One line about a recorded setup for `work inspect`, or None."""
    if not setup or setup.get("status") == "none":
        return None
    status = setup.get("status")
    if status in ("skipped", "running"):
        return "setup %s" % ("skipped (--no-setup)" if status == "skipped" else "running (or interrupted)")
    bits = []
    if setup.get("exit") is not None:
        bits.append("exit %s" % setup["exit"])
    if setup.get("duration") is not None:
        bits.append("%.1f s" % setup["duration"])
    inc = setup.get("includes")
    if inc is not None:
        bits.append("%d file(s) copied%s" % (inc.get("count", 0), ", %d skipped" % inc["skipped_count"]
                                             if inc.get("skipped_count") else ""))
    line = "setup %s%s" % (status, " (%s)" % ", ".join(bits) if bits else "")
    last = [l for l in (setup.get("output_tail") or "").splitlines() if l.strip()]
    if status not in SETUP_OK and last:
        line += ": " + store.clean_text(last[-1], 200)
    return line


def unchanged_copies(w, paths):
    """The subset of `paths` that setup copied into the clone and that are unchanged there and
    still in the shared checkout with the same content: captured, so they do not block removal."""
    rec = {c.get("path"): c.get("sha256") for c in
           (((w["data"].get("setup") or {}).get("includes") or {}).get("copied") or [])}
    out = set()
    for p in paths:
        digest = rec.get(p)
        if not digest or not w.get("source"):
            continue
        if not (_plain_parents(w["path"], p) and _plain_parents(w["source"], p)):
            continue
        if _entry_digest(os.path.join(w["path"], p)) == digest == _entry_digest(os.path.join(w["source"], p)):
            out.add(p)
    return out


# --------------------------------------------------------------------------- inspect / gate

def inspect_work(st, *, work, environ=None, observe=False):
    """What is known about one work record: {work, owner, owner_live, tmux_live, tmux_why,
    depends: [(handle, state)], observed (head_ids of the last snapshot) or observe_error}.
    observe: also read @ from the clone's last snapshot (never snapshotting it)."""
    w = st.resolve_work(work) if isinstance(work, str) else work
    facts = {"work": w, "owner": st.runtime(w["runtime"]) if w["runtime"] else None,
             "owner_live": _owner_of(st, w) is not None, "tmux_live": None, "tmux_why": None, "depends": []}
    if w["data"].get("tmux"):
        live, facts["tmux_why"] = _live_tmux(w)
        facts["tmux_live"] = live is not None
    for dep in w["data"].get("depends", []):
        d = st.work(dep)
        facts["depends"].append((d["handle"] if d else dep, d["state"] if d else "unknown"))
    if observe and not directory_problems(w) and w["state"] not in ENDED:
        try:
            facts["observed"] = head_ids(w["path"], snapshot=False, environ=environ)
        except store.CoordError as exc:
            facts["observe_error"] = exc.message
    return facts


def tmux_state(w):
    """"alive", "gone" or "unknown" (tmux missing or failing) for the work's recorded window,
    validated by its IDs; None when no window was recorded. Never raises."""
    rec = w["data"].get("tmux")
    if not rec:
        return None
    import session
    try:
        session.validate(rec)
    except Refused:
        return "gone"
    except EnvError:
        return "unknown"
    return "alive"


TRUNK_NAMES = ("main", "master", "trunk")


def target_bookmark(w, environ=None, default=None):
    """The bookmark a work's ahead/behind count against: the one it integrates into, else
    `default`, else the canonical repository's current git branch (a colocated jj repository
    has none: HEAD is detached), else the first of TRUNK_NAMES it has; None when none is known."""
    into = _integration(w).get("into") or default
    if into:
        return into
    try:
        gargs = git_dir_args(w["source"])
        code, out, _ = git(gargs + ["symbolic-ref", "--quiet", "--short", "HEAD"], w["source"], environ, check=False)
        if code == 0 and out.strip():
            return out.strip()
        _, out, _ = git(gargs + ["for-each-ref", "--format=%(refname:short)"] +
                        ["refs/heads/" + n for n in TRUNK_NAMES], w["source"], environ, check=False)
    except store.CoordError:
        return None
    have = set(out.split())
    return next((n for n in TRUNK_NAMES if n in have), None)


def status_facts(w, environ=None, into=None):
    """What `coord status` shows of one work beyond its record, read without snapshotting the
    clone or writing anything: {tmux, dirty, dirty_from, into, ahead, behind, errors}.

    dirty: in a colocated clone, `git status` (no optional locks) of the files against @-,
    which sees edits jj has not snapshotted yet; elsewhere whether @ had changes at the last
    snapshot (dirty_from says which). ahead: non-empty commits of the clone's last snapshot
    (::@) that are not on the target bookmark; behind: commits on the target bookmark in the
    canonical repository that the clone's history does not contain. Unknown values are None.
    into: the bookmark to count against when the work integrates into none (target_bookmark)."""
    facts = {"tmux": tmux_state(w), "dirty": None, "dirty_from": None, "into": None, "ahead": None,
             "behind": None, "errors": []}
    if w["state"] in UNUSABLE or directory_problems(w):
        return facts
    path = w["path"]
    try:
        if os.path.exists(os.path.join(path, ".git")):
            _, out, _ = git(["--no-optional-locks", "status", "--porcelain", "--untracked-files=normal"], path, environ)
            facts["dirty"], facts["dirty_from"] = bool(out.strip()), "git"
        else:
            facts["dirty"], facts["dirty_from"] = not head_ids(path, snapshot=False, environ=environ)["empty"], \
                "snapshot"
    except store.CoordError as exc:
        facts["errors"].append(exc.message)
    into = facts["into"] = target_bookmark(w, environ, into)
    if not into or not _BOOKMARK_RE.match(into):
        return facts
    try:
        gargs = git_dir_args(w["source"])
        code, out, _ = git(gargs + ["rev-parse", "--verify", "--quiet", "refs/heads/%s^{commit}" % into],
                           w["source"], environ, check=False)
        target = out.strip() if code == 0 else ""
        on_target = "::present(%s@origin)" % _quote_revset(into)
        if _FULL_COMMIT_RE.match(target):
            on_target = "(::present(%s) | %s)" % (target, on_target)
        facts["ahead"] = len(local_changes(path, "(::@ ~ %s) ~ empty()" % on_target, environ))
        forks = [r["commit"] for r in local_changes(path, "heads(::@ & %s)" % on_target, environ)]
        if target and forks:
            code, out, _ = git(gargs + ["rev-list", "--count", target] + ["^" + f for f in forks],
                               w["source"], environ, check=False)
            facts["behind"] = int(out.strip()) if code == 0 and out.strip().isdigit() else None
    except store.CoordError as exc:
        facts["errors"].append(exc.message)
    return facts


def _quote_revset(name):
    return '"%s"' % name.replace("\\", "\\\\").replace('"', '\\"')


def gate_flags(passed, waive, reason):
    """Refuse a gate call that is not exactly one of pass or waive-with-a-reason."""
    if passed == waive:
        raise UsageError("give exactly one of --pass or --waive", "coord work gate HANDLE --pass")
    if waive and not (reason or "").strip():
        raise UsageError("--waive needs --reason: a waiver is deliberate and recorded",
                         "coord work gate HANDLE --waive --reason \"why\"")


def gate_work(st, *, caller, work, passed, reason=None, override=False):
    """Record that the work's checks passed (passed=True) or are waived with a reason; -> the gate.
    Only who may (authorize) records it; a caller with no identity never does."""
    gate_flags(passed, not passed, reason)
    w = st.resolve_work(work) if isinstance(work, str) else work
    _refuse_state(w, ENDED)
    authorize(st, w, caller, "gate", override)
    gate = {"state": "passed" if passed else "waived", "at": _now(), "by": _who(caller),
            "by_handle": caller["handle"] if caller else None, "user": _user(),
            "reason": store.clean_text(reason, 500) if reason else None}
    with st.transaction():
        cur = st.resolve_work(w["id"])
        st.update_work(w["id"], data={"gate": {k: v for k, v in gate.items() if v is not None}})
        st.audit("work.gate." + gate["state"], _who(caller), w["id"], reason=gate.get("reason"), user=gate["user"])
    return {"work": cur["handle"], "gate": gate}


def _user():
    try:
        import getpass
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - only a label
        return str(os.getuid())



# --------------------------------------------------------------------------- integration

def _integration_resource(bookmark):
    return store.normalize_resource("integration/" + check_bookmark(bookmark))


def enqueue(st, *, caller, handle, into, override=False):
    """Put the work in the visible integration queue for `into` (grants nothing)."""
    into = check_bookmark(into)
    w = st.resolve_work(handle)
    _refuse_state(w, UNUSABLE)
    authorize(st, w, caller, "enqueue", override)
    with st.transaction():
        cur = st.resolve_work(w["id"])
        integ = _integration(cur)
        if integ["state"] not in ENQUEUEABLE:
            raise Refused("work %s is already %s for %s" % (w["handle"], integ["state"], integ.get("into")),
                          "coord work integrate queue")
        integ.update({"state": "queued", "into": into, "queued_at": _now(), "queued_by": caller["id"]})
        st.update_work(w["id"], data={"integration": integ})
        st.audit("work.queued", caller["id"], w["id"], into=into)
    return {"work": w["handle"], "into": into}


def integration_queue(st, *, into=None):
    """{queue: queued and integrating work in order with dependencies, holders: {bookmark: handle}}."""
    into = check_bookmark(into) if into else None
    rows = []
    for w in st.works():
        integ = _integration(w)
        if integ["state"] not in QUEUED or (into and integ.get("into") != into):
            continue
        deps = []
        for dep in w["data"].get("depends", []):
            d = st.work(dep)
            deps.append({"handle": d["handle"] if d else dep,
                         "integration": _integration(d)["state"] if d else "unknown"})
        rows.append({"handle": w["handle"], "task": w["task"], "state": integ["state"], "into": integ.get("into"),
                     "queued_at": integ.get("queued_at") or integ.get("candidate", {}).get("at") or 0,
                     "depends": deps})
    rows.sort(key=lambda r: (r["queued_at"], r["handle"]))
    holders = {}
    for lease in st.all_leases():
        if lease["resource"].startswith("integration/"):
            holders[lease["resource"][len("integration/"):]] = lease["handle"]
    return {"queue": rows, "holders": holders, "into": into}


def acquire(st, *, caller, handle, into, environ=None, override=False, authorized=False):
    """Take integration/<bookmark>, snapshot the clone and freeze its exact candidate (authorized:
    land_work already authorized the caller); -> {work, resource, candidate: {change, commit}, waiting_on}."""
    into = check_bookmark(into)
    resource = _integration_resource(into)
    w = st.resolve_work(handle)
    _refuse_state(w, UNUSABLE)
    if not authorized:
        authorize(st, w, caller, "acquire", override, into=into)
    path = verified_path(w)
    ids = head_ids(path, environ=environ)  # snapshots the clone
    cand_change, cand_commit = _candidate_of(w, ids, local_changes(path, _local_revset(w, environ), environ))
    refuse_placeholder(w, cand_change, cand_commit, environ)
    with st.transaction():
        st.claim(caller["id"], [resource], "exclusive", "integrate %s" % w["handle"])
        cur = st.resolve_work(w["id"])
        integ = _integration(cur)
        integ.update({"state": "integrating", "into": into,
                      "queued_at": integ.get("queued_at") or _now(),
                      "candidate": {"change": cand_change, "commit": cand_commit, "at": _now(),
                                    "runtime": caller["id"], "resource": resource}})
        integ.pop("proof", None)
        integ.pop("released", None)
        st.update_work(w["id"], data={"integration": integ,
                                      "current": {"change": ids["change"], "commit": ids["commit"],
                                                  "empty": ids["empty"], "at": _now()},
                                      "resources": _resources(st, cur)})
        st.audit("work.integration.acquired", caller["id"], w["id"], resource=resource,
                 candidate_change=cand_change, candidate_commit=cand_commit)
    waiting = []
    for dep in w["data"].get("depends", []):
        d = st.work(dep)
        if d is None or _integration(d)["state"] != "integrated":
            waiting.append("%s (%s)" % (d["handle"] if d else dep, _integration(d)["state"] if d else "unknown"))
    return {"work": w["handle"], "resource": resource, "candidate": {"change": cand_change, "commit": cand_commit},
            "waiting_on": waiting, "preview": _acquire_preview(w, cand_commit, into, environ)}


def _acquire_preview(w, commit, into, environ):
    """Fetch the frozen candidate to its private ref, then preview it (never fails acquire)."""
    try:
        ref = fetch_candidate(w, commit, environ)
    except store.CoordError as exc:
        return dict(preview(w, commit, into, environ), ref=None, fetch_error=exc.message)
    return dict(preview(w, commit, into, environ), ref=ref)


def refuse_placeholder(w, change, commit, environ=None):
    """Refuse a candidate whose description is still the one `work create` wrote (or none):
    it would land on the target as "coord work <uuid>: <task>"."""
    _, out, _ = jj(["log", "--no-graph", "-r", commit, "-T", "description"], w["path"], snapshot=False,
                   environ=environ)
    subject = (out.strip().splitlines() or [""])[0].strip()
    placeholder = description(w["task"], w["id"]).splitlines()[0]
    if not subject:
        raise Refused("the candidate %s of %s has no description; it would land on the target with an empty "
                      "subject" % (commit[:12], w["handle"]),
                      "describe the change in the clone, then retry: jj -R %s describe -r %s -m \"what it does\""
                      % (shlex.quote(w["path"]), change), reason="placeholder-description")
    if subject == placeholder:
        raise Refused("the candidate %s of %s still carries coord's placeholder description (%s)"
                      % (commit[:12], w["handle"], store.clean_text(subject, 120)),
                      "describe the change in the clone, then retry: jj -R %s describe -r %s -m \"what it does\""
                      % (shlex.quote(w["path"]), change), reason="placeholder-description")


def _candidate_of(w, ids, rows):
    """(change, commit) of the local change to integrate: @ or its single parent, never a guess."""
    commits = {r["commit"]: r for r in rows}
    if ids["commit"] in commits:
        return ids["change"], ids["commit"]
    if len(ids["parents"]) == 1 and ids["parents"][0] in commits:
        return commits[ids["parents"][0]]["change"], ids["parents"][0]
    if not rows:
        raise Refused("work %s has nothing to integrate: no change beyond the canonical bookmarks" % w["handle"],
                      "make the change first, or gate and remove the work")
    raise Refused("work %s: its local changes are neither @ nor @-; the candidate would be a guess"
                  % w["handle"], "in %s move @ onto the change to integrate (jj new <change>), then retry" % w["path"])


def _resources(st, w):
    res = dict(w["data"].get("resources") or {"planned": []})
    if w.get("runtime"):
        res["actual"] = [l["resource"] for l in st.leases_of(w["runtime"])]
    return res


def _local_revset(w, environ=None):
    """The revset of commits that exist only in this checkout (see LOCAL_WORK).

    A clone's remote-tracking bookmarks are a cache of the canonical repository: one that
    was deleted or moved there since the last fetch must not make commits look safe. So only
    targets that a current canonical branch or tag contains count, checked with git in the
    canonical repository. A native workspace shares the canonical store: its own work is
    what @ added above its recorded base.
    """
    if w["data"].get("kind") == "native":
        parent = (w["data"].get("base") or {}).get("parent")
        return "(::@ ~ ::%s) ~ empty()" % (parent or "root()")
    _, out, _ = jj(["bookmark", "list", "--all-remotes", "-T",
                    'if(remote && remote != "git" && normal_target, normal_target.commit_id() ++ "\\n")'],
                   w["path"], snapshot=False, environ=environ)
    # Tags too (local and remote): a release tagged on a commit no branch contains is the shared
    # repository's history, not the work's, and must neither block cleanup nor become a candidate.
    _, tags, _ = jj(["tag", "list", "--all-remotes", "-T", 'if(normal_target, normal_target.commit_id() ++ "\\n")'],
                    w["path"], snapshot=False, environ=environ)
    targets = sorted({t for t in (out + "\n" + tags).split() if _FULL_COMMIT_RE.match(t)})
    safe = ["root()"]
    if targets:
        gargs = git_dir_args(w["source"])
        _, heads, _ = git(gargs + ["for-each-ref", "--format=%(objectname) %(*objectname)"] + list(CANONICAL_REFS),
                          w["source"], environ)
        current = set(heads.split())
        for t in targets:
            if t in current:  # the common case: one call for every unmoved bookmark or tag
                safe.append(t)
                continue
            code, found, _ = git(gargs + ["for-each-ref", "--count=1", "--contains", t] + list(CANONICAL_REFS),
                                 w["source"], environ, check=False)
            if code == 0 and found.strip():
                safe.append(t)
    return LOCAL_WORK % " | ".join(safe)


def _candidate_for(w, caller, st=None):
    """(integration, candidate) when the caller may prove or release the frozen candidate: the
    runtime that froze it, its resumed successor (which now holds its leases) or, from another
    terminal, the same person; else Refused naming it."""
    integ = _integration(w)
    cand = integ.get("candidate")
    if not cand:
        raise Refused("work %s has no frozen candidate" % w["handle"],
                      "coord work integrate acquire %s --into BOOKMARK" % w["handle"])
    if cand["runtime"] != caller["id"] and st is not None and _freezer_holder(st, cand, caller) is not None:
        return integ, cand
    if cand["runtime"] != caller["id"]:
        raise Refused("the candidate of %s was frozen by another runtime (%s), not %s"
                      % (w["handle"], cand["runtime"], caller["handle"]),
                      "only that runtime may prove or release it; to take over: "
                      "coord work integrate acquire %s --into %s" % (w["handle"], integ.get("into"))
                      if is_person(caller) else "only that runtime may prove or release it")
    return integ, cand



def _freezer_holder(st, cand, caller):
    """The ID of the runtime holding the candidate's lease on behalf of `caller` (the freezer's
    successor, or the freezer when it is the same person as the caller), else None."""
    froze = st.runtime(cand["runtime"])
    if froze is None:
        return None
    last = st.successor(froze)
    if last["id"] == caller["id"]:
        return last["id"]
    uid = store.person_uid(caller)
    if uid is not None and store.is_terminal_person(caller) and store.person_uid(froze) == uid:
        return last["id"]
    return None


def prove(st, *, caller, handle, target, environ=None):
    """Record proof that the frozen candidate is an ancestor of the full `target` commit on
    the bookmark in the canonical repository; -> {work, candidate, target}."""
    target = full_commit(target, "target")
    w = st.resolve_work(handle)
    refuse_agent_integration(st, w, caller, "prove", _integration(w).get("into"), environ=environ)
    integ, cand = _candidate_for(w, caller, st)
    holder = _freezer_holder(st, cand, caller) or caller["id"]
    if integ["state"] == "lock-released":
        raise Refused("the integration lock of %s was released; a release is not evidence" % w["handle"],
                      "re-acquire: coord work integrate acquire %s --into %s" % (w["handle"], integ["into"]))
    held = [l["resource"] for l in st.leases_of(holder, [cand["resource"]])]
    if cand["resource"] not in held:
        raise Refused("%s does not hold %s (expired or released), so it cannot prove" % (
            caller["handle"], cand["resource"]),
            "coord work integrate acquire %s --into %s (re-freezes the candidate)" % (w["handle"], integ["into"]))
    _check_ancestry(w, integ["into"], cand["commit"], target, environ)
    with st.transaction():
        cur = st.resolve_work(w["id"])
        now_integ, now_cand = _candidate_for(cur, caller, st)
        if now_cand != cand:
            raise Refused("the candidate of %s changed while proving" % w["handle"], "retry")
        now_integ.update({"state": "integrated", "proof": {
            "target": target, "into": integ["into"], "candidate": cand["commit"], "at": _now(),
            "runtime": caller["id"], "resource": cand["resource"]}})
        st.update_work(w["id"], data={"integration": now_integ,
                                      "history": _history(cur, cur["state"], caller, event="integrated")})
        st.audit("work.integrated", caller["id"], w["id"], candidate=cand["commit"], target=target,
                 into=integ["into"], resource=cand["resource"], **provenance(st, cur, caller))
    return {"work": w["handle"], "candidate": cand["commit"], "target": target}


def _check_ancestry(w, into, candidate, target, environ):
    """Refuse unless both commits are in the canonical repository, candidate is an ancestor of
    target, and target is on bookmark `into` there."""
    source = w["source"]
    gargs = git_dir_args(source)
    for what, oid in (("target", target), ("candidate", candidate)):
        code, _, _ = git(gargs + ["cat-file", "-e", oid + "^{commit}"], source, environ, check=False)
        if code != 0:
            hint = ("push the candidate to %s first; %s" % (source, SQUASH_NOTE % (w["handle"], w["handle"]))
                    if what == "candidate" else
                    "name a commit that exists in %s" % source)
            raise Refused("%s commit %s is not in the canonical repository %s" % (what, oid, source), hint)
    code, _, err = git(gargs + ["merge-base", "--is-ancestor", candidate, target], source, environ, check=False)
    if code == 1:
        raise Refused("candidate %s of %s is not an ancestor of %s" % (candidate, w["handle"], target),
                      SQUASH_NOTE % (w["handle"], w["handle"]))
    if code != 0:
        raise ToolError(["git", "merge-base", "--is-ancestor"], code, err)
    ref = "refs/heads/" + into
    code, _, _ = git(gargs + ["merge-base", "--is-ancestor", target, ref], source, environ, check=False)
    if code != 0:
        raise Refused("target %s is not on bookmark %s in %s" % (target, into, source),
                      "name the commit %s points at: git %s rev-parse %s" % (into, " ".join(gargs), ref))


def release_integration(st, *, caller, handle):
    """Release the integration lease the caller froze the candidate with (not evidence);
    -> {work, integration: the integration state after it}."""
    w = st.resolve_work(handle)
    integ, cand = _candidate_for(w, caller, st)
    holder = _freezer_holder(st, cand, caller) or caller["id"]
    if integ.get("released"):
        raise Refused("the integration lock of %s was already released" % w["handle"], "coord work inspect %s"
                      % w["handle"])
    with st.transaction():
        held = [l["resource"] for l in st.leases_of(holder, [cand["resource"]])]
        if cand["resource"] in held:
            st.release(holder, [cand["resource"]])
        cur = st.resolve_work(w["id"])
        now_integ, _ = _candidate_for(cur, caller, st)
        now_integ["released"] = {"at": _now(), "runtime": caller["id"], "resource": cand["resource"],
                                 "lease_was_held": cand["resource"] in held}
        if now_integ["state"] != "integrated":
            now_integ["state"] = "lock-released"
        st.update_work(w["id"], data={"integration": now_integ})
        st.audit("work.integration.released", caller["id"], w["id"], resource=cand["resource"],
                 proven=now_integ["state"] == "integrated")
    return {"work": w["handle"], "integration": now_integ["state"]}


# --------------------------------------------------------------------------- landing

LAND_STEPS = ("acquired", "fetched", "rebased", "checked", "push-read", "moved", "pushed", "proven", "released")
LAND_KILL_ENV = "COORD_TEST_LAND_KILL_AFTER"   # test only: SIGKILL this process right after the named step
LAND_CHECK_CONFIG = "coord.landCheck"          # git config key of the canonical repository's local config
CHECK_TIMEOUT = 3600.0                         # seconds one --check command may run
CHECK_TAIL = 4000                              # characters of a failed check's output kept and shown
LAND_RESUMABLE = frozenset(("running", "publish-refused", "publish-ambiguous"))


def _rev(source, ref, environ):
    """The full commit a ref names in the canonical repository, or None."""
    code, out, _ = git(git_dir_args(source) + ["rev-parse", "--verify", "--quiet", ref + "^{commit}"], source,
                       environ, check=False)
    return out.strip() if code == 0 and _FULL_COMMIT_RE.match(out.strip()) else None


def _is_ancestor(source, older, newer, environ):
    code, _, err = git(git_dir_args(source) + ["merge-base", "--is-ancestor", older, newer], source, environ,
                       check=False)
    if code not in (0, 1):
        raise ToolError(["git", "merge-base", "--is-ancestor"], code, err)
    return code == 0


def _landing(w):
    return dict(w["data"].get("landing") or {})


def _land_record(st, w, caller, step, environ, state="running", **facts):
    """Record one finished landing step in the work record and the audit log (one transaction),
    then, for tests only, die here when LAND_KILL_ENV names this step. -> the landing dict."""
    with st.transaction():
        cur = st.work(w["id"])
        landing = _landing(cur)
        landing.update({k: v for k, v in facts.items() if v is not None})
        landing["state"], landing["at"] = state, _now()
        if step:
            landing["step"] = step
            landing["steps"] = list(landing.get("steps") or []) + [{"step": step, "at": _now()}]
        st.update_work(w["id"], data={"landing": landing})
        st.audit("work.landing." + (step or state), _who(caller), w["id"], state=state,
                 **{k: v for k, v in facts.items() if v is not None and k not in ("runtime", "subject", "now", "event")})
    if step and (environ or {}).get(LAND_KILL_ENV) == step:
        import signal
        os.kill(os.getpid(), signal.SIGKILL)
    return landing


def land_check_command(source, environ=None):
    """The repository's configured check command (git config coord.landCheck in the canonical
    repository's own config, which no clone can commit), or None."""
    code, out, _ = git(git_dir_args(source) + ["config", "--local", "--get", LAND_CHECK_CONFIG], source, environ,
                       check=False)
    return out.strip() or None if code == 0 else None


def _conflict_paths(path, change, environ):
    _, out, _ = jj(["resolve", "--list", "-r", change], path, snapshot=False, environ=environ, check=False)
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _rebase_in_clone(st, w, caller, into, target, cand, environ):
    """Rebase the candidate's branch in the clone onto `target` with jj; -> [] or the conflicted paths.
    Only when nothing live works inside the clone (see DESIGN.md, Landing)."""
    path = w["path"]
    jj(["git", "fetch", "--remote", "origin"], path, environ=environ)
    jj(["rebase", "-b", cand["change"], "-d", target], path, environ=environ)
    _, out, _ = jj(["log", "--no-graph", "-r", "%s::@" % cand["change"], "-T",
                    'if(conflict, change_id ++ "\\n")'], path, snapshot=False, environ=environ)
    bad = out.split()
    return sorted(set(p for c in bad for p in _conflict_paths(path, c, environ))) if bad else []


class _Scratch:
    """A private git checkout of the canonical repository (sharing its objects) below the scratch
    root, for a landing whose clone something live works in: the candidate is rebased (by
    cherry-picking its commits onto the target) and checked there, never in the clone. Removed
    on exit; it holds nothing the canonical repository does not (the result is fetched first)."""

    def __init__(self, w, environ):
        self.w, self.environ, self.path = w, environ, None

    def __enter__(self):
        import tempfile
        self.path = tempfile.mkdtemp(prefix=".land-%s-" % self.w["id"][:8], dir=self.w["scratch_root"])
        git(["clone", "--quiet", "--no-checkout", "--shared", clone_source(self.w["source"]), self.path],
            self.w["scratch_root"], self.environ)
        return self

    def __exit__(self, *exc):
        if self.path and below(os.path.realpath(self.path), self.w["scratch_root"]):
            _rmtree(self.path, ignore_errors=True)
        return False

    def git(self, args, check=True):
        return git(args, self.path, self.environ, check=check)

    def checkout(self, commit):
        self.git(["checkout", "--quiet", "--detach", commit])

    def rebase(self, onto, cand):
        """Cherry-pick onto..cand onto `onto`; -> (new commit, []) or (None, conflicted paths)."""
        _, out, _ = self.git(["rev-list", "--reverse", "--topo-order", "%s..%s" % (onto, cand)])
        commits = out.split()
        _, merges, _ = self.git(["rev-list", "--merges", "%s..%s" % (onto, cand)])
        if merges.strip():
            raise Refused("work %s has merge commits since %s; coord rebases only linear work in a scratch copy"
                          % (self.w["handle"], onto[:12]), "rebase it in the clone (jj rebase -b @ -d main@origin), "
                          "then re-run", reason="merge-commits")
        self.checkout(onto)
        for c in commits:
            _, who, _ = self.git(["log", "-1", "--format=%cn%n%ce", c])
            name, email = (who.splitlines() + ["coord", "coord@localhost"])[:2]
            code, _, _ = self.git(["-c", "user.name=" + name, "-c", "user.email=" + email, "cherry-pick",
                                   "--allow-empty", "--keep-redundant-commits", c], check=False)
            if code != 0:
                _, out, _ = self.git(["diff", "--name-only", "--diff-filter=U"], check=False)
                self.git(["cherry-pick", "--abort"], check=False)
                return None, sorted(set(out.split("\n")) - {""}) or ["(unknown)"]
        return _rev(self.path, "HEAD", self.environ), []


def _tell_owner(st, w, caller, body):
    """Send a coord message to whoever works on the work: the agent running it (as `send --to
    WORK` finds it), else its live owner; never the caller itself (a person landing the work
    they created still reaches the agent they launched for it). -> the handle told, or None."""
    candidates = []
    try:
        candidates.append(st.work_recipient(w))
    except Refused:
        pass
    candidates.append(_owner_of(st, w))
    for to in candidates:
        if to is None or to["id"] == caller["id"]:
            continue
        try:
            st.send(caller["id"], body, to["id"], kind="landing")
        except Refused:
            continue
        return to["handle"]
    return None


def _run_check(w, command, environ, cwd=None):
    """Run the check command in the clone (or `cwd`); -> {command, exit, tail, cwd}. The check
    runs in its own process group and session; coord waits for its exit status (not for the end
    of its output, which a background child may hold open), then ends the whole group, so a
    check that starts a server neither holds the landing nor outlives it. A guard process ends
    the group too if coord itself dies first (SIGKILL included). Exit None: timed out."""
    import tempfile
    env = dict(os.environ if environ is None else environ)
    where = cwd or w["path"]
    go_r, go_w = os.pipe()
    with tempfile.TemporaryFile() as out:
        try:
            # The shell waits for "go" on fd 3 until the guard watches its group: a coord killed
            # in between leaves a shell that reads EOF and runs nothing.
            proc = subprocess.Popen(["/bin/sh", "-c", _GATED % (go_r, go_r), "sh", command], cwd=where, env=env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, pass_fds=(go_r,))
        finally:
            os.close(go_r)
        guard = _group_guard(proc.pid)
        try:
            os.write(go_w, b"go\n")
        except OSError:
            pass
        finally:
            os.close(go_w)
        try:
            code = proc.wait(timeout=CHECK_TIMEOUT)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            _end_group(proc.pid, proc)
            proc.wait()
            _release_guard(guard)
        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - 4 * CHECK_TAIL))
        text = out.read().decode("utf-8", "backslashreplace")
    return {"command": command, "exit": code, "tail": text[-CHECK_TAIL:], "cwd": where}


# The check's shell: wait for coord's "go" on fd 3 (EOF: coord died first, run nothing), then
# run the command as `sh -c` would, $$ being the group leader either way.
_GATED = 'read _ <&%d || exit 125; exec %d<&-; eval "$1"'
# The guard: says it is ready, reads its stdin until coord writes "done" or dies (EOF), then, on
# EOF alone, kills the check's process group. Runs isolated (-I -S), imports only os and signal.
_GUARD = ("import os, signal, sys\n"
          "sys.stdout.write('ready\\n')\n"
          "sys.stdout.flush()\n"
          "data = sys.stdin.buffer.read()\n"
          "if not data.startswith(b'done'):\n"
          "    try:\n"
          "        os.killpg(int(sys.argv[1]), signal.SIGKILL)\n"
          "    except OSError:\n"
          "        pass\n")
GROUP_GRACE = 2.0   # seconds between SIGTERM and SIGKILL when a check's group is ended


def _group_guard(pgid):
    import sys
    try:
        guard = subprocess.Popen([sys.executable, "-I", "-S", "-c", _GUARD, str(pgid)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None  # no guard: coord still ends the group itself unless it is killed
    guard.stdout.readline()  # "ready" (or EOF if it died): from here on it watches the group
    guard.stdout.close()
    return guard


def _release_guard(guard):
    if guard is None:
        return
    try:
        guard.stdin.write(b"done")
        guard.stdin.close()
    except OSError:
        pass
    try:
        guard.wait(timeout=10)
    except subprocess.TimeoutExpired:
        guard.kill()


def _end_group(pgid, leader=None):
    """SIGTERM every process left in the group, then SIGKILL what is still there after GROUP_GRACE
    (the leader, a subprocess.Popen, is reaped on the way so that its zombie does not count)."""
    import signal
    try:
        os.killpg(pgid, signal.SIGTERM)
    except OSError:
        return  # nothing left in the group
    deadline = time.monotonic() + GROUP_GRACE
    while time.monotonic() < deadline:
        if leader is not None:
            leader.poll()
        try:
            os.killpg(pgid, 0)
        except OSError:
            return
        time.sleep(0.02)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


CHECK_CREATED_MAX = 5000   # ignored files a check created that the work record remembers


def _disk_state(path):
    """{relative file: (inode, size, mtime_ns, ctime_ns, mode)} of everything on disk in a clone."""
    files, _ = disk_entries(path)
    out = {}
    for rel in files:
        try:
            s = os.lstat(os.path.join(path, rel))
        except OSError:
            continue
        out[rel] = (s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_mode)
    return out


def _check_in_clone(st, w, check, cand, environ):
    """Run the check in the clone (nothing else works there) and keep what it wrote out of the
    work: files it created or changed that are not ignored are moved aside below the scratch
    root (kept, never deleted) and tracked ones are put back as the candidate has them; ignored
    files it created stay, recorded with their hashes as coord's own (cleanup discards them while
    unchanged). -> the check result, with `set_aside` (directory and paths) when it wrote any."""
    path = w["path"]
    before = _disk_state(path)
    result = _run_check(w, check, environ)
    after = _disk_state(path)
    written = sorted(p for p in after if before.get(p) != after[p])
    gone = sorted(p for p in before if p not in after)
    if not written and not gone:
        return result
    ignored = ignored_paths(w, written, environ)
    created_ignored = [p for p in written if p in ignored and p not in before]
    aside = [p for p in written if p not in ignored]
    if aside or gone:
        result["set_aside"] = _set_aside(w, cand["commit"], aside, gone, environ)
    if created_ignored:
        digests = {p: _entry_digest(os.path.join(path, p)) for p in created_ignored[:CHECK_CREATED_MAX]}
        with st.transaction():
            cur = st.work(w["id"])
            known = dict(cur["data"].get("check_created") or {})
            known.update({p: d for p, d in digests.items() if d})
            st.update_work(w["id"], data={"check_created": dict(sorted(known.items())[:CHECK_CREATED_MAX])})
    return result


def _set_aside(w, commit, written, gone, environ):
    """Move the check's writes out of the clone into a fresh directory below the scratch root,
    then put every tracked path it touched back as `commit` has it. -> {dir, paths, restored}."""
    import tempfile
    path = w["path"]
    dest = tempfile.mkdtemp(prefix=".check-%s-" % w["id"][:8], dir=w["scratch_root"])
    for rel in written:
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(os.path.join(path, rel), target)
    touched = sorted(set(written) | set(gone))
    gargs = _git_store(w)
    restored = []
    if gargs is not None and touched:
        _, out, _ = git(gargs + ["ls-tree", "-r", "-z", "--name-only", commit, "--"] +
                        [":(literal)" + p for p in touched], path, environ, check=False)
        restored = [p for p in out.split("\0") if p]
        if restored:
            git(gargs + ["restore", "--source=%s" % commit, "--worktree", "--"] +
                [":(literal)" + p for p in restored], path, environ)
    for rel in written:  # directories the check made and left empty
        d = os.path.dirname(rel)
        while d:
            try:
                os.rmdir(os.path.join(path, d))
            except OSError:
                break
            d = os.path.dirname(d)
    return {"dir": dest, "paths": touched[:200], "count": len(touched), "restored": len(restored)}


def check_created(w, paths):
    """The subset of `paths` (ignored files) that coord's own landing check created and that are
    unchanged since: coord's to clean, not the work's."""
    rec = w["data"].get("check_created") or {}
    return {p for p in paths if rec.get(p) and _plain_parents(w["path"], p)
            and _entry_digest(os.path.join(w["path"], p)) == rec[p]}


def _worktrees_on(source, ref, environ):
    """Working trees of the canonical git repository that have `ref` checked out."""
    _, out, _ = git(git_dir_args(source) + ["worktree", "list", "--porcelain"], source, environ)
    found, cur = [], None
    for line in out.splitlines():
        if line.startswith("worktree "):
            cur = line[len("worktree "):]
        elif line == "branch " + ref and cur:
            found.append(cur)
    return found


def _dirty_touched(tree, old, new, environ):
    """Paths with local changes (tracked, untracked or ignored) in the checkout `tree` that moving
    from `old` to `new` would write."""
    _, out, _ = git(["diff", "--name-only", "-z", "--no-renames", old, new], tree, environ)
    touched = [p for p in out.split("\0") if p]
    if not touched:
        return []
    # Limited to the written paths (literal pathspecs) unless there are too many for one argv.
    spec = ["--"] + [":(literal)" + t for t in touched] if len(touched) <= 2000 else []
    _, out, _ = git(["--no-optional-locks", "status", "--porcelain=v1", "-z", "--untracked-files=all",
                     "--ignored=matching"] + spec, tree, environ)
    dirty, entries = [], out.split("\0")
    i = 0
    while i < len(entries):
        e = entries[i]
        i += 1
        if len(e) < 4:
            continue
        dirty.append(e[3:])
        if e[0] in "RC":  # the rename's source follows
            dirty.append(entries[i])
            i += 1
    hit = set()
    for d in dirty:
        for t in touched:
            if t == d or (d.endswith("/") and t.startswith(d)) or t.startswith(d + "/") or d.startswith(t + "/"):
                hit.add(d)
    return sorted(hit)


def _update_ref(w, into, old, new, environ):
    """git update-ref of the canonical bookmark from exactly `old` to `new` (compare and swap)."""
    source, ref = w["source"], "refs/heads/" + into
    try:
        git(git_dir_args(source) + ["update-ref", "-m", "coord land %s" % w["handle"], ref, new, old], source,
            environ)
    except ToolError:
        now = _rev(source, ref, environ)
        if now == old:
            raise
        raise Refused("%s moved to %s while landing (expected %s); nothing was forced" % (into, now, old),
                      "re-run: %s" % rerun_command(w, into), reason="target-moved")


def _move_target(w, into, old, new, environ):
    """Move bookmark `into` of the canonical repository from exactly `old` to its descendant `new`:
    a fast-forward, never a force or a merge commit. -> how it was moved."""
    source, ref = w["source"], "refs/heads/" + into
    if os.path.isdir(os.path.join(source, ".jj")):
        _update_ref(w, into, old, new, environ)
        jj(["git", "import"], source, snapshot=False, environ=environ)
        return "jj"
    trees = _worktrees_on(source, ref, environ)
    if not trees:
        _update_ref(w, into, old, new, environ)
        return "update-ref"
    tree = trees[0]
    dirty = _dirty_touched(tree, old, new, environ)
    if dirty:
        raise Refused("the shared checkout %s has local changes the landing would overwrite: %s"
                      % (tree, _named(dirty)),
                      "commit, stash or move them (git -C %s status), then re-run: %s"
                      % (shlex.quote(tree), rerun_command(w, into)), reason="dirty-checkout", paths=dirty)
    if _rev(tree, "HEAD", environ) != old:
        raise Refused("%s moved in %s while landing" % (into, tree), "re-run: %s" % rerun_command(w, into), reason="target-moved")
    try:
        git(["merge", "--ff-only", "--quiet", new], tree, environ)
    except ToolError as exc:
        if _rev(tree, ref, environ) != old:
            raise  # it moved after all, or elsewhere: git's own words say what happened
        busy = "index.lock" in exc.output
        raise Refused("%s was not moved: %s" % (
            into, "another git process holds the index of %s (its index.lock)" % tree if busy
            else "git merge --ff-only failed in %s" % tree),
            "%sthen re-run: %s" % (
                "let that git finish (remove the lock only if no git runs there), " if busy
                else "fix what git reports (git -C %s status), " % shlex.quote(tree), rerun_command(w, into)),
            reason="checkout-busy" if busy else "merge-failed", git=store.clean_text(exc.output[-2000:]))
    return "fast-forward"


def _push(st, w, caller, into, remote, old, new, environ):
    """Publish `new` to REMOTE's bookmark, expecting exactly `old` there; -> the pushed facts.
    Raises Refused (keeping push/<remote>/<bookmark>) when the outcome is not a clean success."""
    source = w["source"]
    ref = "refs/heads/" + into
    try:
        code, out, err = git(git_dir_args(source) + ["push", "--porcelain", "--force-with-lease=%s:%s" % (ref, old),
                                                     remote, "%s:%s" % (new, ref)], source, environ, check=False)
        # the porcelain status lines are on stdout, the remote's own words on stderr: keep both
        push_error = None if code == 0 else ((err or "") + "\n" + (out or "")).strip()[-CHECK_TAIL:]
    except ToolError as exc:  # timed out
        push_error = exc.output.strip()[-CHECK_TAIL:] or exc.message
    try:
        after = verify_remote(root=source, work_of=st.work, remote=remote, bookmark=into, expect=new, environ=environ)
        actual = after["actual"]
    except Refused as exc:
        actual = exc.details.get("actual", "unknown")
    except store.CoordError as exc:
        actual = "unreadable: %s" % exc.message
    if actual == new:
        return {"remote_after": new}
    refusal = _push_refusal(push_error, ref)
    if refusal and actual == old:
        # git said no for our ref, and the remote still has exactly what it had: a definite
        # rejection (a pre-receive hook, a protected branch), not an unknown outcome.
        # (recorded by the caller: a landing finishes unpublished, a later publish stays landed)
        with st.transaction():
            st.audit("work.landing.publish-rejected", _who(caller), w["id"], remote=remote, remote_after=actual,
                     push_error=store.clean_text(push_error, 2000))
        raise Refused("remote %s refused %s (%s); nothing was forced" % (remote, into, store.clean_text(refusal, 300)),
                      None, reason="publish-refused", remote_after=actual, remote_unchanged=True,
                      push_error=store.clean_text(push_error, 2000))
    check = "git ls-remote %s %s (expected %s)" % (remote, ref, new)
    # Someone else's commit is there now: our push was definitely not applied (git push is
    # synchronous). Anything else (unreadable remote, still the old value after an error) is
    # ambiguous until a person looks.
    rejected = bool(_FULL_COMMIT_RE.match(actual or "")) and actual != old
    state = "publish-refused" if rejected else "publish-ambiguous"
    _land_record(st, w, caller, None, environ, state=state, remote_after=actual,
                 push_error=store.clean_text(push_error or "", 2000) or None)
    if rejected:
        raise Refused("remote %s %s moved to %s while landing (expected %s); nothing was forced, %s of the shared "
                      "checkout is at %s" % (remote, into, actual, old, into, new),
                      "reconcile %s with %s by hand; push/%s/%s and integration/%s stay held by you; then re-run: %s"
                      % (into, remote, remote, into, into, land_command(w["handle"], into, push=remote)),
                      reason="publish-refused", remote_after=actual)
    raise Refused("the push of %s to %s %s has an unknown outcome (%s)" % (
        new, remote, into, store.clean_text(push_error or ("the re-read shows %s" % actual), 300)),
        "check: %s; then re-run %s (push/%s/%s stays held)"
        % (check, land_command(w["handle"], into, push=remote), remote, into), reason="publish-ambiguous", remote_after=actual)


def _push_refusal(output, ref):
    """Why git's porcelain push output says the remote refused `ref` (its `!` line plus the
    remote's own words), or None when it does not say so."""
    if not output:
        return None
    said = [l[len("remote: "):].strip() for l in output.splitlines() if l.startswith("remote: ")]
    for line in output.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[0] == "!" and parts[1].split(":")[-1] == ref:
            why = parts[2].strip()
            return "; ".join([why] + [l for l in said if l][:3])
    return None


def _stop_before_move(st, w, caller, state, environ, exc, **facts):
    """A landing stopped before the target moved: record why, release the integration lease."""
    reason = exc.message if isinstance(exc, store.CoordError) else str(exc)
    _land_record(st, w, caller, None, environ, state=state, reason=store.clean_text(reason, 500), **facts)
    cur = st.work(w["id"])
    cand = _integration(cur).get("candidate") or {}
    if cand.get("runtime") == caller["id"] and not _integration(cur).get("released"):
        try:
            release_integration(st, caller=caller, handle=w["id"])
        except store.CoordError:
            pass


def land_work(st, *, caller, handle, into, environ, push=None, check=None, override=False):
    """Take the work's candidate all the way onto bookmark `into` of the canonical repository
    (and REMOTE's `into` with push), leaving proof, or stop safely saying why. Each step is
    recorded in data["landing"] and the audit log; re-running finishes an interrupted landing.
    -> {work, landed, into, remote, old_target, rebased, check, moved_by, steps}."""
    into = check_bookmark(into)
    if push is not None and (not push or push.startswith("-")):
        raise UsageError("--push %r is not a remote name" % push, "coord work integrate land WORK --into main "
                         "--push origin")
    w = st.resolve_work(handle)
    authorize(st, w, caller, "land", override, into=into)
    _refuse_state(w, UNUSABLE)
    # One landing into a target at a time, whoever lands: integration/B is re-entrant for one
    # runtime, and two landings of the same person must not both move B. A second one waits
    # here, then reads B afresh (and rebases onto the first one's result).
    with _repo_lock(w["source"], _lock_dir(st, w), "land-" + into):
        return _land_serialised(st, st.work(w["id"]), caller, into, environ, push, check, override)


def _lock_dir(st, w):
    path = getattr(st, "path", None)
    return os.path.dirname(path) if path and os.path.isabs(path) else w["scratch_root"]


def _land_serialised(st, w, caller, into, environ, push, check, override):
    """land_work, holding the landing lock of `into`."""
    source = w["source"]
    ref = "refs/heads/" + into
    landing = _landing(w)
    integ = _integration(w)
    landed_before = landing.get("state") == "landed" and landing.get("into") == into and \
        integ.get("state") == "integrated" and landing.get("landed") and _rev(source, ref, environ) and \
        _is_ancestor(source, landing["landed"], _rev(source, ref, environ), environ)
    resume = landing.get("state") in LAND_RESUMABLE and landing.get("into") == into and landing.get("candidate")
    if resume and _rev(source, landing["candidate"], environ) and _rev(source, ref, environ) and \
            _is_ancestor(source, landing["candidate"], _rev(source, ref, environ), environ):
        return _land_after_move(st, w, caller, into, push or landing.get("remote"), environ)
    check_arg = check
    # --check adds to the repository's configured check, never replaces it: both run, that one first.
    configured = land_check_command(source, environ)
    checks = [configured] if configured else []
    if check and check not in checks:
        checks.append(check)
    check = " && ".join(checks) or None  # what the landing records and shows as its check
    if not checks and _gate(w)["state"] not in GATE_DONE:
        raise Refused("work %s has no passed or waived gate and no check command" % w["handle"],
                      "coord work gate %s --pass, or land with --check CMD (or set git config %s in %s)"
                      % (w["handle"], LAND_CHECK_CONFIG, source), reason="ungated")
    waiting = []
    for dep in w["data"].get("depends", []):
        d = st.work(dep)
        if d is None or _integration(d)["state"] != "integrated":
            waiting.append("%s (%s)" % (d["handle"] if d else dep, _integration(d)["state"] if d else "unknown"))
    if waiting:
        raise Refused("work %s depends on %s, not integrated yet" % (w["handle"], ", ".join(waiting)),
                      "land those first (coord work integrate queue)", reason="depends")
    old = _rev(source, ref, environ)
    if old is None:
        raise Refused("the canonical repository %s has no bookmark %s" % (source, into),
                      "name an existing bookmark: git -C %s branch --list" % source)
    if landed_before:  # a re-run after a finished landing, unless the clone has moved on since
        ids = head_ids(verified_path(w), environ=environ)
        if ids["commit"] == landing["landed"] or (ids["empty"] and ids["parents"] == [landing["landed"]]):
            if push and not (landing.get("remote") == push and landing.get("published", True)
                             and "pushed" in [s["step"] for s in landing.get("steps") or []]):
                return _publish_landed(st, w, caller, into, push, landing, environ)
            return _land_result(w, landing, already=True)
    got = acquire(st, caller=caller, handle=w["id"], into=into, environ=environ, authorized=True)
    cand = dict(got["candidate"])
    with st.transaction():
        st.update_work(w["id"], data={"landing": None})
    landing = _land_record(st, w, caller, "acquired", environ, into=into, remote=push, runtime=caller["id"],
                           started_at=_now(), old_target=old, candidate=cand["commit"], change=cand["change"],
                           original=cand["commit"], check_arg=check_arg)
    w = dict(w, data=dict(w["data"], landing=landing))  # the re-run hints read this landing's options
    try:
        fetch_candidate(w, cand["commit"], environ)
        _land_record(st, w, caller, "fetched", environ, candidate=cand["commit"])
        live = _live_inside(st, w, process_cwds() or {})
        if live and (check or not _is_ancestor(source, old, cand["commit"], environ)):
            with _Scratch(w, environ) as scratch:
                cand = _prepare_in_scratch(st, w, caller, into, old, cand, checks, scratch, live, environ)
        else:
            cand = _prepare_in_clone(st, w, caller, into, old, cand, checks, environ)
        _land_record(st, w, caller, "checked", environ, check=check, checks=checks or None,
                     check_cwd=cand.get("check_cwd"), check_set_aside=cand.get("set_aside"))
        _refuse_peer_leases(st, w, caller, old, cand["commit"], override, environ)
        _refuse_lfs_content(w, old, cand["commit"], environ)
        if push:
            _take_push(st, w, caller, into, push, old, environ)
        how = _move_target(w, into, old, cand["commit"], environ)
    except store.CoordError as exc:
        if not getattr(exc, "landing_recorded", False):
            _stop_before_move(st, w, caller, "refused" if isinstance(exc, Refused) else "failed", environ, exc)
        if push:
            _drop_push(st, caller, push, into)
        raise
    _land_record(st, w, caller, "moved", environ, moved_by=how, landed=cand["commit"],
                 held_by_peers=_held_while_working(st, w, caller, old, cand["commit"], environ) or None)
    return _land_after_move(st, w, caller, into, push, environ)


def _prepare_in_clone(st, w, caller, into, old, cand, checks, environ):
    """Rebase (when stale) and check in the clone itself, nothing live being inside; -> the candidate."""
    source = w["source"]
    rebased = False
    if not _is_ancestor(source, old, cand["commit"], environ):
        paths = _rebase_in_clone(st, w, caller, into, old, cand, environ)
        if paths:
            _land_conflict(st, w, caller, into, old, cand, paths, environ)
        cand = dict(acquire(st, caller=caller, handle=w["id"], into=into, environ=environ,
                            authorized=True)["candidate"])  # land_work authorized the caller
        fetch_candidate(w, cand["commit"], environ)
        rebased = True
        if not _is_ancestor(source, old, cand["commit"], environ):
            raise Refused("the rebased candidate %s of %s is still not based on %s" % (cand["commit"],
                          w["handle"], old), "coord work inspect %s --verbose" % w["handle"])
    _land_record(st, w, caller, "rebased", environ, candidate=cand["commit"], change=cand["change"],
                 rebased=rebased, where="clone")
    if checks:
        result = None
        for command in checks:  # in order; the first failure stops the landing
            result = _check_in_clone(st, w, command, cand, environ)
            if result["exit"] != 0:
                _land_check_failed(st, w, caller, into, cand, result, environ)
            if result.get("set_aside"):
                cand = dict(cand, set_aside=result["set_aside"])
        cand = dict(cand, check_cwd=result["cwd"])
        now_ids = head_ids(w["path"], environ=environ)
        if cand["commit"] not in [now_ids["commit"]] + now_ids["parents"] or \
                (now_ids["commit"] != cand["commit"] and not now_ids["empty"]):
            raise Refused("the clone of %s changed while the check ran" % w["handle"],
                          "re-run: %s" % rerun_command(w, into), reason="changed-during-check")
        _gate_from_check(st, w, caller, checks, cand)
    return cand


def _prepare_in_scratch(st, w, caller, into, old, cand, checks, scratch, live, environ):
    """Rebase (when stale) and check in a private scratch checkout, because something live works
    in the clone (`live`, cleanup's blockers); the clone is not touched. -> the candidate."""
    source = w["source"]
    rebased = False
    if _is_ancestor(source, old, cand["commit"], environ):
        scratch.checkout(cand["commit"])
    else:
        new, paths = scratch.rebase(old, cand["commit"])
        if paths:
            _land_conflict(st, w, caller, into, old, cand, paths, environ, scratch=True)
        ref = "refs/coord/work/%s" % w["id"]
        git(git_dir_args(source) + ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", scratch.path,
                                    "+%s:%s" % (new, ref)], source, environ)
        cand = {"change": cand["change"], "commit": new, "rebased_from": cand["commit"]}
        rebased = True
        with st.transaction():
            cur = st.work(w["id"])
            integ = _integration(cur)
            frozen = dict(integ.get("candidate") or {})
            frozen.update({"commit": new, "rebased_from": cand["rebased_from"], "at": _now()})
            integ["candidate"] = frozen
            st.update_work(w["id"], data={"integration": integ})
            st.audit("work.integration.rebased", caller["id"], w["id"], candidate_commit=new,
                     rebased_from=cand["rebased_from"], where="scratch")
    _land_record(st, w, caller, "rebased", environ, candidate=cand["commit"], rebased=rebased, where="scratch",
                 live_inside=store.clean_text(live[0][1], 300))
    if checks:
        for command in checks:
            result = _run_check(w, command, environ, cwd=scratch.path)
            if result["exit"] != 0:
                _land_check_failed(st, w, caller, into, cand, result, environ)
        cand = dict(cand, check_cwd="a scratch checkout of the candidate (the clone was in use)")
        _gate_from_check(st, w, caller, checks, cand)
    return cand


def _gate_from_check(st, w, caller, checks, cand):
    """Every check passed on the candidate: the gate records each command that ran."""
    gate = {"state": "passed", "at": _now(), "by": caller["id"], "by_handle": caller["handle"],
            "user": _user(), "check": {"command": " && ".join(checks), "commands": list(checks), "exit": 0,
                                       "candidate": cand["commit"]}}
    with st.transaction():
        st.update_work(w["id"], data={"gate": gate})
        st.audit("work.gate.passed", caller["id"], w["id"], check=gate["check"]["command"], checks=list(checks),
                 candidate=cand["commit"])


def _push_resource(remote, into):
    return store.normalize_resource("push/%s/%s" % (remote, into))


def _take_push(st, w, caller, into, remote, old, environ):
    """Take push/<remote>/<bookmark> and require the remote to be at `old`, read over the wire."""
    st.claim(caller["id"], [_push_resource(remote, into)], "exclusive", "land %s" % w["handle"])
    verify_remote(root=w["source"], work_of=st.work, remote=remote, bookmark=into, expect=old, environ=environ)
    _land_record(st, w, caller, "push-read", environ, remote=remote, remote_before=old)


def _drop_push(st, caller, remote, into):
    res = _push_resource(remote, into)
    if any(l["resource"] == res for l in st.leases_of(caller["id"], [res])):
        st.release(caller["id"], [res])


def _land_after_move(st, w, caller, into, push, environ):
    """The steps after the target moved: publish, prove, release. Each is skipped when done."""
    w = st.work(w["id"])
    landing = _landing(w)
    new, old = landing["candidate"], landing["old_target"]
    if landing.get("step") != "moved" and "moved" not in [s["step"] for s in landing.get("steps") or []]:
        landing = _land_record(st, w, caller, "moved", environ, moved_by="found moved", landed=new)
    resource = _integration_resource(into)
    if not st.leases_of(caller["id"], [resource]):
        st.claim(caller["id"], [resource], "exclusive", "land %s" % w["handle"])
    integ = _integration(st.work(w["id"]))
    cand = integ.get("candidate") or {}
    if cand.get("commit") != new or cand.get("runtime") != caller["id"] or integ.get("released"):
        with st.transaction():
            cur = st.work(w["id"])
            integ = _integration(cur)
            integ.update({"state": "integrating", "into": into, "candidate": {
                "change": landing.get("change"), "commit": new, "at": _now(), "runtime": caller["id"],
                "resource": resource}})
            integ.pop("released", None)
            integ.pop("proof", None)
            st.update_work(w["id"], data={"integration": integ})
            st.audit("work.integration.acquired", caller["id"], w["id"], resource=resource, candidate_commit=new,
                     resumed_landing=True)
    done = [s["step"] for s in landing.get("steps") or []]
    if push and "pushed" not in done:
        res = _push_resource(push, into)
        if not st.leases_of(caller["id"], [res]):
            st.claim(caller["id"], [res], "exclusive", "land %s" % w["handle"])
        now = _remote_at(st, w, push, into, new, environ)
        if now != new:
            expect = landing.get("remote_before") or old
            if now != expect:
                _land_record(st, w, caller, None, environ, state="publish-refused", remote_after=now, remote=push)
                raise Refused("remote %s %s is at %s, not the expected %s; nothing was pushed" % (
                    push, into, now, expect), "reconcile %s by hand (push/%s/%s stays held by you), then re-run: %s"
                    % (push, push, into, land_command(w["handle"], into, push=push)),
                    reason="publish-refused", remote_after=now)
            try:
                _push(st, w, caller, into, push, expect, new, environ)
            except Refused as exc:
                if not exc.details.get("remote_unchanged"):
                    raise
                return _land_unpublished(st, w, caller, into, push, new, expect, exc, environ)
        landing = _land_record(st, w, caller, "pushed", environ, remote=push, remote_after=new, published=True)
    if push:
        _drop_push(st, caller, push, into)  # after the re-read, or on a re-run after a kill there
    if "proven" not in done:
        prove(st, caller=caller, handle=w["id"], target=new, environ=environ)
        landing = _land_record(st, w, caller, "proven", environ, proof_target=new)
    release_integration(st, caller=caller, handle=w["id"])
    told = None
    if landing.get("rebased") and landing.get("where") == "scratch" and "released" not in done:
        told = _tell_owner(st, w, caller, (
            "coord: %s landed on %s as %s, rebased in a scratch copy because the clone was in use. The clone still "
            "holds the commits from before the rebase; before coord work remove, in %s: jj git fetch; "
            "jj rebase -b @ -d %s@origin --skip-emptied" % (w["handle"], into, new, w["path"], into)))
    landing = _land_record(st, w, caller, "released", environ, state="landed", finished_at=_now(), owner_told=told)
    return _land_result(st.work(w["id"]), landing)


LFS_POINTER = "version https://git-lfs.github.com/spec/v1\n"
LFS_POINTER_MAX = 1024   # bytes: a pointer file is far smaller


def _held_while_working(st, w, caller, old, new, environ):
    """The paths this landing changed that another runtime claimed exclusively while the work
    existed (the lease audit): shell writes are advisory, so this is where an overlap shows.
    -> [{path, holder}] (at most 50), for the landing's report; never blocks."""
    try:
        _, out, _ = git(git_dir_args(w["source"]) + ["diff", "--name-only", "-z", "--no-renames", old, new],
                        w["source"], environ)
        paths = [p for p in out.split("\0") if p]
        claims = st.exclusive_claims_since(w["created_at"], paths) if paths else []
    except store.CoordError:
        return []
    seen, found = {}, []
    for c in claims:
        rid = c["runtime"]
        if rid not in seen:
            rt = st.runtime(rid) if rid and rid != caller["id"] else None
            seen[rid] = rt if rt is not None and authority(st, w, rt) not in ("owner", "successor", "harness") else None
        rt = seen[rid]
        if rt is None:
            continue
        for p in paths:
            item = {"path": p, "holder": rt["handle"]}
            if store.overlaps(c["resource"], p) and item not in found:
                found.append(item)
    return found[:50]


def _refuse_lfs_content(w, old, new, environ):
    """Refuse a candidate that writes raw content, not a Git LFS pointer, to a path whose
    attributes say `filter=lfs`: jj runs no git filters, so in a clone such a file is committed
    as is, and landing it would put the bytes themselves on the target (and the remote)."""
    gargs = git_dir_args(w["source"])
    _, out, _ = git(gargs + ["diff", "--name-only", "-z", "--no-renames", "--diff-filter=AM", old, new],
                    w["source"], environ)
    paths = [p for p in out.split("\0") if p]
    if not paths:
        return
    spec = ["--"] + paths
    code, attrs, _ = git(gargs + ["check-attr", "-z", "--source=%s" % new, "filter"] + spec, w["source"], environ,
                         check=False)
    if code != 0:  # a git before 2.40 has no --source: the shared checkout's own attributes
        code, attrs, _ = git(gargs + ["check-attr", "-z", "filter"] + spec, w["source"], environ, check=False)
        if code != 0:
            return
    fields = attrs.split("\0")
    lfs = [fields[i] for i in range(0, len(fields) - 2, 3) if fields[i + 2] == "lfs"]
    raw = []
    for path in lfs:
        spec = "%s:%s" % (new, path)
        _, size, _ = git(gargs + ["cat-file", "-s", spec], w["source"], environ)
        if int(size.strip() or 0) > LFS_POINTER_MAX:
            raw.append(path)
            continue
        _, blob, _ = git(gargs + ["cat-file", "blob", spec], w["source"], environ)
        if not blob.startswith(LFS_POINTER):
            raw.append(path)
    if raw:
        raise Refused("the candidate of %s puts raw content, not Git LFS pointers, in %s (filter=lfs): jj runs no git "
                      "filters, so it would land the bytes themselves" % (w["handle"], _named(raw)),
                      "commit those files with git lfs in a git checkout (git lfs track; git add; git commit), or "
                      "leave them out of the change", reason="lfs-content", paths=raw)


def _refuse_peer_leases(st, w, caller, old, new, override, environ):
    """Refuse to move the target over a path of the candidate that another runtime holds
    exclusively (a peer rewriting it in the shared checkout, or in its own clone), unless the
    caller overrides (audited). The work's own agents (owner, successor, its harness, a parked
    holder) and the caller are not peers."""
    _, out, _ = git(git_dir_args(w["source"]) + ["diff", "--name-only", "-z", "--no-renames", old, new],
                    w["source"], environ)
    names = []
    for p in out.split("\0"):
        try:
            names.append(store.normalize_resource(p))
        except store.CoordError:
            continue
    if not names:
        return
    held, seen = [], {}
    for lease in st.conflicts(names, "exclusive", caller["id"]):
        if lease["mode"] != "exclusive":
            continue
        rid = lease["runtime"]
        if rid not in seen:
            rt = st.runtime(rid)
            seen[rid] = rt is not None and authority(st, w, rt) not in ("owner", "successor", "harness") and \
                not (store.person_uid(rt) is not None and store.person_uid(rt) == store.person_uid(caller))
        if seen[rid]:
            held.append(lease)
    if not held:
        return
    paths = sorted({l["resource"] for l in held})
    holders = sorted({l["handle"] for l in held})
    if override:
        with st.transaction():
            st.audit("work.landing.override", caller["id"], w["id"], over="peer-leases", paths=paths[:200],
                     holders=holders)
        return
    first = held[0]
    raise Refused("the landing of %s would change %s, held exclusively by %s%s" % (
        w["handle"], _named(paths), ", ".join(holders),
        " (%s)" % store.clean_text(first["purpose"], 120) if first.get("purpose") else ""),
        "ask them first: coord send \"may %s land over %s?\" --to %s ; then re-run once they release"
        % (w["handle"], paths[0], holders[0]), reason="peer-leased", paths=paths, holders=holders)


def _land_unpublished(st, w, caller, into, push, new, remote_at, exc, environ):
    """The remote definitely refused the push and kept `remote_at`: the shared checkout's target
    already has the candidate, so finish the landing there (prove, release, nothing held for a
    push that is not happening), record it unpublished, and say what moved, what did not, and
    the one command that publishes once the remote accepts."""
    _drop_push(st, caller, push, into)
    prove(st, caller=caller, handle=w["id"], target=new, environ=environ)
    _land_record(st, w, caller, "proven", environ, proof_target=new)
    release_integration(st, caller=caller, handle=w["id"])
    _land_record(st, w, caller, "released", environ, state="landed", finished_at=_now(), published=False,
                 remote=push, remote_after=remote_at)
    raise Refused("%s; %s of the shared checkout is at %s (landed, proven, nothing held), %s %s is still at %s"
                  % (exc.message, into, new, push, into, remote_at),
                  "once %s accepts it, publish: %s" % (push, land_command(w["handle"], into, push=push)),
                  reason="publish-refused", remote_after=remote_at, remote_unchanged=True, landed=new,
                  push_error=exc.details.get("push_error"))


def _remote_at(st, w, remote, into, expect, environ):
    """The commit REMOTE's bookmark `into` is at, read over the wire (None when unreadable)."""
    try:
        return verify_remote(root=w["source"], work_of=st.work, remote=remote, bookmark=into, expect=expect,
                             environ=environ)["actual"]
    except Refused as exc:
        return exc.details.get("actual")


def _publish_landed(st, w, caller, into, push, landing, environ):
    """Publish a finished landing that was not published (the remote refused it, or it landed
    without --push): a fast-forward of REMOTE's bookmark to the landed commit, under
    push/<remote>/<bookmark>, expecting exactly what the remote has now."""
    new = landing["landed"]
    res = _push_resource(push, into)
    st.claim(caller["id"], [res], "exclusive", "publish %s" % w["handle"])
    try:
        now = _remote_at(st, w, push, into, new, environ)
        if now != new:
            if not (now and _FULL_COMMIT_RE.match(now) and _rev(w["source"], now, environ)
                    and _is_ancestor(w["source"], now, new, environ)):
                raise Refused("remote %s %s is at %s, which %s does not build on; nothing was pushed" % (
                    push, into, now, new), "reconcile %s %s with %s by hand (git -C %s fetch %s), then: %s" % (
                    push, into, into, shlex.quote(w["source"]), push, land_command(w["handle"], into, push=push)),
                    reason="publish-refused", remote_after=now)
            try:
                _push(st, w, caller, into, push, now, new, environ)
            except Refused as exc:
                if exc.details.get("remote_unchanged"):
                    raise Refused("%s; %s %s is still at %s" % (exc.message, push, into, now),
                                  "once %s accepts it: %s" % (push, land_command(w["handle"], into, push=push)),
                                  reason="publish-refused", remote_after=now, remote_unchanged=True)
                raise
        landing = _land_record(st, w, caller, "pushed", environ, state="landed", remote=push, remote_after=new,
                               published=True)
    finally:
        _drop_push(st, caller, push, into)
    return _land_result(st.work(w["id"]), landing)


def land_command(handle, into, push=None, check=None):
    """The landing command to type again, with the options that still apply."""
    bits = ["coord", "work", "integrate", "land", handle, "--into", into]
    if push:
        bits += ["--push", push]
    if check:
        bits += ["--check", check]
    return " ".join(shlex.quote(b) if b != "coord" else b for b in bits)


def rerun_command(w, into=None):
    """The command that re-runs the work's recorded landing with the options it was given (its
    --push and its own --check; a configured coord.landCheck applies by itself)."""
    landing = _landing(w)
    return land_command(w["handle"], into or landing.get("into") or "BOOKMARK", push=landing.get("remote"),
                        check=landing.get("check_arg"))


def _land_result(w, landing, already=False):
    return {"work": w["handle"], "landed": landing.get("landed") or landing.get("candidate"),
            "into": landing.get("into"), "remote": landing.get("remote"), "old_target": landing.get("old_target"),
            "rebased": bool(landing.get("rebased")), "check": landing.get("check"),
            "checks": landing.get("checks") or ([landing["check"]] if landing.get("check") else []),
            "check_cwd": landing.get("check_cwd"), "check_set_aside": landing.get("check_set_aside"),
            "held_by_peers": landing.get("held_by_peers") or [],
            "moved_by": landing.get("moved_by"), "steps": [s["step"] for s in landing.get("steps") or []],
            "already": already}


def _land_conflict(st, w, caller, into, old, cand, paths, environ, scratch=False):
    """The rebase onto the current target conflicts: record it, tell the owner, stop (nothing moved).
    scratch: the rebase was tried in a scratch copy, so the clone is unchanged and its owner rebases."""
    how = ("jj git fetch; jj rebase -b @ -d %s@origin; resolve (jj resolve --list)" % into if scratch else
           "jj status; edit; jj resolve --list")
    body = ("coord: landing %s into %s stopped: rebasing onto %s conflicts in %s. Resolve it in %s "
            "(%s), then tell the integration owner %s; they re-run: %s"
            % (w["handle"], into, old[:12], ", ".join(paths[:20]), w["path"], how, caller["handle"],
               rerun_command(w, into)))
    told = _tell_owner(st, w, caller, body)
    exc = Refused("landing %s stopped: rebasing onto %s %s conflicts in %s; %s%s, nothing else changed" % (
                  w["handle"], into, old, _named(paths), "the clone is in use and was not touched" if scratch
                  else "the clone keeps the conflict for its owner", " (told %s)" % told if told else ""),
                  ("the work's agent rebases and resolves in its clone (%s: %s)%s, then re-run: %s"
                   % (w["path"], how, "; it was told" if told else "", rerun_command(w, into))) if scratch else
                  "resolve in %s (jj resolve --list), then re-run: %s" % (w["path"], rerun_command(w, into)),
                  reason="conflict", paths=paths, owner_told=told)
    _stop_before_move(st, w, caller, "conflict", environ, exc, paths=paths, owner_told=told)
    exc.landing_recorded = True
    raise exc


def _land_check_failed(st, w, caller, into, cand, result, environ):
    """The check failed on the frozen candidate: record it as the gate result, stop (nothing moved)."""
    gate = {"state": "failed", "at": _now(), "by": caller["id"], "by_handle": caller["handle"], "user": _user(),
            "check": {"command": result["command"], "exit": result["exit"], "tail": result["tail"],
                      "candidate": cand["commit"]}}
    with st.transaction():
        st.update_work(w["id"], data={"gate": gate})
        st.audit("work.gate.failed", caller["id"], w["id"], check=result["command"], exit=result["exit"],
                 candidate=cand["commit"])
    why = "timed out" if result["exit"] is None else "exit %d" % result["exit"]
    exc = Refused("check %s failed on %s (%s); %s did not move:\n%s" % (
        store.clean_text(result["command"], 200), cand["commit"], why, into,
        store.clean_text(result["tail"], CHECK_TAIL + 100)),
        "fix it in %s, then re-run: %s" % (w["path"], rerun_command(w, into)),
        reason="check-failed", exit=result["exit"])
    _stop_before_move(st, w, caller, "check-failed", environ, exc, check_exit=result["exit"])
    exc.landing_recorded = True
    raise exc
# --------------------------------------------------------------------------- landing preview
# What a landing would do, seen before it happens: commits ahead of the target, how far the
# base is behind it, and the paths `git merge-tree --write-tree` says would conflict. It runs
# in a throwaway bare repository that reads the canonical and clone object stores through
# git alternates and keeps every object git writes to itself, so neither repository changes
# (DESIGN.md, "Landing preview").

CANDIDATE_REFS = "refs/coord/work/"   # private refs in the canonical repository: one per work
MERGE_TREE_GIT = (2, 38)              # `git merge-tree --write-tree`


def candidate_ref(work_id):
    return CANDIDATE_REFS + work_id


def fetch_candidate(w, commit, environ=None):
    """Bring a clone's `commit` into the canonical repository's object store at the private ref
    refs/coord/work/<work id>; -> that ref. Writes objects and that ref only: never the
    canonical working copy, index, HEAD or a branch (jj imports no refs/coord/ ref)."""
    commit = full_commit(commit, "candidate")
    source = w["source"]
    gargs = git_dir_args(source)
    ref = candidate_ref(w["id"])
    code, _, _ = git(gargs + ["cat-file", "-e", commit + "^{commit}"], source, environ, check=False)
    if code == 0:  # already there (a native workspace shares the store, or fetched before)
        git(gargs + ["update-ref", ref, commit], source, environ)
    else:
        git(gargs + ["-c", "gc.auto=0", "-c", "maintenance.auto=false", "fetch", "--quiet", "--no-tags",
                     "--no-write-fetch-head", "--no-recurse-submodules",
                     "--upload-pack=git -c uploadpack.allowAnySHA1InWant=true upload-pack",  # served even if unadvertised
                     verified_path(w), "+%s:%s" % (commit, ref)], source, environ)
    return ref


def drop_candidate_ref(w, environ=None, keep_unlanded=False):
    """Delete the work's private ref in the canonical repository; -> "deleted", "kept" (with
    keep_unlanded, when no canonical branch or tag contains its commit: the clone is gone and
    the ref may be the last copy) or None (no ref, or no repository to ask). Never raises."""
    source, ref = w.get("source"), candidate_ref(w["id"])
    try:
        gargs = git_dir_args(source or "")
        _, out, _ = git(gargs + ["for-each-ref", "--format=%(objectname)", ref], source, environ)
        oid = out.strip()
        if not oid:
            return None
        if keep_unlanded:
            _, found, _ = git(gargs + ["for-each-ref", "--count=1", "--contains", oid, "refs/heads", "refs/tags"],
                              source, environ)
            if not found.strip():
                return "kept"
        git(gargs + ["update-ref", "-d", ref, oid], source, environ)
        return "deleted"
    except store.CoordError:
        return None


def _objects_dir(repo, environ=None):
    """The absolute object directory of a checkout (its .git, jj's own git store, or what git says)."""
    for d in (os.path.join(repo, ".git", "objects"), os.path.join(repo, ".jj", "repo", "store", "git", "objects")):
        if os.path.isdir(d):
            return d
    _, out, _ = git(git_dir_args(repo) + ["rev-parse", "--git-path", "objects"], repo, environ)
    path = out.strip()
    return path if os.path.isabs(path) else os.path.join(repo, path)


def _alternate_line(path):
    if any(c in path for c in '"\\\n') or path != path.strip():
        return '"%s"' % path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return path


class _Overlay:
    """A throwaway bare repository whose object store reads `dirs` through alternates: git
    commands run in it see every object there, and what they write (merge-tree's trees and
    merged blobs) stays in the overlay, deleted on exit. It has no refs: name commits by ID."""

    def __init__(self, dirs, environ=None, sha256=False):
        import tempfile
        self.environ, self.calls, self.dir = environ, 0, None
        files = {"HEAD": "ref: refs/heads/coord-preview\n",
                 "config": "[core]\n\trepositoryformatversion = %d\n\tbare = true\n%s" % (
                     (1, "[extensions]\n\tobjectformat = sha256\n") if sha256 else (0, "")),
                 os.path.join("objects", "info", "alternates"): "".join(
                     _alternate_line(d) + "\n" for d in store.unique(dirs))}
        try:
            self.dir = tempfile.mkdtemp(prefix="coord-preview-")
            os.makedirs(os.path.join(self.dir, "objects", "info"))
            os.mkdir(os.path.join(self.dir, "refs"))
            for name, text in files.items():
                with open(os.path.join(self.dir, name), "w", encoding="utf-8") as f:
                    f.write(text)
        except OSError as exc:
            self.__exit__()
            raise EnvError("cannot make a temporary repository for the preview: %s" % exc,
                           "set TMPDIR to a writable directory and retry")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.dir:
            _rmtree(self.dir, ignore_errors=True)
        return False

    def git(self, args, check=True, input=None):
        self.calls += 1
        return git(["--git-dir", self.dir] + list(args), self.dir, self.environ, check=check, input=input)


class _NoMergeTree(Exception):
    """git cannot compute would-conflict paths (too old for merge-tree --write-tree, or it failed)."""


def git_version(environ=None):
    """(major, minor) of the git on PATH, or None when it cannot say."""
    _, out, _ = git(["version"], None, environ, check=False)
    m = re.search(r"(\d+)\.(\d+)", out or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _merge_tree_failed(code, err, environ):
    version = git_version(environ)
    if version is not None and version < MERGE_TREE_GIT:
        return _NoMergeTree("git %d.%d cannot compute them: it needs git merge-tree --write-tree (git %d.%d or "
                            "newer)" % (version + MERGE_TREE_GIT))
    lines = [l for l in (err or "").splitlines() if l.strip()]
    return _NoMergeTree("git merge-tree failed (exit %s): %s" % (code, store.clean_text(lines[-1] if lines else
                                                                                         "no output", 200)))


def merge_conflicts(ov, pairs):
    """{(a, b): [paths that merging commit b into commit a would leave conflicted]} for each pair
    of full commit IDs, computed in the overlay: one `git merge-tree --stdin` for all of them
    (per pair where git lacks --stdin). Raises _NoMergeTree when git cannot say."""
    pairs = list(dict.fromkeys(pairs))
    if not pairs:
        return {}
    code, out, err = ov.git(["merge-tree", "--write-tree", "--stdin", "-z", "--name-only", "--no-messages"],
                            check=False, input="".join("%s %s\n" % p for p in pairs))
    if code == 0:
        toks, i, result = out.split("\0"), 0, {}
        for p in pairs:
            if i + 1 >= len(toks) or toks[i] not in ("0", "1"):
                raise _NoMergeTree("git merge-tree --stdin answered in a shape coord does not know")
            i += 2
            names = []
            while i < len(toks) and toks[i] != "":
                names.append(toks[i])
                i += 1
            result[p] = sorted(set(names))
            i += 1
        return result
    if code != 129:  # 129: usage (no --stdin); anything else is a real failure
        raise _merge_tree_failed(code, err, ov.environ)
    result = {}
    for a, b in pairs:
        code, out, err = ov.git(["merge-tree", "--write-tree", "-z", "--name-only", "--no-messages", a, b],
                                check=False)
        if code not in (0, 1):
            raise _merge_tree_failed(code, err, ov.environ)
        result[(a, b)] = sorted(set(t for t in out.split("\0")[1:] if t))
    return result


def _ahead_behind(ov, target, tip):
    """(commits of tip not on target, commits of target not in tip's history)."""
    _, out, _ = ov.git(["rev-list", "--left-right", "--count", "%s...%s" % (target, tip)])
    behind, ahead = out.split()
    return int(ahead), int(behind)


def _changed_paths(ov, old, new):
    """Paths `new` changed since its merge base with `old` (renames as a delete and an add)."""
    _, out, _ = ov.git(["diff", "--name-only", "-z", "--no-renames", "%s...%s" % (old, new)])
    return set(p for p in out.split("\0") if p)


def branch_commits(source, environ=None):
    """{branch: full commit} of every refs/heads/ branch in the canonical repository (one git call)."""
    _, out, _ = git(git_dir_args(source) + ["for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/"],
                    source, environ)
    heads = {}
    for line in out.splitlines():
        oid, _, name = line.partition(" ")
        if name.startswith("refs/heads/") and _FULL_COMMIT_RE.match(oid):
            heads[name[len("refs/heads/"):]] = oid
    return heads


def work_tip(w, environ=None):
    """The commit the work would land now, read from its clone's last snapshot (never taking
    one): @ when it has changes, else its single parent; None when neither is a single commit."""
    ids = head_ids(verified_path(w), snapshot=False, environ=environ)
    if not ids["empty"]:
        return ids["commit"]
    return ids["parents"][0] if len(ids["parents"]) == 1 else None


def _store_dirs(w, environ=None):
    """Object directories a preview of w reads: the canonical repository's, then the clone's."""
    dirs = [_objects_dir(w["source"], environ)]
    if w["data"].get("kind") != "native" and w["path"] and not directory_problems(w):
        dirs.append(_objects_dir(w["path"], environ))
    return dirs


def preview(w, commit, into, environ=None):
    """What landing `commit` of work w on bookmark `into` would do, read without changing the
    canonical repository or the clone: {into, target, candidate, ahead, behind, conflicts,
    error}. conflicts: the paths that would conflict with the current target ([] when none;
    None with `error` saying why when they could not be computed). Never raises."""
    out = {"into": into, "target": None, "candidate": commit, "ahead": None, "behind": None, "conflicts": None,
           "error": None}
    try:
        heads = branch_commits(w["source"], environ)  # first: a missing git says so, not "no bookmark"
        target = heads.get(into) if into else None
        if not target:
            out["error"] = "no bookmark %s in %s" % (into, w["source"]) if into else "no target bookmark known"
            return out
        out["target"] = target
        with _Overlay(_store_dirs(w, environ), environ, sha256=len(target) == 64) as ov:
            out["ahead"], out["behind"] = _ahead_behind(ov, target, commit)
            if out["behind"] == 0:
                out["conflicts"] = []  # the target is in the candidate's history: a fast-forward
            else:
                out["conflicts"] = merge_conflicts(ov, [(target, commit)])[(target, commit)]
    except _NoMergeTree as exc:
        out["error"] = "would-conflict paths not computed: %s" % exc
    except store.CoordError as exc:
        out["error"] = exc.message
    return out


def preview_line(p):
    """One line for a preview: '2 ahead of main, base 3 behind: would conflict in a.py, b.py'."""
    if p.get("ahead") is None:
        return "preview: %s" % store.clean_text(p.get("error") or "unknown", 300)
    base = "base current" if not p["behind"] else "base %d behind" % p["behind"]
    text = "%d ahead of %s, %s" % (p["ahead"], p["into"], base)
    if p["conflicts"]:
        text += ": would conflict in %s" % _named(p["conflicts"])
    elif p["conflicts"] == [] and p["ahead"]:
        text += ", no conflicts"
    if p.get("error"):
        text += "; %s" % store.clean_text(p["error"], 300)
    return text


def inspect_preview(w, environ=None):
    """The preview `work inspect` shows: the frozen candidate while integrating, else the
    clone's tip at its last snapshot, against the bookmark it integrates into (else the
    repository's main bookmark); None when there is nothing to preview."""
    integ = _integration(w)
    if w["state"] in UNUSABLE or integ["state"] == "integrated":
        return None
    cand = integ.get("candidate") if integ["state"] == "integrating" else None
    try:
        if directory_problems(w) and not cand:
            return None
        commit = cand["commit"] if cand else work_tip(w, environ)
        into = target_bookmark(w, environ)
    except store.CoordError as exc:
        return {"into": None, "target": None, "candidate": None, "ahead": None, "behind": None,
                "conflicts": None, "error": exc.message}
    if not commit:
        return None
    return preview(w, commit, into, environ)


def conflict_report(st, *, into=None, environ=None):
    """For every live managed work with changes: ahead/behind its target and the paths it and
    the target both changed and would conflict on; for every pair of them, the paths both
    changed and the paths merging the two would conflict on. Read-only: the clones' last
    snapshots, the canonical refs, one overlay per canonical repository.
    -> {works: [...], pairs: [{a, b, overlap, conflicts}] (pairs with either only),
    pairs_checked, skipped: [{handle, reason}], error}."""
    into = check_bookmark(into) if into else None
    works, skipped, groups = [], [], {}
    for w in st.works():
        if w["state"] in UNUSABLE or _integration(w)["state"] == "integrated":
            continue
        problems = directory_problems(w)
        if problems:
            skipped.append({"handle": w["handle"], "reason": problems[0][1]})
            continue
        try:
            tip = work_tip(w, environ)
        except store.CoordError as exc:
            skipped.append({"handle": w["handle"], "reason": exc.message})
            continue
        if tip:
            groups.setdefault(w["source"], []).append((w, tip))
    report = {"works": works, "pairs": [], "pairs_checked": 0, "skipped": skipped, "error": None}
    for source, members in groups.items():
        try:
            heads = branch_commits(source, environ)
            default = into or target_bookmark({"data": {}, "source": source}, environ)
            dirs = [_objects_dir(source, environ)] + [_objects_dir(w["path"], environ) for w, _ in members
                                                      if w["data"].get("kind") != "native"]
        except store.CoordError as exc:
            skipped += [{"handle": w["handle"], "reason": exc.message} for w, _ in members]
            continue
        with _Overlay(dirs, environ, sha256=len(members[0][1]) == 64) as ov:
            _report_group(ov, members, heads, into, default, report)
    return report


def _report_group(ov, members, heads, into, default, report):
    """conflict_report for the works of one canonical repository, in its overlay."""
    rows, merges = [], []
    for w, tip in members:
        bookmark = into or _integration(w).get("into") or default
        row = {"handle": w["handle"], "task": w["task"], "into": bookmark, "target": heads.get(bookmark),
               "tip": tip, "ahead": None, "behind": None, "changed": [], "target_overlap": [],
               "target_conflicts": []}
        if not row["target"]:
            report["skipped"].append({"handle": w["handle"], "reason": "no bookmark %s in %s" % (bookmark,
                                                                                              w["source"])})
            continue
        try:
            row["ahead"], row["behind"] = _ahead_behind(ov, row["target"], tip)
            if row["ahead"]:
                row["changed"] = sorted(_changed_paths(ov, row["target"], tip))
            if row["ahead"] and row["behind"]:
                row["target_overlap"] = sorted(set(row["changed"]) & _changed_paths(ov, tip, row["target"]))
        except store.CoordError as exc:
            report["skipped"].append({"handle": w["handle"], "reason": exc.message})
            continue
        if row["ahead"] and row["behind"]:
            merges.append((row["target"], tip))
        report["works"].append(row)
        rows.append(row)
    busy = [r for r in rows if r["changed"]]
    pairs = [(a, b) for i, a in enumerate(busy) for b in busy[i + 1:] if a["tip"] != b["tip"]]
    merges += [(a["tip"], b["tip"]) for a, b in pairs]
    report["pairs_checked"] += len(pairs)
    try:
        found = merge_conflicts(ov, merges)
    except (_NoMergeTree, store.CoordError) as exc:
        report["error"] = "conflicts not computed: %s" % getattr(exc, "message", exc)
        found = None
    for r in rows:
        if found is None:
            r["target_conflicts"] = None
        elif r["target"] and r["changed"] and r["behind"]:
            r["target_conflicts"] = found[(r["target"], r["tip"])]
    for a, b in pairs:
        overlap = sorted(set(a["changed"]) & set(b["changed"]))
        conflicts = None if found is None else found[(a["tip"], b["tip"])]
        if overlap or conflicts:
            report["pairs"].append({"a": a["handle"], "b": b["handle"], "overlap": overlap, "conflicts": conflicts})


# --------------------------------------------------------------------------- provenance

def work_runtimes(st, w):
    """Who worked for w: {created_by: its creating runtime and that runtime's successors,
    made_by: the runtimes of every conversation its tmux windows ran (started or resumed) and
    every runtime whose recorded cwd is in the clone}; each a list of runtime dicts."""
    created, rid = [], w.get("runtime")
    while rid and rid not in [r["id"] for r in created]:
        rt = st.runtime(rid)
        if rt is None:
            break
        created.append(rt)
        rid = rt.get("superseded_by")
    conversations = [(w["data"].get("tmux") or {}).get("conversation")] + store.work_conversations(w)
    conversations += [h.get("conversation") for h in w["data"].get("history", [])]
    made = st.runtimes_of(conversations, w.get("path"))
    return {"created_by": created, "made_by": made}


def _authors(who):
    """The runtimes whose leases are the work's: those that made it, else its creator chain."""
    return who["made_by"] or who["created_by"]


def _runtime_ref(rt):
    return {"runtime": rt["id"], "handle": rt["handle"], "conversation": rt["conversation"],
            "harness": rt.get("harness") or None}


def provenance(st, w, caller):
    """What the audit row of a landing links the landed commit to: the work, the runtimes and
    conversations that created and made it, the leases they held while it lived, its gate (and
    check) result, and the integration owner. Deterministic: read from the database only."""
    who = work_runtimes(st, w)
    rows = st.audit_story(w["id"], [rt["id"] for rt in _authors(who)], kinds=("lease.claimed",),
                          end_event="work.removed")
    leases = sorted(set(r["subject"] for r in rows if r["event"] == "lease.claimed" and r["subject"]))
    out = {"work_handle": w["handle"], "task": w["task"],
           "created_by": _runtime_ref(who["created_by"][0]) if who["created_by"] else None,
           "made_by": [_runtime_ref(rt) for rt in who["made_by"]], "leases": leases, "gate": _gate(w),
           "owner": dict(_runtime_ref(caller), user=_user()) if caller else None}
    check = _integration(w).get("check")
    if check:
        out["check"] = check
    return out


def work_story(st, *, work, since=0, private=False):
    """One work's audit rows in order (audit_lines' objects): every row about the work, and the
    lease and runtime rows of the runtimes that made it (see _authors) while it lived."""
    w = st.resolve_work(work)
    ids = [rt["id"] for rt in _authors(work_runtimes(st, w))]
    return st.audit_story(w["id"], ids, since=since, end_event="work.removed", private=private)


_STORY_FIRST = ("candidate", "candidate_commit", "target", "into", "made_by", "owner", "gate", "leases")
_STORY_QUIET = ("path", "source", "ttl", "base_change", "candidate_change", "task", "work_handle", "created_by")


def story_lines(st, events, verbose=False):
    """One line per audit event: time (UTC), ID, event, who, what it was about, its data."""
    handles = {}

    def handle(rid):
        if rid not in handles:
            rt = st.runtime(rid) if rid else None
            handles[rid] = rt["handle"] if rt else (rid or "-")
        return handles[rid]

    def value(v):
        if isinstance(v, str):
            return v if verbose or not _FULL_COMMIT_RE.match(v) else v[:12]
        if isinstance(v, dict):
            return v.get("handle") or v.get("state") or v.get("commit") or None
        if isinstance(v, list):
            items = [x for x in (value(i) for i in v) if x not in (None, "")]
            return ",".join(str(x) for x in items[:3]) + (" +%d" % (len(items) - 3) if len(items) > 3 else "")
        return None if v is None else json.dumps(v)

    lines = []
    for ev in events:
        bits = [time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ev["at"])), "#%d" % ev["id"], ev["event"],
                handle(ev["runtime"])]
        if ev["subject"] and not _is_uuid(ev["subject"]):
            bits.append(ev["subject"])
        keys = sorted(ev["data"], key=lambda k: (k not in _STORY_FIRST, _STORY_FIRST.index(k)
                                                  if k in _STORY_FIRST else 0, k))
        for key in keys:
            if not verbose and key in _STORY_QUIET:
                continue
            v = value(ev["data"][key])
            if v not in (None, "", "[]"):
                bits.append("%s=%s" % (key, v))
        lines.append(store.clean_text(" ".join(bits), 2000 if verbose else 240))
    return lines


def _is_uuid(text):
    return bool(re.match(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", text or ""))


# --------------------------------------------------------------------------- cleanup

SHOWN_PATHS = 5                 # files named in a refusal's text; --json reasons carry them all
FS_CLOCK_SLACK = 0.05            # seconds a file time may lag time.time() (one kernel tick and more)
KEPT_PATHS = 200                # discarded ignored paths kept in the work record (the audit row has all)

def _inside(cwd, path):
    return bool(cwd) and store.within(cwd, path)


def process_cwds():
    """{pid: real cwd} of every process whose working directory this user may read, or None
    when the system has no /proc to read it from. The calling process is left out."""
    if not os.path.isdir("/proc/self"):
        return None
    me = os.getpid()
    out = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            out[int(name)] = os.readlink("/proc/%s/cwd" % name)
        except OSError:  # another user's process, or it just ended
            continue
    return out


def _live_inside(st, w, procs):
    """Blockers for everything live inside the clone: runtimes whose recorded cwd or harness
    process is inside it, then any other process whose working directory is inside it."""
    path, h = w["path"], w["handle"]
    out, named = [], set()
    for rt in st.live_runtimes():
        recorded = os.path.realpath(rt["cwd"]) if rt.get("cwd") else None
        actual = procs.get(rt["pid"]) if procs is not None and rt.get("pid") else None
        if not (_inside(recorded, path) or _inside(actual, path)):
            continue
        if rt.get("pid"):
            named.add(rt["pid"])
        where = "its process %d works in %s" % (rt["pid"], actual) if _inside(actual, path) else \
            "it was registered in %s" % recorded
        where = store.clean_text(where, 300)
        out.append(("runtime-inside", "live runtime %s is inside it (%s)" % (rt["handle"], where),
                    "ask it to finish: coord send \"done with %s?\" --to %s ; or wait until it ends"
                    % (h, rt["handle"])))
    for pid in sorted(procs or {}):
        if pid in named or not _inside(procs[pid], path):
            continue
        _, comm = store.process_parent(pid)
        out.append(("process-inside", "process %d (%s) has its working directory inside it"
                    % (pid, store.clean_text(comm or "?", 40)),
                    "end process %d or move it out of the clone, then retry" % pid))
    return out


def disk_entries(path):
    """(files, unreadable): every regular file and symlink below path, relative, with the
    top-level .jj and .git left out; directory symlinks are entries, never followed."""
    files, unreadable = [], []
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(path, rel) if rel else path))
        except OSError as exc:
            unreadable.append("%s (%s)" % (rel, exc.strerror or exc))
            continue
        for e in entries:
            name = rel + "/" + e.name if rel else e.name
            if not rel and e.name in (".jj", ".git"):
                continue
            try:
                if e.is_symlink() or e.is_file(follow_symlinks=False):
                    files.append(name)
                elif e.is_dir(follow_symlinks=False):
                    stack.append(name)
                # sockets and fifos hold no data
            except OSError as exc:
                unreadable.append("%s (%s)" % (name, exc.strerror or exc))
    return files, unreadable


def _git_store(w):
    """git arguments that apply the clone's ignore rules to its working tree."""
    path = w["path"]
    if os.path.isdir(os.path.join(path, ".git")):
        return ["--git-dir", os.path.join(path, ".git"), "--work-tree", path]
    source = w["source"] or ""
    for inner in (os.path.join(source, ".git"), os.path.join(source, ".jj", "repo", "store", "git")):
        if os.path.isdir(inner):
            return ["--git-dir", inner, "--work-tree", path]
    return None


def ignored_paths(w, paths, environ=None):
    """The subset of paths git would ignore in the clone; empty when git cannot tell, so every
    file then counts as not ignored (the side that keeps them)."""
    gargs = _git_store(w)
    if not paths or gargs is None:
        return set()
    try:
        code, out, _ = git(gargs + ["check-ignore", "--no-index", "--stdin", "-z"], w["path"], environ,
                           check=False, input="\0".join(paths) + "\0")
    except store.CoordError:
        return set()
    if code not in (0, 1):
        return set()
    return set(p for p in out.split("\0") if p) & set(paths)


def _named(paths):
    shown = ", ".join(store.clean_text(p, 120) for p in paths[:SHOWN_PATHS])
    more = len(paths) - SHOWN_PATHS
    return shown + (" and %d more" % more if more > 0 else "")


def _cache_of(path, tracked):
    """True for Python bytecode of a file in @ (coord's own hooks write .coord/__pycache__):
    a cache rebuilt from a commit, so nothing is lost with it."""
    m = _BYTECODE_RE.match(path)
    return bool(m) and (m.group(1) + m.group(2) + ".py" in tracked or m.group(1) + m.group(2) in tracked)


def uncaptured(w, environ=None):
    """Blockers for files on disk that the snapshot left out of @: untracked ones jj did not
    snapshot (too large, auto-track, nested repositories) and ignored ones. Call only right
    after a snapshot. Each blocker carries its full list under "paths"."""
    h = w["handle"]
    files, unreadable = disk_entries(w["path"])
    out = []
    if unreadable:
        out.append(("unreadable", "cannot list %d director%s: %s" % (
            len(unreadable), "y" if len(unreadable) == 1 else "ies", _named(unreadable)),
            "fix the permissions (or move the contents out), then retry", {"paths": unreadable}))
    _, listed, _ = jj(["file", "list", "-r", "@", "-T", 'path ++ "\\0"'], w["path"], snapshot=False,
                      environ=environ)
    tracked = set(listed.split("\0"))
    # Compare names as jj prints them (a name that is not UTF-8 then never matches: it blocks).
    missing = sorted(n for n in (os.fsencode(f).decode("utf-8", "backslashreplace") for f in files)
                     if n not in tracked)
    if not missing:
        return out
    ignored = ignored_paths(w, missing, environ)
    untracked = [f for f in missing if f not in ignored]
    ignored = [f for f in missing if f in ignored and not _cache_of(f, tracked)]
    if ignored and (w["data"].get("setup") or {}).get("includes"):
        copies = unchanged_copies(w, ignored)  # copied by setup, still in the shared checkout
        ignored = [f for f in ignored if f not in copies]
    if ignored and w["data"].get("check_created"):
        made = check_created(w, ignored)  # caches of coord's own landing check, unchanged since
        ignored = [f for f in ignored if f not in made]
    if untracked:
        out.append(("untracked", "%d file(s) jj did not snapshot (too large, auto-track off, or in a nested "
                    "repository): %s" % (len(untracked), _named(untracked)),
                    "commit the untracked files (a large one: jj --config snapshot.max-new-file-size=100MiB "
                    "file track PATH) or move them out of the clone", {"paths": untracked}))
    if ignored:
        out.append(("ignored", "%d ignored file(s) in no commit: %s" % (len(ignored), _named(ignored)),
                    "move the ignored files out, or discard them with the clone: coord work remove %s --confirm %s "
                    "--discard-ignored" % (h, h), {"paths": ignored}))
    return out


# What git and jj themselves keep in a clone's .git (top-level names); anything else there was put
# by someone and exists nowhere else.
GIT_OWN = frozenset((
    "HEAD", "config", "description", "hooks", "info", "objects", "refs", "logs", "packed-refs", "index",
    "FETCH_HEAD", "ORIG_HEAD", "MERGE_HEAD", "MERGE_MSG", "MERGE_MODE", "MERGE_RR", "AUTO_MERGE", "COMMIT_EDITMSG",
    "CHERRY_PICK_HEAD", "REVERT_HEAD", "REBASE_HEAD", "BISECT_LOG", "BISECT_START", "BISECT_TERMS",
    "BISECT_NAMES", "BISECT_EXPECTED_REV", "BISECT_ANCESTORS_OK", "BISECT_HEAD", "rebase-merge", "rebase-apply",
    "sequencer", "rr-cache", "worktrees", "shallow", "gc.log", "gc.pid", "branches",
    "fsmonitor--daemon", "fsmonitor--daemon.ipc", "objects.lock", "gitk.cache", "FETCH_HEAD.lock"))
# Ref namespaces jj imports and judges itself (bookmarks, tags, remote bookmarks) or owns (refs/jj).
JJ_REFS = ("refs/heads/", "refs/tags/", "refs/remotes/", "refs/jj/")


def git_only(w, environ=None):
    """Blockers for what lives only in a colocated clone's own git, where jj never looks: refs
    outside the namespaces jj imports (`git stash`'s refs/stash, `git notes`, refs a tool made)
    whose commit the shared repository lacks, hooks that differ from the shared checkout's, and
    files under .git/ that neither git nor jj keeps. Call right after a snapshot (jj imported
    the branches and tags, which the local revset then judges)."""
    path = w["path"]
    gitdir = os.path.join(path, ".git")
    if w["data"].get("kind") == "native" or not os.path.isdir(gitdir):
        return []
    h, out = w["handle"], []
    _, listed, _ = git(["-C", path, "for-each-ref", "--format=%(refname) %(objectname)"], path, environ)
    refs = [line.split(" ", 1) for line in listed.splitlines() if " " in line]
    refs = [(name, sha) for name, sha in refs if not name.startswith(JJ_REFS)]
    if refs:
        gargs = git_dir_args(w["source"])
        _, heads, _ = git(gargs + ["for-each-ref", "--format=%(objectname) %(*objectname)"] + list(CANONICAL_REFS),
                          w["source"], environ)
        current = set(heads.split())
        kept = []
        for name, sha in refs:
            if sha in current:
                continue
            code, found, _ = git(gargs + ["for-each-ref", "--count=1", "--contains", sha] + list(CANONICAL_REFS),
                                 w["source"], environ, check=False)
            if code != 0 or not found.strip():
                kept.append(name)
        if kept:
            quoted = shlex.quote(path)
            out.append(("git-only-refs", "%d ref(s) only in the clone's git, where jj does not look: %s" % (
                len(kept), _named(kept)),
                "look (git -C %s stash list; git -C %s log REF), keep what matters (git -C %s stash pop, then jj "
                "describe), delete each ref (git -C %s update-ref -d REF), then retry" % (quoted, quoted, quoted, quoted),
                {"paths": kept}))
    files = []
    try:
        names = sorted(os.listdir(gitdir))
    except OSError as exc:
        return out + [("unreadable", "cannot list %s: %s" % (gitdir, exc.strerror), "fix the permissions, then retry")]
    for name in names:
        if name not in GIT_OWN and name not in ("modules", "lfs") and not name.endswith(".lock"):
            files.append(".git/" + name)
    files += _changed_hooks(w, gitdir)
    out += _submodule_repos(w, gitdir, environ)
    files += _lfs_objects(w, gitdir)
    if files:
        out.append(("git-only-files", "%d file(s) under .git/ that only the clone has: %s" % (len(files), _named(files)),
                    "move them out of %s, then retry" % shlex.quote(path), {"paths": files}))
    return out


def _source_gitdir(w):
    src = w.get("source") or ""
    inner = os.path.join(src, ".git")
    return inner if os.path.isdir(inner) else os.path.join(src, ".jj", "repo", "store", "git")


def _submodule_repos(w, gitdir, environ):
    """Blockers for submodule repositories kept in the clone's .git/modules (`git submodule
    update --init`, and what `deinit` leaves): a commit made there exists nowhere else unless
    the shared checkout's own copy of that submodule has it."""
    top = os.path.join(gitdir, "modules")
    if not os.path.isdir(top):
        return []
    repos, stack = [], [top]
    while stack:  # a submodule's own submodules nest below it
        d = stack.pop()
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            repos.append(d)
            continue
        if any(e.name == "HEAD" for e in entries) and any(e.name == "objects" for e in entries):
            repos.append(d)
        stack += [e.path for e in entries if e.is_dir(follow_symlinks=False) and e.name not in ("objects", "refs",
                                                                                                  "logs", "hooks")]
    kept = []
    for repo in repos:
        rel = os.path.relpath(repo, gitdir)
        theirs = os.path.join(_source_gitdir(w), rel)
        code, listed, _ = git(["--git-dir", repo, "for-each-ref", "--format=%(objectname)"], w["path"], environ,
                              check=False)
        _, head, _ = git(["--git-dir", repo, "rev-parse", "--verify", "-q", "HEAD"], w["path"], environ, check=False)
        tips = set(listed.split()) | set(head.split()) if code == 0 else {None}
        if None in tips or not os.path.isdir(theirs) or any(
                git(["--git-dir", theirs, "cat-file", "-e", t + "^{commit}"], w["path"], environ, check=False)[0] != 0
                for t in tips):
            kept.append(".git/" + rel)
    if not kept:
        return []
    return [("git-only-submodules", "%d submodule repositor%s only the clone has (commits there may exist nowhere "
             "else): %s" % (len(kept), "y" if len(kept) == 1 else "ies", _named(kept)),
             "push what matters from each (git -C %s/MODULE_PATH push), or move %s out of the clone, then retry"
             % (shlex.quote(w["path"]), _named(kept)), {"paths": kept})]


def _lfs_objects(w, gitdir):
    """Git LFS objects in the clone's .git/lfs/objects that the shared checkout's store lacks
    (content added in the clone and never pushed exists only there)."""
    top = os.path.join(gitdir, "lfs", "objects")
    theirs = os.path.join(_source_gitdir(w), "lfs", "objects")
    out = []
    for root, dirs, names in os.walk(top):
        dirs.sort()
        for n in sorted(names):
            rel = os.path.relpath(os.path.join(root, n), top)
            if not os.path.exists(os.path.join(theirs, rel)):
                out.append(".git/lfs/objects/" + rel)
    return out


def _changed_hooks(w, gitdir):
    """Executable hooks in the clone's .git/hooks that the shared checkout lacks or has otherwise
    (one a setup installed the same way in both, as `pre-commit install` does, is captured)."""
    hooks = os.path.join(gitdir, "hooks")
    try:
        names = sorted(os.listdir(hooks))
    except OSError:
        return []
    try:
        source_hooks = os.path.join(clone_source(w["source"]), "hooks") \
            if not os.path.isdir(os.path.join(w["source"], ".git")) else os.path.join(w["source"], ".git", "hooks")
    except store.CoordError:
        source_hooks = None
    out = []
    for name in names:
        mine = os.path.join(hooks, name)
        if name.endswith(".sample") or not os.path.isfile(mine) or not os.access(mine, os.X_OK):
            continue  # git runs only executable hooks; its templates' samples and notes are its own
        theirs = os.path.join(source_hooks, name) if source_hooks else None
        if theirs and _same_file(mine, theirs):
            continue
        out.append(".git/hooks/" + name)
    return out


def _same_file(a, b):
    try:
        if os.path.isdir(a) or os.path.isdir(b):
            return False
        with open(a, "rb") as fa, open(b, "rb") as fb:
            return fa.read() == fb.read()
    except OSError:
        return False


def reason_json(blocker):
    code, message, hint = blocker[:3]
    out = {"code": code, "message": message, "next": hint}
    if len(blocker) > 3:
        out.update(blocker[3])
    return out


def split_discardable(blockers, discard_ignored):
    """(blockers that remain, ignored paths to discard): with discard_ignored, an `ignored`
    blocker no longer blocks, and its paths are what the removal will discard."""
    if not discard_ignored:
        return blockers, []
    rest = [b for b in blockers if b[0] != "ignored"]
    paths = [p for b in blockers if b[0] == "ignored" for p in b[3]["paths"]]
    return rest, paths


def cleanup_blockers(st, w, caller, environ=None, procs=False):
    """Every reason the work's directory may not be deleted now: [(code, message, next command)].

    Rules (all must hold): the real path is below the recorded scratch root; the on-disk
    marker carries the registry token; no live runtime other than the caller owns the work and
    no recorded tmux window still runs in it; the caller is not inside it; nothing live is
    inside it (a live runtime by recorded cwd or harness process, or any process by its
    working directory; then the clone is not snapshotted and its contents stay unexamined);
    the gate passed or was waived; after a fresh snapshot every file on disk is in @ (an
    untracked or ignored file blocks; `ignored` blockers carry their paths for
    --discard-ignored); and the clone holds no non-empty change the canonical bookmarks lack
    (@ included) unless those changes are all within the frozen candidate and that candidate
    was proven integrated, or released with a waived gate. procs: process_cwds(), read once
    by a caller that checks many records.
    """
    h = w["handle"]
    if w["state"] == "removed":
        return [("removed", "already removed", "coord work list")]
    out = []
    if w["state"] == "creating" and _owner_of(st, w) is not None:
        out.append(("creating", "its creation may still be running", "wait, then coord work inspect %s" % h))
    problems = directory_problems(w)
    if problems:
        return out + problems
    owner = _owner_of(st, w)
    if owner is not None and (caller is None or owner["id"] != caller["id"]) and \
            authority(st, w, caller) not in ("successor", "person"):
        out.append(("owner-alive", "owned by live runtime %s" % owner["handle"],
                    "ask it: coord send \"done with %s?\" --to %s ; or wait until it ends" % (h, owner["handle"])))
    tmux_problem = _tmux_alive(w)
    if tmux_problem:
        out.append(("tmux-open", tmux_problem, "coord work close %s" % h))
    cwd = os.path.realpath(os.getcwd())
    if cwd == w["path"] or below(cwd, w["path"]):
        out.append(("cwd-inside", "this command runs inside %s" % w["path"], "cd out of the clone, then retry"))
    live = _live_inside(st, w, process_cwds() if procs is False else procs)
    out += live
    gate = _gate(w)
    if gate["state"] not in GATE_DONE:
        out.append(("ungated", "its gate has not passed and was not waived",
                    "coord work gate %s --pass (or --waive --reason \"why\")" % h))
    if live or tmux_problem:
        # A snapshot would race whatever runs inside (and sweep its half-written files into @).
        return out + [("unexamined", "its contents were not examined because it is in use",
                       "retry when nothing runs inside it")]
    try:
        w["evidence_at"] = time.time()  # anything changed after this is not covered by the evidence
        ids = head_ids(w["path"], environ=environ)  # the snapshot: edits on disk become visible
        out += uncaptured(w, environ)
        out += git_only(w, environ)
        local = _local_revset(w, environ)
        rows = local_changes(w["path"], local, environ)
    except store.CoordError as exc:
        return out + [("jj-failed", "cannot read the clone: %s" % exc.message, "coord work inspect %s --verbose" % h)]
    w["data"]["current"] = {"change": ids["change"], "commit": ids["commit"], "empty": ids["empty"], "at": _now()}
    if not rows:
        return out
    integ = _integration(w)
    cand = integ.get("candidate")
    proven = bool(integ.get("proof")) and cand and integ["proof"].get("candidate") == cand["commit"]
    released = bool(integ.get("released"))
    if proven or (released and cand):
        try:
            extra = local_changes(w["path"], "(%s) ~ ::%s" % (local, cand["commit"]), environ)
        except store.CoordError:
            extra = rows
        if proven and cand.get("rebased_from"):
            # Landed in rebased form (the clone was in use): the exact commit that was rebased,
            # without conflict, into the proven candidate is captured by it; anything the clone
            # changed since (an amended commit has another ID) still counts.
            extra = [r for r in extra if r["commit"] != cand["rebased_from"]]
        if extra:
            if proven:
                out.append(("changed-after-integration",
                            "%d change(s) beyond the integrated candidate %s (first %s)" % (
                                len(extra), cand["commit"][:12], extra[0]["commit"]),
                            "integrate them again (coord work integrate acquire %s --into %s) or keep the clone"
                            % (h, integ.get("into"))))
            else:  # a landing that stopped on a conflict in the clone left the rebased changes here
                out.append(_stopped_landing_rule(w, h) or (
                    "changed-after-freeze", "%d change(s) beyond the candidate frozen before the release" % len(extra),
                    "coord work integrate acquire %s --into %s" % (h, integ.get("into"))))
        elif not proven and gate["state"] != "waived":
            out.append(_stopped_landing_rule(w, h) or ("unintegrated", "its candidate %s was released without proof "
                       "of integration" % cand["commit"][:12], SQUASH_NOTE % (h, h)))
        return out
    wc = [r for r in rows if r["wc"]]
    committed = [r for r in rows if not r["wc"]]
    if wc:
        out.append(("dirty", "its working copy @ has changes (%s)" % wc[0]["commit"][:12],
                    "describe them (jj describe -m MESSAGE, in %s) and land them: coord work integrate land %s "
                    "--into BOOKMARK; or keep the clone" % (shlex.quote(w["path"]), h)))
    if committed:
        out.append(("unintegrated", "%d committed change(s) are in no canonical bookmark and were not proven "
                    "integrated" % len(committed),
                    "land them: coord work integrate land %s --into BOOKMARK; if a squash or rebase merge already "
                    "put them there (a new commit: never provable), discard them with coord work integrate acquire "
                    "%s --into BOOKMARK, coord work gate %s --waive --reason R, coord work integrate release %s"
                    % (h, h, h, h)))
    return out


LAND_STOPPED = frozenset(("conflict", "refused", "failed"))


def _stopped_landing_rule(w, h):
    """The cleanup rule for a candidate released because its landing stopped before the target
    moved (a conflict, a failed check, a refusal): it never landed, and the next step is the
    landing again, not the squash-merge discard. None when no stopped landing is recorded."""
    landing = _landing(w)
    if landing.get("state") not in LAND_STOPPED or not landing.get("into"):
        return None
    into = landing["into"]
    if landing.get("state") == "conflict":
        why = "rebasing onto %s conflicts in %s" % (into, _named(landing.get("paths") or ["(unknown)"]))
        first = "resolve it in %s (jj resolve --list), then " % w["path"]
    else:
        why = store.clean_text(landing.get("reason") or landing["state"], 200)
        first = ""
    return ("unintegrated", "its landing into %s stopped before anything moved (%s): none of it landed" % (into, why),
            "%sre-run: %s; or keep the clone" % (first, rerun_command(w, into)))


def _tmux_alive(w):
    live, _ = _live_tmux(w, strict=True)
    return "its tmux window %s still runs" % live["window_id"] if live else None


def _late_changes(path, since):
    """What happened inside `path` after the evidence was taken: processes that work in it,
    and files (regular or symlink) whose data or inode changed at or after `since`."""
    late = ["process %d" % pid for pid, cwd in sorted((process_cwds() or {}).items()) if _inside(cwd, path)]
    if since is None:
        return late
    files, unreadable = disk_entries(path)
    late += ["unreadable %s" % u for u in unreadable]
    for rel in files:
        try:
            st = os.lstat(os.path.join(path, rel))
        except OSError:
            late.append(rel)
            continue
        # File times come from the kernel's coarse clock, up to a tick behind time.time().
        if max(st.st_mtime, st.st_ctime) >= since - FS_CLOCK_SLACK:
            late.append(rel)
    return late


def _delete_checkout(environ, w):
    """Delete a verified checkout: forget a native workspace, move it aside atomically, check
    that nothing moved in or changed since the evidence was taken (else move it back and
    refuse), then rmtree. The rename means no new process can enter it by its old path."""
    path = w["path"]
    if w["data"].get("kind") == "native":
        jj(["workspace", "forget", workspace_name(w["id"])], path, environ=environ)
    aside = "%s.removing-%s" % (path, os.urandom(4).hex())
    os.rename(path, aside)
    late = _late_changes(aside, w.get("evidence_at"))
    if late:
        try:
            os.rename(aside, path)
            where = path
        except OSError:
            where = aside
        raise Refused("will not remove %s: it changed while being removed (%s); nothing was deleted, it is at %s"
                      % (w["handle"], _named(late), where),
                      "coord work remove %s --confirm %s (after whatever works in it has finished)"
                      % (w["handle"], w["handle"]))
    _rmtree(aside)


def _mark_removed(st, w, caller, how, discarded=None):
    """Record the removal; `discarded` lists the ignored files deleted with the clone (all of
    them in the audit row, the first KEPT_PATHS and their count in the record)."""
    removed = {"at": _now(), "by": _who(caller), "how": how}
    extra = {}
    if discarded:
        removed.update({"discarded_ignored": discarded[:KEPT_PATHS], "discarded_ignored_count": len(discarded)})
        extra = {"discarded_ignored": discarded}
    # Its private candidate ref goes with it; a forgotten clone's unlanded candidate keeps it.
    ref = drop_candidate_ref(w, keep_unlanded=how.startswith("forgotten"))
    if ref:
        removed["candidate_ref"] = extra["candidate_ref"] = "%s %s" % (ref, candidate_ref(w["id"]))
    with st.transaction():
        cur = st.work(w["id"])
        st.update_work(w["id"], state="removed", data={
            "removed": removed,
            "current": w["data"].get("current"),
            "history": _history(cur, "removed", caller, how=how)})
        st.audit("work.removed", _who(caller), w["id"], how=how, path=w["path"], **extra)



def remove_work(st, *, caller, handle, confirm, environ=None, forget=False, discard_ignored=False, override=False):
    """Delete the work's clone when every cleanup rule holds (else Refused with every reason)
    and record it removed; -> {work, removed, ...}. Only who may (authorize) removes."""
    w = st.resolve_work(handle)
    if confirm not in (w["handle"], w["id"]):
        raise UsageError("removal needs the exact work handle repeated: --confirm %s" % w["handle"],
                         "coord work remove %s --confirm %s" % (w["handle"], w["handle"]))
    if w["state"] == "removed":
        return {"work": w["handle"], "removed": False, "already": True}
    authorize(st, w, caller, "remove", override)
    if forget:
        # --forget drops the record and never touches the disk: allowed when the directory is
        # gone, or when its marker no longer carries this record's token (another database
        # adopted the clone; that one now holds it and its proofs). Either way nothing is lost.
        problems = [p[0] for p in directory_problems(w)] if os.path.lexists(w["path"] or "") else ["missing"]
        if "missing" in problems:
            _mark_removed(st, w, caller, "forgotten (directory was already gone)")
            drop_trust(st, w, caller, environ)
            return {"work": w["handle"], "removed": True, "forgotten": True}
        if "token-mismatch" in problems:
            marker = read_marker(w["path"]) or {}
            _mark_removed(st, w, caller, "forgotten (the clone's marker names another registration; nothing deleted)")
            return {"work": w["handle"], "removed": True, "forgotten": True, "kept_directory": w["path"],
                    "marker_work": marker.get("work")}
        raise Refused("--forget only drops a record whose directory is gone or held by another registration; %s"
                      " exists and carries this record's marker" % w["path"],
                      "coord work remove %s --confirm %s" % (w["handle"], w["handle"]))
    if w["state"] == "failed" and not os.path.lexists(w["path"] or ""):
        _mark_removed(st, w, caller, "failed create, nothing on disk")
        return {"work": w["handle"], "removed": True}
    blockers, discard = split_discardable(cleanup_blockers(st, w, caller, environ), discard_ignored)
    if blockers:
        raise Refused("will not remove %s: %s" % (w["handle"], "; ".join(b[1] for b in blockers)),
                      " ; ".join(store.unique(b[2] for b in blockers)),
                      reasons=[reason_json(b) for b in blockers])
    _delete_checkout(environ, w)
    _mark_removed(st, w, caller, "remove", discard)
    _end_parked(st, w, "work removed")
    out = {"work": w["handle"], "removed": True}
    if discard:
        out["discarded_ignored"] = discard
    left = drop_trust(st, w, caller, environ)
    if left:
        out["trust_left"] = left
    return out


def gc_works(st, *, caller, environ=None, dry_run=False, discard_ignored=False):
    """Remove every work that passes every cleanup rule (none with dry_run); -> {removed: [{handle,
    task, ...}], kept: [{handle, task, path, reasons}], dry_run}."""
    removed, kept = [], []
    procs = False  # read /proc once, when the first record needs it
    for w in st.works():
        if w["state"] == "failed" and not os.path.lexists(w["path"] or ""):
            if not dry_run:
                _mark_removed(st, w, caller, "gc: failed create, nothing on disk")
            removed.append({"handle": w["handle"], "task": w["task"], "record_only": True})
            continue
        if procs is False:
            procs = process_cwds()
        blockers, discard = split_discardable(cleanup_blockers(st, w, caller, environ, procs), discard_ignored)
        if blockers:
            kept.append({"handle": w["handle"], "task": w["task"], "path": w["path"],
                         "reasons": [reason_json(b) for b in blockers]})
            continue
        if not dry_run:
            try:
                _delete_checkout(environ, w)
            except (OSError, store.CoordError) as exc:
                kept.append({"handle": w["handle"], "task": w["task"], "path": w["path"], "reasons": [
                    {"code": "delete-failed", "message": str(getattr(exc, "message", exc)),
                     "next": "coord work inspect %s" % w["handle"]}]})
                continue
            _mark_removed(st, w, caller, "gc", discard)
            drop_trust(st, w, caller, environ)
        r = {"handle": w["handle"], "task": w["task"]}
        if discard:
            r["discarded_ignored"] = discard
        removed.append(r)
    return {"removed": removed, "kept": kept, "dry_run": bool(dry_run)}


# --------------------------------------------------------------------------- adopt

def adopt_work(st, *, caller, root, path, environ=None, scratch_root=None, work_id=None, expect_commit=None):
    """Register a known clone again after the database was lost, then rotate its marker;
    -> the new work record. caller may be None (the record then has no owner)."""
    canonical = canonical_root(root, st.work)
    scratch = resolve_scratch_root(scratch_root, environ, canonical)
    path = _adoptable_path(path, scratch, canonical, environ)
    found_id, workspace = _adopted_workspace(path, environ)
    if work_id and work_id.strip().lower() != found_id:
        raise Refused("%s holds work %s, not %s" % (path, found_id, work_id), "check the ID")
    work_id = found_id
    existing = st.work(work_id)
    if existing is not None and existing["state"] != "removed":
        if [p for p in directory_problems(existing) if p[0] == "token-mismatch"]:
            h = existing["handle"]
            raise Refused("work %s is already registered here as %s, but the clone's marker names another "
                          "registration (another database adopted it)" % (work_id, h),
                          "drop this record first (deletes nothing): coord work remove %s --confirm %s --forget ; "
                          "then, only if no other database should hold it: coord work adopt %s" % (h, h, path))
        raise Refused("work %s is already registered as %s" % (work_id, existing["handle"]),
                      "coord work inspect %s" % existing["handle"])
    bookmark, task, change, commit = _adopted_bookmark(path, work_id, environ)
    if expect_commit and full_commit(expect_commit) != commit:
        raise Refused("bookmark %s is at %s, not the expected %s" % (bookmark, commit, expect_commit),
                      "check the ID")
    head = head_ids(path, snapshot=False, environ=environ)
    token = os.urandom(32).hex()
    data = _work_data("clone", caller, workspace, bookmark,
                      {"state": "active", "at": _now(), "by": _who(caller), "event": "adopted"},
                      adopted={"at": _now(), "by": _who(caller), "bookmark_commit": commit, "bookmark_change": change},
                      current={"change": head["change"], "commit": head["commit"], "empty": head["empty"],
                               "at": _now()},
                      git=_git_kind(path))
    with st.transaction():
        if st.work(work_id) is not None:
            raise Refused("work %s was registered meanwhile" % work_id, "coord work list")
        data["port_base"] = port_base(st, work_id)
        w = st.insert_work(task, "active", token, path=path, scratch_root=scratch, source=canonical,
                           conversation=caller["conversation"] if caller else None, runtime=_who(caller),
                           data=data, work_id=work_id)
        st.audit("work.adopted", _who(caller), work_id, path=path, bookmark=bookmark, commit=commit)
    write_marker(path, work_id, token)
    return _adopt_trust(st, w, caller, environ)


def _adopt_trust(st, w, caller, environ):
    """Record the harness entries that name the adopted clone's own path as carried, so that
    its removal takes them away as it would have before the database was lost."""
    import trust
    try:
        found = trust.entries_for(w["path"], environ)
    except Exception:
        store.log_traceback("entries_for %s" % w["id"])
        return w
    if not found:
        return w
    with st.transaction():
        cur = st.update_work(w["id"], data={"trust": {"added": found, "notes": [], "adopted": True}})
        st.audit("work.trust-carried", _who(caller), w["id"], added=found, adopted=True)
    return cur


def _adoptable_path(raw, scratch, canonical, environ):
    """The real path of a directory that may be adopted: an independent colocated clone of the
    canonical repository below the scratch root; refused otherwise."""
    raw = os.path.abspath(raw)
    if os.path.islink(raw):
        raise Refused("%s is a symlink; adopt names the clone's real directory" % raw, "pass the resolved path")
    path = os.path.realpath(raw)
    if not below(path, scratch):
        raise Refused("%s is not below the scratch root %s" % (path, scratch),
                      "pass --scratch-root DIR when the clone lives under another scratch root")
    for needed in (".jj", ".git"):
        if not os.path.isdir(os.path.join(path, needed)):
            raise Refused("%s has no %s directory: only independent colocated clones can be adopted" % (path, needed),
                          "inspect it by hand")
    _, out, _ = git(["remote", "get-url", "origin"], path, environ, check=False)
    source = out.strip()
    source_real = os.path.realpath(source) if source and os.path.isabs(source) else source
    if not source_real or source_real == path or below(path, source_real) or below(source_real, path):
        raise Refused("the clone's origin %r is not a repository distinct from %s" % (source, path),
                      "adopt only clones of the canonical repository")
    if source_real != canonical and source_real != clone_source(canonical):
        raise Refused("%s is a clone of %s, not of this repository %s" % (path, source_real, canonical),
                      "run adopt from the checkout it was cloned from")
    return path


def _adopted_workspace(path, environ):
    """(work id, workspace name) from the clone's own jj metadata, read without touching its
    working copy: exactly one agent-<work id> workspace, agreeing with any marker."""
    _, names, _ = jj(["workspace", "list", "-T", 'name ++ "\\n"'], path, snapshot=False, environ=environ)
    names = [n for n in names.splitlines() if n]
    ids = [n[len("agent-"):] for n in names if n.startswith("agent-") and store.is_uuid(n[len("agent-"):])]
    if len(ids) != 1 or len(names) != 1:
        raise Refused("%s does not have exactly one agent-<work id> workspace (found %s)" % (
            path, ", ".join(names) or "none"), "inspect it by hand")
    marker = read_marker(path)
    if marker is not None and marker.get("work") not in (None, ids[0]):
        raise Refused("the marker in %s names work %s but the workspace is agent-%s" % (
            path, marker.get("work"), ids[0]), "inspect it by hand")
    return ids[0], names[0]


def _adopted_bookmark(path, work_id, environ):
    """(bookmark, task, change, commit) of the clone's single agent/<task>/<work id> bookmark."""
    _, out, _ = jj(["bookmark", "list", "-T", 'if(remote, "", name ++ "\\n")'], path, snapshot=False,
                   environ=environ)
    suffix = "/" + work_id
    bookmarks = [b for b in out.splitlines() if b.startswith("agent/") and b.endswith(suffix)]
    if len(bookmarks) != 1:
        raise Refused("%s has no single agent/<task>/%s bookmark" % (path, work_id), "inspect it by hand")
    task = check_task(bookmarks[0][len("agent/"):-len(suffix)])
    _, out, _ = jj(["log", "--no-graph", "-r", "bookmarks(exact:%s)" % json.dumps(bookmarks[0]),
                    "-T", _ID_TEMPLATE], path, snapshot=False, environ=environ)
    fields = (out.strip().split(" ") + ["", ""])[:2]
    if not _CHANGE_RE.match(fields[0]) or not _FULL_COMMIT_RE.match(fields[1]):
        raise Refused("cannot read exact IDs of %s in %s" % (bookmarks[0], path), "inspect it by hand")
    return bookmarks[0], task, fields[0], fields[1]


# --------------------------------------------------------------------------- remote

def verify_remote(*, root, work_of, remote, bookmark, expect, environ=None):
    """Read REMOTE's bookmark over the wire (git ls-remote) and require the expected full commit;
    -> {ok, remote, bookmark, expected, actual}, else Refused carrying the same fields.
    work_of: id -> work record, consulted only when root is a managed clone."""
    expect = full_commit(expect, "--expect")
    bookmark = check_bookmark(bookmark)
    if not remote or remote.startswith("-"):
        raise UsageError("remote %r is not a remote name or URL" % remote, "coord remote verify origin main --expect C")
    repo = canonical_root(root, work_of)
    ref = "refs/heads/" + bookmark
    _, out, _ = git(git_dir_args(repo) + ["ls-remote", remote, ref], repo, environ)
    found = [line.split("\t", 1)[0] for line in out.splitlines() if line.split("\t", 1)[-1] == ref]
    actual = found[0] if found else None
    data = {"ok": actual == expect, "remote": remote, "bookmark": bookmark, "expected": expect, "actual": actual}
    if actual is None:
        raise Refused("remote %s has no bookmark %s" % (remote, bookmark),
                      "git ls-remote %s shows what it has" % remote, **data)
    if actual != expect:
        raise Refused("remote %s %s is at %s, not the expected %s" % (remote, bookmark, actual, expect),
                      "re-read the remote and rebase or re-plan; never force: git ls-remote %s %s" % (remote, ref),
                      **data)
    return data


# =========================================================================== harness trust (trust.py)

REGISTER_GRACE = 20.0  # seconds a started harness gets to register before `work list` says so
UNREGISTERED = "started, agent not registered: trust prompt?"


def carry_trust(st, w, caller, environ, harnesses=("codex", "claude", "qwen", "gemini", "copilot")):
    """With the person's opt-in (`coord trust --carry-over on`), carry their approvals of the
    shared checkout over to the clone and record exactly what was added; -> the record."""
    import trust
    if not trust.carry_enabled(environ) or not w.get("path") or not w.get("source"):
        return w
    try:
        result = trust.carry_over(w["source"], w["path"], environ, harnesses)
    except Exception as exc:  # never a failed create or start: the note says what happened
        store.log_traceback("carry_over %s" % w["id"])
        result = {"added": {}, "notes": ["not carried over: %s: %s" % (type(exc).__name__, exc)]}
    if not result["added"] and not result["notes"]:
        return w
    with st.transaction():
        cur = st.work(w["id"])
        old = cur["data"].get("trust") or {}
        rec = {"added": trust.merge_added(old.get("added"), result["added"]),
               "notes": [store.clean_text(n, 300) for n in result["notes"]][:10]}
        cur = st.update_work(w["id"], data={"trust": rec})
        st.audit("work.trust-carried", _who(caller), w["id"], added=result["added"], notes=rec["notes"])
    return cur


def trust_pending(w, harness, environ):
    """What a person must approve in the window for `harness` (a list; None when it cannot be told)."""
    import trust
    if not w.get("path") or not w.get("source"):
        return None
    try:
        return trust.pending_approvals(w["source"], w["path"], harness, environ)
    except store.CoordError as exc:
        return ["%s: %s" % (harness, exc.message)]
    except Exception:
        store.log_traceback("pending_approvals %s" % w["id"])
        return None


def drop_trust(st, w, caller, environ):
    """Remove the harness trust entries carried over for a removed work; -> what stayed (notes)."""
    added = (w["data"].get("trust") or {}).get("added")
    if not added:
        return []
    import trust
    try:
        notes = trust.remove_carried(added, environ)
    except Exception as exc:  # the clone is gone either way; say what stayed
        store.log_traceback("remove_carried %s" % w["id"])
        notes = ["not removed: %s: %s" % (type(exc).__name__, exc)]
    with st.transaction():
        cur = st.work(w["id"])
        rec = dict(cur["data"].get("trust") or {}, removed_at=_now(), left=notes or None)
        st.update_work(w["id"], data={"trust": rec})
        st.audit("work.trust-removed", _who(caller), w["id"], removed=added, left=notes or None)
    return notes


def trust_lines(w):
    """One line on what was carried over to the clone (and why not), or none."""
    rec = w["data"].get("trust") or {}
    added, bits = rec.get("added") or {}, []
    c = added.get("codex") or {}
    if c.get("project") or c.get("hooks"):
        bits.append("codex %s%d hook%s" % ("project, " if c.get("project") else "", len(c.get("hooks") or {}),
                                          "" if len(c.get("hooks") or {}) == 1 else "s"))
    if (added.get("claude") or {}).get("project"):
        bits.append("claude workspace")
    if (added.get("qwen") or {}).get("project"):
        bits.append("qwen folder")
    if (added.get("copilot") or {}).get("folder"):
        bits.append("copilot folder")
    lines = ["approvals carried over from the shared checkout: " + "; ".join(bits)] if bits else []
    return lines + [store.clean_text(n, 300) for n in rec.get("notes") or []]


def not_registered(w, grace, now=None):
    """True when the work's harness was started (or resumed) over `grace` seconds ago in a window
    that still runs and no harness has registered from it: typically a trust prompt waits."""
    if w["state"] not in ("active", "resumed"):
        return False
    rec = w["data"].get("tmux") or {}
    if not rec.get("window_id") or rec.get("runtime_id"):
        return False
    launches = [h for h in w["data"].get("history") or [] if h.get("step") == "started" or h.get("state") == "resumed"]
    if not launches:
        return False
    if (now if now is not None else _now()) - float(launches[-1].get("at") or 0) < grace:
        return False
    live, _ = _live_tmux(w)
    return live is not None


# =========================================================================== tmux glue (session.py)

def _live_tmux(w, strict=False):
    """The work's recorded window when it still validates, else None (with the reason).

    strict: when tmux cannot answer (not on PATH, failing), raise EnvError instead of
    calling the window gone; cleanup needs evidence, not the absence of an answer.
    """
    rec = w["data"].get("tmux")
    if not rec:
        return None, "no recorded window"
    import session
    try:
        session.validate(rec)
    except EnvError as exc:
        if strict:
            raise EnvError("cannot check tmux window %s of %s: %s" % (rec.get("window_id"), w["handle"],
                                                                      exc.message), exc.hint)
        return None, exc.message
    except Refused as exc:
        return None, exc.message
    return rec, None


def _launch(environ, w, conversation, harness, extra, previous, prompt=None):
    import session
    project = store.resolve_project_id(environ, w["source"])
    env = {"COORD_WORK_ID": w["id"], "COORD_PROJECT_ID": project}
    if w["data"].get("port_base") is not None:
        env["COORD_PORT_BASE"] = str(w["data"]["port_base"])
    for name in ("COORD_DB", "COORD_SCRATCH_ROOT", "XDG_STATE_HOME"):
        if environ.get(name):
            env[name] = environ[name]
    no_daemon = harness == "codex" and session.codex_offers_no_daemon(session.harness_command(harness, environ),
                                                                      environ)
    argv = session.harness_argv(harness, conversation, extra, environ, prompt=prompt, no_daemon=no_daemon)
    socket = (previous or {}).get("socket") or session.resolve_socket(None, environ)
    return session.launch(project, w["id"], w["path"], argv, env=env, task=w["task"],
                          conversation=conversation, harness=harness, previous=previous, socket=socket)


def _record_tmux(st, w, state, rec, caller, **extra):
    with st.transaction():
        cur = st.work(w["id"])
        data = {"history": _history(cur, state, caller, **extra)}
        if rec is not None:
            data["tmux"] = rec
            data["direct"] = None  # a window coord launched is now the newest harness (store.work_conversation)
        if extra.get("reason") is not None or state in RELAUNCHED:
            data["parked"] = {"reason": extra["reason"], "at": _now()} if state == "parked" else None
        cur = st.update_work(w["id"], state=state, data=data)
        st.audit("work." + state, _who(caller), w["id"], window=(rec or cur["data"].get("tmux") or {}).get(
            "window_id"), **{k: v for k, v in extra.items() if v is not None})
    return cur


def _record_launch(st, w, state, rec, caller, **extra):
    """Record a launched window; if that fails, close the window so it is never unrecorded."""
    import session
    try:
        _record_tmux(st, w, state, rec, caller, **extra)
    except BaseException:
        try:
            session.close(rec)
        except store.CoordError:
            pass
        raise


def _launchable(st, handle):
    """The work record, refused unless it may get a new harness window (and has none running)."""
    w = st.resolve_work(handle)
    _refuse_state(w, UNUSABLE)
    verified_path(w)
    live, _ = _live_tmux(w)
    if live:
        raise Refused("work %s already runs in tmux window %s" % (w["handle"], live["window_id"]),
                      "coord work attach %s" % w["handle"])
    return w


def _close_window(w):
    """Kill the validated window; a window already gone (or no longer provably ours) is left alone."""
    import session
    rec = w["data"].get("tmux")
    if not rec:
        return "no window"
    problem = session.problem(rec)
    if problem:
        return "window not closed: " + problem
    session.close(rec)
    return "closed %s" % rec["window_id"]


MAX_PROMPT = 8192  # bytes of an initial prompt: tmux refuses a command over about 16 KiB


def check_prompt(text, source="--prompt"):
    """The initial prompt for `work start`, refused when empty, holding a NUL (no argv can) or
    longer than MAX_PROMPT bytes of UTF-8."""
    hint = "coord work start WORK --prompt-file TASK.md (at most %d bytes; put more in a file the agent reads)" \
        % MAX_PROMPT
    if not isinstance(text, str) or not text.strip():
        raise UsageError("%s is empty" % source, hint)
    if "\0" in text:
        raise UsageError("%s contains a NUL character, which no command line can carry" % source, hint)
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > MAX_PROMPT:
        raise UsageError("%s is %d bytes, more than the %d a tmux window's command can carry"
                         % (source, size, MAX_PROMPT), hint)
    return text


def read_prompt(text=None, path=None):
    """The prompt given as text or as a file's path (read as UTF-8), checked; None for neither."""
    if text is not None and path is not None:
        raise UsageError("give --prompt or --prompt-file, not both", "coord work start WORK --prompt \"TASK\"")
    if path is None:
        return None if text is None else check_prompt(text)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_PROMPT + 1)
    except OSError as exc:
        raise UsageError("cannot read --prompt-file %s: %s" % (path, exc.strerror or exc),
                         "coord work start WORK --prompt-file PATH")
    if len(raw) > MAX_PROMPT:
        raise UsageError("--prompt-file %s is longer than the %d bytes a tmux window's command can carry"
                         % (path, MAX_PROMPT), "shorten it, or give a short prompt naming a file the agent reads")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("--prompt-file %s is not UTF-8 text" % path, "coord work start WORK --prompt-file PATH")
    return check_prompt(text, "--prompt-file %s" % path)


def start_work(st, *, caller, handle, harness, extra=(), environ, prompt=None, override=False):
    """Run a harness for the work in a new tmux window, `prompt` (checked by check_prompt) as its
    first message when given; -> {work, tmux: the window record}."""
    if prompt is not None:
        check_prompt(prompt)
    w = _launchable(st, handle)
    authorize(st, w, caller, "start", override)
    w = carry_trust(st, w, caller, environ, (harness,))
    approvals = trust_pending(w, harness, environ)
    rec = _launch(environ, w, None, harness, list(extra), w["data"].get("tmux"), prompt=prompt)
    _record_launch(st, w, "active", rec, caller, step="started", harness=harness,
                   prompt_bytes=None if prompt is None else len(prompt.encode("utf-8", "surrogateescape")),
                   unarchived=True if w["state"] == "archived" else None)
    out = {"work": w["handle"], "tmux": rec}
    if harness == "shell":
        out["runtime"] = register_shell(st, w, rec)
        out["not_enforced"] = list(SHELL_NOT_ENFORCED)
    if approvals is not None:
        out["approvals"] = approvals
    return out


def resume_work(st, *, caller, handle, environ, conversation=None, harness=None, override=False):
    """Relaunch the harness resuming its (recorded) conversation; -> {work, tmux}."""
    w = _launchable(st, handle)
    authorize(st, w, caller, "resume", override)
    previous = w["data"].get("tmux") or {}
    recorded, recorded_harness = store.work_conversation(w)  # a wrapper's record first, else the window's
    conversation = conversation or recorded
    harness = harness or recorded_harness or previous.get("harness") or "claude"
    if harness == "shell":
        raise UsageError("work %s ran a shell agent, which has no conversation to resume" % w["handle"],
                         "coord work start %s --harness shell" % w["handle"])
    if not conversation:
        raise UsageError("no conversation is recorded for %s, so there is nothing to resume" % w["handle"],
                         "coord work resume %s --conversation ID, or start afresh: coord work start %s"
                         % (w["handle"], w["handle"]))
    w = carry_trust(st, w, caller, environ, (harness,))
    approvals = trust_pending(w, harness, environ)
    rec = _launch(environ, w, conversation, harness, [], previous)
    _record_launch(st, w, "resumed", rec, caller, conversation=conversation,
                   unarchived=True if w["state"] == "archived" else None)
    out = {"work": w["handle"], "tmux": rec}
    if approvals is not None:
        out["approvals"] = approvals
    return out


# An agent with no hooks (Aider, a plain shell) in a window coord launched: what holds and what not.
SHELL_NOT_ENFORCED = (
    "no hooks run there: writes are not checked against leases (claim before editing: coord claim PATH)",
    "messages are not shown to it: read them with coord inbox",
    "coord cannot tell it from a person typing at that window's terminal")


def register_shell(st, w, rec):
    """`work start --harness shell`: the agent has no hook to register it, so coord registers a
    runtime (harness `shell`) for the window's own process (pane pid and start time) and records
    it in the tmux record as a hook would: every coord command run in the window acts as it
    (Store.caller, process ancestry), and it ends when the window's process exits. -> its handle."""
    pid = rec["pane_pid"]
    with st.transaction():
        rt = st.register(harness="shell", pid=pid, pid_start=store.process_start(pid), cwd=w["path"],
                         source="work start")
        cur = st.work(w["id"])
        st.update_work(w["id"], data={"tmux": dict(cur["data"].get("tmux") or {}, conversation=rt["conversation"],
                                                   runtime_id=rt["id"])})
        st.audit("work.attached", rt["id"], w["id"], conversation=rt["conversation"], via="work start")
    return rt["handle"]


def park_work(st, *, caller, handle, reason, override=False):
    """Close the window but keep the clone, recording why; -> {work, window: what happened to it}."""
    w = st.resolve_work(handle)
    _refuse_state(w, UNUSABLE)
    if not (reason or "").strip():
        raise UsageError("parking needs --reason", "coord work park %s --reason \"waiting for review\"" % w["handle"])
    authorize(st, w, caller, "park", override)
    # The agent's leases and open messages stay with the work while it is parked: a holder
    # runtime takes them before the window closes, and the resumed conversation inherits them.
    conv = (w["data"].get("tmux") or {}).get("conversation")
    holder = st.hold_parked(conv, w["id"]) if conv else None
    try:
        what = _close_window(w)
        _record_tmux(st, w, "parked", None, caller, reason=store.clean_text(reason, 500), outcome=what,
                     holder=holder["id"] if holder else None)
    except BaseException:
        if holder is not None:
            st.unhold_parked(holder["id"])
        raise
    out = {"work": w["handle"], "window": what}
    if holder is not None:
        out["kept"] = [l["resource"] for l in st.leases_of(holder["id"])]
        out["holder"] = holder["handle"]
    return out


def close_work(st, *, caller, handle, override=False):
    """Kill exactly the recorded window (validated by ID); -> {work, window}."""
    w = st.resolve_work(handle)
    _refuse_state(w, UNUSABLE)
    authorize(st, w, caller, "close", override)
    what = _close_window(w)
    released = _end_parked(st, w, "work closed")
    _record_tmux(st, w, "closed", None, caller, outcome=what, released=released or None)
    return {"work": w["handle"], "window": what}


def archive_work(st, *, caller, handle, override=False):
    """Keep finished work out of the way: close its window (validated by ID), release what it
    holds (a parked work's kept leases, and the leases of the agent that ran in the closed
    window), keep the clone on disk, and record it `archived` (hidden from `work list` and
    `status` unless asked). Refused while an agent of the work still runs outside coord's
    window, or while it is queued or integrating. -> {work, window, released}."""
    w = st.resolve_work(handle)
    _refuse_state(w, UNUSABLE)
    if w["state"] == "archived":
        return {"work": w["handle"], "window": "no window", "released": [], "already": True}
    authorize(st, w, caller, "archive", override)
    integ = _integration(w)
    if integ.get("state") in QUEUED:
        raise Refused("work %s is %s into %s; archiving would strand that" % (w["handle"], integ["state"],
                                                                           integ.get("into")),
                      "coord work integrate release %s (or land it), then archive" % w["handle"])
    live, _ = _live_tmux(w, strict=True)
    window_conv = (w["data"].get("tmux") or {}).get("conversation") if live else None
    for conv in store.work_conversations(w):
        rt = st.find_conversation_runtime(conv)
        if rt is not None and rt.get("harness") != store.PARKED and conv != window_conv:
            raise Refused("work %s still has agent %s running outside coord's window" % (w["handle"], rt["handle"]),
                          "end that session (or coord send \"wrap up\" --to %s), then archive" % rt["handle"])
    what = _close_window(w)
    released = _end_parked(st, w, "work archived")
    if window_conv and what.startswith("closed"):
        # The window is gone, and with it the agent that ran there: end its attachment now,
        # releasing its leases (audited), rather than leave them until its process is reaped.
        for rt in st.live_runtimes(include_ended=True):
            if rt["conversation"] == window_conv and rt["ended_at"] is None and not rt["agent_id"] \
                    and rt.get("harness") != store.PARKED:
                released += [l["resource"] for l in st.leases_of(rt["id"])]
                st.bye(rt["id"], reason="work archived")
    _record_tmux(st, w, "archived", None, caller, outcome=what, released=released or None)
    return {"work": w["handle"], "window": what, "released": released}


# --------------------------------------------------------------------------- resume wrappers

# The shipped `.coord/bin/claude` and `.coord/bin/codex` (bin/ in this checkout) run an
# interactive session's command line through `work record-conversation` before they exec the
# real CLI; these tell a session from automation, subcommands and help.
CLAUDE_COMMANDS = frozenset(("agents", "auth", "auto-mode", "config", "doctor", "gateway", "install", "mcp",
                             "migrate-installer", "plugin", "plugins", "project", "setup-token", "ultrareview",
                             "update", "upgrade"))
CLAUDE_NOT_SESSION = frozenset(("-p", "--print", "-h", "--help", "-v", "--version", "--bg", "--background"))
CODEX_VALUE_OPTIONS = frozenset(("-c", "--config", "--enable", "--disable", "--remote", "--remote-auth-token-env",
                                 "-i", "--image", "-m", "--model", "-p", "--profile", "-s", "--sandbox", "-a",
                                 "--ask-for-approval", "-C", "--cd", "--add-dir", "--local-provider"))
CODEX_COMMANDS = frozenset(("exec", "e", "review", "login", "logout", "mcp", "mcp-server", "plugin", "app-server",
                            "remote-control", "completion", "update", "doctor", "sandbox", "debug", "apply", "a",
                            "queue", "archive", "delete", "migrate-rollouts", "migrate-nfs-db", "unarchive", "cloud",
                            "exec-server", "features", "help", "agents", "responses-api-proxy", "stdio-to-uds",
                            "generate-ts"))
CODEX_NOT_SESSION = frozenset(("-h", "--help", "-V", "--version"))


def _option_value(args, names):
    """The value of the first of `names` in args (`--name VALUE` or `--name=VALUE`), "" for a
    flag given without one, None when absent."""
    for i, a in enumerate(args):
        for n in names:
            if a == n:
                nxt = args[i + 1] if i + 1 < len(args) else ""
                return "" if nxt.startswith("-") else nxt
            if n.startswith("--") and a.startswith(n + "="):
                return a[len(n) + 1:]
    return None


def wrapped_session(harness, argv):
    """What an interactive `claude`/`codex` command line does: None unless it runs a session
    (automation such as `claude -p` or `codex exec`, another subcommand, help or version), else
    {kind: start | resume | fork, conversation: the full UUID it names, or None (the harness's
    SessionStart hook records it)}."""
    argv = list(argv)
    args = argv[:argv.index("--")] if "--" in argv else argv
    if harness == "claude":
        if any(a in CLAUDE_NOT_SESSION or a.startswith("--print=") for a in args):
            return None
        if args and not args[0].startswith("-") and args[0] in CLAUDE_COMMANDS:
            return None
        resumed = _option_value(args, ("-r", "--resume"))
        fork = "--fork-session" in args
        if resumed is not None or _option_value(args, ("-c", "--continue")) is not None:
            conv = resumed if resumed and store.is_uuid(resumed) and not fork else None
            return {"kind": "fork" if fork else "resume", "conversation": conv}
        named = _option_value(args, ("--session-id",))
        return {"kind": "start", "conversation": named if named and store.is_uuid(named) else None}
    if any(a in CODEX_NOT_SESSION for a in args):
        return None
    words, i = [], 0
    while i < len(args):  # positionals, skipping the values of options that take one
        a = args[i]
        if a in CODEX_VALUE_OPTIONS:
            i += 2
            continue
        if not a.startswith("-"):
            words.append(a)
        i += 1
    if not words:
        return {"kind": "start", "conversation": None}
    if words[0] in CODEX_COMMANDS:
        return None
    if words[0] == "resume":
        conv = words[1] if len(words) > 1 and store.is_uuid(words[1]) and "--last" not in args else None
        return {"kind": "resume", "conversation": conv}
    if words[0] == "fork":
        return {"kind": "fork", "conversation": None}
    return {"kind": "start", "conversation": None}


def clone_of(st, cwd):
    """The live work whose managed clone holds `cwd` (by the ownership marker at or above it,
    read without following a symlink, matching the record's path and token), else None."""
    d = os.path.realpath(cwd)
    while True:
        marker = read_marker(d)
        if marker is not None:
            w = st.work(marker.get("work")) if store.is_uuid(marker.get("work")) else None
            if w is None or w["state"] in UNUSABLE or w["path"] != d or directory_problems(w):
                return None
            return w
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def wrapper_person(st, pid):
    """The person who ran a resume wrapper (process `pid`, an ancestor of this one; it execs the
    harness next): refused when an agent harness runs above the wrapper, or pid is not ours."""
    chain = store.ancestor_processes()
    at = [i for i, (p, _start) in enumerate(chain[:3]) if p == pid]
    if not at:
        raise Refused("process %s is not the wrapper that runs this command" % pid,
                      "run the harness through .coord/bin/claude or .coord/bin/codex")
    above = chain[at[0] + 1:]
    hpid, harness = store.harness_ancestor(above)
    if hpid is not None:
        raise Refused("%s (pid %d) runs above this terminal: an agent's session is not recorded" % (harness, hpid),
                      "run it from your own terminal")
    # The wrapper (named claude or codex, and the foreground job it leads) is no harness yet.
    skip = [p for p, _start in chain[:at[0] + 1]]
    key, _p, _s, _n, why = store.person_evidence(skip=skip)
    if key is None or why is not None:
        raise Refused("not positively a person at a terminal (%s): an agent's session is not recorded" % why,
                      "run it from your own terminal")
    return st.person_runtime(register=True, skip=skip), chain[at[0]][1]


def record_conversation(st, *, harness, argv, pid, cwd):
    """A resume wrapper run interactively in a managed clone: record the session it is about to
    exec (data.direct: harness, kind, the conversation when the command line names it, the pid
    the harness will have) in the work record, as `work resume` would, and un-park or un-archive
    the work; the harness's SessionStart hook later fills in the conversation and runtime.
    -> None when argv runs no session or cwd is in no managed clone, else {work, work_id,
    port_base, direct, state}. Refused (nothing recorded) for an agent above the wrapper, or a
    person who may not resume the work."""
    session = wrapped_session(harness, argv)
    if session is None:
        return None
    w = clone_of(st, cwd)
    if w is None:
        return None
    caller, pid_start = wrapper_person(st, pid)
    authorize(st, w, caller, "resume")
    with st.transaction():
        cur = st.work(w["id"])
        state = "resumed" if cur["state"] in ("parked", "closed", "archived") else cur["state"]
        direct = {"harness": harness, "kind": session["kind"], "conversation": session["conversation"], "pid": pid,
                  "pid_start": pid_start, "at": _now(), "by": caller["id"], "cwd": os.path.realpath(cwd)}
        unarchived = True if cur["state"] == "archived" else None
        data = {"direct": direct, "history": _history(cur, state, caller, step="direct", harness=harness,
                                                       kind=session["kind"], conversation=session["conversation"],
                                                       unarchived=unarchived)}
        if state != cur["state"]:
            data["parked"] = None
        cur = st.update_work(w["id"], state=state, data=data)
        st.audit("work.direct", caller["id"], w["id"], harness=harness, kind=session["kind"],
                 conversation=session["conversation"], pid=pid, state=state, unarchived=unarchived)
    return {"work": cur["handle"], "work_id": cur["id"], "port_base": cur["data"].get("port_base"),
            "direct": direct, "state": state, "unarchived": bool(unarchived)}


def _end_parked(st, w, reason):
    """Release what a parked work kept (its holder's leases); -> the resource names released."""
    conv = (w["data"].get("tmux") or {}).get("conversation")
    return st.end_parked(conv, reason) if conv else []


# =========================================================================== commands
# Handlers are (ctx, args) -> (exit code, JSON data, text): they unpack the arguments, call
# one operation and render its record.

def _optional_caller(ctx):
    try:
        return ctx.caller()
    except Refused:
        return None


def target_work(ctx, handle, default_ok=False):
    """The named work record; with default_ok, COORD_WORK_ID after proving ownership and cwd."""
    st = ctx.db
    if handle:
        return st.resolve_work(handle)
    wid = ctx.environ.get("COORD_WORK_ID", "").strip() if default_ok else ""
    if not wid:
        raise UsageError("name the work handle", "coord work list shows work handles")
    w = st.resolve_work(wid)
    caller = ctx.caller()
    if not _owns(st, w, caller):
        raise Refused("COORD_WORK_ID names %s, which %s does not own" % (w["handle"], caller["handle"]),
                      "name the work handle explicitly")
    cwd = os.path.realpath(os.getcwd())
    if not w["path"] or not (cwd == w["path"] or below(cwd, w["path"])):
        raise Refused("COORD_WORK_ID names %s but the current directory is outside %s" % (w["handle"], w["path"]),
                      "cd into the clone, or name the work handle explicitly")
    return w


def _ok(record):
    out = {"ok": True}
    out.update(record)
    return out


def cmd_create(ctx, args):
    caller = ctx.caller()
    w = create_work(ctx.db, caller=caller, root=ctx.root, task=args.task, environ=ctx.environ,
                    scratch_root=args.scratch_root, from_rev=args.from_rev, depends=args.depends,
                    resources=args.resources, native=args.native_workspace,
                    allow_unprotected=args.allow_unprotected, no_setup=args.no_setup)
    lines = [w["handle"], w["path"]]
    if w["data"]["kind"] == "native":
        lines.append(native_note(w["source"], w["data"]["git"]))
    if w["data"].get("unprotected"):
        lines.append("warning: unprotected: agents in this clone run without coord's hooks (no registration, "
                     "messages or write checks): %s" % "; ".join(w["data"]["unprotected"]))
    lines += trust_lines(w)
    return 0, {"ok": True, "work": public_work(w, ctx.db)}, "\n".join(lines)


def cmd_setup(ctx, args):
    w, result = run_setup(ctx.db, caller=_optional_caller(ctx), work=args.handle, environ=ctx.environ)
    if result["status"] not in SETUP_OK:
        raise setup_refusal(w, result)
    return 0, {"ok": True, "work": w["handle"], "setup": result}, None


def listed_works(works, archived=False, everything=False):
    """(the works a listing shows, how many archived ones it leaves out): archived work only
    with `archived` (then only it) or `everything`."""
    if everything:
        return list(works), 0
    if archived:
        return [w for w in works if w["state"] == "archived"], 0
    shown = [w for w in works if w["state"] != "archived"]
    return shown, len(works) - len(shown)


def cmd_work_list(ctx, args):
    st = ctx.db
    works, hidden = listed_works(st.works(include_removed=args.all), args.archived, args.all)
    lines = []
    out = []
    grace = store.env_number(ctx.environ, "COORD_REGISTER_GRACE", REGISTER_GRACE, (0.0, 86400.0))
    for w in works:
        line = summary_line(w)
        unregistered = not_registered(w, grace)
        if unregistered:
            line += "  " + UNREGISTERED
        if ctx.verbose:
            line += "  id=%s path=%s" % (w["id"], w["path"])
        lines.append(line)
        rec = public_work(w, st)
        if unregistered:
            rec["attention"] = UNREGISTERED
        out.append(rec)
    data = {"ok": True, "work": out}
    if hidden:
        lines.append(store.hint("%d archived (coord work list --archived)" % hidden))
        data["archived_hidden"] = hidden
    return 0, data, "\n".join(lines)


def cmd_inspect(ctx, args):
    w = target_work(ctx, args.handle, default_ok=True)
    facts = inspect_work(ctx.db, work=w, environ=ctx.environ, observe=ctx.verbose)
    data = {"ok": True, "work": public_work(w, ctx.db)}
    if "observed" in facts:
        data["observed"] = facts["observed"]
    lines = inspect_lines(facts, ctx.verbose)
    data["preview"] = inspect_preview(w, ctx.environ)
    if data["preview"]:
        lines.insert(1, preview_line(data["preview"]))
    return 0, data, "\n".join(lines)


def inspect_lines(facts, verbose=False):
    """The text of `work inspect` for inspect_work's record."""
    w, d = facts["work"], facts["work"]["data"]
    lines = [summary_line(w)]
    lines.append("path %s%s" % (w["path"], "" if w["path"] and os.path.isdir(w["path"]) else " (missing)"))
    if facts["owner"]:
        lines.append("owner %s%s" % (facts["owner"]["handle"], "" if facts["owner_live"] else " (not live)"))
    failure = d.get("failure")
    if failure:
        lines.append("failed at %s: %s (directory %s)" % (store.clean_text(failure["step"], 120),
                                                          store.clean_text(failure["reason"], 300),
                                                          failure["directory"]))
    setup = setup_line(d.get("setup"))
    if setup:
        lines.append(setup)
    if d.get("parked") and w["state"] == "parked":
        lines.append("parked: %s" % store.clean_text(d["parked"]["reason"], 200))
    if d.get("tmux"):
        lines.append("tmux window %s %s" % (d["tmux"].get("window_id"), "running" if facts["tmux_live"]
                                            else "gone (%s)" % store.clean_text(facts["tmux_why"], 120)))
    if d.get("direct"):
        lines.append("%s session from a terminal (resume wrapper): %s" % (
            d["direct"].get("harness"), d["direct"].get("conversation") or "conversation not registered yet"))
    gate = _gate(w)
    if gate.get("reason"):
        lines.append("gate %s: %s" % (gate["state"], store.clean_text(gate["reason"], 200)))
    for handle, state in facts["depends"]:
        lines.append("depends on %s (%s)" % (handle, state))
    lines += landing_lines(w)
    if verbose:
        lines += _inspect_verbose_lines(w, facts)
    return lines


def _inspect_verbose_lines(w, facts):
    d = w["data"]
    lines = ["id %s" % w["id"], "source %s" % w["source"],
             "conversation %s runtime %s" % (w["conversation"], w["runtime"])]
    for key in ("base", "current"):
        if d.get(key):
            lines.append("%s change %s commit %s" % (key, d[key].get("change"), d[key].get("commit")))
    integ = _integration(w)
    cand = integ.get("candidate")
    if cand:
        lines.append("candidate change %s commit %s (frozen by %s for %s)" % (
            cand["change"], cand["commit"], cand["runtime"], cand["resource"]))
    if integ.get("proof"):
        lines.append("proof: candidate is an ancestor of %s on %s" % (integ["proof"]["target"],
                                                                      integ["proof"]["into"]))
    if d.get("port_base") is not None:
        lines.append("ports %d-%d (COORD_PORT_BASE)" % (d["port_base"], d["port_base"] + PORT_STRIDE - 1))
    setup = d.get("setup") or {}
    for c in ((setup.get("includes") or {}).get("copied") or [])[:SHOWN_PATHS]:
        lines.append("copied %s" % store.clean_text(c["path"], 200))
    for c in ((setup.get("includes") or {}).get("skipped") or [])[:SHOWN_PATHS]:
        lines.append("not copied %s: %s" % (store.clean_text(c["path"], 200), c["why"]))
    if setup.get("output_tail") and setup.get("status") not in ("skipped", "running"):
        lines.append("setup output (last lines):")
        lines += ["  " + l for l in setup["output_tail"].splitlines()[-10:]]
    res = d.get("resources") or {}
    if res.get("planned") or res.get("actual"):
        lines.append("resources planned %s actual %s" % (", ".join(res.get("planned") or []) or "-",
                                                         ", ".join(res.get("actual") or []) or "-"))
    if d.get("tmux"):
        t = d["tmux"]
        lines.append("tmux %s %s %s on %s" % (t.get("session_id"), t.get("window_id"), t.get("pane_id"),
                                              t.get("socket")))
    ids = facts.get("observed")
    if ids:
        lines.append("observed @ change %s commit %s%s (last snapshot)" % (
            ids["change"], ids["commit"], " empty" if ids["empty"] else ""))
    elif facts.get("observe_error"):
        lines.append("observed: %s" % facts["observe_error"])
    return lines


def cmd_gate(ctx, args):
    gate_flags(args.passed, args.waive, args.reason)
    w = target_work(ctx, args.handle, default_ok=True)
    return 0, _ok(gate_work(ctx.db, caller=ctx.caller(), work=w, passed=args.passed,
                            reason=args.reason, override=args.override)), None


def cmd_enqueue(ctx, args):
    return 0, _ok(enqueue(ctx.db, caller=ctx.caller(), handle=args.handle, into=args.into,
                          override=args.override)), None


def cmd_queue(ctx, args):
    q = integration_queue(ctx.db, into=args.into)
    lines = []
    for b, h in sorted(q["holders"].items()):
        if not q["into"] or b == q["into"]:
            lines.append("integration/%s held by %s" % (b, h))
    for i, r in enumerate(q["queue"], 1):
        dep = ""
        if r["depends"]:
            dep = "  after " + ", ".join("%s (%s)" % (d["handle"], d["integration"]) for d in r["depends"])
        lines.append("%d. %s  %s  %s->%s%s" % (i, r["handle"], store.clean_text(r["task"], 40), r["state"],
                                               r["into"], dep))
    if q["queue"]:
        lines.append("the queue is an order, not a grant: the integration owner takes integration/<bookmark>")
    return 0, {"ok": True, "queue": q["queue"], "holders": q["holders"]}, "\n".join(lines)


def cmd_acquire(ctx, args):
    r = acquire(ctx.db, caller=ctx.caller(), handle=args.handle, into=args.into, environ=ctx.environ,
                override=args.override)
    text = "candidate %s\n%s" % (r["candidate"]["commit"], preview_line(r["preview"]))
    if r["waiting_on"]:
        text += "\nnote: depends on %s, not integrated yet" % ", ".join(r["waiting_on"])
    return 0, _ok(r), text


def cmd_conflicts(ctx, args):
    r = conflict_report(ctx.db, into=args.into, environ=ctx.environ)
    return 0, _ok(r), "\n".join(conflict_lines(r, ctx.verbose))


def conflict_lines(r, verbose=False):
    """The text of `work conflicts`: one line when nothing conflicts, else one line per
    conflicting pair; --verbose adds pairs that only overlap, and skipped works."""
    rows = [(w["target_conflicts"], w["target_overlap"], "%s x %s" % (w["handle"], w["into"]))
            for w in r["works"] if w["target_conflicts"] or w["target_overlap"]]
    rows += [(p["conflicts"], p["overlap"], "%s x %s" % (p["a"], p["b"])) for p in r["pairs"]]
    conflicting = [row for row in rows if row[0]]
    known = r["error"] is None
    lines = [] if known else [store.clean_text(r["error"], 300)]
    lines += ["%s: %s" % (label, _pair_text(c, o)) for c, o, label in (rows if verbose or not known else conflicting)]
    skipped = len(r["skipped"])
    if known and not conflicting:
        more = ["%d overlap%s without conflict" % (len(rows), "" if len(rows) == 1 else "s")] if rows else []
        more += ["%d skipped" % skipped] if skipped and not verbose else []
        lines.insert(0, "no conflicts among %d work%s and their targets%s" % (
            len(r["works"]), "" if len(r["works"]) == 1 else "s", "; " + ", ".join(more) if more else ""))
    if verbose:
        lines += ["skipped %s: %s" % (x["handle"], store.clean_text(x["reason"], 200)) for x in r["skipped"]]
    elif skipped and (conflicting or not known):
        lines.append("%d work%s skipped (--verbose says why)" % (skipped, "" if skipped == 1 else "s"))
    return lines


def _pair_text(conflicts, overlap):
    if conflicts:
        text = "conflict %s" % _named(conflicts)
        rest = [p for p in overlap if p not in conflicts]
        return text + ("; also both changed %s" % _named(rest) if rest else "")
    if conflicts is None:
        return "both changed %s (conflicts unknown)" % _named(overlap)
    return "both changed %s, merges cleanly" % _named(overlap)


def cmd_prove(ctx, args):
    return 0, _ok(prove(ctx.db, caller=ctx.caller(), handle=args.handle, target=args.target,
                        environ=ctx.environ)), None


def cmd_land(ctx, args):
    r = land_work(ctx.db, caller=ctx.caller(), handle=args.handle, into=args.into, environ=ctx.environ,
                  push=args.push, check=args.check, override=args.override)
    text = "%s landed %s on %s%s%s" % (r["work"], r["landed"], r["into"],
                                       " and %s/%s" % (r["remote"], r["into"]) if r["remote"] else "",
                                       " (already)" if r["already"] else "")
    if r.get("check") and not r["already"]:
        text += "\nchecked: %s (in %s)" % (store.clean_text(r["check"], 300), r.get("check_cwd") or "the clone")
    for item in r.get("held_by_peers") or []:
        text += "\nnote: %s changed %s, which %s held exclusively while the work ran" % (
            r["work"], item["path"], item["holder"])
    if r.get("check_set_aside"):
        text += "\nthe check's %d written file(s) were moved out of the clone to %s" % (
            r["check_set_aside"]["count"], r["check_set_aside"]["dir"])
    return 0, _ok(r), text


def landing_lines(w):
    """`work inspect` lines for a landing that is under way or stopped (none once landed)."""
    landing = w["data"].get("landing") or {}
    if not landing or landing.get("state") == "landed":
        return []
    state = "under way or interrupted" if landing.get("state") == "running" else landing.get("state")
    line = "landing into %s: %s after step %s" % (landing.get("into"), state, landing.get("step"))
    if landing.get("paths"):
        line += "; conflicts in %s" % _named(landing["paths"])
    elif landing.get("reason") and landing.get("state") not in ("running",):
        line += "; %s" % store.clean_text(landing["reason"].splitlines()[0], 200)
    lines = [line]
    nxt = rerun_command(w)
    if landing.get("state") not in LAND_RESUMABLE:
        lines.append("nothing moved; when fixed, land again: %s" % store.hint(nxt))
    else:
        if landing.get("state") == "publish-ambiguous":
            lines.append("check: git ls-remote %s refs/heads/%s (expected %s), then: %s" % (
                landing.get("remote"), landing.get("into"), landing.get("candidate"), store.hint(nxt)))
        else:
            lines.append("finish with: %s (run by %s)" % (store.hint(nxt), landing.get("runtime")))
    return lines


def cmd_integrate_release(ctx, args):
    r = release_integration(ctx.db, caller=ctx.caller(), handle=args.handle)
    text = None
    if r["integration"] != "integrated":
        text = "released without proof: %s is not integrated" % r["work"]
    return 0, _ok(r), text


def cmd_remove(ctx, args):
    r = remove_work(ctx.db, caller=ctx.caller(), handle=args.handle, confirm=args.confirm,
                    environ=ctx.environ, forget=args.forget, discard_ignored=args.discard_ignored,
                    override=args.override)
    text = None
    if r.get("kept_directory"):
        text = "forgot %s; its clone stays at %s (its marker names another registration)" % (r["work"],
                                                                                          r["kept_directory"])
    if r.get("discarded_ignored"):
        text = "discarded %d ignored file(s): %s" % (len(r["discarded_ignored"]), _named(r["discarded_ignored"]))
    return 0, _ok(r), text


def cmd_gc(ctx, args):
    r = gc_works(ctx.db, caller=_optional_caller(ctx), environ=ctx.environ, dry_run=args.dry_run,
                 discard_ignored=args.discard_ignored)
    lines = []
    verb = "would remove" if args.dry_run else "removed"
    for w in r["removed"]:
        lines.append("%s %s  %s" % (verb, w["handle"], store.clean_text(w["task"], 48)))
        if w.get("discarded_ignored"):
            lines[-1] += "  (%s %d ignored file(s): %s)" % ("discarding" if args.dry_run else "discarded",
                                                           len(w["discarded_ignored"]),
                                                           _named(w["discarded_ignored"]))
    if r["kept"]:
        lines.append("recovery candidates:")
    for k in r["kept"]:
        lines.append("  %s  %s: %s" % (k["handle"], store.clean_text(k["task"], 48),
                                       "; ".join("%s (next: %s)" % (x["message"], store.hint(x["next"]))
                                                 for x in k["reasons"])))
    return 0, _ok(r), "\n".join(lines)


def cmd_adopt(ctx, args):
    w = adopt_work(ctx.db, caller=_optional_caller(ctx), root=ctx.root, path=args.path, environ=ctx.environ,
                   scratch_root=args.scratch_root, work_id=args.work_id, expect_commit=args.expect_commit)
    return 0, {"ok": True, "work": public_work(w, ctx.db)}, w["handle"]


def cmd_remote_verify(ctx, args):
    return 0, verify_remote(root=ctx.root, work_of=lambda wid: ctx.db.work(wid), remote=args.remote,
                            bookmark=args.bookmark, expect=args.expect, environ=ctx.environ), None


def cmd_start(ctx, args):
    prompt = read_prompt(args.prompt, args.prompt_file)
    r = start_work(ctx.db, caller=_optional_caller(ctx), handle=args.handle, harness=args.harness,
                   extra=args.extra, environ=ctx.environ, prompt=prompt, override=args.override)
    return 0, _ok(r), start_text(r)


def start_text(r):
    """What `work start` says: nothing when the harness will run coord's hooks; otherwise what a
    person must approve in the window, and how; for a shell agent its runtime and what is not enforced."""
    if r.get("not_enforced"):
        return "\n".join(["%s runs a shell agent in tmux window %s as %s (coord commands there act as it)"
                          % (r["work"], r["tmux"].get("window_id"), r["runtime"]), "not enforced there:"]
                         + ["  " + store.hint(n) for n in r["not_enforced"]])
    if not r.get("approvals"):
        return None
    lines = ["%s runs in tmux window %s; coord's hooks stay off there until you approve them:"
             % (r["work"], r["tmux"].get("window_id"))]
    lines += ["  " + store.clean_text(a, 300) for a in r["approvals"]]
    lines.append(store.hint("  (or carry over the approvals you gave the shared checkout: coord trust --carry-over on)"))
    return "\n".join(lines)


def cmd_resume(ctx, args):
    r = resume_work(ctx.db, caller=ctx.caller(), handle=args.handle, environ=ctx.environ,
                    conversation=args.conversation, harness=args.harness, override=args.override)
    return 0, _ok(r), start_text(r)


def cmd_attach(ctx, args):
    import session
    w = ctx.db.resolve_work(args.handle)
    rec = w["data"].get("tmux")
    if not rec:
        raise Refused("work %s has no tmux window" % w["handle"], "coord work start %s" % w["handle"])
    session.validate(rec)
    if args.execute:
        code = session.attach(rec, None, ctx.environ)
        return code, {"ok": code == 0, "work": w["handle"]}, None
    argv = session.attach_command(rec, None, ctx.environ)
    return 0, {"ok": True, "work": w["handle"], "command": argv}, " ".join(shlex.quote(a) for a in argv)


def cmd_park(ctx, args):
    r = park_work(ctx.db, caller=ctx.caller(), handle=args.handle, reason=args.reason, override=args.override)
    text = None
    if r.get("kept"):
        text = "kept %s for the work (held by %s until resume, close or remove)" % (
            ", ".join(r["kept"][:5]) + (" (+%d more)" % (len(r["kept"]) - 5) if len(r["kept"]) > 5 else ""),
            r["holder"])
    return 0, _ok(r), text


def cmd_archive(ctx, args):
    r = archive_work(ctx.db, caller=ctx.caller(), handle=args.handle, override=args.override)
    text = None
    if r.get("already"):
        text = "%s was already archived" % r["work"]
    elif r["window"].startswith("window not"):
        text = r["window"]
    return 0, _ok(r), text


def cmd_record_conversation(ctx, args):
    """Hidden: what .coord/bin/claude and .coord/bin/codex run. Prints `WORK_ID PORT_BASE` for
    the wrapper to export (nothing when nothing was recorded); a refusal is one stderr line, and
    the wrapper runs the harness either way."""
    import sys
    try:
        r = record_conversation(ctx.db, harness=args.harness, argv=list(args.extra or []), pid=args.pid,
                                cwd=os.getcwd())
    except Refused as exc:
        sys.stderr.write("coord: this session is not recorded in the work: %s\n" % store.clean_text(exc.message, 300))
        return 0, {"ok": True, "recorded": False, "why": exc.message}, None
    if r is None:
        return 0, {"ok": True, "recorded": False}, None
    if r["unarchived"]:
        sys.stderr.write("coord: %s was archived; it is resumed now\n" % r["work"])
    return 0, _ok(dict(r, recorded=True)), "%s %s" % (r["work_id"], "" if r["port_base"] is None else r["port_base"])


def cmd_close(ctx, args):
    r = close_work(ctx.db, caller=ctx.caller(), handle=args.handle, override=args.override)
    return 0, _ok(r), (r["window"] if r["window"].startswith("window not") else None)


# =========================================================================== parser registration

def _override_argument(p):
    p.add_argument("--override", action="store_true",
                   help="the person only: act on work you do not own (audited); see DESIGN.md, Authority")


# Every `work` subcommand, in the order help lists them (a test compares this with the parser).
WORK_COMMANDS = ("create", "setup", "list", "inspect", "gate", "integrate", "conflicts", "remove", "gc", "adopt",
                 "start", "attach", "park", "resume", "close", "record-conversation", "archive")


class _Some:
    """A subparsers action that builds only the parser named `only` (None: every one); the others
    are `unbuilt()` stand-ins. A command builds only its own parser: building all of them is
    most of what parsing costs."""

    def __init__(self, action, only, unbuilt):
        self.action, self.only, self.unbuilt = action, only, unbuilt

    def add_parser(self, name, **kw):
        return self.action.add_parser(name, **kw) if self.only is None or self.only == name else self.unbuilt()


def register(sub, common, ident, only=None, unbuilt=None):
    """Add `work ...` and `remote verify` to coord's top-level subparsers; with `only`, of the
    `work` subcommands only that one (the others are `unbuilt()` stand-ins)."""
    both = [common, ident]
    work = sub.add_parser("work", parents=[common], help="isolated jj clones: create, list, inspect, integrate, "
                          "remove, ...", description="Managed work: each writable agent gets its own colocated "
                          "jj clone, recorded with exact IDs, integrated by one owner, and removed only with evidence.")
    ws = work.add_subparsers(dest="work_command", metavar="SUBCOMMAND")
    if only is not None:
        ws = _Some(ws, only, unbuilt)

    p = ws.add_parser("create", parents=both, help="clone the repository for one task; prints handle and path")
    p.add_argument("task", metavar="TASK", help="short task name (letters, digits, - and _)")
    p.add_argument("--scratch-root", metavar="DIR", help="where clones live (default $COORD_SCRATCH_ROOT or %s)"
                   % DEFAULT_SCRATCH_ROOT)
    p.add_argument("--native-workspace", action="store_true",
                   help="use `jj workspace add` (shared op log and store: not isolated)")
    p.add_argument("--allow-unprotected", action="store_true",
                   help="create it even if its starting revision lacks the shared checkout's coord installation "
                        "(its agents then run without coord's hooks)")
    p.add_argument("--from", dest="from_rev", metavar="REV", help="start from this revision (default: the "
                   "canonical default bookmark)")
    p.add_argument("--depends", nargs="+", action="extend", default=[], metavar="HANDLE",
                   help="work this one builds on")
    p.add_argument("--resources", nargs="+", action="extend", default=[], metavar="R",
                   help="resources this work plans to change")
    p.add_argument("--no-setup", action="store_true",
                   help="skip the clone's setup (%s and the %s copies)" % (SETUP_HOOK, INCLUDE_FILE))
    p.set_defaults(func=cmd_create)

    p = ws.add_parser("setup", parents=both, help="run the clone's setup again (%s, %s copies)"
                      % (SETUP_HOOK, INCLUDE_FILE))
    p.add_argument("handle", metavar="HANDLE")
    p.set_defaults(func=cmd_setup)

    p = ws.add_parser("list", parents=both, help="work records: handle, task, state")
    p.add_argument("--all", action="store_true", help="include removed and archived work")
    p.add_argument("--archived", action="store_true", help="only archived work")
    p.set_defaults(func=cmd_work_list)

    p = ws.add_parser("inspect", parents=both, help="one work record (--verbose adds exact IDs)")
    p.add_argument("handle", nargs="?", metavar="HANDLE", help="default: $COORD_WORK_ID, when you own it")
    p.set_defaults(func=cmd_inspect)

    p = ws.add_parser("gate", parents=both, help="record that the work's checks passed, or waive them")
    p.add_argument("handle", nargs="?", metavar="HANDLE", help="default: $COORD_WORK_ID, when you own it")
    p.add_argument("--pass", dest="passed", action="store_true")
    p.add_argument("--waive", action="store_true")
    p.add_argument("--reason", metavar="TEXT")
    _override_argument(p)
    p.set_defaults(func=cmd_gate)

    integ = ws.add_parser("integrate", parents=[common], help="one integration owner at a time: acquire, prove, "
                          "release; queue")
    isub = integ.add_subparsers(dest="integrate_command", metavar="STEP")
    p = isub.add_parser("acquire", parents=both, help="take integration/BOOKMARK and freeze the candidate")
    p.add_argument("handle", metavar="HANDLE")
    p.add_argument("--into", required=True, metavar="BOOKMARK")
    _override_argument(p)
    p.set_defaults(func=cmd_acquire)
    p = isub.add_parser("prove", parents=both, help="record proof: candidate is an ancestor of the target commit")
    p.add_argument("handle", metavar="HANDLE")
    p.add_argument("--target", required=True, metavar="COMMIT", help="full commit ID on the bookmark")
    p.set_defaults(func=cmd_prove)
    p = isub.add_parser("release", parents=both, help="release the integration lock (not evidence)")
    p.add_argument("handle", metavar="HANDLE")
    p.set_defaults(func=cmd_integrate_release)
    p = isub.add_parser("land", parents=both, help="land the work: freeze, rebase if stale, check, move the "
                        "bookmark, push, prove, release")
    p.add_argument("handle", metavar="HANDLE")
    p.add_argument("--into", required=True, metavar="BOOKMARK")
    p.add_argument("--push", metavar="REMOTE", help="also publish to this remote of the shared checkout")
    p.add_argument("--check", metavar="CMD", help="also run this on the frozen candidate, after git config %s of "
                   "the canonical repository (which always runs when set)" % LAND_CHECK_CONFIG)
    _override_argument(p)
    p.set_defaults(func=cmd_land)
    p = isub.add_parser("enqueue", parents=both, help="join the visible queue (grants nothing)")
    p.add_argument("handle", metavar="HANDLE")
    p.add_argument("--into", required=True, metavar="BOOKMARK")
    _override_argument(p)
    p.set_defaults(func=cmd_enqueue)
    p = isub.add_parser("queue", parents=both, help="show queued work in order, with dependencies")
    p.add_argument("--into", metavar="BOOKMARK")
    p.set_defaults(func=cmd_queue)

    p = ws.add_parser("conflicts", parents=both, help="which live works (and their targets) change the same "
                      "paths, and which would conflict; reads only")
    p.add_argument("--into", metavar="BOOKMARK", help="compare every work with this bookmark (default: the one "
                   "each integrates into, else the repository's main bookmark)")
    p.set_defaults(func=cmd_conflicts)

    p = ws.add_parser("remove", parents=both, help="delete a clone, only when every cleanup rule holds")
    p.add_argument("handle", metavar="HANDLE")
    p.add_argument("--confirm", required=True, metavar="HANDLE", help="the same handle again")
    p.add_argument("--forget", action="store_true", help="drop the record only, deleting nothing: when its directory "
                   "is gone, or its clone's marker names another registration (adopted elsewhere)")
    p.add_argument("--discard-ignored", action="store_true",
                   help="delete ignored files with the clone (the refusal lists them; the audit records them)")
    _override_argument(p)
    p.set_defaults(func=cmd_remove)

    p = ws.add_parser("gc", parents=both, help="remove what passes every rule; list the rest with reasons")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--discard-ignored", action="store_true",
                   help="delete ignored files with the clones removed (recorded in the audit)")
    p.set_defaults(func=cmd_gc)

    p = ws.add_parser("adopt", parents=both, help="register a known clone again after database loss")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--scratch-root", metavar="DIR")
    p.add_argument("--work-id", metavar="UUID", help="refuse unless the clone holds this work ID")
    p.add_argument("--expect-commit", metavar="COMMIT", help="refuse unless its agent bookmark is at this commit")
    p.set_defaults(func=cmd_adopt)

    _register_session(ws, both)

    remote = sub.add_parser("remote", parents=[common], help="verify a remote bookmark authoritatively")
    rs = remote.add_subparsers(dest="remote_command", metavar="SUBCOMMAND")
    p = rs.add_parser("verify", parents=both, help="exit 0 only when REMOTE's BOOKMARK is exactly --expect")
    p.add_argument("remote", metavar="REMOTE")
    p.add_argument("bookmark", metavar="BOOKMARK")
    p.add_argument("--expect", required=True, metavar="COMMIT", help="full commit ID")
    p.set_defaults(func=cmd_remote_verify)


LAUNCHABLE = ("claude", "codex", "copilot", "gemini", "qwen", "opencode", "shell")  # session.HARNESSES, without importing session


def _register_session(ws, both):
    """tmux subcommands (session.py)."""
    p = ws.add_parser("start", parents=both, help="run a harness for the work in a new tmux window")
    p.add_argument("handle", metavar="HANDLE")
    p.add_argument("--harness", choices=LAUNCHABLE, default="claude",
                   help="shell: an agent with no hooks (COORD_SHELL_CMD, default $SHELL)")
    p.add_argument("--prompt", metavar="TEXT", help="the agent's first message (its task)")
    p.add_argument("--prompt-file", metavar="FILE", help="the first message, read from a UTF-8 file")
    p.add_argument("extra", nargs="*", metavar="ARG", help="more harness arguments, after -- (anywhere)")
    _override_argument(p)
    p.set_defaults(func=cmd_start)
    p = ws.add_parser("attach", parents=both, help="print (or --execute) the command that shows the window")
    p.add_argument("handle", metavar="HANDLE")
    p.add_argument("--execute", action="store_true")
    p.set_defaults(func=cmd_attach)
    p = ws.add_parser("park", parents=both, help="close the window but keep the clone, with a reason")
    p.add_argument("handle", metavar="HANDLE")
    p.add_argument("--reason", required=True)
    _override_argument(p)
    p.set_defaults(func=cmd_park)
    p = ws.add_parser("resume", parents=both, help="relaunch the harness resuming its conversation")
    p.add_argument("handle", metavar="HANDLE")
    p.add_argument("--conversation", metavar="ID", help="default: the recorded conversation")
    p.add_argument("--harness", choices=LAUNCHABLE[:-1])
    _override_argument(p)
    p.set_defaults(func=cmd_resume)
    p = ws.add_parser("close", parents=both, help="kill exactly the recorded window (validated by ID)")
    p.add_argument("handle", metavar="HANDLE")
    _override_argument(p)
    p.set_defaults(func=cmd_close)
    p = ws.add_parser("record-conversation", parents=both)  # no help: hidden, for .coord/bin's wrappers
    p.add_argument("--harness", choices=("claude", "codex"), required=True)
    p.add_argument("--pid", type=int, required=True, help="the wrapper's pid (the harness keeps it: exec)")
    p.add_argument("extra", nargs="*", metavar="ARG", help="the harness's arguments, after --")
    p.set_defaults(func=cmd_record_conversation)
    p = ws.add_parser("archive", parents=both, help="finished work to keep: close its window, release its "
                      "leases, keep the clone, hide it from work list and status")
    p.add_argument("handle", metavar="HANDLE")
    _override_argument(p)
    p.set_defaults(func=cmd_archive)
