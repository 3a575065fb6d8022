"""tests/runner.py counts, reports and exits the way tests/run and CI rely on."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import support

RUNNER = os.path.join(support.ROOT, "tests", "runner.py")

MIXED = '''
import unittest
import helper

class Mixed(unittest.TestCase):
    def test_pass(self):
        self.assertEqual(helper.VALUE, 42)

    def test_pass_too(self):
        pass

    def test_fail(self):
        print("noise only shown for failures")
        self.assertEqual(1, 2, "deliberate mismatch")

    def test_error(self):
        raise RuntimeError("deliberate error")

    def test_skip(self):
        self.skipTest("deliberate skip")

    @unittest.expectedFailure
    def test_expected_failure(self):
        self.fail("expected")

    def test_subtests(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertEqual(i, 99)
'''


class RunnerTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="coord-runner-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def write(self, name, text):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(textwrap.dedent(text))

    def run_runner(self, *args, **env_extra):
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **env_extra)
        proc = subprocess.run(
            [sys.executable, RUNNER, "--dir", self.dir] + list(args),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=120,
        )
        lines = proc.stdout.strip().splitlines()
        return proc.returncode, lines[-1] if lines else "", proc.stdout

    def test_counts_mixed_results_and_fails(self):
        self.write("helper.py", "VALUE = 42\n")
        self.write("test_mixed.py", MIXED)
        rc, last, out = self.run_runner("--label", "gen")
        # passed: two plain tests and the expected failure; failed: fail, error, subtests once.
        self.assertEqual(last, "gen: 3 passed, 3 failed, 1 skipped", out)
        self.assertEqual(rc, 1, out)
        self.assertIn("deliberate mismatch", out)
        self.assertIn("RuntimeError: deliberate error", out)
        self.assertIn("noise only shown for failures", out)

    def test_all_passing_exits_zero(self):
        self.write("test_ok.py", """
            import unittest
            class Ok(unittest.TestCase):
                def test_a(self):
                    pass
                def test_b(self):
                    pass
        """)
        rc, last, out = self.run_runner()
        self.assertEqual(last, "unit: 2 passed, 0 failed, 0 skipped", out)
        self.assertEqual(rc, 0, out)

    def test_import_error_counts_as_failure(self):
        self.write("test_broken.py", "import module_that_does_not_exist\n")
        rc, last, out = self.run_runner()
        self.assertEqual(last, "unit: 0 passed, 1 failed, 0 skipped", out)
        self.assertEqual(rc, 1, out)
        self.assertIn("module_that_does_not_exist", out)

    def test_class_setup_error_counts_once(self):
        self.write("test_setup.py", """
            import unittest
            class Broken(unittest.TestCase):
                @classmethod
                def setUpClass(cls):
                    raise RuntimeError("no fixture")
                def test_a(self):
                    pass
                def test_b(self):
                    pass
        """)
        rc, last, out = self.run_runner()
        self.assertEqual(last, "unit: 0 passed, 1 failed, 0 skipped", out)
        self.assertEqual(rc, 1, out)

    def test_pattern_and_subset(self):
        self.write("test_ok.py", """
            import unittest
            class Ok(unittest.TestCase):
                def test_a(self):
                    pass
                def test_b(self):
                    self.fail("not selected, must not run")
        """)
        self.write("e2e_flow.py", """
            import unittest
            class Flow(unittest.TestCase):
                def test_flow(self):
                    pass
        """)
        rc, last, out = self.run_runner("--pattern", "e2e_*.py")
        self.assertEqual((rc, last), (0, "e2e: 1 passed, 0 failed, 0 skipped"), out)
        rc, last, out = self.run_runner("test_ok.Ok.test_a")
        self.assertEqual((rc, last), (0, "unit: 1 passed, 0 failed, 0 skipped"), out)
        rc, last, out = self.run_runner(os.path.join(self.dir, "test_ok.py"), "-k", "test_a")
        self.assertEqual((rc, last), (0, "unit: 1 passed, 0 failed, 0 skipped"), out)
        # A name outside the pattern is not this suite's business.
        rc, last, out = self.run_runner("--pattern", "e2e_*.py", "test_ok")
        self.assertEqual((rc, last), (0, "e2e: 0 passed, 0 failed, 0 skipped"), out)

    def test_unknown_name_fails(self):
        rc, last, out = self.run_runner("test_nothing_here")
        self.assertEqual(last, "unit: 0 passed, 1 failed, 0 skipped", out)
        self.assertEqual(rc, 1, out)

    def test_quick_leaves_out_tests_marked_slow(self):
        self.write("test_marked.py", """
            import unittest
            import support

            class Plain(unittest.TestCase):
                def test_fast(self):
                    pass

                @support.slow
                def test_slow_method(self):
                    pass

            @support.slow
            class SlowClass(unittest.TestCase):
                def test_a(self):
                    pass

            class InheritsTheMark(SlowClass):
                def test_b(self):
                    pass
        """)
        tests_dir = os.path.dirname(RUNNER)  # where the real support.py lives
        rc, last, out = self.run_runner("--durations", "9", PYTHONPATH=tests_dir)
        self.assertEqual((rc, last), (0, "unit: 5 passed, 0 failed, 0 skipped"), out)
        self.assertRegex(out, r"\n +[0-9.]+s +[0-9.]+s test_marked\.Plain\.test_fast\n", "wall and CPU time per test")
        rc, last, out = self.run_runner("--quick", PYTHONPATH=tests_dir)
        self.assertEqual((rc, last), (0, "unit: 1 passed, 0 failed, 0 skipped"), out)
        self.assertIn("4 slow tests left out", out)

    def test_shards_split_the_tests_between_them(self):
        self.write("test_many.py", "import unittest\nclass Many(unittest.TestCase):\n" + "".join(
            "    def test_%d(self):\n        print('ran %d')\n        self.fail()\n" % (i, i) for i in range(5)))
        seen = []
        for k in (1, 2):
            rc, last, out = self.run_runner("--shard", "%d/2" % k)
            self.assertEqual(rc, 1, out)
            seen.append(set(int(n) for n in re.findall(r"^ran (\d)$", out, re.M)))
            self.assertEqual(last, "unit: 0 passed, %d failed, 0 skipped" % (3 if k == 1 else 2), out)
        self.assertEqual((seen[0] | seen[1], seen[0] & seen[1]), ({0, 1, 2, 3, 4}, set()))


if __name__ == "__main__":
    unittest.main()
