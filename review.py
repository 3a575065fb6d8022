"""What a landing would do, read before it happens and without changing anything.

The preview `work inspect` and `integrate acquire` show, `work conflicts` and `work review` all
read through one throwaway bare repository (Overlay) whose object store reaches the canonical
repository's and the clones' through git alternates: `git merge-tree --write-tree` merges there
and every object git writes stays there, deleted on exit. Nothing here moves a ref, writes a
checkout or takes a lease; land.py, which does, imports this module (for the overlay, the
preview and the queue's order), never the other way round.

Layout: the queue's order, the overlay, the preview, `work conflicts`, `work review`, their
handlers and parsers.
"""

import os
import re

import store
import workspace
from workspace import git, git_dir_args, named_paths, integration_of, gate_of, landing_of
from store import EnvError, Refused, UsageError

MERGE_TREE_GIT = (2, 38)   # `git merge-tree --write-tree`


# --------------------------------------------------------------------------- the queue's order

def queue_order(st, into):
    """The works queued (or under way) for bookmark `into`, in landing order: queue order, each
    after the queued works it depends on."""
    rows = []
    for w in st.works():
        integ = integration_of(w)
        if integ["state"] in workspace.QUEUED and integ.get("into") == into:
            rows.append(((integ.get("queued_at") or (integ.get("candidate") or {}).get("at") or 0, w["handle"]), w))
    rows.sort(key=lambda r: r[0])
    by_id = {w["id"]: w for _, w in rows}
    out, placed = [], set()

    def place(w, seen):
        if w["id"] in placed or w["id"] in seen:
            return
        seen.add(w["id"])
        for dep in w["data"].get("depends", []):
            if dep in by_id:
                place(by_id[dep], seen)
        placed.add(w["id"])
        out.append(w)

    for _, w in rows:
        place(w, set())
    return out


# --------------------------------------------------------------------------- the overlay and the preview
# What a landing would do, seen before it happens: commits ahead of the target, how far the
# base is behind it, and the paths `git merge-tree --write-tree` says would conflict, computed
# in the overlay (DESIGN.md, "Landing preview").

def own_objects(repo):
    """The object directory a checkout keeps itself (its .git, or jj's own git store), or None."""
    for d in (os.path.join(repo, ".git", "objects"), os.path.join(repo, ".jj", "repo", "store", "git", "objects")):
        if os.path.isdir(d):
            return d
    return None


def objects_dir(repo, environ=None):
    """The absolute object directory of a checkout (its .git, jj's own git store, or what git says)."""
    if own_objects(repo):
        return own_objects(repo)
    _, out, _ = git(git_dir_args(repo) + ["rev-parse", "--git-path", "objects"], repo, environ)
    path = out.strip()
    return path if os.path.isabs(path) else os.path.join(repo, path)


def _alternate_line(path):
    if any(c in path for c in '"\\\n') or path != path.strip():
        return '"%s"' % path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return path


class Overlay:
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
            workspace.rmtree(self.dir, ignore_errors=True)
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
        if name.startswith("refs/heads/") and workspace.FULL_COMMIT_RE.match(oid):
            heads[name[len("refs/heads/"):]] = oid
    return heads


def work_tip(w, environ=None):
    """The commit the work would land now, read from its clone's last snapshot (never taking
    one): @ when it has changes, else its single parent; None when neither is a single commit."""
    ids = workspace.head_ids(workspace.verified_path(w), snapshot=False, environ=environ)
    if not ids["empty"]:
        return ids["commit"]
    return ids["parents"][0] if len(ids["parents"]) == 1 else None


def _store_dirs(w, environ=None):
    """Object directories a preview of w reads: the canonical repository's, then the clone's."""
    dirs = [objects_dir(w["source"], environ)]
    if w["data"].get("kind") != "native" and w["path"] and not workspace.directory_problems(w):
        dirs.append(objects_dir(w["path"], environ))
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
        with Overlay(_store_dirs(w, environ), environ, sha256=len(target) == 64) as ov:
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
        text += ": would conflict in %s" % named_paths(p["conflicts"])
    elif p["conflicts"] == [] and p["ahead"]:
        text += ", no conflicts"
    if p.get("error"):
        text += "; %s" % store.clean_text(p["error"], 300)
    return text


def inspect_preview(w, environ=None):
    """The preview `work inspect` shows: the frozen candidate while integrating, else the
    clone's tip at its last snapshot, against the bookmark it integrates into (else the
    repository's main bookmark); None when there is nothing to preview."""
    integ = integration_of(w)
    if w["state"] in workspace.UNUSABLE or integ["state"] == "integrated":
        return None
    cand = integ.get("candidate") if integ["state"] == "integrating" else None
    try:
        if workspace.directory_problems(w) and not cand:
            return None
        commit = cand["commit"] if cand else work_tip(w, environ)
        into = workspace.target_bookmark(w, environ)
    except store.CoordError as exc:
        return {"into": None, "target": None, "candidate": None, "ahead": None, "behind": None,
                "conflicts": None, "error": exc.message}
    if not commit:
        return None
    return preview(w, commit, into, environ)


# --------------------------------------------------------------------------- work conflicts

def conflict_report(st, *, into=None, environ=None):
    """For every live managed work with changes: ahead/behind its target and the paths it and
    the target both changed and would conflict on; for every pair of them, the paths both
    changed and the paths merging the two would conflict on. Read-only: the clones' last
    snapshots, the canonical refs, one overlay per canonical repository.
    -> {works: [...], pairs: [{a, b, overlap, conflicts}] (pairs with either only),
    pairs_checked, skipped: [{handle, reason}], error}."""
    into = workspace.check_bookmark(into) if into else None
    works, skipped, groups = [], [], {}
    for w in st.works():
        if w["state"] in workspace.UNUSABLE or integration_of(w)["state"] == "integrated":
            continue
        problems = workspace.directory_problems(w)
        if problems:
            skipped.append({"handle": w["handle"], "reason": problems[0]["message"]})
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
            default = into or workspace.target_bookmark({"data": {}, "source": source}, environ)
            dirs = [objects_dir(source, environ)] + [objects_dir(w["path"], environ) for w, _ in members
                                                      if w["data"].get("kind") != "native"]
        except store.CoordError as exc:
            skipped += [{"handle": w["handle"], "reason": exc.message} for w, _ in members]
            continue
        with Overlay(dirs, environ, sha256=len(members[0][1]) == 64) as ov:
            _report_group(ov, members, heads, into, default, report)
    return report


def _report_group(ov, members, heads, into, default, report):
    """conflict_report for the works of one canonical repository, in its overlay."""
    rows, merges = [], []
    for w, tip in members:
        bookmark = into or integration_of(w).get("into") or default
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


# --------------------------------------------------------------------------- review
# `work review WORK`: one screen of what the person decides a landing on, read without changing
# anything (the candidate's objects through the preview's overlay): the change against its
# target (stat and a bounded diff), its description, the files it touched and who held leases on
# them, the conflict forecast of `work conflicts`, the last check. `--queued` does it for the
# queue in order, and the queue's combined diff: each work merged in turn onto the target in the
# overlay (merge-tree, commit-tree: nothing outside it), those that would conflict left out.

REVIEW_DIFF_LINES = 40      # diff lines shown by default
REVIEW_DIFF_VERBOSE = 400   # with --verbose


def _bounded_diff(ov, old, new, limit):
    """(stat text, the first `limit` diff lines, how many lines the whole diff has)."""
    _, stat, _ = ov.git(["diff", "--no-color", "--stat=100", "--no-renames", old, new])
    _, diff, _ = ov.git(["diff", "--no-color", "--no-renames", old, new])
    lines = diff.splitlines()
    return stat.rstrip("\n"), lines[:limit], len(lines)


def _review_leases(st, w, files):
    """[{path, holder, now}]: who holds a lease overlapping a touched file now, and who claimed
    one exclusively since the work was created (the lease audit)."""
    out, seen = [], set()
    for lease in st.all_leases():
        for p in files:
            if store.overlaps(lease["resource"], p) and (p, lease["handle"]) not in seen:
                seen.add((p, lease["handle"]))
                out.append({"path": p, "holder": lease["handle"], "mode": lease["mode"], "now": True})
    names = {}
    for c in st.exclusive_claims_since(w["created_at"], files) if files else []:
        if c["runtime"] not in names:
            rt = st.runtime(c["runtime"]) if c["runtime"] else None
            names[c["runtime"]] = rt["handle"] if rt else None
        for p in files:
            if names[c["runtime"]] and store.overlaps(c["resource"], p) and (p, names[c["runtime"]]) not in seen:
                seen.add((p, names[c["runtime"]]))
                out.append({"path": p, "holder": names[c["runtime"]], "mode": "exclusive", "now": False})
    return out


def review_work(st, w, *, into=None, environ=None, limit=REVIEW_DIFF_LINES, report=None):
    """-> {work, task, into, target, candidate, frozen, ahead, behind, description, commits, stat,
    diff, diff_lines, files, leases, forecast: {target, pairs}, check, landing}. `report`: a
    conflict_report already computed (the queue's review computes it once)."""
    integ = integration_of(w)
    into = workspace.check_bookmark(into) if into else workspace.target_bookmark(w, environ)
    frozen = integ.get("candidate") if integ["state"] == "integrating" else None
    commit = frozen["commit"] if frozen else work_tip(w, environ)
    target = branch_commits(w["source"], environ).get(into)
    if not commit or not target:
        raise Refused("work %s has nothing to review against %s: %s" % (
            w["handle"], into, "no bookmark %s" % into if commit else "no change"), "coord work inspect %s"
            % w["handle"])
    out = {"work": w["handle"], "task": w["task"], "into": into, "target": target, "candidate": commit,
           "frozen": bool(frozen)}
    with Overlay(_store_dirs(w, environ), environ, sha256=len(target) == 64) as ov:
        out["ahead"], out["behind"] = _ahead_behind(ov, target, commit)
        base = ov.git(["merge-base", target, commit])[1].strip()
        out["stat"], out["diff"], out["diff_lines"] = _bounded_diff(ov, base, commit, limit)
        out["files"] = sorted(_changed_paths(ov, target, commit))
        _, log, _ = ov.git(["log", "--format=%h %s", "%s..%s" % (target, commit)])
        out["commits"] = log.splitlines()
        out["description"] = ov.git(["log", "-1", "--format=%B", commit])[1].strip()
    out["leases"] = _review_leases(st, w, out["files"])
    report = report if report is not None else conflict_report(st, into=into, environ=environ)
    row = next((r for r in report["works"] if r["handle"] == w["handle"]), {})
    out["forecast"] = {"target": row.get("target_conflicts"), "error": report["error"],
                       "pairs": [p for p in report["pairs"] if w["handle"] in (p["a"], p["b"])]}
    gate = gate_of(w)
    out["check"] = dict(gate.get("check") or {}, state=gate["state"])
    landing = landing_of(w)
    out["landing"] = {k: landing.get(k) for k in ("state", "step", "reason") if landing.get(k)} or None
    return out


def review_queue(st, *, into, environ=None, limit=REVIEW_DIFF_LINES):
    """`work review --queued`: review_work for each queued work in queue_order and the combined
    diff of the queue. -> {into, works, combined: {stat, diff, diff_lines, left_out, error}}."""
    into = workspace.check_bookmark(into)
    order = queue_order(st, into)
    report = conflict_report(st, into=into, environ=environ)
    works = [review_work(st, w, into=into, environ=environ, limit=limit, report=report) for w in order]
    combined = {"stat": "", "diff": [], "diff_lines": 0, "left_out": [], "error": None}
    if works:
        dirs = []
        for w in order:
            dirs += _store_dirs(w, environ)
        target = works[0]["target"]
        try:
            with Overlay(dirs, environ, sha256=len(target) == 64) as ov:
                cur = target
                for r in works:
                    code, out, _ = ov.git(["merge-tree", "--write-tree", "--no-messages", cur, r["candidate"]],
                                          check=False)
                    if code != 0:
                        combined["left_out"].append(r["work"])
                        continue
                    tree = out.split()[0]
                    cur = ov.git(["commit-tree", tree, "-p", cur, "-p", r["candidate"], "-m", "queue"])[1].strip()
                combined["stat"], combined["diff"], combined["diff_lines"] = _bounded_diff(ov, target, cur, limit)
        except store.CoordError as exc:
            combined["error"] = exc.message
    return {"into": into, "works": works, "combined": combined}


def review_lines(r, verbose=False):
    """One screen for one work's review."""
    where = "frozen candidate" if r["frozen"] else "tip"
    lines = ["%s  %s  -> %s: %s %s, %d ahead, base %s" % (
        r["work"], store.clean_text(r["task"], 60), r["into"], where, r["candidate"][:12], r["ahead"],
        "current" if not r["behind"] else "%d behind" % r["behind"])]
    desc = store.clean_text(r["description"], 4000).splitlines() or ["(no description)"]
    lines.append("description: %s" % desc[0])
    lines += ["  " + l for l in desc[1:]] if verbose else []
    if len(r["commits"]) > 1:
        lines.append("commits: %d (%s)" % (len(r["commits"]), "; ".join(store.clean_text(c, 80) for c in
                                                                           r["commits"][:5 if not verbose else 50])))
    lines.append("files: %s" % (named_paths(r["files"]) if r["files"] else "none"))
    if r["leases"]:
        lines.append("leases: %s" % "; ".join("%s %s by %s" % (l["path"], "held" if l["now"] else "was held",
                                                               l["holder"]) for l in r["leases"][:10]))
    f = r["forecast"]
    bits = ["with %s in %s" % (r["into"], named_paths(f["target"]))] if f["target"] else []
    bits += ["with %s in %s" % (p["b"] if p["a"] == r["work"] else p["a"], named_paths(p["conflicts"]))
             for p in f["pairs"] if p["conflicts"]]
    lines.append("forecast: %s" % ("would conflict " + "; ".join(bits) if bits else
                                   "unknown (%s)" % store.clean_text(f["error"], 200) if f["error"] else
                                   "no conflicts"))
    c = r["check"]
    if c.get("command"):
        lines.append("last check: %s %s on %s%s" % (c["state"], store.clean_text(c["command"], 200),
                                                    (c.get("candidate") or "?")[:12],
                                                    " (exit %s)" % c.get("exit") if c.get("exit") else ""))
    else:
        lines.append("last check: none (gate %s)" % c["state"])
    if r["landing"] and r["landing"].get("state") != "landed":
        lines.append("last landing: %s after %s" % (r["landing"].get("state"), r["landing"].get("step")))
    return lines + _diff_lines(r)


def _diff_lines(r):
    lines = [l for l in r["stat"].splitlines()]
    lines += [store.clean_text(l, 300) for l in r["diff"]]
    if r["diff_lines"] > len(r["diff"]):
        lines.append("... %d more diff lines (--verbose shows up to %d)" % (r["diff_lines"] - len(r["diff"]),
                                                                          REVIEW_DIFF_VERBOSE))
    return lines


def queue_review_lines(r, verbose=False):
    """The text of `work review --queued`: each work's review (its diff only with --verbose), then
    the combined diff of those that merge."""
    lines = []
    for i, x in enumerate(r["works"], 1):
        one = review_lines(dict(x, stat="", diff=[], diff_lines=0) if not verbose else x, verbose)
        lines += ["%d. %s" % (i, one[0])] + ["   " + l for l in one[1:]]
    c = r["combined"]
    if not r["works"]:
        lines.append("nothing queued for %s" % r["into"])
    elif c["error"]:
        lines.append("combined: not computed: %s" % store.clean_text(c["error"], 300))
    else:
        merged = len(r["works"]) - len(c["left_out"])
        lines.append("combined (%d work%s onto %s%s):" % (
            merged, "" if merged == 1 else "s", r["into"],
            "; would conflict, left out: %s" % ", ".join(c["left_out"]) if c["left_out"] else ""))
        lines += _diff_lines(c)
    return lines


def cmd_review(ctx, args):
    limit = REVIEW_DIFF_VERBOSE if ctx.verbose else REVIEW_DIFF_LINES
    if args.queued:
        if args.handle or not args.into:
            raise UsageError("--queued reviews the queue of one bookmark: --into B, and no WORK",
                             "coord work review --queued --into main")
        r = review_queue(ctx.db, into=args.into, environ=ctx.environ, limit=limit)
        return 0, dict(r, ok=True), "\n".join(queue_review_lines(r, ctx.verbose))
    if not args.handle:
        raise UsageError("name the work to review, or --queued --into B", "coord work review WORK")
    w = workspace.target_work(ctx, args.handle)
    r = review_work(ctx.db, w, into=args.into, environ=ctx.environ, limit=limit)
    return 0, dict(r, ok=True), "\n".join(review_lines(r, ctx.verbose))


def _parse_review(ws, both):
    p = ws.add_parser("review", parents=both, help="what to decide a landing on: the diff against the target, "
                      "description, files and their leases, conflict forecast, last check (reads only)")
    p.add_argument("handle", nargs="?", metavar="HANDLE", help=workspace.BY_TASK_HELP)
    p.add_argument("--into", metavar="BOOKMARK", help="the target (default: the one it integrates into, else the "
                   "repository's main bookmark)")
    p.add_argument("--queued", action="store_true", help="every work queued for --into, in order, and their "
                   "combined diff")
    p.set_defaults(func=cmd_review)


# --------------------------------------------------------------------------- handlers and parsers

def cmd_conflicts(ctx, args):
    """Exit 0 when nothing would conflict (or it could not be computed: the text says why),
    store.EXIT_CONFLICTS (5) when some pair would."""
    r = conflict_report(ctx.db, into=args.into, environ=ctx.environ)
    found = any(w["target_conflicts"] for w in r["works"]) or any(p["conflicts"] for p in r["pairs"])
    return store.EXIT_CONFLICTS if found else 0, workspace.ok_data(r), "\n".join(conflict_lines(r, ctx.verbose))


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
        text = "conflict %s" % named_paths(conflicts)
        rest = [p for p in overlap if p not in conflicts]
        return text + ("; also both changed %s" % named_paths(rest) if rest else "")
    if conflicts is None:
        return "both changed %s (conflicts unknown)" % named_paths(overlap)
    return "both changed %s, merges cleanly" % named_paths(overlap)


def _parse_conflicts(ws, both):
    p = ws.add_parser("conflicts", parents=both, help="which live works (and their targets) change the same "
                      "paths, and which would conflict; reads only; exit 0 none, 5 some would conflict",
                      description="Exit status: 0 when no pair would conflict, 5 when some would (as `check` "
                      "exits 3 when blocked), 2-4 for coord's usual errors.")
    p.add_argument("--into", metavar="BOOKMARK", help="compare every work with this bookmark (default: the one "
                   "each integrates into, else the repository's main bookmark)")
    p.set_defaults(func=cmd_conflicts)


# The `work` subcommands this module builds and handles (coord chooses the module; see workspace.register).
PARSERS = {"conflicts": _parse_conflicts, "review": _parse_review}
