"""Harness trust for managed clones: what Claude Code and Codex need a person to approve in a
new clone, and (only with the person's own opt-in) carrying their existing approvals over.

Both harnesses key trust by absolute path, so a clone at a new path starts untrusted even when
the person approved the very same files in the shared checkout:

- Codex: project trust is `[projects."<abs project dir>"] trust_level = "trusted"` and each
  project hook's trust is `[hooks.state."<abs .codex/hooks.json>:<event>:<group>:<handler>"]
  trusted_hash = "sha256:..."` in the user's `$CODEX_HOME/config.toml` (`~/.codex`). The hash
  covers the hook's event, matcher and command, so an equal hash means the same command.
- Claude Code: `projects["<abs dir>"].hasTrustDialogAccepted` in `$CLAUDE_CONFIG_DIR/.claude.json`
  (`~/.claude.json`); a directory is trusted when it or any ancestor has it.
- Qwen Code: only when the person turned its folder-trust gate on (`security.folderTrust.enabled`
  in ~/.qwen/settings.json), `{"<abs dir>": "TRUST_FOLDER"}` in ~/.qwen/trustedFolders.json
  (the deepest rule over a directory decides); a clone gets an entry only when the shared
  checkout is trusted.
- Copilot CLI (runs the Claude Code hooks): the folder or an ancestor in `trustedFolders` of
  `$COPILOT_HOME/config.json` (`~/.copilot`); without it no repository hook runs at all.
- Factory Droid's TUI: the git root in `trustedFolders` of ~/.factory/settings.json (droid_trusted).

coord never grants what a person has not given. The opt-in (`coord trust --carry-over on`)
lives in the user's own configuration directory, never in the repository. With it, a clone gets
a Codex project entry only when the shared checkout is trusted, a hook entry only when the
shared checkout trusts that hook at the identical hash and its command names a content-addressed
runtime copy (so an equal hash means identical code, not only an identical command), a Claude entry only when Claude
trusts the shared checkout, and a Copilot folder only when Copilot trusts the shared checkout
(under Copilot's own lock, as Copilot itself trusts a worktree it creates of a trusted repository). Codex entries are written through `codex app-server`
`config/batchWrite` (Codex's own editor keeps every other byte); the Claude file gets a locked,
atomic, textual edit that keeps every other byte. What was added is recorded in the work and
removed with it.
"""

import fcntl
import json
import os
import re
import subprocess
import sys
import time

import store
from harness_facts import HARNESSES
from store import EnvError, Refused, UsageError

SETTINGS_FILE = "settings.json"
CARRY_KEY = "carry_trust"
# The harnesses with a trust gate coord can carry over (the harness table's `trust` file), in the
# order `work create` carries them.
CARRIED = tuple(name for name, row in HARNESSES.items() if row["trust"])
CODEX_HOOKS = os.path.join(".codex", "hooks.json")
APP_SERVER_TIMEOUT = 30.0


# --------------------------------------------------------------------------- the opt-in

def settings_path(environ=None):
    """coord's per-user settings: $XDG_CONFIG_HOME/coord/settings.json (~/.config when unset)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".config")
    return os.path.join(base, "coord", SETTINGS_FILE)


def _read_settings(environ=None):
    try:
        with open(settings_path(environ), "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def carry_enabled(environ=None):
    return _read_settings(environ).get(CARRY_KEY) is True


def set_carry(on, environ=None):
    """Turn the opt-in on or off; refused unless the caller is positively the person at a
    terminal (store.require_person)."""
    # The same test as the person rule of caller(): positive evidence of a person at a terminal.
    # Advisory against an unsandboxed agent, which can write the settings file itself.
    store.require_person("carrying harness trust over", "coord trust --carry-over %s" % ("on" if on else "off"),
                         environ)
    doc = _read_settings(environ)
    doc[CARRY_KEY] = bool(on)
    path = settings_path(environ)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    store.atomic_write(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    return path


# --------------------------------------------------------------------------- Codex: reading

_INSTALL = []


def _install():
    """The installer module beside this file: its TOML reader and Codex hook hash are the ones
    `install --doctor` uses (and the end-to-end tests check against Codex's own hooks/list)."""
    if not _INSTALL:
        from importlib.machinery import SourceFileLoader
        import types
        path = os.path.join(os.path.dirname(os.path.realpath(os.path.abspath(__file__))), "install")
        loader = SourceFileLoader("coord_install", path)
        mod = types.ModuleType(loader.name)
        mod.__file__ = path
        loader.exec_module(mod)
        _INSTALL.append(mod)
    return _INSTALL[0]


def codex_config_path(environ=None):
    env = os.environ if environ is None else environ
    home = env.get("CODEX_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".codex")
    return os.path.join(home, "config.toml")


def read_codex_config(environ=None):
    """{key tuple: value} of the user's Codex config ({} when absent); EnvError when unreadable."""
    path = codex_config_path(environ)
    if not os.path.exists(path):
        return {}
    try:
        return _install().read_toml(path)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise EnvError("cannot read the Codex config %s: %s" % (path, exc), "fix or move %s" % path)


def _variants(path):
    out = [os.path.abspath(path)]
    if os.path.realpath(path) not in out:
        out.append(os.path.realpath(path))
    return out


def codex_project_trusted(config, directory):
    return any(config.get(("projects", p, "trust_level")) == "trusted" for p in _variants(directory))


def codex_hooks(directory, config):
    """coord's handlers in `directory`/.codex/hooks.json: [{key, hash, trusted_hash}] where key
    is Codex's state key (absolute hooks.json path, event, group and handler index) and
    trusted_hash what the user's config records for it (None when nothing)."""
    inst = _install()
    path = os.path.join(os.path.realpath(directory), CODEX_HOOKS)
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return []
    hooks = doc.get("hooks") if isinstance(doc, dict) else None
    out = []
    for event, groups in (hooks.items() if isinstance(hooks, dict) else ()):
        for gi, group in enumerate(groups if isinstance(groups, list) else []):
            if not isinstance(group, dict):
                continue
            for hi, handler in enumerate(group.get("hooks") or []):
                if not isinstance(handler, dict) or not inst.is_coord_handler(handler):
                    continue
                suffix = ":%s:%d:%d" % (inst.camel_to_snake(event), gi, hi)
                trusted = None
                for source in _variants(path):
                    trusted = config.get(("hooks", "state", source + suffix, "trusted_hash"))
                    if trusted is not None:
                        break
                out.append({"key": path + suffix, "hash": inst.codex_hook_hash(event, group, handler),
                            "trusted_hash": trusted,
                            "pinned": inst.pinned_runtime(handler.get("command")) is not None})
    return out


def codex_status(directory, config):
    """{project_trusted, hooks: N, trusted: N, untrusted: [keys], modified: [keys]} for one checkout."""
    hooks = codex_hooks(directory, config)
    return {"project_trusted": codex_project_trusted(config, directory), "hooks": len(hooks),
            "trusted": sum(1 for h in hooks if h["trusted_hash"] == h["hash"]),
            "untrusted": [h["key"] for h in hooks if h["trusted_hash"] is None],
            "modified": [h["key"] for h in hooks if h["trusted_hash"] not in (None, h["hash"])]}


# --------------------------------------------------------------------------- Codex: writing

def codex_binary(environ=None):
    """The Codex executable (COORD_CODEX_CMD's first word, else `codex`) on PATH, or None."""
    env = os.environ if environ is None else environ
    import shlex
    try:
        words = shlex.split(env.get("COORD_CODEX_CMD") or "codex")
    except ValueError:
        words = []
    if not words:
        return None
    import shutil  # only here: with bz2 and lzma it costs every `work create` about 2 ms
    return shutil.which(words[0], path=env.get("PATH"))


def _key_part(text):
    if re.match(r"^[A-Za-z0-9_-]+$", text):
        return text
    if '"' in text or "\\" in text or any(ord(c) < 32 for c in text):
        raise UsageError("path %r cannot be written as a Codex config key" % text)
    return '"%s"' % text


def codex_batch_write(edits, environ=None):
    """Apply [(key path parts, value or None to delete)] through `codex app-server`
    `config/batchWrite` (Codex's own config editor, which keeps every other byte)."""
    env = dict(os.environ if environ is None else environ)
    codex = codex_binary(env)
    if not codex:
        raise EnvError("codex not found on PATH, so its config cannot be edited through it",
                       "install Codex, or set COORD_CODEX_CMD")
    payload = [{"keyPath": ".".join(_key_part(p) for p in parts),
                "value": value, "mergeStrategy": "upsert" if value is not None else "replace"}
               for parts, value in edits]
    for name in ("CODEX_THREAD_ID", "CODEX_SESSION_ID"):
        env.pop(name, None)
    try:
        proc = subprocess.Popen([codex, "app-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env, cwd="/", start_new_session=True)
    except OSError as exc:
        raise EnvError("cannot run %s app-server: %s" % (codex, exc), "check the Codex installation")
    deadline = time.monotonic() + APP_SERVER_TIMEOUT

    def send(obj):
        proc.stdin.write((json.dumps(obj) + "\n").encode("utf-8"))
        proc.stdin.flush()

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"clientInfo": {"name": "coord", "version": "0"}}})
        _app_server_reply(proc, 1, deadline)
        send({"jsonrpc": "2.0", "method": "initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "config/batchWrite",
              "params": {"edits": payload, "filePath": None, "expectedVersion": None}})
        msg = _app_server_reply(proc, 2, deadline)
    except (OSError, ValueError) as exc:
        raise EnvError("codex app-server failed: %s" % exc, "check that `codex app-server` runs")
    finally:
        _end_app_server(proc)
    if "error" in msg:
        raise EnvError("Codex refused the config edit: %s" % (msg["error"].get("message") or msg["error"]),
                       "check %s" % codex_config_path(env))
    return msg.get("result")


def _app_server_reply(proc, req_id, deadline):
    """The app-server's JSON-RPC reply to `req_id` (other lines skipped), or EnvError at `deadline`."""
    import select
    buf = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                msg = json.loads(line.decode("utf-8"))
            except ValueError:
                continue
            if isinstance(msg, dict) and msg.get("id") == req_id:
                return msg
    raise EnvError("codex app-server gave no reply within %ds" % APP_SERVER_TIMEOUT,
                   "check that `codex app-server` runs")


def _end_app_server(proc):
    """Close the app-server's stdin and wait for it; kill its group if it lingers past 5 s."""
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            pass
        proc.wait()
    proc.stdout.close()


# --------------------------------------------------------------------------- Claude Code

def claude_config_path(environ=None):
    env = os.environ if environ is None else environ
    if env.get("CLAUDE_CONFIG_DIR"):
        return os.path.join(env["CLAUDE_CONFIG_DIR"], ".claude.json")
    return os.path.join(env.get("HOME") or os.path.expanduser("~"), ".claude.json")


def _raw_bytes(path):
    """The file's bytes (None when absent), unparsed: enough to tell whether it changed."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def read_claude(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        raise EnvError("cannot read %s: %s" % (path, exc.strerror or exc), "check its permissions")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise EnvError("%s is not valid JSON (%s); coord will not edit it" % (path, exc),
                       "let Claude Code repair it, or fix it by hand")
    if not isinstance(doc, dict):
        raise EnvError("%s is not a JSON object; coord will not edit it" % path, "fix it by hand")
    return raw, doc


def claude_trusted(doc, directory):
    """Whether Claude Code trusts `directory`: it or an ancestor has hasTrustDialogAccepted."""
    projects = (doc or {}).get("projects")
    if not isinstance(projects, dict):
        return False
    for start in _variants(directory):
        cur = start
        while True:
            entry = projects.get(cur)
            if isinstance(entry, dict) and entry.get("hasTrustDialogAccepted") is True:
                return True
            parent = os.path.dirname(cur)
            if parent == cur:
                break
            cur = parent
    return False


def copilot_config_path(environ=None):
    """Copilot CLI's per-user state file: $COPILOT_HOME/config.json (~/.copilot when unset)."""
    env = os.environ if environ is None else environ
    base = env.get("COPILOT_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".copilot")
    return os.path.join(base, "config.json")


def _copilot_doc(text):
    """Copilot's config.json text -> its object: JSON with `//` comment lines (ValueError else)."""
    doc = json.loads("\n".join("" if l.lstrip().startswith("//") else l for l in text.splitlines()) or "{}")
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return doc


def copilot_trusted(directory, environ=None):
    """Whether Copilot CLI (1.0.102) runs `directory`'s repository hooks: it or an ancestor is
    in `trustedFolders` (its older spelling `trusted_folders` counts too) of config.json, where
    Copilot records the person's answer to its folder-trust prompt. The file is JSON with `//`
    comment lines. -> (True/False, None), or (None, why) when it cannot be read. Read-only:
    only carry_over() (the person's opt-in) adds a clone's own folder."""
    path = copilot_config_path(environ)
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        return False, None
    except (OSError, UnicodeDecodeError) as exc:
        return None, "cannot read %s: %s" % (path, getattr(exc, "strerror", None) or exc)
    try:
        doc = _copilot_doc(text)
    except ValueError as exc:
        return None, "%s is not valid JSON (%s)" % (path, exc)
    folders = []
    for key in ("trustedFolders", "trusted_folders"):
        value = doc.get(key) if isinstance(doc, dict) else None
        if isinstance(value, list):
            folders += [os.path.normpath(v) for v in value if isinstance(v, str) and v.startswith("/")]
    for start in _variants(directory):
        cur = start
        while True:
            if cur in folders:
                return True, None
            parent = os.path.dirname(cur)
            if parent == cur:
                break
            cur = parent
    return False, None


COPILOT_KEY = "trustedFolders"  # what Copilot CLI 1.0.102 writes when the person answers "remember"


def _copilot_edit(path, change):
    """Apply change(doc) -> True when it changed the object, to Copilot's config.json the way
    Copilot 1.0.102 edits it itself (measured: flock LOCK_EX on `config.json.trusted-folders.lock`,
    read, write a temporary file, rename): under that same lock, so neither loses the other's
    entry. The leading `//` comment lines stay as they are; the object is written as Copilot
    writes it (two-space JSON, a final newline), so a removal gives back Copilot's own bytes.
    Never edits a file that does not parse. -> True when something was written."""
    real = os.path.realpath(path)
    os.makedirs(os.path.dirname(real), mode=0o700, exist_ok=True)
    fd = os.open(real + ".trusted-folders.lock", os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = _raw_bytes(real)
        try:
            text = raw.decode("utf-8") if raw is not None else ""
            doc = _copilot_doc(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise EnvError("%s is not valid JSON (%s); coord will not edit it" % (path, exc),
                           "let Copilot CLI repair it, or fix it by hand")
        if not change(doc):
            return False
        head = []
        for line in text.splitlines(True):
            if not line.lstrip().startswith("//"):
                break
            head.append(line if line.endswith("\n") else line + "\n")
        if raw is None:
            head = ["// User settings belong in settings.json.\n", "// This file is managed automatically.\n"]
        data = ("".join(head) + json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        mode = os.stat(real).st_mode & 0o777 if raw is not None else 0o600
        store.atomic_write(real, data, mode)
        return True
    finally:
        os.close(fd)


def copilot_add(path, folder):
    """Add `folder` to `trustedFolders`; -> whether the key was created (None: already there)."""
    made = []

    def change(doc):
        folders = doc.get(COPILOT_KEY)
        if folders is not None and not isinstance(folders, list):
            raise EnvError("`%s` in %s is not a list; coord will not edit it" % (COPILOT_KEY, path),
                           "let Copilot CLI repair its config")
        if folder in (folders or []):
            return False
        made.append(folders is None)
        doc[COPILOT_KEY] = (folders or []) + [folder]
        return True
    return made[0] if _copilot_edit(path, change) else None


def copilot_remove(path, folder, drop_key=False):
    """Take `folder` out of `trustedFolders` (and the key itself when drop_key and it is left
    empty); -> whether anything was written."""
    def change(doc):
        folders = doc.get(COPILOT_KEY)
        if not isinstance(folders, list) or folder not in folders:
            return False
        left = [f for f in folders if f != folder]
        if left or not drop_key:
            doc[COPILOT_KEY] = left
        else:
            del doc[COPILOT_KEY]
        return True
    return _copilot_edit(path, change)


def _copilot_listed(directory, environ=None):
    """Whether `directory` itself (not an ancestor) is in Copilot's `trustedFolders`."""
    try:
        with open(copilot_config_path(environ), "rb") as f:
            doc = _copilot_doc(f.read().decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    folders = doc.get(COPILOT_KEY)
    return isinstance(folders, list) and directory in folders


def _ws(text, i):
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _members(text, start):
    """The members of the JSON object whose `{` is at text[start]: [(key, key_start, value_start,
    value_end)] and the index of its closing `}`."""
    decoder = json.JSONDecoder()
    out = []
    i = _ws(text, start + 1)
    if text[i] == "}":
        return out, i
    while True:
        key_start = i
        key, i = json.decoder.scanstring(text, i + 1)
        i = _ws(text, i)
        i = _ws(text, i + 1)  # the colon
        value_start = i
        _, value_end = decoder.raw_decode(text, i)
        out.append((key, key_start, value_start, value_end))
        i = _ws(text, value_end)
        if text[i] == "}":
            return out, i
        i = _ws(text, i + 1)  # the comma


def _indent_before(text, pos):
    line = text.rfind("\n", 0, pos)
    return text[line + 1:pos] if line >= 0 and not text[line + 1:pos].strip() else ""


def _claude_insert(text, directory):
    """`text` with projects[directory] = {"hasTrustDialogAccepted": true} added; (new text,
    whether the projects object was created). Every other byte stays, so removing the entry
    again gives back the original bytes."""
    top = _ws(text, 0)
    members, close = _members(text, top)
    compact = "\n" not in text.strip()
    step = (len(_indent_before(text, members[0][1])) if members else 2) or 2
    nl = "" if compact else "\n"
    sp = "" if compact else " "

    def value(doc, level):
        if compact:
            return json.dumps(doc, separators=(",", ":"))
        return json.dumps(doc, indent=step).replace("\n", "\n" + " " * (step * level))

    def ind(level):
        return "" if compact else " " * (step * level)
    entry = {"hasTrustDialogAccepted": True}
    for key, key_start, value_start, value_end in members:
        if key != "projects":
            continue
        if text[value_start] != "{":
            raise EnvError("`projects` in the Claude Code config is not an object; coord will not edit it",
                           "let Claude Code repair its config")
        inner, inner_close = _members(text, value_start)
        piece = "%s%s:%s%s" % (ind(2), json.dumps(directory), sp, value(entry, 2))
        if inner:
            at = inner[-1][3]
            return text[:at] + "," + nl + piece + text[at:], False
        return text[:value_start] + "{" + nl + piece + nl + ind(1) + "}" + text[inner_close + 1:], False
    piece = '%s"projects":%s%s' % (ind(1), sp, value({directory: entry}, 1))
    if members:
        at = members[-1][3]
        return text[:at] + "," + nl + piece + text[at:], True
    return text[:top + 1] + nl + piece + nl + text[close:], True


def _claude_remove(text, directory, drop_projects):
    """`text` without projects[directory] (and without `projects` itself when drop_projects and
    it is left empty); None when there is no such entry."""
    top = _ws(text, 0)
    members, close = _members(text, top)
    for mi, (key, key_start, value_start, value_end) in enumerate(members):
        if key != "projects" or text[value_start] != "{":
            continue
        inner, inner_close = _members(text, value_start)
        for i, (k, ks, vs, ve) in enumerate(inner):
            if k != directory:
                continue
            if len(inner) == 1:
                if drop_projects:
                    return _drop_member(text, members, mi, top, close)
                return text[:value_start + 1] + text[inner_close:]
            return _drop_member(text, inner, i, value_start, inner_close)
    return None


def _drop_member(text, members, i, open_at, close_at):
    if i > 0:  # from the end of the previous value: its comma and whitespace go too
        return text[:members[i - 1][3]] + text[members[i][3]:]
    if len(members) > 1:
        return text[:members[0][1]] + text[members[1][1]:]
    return text[:open_at + 1] + text[close_at:]


# --------------------------------------------------------------------------- Qwen Code

QWEN_TRUST = "TRUST_FOLDER"
QWEN_LEVELS = ("TRUST_FOLDER", "TRUST_PARENT", "DO_NOT_TRUST")


def qwen_home(environ=None):
    """Qwen Code's per-user directory: $QWEN_HOME, else ~/.qwen."""
    env = os.environ if environ is None else environ
    return env.get("QWEN_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".qwen")


def qwen_folders_path(environ=None):
    """Qwen Code's trusted folders: $QWEN_CODE_TRUSTED_FOLDERS_PATH, else <qwen home>/trustedFolders.json."""
    env = os.environ if environ is None else environ
    return env.get("QWEN_CODE_TRUSTED_FOLDERS_PATH") or os.path.join(qwen_home(environ), "trustedFolders.json")


def read_jsonc(path):
    """A JSON object from a file that may carry `//` comment lines; ({} when absent, None) or
    (None, why)."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        return {}, None
    except (OSError, UnicodeDecodeError) as exc:
        return None, "cannot read %s: %s" % (path, getattr(exc, "strerror", None) or exc)
    try:
        doc = json.loads("\n".join("" if l.lstrip().startswith("//") else l for l in text.splitlines()) or "{}")
    except ValueError as exc:
        return None, "%s is not valid JSON (%s)" % (path, exc)
    if not isinstance(doc, dict):
        return None, "%s is not a JSON object" % path
    return doc, None


def qwen_gate(environ=None):
    """Whether Qwen Code's folder-trust gate is on: `security.folderTrust.enabled` is true in
    the user's <qwen home>/settings.json (off by default; off, every folder counts as trusted).
    -> (True/False, None) or (None, why)."""
    doc, error = read_jsonc(os.path.join(qwen_home(environ), "settings.json"))
    if doc is None:
        return None, error
    sec = doc.get("security")
    ft = sec.get("folderTrust") if isinstance(sec, dict) else None
    return bool(isinstance(ft, dict) and ft.get("enabled") is True), None


def qwen_level(doc, directory):
    """Qwen Code's verdict on `directory` from its trusted-folders map (0.24.4's rule): the
    deepest rule whose folder is the directory or an ancestor wins (TRUST_PARENT names the
    parent of its path), an untrusting rule winning a tie. -> True, False, or None (no rule)."""
    best, verdict = -1, None
    for start in _variants(directory):
        for key, level in (doc or {}).items():
            if level not in QWEN_LEVELS or not isinstance(key, str) or not key.startswith("/"):
                continue
            rule = os.path.normpath(os.path.dirname(key) if level == "TRUST_PARENT" else key)
            if not (start == rule or start.startswith(rule.rstrip("/") + "/")):
                continue
            depth = len([p for p in rule.split("/") if p])
            ok = level != "DO_NOT_TRUST"
            if depth > best or (depth == best and not ok):
                best, verdict = depth, ok
    return verdict


def qwen_trusted(directory, environ=None):
    """Whether Qwen Code loads `directory`'s project settings, hooks included: (True/False,
    None) or (None, why). With the gate off every folder is trusted; with it on, a folder
    without a rule is not (headless Qwen then ignores the project's hooks silently)."""
    on, error = qwen_gate(environ)
    if on is None:
        return None, error
    if not on:
        return True, None
    doc, error = read_jsonc(qwen_folders_path(environ))
    if doc is None:
        return None, error
    return qwen_level(doc, directory) is True, None


def _json_edit(path, change):
    """change(dict) -> new dict or None, applied to a harness's JSON trust file (Qwen's trusted
    folders, Droid's settings) under proper-lockfile's lock (the directory <file>.lock, Qwen's)
    and ours, written atomically (0600, as they write it); only a file that is plain JSON is
    edited (Qwen tolerates comments; coord would drop them)."""
    def textual(text):
        doc = json.loads(text) if text.strip() else {}
        if not isinstance(doc, dict):
            raise ValueError("%s is not a JSON object" % path)
        new = change(doc)
        return None if new is None else json.dumps(new, indent=2) + "\n"
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    if not os.path.exists(path):
        store.atomic_write(path, b"{}\n", 0o600)
    return _locked_edit(path, textual)


# Factory Droid (0.225.2): its TUI asks to trust a folder's git root before it loads anything of
# the project's, hooks included, and records the answer as `trustedFolders: {"<abs root>":
# {"trustedAt": ISO}}` in ~/.factory/settings.json (the file it also keeps its own settings in);
# `droid exec` does not ask. A clone is its own git root, so it needs its own entry.
DROID_KEY = "trustedFolders"


def droid_settings_path(environ=None):
    env = os.environ if environ is None else environ
    return os.path.join(env.get("HOME") or os.path.expanduser("~"), ".factory", "settings.json")


def droid_trusted(directory, environ=None):
    """(True/False, None) whether Droid trusts `directory` itself, or (None, why) unreadable."""
    path = droid_settings_path(environ)
    doc, error = read_jsonc(path)
    if doc is None:
        return None, error
    folders = doc.get(DROID_KEY) if isinstance(doc, dict) else None
    if not isinstance(folders, dict):
        return False, None
    listed = set(os.path.normpath(k) for k in folders if isinstance(k, str))
    return any(v in listed for v in _variants(directory)), None


def droid_assess(source, clone, environ=None):
    shared, why = droid_trusted(source, environ)
    clone_ok, why2 = droid_trusted(clone, environ)
    if why or why2:
        return {"error": why or why2}
    return {"config": droid_settings_path(environ), "shared_trusted": shared, "clone_trusted": clone_ok}


def _carry_droid(d, clone, environ):
    if not (d["shared_trusted"] and not d["clone_trusted"]):
        return None, []

    def trust_clone(doc):
        folders = doc.get(DROID_KEY)
        if folders is not None and not isinstance(folders, dict):
            raise ValueError("%s in %s is not an object" % (DROID_KEY, d["config"]))
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        return dict(doc, **{DROID_KEY: dict(folders or {}, **{clone: {"trustedAt": stamp}})})
    try:
        _json_edit(d["config"], trust_clone)
        return {"config": d["config"], "project": clone}, []
    except (EnvError, OSError, ValueError) as exc:
        return None, ["droid: not carried over: %s" % getattr(exc, "message", exc)]


def droid_remove(rec):
    """Take the clone's entry out of Droid's trusted folders; -> notes."""
    if not rec or not rec.get("project") or not os.path.exists(rec["config"]):
        return []

    def untrust_clone(doc):
        folders = doc.get(DROID_KEY)
        if not isinstance(folders, dict) or rec["project"] not in folders:
            return None
        return dict(doc, **{DROID_KEY: {k: v for k, v in folders.items() if k != rec["project"]}})
    try:
        _json_edit(rec["config"], untrust_clone)
        return []
    except (EnvError, OSError, ValueError) as exc:
        return ["droid: the entry for the clone stays in %s: %s" % (rec["config"], getattr(exc, "message", exc))]


CLAUDE_LOCK_STALE = 10.0   # seconds: proper-lockfile's default, which Claude Code uses for its config
CLAUDE_LOCK_WAIT = 15.0    # seconds coord waits for Claude Code's own lock before giving up


class _claude_lock:
    """Claude Code's own lock on its config, as it takes it (2.1.197 bundles proper-lockfile:
    `lockSync(file, {lockfilePath: file + ".lock"})`, a directory made with mkdir, stale after
    10 s without an mtime update): held while coord edits, so neither overwrites the other."""

    def __init__(self, path):
        self.dir = path + ".lock"
        self.held = False

    def __enter__(self):
        deadline = time.monotonic() + CLAUDE_LOCK_WAIT
        while True:
            try:
                os.mkdir(self.dir, 0o700)
                self.held = True
                return self
            except FileExistsError:
                try:
                    if time.time() - os.stat(self.dir).st_mtime > CLAUDE_LOCK_STALE:
                        os.rmdir(self.dir)  # stale, as proper-lockfile would judge it
                        continue
                except OSError:
                    continue
            if time.monotonic() > deadline:
                raise EnvError("Claude Code holds the lock on its config (%s)" % self.dir,
                               "retry when Claude Code is idle")
            time.sleep(0.05)

    def __exit__(self, *exc):
        if self.held:
            try:
                os.rmdir(self.dir)
            except OSError:
                pass
        return False


def _locked_edit(path, change):
    """Apply change(text) -> new text or None to the file at `path` under an exclusive lock on
    a sidecar file and Claude Code's own lock, re-reading until the file held still while we
    computed; atomic replace of the file a symlinked config (dotfiles) points at, same mode;
    the written text confirmed by reading it back. -> the change's result (None: nothing written)."""
    with _claude_lock(path):
        return _edit_target(os.path.realpath(path), change)


def _edit_target(path, change):
    lock = os.path.join(os.path.dirname(path), ".%s.coord-lock" % os.path.basename(path))
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        for _ in range(5):
            raw, _doc = read_claude(path)  # parsed once: coord never edits what does not parse
            text = raw.decode("utf-8") if raw is not None else "{}\n"
            new = change(text)
            if new is None:
                return None
            json.loads(new)  # never write what Claude Code could not read
            if _raw_bytes(path) != raw:
                continue  # Claude Code wrote meanwhile: compute again from its bytes
            mode = os.stat(path).st_mode & 0o777 if raw is not None else 0o600
            data = new.encode("utf-8")
            store.atomic_write(path, data, mode)
            if _raw_bytes(path) == data:
                return new
            continue  # overwritten at once by a writer that ignores the lock: compute again
        raise EnvError("%s kept changing while coord edited it" % path, "retry when Claude Code is idle")
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- Gemini CLI

GEMINI_TRUST_LEVELS = ("TRUST_FOLDER", "TRUST_PARENT", "DO_NOT_TRUST")


def gemini_home(environ=None):
    """Gemini CLI's per-user directory: $GEMINI_CLI_HOME/.gemini, else ~/.gemini (0.61.0)."""
    env = os.environ if environ is None else environ
    return os.path.join(env.get("GEMINI_CLI_HOME") or env.get("HOME") or os.path.expanduser("~"), ".gemini")


def gemini_trust_path(environ=None):
    """Where Gemini CLI records folder trust: $GEMINI_CLI_TRUSTED_FOLDERS_PATH, else
    <gemini_home>/trustedFolders.json, a JSON object {"<abs path>": TRUST_FOLDER | TRUST_PARENT |
    DO_NOT_TRUST} (comments allowed)."""
    env = os.environ if environ is None else environ
    return env.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH") or os.path.join(gemini_home(env), "trustedFolders.json")


def _read_gemini_trust(path):
    """(raw bytes or None, {path: level}) of trustedFolders.json; EnvError when it does not parse
    as a plain JSON object (Gemini itself refuses to start on a bad file; coord never edits one)."""
    raw = _raw_bytes(path)
    if raw is None:
        return None, {}
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise EnvError("%s is not plain JSON (%s); coord will not edit it" % (path, exc),
                       "fix it by hand, or trust the folder in Gemini CLI (/permissions)")
    if not isinstance(doc, dict):
        raise EnvError("%s is not a JSON object; coord will not edit it" % path, "fix it by hand")
    return raw, doc


def gemini_folder_trust_enabled(environ=None):
    """False when the person turned Gemini's folder trust off (security.folderTrust.enabled false
    in ~/.gemini/settings.json; on by default in 0.61.0, unlike its documentation) or forces it
    with GEMINI_CLI_TRUST_WORKSPACE=true: then every folder runs its project hooks."""
    env = os.environ if environ is None else environ
    if env.get("GEMINI_CLI_TRUST_WORKSPACE") == "true":
        return False
    try:
        with open(os.path.join(gemini_home(env), "settings.json"), "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
        return doc["security"]["folderTrust"]["enabled"] is not False
    except (OSError, ValueError, UnicodeDecodeError, KeyError, TypeError):
        return True


def gemini_trusted(directory, environ=None):
    """Whether Gemini CLI (0.61.0) loads `directory`'s project settings, hence its hooks: the
    longest rule in trustedFolders.json that contains it decides (TRUST_PARENT covers the rule's
    parent); DO_NOT_TRUST or no rule means untrusted. -> (True/False, None), or (None, why) when
    the file cannot be read. Read-only."""
    path = gemini_trust_path(environ)
    try:
        _raw, doc = _read_gemini_trust(path)
    except EnvError as exc:
        return None, exc.message
    best, level = -1, None
    for start in _variants(directory):
        for rule, value in doc.items():
            if value not in GEMINI_TRUST_LEVELS or not isinstance(rule, str) or not rule.startswith("/"):
                continue
            base = os.path.dirname(os.path.normpath(rule)) if value == "TRUST_PARENT" else os.path.normpath(rule)
            real = os.path.realpath(base)
            for b in (base, real):
                if (start == b or start.startswith(b.rstrip("/") + "/")) and len(rule) > best:
                    best, level = len(rule), value
    return level in ("TRUST_FOLDER", "TRUST_PARENT"), None


def gemini_carry(source, clone, environ=None):
    """Add `clone: TRUST_FOLDER` to trustedFolders.json when Gemini trusts the shared checkout and
    not the clone, under Gemini's own lock (proper-lockfile, `<file>.lock`, as Claude Code's).
    -> ({"config", "project"} added, or None, [notes])."""
    path = gemini_trust_path(environ)
    shared, why = gemini_trusted(source, environ)
    if why:
        return None, ["gemini: " + why]
    if not shared or gemini_trusted(clone, environ)[0]:
        return None, []

    def add(text):
        doc = json.loads(text)
        if doc.get(clone) == "TRUST_FOLDER":
            return None
        doc[clone] = "TRUST_FOLDER"
        return json.dumps(doc, indent=2)
    try:
        _locked_edit(path, add)
    except (EnvError, OSError, ValueError) as exc:
        return None, ["gemini: not carried over: %s" % getattr(exc, "message", exc)]
    return {"config": path, "project": clone}, []


def gemini_remove(rec):
    """Take the clone's entry carry-over added out of trustedFolders.json; -> notes."""
    if not rec or not rec.get("project"):
        return []

    def drop(text):
        doc = json.loads(text)
        if rec["project"] not in doc:
            return None
        del doc[rec["project"]]
        return json.dumps(doc, indent=2)
    try:
        _locked_edit(rec["config"], drop)
    except (EnvError, OSError, ValueError) as exc:
        return ["gemini: the entry for the clone stays in %s: %s" % (rec["config"], getattr(exc, "message", exc))]
    return []


def gemini_entry_for(clone, environ=None):
    """The carry-over record of the entry trustedFolders.json holds for exactly this clone, else None."""
    path = gemini_trust_path(environ)
    try:
        _raw, doc = _read_gemini_trust(path)
    except EnvError:
        return None
    return {"config": path, "project": clone} if clone in doc else None


# --------------------------------------------------------------------------- carry over, remove

def assess(source, clone, environ=None):
    """What each harness trusts in the shared checkout `source` and in `clone`."""
    out = {}
    try:
        config = read_codex_config(environ)
        shared = codex_hooks(source, config)
        approved = set(h["hash"] for h in shared if h["trusted_hash"] == h["hash"])
        hooks = codex_hooks(clone, config)
        out["codex"] = {
            "config": codex_config_path(environ),
            "shared_trusted": codex_project_trusted(config, source),
            "clone_trusted": codex_project_trusted(config, clone),
            "hooks": [dict(h, approved_in_shared=h["hash"] in approved) for h in hooks]}
    except EnvError as exc:
        out["codex"] = {"error": exc.message}
    path = claude_config_path(environ)
    try:
        _, doc = read_claude(path)
        out["claude"] = {"config": path, "shared_trusted": claude_trusted(doc, source),
                         "clone_trusted": claude_trusted(doc, clone)}
    except EnvError as exc:
        out["claude"] = {"error": exc.message}
    on, error = qwen_gate(environ)
    doc, error = read_jsonc(qwen_folders_path(environ)) if on else ({}, error)
    if on is None or doc is None:
        out["qwen"] = {"error": error}
    else:
        out["qwen"] = {"config": qwen_folders_path(environ), "gate": on,
                       "shared_trusted": not on or qwen_level(doc, source) is True,
                       "clone_trusted": not on or qwen_level(doc, clone) is True}
    shared, error = copilot_trusted(source, environ)
    clone_ok, error2 = copilot_trusted(clone, environ)
    if error or error2:
        out["copilot"] = {"error": error or error2}
    else:
        out["copilot"] = {"config": copilot_config_path(environ), "shared_trusted": shared,
                          "clone_trusted": clone_ok}
    out["gemini"] = gemini_assess(source, clone, environ)
    out["droid"] = droid_assess(source, clone, environ)
    return out


def gemini_assess(source, clone, environ=None):
    shared, why = gemini_trusted(source, environ)
    if why:
        return {"error": why}
    return {"config": gemini_trust_path(environ), "shared_trusted": shared,
            "clone_trusted": gemini_trusted(clone, environ)[0], "gate": gemini_folder_trust_enabled(environ)}


def carry_over(source, clone, environ=None, harnesses=CARRIED):
    """Carry the person's approvals of `source` over to `clone`; -> {"added": {...}, "notes": [...]}.

    Adds only what is missing and approved in the shared checkout; records exactly what it
    added so that remove_carried() can take exactly that away."""
    facts = assess(source, clone, environ)
    added, notes = {}, []
    for name in harnesses:
        if name != "gemini" and name not in _CARRY:
            continue  # a harness with no trust gate (opencode) or no harness at all (shell)
        if name == "gemini":
            rec, more = gemini_carry(source, clone, environ)
        else:
            f = facts.get(name) or {}
            if "error" in f:
                rec, more = None, ["%s: %s" % (name, f["error"])]
            else:
                rec, more = _CARRY[name](f, clone, environ)
        notes += more
        if rec:
            added[name] = rec
    return {"added": added, "notes": notes}


def _carry_codex(c, clone, environ):
    """Trust the clone as a Codex project, and its pinned hooks, where the shared checkout is."""
    edits, rec = [], {"config": c["config"], "project": None, "hooks": {}}
    project_ok = c["clone_trusted"]
    if not c["clone_trusted"] and c["shared_trusted"]:
        edits.append((["projects", clone, "trust_level"], "trusted"))
        rec["project"] = clone
        project_ok = True
    if project_ok:
        for h in c["hooks"]:
            # Only a command that names its content-addressed runtime copy pins what runs;
            # an older one runs the clone's own .coord/hook.py, which its agent can edit.
            if h["trusted_hash"] is None and h["approved_in_shared"] and h["pinned"]:
                edits.append((["hooks", "state", h["key"], "trusted_hash"], h["hash"]))
                rec["hooks"][h["key"]] = h["hash"]
    if not edits:
        return None, []
    try:
        codex_batch_write(edits, environ)
        return rec, []
    except (EnvError, UsageError) as exc:
        return None, ["codex: not carried over: " + exc.message]


def _carry_claude(cl, clone, environ):
    if not (cl["shared_trusted"] and not cl["clone_trusted"]):
        return None, []
    created = []

    def add(text):
        new, made = _claude_insert(text, clone)
        created.append(made)
        return new
    try:
        _locked_edit(cl["config"], add)
        return {"config": cl["config"], "project": clone, "created_projects": created[-1]}, []
    except (EnvError, OSError, ValueError) as exc:
        return None, ["claude: not carried over: %s" % getattr(exc, "message", exc)]


def _carry_qwen(q, clone, environ):
    if not (q["gate"] and q["shared_trusted"] and not q["clone_trusted"]):
        return None, []

    def trust_clone(doc):
        if doc.get(clone) == QWEN_TRUST:
            return None
        return dict(doc, **{clone: QWEN_TRUST})
    try:
        _json_edit(q["config"], trust_clone)
        return {"config": q["config"], "project": clone}, []
    except (EnvError, OSError, ValueError) as exc:
        return None, ["qwen: not carried over: %s" % getattr(exc, "message", exc)]


def _carry_copilot(cp, clone, environ):
    if not (cp["shared_trusted"] and not cp["clone_trusted"]):
        return None, []
    # Copilot CLI does the same itself for a worktree it creates of a trusted repository.
    try:
        created = copilot_add(cp["config"], clone)
    except (EnvError, OSError) as exc:
        return None, ["copilot: not carried over: %s" % getattr(exc, "message", exc)]
    if created is None:
        return None, []
    return {"config": cp["config"], "folder": clone, "created_key": created}, []


_CARRY = {"codex": _carry_codex, "claude": _carry_claude, "qwen": _carry_qwen, "copilot": _carry_copilot,
          "droid": _carry_droid}


def merge_added(old, new):
    """The union of two `added` records (a second carry at `work start` adds to the first)."""
    out = json.loads(json.dumps(old or {}))
    for harness, rec in (new or {}).items():
        cur = out.setdefault(harness, dict(rec))
        if cur is rec or cur == rec:
            continue
        if rec.get("project"):
            cur["project"] = rec["project"]
        if harness == "codex":
            cur.setdefault("hooks", {}).update(rec.get("hooks") or {})
        if harness == "claude" and rec.get("created_projects"):
            cur["created_projects"] = True
    return out


def entries_for(clone, environ=None):
    """The entries the harness configs hold for exactly this clone's path, in carry_over()'s
    `added` shape: what a carry-over made for it under a database that was lost. The path is a
    managed clone's own (coord made the directory), so nothing else has a claim on them; they
    go when the clone is removed. -> {} when there are none or a config is unreadable."""
    found = {}
    try:
        config = read_codex_config(environ)
    except EnvError:
        config = {}
    prefix = os.path.join(clone, ".codex", "hooks.json") + ":"
    hooks = {k[2]: v for k, v in config.items() if isinstance(k, tuple) and len(k) == 4 and k[:2] == ("hooks", "state")
             and k[3] == "trusted_hash" and str(k[2]).startswith(prefix)}
    project = clone if config.get(("projects", clone, "trust_level")) is not None else None
    if hooks or project:
        found["codex"] = {"config": codex_config_path(environ), "project": project, "hooks": hooks}
    path = claude_config_path(environ)
    try:
        _raw, doc = read_claude(path)
    except (EnvError, OSError, ValueError):
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("projects"), dict) and clone in doc["projects"]:
        found["claude"] = {"config": path, "project": clone, "created_projects": False}
    doc, _error = read_jsonc(qwen_folders_path(environ))
    if isinstance(doc, dict) and doc.get(clone) == QWEN_TRUST:
        found["qwen"] = {"config": qwen_folders_path(environ), "project": clone}
    gemini = gemini_entry_for(clone, environ)
    if gemini:
        found["gemini"] = gemini
    if _copilot_listed(clone, environ):
        found["copilot"] = {"config": copilot_config_path(environ), "folder": clone, "created_key": False}
    if droid_trusted(clone, environ)[0]:
        found["droid"] = {"config": droid_settings_path(environ), "project": clone}
    return found


def remove_carried(added, environ=None):
    """Take away exactly what carry_over() recorded as added; -> notes (empty when all went)."""
    notes = []
    c = (added or {}).get("codex")
    if c:
        config = {}
        try:
            config = read_codex_config(environ)
        except EnvError as exc:
            notes.append("codex: " + exc.message)
        edits = []
        if c.get("project") and config.get(("projects", c["project"], "trust_level")) is not None:
            edits.append((["projects", c["project"]], None))
        for key in sorted(c.get("hooks") or {}):
            if config.get(("hooks", "state", key, "trusted_hash")) is not None:
                edits.append((["hooks", "state", key], None))
        if edits and not notes:
            try:
                codex_batch_write(edits, environ)
            except (EnvError, UsageError) as exc:
                notes.append("codex: entries for the clone stay in %s: %s" % (c.get("config"), exc.message))
    cl = (added or {}).get("claude")
    if cl and cl.get("project"):
        try:
            _locked_edit(cl["config"], lambda text: _claude_remove(text, cl["project"],
                                                                   cl.get("created_projects")))
        except (EnvError, OSError, ValueError) as exc:
            notes.append("claude: the entry for the clone stays in %s: %s" % (cl["config"],
                                                                             getattr(exc, "message", exc)))
    q = (added or {}).get("qwen")
    if q and q.get("project"):
        def untrust_clone(doc):
            if doc.get(q["project"]) != QWEN_TRUST:
                return None
            return {k: v for k, v in doc.items() if k != q["project"]}
        try:
            if os.path.exists(q["config"]):
                _json_edit(q["config"], untrust_clone)
        except (EnvError, OSError, ValueError) as exc:
            notes.append("qwen: the entry for the clone stays in %s: %s" % (q["config"], getattr(exc, "message", exc)))
    notes += gemini_remove((added or {}).get("gemini"))
    notes += droid_remove((added or {}).get("droid"))
    cp = (added or {}).get("copilot")
    if cp and cp.get("folder"):
        try:
            copilot_remove(cp["config"], cp["folder"], cp.get("created_key"))
        except (EnvError, OSError) as exc:
            notes.append("copilot: the entry for the clone stays in %s: %s" % (cp["config"],
                                                                              getattr(exc, "message", exc)))
    return notes


def pending_approvals(source, clone, harness, environ=None):
    """Plain sentences: what a person must approve in `clone`'s window for `harness` to run
    coord's hooks, and how. Empty when nothing is missing."""
    facts = assess(source, clone, environ).get(harness) or {}
    if "error" in facts:
        return ["%s: %s" % (harness, facts["error"])]
    out = []
    if harness == "codex":
        if not facts["clone_trusted"]:
            out.append("Codex: trust the project %s when Codex asks (until then it runs no project hooks)"
                       % clone)
        waiting = [h for h in facts["hooks"] if h["trusted_hash"] != h["hash"]]
        if waiting:
            out.append("Codex: approve coord's %d hook%s with /hooks (unapproved hooks do not run: no "
                       "registration, no messages, no write blocking)" % (len(waiting),
                                                                         "" if len(waiting) == 1 else "s"))
    elif harness == "claude" and not facts["clone_trusted"]:
        out.append("Claude Code: accept the trust dialog for %s (until then it waits and no hook runs)" % clone)
    elif harness == "qwen" and not facts["clone_trusted"]:
        out.append("Qwen Code: trust the folder %s when Qwen asks (until then it loads none of the"
                   " project's hooks: no registration, no messages, no write blocking)" % clone)
    elif harness == "gemini" and facts["gate"] and not facts["clone_trusted"]:
        out.append("Gemini CLI: trust the folder %s when Gemini asks (untrusted, it loads no project "
                   "settings: no hooks, so no registration, no messages, no write blocking)" % clone)
    elif harness == "droid" and not facts["clone_trusted"]:
        out.append("Factory Droid: trust the folder %s when Droid asks (until then it loads none of the project's"
                   " hooks: no registration, no messages, no write blocking)" % clone)
    elif harness == "copilot" and not facts["clone_trusted"]:
        out.append("Copilot CLI: trust the folder %s when Copilot asks (until then it runs no repository hooks: "
                   "no registration, no messages, no write blocking)" % clone)
    return out


# --------------------------------------------------------------------------- the work record
# What was carried for a clone is recorded in its work (WORK_DATA "trust"), so that removing the
# clone takes exactly that away.

def _who(caller):
    return caller["id"] if caller else None


def carry_trust(st, w, caller, environ, harnesses=CARRIED):
    """With the person's opt-in (`coord trust --carry-over on`), carry their approvals of the
    shared checkout over to the clone and record exactly what was added; -> the record."""
    if not carry_enabled(environ) or not w.get("path") or not w.get("source"):
        return w
    try:
        result = carry_over(w["source"], w["path"], environ, harnesses)
    except Exception as exc:  # never a failed create or start: the note says what happened
        store.log_traceback("carry_over %s" % w["id"])
        result = {"added": {}, "notes": ["not carried over: %s: %s" % (type(exc).__name__, exc)]}
    if not result["added"] and not result["notes"]:
        return w
    with st.transaction():
        cur = st.work(w["id"])
        old = cur["data"].get("trust") or {}
        rec = {"added": merge_added(old.get("added"), result["added"]),
               "notes": [store.clean_text(n, 300) for n in result["notes"]][:10]}
        cur = st.update_work(w["id"], data={"trust": rec})
        st.audit("work.trust-carried", _who(caller), w["id"], added=result["added"], notes=rec["notes"])
    return cur


def trust_pending(w, harness, environ):
    """What a person must approve in the window for `harness` (a list; None when it cannot be told)."""
    if not w.get("path") or not w.get("source"):
        return None
    try:
        return pending_approvals(w["source"], w["path"], harness, environ)
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
    try:
        notes = remove_carried(added, environ)
    except Exception as exc:  # the clone is gone either way; say what stayed
        store.log_traceback("remove_carried %s" % w["id"])
        notes = ["not removed: %s: %s" % (type(exc).__name__, exc)]
    with st.transaction():
        cur = st.work(w["id"])
        rec = dict(cur["data"].get("trust") or {}, removed_at=time.time(), left=notes or None)
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
    if (added.get("droid") or {}).get("project"):
        bits.append("droid folder")
    lines = ["approvals carried over from the shared checkout: " + "; ".join(bits)] if bits else []
    return lines + [store.clean_text(n, 300) for n in rec.get("notes") or []]


def adopt_trust(st, w, caller, environ):
    """Record the harness entries that name the adopted clone's own path as carried, so that
    its removal takes them away as it would have before the database was lost."""
    try:
        found = entries_for(w["path"], environ)
    except Exception:
        store.log_traceback("entries_for %s" % w["id"])
        return w
    if not found:
        return w
    with st.transaction():
        cur = st.update_work(w["id"], data={"trust": {"added": found, "notes": [], "adopted": True}})
        st.audit("work.trust-carried", _who(caller), w["id"], added=found, adopted=True)
    return cur


# --------------------------------------------------------------------------- command

def cmd_trust(ctx, args):
    """`coord trust [--carry-over on|off]`: show or set the opt-in."""
    environ = ctx.environ
    if args.carry_over is not None:
        path = set_carry(args.carry_over == "on", environ)
        on = args.carry_over == "on"
        text = ("carry-over on: new clones get your Codex, Claude Code, Qwen Code, Gemini CLI and Copilot CLI approvals of the shared checkout "
                "(only those you gave; removed with the clone). Stored in %s" % path) if on else \
            "carry-over off (stored in %s)" % path
        return 0, {"ok": True, "carry_over": on, "settings": path}, text
    on = carry_enabled(environ)
    data = {"ok": True, "carry_over": on, "settings": settings_path(environ),
            "codex_config": codex_config_path(environ), "claude_config": claude_config_path(environ)}
    text = "carry-over %s (%s)%s" % ("on" if on else "off", settings_path(environ), "" if on else
                                     "; turn on with: " + store.hint("coord trust --carry-over on"))
    return 0, data, text


def register(add, common):
    p = add("trust", parents=[common], help="carry your harness approvals over to managed clones (opt-in)")
    p.add_argument("--carry-over", choices=("on", "off"), help="on: each new clone gets the Codex, Claude "
                   "Code and Copilot CLI approvals you gave the shared checkout; off: none (the default)")
    p.set_defaults(func=cmd_trust)
    return p


if __name__ == "__main__":  # pragma: no cover
    sys.exit("trust.py is a module of coord")
