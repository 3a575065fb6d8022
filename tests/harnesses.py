"""Run the real Claude Code, Codex, Copilot and Gemini CLIs offline against tests/modelserver.py.

Each run gets a private HOME (and for Codex a private CODEX_HOME whose config.toml points at
the scripted server; for Copilot its offline BYOK variables aimed at the server's Anthropic
Messages API; for Gemini GOOGLE_GEMINI_BASE_URL at the server's Gemini API), an environment scrubbed of the developer's own agent session, proxies aimed at
the local server so that no request can leave the machine, and a timeout.

Binaries are found on PATH first, then in `${COORD_TEST_CACHE:-~/.cache/coord-tests}/npm`
(where tests/provision installs the pinned versions). A missing binary fails the test under
CI=true and skips it elsewhere, as `support.require_tool` does.
"""

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

from modelserver import ModelServer, Turn, flatten, say, tool  # noqa: F401 (re-exported for tests)
import support  # noqa: E402
from support import IN_CI, _SCRUB, CoordTestCase, require_tool, retry_until

CLAUDE_VERSION = "2.1.197"
CODEX_VERSION = "0.171.0"
COPILOT_VERSION = "1.0.102"
QWEN_VERSION = "0.24.4"
OPENCODE_VERSION = "1.18.33"
KILO_VERSION = "7.7.7"
GEMINI_VERSION = "0.61.0"
MODEL_KEY_VAR = "COORD_E2E_MODEL_KEY"

# Variables from the developer's own session or machine that must not reach a harness.
_DROP_PREFIXES = ("ANTHROPIC_", "CLAUDE", "CODEX_", "OPENAI_", "COORD_", "OTEL_", "COPILOT_", "GITHUB_COPILOT_",
                  "QWEN_", "DASHSCOPE_")
_DROP_PREFIXES += ("OPENCODE", "GEMINI_", "GOOGLE_", "KILO")
_DROP = set(_SCRUB) | {"GH_TOKEN", "GITHUB_TOKEN", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy",
                       "https_proxy", "all_proxy", "no_proxy", "IS_SANDBOX", "XDG_CONFIG_HOME",
                       "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"}


# Resolved at import, before a test case points HOME at its private directory.
_CACHE_DIR = os.environ.get("COORD_TEST_CACHE") or os.path.join(
    os.path.expanduser("~"), ".cache", "coord-tests")


def cache_dir():
    return _CACHE_DIR


def find_cli(name):
    """Path of the `claude` or `codex` binary, or None."""
    path = shutil.which(name)
    if path:
        return path
    cand = os.path.join(cache_dir(), "npm", "node_modules", ".bin", name)
    if os.access(cand, os.X_OK):
        return cand
    return None


def require_cli(testcase, name):
    """Like support.require_tool, but also looks in the test cache's npm prefix."""
    path = find_cli(name)
    if path:
        return path
    msg = "%s not found on PATH or in %s/npm; run tests/provision" % (name, cache_dir())
    if IN_CI:
        testcase.fail(msg)
    testcase.skipTest(msg)


class RunResult(object):
    """What one harness run produced."""

    def __init__(self, argv, code, stdout, stderr, seconds, timed_out=False):
        self.argv = argv
        self.code = code
        self.stdout = stdout
        self.stderr = stderr
        self.seconds = seconds
        self.timed_out = timed_out
        self.events = []
        for line in stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    self.events.append(json.loads(line))
                except ValueError:
                    pass

    def describe(self):
        """A short dump for assertion messages."""
        return "argv=%s code=%s timed_out=%s %.1fs\nstdout(tail)=%s\nstderr(tail)=%s" % (
            self.argv[:2], self.code, self.timed_out, self.seconds, self.stdout[-3000:],
            self.stderr[-3000:])

    def session_id(self):
        """The conversation ID the harness reported (Claude system/init; Codex thread.started;
        Copilot's closing result)."""
        for ev in self.events:
            if ev.get("type") == "system" and ev.get("session_id"):
                return ev["session_id"]
            if ev.get("type") == "init" and ev.get("session_id"):  # Gemini CLI stream-json
                return ev["session_id"]
            if ev.get("type") == "thread.started" and ev.get("thread_id"):
                return ev["thread_id"]
            if ev.get("type") == "result" and ev.get("sessionId"):
                return ev["sessionId"]
            if ev.get("type") == "session" and ev.get("id"):  # pi --mode json
                return ev["id"]
            if ev.get("type") == "result" and ev.get("session_id"):  # Auggie --output-format json
                return ev["session_id"]
            if isinstance(ev.get("sessionID"), str) and ev["sessionID"].startswith("ses_"):
                return ev["sessionID"]  # OpenCode's JSON events
        return None


def base_env(home, server, extra=None):
    """A scrubbed environment with a private HOME and all traffic aimed at the local server."""
    env = {k: v for k, v in os.environ.items()
           if k not in _DROP and not k.startswith(_DROP_PREFIXES)}
    env.update({
        "HOME": home,
        "HTTPS_PROXY": server.url,
        "HTTP_PROXY": server.url,
        "https_proxy": server.url,
        "http_proxy": server.url,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "NO_COLOR": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    if extra:
        env.update(extra)
    return env


def processes_inside(directory):
    """PIDs of this user's processes whose working directory is `directory` or under it."""
    top = os.path.realpath(directory)
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cwd = os.readlink("/proc/%s/cwd" % name)
        except OSError:
            continue
        if cwd == top or cwd.startswith(top + os.sep):
            found.append(int(name))
    return found


def _run(argv, cwd, env, timeout, stdin=subprocess.DEVNULL):
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            pass
        out, err = proc.communicate()
    seconds = time.monotonic() - start
    return RunResult(argv, proc.returncode, out.decode("utf-8", "backslashreplace"),
                     err.decode("utf-8", "backslashreplace"), seconds, timed_out)


# -- Claude Code -------------------------------------------------------------------------------

CLAUDE_TITLE_REQUEST = "Generate a concise, sentence-case title"  # Claude Code's side request for a session title
# Interactive Codex 0.171.0 asks the model for a thread title in a side request (read-only
# sandbox, a JSON schema for the answer) that quotes the user's prompt; it may come before or
# after the turn's own request, so a script that waits on "the first request" gives it a lane.
CODEX_TITLE_REQUEST = "Generate a concise, single-line task title"
CODEX_TITLE_LANE = {CODEX_TITLE_REQUEST: [say('{"title": "Scripted task"}')] * 4}


def trust_claude_repo(home, repo):
    """~/.claude.json of a person who has used Claude Code before and trusted `repo`; -> its path."""
    path = os.path.join(home, ".claude.json")
    with open(path, "w") as f:
        json.dump({"hasCompletedOnboarding": True, "theme": "dark",
                   "customApiKeyResponses": {"approved": ["sk-e2e-offline"], "rejected": []},
                   "projects": {repo: {"hasTrustDialogAccepted": True}}}, f, indent=2)
    return path


def claude_env(home, server, extra=None):
    env = base_env(home, server, extra=None)
    env.update({
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_API_KEY": "sk-e2e-offline",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    })
    if extra:
        env.update(extra)
    return env


def run_claude(claude, repo, prompt, server, home, env=None, timeout=120, args=()):
    """Run `claude -p PROMPT` in `repo` (stream-json, acceptEdits); return a RunResult."""
    os.makedirs(home, exist_ok=True)
    argv = [claude, "-p", prompt, "--output-format", "stream-json", "--verbose",
            "--permission-mode", "acceptEdits"] + list(args)
    return _run(argv, repo, claude_env(home, server, env), timeout)


def write_claude_hooks(repo, hooks):
    """Write `.claude/settings.json` with `{"hooks": hooks}` (validated as JSON)."""
    path = os.path.join(repo, ".claude", "settings.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = json.dumps({"hooks": hooks}, indent=2)
    json.loads(data)
    with open(path, "w") as f:
        f.write(data + "\n")
    return path


# -- Copilot CLI -----------------------------------------------------------------------------------

COPILOT_MODEL = "claude-sonnet-4.5"


def copilot_env(home, server, extra=None):
    """Copilot offline: its BYOK provider is the scripted server's Anthropic Messages API
    (POST /v1/messages, x-api-key, streamed), no GitHub sign-in, no update or telemetry."""
    env = base_env(home, server, extra=None)
    env.update({
        "COPILOT_OFFLINE": "true",
        "COPILOT_PROVIDER_TYPE": "anthropic",
        "COPILOT_PROVIDER_BASE_URL": server.url,
        "COPILOT_PROVIDER_API_KEY": "sk-e2e-offline",
        "COPILOT_MODEL": COPILOT_MODEL,
        "COPILOT_AUTO_UPDATE": "false",
    })
    if extra:
        env.update(extra)
    return env


def trust_copilot_folder(home, folder):
    """Trust `folder` the way Copilot records a person's answer to its folder-trust prompt:
    `trustedFolders` in ~/.copilot/config.json (Copilot runs no repository hooks without it)."""
    path = os.path.join(home, ".copilot", "config.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"trustedFolders": [os.path.realpath(folder)]}, f, indent=2)
    return path


def run_copilot(copilot, repo, prompt, server, home, env=None, timeout=120, args=()):
    """Run `copilot -p PROMPT --allow-all-tools` in `repo` (JSONL output); return a RunResult."""
    os.makedirs(home, exist_ok=True)
    argv = [copilot, "-p", prompt, "--allow-all-tools", "--no-auto-update", "--output-format", "json"] \
        + list(args)
    return _run(argv, repo, copilot_env(home, server, env), timeout)


def copilot_tool(name, **tool_input):
    """A Copilot tool call under its own name and arguments: view/create/edit {path, ...}, bash."""
    return Turn(calls=[{"kind": "claude", "name": name, "input": tool_input}])


# -- Qwen Code ---------------------------------------------------------------------------------

QWEN_MODEL = "qwen-e2e"
QWEN_KEY = "sk-e2e-offline"


def qwen_env(home, server, extra=None):
    """Qwen Code offline: its OpenAI-compatible provider is the scripted server's Chat
    Completions API (POST /v1/chat/completions, streamed), no usage statistics, no yolo notice."""
    env = base_env(home, server, extra=None)
    env.update({
        "OPENAI_BASE_URL": server.url + "/v1",
        "OPENAI_API_KEY": QWEN_KEY,
        "OPENAI_MODEL": QWEN_MODEL,
        "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
    })
    if extra:
        env.update(extra)
    return env


# -- OpenCode ------------------------------------------------------------------------------------

OPENCODE_MODEL = "anthropic/e2e-model"
OPENCODE_PATCH_MODEL = "anthropic/gpt-5-e2e"  # OpenCode offers apply_patch (not edit/write) to gpt- models


def write_opencode_config(path, server):
    """OpenCode's config (OPENCODE_CONFIG, outside the repository): its Anthropic provider aimed at
    the scripted server's Messages API, two models of our own (no models.dev catalogue), no
    sharing or updates."""
    model = {"name": "e2e", "tool_call": True, "limit": {"context": 200000, "output": 8192}}
    doc = {"provider": {"anthropic": {"options": {"baseURL": server.url + "/v1", "apiKey": "sk-e2e-offline"},
                                      "models": {"e2e-model": model, "gpt-5-e2e": dict(model, name="gpt-5-e2e")}}},
           "model": OPENCODE_MODEL, "small_model": OPENCODE_MODEL, "autoupdate": False, "share": "disabled"}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
    return path


def opencode_env(home, server, repo, extra=None):
    """OpenCode offline: its config above, the models.dev fetch, updates, sharing, LSP downloads and
    its built-in plugins off; the npm registry it installs its plugin package from (every
    .opencode directory, ~/.config/opencode) aimed at the scripted server; PWD the repository
    (OpenCode 1.18.33 takes its directory from $PWD, not from the process's cwd)."""
    env = base_env(home, server, extra=None)
    env.update({
        "OPENCODE_CONFIG": write_opencode_config(os.path.join(home, "e2e-opencode.json"), server),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "npm_config_registry": server.url + "/",
        "PWD": repo,
    })
    if extra:
        env.update(extra)
    return env


def write_qwen_user_settings(home, folder_trust=False, extra=None):
    """~/.qwen/settings.json: the OpenAI auth type, usage statistics off (else Qwen tries to
    reach an outside telemetry host), update checks off (else 0.24.4 runs `npm view` on the
    package at each start, a registry request and an npm start-up), managed auto-memory off (else a background memory agent
    sometimes makes one more model request after the session), and the folder-trust gate when
    `folder_trust`."""
    doc = {"security": {"auth": {"selectedType": "openai"}}, "privacy": {"usageStatisticsEnabled": False},
           "general": {"enableAutoUpdate": False},
           "model": {"name": QWEN_MODEL},
           "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False}}
    if folder_trust:
        doc["security"]["folderTrust"] = {"enabled": True}
    doc.update(extra or {})
    path = os.path.join(home, ".qwen", "settings.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
    return path


def trust_qwen_folder(home, folder, level="TRUST_FOLDER"):
    """Record a person's answer to Qwen's folder-trust prompt in ~/.qwen/trustedFolders.json."""
    path = os.path.join(home, ".qwen", "trustedFolders.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    doc = {}
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
    doc[os.path.realpath(folder)] = level
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
    return path


def run_qwen(qwen, repo, prompt, server, home, env=None, timeout=120, args=()):
    """Run `qwen --approval-mode yolo -o stream-json PROMPT` in `repo`; return a RunResult."""
    os.makedirs(home, exist_ok=True)
    if not os.path.exists(os.path.join(home, ".qwen", "settings.json")):
        write_qwen_user_settings(home)
    argv = [qwen, "--auth-type", "openai", "--approval-mode", "yolo", "-o", "stream-json"] \
        + list(args) + [prompt]
    return _run(argv, repo, qwen_env(home, server, env), timeout)


def write_qwen_hooks(repo, hooks):
    """Write `.qwen/settings.json` with `{"hooks": hooks}` (validated as JSON)."""
    path = os.path.join(repo, ".qwen", "settings.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = json.dumps({"hooks": hooks}, indent=2)
    json.loads(data)
    with open(path, "w") as f:
        f.write(data + "\n")
    return path
def run_opencode(opencode, repo, prompt, server, home, env=None, timeout=180, args=()):
    """Run `opencode run PROMPT --format json` in `repo` (a title given, so no title request takes
    a scripted turn); return a RunResult."""
    os.makedirs(home, exist_ok=True)
    argv = [opencode, "run", "--format", "json", "--title", "e2e"] + list(args) + ["--", prompt]
    return _run(argv, repo, opencode_env(home, server, repo, env), timeout)


# -- Kilo Code (OpenCode's fork) ------------------------------------------------------------------

def kilo_env(home, server, repo, extra=None):
    """Kilo Code 7.7.7 offline: OpenCode's config (its Anthropic provider aimed at the scripted
    server) in KILO_CONFIG, with its own gateway provider disabled (else it asks its host for
    the gateway's model list at each start); its update check, model catalogue fetch, sharing,
    session upload, telemetry, LSP downloads, built-in plugins and daemon off; the npm registry it
    installs its plugin package from (every .kilo directory) aimed at the scripted server; PWD
    the repository, as OpenCode's."""
    env = base_env(home, server, extra=None)
    config = write_opencode_config(os.path.join(home, "e2e-kilo.json"), server)
    with open(config) as f:
        doc = json.load(f)
    doc["disabled_providers"] = ["kilo"]
    with open(config, "w") as f:
        json.dump(doc, f, indent=2)
    env.update({
        "KILO_CONFIG": config,
        "KILO_DISABLE_MODELS_FETCH": "1",
        "KILO_DISABLE_AUTOUPDATE": "1",
        "KILO_DISABLE_SHARE": "1",
        "KILO_DISABLE_SESSION_INGEST": "1",
        "KILO_TELEMETRY_LEVEL": "off",
        "KILO_DISABLE_LSP_DOWNLOAD": "1",
        "KILO_DISABLE_DEFAULT_PLUGINS": "1",
        "KILO_NO_DAEMON": "1",
        "npm_config_registry": server.url + "/",
        "PWD": repo,
    })
    if extra:
        env.update(extra)
    return env


def run_kilo(kilo, repo, prompt, server, home, env=None, timeout=180, args=()):
    """Run `kilo run --auto PROMPT --format json` in `repo` (--auto: its shell asks no question,
    which `run` would answer no); return a RunResult."""
    os.makedirs(home, exist_ok=True)
    argv = [kilo, "run", "--auto", "--format", "json", "--title", "e2e"] + list(args) + ["--", prompt]
    return _run(argv, repo, kilo_env(home, server, repo, env), timeout)


# -- Factory Droid ---------------------------------------------------------------------------------

DROID_MODEL = "custom:e2e-model"        # a custom (BYOK) model: Create and Edit
DROID_PATCH_MODEL = "custom:gpt-5-e2e"  # on its OpenAI (Responses) provider: ApplyPatch, a custom tool


def write_droid_settings(home, server, trusted=()):
    """~/.factory/settings.json of a person who uses Droid with their own models: two custom models
    aimed at the scripted server, one on its Anthropic provider (Messages API; the default) and a
    GPT one on its OpenAI provider (Responses API, where it offers ApplyPatch instead of Create and Edit),
    at the `auto-high` autonomy; `trusted` folders as its TUI records them. Kept keys survive."""
    path = os.path.join(home, ".factory", "settings.json")
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = {}
    model = {"baseUrl": server.url, "apiKey": "sk-e2e-offline", "provider": "anthropic", "maxOutputTokens": 8192}
    doc["customModels"] = [dict(model, model="e2e-model", displayName="e2e"),
                           dict(model, model="gpt-5-e2e", displayName="e2e-patch", provider="openai",
                                baseUrl=server.url + "/v1")]
    doc["sessionDefaultSettings"] = {"model": DROID_MODEL, "autonomyMode": "auto-high"}
    doc["logoAnimation"] = "off"
    folders = doc.setdefault("trustedFolders", {})
    for folder in trusted:
        folders[folder] = {"trustedAt": "2026-01-01T00:00:00.000Z"}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
    return path


def droid_env(home, server, extra=None):
    """Factory Droid 0.225.2 offline: its air-gapped mode (no Factory account, login, telemetry or
    feature-flag requests; custom models only) and no update check."""
    env = base_env(home, server, extra=None)
    env.update({"FACTORY_AIRGAP_ENABLED": "1", "FACTORY_DROID_AUTO_UPDATE_ENABLED": "false"})
    if extra:
        env.update(extra)
    return env


def run_droid(droid, repo, prompt, server, home, env=None, timeout=120, args=()):
    """Run `droid exec --auto high -o stream-json PROMPT` in `repo` (its settings written first);
    return a RunResult. `droid exec` asks no folder trust and runs the project's hooks."""
    write_droid_settings(home, server)
    argv = [droid, "exec", "--auto", "high", "-o", "stream-json", "-m", DROID_MODEL] + list(args) + [prompt]
    return _run(argv, repo, droid_env(home, server, env), timeout)


def write_droid_hooks(repo, hooks):
    """Droid's .factory/hooks.json: the events at the top level."""
    path = os.path.join(repo, ".factory", "hooks.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(hooks, f, indent=2)
    return path


# -- pi ------------------------------------------------------------------------------------------------

PI_MODEL = "e2e-model"


def pi_env(home, server, extra=None):
    """pi 0.73.1 offline (PI_OFFLINE: no version check, package update, telemetry or tool
    downloads): a provider of the person's own on its Anthropic API aimed at the scripted server,
    its default (~/.pi/agent/models.json and settings.json)."""
    env = base_env(home, server, extra=None)
    agent = os.path.join(home, ".pi", "agent")
    os.makedirs(agent, exist_ok=True)
    with open(os.path.join(agent, "models.json"), "w") as f:
        json.dump({"providers": {"e2e": {"baseUrl": server.url, "api": "anthropic-messages", "apiKey": "sk-e2e-offline",
                                         "models": [{"id": PI_MODEL}]}}}, f, indent=2)
    with open(os.path.join(agent, "settings.json"), "w") as f:
        json.dump({"defaultProvider": "e2e", "defaultModel": PI_MODEL, "enableInstallTelemetry": False}, f, indent=2)
    env.update({"PI_OFFLINE": "1", "PI_TELEMETRY": "0"})
    if extra:
        env.update(extra)
    return env


def run_pi(pi, repo, prompt, server, home, env=None, timeout=120, args=()):
    """Run `pi --mode json -p PROMPT` in `repo`; return a RunResult."""
    argv = [pi, "--mode", "json", "-p"] + list(args) + [prompt]
    return _run(argv, repo, pi_env(home, server, env), timeout)


# -- Auggie ------------------------------------------------------------------------------------------

def auggie_env(home, server, extra=None):
    """Auggie 0.36.0 offline: a session (any token; it is not checked locally) whose tenant URL is
    the scripted server, which speaks Augment's API (tests/modelserver.py); the onboarding pages
    already seen (~/.augment/.auggie.json), as for a person who has used it."""
    env = base_env(home, server, extra=None)
    state = os.path.join(home, ".augment", ".auggie.json")
    os.makedirs(os.path.dirname(state), exist_ok=True)
    if not os.path.exists(state):
        with open(state, "w") as f:
            json.dump({"onboardingVersion": "1.0.0"}, f)
    env["AUGMENT_SESSION_AUTH"] = json.dumps({"accessToken": "e2e-offline", "tenantURL": server.url + "/",
                                              "scopes": ["email"]})
    if extra:
        env.update(extra)
    return env


def run_auggie(auggie, repo, prompt, server, home, env=None, timeout=120, args=()):
    """Run `auggie --print --output-format json PROMPT` in `repo`; return a RunResult."""
    argv = [auggie, "--print", "--output-format", "json"] + list(args) + [prompt]
    return _run(argv, repo, auggie_env(home, server, env), timeout)


# -- Gemini CLI ------------------------------------------------------------------------------------

GEMINI_MODEL = "gemini-2.5-flash"


def gemini_env(home, server, extra=None):
    """Gemini CLI offline: the `gemini-api-key` auth type (user settings) with GEMINI_API_KEY, its
    requests sent to GOOGLE_GEMINI_BASE_URL, the scripted server's Gemini API. (Without a selected
    type the base URL alone picks `gateway`, which 0.61.0's non-interactive start refuses.)"""
    env = base_env(home, server, extra=None)
    env.update({
        "GOOGLE_GEMINI_BASE_URL": server.url,
        "GEMINI_API_KEY": "sk-e2e-offline",
        "GEMINI_TELEMETRY_ENABLED": "false",
    })
    if extra:
        env.update(extra)
    return env


def write_gemini_user_settings(home):
    """~/.gemini/settings.json of a person who has used Gemini CLI before: no update checks,
    no usage statistics, a fixed model (no router), folder trust on (its default)."""
    path = os.path.join(home, ".gemini", "settings.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    doc = {"general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
           "privacy": {"usageStatisticsEnabled": False},
           "telemetry": {"enabled": False},
           "model": {"name": GEMINI_MODEL},
           "security": {"auth": {"selectedType": "gemini-api-key"}}}
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
    return path


def trust_gemini_folder(home, folder, level="TRUST_FOLDER"):
    """Trust `folder` the way Gemini CLI records a person's answer to its folder-trust dialog:
    ~/.gemini/trustedFolders.json {"<abs path>": "TRUST_FOLDER"} (untrusted: no project settings,
    so no project hooks)."""
    path = os.path.join(home, ".gemini", "trustedFolders.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    doc = {}
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
    doc[os.path.realpath(folder)] = level
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
    return path


def run_gemini(gemini, repo, prompt, server, home, env=None, timeout=120, args=()):
    """Run `gemini -p PROMPT --approval-mode yolo -o stream-json` in `repo`; return a RunResult."""
    os.makedirs(home, exist_ok=True)
    if not os.path.exists(os.path.join(home, ".gemini", "settings.json")):
        write_gemini_user_settings(home)
    argv = [gemini, "-p", prompt, "--approval-mode", "yolo", "--output-format", "stream-json"] + list(args)
    return _run(argv, repo, gemini_env(home, server, env), timeout)


def write_gemini_hooks(repo, hooks):
    """Write `.gemini/settings.json` with `{"hooks": hooks}` (validated as JSON)."""
    path = os.path.join(repo, ".gemini", "settings.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = json.dumps({"hooks": hooks}, indent=2)
    json.loads(data)
    with open(path, "w") as f:
        f.write(data + "\n")
    return path


# -- Codex ---------------------------------------------------------------------------------------

def _toml_str(s):
    # JSON string escapes are valid TOML basic-string escapes for the text we write.
    return json.dumps(s)


def snake_event(event):
    """PreToolUse -> pre_tool_use."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", event).lower()


def codex_hook_hashes(hooks_json_path):
    """{state key: "sha256:<hex>"} for every handler in a `.codex/hooks.json`.

    The key is `<abs hooks.json>:<event_snake>:<group>:<handler>`; the hash is sha256 of the
    canonical JSON (sorted keys, no spaces) of the handler's normalised group, as Codex computes
    it for its per-hook trust (`[hooks.state."<key>"] trusted_hash`). The timeout in it is the
    effective one: default 600 s, SessionEnd default 1 s and capped at 3 s.
    """
    path = os.path.realpath(hooks_json_path)
    with open(path) as f:
        config = json.load(f)
    out = {}
    for event, groups in sorted(config.get("hooks", {}).items()):
        ev = snake_event(event)
        for gi, group in enumerate(groups):
            for hi, handler in enumerate(group.get("hooks", [])):
                timeout = handler.get("timeout", 1 if event == "SessionEnd" else 600)
                if event == "SessionEnd":
                    timeout = min(timeout, 3)  # Codex caps SessionEnd at 3 s, hash included
                norm = {"type": handler.get("type", "command"), "command": handler["command"],
                        "timeout": timeout, "async": handler.get("async", False)}
                for opt in ("statusMessage", "additionalContextLimit"):
                    if opt in handler:
                        norm[opt] = handler[opt]
                ident = {"event_name": ev, "hooks": [norm]}
                if "matcher" in group:
                    ident["matcher"] = group["matcher"]
                canon = json.dumps(ident, sort_keys=True, separators=(",", ":"),
                                   ensure_ascii=False)
                digest = hashlib.sha256(canon.encode("utf-8")).hexdigest()
                out["%s:%s:%d:%d" % (path, ev, gi, hi)] = "sha256:" + digest
    return out


def write_codex_config(codex_home, server, trusted_repos=(), trusted_hooks=None, features=None,
                       extra="", sandbox="danger-full-access"):
    """Write `$CODEX_HOME/config.toml`: scripted provider, no outside traffic, and trust.

    trusted_repos: project directories to mark trusted (gate 1).
    trusted_hooks: {state key: hash} (gate 2), e.g. from codex_hook_hashes().
    features: extra `[features]` flags, e.g. {"multi_agent_v2": True}.
    extra: more TOML, starting with its own table header.
    sandbox: Codex's sandbox_mode for shell commands (the tests default to none at all).
    """
    os.makedirs(codex_home, exist_ok=True)
    lines = [
        'model = "gpt-5.5"',
        'model_provider = "mock"',
        'approval_policy = "never"',
        'sandbox_mode = %s' % _toml_str(sandbox),
        'check_for_update_on_startup = false',
        '',
        '[model_providers.mock]',
        'name = "mock"',
        'base_url = %s' % _toml_str(server.url + "/v1"),
        'env_key = %s' % _toml_str(MODEL_KEY_VAR),
        'wire_api = "responses"',
        'request_max_retries = 0',
        'stream_max_retries = 0',
        '',
        '[analytics]',
        'enabled = false',
        '',
        '[features]',
        'plugins = false',
    ]
    for name, value in sorted((features or {}).items()):
        lines.append('%s = %s' % (name, json.dumps(value)))
    lines.append('')
    if extra:
        lines += [extra, '']
    for repo in trusted_repos:
        lines += ['[projects.%s]' % _toml_str(os.path.realpath(repo)),
                  'trust_level = "trusted"', '']
    for key, digest in sorted((trusted_hooks or {}).items()):
        lines += ['[hooks.state.%s]' % _toml_str(key), 'trusted_hash = %s' % _toml_str(digest),
                  '']
    path = os.path.join(codex_home, "config.toml")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path


def trust_codex_repo(codex_home, server, repo, features=None, extra="", sandbox="danger-full-access"):
    """Trust `repo` and every hook in its `.codex/hooks.json` in a fresh config.toml."""
    hooks_json = os.path.join(repo, ".codex", "hooks.json")
    hashes = codex_hook_hashes(hooks_json) if os.path.exists(hooks_json) else {}
    return write_codex_config(codex_home, server, [repo], hashes, features=features, extra=extra,
                              sandbox=sandbox)


def write_codex_hooks(repo, hooks):
    """Write `.codex/hooks.json` with `{"hooks": hooks}`."""
    path = os.path.join(repo, ".codex", "hooks.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(json.dumps({"hooks": hooks}, indent=2) + "\n")
    return path


def codex_env(home, codex_home, server, extra=None):
    env = base_env(home, server, extra=None)
    env.update({"CODEX_HOME": codex_home, MODEL_KEY_VAR: "sk-e2e-offline"})
    if extra:
        env.update(extra)
    return env


def run_codex(codex, repo, prompt, server, home, codex_home, env=None, timeout=120, args=()):
    """Run `codex exec --json PROMPT </dev/null` in `repo`; return a RunResult."""
    os.makedirs(home, exist_ok=True)
    argv = [codex, "exec", "--json"] + list(args) + [prompt]
    return _run(argv, repo, codex_env(home, codex_home, server, env), timeout)


def codex_hooks_list(codex, repo, home, codex_home, server, timeout=30):
    """Ask `codex app-server` (stdio JSON-RPC) for hooks/list in `repo`; return the result."""
    env = codex_env(home, codex_home, server)
    proc = subprocess.Popen([codex, "app-server"], cwd=repo, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        def send(obj):
            proc.stdin.write((json.dumps(obj) + "\n").encode())
            proc.stdin.flush()

        def wait_for(req_id):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if msg.get("id") == req_id:
                    return msg
            raise AssertionError("codex app-server gave no reply to request %s" % req_id)

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"clientInfo": {"name": "coord-e2e", "version": "0"}}})
        wait_for(1)
        send({"jsonrpc": "2.0", "method": "initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "hooks/list",
              "params": {"cwds": [os.path.realpath(repo)]}})
        return wait_for(2)
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


# -- Repositories ----------------------------------------------------------------------------------

def git_repo(path):
    """Create an empty git repository with one commit at `path`; return its real path."""
    os.makedirs(path, exist_ok=True)
    env = dict(os.environ, GIT_AUTHOR_NAME="e2e", GIT_AUTHOR_EMAIL="e2e@example.invalid",
               GIT_COMMITTER_NAME="e2e", GIT_COMMITTER_EMAIL="e2e@example.invalid")
    for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        env.pop(k, None)
    subprocess.run(["git", "init", "-q", "-b", "main", path], check=True, env=env)
    subprocess.run(["git", "-C", path, "commit", "-q", "--allow-empty", "-m", "init"],
                   check=True, env=env)
    return os.path.realpath(path)


# -- A test case that drives one harness -------------------------------------------------------------

class HarnessCase(CoordTestCase):
    """A CoordTestCase with a scripted model server, a temporary git repo and one harness.

    Subclasses set `harness` to "claude", "codex" or "copilot". `run_agent(script)` runs it in self.repo
    with the test's private HOME, COORD_DB and COORD_PROJECT_ID.
    """

    harness = None

    def setUp(self):
        super().setUp()
        self.cli = require_cli(self, self.harness)
        self.server = ModelServer()
        self.addCleanup(self.server.close)
        self.repo = git_repo(os.path.join(self.tmp, "repo"))
        self.codex_home = os.path.join(self.tmp, "codex-home")

    def agent_env(self, extra=None):
        env = {k: self.env[k] for k in ("COORD_DB", "COORD_PROJECT_ID", "XDG_STATE_HOME")
               if k in self.env}
        if extra:
            env.update(extra)
        return env

    def managed_env(self):
        """For agents that `work start` launches: commit coord's installation in self.repo, make
        a private scratch root, a jj identity and a private tmux socket (self.sock, killed at
        cleanup); -> the environment entries that point coord at them."""
        require_tool(self, "jj")
        self.tmux_bin = require_tool(self, "tmux")
        genv = dict(self.env, GIT_AUTHOR_NAME="e2e", GIT_AUTHOR_EMAIL="e2e@example.invalid",
                    GIT_COMMITTER_NAME="e2e", GIT_COMMITTER_EMAIL="e2e@example.invalid")
        for argv in (["add", "-A"], ["commit", "-q", "-m", "install coord"]):
            subprocess.run(["git", "-C", self.repo] + argv, check=True, env=genv)
        scratch = os.path.join(self.tmp, "scratch")
        os.mkdir(scratch, 0o700)
        self.sock = os.path.join(self.tmp, "tmux.sock")
        jjcfg = os.path.join(self.tmp, "jjconfig.toml")
        with open(jjcfg, "w") as f:
            f.write('user.name = "e2e"\nuser.email = "e2e@example.invalid"\n')
        self.addCleanup(subprocess.run, [self.tmux_bin, "-S", self.sock, "kill-server"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
        return {"COORD_SCRATCH_ROOT": scratch, "COORD_TMUX_SOCKET": self.sock, "TMUX_TMPDIR": self.tmp,
                "XDG_CONFIG_HOME": os.path.join(self.tmp, "config"), "JJ_CONFIG": jjcfg}

    def interactive_claude(self):
        """For Claude Code that `work start` launches in tmux: the managed environment
        (self.launch_env), and a ~/.claude.json of a person who has used Claude Code before and
        trusted the shared checkout; -> that file's path."""
        managed = self.managed_env()
        self.launch_env = claude_env(self.home, self.server, self.agent_env(dict(managed, **{
            "COORD_REGISTER_GRACE": "0", "COORD_CLAUDE_CMD": self.cli})))
        return trust_claude_repo(self.home, self.repo)

    def run_agent(self, script, lanes=None, prompt="Do the scripted task.", env=None, args=(),
                  trust=True, features=None, timeout=120, expect_ok=True, repo=None,
                  sandbox="danger-full-access", config="", refused_ok=()):
        """Load `script` into the server and run the harness once in `repo` (default
        self.repo); return the RunResult. Codex only: `sandbox` is its sandbox_mode and
        `config` more TOML for its config.toml. `refused_ok`: hosts the harness is known to try
        (the server refuses them all the same; nothing leaves)."""
        repo = repo or self.repo
        self.server.load(script, lanes)
        if self.harness == "claude":
            result = run_claude(self.cli, repo, prompt, self.server, self.home,
                                env=self.agent_env(env), timeout=timeout, args=args)
        elif self.harness == "qwen":
            result = run_qwen(self.cli, repo, prompt, self.server, self.home,
                              env=self.agent_env(env), timeout=timeout, args=args)
        elif self.harness == "opencode":
            result = run_opencode(self.cli, repo, prompt, self.server, self.home, env=self.agent_env(env),
                                  timeout=max(timeout, 180), args=args)
        elif self.harness == "pi":
            result = run_pi(self.cli, repo, prompt, self.server, self.home, env=self.agent_env(env),
                            timeout=timeout, args=args)
        elif self.harness == "auggie":
            result = run_auggie(self.cli, repo, prompt, self.server, self.home, env=self.agent_env(env),
                                timeout=timeout, args=args)
        elif self.harness == "droid":
            result = run_droid(self.cli, repo, prompt, self.server, self.home, env=self.agent_env(env),
                               timeout=timeout, args=args)
        elif self.harness == "kilo":
            result = run_kilo(self.cli, repo, prompt, self.server, self.home, env=self.agent_env(env),
                              timeout=max(timeout, 180), args=args)
        elif self.harness == "copilot":
            config = os.path.join(self.home, ".copilot", "config.json")
            if trust:
                trust_copilot_folder(self.home, repo)
            elif os.path.exists(config):
                os.unlink(config)
            result = run_copilot(self.cli, repo, prompt, self.server, self.home,
                                 env=self.agent_env(env), timeout=timeout, args=args)
        elif self.harness == "gemini":
            path = os.path.join(self.home, ".gemini", "trustedFolders.json")
            if trust:
                trust_gemini_folder(self.home, repo)
            elif os.path.exists(path):
                os.unlink(path)
            result = run_gemini(self.cli, repo, prompt, self.server, self.home,
                                env=self.agent_env(env), timeout=timeout, args=args)
        else:
            if trust:
                trust_codex_repo(self.codex_home, self.server, repo, features=features,
                                 extra=config, sandbox=sandbox)
            else:
                write_codex_config(self.codex_home, self.server, features=features, extra=config,
                                   sandbox=sandbox)
            result = run_codex(self.cli, repo, prompt, self.server, self.home,
                               self.codex_home, env=self.agent_env(env), timeout=timeout,
                               args=args)
        left = [r for r in self.server.refused if r.path.split(":")[0] not in refused_ok]
        self.assertEqual(left, [], "the harness tried to leave the machine: %r" % [(r.method, r.path) for r in left])
        if expect_ok:
            self.assertFalse(result.timed_out, result.describe())
            self.assertEqual(result.code, 0, result.describe())
            self.assertEqual(self.server.errors, [], result.describe())
        return result

    def write_hooks(self, hooks):
        """Write the harness's project hook file with {"hooks": hooks}; return its path
        (Copilot runs the Claude Code project hooks)."""
        if self.harness in ("claude", "copilot"):
            return write_claude_hooks(self.repo, hooks)
        if self.harness == "gemini":
            return write_gemini_hooks(self.repo, hooks)
        if self.harness == "qwen":
            return write_qwen_hooks(self.repo, hooks)
        if self.harness == "droid":
            return write_droid_hooks(self.repo, hooks)
        return write_codex_hooks(self.repo, hooks)

    def write_file(self, rel, text, repo=None):
        path = os.path.join(repo or self.repo, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return path

    def read_file(self, rel):
        path = os.path.join(self.repo, rel)
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return f.read()


# -- A recording hook (tests of the harnesses themselves) -----------------------------------------

RECORD_HOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "e2e",
                           "record_hook.py")
ALL_EVENTS = ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop",
              "SessionEnd", "SubagentStart", "SubagentStop")


def recording_hooks(log, reply_dir=None, events=ALL_EVENTS):
    """Hook config running fixtures/e2e/record_hook.py on `events` (tool events match `*`)."""
    cmd = "%s %s %s" % (shlex.quote(sys.executable), shlex.quote(RECORD_HOOK), shlex.quote(log))
    if reply_dir:
        cmd += " " + shlex.quote(reply_dir)
    hooks = {}
    for ev in events:
        group = {"hooks": [{"type": "command", "command": cmd, "timeout": 30}]}
        if ev in ("PreToolUse", "PostToolUse"):
            group["matcher"] = "*"
        hooks[ev] = [group]
    return hooks


def read_hook_log(log):
    """The records the recording hook appended: [{"payload", "env", "pid", "ppid"}]."""
    if not os.path.exists(log):
        return []
    with open(log) as f:
        text = f.read()
    # only complete lines: a hook still writing its record has not reached the newline yet
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines() if line.strip()]


def write_reply(reply_dir, name, reply):
    """Make the recording hook answer `name` (`<Event>` or `<Event>-<tool>`) with `reply`."""
    os.makedirs(reply_dir, exist_ok=True)
    path = os.path.join(reply_dir, name + ".json")
    with open(path + ".tmp", "w") as f:  # whole or absent: a hook may read it at any moment
        json.dump(reply, f)
    os.replace(path + ".tmp", path)


def deny(reason):
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": reason}}


def context(event, text):
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}


# -- coord installed in the repository ---------------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CoordCase(HarnessCase):
    """A HarnessCase whose repository has coord installed by the real `./install`.

    The harness runs with the test's private COORD_DB and COORD_PROJECT_ID, so coord's hooks
    and the test's own `rcoord` calls share one database. `self.plain` is a second repository
    with no coord and no hooks, for the same scripted run as a baseline.
    """

    project_id = "test-project"

    def turn(self, rec):
        """The turn state coord recorded for the runtime of a work's tmux record."""
        import store
        st = store.Store(self.env["COORD_DB"])
        try:
            return (st.turn(rec["runtime_id"]) or {}).get("state")
        finally:
            st.close()

    def pane_text(self, rec):
        """What the recorded pane shows now (joined lines)."""
        return subprocess.run([self.tmux_bin, "-S", self.sock, "capture-pane", "-p", "-J", "-t", rec["pane_id"]],
                              stdout=subprocess.PIPE, universal_newlines=True, timeout=10).stdout

    def setUp(self):
        super().setUp()
        proc = subprocess.run(support.script_argv(os.path.join(ROOT, "install")) + [self.repo,
                               "--project-id", self.project_id],
                              env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=60)
        self.assertEqual(proc.returncode, 0, "install failed:\n%s%s" % (proc.stdout, proc.stderr))
        self.plain = git_repo(os.path.join(self.tmp, "plain"))

    def rcoord(self, *args, **kw):
        """Run the installed `.coord/coord ARGS --json`; return the parsed reply (exit 0)."""
        env = dict(self.env)
        env.update(kw.pop("env", None) or {})
        check = kw.pop("check", 0)
        args = list(args)
        cut = args.index("--") if "--" in args else len(args)  # what follows `--` is the harness's
        argv = support.script_argv(os.path.join(self.repo, ".coord", "coord")) + args[:cut] + ["--json"] + args[cut:]
        proc = subprocess.run(argv, env=env, cwd=self.repo, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
        if check is not None and proc.returncode != check:
            raise AssertionError("coord %s exited %d\nstdout: %s\nstderr: %s" % (
                " ".join(args), proc.returncode, proc.stdout, proc.stderr))
        return json.loads(proc.stdout) if proc.stdout.strip() else None

    def watch_row(self, work, env=None):
        """The row `.coord/coord watch --once --json` shows for `work`, read as the person reads it."""
        rows = self.rcoord("watch", "--once", env=env or getattr(self, "launch_env", None))["rows"]
        return next((r for r in rows if r["handle"] == work["handle"]), None) or {}

    def watch_state(self, work, want, timeout=90):
        """Poll `coord watch --once` until `work`'s row shows state `want`; -> that row."""
        def seen():
            row = self.watch_row(work)
            return row if row.get("state") == want else None
        try:
            return retry_until(seen, timeout=timeout, interval=0.25)
        except AssertionError:
            raise AssertionError("coord watch never showed %s %s (last %r); the frame:\n%s" % (
                work["handle"], want, self.watch_row(work).get("state"),
                "\n".join(self.rcoord_lines("watch", "--once"))))

    def person_watch(self, env=None):
        """The person's `coord watch --notify-only` in a terminal of their own (support.Terminal),
        with `git config coord.notify` in the shared checkout appending each notice to a file;
        -> that file's path (read with told())."""
        import support
        out = os.path.join(self.tmp, "notices.txt")
        subprocess.run(["git", "-C", self.repo, "config", "coord.notify",
                        "printf '%%s\\n' \"$COORD_NOTICE\" >> %s" % shlex.quote(out)], check=True, env=self.env)
        term = support.Terminal(self, dict(self.env, **(env or {})), self.repo)
        os.write(term.fd, (" ".join(shlex.quote(a) for a in support.script_argv(
            os.path.join(self.repo, ".coord", "coord")) + ["watch", "--notify-only"]) + "\n").encode())
        term._read_until(rb"notices on for", timeout=60)
        return out

    def told(self, out, text, timeout=60):
        """The notices in `out` once one contains `text`."""
        def read():
            try:
                with open(out) as f:
                    lines = f.read().splitlines()
            except OSError:
                return None
            return lines if any(text in l for l in lines) else None
        return retry_until(read, timeout=timeout, interval=0.25)

    def rcoord_lines(self, *args):
        """The stdout lines of `.coord/coord ARGS` (no --json), exit 0."""
        argv = support.script_argv(os.path.join(self.repo, ".coord", "coord")) + list(args)
        proc = subprocess.run(argv, env=self.env, cwd=self.repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=60, check=True)
        return proc.stdout.splitlines()

    def peer(self):
        """Register a peer runtime with `coord hello`; return its record."""
        return self.rcoord("hello", "--conversation", "peer-%d-%d" % (os.getpid(), time.monotonic_ns()))["runtime"]

    def lease(self, resource, peer=None):
        peer = peer or self.peer()
        self.rcoord("claim", resource, "-p", "peer work", "--runtime", peer["handle"])
        return peer

    def results(self):
        """Every tool result the model saw, in order."""
        out = []
        for r in self.server.model_requests():
            for text in r.tool_results():
                if text not in out:
                    out.append(text)
        return out

    def refusals_naming(self, peer, count):
        """The model heard exactly `count` refusals, each naming `peer` and the command to ask it."""
        refusals = [t for t in self.results() if "coord: write refused" in t]
        self.assertEqual(len(refusals), count, self.results())
        for text in refusals:
            self.assertIn(peer["handle"], text)
            self.assertIn(".coord/coord send", text)
        return refusals

    def run_registration(self, read_call, shell_call, marker):
        """A run whose first turn finds the agent's runtime and has a peer send it `marker`, then
        reads (read_call), claims src/b.py through the agent's own shell (shell_call), and looks
        at the leases; -> (result, its runtime as registered, the leases then). The runtime must
        be the conversation's, in self.repo, and the shell's lease the agent's own."""
        sent = {}

        def send_then_read(request):
            sent["runtime"] = [rt for rt in self.coord_state()["runtimes"] if rt.get("harness") == self.harness][0]
            peer = self.peer()
            self.rcoord("send", marker, "--to", sent["runtime"]["handle"], "--runtime", peer["handle"])
            return read_call

        def look(request):
            sent["leases"] = self.coord_state()["leases"]
            return say("done")
        result = self.run_agent([send_then_read, shell_call, look])
        rt = sent["runtime"]
        self.assertEqual(rt["conversation"], result.session_id(), result.describe())
        self.assertEqual(os.path.realpath(rt["cwd"]), os.path.realpath(self.repo))
        lease = [l for l in sent["leases"] if l["resource"] == "src/b.py"]  # its shell claimed as the agent
        self.assertEqual([l["runtime"] for l in lease], [rt["id"]], self.results())
        return result, rt

    def one_write_in_a_clone_lands(self, write, first_request=0):
        """A new work's clone: the agent's scripted `write(clone)` of src/c.py ("c\n") is there, its
        session is the one runtime and registered in the clone, the model read the work's line in
        request `first_request`, git sees nothing else, and the work lands and is removed."""
        self.env.update(self.managed_env())
        work = self.rcoord("work", "create", "%s-task" % self.harness)["work"]
        clone = work["path"]
        result = self.run_agent([write(clone), say("done")], repo=clone)
        self.assertEqual(open(os.path.join(clone, "src", "c.py")).read(), "c\n")
        rts = self.runtimes_of(result.session_id())
        self.assertEqual([(r["harness"], os.path.realpath(r["cwd"])) for r in rts],
                         [(self.harness, os.path.realpath(clone))])
        self.assertIn("Your work: %s" % work["handle"], self.server.model_requests()[first_request].text())
        status = subprocess.run(["git", "-C", clone, "status", "--porcelain", "--ignored"],
                                stdout=subprocess.PIPE, universal_newlines=True).stdout
        self.assertEqual([l for l in status.splitlines() if l[3:] not in ("src/c.py", ".jj/")], [], status)
        self.land_and_remove(work["handle"], clone)

    def land_and_remove(self, handle, clone):
        """Describe the clone's change, land it at a terminal (the person) with a passing check,
        remove the clone; it must be gone."""
        subprocess.run(["jj", "--no-pager", "describe", "-m", "agent's change"], cwd=clone, env=self.env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
        self.coord_at_terminal("work", "integrate", "land", handle, "--into", "main", "--check", "true",
                               cwd=self.repo, check=0)
        self.wait_left(clone)
        self.coord_at_terminal("work", "remove", handle, "--confirm", handle, cwd=self.repo, check=0)
        self.assertFalse(os.path.exists(clone))

    def wait_left(self, clone):
        """Wait (up to 60 s) until no process has its working directory in `clone`: a harness's
        headless run can end before its child processes do (Auggie 0.36.0's `--print` exits before
        its workers; on a loaded machine they stayed a few seconds), and `work remove` rightly
        refuses a clone in use. The removal that follows says which processes stayed, if any."""
        try:
            support.retry_until(lambda: not processes_inside(clone), timeout=60, interval=0.2)
        except AssertionError:
            pass

    def coord_state(self):
        """`coord list --all --json`: {"runtimes": [...], "leases": [...]}."""
        return self.rcoord("list", "--all")

    def runtimes_of(self, conversation):
        return [rt for rt in self.coord_state()["runtimes"] if rt.get("conversation") == conversation]

    def control(self, script_for, **kw):
        """The same session in the plain repository, without coord (the control a denial is
        compared with): -> its result. What hooks cost is measured in bench/harness, not here."""
        return self.run_agent(script_for(self.plain), repo=self.plain, **kw)


# -- The first boundary of a resumed agent ---------------------------------------------------------

class ResumedFirstBoundary(object):
    """Mixed into a CoordCase per harness (before it): a work started in tmux with `work start`,
    its window killed (the work is interrupted), a message sent to it, then `work resume
    --interrupted`. The resumed agent must register and link to its work with nothing typed
    into its pane. A harness in launch.NO_HOOK_UNTIL_PROMPT runs no hook on resume until its
    first prompt: `work resume` gives it RESUME_PROMPT on its command line, and the model must see
    that prompt, the message and the earlier turn in the same conversation. One that runs its
    SessionStart hook at once gets no first message and makes no model turn.

    A subclass sets `harness` and defines launch_setup() (-> the environment `work start` runs
    with, the person's one-time answers to the CLI given) and its test, which calls
    resume_interrupted()."""

    harness = None
    launch_args = ()  # the harness arguments `work start` gets after `--` (`work resume` reuses them)
    resume_source = "resume"  # its resumed SessionStart's `source` (Auggie 0.36.0 sends none)

    def setUp(self):
        super().setUp()
        self.launch_env = self.launch_setup()
        self.owner = self.rcoord("hello", env=self.launch_env)["runtime"]
        self.as_owner = dict(self.launch_env, COORD_RUNTIME_ID=self.owner["id"])
        self.coord_at_terminal("trust", "--carry-over", "on", env=self.launch_env, cwd=self.repo, check=0)

    def launch_setup(self):
        raise NotImplementedError

    def launch_managed(self, extra):
        """The managed environment (managed_env) and `extra`, with no register grace."""
        return self.agent_env(dict(self.managed_env(), COORD_REGISTER_GRACE="0", **extra))

    def tmux_record(self, handle):
        return self.rcoord("work", "inspect", handle, env=self.launch_env)["work"]["data"].get("tmux") or {}

    def registered(self, handle, timeout, other_than=None):
        """The work's tmux record once a runtime registered in a window whose pane pid is not
        `other_than`'s."""
        def linked():
            rec = self.tmux_record(handle)
            return rec if rec.get("runtime_id") and rec.get("pid") != -1 and \
                (other_than is None or rec.get("pane_pid") != other_than["pane_pid"]) else None
        try:
            return retry_until(linked, timeout=timeout, interval=0.5)
        except AssertionError:
            now = self.tmux_record(handle)
            raise AssertionError("the %s in work %s never registered: %r\n%s" % (
                self.harness, handle, now, self.pane_text(now) if now.get("pane_id") else "(no pane)"))

    KEPT = "Your leases, kept for your work while it was away: "

    def resume_interrupted(self, timeout=90, lease=None, at_idle=None):
        """... with `lease`: the agent holds it (claimed as its runtime) when its window is killed;
        the work keeps it (check says held, whether the harness ran SessionEnd or just died).
        at_idle(work) runs the moment the resumed agent's turn is first recorded idle."""
        import launch
        from modelserver import say
        first_prompt = self.harness in launch.NO_HOOK_UNTIL_PROMPT
        self.server.load([say("ok")] * 50)
        work = self.rcoord("work", "create", "resumed-" + self.harness, env=self.as_owner)["work"]
        self.rcoord("work", "start", work["handle"], "--harness", self.harness, "--prompt", "EARLIER-TURN say ok.",
                    *(("--",) + tuple(self.launch_args) if self.launch_args else ()), env=self.as_owner)
        first = self.registered(work["handle"], timeout)
        # Its first turn ended (Stop): the conversation is saved. A Claude Code killed before
        # that cannot be resumed ("No conversation found with session ID").
        retry_until(lambda: self.turn(first) == "idle", timeout=timeout, interval=0.25)
        retry_until(lambda: [r for r in list(self.server.requests) if r.api and "EARLIER-TURN" in r.text()],
                    timeout=timeout, interval=0.25)
        if lease:
            self.rcoord("claim", lease, env=dict(self.as_owner, COORD_RUNTIME_ID=first["runtime_id"]))
        subprocess.run([self.tmux_bin, "-S", self.sock, "kill-window", "-t", first["window_id"]], check=True,
                       timeout=10)  # the agent is gone without park or close (a reboot, a killed server)
        listed = retry_until(lambda: [w for w in self.rcoord("work", "list", env=self.as_owner)["work"]
                                      if w.get("interrupted")], timeout=30, interval=0.25)
        self.assertEqual([w["handle"] for w in listed], [work["handle"]])
        if lease:  # its harness has exited (SessionEnd or not): the lease is still the work's
            pid = [rt for rt in self.runtimes_of(first["conversation"]) if rt["id"] == first["runtime_id"]][0]["pid"]
            retry_until(lambda: not os.path.exists("/proc/%d" % pid), timeout=30, interval=0.25)
            held = self.rcoord("check", lease, env=self.as_owner, check=3)
            self.assertFalse(held["free"], held)
            audit = [json.loads(l) for l in self.rcoord_lines("audit")]
            sys.stderr.write("(%s: %s) " % (self.harness, [(a["event"], (a.get("data") or {}).get("reason"))
                                                          for a in audit if a.get("subject") == first["runtime_id"]
                                                          and a["event"].startswith("runtime.")]))
        self.rcoord("send", "WELCOME-BACK-MESSAGE", "--to", work["handle"], env=self.as_owner)
        requests = self.requests_at_resume = len(self.server.requests)
        reply = self.rcoord("work", "resume", "--interrupted", env=self.as_owner, check=None)
        if reply and reply.get("skipped") and "ask the person" in (reply["skipped"][0].get("hint") or ""):
            # Its harness outlived the killed window (Gemini CLI 0.61.0 can: it runs on headless):
            # the agent may not end it; the person's resume ends it, then resumes.
            self.assertIn("still runs headless", reply["skipped"][0]["error"])
            rc, out = self.coord_at_terminal("work", "resume", work["handle"], "--override", "--json",
                                             env=self.launch_env, cwd=self.repo)
            self.assertEqual(rc, 0, out)
            one = json.loads(out)
            reply = {"resumed": [one]}
            if one.get("ended"):  # (else it exited by itself in the meantime)
                self.assertEqual(one["ended"]["session"], first["pane_pid"])
                sys.stderr.write("(%s outlived its window: the person's resume ended processes %s) "
                                 % (self.harness, one["ended"]["pids"]))
        self.assertEqual([r["work"] for r in reply["resumed"]], [work["handle"]], reply)
        self.assertEqual("this session was resumed" in reply["resumed"][0]["tmux"]["pane_command"], first_prompt,
                         reply["resumed"][0]["tmux"]["pane_command"])
        # Nothing typed: the resumed agent reaches its first boundary by itself.
        if at_idle:
            retry_until(lambda: self.idle_again(first), timeout=timeout, interval=0.02)
            at_idle(work)
        rec = self.registered(work["handle"], timeout, other_than=first)
        self.assertEqual(rec["conversation"], first["conversation"], "the same conversation was resumed")
        if first_prompt:
            seen = retry_until(lambda: [r for r in list(self.server.requests)[requests:] if r.api and
                                        "WELCOME-BACK-MESSAGE" in r.text()], timeout=timeout, interval=0.25)
            self.assertIn("this session was resumed", seen[0].text())
            self.assertIn("EARLIER-TURN", seen[0].text(), "the earlier turns were sent to the model")
        else:
            # coord gave it no first message. (Gemini 0.61.0 may still send a request of its own
            # after a resume: one CI run saw a request with "resumed" in it; the harness wins.)
            self.assertEqual([r for r in list(self.server.requests)[requests:] if r.api and
                              "this session was resumed" in r.text()], [], "coord gave it no first message")
            audit = json.dumps(self.rcoord("audit", env=self.launch_env))
            self.assertIn('"hook:%s"' % self.resume_source, audit, "its SessionStart said where it came from")
        # The work is no longer interrupted or waiting. Waited for up to 20 s: in an e2e run on a
        # loaded machine a resumed Gemini 0.61.0's work was still listed interrupted right after
        # it registered (1 run in 8); a state that lasts fails, with what coord and ps saw.
        def flags():
            return [(w.get("interrupted"), w.get("attention"))
                    for w in self.rcoord("work", "list", env=self.launch_env)["work"]]
        try:
            retry_until(lambda: flags() == [(None, None)], timeout=20, interval=0.5)
        except AssertionError:
            seen = self.rcoord("work", "inspect", work["handle"], "--verbose", env=self.launch_env)["work"]
            procs = subprocess.run(["ps", "-eo", "pid,ppid,pgid,sid,stat,etime,args"], stdout=subprocess.PIPE,
                                   universal_newlines=True, timeout=10).stdout
            runtimes = self.rcoord("list", "--all", env=self.launch_env).get("runtimes") or []
            raise AssertionError("the resumed %s's work is still listed %r after 20 s\nprocesses:\n%s\n"
                                 "runtimes: %s\nwindow: %s\nhistory: %s" % (
                                     self.harness, flags(),
                                     "\n".join(l[:160] for l in procs.splitlines() if self.harness in l),
                                     json.dumps([(r.get("handle"), r.get("conversation"), r.get("pid"), r.get("live"),
                                                  r.get("ended_at")) for r in runtimes]),
                                     json.dumps({k: v for k, v in (seen["data"].get("tmux") or {}).items()
                                                 if k != "pane_command"}),
                                     json.dumps(seen["data"].get("history"))[-1500:]))
        return work, rec

    def idle_again(self, first):
        """True once a runtime other than `first`'s has the same conversation and an idle turn."""
        import store
        st = store.Store(self.env["COORD_DB"])
        try:
            rt = st.find_conversation_runtime(first["conversation"])
            return bool(rt and rt["id"] != first["runtime_id"] and (st.turn(rt["id"]) or {}).get("state") == "idle")
        finally:
            st.close()

    def told_kept(self, lease, since, timeout=90):
        """A model request after `since` told the resumed agent it holds `lease` again."""
        try:
            retry_until(lambda: [r for r in list(self.server.requests)[since:] if r.api and (self.KEPT + lease)
                                 in r.text()], timeout=timeout, interval=0.25)
        except AssertionError:
            raise AssertionError("the resumed %s was never told it holds %s again:\n%s" % (
                self.harness, lease, "\n---\n".join(r.text()[-600:] for r in list(self.server.requests)[since:])))

    def resume_and_nudge(self, lease, before=None, timeout=90):
        """resume_interrupted(lease=lease), and `send --nudge` from the owner the moment the resumed
        agent is recorded idle (its SessionStart; a harness given the resume prompt once that turn
        ended), as a person watching it would; before(), when given, runs first. The harness may
        not read keys yet (Kilo Code 7.7.7 took its terminal 1.06 s after, and took keys about 20 s
        after on a loaded 2-core machine): coord waits for it and types its line there, and the
        next model request carries the message's body."""
        import session
        marker = "RESUMED-NUDGE-%d" % os.getpid()

        def nudge(work):
            if before:
                before()
            reply = self.rcoord("send", "look at " + marker, "--to", work["handle"], "--nudge", env=self.as_owner)
            if not reply["nudged"]:
                raise AssertionError("%s was not nudged: %s\n%s" % (self.harness, reply.get("nudge_problem"),
                                                                   self.pane_text(self.tmux_record(work["handle"]))))
        work, rec = self.resume_interrupted(lease=lease, at_idle=nudge, timeout=timeout)
        try:
            seen = retry_until(lambda: [r for r in list(self.server.requests) if r.api and marker in r.text()],
                               timeout=timeout, interval=0.25)
        except AssertionError:
            raise AssertionError("the nudged %s never sent the message to its model:\n%s"
                                 % (self.harness, self.pane_text(rec)))
        self.assertIn(session.NUDGE, seen[0].text())
        return work, rec

class CloseThenRemove(ResumedFirstBoundary):
    """Mixed into a CoordCase per harness (before it), with ResumedFirstBoundary's set-up: README's
    `work close W && work remove W --confirm W` right after the agent's first turn. tmux hangs the
    harness up, and a real CLI takes its time to exit (Claude Code, Copilot CLI and Qwen Code took
    5 to 20 s on a real repository; Gemini CLI's launcher ignores the hangup): `work close` waits
    for the exit it caused (and ends a headless orphan), so the remove right after succeeds on
    its first try. A subclass sets `harness`, defines launch_setup() and its test, which calls
    close_then_remove()."""

    def close_then_remove(self, timeout=90):
        from modelserver import say
        self.server.load([say("ok")] * 50)
        work = self.rcoord("work", "create", "closing-" + self.harness, env=self.as_owner)["work"]
        self.rcoord("work", "start", work["handle"], "--harness", self.harness, "--prompt", "say ok.",
                    env=self.as_owner)
        first = self.registered(work["handle"], timeout)
        retry_until(lambda: self.turn(first) == "idle", timeout=timeout, interval=0.25)
        row = self.watch_state(work, "idle")  # the live view reads the same from the harness's events
        self.assertEqual(row["harness"], self.harness)
        self.rcoord("work", "gate", work["handle"], "--waive", "--reason", "e2e", env=self.as_owner)
        closed = self.rcoord("work", "close", work["handle"], env=self.as_owner)
        env = dict(self.env, **self.as_owner)
        proc = subprocess.run(support.script_argv(os.path.join(self.repo, ".coord", "coord")) + ["work", "remove",
                               work["handle"], "--confirm", work["handle"]], env=env, cwd=self.repo,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
        sys.stderr.write("(%s: close waited %s s%s) " % (self.harness, closed.get("waited"),
                                                        ", ended %s" % closed["ended"]["pids"] if closed.get("ended")
                                                        else ""))
        if proc.returncode != 0:
            diff = subprocess.run(["jj", "diff", "--git"], cwd=work["path"], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, universal_newlines=True, timeout=60).stdout
            self.fail("close said %r; remove right after it exited %d:\n%s%s\nthe clone's @: %s" % (
                closed, proc.returncode, proc.stdout, proc.stderr, diff))
        self.assertFalse(os.path.exists(work["path"]))
        self.assertNotIn("left", closed, closed)
        return closed


class WatchDialog(ResumedFirstBoundary):
    """Mixed into a CoordCase per harness (before it): the live view of an interactive agent that
    `work start` launched (with START_ARGS after `--`): working in its turn, waiting while its
    confirmation dialog for a write is open (named DIALOG_TOOL in the row and the notice), the
    person told once, then idle after the person approves, and told it finished its turn. The
    subclass defines launch_setup() as for ResumedFirstBoundary."""

    START_ARGS = ()
    DIALOG_TOOL = None

    def test_the_watch_shows_working_waiting_and_idle_and_tells_the_person(self):
        import threading
        from modelserver import say, tool
        told = self.person_watch(env=self.launch_env)
        work = self.rcoord("work", "create", "watched", env=self.as_owner)["work"]
        made = os.path.join(work["path"], "approved.txt")
        gate, asked = threading.Event(), []

        def step(request):  # the main loop's request (it offers write_file) waits for the test, then writes once
            if not asked and "write_file" in request.text():
                asked.append(request)
                gate.wait(90)  # meanwhile the agent is in its turn: working
                return tool("write_file", file_path=made, content="approved\n")
            return say("done")
        self.server.load([step] * 50)
        self.addCleanup(gate.set)
        self.rcoord("work", "start", work["handle"], "--harness", self.harness, "--prompt", "Write approved.txt.",
                    *(("--",) + tuple(self.START_ARGS) if self.START_ARGS else ()), env=self.as_owner)
        rec = self.registered(work["handle"], 90)
        self.watch_state(work, "working")
        gate.set()
        row = self.watch_state(work, "waiting")
        self.assertEqual((row["tool"], row["harness"]), (self.DIALOG_TOOL, self.harness))
        self.assertFalse(os.path.exists(made), "written before the person approved")
        self.assertEqual(self.told(told, "waits for you"),
                         ["coord: %s (watched) waits for you: it asks to run %s" % (work["handle"], self.DIALOG_TOOL)])
        frame = self.rcoord_lines("watch", "--once")
        self.assertTrue(all(len(l) <= 100 for l in frame), frame)
        self.assertIn("1 waiting for you", frame[0])
        support.TmuxClient(self, self.sock, rec["pane_id"]).type("\r")  # the person allows it once
        retry_until(lambda: os.path.exists(made), timeout=60, interval=0.25)
        self.watch_state(work, "idle")
        self.assertIn("coord: %s (watched) finished its turn" % work["handle"], self.told(told, "finished its turn"))
        self.assertEqual(sum("waits for you" in l for l in self.told(told, "finished")), 1, "one notice per event")


class PluginScenarios(object):
    """Mixed into a CoordCase (before it) for a harness that loads coord's plugin (OpenCode and its
    fork Kilo Code): coord installed by ./install, the plugin at `plugin`; what both share."""

    plugin = None

    def setUp(self):
        super().setUp()
        self.write_file("src/a.py", "original\n")
        self.a = os.path.join(self.repo, "src", "a.py")

    def test_a_peers_exclusive_lease_denies_write_and_edit_and_the_model_hears_why(self):
        peer = self.lease("src/a.py")
        new = os.path.join(self.repo, "src", "new.py")
        self.lease("src/new.py", peer)
        script = [tool("read", filePath=self.a),
                  tool("edit", filePath=self.a, oldString="original", newString="agent"),
                  tool("write", filePath=new, content="new\n"),
                  say("done")]
        result = self.run_agent(script)
        self.assertEqual(self.read_file("src/a.py"), "original\n", result.describe())
        self.assertIsNone(self.read_file("src/new.py"))
        for text in self.refusals_naming(peer, 2):
            self.assertIn("--to %s" % peer["handle"], text)
        # The control: the same run with coord's plugin moved aside writes both files.
        os.rename(os.path.join(self.repo, self.plugin), os.path.join(self.tmp, "coord-hook.js"))
        self.run_agent(script)
        self.assertEqual(self.read_file("src/a.py"), "agent\n")
        self.assertEqual(self.read_file("src/new.py"), "new\n")
        self.assertFalse([t for t in self.results() if "coord: write refused" in t])

    def test_registration_start_context_a_message_and_the_shells_identity(self):
        _result, rt = self.run_registration(
            tool("read", filePath=self.a),
            tool("bash", command="./.coord/coord claim src/b.py -p shell-claim", description="claim"), "MSG-FROM-PEER-41")
        self.assertEqual(rt["cwd"], self.repo)
        self.assertIsNotNone(rt["pid"])
        first = self.server.model_requests()[0].text()
        self.assertIn("coord: you are %s" % rt["handle"], first)
        self.assertIn("MSG-FROM-PEER-41", " ".join(self.results()))
        ended = [r for r in self.coord_state()["runtimes"] if r["id"] == rt["id"]][0]
        self.assertEqual(ended["end_reason"], "session-end")
