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
return plain dicts and raise store.CoordError subclasses), the `cmd_*` handlers (unpack args,
call one operation, render), and the parser registration. The harness launched into a clone and
its tmux window are launch.py's; the harness trust carried for a clone is trust.py's.
"""

import contextlib
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


def rmtree(path, **kw):
    import shutil
    shutil.rmtree(path, **kw)


def crash_point(environ, variable, point):
    """Fault injection, for tests only: SIGKILL this process when the environment variable
    `variable` (a COORD_TEST_* name, e.g. land.LAND_KILL_ENV) names `point`. Every kill switch
    calls this, right after the state it proves a re-run recovers from is recorded."""
    if (environ or {}).get(variable) == point:
        import signal
        os.kill(os.getpid(), signal.SIGKILL)


DEFAULT_SCRATCH_ROOT = "/var/tmp/fleet-audit"
MARKER = "coord-owner"          # inside the checkout's .jj/
TOOL_TIMEOUT = 120.0            # seconds for one ordinary jj/git call
CLONE_TIMEOUT = 1800.0          # seconds for `jj git clone` of a large repository
_TASK_RE = store.Pattern(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,47}$")
_BOOKMARK_RE = store.Pattern(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
FULL_COMMIT_RE = store.Pattern(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_CHANGE_RE = store.Pattern(r"^[k-z]{32}$")
# __pycache__/NAME.TAG.pyc of NAME.py, or NAMETAG.pyc of a suffix-less script such as coord
# (importlib's cache_from_source); TAG is sys.implementation.cache_tag, e.g. cpython-311.
BYTECODE_RE = store.Pattern(r"^((?:.*/)?)__pycache__/([^/]+?)\.?((?:cpython|pypy|graalpy)-[0-9A-Za-z_]+)"
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
        super().__init__("%s failed (%s): %s" % (" ".join(self.argv[:3]), why, store.clean_text(first)),
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


def run_tool(argv, cwd=None, timeout=TOOL_TIMEOUT, environ=None, check=True, input=None, extra_env=None,
             errors="backslashreplace"):
    """Run jj/git; return (exit code, stdout, stderr). Raise ToolError when check and it fails.
    extra_env: variables set after tool_env's scrubbing (coord's own, never inherited); errors:
    "surrogateescape" keeps bytes that are not UTF-8, both ways."""
    argv = [str(a) for a in argv]
    if cwd is not None and not os.path.isdir(cwd):
        raise EnvError("directory %s does not exist" % cwd, "coord work list shows recorded paths")
    env = tool_env(environ)
    env.update(extra_env or {})
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, input=input,
                              stdin=subprocess.DEVNULL if input is None else None,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                              encoding="utf-8", errors=errors)
    except FileNotFoundError:
        what = {"jj": "Jujutsu (jj)", "git": "git (>= 2.42 for jj)"}.get(argv[0], argv[0])
        raise EnvError("%s not found: coord work needs %s on PATH" % (argv[0], what),
                       "install %s, or put it on PATH, then retry" % what)
    except OSError as exc:  # not executable, or an argument list longer than the kernel takes
        raise EnvError("%s could not be started (%s): %s" % (argv[0], " ".join(argv[1:3]), exc.strerror or exc),
                       "check that `%s --version` runs; nothing was changed by this step" % argv[0])
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


def git(args, cwd, environ=None, check=True, timeout=TOOL_TIMEOUT, input=None, extra_env=None,
        errors="backslashreplace"):
    return run_tool(["git"] + list(args), cwd=cwd, timeout=timeout, environ=environ, check=check, input=input,
                    extra_env=extra_env, errors=errors)


# Reads that depend only on full commit IDs in one repository (which paths differ between two
# commits, whether one is an ancestor of the other, their merge base, whether a commit is
# present) give the same answer for the whole command: a queue asks each several times per work
# (its refusals, its proof, its report), so one process asks git once.
_SAME_FOR_COMMITS = {}


def _full(*oids):
    return all(FULL_COMMIT_RE.match(o or "") for o in oids)


# Reads of the shared checkout's own state (its config, its working trees, its branch and tag
# heads) that a queue's batch asks once per work while it starts its works: nothing moves
# between those starts, so inside held_reads() each is asked once. Outside, every call reads.
_HELD = {}


@contextlib.contextmanager
def held_reads():
    _HELD.clear()
    _HELD[None] = True
    try:
        yield
    finally:
        _HELD.clear()


def held(key, read):
    """read() once per key inside held_reads(); every time outside it."""
    if not _HELD:
        return read()
    if key not in _HELD:
        _HELD[key] = read()
    return _HELD[key]


def name_status(gargs, cwd, old, new, environ, check=True):
    """[(status letter, path)] of what differs between commits `old` and `new` (git diff
    --name-status, no renames), or None when git fails and not check."""
    key = ("diff", tuple(gargs), cwd, old, new)
    if key in _SAME_FOR_COMMITS:
        return list(_SAME_FOR_COMMITS[key])
    code, out, _ = git(list(gargs) + ["diff", "--name-status", "-z", "--no-renames", old, new], cwd, environ,
                       check=check)
    if code != 0:
        return None
    fields = out.split("\0")
    rows = [(fields[i][:1], fields[i + 1]) for i in range(0, len(fields) - 1, 2) if fields[i + 1]]
    if _full(old, new):
        _SAME_FOR_COMMITS[key] = tuple(rows)
    return rows


def changed_names(gargs, cwd, old, new, environ, check=True):
    """The paths that differ between commits `old` and `new` (git diff --name-only), or None when
    git fails and not check; memoized per process when both are full commit IDs."""
    rows = name_status(gargs, cwd, old, new, environ, check=check)
    return None if rows is None else [p for _, p in rows]


def has_commit(gargs, cwd, oid, environ):
    """Whether commit `oid` is in the repository; a present commit is remembered (objects are not
    removed while coord runs: it turns automatic gc off where it fetches)."""
    key = ("commit", tuple(gargs), cwd, oid)
    if key in _SAME_FOR_COMMITS:
        return True
    code, _, _ = git(list(gargs) + ["cat-file", "-e", oid + "^{commit}"], cwd, environ, check=False)
    if code == 0 and _full(oid):
        _SAME_FOR_COMMITS[key] = True
    return code == 0


def ancestry(gargs, cwd, older, newer, environ):
    """git merge-base --is-ancestor's exit: 0 when `older` is an ancestor of `newer` (or the same),
    1 when not, anything else when git could not say (neither is remembered)."""
    key = ("ancestor", tuple(gargs), cwd, older, newer)
    if key in _SAME_FOR_COMMITS:
        return _SAME_FOR_COMMITS[key], ""
    code, _, err = git(list(gargs) + ["merge-base", "--is-ancestor", older, newer], cwd, environ, check=False)
    if code in (0, 1) and _full(older, newer):
        _SAME_FOR_COMMITS[key] = code
    return code, err


def remember_ancestry(gargs, cwd, older, newer, code):
    """Record what ancestry() would answer for two full commit IDs, read some other way."""
    if code in (0, 1) and _full(older, newer):
        _SAME_FOR_COMMITS[("ancestor", tuple(gargs), cwd, older, newer)] = code


def merge_base(gargs, cwd, one, two, environ):
    """The merge base of two commits (git merge-base), remembered for full commit IDs."""
    key = ("base", tuple(gargs), cwd, one, two)
    if _SAME_FOR_COMMITS.get(("ancestor", tuple(gargs), cwd, one, two)) == 0:
        return one  # an ancestor is its own merge base with its descendant
    if key not in _SAME_FOR_COMMITS:
        _, out, _ = git(list(gargs) + ["merge-base", one, two], cwd, environ)
        if not _full(one, two):
            return out.strip()
        _SAME_FOR_COMMITS[key] = out.strip()
    return _SAME_FOR_COMMITS[key]


def fetched(gargs, cwd, commits):
    """Remember commits a fetch just brought into the repository as present (has_commit)."""
    for commit in commits:
        if _full(commit):
            _SAME_FOR_COMMITS[("commit", tuple(gargs), cwd, commit)] = True


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


_DESCRIBED_TEMPLATE = ('commit_id ++ " " ++ change_id ++ " " ++ if(current_working_copy, "wc", "-") ++ " " ++ '
                       'if(empty, "empty", "changes") ++ " " ++ parents.map(|c| c.commit_id()).join(",") ++ "\\0" '
                       '++ description ++ "\\0"')


def described_changes(path, revset, environ=None, with_head=False):
    """local_changes with each commit's emptiness, parents and whole description, in one read:
    [{commit, change, wc, empty, parents, description}] in jj log's order (newest first).
    with_head: snapshot the checkout first and read @ in the same call -> (head_ids, rows)."""
    query, template = revset, _DESCRIBED_TEMPLATE
    if with_head:
        if '"' in revset or "\\" in revset:  # not one a template can quote: two reads
            return head_ids(path, environ=environ), described_changes(path, revset, environ)
        query = "@ | (%s)" % revset
        template = 'if(self.contained_in("%s"), "in", "out") ++ " " ++ %s' % (revset, _DESCRIBED_TEMPLATE)
    _, out, _ = jj(["log", "--no-graph", "-r", query, "-T", template], path, snapshot=with_head, environ=environ)
    fields, rows, ids = out.split("\0"), [], None
    for i in range(0, len(fields) - 1, 2):
        parts = fields[i].strip("\n").split(" ")
        member = not with_head or parts.pop(0) == "in"
        if len(parts) != 5 or not FULL_COMMIT_RE.match(parts[0]):
            raise ToolError(["jj", "log", "-r", query], 0, "an unexpected row: %r" % fields[i][:200])
        row = {"commit": parts[0], "change": parts[1], "wc": parts[2] == "wc", "empty": parts[3] == "empty",
               "parents": [c for c in parts[4].split(",") if c], "description": fields[i + 1]}
        if row["wc"]:
            ids = {"change": row["change"], "commit": row["commit"], "empty": row["empty"],
                   "parents": row["parents"]}
        if member:
            rows.append(row)
    if not with_head:
        return rows
    if ids is None:
        raise ToolError(["jj", "log", "-r", query], 0, "no working-copy commit in the output")
    return ids, rows


def local_revsets(w, environ=None):
    """(local_revset(w), local_revset(w, keep_empty=True)), reading the clone and the canonical
    refs once for both."""
    safe = _safe_targets(w, environ)
    return _local_from(w, safe, False), _local_from(w, safe, True)


def local_revset(w, environ=None, keep_empty=False):
    """The revset of commits that exist only in this checkout (see LOCAL_WORK).

    A clone's remote-tracking bookmarks are a cache of the canonical repository: one that
    was deleted or moved there since the last fetch must not make commits look safe. So only
    targets that a current canonical branch or tag contains count, checked with git in the
    canonical repository. A native workspace shares the canonical store: its own work is
    what @ added above its recorded base.
    """
    return _local_from(w, _safe_targets(w, environ), keep_empty)


def _local_from(w, safe, keep_empty):
    if w["data"].get("kind") == "native":
        parent = (w["data"].get("base") or {}).get("parent")
        return ("(::@ ~ ::%s)" if keep_empty else "(::@ ~ ::%s) ~ empty()") % (parent or "root()")
    if keep_empty:
        return "~::(%s)" % " | ".join(safe)
    return LOCAL_WORK % " | ".join(safe)


def _clone_targets(path, environ):
    """The commits the clone's remote bookmarks and tags point at. A colocated clone keeps them as
    git refs too (refs/remotes, refs/tags, and jj 0.46's remote tags under refs/jj/remote-tags:
    jj exports them at the end of every command, and a snapshot does not move them), so one git
    read stands for `jj bookmark list --all-remotes` and `jj tag list --all-remotes`; a clone
    without .git asks jj. Each is only a candidate: the canonical repository decides which count
    (_safe_targets), and one missing only makes more commits count as the work's own."""
    if os.path.isdir(os.path.join(path, ".git")):
        code, out, _ = git(["-C", path, "for-each-ref", "--format=%(objecttype) %(objectname) %(*objecttype) "
                            "%(*objectname)", "refs/remotes", "refs/tags", "refs/jj/remote-tags"], path, environ,
                           check=False)
        if code == 0:
            found = []
            for line in out.splitlines():
                kind, oid, peeled_kind, peeled = (line.split(" ") + ["", "", "", ""])[:4]
                found += [oid] if kind == "commit" else [peeled] if peeled_kind == "commit" else []
            return found
    _, out, _ = jj(["bookmark", "list", "--all-remotes", "-T",
                    'if(remote && remote != "git" && normal_target, normal_target.commit_id() ++ "\\n")'],
                   path, snapshot=False, environ=environ)
    _, tags, _ = jj(["tag", "list", "--all-remotes", "-T", 'if(normal_target, normal_target.commit_id() ++ "\\n")'],
                    path, snapshot=False, environ=environ)
    return (out + "\n" + tags).split()


def _safe_targets(w, environ):
    """The clone's remote bookmark and tag targets that a current canonical branch or tag
    contains (local_revset), with root(); a native workspace needs none."""
    if w["data"].get("kind") == "native":
        return []
    # Tags too (local and remote): a release tagged on a commit no branch contains is the shared
    # repository's history, not the work's, and must neither block cleanup nor become a candidate.
    targets = sorted({t for t in _clone_targets(w["path"], environ) if FULL_COMMIT_RE.match(t)})
    safe = ["root()"]
    if targets:
        gargs = git_dir_args(w["source"])
        current = held(("heads", w["source"]), lambda: set(git(
            gargs + ["for-each-ref", "--format=%(objectname) %(*objectname)"] + list(CANONICAL_REFS),
            w["source"], environ)[1].split()))
        for t in targets:
            if t in current:  # the common case: one call for every unmoved bookmark or tag
                safe.append(t)
                continue
            code, found, _ = git(gargs + ["for-each-ref", "--count=1", "--contains", t] + list(CANONICAL_REFS),
                                 w["source"], environ, check=False)
            if code == 0 and found.strip():
                safe.append(t)
    if len(safe) > SAFE_TARGETS_MAX:  # ::S is ::heads(S); one argument of a command holds at most 128 KB
        safe = ["root()"] + _heads_of(w["source"], safe[1:], environ)
    return safe


SAFE_TARGETS_MAX = 1000   # above this many, a revset names only the heads (a repository with thousands of tags)
_HEADS_CHUNK = 2000       # commits per `git merge-base --independent`


def _heads_of(source, commits, environ):
    """The commits of `commits` that none of the others contains (git merge-base --independent in
    the canonical repository, in chunks an argument list holds)."""
    gargs = git_dir_args(source)
    while True:
        heads = []
        for i in range(0, len(commits), _HEADS_CHUNK):
            _, out, _ = git(gargs + ["merge-base", "--independent"] + commits[i:i + _HEADS_CHUNK], source, environ)
            heads += [h for h in out.split() if FULL_COMMIT_RE.match(h)]
        if len(commits) <= _HEADS_CHUNK or len(heads) >= len(commits):
            return sorted(heads)
        commits = heads



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
    if not FULL_COMMIT_RE.match(value):
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


def blocker(code, message, next_command, details=None):
    """A named reason coord will not act on a clone (delete it, run jj in it): {"code", "message",
    "next": the command to run, then any `details` (e.g. "paths": every path it names)}. These
    dicts are the `reasons` of a refusal's JSON as they are."""
    out = {"code": code, "message": message, "next": next_command}
    out.update(details or {})
    return out


def directory_problems(w):
    """Why the recorded directory is not provably this work's (path and marker), [] if it is.

    Each problem is a blocker(). jj must not run when this is non-empty.
    """
    h = w["handle"]
    path, root = w["path"], w["scratch_root"]
    if not path or not root:
        return [blocker("no-path", "the record has no directory", "coord work inspect %s" % h)]
    if not os.path.lexists(path):
        return [blocker("missing", "directory %s is gone" % path,
                 "if it was deleted on purpose: coord work remove %s --confirm %s --forget" % (h, h))]
    real, real_root = os.path.realpath(path), os.path.realpath(root)
    if real != path or real_root != root or not below(real, real_root):
        return [blocker("outside-root", "%s resolves to %s, not below the recorded scratch root %s"
                 % (path, real, root), "inspect it by hand; coord never deletes outside its scratch root")]
    if not os.path.isdir(os.path.join(path, ".jj")):
        return [blocker("not-jj", "%s has no .jj directory" % path, "inspect it by hand; coord work inspect %s" % h)]
    marker = read_marker(path)
    if marker is None or not _same_token(str(marker.get("token", "")), w["token"] or "") \
            or marker.get("work") != w["id"]:
        return [blocker("token-mismatch", "the ownership marker in %s does not match the registry" % path,
                 "if another database adopted the clone, drop this record (deletes nothing): coord work remove %s"
                 " --confirm %s --forget ; if no other database holds it, take it back: the same, then coord work"
                 " adopt %s" % (h, h, path))]
    return []


def verified_path(w):
    problems = directory_problems(w)
    if problems:
        first = problems[0]
        raise Refused("work %s: %s" % (w["handle"], first["message"]), first["next"], reason=first["code"])
    return w["path"]



# --------------------------------------------------------------------------- records and ownership

def now_time():
    return time.time()


def who_id(caller):
    return caller["id"] if caller else None


def with_history(w, state, caller, **extra):
    entry = {"state": state, "at": now_time(), "by": who_id(caller)}
    entry.update({k: v for k, v in extra.items() if v is not None})
    return list(w["data"].get("history", [])) + [entry]


def owner_of(st, w):
    """The live runtime that owns the work (the recorded runtime or its resumed successor), or None."""
    rt = st.runtime(w["runtime"]) if w.get("runtime") else None
    if rt is None:
        return None
    rt = st.successor(rt)
    return rt if not rt.get("superseded_by") and st.runtime_live(rt) else None


def owns(st, w, caller):
    """The caller is the work's own agent: its owner, the owner's successor or the harness
    launched for it (authority's OWN_REASONS). This is the one ownership rule: `COORD_WORK_ID`
    defaults a handle only for such a caller, and agents_land lets only such a caller land.
    A subagent (agent_id set) is not the harness: it names the work explicitly."""
    return authority(st, w, caller) in OWN_REASONS


# Who may change a work's state (DESIGN.md, "Authority"): gate, park, resume, close, start, integrate
# enqueue, acquire and land, and remove each call authorize(); prove and release belong to the runtime that froze
# the candidate (_candidate_for). Everyone else is refused (exit 3) naming who may, unless the
# person passes --override, which is audited (an agent's --override is refused). Acquire, land
# and prove are the person's even on an agent's own work, unless the repository opts in
# (refuse_agent_integration).
AUTHORITY_VERBS = {"gate": "pass or waive the gate of", "park": "park", "resume": "resume", "close": "close",
                   "archive": "archive", "rescue": "rescue files into",
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
    if caller.get("pid") and caller["pid"] == rec.get("pane_pid") and st.pid_judged_here(caller) \
            and other_host(st, w) is None:  # hosts: both pids this host's
        import session
        if session.live_window(rec)[0] is not None:
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
OWN_REASONS = frozenset(("owner", "successor", "harness"))  # authority()s that are the work's own agent


def agents_land(source, environ=None):
    """True when the person lets agents land their own work in this repository: `git config
    coord.agentsLand true` in the shared checkout's own config (.git/config, which no clone can
    commit), read with --local exactly as coord.landCheck is, so neither a clone's config nor
    the caller's environment (GIT_CONFIG_*, which tool_env drops and --local ignores) counts."""
    def read():
        try:
            code, out, _ = git(git_dir_args(source) + ["config", "--local", "--type=bool", "--get",
                                                       AGENTS_LAND_CONFIG], source, environ, check=False)
        except store.CoordError:
            return False
        return code == 0 and out.strip() == "true"
    return held(("agents-land", source), read)


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
    if why in OWN_REASONS and agents_land(w["source"], environ):
        return why
    verb = AUTHORITY_VERBS.get(action, action)
    if store.person_uid(caller) is not None:
        raise user_without_terminal(caller, "%s %s" % (verb, w["handle"]), into, action)
    raise Refused("%s may not %s %s: the person integrates and lands work, agents queue it"
                  % (caller["handle"], verb, w["handle"]), _enqueue_hint(w, into),
                  reason="person-lands", action=action)


def user_without_terminal(caller, what, into, action):
    """The refusal of a person's power to the user's own runtime without a terminal (a script,
    cron, a process detached from its terminal, maybe by an agent): the person does it at one.
    The hint names no command that acts: the caller may be an agent that left its harness."""
    return Refused("%s is you without a terminal (a script, cron or a detached process) and may not %s: the "
                   "person does, at a terminal" % (caller["handle"], what),
                   "the person does it in their own terminal; coord work integrate queue --into %s shows the queue"
                   % (into or "BOOKMARK"), reason="person-lands", action=action)


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
        allowed = bool(why) and (action not in PERSON_ACTIONS or why in OWN_REASONS and agents_land(w["source"]))
        owner = _owner_handle(st, w)
        raise Refused("an override is the person's: %s may not use one" % caller["handle"],
                      "retry without --override" if allowed else
                      _enqueue_hint(w, into) if action in PERSON_ACTIONS and why in OWN_REASONS else
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


def integration_of(w):
    return dict(w["data"].get("integration") or INTEGRATION_NONE)


def gate_of(w):
    return dict(w["data"].get("gate") or GATE_PENDING)


def landing_of(w):
    return dict(w["data"].get("landing") or {})


def summary_line(w):
    bits = [w["handle"], store.clean_text(w["task"], 48), w["state"]]
    integ = integration_of(w)
    if integ.get("state", "none") != "none":
        bits.append("%s->%s" % (integ["state"], integ.get("into", "?")))
    gate = gate_of(w)
    if gate["state"] != "pending":
        bits.append("gate " + gate["state"])
    if w["data"].get("kind") == "native":
        bits.append("native")
    if (w["data"].get("setup") or {}).get("status") in ("failed", "timeout"):
        bits.append("setup " + w["data"]["setup"]["status"])
    return "  ".join(bits)



def refuse_state(w, states):
    """Refuse work whose state is in `states` (one of the state sets above)."""
    if w["state"] in states:
        raise Refused("work %s is %s" % (w["handle"], w["state"]), "coord work list")


# A work record's `data` (a JSON object in store.py's works table), every key listed once: what it
# holds and which function writes it. Readers of a dict-valued key use its accessor
# (integration_of, gate_of, landing_of: a copy, with the default when absent); nothing else
# writes these keys.
WORK_DATA = {
    "kind": ("'clone' (its own jj clone) or 'native' (jj workspace add)", "_work_data"),
    "agent_id": ("the creating caller's subagent ID, None for a top-level agent", "_work_data"),
    "workspace_name": ("the jj workspace name (coord-<id>)", "_work_data"),
    "bookmark": ("the agent bookmark coord/<task>-<id8>", "_work_data"),
    "from": ("--from REV as given, None for the default bookmark", "create_work"),
    "depends": ("work IDs this one builds on (land refuses until they are integrated)", "_work_data"),
    "resources": ("{planned, actual}: resources the work meant to change and leased", "_work_data"),
    "history": ("[{state, at, by, ...}] every state change, appended by with_history", "with_history callers"),
    "port_base": ("COORD_PORT_BASE: the first of PORT_STRIDE ports the work may use", "create_work, adopt_work"),
    "base": ("{change, commit, parent, parents}: @ when the clone was made", "create_work"),
    "current": ("{change, commit, empty, at}: @ at the last snapshot coord took", "create_work, adopt_work, "
                "inspect_work, cleanup._mark_removed"),
    "git": ("what the shared checkout's git is (_git_kind)", "create_work"),
    "unprotected": ("coord files missing from the starting revision (--allow-unprotected), or None", "create_work"),
    "adopted": ("{at, by, bookmark_commit, bookmark_change}: registered again by adopt", "adopt_work"),
    "failure": ("{step, reason, at, directory}: why creation failed", "_record_failed_create"),
    "setup": ("{status, at, includes, output_tail, ...}: the clone's setup (run_setup)", "create_work, run_setup"),
    "gate": ("{state: pending|passed|waived, reason, ...} (gate_of)", "gate_work, land._gate_from_check"),
    "integration": ("{state, into, candidate, proof, released, ...} (integration_of)", "land.py: enqueue, "
                    "acquire, prove, release_integration, land_work, land_queue (sent_back)"),
    "landing": ("{state, step, steps, into, remote, check_arg, ...}: the last landing (landing_of)",
                "land._land_record, land_work"),
    "check_created": ("{path: hash}: ignored files a landing check made (cleanup accepts them unchanged)",
                      "land._check_in_clone"),
    "tmux": ("{socket, session_id, window_id, pane_id, pane_pid, conversation, ...}: the launched window",
             "_record_tmux"),
    "direct": ("{harness, kind, conversation, pid, ...}: a session a resume wrapper recorded", "record_conversation"),
    "parked": ("{reason, at} while parked, else None", "_record_tmux, record_conversation"),
    "args": ("{harness, argv}: the harness arguments the last `work start -- ARGS` (or `work resume W -- ARGS`) "
             "gave, without one-shot ones (session.reusable_args); `work resume` reuses them", "start_work, resume_work"),
    "closing": ("{at, by} while close or archive kills the window: the agent's SessionEnd then releases its "
                "leases instead of keeping them for the work (Store.session_end); removed by the next state",
                "_close_window, _record_tmux"),
    "trust": ("{added, notes, ...}: harness trust entries coord carried for the clone", "trust.carry_trust, "
              "trust.drop_trust, trust.adopt_trust"),
    "removed": ("{at, by, how, discarded_ignored, candidate_ref}: how the clone was removed (also a refused create "
                "that left nothing on disk)", "cleanup._mark_removed, _record_failed_create"),
}


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
HOOK_CONFIGS += (".opencode/plugins/coord-hook.js", ".kilo/plugins/coord-hook.js",  # coord's plugin runs the hook
                 ".pi/extensions/coord-hook.js")
INSTALLED_PATHS += (".opencode/plugins/coord-hook.js", ".opencode/.gitignore", ".kilo/plugins/coord-hook.js",
                    ".kilo/.gitignore", ".pi/extensions/coord-hook.js")
HOOK_CONFIGS += (".gemini/settings.json", ".qwen/settings.json", ".factory/hooks.json", ".augment/settings.json")
INSTALLED_PATHS += (".gemini/settings.json", ".qwen/settings.json", ".factory/hooks.json", ".augment/settings.json")


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

    Everything that can be refused before the disk is touched is (the plan, the free space in
    the scratch root): such a refusal leaves no record. Then the record is written (`creating`);
    a failure marks it `failed` with the step and reason, removes what this create made, and
    raises EnvError. When the shared checkout has coord installed and the clone's starting
    revision does not carry it (or carries an older release), the clone's agents would run
    without hooks: that is refused (Refused, with the commit command; the clone is removed and,
    nothing being left on disk, the record too) unless allow_unprotected, which records the
    gaps in the work's `unprotected`.
    Unless no_setup, the clone is then set up (run_setup): a failed setup keeps the clone,
    records the result and raises Refused naming the next command.
    """
    plan = _create_plan(st, root=root, task=task, environ=environ, scratch_root=scratch_root, from_rev=from_rev,
                        depends=depends, resources=resources, native=native, no_setup=no_setup)
    check_create_space(plan["task"], plan["source"], plan["scratch"], plan["native"], environ)
    w, token = _insert_creating(st, caller, plan, from_rev)
    ids, gaps = _checkout_or_fail(st, w, caller, token, from_rev, environ, allow_unprotected)
    w = _record_created(st, w, caller, ids, gaps)
    import trust
    w = trust.carry_trust(st, w, caller, environ)
    if no_setup:
        with st.transaction():
            w = st.update_work(w["id"], data={"setup": {"status": "skipped", "at": now_time()}})
        return w
    w, result = run_setup(st, caller=caller, work=w, environ=environ, paged=True)
    if result["status"] not in SETUP_OK:
        raise setup_refusal(w, result, created=True)
    return w


def _create_plan(st, *, root, task, environ, scratch_root, from_rev, depends, resources, native, no_setup):
    """Check a create's arguments before anything is made; -> {task, source, scratch, dep_ids,
    planned, native}."""
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
    return {"task": task, "source": source, "scratch": scratch, "dep_ids": dep_ids, "planned": planned,
            "native": native}


def _insert_creating(st, caller, plan, from_rev):
    """Write the `creating` record (path, token, port base) before the disk is touched; -> (record, token)."""
    task, scratch, source = plan["task"], plan["scratch"], plan["source"]
    work_id = store.new_uuid()
    path = os.path.join(scratch, "%s.%s" % (task, work_id[:8]))
    if os.path.lexists(path):
        path = os.path.join(scratch, "%s.%s" % (task, work_id))
    token = os.urandom(32).hex()
    data = _work_data("native" if plan["native"] else "clone", caller, workspace_name(work_id),
                      bookmark_name(task, work_id), {"state": "creating", "at": now_time(), "by": caller["id"]},
                      plan["dep_ids"], plan["planned"], **{"from": from_rev})
    if getattr(st, "engine", "postgresql") != "sqlite":  # the host its clone and shared checkout are on
        data["host"] = {"id": st.host["id"], "name": st.host["name"]}
    with st.transaction():
        data["port_base"] = port_base(st, work_id)
        w = st.insert_work(task, "creating", token, path=path, scratch_root=scratch, source=source,
                           conversation=caller["conversation"], runtime=caller["id"], data=data, work_id=work_id)
        st.audit("work.creating", caller["id"], work_id, task=task, path=path, source=source,
                 kind=data["kind"], depends=plan["dep_ids"], planned=plan["planned"])
    return w, token


def _checkout_or_fail(st, w, caller, token, from_rev, environ, allow_unprotected):
    """Make the checkout (with the protection check when the shared checkout has coord); -> (head
    ids, protection gaps). A failure or refusal is recorded (_record_failed_create) and raised."""
    source, task = w["source"], w["task"]
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
    return ids, gaps


def _record_created(st, w, caller, ids, gaps):
    """The checkout exists: record its base and make the work `active`; -> the record."""
    work_id = w["id"]
    base = {"change": ids["change"], "commit": ids["commit"],
            "parent": ids["parents"][0] if len(ids["parents"]) == 1 else None, "parents": ids["parents"]}
    with st.transaction():
        cur = st.work(work_id)
        w = st.update_work(work_id, state="active", data={
            "base": base, "current": dict(base, empty=ids["empty"], at=now_time()), "git": _git_kind(w["path"]),
            "history": with_history(cur, "active", caller), "unprotected": gaps or None})
        st.audit("work.created", caller["id"], work_id, task=w["task"], path=w["path"], base_change=ids["change"],
                 base_commit=ids["commit"], kind=w["data"]["kind"], unprotected=gaps or None)
    return w


# --------------------------------------------------------------------------- free space
# A create on a full disk fails half-way, or worse succeeds at 100% and leaves jj unable to
# snapshot (seen: `jj describe` "No space left on device" while status read the old snapshot).
# So a create first checks the scratch root's free space against an estimate, and status and
# inspect say when a clone's filesystem is (nearly) full.

LOW_SPACE = 1 << 20  # bytes: below this much free space jj cannot be relied on to snapshot
CREATE_MARGIN = (2 << 20, 0.05)  # added to the estimate: jj's own store, op log and index
# Free space at least 50 times the git objects plus 1 GiB: enough for any plausible checkout,
# so the create runs no `git ls-tree` to size it (the common case costs no process).
OBVIOUSLY_ENOUGH = (50, 1 << 30)


def free_space(path):
    """Bytes available to this user on the filesystem holding path, or None when unknown."""
    try:
        v = os.statvfs(path)
    except OSError:
        return None
    return v.f_bavail * v.f_frsize


def mib(n):
    return "%.1f MiB" % (n / float(1 << 20))


def _objects_bytes(source):
    """Bytes in the source's git object store (packs and loose objects: what `jj git clone`
    fetches, about), walked without a process; None when the store is not a plain directory."""
    for objects in (os.path.join(source, ".git", "objects"), os.path.join(source, ".jj", "repo", "store", "git",
                                                                        "objects")):
        if os.path.isdir(objects) and not os.path.islink(objects):
            total = 0
            for dirpath, _dirs, files in os.walk(objects):
                for name in files:
                    try:
                        total += os.lstat(os.path.join(dirpath, name)).st_size
                    except OSError:
                        pass
            return total
    return None


def _tree_bytes(source, environ=None):
    """The size of the files of HEAD's tree (what a checkout writes): one `git ls-tree`; None unknown."""
    code, out, _ = git(git_dir_args(source) + ["ls-tree", "-r", "-l", "--full-tree", "HEAD"], source, environ,
                       check=False)
    if code != 0:
        return None
    total = 0
    for line in out.splitlines():
        fields = line.split(None, 4)
        if len(fields) >= 4 and fields[1] == "blob" and fields[3].isdigit():
            total += int(fields[3])
    return total


def create_space_needed(source, native, environ=None, free=None):
    """An estimate of what a create writes in the scratch root, in bytes, or None when unknown:
    the files of HEAD's tree (the checkout), plus for a clone the source's git objects, plus
    CREATE_MARGIN. When `free` is far above what any checkout of these objects plausibly needs
    (OBVIOUSLY_ENOUGH), the objects' size alone is returned and no process runs."""
    try:
        objects = _objects_bytes(source)
        if objects is not None and free is not None and free >= OBVIOUSLY_ENOUGH[0] * objects + OBVIOUSLY_ENOUGH[1]:
            return objects
        if objects is None and not native:
            return None
        tree = _tree_bytes(source, environ)
    except store.CoordError:
        return None
    if tree is None:
        return None
    return int((tree + (0 if native else objects)) * (1 + CREATE_MARGIN[1])) + CREATE_MARGIN[0]


def check_create_space(task, source, scratch, native, environ=None):
    """Refuse a create (EnvError, before anything is made) whose estimated size exceeds the scratch
    root's free space; unknown either way, nothing is refused."""
    free = free_space(scratch)
    needed = create_space_needed(source, native, environ, free) if free is not None else None
    if needed is None or needed <= free:
        return
    raise EnvError("work create %s refused: not enough space: a clone of %s needs about %s, %s is free in %s" % (
        task, source, mib(needed), mib(free), scratch),
        "free space in %s, or create it on a bigger disk: coord work create %s --scratch-root /a/private/dir"
        % (scratch, shlex.quote(task)))


def space_problem(path):
    """One sentence when the filesystem of a clone at path has less than LOW_SPACE free (jj and git
    there fail for lack of space), else None."""
    free = free_space(path)
    if free is None or free >= LOW_SPACE:
        return None
    return "jj and git fail here: no space left on device (%d KiB free on the filesystem of %s)" % (
        free // 1024, path)


class repo_lock:
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


def never_page(path, environ=None):
    """Make jj and git in the clone at `path` never page: an agent's shell has no person to press
    `q` (a `jj st` sat in jj's pager inside Gemini CLI's shell until the person typed). jj's
    workspace config `ui.paginate = "never"` (this workspace only, never the shared repository's
    other workspaces) and, in a colocated clone, git's `core.pager = cat` in the clone's own
    config. Idempotent: create writes it; setup, start and resume write it again, so clones made
    before it get it too."""
    try:
        jj(["config", "set", "--workspace", "ui.paginate", "never"], path, snapshot=False, environ=environ)
        if os.path.isdir(os.path.join(path, ".git")):
            git(["config", "--local", "core.pager", "cat"], path, environ)
    except store.CoordError:
        pass  # a pager setting never stops a create, setup or launch; jj itself says what is wrong next


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
        with repo_lock(w["source"], lock_dir or w["scratch_root"]):
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
            step = "pager"
            never_page(path, environ)
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
            step = "pager"
            never_page(path, environ)
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
        reason = exc.message if isinstance(exc, store.CoordError) else "%s: %s" % (type(exc).__name__, exc)
        full = space_problem(w["scratch_root"])  # jj's own message for a full disk can be a bare "git failed"
        raise _CreateFailed(step, "%s; %s" % (reason, full) if full else reason)


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
    # A refusal that leaves nothing on disk leaves no record either (it is `removed` at once, so
    # neither `work list` nor `gc` sees it); a directory left behind keeps its `failed` record.
    forget = refusal is not None and not left
    with st.transaction():
        cur = st.work(work_id)
        failure = {"step": step, "reason": reason, "at": now_time(),
                   "directory": "removed" if removed else ("left at %s" % path if left else "never created")}
        extra = {"removed": {"at": now_time(), "by": caller["id"], "how": "refused create, nothing on disk"}} \
            if forget else {}
        st.update_work(work_id, state="removed" if forget else "failed", data=dict(extra, failure=failure, history=(
            with_history(cur, "removed" if forget else "failed", caller, reason=reason))))
        st.audit("work.failed", caller["id"], work_id, step=step, reason=reason, removed=removed,
                 forgotten=forget or None)
    if refusal is not None:
        raise Refused("%s; %s" % (refusal[0], "nothing kept (directory removed)" if removed else (
            "recorded as failed (directory left at %s)" % path if left else "nothing kept")),
            refusal[1], reason="unprotected")
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
                rmtree(path)
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


def entry_digest(path):
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


def plain_parents(root, rel):
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
        if not plain_parents(source, rel) or not plain_parents(path, rel):
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
        digest = entry_digest(src)
        if os.path.lexists(dest):
            if digest is not None and entry_digest(dest) == digest:
                copied.append({"path": rel, "sha256": digest})
            else:
                skipped.append({"path": rel, "why": "the clone already has a different one"})
            continue
        try:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if _stat.S_ISLNK(info.st_mode):
                os.symlink(target, dest)
                digest = entry_digest(dest)
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
        tail = (tail + "\n" if tail else "") + "coord: killed after %s s (COORD_SETUP_TIMEOUT)" % store.number_text(timeout)
    return status, (None if status == "timeout" else code), tail


def run_setup(st, *, caller, work, environ, paged=False):
    """Set the clone up: copy the included ignored files, then run its committed .coord/setup with
    COORD_WORK_ID, COORD_WORK_PATH, COORD_WORK_HANDLE and COORD_PORT_BASE, bounded by
    COORD_SETUP_TIMEOUT. The result (status ok/failed/timeout/none, exit, output tail, duration,
    files copied) goes into the record and the audit; the clone is never deleted here. `paged`:
    the clone's pager settings were just written (create), so they are not written again.
    -> (work record, setup result)."""
    environ = os.environ if environ is None else environ
    timeout = store.env_number(environ, "COORD_SETUP_TIMEOUT", SETUP_TIMEOUT, SETUP_TIMEOUT_RANGE)
    w = st.resolve_work(work) if isinstance(work, str) else work
    refuse_state(w, UNUSABLE)
    verified_path(w)
    if not paged:
        never_page(w["path"], environ)
    if not os.path.isfile(os.path.join(w["source"] or "", INCLUDE_FILE)) and \
            not os.path.lexists(os.path.join(w["path"], SETUP_HOOK)):
        result = {"status": "none", "at": now_time()}  # nothing to do: no audit row, one write
        with st.transaction():
            w = st.update_work(w["id"], data={"setup": result})
        return w, result
    with st.transaction():
        w = st.update_work(w["id"], data={"setup": {"status": "running", "at": now_time()}})
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
    result["at"] = now_time()
    copied = (result["includes"] or {}).get("count", 0)
    with st.transaction():
        w = st.update_work(w["id"], data={"setup": result})
        st.audit("work.setup", who_id(caller), w["id"], status=result["status"], exit=result["exit"],
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
        if not (plain_parents(w["path"], p) and plain_parents(w["source"], p)):
            continue
        if entry_digest(os.path.join(w["path"], p)) == digest == entry_digest(os.path.join(w["source"], p)):
            out.add(p)
    return out


# --------------------------------------------------------------------------- inspect / gate

TRUNK_NAMES = ("main", "master", "trunk")


def target_bookmark(w, environ=None, default=None):
    """The bookmark a work's ahead/behind count against: the one it integrates into, else
    `default`, else the canonical repository's current git branch (a colocated jj repository
    has none: HEAD is detached), else the first of TRUNK_NAMES it has; None when none is known."""
    into = integration_of(w).get("into") or default
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
    import session
    facts = {"tmux": session.window_state(w["data"].get("tmux")), "dirty": None, "dirty_from": None,
             "into": None, "ahead": None, "behind": None, "errors": []}
    if w["state"] in UNUSABLE or directory_problems(w):
        return facts
    path = w["path"]
    full = space_problem(path)
    if full:  # dirty/ahead read from a snapshot jj cannot update would mislead: say why instead
        facts["errors"].append(full)
        return facts
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
        if FULL_COMMIT_RE.match(target):
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
    refuse_state(w, ENDED)
    authorize(st, w, caller, "gate", override)
    gate = {"state": "passed" if passed else "waived", "at": now_time(), "by": who_id(caller),
            "by_handle": caller["handle"] if caller else None, "user": user_name(),
            "reason": store.clean_text(reason, 500) if reason else None}
    with st.transaction():
        cur = st.resolve_work(w["id"])
        st.update_work(w["id"], data={"gate": {k: v for k, v in gate.items() if v is not None}})
        st.audit("work.gate." + gate["state"], who_id(caller), w["id"], reason=gate.get("reason"), user=gate["user"])
    return {"work": cur["handle"], "gate": gate}


def user_name():
    try:
        import getpass
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - only a label
        return str(os.getuid())


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
           "made_by": [_runtime_ref(rt) for rt in who["made_by"]], "leases": leases, "gate": gate_of(w),
           "owner": dict(_runtime_ref(caller), user=user_name()) if caller else None}
    check = integration_of(w).get("check")
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
            return v if verbose or not FULL_COMMIT_RE.match(v) else v[:12]
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

def is_inside(cwd, path):
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


def live_inside(st, w, procs):
    """Blockers for everything live inside the clone: runtimes whose recorded cwd or harness
    process is inside it, then any other process whose working directory is inside it."""
    path, h = w["path"], w["handle"]
    out, named = [], set()
    for rt, where in runtimes_inside(st, w, procs):
        if rt.get("pid") and st.pid_judged_here(rt):  # hosts: another host's pid N is not this host's process N
            named.add(rt["pid"])
        out.append(runtime_inside_blocker(w, rt, where))
    for pid in sorted(procs or {}):
        if pid in named or not is_inside(procs[pid], path):
            continue
        _, comm = store.process_parent(pid)
        out.append(blocker("process-inside", "process %d (%s) has its working directory inside it"
                    % (pid, store.clean_text(comm or "?", 40)),
                    "end process %d or move it out of the clone, then retry" % pid))
    return out


def runtimes_inside(st, w, procs):
    """[(runtime, where)] of the live runtimes whose recorded cwd or harness process (its
    working directory in `procs`, {pid: cwd} or None) is inside the work's clone."""
    path, out = w["path"], []
    for rt in st.live_runtimes():
        recorded = os.path.realpath(rt["cwd"]) if rt.get("cwd") else None
        actual = procs.get(rt["pid"]) if procs is not None and rt.get("pid") and st.pid_judged_here(rt) else None
        if not (is_inside(recorded, path) or is_inside(actual, path)):
            continue
        where = "its process %d works in %s" % (rt["pid"], actual) if is_inside(actual, path) else \
            "it was registered in %s" % recorded
        out.append((rt, store.clean_text(where, 300)))
    return out


def runtime_inside_blocker(w, rt, where):
    return blocker("runtime-inside", "live runtime %s is inside it (%s)" % (rt["handle"], where),
                   "ask it to finish: coord send \"done with %s?\" --to %s ; or wait until it ends"
                   % (w["handle"], rt["handle"]))


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


def git_store(w):
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
    gargs = git_store(w)
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


def named_paths(paths):
    shown = ", ".join(store.clean_text(p, 120) for p in paths[:SHOWN_PATHS])
    more = len(paths) - SHOWN_PATHS
    return shown + (" and %d more" % more if more > 0 else "")


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
        if [p for p in directory_problems(existing) if p["code"] == "token-mismatch"]:
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
                      {"state": "active", "at": now_time(), "by": who_id(caller), "event": "adopted"},
                      adopted={"at": now_time(), "by": who_id(caller), "bookmark_commit": commit, "bookmark_change": change},
                      current={"change": head["change"], "commit": head["commit"], "empty": head["empty"],
                               "at": now_time()},
                      git=_git_kind(path))
    with st.transaction():
        if st.work(work_id) is not None:
            raise Refused("work %s was registered meanwhile" % work_id, "coord work list")
        data["port_base"] = port_base(st, work_id)
        w = st.insert_work(task, "active", token, path=path, scratch_root=scratch, source=canonical,
                           conversation=caller["conversation"] if caller else None, runtime=who_id(caller),
                           data=data, work_id=work_id)
        st.audit("work.adopted", who_id(caller), work_id, path=path, bookmark=bookmark, commit=commit)
    write_marker(path, work_id, token)
    import trust
    w = trust.adopt_trust(st, w, caller, environ)
    for derive in (adopt_landed, adopt_window):  # what the repository and tmux prove; the record stands without
        try:
            w = derive(st, w, caller, environ)
        except store.CoordError:
            store.log_traceback("%s %s" % (derive.__name__, w["id"]))
    return w


# --------------------------------------------------------------------------- adopt: what the clone proves

def adopt_landed(st, w, caller, environ):
    """An adopted clone whose changes are on the target bookmark of the canonical repository
    landed before the database was lost: @ (or, when @ is empty, its one parent) is an ancestor
    of that bookmark's commit there, and so is the work's own first commit (its agent bookmark,
    made on @ at create and moved with it: an untouched clone's @ is off the bookmark). Recorded
    as integrated into it with that proof (the gate as waived, naming the proof: nothing is left
    to check), so `work remove` needs no --force; cleanup still refuses anything beyond that
    commit. -> the record (unchanged when unproven)."""
    cur = w["data"].get("current") or {}
    cand = cur.get("commit")
    if cur.get("empty"):
        head = head_ids(w["path"], snapshot=False, environ=environ)
        cand = head["parents"][0] if len(head["parents"]) == 1 else None
    into = target_bookmark(w, environ)
    if not cand or not FULL_COMMIT_RE.match(cand) or not into or not _BOOKMARK_RE.match(into):
        return w
    rebased = None
    try:
        gargs = git_dir_args(w["source"])
        code, out, _ = git(gargs + ["rev-parse", "--verify", "--quiet", "refs/heads/%s^{commit}" % into],
                           w["source"], environ, check=False)
        target = out.strip()
        first = (w["data"].get("adopted") or {}).get("bookmark_commit")
        if code != 0 or not FULL_COMMIT_RE.match(target) or not first:
            return w
        for commit in (first, cand):
            code, _, _ = git(gargs + ["merge-base", "--is-ancestor", commit, target], w["source"], environ,
                             check=False)
            if code != 0:
                rebased = landed_rebased(w, cand, target, environ)
                if not rebased:
                    return w
                break
    except store.CoordError:
        return w
    _, out, _ = jj(["log", "--no-graph", "-r", cand, "-T", "change_id"], w["path"], snapshot=False,
                   environ=environ, check=False)
    proof = {"target": target, "into": into, "candidate": cand, "at": now_time(), "runtime": who_id(caller),
             "derived": "adopt"}
    if rebased:
        proof["rebased"] = rebased  # landed as other commits: each of the clone's has its patch on the target
    integ = {"state": "integrated", "into": into, "proof": proof,
             "candidate": {"commit": cand, "change": out.strip() or None, "at": now_time(), "runtime": who_id(caller),
                           "resource": None, "derived": "adopt"}}
    gate = {"state": "waived", "at": now_time(), "by": who_id(caller), "derived": "adopt",
            "reason": "adopted: %s is on %s (%s) in the shared repository" % (cand[:12], into, target[:12])}
    with st.transaction():
        now = st.work(w["id"])
        w = st.update_work(w["id"], data={"integration": integ, "gate": gate, "history": with_history(
            now, now["state"], caller, event="integrated", derived="adopt")})
        st.audit("work.integrated", who_id(caller), w["id"], candidate=cand, target=target, into=into,
                 derived="adopt")
    return w


def landed_rebased(w, cand, target, environ=None):
    """The evidence that the clone's commits up to `cand` landed on `target` as other commits (a
    landing that rebased them in a scratch copy, or any rebase): `git cherry TARGET CAND`, run in
    the clone with the canonical repository's objects as alternates (read only), lists every
    commit of cand that target lacks with `-` when target has a commit with the same patch
    (patch-id). -> [the clone's commits], all of them `-`, or None (one is not there, or none)."""
    objects = None
    for d in (os.path.join(w["source"], ".git", "objects"),
              os.path.join(w["source"], ".jj", "repo", "store", "git", "objects")):
        if os.path.isdir(d):
            objects = d
            break
    if objects is None:
        return None
    code, out, _ = git(["cherry", target, cand], w["path"], environ, check=False,
                       extra_env={"GIT_ALTERNATE_OBJECT_DIRECTORIES": objects})
    lines = [l.split() for l in out.splitlines() if l.strip()]
    if code != 0 or not lines or any(len(l) != 2 or l[0] != "-" for l in lines):
        return None
    return [l[1] for l in lines]


def process_environ(pid):
    """{name: value} of a process's environment (this user's processes only), {} when unreadable."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            raw = f.read(1 << 20)
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            out[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def adopt_window(st, w, caller, environ):
    """Re-link the agent that still runs in the work's tmux window after the database was lost:
    the window coord launched keeps its labels (@coord-work, the work ID; @coord-project), so
    the window is found by them on the caller's tmux server and on every server named by $TMUX
    of a process working inside the clone with this COORD_WORK_ID. Its conversation is the live
    runtime registered from that pane (else the pane's @coord-conversation label), so messages,
    `send --nudge`, `work resume` and the one-agent-per-clone refusal know it again.
    -> the record (unchanged when no such window runs)."""
    import session
    environ = os.environ if environ is None else environ
    project = store.resolve_project_id(environ, w["source"])
    sockets = [session.resolve_socket(None, environ)]
    procs = process_cwds() or {}
    for pid in sorted(procs):
        if is_inside(procs[pid], w["path"]):
            env = process_environ(pid)
            sock = session.socket_from_tmux_env(env.get("TMUX")) if env.get("COORD_WORK_ID") == w["id"] else None
            if sock and not any(session.same_socket(sock, s) for s in sockets):
                sockets.append(sock)
    rec = None
    for sock in sockets:
        try:
            rec = session.find_work_window(sock, project, w["id"])
        except store.CoordError:
            continue
        if rec:
            break
    if not rec:
        return w
    for rt, _ in runtimes_inside(st, w, procs):
        if rt.get("pid") and not rt.get("agent_id") and rt.get("harness") not in (store.PERSON, store.PARKED) \
                and st.pid_judged_here(rt) and session.descends_from(rt["pid"], [rec["pane_pid"]]):
            rec.update(conversation=rt["conversation"], runtime_id=rt["id"], harness=rt.get("harness") or None)
            break
    if not rec.get("harness"):
        rec["harness"] = session.harness_of_command(rec.get("pane_command"))
    with st.transaction():
        now = st.work(w["id"])
        w = st.update_work(w["id"], data={"tmux": rec, "history": with_history(
            now, now["state"], caller, event="relinked", window=rec["window_id"])})
        st.audit("work.relinked", who_id(caller), w["id"], window=rec["window_id"], pane=rec["pane_id"],
                 conversation=rec.get("conversation"), agent=rec.get("runtime_id"))
    return w


def adoptable_clones(st, root, environ=None, scratch_root=None):
    """[{path, work}] of the directories right under the scratch root that adopt would take: a
    colocated clone of this repository with one agent-<work id> workspace that no live record
    names. Only lists: adoption stays one explicit `work adopt PATH` per clone."""
    canonical = canonical_root(root, st.work)
    scratch = resolve_scratch_root(scratch_root, environ, canonical)
    try:
        names = sorted(os.listdir(scratch))
    except OSError:
        return []
    out = []
    for name in names:
        path = os.path.join(scratch, name)
        if os.path.islink(path) or not os.path.isdir(os.path.join(path, ".jj")):
            continue
        try:
            path = _adoptable_path(path, scratch, canonical, environ)
            work_id, _ = _adopted_workspace(path, environ)
        except store.CoordError:
            continue
        known = st.work(work_id)
        if known is None or known["state"] == "removed":
            out.append({"path": path, "work": work_id})
    return out


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
    if not _CHANGE_RE.match(fields[0]) or not FULL_COMMIT_RE.match(fields[1]):
        raise Refused("cannot read exact IDs of %s in %s" % (bookmarks[0], path), "inspect it by hand")
    return bookmarks[0], task, fields[0], fields[1]


# =========================================================================== commands
# Handlers are (ctx, args) -> (exit code, JSON data, text): they unpack the arguments, call
# one operation and render its record.

def optional_caller(ctx):
    try:
        return ctx.caller()
    except Refused:
        return None


# --------------------------------------------------------------------------- naming a work by its task

BY_TASK_HELP = "the work handle, or the task of exactly one live work"


def by_task(handler):
    """`handler` (a command that only reads or launches: inspect, attach, start, resume) with its
    HANDLE argument also accepted as the task of exactly one live work (store resolve_work
    by_task), replaced by that work's exact handle before the handler runs. What closes, lands
    or deletes is never wrapped: the exact handle is what carries authority."""
    def wrapped(ctx, args):
        if getattr(args, "handle", None):
            args.handle = ctx.db.resolve_work(args.handle, by_task=True)["handle"]
        return handler(ctx, args)
    wrapped.__name__, wrapped.__doc__ = handler.__name__, handler.__doc__
    return wrapped


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
    if not owns(st, w, caller):
        raise Refused("COORD_WORK_ID names %s, which %s does not own" % (w["handle"], caller["handle"]),
                      "name the work handle explicitly")
    cwd = os.path.realpath(os.getcwd())
    if not w["path"] or not (cwd == w["path"] or below(cwd, w["path"])):
        raise Refused("COORD_WORK_ID names %s but the current directory is outside %s" % (w["handle"], w["path"]),
                      "cd into the clone, or name the work handle explicitly")
    return w


def ok_data(record):
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
    import trust
    lines += trust.trust_lines(w)
    return 0, {"ok": True, "work": public_work(w, ctx.db)}, "\n".join(lines)


def cmd_setup(ctx, args):
    w, result = run_setup(ctx.db, caller=optional_caller(ctx), work=args.handle, environ=ctx.environ)
    if result["status"] not in SETUP_OK:
        raise setup_refusal(w, result)
    return 0, {"ok": True, "work": w["handle"], "setup": result}, None


# --------------------------------------------------------------------------- hosts of works
# A clone, its tmux window and the shared checkout it lands into are on one
# host. `work list` and `status` name each work's host once the project spans more than one; a
# SQLite project is one host by definition. cleanup (remove, gc), resume and nudge act only on
# works of their own host and, for another host's work, refuse naming the host and the command
# to run there.

def hosts_shown(st):
    """{work id: host name} when the project spans more than one host, else {} (always on SQLite:
    one host by definition, even when a sandbox gave a runtime a PID namespace of its own)."""
    if getattr(st, "engine", "postgresql") == "sqlite":
        return {}
    got = st.work_hosts()
    return {wid: h["name"] for wid, h in got["works"].items()} if got["spans"] > 1 else {}


def other_host(st, w):
    """The host record {"id", "name"} of w when it lives on another host than this process's, else
    None (always None on SQLite: one host). The host recorded at creation; for a work made before
    it was recorded, its creator's host (the user alone without a terminal is one runtime on every
    host of a project, so its works need the recorded one)."""
    if getattr(st, "engine", "postgresql") == "sqlite":
        return None
    h = (w.get("data") or {}).get("host") or st.work_hosts()["works"].get(w["id"])
    here = st.host["id"] if getattr(st, "host", None) else store.host_identity()["id"]
    return h if h and h["id"] != here else None


def refuse_other_host(st, w, command):
    """Refused when w lives on another host: its clone and tmux window are there, not here."""
    exc = other_host_refusal(st, w, command)
    if exc is not None:
        raise exc


def other_host_refusal(st, w, command):
    """The refusal (not raised) of `command` for w when w lives on another host, else None."""
    h = other_host(st, w)
    if h:
        return Refused("work %s lives on host %s (its clone, tmux window and shared checkout are there, not on %s)"
                      % (w["handle"], h["name"], store.host_identity()["name"]),
                      "on host %s run: %s" % (h["name"], command), reason="other-host", host=h["name"])


def nudge_withheld(st, rt, work, msg):
    """Why `rt` may not nudge `work` now (one line), or None. The turn facts come from the hook's
    lifecycle events (store turns); the pane's own facts are session.nudge's."""
    elsewhere = other_host(st, work)
    if elsewhere:  # its tmux pane is on that host
        return "%s lives on host %s, where its pane is; the message waits for its agent's next turn (to nudge, " \
               "send from host %s: coord send \"BODY\" --to %s --nudge)" % (
                   work["handle"], elsewhere["name"], elsewhere["name"], work["handle"])
    if authority(st, work, rt) not in ("owner", "successor", "person") and not store.is_terminal_person(rt):
        start = st.runtime(work["runtime"]) if work.get("runtime") else None
        owner = " %s" % st.successor(start)["handle"] if start is not None else ""
        return "only the person or the work's owner%s (or its successor) may nudge %s; the message waits for " \
               "its agent's next turn" % (owner, work["handle"])
    if msg.get("waiting"):
        return "its agent is not running; the message waits for its resume"
    rec = work["data"].get("tmux") or {}
    if not (rec.get("socket") and rec.get("pane_id")):
        return "it has no recorded tmux window"
    turn = st.turn(st.work_recipient(work)["id"])
    when = (lambda t: time.strftime("%H:%M:%S", time.localtime(t)))
    state = turn["state"] if turn else None
    if state == "busy":
        return "its agent is in a turn (since %s); it sees the message at its next tool call or turn" % when(turn["at"])
    if state == "dialog":
        return "its agent is showing a permission dialog (since %s); a keystroke would answer it" % when(turn["at"])
    if state == "nudged":
        return "it was already nudged at %s; the message waits for that turn" % when(turn["at"])
    if state != "idle":
        return "its agent has not reached its prompt since it started, so nothing shows its prompt is idle"
    return None


def nudge_work(st, rt, work, msg):
    """After message `msg` to `work` was stored: type session.NUDGE into the work's validated pane
    (never the body), audited, but only for the person or the work's owner (or its successor), and
    only with positive evidence that the agent sits at an idle, empty prompt with no dialog: its
    hook saw the turn end (Stop) and nothing since, and tmux saw no typing since the turn began.
    Otherwise nothing is typed. -> None when nudged, else why not (one line); the message waits
    for its agent's next boundary either way. `send --nudge` and landing use it."""
    problem = nudge_withheld(st, rt, work, msg)
    if problem is not None:
        return problem
    import session
    rid = st.work_recipient(work)["id"]
    turn, rec = st.turn(rid), work["data"]["tmux"]
    # since its turn began, or (idle since its SessionStart) since its window opened
    since = turn["began"] if turn["began"] is not None else rec.get("launched_at") or turn["at"]
    try:
        pane = session.nudge(rec, since, claim=lambda: st.claim_nudge(rid, turn["at"]),
                             unclaim=lambda: st.set_turn(rid, "idle", only_from="nudged"))
    except store.CoordError as exc:
        return exc.message
    with st.transaction():
        st.audit("message.nudged", rt["id"], str(msg["id"]), work=work["id"], pane=pane)
    return None


def cmd_gate(ctx, args):
    gate_flags(args.passed, args.waive, args.reason)
    w = target_work(ctx, args.handle, default_ok=True)
    r = gate_work(ctx.db, caller=ctx.caller(), work=w, passed=args.passed, reason=args.reason, override=args.override)
    return 0, ok_data(r), "%s gate %s" % (r["work"], r["gate"]["state"])


def cmd_adopt(ctx, args):
    if args.list:
        if args.path or args.work_id or args.expect_commit:
            raise UsageError("--list takes no clone", "coord work adopt --list")
        found = adoptable_clones(ctx.db, ctx.root, ctx.environ, args.scratch_root)
        return 0, {"ok": True, "clones": found}, "\n".join(c["path"] for c in found)
    if not args.path:
        raise UsageError("work adopt needs the clone's path, or --list", "coord work adopt --list")
    w = adopt_work(ctx.db, caller=optional_caller(ctx), root=ctx.root, path=args.path, environ=ctx.environ,
                   scratch_root=args.scratch_root, work_id=args.work_id, expect_commit=args.expect_commit)
    return 0, {"ok": True, "work": public_work(w, ctx.db)}, w["handle"]


# --------------------------------------------------------------------------- rescue: every turn recoverable
# At each turn's end the hook has jj snapshot the clone (hook.record_turn), so the clone's own
# operation log holds the files as they were. `work rescue` lists those snapshots and copies a
# turn's files into a new change on top of the working copy, which jj records first: nothing
# newer is overwritten, and the operation log it reads survives a crash, a reboot and a lost
# database (adopt the clone again first: docs/cleanup.md).

RESCUE_SHOWN = 30  # turns `work rescue` lists (the newest); --turn reaches any of them
SNAPSHOT_OP = "snapshot working copy"


def recorded_turns(path, environ=None):
    """[(operation id, end time)] of every working-copy snapshot in the clone's operation log,
    oldest first (turn N is index N-1); read without snapshotting."""
    tmpl = 'if(description == "%s", id ++ " " ++ time.end().format("%%Y-%%m-%%d %%H:%%M:%%S %%z") ++ "\\n")' \
        % SNAPSHOT_OP
    _, out, _ = jj(["op", "log", "--no-graph", "-T", tmpl], path, snapshot=False, environ=environ)
    return list(reversed([tuple(l.split(" ", 1)) for l in out.splitlines() if " " in l]))


def turn_state(path, op, environ=None):
    """(commit id of @, its description's first line) as operation `op` recorded them."""
    tmpl = 'commit_id ++ "\\t" ++ description.first_line()'
    _, out, _ = jj(["--at-op", op, "log", "--no-graph", "-r", "@", "-T", tmpl], path, snapshot=False,
                   environ=environ)
    commit, _, desc = out.strip("\n").partition("\t")
    return commit, desc


def rescue_list(w, path, environ=None):
    """The newest RESCUE_SHOWN turns: {turn, op, time, commit, description, files}, files being
    those that differ from the turn before (from the commit's parents for the first)."""
    ops = recorded_turns(path, environ)
    first = max(0, len(ops) - RESCUE_SHOWN)
    rows, prev = [], None
    for i in range(max(0, first - 1), len(ops)):
        (op, when), (commit, desc) = ops[i], turn_state(path, ops[i][0], environ)
        if i >= first:
            args = ["diff", "--name-only"] + (["--from", prev, "--to", commit] if prev else ["-r", commit])
            _, out, _ = jj(args, path, snapshot=False, environ=environ)
            rows.append({"turn": i + 1, "op": op, "time": when, "commit": commit, "description": desc,
                         "files": [f for f in out.splitlines() if f]})
        prev = commit
    return rows


def rescue_paths(w, path, turn, names):
    """jj filesets for PATH arguments, each relative to the clone's root (or absolute below it)."""
    out = []
    for name in names:
        full = os.path.normpath(os.path.join(path, name))
        if full == path or not below(full, path) or os.path.relpath(full, path).split(os.sep)[0] == ".jj":
            raise UsageError("%s is not a path inside the clone %s" % (name, path),
                             "coord work rescue %s --turn %d PATH (relative to %s)" % (w["handle"], turn, path))
        out.append('root:%s' % json.dumps(os.path.relpath(full, path)))
    return out


def rescue_turn(st, w, caller, turn, names, environ=None, override=False):
    """Copy turn `turn`'s files (all, or `names`) into a new change on top of @: `jj new` first
    records the working copy as it is and keeps it as the parent, so nothing newer is lost."""
    authorize(st, w, caller, "rescue", override=override)
    path = verified_path(w)
    ops = recorded_turns(path, environ)
    if not 1 <= turn <= len(ops):
        raise UsageError("work %s has %d recorded turns, not turn %d" % (w["handle"], len(ops), turn),
                         "coord work rescue %s" % w["handle"])
    op, when = ops[turn - 1]
    commit, _ = turn_state(path, op, environ)
    sets = rescue_paths(w, path, turn, names)
    jj(["new", "-m", "rescue turn %d (%s) of %s" % (turn, when, w["handle"])], path, environ=environ)
    jj(["restore", "--from", commit] + sets, path, environ=environ)
    after = head_ids(path, snapshot=False, environ=environ)
    _, out, _ = jj(["diff", "--name-only", "-r", "@"], path, snapshot=False, environ=environ)
    with st.transaction():
        st.audit("work.rescue", who_id(caller), w["id"], turn=turn, op=op, commit=commit,
                 paths=list(names), change=after["change"])
    return {"work": w["handle"], "turn": turn, "op": op, "from": commit, "time": when,
            "change": after["change"], "restored": [f for f in out.splitlines() if f]}


def cmd_rescue(ctx, args):
    w = target_work(ctx, args.handle)
    if args.turn is None:
        path = verified_path(w)
        rows = rescue_list(w, path, ctx.environ)
        lines = ["%d  %s  %s  %s" % (r["turn"], r["time"], r["description"] or "(no description)",
                                     ", ".join(r["files"][:6]) + (" +%d" % (len(r["files"]) - 6)
                                                                  if len(r["files"]) > 6 else "") or "-")
                 for r in rows]
        if not rows:
            lines = ["no recorded turns in %s" % path]
        return 0, {"ok": True, "work": w["handle"], "turns": rows}, "\n".join(lines)
    turn = store.check_int(args.turn[0], "--turn", 1, 10 ** 9, "coord work rescue %s" % w["handle"])
    r = rescue_turn(ctx.db, w, ctx.caller(), turn, args.turn[1:], ctx.environ, args.override)
    text = "restored %s from turn %d into new change %s on top: %s" % (
        ", ".join(r["restored"][:6]) or "nothing (the tree already matched)", r["turn"], r["change"][:12],
        "jj log -r @- -r @")
    return 0, ok_data(r), text



# =========================================================================== parser registration

def override_argument(p):
    p.add_argument("--override", action="store_true",
                   help="the person only: act on work you do not own (audited); see DESIGN.md, Authority")


# Every `work` subcommand, in the order help lists them (a test compares this with the parser).
WORK_COMMANDS = ("create", "setup", "list", "inspect", "gate", "integrate", "conflicts", "review", "remove", "gc",
                 "adopt", "rescue", "start", "attach", "park", "resume", "close", "record-conversation", "archive")


class _Some:
    """A subparsers action that builds only the parser named `only` (None: every one); the others
    are `unbuilt()` stand-ins. A command builds only its own parser: building all of them is
    most of what parsing costs."""

    def __init__(self, action, only, unbuilt):
        self.action, self.only, self.unbuilt = action, only, unbuilt

    def add_parser(self, name, **kw):
        return self.action.add_parser(name, **kw) if self.only is None or self.only == name else self.unbuilt()


def _parse_create(ws, both):
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


def _parse_setup(ws, both):
    p = ws.add_parser("setup", parents=both, help="run the clone's setup again (%s, %s copies)"
                      % (SETUP_HOOK, INCLUDE_FILE))
    p.add_argument("handle", metavar="HANDLE")
    p.set_defaults(func=cmd_setup)


def _parse_gate(ws, both):
    p = ws.add_parser("gate", parents=both, help="record that the work's checks passed, or waive them")
    p.add_argument("handle", nargs="?", metavar="HANDLE", help="default: $COORD_WORK_ID, when you own it")
    p.add_argument("--pass", dest="passed", action="store_true")
    p.add_argument("--waive", action="store_true")
    p.add_argument("--reason", metavar="TEXT")
    override_argument(p)
    p.set_defaults(func=cmd_gate)


def _parse_adopt(ws, both):
    p = ws.add_parser("adopt", parents=both, help="register a known clone again after database loss")
    p.add_argument("path", metavar="PATH", nargs="?")
    p.add_argument("--list", action="store_true", help="list the clones under the scratch root no record names "
                   "(adopts nothing)")
    p.add_argument("--scratch-root", metavar="DIR")
    p.add_argument("--work-id", metavar="UUID", help="refuse unless the clone holds this work ID")
    p.add_argument("--expect-commit", metavar="COMMIT", help="refuse unless its agent bookmark is at this commit")
    p.set_defaults(func=cmd_adopt)


def _parse_rescue(ws, both):
    p = ws.add_parser("rescue", parents=both, help="list a work's recorded turns, or restore one turn's files "
                      "as a new change")
    p.add_argument("handle", metavar="HANDLE")
    p.add_argument("--turn", nargs="+", metavar=("N", "PATH"), help="restore turn N (as listed) as a new change: "
                   "the whole tree, or only the files or directories named (relative to the clone's root)")
    override_argument(p)
    p.set_defaults(func=cmd_rescue)


# The `work` subcommands this module builds and handles (coord merges launch's, land's and
# cleanup's).
PARSERS = {"create": _parse_create, "setup": _parse_setup, "gate": _parse_gate,
           "adopt": _parse_adopt, "rescue": _parse_rescue}


def register(sub, common, ident, parsers, only=None, unbuilt=None):
    """Add `work ...` to coord's top-level subparsers: `parsers` maps a subcommand to the function
    that builds it (each module's PARSERS: coord merges those of the modules it imported); with
    `only`, of the `work` subcommands only that one (the others are `unbuilt()` stand-ins)."""
    both = [common, ident]
    work = sub.add_parser("work", parents=[common], help="isolated jj clones: create, list, inspect, integrate, "
                          "remove, ...", description="Managed work: each writable agent gets its own colocated "
                          "jj clone, recorded with exact IDs, integrated by one owner, and removed only with evidence.")
    ws = work.add_subparsers(dest="work_command", metavar="SUBCOMMAND")
    if only is not None:
        ws = _Some(ws, only, unbuilt)
    for name in WORK_COMMANDS:
        if name in parsers:
            parsers[name](ws, both)
