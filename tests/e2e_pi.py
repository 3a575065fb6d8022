"""End-to-end tests: the real pi coding agent (@mariozechner/pi-coding-agent, pinned in tests/provision), offline.

pi 0.73.1 runs no hook commands: it loads every extension in the project's .pi/extensions/ into
its own process. The installer writes coord's there (.pi/extensions/coord-hook.js), which runs
coord's hook command at pi's events. `pi -p` uses a provider of the person's own on its Anthropic
API, aimed at tests/modelserver.py (harnesses.pi_env). The control runs move coord's extension
aside (docs/harness-pi.md).
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses as h  # noqa: E402
from modelserver import say, tool  # noqa: E402

EXTENSION = os.path.join(".pi", "extensions", "coord-hook.js")


class CoordScenarios(h.CoordCase):
    """coord installed by ./install; pi loads coord's extension from .pi/extensions/."""

    harness = "pi"

    def setUp(self):
        super().setUp()
        self.write_file("src/a.py", "original\n")

    def without_coord(self):
        os.rename(os.path.join(self.repo, EXTENSION), os.path.join(self.tmp, "coord-hook.js"))

    def test_a_peers_exclusive_lease_denies_write_and_edit_and_the_model_hears_why(self):
        peer = self.lease("src/a.py")
        self.lease("src/new.py", peer)
        script = [tool("edit", path="src/a.py", edits=[{"oldText": "original", "newText": "agent"}]),
                  tool("write", path="src/new.py", content="new\n"),
                  say("done")]
        result = self.run_agent(script)
        self.assertEqual(self.read_file("src/a.py"), "original\n", result.describe())
        self.assertIsNone(self.read_file("src/new.py"))
        self.refusals_naming(peer, 2)
        # The control: the same run with coord's extension moved aside writes both files.
        self.without_coord()
        self.run_agent(script)
        self.assertEqual((self.read_file("src/a.py"), self.read_file("src/new.py")), ("agent\n", "new\n"),
                         self.results())

    def test_registration_start_context_a_message_and_the_shells_identity(self):
        _result, rt = self.run_registration(tool("read", path="src/a.py"),
                                            tool("bash", command="./.coord/coord claim src/b.py -p shell-claim"),
                                            "MSG-FROM-PEER-91")
        self.assertIn("coord: you are %s" % rt["handle"], self.server.model_requests()[0].text())
        self.assertIn("MSG-FROM-PEER-91", self.server.model_requests()[1].text())
        ended = [r for r in self.coord_state()["runtimes"] if r["id"] == rt["id"]][0]
        self.assertEqual(ended["end_reason"], "session-end")

    def test_in_its_managed_clone_it_registers_and_the_work_lands_and_goes(self):
        self.one_write_in_a_clone_lands(lambda clone: tool("write", path="src/c.py", content="c\n"))


class ResumedFirstBoundary(h.ResumedFirstBoundary, h.CoordCase):
    """pi's TUI started by `work start --harness pi` in tmux, its window killed, then `work resume
    --interrupted` (`pi --session ID`): its session_start runs at once (reason "startup")."""

    harness = "pi"
    resume_source = "startup"

    def launch_setup(self):
        return h.pi_env(self.home, self.server, self.launch_managed({"COORD_PI_CMD": self.cli}))

    def test_a_resumed_pi_is_nudged_and_told_its_leases(self):
        self.resume_and_nudge("src/kept.py")
        self.told_kept("src/kept.py", self.requests_at_resume)


if __name__ == "__main__":
    unittest.main()
