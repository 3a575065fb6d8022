"""End-to-end: the installed resume wrapper `.coord/bin/codex` in front of the real Codex CLI,
offline against tests/modelserver.py. Automation (`codex exec`, no terminal) must reach the real
CLI with the same argv and keep its exit status and output.
"""

import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses as h  # noqa: E402
from modelserver import apply_patch, say  # noqa: E402


class CodexThroughTheWrapper(h.CoordCase):
    """coord installed by ./install (which ships .coord/bin/codex); PATH lists .coord/bin first."""

    harness = "codex"

    def setUp(self):
        super().setUp()
        self.wrapper = os.path.join(self.repo, ".coord", "bin", "codex")
        real_dir = os.path.dirname(os.path.abspath(self.cli))
        self.path = os.pathsep.join([os.path.dirname(self.wrapper), real_dir, os.environ.get("PATH", "")])

    def run_codex(self, argv, via_wrapper=True):
        env = h.codex_env(self.home, self.codex_home, self.server, dict(self.agent_env(), PATH=self.path))
        first = self.wrapper if via_wrapper else self.cli
        return subprocess.run([first] + argv, cwd=self.repo, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)

    def test_installed_wrapper_is_executable(self):
        self.assertTrue(os.access(self.wrapper, os.X_OK))
        self.assertTrue(os.access(os.path.join(self.repo, ".coord", "bin", "claude"), os.X_OK))

    def test_codex_exec_runs_the_real_cli_and_succeeds(self):
        h.trust_codex_repo(self.codex_home, self.server, self.repo)
        patch = apply_patch("*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch")
        self.server.load([patch, say("done")])
        proc = self.run_codex(["exec", "--json", "Do the scripted task."])
        self.assertEqual(proc.returncode, 0, proc.stderr.decode("utf-8", "replace"))
        self.assertEqual(self.read_file("a.txt"), "hello\n")
        self.assertIn(b'"type":"thread.started"', proc.stdout)
        self.assertEqual(self.server.refused, [])

    def test_codex_exec_failure_keeps_its_status_and_output(self):
        h.trust_codex_repo(self.codex_home, self.server, self.repo)
        argv = ["exec", "--no-such-option", "x"]
        via = self.run_codex(argv)
        direct = self.run_codex(argv, via_wrapper=False)
        self.assertNotEqual(direct.returncode, 0)
        self.assertEqual(via.returncode, direct.returncode)
        self.assertEqual(via.stdout, direct.stdout)
        self.assertEqual(via.stderr, direct.stderr)


if __name__ == "__main__":
    unittest.main()
