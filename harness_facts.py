"""The facts of each harness coord runs with, in one table: HARNESSES, one row per harness.

Plain data, no imports: the hook loads it on every tool call (through store and hook.py), so it
costs only its own bytecode. Code that acts on a fact reads it here: the hook (its events, tool
names, the arguments a write tool writes, the shape of its replies), install (the file its hook
entries go in, the hook command's start directory, the PreToolUse matcher), trust.py (which
harnesses have a trust gate coord can carry over), session.py and launch.py (the command, how a
conversation is resumed, the one-shot arguments, what a resumed session needs), store (the
process names a harness runs as). Each fact is as measured on the pinned CLI
(docs/harness-NAME.md); adding a harness starts with its row (docs/where.md).

A row's keys:
- command: the variable holding its command (shell words; default: its name).
- resume: the argv after the command that resumes a conversation (None: nothing to resume).
- one_shot: the harness arguments that belong to one launch only (docs/workspace.md, "Harness
  arguments"): a first message, or which session to run. `work resume` reuses what `work start`
  was given after `--` without them: it names the conversation itself, and a prompt would be sent
  again. Each option maps to what it takes: 0 nothing, 1 a value, None an optional value (the
  next word unless it starts with `-`). Measured on the pinned CLIs' --help.
- resume_prompt: it runs no hook on resume until a first prompt is submitted, so `work resume`
  gives it launch.RESUME_PROMPT on its command line (launch.NO_HOOK_UNTIL_PROMPT).
- resume_env: the pane variable `work resume` names the resumed session in (launch.START_AT_LAUNCH).
- hangup_passed: False when its hung-up launcher does not pass the hangup on, so `work close`
  ends it once left headless (launch.HANGUP_NOT_PASSED).
- program: a process by this name (or its executable, or a script a runtime such as node runs)
  is the harness itself (store.HARNESS_NAMES).
- hooks: the repository file coord's hook entries go in (None: none of its own).
- hook_dir: where the hook command starts looking for the repository (install.hook_command).
- matcher: its PreToolUse matcher for the write tools (install's HOOK_EVENTS and the like).
- events: its own event names -> coord's of the same meaning (None: it uses coord's names).
- tools: its tool names -> the name the hook checks them under (None: as they come).
- dialogs: the start of its permission dialog's title -> its own name of the tool asked for, when
  its dialog event names no tool (None: the event names it, or nothing does).
- writes: its write tools (by the tool name the hook receives, after `tools`) -> (the arguments
  naming the path it writes, the arguments holding patch text it applies: every Add, Update,
  Delete and Move-to path). A tool missing here is not a write. The hook checks a call on these
  AND on every other argument that names a path (hook.named_paths), and denies it when any of
  them overlaps a peer's lease. A whole-string input is patch text.
- context, deny: the shape of its replies: "hookSpecificOutput" (Claude's), "top-level"
  (`additionalContext` alone), "gemini" (hook.gemini_reply), "decision" ({decision, reason}).
- trust: its per-user trust file, when it has a gate coord can carry over (trust.py), else None.
- late_start: True when only PostToolUse's context reaches its model: the first PostToolUse of
  an attachment carries SessionStart's lines too (hook.start_pending).
- plugin_env: for a harness that loads coord's plugin into its own process instead of running hook
  commands (OpenCode and its fork Kilo Code): the variables the plugin sets in its shell's commands,
  (the conversation, a subagent's session), which tell coord who calls (store.caller_facts).
"""

HARNESSES = {
    # Claude Code 2.1.197: Write {file_path, content}, Edit {file_path, old_string, new_string},
    # NotebookEdit {notebook_path, ...}; it has no MultiEdit. The installer's matcher names these
    # and Bash (a subagent's shell carries its parent's environment: the hook tags its coord commands).
    "claude": {
        "command": "COORD_CLAUDE_CMD", "resume": ("--resume",),
        "one_shot": {"-r": None, "--resume": None, "-c": 0, "--continue": 0, "--session-id": 1,
                     "--fork-session": 0, "--from-pr": None},
        "resume_prompt": False, "resume_env": None, "hangup_passed": True, "program": True,
        "hooks": ".claude/settings.json", "hook_dir": "${CLAUDE_PROJECT_DIR:-$PWD}",
        "matcher": "Edit|Write|NotebookEdit|Bash", "events": None, "tools": None, "dialogs": None,
        "writes": {"Write": (("file_path",), ()), "Edit": (("file_path",), ()),
                   "NotebookEdit": (("notebook_path",), ())},
        "context": "hookSpecificOutput", "deny": "hookSpecificOutput", "trust": "~/.claude.json", "plugin_env": None,
    },
    # Codex 0.171.0: apply_patch {command: PATCH}, paths relative to cwd (its matcher also names
    # the aliases Edit and Write, read the same way); its shell (Bash) is checked only for the
    # apply_patch heredocs Codex applies itself (hook.shell_patch_targets). Codex compares a
    # matcher made only of letters, digits, `_` and `|` name by name. It runs no hook on resume
    # until a first prompt, and keeps the conversation when given one with the resume.
    "codex": {
        "command": "COORD_CODEX_CMD", "resume": ("resume",), "one_shot": {},
        "resume_prompt": True, "resume_env": None, "hangup_passed": True, "program": True,
        "hooks": ".codex/hooks.json", "hook_dir": "$PWD",
        "matcher": "apply_patch|Edit|Write|Bash", "events": None, "tools": None, "dialogs": None,
        "writes": {"apply_patch": ((), ("command", "input", "patch")), "Edit": ((), ("command", "input", "patch")),
                   "Write": ((), ("command", "input", "patch"))},
        "context": "hookSpecificOutput", "deny": "hookSpecificOutput", "trust": "~/.codex/config.toml", "plugin_env": None,
    },
    # Copilot CLI 1.0.102 runs the Claude entries under Claude's names with its own arguments:
    # create -> Write {path, file_text}, edit -> Edit {path, old_str, new_str}, and apply_patch
    # (GPT models) -> Edit whose whole input is the patch text. It writes `path` and ignores any
    # other argument the model adds (a `file_path` beside it is not what it writes). It reads only
    # a top-level additionalContext, and runs no hook on resume until a first prompt.
    "copilot": {
        "command": "COORD_COPILOT_CMD", "resume": ("--resume",),
        "one_shot": {"-i": None, "--interactive": None, "-p": 1, "--prompt": 1, "--resume": None,
                     "--continue": 0},
        "resume_prompt": True, "resume_env": None, "hangup_passed": True, "program": True,
        "hooks": None, "hook_dir": None, "matcher": None, "events": None, "tools": None, "dialogs": None,
        "writes": {"Write": (("path",), ()), "Edit": (("path",), ())},
        "context": "top-level", "deny": "hookSpecificOutput", "trust": "~/.copilot/config.json", "plugin_env": None,
    },
    # Gemini CLI 0.61.0 runs `.gemini/settings.json` hooks under its own event names (Notification
    # only for a permission dialog); its file tools write_file {file_path, content} and replace
    # {file_path, old_string, new_string, ...} (file_path absolute or relative to the payload's
    # cwd) are checked under Claude's names, its shell (run_shell_command {command}) as Bash,
    # advisory like every shell. Its hung-up launcher does not pass the hangup on
    # (docs/harness-gemini.md); `--resume <session UUID>` in the same folder.
    "gemini": {
        "command": "COORD_GEMINI_CMD", "resume": ("--resume",),
        "one_shot": {"-i": 1, "--prompt-interactive": 1, "-p": 1, "--prompt": 1, "-r": None, "--resume": None},
        "resume_prompt": False, "resume_env": None, "hangup_passed": False, "program": True,
        "hooks": ".gemini/settings.json", "hook_dir": "$PWD", "matcher": "^(write_file|replace)$",
        "events": {"SessionStart": "SessionStart", "BeforeAgent": "UserPromptSubmit", "BeforeTool": "PreToolUse",
                   "AfterTool": "PostToolUse", "AfterAgent": "Stop", "Notification": "PermissionRequest",
                   "SessionEnd": "SessionEnd"},
        "tools": {"write_file": "Write", "replace": "Edit", "run_shell_command": "Bash"},
        "dialogs": {"Confirm Write: ": "write_file", "Confirm Edit: ": "replace",
                    "Confirm Shell Command": "run_shell_command"},
        "writes": {"Write": (("file_path",), ()), "Edit": (("file_path",), ())},
        "context": "gemini", "deny": "decision", "trust": "~/.gemini/trustedFolders.json", "plugin_env": None,
    },
    # Qwen Code 0.24.4, its own tool ids: write_file {file_path, content}, edit {file_path,
    # old_string, new_string}, notebook_edit {notebook_path, ...}; its shell is advisory, unmatched.
    # Its matcher is an exact name, a `|` list of exact names, or else an unanchored regex: anchored.
    # It runs hooks with `bash -c`; QWEN_PROJECT_DIR is the session's cwd.
    "qwen": {
        "command": "COORD_QWEN_CMD", "resume": ("--resume",),
        "one_shot": {"-i": 1, "--prompt-interactive": 1, "-p": 1, "--prompt": 1, "-r": None, "--resume": None,
                     "-c": 0, "--continue": 0, "--session-id": 1, "--fork-session": 0},
        "resume_prompt": False, "resume_env": None, "hangup_passed": True, "program": True,
        "hooks": ".qwen/settings.json", "hook_dir": "${QWEN_PROJECT_DIR:-$PWD}",
        "matcher": "^(write_file|edit|notebook_edit)$", "events": None, "tools": None, "dialogs": None,
        "writes": {"write_file": (("file_path",), ()), "edit": (("file_path",), ()),
                   "notebook_edit": (("notebook_path",), ())},
        "context": "hookSpecificOutput", "deny": "hookSpecificOutput", "trust": "~/.qwen/trustedFolders.json", "plugin_env": None,
    },
    # OpenCode 1.18.33 through coord's plugin (.opencode/plugins/coord-hook.js), which sends only
    # these at PreToolUse: write {filePath, content}, edit {filePath, oldString, newString} and, for
    # GPT models, apply_patch {patchText} (Codex's grammar; paths relative to the session's
    # directory). Its shell (bash) never reaches the hook before it runs: advisory, as elsewhere.
    # Its TUI resumes with `opencode --session ID`; the plugin runs nothing for a resumed TUI
    # session until its first message and the TUI ignores --prompt with --session, so `work
    # resume` names the session in the pane's resume_env and the plugin runs SessionStart at load.
    # Its native binary is named opencode (npm: .../bin/opencode.exe).
    "opencode": {
        "command": "COORD_OPENCODE_CMD", "resume": ("--session",),
        "one_shot": {"--prompt": 1, "-s": 1, "--session": 1, "-c": 0, "--continue": 0, "--fork": 0},
        "resume_prompt": False, "resume_env": "COORD_OPENCODE_RESUME", "hangup_passed": True, "program": True,
        "hooks": ".opencode/plugins/coord-hook.js", "hook_dir": "$PWD", "matcher": None, "events": None,
        "tools": None, "dialogs": None,
        "writes": {"write": (("filePath",), ()), "edit": (("filePath",), ()), "apply_patch": ((), ("patchText",))},
        "context": "hookSpecificOutput", "deny": "hookSpecificOutput", "trust": None,
        "plugin_env": ("COORD_OPENCODE_SESSION", "COORD_OPENCODE_AGENT"),
    },
    # Kilo Code CLI 7.7.7 (npm @kilocode/cli) is a fork of OpenCode with the same plugin interface,
    # tools and arguments: it loads every .js/.ts in the project's .kilo/plugins/ (and .kilocode/
    # plugins/, never .opencode/), so coord's plugin goes there with this harness's name. Its shell
    # sets KILO_PID (and OPENCODE=1); its native binary runs as `.kilo` under a node launcher
    # (store._harness_word). Its TUI takes --prompt and resumes with --session ID, as OpenCode's.
    "kilo": {
        "command": "COORD_KILO_CMD", "resume": ("--session",),
        "one_shot": {"--prompt": 1, "-s": 1, "--session": 1, "-c": 0, "--continue": 0, "--fork": 0,
                     "--cloud-fork": 0},
        "resume_prompt": False, "resume_env": "COORD_KILO_RESUME", "hangup_passed": True, "program": True,
        "hooks": ".kilo/plugins/coord-hook.js", "hook_dir": "$PWD", "matcher": None, "events": None,
        "tools": None, "dialogs": None,
        "writes": {"write": (("filePath",), ()), "edit": (("filePath",), ()), "apply_patch": ((), ("patchText",))},
        "context": "hookSpecificOutput", "deny": "hookSpecificOutput", "trust": None,
        "plugin_env": ("COORD_KILO_SESSION", "COORD_KILO_AGENT"),
    },
    # Factory Droid 0.225.2 (npm @factory/cli-linux-x64; the binary is named droid) reads
    # Claude-shaped hooks, keyed by event at the top level of `.factory/hooks.json`, with Claude's
    # snake_case payloads and replies under its own tool names: Create {file_path, content}, Edit
    # and MultiEdit {file_path, ...}, ApplyPatch {input: PATCH} (GPT models). Its matcher is a
    # regular expression: anchored. Its shell (Execute) is advisory, unmatched. Its TUI asks to
    # trust a folder before any hook runs (`trustedFolders` in ~/.factory/settings.json); `droid
    # exec` does not ask. It has no PermissionRequest or SubagentStart event.
    "droid": {
        "command": "COORD_DROID_CMD", "resume": ("--resume",),
        "one_shot": {"-r": None, "--resume": None, "--last": 0, "--fork": 1},
        "resume_prompt": False, "resume_env": None, "hangup_passed": True, "program": True,
        "hooks": ".factory/hooks.json", "hook_dir": "${FACTORY_PROJECT_DIR:-$PWD}",
        "matcher": "^(Create|Edit|MultiEdit|ApplyPatch)$", "events": None, "tools": None, "dialogs": None,
        "writes": {"Create": (("file_path",), ()), "Edit": (("file_path",), ()), "MultiEdit": (("file_path",), ()),
                   "ApplyPatch": ((), ("input",))},
        "context": "hookSpecificOutput", "deny": "hookSpecificOutput", "trust": "~/.factory/settings.json",
        "plugin_env": None,
    },
    # Auggie 0.36.0 (npm @augmentcode/auggie; node running .../bin/auggie) reads Claude-shaped hook
    # groups from `.augment/settings.json`, runs each command without a shell (its `args` apart) in
    # the workspace root, timeouts in ms. Its payloads name the conversation `conversation_id` and
    # the directory `workspace_roots`, and its prompt event PromptSubmit (hook.auggie_payload). Its
    # tools: save-file {path, file_content}, str-replace-editor {path, ...}, apply_patch {input},
    # remove-files {file_paths}; its shell (launch-process) is advisory and sets AUGMENT_AGENT=1.
    # Only PostToolUse's additionalContext reaches the model, so the first one of an attachment
    # also carries SessionStart's lines (`late_start`). It loads hooks only when Augment's server
    # says so (the `enable_hooks` flag of its get-models reply), and a resumed TUI runs SessionStart
    # at once.
    "auggie": {
        "command": "COORD_AUGGIE_CMD", "resume": ("--resume",),
        "one_shot": {"-r": None, "--resume": None, "-c": 0, "--continue": 0, "-i": 1, "--instruction": 1,
                     "-if": 1, "--instruction-file": 1},
        "resume_prompt": False, "resume_env": None, "hangup_passed": True, "program": True,
        "hooks": ".augment/settings.json", "hook_dir": "${AUGMENT_PROJECT_DIR:-$PWD}",
        "matcher": "^(save-file|str-replace-editor|apply_patch|remove-files)$",
        "events": {"SessionStart": "SessionStart", "PromptSubmit": "UserPromptSubmit", "PreToolUse": "PreToolUse",
                   "PostToolUse": "PostToolUse", "Stop": "Stop", "SessionEnd": "SessionEnd"},
        "tools": None, "dialogs": None,
        "writes": {"save-file": (("path",), ()), "str-replace-editor": (("path",), ()),
                   "apply_patch": ((), ("input",)), "remove-files": (("file_paths",), ())},
        "context": "hookSpecificOutput", "deny": "hookSpecificOutput", "trust": None, "plugin_env": None,
        "late_start": True,
    },
    # pi 0.73.1 (npm @mariozechner/pi-coding-agent; node running .../bin/pi) loads every .js/.ts in
    # the project's .pi/extensions/ into its own process, with no trust prompt: coord's extension
    # there runs the hook command at session_start, before_agent_start (its context a message for
    # the model), tool_call of write {path, content} and edit {path, edits} (a block is the tool's
    # error), tool_result (context appended), agent_end and session_shutdown, and sets its session in
    # the process environment its bash tool inherits. `pi --session ID` resumes (session_start at
    # once, reason "startup"); its prompt is a positional that must not start with - or @.
    "pi": {
        "command": "COORD_PI_CMD", "resume": ("--session",),
        "one_shot": {"-c": 0, "--continue": 0, "-r": 0, "--resume": 0, "--session": 1, "--fork": 1, "-p": 0,
                     "--print": 0},
        "resume_prompt": False, "resume_env": None, "hangup_passed": True, "program": True,
        "hooks": ".pi/extensions/coord-hook.js", "hook_dir": "$PWD", "matcher": None, "events": None,
        "tools": None, "dialogs": None,
        "writes": {"write": (("path",), ()), "edit": (("path",), ())},
        "context": "hookSpecificOutput", "deny": "hookSpecificOutput", "trust": None,
        "plugin_env": ("COORD_PI_SESSION", "COORD_PI_AGENT"),
    },
    # An agent with no hooks (Aider, a plain shell): its command runs in the window, nothing to resume.
    "shell": {
        "command": "COORD_SHELL_CMD", "resume": None, "one_shot": {},
        "resume_prompt": False, "resume_env": None, "hangup_passed": True, "program": False,
        "hooks": None, "hook_dir": None, "matcher": None, "events": None, "tools": None, "dialogs": None,
        "writes": None,
        "context": None, "deny": None, "trust": None, "plugin_env": None,
    },
}
