"""coord's tmux layer: launch, attach, validate and close managed harness windows.

Invariants:
- Every tmux call goes through `Tmux.run`: an argv list (never a shell), an explicit
  `-S SOCKET`, a timeout, a scrubbed environment, and `TmuxError` on failure.
- Errors are store's family: tmux missing or failing is an `EnvError` (`TmuxNotFound`,
  `TmuxError`), a record that no longer matches or an unsafe close is `store.Refused`, a bad
  harness configuration is a `UsageError`.
- Every `-t` is an immutable ID that tmux itself returned (`$session`, `@window`, `%pane`).
  Names are presentation only and are never looked up; tmux resolves names by prefix.
- A recorded window is ours only while its user option `@coord-work` equals the full work ID,
  its pane still has the recorded pid and start command, and the server is the recorded one
  (IDs restart from zero when a server restarts). Anything else is refused with a reason.
- Lookups list whole servers (`list-panes -a`) and match IDs in Python: `display-message`
  silently falls back to another pane when its target is gone, and `show-options -q`
  hides a missing target, so neither is used to decide whether something exists.

This module owns tmux and nothing else; callers store the returned record (a plain dict).
"""

import os
import shlex
import shutil
import subprocess
import time

import harness_facts
import store
from store import EnvError, Refused, UsageError

TIMEOUT = 10.0
SEP = "\t"

# Harness name -> its row of facts (harness_facts.py): `command`, the variable holding its command,
# and `resume`, the argv after the command that resumes a conversation (None: nothing to resume).
HARNESSES = harness_facts.HARNESSES

# Never handed to a tmux client: a client that starts the server gives the server its
# environment, and every later window inherits it.
_CLIENT_SCRUB = (
    "TMUX", "TMUX_PANE", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_PREFIX", "COORD_RUNTIME_ID", "COORD_WORK_ID",
    "CLAUDE_CODE_SESSION_ID", "CLAUDE_ENV_FILE", "CLAUDE_PROJECT_DIR", "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT", "CODEX_SESSION_ID", "CODEX_THREAD_ID",
    "QWEN_CODE_SESSION_ID", "QWEN_CODE_AGENT_ID",
    "COPILOT_AGENT_SESSION_ID", "COPILOT_CLI",  # Copilot CLI's shell: its session (Store.caller reads it)
)
_CLIENT_SCRUB += ("COORD_OPENCODE_SESSION", "COORD_OPENCODE_AGENT", "OPENCODE_PID", "OPENCODE")
_CLIENT_SCRUB += ("COORD_KILO_SESSION", "COORD_KILO_AGENT", "KILO_PID", "KILO", "KILO_RUN_ID", "KILO_PROCESS_ROLE")
_CLIENT_SCRUB += ("COORD_PI_SESSION", "COORD_PI_AGENT", "PI_CODING_AGENT")
_CLIENT_SCRUB += ("COORD_OPENCODE_RESUME", "COORD_KILO_RESUME")  # launch.START_AT_LAUNCH: only the resumed window's own
_CLIENT_SCRUB += ("COORD_LAUNCH_PROMPT",)  # only a window launched with a first message has it (hook.start_turn)
# Removed from a launched pane unless the caller sets them: an already running server may
# carry another agent's identity in its global environment.
_PANE_UNSET = tuple(v for v in _CLIENT_SCRUB if v not in ("TMUX", "TMUX_PANE"))

# Separates commands inside one tmux invocation; a string ";" is escaped like any value.
THEN = object()

OPT_PROJECT = "@coord-project"
OPT_WORK = store.TMUX_WORK_OPTION
OPT_CONVERSATION = "@coord-conversation"
OPT_RUNTIME = "@coord-runtime"

_PANE_FIELDS = ("pid", "session_id", "window_id", "pane_id", "pane_pid", "pane_dead",
                "session_activity", "session_last_attached", "pane_tty", "pane_in_mode", "pane_current_command",
                "pane_start_command")
_PANE_FORMAT = SEP.join("#{%s}" % f for f in _PANE_FIELDS)


_INSTALL_TMUX = "apt-get install tmux (or brew install tmux), then retry"


class TmuxNotFound(EnvError):
    """The tmux binary is not on PATH."""

    def __init__(self):
        super().__init__("tmux not found: install tmux", _INSTALL_TMUX)


class TmuxError(EnvError):
    """A tmux command failed: carries the argv, exit code (None on timeout) and stderr."""

    def __init__(self, argv, returncode, stderr, hint=None):
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        first = (stderr.strip().splitlines() or ["no output"])[0]
        if returncode is None:
            why = "timed out"
        else:
            why = "exit %d" % returncode
        sub = next((a for a in self.argv[1:] if not a.startswith("-") and a != self.socket_of()), "")
        super().__init__("tmux %s failed (%s): %s" % (sub, why, first), hint or
                         "retry; coord work list shows what was recorded")

    def socket_of(self):
        """The -S/-L operand of the recorded argv, so it is not taken for the subcommand."""
        for i, a in enumerate(self.argv[:-1]):
            if a in ("-S", "-L"):
                return self.argv[i + 1]
        return None


# ---------------------------------------------------------------------------------------
# Sockets and environments


def default_socket(environ=None, label="default"):
    """The path tmux uses for `-L label`: ${TMUX_TMPDIR:-/tmp}/tmux-UID/label, resolved."""
    environ = os.environ if environ is None else environ
    base = environ.get("TMUX_TMPDIR") or "/tmp"
    return os.path.join(os.path.realpath(base), "tmux-%d" % os.getuid(), label)


def socket_from_tmux_env(value):
    """The socket path in a $TMUX value ("path,server-pid,session-index"), or None."""
    if not value:
        return None
    parts = value.rsplit(",", 2)
    return parts[0] if len(parts) == 3 and parts[0] else None


AGENTS_LABEL = "coord"  # the tmux server agents run in by default: `tmux -L coord`


def resolve_socket(explicit=None, environ=None):
    """Socket to use: explicit, else $COORD_TMUX_SOCKET, else coord's own server (`-L coord`).

    Never the tmux server the caller runs in: an agent reaches every pane of its server with tmux
    itself, so no pane of a server agents run in is the person (store.agent_tmux_server), and the
    person's own server stays theirs. A value without a slash is a label, as with `tmux -L`.
    """
    environ = os.environ if environ is None else environ
    value = explicit or environ.get("COORD_TMUX_SOCKET") or AGENTS_LABEL
    if "/" not in value:
        return default_socket(environ, value)
    return os.path.abspath(value)


def same_socket(a, b):
    """True when two socket paths name the same file."""
    if not a or not b:
        return False
    return os.path.realpath(a) == os.path.realpath(b)


def client_env(environ=None, keep_tmux=False):
    """A copy of the environment safe to hand to a tmux client."""
    environ = os.environ if environ is None else environ
    drop = _CLIENT_SCRUB if not keep_tmux else tuple(
        v for v in _CLIENT_SCRUB if v not in ("TMUX", "TMUX_PANE"))
    return {k: v for k, v in environ.items() if k not in drop}


# ---------------------------------------------------------------------------------------
# The one subprocess helper


class Tmux(object):
    """One tmux server, addressed only by its socket path."""

    def __init__(self, socket=None, environ=None):
        self.socket = resolve_socket(socket, environ)
        self.environ = environ

    def argv(self, *args):
        """The full argv for a tmux command on this server (THEN separates commands)."""
        return ["tmux", "-S", self.socket] + [";" if a is THEN else _quote_arg(a) for a in args]

    def run(self, *args, timeout=TIMEOUT):
        """Run one tmux command (or a `;`-joined sequence); return stdout, raise TmuxError."""
        argv = self.argv(*args)
        try:
            proc = subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=client_env(self.environ), timeout=timeout,
                encoding="utf-8", errors="backslashreplace")
        except FileNotFoundError:
            raise TmuxNotFound()
        except subprocess.TimeoutExpired as exc:
            err = exc.stderr or ""
            if isinstance(err, bytes):
                err = err.decode("utf-8", "backslashreplace")
            raise TmuxError(argv, None, err or "no reply within %.0fs" % timeout)
        if proc.returncode != 0:
            raise TmuxError(argv, proc.returncode, proc.stderr)
        return proc.stdout

    def panes(self):
        """Every pane of the server as dicts of _PANE_FIELDS; [] when no server runs."""
        try:
            out = self.run("list-panes", "-a", "-F", _PANE_FORMAT)
        except TmuxError as exc:
            if _no_server(exc.stderr):
                return []
            raise
        rows = []
        for line in out.splitlines():
            values = line.split(SEP, len(_PANE_FIELDS) - 1)
            if len(values) != len(_PANE_FIELDS):
                continue
            row = dict(zip(_PANE_FIELDS, values))
            row["pid"] = int(row["pid"])
            row["pane_pid"] = int(row["pane_pid"])
            row["pane_dead"] = row["pane_dead"] == "1"
            row["pane_in_mode"] = row["pane_in_mode"] not in ("", "0")
            for key in ("session_activity", "session_last_attached"):  # empty: never attached
                row[key] = int(row[key]) if row[key].isdigit() else None
            rows.append(row)
        return rows

    def option(self, scope, target, name):
        """A user option set on exactly this object (scope "session"/"window"/"pane"), or None.

        The caller must already know the target exists: an unset option and a missing
        target both make tmux fail here.
        """
        flag = {"session": [], "window": ["-w"], "pane": ["-p"]}[scope]
        try:
            out = self.run(*(["show-options"] + flag + ["-v", "-t", target, name]))
        except TmuxError:
            return None
        return out[:-1] if out.endswith("\n") else out

    def clients(self):
        """Attached clients as (client_name, session_id) pairs."""
        try:
            out = self.run("list-clients", "-F", "#{client_name}" + SEP + "#{session_id}")
        except TmuxError as exc:
            if _no_server(exc.stderr):
                return []
            raise
        return [tuple(line.split(SEP, 1)) for line in out.splitlines() if SEP in line]


def _quote_arg(value):
    """Keep a trailing ';' literal: tmux reads `word;` as `word` followed by a separator."""
    value = str(value)
    return value[:-1] + "\\;" if value.endswith(";") else value


def _no_server(stderr):
    text = stderr or ""
    return ("no server running" in text or "error connecting" in text
            or "No such file or directory" in text)


# ---------------------------------------------------------------------------------------
# Harness commands


def harness_command(harness, environ=None):
    """The argv prefix that starts a harness: shlex-split $COORD_<HARNESS>_CMD, or its name."""
    if harness not in HARNESSES:
        raise UsageError("unknown harness %r: use one of %s" % (
            harness, ", ".join(sorted(HARNESSES))), "coord work start <work> --harness claude")
    environ = os.environ if environ is None else environ
    var = HARNESSES[harness]["command"]
    raw = environ.get(var, "").strip()
    if not raw and harness == "shell":
        return [environ.get("SHELL") or "sh"]
    if not raw:
        return [harness]
    try:
        words = shlex.split(raw)
    except ValueError as exc:
        raise UsageError("%s is not valid shell words (%s): %r" % (var, exc, raw),
                         "export %s='claude-direct' (or unset it)" % var)
    return words or [harness]


def harness_argv(harness, conversation=None, extra=(), environ=None, prompt=None, no_daemon=False):
    """The argv that starts `harness`, resuming `conversation` when given, with `prompt` as
    the first message of an interactive session: both CLIs take it as their last positional
    (`claude [options] [prompt]`, `codex [OPTIONS] [PROMPT]`), after a `--` so that a prompt
    starting with `-`, or one that is a Codex subcommand's name, stays a prompt. no_daemon
    (Codex): add `--no-daemon` (see codex_offers_no_daemon) unless the flags already have it."""
    argv = harness_command(harness, environ)
    if harness == "copilot":
        return copilot_argv(argv, conversation, extra, prompt)
    if harness == "shell":
        if conversation or prompt is not None:
            raise UsageError("a shell agent has no conversation to resume and takes no first message",
                             "coord work start WORK --harness shell, then give the task in its window")
        return argv + [str(a) for a in extra]
    if conversation:
        argv += list(HARNESSES[harness]["resume"]) + [conversation]
    if no_daemon and harness == "codex" and "--no-daemon" not in [str(a) for a in extra]:
        argv.append("--no-daemon")
    argv += [str(a) for a in extra]
    if prompt is not None and harness == "qwen":
        argv.append("--prompt-interactive=" + prompt)  # Qwen's positional prompt is one-shot (-p)
    elif prompt is not None and harness in ("opencode", "kilo"):
        argv.append("--prompt=" + prompt)  # its TUI's positional is the project directory
    elif prompt is not None and harness == "pi":
        # pi 0.73.1 takes `--` as a flag and a leading - or @ as an option or a file to attach
        argv.append(" " + prompt if prompt.startswith(("-", "@")) else prompt)
    elif prompt is not None and harness == "gemini":
        # Gemini CLI 0.61.0 (yargs) keeps what follows `--` out of its query: the first message
        # of an interactive session is --prompt-interactive, `=` keeping a leading `-` a value;
        # it goes before the extra arguments, which may hold a `--` of their own.
        argv.insert(len(argv) - len(extra), "--prompt-interactive=%s" % prompt)
    elif prompt is not None:
        argv += ([] if "--" in argv[1:] else ["--"]) + [prompt]
    return argv


# The harness arguments that belong to one launch only: each harness's `one_shot` (harness_facts.py).
ONE_SHOT_ARGS = {name: row["one_shot"] for name, row in HARNESSES.items() if row["resume"]}


def reusable_args(harness, extra):
    """`extra` (a launch's harness arguments) without the one-shot ones (ONE_SHOT_ARGS: `-o V`,
    `-o=V`, `--opt V`, `--opt=V`), and without a `--` and all after it (a positional first message)."""
    one_shot = ONE_SHOT_ARGS.get(harness, {})
    out, words = [], [str(a) for a in extra]
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            break
        name = word.split("=", 1)[0] if word.startswith("--") else word
        if name not in one_shot:
            out.append(word)
        elif "=" not in word and one_shot[name] == 1 and i + 1 < len(words):
            i += 1
        elif "=" not in word and one_shot[name] is None and i + 1 < len(words) and \
                not words[i + 1].startswith("-"):
            i += 1
        i += 1
    return out


def copilot_argv(argv, conversation, extra, prompt):
    """Copilot CLI 1.0.102 takes no positional prompt (`copilot [OPTIONS] [COMMAND]`): the first
    message of an interactive session is `--interactive=PROMPT` (`-i`), and a conversation is
    resumed with `--resume=ID` (its value is optional, so it is joined with `=`; so is the prompt,
    which may start with `-`)."""
    argv = list(argv)
    if conversation:
        argv.append("--resume=%s" % conversation)
    argv += [str(a) for a in extra]
    if prompt is not None:
        argv.append("--interactive=%s" % prompt)
    return argv


def codex_offers_no_daemon(command, environ=None, timeout=10.0):
    """True when the Codex CLI started by `command` (an argv prefix) lists `--no-daemon` in its
    help. Observed with 0.171.0: its interactive sessions share one background app-server per
    CODEX_HOME, started by the first session with that session's environment and working
    directory; every later session's hooks run as that server's children, so they would see
    the first window's COORD_WORK_ID and tmux pane, and the server would outlive its window
    inside the first clone. `--no-daemon` keeps each session's server in its own process.
    An older CLI without the flag, or any failure to ask, gives False (nothing is added)."""
    try:
        proc = subprocess.run([str(a) for a in command] + ["--help"], env=client_env(environ),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              timeout=timeout, encoding="utf-8", errors="replace")
    except (OSError, ValueError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0 and "--no-daemon" in (proc.stdout or "")


def window_name(task, ident):
    """Presentation-only window name `<short-task>-<sid4>`; never used to find anything."""
    short = "".join(c if c.isalnum() or c in "-_" else "-" for c in (task or "").lower())
    short = "-".join(p for p in short.split("-") if p)[:20].rstrip("-_") or "work"
    tag = "".join(c for c in (ident or "") if c.isalnum())[:4].lower()
    return "%s-%s" % (short, tag) if tag else short


def _pane_argv(argv, env):
    """`env -u LEAKED... K=V... argv`: several words, so tmux execs it without a shell."""
    argv = [str(a) for a in argv]
    if not argv or not argv[0]:
        raise UsageError("empty harness command", "unset COORD_CLAUDE_CMD / COORD_CODEX_CMD")
    if "=" in argv[0]:
        raise UsageError("harness command %r contains '=', which env(1) would take as a "
                         "variable" % argv[0], "put the command in a wrapper script")
    env = dict(env or {})
    words = ["env"]
    for name in _PANE_UNSET:
        if name not in env:
            words += ["-u", name]
    for name in sorted(env):
        if not name or "=" in name or not (name[0].isalpha() or name[0] == "_"):
            raise UsageError("invalid environment variable name %r" % name)
        words.append("%s=%s" % (name, env[name]))
    return words + argv


# ---------------------------------------------------------------------------------------
# Launch


def launch(project, work_id, cwd, argv, env=None, task=None, conversation=None, harness=None,
           previous=None, socket=None):
    """Open a window running `argv` in `cwd` and return its record (a dict to store).

    Reuses the session of `previous` (an earlier record of this work) when that session
    still exists on the same server and carries this project's `@coord-project`;
    otherwise creates a new detached session. The window is labelled before it is returned,
    or killed.
    """
    if socket is None and previous and previous.get("socket"):
        socket = previous["socket"]
    tmux = Tmux(socket)
    cwd = os.path.abspath(cwd)
    _check_launchable(cwd, argv, env, harness)
    name = window_name(task, work_id)
    launched_at = time.time()
    fields, created = _open_window(tmux, _reusable_session(tmux, previous, project), name, cwd,
                                   _pane_argv(argv, env))
    session_id, window_id, pane_id, pane_pid, server_pid, start = fields
    record = {
        "socket": tmux.socket, "server_pid": int(server_pid), "session_id": session_id,
        "window_id": window_id, "pane_id": pane_id, "pane_pid": int(pane_pid),
        "pane_command": start, "window_name": name, "project": project, "work_id": work_id,
        "conversation": conversation, "harness": harness,
        "launched_at": launched_at,  # nudge: an agent idle since its SessionStart, typed into since then?
    }
    _label_new_window(tmux, record, created)
    return record


def _check_launchable(cwd, argv, env, harness):
    """Refuse what tmux would start and lose at once: a missing directory (tmux silently starts
    elsewhere) or a program not on PATH (the pane would die with "env: not found")."""
    if not os.path.isdir(cwd):
        raise Refused("working directory %s does not exist" % cwd,
                      "coord work inspect <work> (is the clone still there?)")
    program = str(argv[0]) if argv else ""
    if program and "/" not in program and shutil.which(program, path=(env or {}).get("PATH")) is None:
        var = HARNESSES[harness]["command"] if harness in HARNESSES else "COORD_CLAUDE_CMD / COORD_CODEX_CMD"
        raise EnvError("%s not found on PATH" % program,
                       "install it, or export %s='/path/to/%s', then retry" % (var, program))


def _open_window(tmux, session, name, cwd, command):
    """A new window in `session`, or a new detached session when it is None: return its six
    fields (session, window, pane, pane pid, server pid, start command) and whether the
    session was created."""
    tmux_cwd = cwd.replace("#", "##")  # tmux expands -c as a format
    fmt = SEP.join(("#{session_id}", "#{window_id}", "#{pane_id}", "#{pane_pid}", "#{pid}",
                    "#{pane_start_command}"))
    if session:
        out = tmux.run("new-window", "-d", "-P", "-F", fmt, "-t", session, "-n", name,
                       "-c", tmux_cwd, "--", *command)
    else:
        parent = os.path.dirname(tmux.socket)
        if parent and not os.path.isdir(parent):
            os.makedirs(parent, 0o700, exist_ok=True)
        base = ["new-session", "-d", "-P", "-F", fmt, "-n", name, "-c", tmux_cwd]
        out = _new_session(tmux, base, name, command)
    fields = out.strip("\n").split(SEP, 5)
    if len(fields) != 6 or not fields[1].startswith("@"):
        # tmux can exit 0 without creating anything (e.g. an uncreatable socket).
        raise TmuxError(tmux.argv("new-window" if session else "new-session"), 0,
                        "no window was created on %s: %r" % (tmux.socket, out),
                        "check that the socket directory %s is writable"
                        % os.path.dirname(tmux.socket))
    return fields, not session


def _label_new_window(tmux, record, created):
    """Label the session (when created), window and pane with the project, work and
    conversation, and stop tmux renaming the window, in one tmux call. An unlabelled window
    could never be validated again, so on failure it is killed (or, if that fails too, the
    error says how to stop it)."""
    session_id, window_id, pane_id = record["session_id"], record["window_id"], record["pane_id"]
    labels = [(OPT_PROJECT, record["project"]), (OPT_WORK, record["work_id"]),
              (OPT_CONVERSATION, record["conversation"])]
    seq = []
    if created:
        for opt, value in labels:
            if value:
                seq += [THEN, "set-option", "-t", session_id, opt, value]
    for opt, value in labels:
        if value:
            seq += [THEN, "set-option", "-w", "-t", window_id, opt, value]
            seq += [THEN, "set-option", "-p", "-t", pane_id, opt, value]
    # The server now runs an agent: no pane of it is ever the person (store.agent_tmux_server).
    seq += [THEN, "set-option", "-s", store.TMUX_AGENTS_OPTION, "1"]
    seq += [THEN, "set-option", "-w", "-t", window_id, "automatic-rename", "off"]
    seq += [THEN, "set-option", "-w", "-t", window_id, "allow-rename", "off"]
    try:
        tmux.run(*seq[1:])
    except EnvError as exc:
        try:
            tmux.run("kill-window", "-t", window_id)
        except EnvError:
            raise TmuxError(["set-option"], getattr(exc, "returncode", 1), getattr(exc, "stderr", exc.message),
                            "window %s (pane %s, pid %s) was left running unlabelled on %s and is not recorded; "
                            "stop it with: tmux -S %s kill-window -t %s"
                            % (window_id, pane_id, record["pane_pid"], tmux.socket, shlex.quote(tmux.socket),
                               window_id))
        raise


def label_harness(record, runtime, conversation, timeout=2.0):
    """Set @coord-runtime and @coord-conversation on the recorded window and pane, in one tmux
    call, once the harness registered. The caller has proved the record names the pane it runs
    in (the hook: its $TMUX and $TMUX_PANE name the recorded server and pane, whose recorded
    pid is its ancestor), so no lookup is needed. Raises EnvError when tmux fails."""
    tmux = Tmux(record["socket"])
    seq = []
    for opt, value in ((OPT_RUNTIME, runtime), (OPT_CONVERSATION, conversation)):
        seq += [THEN, "set-option", "-w", "-t", record["window_id"], opt, value,
                THEN, "set-option", "-p", "-t", record["pane_id"], opt, value]
    tmux.run(*seq[1:], timeout=timeout)


def _new_session(tmux, base, name, command):
    """Run new-session, retrying while a server that just lost its last window exits."""
    deadline = time.monotonic() + 5.0
    use_name = True
    while True:
        try:
            out = tmux.run(*(base + (["-s", name] if use_name else []) + ["--"] + command))
        except TmuxError as exc:
            if "duplicate session" in exc.stderr and use_name:
                use_name = False  # tmux numbers the session instead
                continue
            if "server exited unexpectedly" not in exc.stderr or time.monotonic() > deadline:
                raise
            out = ""
        if out.strip() or time.monotonic() > deadline:
            return out
        time.sleep(0.05)


def _reusable_session(tmux, previous, project):
    """The recorded session ID when it lives on this server and belongs to `project`."""
    if not previous or not previous.get("session_id"):
        return None
    if not same_socket(previous.get("socket"), tmux.socket):
        return None
    sid = previous["session_id"]
    panes = tmux.panes()
    if not any(p["session_id"] == sid for p in panes):
        return None
    if previous.get("server_pid") and panes[0]["pid"] != previous["server_pid"]:
        return None  # restarted server: "$N" now names some other session
    if tmux.option("session", sid, OPT_PROJECT) != project:
        return None
    return sid


# ---------------------------------------------------------------------------------------
# Validation


def problem(record, tmux=None):
    """Why `record` no longer names its live window and pane, or None when it still does."""
    try:
        _inspect(record, tmux)
    except Refused as exc:
        return exc.message
    return None


def validate(record, tmux=None):
    """Check the record against the live server; return the live state or raise Refused.

    The returned dict has window_id, pane_id, dead (the harness exited but tmux kept the
    pane), sessions (session IDs holding the window) and panes (pane IDs in the window).
    Window names are not checked: they are presentation only.
    """
    live = _inspect(record, tmux)
    del live["all_panes"]
    return live


def window_state(record):
    """"alive", "gone" or "unknown" (tmux missing or failing) for a recorded window, validated by
    its IDs; None when no window was recorded. Never raises."""
    if not record:
        return None
    try:
        validate(record)
    except Refused:
        return "gone"
    except EnvError:
        return "unknown"
    return "alive"


def live_window(record, strict=False, owner=None):
    """The recorded window when it still validates, else None (with the reason).

    strict: when tmux cannot answer (not on PATH, failing), raise EnvError instead of
    calling the window gone; cleanup needs evidence, not the absence of an answer. owner (the
    work's handle) names it in that error.
    """
    if not record:
        return None, "no recorded window"
    try:
        validate(record)
    except EnvError as exc:
        if strict:
            raise EnvError("cannot check tmux window %s of %s: %s" % (record.get("window_id"), owner,
                                                                      exc.message), exc.hint)
        return None, exc.message
    except Refused as exc:
        return None, exc.message
    return record, None


def _inspect(record, tmux):
    tmux = tmux or Tmux(record["socket"])
    wid, pid_ = record["window_id"], record["pane_id"]
    hint = "coord work inspect <work> (the record is stale; start the work again)"
    panes = tmux.panes()
    if not panes:
        raise Refused("tmux server %s is not running: window %s is gone" % (tmux.socket, wid),
                      hint)
    server_pid = panes[0]["pid"]
    if record.get("server_pid") and server_pid != record["server_pid"]:
        raise Refused("tmux server %s restarted since launch (pid %d, recorded %d): %s may be "
                      "another window" % (tmux.socket, server_pid, record["server_pid"], wid),
                      hint)
    in_window = [p for p in panes if p["window_id"] == wid]
    if not in_window:
        raise Refused("window %s no longer exists on %s" % (wid, tmux.socket), hint)
    work = tmux.option("window", wid, OPT_WORK)
    if work != record["work_id"]:
        raise Refused("window %s is not this work's: %s is %r, expected %r (reused or "
                      "relabelled)" % (wid, OPT_WORK, work, record["work_id"]), hint)
    project = tmux.option("window", wid, OPT_PROJECT)
    if record.get("project") and project != record["project"]:
        raise Refused("window %s belongs to project %r, expected %r"
                      % (wid, project, record["project"]), hint)
    pane = next((p for p in in_window if p["pane_id"] == pid_), None)
    if pane is None:
        raise Refused("pane %s is no longer in window %s" % (pid_, wid), hint)
    if pane["pane_pid"] != record["pane_pid"]:
        raise Refused("pane %s was replaced: it runs pid %d, recorded %d"
                      % (pid_, pane["pane_pid"], record["pane_pid"]), hint)
    if record.get("pane_command") is not None and pane["pane_start_command"] != \
            record["pane_command"]:
        raise Refused("pane %s runs %r, recorded %r" % (
            pid_, pane["pane_start_command"], record["pane_command"]), hint)
    return {
        "socket": tmux.socket, "server_pid": server_pid, "window_id": wid, "pane_id": pid_,
        "dead": pane["pane_dead"], "current_command": pane["pane_current_command"],
        "in_mode": pane["pane_in_mode"], "tty": pane["pane_tty"],
        # Last key a client typed into any session showing this window (whole seconds; tmux's own
        # send-keys does not count): None when a session does not say.
        "typed_at": None if any(p["session_activity"] is None for p in in_window)
        else max(p["session_activity"] for p in in_window),
        # No client ever attached to a session showing it (tmux leaves session_last_attached
        # empty until one does): no key can have been typed there, whatever the clock says.
        "never_attached": all(p["session_last_attached"] is None for p in in_window),
        "sessions": sorted({p["session_id"] for p in in_window}),
        "panes": [p["pane_id"] for p in in_window],
        "pane_pids": [p["pane_pid"] for p in in_window],
        "all_panes": panes,
    }


# ---------------------------------------------------------------------------------------
# Finding a work's window again (adopt after the database was lost)


def find_work_window(socket, project, work_id, tmux=None):
    """The record of the live window coord launched for `work_id` of `project` on this server,
    found by the labels launch put on it (@coord-work on the window, @coord-project on the window
    and its pane): the same dict launch returns, with the pane's @coord-conversation as the
    conversation. None when no such window runs (or more than one does: nothing to choose by)."""
    tmux = tmux or Tmux(socket)
    panes = tmux.panes()
    found = []
    for wid in sorted({p["window_id"] for p in panes}):
        if tmux.option("window", wid, OPT_WORK) != work_id or tmux.option("window", wid, OPT_PROJECT) != project:
            continue
        found += [p for p in panes if p["window_id"] == wid and not p["pane_dead"]
                  and tmux.option("pane", p["pane_id"], OPT_WORK) == work_id]
    if len({p["pane_id"] for p in found}) != 1:
        return None
    p = found[0]
    name = tmux.run("display-message", "-p", "-t", p["pane_id"], "#{window_id}" + SEP + "#{window_name}")
    wid_, _, name = name.rstrip("\n").partition(SEP)
    return {"socket": tmux.socket, "server_pid": p["pid"], "session_id": p["session_id"],
            "window_id": p["window_id"], "pane_id": p["pane_id"], "pane_pid": p["pane_pid"],
            "pane_command": p["pane_start_command"],
            "window_name": name if wid_ == p["window_id"] else None, "project": project, "work_id": work_id,
            "conversation": tmux.option("pane", p["pane_id"], OPT_CONVERSATION), "harness": None}


def harness_of_command(command):
    """The harness a pane's start command runs (the first word naming one of HARNESSES), else None."""
    try:
        words = shlex.split(command or "")
    except ValueError:
        return None
    for word in words:
        name = os.path.basename(word)
        if name in HARNESSES and name != "shell":
            return name
    return None


def descends_from(pid, ancestors):
    """True when process `pid` is one of `ancestors` or below one (False when unknown)."""
    return _descends_from(pid, ancestors)


# ---------------------------------------------------------------------------------------
# Attach


def windows_state(records):
    """{key: "alive" | "dead" | "gone" | "unknown"} for {key: a recorded window}, with one
    list-panes per tmux server instead of validate()'s reads per window: the recorded window,
    pane and pane pid still there on a server with the recorded pid ("dead": tmux kept the pane
    after its harness exited). A view's fact, never a check before acting (that is validate's)."""
    out, servers = {}, {}
    for key, rec in records.items():
        servers.setdefault(rec.get("socket"), []).append(key)
    for socket, keys in servers.items():
        try:
            panes = Tmux(socket).panes() if socket else None
        except EnvError:
            panes = None
        by_pane = {p["pane_id"]: p for p in panes or ()}
        for key in keys:
            rec = records[key]
            if panes is None:
                out[key] = "unknown"
                continue
            p = by_pane.get(rec.get("pane_id"))
            if p is None or p["window_id"] != rec.get("window_id") or p["pane_pid"] != rec.get("pane_pid") or \
                    (rec.get("server_pid") and p["pid"] != rec["server_pid"]):
                out[key] = "gone"
            else:
                out[key] = "dead" if p["pane_dead"] else "alive"
    return out


def attach_command(record, inside_tmux=None, environ=None):
    """The argv that shows the recorded pane: switch-client inside its server, else attach (from a
    pane of another tmux server too: tmux refuses to nest only a client on one of its own panes).

    inside_tmux=None decides from $TMUX: inside only when it names the record's server.
    """
    environ = os.environ if environ is None else environ
    if inside_tmux is None:
        inside_tmux = same_socket(socket_from_tmux_env(environ.get("TMUX")), record["socket"])
    verb = "switch-client" if inside_tmux else "attach-session"
    # A pane target makes tmux select its window and pane as well as the session.
    return ["tmux", "-S", record["socket"], verb, "-t", record["pane_id"]]


def attach(record, inside_tmux=None, environ=None):
    """Validate, then run the attach command on this terminal; return its exit status."""
    environ = os.environ if environ is None else environ
    validate(record)
    argv = attach_command(record, inside_tmux, environ)
    inside = argv[3] == "switch-client"
    # switch-client finds the operator's client through $TMUX/$TMUX_PANE; a nested attach
    # must not see $TMUX at all.
    env = client_env(environ, keep_tmux=inside)
    try:
        return subprocess.call(argv, env=env, timeout=None if not inside else TIMEOUT)
    except FileNotFoundError:
        raise TmuxNotFound()


# ---------------------------------------------------------------------------------------
# Close

_FROM_ENV = object()


def close(record, caller_pane=_FROM_ENV, caller_socket=_FROM_ENV, caller_pid=None):
    """Kill exactly the recorded window after validating it; return what was done.

    Refuses when the caller runs in that window (it would die before recording the close).
    When a client is attached to a session for which this is the last window, that client
    is first switched to another session of the same project, or the close is refused.
    """
    tmux = Tmux(record["socket"])
    live = _inspect(record, tmux)
    wid = live["window_id"]
    if caller_pane is _FROM_ENV:
        caller_pane = os.environ.get("TMUX_PANE")
    if caller_socket is _FROM_ENV:
        caller_socket = socket_from_tmux_env(os.environ.get("TMUX"))
    same_server = caller_socket is None or same_socket(caller_socket, tmux.socket)
    inside = bool(caller_pane) and same_server and caller_pane in live["panes"]
    if not inside:
        inside = _descends_from(caller_pid or os.getpid(), live["pane_pids"])
    if inside:
        raise Refused("refusing to close window %s from inside it (pane %s): the close would "
                      "kill this command first" % (wid, caller_pane or "of an ancestor"),
                      "run coord work close from a pane outside window %s" % wid)
    all_panes = live["all_panes"]
    switches = []
    clients = tmux.clients()
    for sid in live["sessions"]:
        windows = {p["window_id"] for p in all_panes if p["session_id"] == sid}
        attached = [name for name, csid in clients if csid == sid]
        if windows != {wid} or not attached:
            continue
        other = _other_project_session(tmux, all_panes, live["sessions"], record["project"])
        if other is None:
            raise Refused("window %s is the last window of session %s, where %s attached, and "
                          "no other session of project %r exists to move to"
                          % (wid, sid, "a client is" if len(attached) == 1 else "clients are",
                             record["project"]),
                          "detach first (tmux -S %s detach-client -s %s) or start another "
                          "work, then retry" % (tmux.socket, sid))
        switches += [(name, other) for name in attached]
    for name, other in switches:
        tmux.run("switch-client", "-c", name, "-t", other)
    tmux.run("kill-window", "-t", wid)
    return {"window_id": wid, "switched": [{"client": n, "session_id": s} for n, s in switches]}


def _other_project_session(tmux, all_panes, excluded, project):
    """Another live session labelled with `project`, chosen by lowest ID for determinism."""
    sessions = sorted({p["session_id"] for p in all_panes} - set(excluded),
                      key=lambda s: int(s.lstrip("$")) if s.lstrip("$").isdigit() else 0)
    for sid in sessions:
        if tmux.option("session", sid, OPT_PROJECT) == project:
            return sid
    return None


def _descends_from(pid, ancestors):
    """True when process `pid` is one of `ancestors` or below one (False when unknown)."""
    wanted = set(ancestors)
    seen = 0
    while pid and pid > 1 and seen < 256:
        if pid in wanted:
            return True
        pid = store.process_parent(pid)[0]
        seen += 1
    return False


# ---------------------------------------------------------------------------------------
# Nudge

# The only text coord ever types into an agent's pane: fixed, one line, never a message's body
# (a pane is a model's input; a peer's text typed there would read as the person's prompt).
NUDGE = "coord: new messages for you; read: .coord/coord inbox, then ack each"
# seconds between typing NUDGE and pressing Enter: Codex's composer takes an Enter within 120 ms
# of a burst of typed characters for a newline in a paste (its PASTE_ENTER_SUPPRESS_WINDOW, Codex
# 0.171.0), and a loaded host delays when the harness reads the keys
NUDGE_ENTER_AFTER = 0.4


# A harness's TUI takes its terminal out of canonical mode (reads key by key) once it accepts
# typed text. Before that the terminal echoes keys and the TUI drops them when it starts; a
# resumed harness's SessionStart can run first (measured after it: Kilo Code 7.7.7 1.06 s, OpenCode
# 1.18.33 0.15 s, Auggie 0.36.0 0.11 s; Kilo Code and OpenCode then drop keys until they have
# drawn the session, 17 to 21 s after SessionStart on a loaded 2-core machine), so a nudge waits
# this long for the terminal and its typed line to show.
NUDGE_READY_WAIT = 60.0
# seconds a typed line may take to show on the pane's screen before it counts as dropped (doubled
# at each retry)
NUDGE_SHOWN_WAIT = 2.0
_WAITS = "the message waits for the agent's next turn"


def reads_keys(tty):
    """True when the terminal `tty` (a pane's /dev/pts/N) is out of canonical mode, as a harness's
    TUI sets it to read keys; False when it is line-buffered; None when its mode cannot be read."""
    import termios
    try:
        fd = os.open(tty, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return not termios.tcgetattr(fd)[3] & termios.ICANON
    except (OSError, termios.error):
        return None
    finally:
        os.close(fd)


def _typable(record, since, tmux):
    """The pane's live state (_inspect) when keys typed there now would reach the harness at an
    empty prompt, as far as tmux can tell (see nudge); else Refused."""
    live = _inspect(record, tmux)
    pane = record["pane_id"]
    if live["dead"]:
        raise Refused("the harness in pane %s has exited; nothing would read the nudge" % pane,
                      "coord work resume <work>")
    shown = os.path.basename(str(live["current_command"] or "")).lstrip("-")
    if shown in store.KNOWN_SHELLS:
        # The harness is gone and its wrapper left a shell at the prompt: typed text would run.
        raise Refused("pane %s shows a %s prompt, not the agent; a nudge there would run as a command"
                      % (pane, shown), "coord work resume <work>")
    if live["in_mode"]:
        raise Refused("pane %s is in a tmux mode (copy or view): keys would go to tmux, not the agent" % pane, _WAITS)
    typed = live["typed_at"]
    # A session's creation counts as activity too, so a turn that began in the second the window
    # opened would look typed into: a session no client ever attached to had no keys at all.
    # Else tmux keeps whole seconds: a key in the same second as the turn began counts as after it.
    if not live["never_attached"] and (typed is None or since is None or typed >= int(since)):
        raise Refused("someone typed into tmux session%s %s since the agent's turn began%s: a half-typed "
                      "prompt there would be submitted with the nudge"
                      % ("s" if len(live["sessions"]) > 1 else "", ", ".join(live["sessions"]),
                         " (at %s)" % time.strftime("%H:%M:%S", time.localtime(typed)) if typed else ""), _WAITS)
    return live


def nudge(record, since, claim=None, unclaim=None, tmux=None):
    """Type NUDGE and Enter into the record's pane, so an agent idle at its prompt runs a turn
    (and with it the hooks that show its messages). The caller has already seen the harness's own
    "turn ended" boundary (store turns); this adds what only tmux knows, and types nothing unless
    all of it holds: the record validates (window label, pane pid and start command), the harness
    still runs (not dead, not a shell) and reads its terminal key by key (waited for up to
    NUDGE_READY_WAIT), the pane is not in a tmux mode, and no client typed into a session showing
    it (none ever attached to one), or in or after the second of `since` (when the agent's last
    turn began, or its window opened: text typed since may still sit in its prompt, and Enter
    would submit it). `claim()`, when given, runs last and must return True (one nudge per idle
    prompt); `unclaim()` gives the prompt back when the typed line never showed. -> the pane ID;
    Refused says why not."""
    tmux = tmux or Tmux(record["socket"])
    deadline = time.monotonic() + NUDGE_READY_WAIT
    while True:
        live = _typable(record, since, tmux)
        ready = reads_keys(live["tty"])
        if ready or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    pane = record["pane_id"]
    if not ready:
        raise Refused("the agent in pane %s does not read its terminal key by key%s: it is still starting, or "
                      "a program it runs holds the terminal, and typed keys would be dropped"
                      % (pane, "" if ready is False else " (its mode cannot be read)"), _WAITS)
    if claim is not None and not claim():
        raise Refused("another nudge was typed into pane %s since the agent's turn ended" % pane, _WAITS)
    typed = _type_until_shown(tmux, pane, deadline)
    if typed is None:
        if unclaim is not None:
            unclaim()
        raise Refused("the line typed into pane %s never showed there, so Enter was not pressed: the agent "
                      "is still drawing its screen" % pane, _WAITS)
    # Enter in the same write as the text reads as part of a paste to the harness's prompt, which
    # then keeps the line unsent (measured: Claude Code 2.1.197, Codex 0.171.0): send it on its
    # own, a moment later.
    time.sleep(max(0.0, typed + NUDGE_ENTER_AFTER - time.monotonic()))
    tmux.run("send-keys", "-t", pane, "Enter")
    return pane


def _type_until_shown(tmux, pane, deadline):
    """Type NUDGE into the pane, again when its screen does not show it within NUDGE_SHOWN_WAIT
    (a TUI that took its terminal may still drop keys while it draws: OpenCode 1.18.33 and Kilo
    Code 7.7.7 resuming a session), until `deadline` (monotonic). -> when the shown line was
    typed (monotonic), or None when it never showed. (An earlier line that scrolls away as this
    one shows makes it type once more: the prompt then holds the line twice.)"""
    def shown():  # the prompt may wrap the line and frame it: count in letters and digits only
        return _letters(tmux.run("capture-pane", "-p", "-J", "-t", pane)).count(_letters(NUDGE))
    before = shown()  # an earlier nudge may still be on the screen
    patience = NUDGE_SHOWN_WAIT
    while True:
        tmux.run("send-keys", "-t", pane, "-l", NUDGE)
        typed = time.monotonic()
        while True:
            if shown() > before:
                return typed
            if time.monotonic() >= min(deadline, typed + patience):
                break
            time.sleep(0.1)
        if time.monotonic() >= deadline:
            return None
        patience *= 2  # a slow start gets few copies typed


def _letters(text):
    return "".join(c for c in text if c.isalnum())
