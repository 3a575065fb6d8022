"""The live view of the fleet: every work and agent with the state its harness's own events give
(store.Store.agent_state), read in one pass over the records, one tmux read per server and no
clone; `coord status` prints it once, `coord watch` keeps it on screen (curses), redraws within a
second of a hook event and lets the person act on the row under the cursor by running the same
coord command as typed; the person's watch also sends the notices (docs/watch.md).

Usage: `coord status [--changes]`, `coord watch [--once] [--notify-only]`.
"""

import os
import sys
import time

import store
from store import CoordError

WIDTH = 100            # columns a frame and every `status` line fit in
WAKE_EVERY = 0.2       # seconds between two looks at the wake-up sources (a stat, PRAGMA data_version)
REDRAW_EVERY = 5.0     # seconds between two reads with no wake-up at all (ages, stuck, dead windows)
NOTICE_BURST = 3       # notices sent at most per NOTICE_WINDOW seconds; the rest are summed in one
NOTICE_WINDOW = 10.0
NOTIFY_KEY = "coord.notify"  # git config key (the shared checkout's own): the person's notice command


def fit(line, width=WIDTH):
    """`line` cut to `width` columns (an ellipsis marks the cut)."""
    return line if len(line) <= width else line[:width - 1] + "\u2026"


def age(seconds):
    seconds = max(0, int(seconds or 0))
    if seconds < 120:
        return "%ds" % seconds
    if seconds < 7200:
        return "%dm" % (seconds // 60)
    if seconds < 172800:
        return "%dh" % (seconds // 3600)
    return "%dd" % (seconds // 86400)


# --------------------------------------------------------------------------- the fleet, read once

def fleet(st, environ=None, changes=False, archived=False, now=None, into=None):
    """{"agents": [...], "work": [...], "archived_hidden": n}: one read of the records. Each
    agent row has its state, since and tool; each work row its agent's state (done once queued
    or landed, gone once its window is), its landing and, with `changes`, the clone's
    dirty/ahead/behind (workspace.status_facts: a few jj and git reads per work)."""
    environ = os.environ if environ is None else environ
    now = store.now() if now is None else now
    runtimes = st.live_runtimes()
    everything = st.works()
    works = [w for w in everything if archived or w["state"] != "archived"]
    turns = st.turns()
    stuck = store.env_number(environ, "COORD_STUCK_AFTER", store.Store.STUCK_AFTER, (1.0, 1e7), strict=False)
    held = {}
    for l in st.all_leases():
        held.setdefault(l["runtime"], []).append(l["resource"])
    unacked = st.unacked_counts()
    in_work = st.works_of_runtimes(runtimes)

    def state_of(rt):
        act = store.Store.activity(rt["conversation"], environ) if rt else None
        return store.Store.agent_state(rt, turns.get(rt["id"]) if rt else None, act, now, stuck)

    agents = []
    for r in runtimes:
        w = in_work.get(r["id"])
        state, since, tool = state_of(r)
        agents.append({"handle": r["handle"], "id": r["id"], "harness": r["harness"] or None,
                       "subagent": bool(r["agent_id"]), "work": w["handle"] if w else None,
                       "task": w["task"] if w else None, "cwd": r["cwd"], "state": state, "since": since,
                       "tool": tool, "heartbeat_age": round(max(0.0, now - (r["heartbeat_at"] or now)), 1),
                       "leases": held.get(r["id"], []), "unacked": unacked.get(r["id"], 0)})
    windows, hosts = {}, {}
    if works:
        import workspace  # the work code, the jj and tmux reads only when there is work to show
        windows, hosts = _windows(works), workspace.hosts_shown(st)
    rows = [_work_row(st, w, environ, windows.get(w["id"]), held, unacked, state_of, changes and (into or True),
                      hosts.get(w["id"])) for w in works]
    return {"agents": agents, "work": rows, "archived_hidden": len(everything) - len(works), "at": now}


def _windows(works):
    """{work id: window state} for the works with a recorded window, one tmux read per server."""
    import session
    recs = {w["id"]: w["data"]["tmux"] for w in works
            if w["data"].get("tmux") and w["state"] not in ("removed", "failed")}
    return session.windows_state(recs) if recs else {}


def _work_row(st, w, environ, window, held, unacked, state_of, changes, host):
    """One work's row of fleet()."""
    import workspace
    owner = workspace.owner_of(st, w)
    first = st.runtime(w["runtime"]) if w["runtime"] else None
    try:
        rid = st.work_recipient(w)["id"]
    except CoordError:
        rid = None
    conv, harness = store.work_conversation(w)
    agent = (st.find_conversation_runtime(conv) or st.last_runtime_of(conv)) if conv else None
    agent = st.successor(agent) if agent else None
    holder = agent["id"] if agent else (w["data"].get("tmux") or {}).get("runtime_id")
    integ, landing, gate = workspace.integration_of(w), workspace.landing_of(w), workspace.gate_of(w)
    row = {"handle": w["handle"], "id": w["id"], "task": w["task"], "state": w["state"], "path": w["path"],
           "owner": owner["handle"] if owner else (first["handle"] if first else None),
           "owner_live": owner is not None, "leases": held.get(holder, []) if holder else [],
           "unacked": unacked.get(rid, 0) if rid else 0, "tmux": window,
           "agent": agent["handle"] if agent else None, "harness": (agent or {}).get("harness") or harness,
           "queue": integ.get("state", "none"), "landing": landing.get("state"),
           "landing_at": landing.get("at"), "gate": gate.get("state"), "host": host, "recipient": rid}
    row["agent_state"], row["since"], row["tool"] = _work_state(w, agent, window, integ, landing, state_of)
    if w["state"] in ("active", "resumed") and window in ("gone", None) and store.work_conversations(w):
        cut = workspace.interrupted(st, w, window=window)
        if cut:
            row["interrupted"] = True
            orphan = workspace.headless_orphan(st, w)
            if orphan:
                row["headless"] = orphan
    if changes:
        row.update(workspace.status_facts(w, environ, changes if isinstance(changes, str) else None))
    return row


def _work_state(w, agent, window, integ, landing, state_of):
    """(state, since, tool) of the agent working in `w`."""
    if landing.get("state") == "landed" or integ.get("state") == "queued":
        return "done", landing.get("finished_at") or integ.get("queued_at"), None
    if w["state"] not in ("active", "resumed"):
        return w["state"], w.get("updated_at"), None
    if window in ("gone", "dead") and w["data"].get("tmux"):
        return "gone", None, None
    if agent is None:
        return "unknown", None, None
    return state_of(agent)


# --------------------------------------------------------------------------- text

def state_text(state, since, tool, now):
    """"working Bash 2m", "waiting 10s", "idle 1h"."""
    bits = [state]
    if tool and state in ("working", "stuck", "waiting"):
        bits.append(tool)
    if since:
        bits.append(age(now - since))
    return " ".join(bits)


def landing_text(row):
    """The landing column: queued, landing, landed or stopped, and the gate."""
    bits = []
    if row["landing"] and row["landing"] != "landed":
        bits.append("land:" + row["landing"])
    elif row["landing"] == "landed":
        bits.append("landed")
    elif row["queue"] not in ("none", None):
        bits.append(row["queue"])
    if row["gate"] and row["gate"] != "pending":
        bits.append("gate:" + row["gate"])
    return " ".join(bits)


def status_lines(data, verbose=False, now=None):
    """`coord status`'s text, each line at most WIDTH columns unless verbose."""
    now = data["at"] if now is None else now
    cut = (lambda s: s) if verbose else fit
    lines = []
    if data["agents"]:
        lines.append("agents:")
    for a in data["agents"]:
        bits = [a["handle"], a["harness"] or "-", state_text(a["state"], a["since"], a["tool"], now)]
        if a["subagent"]:
            bits.append("subagent")
        if a["work"]:
            bits.append("in %s (%s)" % (a["work"], store.clean_text(a["task"], 24)))
        if a["leases"]:
            bits.append("%d lease%s" % (len(a["leases"]), "" if len(a["leases"]) == 1 else "s"))
        if a["unacked"]:
            bits.append("%d unacked" % a["unacked"])
        if verbose:
            bits += [a["cwd"] or "-", "id=%s" % a["id"]]
        lines.append(cut("  " + "  ".join(store.clean_text(b, 200) for b in bits)))
    if data["work"]:
        lines.append("work:")
    counted = set(a["id"] for a in data["agents"])
    for r in data["work"]:
        lines += [cut(l) for l in _work_lines(r, verbose, now, counted)]
    if data["archived_hidden"]:
        lines.append(store.hint("%d archived work (coord status --archived)" % data["archived_hidden"]))
    return lines


def _work_lines(r, verbose, now, counted):
    """A work's line, and below it what went wrong and the next command, each on a line of its own."""
    import workspace
    bits = [r["handle"], store.clean_text(r["task"], 24),
            workspace.INTERRUPTED if r.get("interrupted") else r["state"]]
    if r["agent_state"] != r["state"] and not r.get("interrupted"):
        bits.append(state_text(r["agent_state"], r["since"], r["tool"], now))
    land = landing_text(r)
    if land:
        bits.append(land)
    if r.get("host"):
        bits.append("host " + r["host"])
    if r["tmux"] and r["tmux"] != "alive" and not r.get("interrupted"):
        bits.append("tmux " + r["tmux"])
    if r.get("dirty") is not None and not (r["landing"] == "landed" and not r.get("ahead")):
        bits.append("dirty" if r["dirty"] else "clean")
    if r.get("ahead") is not None:
        bits.append("+%d/-%s %s" % (r["ahead"], "?" if r.get("behind") is None else r["behind"], r.get("into")))
    if r["leases"]:
        bits.append("%d lease%s" % (len(r["leases"]), "" if len(r["leases"]) == 1 else "s"))
    rid = r.get("recipient")
    if r["unacked"] and rid not in counted:
        bits.append("%d unacked" % r["unacked"])
    counted.add(rid)
    if verbose:
        bits.append("%s id=%s" % (r["path"], r["id"]))
    lines = ["  " + "  ".join(bits)]
    if r.get("errors"):
        lines.append("    (unreadable: %s)" % store.clean_text(r["errors"][0], 90))
    if r.get("interrupted"):
        lines.append(store.hint("    %s: coord work resume --interrupted" % (
            "window gone, " + workspace.headless_text(r["headless"]) if r.get("headless") else "agent gone")))
    return lines
