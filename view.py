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
           "landing_at": landing.get("at"), "gate": gate.get("state"), "host": host, "recipient": rid,
           "window": (w["data"].get("tmux") or {}).get("window_id"), "check": last_check(gate),
           "target": integ.get("into") or landing.get("into"), "updated_at": w.get("updated_at")}
    row["agent_state"], row["since"], row["tool"] = _work_state(w, agent, window, integ, landing, state_of)
    if w["state"] in ("active", "resumed") and window in ("gone", None) and store.work_conversations(w):
        import launch  # whether its harness still runs
        cut = launch.interrupted(st, w, window=window)
        if cut:
            row["interrupted"] = True
            orphan = launch.headless_orphan(st, w)
            if orphan:
                row["headless"] = orphan
    if changes:
        row.update(workspace.status_facts(w, environ, changes if isinstance(changes, str) else None))
    else:  # the keys `status --json` always had: null until --changes reads the clone
        row.update(dict(NO_FACTS, errors=[]))
    return row


NO_FACTS = {"dirty": None, "dirty_from": None, "into": None, "ahead": None, "behind": None}


def last_check(gate):
    """The last landing check the work record holds (land.py records it in the gate: passed or
    failed, with the command and its exit), or None."""
    check = gate.get("check") if isinstance(gate.get("check"), dict) else None
    if not check or gate.get("state") not in ("passed", "failed"):
        return None
    return {"state": gate["state"], "at": gate.get("at"), "command": check.get("command"), "exit": check.get("exit")}


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
    import launch
    bits = [r["handle"], store.clean_text(r["task"], 24),
            launch.INTERRUPTED if r.get("interrupted") else r["state"]]
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
            "window gone, " + launch.headless_text(r["headless"]) if r.get("headless") else "agent gone")))
    return lines


# --------------------------------------------------------------------------- the frame

COLUMNS = (("handle", 22), ("task", 16), ("harness", 7), ("state", 17), ("L", 2), ("M", 2), ("landing", 14),
           ("host", 8))
KEYS = "up/down move  enter go  n nudge  l land  p park  c close  f forecast  q quit"


def rows(data):
    """The view's rows: one per work not archived or removed, then one per top-level agent in no
    work (the person, an agent in the shared checkout). -> [{"kind", "handle", "work", ...}]."""
    out, shown = [], set()
    for r in data["work"]:
        if r["state"] == "removed":
            continue
        shown.add(r["agent"])
        out.append({"kind": "work", "handle": r["handle"], "work": r["handle"], "task": r["task"],
                    "harness": r["harness"] or "-", "state": r["agent_state"], "since": r["since"], "tool": r["tool"],
                    "leases": len(r["leases"]), "unread": r["unacked"], "landing": landing_text(r),
                    "host": r.get("host") or "", "interrupted": bool(r.get("interrupted")), "id": r["id"],
                    "tmux": r["tmux"], "agent": r["agent"], "landing_state": r["landing"],
                    "landing_at": r["landing_at"], "window": r["window"], "check": r.get("check"),
                    "target": r.get("target"), "updated_at": r.get("updated_at")})
    for a in data["agents"]:
        if a["subagent"] or a["handle"] in shown or a["work"]:
            continue
        out.append({"kind": "agent", "handle": a["handle"], "work": None, "task": "-", "harness": a["harness"] or "-",
                    "state": a["state"], "since": a["since"], "tool": a["tool"], "leases": len(a["leases"]),
                    "unread": a["unacked"], "landing": "", "host": "", "interrupted": False, "id": a["id"],
                    "tmux": None, "agent": a["handle"], "landing_state": None, "landing_at": None,
                    "window": None, "check": None, "target": None, "updated_at": None})
    return out


def row_text(r, now):
    cells = {"handle": r["handle"], "task": store.clean_text(r["task"], 60), "harness": r["harness"],
             "state": state_text(r["state"], r["since"], r["tool"], now), "L": str(r["leases"] or ""),
             "M": str(r["unread"] or ""), "landing": r["landing"], "host": r["host"]}
    return fit(" ".join(fit(cells[k], w).ljust(w) if k not in ("L", "M") else cells[k].rjust(w)
                        for k, w in COLUMNS).rstrip())


def detail(item, now, forecast=None):
    """The line below the table for one work's row: its landing, its last check and, in the
    curses view (`forecast` given; the row under the cursor, so no handle), the conflicts forecast."""
    if item["kind"] != "work":
        return ""
    bits = [item["handle"] + ":" if forecast is None else "", (item["landing"] or "not queued").split(" gate:")[0]]
    if item.get("target"):
        bits.append("into " + item["target"])
    c = item.get("check")
    if c:
        bits.append("check %s %s ago: %s%s" % (c["state"], age(now - c["at"]) if c.get("at") else "?",
                                              store.clean_text(c.get("command") or "-", 30),
                                              "" if c.get("exit") in (0, None) else " (exit %s)" % c["exit"]))
    else:
        bits.append("no check yet")
    bits.append(forecast.text(item, now) if forecast is not None else "")
    return fit(" ".join(b for b in bits if b))


class Forecast:
    """The conflicts a landing would meet, per work: `coord --json work conflicts` (jj per work, so
    never on the redraw path) run only when the person presses f, in a background thread, as
    typed with the watch's environment. Kept per work until its record changes, then shown stale
    (press f again); its age shows too, since the target may have moved meanwhile."""

    def __init__(self, environ):
        self.environ, self.running, self.error = environ, False, None
        self.seen = {}  # handle -> (the record's updated_at when forecast, {"target": [...], "peers": [...]}, at)

    def start(self, items):
        if self.running:
            return "forecast already running"
        self.running = True
        marks = {i["handle"]: i.get("updated_at") for i in items if i["kind"] == "work"}
        import threading
        threading.Thread(target=self._run, args=(marks,), daemon=True).start()
        return "forecasting the conflicts of %d work (coord work conflicts)" % len(marks)

    def _run(self, marks):
        import json
        import subprocess
        found, error = {}, None
        try:
            proc = subprocess.run(coord_argv("--json", "work", "conflicts"), env=self.environ, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, universal_newlines=True, timeout=900)
            data = json.loads(proc.stdout.strip().splitlines()[-1])
            for w in data.get("works") or []:
                found[w["handle"]] = {"target": list(w.get("target_conflicts") or []), "peers": []}
            for p in data.get("pairs") or []:
                for a, b in ((p["a"], p["b"]), (p["b"], p["a"])):
                    if p.get("conflicts") and a in found:
                        found[a]["peers"].append(b)
            error = data.get("error") or (None if data.get("ok", True) else data.get("message"))
        except Exception as exc:  # shown, never raised: the view stays up
            error = "forecast failed: %s" % exc
        at = time.time()
        self.seen.update({h: (marks.get(h), f, at) for h, f in found.items()})
        self.error, self.running = error, False

    def text(self, item, now):
        got = self.seen.get(item["handle"])
        if got is None:
            return "forecast: running" if self.running else "f forecasts conflicts"
        mark, f, at = got
        if f["target"]:
            what = "conflicts in " + ", ".join(f["target"][:3])
        else:
            what = "no conflict"
        if f["peers"]:
            what += "; with %s" % ", ".join(f["peers"][:3])
        stale = " (stale: f again)" if mark != item.get("updated_at") else ""
        return "forecast: %s (%s ago)%s" % (what, age(now - at), stale)


def frame(data, notices=None, now=None):
    """One frame of the view as lines of at most WIDTH columns: a title, the column names, a row
    per work and per agent in none, and the keys."""
    now = data["at"] if now is None else now
    items = rows(data)
    waiting = sum(1 for r in items if r["state"] == "waiting")
    title = "coord watch  %d work  %d agents  %s%s" % (
        sum(1 for r in items if r["kind"] == "work"), len(data["agents"]),
        ("%d waiting for you  " % waiting) if waiting else "", time.strftime("%H:%M:%S", time.localtime(now)))
    if notices is not None:
        title += "  notices " + ("on" if notices else "off (not the person at a terminal)")
    head = " ".join(k.ljust(w) if k not in ("L", "M") else k.rjust(w) for k, w in COLUMNS).rstrip()
    lines = [fit(title), fit(head)] + [row_text(r, now) for r in items]
    if not items:
        lines.append("no live agents and no work")
    return lines


def once_lines(data, now=None):
    """`coord watch --once`: the frame, then each work's landing and last check below it."""
    now = data["at"] if now is None else now
    items = [i for i in rows(data) if i["kind"] == "work"]
    return frame(data) + ([""] if items else []) + [detail(i, now) for i in items]


def once(st, environ=None):
    """`coord watch --once`: one frame as text (no terminal needed)."""
    return "\n".join(once_lines(fleet(st, environ)))


# --------------------------------------------------------------------------- notices

class Notices:
    """Tell the person when an agent starts waiting for them, finishes its turn or its work, a
    landing stops or a window dies: one notice per event (its key: what happened, to which row,
    and the event's own time or window; shared by every watch of this user through a marker file
    created exclusively), at most NOTICE_BURST per NOTICE_WINDOW seconds (the rest summed up in
    one), only from the person's own watch, with the person's command (`coord.notify`)."""

    def __init__(self, environ, root, sockets=(), tty=None):
        self.environ, self.root, self.tty = environ, root, tty
        self.sockets = set(sockets)
        self.sent, self.held, self.children = [], [], []
        self.command = notify_command(root, environ)
        self.folder = os.path.join(store.state_dir(environ), "notices")

    @staticmethod
    def events(before, after):
        """[(key, kind, text, row)] of what changed from the rows `before` to `after` ({id: row})."""
        out = []
        for rid, r in after.items():
            p = before.get(rid)
            if p is not None:
                for kind, when, text in _changes(p, r):
                    out.append(("%s:%s:%s" % (kind, rid, when), kind, text, r))
        return out

    def claim(self, key):
        """True once per event key for all watches of this user (a marker file, created exclusively)."""
        try:
            os.makedirs(self.folder, 0o700, exist_ok=True)
            fd = os.open(os.path.join(self.folder, store.hashes().sha256(key.encode("utf-8")).hexdigest()[:32]),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.close(fd)
            return True
        except FileExistsError:
            return False
        except OSError:
            return True  # no marker directory: dedupe within this watch only

    def send(self, events, now=None):
        """Deliver each new event, within the burst limit; -> the texts delivered."""
        now = time.time() if now is None else now
        self.sent = [t for t in self.sent if now - t < NOTICE_WINDOW]
        self.children = [c for c in self.children if c.poll() is None]
        out = []
        for key, kind, text, row in events:
            if not self.claim(key):
                continue
            if len(self.sent) >= NOTICE_BURST:
                self.held.append(text)
                continue
            self.sent.append(now)
            out.append(self.deliver(kind, "coord: " + text, row))
        if self.held and len(self.sent) < NOTICE_BURST:
            text = "coord: %d more: %s" % (len(self.held), "; ".join(self.held))[:300]
            self.held = []
            self.sent.append(now)
            out.append(self.deliver("more", text, None))
        return out

    def deliver(self, kind, text, row):
        """A tmux message and bell on each client of the agents' tmux servers, the terminal's
        notification escapes (OSC 9, OSC 777) on the watch's own terminal outside tmux,
        notify-send where present, and the person's command. Failures are dropped."""
        import shutil
        import subprocess
        text = store.clean_text(text, 300).replace("\n", " ")
        for socket in sorted(s for s in self.sockets if s):
            _tmux_notice(socket, text)
        if self.tty is not None:
            inside = bool(self.environ.get("TMUX"))
            data = "\a" if inside else "\a\x1b]9;%s\x07\x1b]777;notify;coord;%s\x07" % (text, text)
            try:
                os.write(self.tty, data.encode("utf-8", "replace"))
            except OSError:
                pass
        env = dict(self.environ, COORD_NOTICE=text, COORD_NOTICE_KIND=kind,
                   COORD_NOTICE_WORK=(row or {}).get("work") or "", COORD_NOTICE_AGENT=(row or {}).get("agent") or "")
        argvs = []
        if shutil.which("notify-send", path=self.environ.get("PATH")) and any(
                self.environ.get(k) for k in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS")):
            argvs.append(["notify-send", "coord", text])
        if self.command:
            argvs.append(["/bin/sh", "-c", self.command])
        for argv in argvs:
            try:
                self.children.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                      start_new_session=True))
            except OSError:
                pass
        return text


def _changes(p, r):
    """[(kind, the event's own time or window, text)] between a row's last frame `p` and now `r`."""
    name = "%s (%s)" % (r["handle"], store.clean_text(r["task"], 30)) if r["kind"] == "work" else r["handle"]
    out = []
    if r["state"] == "waiting" and (p["state"] != "waiting" or p["since"] != r["since"]):
        out.append(("waiting", r["since"], "%s waits for you%s" % (name, ": it asks to run " + r["tool"]
                                                                   if r["tool"] else "")))
    elif r["state"] == "idle" and p["state"] in ("working", "stuck", "waiting"):
        out.append(("idle", r["since"], "%s finished its turn" % name))
    elif r["state"] == "done" and p["state"] != "done":
        out.append(("done", r["since"], "%s is done: %s" % (name, r["landing"] or "queued")))
    if r["landing_state"] not in (None, "running", "landed") and r["landing_state"] != p["landing_state"]:
        out.append(("landing", r["landing_at"], "the landing of %s stopped: %s" % (name, r["landing_state"])))
    if (r["state"] == "gone" or r["interrupted"]) and not (p["state"] == "gone" or p["interrupted"]):
        out.append(("gone", r["window"], "%s: its agent is gone (window closed or died)" % name))
    return out


def _tmux_notice(socket, text):
    """display-message on every client of the tmux server at `socket`, and a bell on its terminal."""
    import session
    tmux = session.Tmux(socket)
    try:
        out = tmux.run("list-clients", "-F", "#{client_name}\t#{client_tty}")
    except CoordError:
        return
    for line in out.splitlines():
        name, _, tty = line.partition("\t")
        try:
            tmux.run("display-message", "-c", name, "-d", "5000", text.replace("#", "##"))
        except CoordError:
            pass
        try:
            fd = os.open(tty, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
            try:
                os.write(fd, b"\a")
            finally:
                os.close(fd)
        except OSError:
            pass


def notify_command(root, environ=None):
    """The person's notice command: `git config coord.notify` in the shared checkout's own config
    (never a clone's, which an agent writes), or None."""
    import subprocess
    if not root:
        return None
    try:
        proc = subprocess.run(["git", "-C", root, "config", "--local", "--get", NOTIFY_KEY], env=environ,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              timeout=10, universal_newlines=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def is_person(environ=None):
    """The watch sends notices only for the person at a terminal (store.person_evidence)."""
    key, _pid, _start, _name, why = store.person_evidence(environ)
    return key is not None and why is None


# --------------------------------------------------------------------------- the loop

REMOTE_EVERY = 1.0  # seconds between two reads of a PostgreSQL project (another host's turns and works)


class Watcher:
    """Reads the fleet again only when something may have changed: SQLite's data_version moved
    (another connection committed), the activity directory changed (a hook event on this host),
    REMOTE_EVERY passed on PostgreSQL, or REDRAW_EVERY passed (ages, stuck agents, dead windows).
    Between two reads it costs a stat and one PRAGMA per WAKE_EVERY seconds."""

    def __init__(self, st, environ, root):
        self.st, self.environ, self.root = st, environ, root
        self.folder = os.path.join(store.state_dir(environ), store.Store.ACTIVITY_DIR)
        self.mark, self.read_at, self.data = None, 0.0, None
        self.rows = {}
        self.forecast = Forecast(environ)
        source = next((w["source"] for w in st.works() if w.get("source")), None)
        self.notices = Notices(environ, source or root, tty=_tty()) if is_person(environ) else None

    def _mark(self):
        try:
            seen = os.stat(self.folder).st_mtime_ns
        except OSError:
            seen = None
        if getattr(self.st, "engine", None) == "sqlite":
            version = self.st.data_version()
        else:  # the host process's wake-ups: another host's runtime or lease change, no database read
            try:
                version = self.st.wake_generation()
            except store.CoordError:
                version = None
        return (version, seen)

    def due(self, now):
        mark = self._mark()
        every = REDRAW_EVERY if getattr(self.st, "engine", None) == "sqlite" else REMOTE_EVERY
        if mark != self.mark or now - self.read_at >= every or self.data is None:
            self.mark = mark
            return True
        return False

    def read(self, now=None):
        """Read the fleet; send the notices of what changed since the last read. -> the data."""
        self.read_at = time.monotonic() if now is None else now
        self.mark = self._mark()  # before the read: a change during it wakes the next one
        self.data = fleet(self.st, self.environ)
        after = {r["id"]: r for r in rows(self.data)}
        if self.notices is not None:
            self.notices.sockets = set((w["data"].get("tmux") or {}).get("socket") for w in self.st.works()
                                       if w["state"] in ("active", "resumed"))
            if self.rows:
                self.notices.send(Notices.events(self.rows, after))
        self.rows = after
        return self.data


def _tty():
    """A descriptor of the watch's own terminal (for the notification escapes), or None."""
    try:
        return sys.stdout.fileno() if os.isatty(sys.stdout.fileno()) else None
    except (OSError, ValueError):
        return None


def notify_loop(st, environ, root, stop=None):
    """`coord watch --notify-only`: the notices without drawing, until interrupted."""
    w = Watcher(st, environ, root)
    if w.notices is None:
        raise store.Refused("notices are the person's: this caller is not positively the person at a terminal",
                            "run coord watch --notify-only in your own terminal")
    w.due(time.monotonic())
    data = w.read()
    print("coord: notices on for %d work and %d agents (Ctrl-C ends)" % (len(data["work"]), len(data["agents"])),
          flush=True)
    while stop is None or not stop():
        time.sleep(WAKE_EVERY)
        if w.due(time.monotonic()):
            w.read()


def coord_argv(*args):
    """The coord command a key runs: the same script as the view, with the same environment, so
    it has exactly the authority the person (or agent) would have typing it."""
    return [sys.executable, os.path.join(os.path.dirname(os.path.realpath(__file__)), "coord")] + list(args)


ACTIONS = {  # key -> (label, its past, the command for a work row's handle and the answer, the question)
    "n": ("nudge", "nudged", lambda h, a: ["send", a, "--to", h, "--nudge"],
          "message to %s (Enter sends and nudges, empty cancels): "),
    "l": ("land", "landed", lambda h, a: ["work", "integrate", "land", h, "--into", a],
          "land %s into which bookmark (empty cancels): "),
    "p": ("park", "parked", lambda h, a: ["work", "park", h, "--reason", a], "park %s, why (empty cancels): "),
    "c": ("close", "closed", lambda h, a: ["work", "close", h] if a.lower() == "y" else None, "close %s? type y: "),
}


def run_action(argv, environ, take_terminal=False):
    """Run one coord command as typed; -> the line to show (its output's last line, or its exit)."""
    import subprocess
    if take_terminal:  # the terminal is the command's (tmux attaches on it); its refusal is on stderr
        proc = subprocess.run(argv, env=environ, stderr=subprocess.PIPE, universal_newlines=True,
                              errors="backslashreplace")
        lines = [l for l in proc.stderr.splitlines() if l.strip()]
        return store.clean_text(" ".join(lines[-2:]) if lines and proc.returncode else "%s: exit %d" % (
            " ".join(argv[2:4]), proc.returncode), 300)
    proc = subprocess.run(argv, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, errors="backslashreplace")
    lines = [l for l in proc.stdout.splitlines() if l.strip()]
    return store.clean_text(" ".join(lines[-2:]) if lines else "exit %d" % proc.returncode, 300)


def watch(st, environ, root):
    """`coord watch`: the live view in curses until q."""
    import curses
    w = Watcher(st, environ, root)
    return curses.wrapper(lambda scr: _screen(scr, w))


def _screen(scr, w):
    import curses
    try:
        curses.curs_set(0)
    except curses.error:
        pass
    scr.timeout(int(WAKE_EVERY * 1000))
    cursor, message = 0, ""
    while True:
        if w.due(time.monotonic()):
            w.read()
        items = rows(w.data)
        cursor = max(0, min(cursor, len(items) - 1))
        _draw(scr, w, items, cursor, message)
        key = scr.getch()
        if key in (ord("q"), 27):
            return 0
        if key in (curses.KEY_DOWN, ord("j")):
            cursor += 1
        elif key in (curses.KEY_UP, ord("k")):
            cursor -= 1
        elif items and key in (10, 13, curses.KEY_ENTER, ord("g")):
            message = _go(scr, w, items[cursor])
        elif items and key == ord("f"):
            message = w.forecast.start(items)
        elif items and key in tuple(ord(k) for k in ACTIONS):
            message = _act(scr, w, items[cursor], chr(key))
        if key != -1:
            w.mark = None  # read again after a key: an action changes the records


def _draw(scr, w, items, cursor, message):
    import curses
    height, width = scr.getmaxyx()
    lines = frame(w.data, notices=w.notices is not None)
    scr.erase()
    for y, line in enumerate(lines[:max(0, height - 2)]):
        attr = curses.A_REVERSE if y - 2 == cursor and items else (curses.A_BOLD if y == 0 else 0)
        try:
            scr.addnstr(y, 0, line, width - 1, attr)
        except curses.error:
            pass
    if items and height > 4:
        try:
            scr.addnstr(height - 2, 0, detail(items[cursor], time.time(), w.forecast), width - 1)
        except curses.error:
            pass
    try:
        scr.addnstr(height - 1, 0, fit(message or KEYS), width - 1, curses.A_DIM)
    except curses.error:
        pass
    scr.refresh()


def _ask(scr, prompt):
    """A line typed at the bottom of the screen ("" when Escape)."""
    import curses
    height, width = scr.getmaxyx()
    scr.timeout(-1)
    curses.echo()
    try:
        scr.move(height - 1, 0)
        scr.clrtoeol()
        scr.addnstr(height - 1, 0, prompt, width - 1)
        raw = scr.getstr(height - 1, min(len(prompt), width - 2), 200)
    except curses.error:
        raw = b""
    finally:
        curses.noecho()
        scr.timeout(int(WAKE_EVERY * 1000))
    return raw.decode("utf-8", "replace").strip()


def _go(scr, w, item):
    """Show the row's pane: `coord work attach W --execute` (switch-client inside tmux)."""
    import curses
    if item["kind"] != "work" or not item["tmux"]:
        return "%s has no window coord launched" % item["handle"]
    argv = coord_argv("work", "attach", item["work"], "--execute")
    curses.endwin()  # switch-client returns at once; an attach (another server, or none) holds the terminal
    try:
        return run_action(argv, w.environ, take_terminal=True)
    finally:
        scr.clear()  # the attach drew on the terminal: repaint all of it, not only what changed
        scr.refresh()


def _act(scr, w, item, key):
    label, past, build, question = ACTIONS[key]
    if item["kind"] != "work":
        return "%s: only a work's row can be %s" % (item["handle"], past)
    answer = _ask(scr, question % item["handle"])
    args = build(item["work"], answer) if answer else None
    if args is None:
        return "not %s" % past
    return run_action(coord_argv(*args), w.environ)
