"""End-to-end tests: the real Codex CLI, offline, against tests/modelserver.py.

HarnessFacts pins what coord relies on in Codex itself (both trust gates, tools run, project
hooks fire, how a deny reason and additionalContext reach the model, what a sub-agent's shell
sees), using a recording hook of the tests' own. The coord scenarios live in CoordScenarios.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses as h  # noqa: E402
from modelserver import apply_patch, function_call, say, shell  # noqa: E402


def add_file(rel, text):
    body = "".join("+" + line + "\n" for line in text.splitlines())
    return apply_patch("*** Begin Patch\n*** Add File: %s\n%s*** End Patch" % (rel, body))


class HarnessFacts(h.HarnessCase):
    harness = "codex"

    def setUp(self):
        super().setUp()
        self.log = os.path.join(self.tmp, "hooks.jsonl")
        self.replies = os.path.join(self.tmp, "replies")
        self.hooks_json = self.write_hooks(h.recording_hooks(self.log, self.replies))

    def records(self, event=None, tool_name=None):
        return [r for r in h.read_hook_log(self.log)
                if (event is None or r["payload"].get("hook_event_name") == event)
                and (tool_name is None or r["payload"].get("tool_name") == tool_name)]

    def test_computed_hook_hashes_are_what_codex_trusts(self):
        self.server.load([])
        h.trust_codex_repo(self.codex_home, self.server, self.repo)
        reply = h.codex_hooks_list(self.cli, self.repo, self.home, self.codex_home, self.server)
        listed = [hk for entry in reply["result"]["data"] for hk in entry["hooks"]]
        ours = h.codex_hook_hashes(self.hooks_json)
        self.assertEqual(sorted(hk["key"] for hk in listed), sorted(ours))
        for hk in listed:
            self.assertEqual(hk["currentHash"], ours[hk["key"]])
            self.assertEqual(hk["trustStatus"], "trusted", hk)

    def test_scripted_patch_runs_offline_and_fires_project_hooks(self):
        result = self.run_agent([add_file("a.txt", "hello"), say("done")])
        self.assertEqual(self.read_file("a.txt"), "hello\n")
        events = [r["payload"]["hook_event_name"] for r in self.records()]
        for ev in ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop",
                   "SessionEnd"):
            self.assertIn(ev, events)
        pre = self.records("PreToolUse", "apply_patch")[0]["payload"]
        self.assertIn("*** Add File: a.txt", pre["tool_input"]["command"])
        self.assertEqual(pre["session_id"], result.session_id())
        self.assertEqual([r.path for r in self.server.requests], ["/v1/responses"] * 2)

    def test_untrusted_hooks_do_not_run(self):
        self.run_agent([add_file("a.txt", "hello"), say("done")], trust=False)
        self.assertEqual(self.read_file("a.txt"), "hello\n")
        self.assertEqual(self.records(), [])

    def test_deny_reason_comes_back_as_the_tool_output(self):
        h.write_reply(self.replies, "PreToolUse-apply_patch", h.deny("REASON-held-by-peer"))
        self.run_agent([add_file("a.txt", "x"), say("done")])
        self.assertIsNone(self.read_file("a.txt"))
        tail = self.server.model_requests()[1].tail()
        self.assertEqual(tail[-1]["type"], "custom_tool_call_output")
        self.assertTrue(tail[-1]["output"].startswith(
            "Command blocked by PreToolUse hook: REASON-held-by-peer. Command: *** Begin Patch"),
            tail[-1]["output"])

    def test_additional_context_comes_back_as_developer_messages(self):
        h.write_reply(self.replies, "PreToolUse-Bash", h.context("PreToolUse", "PRE-CTX"))
        h.write_reply(self.replies, "PostToolUse-Bash", h.context("PostToolUse", "POST-CTX"))
        self.run_agent([shell("true"), say("done")])
        tail = self.server.model_requests()[1].tail()
        self.assertEqual([(i["type"], i.get("role")) for i in tail],
                         [("message", "developer"), ("message", "developer"),
                          ("function_call_output", None)])
        self.assertEqual(tail[0]["content"], [{"type": "input_text", "text": "PRE-CTX"}])
        self.assertEqual(tail[1]["content"], [{"type": "input_text", "text": "POST-CTX"}])

    def test_session_start_context_is_a_developer_message(self):
        h.write_reply(self.replies, "SessionStart", h.context("SessionStart", "SS-CTX"))
        self.run_agent([say("done")])
        items = self.server.model_requests()[0].items()
        self.assertIn({"type": "input_text", "text": "SS-CTX"},
                      [c for i in items if i.get("role") == "developer" for c in i["content"]])

    def test_subagent_shell_sees_its_own_thread_id(self):
        # Inside a sub-agent, CODEX_THREAD_ID is the sub-agent's agent_id (the hook payloads'
        # agent_id); CODEX_SESSION_ID stays the parent's session.
        penv = os.path.join(self.tmp, "env-parent")
        senv = os.path.join(self.tmp, "env-sub")
        self.run_agent(
            [shell("env > %s" % penv),
             function_call("spawn_agent", {"task_name": "sub1", "fork_turns": "none",
                                           "message": "SUBTASK-1"}, namespace="collaboration"),
             # wait_agent is refused in exec mode ("unsupported call"): poll for the sub's file.
             shell("for i in $(seq 200); do [ -s %s ] && break; sleep 0.05; done" % senv),
             say("done")],
            lanes={"SUBTASK-1": [shell("env > %s" % senv), say("sub done")]},
            features={"multi_agent_v2": True})

        def env_of(path):
            with open(path) as f:
                return dict(l.split("=", 1) for l in f.read().splitlines() if "=" in l)
        parent, sub = env_of(penv), env_of(senv)
        session = self.records("SessionStart")[0]["payload"]["session_id"]
        agent_id = self.records("SubagentStart")[0]["payload"]["agent_id"]
        self.assertEqual(parent["CODEX_THREAD_ID"], session)
        self.assertEqual(parent["CODEX_SESSION_ID"], session)
        self.assertEqual(sub["CODEX_THREAD_ID"], agent_id)
        self.assertEqual(sub["CODEX_SESSION_ID"], session)
        sub_bash = [r["payload"] for r in self.records("PreToolUse", "Bash")
                    if r["payload"].get("agent_id")]
        self.assertEqual([p["agent_id"] for p in sub_bash], [agent_id])

    def test_wall_time_without_hooks(self):
        os.unlink(self.hooks_json)
        result = self.run_agent([add_file("a.txt", "x"), say("done")])
        self.assertEqual(self.records(), [])
        h.figure("codex scripted run (apply_patch + final), no hooks", result.seconds)


if __name__ == "__main__":
    unittest.main()
