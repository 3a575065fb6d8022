"""End-to-end tests: the real Gemini CLI, offline, against tests/modelserver.py.

Gemini CLI (pinned in tests/provision) runs headless (`-p`, `--approval-mode yolo`, stream-json)
with the `gemini-api-key` auth type and GOOGLE_GEMINI_BASE_URL aimed at the scripted server's
Gemini API (streamGenerateContent). It runs the hooks in the project's `.gemini/settings.json`
only in a folder the person trusts (~/.gemini/trustedFolders.json). HarnessFacts pins what coord
relies on in Gemini itself, with a recording hook of the tests' own; CoordScenarios runs coord
installed by ./install.
"""

import json
import os
import shlex
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses as h  # noqa: E402
import store  # noqa: E402
from modelserver import gemini_tool as tool  # noqa: E402
from modelserver import say  # noqa: E402

EVENTS = ("SessionStart", "SessionEnd", "BeforeAgent", "AfterAgent", "BeforeTool", "AfterTool")


def gemini_recording_hooks(log, replies):
    """The recording hook on Gemini's events (tool events match every tool)."""
    cmd = "%s %s %s %s" % tuple(shlex.quote(x) for x in (sys.executable, h.RECORD_HOOK, log, replies))
    hooks = {}
    for ev in EVENTS:
        group = {"hooks": [{"name": "record", "type": "command", "command": cmd, "timeout": 30000}]}
        if ev in ("BeforeTool", "AfterTool"):
            group["matcher"] = "*"
        hooks[ev] = [group]
    return hooks


class HarnessFacts(h.HarnessCase):
    harness = "gemini"

    def setUp(self):
        super().setUp()
        self.log = os.path.join(self.tmp, "hooks.jsonl")
        self.replies = os.path.join(self.tmp, "replies")
        self.write_hooks(gemini_recording_hooks(self.log, self.replies))
        self.write_file("src/a.py", "original\n")
        self.a = os.path.join(self.repo, "src", "a.py")

    def records(self, event=None, tool_name=None):
        return [r for r in h.read_hook_log(self.log)
                if (event is None or r["payload"].get("hook_event_name") == event)
                and (tool_name is None or r["payload"].get("tool_name") == tool_name)]

    def edit_and_create(self):
        return [tool("read_file", file_path=self.a),
                tool("replace", file_path="src/a.py", old_string="original", new_string="agent", instruction="edit"),
                tool("write_file", file_path=os.path.join(self.repo, "src", "new.py"), content="new\n"),
                say("done")]

    def test_hooks_see_its_own_events_tool_names_and_path_fields(self):
        result = self.run_agent(self.edit_and_create())
        self.assertEqual(self.read_file("src/a.py"), "agent\n")
        events = [r["payload"]["hook_event_name"] for r in self.records()]
        for ev in EVENTS:
            self.assertIn(ev, events)
        edit = self.records("BeforeTool", "replace")[0]["payload"]
        self.assertEqual(edit["tool_input"], {"file_path": "src/a.py", "old_string": "original",
                                              "new_string": "agent", "instruction": "edit"})
        self.assertEqual(edit["cwd"], self.repo)  # a relative file_path is the project directory's
        create = self.records("BeforeTool", "write_file")[0]["payload"]
        self.assertEqual(create["tool_input"], {"file_path": os.path.join(self.repo, "src", "new.py"),
                                                "content": "new\n"})
        self.assertEqual(create["session_id"], result.session_id())
        self.assertNotIn("agent_id", create)
        env = self.records("BeforeTool", "write_file")[0]["env"]
        self.assertEqual(env.get("GEMINI_PROJECT_DIR"), self.repo)
        self.assertEqual(env.get("GEMINI_SESSION_ID"), result.session_id())
        self.assertEqual(self.records("SessionStart")[0]["payload"]["source"], "startup")
        paths = {r.path.split("?")[0] for r in self.server.requests}
        self.assertEqual(paths, {"/v1beta/models/%s:streamGenerateContent" % h.GEMINI_MODEL}, paths)
        self.assertEqual(self.server.requests[0].headers.get("x-goog-api-key"), "sk-e2e-offline")

    def test_an_untrusted_folder_runs_no_project_hooks(self):
        # Folder trust is on by default in 0.61.0 (its documentation says off): headless in an
        # untrusted folder it refuses to start (interactive, it asks), and no project hook runs.
        result = self.run_agent(self.edit_and_create(), trust=False, expect_ok=False)
        self.assertEqual(result.code, 55, result.describe())
        self.assertIn("not running in a trusted directory", result.stderr)
        self.assertEqual((self.records(), self.server.model_requests()), ([], []))
        self.assertEqual(self.read_file("src/a.py"), "original\n")

    def test_decision_deny_blocks_and_its_reason_reaches_the_model(self):
        h.write_reply(self.replies, "BeforeTool-replace", {"decision": "deny", "reason": "REASON-edit"})
        h.write_reply(self.replies, "BeforeTool-write_file", {"decision": "deny", "reason": "REASON-create"})
        self.run_agent(self.edit_and_create())
        self.assertEqual(self.read_file("src/a.py"), "original\n")
        self.assertIsNone(self.read_file("src/new.py"))
        reqs = self.server.model_requests()
        self.assertIn("REASON-edit", "\n".join(reqs[2].tool_results()))
        self.assertIn("REASON-create", "\n".join(reqs[3].tool_results()))

    def test_additional_context_reaches_the_model_at_start_prompt_and_after_tools(self):
        for event in ("SessionStart", "BeforeAgent", "AfterTool-read_file"):
            h.write_reply(self.replies, event, {"hookSpecificOutput": {
                "hookEventName": event.split("-")[0], "additionalContext": "CTX-%s" % event}})
        self.run_agent([tool("read_file", file_path=self.a), say("done")])
        reqs = self.server.model_requests()
        self.assertIn("CTX-SessionStart", reqs[0].user_text())
        self.assertIn("CTX-BeforeAgent", reqs[0].user_text())
        self.assertIn("CTX-AfterTool-read_file", "\n".join(reqs[1].tool_results()) + reqs[1].tail_text())


class CoordScenarios(h.CoordCase):
    """coord installed by ./install; the real hooks, run by Gemini from .gemini/settings.json."""

    harness = "gemini"

    def script(self, repo):
        return [tool("read_file", file_path=os.path.join(repo, "src", "a.py")),
                tool("replace", file_path="src/a.py", old_string="original", new_string="agent", instruction="edit"),
                tool("write_file", file_path=os.path.join(repo, "src", "new.py"), content="new\n"),
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
            self.assertIn("coord: write refused", text)
            self.assertIn(path, text)
            self.assertIn(peer["handle"], text)
            self.assertIn(".coord/coord send", text)
        rt = self.runtimes_of(result.session_id())
        self.assertEqual([(r["harness"], r.get("agent_id")) for r in rt], [("gemini", None)], self.coord_state())

    def test_runtime_is_gemini_its_context_arrives_and_it_ends_with_the_session(self):
        result = self.run_agent([say("done")])
        rts = self.runtimes_of(result.session_id())
        self.assertEqual([(r["harness"], r.get("agent_id")) for r in rts], [("gemini", None)], self.coord_state())
        self.assertIsNotNone(rts[0]["ended_at"], rts[0])
        self.assertIn("coord: you are %s" % rts[0]["handle"], self.server.model_requests()[0].user_text())

    def delivery_state(self, msg_id):
        st = store.Store(self.env["COORD_DB"])
        try:
            return st.q("SELECT state FROM deliveries WHERE message = ?", (msg_id,)).fetchone()[0]
        finally:
            st.close()

    def test_a_peers_message_reaches_the_model_and_is_delivered_only_then(self):
        peer = self.peer()
        body = "BODY-g3m: please leave src/a.py alone"
        self.write_file("notes.txt", "notes\n")
        notes = os.path.join(self.repo, "notes.txt")
        seen = {}

        def send(req):
            agents = [rt for rt in self.rcoord("list")["runtimes"] if rt["id"] != peer["id"]]
            self.assertEqual(len(agents), 1, agents)
            seen.update(self.rcoord("send", body, "--to", agents[0]["handle"], "--runtime", peer["id"]))
            seen["at_send"] = self.delivery_state(seen["id"])
            return tool("read_file", file_path=notes)

        def carried(req):
            seen["carried"] = body in req.text()
            seen["then"] = self.delivery_state(seen["id"])
            return say("done")
        self.run_agent([send, carried])
        self.assertEqual(seen["at_send"], "queued")
        self.assertEqual((seen["carried"], seen["then"]), (True, "delivered"),
                         self.server.model_requests()[1].tail_text()[:2000])
        self.assertNotIn(body, self.server.model_requests()[0].text())

    def test_the_agents_own_coord_commands_act_as_its_runtime(self):
        # Gemini's shell tool sets no session variable coord reads: the caller is found by the
        # registered harness process among the shell command's ancestors.
        out = os.path.join(self.tmp, "whoami.json")
        coord = os.path.join(self.repo, ".coord", "coord")
        result = self.run_agent([tool("run_shell_command", command="%s %s heartbeat --json > %s" % (
            shlex.quote(sys.executable), shlex.quote(coord), shlex.quote(out)), description="who"),
            say("done")])
        with open(out) as f:
            listed = json.load(f)
        rts = self.runtimes_of(result.session_id())
        self.assertEqual(len(rts), 1, self.coord_state())
        self.assertEqual(listed.get("runtime"), rts[0]["handle"], listed)


class CloseThenRemove(h.CloseThenRemove, h.CoordCase):
    """Gemini CLI 0.61.0 hung up by `work close` (its launcher ignores the hangup and SIGTERM):
    close ends what it launched, and the remove right after succeeds."""

    harness = "gemini"

    def launch_setup(self):
        h.write_gemini_user_settings(self.home)
        h.trust_gemini_folder(self.home, self.repo)  # the person trusted the shared checkout once
        return h.gemini_env(self.home, self.server, self.launch_managed({"COORD_GEMINI_CMD": self.cli}))

    def test_close_then_remove_succeeds_first_time(self):
        self.close_then_remove()


class WatchDialog(h.WatchDialog, h.CoordCase):
    """The live view of an interactive Gemini CLI 0.61.0 that `work start` launched, in its
    default approval mode: working in its turn, waiting while its confirmation dialog for a
    write is open (its Notification hook, ToolPermission), with the person told once, then idle
    after the person approves, and told it finished its turn (docs/harness-gemini.md, States)."""

    harness = "gemini"
    DIALOG_TOOL = "Write"

    def launch_setup(self):
        h.write_gemini_user_settings(self.home)
        h.trust_gemini_folder(self.home, self.repo)
        return h.gemini_env(self.home, self.server, self.launch_managed({"COORD_GEMINI_CMD": self.cli}))



if __name__ == "__main__":
    unittest.main()
