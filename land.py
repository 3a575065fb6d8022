"""coord's landing: everything that moves a shared ref or pushes, and what it reads first.

Invariants this module keeps:
- One integration owner per bookmark: the lease `integration/BOOKMARK` is taken before a
  candidate is frozen and released only by the runtime that froze it. Releasing it is not
  integration evidence.
- Proof means: the candidate frozen at acquisition is an ancestor of an exact full target
  commit in the canonical repository, recorded by the runtime that holds the lease that froze it.
  A squash or rebase merge makes a new commit, so its candidate is never proven.
- `land_work` records each step (LAND_STEPS) in the work record before the next begins, so a
  landing killed at any point is finished by running it again (`rerun_command`); nothing is
  moved before the check passed, the ref moves only from the commit it was read at, and a
  push that may have happened is never reported as refused.
- A frozen candidate is fetched into a private ref (`refs/coord/work/`) of the canonical
  repository; what only reads it (the preview, `work conflicts`, `work review`) is review.py's.
- Acquire, land and prove are the person's unless the repository opts in (agents_land);
  agents enqueue.

Layout, top-down: integration (enqueue, queue, acquire, prove, release), landing (one
function per step), the landing queue and its batches, the candidate refs, `remote verify`,
the `cmd_*` handlers and the parsers of `work integrate`, `work inspect` and `remote verify`.
"""

import os
import re
import shlex
import subprocess
import time

import review
import store
import workspace
from workspace import (git, jj, git_dir_args, named_paths, now_time, who_id,
                       integration_of, gate_of, landing_of)
from store import Refused, UsageError



# --------------------------------------------------------------------------- integration

def _integration_resource(bookmark):
    return store.normalize_resource("integration/" + workspace.check_bookmark(bookmark))


def enqueue(st, *, caller, handle, into, override=False):
    """Put the work in the visible integration queue for `into` (grants nothing)."""
    into = workspace.check_bookmark(into)
    w = st.resolve_work(handle)
    workspace.refuse_state(w, workspace.UNUSABLE)
    workspace.authorize(st, w, caller, "enqueue", override)
    with st.transaction():
        cur = st.resolve_work(w["id"])
        integ = integration_of(cur)
        if integ["state"] not in workspace.ENQUEUEABLE:
            raise Refused("work %s is already %s for %s" % (w["handle"], integ["state"], integ.get("into")),
                          "coord work integrate queue")
        integ.update({"state": "queued", "into": into, "queued_at": now_time(), "queued_by": caller["id"]})
        st.update_work(w["id"], data={"integration": integ})
        st.audit("work.queued", caller["id"], w["id"], into=into)
    return {"work": w["handle"], "into": into}


def integration_queue(st, *, into=None):
    """{queue: queued and integrating work in landing order (queue_order: what land --queued lands
    next first), holders: {bookmark: handle}}."""
    into = workspace.check_bookmark(into) if into else None
    intos = [into] if into else sorted({integration_of(w).get("into") or "" for w in st.works()
                                         if integration_of(w)["state"] in workspace.QUEUED})
    rows = []
    for b in intos:
        for w in review.queue_order(st, b or None):
            integ = integration_of(w)
            deps = []
            for dep in w["data"].get("depends", []):
                d = st.work(dep)
                deps.append({"handle": d["handle"] if d else dep,
                             "integration": integration_of(d)["state"] if d else "unknown"})
            rows.append({"handle": w["handle"], "task": w["task"], "state": integ["state"], "into": integ.get("into"),
                         "queued_at": integ.get("queued_at") or integ.get("candidate", {}).get("at") or 0,
                         "depends": deps})
    holders = {}
    for lease in st.all_leases():
        if lease["resource"].startswith("integration/"):
            holders[lease["resource"][len("integration/"):]] = lease["handle"]
    return {"queue": rows, "holders": holders, "into": into}


def acquire(st, *, caller, handle, into, environ=None, override=False, authorized=False):
    """Take integration/<bookmark>, snapshot the clone and freeze its exact candidate (authorized:
    land_work already authorized the caller); -> {work, resource, candidate: {change, commit}, waiting_on}."""
    into = workspace.check_bookmark(into)
    resource = _integration_resource(into)
    w = st.resolve_work(handle)
    workspace.refuse_other_host(st, w, acquire_command(w["handle"], into))
    workspace.refuse_state(w, workspace.UNUSABLE)
    if not authorized:
        workspace.authorize(st, w, caller, "acquire", override, into=into)
    path = workspace.verified_path(w)
    ids, rows = workspace.held(("snapshot", w["id"]), lambda: _snapshot(w, path, environ))
    cand_change, cand_commit = _candidate_of(w, ids, [r for r in rows if not r["empty"]])
    refuse_placeholder(w, cand_change, cand_commit, rows)
    refuse_undescribed_below(w, cand_commit, rows)
    with st.transaction():
        fence = st.claim_integration(caller["id"], resource, "integrate %s" % w["handle"])["fence"]
        cur = st.resolve_work(w["id"])
        integ = integration_of(cur)
        integ.update({"state": "integrating", "into": into,
                      "queued_at": integ.get("queued_at") or now_time(),
                      "candidate": {"change": cand_change, "commit": cand_commit, "at": now_time(),
                                    "runtime": caller["id"], "resource": resource, "fence": fence}})
        integ.pop("proof", None)
        integ.pop("released", None)
        st.update_work(w["id"], data={"integration": integ,
                                      "current": {"change": ids["change"], "commit": ids["commit"],
                                                  "empty": ids["empty"], "at": now_time()},
                                      "resources": _resources(st, cur)})
        st.audit("work.integration.acquired", caller["id"], w["id"], resource=resource,
                 candidate_change=cand_change, candidate_commit=cand_commit, fence=fence)
    waiting = []
    for dep in w["data"].get("depends", []):
        d = st.work(dep)
        if d is None or integration_of(d)["state"] != "integrated":
            waiting.append("%s (%s)" % (d["handle"] if d else dep, integration_of(d)["state"] if d else "unknown"))
    # A landing (authorized) fetches the candidate itself and shows no preview.
    return {"work": w["handle"], "resource": resource, "candidate": {"change": cand_change, "commit": cand_commit},
            "fence": fence, "waiting_on": waiting,
            "preview": None if authorized else _acquire_preview(w, cand_commit, into, environ)}


def _snapshot(w, path, environ):
    """One jj call: the snapshot (the candidate is what is on disk now), @ and the work's own
    commits, empty ones too; -> (head ids, rows) as workspace.described_changes."""
    _, with_empty = workspace.local_revsets(w, environ)  # from refs, which a snapshot does not move
    return workspace.described_changes(path, with_empty, environ, with_head=True)


def _acquire_preview(w, commit, into, environ):
    """Fetch the frozen candidate to its private ref, then preview it (never fails acquire)."""
    try:
        ref = fetch_candidate(w, commit, environ)
    except store.CoordError as exc:
        return dict(review.preview(w, commit, into, environ), ref=None, fetch_error=exc.message)
    return dict(review.preview(w, commit, into, environ), ref=ref)


def refuse_placeholder(w, change, commit, rows):
    """Refuse a candidate whose description is still the one `work create` wrote (or none):
    it would land on the target as "coord work <uuid>: <task>". rows: the work's own commits
    (workspace.described_changes), the candidate among them."""
    text = next((r["description"] for r in rows if r["commit"] == commit), "")
    subject = (text.strip().splitlines() or [""])[0].strip()
    placeholder = workspace.description(w["task"], w["id"]).splitlines()[0]
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


def refuse_undescribed_below(w, commit, rows):
    """Refuse a candidate with a commit under it, among the work's own changes (rows: every one,
    empty ones too, from workspace.described_changes), that has no description or still coord's
    placeholder: it would land on the target with that subject. The usual one is empty: a
    `jj new` run on the new @ that a landing leaves in an idle clone."""
    by_commit = {r["commit"]: r for r in rows}
    below, todo = set(), list((by_commit.get(commit) or {}).get("parents") or [])
    while todo:  # the candidate's ancestors among the work's own commits (they are connected to it)
        c = todo.pop()
        if c in by_commit and c not in below:
            below.add(c)
            todo.extend(by_commit[c]["parents"])
    placeholder = workspace.description(w["task"], w["id"]).splitlines()[0]
    bad = [r for r in rows if r["commit"] in below and r["commit"] != commit
           and r["description"].split("\n", 1)[0].strip() in ("", placeholder)]
    if not bad:
        return
    change, empty = bad[0]["change"], bad[0]["empty"]
    how = ("drop it (it changes nothing): jj -R %s abandon %s" if empty else
           "describe it: jj -R %s describe -r %s -m \"what it does\"") % (shlex.quote(w["path"]), change)
    raise Refused("the candidate of %s has %d undescribed commit(s) under it (first %s, %s); they would land "
                  "with an empty or placeholder subject" % (w["handle"], len(bad), change[:12],
                                                           "empty" if empty else "with changes"),
                  "%s, then retry" % how, reason="placeholder-description")


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


def _candidate_for(w, caller, st=None):
    """(integration, candidate) when the caller may prove or release the frozen candidate: the
    runtime that froze it, its resumed successor (which now holds its leases) or, from another
    terminal, the same person; else Refused naming it."""
    integ = integration_of(w)
    cand = integ.get("candidate")
    if not cand:
        raise Refused("work %s has no frozen candidate" % w["handle"],
                      acquire_command(w["handle"]))
    if cand["runtime"] != caller["id"] and st is not None and _freezer_holder(st, cand, caller) is not None:
        return integ, cand
    if cand["runtime"] != caller["id"]:
        raise Refused("the candidate of %s was frozen by another runtime (%s), not %s"
                      % (w["handle"], cand["runtime"], caller["handle"]),
                      "only that runtime may prove or release it; to take over: "
                      + acquire_command(w["handle"], integ.get("into"))
                      if workspace.is_person(caller) else "only that runtime may prove or release it")
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
    target = workspace.full_commit(target, "target")
    w = st.resolve_work(handle)
    workspace.refuse_agent_integration(st, w, caller, "prove", integration_of(w).get("into"), environ=environ)
    integ, cand = _candidate_for(w, caller, st)
    holder = _freezer_holder(st, cand, caller) or caller["id"]
    if integ["state"] == "lock-released":
        raise Refused("the integration lock of %s was released; a release is not evidence" % w["handle"],
                      "re-acquire: " + acquire_command(w["handle"], integ["into"]))
    held = [l["resource"] for l in st.leases_of(holder, [cand["resource"]])]
    if cand["resource"] not in held:
        raise Refused("%s does not hold %s (expired or released), so it cannot prove" % (
            caller["handle"], cand["resource"]),
            acquire_command(w["handle"], integ["into"]) + " (re-freezes the candidate)")
    confirm_fence(st, w, caller, cand, "prove", acquire_command(w["handle"], integ["into"]) + " (re-freezes the candidate)")
    _check_ancestry(w, integ["into"], cand["commit"], target, environ)
    paths = _landed_paths(w, cand["commit"], environ)
    with st.transaction():
        cur = st.resolve_work(w["id"])
        now_integ, now_cand = _candidate_for(cur, caller, st)
        if now_cand != cand:
            raise Refused("the candidate of %s changed while proving" % w["handle"], "retry")
        now_integ.update({"state": "integrated", "proof": {
            "target": target, "into": integ["into"], "candidate": cand["commit"], "at": now_time(),
            "runtime": caller["id"], "resource": cand["resource"]}})
        st.update_work(w["id"], data={"integration": now_integ,
                                      "history": workspace.with_history(cur, cur["state"], caller, event="integrated")})
        st.audit("work.integrated", caller["id"], w["id"], candidate=cand["commit"], target=target,
                 into=integ["into"], resource=cand["resource"], **workspace.provenance(st, cur, caller))
        agent, freed = _release_landed(st, cur, caller, paths)
    told, woke = _tell_landed(st, w, caller, agent, freed, integ["into"], target)
    return {"work": w["handle"], "candidate": cand["commit"], "target": target,
            "released": freed, "agent_told": told, "agent_nudged": woke}


def _landed_paths(w, commit, environ):
    """The paths the landed change wrote: from the landing's old target (or, for a landing by
    hand, the commit the clone was made from) to the candidate; [] when git cannot say."""
    landing = landing_of(w)
    old = landing.get("old_target") if landing.get("candidate") == commit else None
    old = old or (w["data"].get("base") or {}).get("commit")
    if not old:
        return []
    return workspace.changed_names(git_dir_args(w["source"]), w["source"], old, commit, environ, check=False) or []


def _release_landed(st, w, caller, paths):
    """Inside the proof's transaction: release the leases of the work's agent (the one `send
    --to WORK` reaches, its parked holder included; never a person's) that cover a path the
    landed change wrote, each with an audit row, so peers waiting for the landing may go on.
    Its leases on anything else stay: the agent may go on working in the clone.
    -> (the agent or None, [released resources])."""
    try:
        agent = st.work_recipient(w)
    except Refused:
        return None, []
    if agent is None or store.person_uid(agent) is not None or not paths:
        return agent, []
    names = set()
    for p in paths:
        try:
            names.add(store.normalize_resource(p))
        except store.CoordError:
            continue
    covering = [l["resource"] for l in st.leases_of(agent["id"])
                if any(store.overlaps(l["resource"], n) for n in names)]
    if not covering:
        return agent, []
    return agent, st.release_landed(agent["id"], covering, w["id"], caller["id"])


def _tell_landed(st, w, caller, agent, freed, into, target):
    """A durable message to the work's agent that its work landed (delivered at its next hook
    boundary, or at once when it sits idle at its prompt: _wake); not to the caller itself, who
    sees the landing's output. -> (the handle told or None, _wake's answer)."""
    if agent is None or agent["id"] == caller["id"] or store.person_uid(agent) is not None:
        return None, None
    body = "coord: work %s landed on %s as %s%s. Before the next edit in its clone: jj git fetch (the next edit " \
           "starts a new change); claim again what you change next." % (
               w["handle"], into, target, "; your leases on %s were released" % named_paths(freed) if freed else "")
    try:
        msg = st.send(caller["id"], body, w["id"], kind="landed")
    except store.CoordError:
        return None, None
    return agent["handle"], _wake(st, caller, w, msg)


def _wake(st, caller, w, msg):
    """Nudge the work's agent about message `msg` when it sits idle at its prompt (the nudge of
    `send --nudge`, workspace.nudge_work); a fault here never fails the landing.
    -> True when nudged, else why not (one line)."""
    try:
        problem = workspace.nudge_work(st, caller, w, msg)
    except store.CoordError as exc:
        problem = exc.message
    except Exception as exc:  # noqa: BLE001 - the landing is done; waking its agent is a courtesy
        store.log_traceback("nudge after landing %s" % w["id"])
        problem = "the nudge failed: %s" % exc
    return True if problem is None else store.clean_text(problem, 200)


def _check_ancestry(w, into, candidate, target, environ):
    """Refuse unless both commits are in the canonical repository, candidate is an ancestor of
    target, and target is on bookmark `into` there."""
    source = w["source"]
    gargs = git_dir_args(source)
    for what, oid in (("target", target), ("candidate", candidate)):
        if not workspace.has_commit(gargs, source, oid, environ):
            hint = ("push the candidate to %s first; %s" % (source, workspace.SQUASH_NOTE % (w["handle"], w["handle"]))
                    if what == "candidate" else
                    "name a commit that exists in %s" % source)
            raise Refused("%s commit %s is not in the canonical repository %s" % (what, oid, source), hint)
    code, err = workspace.ancestry(gargs, source, candidate, target, environ) if candidate != target else (0, "")
    if code == 1:
        raise Refused("candidate %s of %s is not an ancestor of %s" % (candidate, w["handle"], target),
                      workspace.SQUASH_NOTE % (w["handle"], w["handle"]))
    if code != 0:
        raise workspace.ToolError(["git", "merge-base", "--is-ancestor"], code, err)
    ref = "refs/heads/" + into
    code, _, _ = git(gargs + ["merge-base", "--is-ancestor", target, ref], source, environ, check=False)
    if code != 0:
        raise Refused("target %s is not on bookmark %s in %s" % (target, into, source),
                      "name the commit %s points at: git %s rev-parse %s" % (into, " ".join(gargs), ref))


# --------------------------------------------------------------------------- integration fencing
# integration/B carries a fencing number (store.claim_integration), recorded in
# the frozen candidate. Right before a landing moves the target, pushes, or proves, it confirms
# that the number is still the current one and its holder still has the lease (store.confirm_fence):
# a holder that paused past the lease's expiry while another runtime (on any host) acquired it
# moves nothing. A candidate frozen before fencing existed has no number: the lease check alone holds.

def confirm_fence(st, w, caller, cand, what, rerun):
    """Refuse (reason "fenced") unless the candidate's fencing number is still integration/B's
    current one, held by the runtime that froze it (or its successor); `what` is the step that
    would have happened ("move main", "push", "prove"), `rerun` the exact next command."""
    fence = cand.get("fence")
    if fence is None:
        return
    holder = _freezer_holder(st, cand, caller) or cand.get("runtime") or caller["id"]
    got = st.confirm_fence(holder, cand["resource"], fence)
    if got["ok"]:
        return
    if got.get("current") is not None and got["current"] != fence:
        why = "%s was acquired by %s (fencing number %s) after the landing of %s took it (fencing number %s): " \
              "its lease lapsed while the landing waited" % (cand["resource"], got["holder"], got["current"],
                                                            w["handle"], fence)
    else:
        why = "the landing of %s no longer holds %s (fencing number %s): its lease was released or taken over" \
              % (w["handle"], cand["resource"], fence)
    raise Refused("%s, so it did not %s" % (why, what),
                  "once %s is free (coord work integrate queue), re-run: %s" % (cand["resource"], rerun),
                  reason="fenced", fence=fence, current=got.get("current"), holder=got.get("holder"))


def release_integration(st, *, caller, handle):
    """Release the integration lease the caller froze the candidate with (not evidence), unless
    the same holder still has another work's candidate frozen under it (a batch of the landing
    queue, or two works acquired by hand): the lease then stays for that one, whose proof needs
    it; -> {work, integration: the integration state after it}."""
    w = st.resolve_work(handle)
    integ, cand = _candidate_for(w, caller, st)
    holder = _freezer_holder(st, cand, caller) or caller["id"]
    if integ.get("released"):
        raise Refused("the integration lock of %s was already released" % w["handle"], "coord work inspect %s"
                      % w["handle"])
    with st.transaction():
        held = [l["resource"] for l in st.leases_of(holder, [cand["resource"]])]
        if cand["resource"] in held and not _frozen_elsewhere(st, w, holder, cand["resource"]):
            st.release(holder, [cand["resource"]])
        cur = st.resolve_work(w["id"])
        now_integ, _ = _candidate_for(cur, caller, st)
        now_integ["released"] = {"at": now_time(), "runtime": caller["id"], "resource": cand["resource"],
                                 "lease_was_held": cand["resource"] in held}
        if now_integ["state"] != "integrated":
            now_integ["state"] = "lock-released"
        st.update_work(w["id"], data={"integration": now_integ})
        st.audit("work.integration.released", caller["id"], w["id"], resource=cand["resource"],
                 proven=now_integ["state"] == "integrated")
    return {"work": w["handle"], "integration": now_integ["state"]}


def _frozen_elsewhere(st, w, holder, resource):
    """Whether `holder` froze another work's candidate under `resource` that is neither proven nor
    released: releasing the lease would take it from under that one."""
    for other in st.works():
        integ = integration_of(other)
        cand = integ.get("candidate") or {}
        if other["id"] != w["id"] and integ["state"] == "integrating" and not integ.get("released") and \
                cand.get("resource") == resource and cand.get("runtime") == holder:
            return True
    return False


# --------------------------------------------------------------------------- landing

LAND_STEPS = ("acquired", "fetched", "rebased", "checked", "push-read", "moved", "pushed", "proven", "released")
LAND_KILL_ENV = "COORD_TEST_LAND_KILL_AFTER"   # test only: SIGKILL this process right after the named step
LAND_STOP_ENV = "COORD_TEST_LAND_STOP_AFTER"   # test only: SIGSTOP this process right after the named step
LAND_CHECK_CONFIG = "coord.landCheck"          # git config key of the canonical repository's local config
CHECK_TIMEOUT = 3600.0                         # seconds one --check command may run
CHECK_TAIL = 4000                              # characters of a failed check's output kept and shown
LAND_RESUMABLE = frozenset(("running", "publish-refused", "publish-ambiguous"))


def _rev(source, ref, environ):
    """The full commit a ref names in the canonical repository, or None."""
    code, out, _ = git(git_dir_args(source) + ["rev-parse", "--verify", "--quiet", ref + "^{commit}"], source,
                       environ, check=False)
    return out.strip() if code == 0 and workspace.FULL_COMMIT_RE.match(out.strip()) else None


def _is_ancestor(source, older, newer, environ):
    code, err = workspace.ancestry(git_dir_args(source), source, older, newer, environ)
    if code not in (0, 1):
        raise workspace.ToolError(["git", "merge-base", "--is-ancestor"], code, err)
    return code == 0


def _land_record(st, w, caller, step, environ, state="running", **facts):
    """Record one finished landing step in the work record and the audit log (one transaction),
    then, for tests only, die here when LAND_KILL_ENV names this step. -> the landing dict."""
    with st.transaction():
        cur = st.work(w["id"])
        landing = landing_of(cur)
        landing.update({k: v for k, v in facts.items() if v is not None})
        landing["state"], landing["at"] = state, now_time()
        if step:
            landing["step"] = step
            landing["steps"] = list(landing.get("steps") or []) + [{"step": step, "at": now_time()}]
        st.update_work(w["id"], data={"landing": landing})
        st.audit("work.landing." + (step or state), who_id(caller), w["id"], state=state,
                 **{k: v for k, v in facts.items() if v is not None and k not in ("runtime", "subject", "now", "event")})
    if step:
        workspace.crash_point(environ, LAND_KILL_ENV, step)
        _stop_point(environ, step)
    return landing


def _stop_point(environ, point):
    """Test only: SIGSTOP this process when LAND_STOP_ENV names `point` (a step, or "before-push":
    right before git push, after the remote was read for the last time); SIGCONT resumes it."""
    if (environ or {}).get(LAND_STOP_ENV) == point:
        import signal
        os.kill(os.getpid(), signal.SIGSTOP)


def land_check_command(source, environ=None):
    """The repository's configured check command (git config coord.landCheck in the canonical
    repository's own config, which no clone can commit), or None."""
    code, out, _ = workspace.held(("land-check", source), lambda: git(
        git_dir_args(source) + ["config", "--local", "--get", LAND_CHECK_CONFIG], source, environ, check=False))
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
        self.head = None  # the commit checked out, clean, when known: a chain picks onto the last pick

    def __enter__(self):
        import tempfile
        self.path = tempfile.mkdtemp(prefix=".land-%s-" % self.w["id"][:8], dir=self.w["scratch_root"])
        git(["clone", "--quiet", "--no-checkout", "--shared", workspace.clone_source(self.w["source"]), self.path],
            self.w["scratch_root"], self.environ)
        return self

    def __exit__(self, *exc):
        if self.path and workspace.below(os.path.realpath(self.path), self.w["scratch_root"]):
            workspace.rmtree(self.path, ignore_errors=True)
        return False

    def git(self, args, check=True):
        return git(args, self.path, self.environ, check=check)

    def checkout(self, commit):
        if commit != self.head:
            self.head = None
            self.git(["checkout", "--quiet", "--detach", commit])
            self.head = commit

    def rebase(self, onto, cand, checkout=True):
        """Apply onto..cand onto `onto`, commit by commit, as cherry-pick does; -> (new commit, [])
        or (None, conflicted paths). With checkout, the checkout is left at the new commit."""
        # One read for the commits, oldest first, each with its parents and its committer.
        _, out, _ = self.git(["rev-list", "--reverse", "--topo-order", "--parents", "--format=%cn%x00%ce",
                              "%s..%s" % (onto, cand)])
        lines, commits = out.split("\n"), []
        for i in range(0, len(lines) - 1, 2):
            ids = lines[i].split()[1:]
            name, _, email = lines[i + 1].partition("\0")
            commits.append((ids[0], len(ids) > 2, name or "coord", email or "coord@localhost", ids[1:2]))
        if any(merge for _, merge, _, _, _ in commits):
            raise Refused("work %s has merge commits since %s; coord rebases only linear work in a scratch copy"
                          % (self.w["handle"], onto[:12]), "rebase it in the clone (jj rebase -b @ -d main@origin), "
                          "then re-run", reason="merge-commits")
        raw = self._raw(commits) if _merge_tree_rebases(self.environ) else None
        if raw is not None:
            new, paths = self._replay(onto, commits, raw)
            if new and checkout:
                self.checkout(new)
            return new, paths
        self.checkout(onto)
        self.head = None
        for c, _, name, email, _ in commits:
            code, _, _ = self.git(["-c", "user.name=" + name, "-c", "user.email=" + email, "cherry-pick",
                                   "--allow-empty", "--keep-redundant-commits", c], check=False)
            if code != 0:
                _, out, _ = self.git(["diff", "--name-only", "--diff-filter=U"], check=False)
                self.git(["cherry-pick", "--abort"], check=False)
                return None, sorted(set(out.split("\n")) - {""}) or ["(unknown)"]
        self.head = _rev(self.path, "HEAD", self.environ)
        return self.head, []

    def _raw(self, commits):
        """{commit: (author name, email, date, committer name, email, message)} read in one git call
        (bytes that are not UTF-8 kept), or None when a commit needs cherry-pick: one with no
        parent, or with an encoding header (its message is not UTF-8)."""
        if not commits or any(not parent for _, _, _, _, parent in commits):
            return None
        _, out, _ = self.git_raw(["cat-file", "--batch"], input="".join(c + "\n" for c, _, _, _, _ in commits))
        data, pos, raw = out.encode("utf-8", "surrogateescape"), 0, {}
        while pos < len(data):
            end = data.index(b"\n", pos)
            oid, kind, size = data[pos:end].split()
            body = data[end + 1:end + 1 + int(size)]
            pos = end + 2 + int(size)
            head, _, message = body.partition(b"\n\n")
            who = {}
            for line in head.split(b"\n"):
                key, _, value = line.partition(b" ")
                if key == b"encoding" or kind != b"commit":
                    return None
                if key in (b"author", b"committer") and b" <" in value and b"> " in value:
                    ident, _, date = value.rpartition(b"> ")
                    name, _, email = ident.partition(b" <")
                    who[key] = [x.decode("utf-8", "surrogateescape") for x in (name, email, date)]
            if len(who) != 2:
                return None
            raw[oid.decode()] = who[b"author"] + who[b"committer"][:2] + [message.decode("utf-8", "surrogateescape")]
        return raw

    def _replay(self, onto, commits, raw):
        """Each commit's changes merged onto the last (git merge-tree, which merges as cherry-pick
        does) and committed with its author and message (git commit-tree), the checkout untouched."""
        head = onto
        for c, _, _, _, parent in commits:
            code, out, err = self.git(["merge-tree", "--write-tree", "--name-only", "-z",
                                       "--merge-base=" + parent[0], head, c], check=False)
            if code not in (0, 1):
                raise workspace.ToolError(["git", "merge-tree", "--write-tree"], code, err or out)
            fields = out.split("\0")
            if code == 1:
                paths = fields[1:fields.index("", 1)] if "" in fields[1:] else fields[1:]
                return None, sorted(set(p for p in paths if p)) or ["(unknown)"]
            an, ae, ad, cn, ce, message = raw[c]
            _, out, _ = self.git_raw(["commit-tree", fields[0], "-p", head], input=message, extra_env={
                "GIT_AUTHOR_NAME": an, "GIT_AUTHOR_EMAIL": ae, "GIT_AUTHOR_DATE": "@" + ad,
                "GIT_COMMITTER_NAME": cn or "coord", "GIT_COMMITTER_EMAIL": ce or "coord@localhost"})
            head = out.strip()
        return head, []

    def git_raw(self, args, input=None, extra_env=None):
        return git(args, self.path, self.environ, input=input, extra_env=extra_env, errors="surrogateescape")


_MERGE_TREE_REBASE = []  # whether git merge-tree takes --merge-base (git 2.40), asked once


def _merge_tree_rebases(environ):
    if not _MERGE_TREE_REBASE:
        version = review.git_version(environ)
        _MERGE_TREE_REBASE.append(version is not None and version >= (2, 40))
    return _MERGE_TREE_REBASE[0]


def _tell_owner(st, w, caller, body):
    """Send a coord message to whoever works on the work: the agent running it (as `send --to
    WORK` finds it), else its live owner; never the caller itself (a person landing the work
    they created still reaches the agent they launched for it), nudged when idle (_wake).
    -> (the handle told or None, _wake's answer or None)."""
    candidates = []
    try:
        candidates.append(st.work_recipient(w))
    except Refused:
        pass
    candidates.append(workspace.owner_of(st, w))
    for to in candidates:
        if to is None or to["id"] == caller["id"]:
            continue
        try:
            msg = st.send(caller["id"], body, to["id"], kind="landing")
        except Refused:
            continue
        return to["handle"], _wake(st, caller, w, msg)
    return None, None


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
    files, _ = workspace.disk_entries(path)
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
    ignored = workspace.ignored_paths(w, written, environ)
    created_ignored = [p for p in written if p in ignored and p not in before]
    aside = [p for p in written if p not in ignored]
    if aside or gone:
        result["set_aside"] = _set_aside(w, cand["commit"], aside, gone, environ)
    if created_ignored:
        digests = {p: workspace.entry_digest(os.path.join(path, p)) for p in created_ignored[:CHECK_CREATED_MAX]}
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
    gargs = workspace.git_store(w)
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
    return {p for p in paths if rec.get(p) and workspace.plain_parents(w["path"], p)
            and workspace.entry_digest(os.path.join(w["path"], p)) == rec[p]}


def _worktrees_on(source, ref, environ):
    """Working trees of the canonical git repository that have `ref` checked out."""
    _, out, _ = workspace.held(("worktrees", source), lambda: git(
        git_dir_args(source) + ["worktree", "list", "--porcelain"], source, environ))
    found, cur = [], None
    for line in out.splitlines():
        if line.startswith("worktree "):
            cur = line[len("worktree "):]
        elif line == "branch " + ref and cur:
            found.append(cur)
    return found


def _written(tree, old, new, environ, fork=False):
    """The paths moving from `old` to `new` writes (fork: `new`'s own changes since it forked
    from `old`), read in the checkout `tree`."""
    if not fork:  # as the shared repository's own read of the same two commits (one answer per command)
        return workspace.changed_names(git_dir_args(tree), tree, old, new, environ)
    _, out, _ = git(["diff", "--name-only", "-z", "--no-renames", "%s...%s" % (old, new)], tree, environ)
    return [p for p in out.split("\0") if p]


def _flagged_touched(tree, old, new, environ, fork=False):
    """Paths that moving from `old` to `new` would write and that git is told to ignore in the
    checkout `tree` (assume-unchanged, skip-worktree: `git status` never lists them) while the
    file on disk differs from the index; a skip-worktree path absent from disk (a sparse
    checkout) is no local change. fork: as in _dirty_touched."""
    touched = _written(tree, old, new, environ, fork)
    if not touched:
        return []
    spec = ["--"] + [":(literal)" + t for t in touched] if len(touched) <= 2000 else []
    _, out, _ = git(["ls-files", "-v", "-z"] + spec, tree, environ)
    flagged = [e[2:] for e in out.split("\0") if len(e) > 2 and (e[0].islower() or e[0] == "S")
               and e[2:] in touched and os.path.lexists(os.path.join(tree, e[2:]))]
    if not flagged:
        return []
    _, staged, _ = git(["ls-files", "-s", "-z", "--"] + [":(literal)" + f for f in flagged], tree, environ)
    index = {}
    for e in staged.split("\0"):
        meta, _tab, name = e.partition("\t")
        if name and len(meta.split()) == 3:
            index[name] = meta.split()[1]
    changed = []
    for f in flagged:
        full = os.path.join(tree, f)
        if not os.path.isfile(full) or os.path.islink(full):
            changed.append(f)
            continue
        _, blob, _ = git(["hash-object", "--path", f, "--", full], tree, environ)
        if blob.strip() != index.get(f):
            changed.append(f)
    return sorted(changed)


def _dirty_touched(tree, old, new, environ, fork=False):
    """Paths with local changes (tracked, untracked or ignored) in the checkout `tree` that moving
    from `old` to `new` would write (fork: that `new`'s own changes since it forked from `old`
    would write, for a candidate still to be rebased)."""
    touched = _written(tree, old, new, environ, fork)
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


def _refuse_dirty(w, into, tree, old, new, environ, fork=False):
    """Refuse (dirty-checkout) when the checkout `tree` of `into` has local changes on a path the
    landing would write (`_dirty_touched`), also in files git is told to ignore (`_flagged_touched`)."""
    dirty = _dirty_touched(tree, old, new, environ, fork=fork)
    if dirty:
        raise Refused("the shared checkout %s has local changes the landing would overwrite: %s"
                      % (tree, named_paths(dirty)),
                      "commit, stash or move them (git -C %s status), then re-run: %s"
                      % (shlex.quote(tree), rerun_command(w, into)), reason="dirty-checkout", paths=dirty)
    flagged = _flagged_touched(tree, old, new, environ, fork=fork)
    if flagged:
        q = shlex.quote(tree)
        raise Refused("the shared checkout %s has local changes the landing would overwrite, in files git is told"
                      " to ignore (assume-unchanged or skip-worktree, so git status shows nothing): %s"
                      % (tree, named_paths(flagged)),
                      "git -C %s ls-files -v | grep '^[a-zS]' lists them; clear the flag (git -C %s update-index"
                      " --no-assume-unchanged --no-skip-worktree -- PATH), commit, stash or move the changes,"
                      " then re-run: %s" % (q, q, rerun_command(w, into)),
                      reason="dirty-checkout", paths=flagged, flagged=True)


def _refuse_early(w, into, push, old, new, environ, stale):
    """Before the checks (minutes, for a real test suite): the cheap refusals the move and the
    push would meet after them (a git ls-remote and a git status, tens of milliseconds), so a
    moved remote or a dirty shared checkout stops the landing before the checks run. Both are
    checked again where the landing moves and pushes: things can change meanwhile."""
    if push:
        _remote_at_target(w, into, push, old, environ)
    if os.path.isdir(os.path.join(w["source"], ".jj")):
        return  # jj's bookmark moves by update-ref: no working copy is written
    trees = _worktrees_on(w["source"], "refs/heads/" + into, environ)
    if trees:
        _refuse_dirty(w, into, trees[0], old, new, environ, fork=stale)


def _refuse_installed(st, w, caller, into, old, cand, override, environ):
    """Refuse a candidate that changes coord's installed files (workspace.INSTALLED_PATHS: what
    the installer writes, hook configs included), usually a harness rewriting its config in the
    clone (Qwen Code adding its "$version" to an older coord's .qwen/settings.json): an
    installation is the person's, in the shared checkout, never a side effect of landing a work.
    The hint drops them from the candidate; the caller's override lands them, audited."""
    gargs = git_dir_args(w["source"])
    base = workspace.merge_base(gargs, w["source"], old, cand["commit"], environ)
    hit = [p for p in workspace.changed_names(gargs, w["source"], base, cand["commit"], environ)
           if any(p == i or p.startswith(i + "/") for i in workspace.INSTALLED_PATHS)]
    if not hit:
        return
    if override:
        with st.transaction():
            st.audit("work.landing.override", caller["id"], w["id"], over="installed-files", paths=hit[:200])
        return
    drop = "cd %s && jj restore --from %s --into %s -- %s" % (
        shlex.quote(w["path"]), base, cand["change"], " ".join(shlex.quote(p) for p in hit))
    raise Refused("the candidate of %s changes coord's installed files: %s (install and upgrade coord in the "
                  "shared checkout, not through a work)" % (w["handle"], named_paths(hit)),
                  "drop them from the change: %s ; then re-run: %s" % (drop, rerun_command(w, into)),
                  reason="installed-files", paths=hit)


def update_command(source, remote, into, environ=None):
    """The command that brings the shared checkout's `into` up to `remote`'s (a fast-forward):
    a pull where it is checked out, else a fetch into the branch."""
    trees = _worktrees_on(source, "refs/heads/" + into, environ)
    if trees:
        return "git -C %s pull --ff-only %s %s" % (shlex.quote(trees[0]), shlex.quote(remote), into)
    return "git -C %s fetch %s %s:%s" % (shlex.quote(source), shlex.quote(remote), into, into)


def _remote_at_target(w, into, remote, old, environ):
    """Require REMOTE's `into`, read over the wire, to be `old`, the shared checkout's; else
    refuse (remote-moved) naming the command that brings the shared `into` up to date, or the
    push that publishes it when the remote is behind."""
    try:
        return verify_remote(root=w["source"], work_of=lambda _id: None, remote=remote, bookmark=into, expect=old,
                             environ=environ)
    except Refused as exc:
        actual = exc.details.get("actual")
        if not actual or exc.details.get("expected") != old:
            raise
        source, rerun = w["source"], rerun_command(w, into, push=remote)
        if _rev(source, actual, environ) and _is_ancestor(source, actual, old, environ):
            hint = "%s %s is behind the shared %s: publish it first (git -C %s push %s %s), then re-run: %s" % (
                remote, into, into, shlex.quote(source), shlex.quote(remote), into, rerun)
        else:
            hint = "bring the shared %s up to date: %s ; then re-run: %s" % (
                into, update_command(source, remote, into, environ), rerun)
        raise Refused("remote %s %s is at %s, not at the shared checkout's %s; nothing moved" % (
            remote, into, actual, old), hint, reason="remote-moved", remote_after=actual, expected=old,
            actual=actual, remote=remote, bookmark=into)


def _update_ref(w, into, old, new, environ):
    """git update-ref of the canonical bookmark from exactly `old` to `new` (compare and swap)."""
    source, ref = w["source"], "refs/heads/" + into
    try:
        git(git_dir_args(source) + ["update-ref", "-m", "coord land %s" % w["handle"], ref, new, old], source,
            environ)
    except workspace.ToolError:
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
    _refuse_dirty(w, into, tree, old, new, environ)
    if _rev(tree, "HEAD", environ) != old:
        raise Refused("%s moved in %s while landing" % (into, tree), "re-run: %s" % rerun_command(w, into), reason="target-moved")
    try:
        git(["merge", "--ff-only", "--quiet", new], tree, environ)
    except workspace.ToolError as exc:
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


def _push(st, w, caller, into, remote, old, new, environ, fence=None):
    """Publish `new` to REMOTE's bookmark, expecting exactly `old` there; -> the pushed facts.
    fence: a landing's frozen candidate, whose fencing number is confirmed first (a later publish
    of a finished landing has none). Raises Refused (keeping push/<remote>/<bookmark>) when the
    outcome is not a clean success."""
    source = w["source"]
    ref = "refs/heads/" + into
    if fence is not None:
        confirm_fence(st, w, caller, fence, "push to %s" % remote, rerun_command(w, into, push=remote))
    _stop_point(environ, "before-push")
    try:
        code, out, err = git(git_dir_args(source) + ["push", "--porcelain", "--force-with-lease=%s:%s" % (ref, old),
                                                     remote, "%s:%s" % (new, ref)], source, environ, check=False)
        # the porcelain status lines are on stdout, the remote's own words on stderr: keep both
        push_error = None if code == 0 else ((err or "") + "\n" + (out or "")).strip()[-CHECK_TAIL:]
    except workspace.ToolError as exc:  # timed out
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
            st.audit("work.landing.publish-rejected", who_id(caller), w["id"], remote=remote, remote_after=actual,
                     push_error=store.clean_text(push_error, 2000))
        raise Refused("remote %s refused %s (%s); nothing was forced" % (remote, into, store.clean_text(refusal, 300)),
                      None, reason="publish-refused", remote_after=actual, remote_unchanged=True,
                      push_error=store.clean_text(push_error, 2000))
    check = "git ls-remote %s %s (expected %s)" % (remote, ref, new)
    # Someone else's commit is there now: our push was definitely not applied (git push is
    # synchronous). Anything else (unreadable remote, still the old value after an error) is
    # ambiguous until a person looks.
    rejected = bool(workspace.FULL_COMMIT_RE.match(actual or "")) and actual != old
    state = "publish-refused" if rejected else "publish-ambiguous"
    _land_record(st, w, caller, None, environ, state=state, remote_after=actual,
                 push_error=store.clean_text(push_error or "", 2000) or None)
    if rejected:
        raise Refused("remote %s %s moved to %s while landing (expected %s); nothing was forced, %s of the shared "
                      "checkout is at %s" % (remote, into, actual, old, into, new),
                      "reconcile %s with %s by hand; push/%s/%s and integration/%s stay held by you; then re-run: %s"
                      % (into, remote, remote, into, into, rerun_command(w, into, push=remote)),
                      reason="publish-refused", remote_after=actual)
    raise Refused("the push of %s to %s %s has an unknown outcome (%s)" % (
        new, remote, into, store.clean_text(push_error or ("the re-read shows %s" % actual), 300)),
        "check: %s; then re-run %s (push/%s/%s stays held)"
        % (check, rerun_command(w, into, push=remote), remote, into), reason="publish-ambiguous", remote_after=actual)


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


class Landing:
    """One landing of one work (land_work), read once and passed down its steps: the work record
    as the landing lock found it, the options, the target's commit read once, the frozen candidate
    and its fencing number, and the landing record as this process last wrote it (`record` keeps
    `w` and `landing` current, so no step reads the work again to learn what the landing wrote)."""

    def __init__(self, st, caller, w, into, environ, push=None, check=None, override=False, queued=False):
        self.st, self.caller, self.w, self.into, self.environ = st, caller, w, into, environ
        self.push, self.check_arg, self.override = push, check, override
        self.queued = queued                 # run by the queue (land_queue), which tells the owner itself
        self.source, self.ref = w["source"], "refs/heads/" + into
        self.landing = landing_of(w)
        self.check, self.checks = None, []   # the command recorded and shown, each command run (_land_checks)
        self.old = None                      # the target's commit when the landing began
        self.resource, self.fence = _integration_resource(into), None
        self.stopped = False                 # the stop is recorded (a conflict, a failed check)
        self.cand, self.queued_at = None, None  # a batch's: the candidate frozen, the work's place in the queue
        self.remote_now = None               # a batch's: what its one push left on the remote

    def record(self, step, state="running", **facts):
        """_land_record for this landing; -> the landing dict, also kept in `landing` and `w`."""
        self.landing = _land_record(self.st, self.w, self.caller, step, self.environ, state=state, **facts)
        self.w = dict(self.w, data=dict(self.w["data"], landing=self.landing))
        return self.landing

    def frozen(self, commit=None):
        """The frozen candidate as confirm_fence reads it: this runtime's, under its fencing number."""
        return {"commit": commit, "runtime": self.caller["id"], "resource": self.resource, "fence": self.fence}

    def rerun(self, push=None):
        return rerun_command(self.w, self.into, push=push)


def _stop_before_move(ld, state, exc, **facts):
    """A landing stopped before the target moved: record why, release the integration lease."""
    reason = exc.message if isinstance(exc, store.CoordError) else str(exc)
    ld.record(None, state=state, reason=store.clean_text(reason, 500), **facts)
    ld.stopped = True
    try:
        release_integration(ld.st, caller=ld.caller, handle=ld.w["id"])
    except store.CoordError:
        pass


def land_work(st, *, caller, handle, into, environ, push=None, check=None, override=False, queued=False):
    """Take the work's candidate all the way onto bookmark `into` of the canonical repository
    (and REMOTE's `into` with push), leaving proof, or stop safely saying why. Each step is
    recorded in data["landing"] and the audit log; re-running finishes an interrupted landing.
    -> {work, landed, into, remote, old_target, rebased, check, moved_by, steps}."""
    into = workspace.check_bookmark(into)
    if push is not None and (not push or push.startswith("-")):
        raise UsageError("--push %r is not a remote name" % push, "coord work integrate land WORK --into main "
                         "--push origin")
    w = st.resolve_work(handle)
    workspace.refuse_other_host(st, w, land_command(w["handle"], into, push=push, check=check))
    workspace.authorize(st, w, caller, "land", override, into=into)
    workspace.refuse_state(w, workspace.UNUSABLE)
    # One landing into a target at a time, whoever lands: integration/B is re-entrant for one
    # runtime, and two landings of the same person must not both move B. A second one waits
    # here, then reads B afresh (and rebases onto the first one's result).
    with workspace.repo_lock(w["source"], _lock_dir(st, w), "land-" + into):
        ld = Landing(st, caller, st.work(w["id"]), into, environ, push=push, check=check, override=override,
                     queued=queued)
        return _land_serialised(ld)


def _lock_dir(st, w):
    path = getattr(st, "path", None)
    return os.path.dirname(path) if path and os.path.isabs(path) else w["scratch_root"]


def _land_serialised(ld):
    """land_work, holding the landing lock of `into`: finish a landing that already moved the
    target, refuse what is not ready, or run the steps (LAND_STEPS) one function each."""
    st, w, source, environ = ld.st, ld.w, ld.source, ld.environ
    landing, integ = ld.landing, integration_of(w)
    target = _rev(source, ld.ref, environ)  # read once: the lock keeps other landings out
    landed_before = landing.get("state") == "landed" and landing.get("into") == ld.into and \
        integ.get("state") == "integrated" and landing.get("landed") and target and \
        _is_ancestor(source, landing["landed"], target, environ)
    resume = landing.get("state") in LAND_RESUMABLE and landing.get("into") == ld.into and landing.get("candidate")
    if resume and _rev(source, landing["candidate"], environ) and target and \
            _is_ancestor(source, landing["candidate"], target, environ):
        ld.push = ld.push or landing.get("remote")
        return _land_after_move(ld)
    ld.check, ld.checks = _land_checks(w, ld.check_arg, environ)
    _refuse_unready(st, w, ld.checks)
    if target is None:
        raise Refused("the canonical repository %s has no bookmark %s" % (source, ld.into),
                      "name an existing bookmark: git -C %s branch --list" % source)
    ld.old = target
    if landed_before:  # a re-run after a finished landing, unless the clone has moved on since
        ids = workspace.head_ids(workspace.verified_path(w), environ=environ)
        if ids["commit"] == landing["landed"] or (ids["empty"] and ids["parents"] == [landing["landed"]]):
            if ld.push and not (landing.get("remote") == ld.push and landing.get("published", True)
                                and "pushed" in [s["step"] for s in landing.get("steps") or []]):
                return _publish_landed(st, w, ld.caller, ld.into, ld.push, landing, environ)
            return _land_result(w, landing, already=True)
    cand = _land_acquire(ld)
    cand, how = _land_until_moved(ld, cand)
    ld.record("moved", moved_by=how, landed=cand["commit"],
              held_by_peers=_held_while_working(st, ld.w, ld.caller, ld.old, cand["commit"], environ) or None)
    return _land_after_move(ld, moved=True)


def _land_checks(w, check, environ):
    """(the check the landing records and shows, [each command to run]): --check adds to the
    repository's configured check, never replaces it: both run, that one first."""
    configured = land_check_command(w["source"], environ)
    checks = [configured] if configured else []
    if check and check not in checks:
        checks.append(check)
    return " && ".join(checks) or None, checks


def _refuse_unready(st, w, checks):
    """Refuse a landing with neither a check nor a passed or waived gate, or whose dependencies
    are not integrated yet."""
    if not checks and gate_of(w)["state"] not in workspace.GATE_DONE:
        raise Refused("work %s has no passed or waived gate and no check command" % w["handle"],
                      "coord work gate %s --pass, or land with --check CMD (or set git config %s in %s)"
                      % (w["handle"], LAND_CHECK_CONFIG, w["source"]), reason="ungated")
    waiting = []
    for dep in w["data"].get("depends", []):
        d = st.work(dep)
        if d is None or integration_of(d)["state"] != "integrated":
            waiting.append("%s (%s)" % (d["handle"] if d else dep,
                                        integration_of(d)["state"] if d else "unknown"))
    if waiting:
        raise Refused("work %s depends on %s, not integrated yet" % (w["handle"], ", ".join(waiting)),
                      "land those first (coord work integrate queue)", reason="depends")


def _land_acquire(ld):
    """Step `acquired`: freeze the candidate and start a new landing record (so the re-run hints
    read its options); -> the candidate."""
    got = acquire(ld.st, caller=ld.caller, handle=ld.w["id"], into=ld.into, environ=ld.environ, authorized=True)
    cand = dict(got["candidate"])
    ld.fence = got.get("fence")
    with ld.st.transaction():
        ld.st.update_work(ld.w["id"], data={"landing": None})
    ld.record("acquired", into=ld.into, remote=ld.push, runtime=ld.caller["id"], started_at=now_time(),
              old_target=ld.old, candidate=cand["commit"], change=cand["change"], original=cand["commit"],
              check_arg=ld.check_arg, fence=ld.fence)
    return cand


def _land_until_moved(ld, cand):
    """Steps `fetched` to the move: fetch the candidate, rebase and check it (in the clone, or in
    a scratch clone when something works in the clone), refuse peers' leases and LFS content,
    take the push lease, move the target; -> (the candidate, how the target moved). On a
    refusal or failure nothing has moved: the landing is recorded stopped and the push lease
    dropped."""
    st, caller, into, push, old, environ = ld.st, ld.caller, ld.into, ld.push, ld.old, ld.environ
    try:
        fetch_candidate(ld.w, cand["commit"], environ)
        ld.record("fetched", candidate=cand["commit"])
        stale = not _is_ancestor(ld.source, old, cand["commit"], environ)
        _refuse_early(ld.w, into, push, old, cand["commit"], environ, stale)
        _refuse_installed(st, ld.w, caller, into, old, cand, ld.override, environ)
        live = workspace.live_inside(st, ld.w, workspace.process_cwds() or {})
        if live and (ld.check or stale):
            with _Scratch(ld.w, environ) as scratch:
                cand = _prepare_in_scratch(ld, cand, stale, scratch, live)
        else:
            cand = _prepare_in_clone(ld, cand, stale)
        ld.record("checked", check=ld.check, checks=ld.checks or None, check_cwd=cand.get("check_cwd"),
                  check_set_aside=cand.get("set_aside"))
        _refuse_peer_leases(st, ld.w, caller, old, cand["commit"], ld.override, environ)
        _refuse_lfs_content(ld.w, old, cand["commit"], environ)
        if push:
            _take_push(ld)
        confirm_fence(st, ld.w, caller, ld.frozen(cand["commit"]), "move %s" % into, ld.rerun(push=push))
        how = _move_target(ld.w, into, old, cand["commit"], environ)
    except store.CoordError as exc:
        if not ld.stopped:
            _stop_before_move(ld, "refused" if isinstance(exc, Refused) else "failed", exc)
        if push:
            _drop_push(st, caller, push, into)
        raise
    return cand, how


def _prepare_in_clone(ld, cand, stale):
    """Rebase (when stale) and check in the clone itself, nothing live being inside; -> the candidate."""
    st, w, caller, into, old, environ = ld.st, ld.w, ld.caller, ld.into, ld.old, ld.environ
    if stale:
        paths = _rebase_in_clone(st, w, caller, into, old, cand, environ)
        if paths:
            _land_conflict(ld, cand, paths)
        got = acquire(st, caller=caller, handle=w["id"], into=into, environ=environ,
                      authorized=True)  # land_work authorized the caller
        cand, ld.fence = dict(got["candidate"]), got.get("fence")
        fetch_candidate(w, cand["commit"], environ)
        if not _is_ancestor(ld.source, old, cand["commit"], environ):
            raise Refused("the rebased candidate %s of %s is still not based on %s" % (cand["commit"],
                          w["handle"], old), "coord work inspect %s --verbose" % w["handle"])
    ld.record("rebased", candidate=cand["commit"], change=cand["change"], rebased=stale, where="clone")
    if ld.checks:
        result = None
        for command in ld.checks:  # in order; the first failure stops the landing
            result = _check_in_clone(st, w, command, cand, environ)
            if result["exit"] != 0:
                _land_check_failed(ld, cand, result)
            if result.get("set_aside"):
                cand = dict(cand, set_aside=result["set_aside"])
        cand = dict(cand, check_cwd=result["cwd"])
        now_ids = workspace.head_ids(w["path"], environ=environ)
        if cand["commit"] not in [now_ids["commit"]] + now_ids["parents"] or \
                (now_ids["commit"] != cand["commit"] and not now_ids["empty"]):
            raise Refused("the clone of %s changed while the check ran" % w["handle"],
                          "re-run: %s" % ld.rerun(), reason="changed-during-check")
        _gate_from_check(st, w, caller, ld.checks, cand)
    return cand


def _prepare_in_scratch(ld, cand, stale, scratch, live):
    """Rebase (when stale) and check in a private scratch checkout, because something live works
    in the clone (`live`, cleanup's blockers); the clone is not touched. -> the candidate."""
    st, w, caller, environ = ld.st, ld.w, ld.caller, ld.environ
    if not stale:
        scratch.checkout(cand["commit"])
    else:
        new, paths = scratch.rebase(ld.old, cand["commit"])
        if paths:
            _land_conflict(ld, cand, paths, scratch=True)
        cand = _freeze_scratch(ld, cand, new, scratch, "scratch")
    ld.record("rebased", candidate=cand["commit"], rebased=stale, where="scratch",
              live_inside=store.clean_text(live[0]["message"], 300))
    if ld.checks:
        for command in ld.checks:
            result = _run_check(w, command, environ, cwd=scratch.path)
            if result["exit"] != 0:
                _land_check_failed(ld, cand, result)
        cand = dict(cand, check_cwd="a scratch checkout of the candidate (the clone was in use)")
        _gate_from_check(st, w, caller, ld.checks, cand)
    return cand


def _fetch_from_scratch(ld, scratch, picks):
    """Fetch commits rebased in the scratch checkout to their works' private refs, in one git fetch.
    picks: [(work, commit)]."""
    gargs = git_dir_args(ld.source)
    git(gargs + FETCH_BY_ID + [scratch.path] + ["+%s:%s" % (new, candidate_ref(w["id"])) for w, new in picks],
        ld.source, ld.environ)
    workspace.fetched(gargs, ld.source, [new for _, new in picks])


def _freeze_scratch(ld, cand, new, scratch, where, fetched=False):
    """The candidate rebased in a scratch checkout as `new`: fetch it to the work's private ref
    (unless `fetched`) and freeze it as the candidate. -> the new candidate."""
    st, w = ld.st, ld.w
    if not fetched:
        _fetch_from_scratch(ld, scratch, [(w, new)])
    with st.transaction():
        cur = st.work(w["id"])
        integ = integration_of(cur)
        frozen = dict(integ.get("candidate") or {})
        frozen.update({"commit": new, "rebased_from": cand["commit"], "at": now_time()})
        integ["candidate"] = frozen
        st.update_work(w["id"], data={"integration": integ})
        st.audit("work.integration.rebased", ld.caller["id"], w["id"], candidate_commit=new,
                 rebased_from=cand["commit"], where=where)
    return {"change": cand["change"], "commit": new, "rebased_from": cand["commit"]}


def _gate_from_check(st, w, caller, checks, cand):
    """Every check passed on the candidate: the gate records each command that ran."""
    gate = {"state": "passed", "at": now_time(), "by": caller["id"], "by_handle": caller["handle"],
            "user": workspace.user_name(), "check": {"command": " && ".join(checks), "commands": list(checks), "exit": 0,
                                       "candidate": cand["commit"]}}
    with st.transaction():
        st.update_work(w["id"], data={"gate": gate})
        st.audit("work.gate.passed", caller["id"], w["id"], check=gate["check"]["command"], checks=list(checks),
                 candidate=cand["commit"])


def _push_resource(remote, into):
    return store.normalize_resource("push/%s/%s" % (remote, into))


def _take_push(ld):
    """Take push/<remote>/<bookmark> and require the remote to be at the old target, read over the wire."""
    ld.st.claim(ld.caller["id"], [_push_resource(ld.push, ld.into)], "exclusive", "land %s" % ld.w["handle"])
    _remote_at_target(ld.w, ld.into, ld.push, ld.old, ld.environ)
    ld.record("push-read", remote=ld.push, remote_before=ld.old)


def _drop_push(st, caller, remote, into):
    res = _push_resource(remote, into)
    if any(l["resource"] == res for l in st.leases_of(caller["id"], [res])):
        st.release(caller["id"], [res])


def _land_after_move(ld, moved=False):
    """The steps after the target moved: publish, prove, release. Each is skipped when done.
    moved: this process moved the target just now, under its own fencing number; else (a re-run
    of a landing found moved) integration/B is acquired again and its new number recorded."""
    st, caller, into, push, environ = ld.st, ld.caller, ld.into, ld.push, ld.environ
    landing = ld.landing
    new, old = landing["candidate"], landing["old_target"]
    if landing.get("step") != "moved" and "moved" not in [s["step"] for s in landing.get("steps") or []]:
        landing = ld.record("moved", moved_by="found moved", landed=new)
    if not moved:
        _refreeze_moved(ld, new)
    done = [s["step"] for s in landing.get("steps") or []]
    if push and "pushed" not in done:
        res = _push_resource(push, into)
        if not st.leases_of(caller["id"], [res]):
            st.claim(caller["id"], [res], "exclusive", "land %s" % ld.w["handle"])
        now = ld.remote_now or _remote_at(st, ld.w, push, into, new, environ)
        batched = now != new and now is not None and now == landing.get("batch_tip")  # pushed with its batch
        if now != new and not batched:
            expect = landing.get("remote_before") or old
            if now != expect:
                ld.record(None, state="publish-refused", remote_after=now, remote=push)
                raise Refused("remote %s %s is at %s, not the expected %s; nothing was pushed" % (
                    push, into, now, expect), "reconcile %s by hand (push/%s/%s stays held by you), then re-run: %s"
                    % (push, push, into, ld.rerun(push=push)), reason="publish-refused", remote_after=now)
            try:
                _push(st, ld.w, caller, into, push, expect, new, environ, fence=ld.frozen(new))
            except Refused as exc:
                if not exc.details.get("remote_unchanged"):
                    raise
                return _land_unpublished(st, ld.w, caller, into, push, new, expect, exc, environ)
        landing = ld.record("pushed", remote=push, remote_after=now if batched else new, published=True)
    if push:
        _drop_push(st, caller, push, into)  # after the re-read, or on a re-run after a kill there
    if "proven" not in done:
        proof = prove(st, caller=caller, handle=ld.w["id"], target=new, environ=environ)
        landing = ld.record("proven", proof_target=new, leases_released=proof["released"] or None,
                            agent_told=proof["agent_told"], agent_nudged=proof["agent_nudged"])
    release_integration(st, caller=caller, handle=ld.w["id"])
    told = None
    if landing.get("rebased") and landing.get("where") in ("scratch", "batch") and "released" not in done:
        told, _ = _tell_owner(st, ld.w, caller, (
            "coord: %s landed on %s as %s, rebased in a scratch copy %s. The clone still "
            "holds the commits from before the rebase; before coord work remove, in %s: jj git fetch; "
            "jj rebase -b @ -d %s@origin --skip-emptied" % (
                ld.w["handle"], into, new, "because the clone was in use" if landing["where"] == "scratch" else
                "with the works queued before it", ld.w["path"], into)))
    # After a rebase in scratch (or a batch's) the clone's @ is not `new`: nothing to settle.
    rebased_away = landing.get("rebased") and landing.get("where") in ("scratch", "batch")
    settled = None if rebased_away else _settle_clone(st, ld.w, new, environ)
    landing = ld.record("released", state="landed", finished_at=now_time(), owner_told=told, clone_settled=settled)
    return _land_result(ld.w, landing)


def _refreeze_moved(ld, new):
    """A re-run of a landing that already moved the target: take integration/B again (a new
    fencing number) and, unless the work's frozen candidate is exactly this runtime's under that
    number, freeze the landed commit as its candidate."""
    st, caller = ld.st, ld.caller
    ld.fence = st.claim_integration(caller["id"], ld.resource, "land %s" % ld.w["handle"])["fence"]
    integ = integration_of(ld.w)  # as the landing lock found it: nothing of this run changed it
    cand = integ.get("candidate") or {}
    if cand.get("commit") == new and cand.get("runtime") == caller["id"] and not integ.get("released") and \
            cand.get("fence") == ld.fence:
        return
    with st.transaction():
        cur = st.work(ld.w["id"])
        integ = integration_of(cur)
        integ.update({"state": "integrating", "into": ld.into, "candidate": {
            "change": ld.landing.get("change"), "commit": new, "at": now_time(), "runtime": caller["id"],
            "resource": ld.resource, "fence": ld.fence}})
        integ.pop("released", None)
        integ.pop("proof", None)
        st.update_work(ld.w["id"], data={"integration": integ})
        st.audit("work.integration.acquired", caller["id"], ld.w["id"], resource=ld.resource, candidate_commit=new,
                 resumed_landing=True, fence=ld.fence)


def _settle_clone(st, w, landed, environ):
    """After the landing, let the clone know its @ landed, so that the next edit there starts a
    new change instead of amending the landed one (one change ID on two commits: divergent, and
    the next landing fails). In an idle clone whose @ is the landed commit, `jj git fetch`: the commit is then on origin's bookmark, immutable, and jj puts a
    new empty @ on it by itself. A clone something works in is left alone: its agent is told
    (the landing's output). -> "fetched", "in use" or None (nothing to do, or it failed)."""
    path = w.get("path")
    if not path or not os.path.isdir(path):
        return None
    try:
        ids = workspace.head_ids(path, environ=environ)
        if ids["commit"] != landed:
            return None  # edited since the freeze, or already a new change on it: nothing to settle
        if workspace.live_inside(st, w, workspace.process_cwds() or {}):
            return "in use"
        jj(["git", "fetch", "--remote", "origin"], path, environ=environ)
    except store.CoordError:
        store.log_traceback("settle clone %s" % w["id"])  # the landing is done; this is a courtesy
        return None
    return "fetched"


LFS_POINTER = "version https://git-lfs.github.com/spec/v1\n"
LFS_POINTER_MAX = 1024   # bytes: a pointer file is far smaller


def _held_while_working(st, w, caller, old, new, environ):
    """The paths this landing changed that another runtime claimed exclusively while the work
    existed (the lease audit): shell writes are advisory, so this is where an overlap shows.
    -> [{path, holder}] (at most 50), for the landing's report; never blocks."""
    try:
        paths = workspace.changed_names(git_dir_args(w["source"]), w["source"], old, new, environ)
        claims = st.exclusive_claims_since(w["created_at"], paths) if paths else []
    except store.CoordError:
        return []
    seen, found = {}, []
    for c in claims:
        rid = c["runtime"]
        if rid not in seen:
            rt = st.runtime(rid) if rid and rid != caller["id"] else None
            seen[rid] = rt if rt is not None and workspace.authority(st, w, rt) not in ("owner", "successor", "harness") else None
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
    paths = [p for how, p in workspace.name_status(gargs, w["source"], old, new, environ) if how in ("A", "M")]
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
                      "filters, so it would land the bytes themselves" % (w["handle"], named_paths(raw)),
                      "commit those files with git lfs in a git checkout (git lfs track; git add; git commit), or "
                      "leave them out of the change", reason="lfs-content", paths=raw)


def _refuse_peer_leases(st, w, caller, old, new, override, environ):
    """Refuse to move the target over a path of the candidate that another runtime holds
    exclusively (a peer rewriting it in the shared checkout, or in its own clone), unless the
    caller overrides (audited). The work's own agents (owner, successor, its harness, a parked
    holder) and the caller are not peers."""
    names = []
    for p in workspace.changed_names(git_dir_args(w["source"]), w["source"], old, new, environ):
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
            seen[rid] = rt is not None and workspace.authority(st, w, rt) not in ("owner", "successor", "harness") and \
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
        w["handle"], named_paths(paths), ", ".join(holders),
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
    _land_record(st, w, caller, "released", environ, state="landed", finished_at=now_time(), published=False,
                 remote=push, remote_after=remote_at)
    raise Refused("%s; %s of the shared checkout is at %s (landed, proven, nothing held), %s %s is still at %s"
                  % (exc.message, into, new, push, into, remote_at),
                  "once %s accepts it, publish: %s" % (push, rerun_command(w, into, push=push)),
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
            if not (now and workspace.FULL_COMMIT_RE.match(now) and _rev(w["source"], now, environ)
                    and _is_ancestor(w["source"], now, new, environ)):
                raise Refused("remote %s %s is at %s, which %s does not build on; nothing was pushed" % (
                    push, into, now, new), "reconcile %s %s with %s by hand (git -C %s fetch %s), then: %s" % (
                    push, into, into, shlex.quote(w["source"]), push, rerun_command(w, into, push=push)),
                    reason="publish-refused", remote_after=now)
            try:
                _push(st, w, caller, into, push, now, new, environ)
            except Refused as exc:
                if exc.details.get("remote_unchanged"):
                    raise Refused("%s; %s %s is still at %s" % (exc.message, push, into, now),
                                  "once %s accepts it: %s" % (push, rerun_command(w, into, push=push)),
                                  reason="publish-refused", remote_after=now, remote_unchanged=True)
                raise
        landing = _land_record(st, w, caller, "pushed", environ, state="landed", remote=push, remote_after=new,
                               published=True)
    finally:
        _drop_push(st, caller, push, into)
    return _land_result(st.work(w["id"]), landing)


def acquire_command(handle, into=None):
    """The command that takes the integration lock of a work again (re-freezing its candidate)."""
    return "coord work integrate acquire %s --into %s" % (handle, shlex.quote(into) if into else "BOOKMARK")


def land_command(handle, into, push=None, check=None):
    """The landing command to type again, with the options that still apply."""
    bits = ["coord", "work", "integrate", "land", handle, "--into", into]
    if push:
        bits += ["--push", push]
    if check:
        bits += ["--check", check]
    return " ".join(shlex.quote(b) if b != "coord" else b for b in bits)


def queue_command(into, push=None, check=None):
    """The command that lands the queue into `into` (again), with its options."""
    return land_command("--queued", into, push=push, check=check)


def rerun_command(w, into=None, push=None):
    """The command that re-runs the work's recorded landing with the options it was given (its
    --push, unless `push` names the remote this run publishes to, and its own --check; a
    configured coord.landCheck applies by itself). Every hint that repeats a landing uses this."""
    landing = landing_of(w)
    return land_command(w["handle"], into or landing.get("into") or "BOOKMARK", push=push or landing.get("remote"),
                        check=landing.get("check_arg"))


def _land_result(w, landing, already=False):
    return {"work": w["handle"], "landed": landing.get("landed") or landing.get("candidate"),
            "into": landing.get("into"), "remote": landing.get("remote"), "old_target": landing.get("old_target"),
            "rebased": bool(landing.get("rebased")), "check": landing.get("check"),
            "checks": landing.get("checks") or ([landing["check"]] if landing.get("check") else []),
            "check_cwd": landing.get("check_cwd"), "check_set_aside": landing.get("check_set_aside"),
            "held_by_peers": landing.get("held_by_peers") or [],
            "moved_by": landing.get("moved_by"), "steps": [s["step"] for s in landing.get("steps") or []],
            "clone_settled": landing.get("clone_settled"), "already": already,
            "leases_released": landing.get("leases_released") or [], "agent_told": landing.get("agent_told"),
            "agent_nudged": landing.get("agent_nudged")}


def conflict_steps(into, scratch):
    """What the work's agent runs in its clone after a landing into `into` stopped on a conflict:
    after a rebase tried in a scratch copy the clone holds no conflict until it is rebased."""
    if scratch:
        return "jj git fetch; jj rebase -b @ -d %s@origin; resolve (jj resolve --list)" % into
    return "jj status; edit; jj resolve --list"


def _land_conflict(ld, cand, paths, scratch=False):
    """The rebase onto the current target conflicts: record it, tell the owner, stop (nothing moved).
    scratch: the rebase was tried in a scratch copy, so the clone is unchanged and its owner rebases."""
    st, w, caller, into, old = ld.st, ld.w, ld.caller, ld.into, ld.old
    how = conflict_steps(into, scratch)
    body = ("coord: landing %s into %s stopped: rebasing onto %s conflicts in %s. Resolve it in %s "
            "(%s), then tell the integration owner %s; they re-run: %s"
            % (w["handle"], into, old[:12], ", ".join(paths[:20]), w["path"], how, caller["handle"],
               rerun_command(w, into)))
    told, woke = _tell_owner(st, w, caller, body) if not ld.queued else (None, None)
    exc = Refused("landing %s stopped: rebasing onto %s %s conflicts in %s; %s%s, nothing else changed" % (
                  w["handle"], into, old, named_paths(paths), "tried in a scratch copy, the clone was not touched" if scratch
                  else "the clone keeps the conflict for its owner", " (told %s)" % told if told else ""),
                  ("the work's agent rebases and resolves in its clone (%s: %s)%s, then re-run: %s"
                   % (w["path"], how, "; it was told" if told else "", rerun_command(w, into))) if scratch else
                  "resolve in %s (jj resolve --list), then re-run: %s" % (w["path"], rerun_command(w, into)),
                  reason="conflict", paths=paths, owner_told=told, owner_nudged=woke)
    _stop_before_move(ld, "conflict", exc, paths=paths, owner_told=told, scratch=bool(scratch))
    raise exc


def _land_check_failed(ld, cand, result):
    """The check failed on the frozen candidate: record it as the gate result, stop (nothing moved)."""
    st, w, caller, into = ld.st, ld.w, ld.caller, ld.into
    gate = {"state": "failed", "at": now_time(), "by": caller["id"], "by_handle": caller["handle"], "user": workspace.user_name(),
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
        reason="check-failed", exit=result["exit"], command=result["command"])
    _stop_before_move(ld, "check-failed", exc, check_exit=result["exit"])
    raise exc


# --------------------------------------------------------------------------- the landing queue
# `work integrate land --queued --into B` lands every queued work for B, one after another, each
# exactly as `land_work` lands one (it reads B afresh, so each is rebased onto the one before).
# What is the work's own to fix (a conflict, a failed check, a candidate it must change) goes
# back to its agent: out of the queue, with a message naming the steps, nudged when idle. What
# the person decides (dependencies, a gate, a peer's lease, authority) waits in the queue. What
# is the shared checkout's or the remote's (they moved, are dirty, refused a push) stops the
# queue: every later work would meet it too. Nothing is kept in memory between works: a queue
# interrupted (SIGINT) and run again lands what is left, each work once.

QUEUE_STOPS = frozenset(("remote-moved", "dirty-checkout", "target-moved", "fenced", "checkout-busy", "merge-failed",
                         "publish-refused", "publish-ambiguous", "interrupted"))
QUEUE_WAITS = frozenset(("depends", "ungated", "person-lands", "not-authorized", "override-is-the-person-s",
                         "peer-leased", "other-host"))
SENT_BACK_TAIL = 600   # characters of a failed check's output a sent-back message carries


def land_queue(st, *, caller, into, environ, push=None, check=None, batch=None):
    """Land every work queued for `into`, in queue_order, each as land_work does (checked, moved,
    pushed with --push, proven, released); with batch N > 1, N at a time (_land_batch).
    -> {into, works: [{work, outcome: landed|sent-back|waiting|stopped|interrupted, ...}],
    batches: [{works, check_runs}], check_runs, landed, sent_back, waiting, stopped}."""
    into = workspace.check_bookmark(into)
    if batch is not None:
        batch = store.check_int(batch, "--batch", 1, 1000)
    if push is not None and (not push or push.startswith("-")):
        raise UsageError("--push %r is not a remote name" % push, "coord work integrate land --queued --into main "
                         "--push origin")
    order = review.queue_order(st, into)
    if order and not workspace.is_person(caller) and not workspace.agents_land(order[0]["source"], environ):
        if store.person_uid(caller) is not None:
            raise workspace.user_without_terminal(caller, "land the queue into %s" % into, into, "land")
        raise Refused("%s may not land the queue into %s: the person lands queued work, agents queue it"
                      % (caller["handle"], into), "coord work integrate queue --into %s shows it; the person "
                      "lands it" % into, reason="person-lands", action="land")
    results, tried = [], set()
    while True:
        order = [w for w in review.queue_order(st, into) if w["id"] not in tried]
        if not order:
            break
        exc = workspace.other_host_refusal(st, order[0], queue_command(into, push=push, check=check))
        if exc is not None:  # its clone and shared checkout are on that host: its queue there lands it
            tried.add(order[0]["id"])
            results.append({"work": order[0]["handle"], "outcome": "waiting", "reason": "other-host",
                            "message": exc.message, "hint": exc.hint})
            continue
        fresh = [w for w in order[:batch or 1] if landing_of(w).get("state") not in LAND_RESUMABLE
                 and not workspace.other_host(st, w)]
        if batch and batch > 1 and fresh and fresh[0] is order[0]:
            tried |= _land_batch(st, caller, fresh, into, environ, push, check, results)
        else:
            tried.add(order[0]["id"])
            results.append(_land_queued(st, caller, order[0], into, environ, push, check))
        if results and results[-1]["outcome"] in ("stopped", "interrupted"):
            break
    batches = [r for r in results if r["outcome"] == "batch"]
    results = [r for r in results if r["outcome"] != "batch"]
    count = lambda what: sum(1 for r in results if r["outcome"] == what)  # noqa: E731
    stop = results[-1] if results and results[-1]["outcome"] in ("stopped", "interrupted") else None
    return {"into": into, "remote": push, "works": results, "batches": batches,
            "check_runs": sum(b["check_runs"] for b in batches) if batch and batch > 1 else None,
            "landed": count("landed"),
            "sent_back": count("sent-back"), "waiting": count("waiting"),
            "stopped": stop and {"work": stop["work"], "outcome": stop["outcome"], "reason": stop.get("reason")}}


def _land_queued(st, caller, w, into, environ, push, check):
    """One work of the queue: land it, or say what became of it (see the section's comment)."""
    queued_at = integration_of(w).get("queued_at")
    try:
        r = land_work(st, caller=caller, handle=w["id"], into=into, environ=environ, push=push, check=check,
                      queued=True)
    except KeyboardInterrupt:
        _queue_interrupted(st, caller, w, into, push, queued_at)
        return {"work": w["handle"], "outcome": "interrupted", "reason": "interrupted",
                "message": "interrupted; run the same command again to land what is left"}
    except store.CoordError as exc:
        return _queue_refusal(st, caller, w, into, exc, queued_at, push, check)
    return dict(r, outcome="landed")


def _queue_refusal(st, caller, w, into, exc, queued_at, push=None, check=None):
    """A queued work's landing refused or failed: stop the queue, keep it waiting, or send it
    back to its agent (QUEUE_STOPS, QUEUE_WAITS, anything else that is its own to fix)."""
    reason = exc.details.get("reason") if isinstance(exc, Refused) else None
    out = {"work": w["handle"], "reason": reason or exc.kind, "message": store.clean_text(exc.message, 2000),
           "hint": exc.hint}
    if reason in QUEUE_STOPS or not isinstance(exc, Refused):
        _requeue(st, caller, w, into, queued_at)
        rerun = queue_command(into, push=push, check=check)
        steps = _RERUN_RE.sub("", exc.hint or "").strip()
        return dict(out, outcome="stopped", hint="%s%sthen re-run: %s" % (steps, "; " if steps else "", rerun))
    if reason in QUEUE_WAITS:
        _requeue(st, caller, w, into, queued_at)
        return dict(out, outcome="waiting")
    with st.transaction():
        cur = st.work(w["id"])
        integ = integration_of(cur)
        if integ["state"] == "queued":  # refused before it was acquired: it leaves the queue all the same
            integ["state"] = "none"
        integ["sent_back"] = {"at": now_time(), "by": caller["id"], "reason": out["reason"]}
        st.update_work(w["id"], data={"integration": integ})
        st.audit("work.queue.sent-back", caller["id"], w["id"], into=into, reason=out["reason"])
    told, woke = _tell_owner(st, w, caller, _sent_back_body(w, into, exc))
    return dict(out, outcome="sent-back", told=told, nudged=woke)


def _requeue(st, caller, w, into, queued_at):
    """Put a work whose landing stopped (its integration lock released) back in the queue at its
    old place: the queue stopped or it waits for the person, not for its agent."""
    with st.transaction():
        cur = st.work(w["id"])
        integ = integration_of(cur)
        if integ["state"] != "lock-released":
            return
        integ.update({"state": "queued", "into": into, "queued_at": queued_at or now_time()})
        st.update_work(w["id"], data={"integration": integ})
        st.audit("work.queued", caller["id"], w["id"], into=into, requeued=True)


def _queue_interrupted(st, caller, w, into, push, queued_at):
    """SIGINT while the queue landed `w`: a landing that had not moved the target yet is recorded
    stopped, its locks released and the work put back in its place; one that had moved it stays
    as it is, and the next run finishes it (land_work's re-run)."""
    try:
        cur = st.work(w["id"])
        landing = landing_of(cur)
        if "moved" in [s["step"] for s in landing.get("steps") or []] or landing.get("state") != "running":
            return
        ld = Landing(st, caller, cur, into, None, push=push)
        _stop_before_move(ld, "interrupted", Refused("interrupted before %s moved" % into))
        if push:
            _drop_push(st, caller, push, into)
        _requeue(st, caller, w, into, queued_at)
    except (store.CoordError, KeyboardInterrupt):
        store.log_traceback("queue interrupted at %s" % w["id"])


# `--batch N`: N queued works at once. Each is acquired, fetched and refused as a single landing
# would be, then all are rebased one onto the other in one scratch checkout (cherry-picks, as a
# landing whose clone is in use), and the checks run once on the combined result. When they
# fail, the batch is bisected on its prefixes (the first k works), as merge queues do, to find the
# first work whose addition breaks them: that one goes back to its agent, the works before it
# land (their prefix passed), the works after it go back to their place and the queue goes on
# with them. The target moves once, to the last landed work; then each landed work is pushed
# (from the one before it, so a re-run after a kill finishes each alone), proven and released
# by `_land_after_move`, with its own landing and proof record.

def _land_batch(st, caller, works, into, environ, push, check, results):
    """Land `works` (the next ones in queue order) as one batch; appends to `results` what became
    of each work it finished with. -> the IDs of the works it finished with (a work sent back to
    its place after a bisection is not one of them)."""
    source, done = works[0]["source"], set()
    started = []
    with workspace.repo_lock(source, _lock_dir(st, works[0]), "land-" + into):
        old = _rev(source, "refs/heads/" + into, environ)
        try:
            with workspace.held_reads():  # the works start one after another and nothing moves meanwhile
                for w in works:
                    ld = Landing(st, caller, st.work(w["id"]), into, environ, push=push, check=check, queued=True)
                    ld.queued_at = integration_of(w).get("queued_at")
                    started.append(ld)
                    ld.cand = True
                    done.add(w["id"])
                    if _batch_step([ld], results, _batch_ready, old) is not None:
                        return done
                # Each step for every work before the next: the snapshots side by side, one fetch.
                _snapshot_ahead([ld for ld in started if ld.cand])
                stopped = _batch_step(started, results, _land_acquire)
                if stopped is None:
                    fetched = fetch_candidates([ld for ld in started if ld.cand], old, environ)
                    stopped = _batch_step(started, results, _batch_refusals, old, fetched)
                if stopped is not None:
                    return done | stopped
            ready = [ld for ld in started if ld.cand]
            if not ready:
                return done
            with _Scratch(ready[0].w, environ) as scratch:
                chain = _batch_chain(ready, old, scratch, results)
                passed, culprit, failed, runs = _batch_check(chain, scratch)
            results.append({"outcome": "batch", "works": [ld.w["handle"] for ld in ready], "check_runs": runs})
            if culprit is not None:
                _batch_culprit(chain, passed, culprit, failed, results, done)
            return done | _batch_land(chain[:passed], old, results)
        except KeyboardInterrupt:
            for ld in started:
                _queue_interrupted(st, caller, ld.w, into, push, ld.queued_at)
            results.append({"work": started[-1].w["handle"] if started else "-", "outcome": "interrupted",
                            "reason": "interrupted", "message": "interrupted; run the same command again to "
                            "land what is left"})
            return done


def _batch_step(lds, results, step, *args):
    """One step of a batch's start up to its rebase (_batch_ready, _land_acquire, _batch_refusals)
    for each work of `lds` still in the batch: step(ld, *args) -> ld.cand. What a single landing
    refuses refuses a work here, with its outcome appended to `results`. -> None, or, when the
    queue stopped at a work, what _land_batch returns for the works started (put back)."""
    for ld in [l for l in lds if l.cand]:
        try:
            ld.cand = step(ld, *args)
        except store.CoordError as exc:
            ld.cand = None
            _batch_refused(ld, exc, results)
            if results[-1]["outcome"] == "stopped":
                return _batch_requeue([l for l in lds if l.cand], "the queue stopped at %s" % ld.w["handle"])
    return None


def _batch_ready(ld, old):
    """Authority and readiness; -> True."""
    st, w, caller, environ = ld.st, ld.w, ld.caller, ld.environ
    workspace.authorize(st, w, caller, "land", False, into=ld.into)
    workspace.refuse_state(w, workspace.UNUSABLE)
    ld.check, ld.checks = _land_checks(w, ld.check_arg, environ)
    _refuse_unready(st, w, ld.checks)
    ld.old = old
    return True


def _snapshot_ahead(lds):
    """Take the snapshots the batch's acquires read (one jj call in each clone, tens of
    milliseconds) side by side, one thread per core, and hold them for acquire(): each is still
    what is on disk at the batch's start, before its integration lock. A snapshot that fails here
    is left to acquire, which takes it again and says why."""
    def take(ld):
        try:
            return _snapshot(ld.w, workspace.verified_path(ld.w), ld.environ)
        except store.CoordError:
            return None
    if len(lds) < 2:
        return
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(lds), os.cpu_count() or 1)) as pool:
        taken = list(pool.map(take, lds))
    for ld, got in zip(lds, taken):
        if got is not None:
            workspace.held(("snapshot", ld.w["id"]), lambda: got)


def _batch_refusals(ld, old, fetched):
    """The fetched candidate against what the move and the push would meet (the remote is read
    for the batch's first work only, since it is the same for all); -> the candidate."""
    cand, environ = ld.cand, ld.environ
    if ld.w["id"] not in fetched:
        fetch_candidate(ld.w, cand["commit"], environ)
    ld.record("fetched", candidate=cand["commit"])
    stale = not _is_ancestor(ld.source, old, cand["commit"], environ)
    first = fetched.get(None) == ld.w["id"]
    _refuse_early(ld.w, ld.into, ld.push if first else None, old, cand["commit"], environ, stale)
    _refuse_installed(ld.st, ld.w, ld.caller, ld.into, old, cand, ld.override, environ)
    _refuse_peer_leases(ld.st, ld.w, ld.caller, old, cand["commit"], ld.override, environ)
    _refuse_lfs_content(ld.w, old, cand["commit"], environ)
    return cand


def _batch_refused(ld, exc, results):
    """One work of a batch refused or failed: stop its landing (when it began) and say what becomes
    of it, as the queue does for a single landing."""
    if ld.fence is not None and not ld.stopped:
        _stop_before_move(ld, "refused" if isinstance(exc, Refused) else "failed", exc)
    results.append(_queue_refusal(ld.st, ld.caller, ld.w, ld.into, exc, ld.queued_at, ld.push, ld.check_arg))


def _batch_requeue(lds, why):
    """Stop the landings of `lds` (nothing moved for them) and put each back at its place."""
    for ld in lds:
        if ld.fence is not None and not ld.stopped:
            _stop_before_move(ld, "requeued", Refused(why))
        _requeue(ld.st, ld.caller, ld.w, ld.into, ld.queued_at)
    return set()


def _batch_chain(ready, old, scratch, results):
    """Rebase each ready work onto the one before it (the first onto `old`) in the scratch
    checkout; one that conflicts goes back to its agent and the chain goes on without it. The
    rebased commits are fetched in one go, then each is frozen as its work's candidate.
    -> [(Landing, candidate)] in order, each recorded `rebased` with the one before as its old target."""
    cur, picked = old, []
    for ld in ready:
        new = None
        try:
            # Read in the scratch checkout: the commits rebased before are fetched only after the loop.
            code, err = workspace.ancestry([], scratch.path, cur, ld.cand["commit"], ld.environ)
            if code not in (0, 1):
                raise workspace.ToolError(["git", "merge-base", "--is-ancestor"], code, err)
            if code == 1:
                new, paths = scratch.rebase(cur, ld.cand["commit"], checkout=False)
                if paths:
                    ld.old = cur
                    _land_conflict(ld, ld.cand, paths, scratch=True)
        except store.CoordError as exc:
            _batch_refused(ld, exc, results)
            continue
        picked.append((ld, new, cur))
        cur = new or ld.cand["commit"]
    rebased = [(ld.w, new) for ld, new, _ in picked if new]
    try:
        if rebased:
            _fetch_from_scratch(picked[0][0], scratch, rebased)
    except store.CoordError as exc:  # the first rebased work stops here; those after it build on it
        first = next(i for i, (_, new, _) in enumerate(picked) if new)
        _batch_refused(picked[first][0], exc, results)
        _batch_requeue([ld for ld, _, _ in picked[first + 1:]],
                       "the batch stopped at %s" % picked[first][0].w["handle"])
        picked = picked[:first]
    chain = []
    for i, (ld, new, before) in enumerate(picked):
        try:
            cand = _freeze_scratch(ld, ld.cand, new, scratch, "batch", fetched=True) if new else ld.cand
            ld.record("rebased", candidate=cand["commit"], rebased=new is not None, where="batch", old_target=before)
        except store.CoordError as exc:
            _batch_refused(ld, exc, results)
            _batch_requeue([l for l, _, _ in picked[i + 1:]], "the batch stopped at %s" % ld.w["handle"])
            break
        chain.append((ld, cand))
    return chain


def _batch_check(chain, scratch):
    """Run the checks on the chain's combined result; when they fail, bisect its prefixes.
    -> (how many works from the start passed, the index of the first that broke them or None,
    its failed check result, how many check runs it took)."""
    runs = [0]

    def failing(k):  # the first failed check of the first k works' result, or None
        ld = chain[k - 1][0]
        scratch.checkout(chain[k - 1][1]["commit"])
        for command in ld.checks:
            runs[0] += 1
            result = _run_check(ld.w, command, ld.environ, cwd=scratch.path)
            if result["exit"] != 0:
                return result
        return None

    if not chain or not chain[-1][0].checks:
        return len(chain), None, None, 0
    bad = failing(len(chain))
    if bad is None:
        return len(chain), None, None, runs[0]
    lo, hi = 0, len(chain)  # the first lo pass (none, trivially), the first hi fail
    while hi - lo > 1:
        mid = (lo + hi) // 2
        got = failing(mid)
        if got is None:
            lo = mid
        else:
            hi, bad = mid, got
    return lo, hi - 1, bad, runs[0]


def _batch_culprit(chain, passed, culprit, failed, results, done):
    """The work whose addition broke the checks goes back to its agent; those after it go back to
    their place in the queue, for the next batch."""
    ld, cand = chain[culprit]
    try:
        _land_check_failed(ld, cand, failed)
    except Refused as exc:
        results.append(_queue_refusal(ld.st, ld.caller, ld.w, ld.into, exc, ld.queued_at, ld.push, ld.check_arg))
    later = [l for l, _ in chain[culprit + 1:]]
    _batch_requeue(later, "the batch's check failed with %s; it lands in the next batch" % ld.w["handle"])
    done.difference_update(l.w["id"] for l in later)


def _batch_land(chain, old, results):
    """Move the target once, from `old` to the last work of the chain, then finish each work as a
    single landing does after its move. -> the IDs finished."""
    if not chain:
        return set()
    first, (last, tip) = chain[0][0], chain[-1]
    st, caller, into, environ = first.st, first.caller, first.into, first.environ
    handles = [ld.w["handle"] for ld, _ in chain]
    try:
        for ld, cand in chain:
            if ld.checks:
                _gate_from_check(st, ld.w, caller, ld.checks, {"commit": tip["commit"]})
            ld.record("checked", check=ld.check, checks=ld.checks or None, batch=handles, batch_tip=tip["commit"],
                      check_cwd="a scratch checkout of the batch's combined result")
        if first.push:
            first.old = old
            _take_push(first)
        confirm_fence(st, first.w, caller, first.frozen(chain[0][1]["commit"]), "move %s" % into, first.rerun())
        how = _move_target(first.w, into, old, tip["commit"], environ)
    except store.CoordError as exc:
        if first.push:
            _drop_push(st, caller, first.push, into)
        _batch_requeue([ld for ld, _ in chain[1:]], "the batch stopped at %s" % first.w["handle"])
        _batch_refused(first, exc, results)
        return {first.w["id"]}
    for ld, cand in chain:
        ld.record("moved", moved_by=how, landed=cand["commit"])
    if first.push:  # one push for the batch; each work's own step then finds it there (batch_tip)
        try:
            _push(st, first.w, caller, into, first.push, old, tip["commit"], environ,
                  fence=first.frozen(chain[0][1]["commit"]))
        except Refused:
            pass  # each work's own step below reads the remote again and says what happened
        else:
            for ld, _ in chain:
                ld.remote_now = tip["commit"]
    finished = set()
    for ld, cand in chain:
        finished.add(ld.w["id"])
        try:
            results.append(dict(_land_after_move(ld, moved=True), outcome="landed"))
        except store.CoordError as exc:
            results.append(_queue_refusal(st, caller, ld.w, into, exc, ld.queued_at, ld.push, ld.check_arg))
            break
    return finished


_RERUN_RE = re.compile(r"[;,]?\s*(then )?re-run\b.*$", re.S)


def _sent_back_body(w, into, exc):
    """The message to a work's agent when the queue sends its work back: what stopped it and the
    steps that are the agent's (never the landing, which is the person's), then enqueue again."""
    what = exc.message
    steps = _RERUN_RE.sub("", exc.hint or "").strip()
    if exc.details.get("reason") == "check-failed":
        head, _, tail = what.partition("\n")
        what = head.rstrip(":") + ("; its output ended:\n%s" % tail.strip()[-SENT_BACK_TAIL:] if tail.strip() else "")
        steps += " (run the check there: %s)" % exc.details.get("command")
    return ("coord: the landing queue into %s sent back work %s: %s\nSteps: %s%sthen queue it again: coord work "
            "integrate enqueue %s --into %s" % (into, w["handle"], store.clean_text(what, 2500),
                                                store.clean_text(steps, 800), "; " if steps else "", w["handle"], into))


def queue_lines(r):
    """The text of `land --queued`: one line per work, then a summary."""
    lines = []
    for x in r["works"]:
        if x["outcome"] == "landed":
            lines.append("%s landed %s on %s%s" % (x["work"], x["landed"], x["into"],
                                                   " and %s/%s" % (x["remote"], x["into"]) if x["remote"] else ""))
            continue
        first = store.clean_text(x["message"].splitlines()[0].rstrip(":") if x["message"] else x["reason"], 200)
        if x["outcome"] == "sent-back":
            told = "; told %s%s" % (x["told"], ", nudged" if x.get("nudged") is True else "") if x.get("told") else \
                "; nobody to tell"
            lines.append("%s sent back (%s): %s%s" % (x["work"], x["reason"], first, told))
        elif x["outcome"] == "waiting":
            lines.append("%s waits (%s): %s" % (x["work"], x["reason"], first))
        else:
            lines.append("%s %s the queue (%s): %s" % (x["work"], x["outcome"] == "interrupted" and "interrupted"
                                                       or "stopped", x["reason"], first))
            if x.get("hint"):
                lines.append(store.hint("next: %s" % x["hint"]))
    summary = "queue into %s: %d landed, %d sent back, %d waiting" % (r["into"], r["landed"], r["sent_back"],
                                                                       r["waiting"])
    if r.get("check_runs") is not None:
        summary += "; %d check run%s in %d batch%s" % (r["check_runs"], "" if r["check_runs"] == 1 else "s",
                                                       len(r["batches"]), "" if len(r["batches"]) == 1 else "es")
    if r["stopped"]:
        summary += "; %s at %s, run it again to go on" % (r["stopped"]["outcome"], r["stopped"]["work"])
    return lines + [summary]


# --------------------------------------------------------------------------- candidate refs
# Each frozen candidate is fetched into the canonical repository under a private ref, so the
# preview and the landing read it there (review.py reads; this module moves).

CANDIDATE_REFS = "refs/coord/work/"   # private refs in the canonical repository: one per work


# A fetch into the canonical repository of commits named by ID (served even if unadvertised),
# writing objects and the named refs only, with automatic gc and maintenance off.
FETCH_BY_ID = ["-c", "gc.auto=0", "-c", "maintenance.auto=false", "fetch", "--quiet", "--no-tags",
               "--no-write-fetch-head", "--no-recurse-submodules",
               "--upload-pack=git -c uploadpack.allowAnySHA1InWant=true upload-pack"]


def candidate_ref(work_id):
    return CANDIDATE_REFS + work_id


def fetch_candidate(w, commit, environ=None):
    """Bring a clone's `commit` into the canonical repository's object store at the private ref
    refs/coord/work/<work id>; -> that ref. Writes objects and that ref only: never the
    canonical working copy, index, HEAD or a branch (jj imports no refs/coord/ ref)."""
    commit = workspace.full_commit(commit, "candidate")
    source = w["source"]
    gargs = git_dir_args(source)
    ref = candidate_ref(w["id"])
    # already there: a native workspace shares the store, or it was fetched before
    if workspace.has_commit(gargs, source, commit, environ):
        git(gargs + ["update-ref", ref, commit], source, environ)
    else:
        git(gargs + FETCH_BY_ID + [workspace.verified_path(w), "+%s:%s" % (commit, ref)], source, environ)
        workspace.fetched(gargs, source, [commit])
    return ref


def fetch_candidates(lds, old, environ=None):
    """A batch's candidates (the Landings `lds`, each with its frozen cand) into the canonical
    repository in one git fetch, each at its private ref, from a throwaway repository whose
    alternates are the clones' object stores; then, in one read, which of them have `old` below
    them (remembered as merge-base --is-ancestor would answer). A work whose clone has no store of
    its own (a native workspace), or a batch whose fetch fails, is left to fetch_candidate, which
    names the work that failed. -> {work id: ref} of the works fetched, and None: the first's ID."""
    out = {None: lds[0].w["id"]} if lds else {}
    if len(lds) < 2:
        return out
    source = lds[0].source
    gargs = git_dir_args(source)
    own = []
    for ld in lds:
        try:
            d = ld.w["data"].get("kind") != "native" and review.own_objects(workspace.verified_path(ld.w))
        except store.CoordError:
            continue  # fetch_candidate refuses it with the reason
        if d and not os.path.islink(d):
            own.append((ld, d))
    if len(own) < 2:
        return out
    commits = [workspace.full_commit(ld.cand["commit"], "candidate") for ld, _ in own]
    refs = [candidate_ref(ld.w["id"]) for ld, _ in own]
    try:
        with review.Overlay([d for _, d in own], environ, sha256=len(commits[0]) == 64) as ov:
            git(gargs + FETCH_BY_ID + [ov.dir] + ["+%s:%s" % pair for pair in zip(commits, refs)], source, environ)
        _, have, _ = git(gargs + ["for-each-ref", "--format=%(refname) %(objectname)", "--contains", old] + refs,
                         source, environ)
    except store.CoordError:
        return out
    workspace.fetched(gargs, source, commits)
    below = dict(line.split(" ", 1) for line in have.splitlines() if " " in line)
    for ref, commit in zip(refs, commits):
        workspace.remember_ancestry(gargs, source, old, commit, 0 if below.get(ref) == commit else 1)
    out.update((ld.w["id"], ref) for (ld, _), ref in zip(own, refs))
    return out


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


# --------------------------------------------------------------------------- remote

def verify_remote(*, root, work_of, remote, bookmark, expect, environ=None):
    """Read REMOTE's bookmark over the wire (git ls-remote) and require the expected full commit;
    -> {ok, remote, bookmark, expected, actual}, else Refused carrying the same fields.
    work_of: id -> work record, consulted only when root is a managed clone."""
    expect = workspace.full_commit(expect, "--expect")
    bookmark = workspace.check_bookmark(bookmark)
    if not remote or remote.startswith("-"):
        raise UsageError("remote %r is not a remote name or URL" % remote, "coord remote verify origin main --expect C")
    repo = workspace.canonical_root(root, work_of)
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


@workspace.by_task
def cmd_inspect(ctx, args):
    w = workspace.target_work(ctx, args.handle, default_ok=True)
    import launch  # the harness's window and processes: only for `work inspect`
    facts = launch.inspect_work(ctx.db, work=w, environ=ctx.environ, observe=ctx.verbose)
    data = {"ok": True, "work": workspace.public_work(w, ctx.db)}
    if "observed" in facts:
        data["observed"] = facts["observed"]
    if facts.get("headless"):
        data["headless"] = facts["headless"]
    lines = launch.inspect_lines(facts, ctx.verbose, landing=landing_lines(w))
    data["space"] = facts.get("space")
    # On a full disk the clone's last snapshot is stale (jj cannot write a new one): no preview from it.
    data["preview"] = None if data["space"] else review.inspect_preview(w, ctx.environ)
    if data["preview"]:
        lines.insert(1, review.preview_line(data["preview"]))
    return 0, data, "\n".join(lines)


def cmd_enqueue(ctx, args):
    return 0, workspace.ok_data(enqueue(ctx.db, caller=ctx.caller(), handle=args.handle, into=args.into,
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
    text = "candidate %s\n%s" % (r["candidate"]["commit"], review.preview_line(r["preview"]))
    if r["waiting_on"]:
        text += "\nnote: depends on %s, not integrated yet" % ", ".join(r["waiting_on"])
    return 0, workspace.ok_data(r), text


def cmd_prove(ctx, args):
    return 0, workspace.ok_data(prove(ctx.db, caller=ctx.caller(), handle=args.handle, target=args.target,
                        environ=ctx.environ)), None


def cmd_land(ctx, args):
    if args.queued or args.batch is not None:
        return cmd_land_queue(ctx, args)
    if not args.handle:
        raise UsageError("name the work to land, or --queued for every queued work",
                         "coord work integrate land WORK --into %s, or: %s" % (args.into, queue_command(args.into)))
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
    if r.get("agent_told") and not r["already"]:
        text += "\ntold %s%s" % (r["agent_told"], ", its leases on %s released" % named_paths(r["leases_released"])
                                  if r.get("leases_released") else "")
    if r.get("clone_settled") == "in use" and not r["already"]:
        text += "\nbefore the next edit in the clone: jj git fetch (else the edit amends the landed change)"
    return 0, workspace.ok_data(r), text


def cmd_land_queue(ctx, args):
    """`land --queued`: exit 0 when the queue ran through (works sent back included), 3 when a
    refusal of the shared checkout's or the remote's stopped it, 130 when interrupted."""
    if args.batch is not None and not args.queued:
        raise UsageError("--batch lands queued works together: it needs --queued", queue_command(args.into))
    if args.handle or args.override:
        raise UsageError("--queued lands every queued work: no WORK and no --override with it",
                         queue_command(args.into, push=args.push, check=args.check))
    r = land_queue(ctx.db, caller=ctx.caller(), into=args.into, environ=ctx.environ, push=args.push, check=args.check,
                   batch=args.batch)
    code = 0
    if r["stopped"]:
        code = 130 if r["stopped"]["outcome"] == "interrupted" else store.EXIT_REFUSED
    return code, dict(r, ok=code == 0), "\n".join(queue_lines(r))


def landing_lines(w):
    """`work inspect` lines for a landing that is under way or stopped (none once landed)."""
    landing = landing_of(w)
    if not landing or landing.get("state") == "landed":
        return []
    state = "under way or interrupted" if landing.get("state") == "running" else landing.get("state")
    line = "landing into %s: %s after step %s" % (landing.get("into"), state, landing.get("step"))
    if landing.get("paths"):
        line += "; conflicts in %s" % named_paths(landing["paths"])
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
    return 0, workspace.ok_data(r), text


def cmd_remote_verify(ctx, args):
    return 0, verify_remote(root=ctx.root, work_of=lambda wid: ctx.db.work(wid), remote=args.remote,
                            bookmark=args.bookmark, expect=args.expect, environ=ctx.environ), None


# =========================================================================== parser registration

def _parse_inspect(ws, both):
    p = ws.add_parser("inspect", parents=both, help="one work record (--verbose adds exact IDs)")
    p.add_argument("handle", nargs="?", metavar="HANDLE", help="%s; default: $COORD_WORK_ID, when you own it"
                   % workspace.BY_TASK_HELP)
    p.set_defaults(func=cmd_inspect)


def _parse_integrate(ws, both):
    integ = ws.add_parser("integrate", parents=both[:1], help="one integration owner at a time: acquire, prove, "
                          "release; queue")
    isub = integ.add_subparsers(dest="integrate_command", metavar="STEP")
    p = isub.add_parser("acquire", parents=both, help="take integration/BOOKMARK and freeze the candidate")
    p.add_argument("handle", metavar="HANDLE")
    p.add_argument("--into", required=True, metavar="BOOKMARK")
    workspace.override_argument(p)
    p.set_defaults(func=cmd_acquire)
    p = isub.add_parser("prove", parents=both, help="record proof: candidate is an ancestor of the target commit")
    p.add_argument("handle", metavar="HANDLE")
    p.add_argument("--target", required=True, metavar="COMMIT", help="full commit ID on the bookmark")
    p.set_defaults(func=cmd_prove)
    p = isub.add_parser("release", parents=both, help="release the integration lock (not evidence)")
    p.add_argument("handle", metavar="HANDLE")
    p.set_defaults(func=cmd_integrate_release)
    p = isub.add_parser("land", parents=both, help="land the work (or with --queued every queued work, in "
                        "order): freeze, rebase if stale, check, move the bookmark, push, prove, release")
    p.add_argument("handle", metavar="HANDLE", nargs="?")
    p.add_argument("--queued", action="store_true", help="land every work queued for --into, in queue order; "
                   "what conflicts or fails its check goes back to its agent, the rest lands")
    p.add_argument("--batch", metavar="N", help="with --queued: check N works together (their combined result); "
                   "when that fails, bisect to the work that broke it")
    p.add_argument("--into", required=True, metavar="BOOKMARK")
    p.add_argument("--push", metavar="REMOTE", help="also publish to this remote of the shared checkout")
    p.add_argument("--check", metavar="CMD", help="also run this on the frozen candidate, after git config %s of "
                   "the canonical repository (which always runs when set)" % LAND_CHECK_CONFIG)
    workspace.override_argument(p)
    p.set_defaults(func=cmd_land)
    p = isub.add_parser("enqueue", parents=both, help="join the visible queue (grants nothing)")
    p.add_argument("handle", metavar="HANDLE")
    p.add_argument("--into", required=True, metavar="BOOKMARK")
    workspace.override_argument(p)
    p.set_defaults(func=cmd_enqueue)
    p = isub.add_parser("queue", parents=both, help="show queued work in order, with dependencies")
    p.add_argument("--into", metavar="BOOKMARK")
    p.set_defaults(func=cmd_queue)


# The `work` subcommands this module builds and handles (coord chooses the module; see workspace.register).
PARSERS = {"inspect": _parse_inspect, "integrate": _parse_integrate}


def register_remote(sub, common, ident):
    """Add `remote verify` to coord's top-level subparsers."""
    both = [common, ident]
    remote = sub.add_parser("remote", parents=[common], help="verify a remote bookmark authoritatively")
    rs = remote.add_subparsers(dest="remote_command", metavar="SUBCOMMAND")
    p = rs.add_parser("verify", parents=both, help="exit 0 only when REMOTE's BOOKMARK is exactly --expect")
    p.add_argument("remote", metavar="REMOTE")
    p.add_argument("bookmark", metavar="BOOKMARK")
    p.add_argument("--expect", required=True, metavar="COMMIT", help="full commit ID")
    p.set_defaults(func=cmd_remote_verify)
