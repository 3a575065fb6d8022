"""coord's cleanup: everything that deletes a clone, and the evidence it needs first.

Invariants this module keeps:
- Removal deletes a directory only when every rule holds (RECORD_RULES, PRESENCE_RULES,
  CONTENT_RULES); otherwise it says which rule fails and the next command. Each rule is a small
  function returning named blockers (blocker: code, message, next) that only reads:
  the evidence it gathers (snapshot time, @) is returned by cleanup_check, not written into the record.
- Nothing is ever found by scanning directories: only recorded works, at their recorded,
  verified paths (workspace.verified_path).
- Nothing is deleted that is in no commit the shared repository has: every file on disk is in
  `@`, nothing lives only in the clone's own git, no process or runtime works inside, no
  landing is stopped half-way; ignored files only with --discard-ignored (audited).
- The clone is renamed aside, checked again, and put back on any change before it is deleted.

Layout, top-down: the evidence (what is live, what is only in the clone), the rules and
`cleanup_check`, delete-aside, `remove_work` and `gc_works`, their handlers and parsers.
"""

import os
import shlex
import time

import launch
import session
import store
import trust
import workspace
from workspace import (CANONICAL_REFS, blocker, git, jj, git_dir_args, named_paths, now_time,
                       who_id, integration_of, gate_of, landing_of)
import land
from store import Refused, UsageError


def _cache_of(path, tracked):
    """True for Python bytecode of a file in @ (coord's own hooks write .coord/__pycache__):
    a cache rebuilt from a commit, so nothing is lost with it."""
    m = workspace.BYTECODE_RE.match(path)
    return bool(m) and (m.group(1) + m.group(2) + ".py" in tracked or m.group(1) + m.group(2) in tracked)


def uncaptured(w, environ=None):
    """Blockers for files on disk that the snapshot left out of @: untracked ones jj did not
    snapshot (too large, auto-track, nested repositories) and ignored ones. Call only right
    after a snapshot. Each blocker carries its full list under "paths"."""
    h = w["handle"]
    files, unreadable = workspace.disk_entries(w["path"])
    out = []
    if unreadable:
        out.append(blocker("unreadable", "cannot list %d director%s: %s" % (
            len(unreadable), "y" if len(unreadable) == 1 else "ies", named_paths(unreadable)),
            "fix the permissions (or move the contents out), then retry", {"paths": unreadable}))
    _, listed, _ = jj(["file", "list", "-r", "@", "-T", 'path ++ "\\0"'], w["path"], snapshot=False,
                      environ=environ)
    tracked = set(listed.split("\0"))
    # Compare names as jj prints them (a name that is not UTF-8 then never matches: it blocks).
    missing = sorted(n for n in (os.fsencode(f).decode("utf-8", "backslashreplace") for f in files)
                     if n not in tracked)
    if not missing:
        return out
    ignored = workspace.ignored_paths(w, missing, environ)
    untracked = [f for f in missing if f not in ignored]
    ignored = [f for f in missing if f in ignored and not _cache_of(f, tracked)]
    if ignored and (w["data"].get("setup") or {}).get("includes"):
        copies = workspace.unchanged_copies(w, ignored)  # copied by setup, still in the shared checkout
        ignored = [f for f in ignored if f not in copies]
    if ignored and w["data"].get("check_created"):
        made = land.check_created(w, ignored)  # caches of coord's own landing check, unchanged since
        ignored = [f for f in ignored if f not in made]
    if untracked:
        out.append(blocker("untracked", "%d file(s) jj did not snapshot (too large, auto-track off, or in a nested "
                    "repository): %s" % (len(untracked), named_paths(untracked)),
                    "commit the untracked files (a large one: jj --config snapshot.max-new-file-size=100MiB "
                    "file track PATH) or move them out of the clone", {"paths": untracked}))
    if ignored:
        out.append(blocker("ignored", "%d ignored file(s) in no commit: %s" % (len(ignored), named_paths(ignored)),
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
        kept, snapshots = [], []
        for name, sha in refs:
            if sha in current:
                continue
            if _KILO_SNAPSHOT.match(name):
                snapshots.append((name, sha))
                continue
            code, found, _ = git(gargs + ["for-each-ref", "--count=1", "--contains", sha] + list(CANONICAL_REFS),
                                 w["source"], environ, check=False)
            if code != 0 or not found.strip():
                kept.append(name)
        kept += _uncaptured_snapshots(w, snapshots, sorted(current), environ)
        if kept:
            quoted = shlex.quote(path)
            out.append(blocker("git-only-refs", "%d ref(s) only in the clone's git, where jj does not look: %s" % (
                len(kept), named_paths(kept)),
                "look (git -C %s stash list; git -C %s log REF), keep what matters (git -C %s stash pop, then jj "
                "describe), delete each ref (git -C %s update-ref -d REF), then retry" % (quoted, quoted, quoted, quoted),
                {"paths": kept}))
    files = []
    try:
        names = sorted(os.listdir(gitdir))
    except OSError as exc:
        return out + [blocker("unreadable", "cannot list %s: %s" % (gitdir, exc.strerror), "fix the permissions, then retry")]
    for name in names:
        if name not in GIT_OWN and name not in ("modules", "lfs") and not name.endswith(".lock") and \
                not (name in HARNESS_LEFTOVERS and HARNESS_LEFTOVERS[name](w, os.path.join(gitdir, name), environ)):
            files.append(".git/" + name)
    files += _not_git_made(w, gitdir, environ)
    files += _store_strays(gitdir)
    out += _submodule_repos(w, gitdir, environ)
    files += _lfs_objects(w, gitdir)
    if files:
        out.append(blocker("git-only-files", "%d file(s) under .git/ that only the clone has: %s" % (len(files), named_paths(files)),
                    "move them out of %s (a file of git's own: put its bytes back), then: coord work remove %s --confirm %s"
                    % (shlex.quote(path), h, h), {"paths": files}))
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
    return [blocker("git-only-submodules", "%d submodule repositor%s only the clone has (commits there may exist nowhere "
             "else): %s" % (len(kept), "y" if len(kept) == 1 else "ies", named_paths(kept)),
             "push what matters from each (git -C %s/MODULE_PATH push), or move %s out of the clone, then retry"
             % (shlex.quote(w["path"]), named_paths(kept)), {"paths": kept})]


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


# What git and jj make in a fresh clone's .git that a person or an agent may write to as well:
# every file there counts as git's own only while its bytes are those of a fresh colocated clone
# made by the same jj (its template: the hook samples, info/exclude, description) or of the
# shared checkout's own file at the same path (which keeps them either way: a hook a setup
# installed in both, as `pre-commit install` does). Anything else there exists only in the clone.
GIT_MADE = ("hooks", "info", "description", "branches")


def _not_git_made(w, gitdir, environ):
    """Files under the clone's .git GIT_MADE entries that neither jj's template nor the shared
    checkout has with the same bytes (a symlink or other non-file always counts)."""
    template = _git_template(environ)
    theirs = _source_gitdir(w)
    out = []
    for top in GIT_MADE:
        start = os.path.join(gitdir, top)
        if os.path.isfile(start) or os.path.islink(start):
            found = [top]
        else:
            found = []
            for root, dirs, names in os.walk(start):
                dirs.sort()
                found += sorted(os.path.relpath(os.path.join(root, n), gitdir) for n in names)
                found += sorted(os.path.relpath(os.path.join(root, d), gitdir) for d in dirs
                                if os.path.islink(os.path.join(root, d)))
        for rel in found:
            mine = os.path.join(gitdir, rel)
            if os.path.islink(mine) or not os.path.isfile(mine):
                out.append(".git/" + rel)
                continue
            try:
                with open(mine, "rb") as f:
                    data = f.read()
            except OSError:
                out.append(".git/" + rel)
                continue
            if template.get(rel) == data or _same_file(mine, os.path.join(theirs, rel)) or \
                    (rel == os.path.join("info", "refs") and _INFO_REFS.match(data.decode("latin-1"))):
                continue
            out.append(".git/" + rel)
    return out


# The names git gives files in its object store, and the shape of a loose ref: anything else under
# .git/objects or .git/refs was put there by someone, where git never reads it back.
_OBJECT_NAME = store.Pattern(
    r"\A(?:[0-9a-f]{2}/(?:[0-9a-f]{38}(?:[0-9a-f]{24})?|tmp_obj_[^/]+)"
    r"|pack/pack-[0-9a-f]{40,64}\.(?:pack|idx|rev|keep|mtimes|bitmap|promisor)"
    r"|pack/multi-pack-index(?:-[0-9a-f]{40,64}\.(?:bitmap|rev))?|pack/(?:tmp_|\.tmp-)[^/]+"
    r"|info/(?:packs|alternates|http-alternates|commit-graph"
    r"|commit-graphs/(?:commit-graph-chain|graph-[0-9a-f]{40,64}\.graph))"
    r"|incoming-[^/]+/.+|tmp_obj_[^/]+|[^/]+\.lock)\Z")
_LOOSE_REF = store.Pattern(r"\A(?:[0-9a-f]{40}(?:[0-9a-f]{24})?|ref: refs/\S+)\n?\Z")


def _store_strays(gitdir):
    """Files under the clone's .git/objects whose names git never gives, and files under
    .git/refs that hold no object ID or symbolic ref (git ignores such a broken ref, so nothing
    else judges it). A symlink or other non-file there always counts."""
    out = []
    for top, ok in (("objects", lambda rel, path: _OBJECT_NAME.match(rel)), ("refs", _loose_ref)):
        start = os.path.join(gitdir, top)
        for root, dirs, names in os.walk(start):
            dirs.sort()
            for n in sorted(names) + sorted(d for d in dirs if os.path.islink(os.path.join(root, d))):
                path = os.path.join(root, n)
                rel = os.path.relpath(path, start)
                if os.path.islink(path) or not os.path.isfile(path) or not ok(rel, path):
                    out.append(".git/%s/%s" % (top, rel))
    return out


def _loose_ref(rel, path):
    if rel.endswith(".lock"):
        return True
    try:
        with open(path, "rb") as f:
            data = f.read(200)
        return bool(_LOOSE_REF.match(data.decode("ascii")))
    except (OSError, UnicodeDecodeError):
        return False


# .git/info/refs as `git update-server-info` (which `git gc` runs) writes it: one "ID<TAB>ref" a line.
_INFO_REFS = store.Pattern(r"\A(?:[0-9a-f]{40}(?:[0-9a-f]{24})?\t[^\s]+\n)*\Z")

_template = []


def _git_template(environ):
    """{path under .git: bytes} of the GIT_MADE files a fresh `jj git init --colocate` makes
    (what `jj git clone --colocate` gives a new clone), made once per process in a private
    temporary directory; {} when jj cannot make one (then only the shared checkout's copy counts)."""
    if not _template:
        import tempfile
        made = {}
        tmp = tempfile.mkdtemp(prefix="coord-template-")
        try:
            jj(["git", "init", "--colocate", tmp], tmp, environ=environ)
            gitdir = os.path.join(tmp, ".git")
            for top in GIT_MADE:
                for root, _, names in os.walk(os.path.join(gitdir, top)):
                    for n in names:
                        path = os.path.join(root, n)
                        if os.path.isfile(path) and not os.path.islink(path):
                            with open(path, "rb") as f:
                                made[os.path.relpath(path, gitdir)] = f.read()
                if os.path.isfile(os.path.join(gitdir, top)):
                    with open(os.path.join(gitdir, top), "rb") as f:
                        made[top] = f.read()
        except (OSError, store.CoordError):
            pass
        finally:
            workspace.rmtree(tmp)
        _template.append(made)
    return _template[0]


_COMMIT_ID = store.Pattern(r"\A[0-9a-f]{40}(?:[0-9a-f]{24})?\Z")


def _project_id_file(w, path, environ):
    """True for the file OpenCode (1.18.33, docs/harness-opencode.md) writes as `.git/opencode`
    in every repository it runs in, and Kilo Code (7.7.7) as `.git/kilo`: its project ID, the
    repository's root commit, 40 (or 64) hex digits and nothing else. Only a regular file holding
    a root commit of the clone counts: a value the harness computes again, so nothing is lost with it."""
    try:
        st = os.lstat(path)
        if not os.path.isfile(path) or os.path.islink(path) or st.st_size > 80:
            return False
        with open(path, "rb") as f:
            value = f.read().decode("ascii")
    except (OSError, UnicodeDecodeError):
        return False
    if not _COMMIT_ID.match(value):
        return False
    code, roots, _ = git(["-C", w["path"], "rev-list", "--max-parents=0", "--all"], w["path"], environ, check=False)
    return code == 0 and value in roots.split()


_MILLIS = store.Pattern(r"\A[0-9]{10,16}\Z")


def _timestamp_file(w, path, environ):
    """True for the file Factory Droid (0.225.2, docs/harness-droid.md) writes as
    `.git/.factory-scm-trigger` in a repository it runs in: a time in milliseconds, digits only,
    which it writes again at will. Only a small regular file of that shape counts."""
    try:
        if not os.path.isfile(path) or os.path.islink(path) or os.lstat(path).st_size > 20:
            return False
        with open(path, "rb") as f:
            return bool(_MILLIS.match(f.read().decode("ascii").strip()))
    except (OSError, UnicodeDecodeError):
        return False


# Files a harness leaves in every clone's .git that are not work: name -> recogniser(w, path,
# environ), True only for the exact shape that harness writes (docs/harness-NAME.md).
HARNESS_LEFTOVERS = {"opencode": _project_id_file, "kilo": _project_id_file, ".factory-scm-trigger": _timestamp_file}
# Kilo Code 7.7.7 keeps snapshots of the working tree as refs/kilo/materialize/ID, each a bare tree
# (no commit). One is not work when every file in it is, byte for byte, in the tree of a branch or
# tag of the shared repository: what it holds is kept there. Any other is kept in the clone.
_KILO_SNAPSHOT = store.Pattern(r"\Arefs/kilo/materialize/[0-9a-f]{40}\Z")


def _blobs(path, environ, args):
    """The blob IDs `git ls-tree -r` lists (args: the repository options and the tree-ish), or None."""
    code, out, _ = git(args[:-1] + ["ls-tree", "-r", "-z", args[-1]], path, environ, check=False)
    if code != 0:
        return None
    return {entry.split("\t", 1)[0].split(" ")[2] for entry in out.split("\0") if entry.count(" ") >= 2}


def _uncaptured_snapshots(w, snapshots, heads, environ):
    """The names of Kilo Code's snapshot refs (name, tree) holding a file that no branch or tag tip
    of the shared repository (`heads`) holds: those are kept, the rest are not work."""
    kept, wanted = [], {}
    for name, sha in snapshots:
        code, kind, _ = git(["-C", w["path"], "cat-file", "-t", sha], w["path"], environ, check=False)
        blobs = _blobs(w["path"], environ, ["-C", w["path"], sha]) if code == 0 and kind.strip() == "tree" else None
        if blobs is None:
            kept.append(name)
        else:
            wanted[name] = blobs
    missing = set().union(*wanted.values()) if wanted else set()
    gargs = git_dir_args(w["source"])
    for head in heads:
        if not missing:
            break
        found = _blobs(w["source"], environ, gargs + [head])
        missing -= found or set()
    return kept + [name for name, blobs in wanted.items() if blobs & missing]


def _same_file(a, b):
    try:
        if os.path.isdir(a) or os.path.isdir(b):
            return False
        with open(a, "rb") as fa, open(b, "rb") as fb:
            return fa.read() == fb.read()
    except OSError:
        return False


def reason_json(b):
    """The JSON form of a blocker (blocker): the dict itself, copied."""
    return dict(b)


def split_discardable(blockers, discard_ignored):
    """(blockers that remain, ignored paths to discard): with discard_ignored, an `ignored`
    blocker no longer blocks, and its paths are what the removal will discard."""
    if not discard_ignored:
        return blockers, []
    rest = [b for b in blockers if b["code"] != "ignored"]
    paths = [p for b in blockers if b["code"] == "ignored" for p in b["paths"]]
    return rest, paths


# The rules, in the order their blockers are listed. Each is rule(look) -> [blocker] and only
# reads: `look` holds the Store, the record, the caller and what was gathered for it (see
# cleanup_check). Three groups, because later ones need what earlier ones allow:
# - RECORD_RULES read the record alone; then the directory must be provably the work's
#   (workspace.directory_problems), or nothing else is looked at;
# - PRESENCE_RULES read who and what is live in or around the clone; anything live inside
#   (tmux-open, runtime-inside, process-inside) stops here: a snapshot would race it;
# - CONTENT_RULES read the clone after one fresh snapshot; a jj or git failure stops with
#   `jj-failed`.

def _rule_creating(look):
    w = look["w"]
    if w["state"] == "creating" and workspace.owner_of(look["st"], w) is not None:
        return [blocker("creating", "its creation may still be running",
                                  "wait, then coord work inspect %s" % w["handle"])]
    return []


def _rule_owner_alive(look):
    st, w, caller = look["st"], look["w"], look["caller"]
    owner = workspace.owner_of(st, w)
    if owner is not None and (caller is None or owner["id"] != caller["id"]) and \
            workspace.authority(st, w, caller) not in ("successor", "person"):
        return [blocker("owner-alive", "owned by live runtime %s" % owner["handle"],
                                  "ask it: coord send \"done with %s?\" --to %s ; or wait until it ends"
                                  % (w["handle"], owner["handle"]))]
    return []


def _rule_tmux_open(look):
    problem = _tmux_alive(look["w"])
    return [blocker("tmux-open", problem, "coord work close %s" % look["w"]["handle"])] if problem else []


def _rule_cwd_inside(look):
    path = look["w"]["path"]
    cwd = os.path.realpath(os.getcwd())
    if cwd == path or workspace.below(cwd, path):
        return [blocker("cwd-inside", "this command runs inside %s" % path, "cd out of the clone, then retry")]
    return []


def _rule_nothing_live_inside(look):
    if look["procs"] is False:
        _wait_for_closed_window(look["st"], look["w"])
    procs = workspace.process_cwds() if look["procs"] is False else look["procs"]
    return workspace.live_inside(look["st"], look["w"], procs)


def _wait_for_closed_window(st, w):
    """`work close W && work remove W`: tmux hangs the closed window's harness up, but it exits in
    its own time (a real CLI takes a moment; a stand-in under load was seen to), so give its pane
    process and the runtime it registered up to launch.CLOSED_EXIT_WAIT seconds to go before
    they are counted as live inside the clone. Nothing to wait for while the window still runs
    (the tmux-open rule speaks then) or when no window was recorded."""
    rec = w["data"].get("tmux") or {}
    if not rec.get("pane_pid") or _tmux_alive(w):
        return
    rt = st.runtime(rec["runtime_id"]) if rec.get("runtime_id") else None
    deadline = time.monotonic() + launch.CLOSED_EXIT_WAIT
    while time.monotonic() < deadline:
        pane_gone = not store.process_alive(rec["pane_pid"])
        rt_gone = rt is None or not rt.get("pid") or not st.pid_judged_here(rt) \
            or not store.process_alive(rt["pid"], rt.get("pid_start"))  # hosts: another host's pid is not ours
        if pane_gone and rt_gone:
            return
        time.sleep(0.05)


def _rule_gated(look):
    if gate_of(look["w"])["state"] not in workspace.GATE_DONE:
        return [blocker("ungated", "its gate has not passed and was not waived",
                                  "coord work gate %s --pass (or --waive --reason \"why\")" % look["w"]["handle"])]
    return []


def _rule_on_disk_in_commit(look):
    return uncaptured(look["w"], look["environ"])


def _rule_nothing_only_in_git(look):
    return git_only(look["w"], look["environ"])


def _rule_local_changes_landed(look):
    """The clone holds no non-empty change the canonical bookmarks lack (@ included), unless
    those changes are all within the frozen candidate and that candidate was proven integrated,
    or released with a waived gate."""
    w, environ = look["w"], look["environ"]
    local = workspace.local_revset(w, environ)
    rows = workspace.local_changes(w["path"], local, environ)
    if not rows:
        return []
    integ = integration_of(w)
    cand = integ.get("candidate")
    proven = bool(integ.get("proof")) and cand and integ["proof"].get("candidate") == cand["commit"]
    released = bool(integ.get("released"))
    if proven or (released and cand):
        return _beyond_candidate(w, integ, cand, proven, rows, local, environ)
    return _uncommitted_or_unintegrated(w, rows)


def _beyond_candidate(w, integ, cand, proven, rows, local, environ):
    h = w["handle"]
    try:
        extra = workspace.local_changes(w["path"], "(%s) ~ ::%s" % (local, cand["commit"]), environ)
    except store.CoordError:
        extra = rows
    if proven and cand.get("rebased_from"):
        # Landed in rebased form (the clone was in use): the exact commit that was rebased,
        # without conflict, into the proven candidate is captured by it; anything the clone
        # changed since (an amended commit has another ID) still counts.
        extra = [r for r in extra if r["commit"] != cand["rebased_from"]]
    if extra:
        if proven:
            return [blocker(
                "changed-after-integration", "%d change(s) beyond the integrated candidate %s (first %s)" % (
                    len(extra), cand["commit"][:12], extra[0]["commit"]),
                "integrate them again (%s) or keep the clone" % land.acquire_command(h, integ.get("into")))]
        # a landing that stopped on a conflict in the clone left the rebased changes here
        return [_stopped_landing_rule(w, h) or blocker(
            "changed-after-freeze", "%d change(s) beyond the candidate frozen before the release" % len(extra),
            land.acquire_command(h, integ.get("into")))]
    if not proven and gate_of(w)["state"] != "waived":
        return [_stopped_landing_rule(w, h) or blocker(
            "unintegrated", "its candidate %s was released without proof of integration" % cand["commit"][:12],
            workspace.SQUASH_NOTE % (h, h))]
    return []


def _uncommitted_or_unintegrated(w, rows):
    h = w["handle"]
    out = []
    wc = [r for r in rows if r["wc"]]
    committed = [r for r in rows if not r["wc"]]
    if wc:
        out.append(blocker(
            "dirty", "its working copy @ has changes (%s)" % wc[0]["commit"][:12],
            "describe them (jj describe -m MESSAGE, in %s) and land them: %s; or keep the clone"
            % (shlex.quote(w["path"]), land.land_command(h, "BOOKMARK"))))
    if committed:
        out.append(blocker(
            "unintegrated", "%d committed change(s) are in no canonical bookmark and were not proven "
            "integrated" % len(committed),
            "land them: %s; if a squash or rebase merge already "
            "put them there (a new commit: never provable), discard them with %s, "
            "coord work gate %s --waive --reason R, coord work integrate release %s"
            % (land.land_command(h, "BOOKMARK"), land.acquire_command(h), h, h)))
    return out


RECORD_RULES = (_rule_creating,)
PRESENCE_RULES = (_rule_owner_alive, _rule_tmux_open, _rule_cwd_inside, _rule_nothing_live_inside, _rule_gated)
LIVE_CODES = frozenset(("tmux-open", "runtime-inside", "process-inside"))  # these stop before the snapshot
CONTENT_RULES = (_rule_on_disk_in_commit, _rule_nothing_only_in_git, _rule_local_changes_landed)


def cleanup_check(st, w, caller, environ=None, procs=False):
    """Every reason the work's directory may not be deleted now, and the evidence the rules
    read: {"blockers": [blocker], "evidence_at": when the snapshot was taken (anything changed
    after it is not covered), "current": the clone's @ at that snapshot}. The rules are
    RECORD_RULES, PRESENCE_RULES and CONTENT_RULES (see above); `w` is not changed. procs:
    process_cwds(), read once by a caller that checks many records."""
    h = w["handle"]
    out = {"blockers": [], "evidence_at": None, "current": None}
    if w["state"] == "removed":
        out["blockers"] = [blocker("removed", "already removed", "coord work list")]
        return out
    look = {"st": st, "w": w, "caller": caller, "environ": environ, "procs": procs}
    blockers = out["blockers"]
    for rule in RECORD_RULES:
        blockers += rule(look)
    problems = workspace.directory_problems(w)
    if problems:
        blockers += problems
        return out
    for rule in PRESENCE_RULES:
        blockers += rule(look)
    if any(b["code"] in LIVE_CODES for b in blockers):
        # A snapshot would race whatever runs inside (and sweep its half-written files into @).
        blockers.append(blocker("unexamined", "its contents were not examined because it is in use",
                                          "retry when nothing runs inside it"))
        return out
    try:
        out["evidence_at"] = time.time()
        ids = workspace.head_ids(w["path"], environ=environ)  # the snapshot: edits on disk become visible
        for rule in CONTENT_RULES:
            blockers += rule(look)
    except store.CoordError as exc:
        blockers.append(blocker("jj-failed", "cannot read the clone: %s" % exc.message,
                                          "coord work inspect %s --verbose" % h))
        return out
    out["current"] = {"change": ids["change"], "commit": ids["commit"], "empty": ids["empty"],
                      "at": now_time()}
    return out


def cleanup_blockers(st, w, caller, environ=None, procs=False):
    """The blockers of cleanup_check: [] when the clone may be deleted now."""
    return cleanup_check(st, w, caller, environ, procs)["blockers"]


LAND_STOPPED = frozenset(("conflict", "refused", "failed"))


def _stopped_landing_rule(w, h):
    """The cleanup rule for a candidate released because its landing stopped before the target
    moved (a conflict, a failed check, a refusal): it never landed, and the next step is the
    landing again, not the squash-merge discard. None when no stopped landing is recorded."""
    landing = landing_of(w)
    if landing.get("state") not in LAND_STOPPED or not landing.get("into"):
        return None
    into = landing["into"]
    if landing.get("state") == "conflict":
        why = "rebasing onto %s conflicts in %s" % (into, named_paths(landing.get("paths") or ["(unknown)"]))
        if landing.get("scratch"):  # tried in a scratch copy: the clone holds no conflict until rebased
            first = "in %s: %s, then " % (w["path"], land.conflict_steps(into, True))
        else:
            first = "resolve it in %s (jj resolve --list), then " % w["path"]
    else:
        why = store.clean_text(landing.get("reason") or landing["state"], 200)
        first = ""
    return blocker("unintegrated", "its landing into %s stopped before anything moved (%s): none of it landed" % (into, why),
            "%sre-run: %s; or keep the clone" % (first, land.rerun_command(w, into)))


def _tmux_alive(w):
    live, _ = session.live_window(w["data"].get("tmux"), True, w["handle"])
    return "its tmux window %s still runs" % live["window_id"] if live else None


def _late_changes(path, since):
    """What happened inside `path` after the evidence was taken: processes that work in it,
    and files (regular or symlink) whose data or inode changed at or after `since`."""
    late = ["process %d" % pid for pid, cwd in sorted((workspace.process_cwds() or {}).items()) if workspace.is_inside(cwd, path)]
    if since is None:
        return late
    files, unreadable = workspace.disk_entries(path)
    late += ["unreadable %s" % u for u in unreadable]
    for rel in files:
        try:
            st = os.lstat(os.path.join(path, rel))
        except OSError:
            late.append(rel)
            continue
        # File times come from the kernel's coarse clock, up to a tick behind time.time().
        if max(st.st_mtime, st.st_ctime) >= since - workspace.FS_CLOCK_SLACK:
            late.append(rel)
    return late


def _delete_checkout(environ, w):
    """Delete a verified checkout: forget a native workspace, move it aside atomically, check
    that nothing moved in or changed since the evidence was taken (else move it back and
    refuse), then rmtree. The rename means no new process can enter it by its old path."""
    path = w["path"]
    if w["data"].get("kind") == "native":
        jj(["workspace", "forget", workspace.workspace_name(w["id"])], path, environ=environ)
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
                      % (w["handle"], named_paths(late), where),
                      "coord work remove %s --confirm %s (after whatever works in it has finished)"
                      % (w["handle"], w["handle"]))
    workspace.rmtree(aside)


def _mark_removed(st, w, caller, how, discarded=None, current=None):
    """Record the removal; `discarded` lists the ignored files deleted with the clone (all of
    them in the audit row, the first KEPT_PATHS and their count in the record); `current`: the
    clone's @ at the evidence's snapshot (else the record's)."""
    removed = {"at": now_time(), "by": who_id(caller), "how": how}
    extra = {}
    if discarded:
        removed.update({"discarded_ignored": discarded[:workspace.KEPT_PATHS], "discarded_ignored_count": len(discarded)})
        extra = {"discarded_ignored": discarded}
    # Its private candidate ref goes with it; a forgotten clone's unlanded candidate keeps it.
    ref = land.drop_candidate_ref(w, keep_unlanded=how.startswith("forgotten"))
    if ref:
        removed["candidate_ref"] = extra["candidate_ref"] = "%s %s" % (ref, land.candidate_ref(w["id"]))
    with st.transaction():
        cur = st.work(w["id"])
        st.update_work(w["id"], state="removed", data={
            "removed": removed,
            "current": current or w["data"].get("current"),
            "history": workspace.with_history(cur, "removed", caller, how=how)})
        st.audit("work.removed", who_id(caller), w["id"], how=how, path=w["path"], **extra)



def remove_work(st, *, caller, handle, confirm, environ=None, forget=False, discard_ignored=False, override=False):
    """Delete the work's clone when every cleanup rule holds (else Refused with every reason)
    and record it removed; -> {work, removed, ...}. Only who may (authorize) removes."""
    w = st.resolve_work(handle)
    if confirm not in (w["handle"], w["id"]):
        raise UsageError("removal needs the exact work handle repeated: --confirm %s" % w["handle"],
                         "coord work remove %s --confirm %s" % (w["handle"], w["handle"]))
    if w["state"] == "removed":
        return {"work": w["handle"], "removed": False, "already": True}
    workspace.refuse_other_host(st, w, "coord work remove %s --confirm %s" % (w["handle"], w["handle"]))
    workspace.authorize(st, w, caller, "remove", override)
    if forget:
        # --forget drops the record and never touches the disk: allowed when the directory is
        # gone, or when its marker no longer carries this record's token (another database
        # adopted the clone; that one now holds it and its proofs). Either way nothing is lost.
        problems = [p["code"] for p in workspace.directory_problems(w)] if os.path.lexists(w["path"] or "") else ["missing"]
        if "missing" in problems:
            _mark_removed(st, w, caller, "forgotten (directory was already gone)")
            trust.drop_trust(st, w, caller, environ)
            return {"work": w["handle"], "removed": True, "forgotten": True}
        if "token-mismatch" in problems:
            marker = workspace.read_marker(w["path"]) or {}
            _mark_removed(st, w, caller, "forgotten (the clone's marker names another registration; nothing deleted)")
            return {"work": w["handle"], "removed": True, "forgotten": True, "kept_directory": w["path"],
                    "marker_work": marker.get("work")}
        raise Refused("--forget only drops a record whose directory is gone or held by another registration; %s"
                      " exists and carries this record's marker" % w["path"],
                      "coord work remove %s --confirm %s" % (w["handle"], w["handle"]))
    if w["state"] == "failed" and not os.path.lexists(w["path"] or ""):
        _mark_removed(st, w, caller, "failed create, nothing on disk")
        return {"work": w["handle"], "removed": True}
    evidence = cleanup_check(st, w, caller, environ)
    blockers, discard = split_discardable(evidence["blockers"], discard_ignored)
    if blockers:
        raise Refused("will not remove %s: %s" % (w["handle"], "; ".join(b["message"] for b in blockers)),
                      " ; ".join(store.unique(b["next"] for b in blockers)),
                      reasons=[reason_json(b) for b in blockers])
    _delete_checkout(environ, dict(w, evidence_at=evidence["evidence_at"]))
    _mark_removed(st, w, caller, "remove", discard, evidence["current"])
    launch.end_parked(st, w, "work removed")
    out = {"work": w["handle"], "removed": True}
    if discard:
        out["discarded_ignored"] = discard
    left = trust.drop_trust(st, w, caller, environ)
    if left:
        out["trust_left"] = left
    return out


def gc_works(st, *, caller, environ=None, dry_run=False, discard_ignored=False):
    """Remove every work that passes every cleanup rule (none with dry_run); -> {removed: [{handle,
    task, ...}], kept: [{handle, task, path, reasons}], dry_run}."""
    removed, kept = [], []
    procs = False  # read /proc once, when the first record needs it
    for w in st.works():
        elsewhere = workspace.other_host(st, w)
        if elsewhere:  # its clone is on that host: gc there judges it
            kept.append({"handle": w["handle"], "task": w["task"], "path": w["path"], "reasons": [
                {"code": "other-host", "message": "lives on host %s" % elsewhere["name"],
                 "next": "on host %s run: coord work gc" % elsewhere["name"]}]})
            continue
        if w["state"] == "failed" and not os.path.lexists(w["path"] or ""):
            if not dry_run:
                _mark_removed(st, w, caller, "gc: failed create, nothing on disk")
            removed.append({"handle": w["handle"], "task": w["task"], "record_only": True})
            continue
        if procs is False:
            procs = workspace.process_cwds()
        evidence = cleanup_check(st, w, caller, environ, procs)
        blockers, discard = split_discardable(evidence["blockers"], discard_ignored)
        if blockers:
            kept.append({"handle": w["handle"], "task": w["task"], "path": w["path"],
                         "reasons": [reason_json(b) for b in blockers]})
            continue
        if not dry_run:
            try:
                _delete_checkout(environ, dict(w, evidence_at=evidence["evidence_at"]))
            except (OSError, store.CoordError) as exc:
                kept.append({"handle": w["handle"], "task": w["task"], "path": w["path"], "reasons": [
                    {"code": "delete-failed", "message": str(getattr(exc, "message", exc)),
                     "next": "coord work inspect %s" % w["handle"]}]})
                continue
            _mark_removed(st, w, caller, "gc", discard, evidence["current"])
            trust.drop_trust(st, w, caller, environ)
        r = {"handle": w["handle"], "task": w["task"]}
        if discard:
            r["discarded_ignored"] = discard
        removed.append(r)
    return {"removed": removed, "kept": kept, "dry_run": bool(dry_run)}


def cmd_remove(ctx, args):
    r = remove_work(ctx.db, caller=ctx.caller(), handle=args.handle, confirm=args.confirm,
                    environ=ctx.environ, forget=args.forget, discard_ignored=args.discard_ignored,
                    override=args.override)
    text = "%s %s" % (r["work"], "was already removed" if r.get("already") else "forgotten" if r.get("forgotten")
                      else "removed")
    if r.get("kept_directory"):
        text = "forgot %s; its clone stays at %s (its marker names another registration)" % (r["work"],
                                                                                          r["kept_directory"])
    if r.get("discarded_ignored"):
        text = "discarded %d ignored file(s): %s" % (len(r["discarded_ignored"]), named_paths(r["discarded_ignored"]))
    return 0, workspace.ok_data(r), text


def cmd_gc(ctx, args):
    r = gc_works(ctx.db, caller=workspace.optional_caller(ctx), environ=ctx.environ, dry_run=args.dry_run,
                 discard_ignored=args.discard_ignored)
    if not args.dry_run:  # the last events of conversations that ended here (the live view's files)
        r["activity_pruned"] = store.prune_activity(ctx.db, ctx.environ)
    lines = []
    verb = "would remove" if args.dry_run else "removed"
    for w in r["removed"]:
        lines.append("%s %s  %s" % (verb, w["handle"], store.clean_text(w["task"], 48)))
        if w.get("discarded_ignored"):
            lines[-1] += "  (%s %d ignored file(s): %s)" % ("discarding" if args.dry_run else "discarded",
                                                           len(w["discarded_ignored"]),
                                                           named_paths(w["discarded_ignored"]))
    if r["kept"]:
        lines.append("recovery candidates:")
    for k in r["kept"]:
        lines.append("  %s  %s: %s" % (k["handle"], store.clean_text(k["task"], 48),
                                       "; ".join("%s (next: %s)" % (x["message"], store.hint(x["next"]))
                                                 for x in k["reasons"])))
    return 0, workspace.ok_data(r), "\n".join(lines)


# =========================================================================== parser registration

def _parse_remove(ws, both):
    p = ws.add_parser("remove", parents=both, help="delete a clone, only when every cleanup rule holds")
    p.add_argument("handle", metavar="HANDLE")
    p.add_argument("--confirm", required=True, metavar="HANDLE", help="the same handle again")
    p.add_argument("--forget", action="store_true", help="drop the record only, deleting nothing: when its directory "
                   "is gone, or its clone's marker names another registration (adopted elsewhere)")
    p.add_argument("--discard-ignored", action="store_true",
                   help="delete ignored files with the clone (the refusal lists them; the audit records them)")
    workspace.override_argument(p)
    p.set_defaults(func=cmd_remove)


def _parse_gc(ws, both):
    p = ws.add_parser("gc", parents=both, help="remove what passes every rule; list the rest with reasons")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--discard-ignored", action="store_true",
                   help="delete ignored files with the clones removed (recorded in the audit)")
    p.set_defaults(func=cmd_gc)


# The `work` subcommands this module builds and handles (coord chooses the module; see workspace.register).
PARSERS = {"remove": _parse_remove, "gc": _parse_gc}
