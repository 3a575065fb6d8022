#!/usr/bin/env python3
"""Run coord's unittest suites and print one counting line.

    python3 tests/runner.py                          # every tests/test_*.py
    python3 tests/runner.py --pattern 'e2e_*.py' --label e2e
    python3 tests/runner.py test_store tests/test_hook.py test_store.StoreTest.test_lease
    python3 tests/runner.py --quick                  # leave out the tests marked support.slow

Test files import their helpers as top-level modules (`import support`,
`from support import CoordTestCase`): this runner puts tests/ first on sys.path, exactly
as `python3 tests/test_x.py` does for a single file, and support.py adds the repository
root so product modules (`import store`) resolve too.

Prints `LABEL: N passed, N failed, N skipped` last and exits 1 when anything failed or
errored (an import error in a test file counts as a failure).
"""

import argparse
import fnmatch
import os
import sys
import time
import unittest

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)


def _module_name(name):
    """Turn 'tests/test_x.py', 'test_x.py' or 'test_x.Case.test' into a dotted test name."""
    if name.endswith(".py") or os.sep in name:
        base = os.path.basename(name)
        return base[:-3] if base.endswith(".py") else base
    return name


def _cpu():
    """CPU seconds of this process and of the children it has waited for."""
    t = os.times()
    return t[0] + t[1] + t[2] + t[3]


class _TimedResult(unittest.TextTestResult):
    """TextTestResult that remembers how long each test took, in wall and in CPU time.

    CPU time (the test's own and its waited-for children's) still means something when other
    work shares the machine; wall time is what the test costs the person waiting.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.durations = []
        self._started = {}

    def startTest(self, test):
        self._started[id(test)] = (time.monotonic(), _cpu())
        super().startTest(test)

    def stopTest(self, test):
        started = self._started.pop(id(test), None)
        if started is not None:
            self.durations.append((time.monotonic() - started[0], _cpu() - started[1], test.id()))
        super().stopTest(test)


def _tests(suite):
    """The tests of a suite in order, nested suites flattened."""
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            for test in _tests(item):
                yield test
        else:
            yield item


def is_slow(test, listed=()):
    """True for a test marked slow (support.slow) on its method or class, or listed by id or class."""
    method = getattr(test, getattr(test, "_testMethodName", ""), None)
    if getattr(method, "coord_slow", False) or getattr(type(test), "coord_slow", False):
        return True
    return test.id() in listed or test.id().rsplit(".", 1)[0] in listed


def _listed_slow():
    """support.SLOW of the tests/ directory in use (empty when it has no support module)."""
    try:
        import support
    except ImportError:
        return frozenset()
    return frozenset(getattr(support, "SLOW", ()))


def _owner(test):
    """The test a result entry belongs to: subtests count once, for their parent test."""
    return getattr(test, "test_case", test)


def count(result):
    """(passed, failed, skipped) in tests; a test with several failing subtests fails once.

    An error outside any test (setUpClass, setUpModule) counts as one failure of its own.
    """
    bad = set()
    outside = 0
    for test, _ in result.failures + result.errors:
        if isinstance(test, unittest.TestCase):
            bad.add(id(_owner(test)))
        else:
            outside += 1
    for test in result.unexpectedSuccesses:
        bad.add(id(_owner(test)))
    skipped = set(id(_owner(t)) for t, _ in result.skipped) - bad
    passed = max(result.testsRun - len(bad) - len(skipped), 0)
    return passed, len(bad) + outside, len(skipped)


def build_suite(pattern, names, directory=TESTS):
    loader = unittest.TestLoader()
    if not names:
        return loader.discover(directory, pattern=pattern, top_level_dir=directory)
    suite = unittest.TestSuite()
    for name in names:
        dotted = _module_name(name)
        if fnmatch.fnmatch(dotted.split(".")[0] + ".py", pattern):
            suite.addTests(loader.loadTestsFromName(dotted))
    return suite


def _shard(text):
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError("expected K/N, like 1/2")
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError("K/N needs 1 <= K <= N")
    return k, n


def main(argv=None):
    parser = argparse.ArgumentParser(description="Run coord's unittest suites.")
    parser.add_argument("--pattern", default="test_*.py",
                        help="file pattern under tests/ (default: test_*.py)")
    parser.add_argument("--label", help="word printed before the counts (default from pattern)")
    parser.add_argument("-k", dest="keywords", action="append", default=[],
                        help="run only test methods/classes whose name contains this (repeatable)")
    parser.add_argument("--durations", type=int, default=0, metavar="N",
                        help="also print the N slowest tests")
    parser.add_argument("--quick", action="store_true",
                        help="leave out the tests marked slow (support.slow); tests/run runs them")
    parser.add_argument("--shard", type=_shard, metavar="K/N",
                        help="run only every N-th test, starting with the K-th (to run N at once)")
    parser.add_argument("--dir", default=TESTS, help=argparse.SUPPRESS)  # for test_runner.py
    parser.add_argument("--summary-file", metavar="PATH",
                        help="also write the counting line to PATH (tests/run reads it)")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per test")
    parser.add_argument("names", nargs="*",
                        help="subset: modules, files or dotted test names; names that do not "
                             "match --pattern are ignored")
    args = parser.parse_args(argv)
    label = args.label or args.pattern.split("*")[0].rstrip("_") or "tests"
    if label == "test":
        label = "unit"

    sys.dont_write_bytecode = True
    directory = os.path.abspath(args.dir)
    for path in (ROOT, directory):
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)  # tests/ ends up first

    if args.keywords:
        unittest.TestLoader.testNamePatterns = ["*%s*" % k for k in args.keywords]
    suite = build_suite(args.pattern, args.names, directory)
    if args.quick or args.shard:
        tests = list(_tests(suite))
        if args.quick:
            listed = _listed_slow()
            kept = [t for t in tests if not is_slow(t, listed)]
            print("quick: %d slow tests left out (tests/run runs them)" % (len(tests) - len(kept)))
            if not args.names and not args.keywords:
                ids = set(t.id() for t in tests)
                classes = set(i.rsplit(".", 1)[0] for i in ids)
                for name in sorted(listed - ids - classes):
                    print("quick: support.SLOW names no test: %s" % name)
            tests = kept
        if args.shard:
            tests = tests[args.shard[0] - 1::args.shard[1]]
        suite = unittest.TestSuite(tests)
        sys.stdout.flush()

    runner = unittest.TextTestRunner(
        stream=sys.stdout, verbosity=2 if args.verbose else 1, buffer=True,
        resultclass=_TimedResult,
    )
    result = runner.run(suite)

    if args.durations and result.durations:
        print("slowest tests (wall, cpu):")
        for wall, cpu, test_id in sorted(result.durations, reverse=True)[:args.durations]:
            print("  %6.2fs %6.2fs %s" % (wall, cpu, test_id))

    passed, failed, skipped = count(result)
    line = "%s: %d passed, %d failed, %d skipped" % (label, passed, failed, skipped)
    print(line)
    sys.stdout.flush()
    if args.summary_file:
        with open(args.summary_file, "w") as f:
            f.write(line + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.stderr.write("runner: interrupted\n")
        sys.exit(130)
