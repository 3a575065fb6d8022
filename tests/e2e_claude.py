"""End-to-end tests: the real Claude Code CLI, offline, against tests/modelserver.py.

HarnessFacts pins what coord relies on in Claude Code itself (tools run, project hooks fire,
how a deny reason and additionalContext reach the model, what a subagent's shell sees), using
a recording hook of the tests' own. The coord scenarios live in CoordScenarios.
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses as h  # noqa: E402
from modelserver import say, tool  # noqa: E402


class HarnessFacts(h.HarnessCase):
    harness = "claude"

    def setUp(self):
        super().setUp()
        self.log = os.path.join(self.tmp, "hooks.jsonl")
        self.replies = os.path.join(self.tmp, "replies")
        self.write_hooks(h.recording_hooks(self.log, self.replies))

    def records(self, event=None, tool_name=None):
        return [r for r in h.read_hook_log(self.log)
                if (event is None or r["payload"].get("hook_event_name") == event)
                and (tool_name is None or r["payload"].get("tool_name") == tool_name)]

    def test_scripted_write_runs_offline_and_fires_project_hooks(self):
        path = os.path.join(self.repo, "a.txt")
        result = self.run_agent([tool("Write", file_path=path, content="hello\n"), say("done")])
        self.assertEqual(self.read_file("a.txt"), "hello\n")
        events = [r["payload"]["hook_event_name"] for r in self.records()]
        for ev in ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop",
                   "SessionEnd"):
            self.assertIn(ev, events)
        pre = self.records("PreToolUse", "Write")[0]["payload"]
        self.assertEqual(pre["tool_input"]["file_path"], path)
        self.assertEqual(pre["session_id"], result.session_id())
        self.assertEqual(len(self.server.model_requests()), 2)
        self.assertEqual([r.path for r in self.server.requests],
                         ["/v1/messages?beta=true"] * 2)

    def test_deny_reason_comes_back_as_the_tool_error(self):
        h.write_reply(self.replies, "PreToolUse-Write", h.deny("REASON-held-by-peer"))
        self.run_agent([tool("Write", file_path=os.path.join(self.repo, "a.txt"),
                             content="x\n"), say("done")])
        self.assertIsNone(self.read_file("a.txt"))
        tail = self.server.model_requests()[1].tail()
        block = tail[-1]["content"][0]
        self.assertEqual(block["type"], "tool_result")
        self.assertIs(block["is_error"], True)
        self.assertEqual(block["content"], "REASON-held-by-peer")

    def test_additional_context_comes_back_as_a_system_reminder(self):
        self.write_file("b.txt", "old\n")
        h.write_reply(self.replies, "PreToolUse-Edit", h.context("PreToolUse", "PRE-CTX"))
        h.write_reply(self.replies, "PostToolUse-Read", h.context("PostToolUse", "POST-CTX"))
        path = os.path.join(self.repo, "b.txt")
        self.run_agent([tool("Read", file_path=path),
                        tool("Edit", file_path=path, old_string="old", new_string="new"),
                        say("done")])
        self.assertEqual(self.read_file("b.txt"), "new\n")
        reqs = self.server.model_requests()
        post = reqs[1].tail()[-1]["content"]
        self.assertEqual(post[-1]["text"], "<system-reminder>\nPostToolUse:Read hook additional "
                                           "context: POST-CTX\n</system-reminder>")
        pre = reqs[2].tail()[-1]["content"]
        self.assertEqual(pre[0]["type"], "tool_result")
        self.assertEqual(pre[-1]["text"], "<system-reminder>\nPreToolUse:Edit hook additional "
                                          "context: PRE-CTX\n</system-reminder>")

    def test_session_start_context_is_a_system_message(self):
        h.write_reply(self.replies, "SessionStart", h.context("SessionStart", "SS-CTX"))
        self.run_agent([say("done")])
        first = self.server.model_requests()[0]
        systems = [m for m in first.items() if m.get("role") == "system"]
        self.assertTrue(any("SessionStart hook additional context: SS-CTX" in m["content"]
                            for m in systems), first.tail_text()[:2000])

    def test_subagent_shell_sees_the_same_environment_as_the_parent(self):
        # A subagent's Bash commands carry nothing that identifies the subagent: same env,
        # same CLAUDE_CODE_SESSION_ID, same process. Only its hook payloads carry agent_id.
        penv = os.path.join(self.tmp, "env-parent")
        senv = os.path.join(self.tmp, "env-sub")
        self.run_agent(
            [tool("Bash", command="env > %s; echo $PPID >> %s" % (penv, penv)),
             tool("Agent", description="sub", prompt="SUBTASK-1", subagent_type="general-purpose"),
             say("done")],
            lanes={"SUBTASK-1": [tool("Bash", command="env > %s; echo $PPID >> %s" % (senv, senv)),
                                 say("sub done")]},
            args=["--allowedTools", "Bash"])
        with open(penv) as f:
            parent = sorted(f.read().splitlines())
        with open(senv) as f:
            sub = sorted(f.read().splitlines())
        self.assertEqual(parent, sub)
        self.assertTrue(any(l.startswith("CLAUDE_CODE_SESSION_ID=") for l in parent))
        start = self.records("SubagentStart")[0]["payload"]
        sub_bash = [r["payload"] for r in self.records("PreToolUse", "Bash")
                    if r["payload"].get("agent_id")]
        self.assertEqual([p["agent_id"] for p in sub_bash], [start["agent_id"]])
        self.assertEqual(sub_bash[0]["session_id"], start["session_id"])

    def test_bash_needs_allowed_tools_in_accept_edits_mode(self):
        # acceptEdits alone refuses this Bash command in -p mode; tests that script shell
        # commands pass --allowedTools Bash.
        self.run_agent([tool("Bash", command="env > ran.txt"), say("done")])
        self.assertIsNone(self.read_file("ran.txt"))
        self.assertIn("requires approval", self.server.model_requests()[1].tool_results()[0])
        self.run_agent([tool("Bash", command="env > ran.txt"), say("done")],
                       args=["--allowedTools", "Bash"])
        self.assertIn("CLAUDE_CODE_SESSION_ID=", self.read_file("ran.txt"))

    def test_wall_time_without_hooks(self):
        os.unlink(os.path.join(self.repo, ".claude", "settings.json"))
        result = self.run_agent([tool("Write", file_path=os.path.join(self.repo, "a.txt"),
                                      content="x\n"), say("done")])
        self.assertEqual(self.records(), [])
        h.figure("claude scripted run (Write + final), no hooks", result.seconds)


if __name__ == "__main__":
    unittest.main()
