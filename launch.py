"""coord's harness in a work: the agent coord launches into a managed clone's tmux window, and
everything that tends it there.

Invariants this module keeps:
- One agent per clone: a launch is refused while a runtime or an unregistered harness process
  works inside the clone (`_launchable`, `agents_inside`, `harness_processes_inside`); no
  override passes that.
- A launched window is recorded in its work, or closed (`_record_launch`); every tmux act goes
  through session.py by the IDs tmux returned, and only on a record that still validates.
- Every act that changes a work's state (start, resume, park, close, archive, a resume wrapper's
  record-conversation) asks `workspace.authorize` first.
- A harness still running after its window is gone is recognised on positive evidence only
  (`headless_orphan`), and ended only for the person while it is idle (`end_headless`), or by
  `work close` for a harness that never hears the hangup (HANGUP_NOT_PASSED).
- A resume wrapper's session is recorded only for a person at a terminal, in a managed clone.

Layout, top-down: what the harness is doing (interrupted, headless, unregistered), launching it,
one agent per clone, start, resume, park, close, archive, the resume wrappers, what `work list`
and `work inspect` say, the `cmd_*` handlers, and the parsers (PARSERS: coord merges them into
`work`, which workspace.register builds).
"""

import os
import shlex
import time

import session
import store
from workspace import (BY_TASK_HELP, ENDED, PORT_STRIDE, QUEUED, RELAUNCHED, SHOWN_PATHS, UNUSABLE, adoptable_clones,
                       authorize, by_task, directory_problems, gate_of, head_ids, hosts_shown, integration_of,
                       is_inside, is_person, never_page, now_time, ok_data, optional_caller, override_argument,
                       owner_of, process_cwds, public_work, read_marker, refuse_other_host, refuse_state,
                       runtime_inside_blocker, runtimes_inside, setup_line, space_problem, summary_line,
                       verified_path, who_id, with_history)
from store import EnvError, Refused, UsageError


# =========================================================================== what the harness is doing

REGISTER_GRACE = 20.0  # seconds a started harness gets to register before `work list` says so
UNREGISTERED = "started, agent not registered: trust prompt?"


INTERRUPTED = "interrupted"  # shown, never stored: a work whose agent is gone without park, close or archive


def interrupted(st, w, window=False):
    """True for a work whose agent is gone without park, close or archive (a reboot, a killed
    tmux server or window): recorded active or resumed, a conversation recorded for it, the
    window coord recorded for it gone (or none), and no live runtime running that conversation.
    `work resume --interrupted` resumes these. window: its tmux state when the caller read it
    already (session.windows_state), else it is read here."""
    if w["state"] not in ("active", "resumed") or not store.work_conversations(w):
        return False
    if (session.window_state(w["data"].get("tmux")) if window is False else window) not in ("gone", None):
        return False
    orphan = False  # not looked for yet
    for conv in store.work_conversations(w):
        rt = st.find_conversation_runtime(conv)
        if rt is not None and rt.get("harness") != store.PARKED:
            if orphan is False:
                orphan = headless_orphan(st, w)
            if orphan is None or orphan["runtime_id"] != rt["id"]:
                return False
    return True


# --------------------------------------------------------------------------- a window's headless orphan

# Gemini CLI 0.61.0 can outlive its tmux window: the hangup reaches only the session leader, its
# launcher, which ignores SIGHUP and SIGTERM and waits for its relaunched child; the child (the
# registered runtime) is not told. Both keep running headless in the dead pane's session, and its
# runtime stays live by pid (docs/harness-gemini.md). headless_orphan() recognises that case on
# positive evidence only; `work resume`, run by the person, ends it (end_headless).
ORPHAN_TERM_WAIT = 5.0   # seconds the orphan's processes get to exit after SIGTERM
ORPHAN_KILL_WAIT = 5.0   # seconds after SIGKILL before coord says they would not go
ORPHAN_IDLE = (None, "idle")  # the last recorded turn boundaries at which coord may end it
# Harnesses whose hung-up launcher does not pass the hangup on (docs/harness-gemini.md): `work close`
# ends one left headless after CLOSED_EXIT_WAIT; any other harness hung up is saving its session
# and is only waited for.
HANGUP_NOT_PASSED = frozenset(name for name, row in session.HARNESSES.items() if not row["hangup_passed"])


def _proc_stat(pid):
    """(state letter, ppid, pgid, session id) of pid from /proc, or None."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
        rest = data[data.rindex(b")") + 2:].split()
        return rest[0].decode(), int(rest[1]), int(rest[2]), int(rest[3])
    except (OSError, ValueError, IndexError):
        return None


def session_processes(sid):
    """[(pid, pgid, start token)] of the live (not zombie) processes in session `sid`."""
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        stat = _proc_stat(int(name))
        if stat and stat[3] == sid and stat[0] != "Z":
            out.append((int(name), stat[2], store.process_start(int(name))))
    return sorted(out)


def headless_orphan(st, w):
    """The work's harness still running headless after its recorded window is gone, or None.
    Positive evidence only: tmux says the recorded window is gone; a live runtime of the work's
    conversation (the window's recorded one, or the newest) has a process whose session id is the
    dead window's recorded pane pid (a pane's process leads its own session; a pid in use as a
    session id is never given to another process), whose working directory is inside the clone,
    and no pane on the recorded socket runs that pane pid any more.
    -> {harness, runtime, runtime_id, pid, session, pids, pgids, turn}."""
    if w["state"] not in ("active", "resumed") or not w.get("path"):
        return None
    rec = w["data"].get("tmux") or {}
    pane = rec.get("pane_pid")
    if not isinstance(pane, int) or pane <= 1 or not os.path.isdir("/proc/self"):
        return None
    for conv in store.work_conversations(w):
        rt = st.find_conversation_runtime(conv)
        if rt is None or not rt.get("pid") or rt.get("harness") in (store.PARKED, store.PERSON):
            continue
        if not st.pid_judged_here(rt):  # a pid recorded on another host means nothing here
            continue
        if rec.get("runtime_id") not in (None, rt["id"]) and rec.get("conversation") != rt["conversation"]:
            continue
        stat = _proc_stat(rt["pid"])
        if not stat or stat[3] != pane or stat[0] == "Z":
            continue
        try:
            cwd = os.readlink("/proc/%d/cwd" % rt["pid"])
        except OSError:
            continue
        if not is_inside(cwd, w["path"]):
            continue
        procs = session_processes(pane)
        if not procs or session.window_state(w["data"].get("tmux")) != "gone" or _pane_pid_live(rec, pane):  # tmux asked last
            continue
        return {"harness": harness_program(rt["pid"]) or rt.get("harness"), "runtime": rt["handle"],
                "runtime_id": rt["id"], "pid": rt["pid"], "session": pane, "pids": [p for p, _, _ in procs],
                "pgids": sorted({g for _, g, _ in procs}), "turn": (st.turn(rt["id"]) or {}).get("state")}
    return None


def _pane_pid_live(rec, pane):
    """True unless tmux positively answers that no pane on the recorded socket runs `pane` (a
    window relabelled or moved still holds its process: not an orphan)."""
    if not rec.get("socket"):
        return True
    try:
        return any(p["pane_pid"] == pane for p in session.Tmux(rec["socket"]).panes())
    except store.CoordError:
        return True


def headless_text(o):
    """`gemini 15697 runs headless` for headless_orphan's record."""
    return "%s %d runs headless" % (store.clean_text(o["harness"] or "harness", 20), o["pid"])


def kill_command(o):
    """What the person types to end the orphan's processes."""
    return "; ".join("kill -TERM -- -%d" % g for g in o["pgids"])


def end_headless(st, w, o, caller):
    """End the headless orphan `o` (headless_orphan) of work `w` before a resume: only for the
    person, only while it is idle at its prompt; SIGTERM to each of its process groups, then
    SIGKILL to what is left after ORPHAN_TERM_WAIT. Recorded in the work's history and the audit.
    -> {harness, runtime, session, pids, signal}."""
    what = "work %s's %s (process %d, session %d) still runs headless: its tmux window is gone" % (
        w["handle"], store.clean_text(o["harness"] or "harness", 20), o["pid"], o["session"])
    if not is_person(caller):
        raise Refused(what + "; ending it is the person's decision",
                      "ask the person to run: coord work resume %s" % w["handle"])
    if o["turn"] not in ORPHAN_IDLE:
        raise Refused(what + ", mid-turn (%s); coord ends only an idle one" % o["turn"],
                      "%s (then kill -KILL -- -%d if it stays), then: coord work resume %s"
                      % (kill_command(o), o["pgids"][0], w["handle"]))
    ended, stayed = _end_session(st, w, o, caller)
    if stayed:
        raise EnvError("%s; process%s %s did not exit after SIGKILL" % (
            what, "" if len(stayed) == 1 else "es", ", ".join(map(str, stayed))),
            "coord work resume %s (once they are gone)" % w["handle"])
    return ended


def _end_session(st, w, o, caller):
    """SIGTERM each process group of the orphan `o`'s session, SIGKILL what is left after
    ORPHAN_TERM_WAIT; recorded in the work's history and the audit. -> (ended, pids that stayed)."""
    import signal
    procs = session_processes(o["session"])
    sent = "TERM"
    for g in sorted({g for _, g, _ in procs}):
        try:
            os.killpg(g, signal.SIGTERM)
        except OSError:
            pass

    def left():
        return [(p, g, s) for p, g, s in procs if store.process_start(p) == s and
                (_proc_stat(p) or ("Z",))[0] != "Z"]
    deadline = time.monotonic() + ORPHAN_TERM_WAIT
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    if left():
        sent = "KILL"
        for p, _, _ in left():
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        deadline = time.monotonic() + ORPHAN_KILL_WAIT
        while left() and time.monotonic() < deadline:
            time.sleep(0.1)
    stayed = [p for p, _, _ in left()]
    ended = {"harness": o["harness"], "runtime": o["runtime"], "session": o["session"],
             "pids": [p for p, _, _ in procs], "signal": sent}
    with st.transaction():
        cur = st.work(w["id"])
        st.update_work(w["id"], data={"history": with_history(cur, cur["state"], caller, step="headless-ended",
                                                              stayed=stayed or None, **ended)})
        st.audit("work.headless-ended", who_id(caller), w["id"], headless=ended, stayed=stayed or None)
    return ended, stayed


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
    if (now if now is not None else now_time()) - float(launches[-1].get("at") or 0) < grace:
        return False
    live, _ = session.live_window(w["data"].get("tmux"))
    return live is not None


# =========================================================================== launching it (tmux: session.py)

def _launch(environ, w, conversation, harness, extra, previous, prompt=None):
    never_page(w["path"], environ)  # a clone made before coord set it
    project = store.resolve_project_id(environ, w["source"])
    env = {"COORD_WORK_ID": w["id"], "COORD_PROJECT_ID": project}
    if w["data"].get("port_base") is not None:
        env["COORD_PORT_BASE"] = str(w["data"]["port_base"])
    for name in ("COORD_DB", "COORD_SCRATCH_ROOT", "XDG_STATE_HOME"):
        if environ.get(name):
            env[name] = environ[name]
    if harness in START_AT_LAUNCH and conversation:
        env[START_AT_LAUNCH[harness]] = conversation
    if prompt is not None:  # its SessionStart begins a turn (hook.start_turn), not an idle prompt
        env["COORD_LAUNCH_PROMPT"] = "1"
    no_daemon = harness == "codex" and session.codex_offers_no_daemon(session.harness_command(harness, environ),
                                                                      environ)
    argv = session.harness_argv(harness, conversation, extra, environ, prompt=prompt, no_daemon=no_daemon)
    socket = (previous or {}).get("socket") or session.resolve_socket(None, environ)
    return session.launch(project, w["id"], w["path"], argv, env=env, task=w["task"],
                          conversation=conversation, harness=harness, previous=previous, socket=socket)


def _record_tmux(st, w, state, rec, caller, work_data=None, **extra):
    with st.transaction():
        cur = st.work(w["id"])
        data = dict(work_data or {}, history=with_history(cur, state, caller, **extra), closing=None)
        if rec is not None:
            data["tmux"] = rec
            data["direct"] = None  # a window coord launched is now the newest harness (store.work_conversation)
        if extra.get("reason") is not None or state in RELAUNCHED:
            data["parked"] = {"reason": extra["reason"], "at": now_time()} if state == "parked" else None
        cur = st.update_work(w["id"], state=state, data=data)
        st.audit("work." + state, who_id(caller), w["id"], window=(rec or cur["data"].get("tmux") or {}).get(
            "window_id"), **{k: v for k, v in extra.items() if v is not None})
    return cur


def _record_launch(st, w, state, rec, caller, **extra):
    """Record a launched window; if that fails, close the window so it is never unrecorded."""
    try:
        _record_tmux(st, w, state, rec, caller, **extra)
    except BaseException:
        try:
            session.close(rec)
        except store.CoordError:
            pass
        raise


def _launchable(st, handle, caller=None):
    """The work record, refused unless it may get a new harness window (and has none running,
    and no agent works inside its clone: two harnesses would share one jj working copy)."""
    w = st.resolve_work(handle)
    refuse_state(w, UNUSABLE)
    verified_path(w)
    live, _ = session.live_window(w["data"].get("tmux"))
    if live:
        raise Refused("work %s already runs in tmux window %s" % (w["handle"], live["window_id"]),
                      "coord work attach %s" % w["handle"])
    inside = agents_inside(st, w, caller)
    if inside:
        rt, where = inside[0]
        raise Refused("work %s has a live agent inside its clone: runtime %s (%s); a second agent there would "
                      "share its jj working copy" % (w["handle"], rt["handle"], where),
                      runtime_inside_blocker(w, rt, where)["next"])
    deadline = time.monotonic() + CLOSED_EXIT_WAIT  # a closed window's harness children exit in their own time
    unregistered = harness_processes_inside(st, w, caller)
    while unregistered and time.monotonic() < deadline:
        time.sleep(0.1)
        unregistered = harness_processes_inside(st, w, caller)
    if unregistered:
        pid, name = unregistered[0]
        raise Refused("work %s has a %s process (%d) inside its clone that coord has no runtime for: an agent "
                      "started there by hand, or one that has not reached its first hook yet (a resumed Codex "
                      "runs none until its first prompt); a second agent there would share its jj working copy"
                      % (w["handle"], name, pid),
                      "finish in that agent, or end process %d, then retry" % pid if is_person(caller) else
                      "ask the person to finish or end process %d, then retry" % pid)
    return w


# --------------------------------------------------------------------------- one agent per clone

CLOSED_EXIT_WAIT = 5.0  # seconds a launch waits for the harness of the work's closed window to exit


def agents_inside(st, w, caller=None):
    """[(runtime, where)] of the agents working inside the clone now (live_inside's runtimes:
    neither the person, nor a parked work's holder, nor a subagent, nor the caller). The harness
    of the work's own window, which was just closed (park, close, a killed window), gets
    CLOSED_EXIT_WAIT seconds to exit first: tmux hangs it up, but it exits in its own time (its
    SessionEnd may have ended its runtime already, so its process is waited for too)."""
    pane = (w["data"].get("tmux") or {}).get("pane_pid")
    deadline = time.monotonic() + CLOSED_EXIT_WAIT
    while True:
        procs = process_cwds()
        out = [(rt, where) for rt, where in runtimes_inside(st, w, procs)
               if rt.get("harness") not in (store.PERSON, store.PARKED) and not rt.get("superseded_by")
               and not rt.get("agent_id") and not (caller and rt["id"] == caller.get("id"))]
        # the closed window's harness still exiting (its SessionEnd may have ended its runtime already)
        closing = pane and (is_inside((procs or {}).get(pane), w["path"]) or any(rt.get("pid") == pane and st.pid_judged_here(rt)
                                                                                 for rt, _ in out))
        if not closing or time.monotonic() >= deadline:
            return out
        time.sleep(0.05)


INTERPRETERS = ("node", "nodejs", "bun", "deno")  # a harness run as `node .../bin/gemini`


def harness_program(pid):
    """The harness (a HARNESSES name) process `pid` runs, from its program word (argv[0], or an
    interpreter's first non-option argument), else None. Only the program word counts: a
    `grep codex` in the clone is no agent."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            words = f.read(8192).split(b"\0")
    except OSError:
        return None
    words = [x.decode("utf-8", "replace") for x in words if x]
    if words and os.path.basename(words[0]) in INTERPRETERS:
        words = [x for x in words[1:] if not x.startswith("-")][:1]
    name = os.path.basename(words[0]) if words else ""
    return name if name in session.HARNESSES and name != "shell" else None


def harness_processes_inside(st, w, caller=None):
    """[(pid, harness)] of harness processes working inside the clone that no live runtime
    accounts for (registered runtimes are agents_inside's): an agent started in the clone by
    hand, one whose database record was lost, or one that runs no hook until its first prompt.
    The caller's own process chain, and the processes above and below a known runtime's (a
    node wrapper and the native Codex it runs), are left out."""
    procs = process_cwds() or {}
    known = {rt["pid"] for rt, _ in runtimes_inside(st, w, procs) if rt.get("pid") and st.pid_judged_here(rt)}
    if caller and caller.get("pid") and st.pid_judged_here(caller):
        known.add(caller["pid"])
    chains = set()  # the caller's process and the known runtimes' processes with their ancestors
    for start in [os.getpid()] + sorted(known):
        pid = start
        while pid and pid > 1 and pid not in chains and len(chains) < 1024:
            chains.add(pid)
            pid = store.process_parent(pid)[0]
    out = []
    for pid in sorted(procs):
        if pid in chains or not is_inside(procs[pid], w["path"]) or (known and session.descends_from(pid, known)):
            continue
        name = harness_program(pid)
        if name:
            out.append((pid, name))
    return out


def _close_window(w, st=None, caller=None):
    """Kill the validated window; a window already gone (or no longer provably ours) is left alone.
    With `st` (close, archive: the agent's leases go), the work is marked `closing` while the
    window dies, so the harness's SessionEnd releases them (Store.session_end); the caller's
    record of the new state removes the mark (any failure removes it here)."""
    rec = w["data"].get("tmux")
    if not rec:
        return "no window"
    problem = session.problem(rec)
    if problem:
        return "window not closed: " + problem
    if st is not None:
        with st.transaction():
            st.update_work(w["id"], data={"closing": {"at": now_time(), "by": who_id(caller)}})
    try:
        session.close(rec)
    except BaseException:
        if st is not None:
            with st.transaction():
                st.update_work(w["id"], data={"closing": None})
        raise
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
    w = _launchable(st, handle, caller)
    authorize(st, w, caller, "start", override)
    import trust
    w = trust.carry_trust(st, w, caller, environ, (harness,))
    approvals = trust.trust_pending(w, harness, environ)
    rec = _launch(environ, w, None, harness, list(extra), w["data"].get("tmux"), prompt=prompt)
    _record_launch(st, w, "active", rec, caller, step="started", harness=harness,
                   work_data={"args": {"harness": harness, "argv": session.reusable_args(harness, extra)}},
                   prompt_bytes=None if prompt is None else len(prompt.encode("utf-8", "surrogateescape")),
                   unarchived=True if w["state"] == "archived" else None)
    out = {"work": w["handle"], "tmux": rec}
    if harness == "shell":
        out["runtime"] = register_shell(st, w, rec)
        out["not_enforced"] = list(SHELL_NOT_ENFORCED)
    if approvals is not None:
        out["approvals"] = approvals
    return out


# A resumed interactive session must reach its first boundary (register, link to its work, be
# shown its messages) with nothing typed into its pane: a typed nudge once answered a permission
# dialog. Measured on the pinned CLIs (docs/harness-*.md): Claude Code 2.1.197, Gemini CLI 0.61.0
# and Qwen Code 0.24.4 run SessionStart (source "resume") at once. Codex 0.171.0 and Copilot CLI
# 1.0.102 run no hook until a first prompt is submitted, and keep the conversation when given one
# with the resume: they are NO_HOOK_UNTIL_PROMPT, and `work resume` gives them RESUME_PROMPT on the
# command line. OpenCode 1.18.33's plugin runs nothing for a resumed TUI session until its first
# message, and the TUI ignores --prompt with --session: `work resume` names the session in the
# pane's START_AT_LAUNCH variable instead, and coord's plugin runs its SessionStart at load. Both
# are the harness table's (harness_facts.py: resume_prompt, resume_env).
NO_HOOK_UNTIL_PROMPT = frozenset(name for name, row in session.HARNESSES.items() if row["resume_prompt"])
START_AT_LAUNCH = {name: row["resume_env"] for name, row in session.HARNESSES.items() if row["resume_env"]}
RESUME_PROMPT = "coord: this session was resumed; read your messages (.coord/coord inbox), then carry on"


def resume_work(st, *, caller, handle, environ, conversation=None, harness=None, override=False, extra=None):
    """Relaunch the harness resuming its (recorded) conversation; -> {work, tmux}. A harness in
    NO_HOOK_UNTIL_PROMPT gets RESUME_PROMPT as its first message; one in START_AT_LAUNCH gets the
    conversation in that variable (_launch). The harness arguments are `extra` (recorded in their
    place), else those recorded for the same harness (WORK_DATA "args"), one-shot ones left out."""
    ended = None
    w = st.resolve_work(handle)  # another host's clone is not on this disk: say where it is first
    refuse_other_host(st, w, "coord work resume %s" % w["handle"])
    orphan = headless_orphan(st, w)
    deadline = time.monotonic() + CLOSED_EXIT_WAIT  # it may still exit by itself, as a hung-up harness does
    while orphan is not None and time.monotonic() < deadline:
        time.sleep(0.1)
        orphan = headless_orphan(st, w)
    if orphan is not None:  # the window is gone but its harness still runs headless: end it first
        refuse_state(w, UNUSABLE)
        authorize(st, w, caller, "resume", override)
        ended = end_headless(st, w, orphan, caller)
    w = _launchable(st, handle, caller)
    if orphan is None:
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
    import trust
    w = trust.carry_trust(st, w, caller, environ, (harness,))
    approvals = trust.trust_pending(w, harness, environ)
    prompt = RESUME_PROMPT if harness in NO_HOOK_UNTIL_PROMPT else None
    recorded_args = w["data"].get("args") or {}
    if extra is None:
        args = list(recorded_args.get("argv") or []) if recorded_args.get("harness") == harness else []
    else:
        args = session.reusable_args(harness, extra)
    rec = _launch(environ, w, conversation, harness, args, previous, prompt=prompt)
    _record_launch(st, w, "resumed", rec, caller, conversation=conversation,
                   work_data={"args": {"harness": harness, "argv": args}},
                   unarchived=True if w["state"] == "archived" else None,
                   first_prompt=True if prompt else None)
    out = {"work": w["handle"], "tmux": rec}
    if ended is not None:
        out["ended"] = ended
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
    refuse_state(w, UNUSABLE)
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


def close_work(st, *, caller, handle, override=False, environ=None):
    """Kill exactly the recorded window (validated by ID), then wait for what ran in it to exit
    (window_processes; at most COORD_CLOSE_WAIT seconds), so that a `work remove` right after
    finds nothing live inside. A harness left running headless (headless_orphan) is ended.
    -> {work, window, waited: seconds (when it had to wait), ended, left: [{pid, command}]}."""
    w = st.resolve_work(handle)
    refuse_state(w, UNUSABLE)
    authorize(st, w, caller, "close", override)
    bound = store.env_number(os.environ if environ is None else environ, "COORD_CLOSE_WAIT", CLOSE_EXIT_WAIT,
                             CLOSE_EXIT_RANGE)
    running = window_processes(st, w)
    what = _close_window(w, st, caller)
    out = {"work": w["handle"], "window": what}
    if what.startswith("closed") and running:
        out.update(_wait_closed(st, w, running, bound, caller))
    released = end_parked(st, w, "work closed")
    _record_tmux(st, w, "closed", None, caller, outcome=what, released=released or None,
                 left=[p["pid"] for p in out.get("left") or []] or None)
    return out


CLOSE_EXIT_WAIT = 30.0  # seconds `work close` waits for its window's processes to exit (COORD_CLOSE_WAIT)
CLOSE_EXIT_RANGE = (0.0, 600.0)


def window_processes(st, w):
    """[(pid, start token)] of what runs in the work's live window: the processes of its pane's
    session (a pane's process leads its own session), the pane process's descendants (a child
    that started a session of its own) and the live runtime recorded for the window."""
    rec = w["data"].get("tmux") or {}
    pane = rec.get("pane_pid")
    if not isinstance(pane, int) or pane <= 1 or not os.path.isdir("/proc/self"):
        return []
    found = {p: s for p, _, s in session_processes(pane)}
    found.update((p, store.process_start(p)) for p in _descendants(pane))
    rt = st.runtime(rec["runtime_id"]) if rec.get("runtime_id") else None
    if rt and rt.get("pid") and st.pid_judged_here(rt) and store.process_alive(rt["pid"], rt.get("pid_start")):
        found.setdefault(rt["pid"], store.process_start(rt["pid"]))
    return sorted((p, s) for p, s in found.items() if s)


def _descendants(root):
    """The pids below process `root` now (from /proc)."""
    children = {}
    try:
        names = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []
    for pid in names:
        stat = _proc_stat(pid)
        if stat:
            children.setdefault(stat[1], []).append(pid)
    out, stack = [], [root]
    while stack and len(out) < 4096:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


def _wait_closed(st, w, running, bound, caller):
    """Wait up to `bound` seconds for the closed window's processes (`running`) to exit; end a
    headless orphan (positive evidence only: headless_orphan) once it has had CLOSED_EXIT_WAIT to
    go by itself, for a harness that never heard the hangup (HANGUP_NOT_PASSED).
    -> {waited, ended, left} (keys only when there is something to say)."""
    def alive():
        return [(p, s) for p, s in running if store.process_start(p) == s and (_proc_stat(p) or ("Z",))[0] != "Z"]
    began = time.monotonic()
    left, ended = alive(), None
    out = {"waited": 0.0} if left else {}
    while left and time.monotonic() - began < bound:
        if ended is None and time.monotonic() - began >= min(CLOSED_EXIT_WAIT, bound / 2):
            orphan = headless_orphan(st, w)
            ended = False
            if orphan is not None and orphan["harness"] in HANGUP_NOT_PASSED:
                ended, _ = _end_session(st, w, orphan, caller)
                out["ended"] = ended
        time.sleep(0.1)
        left = alive()
    if out:
        out["waited"] = round(time.monotonic() - began, 1)
    if left:
        out["left"] = [{"pid": p, "command": harness_program(p) or store.process_parent(p)[1] or "?"} for p, _ in left]
    return out


def archive_work(st, *, caller, handle, override=False):
    """Keep finished work out of the way: close its window (validated by ID), release what it
    holds (a parked work's kept leases, and the leases of the agent that ran in the closed
    window), keep the clone on disk, and record it `archived` (hidden from `work list` and
    `status` unless asked). Refused while an agent of the work still runs outside coord's
    window, or while it is queued or integrating. -> {work, window, released}."""
    w = st.resolve_work(handle)
    refuse_state(w, UNUSABLE)
    if w["state"] == "archived":
        return {"work": w["handle"], "window": "no window", "released": [], "already": True}
    authorize(st, w, caller, "archive", override)
    integ = integration_of(w)
    if integ.get("state") in QUEUED:
        raise Refused("work %s is %s into %s; archiving would strand that" % (w["handle"], integ["state"],
                                                                           integ.get("into")),
                      "coord work integrate release %s (or land it), then archive" % w["handle"])
    live, _ = session.live_window(w["data"].get("tmux"), True, w["handle"])
    window_conv = (w["data"].get("tmux") or {}).get("conversation") if live else None
    for conv in store.work_conversations(w):
        rt = st.find_conversation_runtime(conv)
        if rt is not None and rt.get("harness") != store.PARKED and conv != window_conv:
            raise Refused("work %s still has agent %s running outside coord's window" % (w["handle"], rt["handle"]),
                          "end that session (or coord send \"wrap up\" --to %s), then archive" % rt["handle"])
    what = _close_window(w, st, caller)
    released = end_parked(st, w, "work archived")
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


CODEX_CD = ("-C", "--cd")
NEW_WORKTREE = {"claude": ("-w", "--worktree"), "codex": ("--worktree",)}


def session_directory(harness, argv, cwd):
    """The directory an interactive session's command line works in: Codex's `-C/--cd DIR`
    (relative to cwd), else cwd; None when the session runs in a new worktree (Claude's
    `-w/--worktree [NAME]`, Codex's `--worktree`) or DIR is no directory. Claude has no option
    that changes its working directory (`--add-dir` only allows access to more directories)."""
    argv = list(argv)
    args = argv[:argv.index("--")] if "--" in argv else argv
    for a in args:
        if a in NEW_WORKTREE.get(harness, ()) or any(a.startswith(n + "=") for n in NEW_WORKTREE.get(harness, ())
                                                     if n.startswith("--")):
            return None
    target, i = None, 0
    while harness == "codex" and i < len(args):  # the last one given wins, as for any repeated option
        a = args[i]
        if a in CODEX_CD:
            target = args[i + 1] if i + 1 < len(args) else ""
            i += 1
        elif a.startswith("--cd="):
            target = a[len("--cd="):]
        elif a.startswith("-C"):  # -CDIR, -C=DIR
            target = a[3:] if a.startswith("-C=") else a[2:]
        elif a in CODEX_VALUE_OPTIONS:
            i += 1
        i += 1
    if target is None:
        return os.path.realpath(cwd)
    d = os.path.realpath(os.path.join(cwd, os.path.expanduser(target)))
    return d if target and os.path.isdir(d) else None


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
    target = session_directory(harness, argv, cwd)  # `codex -C OTHER` works elsewhere: not this clone's session
    there = clone_of(st, target) if target is not None else None
    if there is None or there["id"] != w["id"]:
        return None
    caller, pid_start = wrapper_person(st, pid)
    authorize(st, w, caller, "resume")
    with st.transaction():
        cur = st.work(w["id"])
        state = "resumed" if cur["state"] in ("parked", "closed", "archived") else cur["state"]
        direct = {"harness": harness, "kind": session["kind"], "conversation": session["conversation"], "pid": pid,
                  "pid_start": pid_start, "at": now_time(), "by": caller["id"], "cwd": target}
        unarchived = True if cur["state"] == "archived" else None
        data = {"direct": direct, "history": with_history(cur, state, caller, step="direct", harness=harness,
                                                       kind=session["kind"], conversation=session["conversation"],
                                                       unarchived=unarchived)}
        if state != cur["state"]:
            data["parked"] = None
        cur = st.update_work(w["id"], state=state, data=data)
        st.audit("work.direct", caller["id"], w["id"], harness=harness, kind=session["kind"],
                 conversation=session["conversation"], pid=pid, state=state, unarchived=unarchived)
    return {"work": cur["handle"], "work_id": cur["id"], "port_base": cur["data"].get("port_base"),
            "direct": direct, "state": state, "unarchived": bool(unarchived)}


def end_parked(st, w, reason):
    """Release what a parked work kept (its holder's leases); -> the resource names released."""
    conv = (w["data"].get("tmux") or {}).get("conversation")
    return st.end_parked(conv, reason) if conv else []


# =========================================================================== what `work list` and `work inspect` say

def inspect_work(st, *, work, environ=None, observe=False):
    """What is known about one work record: {work, owner, owner_live, tmux_live, tmux_why,
    depends: [(handle, state)], observed (head_ids of the last snapshot) or observe_error}.
    observe: also read @ from the clone's last snapshot (never snapshotting it)."""
    w = st.resolve_work(work) if isinstance(work, str) else work
    facts = {"work": w, "owner": st.runtime(w["runtime"]) if w["runtime"] else None,
             "owner_live": owner_of(st, w) is not None, "tmux_live": None, "tmux_why": None, "depends": []}
    if w["data"].get("tmux"):
        live, facts["tmux_why"] = session.live_window(w["data"].get("tmux"))
        facts["tmux_live"] = live is not None
    for dep in w["data"].get("depends", []):
        d = st.work(dep)
        facts["depends"].append((d["handle"] if d else dep, d["state"] if d else "unknown"))
    if w["state"] not in UNUSABLE and not directory_problems(w):
        facts["space"] = space_problem(w["path"])
    if facts["tmux_live"] is False:
        facts["headless"] = headless_orphan(st, w)
    if observe and not directory_problems(w) and w["state"] not in ENDED:
        try:
            facts["observed"] = head_ids(w["path"], snapshot=False, environ=environ)
        except store.CoordError as exc:
            facts["observe_error"] = exc.message
    return facts


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
    on_host = hosts_shown(st)
    grace = store.env_number(ctx.environ, "COORD_REGISTER_GRACE", REGISTER_GRACE, (0.0, 86400.0))
    for w in works:
        cut = interrupted(st, w)
        orphan = headless_orphan(st, w) if cut else None
        line = summary_line(dict(w, state=INTERRUPTED) if cut else w)
        if cut:
            line += "  " + store.hint("(%s: coord work resume --interrupted)" % (
                "window gone, " + headless_text(orphan) if orphan else "agent gone"))
        unregistered = not cut and not_registered(w, grace)
        if unregistered:
            line += "  " + UNREGISTERED
        if w["id"] in on_host:
            line += "  host %s" % on_host[w["id"]]
        if ctx.verbose:
            line += "  id=%s path=%s" % (w["id"], w["path"])
        lines.append(line)
        rec = public_work(w, st)
        if w["id"] in on_host:
            rec["host"] = on_host[w["id"]]
        if cut:
            rec["interrupted"] = True
        if orphan:
            rec["headless"] = orphan
        if unregistered:
            rec["attention"] = UNREGISTERED
        out.append(rec)
    data = {"ok": True, "work": out}
    if hidden:
        lines.append(store.hint("%d archived (coord work list --archived)" % hidden))
        data["archived_hidden"] = hidden
    if not works and not hidden:
        adoptable = _adoptable_count(ctx, st)
        if adoptable:
            lines.append(store.hint("no work records, but %d clone(s) to adopt (the database was lost?): "
                                    "coord work adopt --list" % adoptable))
            data["adoptable"] = adoptable
    return 0, data, "\n".join(lines)


def _adoptable_count(ctx, st):
    """How many clones `work adopt --list` would name, when this database has no work record at
    all (a lost database); 0 otherwise or when that cannot be read."""
    if st.works(include_removed=True):
        return 0
    try:
        return len(adoptable_clones(st, ctx.root, ctx.environ))
    except store.CoordError:
        return 0


def inspect_lines(facts, verbose=False, landing=()):
    """The text of `work inspect` for inspect_work's record; `landing` (land.landing_lines) goes
    before the verbose lines."""
    w, d = facts["work"], facts["work"]["data"]
    lines = [summary_line(w)]
    lines.append("path %s%s" % (w["path"], "" if w["path"] and os.path.isdir(w["path"]) else " (missing)"))
    if facts.get("space"):
        lines.append(facts["space"])
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
        if facts.get("headless"):
            o = facts["headless"]
            lines.append("interrupted: %s (session %d, processes %s, turn %s): coord work resume %s ends it"
                         % (headless_text(o), o["session"], " ".join(map(str, o["pids"])), o["turn"] or "none",
                            w["handle"]))
    if d.get("direct"):
        lines.append("%s session from a terminal (resume wrapper): %s" % (
            d["direct"].get("harness"), d["direct"].get("conversation") or "conversation not registered yet"))
    gate = gate_of(w)
    if gate.get("reason"):
        lines.append("gate %s: %s" % (gate["state"], store.clean_text(gate["reason"], 200)))
    for handle, state in facts["depends"]:
        lines.append("depends on %s (%s)" % (handle, state))
    lines += list(landing)
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
    integ = integration_of(w)
    cand = integ.get("candidate")
    if cand:
        lines.append("candidate change %s commit %s (frozen by %s for %s%s)" % (
            cand["change"], cand["commit"], cand["runtime"], cand["resource"],
            ", fencing number %s" % cand["fence"] if cand.get("fence") is not None else ""))
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


# =========================================================================== commands
# Handlers are (ctx, args) -> (exit code, JSON data, text), as in workspace.py.

@by_task
def cmd_start(ctx, args):
    prompt = read_prompt(args.prompt, args.prompt_file)
    r = start_work(ctx.db, caller=optional_caller(ctx), handle=args.handle, harness=args.harness,
                   extra=args.extra, environ=ctx.environ, prompt=prompt, override=args.override)
    r["attach"] = session.attach_command(r["tmux"], None, ctx.environ)
    return 0, ok_data(r), started_text(r, args.harness)


def started_text(r, harness, said=""):
    """What `work start` and `work resume` say on success: the window and the exact command that
    shows it (`said`: what else happened, after the window), then start_text's approvals or
    shell-agent lines when there are any."""
    attach = " ".join(shlex.quote(a) for a in r["attach"])
    more = start_text(r)
    if more:
        return "%s\nattach: %s" % ("%s%s\n%s" % (r["work"], said, more) if said else more, attach)
    return "%s runs %s in tmux window %s%s; attach: %s" % (r["work"], harness, r["tmux"].get("window_id"), said,
                                                         attach)


def start_text(r):
    """What `work start` (after started_text's window line) and `work resume` say: nothing when the
    harness will run coord's hooks; otherwise what a person must approve in the window, and how;
    for a shell agent its runtime and what is not enforced."""
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


@by_task
def cmd_resume(ctx, args):
    if args.interrupted:
        return cmd_resume_interrupted(ctx, args)
    if not args.handle:
        raise UsageError("work resume needs a work handle, or --interrupted", "coord work resume HANDLE")
    r = resume_work(ctx.db, caller=ctx.caller(), handle=args.handle, environ=ctx.environ,
                    conversation=args.conversation, harness=args.harness, override=args.override,
                    extra=getattr(args, "extra", None))
    r["attach"] = session.attach_command(r["tmux"], None, ctx.environ)
    return 0, ok_data(r), started_text(r, r["tmux"].get("harness") or "its harness", ended_text(r))


def ended_text(r):
    """` (ended its headless gemini: processes 1 2, SIGTERM)` for a resume that ended an orphan."""
    e = r.get("ended")
    return " (ended its headless %s: process%s %s, SIG%s)" % (
        store.clean_text(e["harness"] or "harness", 20), "" if len(e["pids"]) == 1 else "es",
        " ".join(map(str, e["pids"])), e["signal"]) if e else ""


def cmd_resume_interrupted(ctx, args):
    """`work resume --interrupted`: resume every interrupted work the caller may resume (after a
    reboot or a dead tmux server), each as `work resume HANDLE` would; one line per work."""
    if args.handle or args.conversation or args.harness or getattr(args, "extra", None) is not None:
        raise UsageError("--interrupted resumes each work's own recorded conversation with its recorded arguments; "
                         "give no handle, --conversation, --harness or -- ARGS with it", "coord work resume --interrupted")
    st, caller = ctx.db, ctx.caller()
    done, skipped, lines = [], [], []
    for w in st.works():
        if not interrupted(st, w):
            continue
        try:
            r = resume_work(st, caller=caller, handle=w["id"], environ=ctx.environ, override=args.override)
        except store.CoordError as exc:
            skipped.append({"work": w["handle"], "error": exc.message, "hint": exc.hint})
            lines.append("%s not resumed: %s" % (w["handle"], store.clean_text(exc.message, 300)))
            continue
        done.append(r)
        lines.append("%s resumed in tmux window %s%s" % (r["work"], r["tmux"].get("window_id"), ended_text(r)))
    if not done and not skipped:
        lines.append("no interrupted work")
    return (3 if skipped and not done else 0), {"ok": not skipped, "resumed": done, "skipped": skipped}, \
        "\n".join(lines)


@by_task
def cmd_attach(ctx, args):
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
    return 0, ok_data(r), text


def cmd_archive(ctx, args):
    r = archive_work(ctx.db, caller=ctx.caller(), handle=args.handle, override=args.override)
    text = None
    if r.get("already"):
        text = "%s was already archived" % r["work"]
    elif r["window"].startswith("window not"):
        text = r["window"]
    return 0, ok_data(r), text


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
    return 0, ok_data(dict(r, recorded=True)), "%s %s" % (r["work_id"], "" if r["port_base"] is None else r["port_base"])


def cmd_close(ctx, args):
    r = close_work(ctx.db, caller=ctx.caller(), handle=args.handle, override=args.override, environ=ctx.environ)
    return 0, ok_data(r), close_text(r)


def close_text(r):
    """What `work close` says: one line naming the window it closed (or why none), and one more
    when it waited, ended a headless harness, or left something running."""
    if r["window"].startswith("window not"):
        lines = [r["window"]]
    else:
        lines = ["%s closed (%s)" % (r["work"], "no window" if r["window"] == "no window" else
                                     "tmux window %s" % r["window"][len("closed "):])]
    if r.get("ended"):
        e = r["ended"]
        lines.append("ended its headless %s: process%s %s (SIG%s)" % (
            store.clean_text(e["harness"] or "harness", 20), "" if len(e["pids"]) == 1 else "es",
            " ".join(map(str, e["pids"])), e["signal"]))
    if r.get("left"):
        lines.append("waited %.0f s; still running: %s" % (r["waited"], ", ".join(
            "%d (%s)" % (p["pid"], store.clean_text(p["command"], 30)) for p in r["left"][:5])))
    elif (r.get("waited") or 0) >= 1:  # a hangup's ordinary exit is no news
        lines.append("waited %.1f s for its processes to exit" % r["waited"])
    return "\n".join(lines)


# =========================================================================== parser registration

def _parse_list(ws, both):
    p = ws.add_parser("list", parents=both, help="work records: handle, task, state")
    p.add_argument("--all", action="store_true", help="include removed and archived work")
    p.add_argument("--archived", action="store_true", help="only archived work")
    p.set_defaults(func=cmd_work_list)


LAUNCHABLE = tuple(session.HARNESSES)  # the harness table's rows, "shell" last (resume has no shell)


def _parse_start(ws, both):
    p = ws.add_parser("start", parents=both, help="run a harness for the work in a new tmux window")
    p.add_argument("handle", metavar="HANDLE", help=BY_TASK_HELP)
    p.add_argument("--harness", choices=LAUNCHABLE, default="claude",
                   help="shell: an agent with no hooks (COORD_SHELL_CMD, default $SHELL)")
    p.add_argument("--prompt", metavar="TEXT", help="the agent's first message (its task)")
    p.add_argument("--prompt-file", metavar="FILE", help="the first message, read from a UTF-8 file")
    p.add_argument("extra", nargs="*", metavar="ARG", help="more harness arguments, after -- (anywhere)")
    override_argument(p)
    p.set_defaults(func=cmd_start)


def _parse_attach(ws, both):
    p = ws.add_parser("attach", parents=both, help="print (or --execute) the command that shows the window")
    p.add_argument("handle", metavar="HANDLE", help=BY_TASK_HELP)
    p.add_argument("--execute", action="store_true")
    p.set_defaults(func=cmd_attach)


def _parse_park(ws, both):
    p = ws.add_parser("park", parents=both, help="close the window but keep the clone, with a reason")
    p.add_argument("handle", metavar="HANDLE")
    p.add_argument("--reason", required=True)
    override_argument(p)
    p.set_defaults(func=cmd_park)


def _parse_resume(ws, both):
    p = ws.add_parser("resume", parents=both, help="relaunch the harness resuming its conversation, with the "
                      "arguments its start got after -- (-- ARGS replaces them)")
    p.add_argument("handle", metavar="HANDLE", nargs="?", help=BY_TASK_HELP)
    p.add_argument("--interrupted", action="store_true",
                   help="resume every interrupted work you may resume (its agent gone without park or close)")
    p.add_argument("--conversation", metavar="ID", help="default: the recorded conversation")
    p.add_argument("--harness", choices=LAUNCHABLE[:-1])
    override_argument(p)
    p.set_defaults(func=cmd_resume)


def _parse_close(ws, both):
    p = ws.add_parser("close", parents=both, help="kill exactly the recorded window (validated by ID)")
    p.add_argument("handle", metavar="HANDLE")
    override_argument(p)
    p.set_defaults(func=cmd_close)


def _parse_record_conversation(ws, both):
    p = ws.add_parser("record-conversation", parents=both)  # no help: hidden, for .coord/bin's wrappers
    p.add_argument("--harness", choices=("claude", "codex"), required=True)
    p.add_argument("--pid", type=int, required=True, help="the wrapper's pid (the harness keeps it: exec)")
    p.add_argument("extra", nargs="*", metavar="ARG", help="the harness's arguments, after --")
    p.set_defaults(func=cmd_record_conversation)


def _parse_archive(ws, both):
    p = ws.add_parser("archive", parents=both, help="finished work to keep: close its window, release its "
                      "leases, keep the clone, hide it from work list and status")
    p.add_argument("handle", metavar="HANDLE")
    override_argument(p)
    p.set_defaults(func=cmd_archive)


# The `work` subcommands this module builds and handles (coord merges them with workspace's).
PARSERS = {"list": _parse_list, "start": _parse_start, "attach": _parse_attach, "park": _parse_park,
           "resume": _parse_resume, "close": _parse_close, "record-conversation": _parse_record_conversation,
           "archive": _parse_archive}
