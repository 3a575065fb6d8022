"""End-to-end tests: the real Kilo Code CLI (@kilocode/cli, pinned in tests/provision), offline.

Kilo Code 7.7.7 is a fork of OpenCode with the same plugin interface: coord's installer writes
the same plugin under Kilo's own folder, .kilo/plugins/coord-hook.js, which Kilo loads into its
own process and which runs coord's hook command (`--harness kilo`) at Kilo's boundaries. `kilo
run` uses OpenCode's Anthropic provider aimed at tests/modelserver.py (harnesses.kilo_env). These
tests run coord installed by ./install and the real plugin (docs/harness-kilo.md).
"""

import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses as h  # noqa: E402
from modelserver import Turn, say, tool  # noqa: E402

PLUGIN = os.path.join(".kilo", "plugins", "coord-hook.js")


class CoordScenarios(h.PluginScenarios, h.CoordCase):
    """coord installed by ./install; Kilo Code loads its plugin from .kilo/plugins/."""

    harness, plugin = "kilo", PLUGIN

    def test_apply_patch_is_checked_for_every_path_it_writes(self):
        peer = self.lease("src/held.py")
        patch = ("*** Begin Patch\n*** Add File: src/free.py\n+free\n*** Update File: src/a.py\n@@\n-original\n+agent\n"
                 "*** Add File: src/held.py\n+mine\n*** End Patch")
        call = Turn(calls=[{"kind": "claude", "name": "apply_patch", "input": {"patchText": patch}}])
        result = self.run_agent([call, say("done")], args=["-m", h.OPENCODE_PATCH_MODEL])
        tools = [t["name"] for t in (self.server.model_requests()[0].body.get("tools") or [])]
        self.assertIn("apply_patch", tools)  # Kilo, as OpenCode, offers it (not edit) to gpt- models
        self.assertIsNone(self.read_file("src/free.py"), result.describe())
        self.assertIsNone(self.read_file("src/held.py"))
        self.assertEqual(self.read_file("src/a.py"), "original\n")
        refusal = [t for t in self.results() if "coord: write refused" in t]
        self.assertEqual(len(refusal), 1, self.results())
        self.assertIn("src/held.py", refusal[0])
        self.assertIn(peer["handle"], refusal[0])

    def test_the_runtime_is_registered_in_its_managed_clone_and_leaves_nothing_to_keep(self):
        self.env.update(self.managed_env())
        work = self.rcoord("work", "create", "kilo-task")["work"]
        clone = work["path"]
        result = self.run_agent([tool("write", filePath=os.path.join(clone, "src", "c.py"), content="c\n"), say("done")],
                                repo=clone)
        self.assertEqual(open(os.path.join(clone, "src", "c.py")).read(), "c\n")
        rts = [rt for rt in self.coord_state()["runtimes"] if rt.get("conversation") == result.session_id()]
        self.assertEqual(len(rts), 1, result.describe())
        self.assertEqual(rts[0]["harness"], "kilo")
        self.assertEqual(os.path.realpath(rts[0]["cwd"]), os.path.realpath(clone))
        self.assertIn("Your work: %s" % work["handle"], self.server.model_requests()[0].text())
        # Kilo wrote nothing of its own into the clone's .kilo beyond what coord committed
        status = subprocess.run(["git", "-C", clone, "status", "--porcelain", "--ignored", ".kilo"],
                                stdout=subprocess.PIPE, universal_newlines=True).stdout
        self.assertEqual(status.strip(), "", status)
        # Its project ID file (.git/kilo) is not work; its snapshot ref holds the agent's file,
        # which is nowhere else yet: the clone stays until the work lands (docs/harness-kilo.md).
        handle = work["handle"]
        self.rcoord("work", "gate", handle, "--waive", "--reason", "e2e")
        self.wait_left(clone)
        reply = self.rcoord("work", "remove", handle, "--confirm", handle, check=3)
        reasons = {r["code"]: r for r in reply["reasons"]}
        self.assertEqual(sorted(set(reasons) - {"git-only-refs"}), ["dirty"], reply)
        for ref in reasons.get("git-only-refs", {}).get("paths", []):
            self.assertRegex(ref, r"^refs/kilo/materialize/[0-9a-f]{40}$")
        self.assertTrue(os.path.isfile(os.path.join(clone, ".git", "kilo")))
        self.land_and_remove(handle, clone)


class ResumedFirstBoundary(h.ResumedFirstBoundary, h.CoordCase):
    """Kilo Code's TUI started by `work start --harness kilo` in tmux, its window killed, then
    `work resume --interrupted`: as OpenCode's (`kilo --session ID` runs no plugin hook until a
    message and ignores --prompt there), `work resume` names the session in COORD_KILO_RESUME and
    coord's plugin runs its start at load; the start's context comes with the first message."""

    harness = "kilo"

    def launch_setup(self):
        env = h.kilo_env(self.home, self.server, self.repo, self.launch_managed({"COORD_KILO_CMD": self.cli}))
        del env["PWD"]  # tmux gives the pane its own directory as PWD
        return env

    def test_a_resumed_kilo_is_nudged_and_told_its_leases(self):
        self.resume_and_nudge("src/kept.py")
        self.told_kept("src/kept.py", self.requests_at_resume)


if __name__ == "__main__":
    unittest.main()
