"""tests/runner.py counts, reports and exits the way tests/run and CI rely on."""

import json
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
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", COORD_TEST_CACHE=os.path.join(self.dir, "cache"))
        env.update(env_extra)
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

    def test_quick_leaves_out_the_tests_measured_slow_last_time(self):
        self.write("test_timed.py", """
            import unittest
            class Timed(unittest.TestCase):
                def test_fast(self):
                    pass
                def test_measured_slow(self):
                    pass
                def test_never_measured(self):
                    pass
        """)
        rc, last, out = self.run_runner()  # records what each took
        self.assertEqual((rc, last), (0, "unit: 3 passed, 0 failed, 0 skipped"), out)
        path = os.path.join(self.dir, "cache", "runs", "durations.json")
        with open(path) as f:
            recorded = json.load(f)
        self.assertEqual(sorted(recorded), ["test_timed.Timed.test_fast", "test_timed.Timed.test_measured_slow",
                                            "test_timed.Timed.test_never_measured"])
        self.assertEqual(set(recorded["test_timed.Timed.test_fast"]), {"wall", "cpu", "python"})
        # As a test that took 4 s last time, and one recorded by no run yet.
        recorded["test_timed.Timed.test_measured_slow"]["wall"] = 4.0
        del recorded["test_timed.Timed.test_never_measured"]
        with open(path, "w") as f:
            json.dump(recorded, f)
        rc, last, out = self.run_runner("--quick", "-v")
        self.assertEqual((rc, last), (0, "unit: 2 passed, 0 failed, 0 skipped"), out)
        self.assertNotIn("test_measured_slow", out.split("quick:")[1])
        self.assertIn("1 slow tests left out", out)
        self.assertIn("1 never measured", out)
        rc, last, out = self.run_runner("--quick", COORD_TEST_QUICK_LIMIT="5")
        self.assertEqual((rc, last), (0, "unit: 3 passed, 0 failed, 0 skipped"), out)

    def test_failed_runs_what_failed_last_time_until_it_passes(self):
        flag = os.path.join(self.dir, "fixed")
        self.write("test_flaky.py", """
            import os
            import unittest
            class Flaky(unittest.TestCase):
                def test_ok(self):
                    print("ran ok")
                def test_broken(self):
                    self.assertTrue(os.path.exists(%r), "not fixed yet")
        """ % flag)
        self.write("test_gone.py", "import module_that_does_not_exist\n")
        rc, last, out = self.run_runner()
        self.assertEqual((rc, last), (1, "unit: 1 passed, 2 failed, 0 skipped"), out)
        rc, last, out = self.run_runner("--failed")
        self.assertEqual((rc, last), (1, "unit: 0 passed, 2 failed, 0 skipped"), out)
        self.assertNotIn("ran ok", out)
        os.unlink(os.path.join(self.dir, "test_gone.py"))
        self.write("test_gone.py", "")
        with open(flag, "w"):
            pass
        rc, last, out = self.run_runner("--failed")
        self.assertEqual((rc, last), (0, "unit: 1 passed, 0 failed, 0 skipped"), out)
        rc, last, out = self.run_runner("--failed")
        self.assertEqual((rc, last), (0, "unit: 0 passed, 0 failed, 0 skipped"), out)
        self.assertIn("failed last time: 0 tests; nothing to run", out)

    def test_changed_runs_the_modules_of_the_files_changed_against_main(self):
        repo = os.path.join(self.dir, "repo")
        tests = os.path.join(repo, "tests")
        os.makedirs(tests)
        for name in ("alpha", "beta"):
            with open(os.path.join(repo, name + ".py"), "w") as f:
                f.write("VALUE = 1\n")
            with open(os.path.join(tests, "test_%s.py" % name), "w") as f:
                f.write("import unittest\nclass T(unittest.TestCase):\n    def test_%s(self):\n"
                        "        print('ran %s')\n" % (name, name))

        def git(*argv):
            subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@example.invalid",
                            "-c", "init.defaultBranch=main"] + list(argv), cwd=repo, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        git("init", "-q")
        git("add", "-A")
        git("commit", "-q", "-m", "base")
        git("checkout", "-q", "-b", "topic")

        def changed():
            proc = subprocess.run([sys.executable, RUNNER, "--dir", tests, "--changed", "-v"], cwd=repo,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                                  env=dict(os.environ, COORD_TEST_CACHE=os.path.join(self.dir, "cache")))
            return proc.stdout
        out = changed()
        self.assertIn("changed: no test module", out)
        self.assertTrue(out.strip().endswith("unit: 0 passed, 0 failed, 0 skipped"), out)
        with open(os.path.join(repo, "alpha.py"), "a") as f:
            f.write("OTHER = 2\n")
        out = changed()  # a change not committed yet
        self.assertIn("changed: test_alpha\n", out)
        self.assertTrue(out.strip().endswith("unit: 1 passed, 0 failed, 0 skipped"), out)
        git("commit", "-q", "-am", "alpha on the branch")
        with open(os.path.join(tests, "test_beta.py"), "a") as f:
            f.write("# touched\n")
        out = changed()  # committed on the branch, and a test module changed
        self.assertIn("changed: test_alpha test_beta\n", out)
        self.assertTrue(out.strip().endswith("unit: 2 passed, 0 failed, 0 skipped"), out)

    def test_stress_tier_runs_only_when_asked(self):
        self.write("test_tiers.py", """
            import unittest
            import support

            class Plain(unittest.TestCase):
                def test_plain(self):
                    pass

                @support.stress
                def test_storm(self):
                    pass

            @support.stress
            class RaceClass(unittest.TestCase):
                def test_race(self):
                    pass
        """)
        tests_dir = os.path.dirname(RUNNER)
        rc, last, out = self.run_runner(PYTHONPATH=tests_dir)
        self.assertEqual((rc, last), (0, "unit: 1 passed, 0 failed, 0 skipped"), out)
        self.assertIn("stress: 2 tests left out (--stress runs them)", out)
        rc, last, out = self.run_runner("--stress", PYTHONPATH=tests_dir)
        self.assertEqual((rc, last), (0, "unit: 3 passed, 0 failed, 0 skipped"), out)

    def test_support_stress_lists_real_tests(self):
        import runner
        loader = unittest.TestLoader()
        ids = set()
        for name in set(n.split(".")[0] for n in support.STRESS):
            for test in runner._tests(loader.loadTestsFromName(name)):
                ids.update((test.id(), test.id().rsplit(".", 1)[0]))
        self.assertEqual(sorted(support.STRESS - ids), [], "support.STRESS names tests that do not exist")

    def test_support_every_interpreter_names_real_tests(self):
        import runner
        loader = unittest.TestLoader()
        for name in support.EVERY_INTERPRETER:
            self.assertTrue(list(runner._tests(loader.loadTestsFromName(name))), name)

    def test_no_jj_skips_the_tests_that_drive_jj(self):
        self.write("test_drives.py", """
            import unittest
            import support

            class Drives(support.CoordTestCase):
                def test_jj(self):
                    self.use_jj()
                    print("drove jj")

            class StoreOnly(support.CoordTestCase):
                def test_store_only(self):
                    pass
        """)
        tests_dir = os.path.dirname(RUNNER)
        rc, last, out = self.run_runner("--no-jj", PYTHONPATH=tests_dir)
        self.assertEqual((rc, last), (0, "unit: 1 passed, 0 failed, 1 skipped (1 of them drive jj, repeat a SQLite class on "
                                         "PostgreSQL or are not their class's first: the default interpreter's suite "
                                         "runs them)"), out)
        with open(os.path.join(self.dir, "cache", "runs", "durations.json")) as f:
            self.assertEqual(sorted(json.load(f)), ["test_drives.StoreOnly.test_store_only"],
                             "a skipped test's time is not recorded")

    def test_no_jj_runs_the_first_test_of_each_class_and_whole_what_meets_the_interpreter(self):
        """A whole --no-jj run (the oldest and newest interpreters' suites): the first test of a
        class in unittest's order, every test of a module named in support.EVERY_INTERPRETER;
        named tests run whole."""
        three = ("import unittest\nclass Three(unittest.TestCase):\n" + "".join(
            "    def test_%s(self):\n        print('ran %s')\n" % (c, c) for c in "abc"))
        self.write("test_sampled.py", three + textwrap.dedent("""
            import support
            class JjFirst(support.CoordTestCase):
                def test_a(self):
                    self.use_jj()
                def test_b(self):
                    print("ran jj-free")
                def test_c(self):
                    pass
        """))
        self.write("test_store.py", three.replace("ran ", "whole "))
        tests_dir = os.path.dirname(RUNNER)
        rc, last, out = self.run_runner("--no-jj", "-v", PYTHONPATH=tests_dir)
        self.assertEqual(rc, 0, out)
        self.assertTrue(last.startswith("unit: 5 passed, 0 failed, 4 skipped (4 of them"), out)
        self.assertRegex(out, r"test_b \(test_sampled\.Three[^\n]*skipped .one per class")
        # a class whose first test drives jj runs its next one here
        self.assertRegex(out, r"test_b \(test_sampled\.JjFirst[^\n]*ok")
        self.assertRegex(out, r"test_c \(test_sampled\.JjFirst[^\n]*skipped .one per class")
        rc, last, out = self.run_runner("--no-jj", "test_sampled", PYTHONPATH=tests_dir)
        self.assertEqual((rc, last[:40]), (0, "unit: 5 passed, 0 failed, 1 skipped (1 o"), out)

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


    def test_runners_sharing_a_queue_run_each_test_once_and_a_helper_takes_what_is_left(self):
        """Two runners at once on one queue (each test sleeps, so both take part), then a runner of
        another suite that finds its own queue empty helps with a third queue."""
        self.write("test_many.py", "import tempfile, time, unittest\nclass Many(unittest.TestCase):\n" + "".join(
            "    def test_%d(self):\n        print('ran %d')\n        print('tmp ' + tempfile.gettempdir())\n"
            "        time.sleep(0.2)\n        self.fail()\n" % (i, i)
            for i in range(8)))
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", COORD_TEST_CACHE=os.path.join(self.dir, "cache"))
        queue = os.path.join(self.dir, "q")
        procs = [subprocess.Popen([sys.executable, RUNNER, "--dir", self.dir, "--queue", queue],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
                 for _ in range(2)]
        outs = [p.communicate(timeout=120)[0] for p in procs]
        seen = [set(re.findall(r"^ran (\d)$", out, re.M)) for out in outs]
        self.assertEqual((seen[0] | seen[1], seen[0] & seen[1]), (set(str(i) for i in range(8)), set()), outs)
        self.assertTrue(seen[0] and seen[1], outs)
        counts = [int(re.search(r"unit: 0 passed, (\d+) failed", out).group(1)) for out in outs]
        self.assertEqual(sum(counts), 8, outs)
        self.assertTrue(all(p.returncode == 1 for p in procs), outs)
        # a runner of another suite (none of its own tests match) takes what another queue left:
        # here a queue whose first three tests were taken already
        left = os.path.join(self.dir, "left")
        os.makedirs(left)
        with open(os.path.join(left, "tests.json"), "w") as f:
            json.dump(["test_many.Many.test_%d" % i for i in range(8)], f)
        with open(os.path.join(left, "next"), "w") as f:
            f.write("3\n")
        theirs = os.path.join(self.dir, "their-tmp")  # the helped suite's TMPDIR, not this runner's
        os.makedirs(theirs)
        rc, last, out = self.run_runner("--queue", os.path.join(self.dir, "own"), "--pattern", "nothing_*.py",
                                        "--help-queue", left, "--help-tmpdir", theirs)
        self.assertEqual(set(re.findall(r"^ran (\d)$", out, re.M)), set("34567"), out)
        self.assertEqual(set(re.findall(r"^tmp (.*)$", out, re.M)), {theirs}, out)
        self.assertEqual((rc, last), (1, "nothing: 0 passed, 5 failed, 0 skipped"), out)
        self.assertIn("helped: 5 of these tests came from another suite's queue", out)


class ChangedTest(unittest.TestCase):
    """`--changed` follows the import ladder: a change to a module low on it (store.py) brings the
    tests of every module that imports it, directly or through another, and nothing else."""

    def git(self, *args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"] + list(args),
                       cwd=self.root, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)

    def test_a_low_module_brings_every_module_above(self):
        import runner
        self.root = tempfile.mkdtemp(prefix="coord-changed-")
        self.addCleanup(shutil.rmtree, self.root)
        files = {"store.py": "import os\n", "session.py": "import store\n", "hook.py": "import session\n",
                 "trust.py": "import store\n", "host.py": "from store import x\n", "land.py": "import os\n",
                 "coord": "#!/usr/bin/env python3\nimport hook\n"}
        for name in list(files) + ["tests/" + n for n in ("test_store.py", "test_session.py", "test_hook.py",
                                                         "test_trust.py", "test_host.py", "test_land.py",
                                                         "test_cli.py", "test_compile.py")]:
            os.makedirs(os.path.dirname(os.path.join(self.root, name)), exist_ok=True)
            with open(os.path.join(self.root, name), "w") as f:
                f.write(files.get(name, ""))
        self.git("init", "-q", "-b", "main")
        self.git("add", "-A")
        self.git("commit", "-qm", "base")
        with open(os.path.join(self.root, "session.py"), "a") as f:
            f.write("# changed\n")
        self.assertEqual(runner.changed_modules(os.path.join(self.root, "tests")),
                         ["test_cli", "test_compile", "test_hook", "test_session"])
        with open(os.path.join(self.root, "store.py"), "a") as f:
            f.write("# changed\n")
        self.assertEqual(runner.changed_modules(os.path.join(self.root, "tests")),
                         ["test_cli", "test_compile", "test_hook", "test_host", "test_session", "test_store",
                          "test_trust"])

if __name__ == "__main__":
    unittest.main()
