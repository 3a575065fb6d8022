"""End-to-end tests: the real GitHub Copilot CLI, offline, against tests/modelserver.py.

Copilot (pinned in tests/provision) runs offline with its BYOK provider aimed at the scripted
server's Anthropic Messages API. It has no hook file of coord's own: it runs the Claude Code
project hooks in `.claude/settings.json` once the person trusts the folder. HarnessFacts pins
what coord relies on in Copilot itself, with a recording hook of the tests' own; CoordScenarios
runs coord installed by ./install.
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses as h  # noqa: E402
import store  # noqa: E402
from harnesses import copilot_tool as tool  # noqa: E402
from modelserver import say  # noqa: E402


class HarnessFacts(h.HarnessCase):
    harness = "copilot"

    def setUp(self):
        super().setUp()
        self.log = os.path.join(self.tmp, "hooks.jsonl")
        self.replies = os.path.join(self.tmp, "replies")
        self.write_hooks(h.recording_hooks(self.log, self.replies))
        self.write_file("src/a.py", "original\n")
        self.a = os.path.join(self.repo, "src", "a.py")

    def records(self, event=None, tool_name=None):
        return [r for r in h.read_hook_log(self.log)
                if (event is None or r["payload"].get("hook_event_name") == event)
                and (tool_name is None or r["payload"].get("tool_name") == tool_name)]

    def edit_and_create(self):
        return [tool("view", path=self.a),
                tool("edit", path=self.a, old_str="original", new_str="agent"),
                tool("create", path=os.path.join(self.repo, "src", "new.py"), file_text="new\n"),
                say("done")]

    def test_claude_hooks_run_with_claude_tool_names_and_copilots_arguments(self):
        result = self.run_agent(self.edit_and_create())
        self.assertEqual(self.records()[0]["env"].get("COPILOT_CLI_BINARY_VERSION"), h.COPILOT_VERSION)
        self.assertEqual(self.read_file("src/a.py"), "agent\n")
        events = [r["payload"]["hook_event_name"] for r in self.records()]
        for ev in ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "SessionEnd"):
            self.assertIn(ev, events)
        edit = self.records("PreToolUse", "Edit")[0]
        self.assertEqual(edit["payload"]["tool_input"], {"path": self.a, "old_str": "original", "new_str": "agent"})
        create = self.records("PreToolUse", "Write")[0]["payload"]
        self.assertEqual(create["tool_input"], {"path": os.path.join(self.repo, "src", "new.py"),
                                                "file_text": "new\n"})
        self.assertEqual([r["payload"]["tool_input"] for r in self.records("PreToolUse", "Read")], [{"path": self.a}])
        self.assertEqual(create["session_id"], result.session_id())
        self.assertIn("timestamp", create)
        self.assertNotIn("transcript_path", create)
        env = edit["env"]
        self.assertEqual(env.get("COPILOT_CLI"), "1")
        self.assertEqual(env.get("COPILOT_PROJECT_DIR"), self.repo)
        self.assertEqual(env.get("CLAUDE_PROJECT_DIR"), self.repo)
        self.assertEqual({r.path for r in self.server.requests}, {"/v1/messages"})
        self.assertEqual(self.server.requests[0].headers.get("x-api-key"), "sk-e2e-offline")

    def test_an_untrusted_folder_runs_no_repository_hooks(self):
        self.run_agent(self.edit_and_create(), trust=False)
        self.assertEqual(self.records(), [])
        self.assertEqual(self.read_file("src/a.py"), "agent\n")

    def test_claude_style_deny_blocks_and_its_reason_reaches_the_model(self):
        h.write_reply(self.replies, "PreToolUse-Edit", h.deny("REASON-edit"))
        h.write_reply(self.replies, "PreToolUse-Write", h.deny("REASON-create"))
        self.run_agent(self.edit_and_create())
        self.assertEqual(self.read_file("src/a.py"), "original\n")
        self.assertIsNone(self.read_file("src/new.py"))
        reqs = self.server.model_requests()
        self.assertEqual(reqs[2].tool_results(), ["Denied by preToolUse hook: REASON-edit"])
        self.assertEqual(reqs[3].tool_results(), ["Denied by preToolUse hook: REASON-create"])

    def test_a_failing_hook_denies_and_a_timed_out_one_allows(self):
        # Unlike Claude Code, any non-zero exit denies: a hook command that cannot start its
        # interpreter blocks every matched tool. coord's hook itself always exits 0.
        for cmd, timeout, denied in (("exit 1", 10, True), ("sleep 8", 2, False)):
            with self.subTest(cmd=cmd):
                self.write_file("src/a.py", "original\n")
                self.write_hooks({"PreToolUse": [{"matcher": "Edit|Write|NotebookEdit|Bash", "hooks": [
                    {"type": "command", "command": cmd, "timeout": timeout}]}]})
                self.run_agent([tool("edit", path=self.a, old_str="original", new_str="agent"), say("done")])
                self.assertEqual(self.read_file("src/a.py"), "original\n" if denied else "agent\n")
                result = self.server.model_requests()[1].tool_results()[0]
                self.assertEqual(result.startswith("Denied by preToolUse hook"), denied, result)

    def test_only_top_level_additional_context_reaches_the_model(self):
        for shape, reply in (("nested", h.context), ("top", lambda ev, text: {"additionalContext": text})):
            with self.subTest(shape=shape):
                for event in ("SessionStart", "UserPromptSubmit", "PostToolUse-Read"):
                    h.write_reply(self.replies, event, reply(event.split("-")[0], "CTX-%s-%s" % (shape, event)))
                self.run_agent([tool("view", path=self.a), say("done")])
                sent = " ".join(r.text() for r in self.server.model_requests())
                for event in ("SessionStart", "UserPromptSubmit", "PostToolUse-Read"):
                    if shape == "top":
                        self.assertIn("CTX-top-%s" % event, sent)
                    else:
                        self.assertNotIn("CTX-nested-%s" % event, sent)


class CoordScenarios(h.CoordCase):
    """coord installed by ./install; the real hooks, run by Copilot from .claude/settings.json."""

    harness = "copilot"

    def script(self, repo):
        a = os.path.join(repo, "src", "a.py")
        return [tool("view", path=a),
                tool("edit", path=a, old_str="original", new_str="agent"),
                tool("create", path=os.path.join(repo, "src", "new.py"), file_text="new\n"),
                say("done")]

    def test_edit_and_create_of_a_peers_exclusive_lease_are_denied(self):
        peer = self.peer()
        self.rcoord("claim", "src/a.py", "src/new.py", "--runtime", peer["id"], "-p", "peer work")
        for repo in (self.repo, self.plain):
            self.write_file("src/a.py", "original\n", repo=repo)
        # The control: the same scripted run without coord edits and creates.
        self.run_agent(self.script(self.plain), repo=self.plain)
        with open(os.path.join(self.plain, "src", "a.py")) as f:
            self.assertEqual(f.read(), "agent\n")
        self.assertTrue(os.path.exists(os.path.join(self.plain, "src", "new.py")))
        result = self.run_agent(self.script(self.repo))
        self.assertEqual(self.read_file("src/a.py"), "original\n")
        self.assertIsNone(self.read_file("src/new.py"))
        reqs = self.server.model_requests()
        for i, path in ((2, "src/a.py"), (3, "src/new.py")):
            text = "\n".join(reqs[i].tool_results())
            self.assertIn("Denied by preToolUse hook: coord: write refused", text)
            self.assertIn(path, text)
            self.assertIn(peer["handle"], text)
            self.assertIn(".coord/coord send", text)
        rt = [r for r in self.runtimes_of(result.session_id()) if not r.get("agent_id")]
        self.assertEqual([r["harness"] for r in rt], ["copilot"], self.coord_state())

    def test_a_decoy_file_path_beside_path_does_not_let_a_leased_write_through(self):
        # Copilot CLI 1.0.102 writes `path` and ignores any other argument the model adds, yet
        # passes them all to the hook: a `file_path` naming a free file is a decoy.
        peer = self.peer()
        self.rcoord("claim", "src/a.py", "src/new.py", "--runtime", peer["id"], "-p", "peer work")

        def script(repo):
            free = os.path.join(repo, "src", "free.py")
            return [tool("edit", path=os.path.join(repo, "src", "a.py"), file_path=free,
                         old_str="original", new_str="agent"),
                    tool("create", path=os.path.join(repo, "src", "new.py"), file_path=free, file_text="new\n"),
                    say("done")]
        for repo in (self.repo, self.plain):
            self.write_file("src/a.py", "original\n", repo=repo)
        # The control, without coord: both calls write `path`, and nothing is written at `file_path`.
        self.run_agent(script(self.plain), repo=self.plain)
        with open(os.path.join(self.plain, "src", "a.py")) as f:
            self.assertEqual(f.read(), "agent\n")
        self.assertTrue(os.path.exists(os.path.join(self.plain, "src", "new.py")))
        self.assertFalse(os.path.exists(os.path.join(self.plain, "src", "free.py")))
        self.run_agent(script(self.repo))
        self.assertEqual(self.read_file("src/a.py"), "original\n")
        self.assertIsNone(self.read_file("src/new.py"))
        self.assertIsNone(self.read_file("src/free.py"))
        reqs = self.server.model_requests()
        for i, path in ((1, "src/a.py"), (2, "src/new.py")):
            text = "\n".join(reqs[i].tool_results())
            self.assertIn("Denied by preToolUse hook: coord: write refused", text)
            self.assertIn(path, text)
            self.assertIn(peer["handle"], text)

    def test_runtime_is_copilot_its_context_arrives_and_it_ends_with_the_session(self):
        # Harness fact (Copilot CLI 1.0.102, seen once in a full run on a loaded machine): its
        # first model request can go out before a slow sessionStart hook has answered, without
        # that context. So a second, fresh session gets its chance; one of two must carry it.
        for attempt in range(2):
            seen = len(self.server.model_requests())
            result = self.run_agent([say("done")])
            rts = self.runtimes_of(result.session_id())
            self.assertEqual([(r["harness"], r.get("agent_id")) for r in rts], [("copilot", None)], self.coord_state())
            self.assertIsNotNone(rts[0]["ended_at"], rts[0])
            reqs = self.server.model_requests()
            first = reqs[seen] if len(reqs) > seen else reqs[0]  # (a server that starts its list afresh)
            if "coord: you are %s" % rts[0]["handle"] in first.user_text() or attempt == 1:
                break
        self.assertIn("coord: you are %s" % rts[0]["handle"], first.user_text())

    def test_the_installed_skill_is_offered_once(self):
        # Copilot CLI 1.0.102 reads project skills from .github/skills, .agents/skills and
        # .claude/skills; coord's two copies (.agents, .claude) are one skill to it, by name.
        self.run_agent([say("done")])
        text = self.server.model_requests()[0].text()
        self.assertEqual(text.count("<name>coord</name>"), 1, text[text.find("<available_skills>"):][:1500])
        self.assertIn("<location>project</location>", text)

    def delivery_state(self, msg_id):
        st = store.Store(self.env["COORD_DB"])
        try:
            return st.q("SELECT state FROM deliveries WHERE message = ?", (msg_id,)).fetchone()[0]
        finally:
            st.close()

    def test_a_peers_message_reaches_the_model_and_is_delivered_only_then(self):
        peer = self.peer()
        body = "BODY-c0p: please leave src/a.py alone"
        self.write_file("notes.txt", "notes\n")
        notes = os.path.join(self.repo, "notes.txt")
        seen = {}

        def send(req):
            agents = [rt for rt in self.rcoord("list")["runtimes"] if rt["id"] != peer["id"]]
            self.assertEqual(len(agents), 1, agents)
            seen.update(self.rcoord("send", body, "--to", agents[0]["handle"], "--runtime", peer["id"]))
            seen["at_send"] = self.delivery_state(seen["id"])
            return tool("view", path=notes)

        def carried(req):
            seen["carried"] = body in req.text()
            seen["then"] = self.delivery_state(seen["id"])
            return say("done")
        self.run_agent([send, carried])
        self.assertEqual(seen["at_send"], "queued")
        self.assertEqual((seen["carried"], seen["then"]), (True, "delivered"),
                         self.server.model_requests()[1].tail_text()[:2000])
        self.assertNotIn(body, self.server.model_requests()[0].text())



if __name__ == "__main__":
    unittest.main()


class ResumedFirstBoundary(h.ResumedFirstBoundary, h.CoordCase):
    """Interactive Copilot CLI 1.0.102 resumed (`copilot --resume=ID`) runs no hook until a message
    is submitted: `work resume` gives it RESUME_PROMPT (`--interactive=`) on its command line, so
    the resumed agent registers and sees its messages with nothing typed."""

    harness = "copilot"

    def launch_setup(self):
        h.trust_copilot_folder(self.home, self.repo)  # the person trusted the shared checkout once
        return h.copilot_env(self.home, self.server, self.launch_managed({"COORD_COPILOT_CMD": self.cli}))

    def test_resume_interrupted_brings_copilot_to_its_first_boundary(self):
        self.resume_and_nudge("src/kept.py")
        self.told_kept("src/kept.py", self.requests_at_resume)


class CloseThenRemove(h.CloseThenRemove, h.CoordCase):
    """Copilot CLI 1.0.102 hung up by `work close`: the remove right after succeeds."""

    harness = "copilot"

    def launch_setup(self):
        h.trust_copilot_folder(self.home, self.repo)  # the person trusted the shared checkout once
        return h.copilot_env(self.home, self.server, self.launch_managed({"COORD_COPILOT_CMD": self.cli}))

    def test_close_then_remove_succeeds_first_time(self):
        self.close_then_remove()


class ResumeKeepsItsArguments(h.ResumedFirstBoundary, h.CoordCase):
    """`work start W -- --allow-all-tools` launches Copilot CLI 1.0.102 in a mode the person chose;
    parked and resumed with a plain `work resume W`, it comes back in that mode: its first resumed
    turn creates a file with no approval asked (a resumed Copilot once lost the flag and stopped at
    an approval). The start's prompt is not given again."""

    harness = "copilot"

    def launch_setup(self):
        h.trust_copilot_folder(self.home, self.repo)
        return h.copilot_env(self.home, self.server, self.launch_managed({"COORD_COPILOT_CMD": self.cli}))

    def test_a_resumed_copilot_keeps_allow_all_tools(self):
        import launch
        work = self.rcoord("work", "create", "keeps-args", env=self.as_owner)["work"]
        target = os.path.join(work["path"], "RESUMED-WROTE.txt")
        made = []

        def step(request):
            if not made and launch.RESUME_PROMPT in request.user_text():
                made.append(request)
                return tool("create", path=target, file_text="resumed\n")
            return say("ok")
        self.server.load([step] * 60)
        self.rcoord("work", "start", work["handle"], "--harness", "copilot", "--prompt", "FIRST-TASK say ok.",
                    "--", "--allow-all-tools", env=self.as_owner)
        first = self.registered(work["handle"], 90)
        h.retry_until(lambda: self.turn(first) == "idle", timeout=90, interval=0.25)
        self.rcoord("work", "park", work["handle"], "--reason", "back later", env=self.as_owner)
        reply = self.rcoord("work", "resume", work["handle"], env=self.as_owner)
        rec = self.registered(work["handle"], 90, other_than=first)
        try:
            h.retry_until(lambda: os.path.exists(target), timeout=90, interval=0.25)
        except AssertionError:
            raise AssertionError("the resumed Copilot did not write (turn %r):\n%s" % (self.turn(rec),
                                                                                     self.pane_text(rec)))
        self.assertNotEqual(self.turn(rec), "dialog", "no approval was asked")
        self.assertIn("--allow-all-tools", reply["tmux"]["pane_command"])
        self.assertNotIn("FIRST-TASK", reply["tmux"]["pane_command"], "the start's prompt is one-shot")
