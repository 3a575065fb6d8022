"""End-to-end tests: the real Factory Droid CLI (@factory/cli-linux-x64, pinned in tests/provision), offline.

Droid 0.225.2 runs Claude-shaped hooks from `.factory/hooks.json` (events at the top level) under
its own tool names. `droid exec` runs in its air-gapped mode with two custom models on its
Anthropic provider, aimed at tests/modelserver.py (harnesses.droid_env). These tests run coord
installed by ./install (docs/harness-droid.md); the control runs move coord's hook file aside.
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses as h  # noqa: E402
from modelserver import Turn, say, tool  # noqa: E402

HOOKS = os.path.join(".factory", "hooks.json")


def shell(command):
    """Droid's shell tool: a low risk level is what `--auto high` runs without asking."""
    return tool("Execute", command=command, riskLevel="low", riskLevelReason="e2e")


class CoordScenarios(h.CoordCase):
    """coord installed by ./install; the real hooks, run by Droid from .factory/hooks.json."""

    harness = "droid"

    def setUp(self):
        super().setUp()
        self.write_file("src/a.py", "original\n")
        self.a = os.path.join(self.repo, "src", "a.py")

    def without_coord(self):
        os.rename(os.path.join(self.repo, HOOKS), os.path.join(self.tmp, "hooks.json"))

    def test_a_peers_exclusive_lease_denies_create_and_edit_and_the_model_hears_why(self):
        peer = self.lease("src/a.py")
        new = os.path.join(self.repo, "src", "new.py")
        self.lease("src/new.py", peer)
        script = [tool("Read", file_path=self.a),
                  tool("Edit", file_path=self.a, old_str="original", new_str="agent"),
                  tool("Create", file_path=new, content="new\n"),
                  say("done")]
        result = self.run_agent(script)
        tools = [t["name"] for t in (self.server.model_requests()[0].body.get("tools") or [])]
        self.assertIn("Create", tools)
        self.assertEqual(self.read_file("src/a.py"), "original\n", result.describe())
        self.assertIsNone(self.read_file("src/new.py"))
        self.refusals_naming(peer, 2)
        # The control: the same run with coord's hook file moved aside writes both files.
        self.without_coord()
        self.run_agent(script)
        self.assertEqual(self.read_file("src/a.py"), "agent\n")
        self.assertEqual(self.read_file("src/new.py"), "new\n")

    def test_apply_patch_is_checked_for_every_path_it_writes(self):
        peer = self.lease("src/held.py")
        patch = ("*** Begin Patch\n*** Add File: src/free.py\n+free\n*** Update File: src/a.py\n@@\n-original\n+agent\n"
                 "*** Add File: src/held.py\n+mine\n*** End Patch\n")
        script = [Turn(calls=[{"kind": "custom", "name": "ApplyPatch", "input": patch}]), say("done")]
        self.run_agent(script, args=["-m", h.DROID_PATCH_MODEL])
        self.assertIsNone(self.read_file("src/free.py"))
        self.assertIsNone(self.read_file("src/held.py"))
        self.assertEqual(self.read_file("src/a.py"), "original\n")
        refusal = [t for t in self.results() if "coord: write refused" in t]
        self.assertEqual(len(refusal), 1, self.results())
        self.assertIn("src/held.py", refusal[0])
        self.assertIn(peer["handle"], refusal[0])
        self.without_coord()
        self.run_agent(script, args=["-m", h.DROID_PATCH_MODEL])
        self.assertEqual((self.read_file("src/free.py"), self.read_file("src/held.py"), self.read_file("src/a.py")),
                         ("free\n", "mine\n", "agent\n"), self.results())

    def test_registration_start_context_a_message_and_the_shells_identity(self):
        _result, rt = self.run_registration(tool("Read", file_path=self.a),
                                            shell("./.coord/coord claim src/b.py -p shell-claim"), "MSG-FROM-PEER-73")
        self.assertIn("coord: you are %s" % rt["handle"], self.server.model_requests()[0].text())
        # the message comes as the context of the tool call after it was sent, in the next request
        self.assertIn("MSG-FROM-PEER-73", self.server.model_requests()[1].text())
        ended = [r for r in self.coord_state()["runtimes"] if r["id"] == rt["id"]][0]
        self.assertEqual(ended["end_reason"], "session-end")

    def test_a_task_subagents_write_is_denied_and_it_registers_under_its_parent(self):
        # Droid runs a Task subagent as a session of its own, whose SessionStart names the caller
        # in calling_session_id: coord keys it under its parent, as a Claude subagent (its own
        # identity, under the parent's conversation)
        peer = self.lease("src/held.py")
        free, held = os.path.join(self.repo, "src", "free.py"), os.path.join(self.repo, "src", "held.py")
        task = tool("Task", subagent_type="worker", description="sub task", prompt="SUBLANE write both", **{"await": True})
        # (Droid 0.225.2 air-gapped still asks api.factory.ai for something when it starts a
        # subagent; the scripted server refuses it, and the subagent runs)
        result = self.run_agent([task, say("done"), say("done")], refused_ok=("api.factory.ai",), lanes={
            "SUBLANE": [tool("Create", file_path=free, content="sub\n"), tool("Create", file_path=held, content="sub\n"),
                        say("sub done")]})
        sub = "\n".join(t for r in self.server.model_requests("SUBLANE") for t in r.tool_results())
        self.assertEqual(self.read_file("src/free.py"), "sub\n", sub)
        self.assertIsNone(self.read_file("src/held.py"))
        self.assertIn("coord: write refused", sub)
        self.assertIn(peer["handle"], sub)
        rts = self.runtimes_of(result.session_id())
        self.assertEqual(sorted((r["harness"], bool(r.get("agent_id"))) for r in rts),
                         [("droid", False), ("droid", True)], self.coord_state())

    def test_in_its_managed_clone_it_registers_and_the_work_lands_and_goes(self):
        # Droid leaves nothing of its own in the clone (its sessions live under ~/.factory)
        self.one_write_in_a_clone_lands(
            lambda clone: tool("Create", file_path=os.path.join(clone, "src", "c.py"), content="c\n"))


class ResumedFirstBoundary(h.ResumedFirstBoundary, h.CoordCase):
    """Droid's TUI started by `work start --harness droid` in tmux, its window killed, then `work
    resume --interrupted` (`droid --resume ID`). The person trusted the shared checkout in Droid
    and turned carry-over on, so the clone is trusted and no dialog stands before the hooks."""

    harness = "droid"

    def launch_setup(self):
        h.write_droid_settings(self.home, self.server, trusted=[self.repo])
        return h.droid_env(self.home, self.server, self.launch_managed({"COORD_DROID_CMD": self.cli}))

    def test_a_resumed_droid_is_nudged_and_told_its_leases(self):
        work, rec = self.resume_and_nudge("src/kept.py")
        with open(os.path.join(self.home, ".factory", "settings.json")) as f:
            folders = json.load(f)["trustedFolders"]
        self.assertIn(os.path.realpath(work["path"]), [os.path.realpath(p) for p in folders])
        self.told_kept("src/kept.py", self.requests_at_resume)


if __name__ == "__main__":
    unittest.main()
