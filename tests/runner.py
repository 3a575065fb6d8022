#!/usr/bin/env python3
"""Run coord's unittest suites and print one counting line.

    python3 tests/runner.py                          # every tests/test_*.py
    python3 tests/runner.py --pattern 'e2e_*.py' --label e2e
    python3 tests/runner.py test_store tests/test_hook.py test_store.StoreTest.test_lease
    python3 tests/runner.py --quick                  # only the tests measured fast last time
    python3 tests/runner.py --failed                 # only what failed last time
    python3 tests/runner.py --changed                # only the modules changed against main

Every run records each test's wall and CPU time, and what failed, under the test cache
(COORD_TEST_CACHE, default ~/.cache/coord-tests, in runs/durations.json: each test's fastest
recent wall time, which a run on a loaded machine raises at most twofold): --quick leaves out
the tests whose recorded time reached COORD_TEST_QUICK_LIMIT seconds (default 1.0) and the tests
marked support.slow or support.stress; --failed re-runs the failures recorded there. Tests
marked support.stress (races, kill storms) run only with --stress (tests/run passes it with
--all-pythons, --stress and under CI=true); --no-jj skips the tests that drive jj, for the
other interpreters' suites of a default tests/run.

Runners given the same --queue DIR share its tests: each runs the next test none has taken
(tests/run starts two per suite); --help-queue DIR takes what is left of another suite's queue
once this runner's own tests are done (--help-tmpdir DIR: in that suite's TMPDIR).

Test files import their helpers as top-level modules (`import support`,
`from support import CoordTestCase`): this runner puts tests/ first on sys.path, exactly
as `python3 tests/test_x.py` does for a single file, and support.py adds the repository
root so product modules (`import store`) resolve too.

Prints `LABEL: N passed, N failed, N skipped` last and exits 1 when anything failed or
errored (an import error in a test file counts as a failure).
"""

import argparse
import fnmatch
import json
import os
import re
import signal
import subprocess
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

    current = None  # the result being filled in: what _on_term reports

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.durations = []
        self._started = {}
        self._running = {}
        _TimedResult.current = self

    def startTest(self, test):
        self._started[id(test)] = (time.monotonic(), _cpu())
        self._running[id(test)] = test.id()
        super().startTest(test)

    def stopTest(self, test):
        self._running.pop(id(test), None)
        started = self._started.pop(id(test), None)
        if started is not None:
            self.durations.append((time.monotonic() - started[0], _cpu() - started[1], test.id()))
        super().stopTest(test)


def _on_term(signum, frame):
    """SIGTERM (tests/run's suite timeout): say what failed so far and what was running, record
    the failures for --failed, then end. Written to fd 1 with os.write: while a test runs,
    sys.stdout is unittest's buffer."""
    result = _TimedResult.current
    lines = ["", "runner: stopped by signal %d" % signum]
    if result is not None:
        for kind, entries in (("FAIL", result.failures), ("ERROR", result.errors)):
            for test, trace in entries:
                tail = [l for l in trace.strip().splitlines() if l.strip()][-3:]
                lines.append("%s: %s" % (kind, test.id()))
                lines += ["    " + l.strip()[:300] for l in tail]
        lines += ["running: %s" % name for name in result._running.values()]
        lines.append("%d run, %d failed so far" % (result.testsRun, len(result.failures) + len(result.errors)))
    try:
        os.write(1, ("\n".join(lines) + "\n").encode("utf-8", "replace"))
        if result is not None and not os.environ.get("COORD_TEST_NO_RECORD"):
            record(result, [])
    finally:
        os._exit(128 + signum)


def _tests(suite):
    """The tests of a suite in order, nested suites flattened."""
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            for test in _tests(item):
                yield test
        else:
            yield item


def _marked(test, mark):
    """True for a test whose method or class carries `mark` (coord_slow, coord_stress)."""
    method = getattr(test, getattr(test, "_testMethodName", ""), None)
    return bool(getattr(method, mark, False) or getattr(type(test), mark, False))


def is_slow(test, durations=None, limit=None):
    """True for a test marked slow (support.slow) or stress (support.stress) on its method or
    class, or whose last measured wall time (durations: {test id: {"wall": s}}) reached limit."""
    if _marked(test, "coord_slow"):
        return True
    seen = (durations or {}).get(test.id())
    return bool(seen and limit is not None and seen.get("wall", 0) >= limit)


def is_stress(test, listed=()):
    """True for a test marked support.stress on its method or class, or listed (support.STRESS)
    by id or class."""
    return _marked(test, "coord_stress") or test.id() in listed or test.id().rsplit(".", 1)[0] in listed


class OnePerClass(unittest.TestSuite):
    """The oldest and newest interpreters' share of the suite: of each class outside `whole` (the
    modules and classes of support.EVERY_INTERPRETER, which run whole), the first test that is
    not skipped runs (one that drives jj is, so the next one is tried), and the
    rest are skipped as left out by design before their setUp. Tests are marked as the run
    reaches them: a class's tests run one after another."""

    def __init__(self, tests, whole=()):
        super().__init__(tests)
        self.whole, self.ran = whole, set()

    def __iter__(self):
        import functools
        for test in super().__iter__():
            cls = test.id().rsplit(".", 1)[0]
            name = test.id().rsplit(".", 1)[1]
            if cls.split(".")[0] in self.whole or cls in self.whole or not hasattr(test, name):
                yield test
                continue
            method = getattr(test, name)
            if cls in self.ran:
                replacement = unittest.skip(ONE_PER_CLASS)(lambda: None)
            else:
                def replacement(*args, _method=method, _cls=cls, **kwargs):
                    try:
                        outcome = _method(*args, **kwargs)
                    except unittest.SkipTest:
                        raise  # skipped in its body (one that drives jj): the next one is tried
                    except BaseException:
                        self.ran.add(_cls)
                        raise
                    self.ran.add(_cls)  # this class's test on this interpreter
                    return outcome
                replacement = functools.wraps(method)(replacement)
            setattr(test, name, replacement)  # this instance only
            yield test


def _listed_stress():
    """support.STRESS of the tests/ directory in use (empty when it has no support module)."""
    try:
        import support
    except ImportError:
        return frozenset()
    return frozenset(getattr(support, "STRESS", ()))


# -- what a run remembers: durations and failures, under the test cache

def runs_dir():
    cache = os.environ.get("COORD_TEST_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "coord-tests")
    return os.path.join(cache, "runs")


def _read_json(path):
    try:
        with open(path) as f:
            value = json.load(f)
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}


def read_durations():
    return _read_json(os.path.join(runs_dir(), "durations.json"))


def read_failed():
    """Ids of the tests that failed when last run (a module name for one that did not import)."""
    return sorted(_read_json(os.path.join(runs_dir(), "failed.json")))


def _update(name, change):
    """Apply change(dict) to runs/NAME under a lock (suites of several interpreters run at once)
    and replace the file whole; a cache that cannot be written costs the record, not the run."""
    directory = runs_dir()
    try:
        import fcntl
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = os.path.join(directory, name)
            value = _read_json(path)
            change(value)
            tmp = "%s.%d.tmp" % (path, os.getpid())
            with open(tmp, "w") as f:
                json.dump(value, f, indent=0, sort_keys=True)
            os.replace(tmp, path)
    except (OSError, ImportError) as exc:
        sys.stderr.write("runner: could not record %s: %s\n" % (name, exc))


def record(result, ran):
    """Remember each test's durations and which of the tests that ran failed."""
    python = "%d.%d" % sys.version_info[:2]

    skipped = set(_owner(t).id() for t, _ in result.skipped)

    def durations(value):  # a skipped test's time says nothing of what it costs to run
        for wall, cpu, test_id in result.durations:
            if test_id in skipped:
                continue
            # What the test costs on a quiet machine: the fastest recent run. A run on a loaded
            # machine does not raise it past twice the last figure; a test that got slower for
            # good reaches its new time within a few runs.
            last = value.get(test_id) if isinstance(value.get(test_id), dict) else {}
            if isinstance(last.get("wall"), (int, float)):
                wall = min(wall, 2 * last["wall"])
            if isinstance(last.get("cpu"), (int, float)):
                cpu = min(cpu, 2 * last["cpu"])
            value[test_id] = {"wall": round(wall, 3), "cpu": round(cpu, 3), "python": python}
    _update("durations.json", durations)
    failed = set(failed_ids(result))

    def failures(value):
        for test_id in ran:
            if test_id not in skipped:  # a skip says nothing of whether it still fails
                value.pop(test_id, None)
        for test_id in failed:
            value[test_id] = python
    _update("failed.json", failures)


def failed_ids(result):
    """Ids of the tests that failed or errored (an import failure: the module's name)."""
    out = []
    for test, _ in result.failures + result.errors + [(t, None) for t in result.unexpectedSuccesses]:
        test = _owner(test)
        test_id = test.id() if isinstance(test, unittest.TestCase) else str(test)
        # unittest names a module that failed to import unittest.loader._FailedTest.MODULE
        if test_id.startswith("unittest.loader._FailedTest."):
            test_id = test_id[len("unittest.loader._FailedTest."):]
        holder = re.match(r"^\w+ \(([\w.]+)\)$", test_id)  # setUpClass (test_x.Case): its class
        out.append(holder.group(1) if holder else test_id)
    return out


# Product files whose tests live in a module of another name.
_TESTS_OF = {"coord": ["test_cli", "test_compile"], "install": ["test_install", "test_upgrade"],
             "hook.py": ["test_hook"], "workspace.py": ["test_workspace", "test_land"],
             "launch.py": ["test_workspace", "test_wrappers"],
             "land.py": ["test_land", "test_workspace"], "review.py": ["test_land", "test_workspace"],
             "cleanup.py": ["test_cleanup", "test_workspace"]}


def _git_names(root, *argv):
    """File names a git listing prints, or None when git cannot run there."""
    try:
        out = subprocess.run(["git"] + list(argv), cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.split() if out.returncode == 0 else None


def _importers(root):
    """{product module file: the product files that import it, directly or through others}: the
    import ladder read from the sources (coord, install and the top-level *.py), so a change to a
    module low on it reaches the tests of every module above."""
    import ast
    files = sorted(n for n in os.listdir(root) if n.endswith(".py") or n in ("coord", "install"))
    names = {n[:-3]: n for n in files if n.endswith(".py")}
    above = {n: set() for n in files}
    for name in files:
        try:
            with open(os.path.join(root, name), "rb") as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for mod in mods:
                if mod in names and names[mod] != name:
                    above[names[mod]].add(name)
    for name in files:  # transitive: whatever imports an importer
        todo, seen = list(above[name]), set()
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(above.get(n, ()))
        above[name] = seen
    return above


def changed_modules(directory=TESTS):
    """Test modules for the files changed against main (committed on this branch, staged,
    unstaged or new; against HEAD alone when there is no main): test_X for X.py and for every
    product file that imports X (the ladder, `_importers`), the test module itself, and every
    module for a change to the test scaffolding; None when git cannot tell."""
    root = os.path.dirname(os.path.abspath(directory))
    working = _git_names(root, "diff", "--name-only", "HEAD")
    new = _git_names(root, "ls-files", "--others", "--exclude-standard")
    if working is None or new is None:
        return None
    names = set(working + new + (_git_names(root, "diff", "--name-only", "main...HEAD") or []))
    have = set(f[:-3] for f in os.listdir(directory) if f.endswith(".py"))
    ladder = _importers(root)
    out = set()
    for name in names:
        head, base_name = os.path.split(name)
        if head == "tests":
            stem = base_name[:-3] if base_name.endswith(".py") else base_name
            if stem in ("support", "runner", "harnesses", "modelserver") or base_name == "run":
                return sorted(m for m in have if m.startswith(("test_", "e2e_")))
            if stem in have and stem.startswith(("test_", "e2e_")):
                out.add(stem)
        elif not head or head == "bench":
            product = head == "bench" or base_name.endswith(".py") or base_name in _TESTS_OF
            files = [base_name] + sorted(ladder.get(base_name, ())) if not head else [base_name]
            stems = ["test_compile"] if product else []
            for f in files:
                stems += _TESTS_OF.get(f, ["test_" + f[:-3]] if f.endswith(".py") and not head else [])
            out.update(s for s in stems if s in have)
    return sorted(out)


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


# The skip reasons of what --no-jj leaves out by design: support.CoordTestCase.use_jj's, those of
# the SQLite classes repeated on PostgreSQL (test_store.PostgresEngine, support.PostgresProject's
# mirrors), which run once, on the default interpreter, and OnePerClass's
ONE_PER_CLASS = "one per class: the default interpreter's suite runs the rest"
LEFT_OUT = ("drives jj:", "runs once:", "one per class:")


def left_out(result):
    """How many of the skipped tests --no-jj left out by design (they run on the default
    interpreter); they are skips all the same and are counted in `skipped` too."""
    return len(set(id(_owner(t)) for t, why in result.skipped if str(why).startswith(LEFT_OUT)))


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


def precompile(root=ROOT):
    """Write the bytecode of the product modules (ROOT/*.py) beside them, in __pycache__/ (git
    ignores it). The tests run coord hundreds of times with PYTHONDONTWRITEBYTECODE=1, so that
    no test leaves bytecode behind; without a cache each of those processes compiled store.py
    and workspace.py again (about half of a `coord work` call's CPU time). Python checks each
    file's size and time before it uses the cache, so an edited module is compiled afresh."""
    import py_compile
    for name in sorted(os.listdir(root)):
        if name.endswith(".py"):
            try:
                py_compile.compile(os.path.join(root, name), doraise=True)
            except (OSError, py_compile.PyCompileError):
                pass  # a read-only checkout, or a syntax error test_compile reports


class Queue:
    """Tests that several runners share (tests/run starts two per suite): the first runner to come
    publishes the ordered list of test ids; each runner then claims the next index under a lock
    until none is left, so the runners end together whatever each test costs. The runners of
    another suite, once their own list is done, take what is left here (--help-queue)."""

    def __init__(self, directory):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.list = os.path.join(directory, "tests.json")
        self._fd = os.open(os.path.join(directory, "next"), os.O_RDWR | os.O_CREAT, 0o600)

    def _locked(self, fn):
        import fcntl
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            return fn()
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def publish(self, ids):
        """The list every runner of the queue works through: the first runner's, `ids` here."""
        def first():
            if not os.path.exists(self.list):
                with open(self.list + ".new", "w") as f:
                    json.dump(ids, f)
                os.replace(self.list + ".new", self.list)
            with open(self.list) as f:
                return json.load(f)
        return self._locked(first)

    def published(self, timeout=120.0):
        """The list another suite's runners published (waiting for it a while), or []."""
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.list):
            if time.monotonic() > deadline:
                return []
            time.sleep(0.5)
        def read():
            with open(self.list) as f:
                return json.load(f)
        return self._locked(read)

    def claim(self):
        """The next index of the list no runner has taken (it may be past the end)."""
        def take():
            raw = os.pread(self._fd, 32, 0).strip()
            index = int(raw) if raw else 0
            os.pwrite(self._fd, b"%-31d\n" % (index + 1), 0)
            return index
        return self._locked(take)


class ClaimedSuite(unittest.TestSuite):
    """A suite whose tests are claimed from queues as the run reaches them: first this runner's
    own queue, with its loaded tests, then any other suite's queue, loading each test by name."""

    _cleanup = False  # no list of tests to release

    def __init__(self, sources, help_tmpdir=None):
        super().__init__()
        self.sources = sources  # [(Queue, ids, {id: loaded test})]
        self.claimed = []
        self.helped = 0
        self.help_tmpdir = help_tmpdir  # TMPDIR of the tests taken from another suite's queue

    def __iter__(self):
        for n, (queue, ids, loaded) in enumerate(self.sources):
            if n == 1 and self.help_tmpdir:
                import tempfile
                os.environ["TMPDIR"] = self.help_tmpdir
                tempfile.tempdir = None  # tempfile reads TMPDIR again
            while True:
                index = queue.claim()
                if index >= len(ids):
                    break
                test = loaded.get(ids[index])
                if test is None:
                    test = next(iter(_tests(unittest.defaultTestLoader.loadTestsFromName(ids[index]))))
                self.claimed.append(ids[index])
                self.helped += n > 0
                yield test

    def countTestCases(self):
        return len(self.claimed)


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
                        help="leave out the tests measured slow last time (COORD_TEST_QUICK_LIMIT seconds, "
                             "default 1.0) and those marked support.slow; tests/run runs them")
    parser.add_argument("--stress", action="store_true",
                        help="also run the stress tier (support.stress: races, kill storms)")
    parser.add_argument("--no-jj", action="store_true",
                        help="what can differ by interpreter: skip the tests that drive jj (support.use_jj) "
                             "and, in a whole run, all but the first test of each class outside "
                             "support.EVERY_INTERPRETER")
    parser.add_argument("--failed", action="store_true",
                        help="run only the tests that failed when last run (recorded under the test cache)")
    parser.add_argument("--changed", action="store_true",
                        help="run only the test modules of the files changed against main (or HEAD)")
    parser.add_argument("--shard", type=_shard, metavar="K/N",
                        help="run only every N-th test, starting with the K-th (to run N at once)")
    parser.add_argument("--queue", metavar="DIR",
                        help="share the tests with the other runners given the same DIR: each runs the "
                             "next test none has taken")
    parser.add_argument("--help-queue", metavar="DIR", action="append", default=[],
                        help="when this runner's own tests are done, take what is left in another "
                             "suite's queue (repeatable; same interpreter)")
    parser.add_argument("--help-tmpdir", metavar="DIR",
                        help="the TMPDIR of the tests taken from another suite's queue (that suite's own)")
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

    if directory == TESTS:
        precompile()
    if args.no_jj:
        os.environ["COORD_TEST_NO_JJ"] = "1"  # support.CoordTestCase.use_jj skips
    if args.keywords:
        unittest.TestLoader.testNamePatterns = ["*%s*" % k for k in args.keywords]
    names = list(args.names)
    if args.failed:
        failed = [n for n in read_failed() if fnmatch.fnmatch(n.split(".")[0] + ".py", args.pattern)]
        if names:
            failed = [n for n in failed if any(n == m or n.startswith(_module_name(m) + ".") for m in names)]
        print("failed last time: %d tests%s" % (len(failed), "" if failed else "; nothing to run"))
        if not failed:
            return _finish(args, label, unittest.TestResult())
        names = failed
    if args.changed:
        changed = changed_modules(directory)
        if changed is None:
            print("changed: git cannot tell what changed; running every module")
        else:
            changed = [m for m in changed if fnmatch.fnmatch(m + ".py", args.pattern)]
            if names:
                changed = [n for n in names if _module_name(n).split(".")[0] in changed]
            print("changed: %s" % (" ".join(changed) or "no test module"))
            if not changed:
                return _finish(args, label, unittest.TestResult())
            names = changed
    suite = build_suite(args.pattern, names, directory)
    tests = list(_tests(suite))
    listed = _listed_stress()
    if not names and not args.keywords:
        ids = set(t.id() for t in tests)
        classes = set(i.rsplit(".", 1)[0] for i in ids)
        for name in sorted(n for n in listed - ids - classes if fnmatch.fnmatch(n.split(".")[0] + ".py", args.pattern)):
            print("stress: support.STRESS names no test: %s" % name)
    if not args.stress and not args.failed:
        kept = [t for t in tests if not is_stress(t, listed)]
        if len(kept) < len(tests):
            print("stress: %d tests left out (--stress runs them)" % (len(tests) - len(kept)))
        tests = kept
    if args.quick:
        limit = float(os.environ.get("COORD_TEST_QUICK_LIMIT") or 1.0)
        durations = read_durations()
        kept = [t for t in tests if not is_slow(t, durations, limit)]
        unmeasured = sum(1 for t in kept if t.id() not in durations)
        print("quick: %d slow tests left out (measured %.1f s or more, or marked slow; tests/run runs them)%s"
              % (len(tests) - len(kept), limit,
                 "; %d never measured (run them once without --quick)" % unmeasured if unmeasured else ""))
        tests = kept
    if args.shard:
        tests = tests[args.shard[0] - 1::args.shard[1]]
    if args.queue:
        mine = Queue(args.queue)
        loaded = dict((t.id(), t) for t in tests)
        sources = [(mine, mine.publish([t.id() for t in tests]), loaded)]
        for other in args.help_queue:
            theirs = Queue(other)
            sources.append((theirs, theirs.published(), {}))
        suite = ClaimedSuite(sources, args.help_tmpdir)
    elif args.no_jj and not names and not args.keywords:
        import support
        suite = OnePerClass(tests, support.EVERY_INTERPRETER)
    else:
        suite = unittest.TestSuite(tests)
    sys.stdout.flush()

    signal.signal(signal.SIGTERM, _on_term)
    runner = unittest.TextTestRunner(
        stream=sys.stdout, verbosity=2 if args.verbose else 1, buffer=True,
        resultclass=_TimedResult,
    )
    result = runner.run(suite)
    if not os.environ.get("COORD_TEST_NO_RECORD"):
        ran = suite.claimed if args.queue else [t.id() for t in tests]
        record(result, ran + [_module_name(n) for n in names])
    if args.queue and suite.helped:
        print("helped: %d of these tests came from another suite's queue" % suite.helped)

    if args.durations and result.durations:
        print("slowest tests (wall, cpu):")
        for wall, cpu, test_id in sorted(result.durations, reverse=True)[:args.durations]:
            print("  %6.2fs %6.2fs %s" % (wall, cpu, test_id))
    return _finish(args, label, result)


def _finish(args, label, result):
    passed, failed, skipped = count(result)
    line = "%s: %d passed, %d failed, %d skipped" % (label, passed, failed, skipped)
    by_design = left_out(result)
    if by_design:
        line += (" (%d of them drive jj, repeat a SQLite class on PostgreSQL or are not their class's first:"
                 " the default interpreter's suite runs them)" % by_design)
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
