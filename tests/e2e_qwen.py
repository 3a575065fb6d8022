"""End-to-end tests: the real Qwen Code CLI, offline, against tests/modelserver.py.

Qwen Code (pinned in tests/provision) runs headless (`qwen --approval-mode yolo -o stream-json`)
with its OpenAI-compatible provider aimed at the scripted server's Chat Completions API. It
runs Claude-shaped hooks from `.qwen/settings.json` under its own tool ids. HarnessFacts pins
what coord relies on in Qwen itself, with a recording hook of the tests' own; CoordScenarios
runs coord installed by ./install; QwenStartWithPrompt launches it with `coord work start`.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses as h  # noqa: E402
import store  # noqa: E402
from e2e_work_start import StartWithPrompt  # noqa: E402
from modelserver import say, tool  # noqa: E402

# A background subagent's result comes back as one more main-lane request: spare replies.
SPARE = [say("done")] * 3


class HarnessFacts(h.HarnessCase):
    harness = "qwen"

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

    def writes(self):
        # Qwen's edit refuses a file the session has not read (0.24.4): read it first
        return [tool("read_file", file_path=self.a),
                tool("edit", file_path=self.a, old_string="original", new_string="agent"),
                tool("write_file", file_path=os.path.join(self.repo, "src", "new.py"), content="new\n"),
                tool("run_shell_command", command="env > shell.env", description="env"),
                say("done")]

    def test_claude_shaped_hooks_run_with_qwens_tool_ids(self):
        result = self.run_agent(self.writes())
        self.assertEqual(self.read_file("src/a.py"), "agent\n")
        events = [r["payload"]["hook_event_name"] for r in self.records()]
        for ev in ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"):
            self.assertIn(ev, events)
        self.assertNotIn("SessionEnd", events)  # headless -p ends without it (0.24.4)
        edit = self.records("PreToolUse", "edit")[0]["payload"]
        self.assertEqual(edit["tool_input"], {"file_path": self.a, "old_string": "original", "new_string": "agent"})
        self.assertEqual(edit["session_id"], result.session_id())
        self.assertNotIn("agent_id", edit)
        create = self.records("PreToolUse", "write_file")[0]["payload"]
        self.assertEqual(create["tool_input"], {"file_path": os.path.join(self.repo, "src", "new.py"),
                                                "content": "new\n"})
        shell = self.records("PreToolUse", "run_shell_command")[0]["payload"]
        self.assertEqual(shell["tool_input"]["command"], "env > shell.env")
        env = dict(line.split("=", 1) for line in self.read_file("shell.env").splitlines() if "=" in line)
        self.assertEqual(env.get("QWEN_CODE_SESSION_ID"), result.session_id())
        self.assertEqual(env.get("QWEN_CODE_AGENT_ID"), "")
        # UserPromptSubmit comes before every model request; only the first is the prompt
        prompts = [r["payload"] for r in self.records("UserPromptSubmit")]
        self.assertEqual(prompts[0].get("submitted_prompt"), "Do the scripted task.")
        self.assertEqual([(p.get("prompt"), "submitted_prompt" in p) for p in prompts[1:]],
                         [("", False)] * (len(prompts) - 1))
        self.assertEqual({r.path for r in self.server.requests}, {"/v1/chat/completions"})
        self.assertEqual(self.server.requests[0].headers.get("authorization"), "Bearer " + h.QWEN_KEY)

    def test_a_subagents_events_carry_its_agent_id(self):
        sub = os.path.join(self.repo, "src", "sub.py")
        self.run_agent([tool("agent", description="sub task", prompt="SUBLANE write", subagent_type="general-purpose"),
                        ] + SPARE,
                       lanes={"SUBLANE": [tool("write_file", file_path=sub, content="sub\n"),
                                          tool("run_shell_command", command="env > sub.env"), say("sub done")]})
        start = self.records("SubagentStart")[0]["payload"]
        write = self.records("PreToolUse", "write_file")[0]["payload"]
        self.assertEqual(write["agent_id"], start["agent_id"])
        self.assertEqual(write["session_id"], start["session_id"])
        stop = [r["payload"] for r in self.records("SubagentStop")]
        self.assertEqual([p["agent_id"] for p in stop], [start["agent_id"]])
        env = dict(line.split("=", 1) for line in self.read_file("sub.env").splitlines() if "=" in line)
        self.assertEqual((env.get("QWEN_CODE_SESSION_ID"), env.get("QWEN_CODE_AGENT_ID")),
                         (start["session_id"], start["agent_id"]))

    def test_claude_style_deny_blocks_and_its_reason_is_the_tool_result(self):
        h.write_reply(self.replies, "PreToolUse-edit", h.deny("REASON-edit"))
        h.write_reply(self.replies, "PreToolUse-write_file", h.deny("REASON-write"))
        self.run_agent(self.writes())
        self.assertEqual(self.read_file("src/a.py"), "original\n")
        self.assertIsNone(self.read_file("src/new.py"))
        reqs = self.server.model_requests()
        self.assertEqual(reqs[2].tool_results(), ["REASON-edit"])
        self.assertEqual(reqs[3].tool_results(), ["REASON-write"])

    def test_with_the_folder_trust_gate_on_an_untrusted_folder_runs_no_project_hooks(self):
        h.write_qwen_user_settings(self.home, folder_trust=True)
        result = self.run_agent(self.writes())
        self.assertEqual(self.records(), [])
        # Qwen itself drops yolo in an untrusted folder: headless, the writes are declined
        self.assertIn('Approval mode overridden to "default" because the current folder is not trusted',
                      result.stderr)
        self.assertEqual(self.read_file("src/a.py"), "original\n")
        h.trust_qwen_folder(self.home, self.repo)
        self.run_agent(self.writes())
        self.assertTrue(self.records("PreToolUse", "edit"))
        self.assertEqual(self.read_file("src/a.py"), "agent\n")

    def test_additional_context_reaches_the_model(self):
        for event in ("SessionStart", "UserPromptSubmit", "PostToolUse"):
            h.write_reply(self.replies, event, h.context(event, "CTX-%s" % event))
        self.run_agent([tool("read_file", file_path=self.a), say("done")])
        first, second = self.server.model_requests()
        self.assertIn("CTX-SessionStart", first.text())
        self.assertIn("CTX-UserPromptSubmit", first.user_text())
        self.assertIn("CTX-PostToolUse", second.tool_results()[0])
        # the continuation's UserPromptSubmit context comes after the tool result
        self.assertIn("CTX-UserPromptSubmit", second.tail_text())


class CoordScenarios(h.CoordCase):
    """coord installed by ./install; the real hooks, run by Qwen from .qwen/settings.json."""

    harness = "qwen"

    def script(self, repo):
        a = os.path.join(repo, "src", "a.py")
        return [tool("read_file", file_path=a),
                tool("edit", file_path=a, old_string="original", new_string="agent"),
                tool("write_file", file_path=os.path.join(repo, "src", "new.py"), content="new\n"),
                tool("notebook_edit", notebook_path=os.path.join(repo, "src", "n.ipynb"), cell_id="c1",
                     new_source="x = 2"),
                say("done")]

    def test_writes_to_a_peers_exclusive_lease_are_denied(self):
        peer = self.peer()
        self.rcoord("claim", "src/a.py", "src/new.py", "src/n.ipynb", "--runtime", peer["id"], "-p", "peer work")
        for repo in (self.repo, self.plain):
            self.write_file("src/a.py", "original\n", repo=repo)
        # The control: the same scripted run without coord edits and creates.
        self.run_agent(self.script(self.plain), repo=self.plain)
        with open(os.path.join(self.plain, "src", "a.py")) as f:
            self.assertEqual(f.read(), "agent\n")
        self.assertTrue(os.path.exists(os.path.join(self.plain, "src", "new.py")))
        plain_results = self.server.model_requests()[4].tool_results()
        self.assertNotIn("write refused", "\n".join(plain_results))
        result = self.run_agent(self.script(self.repo))
        self.assertEqual(self.read_file("src/a.py"), "original\n")
        self.assertIsNone(self.read_file("src/new.py"))
        reqs = self.server.model_requests()
        for i, path in ((2, "src/a.py"), (3, "src/new.py"), (4, "src/n.ipynb")):
            text = "\n".join(reqs[i].tool_results())
            self.assertIn("coord: write refused", text)
            self.assertIn(path, text)
            self.assertIn(peer["handle"], text)
            self.assertIn(".coord/coord send", text)
        rt = [r for r in self.runtimes_of(result.session_id()) if not r.get("agent_id")]
        self.assertEqual([r["harness"] for r in rt], ["qwen"], self.coord_state())

    def test_a_subagents_write_is_denied_and_it_registers_under_its_parent(self):
        peer = self.peer()
        self.rcoord("claim", "src/a.py", "--runtime", peer["id"], "-p", "peer work")
        self.write_file("src/a.py", "original\n")
        a = os.path.join(self.repo, "src", "a.py")
        result = self.run_agent(
            [tool("agent", description="sub task", prompt="SUBLANE edit", subagent_type="general-purpose")] + SPARE,
            lanes={"SUBLANE": [tool("write_file", file_path=a, content="sub\n"), say("sub done")]})
        self.assertEqual(self.read_file("src/a.py"), "original\n")
        sub = self.server.model_requests("SUBLANE")[1]
        self.assertIn("coord: write refused", "\n".join(sub.tool_results()))
        rts = self.runtimes_of(result.session_id())
        self.assertEqual(sorted((r["harness"], bool(r.get("agent_id"))) for r in rts),
                         [("qwen", False), ("qwen", True)], self.coord_state())

    def test_the_runtime_is_qwen_and_its_context_names_it(self):
        result = self.run_agent([say("done")])
        rts = self.runtimes_of(result.session_id())
        self.assertEqual([(r["harness"], r.get("agent_id")) for r in rts], [("qwen", None)], self.coord_state())
        self.assertIn("coord: you are %s" % rts[0]["handle"], self.server.model_requests()[0].text())
        # coord's skill is in the skills Qwen offers (it reads .agents/skills)
        self.assertIn("<name>\ncoord\n</name>", self.server.model_requests()[0].user_text())

    def test_qwen_leaves_the_installed_settings_byte_identical(self):
        path = os.path.join(self.repo, ".qwen", "settings.json")
        with open(path, "rb") as f:
            installed = f.read()
        self.assertIn(b'"$version": 4', installed)
        self.run_agent([say("done")])
        with open(path, "rb") as f:
            self.assertEqual(f.read(), installed, "Qwen rewrote coord's .qwen/settings.json")
        # the harness fact behind it: without "$version" Qwen appends it on load, and its result is
        # exactly what coord installs
        with open(path, "wb") as f:
            f.write(installed.replace(b',\n  "$version": 4\n}', b"\n}"))
        self.run_agent([say("done")])
        with open(path, "rb") as f:
            self.assertEqual(f.read(), installed)

    def delivery_state(self, msg_id):
        st = store.Store(self.env["COORD_DB"])
        try:
            return st.q("SELECT state FROM deliveries WHERE message = ?", (msg_id,)).fetchone()[0]
        finally:
            st.close()

    def test_a_peers_message_reaches_the_model_and_is_delivered_only_then(self):
        peer = self.peer()
        body = "BODY-qw3n: please leave src/a.py alone"
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
            seen["carried"] = body in req.tail_text()
            seen["then"] = self.delivery_state(seen["id"])
            return say("done")
        self.run_agent([send, carried])
        self.assertEqual(seen["at_send"], "queued")
        self.assertEqual((seen["carried"], seen["then"]), (True, "delivered"),
                         self.server.model_requests()[1].tail_text()[:2000])
        self.assertNotIn(body, self.server.model_requests()[0].text())

    def test_in_a_managed_clone_the_runtime_registers_there_and_hears_its_work(self):
        env = self.managed_env()
        env = dict(self.env, **env)
        owner = self.rcoord("hello", env=env)["runtime"]
        work = self.rcoord("work", "create", "qwen-clone", env=dict(env, COORD_RUNTIME_ID=owner["id"]))["work"]
        clone = work["path"]
        result = self.run_agent([say("done")], repo=clone, env={k: env[k] for k in ("COORD_SCRATCH_ROOT",)})
        rts = self.runtimes_of(result.session_id())
        self.assertEqual([(r["harness"], os.path.realpath(r["cwd"])) for r in rts], [("qwen", os.path.realpath(clone))])
        first = self.server.model_requests()[0].text()
        self.assertIn("Your work: %s" % work["handle"], first)
        self.assertIn("report to %s" % owner["handle"], first)


class QwenStartWithPrompt(StartWithPrompt, h.HarnessCase):
    """`coord work start --harness qwen`: Qwen Code interactive in a tmux window."""

    harness = "qwen"

    def harness_env(self):
        return h.qwen_env(self.home, self.server, {"COORD_QWEN_CMD": h.find_cli("qwen") or "qwen"})

    def prepare(self, clone):
        h.write_qwen_user_settings(self.home)



if __name__ == "__main__":
    unittest.main()


class ResumedFirstBoundary(h.ResumedFirstBoundary, h.CoordCase):
    """Qwen Code 0.24.4 resumed (`qwen --resume ID`) runs SessionStart (source resume) at once:
    `work resume` gives it no first message."""

    harness = "qwen"

    def launch_setup(self):
        h.write_qwen_user_settings(self.home)
        return h.qwen_env(self.home, self.server, self.launch_managed({"COORD_QWEN_CMD": self.cli}))

    def test_resume_interrupted_brings_qwen_to_its_first_boundary(self):
        self.resume_and_nudge("src/kept.py")
        self.told_kept("src/kept.py", self.requests_at_resume)


class CloseThenRemove(h.CloseThenRemove, h.CoordCase):
    """Qwen Code 0.24.4 hung up by `work close`: the remove right after succeeds (its settings
    rewrite no longer leaves a change: the installer writes `"$version": 4` itself)."""

    harness = "qwen"

    def launch_setup(self):
        h.write_qwen_user_settings(self.home)
        return h.qwen_env(self.home, self.server, self.launch_managed({"COORD_QWEN_CMD": self.cli}))

    def test_close_then_remove_succeeds_first_time(self):
        self.close_then_remove(timeout=60)


class WatchDialog(h.WatchDialog, h.CoordCase):
    """The live view of an interactive Qwen Code 0.24.4 that `work start` launched with
    `--approval-mode default` (its own default, auto, lets a classifier approve a write in the
    clone with no dialog: docs/harness-qwen.md, States): working in its turn, waiting while its
    confirmation for a write is open (its PermissionRequest hook, with the tool), the person told
    once, then idle after the person approves, and told it finished its turn."""

    harness = "qwen"
    START_ARGS = ("--approval-mode", "default")
    DIALOG_TOOL = "write_file"

    def launch_setup(self):
        h.write_qwen_user_settings(self.home)
        return h.qwen_env(self.home, self.server, self.launch_managed({"COORD_QWEN_CMD": self.cli}))
