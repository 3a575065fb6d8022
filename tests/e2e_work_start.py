"""End-to-end: `coord work start --prompt` gives the real Claude Code, Codex, Copilot, Gemini and OpenCode CLIs, run
interactively in a tmux window (a private socket), their first message, offline against
tests/modelserver.py; and with coord installed and committed, the harness's SessionStart hook
in the clone names the work and its owner to the model and labels the tmux window and pane
with @coord-runtime and @coord-conversation.

The clones come from `coord work create`. The person's one-time answers the CLIs would ask for in a window (Claude
Code's onboarding, workspace trust and API-key prompts; Codex's project trust and model
notice) are given in the private HOME beforehand, as a person would have given them.
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses as h  # noqa: E402
import support  # noqa: E402
from modelserver import say  # noqa: E402

COORD = os.path.join(h.ROOT, "coord")


class StartWithPrompt(object):
    """Mixed into one HarnessCase per harness; each launches the real CLI with a prompt that
    names a marker."""

    def setUp(self):
        super().setUp()
        support.require_tool(self, "jj")
        self.tmux_bin = support.require_tool(self, "tmux")
        self.sock = os.path.join(self.tmp, "tmux.sock")
        self.addCleanup(subprocess.run, [self.tmux_bin, "-S", self.sock, "kill-server"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
        cfg = os.path.join(self.tmp, "jjconfig.toml")
        with open(cfg, "w") as f:
            f.write('user.name = "Coord Test"\nuser.email = "coord-test@example.invalid"\n')
        scratch = os.path.join(self.tmp, "scratch")
        os.mkdir(scratch, 0o700)
        self.coord_env = {"JJ_CONFIG": cfg, "COORD_SCRATCH_ROOT": scratch, "COORD_TMUX_SOCKET": self.sock,
                          "COORD_CLAUDE_CMD": h.find_cli("claude") or "claude",
                          "COORD_CODEX_CMD": h.find_cli("codex") or "codex",
                          "COORD_COPILOT_CMD": h.find_cli("copilot") or "copilot"}
        self.coord_env.update(self.agent_env())

    def run_coord(self, *args, env):
        proc = subprocess.run([sys.executable, COORD] + list(args) + ["--json"], cwd=self.repo, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        return json.loads(proc.stdout)

    def harness_env(self):
        raise NotImplementedError

    def prepare(self, clone):
        """Give the answers a person would have given the CLI for this clone."""
        raise NotImplementedError

    def test_the_prompt_is_the_first_message_the_model_receives(self):
        env = dict(self.harness_env(), **self.coord_env)
        owner = self.run_coord("hello", env=env)["runtime"]
        env["COORD_RUNTIME_ID"] = owner["id"]
        work = self.run_coord("work", "create", "prompted", env=env)["work"]
        self.prepare(work["path"])
        self.server.load([say("on it")] * 4)
        marker = "PROMPT-MARKER-%d" % os.getpid()
        prompt = "-begin with the task named %s, then report" % marker
        self.run_coord("work", "start", work["handle"], "--harness", self.harness, "--prompt", prompt, env=env)
        deadline = time.monotonic() + 90
        found = []
        while not found and time.monotonic() < deadline:
            found = [r for r in list(self.server.requests) if r.api and marker in r.text()]
            time.sleep(0.2)
        screen = subprocess.run([self.tmux_bin, "-S", self.sock, "capture-pane", "-p", "-t",
                                 self.run_coord("work", "inspect", work["handle"], "--verbose", env=env)
                                 ["work"]["data"]["tmux"]["pane_id"]],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=10).stdout
        self.assertTrue(found, "no model request carried the prompt; the window shows:\n%s" % screen[-2000:])
        self.assertIn(prompt, found[0].text())
        self.assertNotIn(("POST", "/v1/messages"), [(r.method, r.path) for r in self.server.refused])

    def install_and_commit(self):
        """coord installed in the repository and committed, as README says, so clones carry it."""
        for argv in (support.script_argv(os.path.join(h.ROOT, "install")) + [self.repo, "--project-id", "test-project"],
                     ["git", "-C", self.repo, "add", "-A"],
                     ["git", "-C", self.repo, "commit", "-q", "-m", "Install coord"]):
            proc = subprocess.run(argv, env=dict(self.env, GIT_AUTHOR_NAME="e2e", GIT_AUTHOR_EMAIL="e2e@example.invalid",
                                                 GIT_COMMITTER_NAME="e2e", GIT_COMMITTER_EMAIL="e2e@example.invalid"),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

    def test_in_a_clone_the_hooks_name_the_work_and_label_the_window(self):
        self.install_and_commit()
        env = dict(self.harness_env(), **self.coord_env)
        owner = self.run_coord("hello", env=env)["runtime"]
        env["COORD_RUNTIME_ID"] = owner["id"]
        work = self.run_coord("work", "create", "hooked", env=env)["work"]
        self.prepare(work["path"])
        self.server.load([say("on it")] * 4)
        self.run_coord("work", "start", work["handle"], "--harness", self.harness, "--prompt", "go", env=env)

        def linked():
            rec = self.run_coord("work", "inspect", work["handle"], "--verbose", env=env)["work"]["data"]["tmux"]
            return rec if rec.get("runtime_id") else None
        rec = support.retry_until(linked, timeout=90, interval=0.5)

        def option(flag, target, name):
            return subprocess.run([self.tmux_bin, "-S", self.sock, "show-options", flag, "-v", "-t", target, name],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=10).stdout.strip()
        # The hook labels the window after it committed the record, so a reader can see the
        # record first (a CI run did, with Gemini): wait for the label, never accept a wrong one.
        for flag, target in (("-w", rec["window_id"]), ("-p", rec["pane_id"])):
            support.retry_until(lambda: option(flag, target, "@coord-runtime"), timeout=15, interval=0.2)
            self.assertEqual(option(flag, target, "@coord-runtime"), rec["runtime_id"])
            self.assertEqual(option(flag, target, "@coord-conversation"), rec["conversation"])
        seen = support.retry_until(lambda: [r for r in list(self.server.requests)
                                            if r.api and "Your work: %s" % work["handle"] in r.text()],
                                   timeout=60, interval=0.5)
        self.assertIn("report to %s" % owner["handle"], seen[0].text())
        self.assertIn("Never git commit", seen[0].text())


class ClaudeStartWithPrompt(StartWithPrompt, h.HarnessCase):
    harness = "claude"

    def harness_env(self):
        return h.claude_env(self.home, self.server)

    def prepare(self, clone):
        with open(os.path.join(self.home, ".claude.json"), "w") as f:
            json.dump({"hasCompletedOnboarding": True,
                       "customApiKeyResponses": {"approved": ["sk-e2e-offline"], "rejected": []},
                       "projects": {clone: {"hasTrustDialogAccepted": True}}}, f)


class CodexStartWithPrompt(StartWithPrompt, h.HarnessCase):
    harness = "codex"

    def harness_env(self):
        return h.codex_env(self.home, self.codex_home, self.server)

    def prepare(self, clone):
        # the pinned CLI's catalog offers an upgrade of the configured model in a dialog first;
        # coord's hooks in the clone run once the person trusted them for this path (/hooks)
        hooks = os.path.join(clone, ".codex", "hooks.json")
        h.write_codex_config(self.codex_home, self.server, [clone],
                             h.codex_hook_hashes(hooks) if os.path.exists(hooks) else None,
                             extra='[notice.model_migrations]\n"gpt-5.5" = "gpt-6-sol"')



class GeminiStartWithPrompt(StartWithPrompt, h.HarnessCase):
    harness = "gemini"

    def harness_env(self):
        h.write_gemini_user_settings(self.home)
        return dict(h.gemini_env(self.home, self.server), COORD_GEMINI_CMD=h.find_cli("gemini") or "gemini")

    def prepare(self, clone):
        # the person trusted the clone's folder when Gemini asked (else it loads no project hooks)
        h.trust_gemini_folder(self.home, clone)


class OpenCodeStartWithPrompt(StartWithPrompt, h.HarnessCase):
    harness = "opencode"

    def harness_env(self):
        env = h.opencode_env(self.home, self.server, self.repo, {"COORD_OPENCODE_CMD": self.cli})
        del env["PWD"]  # tmux gives the pane its own directory as PWD
        return env

    def prepare(self, clone):
        pass  # OpenCode asks nothing first: no trust prompt, no onboarding (1.18.33)
class CopilotStartWithPrompt(StartWithPrompt, h.HarnessCase):
    """Copilot CLI 1.0.102: `--interactive=PROMPT` (it takes no positional prompt); its hooks are
    the Claude Code ones, run once the person trusted the folder (here: carried over from the
    shared checkout by `coord trust --carry-over on`, as a person would have opted in)."""

    harness = "copilot"

    def harness_env(self):
        return h.copilot_env(self.home, self.server)

    def prepare(self, clone):
        h.trust_copilot_folder(self.home, clone)

    def copilot_trusted(self):
        with open(os.path.join(self.home, ".copilot", "config.json")) as f:
            text = f.read()
        return json.loads("\n".join(l for l in text.splitlines() if not l.lstrip().startswith("//")))["trustedFolders"]

    def test_carried_trust_runs_the_hooks_resume_continues_the_conversation_remove_takes_the_trust_away(self):
        self.install_and_commit()
        env = dict(self.harness_env(), **self.coord_env)
        h.trust_copilot_folder(self.home, self.repo)  # the person trusted the shared checkout once
        self.coord_at_terminal("trust", "--carry-over", "on", env=env, check=0)
        owner = self.run_coord("hello", env=env)["runtime"]
        env["COORD_RUNTIME_ID"] = owner["id"]
        work = self.run_coord("work", "create", "copiloted", env=env)["work"]
        self.assertEqual(work["data"]["trust"]["added"]["copilot"]["folder"], work["path"])
        self.assertEqual(self.copilot_trusted(), [self.repo, work["path"]])
        self.server.load([say("on it")] * 8)
        self.run_coord("work", "start", work["handle"], "--harness", "copilot", "--prompt", "FIRST-TASK go", env=env)

        def linked(conversation=None):
            rec = self.run_coord("work", "inspect", work["handle"], "--verbose", env=env)["work"]["data"]["tmux"]
            return rec if rec.get("runtime_id") and rec.get("pid") != -1 and \
                (conversation is None or rec.get("conversation") == conversation) else None
        rec = support.retry_until(linked, timeout=90, interval=0.5)
        runtimes = {r["id"]: r for r in self.run_coord("list", env=env)["runtimes"]}
        self.assertEqual(runtimes[rec["runtime_id"]]["harness"], "copilot")
        support.retry_until(lambda: [r for r in list(self.server.requests) if r.api and "FIRST-TASK" in r.text()],
                            timeout=60, interval=0.5)
        self.run_coord("work", "park", work["handle"], "--reason", "later", env=env)
        out = self.run_coord("work", "resume", work["handle"], env=env)
        self.assertIn("--resume=%s" % rec["conversation"], out["tmux"]["pane_command"])
        # Copilot 1.0.102 runs a resumed session's hooks (sessionStart first) only once a message
        # is submitted: `work resume` gives it RESUME_PROMPT (e2e_copilot.ResumedFirstBoundary);
        # a person's next message goes to the same session.
        pane = out["tmux"]["pane_id"]

        def shows(text):
            return text in subprocess.run([self.tmux_bin, "-S", self.sock, "capture-pane", "-p", "-t", pane],
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                          timeout=10).stdout
        support.retry_until(lambda: shows("FIRST-TASK go"), timeout=90, interval=0.5)
        for keys in (["-l", "SECOND-TASK next"], ["Enter"]):
            subprocess.run([self.tmux_bin, "-S", self.sock, "send-keys", "-t", pane] + keys, check=True, timeout=10)
        try:
            again = support.retry_until(lambda: (lambda r: r if r and r["runtime_id"] != rec["runtime_id"] else None)(
                linked(rec["conversation"])), timeout=90, interval=0.5)
        except AssertionError:
            pane = self.run_coord("work", "inspect", work["handle"], "--verbose", env=env)["work"]["data"]["tmux"]
            screen = subprocess.run([self.tmux_bin, "-S", self.sock, "capture-pane", "-p", "-t", pane["pane_id"]],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=10).stdout
            self.fail("the resumed Copilot did not register; record %r; the window shows:\n%s" % (pane, screen[-3000:]))
        self.assertEqual(again["conversation"], rec["conversation"], "Copilot resumed the same session")
        resumed = support.retry_until(lambda: [r for r in list(self.server.requests)
                                               if r.api and "SECOND-TASK" in r.text()], timeout=60, interval=0.5)
        self.assertIn("FIRST-TASK", resumed[-1].text(), "the resumed conversation carries the first task")
        self.run_coord("work", "close", work["handle"], env=env)
        self.run_coord("work", "gate", work["handle"], "--waive", "--reason", "e2e", env=env)

        def removed():
            # Closing kills the window; Copilot and the hook it was running may take a moment to
            # exit, and until they do remove refuses (a live runtime inside), as it must.
            proc = subprocess.run([sys.executable, COORD, "work", "remove", work["handle"], "--confirm",
                                   work["handle"], "--json"], cwd=self.repo, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, timeout=120)
            if proc.returncode == 3 and "inside it" in proc.stdout + proc.stderr:
                return None
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            return True
        support.retry_until(removed, timeout=60, interval=1)
        self.assertEqual(self.copilot_trusted(), [self.repo])
