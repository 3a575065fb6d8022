"""install: fresh install, upgrades, idempotence, drift check/repair, refusals, crash safety,
doctor's Codex trust and sandbox report, and the generated hook command.

Every test installs the real repository's release into a real `git init` repository in a
temporary directory and runs the real installer as a subprocess.
"""

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

import support
import store
import pg
import hostclient

ROOT = support.ROOT
INSTALL = os.path.join(ROOT, "install")
RUNTIME = ("coord", "store.py", "hook.py", "workspace.py", "land.py", "cleanup.py", "session.py", "install", "host.py",
           "pg.py", "hostclient.py", "VERSION", "launch.py", "harness_facts.py",
           "view.py", "review.py")
EVENTS = ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "PermissionRequest",
          "SessionEnd", "SubagentStart", "SubagentStop")


installer = support.load_install(INSTALL, "coord_install_under_test")


def _skill_files(base):
    out = {}
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for fn in filenames:
            p = os.path.join(dirpath, fn)
            out[os.path.relpath(p, base)] = p
    return out


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _is_exec(path):
    return bool(os.stat(path).st_mode & 0o111)


class InstallTestCase(support.CoordTestCase):

    def setUp(self):
        super().setUp()
        support.require_tool(self, "git")
        self.src = ROOT
        self.install_path = os.path.join(self.src, "install")
        self.codex_home = os.path.join(self.tmp, "codex-home")
        os.makedirs(self.codex_home)
        self.env["CODEX_HOME"] = self.codex_home
        self.env.pop("COORD_PYTHON", None)
        self.target = self.new_repo("target")

    def new_repo(self, name):
        path = os.path.join(self.tmp, name)
        os.makedirs(path)
        subprocess.run(["git", "init", "-q", path], check=True, env=self.env)
        return path

    def install(self, *args, target=None, env=None, check=None, cwd=None, install_path=None):
        e = dict(self.env)
        if env:
            e.update(env)
        proc = subprocess.run(  # from cached bytecode, as .coord/coord runs (not compiled on every call)
            support.script_argv(install_path or self.install_path) + [target or self.target] + list(args),
            env=e, cwd=cwd or self.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, timeout=120)
        if check is not None and proc.returncode != check:
            self.fail("install %s exited %d (wanted %d)\nstdout: %s\nstderr: %s" % (
                " ".join(args), proc.returncode, check, proc.stdout, proc.stderr))
        return proc

    def fresh(self, project="demo"):
        self.install("--project-id", project, check=0)

    def t(self, *parts):
        return os.path.join(self.target, *parts)

    def snapshot(self):
        """{relative path: (bytes, mode, inode, mtime_ns)} for every file outside .git."""
        snap = {}
        for dirpath, dirnames, filenames in os.walk(self.target):
            dirnames[:] = [d for d in dirnames if d != ".git"]
            for fn in filenames:
                p = os.path.join(dirpath, fn)
                st = os.lstat(p)
                snap[os.path.relpath(p, self.target)] = (
                    _read(p), stat.S_IMODE(st.st_mode), st.st_ino, st.st_mtime_ns)
        return snap

    def settings(self, rel=".claude/settings.json"):
        with open(self.t(rel)) as f:
            return json.load(f)

    def write_json(self, rel, doc):
        os.makedirs(os.path.dirname(self.t(rel)), exist_ok=True)
        with open(self.t(rel), "w") as f:
            json.dump(doc, f, indent=4)

    def assert_fully_installed(self):
        for f in RUNTIME:
            dst = self.t(".coord", f)
            src = os.path.join(self.src, f)
            self.assertEqual(_read(dst), _read(src), f)
            self.assertEqual(_is_exec(dst), _is_exec(src), f)
        skill = _skill_files(os.path.join(self.src, "skills", "coord"))
        for copy in (".coord/skills/coord", ".agents/skills/coord", ".claude/skills/coord"):
            self.assertEqual(sorted(_skill_files(self.t(copy))), sorted(skill), copy)
            for rel, path in skill.items():
                self.assertEqual(_read(self.t(copy, rel)), _read(path), copy + "/" + rel)
        for rel, harness in ((".claude/settings.json", "claude"), (".codex/hooks.json", "codex")):
            hooks = self.settings(rel)["hooks"]
            for event in EVENTS:
                own = [h for g in hooks[event] for h in g["hooks"]
                       if ".coord/hook.py" in h.get("command", "")]
                self.assertEqual(len(own), 1, (rel, event))
                self.assertEqual(own[0]["command"], installer.hook_command(harness))
                self.assertIsInstance(own[0]["timeout"], int)
        self.install("--check", check=0)


class FreshInstallTest(InstallTestCase):

    def test_fresh_install_into_new_git_repo(self):
        with open(self.t("AGENTS.md"), "w") as f:
            f.write("target's own agent rules\n")
        with open(self.t("CLAUDE.md"), "w") as f:
            f.write("target's own claude rules\n")
        subprocess.run(["git", "-C", self.target, "add", "-A"], check=True, env=self.env)
        subprocess.run(["git", "-C", self.target, "-c", "user.name=t", "-c", "user.email=t@t",
                        "commit", "-qm", "base"], check=True, env=self.env)
        head = subprocess.run(["git", "-C", self.target, "rev-parse", "HEAD"], check=True,
                              env=self.env, stdout=subprocess.PIPE, text=True).stdout

        proc = self.install("--project-id", "demo", check=0)

        self.assertIn("installed", proc.stdout)
        self.assert_fully_installed()
        self.assertEqual(_read(self.t(".coord", "project-id")), b"demo\n")
        self.assertEqual(_read(self.t("AGENTS.md")), b"target's own agent rules\n")
        self.assertEqual(_read(self.t("CLAUDE.md")), b"target's own claude rules\n")
        self.assertEqual(head, subprocess.run(
            ["git", "-C", self.target, "rev-parse", "HEAD"], check=True, env=self.env,
            stdout=subprocess.PIPE, text=True).stdout)
        self.assertFalse(os.path.exists(self.db), "the installer must never create the database")
        self.assertTrue(_is_exec(self.t(".claude", "coord", "coord")))

    def test_first_install_without_project_id_is_refused(self):
        proc = self.install(check=3)
        self.assertIn("--project-id", proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)
        self.assertEqual(self.snapshot(), {})

    def test_pre_tool_use_matchers_per_harness(self):
        self.fresh()
        claude = self.settings()["hooks"]["PreToolUse"]
        codex = self.settings(".codex/hooks.json")["hooks"]["PreToolUse"]
        self.assertEqual(claude[0]["matcher"], "Edit|Write|NotebookEdit|Bash")
        self.assertEqual(codex[0]["matcher"], "apply_patch|Edit|Write|Bash")
        self.assertNotIn("matcher", self.settings()["hooks"]["PostToolUse"][0])
        end = self.settings(".codex/hooks.json")["hooks"]["SessionEnd"][0]["hooks"][0]
        self.assertGreater(end["timeout"], 1)

    def test_skill_front_matter_and_codex_metadata(self):
        text = _read(os.path.join(ROOT, "skills", "coord", "SKILL.md")).decode("utf-8")
        m = re.match(r"^---\n(.*?)\n---\n", text, re.S)
        self.assertIsNotNone(m, "SKILL.md needs YAML front matter")
        fields = dict(line.split(": ", 1) for line in m.group(1).splitlines())
        self.assertEqual(set(fields), {"name", "description"})
        self.assertEqual(fields["name"], "coord")
        self.assertLessEqual(len(fields["description"]), 1024)
        self.assertNotRegex(fields["description"], "[<>]")
        for word in ("claim", "message", "tmux", "clean"):
            self.assertIn(word, fields["description"])
        meta = _read(os.path.join(ROOT, "skills", "coord", "agents", "openai.yaml")).decode()
        self.assertIn("interface:", meta)
        short = re.search(r'short_description: "([^"]*)"', meta).group(1)
        self.assertTrue(25 <= len(short) <= 64, short)
        self.fresh()
        self.assertTrue(os.path.isfile(self.t(".agents", "skills", "coord", "agents", "openai.yaml")))

    def test_skill_fits_two_kilobytes_and_its_description_shows_in_full(self):
        raw = _read(os.path.join(ROOT, "skills", "coord", "SKILL.md"))
        self.assertLessEqual(len(raw), 2048, "SKILL.md is read whole into the agent's context")
        text = raw.decode("utf-8")
        description = re.search(r"^description: (.*)$", text, re.M).group(1)
        self.assertLessEqual(len(description), 250, "Claude Code cuts a longer one in its skill listing")
        for essential in ("read them with `inbox`", "6 KiB", "Never move shared bookmarks", "exactly as printed",
                          "ack ID", "work create", "integration/<bookmark>"):
            self.assertIn(essential, text)

    def test_every_skill_command_exists_in_the_cli(self):
        text = _read(os.path.join(ROOT, "skills", "coord", "SKILL.md")).decode("utf-8")
        commands = set()
        for line in text.splitlines():
            words = line.split()
            if len(words) < 2 or words[0] != ".coord/coord":
                continue
            path = [words[1]]
            if words[1] == "work":
                path.append(words[2])
                if words[2] == "integrate":
                    path.append(words[3])
            commands.add(tuple(path))
        self.assertGreaterEqual(len(commands), 20)
        for path in sorted(commands):
            with self.subTest(command=" ".join(path)):
                self.coord(*(list(path) + ["--help"]), check=0)

    def test_installed_coord_version_from_subdirectory(self):
        self.fresh()
        sub = self.t("src", "deep")
        os.makedirs(sub)
        proc = subprocess.run([os.path.join("..", "..", ".coord", "coord"), "--version"],
                              cwd=sub, env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=60)
        version = _read(os.path.join(self.src, "VERSION")).decode().strip()
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn(version, proc.stdout)
        shim = subprocess.run([os.path.join("..", "..", ".claude", "coord", "coord"), "--version"],
                              cwd=sub, env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(shim.returncode, 0, shim.stderr)
        self.assertIn(version, shim.stdout)


class UpgradeTest(InstallTestCase):

    def test_upgrade_in_place_over_older_release(self):
        self.fresh()
        with open(self.t(".coord", "VERSION"), "w") as f:
            f.write("0.0.1\n")
        with open(self.t(".coord", "store.py"), "ab") as f:
            f.write(b"# older release\n")
        settings = self.settings()
        settings["hooks"]["PostToolUse"][0]["hooks"][0]["command"] = \
            'python3 "$CLAUDE_PROJECT_DIR/.coord/hook.py" --harness claude'
        self.write_json(".claude/settings.json", settings)

        doctor = self.install("--doctor", "--json", check=1)
        report = json.loads(doctor.stdout)
        self.assertEqual(report["installed"]["version"], "0.0.1")
        stale = {d["path"] for d in report["drift"]}
        self.assertEqual(stale, {".coord/VERSION", ".coord/store.py", ".claude/settings.json"})

        self.install(check=0)
        self.assert_fully_installed()
        self.assertEqual(_read(self.t(".coord", "project-id")), b"demo\n")

    def test_upgrade_over_legacy_unversioned_install(self):
        os.makedirs(self.t(".coord"))
        os.makedirs(self.t(".claude", "coord"))
        with open(self.t(".coord", "project-id"), "w") as f:
            f.write("legacy\n")
        with open(self.t(".coord", "coord"), "w") as f:
            f.write("#!/usr/bin/env python3\nprint('old coord')\n")
        with open(self.t(".claude", "coord", "hook.py"), "w") as f:
            f.write("print('old hook')\n")
        self.write_json(".claude/settings.json", {"hooks": {
            "PreToolUse": [{"matcher": "Edit|Write", "hooks": [
                {"type": "command", "command": 'python3 "$CLAUDE_PROJECT_DIR"/.claude/coord/hook.py'}]}],
            "Notification": [{"hooks": [
                {"type": "command", "command": "python3 .claude/coord/hook.py notify"}]}],
        }})

        doctor = self.install("--doctor", check=1)
        self.assertIn("installed: unversioned", doctor.stdout)
        self.assertIn("--repair", doctor.stdout)

        self.install(check=0)
        self.assert_fully_installed()
        hooks = self.settings()["hooks"]
        self.assertNotIn("Notification", hooks, "a legacy coord-only event must be dropped")
        self.assertNotIn(".claude/coord/hook.py", json.dumps(hooks))
        self.assertEqual(_read(self.t(".coord", "project-id")), b"legacy\n")
        self.assertIn("installed: %s" % _read(os.path.join(self.src, "VERSION")).decode().strip(),
                      self.install("--doctor", check=0).stdout)

    def test_unrelated_hooks_and_settings_preserved_in_order(self):
        foreign_claude = {
            "model": "opus",
            "permissions": {"allow": ["Bash(ls:*)"], "deny": []},
            "hooks": {
                "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
                "PreToolUse": [
                    {"matcher": "Bash", "hooks": [{"type": "command", "command": "audit-bash"}]},
                    {"matcher": "Edit|Write", "hooks": [
                        {"type": "command", "command": "fmt-check", "timeout": 30},
                        {"type": "command", "command": "python3 .claude/coord/hook.py"},
                    ]},
                ],
                "Notification": [{"hooks": [{"type": "command", "command": "beep"}]}],
            },
            "env": {"FOO": "1"},
        }
        foreign_codex = {"hooks": {"PostToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "log-shell"}]}]},
            "extra": [1, 2]}
        self.write_json(".claude/settings.json", foreign_claude)
        self.write_json(".codex/hooks.json", foreign_codex)

        self.fresh()

        def strip_coord(doc):
            out = json.loads(json.dumps(doc))
            for event in list(out.get("hooks", {})):
                groups = []
                for g in out["hooks"][event]:
                    g["hooks"] = [h for h in g["hooks"] if "coord/hook" not in h["command"]]
                    if g["hooks"]:
                        groups.append(g)
                if groups:
                    out["hooks"][event] = groups
                else:
                    del out["hooks"][event]
            return out

        def order(doc):
            return json.dumps(doc)  # json.dumps keeps key and list order

        got = self.settings()
        self.assertEqual(list(got), ["model", "permissions", "hooks", "env"])
        self.assertEqual(list(got["hooks"])[:3], ["Stop", "PreToolUse", "Notification"])
        self.assertEqual(order(strip_coord(got)), order(strip_coord(foreign_claude)))
        self.assertEqual(got["hooks"]["PreToolUse"][0]["hooks"][0]["command"], "audit-bash")
        self.assertEqual(got["hooks"]["PreToolUse"][1]["matcher"], "Edit|Write|NotebookEdit|Bash")
        self.assertEqual(got["hooks"]["PreToolUse"][2]["hooks"],
                         [{"type": "command", "command": "fmt-check", "timeout": 30}])
        got_codex = self.settings(".codex/hooks.json")
        self.assertEqual(list(got_codex), ["hooks", "extra"])
        self.assertEqual(order(strip_coord(got_codex)), order(strip_coord(foreign_codex)))
        self.assert_fully_installed()

    def test_second_install_writes_nothing(self):
        self.write_json(".claude/settings.json", {"hooks": {"Stop": [
            {"hooks": [{"type": "command", "command": "true"}]}]}})
        self.fresh()
        before = self.snapshot()
        proc = self.install(check=0)
        self.assertEqual(proc.stdout, "")
        self.assertEqual(self.snapshot(), before)
        proc = self.install("--repair", check=0)
        self.assertEqual(self.snapshot(), before)


class DriftTest(InstallTestCase):

    def _drift_kinds(self):
        def missing_file():
            os.unlink(self.t(".coord", "store.py"))
            return ".coord/store.py"

        def missing_engine_file():  # the PostgreSQL modules are runtime files like any other
            os.unlink(self.t(".coord", "pg.py"))
            return ".coord/pg.py"

        def stale_client_file():
            with open(self.t(".coord", "hostclient.py"), "ab") as f:
                f.write(b"# edited\n")
            return ".coord/hostclient.py"

        def stale_file():
            with open(self.t(".agents", "skills", "coord", "SKILL.md"), "ab") as f:
                f.write(b"edited\n")
            return ".agents/skills/coord/SKILL.md"

        def mode_changed():
            os.chmod(self.t(".coord", "coord"), 0o644)
            return ".coord/coord"

        def extra_skill_file():
            with open(self.t(".claude", "skills", "coord", "stray.md"), "w") as f:
                f.write("stray\n")
            return ".claude/skills/coord/stray.md"

        def missing_hook_entry():
            doc = self.settings(".codex/hooks.json")
            del doc["hooks"]["SessionEnd"]
            self.write_json(".codex/hooks.json", doc)
            return ".codex/hooks.json"

        def stale_hook_entry():
            doc = self.settings()
            doc["hooks"]["PreToolUse"][0]["hooks"][0]["timeout"] = 600
            self.write_json(".claude/settings.json", doc)
            return ".claude/settings.json"

        def missing_shim():
            os.unlink(self.t(".claude", "coord", "coord"))
            return ".claude/coord/coord"

        return [missing_file, missing_engine_file, stale_client_file, stale_file, mode_changed, extra_skill_file, missing_hook_entry,
                stale_hook_entry, missing_shim]

    def test_check_clean_then_dirty_for_each_drift_and_repair_fixes_it(self):
        self.fresh()
        self.assertEqual(self.install("--check", check=0).stdout, "")
        for make_drift in self._drift_kinds():
            with self.subTest(drift=make_drift.__name__):
                path = make_drift()
                proc = self.install("--check", check=1)
                self.assertIn(path, proc.stdout)
                self.assertIn("--repair", proc.stdout)
                report = json.loads(self.install("--check", "--json", check=1).stdout)
                self.assertEqual([d["path"] for d in report["drift"]], [path])
                self.install("--repair", check=0)
                self.assertEqual(self.install("--check", check=0).stdout, "")
        self.assert_fully_installed()

    def test_check_is_read_only(self):
        self.fresh()
        os.unlink(self.t(".coord", "store.py"))
        before = self.snapshot()
        self.install("--check", check=1)
        self.install("--doctor", check=1)
        self.assertEqual(self.snapshot(), before)


class OpenCodeInstallTest(InstallTestCase):
    """coord's OpenCode plugin: .opencode/plugins/coord-hook.js runs the content-addressed hook
    command and nothing else; a person's plugins, config and .opencode/.gitignore are kept."""

    HARNESS, DIR, CONFIG = "opencode", ".opencode", "opencode.json"
    PLUGIN = ".opencode/plugins/coord-hook.js"

    def test_the_plugin_runs_only_the_hook_command(self):
        self.fresh()
        data = _read(self.t(self.PLUGIN))
        self.assertEqual(data, installer.plugin_source(self.HARNESS))
        text = data.decode("utf-8")
        command = installer._HOOK_SCRIPT % {"start": "$PWD", "harness": self.HARNESS,
                                            "digest": installer.runtime_digest(installer.read_runtime())}
        self.assertIn("const COMMAND = %s;" % json.dumps(command), text)
        self.assertIn("--harness %s" % self.HARNESS, command)
        self.assertEqual(installer.pinned_runtime(command), installer.runtime_digest(installer.read_runtime()))
        # its only import is node's child_process; it spawns /bin/sh with that command alone
        self.assertEqual(re.findall(r"^import .*$", text, re.M), ['import { spawn } from "node:child_process";'])
        self.assertNotIn("require(", text)
        self.assertEqual(text.count("spawn("), 1)
        self.assertIn('spawn("/bin/sh", ["-c", COMMAND], ', text)
        if self.HARNESS in installer.PLUGIN_GITIGNORES:
            self.assertEqual(_read(self.t(self.DIR, ".gitignore")), installer.PLUGIN_GITIGNORES[self.HARNESS][1])
        else:
            self.assertFalse(os.path.exists(self.t(self.DIR, ".gitignore")))
        vars_ = [installer.HARNESSES[self.HARNESS]["resume_env"]] + list(installer.HARNESSES[self.HARNESS]["plugin_env"])
        self.assertIn("const [RESUME_VAR, SESSION_VAR, AGENT_VAR] = %s;" % json.dumps(vars_), text)
        self.assertEqual(self.install("--check", check=0).stdout, "")

    def test_a_persons_plugins_config_and_gitignore_are_kept(self):
        os.makedirs(self.t(os.path.dirname(self.PLUGIN)))
        own = {os.path.dirname(self.PLUGIN) + "/mine.js": b"export const Mine = async () => ({})\n",
               self.DIR + "/.gitignore": b"scratch/\n", self.CONFIG: b'{"model": "x/y"}\n',
               "%s/%s" % (self.DIR, self.CONFIG + "c"): b"// mine\n{}\n"}
        for rel, data in own.items():
            with open(self.t(rel), "wb") as f:
                f.write(data)
        self.fresh()
        for rel, data in own.items():
            self.assertEqual(_read(self.t(rel)), data, rel)
        self.assertTrue(os.path.isfile(self.t(self.PLUGIN)))
        self.install("--repair", check=0)
        for rel, data in own.items():
            self.assertEqual(_read(self.t(rel)), data, rel)

    def test_a_file_of_someone_elses_under_coords_plugin_name_is_refused(self):
        os.makedirs(self.t(os.path.dirname(self.PLUGIN)))
        with open(self.t(self.PLUGIN), "wb") as f:
            f.write(b"export const Theirs = async () => ({})\n")
        before = self.snapshot()
        proc = self.install("--project-id", "demo", check=3)
        self.assertIn("not coord's plugin", proc.stderr)
        self.assertIn("move it aside", proc.stderr)
        self.assertEqual(self.snapshot(), before)

    def test_check_and_doctor_report_the_plugin_and_repair_fixes_it(self):
        self.fresh()
        for name, drift in (("edited", lambda: open(self.t(self.PLUGIN), "a").write("// edited\n")),
                            ("missing", lambda: os.unlink(self.t(self.PLUGIN)))):
            with self.subTest(drift=name):
                drift()
                proc = self.install("--check", check=1)
                self.assertIn(self.PLUGIN, proc.stdout)
                report = json.loads(self.install("--doctor", "--json", check=1).stdout)
                self.assertEqual(report[self.HARNESS]["state"], "stale" if name == "edited" else "missing")
                self.assertIn("%s: coord's plugin" % self.HARNESS, self.install("--doctor", check=1).stdout)
                self.install("--repair", check=0)
                self.assertEqual(_read(self.t(self.PLUGIN)), installer.plugin_source(self.HARNESS))
                self.assertEqual(json.loads(self.install("--doctor", "--json").stdout)[self.HARNESS]["state"], "ok")


class KiloInstallTest(OpenCodeInstallTest):
    """The same plugin for Kilo Code, which loads .kilo/plugins/ (7.7.7) under its own name."""

    HARNESS, DIR, CONFIG = "kilo", ".kilo", "kilo.json"
    PLUGIN = ".kilo/plugins/coord-hook.js"


class PiInstallTest(OpenCodeInstallTest):
    """pi's extension (0.73.1 loads .pi/extensions/): its own source, the same command and rules;
    pi writes no .gitignore of its own, so coord writes none."""

    HARNESS, DIR, CONFIG = "pi", ".pi", "settings.json"
    PLUGIN = ".pi/extensions/coord-hook.js"


class PiExtensionOrderTest(InstallTestCase):
    """pi's extension under node, driven as pi 0.73.1 emits its events: it queues agent_end apart
    from the prompt and does not wait for it before session_shutdown (agent-session.js)."""

    DRIVER = """import hook from %s;
const handlers = {};
hook({ on: (name, fn) => { handlers[name] = fn; } });
const ctx = { sessionManager: { getSessionId: () => "s1" }, cwd: process.argv[2] };
await handlers.session_start({ reason: "startup" }, ctx);
const stop = handlers.agent_end({ messages: [] });  // still running when session_shutdown comes
await handlers.session_shutdown({});
await handlers.agent_end({ messages: [] });  // and one that comes after it
await stop;
"""

    def test_hooks_run_in_order_and_none_after_session_end(self):
        node = support.require_tool(self, "node")
        log = os.path.join(self.tmp, "events.log")
        source = installer.plugin_source("pi").decode("utf-8")
        command = json.dumps(installer.plugin_command("pi"))
        self.assertEqual(source.count(command), 1)
        recorder = "p=$(cat); case $p in *Stop*) sleep 0.3;; esac; printf '%%s\\n' \"$p\" >> '%s'" % log
        ext, driver = os.path.join(self.tmp, "coord-hook.mjs"), os.path.join(self.tmp, "driver.mjs")
        with open(ext, "w") as f:
            f.write(source.replace(command, json.dumps(recorder)))
        with open(driver, "w") as f:
            f.write(self.DRIVER % json.dumps(ext))
        proc = subprocess.run([node, driver, self.tmp], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(log) as f:
            events = [json.loads(line)["hook_event_name"] for line in f if line.strip()]
        self.assertEqual(events, ["SessionStart", "Stop", "SessionEnd"])


class RefusalTest(InstallTestCase):

    def test_abbreviated_options_are_refused(self):
        for args in (["--project", "demo"], ["--chec"], ["--rep"]):
            with self.subTest(args=args):
                proc = self.install(*args, check=2)
                self.assertIn("unrecognized arguments", proc.stderr)
        self.assertFalse(os.path.exists(self.t(".coord")))

    def test_conflicting_project_id_refused(self):
        self.fresh("alpha")
        before = self.snapshot()
        proc = self.install("--project-id", "beta", check=3)
        self.assertIn("alpha", proc.stderr)
        self.assertIn("beta", proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)
        self.assertEqual(self.snapshot(), before)
        self.install("--project-id", "alpha", check=0)

    def test_malformed_json_refused_with_nothing_changed(self):
        cases = [
            (".claude/settings.json", '{"hooks": {"Stop": [}', "not valid JSON"),
            (".codex/hooks.json", "{\n  \"hooks\": {,\n}", "not valid JSON"),
            (".claude/settings.json", '{"hooks": []}', "unexpected shape"),
            (".codex/hooks.json", '{"hooks": {"Stop": {"hooks": []}}}', "unexpected shape"),
        ]
        for rel, text, words in cases:
            with self.subTest(file=rel, text=text):
                target = self.new_repo("malformed-%d" % cases.index((rel, text, words)))
                self.target = target
                if rel == ".codex/hooks.json":
                    self.fresh()  # an upgrade must refuse too, leaving the old install as it is
                os.makedirs(os.path.dirname(self.t(rel)), exist_ok=True)
                with open(self.t(rel), "w") as f:
                    f.write(text)
                with open(self.t(".coord-marker"), "w") as f:
                    f.write("x")
                before = self.snapshot()
                proc = self.install("--project-id", "demo", check=3)
                self.assertIn(rel, proc.stderr)
                self.assertIn(words, proc.stderr)
                self.assertNotIn("Traceback", proc.stderr)
                self.assertEqual(self.snapshot(), before)
                check = self.install("--check")
                self.assertEqual(check.returncode, 3)
                self.assertIn(rel, check.stderr)

    def test_unexpected_error_leaves_its_traceback_in_coords_errors_log(self):
        # A hook config nested too deeply for the json module: not a refusal the installer
        # models, so it is an unexpected error (exit 1) whose traceback goes to the errors.log
        # coord and the hook use, not to the terminal.
        self.write_json(".claude/settings.json", {})
        with open(self.t(".claude", "settings.json"), "w") as f:
            f.write("[" * 200000 + "]" * 200000)
        proc = self.install("--project-id", "demo", check=1)
        log = os.path.join(self.state, "fleet-agent-coord", "errors.log")
        self.assertIn(log, proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)
        with open(log) as f:
            self.assertIn("Traceback", f.read())
        self.assertEqual(os.stat(log).st_mode & 0o777, 0o600)

    def test_incomplete_source_refused(self):
        src = os.path.join(self.tmp, "partial")
        shutil.copytree(self.src, src)
        os.unlink(os.path.join(src, "store.py"))
        proc = self.install("--project-id", "demo", install_path=os.path.join(src, "install"),
                            check=3)
        self.assertIn("store.py", proc.stderr)
        self.assertEqual(self.snapshot(), {})


class CrashTest(InstallTestCase):

    def test_killed_between_replacements_then_rerun_completes(self):
        self.write_json(".claude/settings.json", {"hooks": {"Stop": [
            {"hooks": [{"type": "command", "command": "true"}]}]}})
        self.fresh()
        old = {}
        for rel in (".coord/store.py", ".coord/VERSION", ".agents/skills/coord/SKILL.md"):
            with open(self.t(rel), "ab") as f:
                f.write(b"\n")
            old[rel] = _read(self.t(rel))
        doc = self.settings()
        doc["hooks"]["PostToolUse"][-1]["hooks"][0]["timeout"] = 99
        self.write_json(".claude/settings.json", doc)
        old[".claude/settings.json"] = _read(self.t(".claude/settings.json"))
        # Counts of replacements the upgrade needs: 4 stale files.
        for crash_after in (1, 2, 3):
            with self.subTest(crash_after=crash_after):
                target = self.t()
                proc = self.install(env={"COORD_INSTALL_CRASH_AFTER": str(crash_after)})
                self.assertEqual(proc.returncode, 70, proc.stderr)
                drift = self.install("--check", check=1).stdout
                stale = [line.split()[1] for line in drift.splitlines()
                         if line.startswith("stale ")]
                self.assertEqual(len(stale), 4 - crash_after, drift)
                for rel, data in old.items():
                    now = _read(os.path.join(target, rel))
                    if rel in stale:
                        self.assertEqual(now, data, rel)  # still the old file, whole
                leftovers = [p for p in self.snapshot() if ".coord-tmp-" in p]
                self.assertEqual(leftovers, [])
                self.install(check=0)
                self.assert_fully_installed()
                for rel in old:  # make the same files stale again for the next round
                    with open(self.t(rel), "wb") as f:
                        f.write(old[rel])

    def test_rerun_removes_temp_files_of_a_killed_write(self):
        self.fresh()
        with open(self.t(".coord", "store.py"), "ab") as f:
            f.write(b"# older\n")
        leftover = self.t(".coord", ".store.py.coord-tmp-12345")
        with open(leftover, "wb") as f:
            f.write(b"half a fi")
        self.install(check=0)
        self.assertFalse(os.path.exists(leftover))
        self.assert_fully_installed()

    def test_crashed_fresh_install_then_rerun_completes(self):
        proc = self.install("--project-id", "demo",
                            env={"COORD_INSTALL_CRASH_AFTER": "7"})
        self.assertEqual(proc.returncode, 70)
        self.assertEqual(self.install("--check").returncode, 1)
        self.install(check=0)  # the stored project id survived the crash
        self.assert_fully_installed()


class DoctorDatabaseTest(support.CoordTestCase):
    """install --doctor names what is wrong with the database; drift alone sets its exit status."""

    def setUp(self):
        super().setUp()
        support.require_tool(self, "git")
        self.codex_home = os.path.join(self.tmp, "codex-home")
        os.makedirs(self.codex_home)
        self.env["CODEX_HOME"] = self.codex_home
        self.target = os.path.join(self.tmp, "target")
        subprocess.run(["git", "init", "-q", self.target], check=True, env=self.env)
        self.run_install(INSTALL, self.target, "--project-id", "demo", check=0)
        st = store.Store(self.db)
        rt = st.register()
        for i in range(200):  # several pages, so a cut loses real data
            st.claim(rt["id"], ["src/file%03d.py" % i], purpose="p" * 200)
        st.close()
        self.assertFalse(os.path.exists(self.db + "-wal"), "a closed store leaves no WAL behind")

    def run_install(self, install, target, *args, check=None, preexec_fn=None, python=sys.executable):
        proc = subprocess.run([python, install, target] + list(args), env=self.env, cwd="/",
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120,
                              preexec_fn=preexec_fn)
        if check is not None:
            self.assertEqual(proc.returncode, check, proc.stdout + proc.stderr)
        return proc

    def db_line(self, text):
        lines = [l for l in text.splitlines() if l.startswith("database:")]
        self.assertEqual(len(lines), 1, text)
        return lines[0]

    def doctor(self, **kw):
        proc = self.run_install(INSTALL, self.target, "--doctor", **kw)
        self.assertNotIn("Traceback", proc.stderr)
        return proc

    def test_healthy_database_line(self):
        proc = self.doctor(check=0)
        line = self.db_line(proc.stdout)
        self.assertIn(self.db, line)
        self.assertIn("journal wal", line)

    def test_corrupt_header_is_named(self):
        with open(self.db, "r+b") as f:
            f.write(b"this is no database header" * 4)
        before = _read(self.db)
        proc = self.doctor(check=0)
        line = self.db_line(proc.stdout)
        self.assertIn(self.db, line)
        self.assertIn("not an SQLite database", line)
        self.assertEqual(_read(self.db), before, "doctor never writes the database")

    def test_corrupt_pages_behind_a_good_header_are_named(self):
        size = os.path.getsize(self.db)
        with open(self.db, "r+b") as f:
            f.seek(4096)
            f.write(os.urandom(size - 4096))
        proc = self.doctor(check=0)
        line = self.db_line(proc.stdout)
        self.assertNotIn("journal wal, schema", line,
                         "a database whose pages are garbage is reported as healthy: %s" % line)
        self.assertRegex(line, r"damaged|corrupt|malformed|unreadable")

    def test_truncated_database_is_named(self):
        data = _read(self.db)
        with open(self.db, "wb") as f:
            f.write(data[:len(data) // 3 + 100])
        proc = self.doctor(check=0)
        line = self.db_line(proc.stdout)
        self.assertIn(self.db, line)
        self.assertNotIn("journal wal, schema", line,
                         "a database cut to a third of its size is reported as healthy: %s" % line)
        self.assertRegex(line, r"truncated|damaged|corrupt|malformed|unreadable")

    def test_unreadable_database_is_named(self):
        if os.getuid() != 0:
            os.chmod(self.db, 0)
            self.addCleanup(os.chmod, self.db, 0o600)
            proc = self.doctor(check=0)
        else:
            # Root reads any file: run a copy of the installer as `nobody`, against a copy of the
            # target and the database in a directory that user can reach (/tmp here is 0700).
            demote = support.demote_to_nobody()
            python = "/usr/bin/python3"
            if demote is None or not os.access(python, os.X_OK):
                self.skipTest("no unprivileged user or system python3 to run as")
            shared = [d for d in ("/var/tmp", "/dev/shm") if os.path.isdir(d) and os.stat(d).st_mode & 0o001]
            if not shared:
                self.skipTest("no directory an unprivileged user can reach")
            base = tempfile.mkdtemp(prefix="coord-doctor-", dir=shared[0])
            self.addCleanup(shutil.rmtree, base, True)
            src = os.path.join(base, "src")
            shutil.copytree(support.ROOT, src, ignore=shutil.ignore_patterns(".git", "__pycache__", "tests",
                                                                             "bench", ".ci"))
            target = os.path.join(base, "target")
            shutil.copytree(self.target, target, symlinks=True)
            state = os.path.join(base, "state", "fleet-agent-coord")
            os.makedirs(state)
            db = os.path.join(state, "demo.sqlite3")
            shutil.copy(self.db, db)
            home = os.path.join(base, "home")
            os.makedirs(os.path.join(home, "codex"))
            # the hook runtime copy the install made, where that HOME has it (made readable below)
            shutil.copytree(os.path.join(self.home, ".local"), os.path.join(home, ".local"))
            for dirpath, dirnames, filenames in os.walk(base):
                os.chmod(dirpath, 0o755)
                for fn in filenames:
                    p = os.path.join(dirpath, fn)
                    if not os.path.islink(p):
                        os.chmod(p, 0o755 if os.access(p, os.X_OK) else 0o644)
            os.chmod(db, 0o600)  # owned by root: nobody may see it but not open it
            self.env.update({"HOME": home, "XDG_STATE_HOME": os.path.join(base, "state"), "COORD_DB": db,
                             "COORD_PROJECT_ID": "demo", "CODEX_HOME": os.path.join(home, "codex")})
            probe = subprocess.run([python, "-c", "open(%r, 'rb')" % db], preexec_fn=demote,
                                   stderr=subprocess.PIPE, text=True)
            self.assertNotEqual(probe.returncode, 0, "nobody can read the copy; the test would prove nothing")
            proc = self.run_install(os.path.join(src, "install"), target, "--doctor", preexec_fn=demote,
                                    python=python)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            self.assertNotIn("Traceback", proc.stderr)
            self.db = db
        line = self.db_line(proc.stdout)
        self.assertIn(self.db, line)
        self.assertRegex(line, r"unreadable.*[Pp]ermission denied")


class DoctorTest(InstallTestCase):

    def doctor(self, check=None):
        return json.loads(self.install("--doctor", "--json", check=check).stdout)

    def test_doctor_reports_versions_environment_and_database(self):
        self.fresh()
        r = self.doctor(check=0)
        version = _read(os.path.join(self.src, "VERSION")).decode().strip()
        self.assertEqual(r["source"]["version"], version)
        self.assertEqual(r["installed"]["version"], version)
        self.assertEqual(r["drift"], [])
        self.assertEqual(r["database"]["path"], self.db)
        self.assertIsNone(r["database"]["facts"])
        self.assertTrue(r["python"]["version"])
        self.assertIsNotNone(r["python"]["startup_ms"])
        self.assertFalse(os.path.exists(self.db), "doctor must not create the database")

        import sqlite3
        os.makedirs(os.path.dirname(self.db))
        conn = sqlite3.connect(self.db)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA user_version=7")
        conn.commit()
        conn.close()
        r = self.doctor(check=0)
        self.assertEqual(r["database"]["facts"], {"journal_mode": "wal", "schema_version": 7})
        self.assertEqual(os.listdir(os.path.dirname(self.db)), [os.path.basename(self.db)],
                         "doctor must leave no -wal/-shm files behind")
        text = self.install("--doctor", check=0).stdout
        self.assertIn("journal wal, schema 7", text)

        # While the database is open elsewhere, the newest schema version may sit in the WAL.
        conn = sqlite3.connect(self.db)
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("PRAGMA user_version=8")
        conn.commit()
        try:
            self.assertTrue(os.path.exists(self.db + "-wal"))
            r = self.doctor(check=0)
            self.assertEqual(r["database"]["facts"], {"journal_mode": "wal", "schema_version": 8})
        finally:
            conn.close()

    def test_doctor_reports_copilot_folder_trust_read_only(self):
        """Copilot CLI needs nothing beyond .claude/settings.json, and runs it only in a folder
        the person trusted (trustedFolders in $COPILOT_HOME/config.json, `//` comment lines)."""
        self.fresh()
        r = self.doctor(check=0)["copilot"]
        self.assertEqual((r["hooks"], r["trusted"]), (".claude/settings.json", False))
        text = self.install("--doctor", check=0).stdout
        self.assertIn("copilot: runs the Claude Code hooks in .claude/settings.json (nothing else to install); "
                      "folder NOT trusted", text)
        self.assertFalse(os.path.exists(os.path.join(self.home, ".copilot")), "doctor never trusts for the person")
        config = os.path.join(self.tmp, "copilot-home", "config.json")
        os.makedirs(os.path.dirname(config))
        data = '// managed by Copilot\n{"trustedFolders": ["%s/"]}\n' % os.path.dirname(os.path.realpath(self.target))
        with open(config, "w") as f:
            f.write(data)
        env = {"COPILOT_HOME": os.path.dirname(config)}
        r = json.loads(self.install("--doctor", "--json", env=env, check=0).stdout)["copilot"]
        self.assertEqual((r["config"], r["trusted"], r["error"]), (config, True, None))
        self.assertIn("folder trusted", self.install("--doctor", env=env, check=0).stdout)
        self.assertEqual(_read(config).decode(), data, "read only")
        with open(config, "w") as f:
            f.write("{not json")
        r = json.loads(self.install("--doctor", "--json", env=env, check=0).stdout)["copilot"]
        self.assertIsNone(r["trusted"])
        self.assertIn("not valid JSON", r["error"])

    def test_doctor_reports_droids_folder_trust_and_hooks_off_and_auggies_server_gate(self):
        self.fresh()
        r = self.doctor(check=0)["droid"]
        self.assertEqual((r["hooks"], r["trusted"], r["off"]), (".factory/hooks.json", False, []))
        settings = os.path.join(self.home, ".factory", "settings.json")
        os.makedirs(os.path.dirname(settings))
        with open(settings, "w") as f:
            json.dump({"trustedFolders": {self.target: {"trustedAt": "x"}}, "hooks": {"hooksDisabled": True}}, f)
        r = self.doctor(check=0)["droid"]
        self.assertEqual((r["trusted"], len(r["off"])), (True, 1))
        text = self.install("--doctor", check=0).stdout
        self.assertIn("droid: hooks in .factory/hooks.json; hooks OFF: hooks.hooksDisabled is true", text)
        self.assertIn("auggie: hooks in .augment/settings.json; Auggie runs them only when Augment's server", text)

    def test_doctor_measures_the_shell_a_codex_hook_pays_for(self):
        """Codex runs each hook command with the passwd entry's shell and -c: its start-up files
        ($BASH_ENV for bash, ~/.zshenv for zsh) are paid on every tool call."""
        self.fresh()
        argv = installer.codex_hook_shell()
        name = os.path.basename(argv[0])
        light = self.doctor(check=0)["codex"]["hook_shell"]
        self.assertEqual(light["argv"], argv)
        self.assertGreater(light["ms"], 0)
        if name not in ("bash", "zsh"):  # sh reads no start-up file with -c
            return
        heavy = os.path.join(self.tmp, "heavy-profile")
        os.makedirs(heavy)
        for rc in ("bash_env", ".zshenv"):  # 60 ms of start-up file, as a heavy profile pays
            with open(os.path.join(heavy, rc), "w") as f:
                f.write("sleep 0.06\n")
        env = {"BASH_ENV": os.path.join(heavy, "bash_env"), "ZDOTDIR": heavy}
        r = json.loads(self.install("--doctor", "--json", env=env, check=0).stdout)["codex"]["hook_shell"]
        self.assertGreaterEqual(r["ms"], 60)
        self.assertGreater(r["ms"], light["ms"] + 40)  # the start-up file is what it measures
        self.assertTrue(r["slow"])
        text = self.install("--doctor", env=env, check=0).stdout
        self.assertRegex(text, r"codex hook shell: %s -c, \d+\.\d ms per hook before Python starts; a shell "
                               r"start-up file .* is paid on every Codex tool call" % re.escape(argv[0]))

    def test_doctor_database_path_follows_xdg_state_and_project_id(self):
        self.fresh("projx")
        env = {"COORD_DB": "", "COORD_PROJECT_ID": ""}
        r = json.loads(self.install("--doctor", "--json", env=env).stdout)
        self.assertEqual(r["database"]["path"],
                         os.path.join(self.state, "fleet-agent-coord", "projx.sqlite3"))

    def test_doctor_codex_trust_untrusted_trusted_and_modified(self):
        import harnesses
        self.fresh()
        r = self.doctor(check=0)
        statuses = {h["status"] for h in r["codex"]["hooks"]}
        self.assertEqual(len(r["codex"]["hooks"]), len(EVENTS))
        self.assertEqual(statuses, {"untrusted"})
        self.assertIn("/hooks", self.install("--doctor", check=0).stdout)

        hashes = harnesses.codex_hook_hashes(self.t(".codex", "hooks.json"))
        keys = sorted(hashes)
        config = ['sandbox_mode = "danger-full-access"', "",
                  '[projects.%s]' % json.dumps(os.path.realpath(self.target)),
                  'trust_level = "trusted"', ""]
        for key in keys:
            config += ["[hooks.state.%s]" % json.dumps(key),
                       "trusted_hash = %s" % json.dumps(hashes[key]), ""]
        with open(os.path.join(self.codex_home, "config.toml"), "w") as f:
            f.write("\n".join(config))
        r = self.doctor(check=0)
        self.assertTrue(r["codex"]["project_trusted"])
        self.assertEqual({h["status"] for h in r["codex"]["hooks"]}, {"trusted"})
        self.assertIn("codex hooks: %d trusted" % len(EVENTS),
                      self.install("--doctor", check=0).stdout)

        # An upgrade that changes one hook makes exactly that one "modified".
        doc = self.settings(".codex/hooks.json")
        doc["hooks"]["PostToolUse"][0]["hooks"][0]["timeout"] = 11
        self.write_json(".codex/hooks.json", doc)
        r = self.doctor(check=1)
        by_status = {}
        for h in r["codex"]["hooks"]:
            by_status.setdefault(h["status"], []).append(h["key"])
        self.assertEqual(by_status["modified"], ["post_tool_use:0:0"])
        self.assertEqual(len(by_status["trusted"]), len(EVENTS) - 1)
        self.assertIn("codex hooks: %d trusted, 1 modified (post_tool_use:0:0); a person approves them "
                      "with /hooks in Codex" % (len(EVENTS) - 1),
                      self.install("--doctor").stdout)
        with open(os.path.join(self.codex_home, "config.toml")) as f:
            self.assertEqual(f.read(), "\n".join(config), "doctor must never write trust")

    def test_upgrade_from_the_old_codex_matcher_asks_for_approval_again(self):
        # 0.1.0 installed "apply_patch|Edit|Write": Codex never ran the hook for its shell.
        import harnesses
        self.fresh()
        doc = self.settings(".codex/hooks.json")
        doc["hooks"]["PreToolUse"][0]["matcher"] = "apply_patch|Edit|Write"
        self.write_json(".codex/hooks.json", doc)
        hashes = harnesses.codex_hook_hashes(self.t(".codex", "hooks.json"))
        with open(os.path.join(self.codex_home, "config.toml"), "w") as f:
            for key, digest in sorted(hashes.items()):
                f.write("[hooks.state.%s]\ntrusted_hash = %s\n\n" % (json.dumps(key), json.dumps(digest)))
        out = self.install(check=0).stdout
        self.assertIn("Codex hooks changed: a person must approve them with /hooks in Codex", out)
        self.assertEqual(self.settings(".codex/hooks.json")["hooks"]["PreToolUse"][0]["matcher"],
                         "apply_patch|Edit|Write|Bash")
        modified = [h["key"] for h in self.doctor()["codex"]["hooks"] if h["status"] == "modified"]
        self.assertEqual(modified, ["pre_tool_use:0:0"])

    def test_doctor_codex_trust_hash_uses_capped_session_end_timeout(self):
        import harnesses
        self.fresh()
        doc = self.settings(".codex/hooks.json")
        doc["hooks"]["SessionEnd"][0]["hooks"][0]["timeout"] = 5
        self.write_json(".codex/hooks.json", doc)
        hashes = harnesses.codex_hook_hashes(self.t(".codex", "hooks.json"))
        with open(os.path.join(self.codex_home, "config.toml"), "w") as f:
            for key, digest in sorted(hashes.items()):
                f.write("[hooks.state.%s]\ntrusted_hash = %s\n\n"
                        % (json.dumps(key), json.dumps(digest)))
        r = self.doctor()
        self.assertEqual({h["key"]: h["status"] for h in r["codex"]["hooks"]}["session_end:0:0"],
                         "trusted")

    def test_doctor_codex_sandbox_writable_roots(self):
        self.fresh()
        config = os.path.join(self.codex_home, "config.toml")
        with open(config, "w") as f:
            f.write('sandbox_mode = "workspace-write"\n')
        r = self.doctor(check=0)
        db_dir = os.path.dirname(self.db)
        self.assertFalse(r["codex"]["sandbox"]["ok"])
        text = self.install("--doctor", check=0).stdout
        self.assertIn('writable_roots = ["%s"]' % db_dir, text)
        self.assertIn("[sandbox_workspace_write]", text)

        with open(config, "w") as f:
            f.write('sandbox_mode = "workspace-write"\n\n[sandbox_workspace_write]\n'
                    'writable_roots = [\n  "/elsewhere",\n  "%s",\n]\n' % db_dir)
        self.assertTrue(self.doctor(check=0)["codex"]["sandbox"]["ok"])

        with open(config, "w") as f:
            f.write('sandbox_mode = "danger-full-access"\n')
        self.assertTrue(self.doctor(check=0)["codex"]["sandbox"]["ok"])

    def test_vendored_installer_doctors_its_own_release(self):
        self.fresh()
        vendored = self.t(".coord", "install")
        proc = self.install("--doctor", target=".", cwd=self.target, install_path=vendored,
                            check=0)
        self.assertIn("drift: none", proc.stdout)
        os.unlink(self.t(".agents", "skills", "coord", "SKILL.md"))
        proc = self.install("--doctor", target=".", cwd=self.target, install_path=vendored,
                            check=1)
        self.assertIn("missing .agents/skills/coord/SKILL.md", proc.stdout)
        self.install("--repair", target=".", cwd=self.target, install_path=vendored, check=0)
        self.assert_fully_installed()


class TomlReadingTest(support.CoordTestCase):
    """The minimal config.toml reading doctor relies on (tomllib is 3.11+)."""

    def test_reads_tables_quoted_keys_arrays_and_skips_what_it_does_not_model(self):
        path = os.path.join(self.tmp, "config.toml")
        with open(path, "w") as f:
            f.write(
                '# comment\nsandbox_mode = "workspace-write" # trailing\n'
                "approval = 'never'\ninline = { a = 1 }\n"
                'multi = """\nline1\nline2"""\n\n'
                '[sandbox_workspace_write]\nwritable_roots = [\n  "/one", # c\n  \'/two\',\n]\n'
                "network_access = true\n\n[[array_of_tables]]\nname = \"skipped\"\n\n"
                '[projects."/home/u/my.repo"]\ntrust_level = "trusted"\n\n'
                '[hooks.state."/r/.codex/hooks.json:pre_tool_use:0:0"]\n'
                'trusted_hash = "sha256:abc"\n\n'
                '[hooks]\nstate."/x:stop:0:0".trusted_hash = "sha256:def"\n'
                'esc = "a\\"b\\\\c\\u00e9"\n')
        expected = {
            ("sandbox_mode",): "workspace-write",
            ("approval",): "never",
            ("multi",): "line1\nline2",
            ("sandbox_workspace_write", "writable_roots"): ["/one", "/two"],
            ("sandbox_workspace_write", "network_access"): True,
            ("projects", "/home/u/my.repo", "trust_level"): "trusted",
            ("hooks", "state", "/r/.codex/hooks.json:pre_tool_use:0:0", "trusted_hash"):
                "sha256:abc",
            ("hooks", "state", "/x:stop:0:0", "trusted_hash"): "sha256:def",
            ("hooks", "esc"): 'a"b\\c\u00e9',
        }
        with open(path, encoding="utf-8") as f:
            got = installer._read_toml_fallback(f.read())
        self.assertEqual(got, expected)
        # read_toml uses tomllib where it exists (3.11+), which also reads what the fallback skips.
        full = installer.read_toml(path)
        self.assertEqual({k: full.get(k) for k in expected}, expected)


class RuntimeCopyTest(InstallTestCase):
    """The hooks run a content-addressed, read-only copy of the hook runtime kept outside the
    repository, never the repository's files, which an agent can edit."""

    def setUp(self):
        super().setUp()
        self.fresh()
        self.digest = installer.runtime_digest(installer.read_runtime(ROOT))
        self.copy = os.path.join(self.home, ".local", "share", "fleet-agent-coord", "runtime", self.digest)

    def plant(self, path, marker):
        """Append a line to `path` that creates `marker` when the module is imported."""
        os.chmod(path, 0o600)
        with open(path, "a") as f:
            f.write("\nopen(%r, 'w').close()\n" % marker)

    def session_start(self, harness="codex"):
        command, _ = support.installed_hook(self.target, harness, "SessionStart")
        with open(os.path.join(support.FIXTURES, "payloads", "%s-SessionStart.json" % harness)) as f:
            doc = json.load(f)
        doc["cwd"] = self.target
        env = dict(self.env)
        env.pop("CLAUDE_PROJECT_DIR", None)
        return support.run_hook(command, doc, env, self.target)

    def test_install_copies_the_runtime_outside_the_target_and_the_commands_name_it(self):
        data = os.path.join(self.tmp, "data2")
        out = self.install("--project-id", "demo", target=self.new_repo("other"), env={"XDG_DATA_HOME": data},
                           check=0).stdout
        self.assertIn("hook runtime copy (the hooks run it, never the repository's files): %s\n"
                      % os.path.join(data, "fleet-agent-coord", "runtime", self.digest), out)
        self.assertEqual(installer.runtime_state(self.copy), "ok")
        self.assertEqual(sorted(os.listdir(self.copy)), ["harness_facts.py", "hook.py", "host.py", "hostclient.py", "pg.py",
                                                          "session.py", "store.py"])
        self.assertEqual(stat.S_IMODE(os.stat(self.copy).st_mode), 0o500)
        for name in os.listdir(self.copy):
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.copy, name)).st_mode), 0o400)
            with open(os.path.join(self.copy, name), "rb") as a, open(os.path.join(ROOT, name), "rb") as b:
                self.assertEqual(a.read(), b.read())
        for harness in ("claude", "codex"):
            for event, _, _, _ in installer.HOOK_EVENTS:
                command, _ = support.installed_hook(self.target, harness, event)
                self.assertEqual(installer.pinned_runtime(command), self.digest)
        self.assertEqual(self.install("--check", check=0).stdout, "")

    def test_the_repositorys_runtime_files_never_run_as_hooks(self):
        markers = {}
        for name in ("hook.py", "store.py", "session.py"):
            markers[name] = os.path.join(self.tmp, "ran-" + name)
            self.plant(self.t(".coord", name), markers[name])
        for harness in ("claude", "codex"):
            with self.subTest(harness=harness):
                proc = self.session_start(harness)
                self.assertEqual((proc.returncode, proc.stderr), (0, ""))
                self.assertEqual(json.loads(proc.stdout)["hookSpecificOutput"]["hookEventName"], "SessionStart")
        self.assertEqual([n for n, m in sorted(markers.items()) if os.path.exists(m)], [])
        self.assertFalse(os.path.exists(self.t(".coord", "__pycache__")))

    def test_an_altered_or_missing_copy_never_runs_and_repair_recreates_it(self):
        marker = os.path.join(self.tmp, "ran-altered")
        self.plant(os.path.join(self.copy, "store.py"), marker)
        proc = self.session_start()
        self.assertEqual((proc.returncode, proc.stdout), (0, ""))
        self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
        self.assertIn("runtime copy is missing or altered", proc.stderr)
        self.assertIn(self.copy, proc.stderr)
        self.assertFalse(os.path.exists(marker))
        check = self.install("--check", check=1).stdout
        self.assertIn("altered %s (hook runtime copy)" % self.copy, check)
        self.install(check=0)
        self.assertEqual(installer.runtime_state(self.copy), "ok")
        aside = [n for n in os.listdir(os.path.dirname(self.copy)) if n.startswith(self.digest + ".altered-")]
        self.assertEqual(len(aside), 1, "the altered copy is kept aside, not deleted")
        self.assertEqual(self.install("--check", check=0).stdout, "")
        proc = self.session_start()
        self.assertEqual((proc.returncode, proc.stderr), (0, ""))
        self.assertIn("SessionStart", proc.stdout)
        # An extra file (a json.py would shadow the stdlib) and a missing copy fail open alike.
        os.chmod(self.copy, 0o700)
        with open(os.path.join(self.copy, "json.py"), "w") as f:
            f.write("open(%r, 'w').close()\n" % marker)
        self.assertIn("missing or altered", self.session_start().stderr)
        self.assertFalse(os.path.exists(marker))
        shutil.rmtree(self.copy)
        proc = self.session_start()
        self.assertEqual((proc.returncode, proc.stdout), (0, ""))
        self.assertIn("missing or altered", proc.stderr)
        self.assertIn("missing %s" % self.copy, self.install("--check", check=1).stdout)
        self.install("--repair", check=0)
        self.assertEqual(installer.runtime_state(self.copy), "ok")

    def test_an_interpreter_that_cannot_check_the_copy_allows_and_says_so(self):
        # A Python built without BLAKE2b (neither _blake2 nor hashlib's) cannot check the copy: the
        # command fails open with its one line, exit 0 (Copilot CLI denies a tool on any other exit).
        python = os.path.join(self.tmp, "python-without-blake2")
        with open(python, "w") as f:
            f.write("#!%s\nimport os, sys\n"
                    "args = sys.argv[1:]\n"
                    "i = args.index('-c') + 1\n"
                    "args[i] = 'import sys\\nsys.modules[\"_blake2\"] = sys.modules[\"hashlib\"] = None\\n' + args[i]\n"
                    "os.execv(sys.executable, [sys.executable] + args)\n" % sys.executable)
        os.chmod(python, 0o755)
        command, _ = support.installed_hook(self.target, "codex", "SessionStart")
        env = dict(self.env, COORD_PYTHON=python)
        env.pop("CLAUDE_PROJECT_DIR", None)
        proc = support.run_hook(command, {"hook_event_name": "SessionStart", "session_id": "s", "cwd": self.target},
                                env, self.target)
        self.assertEqual((proc.returncode, proc.stdout), (0, ""))
        self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
        self.assertIn("runtime copy is missing or altered", proc.stderr)

    def test_a_runtime_directory_inside_the_target_is_refused(self):
        proc = self.install(env={"XDG_DATA_HOME": self.t("data")}, check=3)
        self.assertIn("where an agent can write", proc.stderr)
        self.assertFalse(os.path.exists(self.t("data")))

    def test_doctor_reports_the_copy_and_whether_codex_s_sandbox_could_write_it(self):
        r = json.loads(self.install("--doctor", "--json", check=0).stdout)["runtime"]
        self.assertEqual((r["path"], r["state"]), (self.copy, "ok"))
        config = {("sandbox_mode",): "workspace-write",
                  ("sandbox_workspace_write", "writable_roots"): [self.home],
                  ("sandbox_workspace_write", "exclude_slash_tmp"): True,
                  ("sandbox_workspace_write", "exclude_tmpdir_env_var"): True}  # the test may run under $TMPDIR
        self.assertEqual(installer.runtime_exposure(config, self.copy, self.target), ["writable root %s" % self.home])
        config[("sandbox_workspace_write", "writable_roots")] = []
        self.assertEqual(installer.runtime_exposure(config, self.copy, self.target), [])


class HookCommandTest(InstallTestCase):
    """The generated hook command finds .coord/hook.py from any directory in the repository."""

    RECORDER = (
        "import json, os, sys\n"
        "REPO = None\n"
        "def main():\n"
        "    sys.stdout.write(json.dumps({'argv': sys.argv[1:], 'file': __file__, 'repo': REPO,\n"
        "        'cwd': os.getcwd(), 'stdin': sys.stdin.read(), 'exe': sys.executable}))\n"
        "    return 0\n"
    )

    def setUp(self):
        super().setUp()
        self.fresh()
        self.sub = self.t("pkg", "deep")
        os.makedirs(self.sub)
        self.recorder = None

    def use_recorder(self):
        """Run a recording hook.py instead of coord's: a runtime copy of its own (the
        repository's .coord/hook.py is never what runs)."""
        self.recorder, path = support.install_hook_runtime({"hook.py": self.RECORDER.encode()}, installer)
        self.recorder_file = os.path.join(path, "hook.py")

    def run_hook(self, harness, env=None, cwd=None, payload='{"hook_event_name": "Stop"}'):
        command, _ = support.installed_hook(self.target, harness, "PostToolUse")
        if self.recorder:
            self.assertEqual(command, installer.hook_command(harness))
            command = installer.hook_command(harness, self.recorder)
        e = dict(self.env)
        e.pop("CLAUDE_PROJECT_DIR", None)
        e.update(env or {})
        return support.run_hook(command, payload, e, cwd or self.sub)

    def test_command_runs_installed_hook_from_subdirectory(self):
        self.use_recorder()
        for harness in ("claude", "codex"):
            with self.subTest(harness=harness):
                proc = self.run_hook(harness)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                got = json.loads(proc.stdout)
                self.assertEqual(got["argv"], ["--harness", harness])
                self.assertEqual(got["file"], self.recorder_file)
                self.assertEqual(os.path.realpath(got["repo"]), os.path.realpath(self.target))
                self.assertEqual(os.path.realpath(got["cwd"]), os.path.realpath(self.sub))
                self.assertEqual(got["stdin"], '{"hook_event_name": "Stop"}')

    def test_claude_command_prefers_claude_project_dir(self):
        self.use_recorder()
        proc = self.run_hook("claude", cwd=self.tmp, env={"CLAUDE_PROJECT_DIR": self.target})
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(os.path.realpath(json.loads(proc.stdout)["repo"]), os.path.realpath(self.target))

    def test_command_outside_any_installation_does_nothing(self):
        outside = os.path.join(self.tmp, "elsewhere")
        os.makedirs(outside)
        for harness in ("claude", "codex"):
            proc = self.run_hook(harness, cwd=outside)
            self.assertEqual((proc.returncode, proc.stdout, proc.stderr), (0, "", ""))

    def test_command_skips_version_manager_shims(self):
        self.use_recorder()
        shims = os.path.join(self.tmp, "fake", "shims")
        os.makedirs(shims)
        marker = os.path.join(self.tmp, "shim-ran")
        with open(os.path.join(shims, "python3"), "w") as f:
            f.write("#!/bin/sh\ntouch %s\nexit 9\n" % marker)
        os.chmod(os.path.join(shims, "python3"), 0o755)
        real_dir = os.path.join(self.tmp, "realbin")
        os.makedirs(real_dir)
        os.symlink(sys.executable, os.path.join(real_dir, "python3"))
        env = {"PATH": "%s:%s:/usr/bin:/bin" % (shims, real_dir)}
        proc = self.run_hook("codex", env=env)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertFalse(os.path.exists(marker))
        self.assertEqual(json.loads(proc.stdout)["exe"], os.path.join(real_dir, "python3"))

        override = self.run_hook("claude", env=dict(env, COORD_PYTHON=sys.executable))
        self.assertEqual(json.loads(override.stdout)["exe"], sys.executable)

    def test_command_never_runs_a_python3_inside_the_repository(self):
        # An agent can write the repository: a python3 there (a venv on PATH, a COORD_PYTHON
        # pointing into it) would run with the harness's rights.
        self.use_recorder()
        planted = self.t("venv", "bin")
        os.makedirs(planted)
        marker = os.path.join(self.tmp, "planted-ran")
        with open(os.path.join(planted, "python3"), "w") as f:
            f.write("#!/bin/sh\ntouch %s\nexit 9\n" % marker)
        os.chmod(os.path.join(planted, "python3"), 0o755)
        real_dir = os.path.join(self.tmp, "realbin")
        os.makedirs(real_dir)
        os.symlink(sys.executable, os.path.join(real_dir, "python3"))
        env = {"PATH": "%s:venv/bin:%s:/usr/bin:/bin" % (planted, real_dir)}
        for harness, extra in (("codex", {}), ("claude", {"COORD_PYTHON": os.path.join(planted, "python3")})):
            with self.subTest(harness=harness):
                proc = self.run_hook(harness, env=dict(env, **extra), cwd=self.target)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertEqual(json.loads(proc.stdout)["exe"], os.path.join(real_dir, "python3"))
        self.assertFalse(os.path.exists(marker))

    def test_auggies_rewrite_of_its_handler_leaves_the_interpreter_choice_as_written(self):
        # Auggie 0.36.0 (augment.mjs: the hook runner's expansion of command and args) replaces
        # ${NAME} and ${NAME:-default} from its own environment before it spawns a handler, keeping
        # what it cannot resolve; the script's own variables are unset there. Done here as it does
        # it, on the handler the installer wrote: still no shim, no python3 in the repository, and
        # COORD_PYTHON honoured.
        import re
        self.use_recorder()
        with open(os.path.join(self.target, ".augment", "settings.json")) as f:
            handler = json.load(f)["hooks"]["PostToolUse"][0]["hooks"][0]
        self.assertEqual(handler["args"], ["-c", installer.hook_command("auggie")])
        script = installer.hook_command("auggie", self.recorder)
        expand = re.compile(r"(?<!\\)\$\{([a-zA-Z_][a-zA-Z0-9_]*)(?::-([\s\S]*?))?\}")

        def as_auggie_runs(env):
            def one(m):
                if m.group(1) in env:
                    return env[m.group(1)]
                return m.group(2) if m.group(2) is not None else m.group(0)
            return expand.sub(one, script).replace("\\${", "${")
        shims, planted, real_dir = (os.path.join(self.tmp, "fake", "shims"), self.t("venv", "bin"),
                                    os.path.join(self.tmp, "realbin"))
        marker = os.path.join(self.tmp, "wrong-python-ran")
        for d in (shims, planted):
            os.makedirs(d)
            with open(os.path.join(d, "python3"), "w") as f:
                f.write("#!/bin/sh\ntouch %s\nexit 9\n" % marker)
            os.chmod(os.path.join(d, "python3"), 0o755)
        os.makedirs(real_dir)
        os.symlink(sys.executable, os.path.join(real_dir, "python3"))
        for path, extra, exe in (("%s:%s:%s" % (shims, real_dir, "/usr/bin:/bin"), {}, os.path.join(real_dir, "python3")),
                                 ("%s:%s:%s" % (planted, real_dir, "/usr/bin:/bin"), {}, os.path.join(real_dir, "python3")),
                                 ("%s:%s:%s" % (shims, real_dir, "/usr/bin:/bin"), {"COORD_PYTHON": sys.executable},
                                  sys.executable)):
            with self.subTest(path=path, extra=extra):
                env = dict(self.env, PATH=path, **extra)
                env.pop("CLAUDE_PROJECT_DIR", None)
                proc = support.run_hook(as_auggie_runs(env), '{"hook_event_name": "Stop"}',
                                        dict(env, AUGMENT_PROJECT_DIR=self.target), self.sub)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertEqual(json.loads(proc.stdout)["exe"], exe)
        self.assertFalse(os.path.exists(marker))

    def test_command_with_no_python3_at_all_allows_and_says_nothing(self):
        # Copilot CLI denies a tool when its hook cannot start; coord's command exits 0 instead.
        self.use_recorder()
        empty = os.path.join(self.tmp, "nopython")
        os.makedirs(empty)
        for harness, extra in (("claude", {}), ("codex", {}), ("claude", {"COORD_PYTHON": "/nonexistent/python3"})):
            with self.subTest(harness=harness, extra=extra):
                proc = self.run_hook(harness, env=dict({"PATH": empty}, **extra))
                self.assertEqual((proc.returncode, proc.stdout, proc.stderr), (0, "", ""))

    def test_command_fails_open_on_python_older_than_3_9(self):
        old = [p for p in ("/root/.pyenv/versions/3.8.18/bin/python3",
                           "/root/.pyenv/versions/3.7.16/bin/python3",
                           "/root/.pyenv/versions/3.6.15/bin/python3") if os.path.exists(p)]
        if not old:
            self.skipTest("no Python older than 3.9 on this machine")
        self.use_recorder()
        proc = self.run_hook("claude", env={"COORD_PYTHON": old[0]})
        self.assertEqual((proc.returncode, proc.stdout), (0, ""), proc.stderr)

    def payload(self, name, **changes):
        with open(os.path.join(support.FIXTURES, "payloads", name)) as f:
            doc = json.load(f)
        doc["cwd"] = self.sub
        doc.update(changes)
        return json.dumps(doc)

    def test_real_hook_registers_session_from_subdirectory(self):
        for harness in ("claude", "codex"):
            with self.subTest(harness=harness):
                proc = self.run_hook(harness, payload=self.payload(
                    "%s-SessionStart.json" % harness))
                self.assertEqual(proc.returncode, 0, proc.stderr)
                reply = json.loads(proc.stdout)
                self.assertEqual(reply["hookSpecificOutput"]["hookEventName"], "SessionStart")
        listing = self.coord("list", "--json", cwd=self.target, check=0)
        harnesses = sorted(r["harness"] for r in json.loads(listing.stdout)["runtimes"])
        self.assertEqual(harnesses, ["claude", "codex"])

    def test_real_hook_denies_codex_patch_on_a_peers_lease(self):
        peer = self.hello(cwd=self.target)["runtime"]
        self.coord("claim", "pkg/deep/locked.txt", "-p", "test", runtime=peer["id"],
                   cwd=self.target, check=0)
        self.run_hook("codex", payload=self.payload("codex-SessionStart.json"))
        patch = "*** Begin Patch\n*** Add File: locked.txt\n+x\n*** End Patch\n"
        doc = json.loads(self.payload("codex-PreToolUse-apply_patch.json"))
        doc["tool_input"] = {"command": patch}
        proc = self.run_hook("codex", payload=json.dumps(doc))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        reply = json.loads(proc.stdout)["hookSpecificOutput"]
        self.assertEqual(reply["permissionDecision"], "deny")
        self.assertTrue(reply["permissionDecisionReason"])

# coord's AGENTS.md as 0.1 shipped it into .coord/ (kept under a name no harness loads)
SHIPPED_AGENTS = os.path.join(support.FIXTURES, "install", "shipped-agents-md-993111d.txt")


class RetiredFilesTest(InstallTestCase):
    """coord ships nothing a harness loads as instructions, and removes what an older release
    shipped there only when it is byte for byte what coord installed."""

    def old_layout(self, claude=None, agents=None, with_claude=True):
        self.fresh()
        if with_claude:  # the source checkout's own guide: coord's bytes even when no release had them
            with open(self.t(".coord", "CLAUDE.md"), "wb") as f:
                f.write(_read(os.path.join(ROOT, "CLAUDE.md")) if claude is None else claude)
        with open(self.t(".coord", "AGENTS.md"), "wb") as f:
            f.write(_read(SHIPPED_AGENTS) if agents is None else agents)

    def test_nothing_installed_is_named_like_harness_instructions(self):
        self.fresh()
        names = set()
        for top in (".coord", ".claude", ".agents", ".codex"):
            for _, _, files in os.walk(self.t(top)):
                names.update(files)
        self.assertTrue(names)
        for loaded in ("CLAUDE.md", "AGENTS.md", "CLAUDE.local.md", "AGENTS.override.md"):
            self.assertNotIn(loaded, names)

    def test_repair_removes_the_copies_an_older_release_shipped(self):
        self.old_layout()
        proc = self.install("--check", check=1)
        self.assertIn("retired .coord/CLAUDE.md", proc.stdout)
        self.assertIn("retired .coord/AGENTS.md", proc.stdout)
        self.install("--repair", check=0)
        self.assertFalse(os.path.lexists(self.t(".coord", "CLAUDE.md")))
        self.assertFalse(os.path.lexists(self.t(".coord", "AGENTS.md")))
        self.assertEqual(self.install("--check", check=0).stdout, "")

    def test_the_installed_installer_removes_a_shipped_copy_too(self):
        self.old_layout(with_claude=False)
        self.install(install_path=self.t(".coord", "install"), check=0)
        self.assertFalse(os.path.lexists(self.t(".coord", "AGENTS.md")))

    def test_a_changed_copy_is_kept_and_reported(self):
        self.old_layout(claude=b"# my own notes about coord\n")
        proc = self.install(check=0)
        self.assertIn("kept .coord/CLAUDE.md", proc.stdout)
        self.assertEqual(_read(self.t(".coord", "CLAUDE.md")), b"# my own notes about coord\n")
        self.assertFalse(os.path.lexists(self.t(".coord", "AGENTS.md")))
        check = json.loads(self.install("--check", "--json", check=0).stdout)
        self.assertEqual((check["drift"], check["kept"]), ([], [".coord/CLAUDE.md"]))
        doctor = json.loads(self.install("--doctor", "--json").stdout)
        self.assertEqual(doctor["kept"], [".coord/CLAUDE.md"])


class RetiredDocsTest(InstallTestCase):
    """The big README and DESIGN stay in coord's own checkout: an installation carries only what
    an agent or a person there needs (the skill points at `.coord/coord --help`). The copies an
    older release left in .coord/ go when they are coord's bytes, and are kept when changed."""

    def old_docs(self, readme=None):
        self.fresh()
        import tarfile
        with tarfile.open(os.path.join(support.FIXTURES, "release-0.2.0.tar.gz")) as tar:
            for name in ("README.md", "DESIGN.md"):
                data = tar.extractfile(name).read()
                with open(self.t(".coord", name), "wb") as f:
                    f.write(readme if readme is not None and name == "README.md" else data)

    def test_no_readme_or_design_is_installed(self):
        self.fresh()
        for name in ("README.md", "DESIGN.md"):
            self.assertFalse(os.path.lexists(self.t(".coord", name)), name)
        skill = _read(self.t(".agents", "skills", "coord", "SKILL.md")).decode("utf-8")
        self.assertNotIn("README", skill)
        self.assertNotIn("DESIGN", skill)
        self.assertIn(".coord/coord --help", skill)

    def test_an_older_releases_docs_are_retired(self):
        self.old_docs()
        proc = self.install("--check", check=1)
        self.assertIn("retired .coord/README.md", proc.stdout)
        self.assertIn("retired .coord/DESIGN.md", proc.stdout)
        self.install(check=0)
        for name in ("README.md", "DESIGN.md"):
            self.assertFalse(os.path.lexists(self.t(".coord", name)), name)
        self.assertEqual(self.install("--check", check=0).stdout, "")

    def test_a_changed_readme_is_kept_without_the_instructions_warning(self):
        self.old_docs(readme=b"# our notes on coord\n")
        proc = self.install(check=0)
        self.assertIn("kept .coord/README.md", proc.stdout)
        self.assertNotIn("instructions", proc.stdout)
        self.assertEqual(_read(self.t(".coord", "README.md")), b"# our notes on coord\n")
        self.assertFalse(os.path.lexists(self.t(".coord", "DESIGN.md")))
        doctor = json.loads(self.install("--doctor", "--json").stdout)
        self.assertEqual(doctor["kept"], [".coord/README.md"])


class DroppedEventTest(InstallTestCase):
    """An event coord does not register (here Notification) loses coord's entry on reinstall,
    in both configs; a person's own handler there stays."""

    def test_reinstall_removes_coords_entry_from_an_unregistered_event_and_keeps_foreign_ones(self):
        self.fresh()
        for rel, harness in ((".claude/settings.json", "claude"), (".codex/hooks.json", "codex")):
            doc = self.settings(rel)
            doc["hooks"]["Notification"] = [
                {"hooks": [{"type": "command", "command": "notify-send done"}]},
                {"hooks": [{"type": "command", "command": installer.hook_command(harness), "timeout": 10}]}]
            self.write_json(rel, doc)
        self.assertIn("Notification", self.install("--check", check=1).stdout + self.install("--check").stderr)
        self.install(check=0)
        for rel in (".claude/settings.json", ".codex/hooks.json"):
            with self.subTest(config=rel):
                self.assertEqual(self.settings(rel)["hooks"]["Notification"],
                                 [{"hooks": [{"type": "command", "command": "notify-send done"}]}])
        self.install("--check", check=0)


class DoctorClonesTest(InstallTestCase):
    """--doctor covers every live managed clone: Codex project and hook trust, Claude Code trust."""

    def test_each_live_clone_is_reported_untrusted_then_trusted(self):
        import harnesses
        import store
        self.fresh()
        clone = os.path.realpath(self.new_repo("task.abcd1234"))
        self.install("--project-id", "demo", target=clone, check=0)
        gone = os.path.join(self.tmp, "gone.0000")
        st = store.Store(self.db, environ=self.env)
        with st.transaction():
            w = st.insert_work("task", "active", "t" * 64, path=clone, source=os.path.realpath(self.target))
            st.insert_work("gone", "active", "u" * 64, path=gone, source=os.path.realpath(self.target))
        st.close()
        r = json.loads(self.install("--doctor", "--json", check=0).stdout)
        self.assertEqual([c["handle"] for c in r["clones"]], [w["handle"]], "a clone not on disk is skipped")
        c = r["clones"][0]
        self.assertEqual((c["codex_project_trusted"], c["codex_hooks"], c["codex_hooks_trusted"], c["claude_trusted"]),
                         (False, len(EVENTS), 0, False))
        text = self.install("--doctor", check=0).stdout
        self.assertIn("clone %s (task): codex project NOT trusted, hooks 0/%d trusted; claude NOT trusted; "
                      "copilot NOT trusted" % (w["handle"], len(EVENTS)), text)
        self.assertIn("/hooks", text)
        lines = ['[projects."%s"]' % clone, 'trust_level = "trusted"', '']
        for key, digest in sorted(harnesses.codex_hook_hashes(os.path.join(clone, ".codex", "hooks.json")).items()):
            lines += ['[hooks.state."%s"]' % key, 'trusted_hash = "%s"' % digest, '']
        with open(os.path.join(self.codex_home, "config.toml"), "w") as f:
            f.write("\n".join(lines))
        with open(os.path.join(self.home, ".claude.json"), "w") as f:
            json.dump({"projects": {os.path.dirname(clone): {"hasTrustDialogAccepted": True}}}, f)
        os.makedirs(os.path.join(self.home, ".copilot"))
        with open(os.path.join(self.home, ".copilot", "config.json"), "w") as f:
            json.dump({"trustedFolders": [clone]}, f)
        c = json.loads(self.install("--doctor", "--json", check=0).stdout)["clones"][0]
        self.assertEqual((c["codex_project_trusted"], c["codex_hooks_trusted"], c["claude_trusted"],
                          c["copilot_trusted"]), (True, len(EVENTS), True, True))
        self.assertIn("hooks %d/%d trusted; claude trusted; copilot trusted\n" % (len(EVENTS), len(EVENTS)),
                      self.install("--doctor", check=0).stdout)


class DoctorHintTest(InstallTestCase):
    """--doctor's line for an untrusted clone names the target's coord as it must be typed from
    where the installer ran, so that the pasted hint runs."""

    def test_the_carry_over_hint_pastes_and_runs(self):
        import re
        import store
        self.fresh()
        clone = os.path.realpath(self.new_repo("task.abcd1234"))
        self.install("--project-id", "demo", target=clone, check=0)
        st = store.Store(self.db, environ=self.env)
        with st.transaction():
            st.insert_work("task", "active", "t" * 64, path=clone, source=os.path.realpath(self.target))
        st.close()
        for cwd, target in ((self.tmp, self.target), (self.target, ".")):
            with self.subTest(cwd=cwd):
                text = self.install("--doctor", target=target, cwd=cwd, check=None).stdout
                hint = re.search(r"or: (\S+ trust --carry-over on) before", text)
                self.assertIsNotNone(hint, text)
                self.assertNotEqual(hint.group(1).split()[0], "coord", "a bare coord is not on PATH")
                shown = subprocess.run(hint.group(1).replace("--carry-over on", ""), shell=True, cwd=cwd,
                                       env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       timeout=60)
                self.assertEqual(shown.returncode, 0, shown.stderr)
                self.assertIn("carry-over off", shown.stdout)



GEMINI_EVENTS = ("SessionStart", "BeforeAgent", "BeforeTool", "AfterTool", "AfterAgent", "Notification", "SessionEnd")


def gemini_resolve(text, env):
    """Gemini CLI 0.61.0's settings loader (envVarResolver): every `$NAME`, `${NAME}` and
    `${NAME:-default}` in a settings string becomes the value in its environment, else the
    default, else stays as it is."""
    def sub(m):
        name = m.group(1) or m.group(2) or ""
        if name in env:
            return env[name]
        return m.group(3) if m.group(3) is not None else m.group(0)
    return re.sub(r"\$(?:(\w+)|{([^}]+?)(?::-([^}]*))?})", sub, text)


class GeminiInstallTest(InstallTestCase):
    """Gemini CLI's hooks live in `.gemini/settings.json` beside the person's own settings."""

    REL = ".gemini/settings.json"

    def coord_handlers(self, doc):
        return {ev: [h for g in groups for h in g["hooks"] if ".coord/hook.py" in h.get("command", "")]
                for ev, groups in doc["hooks"].items() if isinstance(groups, list)}

    def test_merged_with_the_persons_settings_and_repaired(self):
        mine = {"model": {"name": "gemini-2.5-pro"}, "hooksConfig": {"notifications": True},
                "hooks": {"enabled": True, "BeforeTool": [{"matcher": "read_file", "hooks": [
                    {"type": "command", "command": "echo mine"}]}]}}
        self.write_json(self.REL, mine)
        self.fresh()
        doc = self.settings(self.REL)
        self.assertEqual((doc["model"], doc["hooksConfig"], doc["hooks"]["enabled"]),
                         (mine["model"], mine["hooksConfig"], True))
        self.assertEqual(doc["hooks"]["BeforeTool"][0], mine["hooks"]["BeforeTool"][0], "the person's first")
        own = self.coord_handlers(doc)
        self.assertEqual(sorted(ev for ev in own if own[ev]), sorted(GEMINI_EVENTS))
        for ev in GEMINI_EVENTS:
            self.assertEqual(len(own[ev]), 1, ev)
            handler = own[ev][0]
            self.assertEqual(set(handler), {"name", "type", "command", "timeout"})
            self.assertEqual((handler["name"], handler["type"]), ("coord", "command"))
            self.assertEqual(handler["command"], installer.hook_command("gemini"))
            self.assertIsInstance(handler["timeout"], int)
            self.assertGreaterEqual(handler["timeout"], 1000, "milliseconds")
        self.assertEqual(doc["hooks"]["BeforeTool"][1]["matcher"], "^(write_file|replace)$")
        self.assertEqual(self.install("--check", check=0).stdout, "")
        snap = self.snapshot()
        self.fresh()
        self.assertEqual(self.snapshot(), snap, "a second install writes nothing")
        del doc["hooks"]["AfterAgent"]
        doc["hooks"]["BeforeTool"][1]["hooks"][0]["timeout"] = 5
        self.write_json(self.REL, doc)
        out = self.install("--check", check=1).stdout
        self.assertIn("stale .gemini/settings.json (coord hooks: AfterAgent missing, BeforeTool stale)", out)
        self.install("--repair", check=0)
        self.assertEqual(self.settings(self.REL)["hooks"]["BeforeTool"][0], mine["hooks"]["BeforeTool"][0])
        self.assertEqual(self.install("--check", check=0).stdout, "")

    def test_settings_with_comments_are_refused_untouched(self):
        os.makedirs(self.t(".gemini"))
        text = '// my settings\n{"model": {"name": "x"}}\n'
        with open(self.t(self.REL), "w") as f:
            f.write(text)
        proc = self.install("--project-id", "demo", check=3)
        self.assertIn(".gemini/settings.json is not valid JSON", proc.stderr)
        self.assertEqual(_read(self.t(self.REL)).decode(), text)

    def test_the_command_runs_as_written_after_geminis_settings_time_expansion(self):
        # Gemini resolves $NAME in settings strings from its own environment when it loads them;
        # its PWD is wherever it was started, and any variable of the person's may share a name
        # with one of the script's. The resolved command must still find this repository's hook.
        self.fresh()
        command = self.coord_handlers(self.settings(self.REL))["SessionStart"][0]["command"]
        hostile = dict(os.environ, PWD="/", d="/", p="/bin/false", s="/bin/false", x="/", y="/bin/false",
                       b="/nowhere", XDG_DATA_HOME="/nowhere", COORD_PYTHON="/bin/false")
        resolved = gemini_resolve(command, hostile)
        self.assertEqual(resolved, command, "nothing in it is the loader's to replace")
        payload = {"session_id": "g-1", "cwd": self.target, "hook_event_name": "SessionStart", "source": "startup"}
        e = dict(self.env, PWD="/")
        for name in ("d", "p", "s", "x", "y", "b"):
            e.pop(name, None)
        proc = subprocess.run(["bash", "-c", resolved, "--harness"], input=json.dumps(payload), env=e,
                              cwd=self.target, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(proc.stderr, "")
        spec = json.loads(proc.stdout)["hookSpecificOutput"]
        self.assertEqual(spec["hookEventName"], "SessionStart")
        self.assertIn("coord: you are", spec["additionalContext"])

    def test_doctor_reports_the_folder_gate_and_switched_off_hooks_read_only(self):
        self.fresh()
        text = self.install("--doctor", check=0).stdout
        self.assertIn("gemini: hooks in .gemini/settings.json; folder NOT trusted", text)
        self.assertFalse(os.path.exists(os.path.join(self.home, ".gemini")), "doctor never trusts for the person")
        trusted = os.path.join(self.tmp, "trusted.json")
        with open(trusted, "w") as f:
            json.dump({os.path.dirname(os.path.realpath(self.target)) + "/x": "TRUST_PARENT"}, f)
        env = {"GEMINI_CLI_TRUSTED_FOLDERS_PATH": trusted}
        r = json.loads(self.install("--doctor", "--json", env=env, check=0).stdout)["gemini"]
        self.assertEqual((r["config"], r["trusted"], r["gate"], r["off"]), (trusted, True, True, []))
        with open(trusted, "w") as f:
            json.dump({os.path.dirname(os.path.realpath(self.target)): "TRUST_FOLDER",
                       os.path.realpath(self.target): "DO_NOT_TRUST"}, f)
        self.assertFalse(json.loads(self.install("--doctor", "--json", env=env, check=0).stdout)["gemini"]["trusted"],
                         "the longest rule decides")
        self.write_json(os.path.join(self.home, ".gemini", "settings.json"),
                        {"hooksConfig": {"disabled": ["coord"]}, "security": {"folderTrust": {"enabled": False}}})
        text = self.install("--doctor", env=env, check=0).stdout
        self.assertIn("gemini: hooks in .gemini/settings.json; hooks OFF: hooksConfig.disabled names coord", text)


class CommitLineTest(InstallTestCase):
    """An install or upgrade whose files are not committed prints the exact command that commits
    them, as `work create`'s refusal does (clones start from a commit)."""

    def commit_line(self, proc):
        lines = [l for l in proc.stdout.splitlines() if l.startswith("commit the installation before `work create`")]
        return lines[0].split(": ", 1)[1] if lines else None

    def test_install_then_upgrade_print_the_commit_command_until_it_is_run(self):
        self.use_jj(git_user=True)
        proc = self.install("--project-id", "demo", check=0)
        command = self.commit_line(proc)
        self.assertIsNotNone(command, proc.stdout)
        me = self.hello()["runtime"]
        refused = self.coord("work", "create", "early", runtime=me["id"], cwd=self.target)
        self.assertEqual(refused.returncode, 3, refused.stderr)
        self.assertIn(command, refused.stderr, "the same command as work create's refusal")
        subprocess.run(["/bin/sh", "-c", command], check=True, env=self.env, stdout=subprocess.DEVNULL, timeout=60)
        status = subprocess.run(["git", "-C", self.target, "status", "--porcelain"], env=self.env,
                                stdout=subprocess.PIPE, text=True, timeout=60).stdout
        self.assertEqual(status, "", "the printed command committed everything installed")
        self.assertIsNone(self.commit_line(self.install(check=0)), "nothing to commit, nothing changed: nothing said")
        self.assertEqual(self.coord("work", "create", "later", runtime=me["id"], cwd=self.target).returncode, 0)
        # An upgrade that changes a committed file says it again.
        with open(self.t(".coord", "VERSION"), "w") as f:
            f.write("0.0.1\n")
        subprocess.run(["git", "-C", self.target, "commit", "-qam", "older"], check=True, env=self.env, timeout=60)
        again = self.commit_line(self.install(check=0))
        self.assertEqual(again, command)


class FinishedClonesTest(InstallTestCase):
    """Install and --doctor list the live clones whose .coord/ needs an update; a finished work
    (landed, integrated, closed, archived) is listed apart, as needing none."""

    def clone(self, st, task, state="active", data=None):
        path = os.path.realpath(os.path.join(self.tmp, "%s.clone" % task))
        os.makedirs(os.path.join(path, ".jj"))
        os.makedirs(os.path.join(path, ".coord"))
        with open(os.path.join(path, ".coord", "VERSION"), "w") as f:
            f.write("0.0.1\n")
        with st.transaction():
            w = st.insert_work(task, state, "t" * 64, path=path, source=os.path.realpath(self.target), data=data)
        with open(os.path.join(path, ".jj", "coord-owner"), "w") as f:
            json.dump({"work": w["id"], "token": "t" * 64}, f)
        return w["handle"]

    def test_landed_integrated_closed_and_archived_works_are_not_to_update(self):
        self.fresh()
        st = store.Store(self.db, environ=self.env)
        self.addCleanup(st.close)
        live = self.clone(st, "live")
        done = [self.clone(st, "landed", data={"landing": {"state": "landed"}}),
                self.clone(st, "integrated", data={"integration": {"state": "integrated"}}),
                self.clone(st, "closed", state="closed"), self.clone(st, "archived", state="archived")]
        r = json.loads(self.install("--doctor", "--json", check=None).stdout)
        self.assertEqual([c["handle"] for c in r["clone_upgrades"]], [live])
        self.assertEqual([c["handle"] for c in r["clone_upgrades_finished"]], done)
        for proc in (self.install(check=0), self.install("--doctor", check=None)):
            listed = [l for l in proc.stdout.splitlines() if l.startswith("  ") and "jj rebase" in l]
            self.assertEqual([l.split()[0] for l in listed], [live], proc.stdout)
            apart = [l for l in proc.stdout.splitlines() if "finished work(s) need no update" in l]
            self.assertEqual(len(apart), 1, proc.stdout)
            for handle in done:
                self.assertIn(handle, apart[0])


if __name__ == "__main__":
    import unittest
    unittest.main()


class QwenSettingsTest(InstallTestCase):
    """Qwen Code (0.24.4) reads coord's hooks from .qwen/settings.json, Claude-shaped, merged
    with the person's own settings and hooks (Qwen's non-event keys inside "hooks" included)."""

    QWEN = ".qwen/settings.json"

    def coord_groups(self, doc):
        return {ev: [g for g in groups if any(".coord/hook.py" in h.get("command", "") for h in g["hooks"])]
                for ev, groups in doc["hooks"].items() if ev not in installer.QWEN_HOOK_FIELDS}

    def test_fresh_install_writes_qwens_hooks(self):
        self.fresh()
        own = self.coord_groups(self.settings(self.QWEN))
        self.assertEqual(sorted(own), sorted(ev for ev, _m, _t in installer.QWEN_HOOK_EVENTS))
        for event, groups in own.items():
            self.assertEqual(len(groups), 1, event)
            self.assertEqual(groups[0]["hooks"][0]["command"], installer.hook_command("qwen"))
            self.assertIn("--harness qwen", groups[0]["hooks"][0]["command"])
            self.assertIn("${QWEN_PROJECT_DIR:-$PWD}", groups[0]["hooks"][0]["command"])
        self.assertEqual(own["PreToolUse"][0]["matcher"], "^(write_file|edit|notebook_edit)$")
        self.assertNotIn("matcher", own["PostToolUse"][0])

    def test_merge_keeps_the_persons_settings_and_hooks_and_check_and_repair_see_drift(self):
        mine = {"model": {"name": "qwen3-coder"}, "disableAllHooks": False,
                "hooks": {"enabled": True, "disabled": ["lint"], "notifications": {"x": 1},
                          "PreToolUse": [{"matcher": "run_shell_command", "hooks": [
                              {"type": "command", "command": "lint", "name": "lint"}]}]}}
        self.write_json(self.QWEN, mine)
        self.fresh()
        doc = self.settings(self.QWEN)
        self.assertEqual(doc["model"], mine["model"])
        for key in ("enabled", "disabled", "notifications"):
            self.assertEqual(doc["hooks"][key], mine["hooks"][key])
        self.assertEqual(doc["hooks"]["PreToolUse"][0], mine["hooks"]["PreToolUse"][0])
        self.assertEqual(len(self.coord_groups(doc)["PreToolUse"]), 1)
        before = self.snapshot()
        self.fresh()
        self.assertEqual(self.snapshot(), before, "a second run is a no-op")
        doc["hooks"]["PreToolUse"][1]["matcher"] = "edit"
        self.write_json(self.QWEN, doc)
        out = self.install("--check", check=1).stdout
        self.assertIn("stale %s (coord hooks: PreToolUse stale)" % self.QWEN, out)
        self.install("--repair", check=0)
        self.assertEqual(self.coord_groups(self.settings(self.QWEN))["PreToolUse"][0]["matcher"],
                         "^(write_file|edit|notebook_edit)$")
        self.assertEqual(self.settings(self.QWEN)["hooks"]["disabled"], ["lint"])

    def test_the_installed_file_carries_qwens_settings_version_and_check_sees_it_missing(self):
        # Qwen Code 0.24.4 appends "$version": 4 to a settings file without it when it loads it
        # (tests/e2e_qwen.py runs the real Qwen): coord writes it so, and --check names it missing
        self.fresh()
        with open(self.t(self.QWEN), "rb") as f:
            installed = f.read()
        self.assertTrue(installed.endswith(b'  },\n  "$version": 4\n}\n'), installed[-60:])
        doc = self.settings(self.QWEN)
        del doc["$version"]
        self.write_json(self.QWEN, doc)
        out = self.install("--check", check=1).stdout
        self.assertIn('stale %s (no "$version": 4' % self.QWEN, out)
        self.install("--repair", check=0)
        with open(self.t(self.QWEN), "rb") as f:
            self.assertEqual(f.read(), installed)
        # a newer Qwen's version is Qwen's: kept where it is
        self.write_json(self.QWEN, dict([("$version", 5)] + list(self.settings(self.QWEN).items())[:-1]))
        self.install("--check", check=0)

    def test_a_settings_file_that_is_not_plain_json_is_refused_untouched(self):
        os.makedirs(self.t(".qwen"))
        with open(self.t(self.QWEN), "w") as f:
            f.write('{\n  // Qwen accepts comments; coord does not rewrite them\n  "model": {}\n}\n')
        before = _read(self.t(self.QWEN))
        proc = self.install("--project-id", "demo", check=3)
        self.assertIn(".qwen/settings.json is not valid JSON", proc.stdout + proc.stderr)
        self.assertEqual(_read(self.t(self.QWEN)), before)

    def test_doctor_reports_the_folder_trust_gate_and_disable_all_hooks(self):
        self.fresh()
        qhome = os.path.join(self.home, ".qwen")
        os.makedirs(qhome)

        def doctor():
            return json.loads(self.install("--doctor", "--json").stdout)["qwen"]
        q = doctor()
        self.assertEqual((q["gate"], q["trusted"], q["hooks_disabled_by"]), (False, True, []))
        with open(os.path.join(qhome, "settings.json"), "w") as f:
            json.dump({"security": {"folderTrust": {"enabled": True}}, "disableAllHooks": True}, f)
        q = doctor()
        self.assertEqual((q["gate"], q["trusted"]), (True, False))
        self.assertEqual(q["hooks_disabled_by"], [os.path.join(qhome, "settings.json")])
        self.assertIn("qwen: hooks in .qwen/settings.json; folder NOT trusted", self.install("--doctor").stdout)
        with open(os.path.join(qhome, "trustedFolders.json"), "w") as f:
            json.dump({os.path.join(os.path.realpath(self.target), "x"): "TRUST_PARENT"}, f)
        self.assertEqual(doctor()["trusted"], True, "TRUST_PARENT of a child trusts its parent")
        with open(os.path.join(qhome, "trustedFolders.json"), "w") as f:
            json.dump({os.path.dirname(os.path.realpath(self.target)): "TRUST_FOLDER",
                       os.path.realpath(self.target): "DO_NOT_TRUST"}, f)
        self.assertEqual(doctor()["trusted"], False, "the deepest rule wins")


# --------------------------------------------------------------------------- a PostgreSQL project (issue 25, pgroute)

class DroidHooksTest(InstallTestCase):
    """Factory Droid (0.225.2) reads .factory/hooks.json keyed by event at the top level: coord's
    entries merged with the person's own, checked and repaired like the others."""

    DROID = ".factory/hooks.json"

    def coord_groups(self, doc):
        return {ev: [g for g in groups if any(".coord/hook.py" in h.get("command", "") for h in g["hooks"])]
                for ev, groups in doc.items()}

    def test_fresh_install_writes_the_events_at_the_top_level(self):
        self.fresh()
        doc = self.settings(self.DROID)
        self.assertNotIn("hooks", doc)  # Droid would ignore it as an unknown event
        own = self.coord_groups(doc)
        self.assertEqual(sorted(own), sorted(ev for ev, _m, _t in installer.DROID_HOOK_EVENTS))
        for event, groups in own.items():
            self.assertEqual(len(groups), 1, event)
            command = groups[0]["hooks"][0]["command"]
            self.assertEqual(command, installer.hook_command("droid"))
            self.assertIn("--harness droid", command)
            self.assertIn("${FACTORY_PROJECT_DIR:-$PWD}", command)
        self.assertEqual(own["PreToolUse"][0]["matcher"], "^(Create|Edit|MultiEdit|ApplyPatch)$")
        self.assertNotIn("PermissionRequest", doc)
        self.assertEqual(self.install("--check", check=0).returncode, 0)

    def test_merge_keeps_the_persons_hooks_and_check_and_repair_see_drift(self):
        mine = {"PreToolUse": [{"matcher": "Execute", "hooks": [{"type": "command", "command": "lint"}]}],
                "Notification": [{"hooks": [{"type": "command", "command": "notify-send droid"}]}]}
        self.write_json(self.DROID, mine)
        self.fresh()
        doc = self.settings(self.DROID)
        self.assertEqual(doc["PreToolUse"][0], mine["PreToolUse"][0])
        self.assertEqual(doc["Notification"], mine["Notification"])
        self.assertEqual(len(self.coord_groups(doc)["PreToolUse"]), 1)
        before = self.snapshot()
        self.fresh()
        self.assertEqual(self.snapshot(), before, "a second run is a no-op")
        doc["PreToolUse"][1]["matcher"] = "Edit"
        self.write_json(self.DROID, doc)
        out = self.install("--check", check=1).stdout
        self.assertIn("stale %s (coord hooks: PreToolUse stale)" % self.DROID, out)
        self.install("--repair", check=0)
        doc = self.settings(self.DROID)
        self.assertEqual(self.coord_groups(doc)["PreToolUse"][0]["matcher"], "^(Create|Edit|MultiEdit|ApplyPatch)$")
        self.assertEqual(doc["Notification"], mine["Notification"])

    def test_a_file_of_the_wrong_shape_is_refused_with_nothing_changed(self):
        self.write_json(self.DROID, {"PreToolUse": {"matcher": "x"}})
        with open(self.t(self.DROID), "rb") as f:
            before = f.read()
        out = self.install("--project-id", "p", check=3)
        self.assertIn('%s has an unexpected shape: "PreToolUse" is not a list' % self.DROID, out.stdout + out.stderr)
        with open(self.t(self.DROID), "rb") as f:
            self.assertEqual(f.read(), before)


class AuggieSettingsTest(InstallTestCase):
    """Auggie (0.36.0) runs a handler's command without a shell: coord's is /bin/sh with the script
    as its argument, merged into .augment/settings.json beside the person's settings and hooks."""

    AUGGIE = ".augment/settings.json"

    def test_the_handler_is_sh_with_the_script_and_the_persons_entries_stay(self):
        mine = {"indexingAllowDirs": ["/src"], "hooks": {"PreToolUse": [{"matcher": "launch-process", "hooks": [
            {"type": "command", "command": "/usr/local/bin/lint", "args": ["--strict"], "timeout": 500}]}]}}
        self.write_json(self.AUGGIE, mine)
        self.fresh()
        doc = self.settings(self.AUGGIE)
        self.assertEqual(doc["indexingAllowDirs"], ["/src"])
        self.assertEqual(doc["hooks"]["PreToolUse"][0], mine["hooks"]["PreToolUse"][0])
        self.assertEqual(sorted(doc["hooks"]), sorted(ev for ev, _m, _t in installer.AUGGIE_HOOK_EVENTS))
        handler = doc["hooks"]["PreToolUse"][1]["hooks"][0]
        self.assertEqual((handler["command"], handler["args"][0]), ("/bin/sh", "-c"))
        self.assertEqual(handler["args"][1], installer.hook_command("auggie"))
        self.assertIn("--harness auggie", handler["args"][1])
        self.assertEqual(doc["hooks"]["PreToolUse"][1]["matcher"], "^(save-file|str-replace-editor|apply_patch|remove-files)$")
        before = self.snapshot()
        self.fresh()
        self.assertEqual(self.snapshot(), before, "a second run is a no-op")
        doc["hooks"]["SessionStart"][0]["hooks"][0]["args"][1] += " "
        self.write_json(self.AUGGIE, doc)
        self.assertIn("stale %s (coord hooks: SessionStart stale)" % self.AUGGIE, self.install("--check", check=1).stdout)
        self.install("--repair", check=0)
        self.assertEqual(self.settings(self.AUGGIE)["hooks"]["PreToolUse"][0], mine["hooks"]["PreToolUse"][0])


class PgDoctorTest(InstallTestCase):
    """--doctor on a project in PostgreSQL: the host process (state, round trip), the driver in
    the interpreter that runs it (missing: exit 1 and the exact install command), and what
    Codex's sandbox needs to reach the socket."""

    def setUp(self):
        super().setUp()
        self.server, self.psycopg = support.require_postgres(self)
        self.env.update({"COORD_DB": "", "COORD_PROJECT_ID": "", "PYTHONPATH": support.psycopg_dir(),
                         "COORD_PYTHON": sys.executable})  # the interpreter whose psycopg PYTHONPATH names
        # The project set up by coord db setup, the host as its own login role: a clean doctor.
        self.url = support.pg_login_url(self, self.server, "pgdoc", self.psycopg)
        self.fresh("pgdoc")
        store.write_project_url("pgdoc", self.url, self.env)
        self.sock = hostclient.project_host_socket("pgdoc", self.env)
        self.addCleanup(support.stop_host_process, self.sock)
        self.addCleanup(self._drop, self.server)

    def _drop(self, server):
        with self.psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute('DROP SCHEMA IF EXISTS "%s" CASCADE' % pg.pg_schema("pgdoc"))

    def doctor(self, check=None, env=None):
        return json.loads(self.install("--doctor", "--json", check=check, env=env).stdout)

    def test_the_host_process_file_is_shipped_verbatim(self):
        for where in (self.t(".coord", "host.py"),):
            self.assertEqual(_read(where), _read(os.path.join(self.src, "host.py")))

    def test_doctor_reports_the_host_process_and_the_driver(self):
        db = self.doctor(check=0)["database"]
        self.assertEqual((db["engine"], db["project"], db["host"]["running"]), ("postgresql", "pgdoc", False))
        self.assertTrue(db["driver"]["ok"], db["driver"])
        text = self.install("--doctor", check=0).stdout
        self.assertIn("database: PostgreSQL, project pgdoc (URL in %s)" % store.project_url_path("pgdoc", self.env), text)
        self.assertIn("host process: not running", text)
        hostclient.start_host("pgdoc", self.url, self.sock, environ=self.env)
        db = self.doctor(check=0)["database"]
        self.assertTrue(db["host"]["running"])
        self.assertIsInstance(db["host"]["round_trip_ms"], float)
        self.assertRegex(self.install("--doctor", check=0).stdout, r"host process: running \(pid \d+, round trip [\d.]+ ms\)")

    def test_doctor_fails_without_the_driver_and_names_the_install_command(self):
        env = {"PYTHONPATH": os.path.join(self.tmp, "nothing")}
        db = self.doctor(check=1, env=env)["database"]
        self.assertFalse(db["driver"]["ok"])
        text = self.install("--doctor", check=1, env=env).stdout
        self.assertRegex(text, r"postgresql driver: MISSING in \S+; install it: \S+ -m pip install --upgrade --target "
                               r"\S+/fleet-agent-coord/driver/python3\.\d+ 'psycopg\[binary\]==3\.(3\.9|2\.13)'")

    def test_codex_s_sandbox_needs_network_access_for_the_socket(self):
        config = os.path.join(self.codex_home, "config.toml")
        with open(config, "w") as f:
            f.write('sandbox_mode = "workspace-write"\n')
        self.assertFalse(self.doctor(check=0)["codex"]["sandbox"]["ok"])
        text = self.install("--doctor", check=0).stdout
        self.assertIn("cannot connect to the host process's socket", text)
        self.assertIn("coord's hooks (outside the sandbox) still check every write", text)
        self.assertIn("(it opens every network address to the agent):\n[sandbox_workspace_write]\nnetwork_access = true", text)
        with open(config, "w") as f:
            f.write('sandbox_mode = "workspace-write"\n\n[sandbox_workspace_write]\nnetwork_access = true\n')
        self.assertTrue(self.doctor(check=0)["codex"]["sandbox"]["ok"])
        self.assertIn("the database server included, with this host's URL (%s is readable in the sandbox)"
                      % store.project_url_path("pgdoc", self.env), self.install("--doctor", check=0).stdout)

    def test_doctor_shows_the_database_security_checks_of_the_host_process(self):
        db = self.doctor(check=0)["database"]
        self.assertIsNone(db["security"], "not checked while the host process is down")
        self.assertIn("database security: not checked (the host process is not running: .coord/coord db start",
                      self.install("--doctor", check=0).stdout)
        hostclient.start_host("pgdoc", self.url, self.sock, environ=self.env)
        checks = self.doctor(check=0)["database"]["security"]
        self.assertEqual([c for c in checks if not c["ok"]], [], "a login role of a set-up project is clean")
        text = self.install("--doctor", check=0).stdout
        self.assertRegex(text, r"database security: database role host_pgdoc: not a superuser, not the owner")
        self.assertIn("database security: row-level security forced on every table of coord_pgdoc", text)
        self.assertIn("database security: TLS: not required (a Unix socket on this host)", text)
        self.assertRegex(text, r"database security: wake-ups: NOTIFY coord_wake_[0-9a-f]{24} with no payload")
        self.assertIn("database security: transaction bounds: idle in transaction 5 s, lock 8 s, statement 8 s;"
                      " a holder stuck 4 s is ended by every host", text)

    def coord(self, *args, **extra):
        proc = subprocess.run([self.t(".coord", "coord")] + list(args), cwd=self.target, env=dict(self.env, **extra),
                              text=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=120)
        self.assertEqual(proc.returncode, 0, "%s\n%s" % (args, proc.stderr))
        return proc.stdout

    def test_a_login_role_may_only_append_to_the_audit_and_the_messages(self):
        agent = json.loads(self.coord("hello", "--conversation", "c1", "--json"))["runtime"]
        self.coord("claim", "src/a.py", COORD_RUNTIME_ID=agent["id"])
        self.coord("send", "first", "--to", agent["handle"], COORD_RUNTIME_ID=agent["id"])
        schema = pg.pg_ident(pg.pg_schema("pgdoc"))
        with self.psycopg.connect(self.url, autocommit=True) as conn:  # the host's own login role, directly
            for sql in ("DELETE FROM %s.audit", "UPDATE %s.audit SET event = 'x'", "TRUNCATE %s.audit",
                        "DELETE FROM %s.messages", "UPDATE %s.messages SET body = 'x'"):
                with self.assertRaises(self.psycopg.errors.InsufficientPrivilege, msg=sql):
                    conn.execute(sql % schema)
        # coord still works as that role: a release, another claim and send, the export.
        self.coord("release", "src/a.py", COORD_RUNTIME_ID=agent["id"])
        self.coord("claim", "src/b.py", COORD_RUNTIME_ID=agent["id"])
        self.coord("send", "second", "--to", agent["handle"], COORD_RUNTIME_ID=agent["id"])
        events = [json.loads(l)["event"] for l in self.coord("audit").splitlines()]
        self.assertEqual(events.count("lease.claimed"), 2, events)
        self.assertEqual(events.count("message.sent"), 2, events)
        self.assertEqual([c for c in self.doctor(check=0)["database"]["security"] if not c["ok"]], [])
        # An older setup's grants: --doctor names them and the command that takes them back.
        group = pg.pg_ident(pg.pg_role_names("pgdoc")["group"])
        with self.psycopg.connect(self.server.dsn(), autocommit=True) as conn:
            conn.execute("GRANT UPDATE, DELETE ON %s.audit, %s.messages TO %s" % (schema, schema, group))
        text = self.install("--doctor", check=1).stdout
        self.assertRegex(text, r"database security: PROBLEM: role host_pgdoc may rewrite audit and messages \(an older"
                               r" setup's grants\): a person with admin rights runs \S*coord db setup")
        pg.pg_setup(self.server.dsn(), "pgdoc", [])
        self.assertIn("database security: append only: audit, messages", self.install("--doctor", check=0).stdout)

    # --doctor's security exit status (issue 25, pgcodex)
    def test_a_failed_security_check_makes_doctor_exit_1_and_names_the_fix(self):
        # The same project, its host connected as the server's superuser: the role check fails.
        store.write_project_url("pgdoc", support.pg_url(self.server), self.env)
        hostclient.start_host("pgdoc", support.pg_url(self.server), self.sock, environ=self.env)
        checks = self.doctor(check=1)["database"]["security"]
        self.assertEqual([c["line"].split(":")[0] for c in checks if not c["ok"]], ["database role coord is a superuser"])
        text = self.install("--doctor", check=1).stdout
        self.assertRegex(text, r"database security: PROBLEM: database role coord is a superuser: give this host"
                               r" its own login role \(a person with admin rights runs: \S*coord db setup --login ROLE\)")
        self.assertIn("database security: row-level security forced on every table of coord_pgdoc", text)

    def test_a_state_directory_the_sandbox_can_write_is_a_problem(self):
        # There an agent could remove the host process's socket (every hook then fails open) or
        # replace it, rewrite the safe-mode file or the project's URL.
        state = os.path.dirname(self.sock)
        config = os.path.join(self.codex_home, "config.toml")
        with open(config, "w") as f:
            f.write('sandbox_mode = "workspace-write"\n\n[sandbox_workspace_write]\nexclude_slash_tmp = true\n'
                    'exclude_tmpdir_env_var = true\nwritable_roots = [%s]\n' % json.dumps(state))
        self.assertEqual(self.doctor(check=0)["codex"]["sandbox"]["state_writable"], ["writable root %s" % state])
        text = self.install("--doctor", check=0).stdout
        self.assertIn("codex sandbox: PROBLEM: the state directory %s is writable in the sandbox (writable root %s):"
                      " an agent there could remove or replace the host process's socket" % (state, state), text)
        self.assertIn("a person sets XDG_STATE_HOME to a directory no agent can write", text)
        with open(config, "w") as f:
            f.write('sandbox_mode = "workspace-write"\n\n[sandbox_workspace_write]\nexclude_slash_tmp = true\n'
                    'exclude_tmpdir_env_var = true\n')
        self.assertEqual(self.doctor(check=0)["codex"]["sandbox"]["state_writable"], [])
        self.assertNotIn("the state directory", self.install("--doctor", check=0).stdout)

    def test_tls_is_not_required_on_a_unix_socket_or_loopback_and_the_line_says_which(self):
        self.assertEqual(pg.pg_local_kind("host=/run/postgresql dbname=x", {}), "a Unix socket on this host")
        self.assertEqual(pg.pg_local_kind("dbname=x", {}), "a Unix socket on this host")
        self.assertEqual(pg.pg_local_kind("postgresql://u@127.0.0.1:5432/x", {}), "loopback 127.0.0.1 on this host")
        self.assertEqual(pg.pg_local_kind("postgresql://u@localhost/x", {}), "loopback localhost on this host")
