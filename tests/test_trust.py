"""trust.py: carrying a person's harness approvals over to managed clones, with real config files.

The Claude Code config is edited by coord itself; the Codex config through the real
`codex app-server` (config/batchWrite), so those tests need the pinned Codex CLI.
"""

import json
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses  # noqa: E402
import support  # noqa: E402

import trust  # noqa: E402

INSTALL = os.path.join(support.ROOT, "install")

# A Claude Code config as Claude writes it (JSON.stringify with two spaces), with a person's
# own entries around the one coord adds.
CLAUDE_JSON = """{
  "numStartups": 12,
  "theme": "dark",
  "projects": {
    "/home/user/other": {
      "allowedTools": [],
      "hasTrustDialogAccepted": true,
      "lastCost": 0.25
    },
    "%(shared)s": {
      "allowedTools": [],
      "hasTrustDialogAccepted": %(trusted)s
    }
  },
  "userID": "abc\\u00e9"
}
"""

CODEX_CONFIG = """# the person's own notes
model = "gpt-5.5"   # keep
approval_policy = "never"

[projects."/home/user/other"]
trust_level = "trusted"
%(project)s
[tui]
theme = 'dark'
%(hooks)s"""


class TrustCase(support.CoordTestCase):
    """Two installed checkouts (the shared one and a clone of it) and private harness configs."""

    def setUp(self):
        super().setUp()
        support.require_tool(self, "git")
        self.codex_home = os.path.join(self.tmp, "codex-home")
        os.makedirs(self.codex_home)
        self.env.update({"CODEX_HOME": self.codex_home, "XDG_CONFIG_HOME": os.path.join(self.tmp, "config")})
        os.environ.update(self.env)
        self.shared = self.installed("shared")
        self.clone = self.installed("clone.1234")
        self.claude_json = os.path.join(self.home, ".claude.json")
        self.codex_toml = os.path.join(self.codex_home, "config.toml")

    def installed(self, name):
        path = os.path.join(self.tmp, name)
        subprocess.run(["git", "init", "-q", path], check=True, env=self.env)
        proc = subprocess.run([sys.executable, INSTALL, path, "--project-id", "test-project"], env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return os.path.realpath(path)

    def write(self, path, text):
        with open(path, "w") as f:
            f.write(text)
        with open(path, "rb") as f:
            return f.read()

    def read(self, path):
        with open(path, "rb") as f:
            return f.read()

    def claude(self, trusted=True):
        return self.write(self.claude_json, CLAUDE_JSON % {"shared": self.shared,
                                                           "trusted": "true" if trusted else "false"})

    def codex(self, project=True, hashes=None):
        """The person's Codex config: the shared checkout trusted (or not) and `hashes`
        ({state key: hash}) approved; -> its bytes."""
        hooks = "".join('\n[hooks.state."%s"]\ntrusted_hash = "%s"\n' % (k, v) for k, v in sorted((hashes or {}).items()))
        project = '\n[projects."%s"]\ntrust_level = "trusted"\n' % self.shared if project else ""
        return self.write(self.codex_toml, CODEX_CONFIG % {"project": project, "hooks": hooks})

    def shared_hashes(self):
        return harnesses.codex_hook_hashes(os.path.join(self.shared, ".codex", "hooks.json"))

    def assert_only_insertions(self, before, after):
        """`after` is `before` with text added and not a byte of it changed or taken away."""
        import difflib
        ops = difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes()
        self.assertEqual([op for op in ops if op[0] not in ("equal", "insert")], [], after)
        self.assertGreater(len(after), len(before))

    def need_codex(self):
        path = harnesses.require_cli(self, "codex")
        self.env["PATH"] = os.path.dirname(path) + os.pathsep + self.env.get("PATH", "")
        os.environ.update(self.env)


class ClaudeCarryTest(TrustCase):

    def test_entry_added_beside_the_persons_and_removal_gives_back_every_byte(self):
        before = self.claude()
        result = trust.carry_over(self.shared, self.clone, self.env, ("claude",))
        self.assertEqual(result["notes"], [])
        self.assertEqual(result["added"]["claude"]["project"], self.clone)
        after = json.loads(self.read(self.claude_json).decode("utf-8"))
        self.assertEqual(after["projects"][self.clone], {"hasTrustDialogAccepted": True})
        old = json.loads(before.decode("utf-8"))
        del after["projects"][self.clone]
        self.assertEqual(after, old, "every other entry keeps its value")
        self.assert_only_insertions(before, self.read(self.claude_json))
        self.assertEqual(trust.remove_carried(result["added"], self.env), [])
        self.assertEqual(self.read(self.claude_json), before)

    def test_untrusted_shared_checkout_carries_nothing(self):
        before = self.claude(trusted=False)
        result = trust.carry_over(self.shared, self.clone, self.env, ("claude",))
        self.assertEqual(result, {"added": {}, "notes": []})
        self.assertEqual(self.read(self.claude_json), before)
        self.assertIn("Claude Code: accept the trust dialog for %s" % self.clone,
                      trust.pending_approvals(self.shared, self.clone, "claude", self.env)[0])

    def test_a_clone_already_trusted_is_left_alone(self):
        # Claude Code trusts a directory when it or any ancestor is trusted.
        text = CLAUDE_JSON % {"shared": self.shared, "trusted": "true"}
        doc = json.loads(text)
        doc["projects"][os.path.dirname(self.clone)] = {"hasTrustDialogAccepted": True}
        before = self.write(self.claude_json, json.dumps(doc, indent=2))
        self.assertEqual(trust.carry_over(self.shared, self.clone, self.env, ("claude",))["added"], {})
        self.assertEqual(self.read(self.claude_json), before)
        self.assertEqual(trust.pending_approvals(self.shared, self.clone, "claude", self.env), [])

    def test_unreadable_config_is_never_edited(self):
        before = self.write(self.claude_json, '{"projects": {"%s": {"hasTrustDialogAccepted": true}}' % self.shared)
        result = trust.carry_over(self.shared, self.clone, self.env, ("claude",))
        self.assertEqual(result["added"], {})
        self.assertIn("not valid JSON", result["notes"][0])
        self.assertEqual(self.read(self.claude_json), before)

    def test_textual_edit_round_trips_every_shape(self):
        for text in ('{}', '{}\n', '{\n  "a": 1\n}\n', '{\n  "projects": {}\n}', '{"a":1,"projects":{"/x":{"k":1}}}',
                     '{\n    "projects": {\n        "/x": {\n            "k": [1, 2]\n        }\n    }\n}\n'):
            new, made = trust._claude_insert(text, "/tmp/c.1")
            self.assertEqual(json.loads(new)["projects"]["/tmp/c.1"], {"hasTrustDialogAccepted": True}, new)
            self.assertEqual(trust._claude_remove(new, "/tmp/c.1", made), text, new)


class ClaudeConfigSharingTest(TrustCase):
    """~/.claude.json is the user's and Claude Code's: a dotfiles symlink stays a symlink, and
    Claude Code's own lock (proper-lockfile's `~/.claude.json.lock` directory) is honoured."""

    def test_a_symlinked_config_is_edited_through_the_link(self):
        target = os.path.join(self.tmp, "dotfiles", "claude.json")
        os.makedirs(os.path.dirname(target))
        self.claude()
        os.rename(self.claude_json, target)
        os.symlink(target, self.claude_json)
        result = trust.carry_over(self.shared, self.clone, self.env, ("claude",))
        self.assertEqual(result["notes"], [])
        self.assertTrue(os.path.islink(self.claude_json), "the link was replaced by a file")
        with open(target) as f:
            self.assertIn(self.clone, json.load(f)["projects"])

    def test_entries_survive_a_writer_that_takes_claudes_lock(self):
        self.claude()
        stop = os.path.join(self.tmp, "stop")
        # Claude Code's way: mkdir the lock, read, think, write its whole config back, rmdir.
        writer = subprocess.Popen([sys.executable, "-c", """
import json, os, sys, time
path, stop = sys.argv[1:3]
n = 0
while not os.path.exists(stop) and n < 2000:
    try:
        os.mkdir(path + ".lock")
    except FileExistsError:
        time.sleep(0.001)
        continue
    try:
        with open(path) as f:
            doc = json.load(f)
        time.sleep(0.01)
        doc["numStartups"] = doc.get("numStartups", 0) + 1
        with open(path + ".tmp", "w") as f:
            json.dump(doc, f)
        os.replace(path + ".tmp", path)
    finally:
        os.rmdir(path + ".lock")
    n += 1
    time.sleep(0.002)
""", self.claude_json, stop])
        clones = []
        try:
            for i in range(6):
                clone = self.installed("clone.race%d" % i)
                result = trust.carry_over(self.shared, clone, self.env, ("claude",))
                self.assertEqual(result["notes"], [])
                clones.append(clone)
        finally:
            with open(stop, "w"):
                pass
            writer.wait(timeout=60)
        with open(self.claude_json) as f:
            doc = json.load(f)
        self.assertGreater(doc.get("numStartups", 0), 0, "the writer ran")
        self.assertEqual([c for c in clones if c not in doc["projects"]], [], "every carried entry survived")


class CodexCarryTest(TrustCase):

    def test_only_hooks_approved_at_the_identical_hash_are_carried_and_removal_restores(self):
        self.need_codex()
        approved = self.shared_hashes()
        stale = sorted(approved)[0]  # approved once, but the command has changed since
        approved[stale] = "sha256:" + "0" * 64
        before = self.codex(hashes=approved)
        result = trust.carry_over(self.shared, self.clone, self.env, ("codex",))
        self.assertEqual(result["notes"], [])
        added = result["added"]["codex"]
        self.assertEqual(added["project"], self.clone)
        clone_hashes = harnesses.codex_hook_hashes(os.path.join(self.clone, ".codex", "hooks.json"))
        skipped = stale.replace(self.shared, self.clone, 1)
        self.assertEqual(sorted(added["hooks"]), sorted(k for k in clone_hashes if k != skipped))
        for key, digest in added["hooks"].items():
            self.assertEqual(digest, clone_hashes[key])
        text = self.read(self.codex_toml).decode("utf-8")
        self.assert_only_insertions(before, self.read(self.codex_toml))
        self.assertNotIn(skipped, text)
        status = trust.codex_status(self.clone, trust.read_codex_config(self.env))
        self.assertTrue(status["project_trusted"])
        self.assertEqual(status["untrusted"], [skipped])
        self.assertEqual(len(trust.pending_approvals(self.shared, self.clone, "codex", self.env)), 1)
        self.assertEqual(trust.remove_carried(result["added"], self.env), [])
        self.assertEqual(self.read(self.codex_toml), before)

    def test_a_command_that_runs_the_checkouts_own_files_is_never_carried(self):
        # 0.3.0's command ran the clone's own .coord/hook.py: an identical command there is not
        # identical code (the clone's agent can edit it), so its approval is not carried over.
        self.need_codex()
        for checkout in (self.shared, self.clone):
            path = os.path.join(checkout, ".codex", "hooks.json")
            with open(path) as f:
                doc = json.load(f)
            for groups in doc["hooks"].values():
                for group in groups:
                    for handler in group["hooks"]:
                        handler["command"] = 'python3 "$PWD/.coord/hook.py" --harness codex'
            with open(path, "w") as f:
                json.dump(doc, f)
        before = self.codex(hashes=self.shared_hashes())
        result = trust.carry_over(self.shared, self.clone, self.env, ("codex",))
        self.assertEqual(result["added"]["codex"]["project"], self.clone)
        self.assertEqual(result["added"]["codex"]["hooks"], {})
        self.assert_only_insertions(before, self.read(self.codex_toml))
        status = trust.codex_status(self.clone, trust.read_codex_config(self.env))
        self.assertEqual(status["trusted"], 0)
        self.assertEqual(len(status["untrusted"]), len(self.shared_hashes()))

    def test_untrusted_shared_project_carries_nothing(self):
        before = self.codex(project=False, hashes=self.shared_hashes())
        result = trust.carry_over(self.shared, self.clone, self.env, ("codex",))
        self.assertEqual(result, {"added": {}, "notes": []})
        self.assertEqual(self.read(self.codex_toml), before)
        pending = "\n".join(trust.pending_approvals(self.shared, self.clone, "codex", self.env))
        self.assertIn("trust the project %s" % self.clone, pending)
        self.assertIn("/hooks", pending)


class GeminiCarryTest(TrustCase):
    """Gemini CLI 0.61.0 keys folder trust by path in ~/.gemini/trustedFolders.json
    ({"<path>": "TRUST_FOLDER" | "TRUST_PARENT" | "DO_NOT_TRUST"}, the longest rule wins)."""

    def setUp(self):
        super().setUp()
        self.folders = os.path.join(self.home, ".gemini", "trustedFolders.json")
        os.makedirs(os.path.dirname(self.folders))

    def gemini(self, doc):
        return self.write(self.folders, json.dumps(doc, indent=2))

    def test_entry_added_beside_the_persons_and_removal_gives_back_every_byte(self):
        before = self.gemini({self.shared: "TRUST_FOLDER", "/elsewhere": "DO_NOT_TRUST"})
        self.assertEqual(trust.pending_approvals(self.shared, self.clone, "gemini", self.env),
                         ["Gemini CLI: trust the folder %s when Gemini asks (untrusted, it loads no project settings: "
                          "no hooks, so no registration, no messages, no write blocking)" % self.clone])
        result = trust.carry_over(self.shared, self.clone, self.env, ("gemini",))
        self.assertEqual(result, {"added": {"gemini": {"config": self.folders, "project": self.clone}}, "notes": []})
        self.assertEqual(json.loads(self.read(self.folders).decode()),
                         {self.shared: "TRUST_FOLDER", "/elsewhere": "DO_NOT_TRUST", self.clone: "TRUST_FOLDER"})
        self.assertEqual(trust.pending_approvals(self.shared, self.clone, "gemini", self.env), [])
        self.assertEqual(trust.entries_for(self.clone, self.env)["gemini"]["project"], self.clone)
        self.assertEqual(trust.remove_carried(result["added"], self.env), [])
        self.assertEqual(self.read(self.folders), before)
        # never what the person has not given, never what already covers the clone
        parent = os.path.dirname(self.clone)
        for doc in ({}, {self.shared: "DO_NOT_TRUST"}, {self.shared: "TRUST_FOLDER", parent + "/x": "TRUST_PARENT"}):
            with self.subTest(doc=doc):
                before = self.gemini(doc)
                self.assertEqual(trust.carry_over(self.shared, self.clone, self.env, ("gemini",)),
                                 {"added": {}, "notes": []})
                self.assertEqual(self.read(self.folders), before)

    def test_a_file_with_comments_is_never_edited(self):
        before = self.write(self.folders, '// mine\n{"%s": "TRUST_FOLDER"}\n' % self.shared)
        result = trust.carry_over(self.shared, self.clone, self.env, ("gemini",))
        self.assertEqual(result["added"], {})
        self.assertIn("not plain JSON", result["notes"][0])
        self.assertEqual(self.read(self.folders), before)
# Copilot CLI's config.json as Copilot 1.0.102 writes it (its own header lines), with a
# person's folder and a key of its own beside the trusted shared checkout.
COPILOT_JSON = """// User settings belong in settings.json.
// This file is managed automatically.
{
  "firstLaunchAt": "2026-11-30T10:00:00.000Z",
  "trustedFolders": [
    "/home/user/other",
    "%s"
  ]
}
"""


class CopilotCarryTest(TrustCase):

    def setUp(self):
        super().setUp()
        self.copilot_json = os.path.join(self.home, ".copilot", "config.json")
        os.makedirs(os.path.dirname(self.copilot_json))

    def test_folder_added_under_copilots_lock_and_removal_gives_back_every_byte(self):
        before = self.write(self.copilot_json, COPILOT_JSON % self.shared)
        self.assertEqual(trust.pending_approvals(self.shared, self.clone, "copilot", self.env), [
            "Copilot CLI: trust the folder %s when Copilot asks (until then it runs no repository hooks: "
            "no registration, no messages, no write blocking)" % self.clone])
        result = trust.carry_over(self.shared, self.clone, self.env, ("copilot",))
        self.assertEqual(result["notes"], [])
        self.assertEqual(result["added"], {"copilot": {"config": self.copilot_json, "folder": self.clone,
                                                       "created_key": False}})
        self.assertEqual(trust.copilot_trusted(self.clone, self.env), (True, None))
        self.assertEqual(trust.pending_approvals(self.shared, self.clone, "copilot", self.env), [])
        self.assert_only_insertions(before, self.read(self.copilot_json))
        self.assertTrue(os.path.exists(self.copilot_json + ".trusted-folders.lock"), "Copilot's own lock file")
        self.assertEqual(trust.entries_for(self.clone, self.env)["copilot"]["folder"], self.clone)
        self.assertEqual(trust.remove_carried(result["added"], self.env), [])
        self.assertEqual(self.read(self.copilot_json), before)
        self.assertEqual(trust.copilot_trusted(self.clone, self.env), (False, None))

    def test_untrusted_shared_checkout_or_an_unreadable_config_carries_nothing(self):
        for text, note in ((COPILOT_JSON % "/somewhere/else", None), ('{"trustedFolders": [', "not valid JSON")):
            with self.subTest(note=note):
                before = self.write(self.copilot_json, text)
                result = trust.carry_over(self.shared, self.clone, self.env, ("copilot",))
                self.assertEqual(result["added"], {})
                if note:
                    self.assertIn(note, result["notes"][0])
                else:
                    self.assertEqual(result["notes"], [])
                self.assertEqual(self.read(self.copilot_json), before)

    def test_a_clone_under_a_trusted_ancestor_is_left_alone(self):
        before = self.write(self.copilot_json, COPILOT_JSON % os.path.dirname(self.clone))
        self.assertEqual(trust.carry_over(os.path.dirname(self.clone), self.clone, self.env, ("copilot",))["added"],
                         {})
        self.assertEqual(self.read(self.copilot_json), before)


class NoGateCarryTest(TrustCase):

    def test_a_harness_with_no_trust_gate_carries_nothing_and_says_nothing(self):
        # `work start --harness opencode|shell` carries for that harness alone: nothing to carry.
        for name in ("opencode", "shell"):
            self.assertEqual(trust.carry_over(self.shared, self.clone, self.env, (name,)),
                             {"added": {}, "notes": []}, name)


class OptInTest(TrustCase):

    def test_opt_in_lives_in_the_users_config_and_an_agent_cannot_set_it(self):
        path = os.path.join(self.tmp, "config", "coord", "settings.json")
        self.assertFalse(trust.carry_enabled(self.env))
        proc = self.coord("trust", "--carry-over", "on", env={"CODEX_THREAD_ID": "t-1"})
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertFalse(os.path.exists(path))
        # Without a harness variable but with no terminal either (a detached, setsid'd process):
        # the same test as caller()'s person rule, so no.
        proc = self.coord("trust", "--carry-over", "on")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("not positively the person at a terminal (no controlling terminal)", proc.stderr)
        self.assertFalse(os.path.exists(path))
        rc, out = self.coord_at_terminal("trust", "--carry-over", "on", check=0)
        self.assertIn(path, out)
        self.assertTrue(trust.carry_enabled(self.env))
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        self.assertEqual(self.coord("trust", "--carry-over", "off").returncode, 3, "off is the person's too")
        self.assertTrue(trust.carry_enabled(self.env))
        self.coord_at_terminal("trust", "--carry-over", "off", check=0)
        self.assertFalse(trust.carry_enabled(self.env))
        self.assertIn("carry-over off", self.coord("trust", check=0).stdout)


class WorkCreateTrustTest(support.CoordTestCase):
    """`work create` with and without the opt-in, on real jj clones of an installed checkout."""

    def setUp(self):
        super().setUp()
        for tool in ("jj", "git"):
            support.require_tool(self, tool)
        cfg = os.path.join(self.tmp, "jjconfig.toml")
        with open(cfg, "w") as f:
            f.write('user.name = "Coord Test"\nuser.email = "coord-test@example.invalid"\n')
        self.scratch = os.path.join(self.tmp, "scratch")
        os.mkdir(self.scratch, 0o700)
        self.codex_home = os.path.join(self.tmp, "codex-home")
        os.makedirs(self.codex_home)
        self.env.update({"JJ_CONFIG": cfg, "COORD_SCRATCH_ROOT": self.scratch, "CODEX_HOME": self.codex_home,
                         "XDG_CONFIG_HOME": os.path.join(self.tmp, "config"),
                         "GIT_CONFIG_GLOBAL": os.path.join(self.home, ".gitconfig")})
        os.environ.update(self.env)
        self.canon = os.path.join(self.tmp, "canon")
        subprocess.run(["jj", "git", "init", "--colocate", self.canon], check=True, env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.canon = os.path.realpath(self.canon)
        subprocess.run([sys.executable, INSTALL, self.canon, "--project-id", "test-project"], check=True,
                       env=self.env, stdout=subprocess.DEVNULL)
        subprocess.run(["jj", "commit", "-m", "install coord"], cwd=self.canon, check=True, env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(["jj", "bookmark", "create", "main", "-r", "@-"], cwd=self.canon, check=True, env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.rt = self.coord_json("hello")["runtime"]
        self.claude_json = os.path.join(self.home, ".claude.json")
        self.codex_toml = os.path.join(self.codex_home, "config.toml")
        hashes = harnesses.codex_hook_hashes(os.path.join(self.canon, ".codex", "hooks.json"))
        lines = ['[projects."%s"]' % self.canon, 'trust_level = "trusted"', '']
        for key, digest in sorted(hashes.items()):
            lines += ['[hooks.state."%s"]' % key, 'trusted_hash = "%s"' % digest, '']
        with open(self.codex_toml, "w") as f:
            f.write("\n".join(lines))
        with open(self.claude_json, "w") as f:
            json.dump({"projects": {self.canon: {"hasTrustDialogAccepted": True}}}, f, indent=2)
        self.gemini_folders = os.path.join(self.home, ".gemini", "trustedFolders.json")
        os.makedirs(os.path.dirname(self.gemini_folders))
        with open(self.gemini_folders, "w") as f:
            json.dump({self.canon: "TRUST_FOLDER"}, f, indent=2)

    def snapshot(self):
        out = {}
        for path in (self.codex_toml, self.claude_json, self.gemini_folders):
            with open(path, "rb") as f:
                out[path] = f.read()
        return out

    def create(self):
        reply = self.coord_json("work", "create", "trusty", "--runtime", self.rt["id"], cwd=self.canon)
        return reply["work"]

    def test_without_the_opt_in_nothing_is_written(self):
        before = self.snapshot()
        work = self.create()
        self.assertEqual(self.snapshot(), before)
        self.assertNotIn("trust", work["data"])
        events = [e["event"] for e in self.coord_json("audit")["events"]]
        self.assertNotIn("work.trust-carried", events)

    @support.slow
    def test_with_the_opt_in_create_carries_and_remove_takes_exactly_that_away(self):
        codex = harnesses.require_cli(self, "codex")
        self.env["PATH"] = os.path.dirname(codex) + os.pathsep + self.env["PATH"]
        os.environ.update(self.env)
        self.coord_at_terminal("trust", "--carry-over", "on", check=0)
        before = self.snapshot()
        work = self.create()
        added = work["data"]["trust"]["added"]
        self.assertEqual(added["claude"]["project"], work["path"])
        self.assertEqual(added["codex"]["project"], work["path"])
        self.assertEqual(added["gemini"]["project"], work["path"])
        self.assertEqual(len(added["codex"]["hooks"]), len(harnesses.codex_hook_hashes(
            os.path.join(self.canon, ".codex", "hooks.json"))))
        self.assertNotEqual(self.snapshot(), before)
        self.coord("work", "gate", work["handle"], "--waive", "--reason", "test", "--runtime", self.rt["id"],
                   cwd=self.canon, check=0)
        self.coord("work", "remove", work["handle"], "--confirm", work["handle"], "--runtime", self.rt["id"],
                   cwd=self.canon, check=0)
        self.assertEqual(self.snapshot(), before)
        events = [e["event"] for e in self.coord_json("audit")["events"]]
        self.assertIn("work.trust-carried", events)
        self.assertIn("work.trust-removed", events)


    @support.slow
    def test_copilot_folder_trust_is_carried_at_create_and_taken_away_at_remove(self):
        copilot_json = os.path.join(self.home, ".copilot", "config.json")
        os.makedirs(os.path.dirname(copilot_json))
        with open(copilot_json, "w") as f:
            f.write(COPILOT_JSON % self.canon)
        with open(copilot_json, "rb") as f:
            before = f.read()
        self.coord_at_terminal("trust", "--carry-over", "on", check=0)
        text = self.coord("work", "create", "trusty", "--runtime", self.rt["id"], cwd=self.canon).stdout
        self.assertRegex(text, r"approvals carried over from the shared checkout: .*claude workspace; copilot folder")
        work = self.coord_json("work", "inspect", text.split()[0], "--runtime", self.rt["id"], cwd=self.canon)["work"]
        self.assertEqual(work["data"]["trust"]["added"]["copilot"]["folder"], work["path"])
        self.assertEqual(trust.copilot_trusted(work["path"], self.env), (True, None))
        self.coord("work", "gate", work["handle"], "--waive", "--reason", "test", "--runtime", self.rt["id"],
                   cwd=self.canon, check=0)
        self.coord("work", "remove", work["handle"], "--confirm", work["handle"], "--runtime", self.rt["id"],
                   cwd=self.canon, check=0)
        with open(copilot_json, "rb") as f:
            self.assertEqual(f.read(), before)

    @support.slow
    def test_after_losing_the_database_an_adopted_clone_takes_its_entries_away_at_remove(self):
        codex = harnesses.require_cli(self, "codex")
        self.env["PATH"] = os.path.dirname(codex) + os.pathsep + self.env["PATH"]
        os.environ.update(self.env)
        self.coord_at_terminal("trust", "--carry-over", "on", check=0)
        before = self.snapshot()
        work = self.create()
        self.assertNotEqual(self.snapshot(), before)
        db = self.env["COORD_DB"]
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(db + suffix):
                os.unlink(db + suffix)
        self.rt = self.coord_json("hello")["runtime"]
        self.coord("work", "adopt", work["path"], "--runtime", self.rt["id"], cwd=self.canon, check=0)
        self.coord("work", "gate", work["handle"], "--waive", "--reason", "test", "--runtime", self.rt["id"],
                   cwd=self.canon, check=0)
        self.coord("work", "remove", work["handle"], "--confirm", work["handle"], "--runtime", self.rt["id"],
                   cwd=self.canon, check=0)
        self.assertEqual(self.snapshot(), before, "no stale entry for the removed clone")


if __name__ == "__main__":
    unittest.main()


class QwenCarryTest(TrustCase):
    """Qwen Code's folder trust (0.24.4): only with its gate on, a clone gets TRUST_FOLDER when
    the shared checkout is trusted; removal takes exactly that entry away."""

    def qwen(self, gate=True, folders=None):
        qhome = os.path.join(self.home, ".qwen")
        os.makedirs(qhome, exist_ok=True)
        with open(os.path.join(qhome, "settings.json"), "w") as f:
            json.dump({"security": {"folderTrust": {"enabled": gate}}}, f)
        path = os.path.join(qhome, "trustedFolders.json")
        if folders is not None:
            with open(path, "w") as f:
                json.dump(folders, f, indent=2)
        return path

    def test_entry_added_for_the_clone_and_removed_with_it(self):
        mine = {self.shared: "TRUST_FOLDER", "/elsewhere": "DO_NOT_TRUST"}
        path = self.qwen(folders=mine)
        result = trust.carry_over(self.shared, self.clone, self.env, ("qwen",))
        self.assertEqual(result["notes"], [])
        self.assertEqual(result["added"], {"qwen": {"config": path, "project": self.clone}})
        self.assertEqual(json.loads(self.read(path)), dict(mine, **{self.clone: "TRUST_FOLDER"}))
        self.assertEqual(trust.qwen_trusted(self.clone, self.env), (True, None))
        self.assertEqual(trust.entries_for(self.clone, self.env)["qwen"]["project"], self.clone)
        self.assertEqual(trust.remove_carried(result["added"], self.env), [])
        self.assertEqual(json.loads(self.read(path)), mine)

    def test_nothing_is_carried_with_the_gate_off_or_the_shared_checkout_untrusted(self):
        for gate, folders in ((False, {self.shared: "TRUST_FOLDER"}), (True, {self.shared: "DO_NOT_TRUST"}), (True, {})):
            with self.subTest(gate=gate, folders=folders):
                path = self.qwen(gate, folders)
                before = self.read(path)
                self.assertEqual(trust.carry_over(self.shared, self.clone, self.env, ("qwen",)),
                                 {"added": {}, "notes": []})
                self.assertEqual(self.read(path), before)

    def test_pending_approval_names_the_folder(self):
        self.qwen(folders={})
        lines = trust.pending_approvals(self.shared, self.clone, "qwen", self.env)
        self.assertEqual(len(lines), 1)
        self.assertIn("Qwen Code: trust the folder %s" % self.clone, lines[0])


class DroidCarryTest(TrustCase):
    """Factory Droid's folder trust (0.225.2, `trustedFolders` in ~/.factory/settings.json, the
    file it keeps its own settings in): a clone gets an entry only when the shared checkout has
    one; removal takes exactly that entry away and keeps every other setting."""

    def droid(self, folders):
        path = os.path.join(self.home, ".factory", "settings.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        doc = {"customModels": [{"model": "m"}], "logoAnimation": "off"}
        if folders is not None:
            doc["trustedFolders"] = folders
        with open(path, "w") as f:
            json.dump(doc, f, indent=2)
        return path, doc

    def test_entry_added_for_the_clone_and_removed_with_it(self):
        path, mine = self.droid({self.shared: {"trustedAt": "2026-01-01T00:00:00.000Z"}})
        result = trust.carry_over(self.shared, self.clone, self.env, ("droid",))
        self.assertEqual(result, {"added": {"droid": {"config": path, "project": self.clone}}, "notes": []})
        doc = json.loads(self.read(path))
        self.assertEqual(sorted(doc["trustedFolders"]), sorted([self.shared, self.clone]))
        self.assertEqual(doc["customModels"], mine["customModels"])
        self.assertEqual(trust.droid_trusted(self.clone, self.env), (True, None))
        self.assertEqual(trust.entries_for(self.clone, self.env)["droid"]["project"], self.clone)
        self.assertEqual(trust.remove_carried(result["added"], self.env), [])
        self.assertEqual(json.loads(self.read(path)), mine)

    def test_nothing_is_carried_when_the_shared_checkout_is_not_trusted(self):
        for folders in (None, {}, {"/elsewhere": {"trustedAt": "x"}}):
            with self.subTest(folders=folders):
                path, _ = self.droid(folders)
                before = self.read(path)
                self.assertEqual(trust.carry_over(self.shared, self.clone, self.env, ("droid",)),
                                 {"added": {}, "notes": []})
                self.assertEqual(self.read(path), before)

    def test_pending_approval_names_the_folder_and_a_damaged_file_is_named(self):
        self.droid({})
        lines = trust.pending_approvals(self.shared, self.clone, "droid", self.env)
        self.assertEqual(len(lines), 1)
        self.assertIn("Factory Droid: trust the folder %s" % self.clone, lines[0])
        with open(os.path.join(self.home, ".factory", "settings.json"), "w") as f:
            f.write("{not json")
        self.assertIn("is not valid JSON", trust.pending_approvals(self.shared, self.clone, "droid", self.env)[0])
