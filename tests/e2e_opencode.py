"""End-to-end tests: the real OpenCode CLI (opencode-ai, pinned in tests/provision), offline.

OpenCode runs `opencode run` with its Anthropic provider aimed at tests/modelserver.py (config in
OPENCODE_CONFIG outside the repository, see harnesses.opencode_env). It runs no hook commands:
coord's installer writes a plugin, .opencode/plugins/coord-hook.js, which OpenCode loads into its
own process and which runs coord's hook command at OpenCode's boundaries. These tests run coord
installed by ./install and the real plugin.
"""

import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses as h  # noqa: E402
import support  # noqa: E402
from modelserver import Turn, say, tool  # noqa: E402

PLUGIN = os.path.join(".opencode", "plugins", "coord-hook.js")


def patch_call(patch):
    """OpenCode's apply_patch tool call (offered to gpt- models): {patchText}."""
    return Turn(calls=[{"kind": "claude", "name": "apply_patch", "input": {"patchText": patch}}])


class CoordScenarios(h.PluginScenarios, h.CoordCase):
    """coord installed by ./install; OpenCode loads its plugin from .opencode/plugins/."""

    harness, plugin = "opencode", PLUGIN

    def test_apply_patch_is_checked_for_every_path_it_writes(self):
        peer = self.lease("src/held.py")
        patch = ("*** Begin Patch\n*** Add File: src/free.py\n+free\n*** Update File: src/a.py\n@@\n-original\n+agent\n"
                 "*** Add File: src/held.py\n+mine\n*** End Patch")
        result = self.run_agent([patch_call(patch), say("done")], args=["-m", h.OPENCODE_PATCH_MODEL])
        tools = [t["name"] for t in (self.server.model_requests()[0].body.get("tools") or [])]
        self.assertIn("apply_patch", tools)
        self.assertNotIn("edit", tools)
        self.assertIsNone(self.read_file("src/free.py"), result.describe())
        self.assertIsNone(self.read_file("src/held.py"))
        self.assertEqual(self.read_file("src/a.py"), "original\n")
        refusal = [t for t in self.results() if "coord: write refused" in t]
        self.assertEqual(len(refusal), 1, self.results())
        self.assertIn("src/held.py", refusal[0])
        self.assertIn(peer["handle"], refusal[0])
        # a patch of free paths only goes through
        self.run_agent([patch_call("*** Begin Patch\n*** Add File: src/free.py\n+free\n*** End Patch"), say("done")],
                       args=["-m", h.OPENCODE_PATCH_MODEL])
        self.assertEqual(self.read_file("src/free.py"), "free\n")

    def test_a_resumed_session_attaches_to_the_same_conversation(self):
        first = self.run_agent([say("first answer")], prompt="FIRST-PROMPT-7")
        conversation = first.session_id()
        self.assertTrue(conversation, first.describe())
        second = self.run_agent([say("second answer")], prompt="SECOND-PROMPT-8", args=["--session", conversation])
        self.assertEqual(second.session_id(), conversation)
        sent = self.server.model_requests()[0].text()
        self.assertIn("FIRST-PROMPT-7", sent)  # the model got the conversation so far
        self.assertIn("coord: you are", sent)
        rts = self.runtimes_of(conversation)
        self.assertEqual(len(rts), 2, rts)  # one attachment per OpenCode process
        self.assertEqual([rt["end_reason"] for rt in rts], ["session-end", "session-end"])
        audit = json.dumps(self.rcoord("audit"))  # the second start says it resumed a session
        self.assertEqual(audit.count('"hook:startup"'), 1, audit[-3000:])
        self.assertEqual(audit.count('"hook:resume"'), 1, audit[-3000:])

    def test_the_runtime_is_registered_in_its_managed_clone(self):
        self.env.update(self.managed_env())
        work = self.rcoord("work", "create", "oc-task")["work"]
        clone = work["path"]
        result = self.run_agent([tool("write", filePath=os.path.join(clone, "src", "c.py"), content="c\n"), say("done")],
                                repo=clone)
        self.assertEqual(open(os.path.join(clone, "src", "c.py")).read(), "c\n")
        rts = [rt for rt in self.coord_state()["runtimes"] if rt.get("conversation") == result.session_id()]
        self.assertEqual(len(rts), 1, result.describe())
        self.assertEqual(rts[0]["harness"], "opencode")
        self.assertEqual(os.path.realpath(rts[0]["cwd"]), os.path.realpath(clone))
        first = self.server.model_requests()[0].text()
        self.assertIn("Your work: %s" % work["handle"], first)
        # OpenCode wrote nothing of its own into the clone's .opencode beyond what coord committed
        status = subprocess.run(["git", "-C", clone, "status", "--porcelain", "--ignored", ".opencode"],
                                stdout=subprocess.PIPE, universal_newlines=True).stdout
        self.assertEqual(status.strip(), "", status)
        # It wrote its project ID (the root commit) as .git/opencode: not work, so the only reason
        # the clone may not go is the agent's own file (docs/harness-opencode.md).
        with open(os.path.join(clone, ".git", "opencode")) as f:
            root = f.read()
        self.assertEqual(root, subprocess.run(["git", "-C", clone, "rev-list", "--max-parents=0", "HEAD"],
                                              stdout=subprocess.PIPE, universal_newlines=True).stdout.strip())
        self.rcoord("work", "gate", work["handle"], "--waive", "--reason", "e2e")
        self.wait_left(clone)
        reply = self.rcoord("work", "remove", work["handle"], "--confirm", work["handle"], check=3)
        self.assertEqual([r["code"] for r in reply["reasons"]], ["dirty"], reply)

if __name__ == "__main__":
    unittest.main()


class ResumedFirstBoundary(h.ResumedFirstBoundary, h.CoordCase):
    """OpenCode 1.18.33's resumed TUI (`opencode --session ID`) runs no plugin hook until a message,
    and ignores --prompt there: `work resume` names the session in COORD_OPENCODE_RESUME and coord's
    plugin runs its start at load; the start's context (the message) comes with the first message."""

    harness = "opencode"

    def launch_setup(self):
        env = h.opencode_env(self.home, self.server, self.repo, self.launch_managed({"COORD_OPENCODE_CMD": self.cli}))
        del env["PWD"]  # tmux gives the pane its own directory as PWD
        return env

    def test_a_resumed_opencode_is_nudged_and_told_its_leases(self):
        self.resume_and_nudge("src/kept.py")
        self.told_kept("src/kept.py", self.requests_at_resume)

    def test_resume_interrupted_brings_opencode_to_its_first_boundary(self):
        work, rec = self.resume_interrupted()
        # The start ran at load and delivered the message; its context waits for the first message
        # a person submits, which goes to the same session with the earlier turns.
        requests = len(self.server.requests)
        # The plugin loads before the TUI draws the session: keys typed before its input is up are lost.
        h.retry_until(lambda: "EARLIER-TURN" in self.pane_text(rec), timeout=60, interval=0.25)
        person = support.TmuxClient(self, self.sock, rec["pane_id"])

        def typed():
            if "NEXT-TASK go on" not in self.pane_text(rec):
                person.type("\x15NEXT-TASK go on")  # ^U first: a line typed twice stays one line
                return None
            return True
        h.retry_until(typed, timeout=60, interval=2)
        person.type("\r")
        try:
            seen = h.retry_until(lambda: [r for r in list(self.server.requests)[requests:] if r.api and "NEXT-TASK" in
                                          r.text()], timeout=90, interval=0.25)
        except AssertionError:
            raise AssertionError("the message typed into the resumed OpenCode never reached the model:\n%s"
                                 % self.pane_text(rec))
        self.assertIn("WELCOME-BACK-MESSAGE", seen[0].text(), "the start's context came with the first message")
        self.assertIn("EARLIER-TURN", seen[0].text())
