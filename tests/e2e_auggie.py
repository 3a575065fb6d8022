"""End-to-end tests: the real Auggie CLI (@augmentcode/auggie, pinned in tests/provision), offline.

Auggie 0.36.0 runs Claude-shaped hooks from `.augment/settings.json` under its own tool names.
Its model is behind Augment's own API, which tests/modelserver.py speaks (Auggie takes the server
from its session's tenant URL: harnesses.auggie_env). These tests run coord installed by ./install
(docs/harness-auggie.md); the control runs move coord's settings file aside.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses as h  # noqa: E402
import session  # noqa: E402
from modelserver import say, tool  # noqa: E402

SETTINGS = os.path.join(".augment", "settings.json")


class CoordScenarios(h.CoordCase):
    """coord installed by ./install; the real hooks, run by Auggie from .augment/settings.json."""

    harness = "auggie"

    def setUp(self):
        super().setUp()
        self.write_file("src/a.py", "original\n")

    def without_coord(self):
        os.rename(os.path.join(self.repo, SETTINGS), os.path.join(self.tmp, "settings.json"))

    def script(self):
        return [tool("str-replace-editor", command="str_replace", path="src/a.py",
                     str_replace_entries=[{"old_str": "original", "new_str": "agent",
                                           "old_str_start_line_number": 1, "old_str_end_line_number": 1}]),
                tool("save-file", path="src/new.py", file_content="new\n"),
                tool("apply_patch", input="*** Begin Patch\n*** Add File: src/p.py\n+p\n*** End Patch\n"),
                tool("remove-files", file_paths=["src/gone.py"]),
                say("done")]

    def test_a_peers_exclusive_lease_denies_every_write_tool_and_the_model_hears_why(self):
        peer = self.lease("src/a.py")
        for path in ("src/new.py", "src/p.py", "src/gone.py"):
            self.lease(path, peer)
        self.write_file("src/gone.py", "keep\n")
        result = self.run_agent(self.script())
        self.assertEqual(self.read_file("src/a.py"), "original\n", result.describe())
        self.assertEqual((self.read_file("src/new.py"), self.read_file("src/p.py"), self.read_file("src/gone.py")),
                         (None, None, "keep\n"))
        self.refusals_naming(peer, 4)
        # The control: the same run with coord's settings moved aside writes, patches and removes.
        self.without_coord()
        self.run_agent(self.script())
        self.assertEqual((self.read_file("src/a.py"), self.read_file("src/new.py"), self.read_file("src/p.py"),
                          self.read_file("src/gone.py")), ("agent\n", "new\n", "p", None), self.results())
        # (Auggie 0.36.0's apply_patch writes an added file without its last newline)

    def test_registration_start_context_a_message_and_the_shells_identity(self):
        _result, rt = self.run_registration(
            tool("view", path="src/a.py", type="file"),
            tool("launch-process", command="./.coord/coord claim src/b.py -p shell-claim", wait=True,
                 max_wait_seconds=60, cwd="."), "MSG-FROM-PEER-52")
        first_result = self.server.model_requests()[1].text()  # SessionStart's lines come with the first tool result
        self.assertIn("coord: you are %s" % rt["handle"], first_result)
        self.assertIn("MSG-FROM-PEER-52", first_result)
        self.assertNotIn("coord: you are", self.server.model_requests()[2].tail_text(), "only once")
        ended = [r for r in self.coord_state()["runtimes"] if r["id"] == rt["id"]][0]
        self.assertEqual(ended["end_reason"], "session-end")

    def test_a_shim_or_a_python3_in_the_repository_first_on_path_never_runs_the_hook(self):
        # Auggie 0.36.0 rewrites ${NAME} and ${NAME:-default} in a handler from its own environment
        # before it spawns it; coord's handler for it spells none, so the script picks its
        # interpreter as everywhere else (docs/harness-auggie.md).
        marker = os.path.join(self.tmp, "wrong-python-ran")
        dirs = [os.path.join(self.repo, "venv", "bin"), os.path.join(self.tmp, "fake", "shims")]
        for d in dirs:
            os.makedirs(d)
            with open(os.path.join(d, "python3"), "w") as f:
                f.write("#!/bin/sh\necho \"$0\" >> %s\nexit 9\n" % marker)
            os.chmod(os.path.join(d, "python3"), 0o755)
        for first in dirs:
            with self.subTest(first=first):
                result = self.run_agent([tool("view", path="src/a.py", type="file"), say("done")],
                                        env={"PATH": os.pathsep.join([first, os.environ["PATH"]])})
                self.assertEqual([r["harness"] for r in self.runtimes_of(result.session_id())], ["auggie"],
                                 result.describe())
        self.assertFalse(os.path.exists(marker), open(marker).read() if os.path.exists(marker) else "")

    def test_in_its_managed_clone_it_registers_and_the_work_lands_and_goes(self):
        # SessionStart's lines come with the first tool result (the second request)
        self.one_write_in_a_clone_lands(lambda clone: tool("save-file", path="src/c.py", file_content="c\n"), 1)


class ResumedFirstBoundary(h.ResumedFirstBoundary, h.CoordCase):
    """Auggie's TUI started by `work start --harness auggie -- --allow-indexing` in tmux, its window
    killed, then `work resume --interrupted` (`auggie --allow-indexing --resume ID`): SessionStart
    runs at once. (Without --allow-indexing it asks first whether to index the clone.)"""

    harness = "auggie"
    launch_args = ("--allow-indexing",)
    resume_source = "None"

    def launch_setup(self):
        return h.auggie_env(self.home, self.server, self.launch_managed({"COORD_AUGGIE_CMD": self.cli}))

    def test_a_resumed_auggie_is_nudged_and_told_its_leases(self):
        def as_a_model_would(request):  # the nudge's line says to read the inbox; its model does
            if session.NUDGE in request.text() and not request.tool_results():
                return tool("launch-process", command="./.coord/coord inbox", wait=True, max_wait_seconds=60, cwd=".")
            return say("ok")

        def script():
            with self.server._lock:
                self.server.script, self.server._next[None] = [as_a_model_would] * 50, 0
        self.resume_and_nudge("src/kept.py", before=script)
        self.told_kept("src/kept.py", self.requests_at_resume)


if __name__ == "__main__":
    unittest.main()
