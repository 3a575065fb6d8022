"""store.py: identities, leases, messages, audit, permissions, migrations.

Concurrency claims are proved by racing real processes (multiprocessing, spawn), each with
its own connection to one real SQLite file.
"""

import json
import multiprocessing
import os
import re
import sqlite3
import stat
import subprocess
import sys
import time
import unittest
import uuid

import support
import store
import pg
import hostclient
from store import Refused, UsageError


def _open(db, **kw):
    """A store on `db`: a SQLite path, or a PostgreSQL engine's {"dsn", "project"} (PostgresEngine)."""
    if isinstance(db, dict):
        support.import_psycopg()
        return pg.Store(db, **kw)
    return store.Store(db, **kw)


def _claim_worker(db, rounds, barrier, results, index):
    if not isinstance(db, dict):
        os.environ["COORD_DB"] = db
    st = _open(db, timeout=30)
    rt = st.register(harness="race")
    for r in range(rounds):
        # Even workers claim the directory, odd ones a file below it: all overlap.
        resource = "round%d" % r if index % 2 == 0 else "round%d/file" % r
        barrier.wait()
        try:
            st.claim(rt["id"], [resource])
            results.put((r, rt["id"], True))
        except Refused:
            results.put((r, rt["id"], False))
    st.close()


def _multi_claim_worker(db, rounds, barrier, results, index):
    """Each round, claim two of four overlapping names at once (a directory and files below it
    among them): the claim is all or nothing."""
    st = _open(db, timeout=30)
    rt = st.register(harness="race")
    names = ["r%d", "r%d/a", "r%d/b", "r%d/c"]
    for r in range(rounds):
        pair = [names[index % 4] % r, names[(index + 1 + r) % 4] % r]
        if pair[0] == pair[1]:
            pair = pair[:1]
        barrier.wait()
        try:
            st.claim(rt["id"], pair)
            results.put((r, rt["id"], pair, True))
        except Refused:
            results.put((r, rt["id"], pair, False))
    st.close()


def _send_worker(db, recipient, count, barrier, results):
    st = _open(db, timeout=60)
    rt = st.register(harness="sender")
    barrier.wait()
    ids = [st.send(rt["id"], "message %d from %s" % (i, rt["id"]), recipient)["id"] for i in range(count)]
    results.put((rt["id"], ids))
    st.close()


def _register_worker(db, pid, barrier, results):
    st = _open(db, timeout=30)
    barrier.wait()
    results.put(st.register(conversation="conv-par", pid=pid, harness="parallel")["id"])
    st.close()


class StoreCase(support.CoordTestCase):
    def setUp(self):
        super().setUp()
        self.st = self.open_store()
        self.addCleanup(self.st.close)

    def store_env(self):
        """The environment the test's stores read (None: the process's)."""
        return None

    def open_store(self, **kw):
        """Another connection to this test's database (PostgresEngine: to its project schema)."""
        return store.Store(self.db, environ=self.store_env(), **kw)

    def db_spec(self):
        """What another process opens this test's database by (_open); JSON-able."""
        return self.db

    def child_env(self):
        """The environment of a child process that opens db_spec() itself."""
        return dict(self.env, PYTHONPATH=support.ROOT)

    def rt(self, **kw):
        return self.st.register(**kw)["id"]


class IdentityTest(StoreCase):
    def test_handle_is_five_words_from_the_list_and_domain_separated(self):
        rid = str(uuid.uuid4())
        h = store.handle_for(rid, store.DOMAIN_RUNTIME)
        self.assertEqual(len(h.split("-")), 5)
        self.assertTrue(all(w in store.WORDS for w in h.split("-")))
        self.assertEqual(h, store.handle_for(rid, store.DOMAIN_RUNTIME))
        self.assertNotEqual(h, store.handle_for(rid, store.DOMAIN_WORK))

    def test_subagent_uuid_is_rfc4122_v5_and_deterministic(self):
        a = store.subagent_uuid("conv-1", "agent-9")
        self.assertEqual(a, store.subagent_uuid("conv-1", "agent-9"))
        self.assertNotEqual(a, store.subagent_uuid("conv-1", "agent-8"))
        self.assertEqual(uuid.UUID(a).version, 5)
        self.assertEqual(uuid.UUID(store.new_uuid()).version, 4)

    def test_exact_handle_and_full_uuid_resolve(self):
        rt = self.st.register()
        self.assertEqual(self.st.resolve_runtime(rt["handle"])["id"], rt["id"])
        self.assertEqual(self.st.resolve_runtime(rt["id"])["id"], rt["id"])
        self.assertEqual(self.st.resolve_runtime(rt["id"].upper())["id"], rt["id"])

    def test_prefixes_and_altered_handles_never_resolve(self):
        rt = self.st.register()
        words = rt["handle"].split("-")
        for bad in (rt["id"][:8], rt["id"][:-1], "-".join(words[:4]), rt["handle"][:-1]):
            with self.assertRaises(UsageError, msg=bad):
                self.st.resolve_runtime(bad)
        other = store.WORDS[(store.WORDS.index(words[2]) + 1) % 128]
        changed = "-".join(words[:2] + [other] + words[3:])
        with self.assertRaises(Refused):
            self.st.resolve_runtime(changed)

    def test_resume_supersedes_and_moves_leases_and_messages(self):
        old = self.st.register(conversation="conv-a")
        peer = self.rt()
        self.st.claim(old["id"], ["src/x.py"])
        self.st.send(peer, "for you", old["handle"])
        new = self.st.register(conversation="conv-a", source="resume")
        self.assertNotEqual(old["id"], new["id"])
        self.assertEqual([l["resource"] for l in self.st.leases_of(new["id"])], ["src/x.py"])
        self.assertEqual(len(self.st.open_messages(new["id"])), 1)
        for action in (lambda: self.st.heartbeat(old["id"]),
                       lambda: self.st.claim(old["id"], ["other"]),
                       lambda: self.st.renew(old["id"]),
                       lambda: self.st.release(old["id"], ["src/x.py"]),
                       lambda: self.st.ack(old["id"], [1])):
            with self.assertRaises(Refused) as cm:
                action()
            self.assertIn(new["handle"], cm.exception.message)
        events = [json.loads(l)["event"] for l in self.st.audit_lines()]
        self.assertIn("runtime.superseded", events)

    def test_a_message_to_a_resumed_agent_s_old_handle_reaches_its_newest_attachment(self):
        # A peer still knows the handle it saw before the resume (twice over: resumed, then again).
        first = self.st.register(conversation="conv-h")
        second = self.st.register(conversation="conv-h", source="resume")
        third = self.st.register(conversation="conv-h", source="resume")
        peer = self.rt()
        mid = self.st.send(peer, "still about parser.py", first["handle"])["id"]
        self.assertEqual([m["id"] for m in self.st.open_messages(third["id"])], [mid])
        self.assertEqual(self.st.open_messages(first["id"]), [])
        self.assertEqual(self.st.open_messages(second["id"]), [])
        self.assertIn("still about parser.py", self.st.pending_context(third["id"]))

    def test_messages_follow_the_conversation_after_its_harness_died(self):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        old = self.st.register(conversation="conv-d", pid=proc.pid)
        peer = self.rt()
        mid = self.st.send(peer, "while you were away", old["handle"])["id"]
        proc.kill()
        proc.wait()
        new = self.st.register(conversation="conv-d", source="resume")
        self.assertEqual(self.st.runtime(old["id"])["end_reason"], "process-gone")
        self.assertEqual([m["id"] for m in self.st.open_messages(new["id"])], [mid])
        self.assertIn("while you were away", self.st.pending_context(new["id"]))

    def test_same_harness_process_keeps_its_attachment_under_parallel_registration(self):
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(6)
        results = ctx.Queue()
        procs = [ctx.Process(target=_register_worker, args=(self.db_spec(), os.getpid(), barrier, results))
                 for _ in range(6)]
        for p in procs:
            p.start()
        ids = {results.get(timeout=60) for _ in procs}
        for p in procs:
            p.join(30)
        self.assertEqual(len(ids), 1, ids)
        self.assertEqual(self.st.q("SELECT count(*) FROM runtimes WHERE conversation = 'conv-par'").fetchone()[0], 1)

    def test_subagent_has_own_runtime_and_no_parent_authority(self):
        parent = self.st.register(conversation="conv-p")
        self.st.claim(parent["id"], ["src/p.py"])
        sub = self.st.register(conversation="conv-p", agent_id="sub-1")
        self.assertEqual(sub["id"], store.subagent_uuid("conv-p", "sub-1"))
        self.assertEqual(self.st.leases_of(sub["id"]), [])
        self.assertTrue(self.st.conflicts(["src/p.py"], as_runtime=sub["id"]))
        with self.assertRaises(Refused):
            self.st.release(sub["id"], ["src/p.py"])
        # Registering the subagent did not supersede the parent.
        self.assertIsNone(self.st.runtime(parent["id"])["ended_at"])
        # A new parent attachment does not end the subagent either.
        self.assertEqual(self.st.register(conversation="conv-p", agent_id="sub-1")["id"], sub["id"])

    def test_caller_resolution_order(self):
        a = self.st.register(conversation="conv-1")
        b = self.st.register(conversation="conv-2")
        sub = self.st.register(conversation="conv-2", agent_id="thread-9")
        self.assertEqual(self.st.caller(b["handle"], {"COORD_RUNTIME_ID": a["id"]})["id"], b["id"])
        self.assertEqual(self.st.caller(None, {"COORD_RUNTIME_ID": a["id"],
                                               "CLAUDE_CODE_SESSION_ID": "conv-2"})["id"], a["id"])
        self.assertEqual(self.st.caller(None, {"CLAUDE_CODE_SESSION_ID": "conv-2"})["id"], b["id"])
        self.assertEqual(self.st.caller(None, {"CODEX_SESSION_ID": "conv-1", "CODEX_THREAD_ID": "conv-1"})["id"],
                         a["id"])
        self.assertEqual(self.st.caller(None, {"CODEX_SESSION_ID": "conv-2", "CODEX_THREAD_ID": "thread-9"})["id"],
                         sub["id"])
        with self.assertRaises(Refused) as cm:
            self.st.caller(None, {}, person=False)  # without it: the person at this terminal (PersonTest)
        self.assertIn("coord hello", cm.exception.hint)

    def test_caller_in_opencodes_shell_by_the_session_coords_plugin_exports(self):
        # OpenCode runs several sessions in one process (its TUI, `opencode serve`): the process
        # cannot tell them apart, the session variables the plugin sets in shell.env do.
        a = self.st.register(conversation="ses_one", harness="opencode", pid=os.getpid())
        b = self.st.register(conversation="ses_two", harness="opencode", pid=os.getpid())
        sub = self.st.register(conversation="ses_two", agent_id="ses_child", harness="opencode")
        self.assertEqual(self.st.caller(None, {"COORD_OPENCODE_SESSION": "ses_one"})["id"], a["id"])
        self.assertEqual(self.st.caller(None, {"COORD_OPENCODE_SESSION": "ses_two"})["id"], b["id"])
        self.assertEqual(self.st.caller(None, {"COORD_OPENCODE_SESSION": "ses_two",
                                               "COORD_OPENCODE_AGENT": "ses_child"})["id"], sub["id"])
        self.assertIn("COORD_OPENCODE_SESSION", store.AGENT_MARKERS)
        self.assertIn("OPENCODE_PID", store.AGENT_MARKERS)

    def test_caller_in_kilo_codes_shell_by_its_own_variables(self):
        # Kilo Code 7.7.7 is OpenCode's fork: coord's plugin there exports COORD_KILO_*; its shell
        # also carries OPENCODE=1, which names no session.
        a = self.st.register(conversation="ses_kilo", harness="kilo", pid=os.getpid())
        sub = self.st.register(conversation="ses_kilo", agent_id="ses_kchild", harness="kilo")
        self.assertEqual(self.st.caller(None, {"COORD_KILO_SESSION": "ses_kilo", "OPENCODE": "1"})["id"], a["id"])
        self.assertEqual(self.st.caller(None, {"COORD_KILO_SESSION": "ses_kilo",
                                               "COORD_KILO_AGENT": "ses_kchild"})["id"], sub["id"])
        self.assertIn("COORD_KILO_SESSION", store.AGENT_MARKERS)
        self.assertIn("KILO_PID", store.AGENT_MARKERS)

    def test_pi_is_known_by_its_command_or_its_cli_script(self):
        # @mariozechner/pi-coding-agent 0.73.1: node runs .../.bin/pi, a link to .../dist/cli.js
        self.assertEqual(store._harness_word("/x/node_modules/.bin/pi"), "pi")
        self.assertIn("PI_CODING_AGENT", store.AGENT_MARKERS)

    def test_auggie_is_known_by_the_script_node_runs(self):
        # @augmentcode/auggie 0.36.0: node runs .../node_modules/.bin/auggie (a link to augment.mjs)
        self.assertEqual(store._harness_word("/x/node_modules/.bin/auggie"), "auggie")
        self.assertIn("AUGMENT_AGENT", store.AGENT_MARKERS)

    def test_kilo_codes_native_binary_is_known_by_its_dotted_name(self):
        # @kilocode/cli 7.7.7: node runs .../bin/kilo, which spawns the native .../bin/.kilo.
        self.assertEqual(store._harness_word("/x/node_modules/@kilocode/cli/bin/.kilo"), "kilo")
        self.assertEqual(store._harness_word(".kilo"), "kilo")
        self.assertEqual(store._harness_word("/x/node_modules/.bin/kilo"), "kilo")
        self.assertIsNone(store._harness_word(".kilocode"))
        self.assertIsNone(store._harness_word(".bash"))

    def test_caller_by_process_ancestry_needs_matching_start_time(self):
        me = os.getpid()
        rt = self.st.register(pid=me)
        proc = subprocess.run([sys.executable, "-c", "import sys, store, pg, json; db = json.loads(sys.argv[1]);"
                               "st = pg.Store(db) if isinstance(db, dict) else store.Store();"
                               "print(st.caller(None, {})['id'])", json.dumps(self.db_spec())],
                              env=self.child_env(), stdout=subprocess.PIPE, text=True)
        self.assertEqual(proc.stdout.strip(), rt["id"])
        # Same pid, different start time: a reused pid never matches.
        self.st.conn.execute("UPDATE runtimes SET pid_start = 'x' WHERE id = ?", (rt["id"],))
        self.assertFalse(self.st.runtime_live(self.st.runtime(rt["id"])))


class LeaseTest(StoreCase):
    def test_matrix_with_hierarchy(self):
        cases = [  # existing mode, existing name, requested mode, requested name, allowed
            ("append", "a/b", "append", "a/b", True),
            ("append", "a/b", "exclusive", "a/b", False),
            ("exclusive", "a/b", "append", "a/b", False),
            ("exclusive", "a/b", "exclusive", "a/b", False),
            ("append", "a", "append", "a/b/c", True),
            ("append", "a", "exclusive", "a/b/c", False),
            ("exclusive", "a/b/c", "append", "a", False),
            ("exclusive", "a/b/c", "exclusive", "a", False),
            ("exclusive", "a/b", "exclusive", "a/bc", True),
            ("exclusive", "a/b", "exclusive", "a/b.txt", True),
            ("exclusive", "a/b", "exclusive", "a", False),
            ("exclusive", "ab", "exclusive", "a", True),
        ]
        for i, (emode, ename, rmode, rname, allowed) in enumerate(cases):
            with self.subTest(case=cases[i]):
                holder, asker = self.rt(), self.rt()
                self.st.claim(holder, ["c%d/%s" % (i, ename)], emode)
                if allowed:
                    self.st.claim(asker, ["c%d/%s" % (i, rname)], rmode)
                else:
                    with self.assertRaises(Refused) as cm:
                        self.st.claim(asker, ["c%d/%s" % (i, rname)], rmode)
                    self.assertIn(self.st.runtime(holder)["handle"], cm.exception.message)
                    self.assertIn("coord send", cm.exception.hint)

    def test_runtime_never_conflicts_with_itself(self):
        a = self.rt()
        self.st.claim(a, ["src"])
        self.st.claim(a, ["src/x.py"], "exclusive")
        self.st.claim(a, ["src/y.py"], "append")
        self.assertEqual(len(self.st.leases_of(a)), 3)

    def test_claim_is_all_or_nothing(self):
        a, b = self.rt(), self.rt()
        self.st.claim(a, ["held"])
        with self.assertRaises(Refused):
            self.st.claim(b, ["free1", "held", "free2"])
        self.assertEqual(self.st.leases_of(b), [])

    def test_partial_release_removes_only_named(self):
        a = self.rt()
        self.st.claim(a, ["x", "y", "z"])
        self.st.release(a, ["y"])
        self.assertEqual([l["resource"] for l in self.st.leases_of(a)], ["x", "z"])
        with self.assertRaises(Refused):
            self.st.release(a, ["x", "never"])
        self.assertEqual([l["resource"] for l in self.st.leases_of(a)], ["x", "z"])
        self.assertEqual(self.st.release(a, everything=True), ["x", "z"])

    def test_renewal_extends_and_expired_lease_is_not_revived(self):
        a, b = self.rt(), self.rt()
        t0 = time.time()
        self.st.claim(a, ["r"], ttl=10, now=t0)
        self.st.renew(a, ["r"], now=t0 + 8)
        self.assertAlmostEqual(self.st.leases_of(a)[0]["expires_at"], t0 + 18, places=3)
        # Past expiry: renewal is refused, the lease is gone and a peer may take it.
        with self.assertRaises(Refused):
            self.st.renew(a, ["r"], now=t0 + 19)
        self.st.claim(b, ["r"], now=t0 + 19)

    def test_heartbeat_renews_presence_and_leases_but_never_shortens(self):
        a = self.rt()
        t0 = time.time()
        self.st.claim(a, ["r"], ttl=100, now=t0)
        self.st.heartbeat(a, now=t0 + 50)
        self.assertAlmostEqual(self.st.leases_of(a)[0]["expires_at"], t0 + 150, places=3)
        # A heartbeat from the past (clock stepped back) does not shorten anything.
        self.st.heartbeat(a, now=t0 - 1000)
        self.assertAlmostEqual(self.st.leases_of(a)[0]["expires_at"], t0 + 150, places=3)
        self.assertGreaterEqual(self.st.runtime(a)["heartbeat_at"], t0 + 50)

    def test_expired_lease_is_reaped_and_audited(self):
        a, b = self.rt(), self.rt()
        t0 = time.time()
        self.st.claim(a, ["r"], ttl=5, now=t0)
        self.assertTrue(self.st.conflicts(["r"], as_runtime=b, now=t0 + 4))
        self.assertFalse(self.st.conflicts(["r"], as_runtime=b, now=t0 + 6))
        self.st.reap(now=t0 + 6)
        self.assertEqual(self.st.leases_of(a), [])
        self.assertIn("lease.expired", [json.loads(l)["event"] for l in self.st.audit_lines()])

    def test_dead_process_runtime_is_reaped_and_frees_leases(self):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        a = self.st.register(pid=proc.pid)["id"]
        b = self.rt()
        self.st.claim(a, ["r"])
        self.assertTrue(self.st.conflicts(["r"], as_runtime=b))
        proc.kill()
        proc.wait()
        self.assertFalse(self.st.conflicts(["r"], as_runtime=b))
        self.st.claim(b, ["r"])
        rt = self.st.runtime(a)
        self.assertEqual(rt["end_reason"], "process-gone")
        self.assertIn("runtime.reaped", [json.loads(l)["event"] for l in self.st.audit_lines()])

    def test_lease_lifetimes_are_finite_and_in_range(self):
        a = self.rt()
        for ttl in (float("inf"), float("nan"), float("-inf"), 1e309, 0, -1, 0.5, 604801, "soon"):
            with self.subTest(ttl=ttl):
                with self.assertRaises(UsageError) as cm:
                    self.st.claim(a, ["r"], ttl=ttl)
                self.assertIn("from 1 to 604800", cm.exception.message)
        self.assertEqual(self.st.leases_of(a), [])
        self.st.claim(a, ["r"], ttl=604800)
        for ttl in (float("inf"), float("nan"), 0):
            with self.assertRaises(UsageError):
                self.st.renew(a, ttl=ttl)
        self.assertEqual(self.st.leases_of(a)[0]["ttl"], 604800)

    def test_a_never_expiring_lease_of_an_older_coord_is_brought_within_range(self):
        a, b = self.rt(), self.rt()
        now = time.time()
        with self.st.transaction():
            self.st.conn.execute("INSERT INTO leases (resource, runtime, mode, purpose, acquired_at, expires_at, ttl)"
                                 " VALUES ('r', ?, 'exclusive', '', ?, ?, ?)", (a, now, float("inf"), float("inf")))
        self.st.reap(now=now)
        lease = self.st.leases_of(a)[0]
        self.assertEqual((lease["expires_at"], lease["ttl"]), (now + 604800, 604800))
        self.st.heartbeat(a, now=now + 10)
        self.assertEqual(self.st.leases_of(a)[0]["expires_at"], now + 10 + 604800, "renewals stay finite")
        self.assertTrue(self.st.conflicts(["r"], as_runtime=b, now=now + 10))

    def test_a_pid_no_process_can_have_is_dead_not_an_error(self):
        a = self.st.register(pid=1 << 40)["id"]  # an older coord stored any --pid
        self.assertFalse(self.st.runtime_live(self.st.runtime(a)))
        self.st.reap()
        self.assertEqual(self.st.runtime(a)["end_reason"], "process-gone")

    def test_silent_runtime_expires(self):
        t0 = time.time()
        a = self.st.register(now=t0)["id"]
        self.st.claim(a, ["r"], ttl=10 * self.st.runtime_ttl, now=t0)
        b = self.rt()
        self.assertFalse(self.st.conflicts(["r"], as_runtime=b, now=t0 + self.st.runtime_ttl + 1))

    def test_overlap_query_uses_indexes(self):
        names = store.ancestors("a/b/c")
        sql = ("SELECT resource FROM leases WHERE resource IN (%s) AND expires_at > 0 UNION ALL "
               "SELECT resource FROM leases WHERE resource > ? AND resource < ? AND expires_at > 0"
               % ",".join("?" * len(names)))
        plan = " ".join(r[-1] for r in self.st.conn.execute("EXPLAIN QUERY PLAN " + sql,
                                                             names + ["a/b/c/", "a/b/c0"]))
        self.assertNotIn("SCAN leases", plan.replace("SCAN TABLE leases", "SCAN leases"), plan)

    def test_bye_releases_leases_and_keeps_conversation(self):
        a = self.st.register(conversation="conv-b")
        self.st.claim(a["id"], ["r"])
        self.st.bye(a["id"])
        self.assertEqual(self.st.all_leases(), [])
        again = self.st.register(conversation="conv-b")
        self.assertEqual(again["conversation"], "conv-b")

    def test_listing_shows_only_what_is_held(self):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        dead = self.st.register(pid=proc.pid)["id"]
        live = self.rt()
        t0 = time.time()
        self.st.claim(dead, ["gone"])
        self.st.claim(live, ["short"], ttl=5, now=t0)
        self.st.claim(live, ["kept"])
        self.assertEqual([l["resource"] for l in self.st.all_leases(now=t0 + 1)], ["gone", "kept", "short"])
        proc.kill()
        proc.wait()
        before = self.audit_count()
        self.assertEqual([l["resource"] for l in self.st.all_leases(now=t0 + 6)], ["kept"])
        self.assertEqual(self.audit_count(), before, "listing reads; it never reaps")

    def audit_count(self):
        return self.st.q("SELECT count(*) FROM audit").fetchone()[0]


class CleanTextTest(unittest.TestCase):
    """clean_text skips its pattern for text without any character a match starts with (so a
    hook's deny loads no re): the same text either way."""

    def test_the_skip_never_changes_the_result(self):
        import random
        pattern = re.compile(*store._ESCAPE_RE._args)
        rng = random.Random(5)
        alphabet = [chr(c) for c in range(0x250)] + list("\u061c\u200e\u200f\u202a\u202e\u2066\u2069\u2070") + [
            "\x1b[31m", "\x1b]0;title\x07", "\x1b]8;;x\x1b\\", "\udc80", "\u00e9"]
        for _ in range(20000):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10)))
            self.assertEqual(store.clean_text(text), pattern.sub("", store.text_in(text)), repr(text))


class ResourceNameTest(support.CoordTestCase):
    def test_normalisation(self):
        root = os.path.join(self.tmp, "repo")
        os.makedirs(os.path.join(root, "src"))
        for given, want in (("./src//a.py", "src/a.py"), ("src/a.py/", "src/a.py"), ("integration/master",
                            "integration/master"), (os.path.join(root, "src", "a.py"), "src/a.py"),
                            ("a/./b", "a/b")):
            self.assertEqual(store.normalize_resource(given, root), want, given)

    def test_refusals(self):
        root = os.path.join(self.tmp, "repo")
        os.makedirs(root)
        for bad in ("", "  ", "../x", "a/../../b", "a/..", "/etc/passwd", "a\x00b", "a\x1b[31mb",
                    "x" * 5000, root):
            with self.assertRaises(UsageError, msg=repr(bad)):
                store.normalize_resource(bad, root)

    def test_absolute_path_through_symlink_maps_inside(self):
        root = os.path.join(self.tmp, "repo")
        os.makedirs(os.path.join(root, "src"))
        link = os.path.join(self.tmp, "link")
        os.symlink(root, link)
        self.assertEqual(store.normalize_resource(os.path.join(link, "src", "a.py"), root), "src/a.py")

    def test_relative_names_through_symlinks_resolve_inside_the_repository(self):
        root = os.path.join(self.tmp, "repo")
        os.makedirs(os.path.join(root, "docs"))
        os.symlink("docs", os.path.join(root, "manual"))
        os.symlink("missing.md", os.path.join(root, "dangling.md"))
        os.symlink("loop-b", os.path.join(root, "loop-a"))
        os.symlink("loop-a", os.path.join(root, "loop-b"))
        outside = os.path.join(self.tmp, "outside")
        os.makedirs(outside)
        os.symlink(outside, os.path.join(root, "ext"))
        for given, want in (("manual/guide.md", "docs/guide.md"), ("manual", "docs"), ("./manual//a/b/", "docs/a/b"),
                            ("dangling.md", "missing.md"), ("integration/main", "integration/main")):
            self.assertEqual(store.normalize_resource(given, root), want, given)
        self.assertEqual(store.normalize_resource("manual/guide.md", root, resolve=False), "manual/guide.md")
        self.assertEqual(store.normalize_resource("manual/guide.md", None), "manual/guide.md")
        self.assertTrue(store.normalize_resource("loop-a/x", root).startswith("loop-"))
        for bad in ("ext/x", "ext", "manual/../../x"):
            with self.assertRaises(UsageError, msg=bad):
                store.normalize_resource(bad, root)


class NumberTest(support.CoordTestCase):
    def test_helpers_accept_only_finite_numbers_in_range(self):
        self.assertEqual(store.check_float(" 2.5 ", "x", 1, 3), 2.5)
        self.assertEqual(store.check_int("7", "x", 0, 9), 7)
        for bad in ("inf", "-inf", "nan", "1e309", float("nan"), 10 ** 400, "0x10", "", None, "4", "1_2", "\u0662",
                    "\uff12", "2\u00a0", True):
            with self.subTest(value=bad):
                with self.assertRaises(UsageError) as cm:
                    store.check_float(bad, "--x", 1, 3)
                self.assertIn("--x must be a number of seconds from 1 to 3", cm.exception.message)
        for bad in ("1e3", "1.0", "-1", str(1 << 63), "9" * 5000, 2.0, True, None, "#1", "1_0", "\u0667", "\uff17",
                    "\u00a07"):
            with self.subTest(value=str(bad)[:20]):
                with self.assertRaises(UsageError) as cm:
                    store.check_int(bad, "ID", 0, (1 << 63) - 1)
                self.assertIn("ID must be a whole number from 0 to 9223372036854775807", cm.exception.message)
                self.assertLess(len(cm.exception.message), 160, "the value shown is clipped")

    def test_environment_numbers_are_checked_or_defaulted(self):
        base = {"COORD_DB": self.db}
        for name, value in (("COORD_LEASE_TTL", "inf"), ("COORD_RUNTIME_TTL", "nan"), ("COORD_BUSY_TIMEOUT", "inf"),
                            ("COORD_LEASE_TTL", "0"), ("COORD_RUNTIME_TTL", "1"), ("COORD_BUSY_TIMEOUT", "-1"),
                            ("COORD_LEASE_TTL", "-inf"), ("COORD_BUSY_TIMEOUT", "nan"),
                            # in range, in forms int() and float() take: not numbers here
                            ("COORD_LEASE_TTL", "1_000"), ("COORD_RUNTIME_TTL", "\u0666\u0660\u0660"),
                            ("COORD_BUSY_TIMEOUT", "\uff15"), ("COORD_RUNTIME_TTL", "\u00a0600")):
            with self.subTest(var=name, value=value):
                with self.assertRaises(UsageError) as cm:
                    store.Store(environ=dict(base, **{name: value}))
                self.assertIn(name, cm.exception.message)
                self.assertIn(name, cm.exception.hint)
                st = store.Store(environ=dict(base, **{name: value}), strict_env=False)
                self.assertEqual((st.lease_ttl, st.runtime_ttl, st.timeout),
                                 (store.DEFAULT_LEASE_TTL, store.DEFAULT_RUNTIME_TTL, store.BUSY_TIMEOUT))
                st.close()
        st = store.Store(environ=dict(base, COORD_LEASE_TTL="90", COORD_RUNTIME_TTL="600", COORD_BUSY_TIMEOUT=""))
        self.assertEqual((st.lease_ttl, st.runtime_ttl, st.timeout), (90.0, 600.0, store.BUSY_TIMEOUT))
        st.close()


class MessageTest(StoreCase):
    def test_broadcast_snapshots_live_recipients_at_send_time(self):
        a, b, c = self.rt(), self.rt(), self.rt()
        self.st.bye(c)
        msg = self.st.send(a, "hi all", "*")
        late = self.rt()
        self.assertEqual(msg["recipients"], [self.st.runtime(b)["handle"]])
        self.assertEqual(self.st.open_messages(late), [])
        self.assertEqual(self.st.open_messages(a), [])

    def test_delivery_sequence_queued_delivered_acked(self):
        a, b = self.rt(), self.rt()
        mid = self.st.send(a, "body text", self.st.runtime(b)["handle"], kind="request")["id"]
        first = self.st.pending_context(b)
        self.assertIn("body text", first)
        second = self.st.pending_context(b)
        self.assertNotIn("body text", second)
        self.assertIn("#%d" % mid, second)
        self.assertIn("inbox --peek", second)
        self.assertIn(self.st.runtime(a)["handle"], second)
        self.assertEqual(self.st.inbox(b, peek=True)[0]["state"], "delivered")
        self.st.ack(b, [mid])
        self.assertIsNone(self.st.pending_context(b))
        self.st.ack(b, [mid])  # idempotent

    def test_a_reminder_stays_within_its_bytes_in_the_worst_case(self):
        a, b = self.rt(), self.rt()
        longest = "-".join(sorted(store.WORDS, key=len)[-5:])
        with self.st.transaction():
            self.st.conn.execute("UPDATE runtimes SET handle = ? WHERE id = ?", (longest, a))
        mid = self.st.send(a, "body", self.st.runtime(b)["handle"], kind="k" * 40)["id"]
        self.st.pending_context(b)
        line = self.st.pending_context(b)
        self.assertLessEqual(len(line.encode("utf-8")), store.REMINDER_BYTES, line)
        for part in ("#%d" % mid, longest, "kkkkkkkkkkk", "sha256:", ".coord/coord inbox --peek", "ack %d" % mid):
            self.assertIn(part, line)
        far = dict(self.st.open_messages(b)[0], id=999999, sender=longest, state="delivered", size=4)
        text, fresh, shown = store.render_context([far])
        self.assertEqual((fresh, shown), ([], [999999]))
        self.assertLessEqual(len(text.encode("utf-8")), store.REMINDER_BYTES, text)

    def test_a_boundary_marks_delivered_only_what_it_shows(self):
        a, b = self.rt(), self.rt()
        to = self.st.runtime(b)["handle"]
        ids = [self.st.send(a, "%d " % i + "z" * 1000, to)["id"] for i in range(12)]
        text = self.st.pending_context(b, budget=2500)
        self.assertLessEqual(len(text.encode()), 2500)
        rows = self.st.q("SELECT message, state, shown FROM deliveries WHERE recipient = ? ORDER BY message",
                         (b,)).fetchall()
        shown = [m for m, state, n in rows if state == "delivered"]
        self.assertEqual(shown, ids[:2])
        self.assertEqual([n for _, _, n in rows], [1, 1] + [0] * 10)
        self.assertIn("10 new messages", text)
        with self.assertRaises(UsageError):
            self.st.ack(b, [1 << 63])

    def test_ack_of_a_message_not_addressed_to_you_is_refused(self):
        a, b, c = self.rt(), self.rt(), self.rt()
        mid = self.st.send(a, "private", self.st.runtime(b)["handle"])["id"]
        with self.assertRaises(Refused):
            self.st.ack(c, [mid])

    def test_peek_changes_nothing(self):
        a, b = self.rt(), self.rt()
        self.st.send(a, "x", self.st.runtime(b)["handle"])
        before = list(self.st.audit_lines())
        self.assertEqual(self.st.inbox(b, peek=True)[0]["state"], "queued")
        self.assertEqual(list(self.st.audit_lines()), before)

    def test_bodies_are_bounded_and_escapes_never_reach_output(self):
        a, b = self.rt(), self.rt()
        with self.assertRaises(UsageError):
            self.st.send(a, "x" * (store.MAX_BODY + 1), "*")
        self.st.send(a, "red \x1b[31malert\x1b[0m \x1b]0;title\x07 bell\x07", self.st.runtime(b)["handle"])
        text = self.st.pending_context(b)
        self.assertNotIn("\x1b", text)
        self.assertNotIn("\x07", text)
        self.assertIn("alert", text)


class AuditTest(StoreCase):
    def test_export_is_byte_identical_and_redacts_tokens(self):
        a, b = self.rt(), self.rt()
        self.st.claim(a, ["x"], purpose="p")
        self.st.send(a, "m", "*")
        with self.st.transaction():
            self.st.audit("work.created", a, "w", owner_token="secret-value", nested={"token": "s2"})
        first = "\n".join(self.st.audit_lines())
        second_store = self.open_store()
        second = "\n".join(second_store.audit_lines())
        second_store.close()
        self.assertEqual(first, second)
        self.assertNotIn("secret-value", first)
        self.assertNotIn("s2", first)
        self.assertIn("secret-value", "\n".join(self.st.audit_lines(private=True)))
        for line in first.splitlines():
            self.assertEqual(line, json.dumps(json.loads(line), sort_keys=True, separators=(",", ":")))
        ids = [json.loads(l)["id"] for l in first.splitlines()]
        self.assertEqual(ids, sorted(ids))
        since = list(self.st.audit_lines(since=ids[-2]))
        self.assertEqual(len(since), 1)


class AuditStoryTest(StoreCase):
    """Store.audit_story and Store.runtimes_of: the rows of one subject and of given runtimes,
    bounded by the subject's first row and its end event; runtimes by conversation or cwd."""

    def test_story_rows_and_bounds(self):
        worker, other = self.rt(conversation="c-worker"), self.rt(conversation="c-other")
        self.st.claim(worker, ["before.txt"])  # before the work's first row: not its story
        with self.st.transaction():
            self.st.audit("work.created", other, "w1", owner_token="secret")
        self.st.claim(worker, ["a.txt"])
        self.st.claim(other, ["b.txt"])  # not one of the story's runtimes
        self.st.send(worker, "hi", "*")  # a message row: not a lease or runtime row
        with self.st.transaction():
            self.st.audit("work.removed", other, "w1")
        self.st.claim(worker, ["after.txt"])  # after the end event
        rows = self.st.audit_story("w1", [worker], end_event="work.removed")
        self.assertEqual([(r["event"], r["subject"]) for r in rows],
                         [("work.created", "w1"), ("lease.claimed", "a.txt"), ("work.removed", "w1")])
        self.assertEqual(rows[0]["data"]["owner_token"], "<redacted>")
        self.assertEqual(self.st.audit_story("w1", [worker], end_event="work.removed", private=True)[0]["data"]
                         ["owner_token"], "secret")
        export = {json.loads(l)["id"]: json.loads(l) for l in self.st.audit_lines()}
        self.assertEqual(rows, [export[r["id"]] for r in rows])
        self.assertEqual(len(self.st.audit_story("w1", [worker])), 4)  # unbounded: after.txt too
        self.assertEqual([r["subject"] for r in self.st.audit_story("w1", [worker], since=rows[1]["id"],
                                                                    end_event="work.removed")], ["w1"])
        self.assertEqual(self.st.audit_story("nothing", [worker]), [])

    def test_runtimes_by_conversation_or_directory(self):
        a = self.rt(conversation="c-a", cwd="/w/clone")
        b = self.rt(conversation="c-b", cwd="/w/clone/sub")
        c = self.rt(conversation="c-c", cwd="/w/clone-other")
        d = self.rt(conversation="c-d", cwd="/elsewhere")
        ids = lambda rows: sorted(r["id"] for r in rows)
        self.assertEqual(ids(self.st.runtimes_of(below="/w/clone")), sorted([a, b]))
        self.assertEqual(ids(self.st.runtimes_of(["c-d", None], below="/w/clone")), sorted([a, b, d]))
        self.assertEqual(ids(self.st.runtimes_of(["c-c"])), [c])
        self.assertEqual(self.st.runtimes_of(), [])


class PermissionTest(support.CoordTestCase):
    def test_private_modes_under_umask_000(self):
        path = os.path.join(self.tmp, "priv", "deep", "db.sqlite3")
        code = ("import os, store; os.umask(0); st = store.Store(%r); rt = st.register();"
                "st.claim(rt['id'], ['x']); st.conn.execute('PRAGMA wal_checkpoint'); print('ok')" % path)
        # Keep a reader open so the -wal and -shm files exist when we look.
        proc = subprocess.run([sys.executable, "-c", code + "; import time; "
                               "import os; os.system('ls -la %s > %s/ls.txt')" % (os.path.dirname(path), self.tmp)],
                              env=dict(self.env, PYTHONPATH=support.ROOT), stdout=subprocess.PIPE, text=True)
        self.assertEqual(proc.stdout.strip().splitlines()[0], "ok")
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode), 0o700)
        for suffix in ("", "-wal", "-shm"):
            p = path + suffix
            if os.path.exists(p):
                self.assertEqual(stat.S_IMODE(os.stat(p).st_mode), 0o600, p)
        listing = open(os.path.join(self.tmp, "ls.txt")).read()
        self.assertIn("db.sqlite3-wal", listing)
        for line in listing.splitlines():
            if "db.sqlite3" in line:
                self.assertTrue(line.startswith("-rw-------"), line)

    def test_missing_state_parents_are_created_private_under_umask_000(self):
        base = os.path.join(self.tmp, "fresh")
        env = dict(self.env, XDG_STATE_HOME=os.path.join(base, "a", "state"))
        del env["COORD_DB"]
        proc = subprocess.run(["sh", "-c", 'umask 000 && exec "$@"', "sh", sys.executable, support.COORD, "hello"],
                              env=env, cwd=self.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for d in (base, os.path.join(base, "a"), os.path.join(base, "a", "state"),
                  os.path.join(base, "a", "state", "fleet-agent-coord")):
            self.assertEqual(stat.S_IMODE(os.stat(d).st_mode), 0o700, d)
        db = os.path.join(self.tmp, "other", "deep", "db.sqlite3")
        proc = subprocess.run(["sh", "-c", 'umask 000 && exec "$@"', "sh", sys.executable, support.COORD, "hello"],
                              env=dict(self.env, COORD_DB=db), cwd=self.tmp, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for d in (os.path.join(self.tmp, "other"), os.path.dirname(db)):
            self.assertEqual(stat.S_IMODE(os.stat(d).st_mode), 0o700, d)

    def test_world_writable_directory_is_secured_or_refused(self):
        d = os.path.join(self.tmp, "open")
        os.makedirs(d)
        os.chmod(d, 0o777)
        st = store.Store(os.path.join(d, "db.sqlite3"))
        st.close()
        self.assertEqual(stat.S_IMODE(os.stat(d).st_mode), 0o700)
        if os.getuid() == 0:
            return  # root owns /tmp too; the foreign-owner refusal needs a non-root user
        with self.assertRaises(store.EnvError):
            store.Store("/tmp/coord-test-%d.sqlite3" % os.getpid())


class SharedFactsTest(support.CoordTestCase):
    """The facts coord, the hook and the installer share have one home here."""

    def test_error_log_is_private_appends_and_rotates(self):
        old = os.umask(0)
        self.addCleanup(os.umask, old)
        try:
            raise ValueError("boom")
        except ValueError:
            path = store.log_traceback("tool argv=['x']")
        self.assertEqual(path, os.path.join(self.state, "fleet-agent-coord", "errors.log"))
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode), 0o700)
        with open(path) as f:
            text = f.read()
        self.assertTrue(text.startswith("tool argv=['x']\nTraceback"), text)
        self.assertIn("ValueError: boom", text)
        with open(path, "a") as f:
            f.write("x" * (1 << 20))
        try:
            raise KeyError("second")
        except KeyError:
            store.log_traceback("again")
        self.assertTrue(os.path.exists(path + ".1"))
        with open(path) as f:
            self.assertTrue(f.read().startswith("again\n"))

    def test_database_path_prefers_the_environment_then_the_given_project(self):
        env = {"XDG_STATE_HOME": self.state}
        expected = os.path.join(self.state, "fleet-agent-coord", "given.sqlite3")
        self.assertEqual(store.resolve_db_path(env, project_id="given"), expected)
        env["COORD_PROJECT_ID"] = "fromenv"
        self.assertTrue(store.resolve_db_path(env, project_id="given").endswith("/fromenv.sqlite3"))
        env["COORD_PROJECT_ID"] = "bad id"
        with self.assertRaises(store.EnvError):
            store.resolve_db_path(env, project_id="given")
        self.assertFalse(store.valid_project_id(".hidden"))
        self.assertTrue(store.valid_project_id("a.b_c-1"))

    def test_within_and_atomic_write(self):
        self.assertTrue(store.within("/a/b", "/a"))
        self.assertTrue(store.within("/a", "/a/"))
        self.assertFalse(store.within("/ab", "/a"))
        path = os.path.join(self.tmp, "new", "file")
        store.atomic_write(path, b"one", 0o640)
        store.atomic_write(path, b"two", 0o600)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"two")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.assertEqual(os.listdir(os.path.dirname(path)), ["file"])


class MigrationTest(support.CoordTestCase):
    def test_fresh_database_is_wal_at_current_schema(self):
        st = store.Store(self.db)
        self.assertEqual(st.conn.execute("PRAGMA journal_mode").fetchone()[0], "wal")
        # user_version is the reader level: the newest migration an older coord cannot ignore
        level = max(v for v in store._MIGRATIONS if v not in store.ADDITIVE_MIGRATIONS)
        self.assertEqual(st.conn.execute("PRAGMA user_version").fetchone()[0], level)
        self.assertEqual(st._applied(level), store.SCHEMA_VERSION)
        st.close()

    def test_newer_schema_is_refused(self):
        os.makedirs(os.path.dirname(self.db), mode=0o700)
        conn = sqlite3.connect(self.db)
        conn.execute("PRAGMA user_version = %d" % (store.SCHEMA_VERSION + 1))
        conn.close()
        with self.assertRaises(store.EnvError) as cm:
            store.Store(self.db)
        self.assertIn("newer", cm.exception.message)

    def test_migration_takes_a_backup_first_and_keeps_data(self):
        st = store.Store(self.db)
        rt = st.register()
        st.claim(rt["id"], ["kept"])
        st.close()
        saved = (store.SCHEMA_VERSION, dict(store._MIGRATIONS))
        store.SCHEMA_VERSION = saved[0] + 1
        store._MIGRATIONS[saved[0] + 1] = ["CREATE TABLE extra (x TEXT)"]
        try:
            st = store.Store(self.db)
            self.assertEqual(st.conn.execute("PRAGMA user_version").fetchone()[0], saved[0] + 1)
            self.assertEqual([l["resource"] for l in st.all_leases()], ["kept"])
            st.close()
        finally:
            store.SCHEMA_VERSION = saved[0]
            store._MIGRATIONS.clear()
            store._MIGRATIONS.update(saved[1])
        backups = [f for f in os.listdir(os.path.dirname(self.db)) if f.endswith(".bak")]
        self.assertEqual(len(backups), 1, backups)
        path = os.path.join(os.path.dirname(self.db), backups[0])
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        conn = sqlite3.connect(path)
        self.assertEqual(conn.execute("PRAGMA user_version").fetchone()[0],
                         max(v for v in saved[1] if v not in store.ADDITIVE_MIGRATIONS))
        self.assertEqual(conn.execute("SELECT resource FROM leases").fetchall(), [("kept",)])
        conn.close()

    def test_corrupt_database_is_a_clear_environment_error(self):
        os.makedirs(os.path.dirname(self.db), mode=0o700)
        with open(self.db, "wb") as f:
            f.write(b"this is not a database" * 100)
        with self.assertRaises(store.EnvError) as cm:
            store.Store(self.db)
        self.assertIn("damaged", cm.exception.message)


class RaceTest(StoreCase):
    def race(self, worker, rounds, workers=8):
        """Run `workers` real processes of worker(db, rounds, barrier, results, index), each round
        released by one barrier; -> (every result put, the live leases afterwards)."""
        ctx = multiprocessing.get_context("spawn")
        self.open_store().close()
        barrier = ctx.Barrier(workers)
        results = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(self.db_spec(), rounds, barrier, results, i)) for i in range(workers)]
        for p in procs:
            p.start()
        got = [results.get(timeout=120) for _ in range(rounds * workers)]
        for p in procs:
            p.join(30)
            self.assertEqual(p.exitcode, 0)
        st = self.open_store()
        leases = st.all_leases()
        st.close()
        return got, leases

    def test_eight_processes_race_for_one_exclusive_lease_for_60_rounds(self):
        rounds = 60
        got, leases = self.race(_claim_worker, rounds)
        for r in range(rounds):
            winners = [g for g in got if g[0] == r and g[2]]
            self.assertEqual(len(winners), 1, "round %d winners %r" % (r, winners))
        self.assertEqual(len(leases), rounds)

    def test_eight_processes_claim_overlapping_pairs_all_or_nothing_for_40_rounds(self):
        rounds = 40
        got, leases = self.race(_multi_claim_worker, rounds)
        held = {}
        for l in leases:
            held.setdefault(l["runtime"], set()).add(l["resource"])
        for r in range(rounds):
            winners = [g for g in got if g[0] == r and g[3]]
            self.assertGreaterEqual(len(winners), 1, "round %d: someone wins" % r)
            for _r, rid, pair, _won in winners:  # all of the pair, never a part of it
                self.assertTrue(set(pair) <= held.get(rid, set()), (r, rid, pair))
            for _r, rid, pair, _won in [g for g in got if g[0] == r and not g[3]]:
                self.assertFalse(set(pair) & held.get(rid, set()), "a refused claim left a lease: %r" % (pair,))
            mine = [(rid, name) for rid, names in held.items() for name in names if name.split("/")[0] == "r%d" % r]
            for i, (a_rt, a) in enumerate(mine):  # no two runtimes hold overlapping names
                for b_rt, b in mine[i + 1:]:
                    if a_rt != b_rt:
                        self.assertFalse(a == b or b.startswith(a + "/") or a.startswith(b + "/"),
                                         "round %d: %s holds %s and %s holds %s" % (r, a_rt, a, b_rt, b))

    def _senders(self, senders, per_sender):
        ctx = multiprocessing.get_context("spawn")
        st = self.open_store()
        recipient = st.register(harness="sink")
        barrier = ctx.Barrier(senders)
        results = ctx.Queue()
        procs = [ctx.Process(target=_send_worker, args=(self.db_spec(), recipient["handle"], per_sender, barrier, results))
                 for _ in range(senders)]
        for p in procs:
            p.start()
        got = [results.get(timeout=180) for _ in range(senders)]
        for p in procs:
            p.join(30)
            self.assertEqual(p.exitcode, 0)
        all_ids = []
        for _sender, ids in got:
            self.assertEqual(ids, sorted(ids))
            self.assertEqual(len(set(ids)), len(ids))
            all_ids.extend(ids)
        self.assertEqual(len(set(all_ids)), senders * per_sender)
        inbox = st.inbox(recipient["id"], peek=True)
        self.assertEqual(sorted(m["id"] for m in inbox), sorted(all_ids))
        self.assertEqual([m["id"] for m in inbox], sorted(m["id"] for m in inbox))
        st.close()

    def test_six_simultaneous_senders_lose_nothing(self):
        self._senders(6, 20)

    def test_thirty_two_simultaneous_senders_lose_nothing(self):
        self._senders(32, 10)



class WriteDecisionTest(StoreCase):
    """Store.write_conflicts: what the PreToolUse hook asks before a harness writes."""

    def blocked(self, writer, names, now=None):
        return sorted((b["requested"], b["resource"], b["mode"], b["runtime"])
                      for b in self.st.write_conflicts(writer, names, now))

    def test_a_write_is_an_exclusive_request(self):
        me, peer, other = self.rt(), self.rt(), self.rt()
        self.st.claim(peer, ["log/changes.md"], "append")
        self.st.claim(other, ["src"])
        self.st.claim(me, ["mine.txt"])
        for writer in (me, None):
            with self.subTest(writer=writer):
                self.assertEqual(self.blocked(writer, ["log/changes.md"]),
                                 [("log/changes.md", "log/changes.md", "append", peer)])
                self.assertEqual(self.blocked(writer, ["src/a.py", "free.txt"]),
                                 [("src/a.py", "src", "exclusive", other)])
        self.assertEqual(self.blocked(me, ["mine.txt"]), [], "a writer's own lease never blocks it")
        self.assertEqual(self.blocked(None, ["mine.txt"]), [("mine.txt", "mine.txt", "exclusive", me)])

    def test_a_covering_lease_makes_the_writer_an_appender(self):
        me, peer, other, stranger = self.rt(), self.rt(), self.rt(), self.rt()
        self.st.claim(me, ["log/changes.md", "notes"], "append")
        self.st.claim(peer, ["log/changes.md", "notes/today.md", "notesbook.md"], "append")
        self.st.claim(other, ["log/locked.md"])
        self.assertEqual(self.blocked(me, ["log/changes.md", "notes/today.md"]), [],
                         "the name itself, or a directory above it, makes the writer an appender")
        self.assertEqual(self.blocked(me, ["log/changes.md", "log/locked.md"]),
                         [("log/locked.md", "log/locked.md", "exclusive", other)],
                         "an exclusive lease still blocks an appender")
        self.assertEqual(self.blocked(me, ["notesbook.md"]), [("notesbook.md", "notesbook.md", "append", peer)],
                         "notes covers notes/..., not notesbook.md")
        self.assertEqual(self.blocked(stranger, ["notes/today.md"]),
                         [("notes/today.md", "notes", "append", me),
                          ("notes/today.md", "notes/today.md", "append", peer)])

    def test_an_expired_own_lease_covers_nothing(self):
        me, peer = self.rt(), self.rt()
        self.st.claim(peer, ["log/changes.md"], "append")
        now = time.time()
        self.st.claim(me, ["log"], "append", ttl=1, now=now - 5)  # expired 4 s ago, not yet reaped
        self.assertEqual([l["resource"] for l in self.st.leases_of(me)], ["log"])
        self.assertEqual(self.blocked(me, ["log/changes.md"], now),
                         [("log/changes.md", "log/changes.md", "append", peer)])

    def test_reads_one_state_of_the_database(self):
        me, holder, taker = self.rt(), self.rt(), self.rt()
        self.st.claim(holder, ["a.txt"])
        other = self.open_store()
        self.addCleanup(other.close)
        reads = []

        def between_reads(sql):
            # Another process commits after the first lease read and before the second one.
            if "FROM leases l JOIN runtimes" in sql:
                reads.append(sql)
                if len(reads) == 2:
                    other.release(holder, ["a.txt"])
                    other.claim(taker, ["b.txt"])
        self.st.conn.set_trace_callback(between_reads)
        try:
            got = self.blocked(me, ["a.txt", "b.txt"])
        finally:
            self.st.conn.set_trace_callback(None)
        self.assertEqual(len(reads), 2)
        self.assertEqual(got, [("a.txt", "a.txt", "exclusive", holder)], "the state before the commit, whole")
        self.assertEqual(self.blocked(me, ["a.txt", "b.txt"]), [("b.txt", "b.txt", "exclusive", taker)])

    def test_a_write_transaction_never_starts_inside_a_snapshot(self):
        a = self.rt()
        with self.st.snapshot():
            with self.assertRaises(RuntimeError):
                with self.st.transaction():
                    pass
        with self.st.transaction():
            with self.st.snapshot():  # part of the write transaction
                self.st.claim(a, ["x"])
        self.assertEqual([l["resource"] for l in self.st.leases_of(a)], ["x"])
        self.assertFalse(self.st.conn.in_transaction)


class RuntimeQueryTest(StoreCase):
    """The reads the hooks ask the Store for, by name."""

    def test_superseded_attachment_of_this_process(self):
        sleeper = subprocess.Popen(["sleep", "60"])
        self.addCleanup(sleeper.wait)
        self.addCleanup(sleeper.kill)
        me, start = os.getpid(), store.process_start(os.getpid())
        old = self.st.register(conversation="conv", pid=me)["id"]
        self.assertIsNone(self.st.superseded_attachment("conv", me, start), "not superseded yet")
        new = self.st.register(conversation="conv", pid=sleeper.pid)["id"]
        self.assertEqual(self.st.superseded_attachment("conv", me, start), old)
        self.assertIsNone(self.st.superseded_attachment("conv", me, "another-start"), "a reused pid")
        self.assertIsNone(self.st.superseded_attachment("conv", sleeper.pid, None), new + " is not superseded")
        self.assertIsNone(self.st.superseded_attachment("other-conv", me, start))

    def test_unended_subagents_of_a_harness_process(self):
        parent = self.st.register(conversation="conv", pid=os.getpid())
        one = self.st.register(conversation="conv", agent_id="one", pid=os.getpid())["id"]
        two = self.st.register(conversation="conv", agent_id="two", pid=os.getpid())["id"]
        self.st.register(conversation="other", agent_id="three", pid=os.getpid())
        self.st.register(conversation="conv", agent_id="four", pid=os.getppid())
        self.st.bye(two)
        self.assertEqual(self.st.unended_subagents("conv", os.getpid()), [one])
        self.assertNotIn(parent["id"], self.st.unended_subagents("conv", os.getpid()))

    def test_peer_exclusive_leases(self):
        me, peer, other = self.rt(), self.rt(), self.rt()
        self.st.claim(me, ["mine.txt"])
        self.st.claim(peer, ["c.txt", "a.txt"], purpose="peer work")
        self.st.claim(other, ["b.txt"])
        self.st.claim(other, ["log.md"], "append")
        now = time.time()
        self.st.claim(other, ["old.txt"], ttl=1, now=now - 5)  # expired, not yet reaped
        held, total = self.st.peer_exclusive_leases(me, 2, now)
        handle = self.st.runtime(peer)["handle"]
        self.assertEqual(held, [{"resource": "a.txt", "handle": handle, "purpose": "peer work"},
                                {"resource": "b.txt", "handle": self.st.runtime(other)["handle"], "purpose": ""}])
        self.assertEqual(total, 3)
        self.assertEqual(self.st.peer_exclusive_leases(self.rt(), 8, now)[1], 4)
        self.assertEqual(self.st.peer_exclusive_leases(me, 8, now + 2 * store.DEFAULT_LEASE_TTL), ([], 0))


class ThreadTest(StoreCase):
    def test_a_store_belongs_to_the_thread_that_opened_it(self):
        import threading
        caught = []

        def use():
            try:
                self.st.live_runtimes()
            except (store.CoordError, sqlite3.ProgrammingError) as exc:
                caught.append(exc)
        t = threading.Thread(target=use)
        t.start()
        t.join(60)
        self.assertEqual(len(caught), 1)
        self.assertIn("thread", str(caught[0]))


class LivenessTest(StoreCase):
    """Issue 15: a live harness process beats COORD_RUNTIME_TTL and COORD_LEASE_TTL."""

    def store_env(self):
        return dict(self.env, COORD_RUNTIME_TTL="60", COORD_LEASE_TTL="60")

    def process(self):
        p = subprocess.Popen(["sleep", "600"])
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)
        return p

    def test_idle_past_both_ttls_with_a_live_process_keeps_runtime_and_lease(self):
        harness = self.process()
        t0 = time.time()
        a = self.st.register(conversation="conv-a", pid=harness.pid, now=t0)["id"]
        self.st.claim(a, ["src/keep.py"], now=t0)
        later = t0 + 300  # past the runtime TTL and the lease TTL
        self.st.reap(now=later)
        self.assertIsNone(self.st.runtime(a)["ended_at"])
        self.assertTrue(self.st.runtime_live(self.st.runtime(a), later))
        self.assertEqual([l["resource"] for l in self.st.leases_of(a)], ["src/keep.py"])
        self.assertEqual(self.st.conflicts(["src/keep.py"], now=later), [])  # lapsed: blocks nobody yet
        self.st.heartbeat(a, now=later)  # the next boundary renews it
        lease = self.st.leases_of(a)[0]
        self.assertGreater(lease["expires_at"], later)
        self.assertEqual([b["handle"] for b in self.st.conflicts(["src/keep.py"], now=later + 1)],
                         [self.st.runtime(a)["handle"]])
        self.assertEqual(self.st.take_lost(a), [])
        harness.kill()
        harness.wait()
        self.st.reap(now=later + 1)
        self.assertEqual(self.st.runtime(a)["end_reason"], "process-gone")
        self.assertEqual(self.st.leases_of(a), [])

    def test_a_runtime_no_clock_ends_stores_its_beat_ahead_and_reads_it_back(self):
        """The previous release ends a runtime by heartbeat_at alone (test_upgrade runs it): a
        runtime with a process, or a person or parked work, stores it BEAT_AHEAD after the real
        beat; every reader here gets the real beat, and the hooks' throttle still skips."""
        def stored(rid):
            return self.st.q("SELECT heartbeat_at FROM runtimes WHERE id = ?", (rid,)).fetchone()[0]
        ahead, every = store.BEAT_AHEAD, store.HEARTBEAT_EVERY
        t0 = time.time()
        agent = self.st.register(pid=self.process().pid, now=t0)["id"]
        alone = self.st.register(conversation="person:%d" % os.getuid(), harness=store.PERSON, now=t0)["id"]
        clocked = self.st.register(now=t0)["id"]
        self.assertEqual([stored(r) for r in (agent, alone, clocked)], [t0 + ahead, t0 + ahead, t0])
        for r in (agent, alone, clocked):
            self.assertAlmostEqual(self.st.runtime(r)["heartbeat_at"], t0, places=3)  # 1e12 keeps 0.1 ms
        self.assertFalse(self.st.heartbeat(agent, now=t0 + 1, min_interval=every))  # no write
        self.assertTrue(self.st.heartbeat(agent, now=t0 + every + 1, min_interval=every))
        self.assertAlmostEqual(self.st.runtime(agent)["heartbeat_at"], t0 + every + 1, places=3)
        # A row an earlier release stored with the real time is stored ahead from its next beat on.
        self.st.conn.execute("UPDATE runtimes SET heartbeat_at = ? WHERE id = ?", (t0, agent))
        self.st.claim(agent, ["r"], now=t0 + 100)
        self.assertAlmostEqual(stored(agent), t0 + 100 + ahead, places=3)
        # A subagent registered again without a process is the clock's again, from its real beat.
        sub = self.st.register(conversation="conv-s", agent_id="sub-1", pid=self.process().pid, now=t0)["id"]
        self.st.register(conversation="conv-s", agent_id="sub-1", now=t0 + 100)
        self.assertAlmostEqual(stored(sub), t0 + 100, places=3)
        self.assertTrue(self.st.runtime_live(self.st.runtime(sub), t0 + 159))
        self.assertFalse(self.st.runtime_live(self.st.runtime(sub), t0 + 161))

    def test_a_runtime_without_a_process_still_expires(self):
        t0 = time.time()
        a = self.st.register(now=t0)["id"]
        self.st.claim(a, ["r"], now=t0)
        self.st.reap(now=t0 + 61)
        self.assertEqual(self.st.runtime(a)["end_reason"], "expired")
        self.assertEqual(self.st.leases_of(a), [])

    def test_a_lapsed_lease_taken_by_a_peer_is_lost_and_told_once(self):
        t0 = time.time()
        a = self.st.register(pid=self.process().pid, now=t0)["id"]
        b = self.st.register(pid=self.process().pid, now=t0)
        self.st.claim(a, ["src/keep.py", "src/other.py"], now=t0)
        self.st.claim(b["id"], ["src"], now=t0 + 100)  # a's leases lapsed: the peer may take them
        self.st.heartbeat(a, now=t0 + 110)
        self.assertEqual(self.st.leases_of(a), [])
        lost = self.st.take_lost(a)
        self.assertEqual(sorted((l["resource"], l["to"]) for l in lost),
                         [("src/keep.py", b["handle"]), ("src/other.py", b["handle"])])
        self.assertEqual(self.st.take_lost(a), [])
        line = store.lost_line(lost)
        self.assertEqual(len(line.splitlines()), 1)
        self.assertIn("src/keep.py to %s" % b["handle"], line)
        self.assertIn("send", line)
        events = [r[0] for r in self.st.q("SELECT event FROM audit WHERE runtime = ? AND event = 'lease.lost'", (a,))]
        self.assertEqual(len(events), 2)

    def test_a_lapsed_append_lease_survives_a_fellow_appender(self):
        t0 = time.time()
        a = self.st.register(pid=self.process().pid, now=t0)["id"]
        b = self.st.register(pid=self.process().pid, now=t0)["id"]
        self.st.claim(a, ["log.md"], "append", now=t0)
        self.st.claim(b, ["log.md"], "append", now=t0 + 100)
        self.st.heartbeat(a, now=t0 + 110)
        self.assertGreater(self.st.leases_of(a)[0]["expires_at"], t0 + 110)
        self.assertEqual(self.st.take_lost(a), [])

    def test_renew_that_renews_nothing_is_refused(self):
        t0 = time.time()
        a = self.st.register(pid=self.process().pid, now=t0)["id"]
        b = self.st.register(pid=self.process().pid, now=t0)
        with self.assertRaises(store.Refused) as cm:
            self.st.renew(a, now=t0)
        self.assertIn("nothing renewed", cm.exception.message)
        self.st.claim(a, ["src/keep.py"], now=t0)
        self.st.claim(b["id"], ["src/keep.py"], now=t0 + 100)
        with self.assertRaises(store.Refused) as cm:
            self.st.renew(a, now=t0 + 110)
        self.assertIn("nothing renewed", cm.exception.message)
        self.assertIn("src/keep.py (lost to %s)" % b["handle"], cm.exception.message)
        self.assertEqual(self.st.take_lost(a), [])  # told by the refusal, once
        self.st.claim(a, ["src/mine.py"], now=t0 + 120)
        self.assertEqual([l["resource"] for l in self.st.renew(a, now=t0 + 300)], ["src/mine.py"])  # lapsed, renewed

    def test_runtime_variable_naming_an_expired_runtime_acts_as_its_conversations_successor(self):
        t0 = time.time() - 1000
        old = self.st.register(conversation="conv-idle", now=t0)["id"]  # no process: the TTL ends it
        self.st.reap()
        self.assertEqual(self.st.runtime(old)["end_reason"], "expired")
        new = self.st.register(conversation="conv-idle", pid=self.process().pid)
        self.assertEqual(self.st.caller(environ={"COORD_RUNTIME_ID": old})["id"], new["id"])

    def test_runtime_variable_of_this_process_is_refused_with_the_successors_export_line(self):
        # The ended runtime's process is this test process and the caller is its child, so the
        # caller has that ancestor however the runner was started (under setsid, or orphaned, the
        # runner's own parent is pid 1, which no ancestry lists).
        old = self.st.register(conversation="conv-moved", pid=os.getpid())["id"]
        self.st.bye(old)
        new = self.st.register(conversation="conv-moved", pid=self.process().pid)
        child = (
            "import json, sys\n"
            "sys.path.insert(0, sys.argv[1])\n"
            "import pg, store\n"
            "db = json.loads(sys.argv[2])\n"
            "st = (pg.Store if isinstance(db, dict) else store.Store)(db, environ=json.loads(sys.argv[3]))\n"
            "try:\n"
            "    st.caller(environ={'COORD_RUNTIME_ID': sys.argv[4]})\n"
            "except store.Refused as exc:\n"
            "    print(json.dumps({'refused': exc.message, 'hint': exc.hint}))\n"
            "else:\n"
            "    print(json.dumps({}))\n"
        )
        env = dict(self.child_env(), COORD_RUNTIME_TTL="60", COORD_LEASE_TTL="60")
        proc = subprocess.run([sys.executable, "-c", child, support.ROOT, json.dumps(self.db_spec()), json.dumps(env), old],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        reply = json.loads(proc.stdout)
        self.assertIn("refused", reply, "a caller below the ended runtime's process was not refused")
        self.assertIn("export COORD_RUNTIME_ID=%s" % new["id"], reply["hint"])


class ModuleLadderTest(support.CoordTestCase):
    """The product modules import one another as a ladder (no circle, nothing upward), none
    uses another's private names, and the commands on every tool call load none of the work
    modules."""

    RANK = {"harness_facts": -1, "store": 0, "session": 1, "trust": 1, "hostclient": 1, "pg": 2, "workspace": 2,
            "launch": 2.5, "review": 2.75, "land": 3, "view": 3, "cleanup": 4, "hook": 5, "coord": 5, "install": 5, "host": 5}
    FILES = {"harness_facts": "harness_facts.py", "store": "store.py", "session": "session.py", "trust": "trust.py",
             "workspace": "workspace.py", "launch": "launch.py", "land": "land.py", "review": "review.py", "view": "view.py",
             "cleanup": "cleanup.py", "hook": "hook.py", "coord": "coord", "install": "install", "host": "host.py", "hostclient": "hostclient.py",
             "pg": "pg.py"}
    # The PostgreSQL engine is the host process's alone; its client, only where a PostgreSQL
    # project is reached (the hook and the commands import it lazily, for such a project only).
    IMPORTED_ONLY_BY = {"pg": {"host"}, "hostclient": {"host", "pg", "hook", "coord", "install"}}

    def test_every_product_module_is_on_the_ladder(self):
        modules = {n[:-3] for n in os.listdir(support.ROOT) if n.endswith(".py")} | {"coord", "install"}
        self.assertEqual(modules, set(self.FILES))

    def trees(self):
        import ast
        for name, path in self.FILES.items():
            with open(os.path.join(support.ROOT, path), encoding="utf-8") as f:
                yield name, ast.parse(f.read(), path)

    def test_imports_only_go_down(self):
        import ast
        wrong = []
        for name, tree in self.trees():
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    targets = [node.module]
                else:
                    continue
                for target in targets:
                    if target in self.RANK and target != name and self.RANK[target] >= self.RANK[name]:
                        wrong.append("%s line %d imports %s" % (name, node.lineno, target))
        self.assertEqual(wrong, [])

    def test_the_postgresql_modules_are_imported_only_by_their_users(self):
        import ast
        wrong = []
        for name, tree in self.trees():
            for node in ast.walk(tree):
                targets = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
                for target in targets:
                    if name not in self.IMPORTED_ONLY_BY.get(target, {name}):
                        wrong.append("%s line %d imports %s" % (name, node.lineno, target))
        self.assertEqual(wrong, [])

    def test_no_module_uses_another_s_private_names(self):
        import ast
        wrong = []
        for name, tree in self.trees():
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                        and node.value.id in self.RANK and node.value.id != name \
                        and node.attr.startswith("_") and not node.attr.startswith("__"):
                    wrong.append("%s line %d: %s.%s" % (name, node.lineno, node.value.id, node.attr))
        self.assertEqual(wrong, [])

    def test_claim_and_check_load_no_work_module(self):
        for argv in (["claim", "a.txt"], ["check", "a.txt"]):
            proc = subprocess.run([sys.executable, "-X", "importtime", support.COORD] + argv, env=self.env,
                                  cwd=self.tmp, capture_output=True, text=True, timeout=60)
            loaded = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
            self.assertIn("store", loaded, proc.stderr[-2000:])
            # nor, on a SQLite project, the PostgreSQL engine or the host process's client
            self.assertEqual(loaded & {"workspace", "launch", "land", "cleanup", "session", "trust", "pg", "hostclient"}, set(),
                             argv)


class SqlOnlyInStoreTest(support.CoordTestCase):
    """store.py is the one file that speaks SQL, so another storage backend means one file; the
    PostgreSQL engine (pg.py, the host process's alone) holds its own PostgreSQL-only SQL beside it."""

    SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|REPLACE|BEGIN|PRAGMA|CREATE|DROP|ALTER|FROM|WHERE)\s")

    def test_no_other_module_queries_the_database(self):
        import ast
        names = sorted({n for n in os.listdir(support.ROOT) if n.endswith(".py")} | {"coord", "install"})
        self.assertIn("hostclient.py", names)
        for name in names:
            if name in ("store.py", "pg.py"):
                continue
            with open(os.path.join(support.ROOT, name), encoding="utf-8") as f:
                tree = ast.parse(f.read(), name)
            found = []
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr in ("q", "conn"):
                    found.append("line %d: .%s" % (node.lineno, node.attr))
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        node.func.attr in ("execute", "executemany", "executescript"):
                    found.append("line %d: .%s()" % (node.lineno, node.func.attr))
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and self.SQL.match(node.value):
                    found.append("line %d: %r" % (node.lineno, node.value[:40]))
            self.assertEqual(found, [], "%s queries the database itself; ask the Store instead" % name)


class SchemaReaderTest(support.CoordTestCase):
    """A database whose reader level is newer than this coord is refused, and the refusal in a
    managed clone never says to install there (test_upgrade runs additive migrations for real)."""

    def set_schema(self, level, applied=None):
        store.Store(self.db).close()
        conn = sqlite3.connect(self.db)
        try:
            conn.execute("PRAGMA user_version = %d" % level)
            if applied is not None:
                conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                             (store.SCHEMA_APPLIED_KEY, str(applied)))
            conn.commit()
        finally:
            conn.close()

    def test_a_newer_reader_level_is_refused_with_a_hint_for_where_it_runs(self):
        self.set_schema(store.SCHEMA_VERSION + 1)
        proc = self.coord("list")
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertIn("newer than this coord", proc.stderr)
        self.assertIn("install", proc.stderr)
        clone = os.path.join(self.tmp, "clone")
        os.makedirs(os.path.join(clone, ".jj"))
        with open(os.path.join(clone, ".jj", "coord-owner"), "w") as f:
            f.write('{"work": "w", "token": "t"}\n')
        os.makedirs(os.path.join(clone, "src"))
        proc = self.coord("list", cwd=os.path.join(clone, "src"))
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertIn("managed clone", proc.stderr)
        self.assertIn("jj git fetch && jj rebase -b @ -d", proc.stderr)
        self.assertNotIn("./install", proc.stderr)
        self.assertNotIn("/install REPO", proc.stderr)

    def test_a_clone_without_a_project_id_is_told_to_catch_up_not_to_install(self):
        clone = os.path.join(self.tmp, "clone")
        os.makedirs(os.path.join(clone, ".jj"))
        with open(os.path.join(clone, ".jj", "coord-owner"), "w") as f:
            f.write('{"work": "w", "token": "t"}\n')
        bare = {"COORD_PROJECT_ID": "", "COORD_DB": ""}
        proc = self.coord("list", cwd=clone, env=bare)
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertIn("jj git fetch && jj rebase -b @ -d", proc.stderr)
        self.assertNotIn("./install", proc.stderr)
        elsewhere = os.path.join(self.tmp, "plain")
        os.makedirs(os.path.join(elsewhere, ".jj"))
        self.assertIn("./install REPO", self.coord("list", cwd=elsewhere, env=bare).stderr)


if __name__ == "__main__":
    import unittest
    unittest.main()


class PersonStoreTest(StoreCase):
    """The person's key and runtime, and runtimes the clock never ends (person alone, parked)."""

    def test_key_outside_any_terminal_is_the_user_and_inside_one_the_session(self):
        code = "import store, json; print(json.dumps(store.person_key()))"
        out = subprocess.run([sys.executable, "-c", code], env=dict(self.env, PYTHONPATH=support.ROOT),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, start_new_session=True,
                             timeout=60).stdout
        self.assertEqual(json.loads(out), ["person:%d" % os.getuid(), None, None, None])
        import pty
        pid, fd = pty.fork()
        if pid == 0:
            os.execve(sys.executable, [sys.executable, "-c", code], dict(self.env, PYTHONPATH=support.ROOT))
        buf = b""
        while True:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
        os.waitpid(pid, 0)
        os.close(fd)
        key, leader, start, name = json.loads(buf.decode())
        self.assertEqual(leader, pid, "the session leader is the process on the new terminal")
        self.assertEqual(key, "person:%d:%s:%d:%s" % (os.getuid(), name, pid, start))

    def test_a_terminal_is_a_persons_only_for_what_runs_in_its_foreground_on_it(self):
        # Real ptys: the session leader itself is the person; a process of the same session with
        # no standard stream on the terminal (nohup's redirections) or outside its foreground
        # process group (a background job) is only the user alone.
        code = ("import os, sys, json, store\n"
                "mode = sys.argv[1]\n"
                "def probe():\n"
                "    return json.dumps(store.person_key())\n"
                "if mode == 'leader':\n"
                "    print(probe())\n"
                "else:\n"
                "    r, w = os.pipe()\n"
                "    pid = os.fork()\n"
                "    if pid == 0:\n"
                "        os.close(r)\n"
                "        if mode == 'background':\n"
                "            os.setpgid(0, 0)\n"
                "        else:\n"
                "            null = os.open(os.devnull, os.O_RDWR)\n"
                "            for fd in (0, 1, 2):\n"
                "                os.dup2(null, fd)\n"
                "        os.write(w, probe().encode())\n"
                "        os._exit(0)\n"
                "    os.close(w)\n"
                "    os.waitpid(pid, 0)\n"
                "    print(os.read(r, 65536).decode())\n")
        import pty
        seen = {}
        for mode in ("leader", "nohup", "background"):
            pid, fd = pty.fork()
            if pid == 0:
                os.execve(sys.executable, [sys.executable, "-c", code, mode], dict(self.env, PYTHONPATH=support.ROOT))
            buf = b""
            while True:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                buf += chunk
            os.waitpid(pid, 0)
            os.close(fd)
            seen[mode] = json.loads(buf.decode().strip().splitlines()[-1])
        key, _leader, _start, name = seen["leader"]
        self.assertTrue(name and key.startswith("person:%d:%s:" % (os.getuid(), name)), seen)
        alone = ["person:%d" % os.getuid(), None, None, None]
        self.assertEqual(seen["nohup"], alone, "no standard stream is its terminal")
        self.assertEqual(seen["background"], alone, "not in its terminal's foreground process group")

    def test_the_user_alone_is_never_ended_by_the_clock(self):
        person = self.st.register(conversation="person:%d" % os.getuid(), harness=store.PERSON)
        agent = self.st.register(conversation="an-agent")
        later = time.time() + 30 * 86400
        self.st.reap(now=later)
        self.assertIsNone(self.st.runtime(person["id"])["ended_at"])
        self.assertEqual(self.st.runtime(agent["id"])["end_reason"], "expired")
        self.assertEqual(store.person_uid(self.st.runtime(person["id"])), os.getuid())
        self.assertIsNone(store.person_uid(agent))
        self.assertIsNone(store.person_uid(dict(agent, harness=store.PERSON)), "the label alone is no person")

    def test_a_parked_holder_keeps_leases_and_messages_until_the_conversation_returns(self):
        agent = self.st.register(conversation="conv-w", harness="claude")
        peer = self.st.register(conversation="peer")
        self.st.claim(agent["id"], ["src/keep.py"])
        self.st.send(peer["id"], "before park", agent["handle"])
        holder = self.st.hold_parked("conv-w", "work-1")
        self.assertEqual([l["resource"] for l in self.st.leases_of(holder["id"])], ["src/keep.py"])
        self.assertEqual(self.st.runtime(agent["id"])["superseded_by"], holder["id"])
        self.st.reap(now=time.time() + 2 * 86400)  # past the lease's own hour: held for the work
        self.assertTrue(self.st.conflicts(["src/keep.py"], as_runtime=peer["id"], now=time.time() + 2 * 86400))
        self.st.reap(now=time.time() + 30 * 86400)  # no clock ends it, and the lease row stays for the resume
        self.assertIsNone(self.st.runtime(holder["id"])["ended_at"])
        self.assertEqual([l["resource"] for l in self.st.leases_of(holder["id"])], ["src/keep.py"])
        resumed = self.st.register(conversation="conv-w", harness="claude")
        self.assertEqual([l["resource"] for l in self.st.leases_of(resumed["id"])], ["src/keep.py"])
        self.assertEqual([m["body"] for m in self.st.inbox(resumed["id"], peek=True)], ["before park"])
        self.assertEqual(self.st.runtime(holder["id"])["end_reason"], "superseded")

    def test_a_crashed_agents_leases_stay_with_its_work_until_the_conversation_returns(self):
        # a real process, killed with SIGKILL as a crash or a reboot would end it
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        self.addCleanup(proc.wait)
        start = store.process_start(proc.pid)
        agent = self.st.register(conversation="conv-crash", harness="claude", pid=proc.pid, pid_start=start)
        plain = self.st.register(conversation="conv-plain", harness="claude", pid=proc.pid, pid_start=start)
        peer = self.st.register(conversation="peer")
        with self.st.transaction():
            w = self.st.insert_work("crash-task", "active", "token", data={"tmux": {"conversation": "conv-crash"}})
        self.st.claim(agent["id"], ["src/unlanded.py"])
        self.st.claim(plain["id"], ["src/plain.py"])
        proc.kill()
        proc.wait()
        # before any reap, readers already count it held for the work (check, the write hook, list)
        self.assertEqual([l["resource"] for l in self.st.conflicts(["src/unlanded.py"], as_runtime=peer["id"])],
                         ["src/unlanded.py"])
        self.assertEqual([l["resource"] for l in self.st.all_leases()], ["src/unlanded.py"])
        self.st.reap()
        ended = self.st.runtime(agent["id"])
        self.assertIsNotNone(ended["ended_at"])
        holder = self.st.runtime(ended["superseded_by"])
        self.assertEqual((holder["harness"], holder["ended_at"]), (store.PARKED, None))
        self.assertEqual([l["resource"] for l in self.st.leases_of(holder["id"])], ["src/unlanded.py"])
        with self.assertRaises(store.Refused):
            self.st.claim(peer["id"], ["src/unlanded.py"])
        # a runtime in no work still loses its leases with its process
        self.assertEqual(self.st.runtime(plain["id"])["end_reason"], "process-gone")
        self.st.claim(peer["id"], ["src/plain.py"])
        self.st.reap(now=time.time() + 30 * 86400)  # no clock ends the holder
        self.assertIsNone(self.st.runtime(holder["id"])["ended_at"])
        resumed = self.st.register(conversation="conv-crash", harness="claude")
        self.assertEqual([l["resource"] for l in self.st.leases_of(resumed["id"])], ["src/unlanded.py"])
        self.assertEqual(self.st.end_parked("conv-crash"), [], "the resumed agent holds them now")
        self.assertEqual(w["state"], "active")

    def test_a_session_end_coord_did_not_ask_for_keeps_the_works_leases(self):
        # Claude Code, Copilot CLI and Qwen Code run SessionEnd when tmux hangs their window up:
        # for the work that is a crash (its unlanded change stays protected), not a goodbye.
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        self.addCleanup(proc.wait)
        self.addCleanup(proc.kill)
        start = store.process_start(proc.pid)
        agent = self.st.register(conversation="conv-hup", harness="claude", pid=proc.pid, pid_start=start)
        plain = self.st.register(conversation="conv-plain", harness="claude", pid=proc.pid, pid_start=start)
        peer = self.st.register(conversation="peer")
        with self.st.transaction():
            w = self.st.insert_work("hup-task", "active", "token", data={"tmux": {"conversation": "conv-hup"}})
        self.st.claim(agent["id"], ["src/unlanded.py"])
        self.st.claim(plain["id"], ["src/plain.py"])
        kept = self.st.session_end(agent["id"])
        self.assertEqual(kept["work"], w["handle"])
        holder = self.st.runtime(kept["held_by"])
        self.assertEqual((holder["harness"], holder["ended_at"]), (store.PARKED, None))
        self.assertEqual([l["resource"] for l in self.st.conflicts(["src/unlanded.py"], as_runtime=peer["id"])],
                         ["src/unlanded.py"], "check still says held")
        self.assertEqual(self.st.session_end(plain["id"]), {"released": ["src/plain.py"]}, "in no work: released")
        resumed = self.st.register(conversation="conv-hup", harness="claude")
        self.assertEqual([l["resource"] for l in self.st.leases_of(resumed["id"])], ["src/unlanded.py"])
        self.assertTrue(self.st.held_again(resumed["id"]))
        self.assertFalse(self.st.held_again(peer["id"]))
        # coord closing the work: the SessionEnd it caused releases them
        with self.st.transaction():
            self.st.update_work(w["id"], data={"closing": {"at": 1, "by": None}})
        self.assertEqual(self.st.session_end(resumed["id"]), {"released": ["src/unlanded.py"]})
        self.assertEqual(self.st.all_leases(), [])

    def test_a_failed_park_puts_everything_back_and_close_releases(self):
        agent = self.st.register(conversation="conv-x", harness="claude")
        self.st.claim(agent["id"], ["a.txt"])
        holder = self.st.hold_parked("conv-x", "work-2")
        self.st.unhold_parked(holder["id"])
        self.assertIsNone(self.st.runtime(agent["id"])["ended_at"])
        self.assertEqual([l["resource"] for l in self.st.leases_of(agent["id"])], ["a.txt"])
        holder = self.st.hold_parked("conv-x", "work-2")
        self.assertEqual(self.st.end_parked("conv-x"), ["a.txt"])
        self.assertEqual(self.st.all_leases(), [])
        self.assertIsNone(self.st.hold_parked("conv-none", "work-3"))


class DatabaseUrlTest(support.CoordTestCase):
    """A database named by a URL is refused, never made a file: `COORD_DB=postgresql://...` used
    to create a SQLite database in a directory `postgresql:` below wherever coord ran (inside the
    repository, where agents write)."""

    URLS = ("postgresql://coord:s3cret@db.example.invalid/coord", "postgres://coord@host/db",
            "sqlite:///tmp/x.sqlite3", " postgresql://coord@host/db")

    def test_resolve_and_open_refuse_a_url(self):
        for url in self.URLS:
            with self.subTest(url=url):
                with self.assertRaises(store.EnvError) as caught:
                    store.resolve_db_path({"COORD_DB": url})
                self.assertIn("not a file", caught.exception.message)
                if url.startswith("sqlite"):
                    self.assertIn("sqlite:// is not supported", caught.exception.message)
                self.assertNotIn("s3cret", caught.exception.message + caught.exception.hint)
                with self.assertRaises(store.EnvError):
                    store.Store(url)
        self.assertEqual(os.listdir(self.tmp), ["home"], "nothing was created")
        # A path that merely contains "://" further on, or a colon, is still a file path.
        odd = os.path.join(self.tmp, "a:b", "x://y.sqlite3")
        self.assertEqual(store.resolve_db_path({"COORD_DB": odd}), os.path.abspath(odd))

    def test_a_postgresql_url_is_a_postgresql_project_and_any_other_scheme_is_refused(self):
        env = {"COORD_PROJECT_ID": "p1", "XDG_STATE_HOME": self.state}
        for url in self.URLS:
            with self.subTest(url=url):
                if url.strip().startswith("sqlite"):
                    with self.assertRaises(store.EnvError):
                        store.project_database(dict(env, COORD_DB=url))
                    continue
                db = store.project_database(dict(env, COORD_DB=url))
                self.assertEqual((db["engine"], db["project"], db["source"]), ("postgresql", "p1", "COORD_DB"))
        self.assertEqual(store.project_database(env)["engine"], "sqlite")
        store.write_project_url("p1", self.URLS[1], env)
        path = store.project_url_path("p1", env)
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        self.assertEqual(store.project_database(env), {"engine": "postgresql", "url": self.URLS[1], "project": "p1",
                                                       "source": path})
        self.assertEqual(store.project_database(dict(env, COORD_PROJECT_ID="p2"))["engine"], "sqlite")
        self.assertEqual(sorted(os.listdir(self.tmp)), ["home", "state"], "nothing was created but the settings")

    def test_the_cli_exits_4_and_creates_nothing(self):
        proc = self.coord("hello", env={"COORD_DB": "sqlite:///tmp/x.sqlite3"})
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertIn("sqlite:// is not supported", proc.stderr)
        # A server on another host, reached without certificate verification: refused before any
        # connection (pg_check_url, issue 25 item 5), so the host process does not start.
        url = self.URLS[0]
        proc = self.coord("hello", env={"COORD_DB": url, "PYTHONPATH": support.psycopg_dir()})
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertIn("coord's host process for project test-project is not running and did not start: the"
                      " PostgreSQL server is on another host and the connection does not verify its certificate",
                      proc.stderr)
        self.assertNotIn("s3cret", proc.stderr + proc.stdout)
        # A server that does not exist (a socket directory with no server): the host process cannot start.
        url = "postgresql://coord:s3cret@/coord?host=%s" % os.path.join(self.tmp, "no-server")
        proc = self.coord("hello", env={"COORD_DB": url, "PYTHONPATH": support.psycopg_dir()})
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertIn("coord's host process for project test-project is not running and did not start: cannot"
                      " connect to the PostgreSQL server", proc.stderr)
        self.assertIn("next: start it: %s db start" % support.COORD, proc.stderr)
        self.assertNotIn("s3cret", proc.stderr + proc.stdout)
        proc = self.coord("hello", env={"COORD_DB": url, "PYTHONPATH": os.path.join(self.tmp, "nothing")})
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertIn("the PostgreSQL driver psycopg 3 is not installed for %s" % sys.executable, proc.stderr)
        self.assertIn("next: install the driver: %s -m pip install --upgrade --target %s 'psycopg[binary]==3."
                      % (sys.executable, hostclient.driver_dir(environ=self.env)), proc.stderr)
        self.assertIn("then: %s db start" % support.COORD, proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "postgresql:")))
        reply = json.loads(self.coord("status", "--json", env={"COORD_DB": url}).stdout)
        self.assertEqual((reply["ok"], reply["exit"]), (False, 4))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "postgresql:")))


# --------------------------------------------------------------------------- PostgreSQL engine
# The store suite again on the PostgreSQL engine (docs/postgresql.md, issue 25): each class below
# is an existing one with PostgresEngine first, so every test of it runs on a real PostgreSQL
# server (support.require_postgres) in a project schema of its own. Areas are added one at a
# time as the engine passes them; the SQLite classes stay exactly as they were.

class PostgresEngine:
    """Mixin: this test's stores are the PostgreSQL engine on the test server, one fresh
    project (schema) per test, dropped after it."""

    def open_store(self, **kw):
        if not hasattr(self, "pg_project"):
            if os.environ.get("COORD_TEST_NO_JJ"):  # the oldest and newest interpreters' suites
                self.skipTest("runs once: the store suite on PostgreSQL runs on the default interpreter")
            server, psycopg = support.require_postgres(self)
            self.pg_dsn = server.dsn()
            self.pg_project = "pgtest-%s" % uuid.uuid4().hex[:12]
            self.addCleanup(self._drop_pg_schema, psycopg)
        return pg.Store(self.db_spec(), environ=self.store_env(), **kw)

    def db_spec(self):
        if not hasattr(self, "pg_project"):
            self.open_store().close()
        return {"dsn": self.pg_dsn, "project": self.pg_project}

    def child_env(self):
        return dict(self.env, PYTHONPATH=os.pathsep.join([support.ROOT, support.psycopg_dir()]))

    def _drop_pg_schema(self, psycopg):
        with psycopg.connect(self.pg_dsn, autocommit=True) as conn:
            conn.execute('DROP SCHEMA IF EXISTS "%s" CASCADE' % pg.pg_schema(self.pg_project))


class PgEngineTest(PostgresEngine, StoreCase):
    """The engine's own facts: schema, collation, timestamps, NUL, the lock, migrations."""

    def test_the_test_server_does_not_sort_by_byte(self):
        # Else a column without COLLATE "C" would pass every test below unnoticed.
        server, psycopg = support.require_postgres(self)
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            got = conn.execute("SELECT array_agg(x ORDER BY x) FROM unnest(ARRAY['B', 'a']) x").fetchone()[0]
        self.assertEqual(got, ["a", "B"])

    def test_every_text_column_sorts_by_byte_and_every_real_is_eight_bytes(self):
        rows = self.st.conn.raw.execute(
            "SELECT table_name, column_name, data_type, collation_name FROM information_schema.columns"
            " WHERE table_schema = %s", (pg.pg_schema(self.pg_project),)).fetchall()
        self.assertTrue(rows)
        for table, column, kind, collation in rows:
            self.assertIn(kind, ("text", "double precision", "bigint"), (table, column))
            if kind == "text":
                self.assertEqual(collation, "C", (table, column))
        ts = 1764590000.123456
        a = self.st.register(harness="x", now=ts)
        self.assertEqual(self.st.runtime(a["id"])["started_at"], ts)

    def test_names_order_by_byte(self):
        a = self.rt()
        self.st.claim(a, ["src/B.py", "src/a.py", "src"[:3] + "-x", "src/_y"])
        self.assertEqual([l["resource"] for l in self.st.leases_of(a)], sorted(["src/B.py", "src/a.py", "src-x", "src/_y"]))

    def test_nul_in_text_is_refused_not_changed(self):
        a, b = self.rt(), self.rt()
        with self.assertRaises(UsageError):
            self.st.send(a, "one\0two", b)
        self.assertEqual(self.st.inbox(b), [])

    def test_migrations_apply_once_and_a_newer_reader_level_is_refused(self):
        again = self.open_store()
        self.addCleanup(again.close)
        self.assertEqual(again._pg_version(), max(v for v in store._MIGRATIONS if v not in store.ADDITIVE_MIGRATIONS))
        with self.st.transaction():
            self.st.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                                 ("schema.user_version", str(store.SCHEMA_VERSION + 1)))
        with self.assertRaises(store.EnvError):
            self.open_store()

    def test_sql_translation(self):
        self.assertEqual(pg.pg_sql("UPDATE t SET a = max(a, ? + ttl), b = min(b, ?) WHERE c IS ?"),
                         "UPDATE t SET a = GREATEST(a, %s + ttl), b = LEAST(b, %s) WHERE c IS NOT DISTINCT FROM %s")
        self.assertEqual(pg.pg_sql("SELECT min(id) FROM audit WHERE x = '%'"),
                         "SELECT min(id) FROM audit WHERE x = '%%'")
        self.assertTrue(pg.pg_sql("INSERT INTO messages (a) VALUES (?)").endswith(" RETURNING id"))


class PgIdentityTest(PostgresEngine, IdentityTest):
    pass


class PgLeaseTest(PostgresEngine, LeaseTest):
    def test_overlap_query_uses_indexes(self):
        names = store.ancestors("a/b/c")
        sql = ("SELECT resource FROM leases WHERE resource IN (%s) AND expires_at > 0 UNION ALL "
               "SELECT resource FROM leases WHERE resource > %%s AND resource < %%s AND expires_at > 0"
               % ",".join(["%s"] * len(names)))
        raw = self.st.conn.raw
        raw.execute("SET enable_seqscan = off")  # a handful of rows: else the planner scans anyway
        plan = " ".join(r[0] for r in raw.execute("EXPLAIN " + sql, names + ["a/b/c/", "a/b/c0"]).fetchall())
        self.assertNotIn("Seq Scan on leases", plan, plan)
        self.assertIn("Index", plan, plan)


class PgMessageTest(PostgresEngine, MessageTest):
    pass


class PgAuditTest(PostgresEngine, AuditTest):
    pass


class PgAuditStoryTest(PostgresEngine, AuditStoryTest):
    pass


class PgWriteDecisionTest(PostgresEngine, WriteDecisionTest):
    pass


class CopyAgreesTest(StoreCase):
    """One write decision, computed twice: the host process's lease copy (pg.LeaseCopy, built
    from lease_copy_read) must give the database's answer (Store.write_conflicts) whenever it
    answers at all, on random lease sets: nested names, both modes, expired leases, holders live
    by pid or by heartbeat, stale, ended or dead, writers known and unknown."""

    NAMES = ["src", "src/a.py", "src/b.py", "src/lib", "src/lib/x.py", "src/libx.py", "docs", "docs/a.md",
             "README", "docs/a.md/deeper"]
    ROUNDS = 12

    def population(self, rnd, now):
        done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], stdout=subprocess.PIPE,
                              text=True, timeout=60)
        dead_pid = int(done.stdout)
        kinds = ["pid", "beat", "stale", "ended", "dead"]
        rts = []
        for i in range(rnd.randint(3, 7)):
            kind = rnd.choice(kinds)
            kw = {"conversation": "c-%d-%s" % (i, uuid.uuid4().hex[:6]), "harness": "claude"}
            if kind == "pid":
                kw["pid"] = os.getpid()
            elif kind == "dead":
                kw["pid"] = dead_pid
            rid = self.st.register(**kw)["id"]
            rts.append((rid, kind))
        for rid, kind in rts:  # leases first, then the holder goes stale, ends or dies
            for name in rnd.sample(self.NAMES, rnd.randint(0, 3)):
                mode = rnd.choice(["exclusive", "append"])
                past = rnd.random() < 0.25
                try:
                    self.st.claim(rid, [name], mode, ttl=1 if past else 600, now=now - 5 if past else now)
                except store.CoordError:
                    pass  # a conflict: this lease set simply lacks it
        for rid, kind in rts:
            if kind == "stale":
                self.age(rid)
            elif kind == "ended":
                self.st.bye(rid)
        return [rid for rid, _ in rts]

    def age(self, rid):
        with self.st.transaction():
            self.st.q("UPDATE runtimes SET heartbeat_at = heartbeat_at - 100000 WHERE id = ?", (rid,))

    def test_the_copy_never_disagrees_with_the_database(self):
        import random
        seed = int(os.environ.get("COORD_TEST_SEED") or random.randrange(1 << 30))
        rnd = random.Random(seed)
        answered = asked = 0
        for round_ in range(self.ROUNDS):
            now = time.time()
            rts = self.population(rnd, now)
            copy = pg.LeaseCopy(self.st.lease_copy_read(), (0, 0), 0.0)
            for writer in [None] + rts + [str(uuid.uuid4())]:
                for _ in range(4):
                    names = rnd.sample(self.NAMES + ["src/new.py", "docsx", "src/lib/y/z.py"], rnd.randint(1, 3))
                    key = lambda b: (b["requested"], b["resource"], b["runtime"], b["mode"])
                    db = sorted(key(b) for b in self.st.write_conflicts(writer, names, now))
                    got = copy.write_conflicts(writer, names, now, self.st)
                    asked += 1
                    if got is None:
                        continue
                    answered += 1
                    self.assertEqual(sorted(key(b) for b in got), db,
                                     "seed %d round %d writer %s names %s" % (seed, round_, writer, names))
            with self.st.transaction():
                self.st.q("DELETE FROM leases")
        self.assertGreater(answered, asked // 4, "the copy answered too rarely to compare (seed %d)" % seed)


class PgCopyAgreesTest(PostgresEngine, CopyAgreesTest):
    pass


class PgRuntimeQueryTest(PostgresEngine, RuntimeQueryTest):
    pass


class PgThreadTest(PostgresEngine, ThreadTest):
    pass


class PgLivenessTest(PostgresEngine, LivenessTest):
    pass


class PgPersonStoreTest(PostgresEngine, PersonStoreTest):
    pass


class PgRaceTest(PostgresEngine, RaceTest):
    """Real processes racing, each with its own server connection: the project lock makes a
    directory-against-file race have one winner, as SQLite's one writer does."""


class CopyProjectTest(PostgresEngine, StoreCase):
    """pg.copy_project: a project moves SQLite -> PostgreSQL -> SQLite and loses no record: every
    table equal row for row, the audit export identical, IDs still growing after the move."""

    def sqlite_store(self, name):
        st = store.Store(os.path.join(self.tmp, name))
        self.addCleanup(st.close)
        return st

    def story(self, st):
        a = st.register(conversation="conv-a", harness="claude", pid=os.getpid(), cwd="/r")
        b = st.register(conversation="conv-b", harness="codex")
        a2 = st.register(conversation="conv-a", harness="claude")  # a resumed: a is superseded
        st.claim(a2["id"], ["src/B.py", "src/a.py"], purpose="résumé ✓")
        st.claim(b["id"], ["log.md"], mode="append", ttl=60)
        m1 = st.send(b["id"], "hello", a2["handle"])
        st.send(a2["id"], "to all", "*")
        st.inbox(a2["id"])
        st.ack(a2["id"], [m1["id"]])
        st.set_turn(b["id"], "idle")
        w = st.insert_work("fix it", "active", "tok-secret", path="/scratch/w", conversation="conv-a")
        st.update_work(w["id"], data={"direct": {"conversation": "conv-a"}})
        st.release(b["id"], everything=True)
        st.claim(b["id"], ["gone"], ttl=1, now=store.now() - 10)
        st.claim(a2["id"], ["gone"])  # takes b's lapsed lease: a lost-lease note in meta
        return a2, b

    def dump(self, st):
        out = {}
        for table, key, cols in pg.COPY_TABLES:
            where = " WHERE key NOT LIKE 'schema.%'" if table == "meta" else ""
            out[table] = [list(r) for r in st.conn.execute(
                "SELECT %s FROM %s%s ORDER BY %s" % (", ".join(cols), table, where, key)).fetchall()]
        return out

    def test_sqlite_to_postgresql_and_back_loses_nothing(self):
        lite = self.sqlite_store("a.sqlite3")
        a2, b = self.story(lite)
        before = self.dump(lite)
        counts = pg.copy_project(lite, self.st)
        self.assertEqual(counts, {t: len(rows) for t, rows in before.items()})
        self.assertEqual(self.dump(self.st), before)
        self.assertEqual(list(self.st.audit_lines(private=True)), list(lite.audit_lines(private=True)))
        self.assertEqual(list(self.st.audit_lines()), list(lite.audit_lines()))
        # Same decisions after the move, and IDs that only grow.
        with self.assertRaises(Refused):
            self.st.claim(b["id"], ["src"])
        top = max(r[0] for r in before["messages"])
        self.assertGreater(self.st.send(b["id"], "after the move", a2["handle"])["id"], top)
        back = self.sqlite_store("b.sqlite3")
        pg.copy_project(self.st, back)
        self.assertEqual(self.dump(back), self.dump(self.st))
        self.assertGreater(back.send(b["id"], "back again", a2["handle"])["id"],
                           max(r[0] for r in self.dump(self.st)["messages"]))

    def test_a_destination_with_records_is_refused_and_a_nul_refuses_the_whole_copy(self):
        lite = self.sqlite_store("a.sqlite3")
        self.story(lite)
        rt = lite.register(harness="x")
        lite.send(rt["id"], "one\0two", "*")
        with self.assertRaises(UsageError):
            pg.copy_project(lite, self.st)
        self.assertEqual({t: rows for t, rows in self.dump(self.st).items() if rows}, {}, "nothing copied")
        self.st.register(harness="y")
        with self.assertRaises(Refused):
            pg.copy_project(self.sqlite_store("c.sqlite3"), self.st)

    def test_every_column_of_the_schema_is_copied(self):
        lite = self.sqlite_store("a.sqlite3")
        tables = {r[0] for r in lite.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").fetchall()}
        self.assertEqual(tables, {t for t, _, _ in pg.COPY_TABLES})
        for table, _key, cols in pg.COPY_TABLES:
            have = tuple(r[1] for r in lite.conn.execute("PRAGMA table_info(%s)" % table).fetchall())
            self.assertEqual(set(have), set(cols), table)


# --------------------------------------------------------------------------- PostgreSQL round trips
class PgRoundTripTest(PostgresEngine, StoreCase):
    """How many times each hot operation waits for the server (docs/postgresql.md, "Round
    trips"): the figures that "one or two round trips per hot operation" must bring down. Each
    is pinned, so a change that adds a wait fails here and one that removes a wait updates it."""

    # Measured on the pipelined engine (BEGIN, and a write's lock, travel with the first read; a
    # write waits only for a rowcount or a RETURNING; COMMIT is one): each read in the middle is one.
    BASELINE = {"claim": 7, "claim again": 7, "refused claim": 4, "renew": 8, "release": 3,
                "heartbeat": 2, "send": 8, "write decision": 2}
    # Now (docs/postgresql.md, "Round trips"): the reaps on the host process's timer
    # (reap_on_timer), each operation's reads sent with BEGIN in one wait (prefetch), a final
    # read that comes back with COMMIT (execute_at_commit), a message ID drawn with the reads,
    # a snapshot's COMMIT and a refusal's ROLLBACK not waited for.
    # A claim by a runtime this process has read before is one wait (_claim_in_one_wait: the
    # server checks what it assumed); the first, or one the guess fails for, runs as before.
    # register remembers the record too, so a registered runtime's first claim is one wait.
    NOW = {"claim": 1, "claim again": 1, "claim, another name": 1, "refused claim": 2,
           "refused claim again": 2, "renew": 2, "release": 2,
           "heartbeat": 1, "heartbeat, with a process": 1, "send": 2, "write decision": 1,
           "the hook's write decision from the database": 1, "register": 1,
           "register, after an end": 1,
           "register, over a live one": 3, "register, over a live one seen": 2}
    # register: a new conversation's (or one whose last attachment ended) is one wait
    # (_register_in_one_wait); over an unended runtime of its conversation (a resume after a
    # crash or a park) the guess fails and it runs as before, one wait more than its two, unless
    # the caller saw that runtime (live=True: SessionStart, on the host process's copy).

    def trips(self, fn, *args, **kw):
        before = self.st.conn.round_trips
        try:
            fn(*args, **kw)
        except Refused:
            pass
        return self.st.conn.round_trips - before

    def test_round_trips_of_the_hot_operations(self):
        a, b = self.rt(), self.rt()
        got = {"claim": self.trips(self.st.claim, a, ["src/x.py"]),
               "claim again": self.trips(self.st.claim, a, ["src/x.py"]),
               "claim, another name": self.trips(self.st.claim, a, ["src/y.py"]),
               "refused claim": self.trips(self.st.claim, b, ["src/x.py"]),
               "refused claim again": self.trips(self.st.claim, b, ["src/x.py"]),
               "renew": self.trips(self.st.renew, a),
               "release": self.trips(self.st.release, a, ["src/x.py"]),
               "heartbeat": self.trips(self.st.heartbeat, a),
               "heartbeat, with a process": self.trips(self.st.heartbeat, self.rt(pid=os.getpid())),
               "send": self.trips(self.st.send, a, "hello", b),
               "write decision": self.trips(self.st.write_conflicts, b, ["src/x.py"]),
               "the hook's write decision from the database": self.trips(
                   self.st.hook_write_decision, self.st.runtime(b)["conversation"], None, ["src/x.py", "src/y.py"]),
               "register": self.trips(self.st.register, conversation="conv-new", harness="x")}
        ended = self.st.register(conversation="conv-ended", harness="x")
        self.st.bye(ended["id"])
        got["register, after an end"] = self.trips(self.st.register, conversation="conv-ended", harness="x")
        got["register, over a live one"] = self.trips(self.st.register, conversation="conv-new", harness="y")
        got["register, over a live one seen"] = self.trips(self.st.register, conversation="conv-new", harness="z",
                                                           live=True)
        self.assertEqual(got, self.NOW)
        runtimes = self.st.conn.execute("SELECT conversation, harness, ended_at IS NULL, superseded_by IS NULL"
                                        " FROM runtimes WHERE conversation LIKE 'conv-%' ORDER BY started_at").fetchall()
        self.assertEqual([tuple(r) for r in runtimes], [("conv-new", "x", False, False), ("conv-ended", "x", False, True),
                                                        ("conv-ended", "x", True, True), ("conv-new", "y", False, False),
                                                        ("conv-new", "z", True, True)])

    def test_a_failed_guess_waits_as_often_however_slowly_it_was_sent(self):
        # psycopg reads the results already there as it sends, so when this process sends the
        # claim's statements slowly (a loaded machine), coord_expect's error comes with one of
        # its writes instead of COMMIT's sync. Seen once as "refused claim": 4. A pause before
        # each statement makes that case happen every time.
        a, b = self.rt(), self.rt()
        self.st.claim(a, ["src/x.py"])
        self.st.conn.set_trace_callback(lambda sql: time.sleep(0.05))
        self.assertEqual({"refused claim": self.trips(self.st.claim, b, ["src/x.py"]),
                          "refused claim again": self.trips(self.st.claim, b, ["src/x.py"])},
                         {"refused claim": 2, "refused claim again": 2})
        self.st.conn.set_trace_callback(None)
        self.assertEqual([l["resource"] for l in self.st.leases_of(b)], [])
        self.assertEqual(self.trips(self.st.claim, b, ["src/z.py"]), 1, "the next guess, as ever")

    def test_the_pipeline_stays_open_between_transactions(self):
        # Leaving psycopg's pipeline sends a Sync and waits for it: a round trip the counter
        # above cannot see, measured at 10 ms each way as one more wait per write.
        a = self.rt()
        self.st.claim(a, ["src/x.py"])
        pipe = self.st.conn.pipe
        self.assertIsNotNone(pipe)
        self.st.release(a, ["src/x.py"])
        self.st.write_conflicts(a, ["src/x.py"])
        self.assertIs(self.st.conn.pipe, pipe)
        self.assertFalse(self.st.in_transaction())


class PgSessionStartTest(PostgresEngine, StoreCase):
    """session_start: the registration brings back with its COMMIT what SessionStart shows (its
    lease lines, its leases held again, whether its boundary has anything to show), the same as
    the separate reads would say, in the registration's own waits."""

    def trips(self, fn, *args, **kw):
        before = self.st.conn.round_trips
        out = fn(*args, **kw)
        return self.st.conn.round_trips - before, out

    def separately(self, rid):
        parts = self.st.session_leases(rid, 5)
        lost, pending = self.st.boundary_context(rid, prefix="coord")
        return {"mine": parts["mine"], "held": parts["held"], "total": parts["total"],
                "held_again": self.st.held_again(rid), "quiet": not lost and pending is None}

    def test_a_new_session_in_one_wait_with_a_peer_s_lease(self):
        peer = self.rt(conversation="peer")
        self.st.claim(peer, ["src/held.py"], purpose="mine")
        waits, got = self.trips(self.st.session_start, "conv-new", harness="claude", turn="idle", limit=5)
        self.assertEqual(waits, 1)
        rid = got.pop("runtime")["id"]
        self.assertEqual(got.pop("id"), rid)
        self.assertEqual(got, dict(self.separately(rid), quiet=True))
        self.assertEqual([h["resource"] for h in got["held"]], ["src/held.py"])
        self.assertEqual(self.st.turn(rid)["state"], "idle")

    def test_a_resume_after_an_end_brings_its_messages_in_one_wait(self):
        peer = self.rt(conversation="peer")
        first = self.st.register(conversation="conv-r", harness="claude")
        self.st.send(peer, "while you were away", first["id"])
        self.st.bye(first["id"])
        waits, got = self.trips(self.st.session_start, "conv-r", harness="claude", limit=5)
        self.assertEqual((waits, got["quiet"]), (1, False), "an inherited message: the boundary runs")
        lost, pending = self.st.boundary_context(got["runtime"]["id"], prefix="coord")
        self.assertIn("while you were away", pending)

    def test_a_resume_over_a_parked_holder_holds_its_leases_again(self):
        agent = self.st.register(conversation="conv-p", harness="claude")
        self.st.claim(agent["id"], ["src/keep.py"])
        self.st.hold_parked("conv-p", "work-1")
        waits, got = self.trips(self.st.session_start, "conv-p", harness="claude", limit=5, live=True)
        self.assertEqual(waits, 2, "the holder was seen: no guess, the reads then COMMIT")
        rid = got["runtime"]["id"]
        self.assertEqual((got["mine"], got["held_again"]), (["src/keep.py"], True))
        self.assertEqual(dict(got, runtime=None, id=None), dict(self.separately(rid), runtime=None, id=None))

    def test_the_same_process_s_beat_brings_the_same_reads_in_one_wait(self):
        peer = self.rt(conversation="peer")
        self.st.claim(peer, ["src/held.py"])
        mine = self.st.register(conversation="conv-b", harness="claude", pid=os.getpid())
        self.st.claim(mine["id"], ["src/mine.py"])
        waits, got = self.trips(self.st.session_beat, mine["id"], turn="idle", limit=5)
        self.assertEqual(waits, 1)
        self.assertEqual((got.pop("runtime"), got.pop("id")), ({"id": mine["id"]}, mine["id"]))
        self.assertEqual(got, self.separately(mine["id"]))
        self.assertEqual((got["mine"], got["quiet"]), (["src/mine.py"], True))
        self.st.send(peer, "news", mine["id"])
        self.assertFalse(self.st.session_beat(mine["id"], limit=5)["quiet"])

    def test_the_same_process_gets_its_runtime_only(self):
        mine = self.st.register(conversation="conv-s", harness="claude", pid=os.getpid())
        got = self.st.session_start("conv-s", harness="claude", pid=os.getpid(), live=True, limit=5)
        self.assertEqual(set(got), {"runtime"})
        self.assertEqual(got["runtime"]["id"], mine["id"])


class PgStampedRoundTripTest(PgRoundTripTest):
    """pgstamp: the same figures with the host process's clock (ServerClock), whose readings a
    write records as of the project lock (pg._Stamp): the server's time travels with the
    lock, so no operation waits once more for it. And the host process's beat (no reap: the
    reap timer reaps) is one wait under the lock."""

    def setUp(self):
        super().setUp()
        store.set_clock(self.st.server_clock())
        self.addCleanup(store.set_clock, None)

    def test_the_clock_s_readings_are_stamps(self):
        self.assertIs(type(store.now()), pg._Stamp)
        self.assertIs(type(store.now() + 30), pg._Stamp)

    def test_a_host_beat_without_a_reap_is_one_wait(self):
        a = self.rt()
        self.st.claim(a, ["src/x.py"])
        self.st.host_beat(reap=False)
        got = self.trips(self.st.host_beat, reap=False)
        self.assertEqual(got, 1)
        self.assertEqual([l["resource"] for l in self.st.host_beat(reap=False)["leases"]], ["src/x.py"])


# --------------------------------------------------------------------------- hosts (issue 25, item 3)
class HostRecordTest(StoreCase):
    """Every runtime records its host (boot id + PID namespace); a SQLite project is one host by
    definition, so every pid there is judged as before, whatever host recorded it."""

    def other_host(self, st, name="other"):
        st.host = {"id": "boot-%s/4026599999" % name, "name": name, "boot_id": "boot-" + name,
                   "pid_ns": "4026599999"}
        return st

    def dead_pid(self):
        p = subprocess.Popen(["true"])
        p.wait()
        return p.pid

    def test_the_host_is_this_boot_and_pid_namespace(self):
        h = store.host_identity()
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        ns = os.readlink("/proc/self/ns/pid")
        self.assertEqual(h["id"], "%s/%s" % (boot, ns[ns.index("[") + 1:-1]))
        self.assertEqual((h["boot_id"], h["pid_ns"]), (boot, ns[ns.index("[") + 1:-1]))
        rt = self.st.register(conversation="c-rec", harness="x", pid=os.getpid())
        self.assertEqual(rt["host"], h["id"])
        sub = self.st.register(conversation="c-rec", agent_id="sub", harness="x", pid=os.getpid())
        self.assertEqual(sub["host"], h["id"])

    def test_on_sqlite_every_pid_is_judged_by_its_process(self):
        self.assertEqual(self.st.engine, "sqlite")  # PgHostJudgementTest leaves this test out
        other = self.other_host(self.open_store())
        self.addCleanup(other.close)
        rt = other.register(conversation="c-gone", harness="x", pid=self.dead_pid(), pid_start="1")
        self.assertEqual(rt["host"], "boot-other/4026599999")
        self.assertFalse(self.st.runtime_live(rt))
        self.st.reap()
        self.assertEqual(self.st.runtime(rt["id"])["end_reason"], "process-gone")


class PgHostJudgementTest(PostgresEngine, HostRecordTest):
    """PostgreSQL: only a runtime's own host judges its pid; another host's runtimes live while
    their host beats (server clock), stop being live after its TTL, and their exclusive leases
    hold for its lease delay more."""

    test_on_sqlite_every_pid_is_judged_by_its_process = None  # SQLite's rule; this class tests PostgreSQL's

    def setUp(self):
        super().setUp()
        self.other = self.other_host(self.open_store())
        self.addCleanup(self.other.close)
        self.other.host_ttl, self.other.host_lease_delay = 10.0, 5.0

    def sleeper(self):
        p = subprocess.Popen(["sleep", "600"])
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)
        return p

    def test_another_host_s_pid_is_judged_by_its_heartbeat(self):
        t0 = time.time()
        self.other.host_beat(now=t0)
        gone = self.other.register(conversation="c-b", harness="x", pid=self.dead_pid(), pid_start="1", now=t0)
        # Here that pid names no process, but it is not this host's pid: its host beats.
        self.assertTrue(self.st.runtime_live(self.st.runtime(gone["id"]), t0 + 9))
        self.st.reap(now=t0 + 9)
        self.assertIsNone(self.st.runtime(gone["id"])["ended_at"])
        live = self.sleeper()
        a = self.other.register(conversation="c-a", harness="x", pid=live.pid, now=t0)
        self.other.claim(a["id"], ["src/a.py"], ttl=600, now=t0)
        self.other.claim(a["id"], ["docs"], mode="append", ttl=600, now=t0)
        c = self.st.register(conversation="c-c", harness="x", pid=live.pid, now=t0)
        # Past the host's TTL: not live (its pid lives here, but that is no evidence) ...
        self.assertFalse(self.st.runtime_live(self.st.runtime(a["id"]), t0 + 11))
        self.assertEqual(self.st.host_state(a["host"], t0 + 11), "dying")
        # ... but within its lease delay its exclusive leases hold (a paused host is not a dead one).
        with self.assertRaises(Refused):
            self.st.claim(c["id"], ["src"], now=t0 + 11)
        self.assertEqual([l["resource"] for l in self.st.all_leases(now=t0 + 11)], ["src/a.py"])
        self.assertIsNone(self.st.runtime(a["id"])["ended_at"])
        # After the delay the host is dead: its runtimes are reaped and the lease is claimable.
        self.assertEqual([l["resource"] for l in self.st.claim(c["id"], ["src"], now=t0 + 16)], ["src"])
        self.assertEqual(self.st.runtime(a["id"])["end_reason"], "host-gone")
        self.assertEqual(self.st.runtime(c["id"])["ended_at"], None)  # this host's own pid lives

    def test_a_host_that_beats_again_keeps_its_runtimes(self):
        t0 = time.time()
        self.other.host_beat(now=t0)
        a = self.other.register(conversation="c-a", harness="x", pid=self.sleeper().pid, now=t0)
        self.other.host_beat(now=t0 + 9)
        self.assertTrue(self.st.runtime_live(self.st.runtime(a["id"]), t0 + 18))
        self.st.reap(now=t0 + 18)
        self.assertIsNone(self.st.runtime(a["id"])["ended_at"])
        self.assertEqual([h["state"] for h in self.st.hosts(now=t0 + 18) if h["name"] == "other"], ["live"])

    def test_this_host_s_pid_in_a_nested_namespace_is_still_judged(self):
        # The host process of a host that is a PID namespace judges its own pids definitively
        # (process_alive alone answers "alive" for every pid there).
        rt = self.st.register(conversation="c-own", harness="x", pid=self.dead_pid(), pid_start="1")
        self.assertFalse(self.st.runtime_live(rt))

    def test_a_pid_of_another_host_is_never_this_caller_s_ancestor(self):
        t0 = time.time()
        self.other.host_beat(now=t0)
        parent = os.getppid()
        theirs = self.other.register(conversation="c-theirs", harness="x", pid=parent,
                                     pid_start=store.process_start(parent), now=t0)
        try:
            got = self.st.caller(environ={}, person=False)
        except Refused:
            got = None
        self.assertNotEqual(got and got["id"], theirs["id"])
        self.assertIsNone(self.st.superseded_attachment("c-theirs", parent, store.process_start(parent)))
        self.assertEqual(self.st.unended_subagents("c-theirs", parent), [])

    def test_the_host_beat_returns_this_host_s_exclusive_leases(self):
        t0 = time.time()
        mine = self.st.register(conversation="c-m", harness="x", pid=self.sleeper().pid, now=t0)
        theirs = self.other.register(conversation="c-t", harness="x", pid=self.sleeper().pid, now=t0)
        self.st.claim(mine["id"], ["src/m.py"], ttl=60, now=t0)
        self.st.claim(mine["id"], ["log"], mode="append", ttl=60, now=t0)
        self.other.claim(theirs["id"], ["src/t.py"], ttl=60, now=t0)
        beat = self.st.host_beat(now=t0 + 1)
        self.assertEqual([(l["resource"], l["handle"]) for l in beat["leases"]], [("src/m.py", mine["handle"])])
        self.assertEqual(beat["leases"][0]["expires_at"], t0 + 60)
        self.assertEqual((beat["ttl"], beat["heartbeat_at"]), (self.st.host_ttl, t0 + 1))


class SafeModeTest(support.CoordTestCase):
    """The safe-mode decision a hook makes when it cannot reach the database (issue 25, item 3):
    only from the host process's local file, failing open on anything but positive evidence."""

    def write(self, leases, offset=0.0, boot=None, **extra):
        path = os.path.join(self.state, "safe", "host.safe")
        beat = {"now": 1000.0, "heartbeat_at": 1000.0, "ttl": 30.0, "lease_delay": 30.0, "leases": leases}
        state = hostclient.safe_state(beat, offset, 0.2)
        if boot is not None:
            state["boot_id"] = boot
        state.update(extra)
        hostclient.write_safe_state(path, state)
        return path

    def lease(self, resource, expires_at):
        return {"resource": resource, "runtime": "r", "handle": "ant-bee-cat-dog-elk", "conversation": "c",
                "expires_at": expires_at}

    def test_a_write_is_refused_once_the_lease_may_have_lapsed(self):
        path = self.write([self.lease("src/a.py", 1020.0), self.lease("src/b", 5000.0)])
        margin = store.SAFE_MARGIN + 0.1
        # offset 0: monotonic time is server time. src/a.py lapses at its expiry (1020); src/b at
        # the host's last beat + TTL (1030), when other hosts stop taking this host for live.
        self.assertEqual(hostclient.safe_mode_refusals(["src/a.py", "src/b/x.py"], path, mono=1020 - margin - 0.01), [])
        got = hostclient.safe_mode_refusals(["src/a.py", "src/b/x.py", "README"], path, mono=1020 - margin)
        self.assertEqual([(r["name"], r["lapse_at"]) for r in got], [("src/a.py", 1020.0)])
        got = hostclient.safe_mode_refusals(["src/a.py", "src/b/x.py", "src", "README"], path, mono=1030 - margin)
        self.assertEqual(sorted((r["name"], r["resource"]) for r in got),
                         [("src", "src/a.py"), ("src", "src/b"), ("src/a.py", "src/a.py"), ("src/b/x.py", "src/b")])
        reason = hostclient.safe_mode_reason(got)
        self.assertIn("may have lapsed", reason)
        self.assertIn("ant-bee-cat-dog-elk", reason)

    def test_the_offset_is_the_server_s_clock(self):
        path = self.write([self.lease("src/a.py", 1020.0)], offset=500.0)
        self.assertEqual(hostclient.safe_mode_refusals(["src/a.py"], path, mono=518.0), [])
        self.assertTrue(hostclient.safe_mode_refusals(["src/a.py"], path, mono=520.0))

    def test_anything_but_a_readable_file_of_this_boot_fails_open(self):
        self.assertEqual(hostclient.safe_mode_refusals(["src/a.py"], os.path.join(self.state, "none"), mono=1e9), [])
        path = self.write([self.lease("src/a.py", 1020.0)], boot="another-boot")
        self.assertEqual(hostclient.safe_mode_refusals(["src/a.py"], path, mono=1e9), [])
        path = self.write([self.lease("src/a.py", 1020.0)], v=99)
        self.assertEqual(hostclient.safe_mode_refusals(["src/a.py"], path, mono=1e9), [])
        with open(path, "wb") as f:
            f.write(b"{garbled")
        self.assertEqual(hostclient.safe_mode_refusals(["src/a.py"], path, mono=1e9), [])

    def test_the_check_imports_nothing_a_hook_must_not(self):
        path = self.write([self.lease("src/a.py", 1020.0)])
        code = ("import sys; sys.path.insert(0, %r); import store, hostclient; before = set(sys.modules);"
                " r = hostclient.safe_mode_refusals(['src/a.py'], %r, mono=1e9); assert r, r;"
                " new = set(sys.modules) - before; assert 'subprocess' not in sys.modules, new; print(sorted(new))"
                % (support.ROOT, path))
        out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "[]")

    def test_each_project_s_host_process_has_its_own_file(self):
        # One host process per project (project_host_socket), all in one state directory: a
        # file shared by two of them would hold one project's leases and refuse the other's writes.
        env = dict(os.environ, XDG_STATE_HOME=self.state)
        a, b = hostclient.project_host_socket("proj-a", env), hostclient.project_host_socket("proj-b", env)
        self.assertNotEqual(hostclient.safe_state_path(a), hostclient.safe_state_path(b))
        self.assertEqual(os.path.dirname(hostclient.safe_state_path(a)), os.path.dirname(a))
        self.assertEqual(hostclient.safe_state_path(os.path.join(self.state, "host.sock")), os.path.join(self.state, "host.safe"))


# --------------------------------------------------------------------------- PostgreSQL security (issue 25 item 5)

def _pg_as(dsn, role):
    """The test server's connection string `dsn` as another role (the test server trusts local
    connections: these tests are about what a role may do, not how it proves who it is)."""
    return dsn.replace("user=coord", "user=%s" % role)


class PgSecurityCase(support.CoordTestCase):
    """Two projects, A and B, each set up by pg.pg_setup as the admin (the test server's
    superuser), each with one login role."""

    def setUp(self):
        super().setUp()
        self.server, self.psycopg = support.require_postgres(self)
        self.admin = self.server.dsn()
        tag = uuid.uuid4().hex[:10]
        self.a, self.b = "seca-%s" % tag, "secb-%s" % tag
        self.la, self.lb = "host_a_%s" % tag, "host_b_%s" % tag
        self.addCleanup(self._drop)
        self.setup_a = pg.pg_setup(self.admin, self.a, [self.la])
        pg.pg_setup(self.admin, self.b, [self.lb])

    def _drop_project(self, project):
        with self.psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute('DROP SCHEMA IF EXISTS %s CASCADE' % pg.pg_ident(pg.pg_schema(project)))
            for role in pg.pg_role_names(project).values():
                if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                    conn.execute("DROP OWNED BY %s CASCADE" % pg.pg_ident(role))
                    conn.execute("DROP ROLE %s" % pg.pg_ident(role))

    def _drop(self):
        with self.psycopg.connect(self.admin, autocommit=True) as conn:
            for project in (self.a, self.b):
                conn.execute('DROP SCHEMA IF EXISTS %s CASCADE' % pg.pg_ident(pg.pg_schema(project)))
            roles = [self.la, self.lb] + [n for p in (self.a, self.b) for n in pg.pg_role_names(p).values()]
            for role in roles:
                if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                    conn.execute("DROP OWNED BY %s CASCADE" % pg.pg_ident(role))
                    conn.execute("DROP ROLE %s" % pg.pg_ident(role))

    def login_store(self, login, project):
        return pg.Store({"dsn": _pg_as(self.admin, login), "project": project})

    def raw(self, role):
        conn = self.psycopg.connect(_pg_as(self.admin, role), autocommit=True)
        self.addCleanup(conn.close)
        return conn


class PgRoleTest(PgSecurityCase):
    def test_setup_creates_nologin_owner_group_and_member_login(self):
        owner, group = pg.pg_role_names(self.a)["owner"], pg.pg_schema(self.a)
        conn = self.raw("coord")
        rows = dict((r[0], r[1:]) for r in conn.execute(
            "SELECT rolname, rolcanlogin, rolsuper FROM pg_roles WHERE rolname IN (%s, %s, %s)", (owner, group, self.la)))
        self.assertEqual(rows, {owner: (False, False), group: (False, False), self.la: (True, False)})
        self.assertEqual(conn.execute("SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = %s",
                                      (group,)).fetchone()[0], owner)
        self.assertTrue(conn.execute("SELECT pg_has_role(%s, %s, 'MEMBER')", (self.la, group)).fetchone()[0])
        self.assertFalse(conn.execute("SELECT pg_has_role(%s, %s, 'MEMBER')", (self.la, owner)).fetchone()[0])
        self.assertIn('CREATE ROLE "%s" NOLOGIN' % owner, self.setup_a)  # what it prints is what it ran
        # Run again: nothing to create, nothing changes.
        again = pg.pg_setup(self.admin, self.a, [self.la])
        self.assertFalse([s for s in again if s.startswith(("CREATE ROLE", "CREATE POLICY", "GRANT \""))], again)

    def test_a_login_role_works_its_own_project(self):
        st = self.login_store(self.la, self.a)
        self.addCleanup(st.close)
        rt = st.register(harness="test")["id"]
        self.assertEqual([l["resource"] for l in st.claim(rt, ["src/a.py"])], ["src/a.py"])
        peer = st.register(harness="test")
        st.send(rt, "hello", peer["handle"])
        self.assertEqual(len(st.inbox(peer["id"])), 1)

    def test_a_role_of_project_b_cannot_read_or_write_project_a(self):
        st = self.login_store(self.la, self.a)
        self.addCleanup(st.close)
        rt = st.register(harness="test")["id"]
        st.claim(rt, ["src/a.py"])
        schema = pg.pg_ident(pg.pg_schema(self.a))
        b = self.raw(self.lb)
        with self.assertRaises(self.psycopg.errors.InsufficientPrivilege):
            b.execute("SELECT * FROM %s.leases" % schema)
        with self.assertRaises(store.EnvError):
            self.login_store(self.lb, self.a)
        # A mistaken grant (schema and table privileges handed to B's role): row-level security
        # still admits only members of A's group. Zero rows read; a write refused.
        admin = self.raw("coord")
        admin.execute("GRANT USAGE ON SCHEMA %s TO %s" % (schema, pg.pg_ident(self.lb)))
        admin.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %s TO %s"
                      % (schema, pg.pg_ident(self.lb)))
        self.assertEqual(self.raw(self.la).execute("SELECT count(*) FROM %s.leases" % schema).fetchone()[0], 1)
        self.assertEqual(b.execute("SELECT count(*) FROM %s.leases" % schema).fetchone()[0], 0)
        self.assertEqual(b.execute("SELECT count(*) FROM %s.runtimes" % schema).fetchone()[0], 0)
        self.assertEqual(b.execute("DELETE FROM %s.leases" % schema).rowcount, 0)
        with self.assertRaises(self.psycopg.errors.InsufficientPrivilege):  # new row violates row-level security
            b.execute("INSERT INTO %s.meta (key, value) VALUES ('x', 'y')" % schema)

    def test_a_login_role_cannot_alter_drop_or_create(self):
        self.login_store(self.la, self.a).close()
        schema = pg.pg_ident(pg.pg_schema(self.a))
        a = self.raw(self.la)
        for sql in ("ALTER TABLE %s.leases ADD COLUMN x integer" % schema,
                    "ALTER TABLE %s.leases NO FORCE ROW LEVEL SECURITY" % schema,
                    "DROP POLICY coord_members ON %s.leases" % schema,
                    "DROP TABLE %s.leases" % schema,
                    "CREATE TABLE %s.mine (x integer)" % schema,
                    "DROP SCHEMA %s CASCADE" % schema):
            with self.subTest(sql=sql):
                with self.assertRaises(self.psycopg.errors.InsufficientPrivilege):
                    a.execute(sql)

    def test_a_login_role_does_not_migrate_it_says_who_does(self):
        admin = self.raw("coord")
        schema = pg.pg_ident(pg.pg_schema(self.a))
        admin.execute("UPDATE %s.meta SET value = '1' WHERE key = %%s" % schema, (pg.Store._PG_READER_KEY,))
        admin.execute("DELETE FROM %s.meta WHERE key = %%s" % schema, (store.SCHEMA_APPLIED_KEY,))
        with self.assertRaises(store.EnvError) as cm:
            self.login_store(self.la, self.a)
        self.assertIn("only its owner", cm.exception.message)
        self.assertIn("coord db setup", cm.exception.hint)

    def test_setup_takes_over_a_project_made_before_it(self):
        # A project whose schema, tables and a function were made by the superuser (as before
        # setup existed): setup hands them to the owner, and the login role then works.
        c = "secc-%s" % uuid.uuid4().hex[:10]
        self.addCleanup(self._drop_project, c)
        pg.Store({"dsn": self.admin, "project": c}).close()
        schema = pg.pg_ident(pg.pg_schema(c))
        self.raw("coord").execute("CREATE FUNCTION %s.f() RETURNS int LANGUAGE sql AS 'SELECT 1'" % schema)
        ran = pg.pg_setup(self.admin, c, [self.la])
        self.assertIn("ALTER SCHEMA %s OWNER TO %s" % (schema, pg.pg_ident(pg.pg_role_names(c)["owner"])), ran)
        st = self.login_store(self.la, c)
        self.addCleanup(st.close)
        st.register(harness="test")
        self.assertEqual(self.raw(self.la).execute("SELECT %s.f()" % schema).fetchone()[0], 1)
        checks = pg.pg_doctor_checks(st, _pg_as(self.admin, self.la))
        self.assertEqual([ok for ok, _ in checks], [True] * len(checks))
        self.assertGreaterEqual(len(checks), 4)
        self.assertEqual(self.raw("coord").execute(
            "SELECT pg_get_userbyid(proowner) FROM pg_proc WHERE oid = %s::regprocedure", ("%s.f()" % schema,)).fetchone()[0],
            pg.pg_role_names(c)["owner"])
        self.assertFalse(self.raw("coord").execute(  # and PUBLIC may not run it
            "SELECT has_function_privilege('public', %s, 'EXECUTE')", ("%s.f()" % schema,)).fetchone()[0])
        with self.assertRaises(self.psycopg.errors.InsufficientPrivilege):  # the owner's now, not the login's
            self.raw(self.la).execute("DROP FUNCTION %s.f()" % schema)

    def test_a_superuser_login_is_refused_by_setup(self):
        with self.assertRaises(UsageError) as cm:
            pg.pg_setup(self.admin, self.a, ["coord"])
        self.assertIn("superuser", cm.exception.message)

    def test_the_policy_is_evaluated_once_per_statement(self):
        self.login_store(self.la, self.a).close()
        schema = pg.pg_ident(pg.pg_schema(self.a))
        plan = "\n".join(r[0] for r in self.raw(self.la).execute(
            "EXPLAIN (VERBOSE) SELECT * FROM %s.leases WHERE resource > 'a'" % schema))
        self.assertIn("InitPlan", plan)  # the membership test, once, not a filter per row
        self.assertIn("pg_has_role", plan)


class PgDoctorTest(PgSecurityCase):
    def lines(self, st, dsn, listen=None):
        return pg.pg_doctor_checks(st, dsn, listen)

    def test_all_good_for_a_login_role(self):
        st = self.login_store(self.la, self.a)
        self.addCleanup(st.close)
        got = self.lines(st, _pg_as(self.admin, self.la))
        self.assertEqual([ok for ok, _ in got], [True] * 7, got)  # the fifth: payload-free wake-ups (pgcodex)
        self.assertIn("not a superuser, not the owner", got[0][1])
        self.assertIn("row-level security forced on every table", got[1][1])
        self.assertIn("transaction bounds: idle in transaction 5 s, lock 8 s, statement 8 s", got[5][1])
        self.assertIn("append only: audit, messages", got[6][1])

    def test_a_role_without_the_transaction_bounds_is_reported(self):
        self.raw("coord").execute("ALTER ROLE %s RESET ALL" % pg.pg_ident(self.la))
        st = self.login_store(self.la, self.a)
        self.addCleanup(st.close)
        ok, line = self.lines(st, _pg_as(self.admin, self.la))[5]
        self.assertFalse(ok)
        self.assertIn("role %s lacks them" % self.la, line)
        self.assertIn(store.pg_setup_command(self.a, self.la), line)
        pg.pg_setup(self.admin, self.a, [self.la])  # setup puts them back
        self.assertTrue(self.lines(st, _pg_as(self.admin, self.la))[5][0])

    def test_a_table_without_force_is_reported(self):
        admin = self.raw("coord")
        schema = pg.pg_ident(pg.pg_schema(self.a))
        admin.execute("ALTER TABLE %s.leases NO FORCE ROW LEVEL SECURITY" % schema)
        admin.execute("ALTER TABLE %s.messages DISABLE ROW LEVEL SECURITY" % schema)
        st = self.login_store(self.la, self.a)
        self.addCleanup(st.close)
        ok, line = self.lines(st, _pg_as(self.admin, self.la))[1]
        self.assertFalse(ok)
        self.assertIn("leases (RLS not forced)", line)
        self.assertIn("messages (no RLS)", line)
        self.assertIn(store.pg_setup_command(self.a), line)
        pg.pg_setup(self.admin, self.a, [])  # setup puts it back
        self.assertTrue(self.lines(st, _pg_as(self.admin, self.la))[1][0])

    def test_a_superuser_or_the_owner_is_reported(self):
        st = pg.Store({"dsn": self.admin, "project": self.a})
        self.addCleanup(st.close)
        ok, line = self.lines(st, self.admin)[0]
        self.assertFalse(ok)
        self.assertIn("is a superuser", line)
        self.raw("coord").execute("GRANT %s TO %s" % (pg.pg_ident(pg.pg_role_names(self.a)["owner"]),
                                                       pg.pg_ident(self.la)))
        st2 = self.login_store(self.la, self.a)
        self.addCleanup(st2.close)
        ok, line = self.lines(st2, _pg_as(self.admin, self.la))[0]
        self.assertFalse(ok)
        self.assertIn("the owner", line)

    def test_a_pooled_listen_connection_is_reported(self):
        st = self.login_store(self.la, self.a)
        self.addCleanup(st.close)
        ok, line = self.lines(st, _pg_as(self.admin, self.la),
                              "postgresql://h@ep-x-pooler.example.net/db?sslmode=verify-full")[3]
        self.assertFalse(ok)
        self.assertIn("looks pooled", line)


class PgWakeTest(PgSecurityCase):
    def test_a_wake_up_carries_no_content(self):
        # Any role may LISTEN on any channel: B's role hears A's wake-up, and learns nothing but
        # that something happened (the channel is a digest, not even A's name).
        listener = self.raw(self.lb)
        channel = pg.pg_wake_channel(self.a)
        self.assertNotIn(self.a, channel)
        listener.execute("LISTEN %s" % channel)
        # A's login role sends the wake-up coord sends (its own autocommit connection: the engine
        # keeps a pipeline open between transactions, which would hold a raw statement back).
        self.raw(self.la).execute(pg.pg_wake_sql(self.a))
        got = list(listener.notifies(timeout=10, stop_after=1))
        self.assertEqual([(n.channel, n.payload) for n in got], [(channel, "")])

    def test_no_notify_in_coord_carries_a_payload(self):
        for name in ("store.py", "pg.py", "hostclient.py", "host.py"):
            with open(os.path.join(support.ROOT, name)) as f:
                text = f.read()
            self.assertNotRegex(text, r"(?i)pg_notify\s*\(", name)
            self.assertNotRegex(text, r"(?i)NOTIFY\s+[%\w\"]+\s*,", name)


class PgUrlTest(support.CoordTestCase):
    """The TLS rule, before any connection: no server needed."""

    def refused(self, dsn, environ=None):
        with self.assertRaises(store.EnvError) as cm:
            pg.pg_check_url(dsn, environ or {})
        return cm.exception

    def test_a_remote_host_without_verify_full_is_refused_with_the_fix(self):
        for dsn in ("postgresql://coord:s3cret@db.example.com/coord",
                    "postgresql://coord:s3cret@db.example.com/coord?sslmode=require",
                    "postgresql://coord@db.example.com:5432/coord?sslmode=verify-ca",
                    "host=db.example.com user=coord password=s3cret sslmode=prefer",
                    "host=/run/postgresql,db.example.com sslmode=require",
                    "host=localhost hostaddr=10.0.0.5 sslmode=disable",
                    "postgresql:///coord?host=db.example.com&sslmode=require",
                    "service=coord"):
            with self.subTest(dsn=dsn):
                exc = self.refused(dsn)
                self.assertIn("sslmode=verify-full", exc.hint)
                self.assertNotIn("s3cret", exc.message + exc.hint)
                self.assertEqual(exc.exit_code, 4)

    def test_the_environment_counts(self):
        self.refused("dbname=coord", {"PGHOST": "db.example.com"})
        self.refused("host=db.example.com", {"PGSSLMODE": "require"})
        self.assertEqual(pg.pg_check_url("host=db.example.com", {"PGSSLMODE": "verify-full"}), "verify-full")

    def test_verify_full_a_unix_socket_and_loopback_pass(self):
        self.assertEqual(pg.pg_check_url("postgresql://c@db.example.com/c?sslmode=verify-full&sslrootcert=/ca.crt", {}),
                         "verify-full")
        for dsn in ("host=/var/run/postgresql user=coord", "postgresql:///coord", "host=127.0.0.1 sslmode=disable",
                    "postgresql://coord@localhost/coord", "postgresql://coord@[::1]:5432/coord", ""):
            with self.subTest(dsn=dsn):
                self.assertEqual(pg.pg_check_url(dsn, {}), "local")

    def test_the_engine_refuses_before_connecting(self):
        support.import_psycopg()
        with self.assertRaises(store.EnvError) as cm:  # no server there: refused before any connect
            pg.Store({"dsn": "host=db.invalid connect_timeout=1 sslmode=require", "project": "p"}, environ={})
        self.assertIn("verify-full", cm.exception.hint)

    def test_pooled_endpoints_are_recognised_and_refused_for_listen(self):
        for dsn in ("postgresql://u@ep-cool-1234-pooler.eu-central-1.aws.neon.tech/db",
                    "postgresql://u@aws-0-eu-central-1.pooler.supabase.com:6543/postgres",
                    "host=db.example.com port=6432"):
            with self.subTest(dsn=dsn):
                self.assertTrue(pg.pg_pooled(dsn, {}))
                with self.assertRaises(store.EnvError) as cm:
                    pg.pg_check_listen_url(dsn, {})
                self.assertIn("direct", cm.exception.hint)
        self.assertIsNone(pg.pg_pooled("postgresql://u@db.example.com:5432/db", {}))
        pg.pg_check_listen_url("host=/run/postgresql", {})


class PgTlsTest(support.CoordTestCase):
    """A real server with TLS on 127.0.0.1 and a certificate for db.coord.test from a CA this test
    makes with openssl; the client names the host db.coord.test (hostaddr=127.0.0.1), so the rule
    for a remote host applies and verify-full checks that name."""

    @classmethod
    def setUpClass(cls):
        cls.server = None

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            cls.server.stop()

    def start(self):
        openssl = support.require_tool(self, "openssl")
        _, psycopg = support.require_postgres(self)
        cls = type(self)
        if cls.server is not None:
            return psycopg
        uid = os.getuid()
        demote = support.demote_to_nobody() if uid == 0 else None
        if demote is not None:
            import pwd
            uid = pwd.getpwnam("nobody").pw_uid
        import tempfile
        d = tempfile.mkdtemp(prefix="coord-tls-", dir=support._reachable_base(uid))
        cls.certs = d

        def run(*argv):
            subprocess.run([openssl] + list(argv), cwd=d, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60)
        for ca in ("ca", "other"):
            run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca + ".key", "-out", ca + ".crt",
                "-days", "2", "-subj", "/CN=coord test %s" % ca)
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=db.coord.test")
        with open(os.path.join(d, "ext"), "w") as f:
            f.write("subjectAltName=DNS:db.coord.test\n")
        run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.crt", "-days", "2", "-extfile", "ext")
        for name in os.listdir(d):
            os.chmod(os.path.join(d, name), 0o600 if name.endswith(".key") else 0o644)
            if demote is not None:
                os.chown(os.path.join(d, name), uid, -1)
        os.chmod(d, 0o755)
        cls.server = support.PostgresServer(support.postgres_bindir(), options=(
            "-c listen_addresses=127.0.0.1 -c ssl=on -c ssl_cert_file=%s/server.crt -c ssl_key_file=%s/server.key"
            % (d, d)))
        # PostgresServer's own port names its socket; TCP listens on that same port.
        cls.port = cls.server.port
        return psycopg

    def dsn(self, sslmode, ca="ca"):
        return ("host=db.coord.test hostaddr=127.0.0.1 port=%d user=coord dbname=postgres sslmode=%s"
                " sslrootcert=%s/%s.crt" % (self.port, sslmode, self.certs, ca))

    def test_verify_full_connects_and_doctor_says_verified(self):
        self.start()
        project = "tls-%s" % uuid.uuid4().hex[:8]
        st = pg.Store({"dsn": self.dsn("verify-full"), "project": project}, environ={})
        self.addCleanup(st.close)
        self.assertTrue(st.conn.raw.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()[0])
        self.assertEqual(st.conn.tls, "verify-full")
        tls = [line for ok, line in pg.pg_doctor_checks(st, self.dsn("verify-full")) if line.startswith("TLS")]
        self.assertEqual(tls, ["TLS: on, server certificate and name verified (sslmode=verify-full)"])

    def test_less_than_verify_full_is_refused_though_the_server_would_accept(self):
        psycopg = self.start()
        psycopg.connect(self.dsn("require"), connect_timeout=10).close()  # libpq alone would connect
        with self.assertRaises(store.EnvError) as cm:
            pg.Store({"dsn": self.dsn("require"), "project": "tls-x"}, environ={})
        self.assertIn("sslmode=verify-full", cm.exception.hint)

    def test_a_certificate_from_another_ca_is_not_accepted(self):
        self.start()
        with self.assertRaises(store.EnvError) as cm:
            pg.Store({"dsn": self.dsn("verify-full", ca="other"), "project": "tls-x"}, environ={})
        self.assertIn("cannot connect", cm.exception.message)


class PgPooledTest(PgSecurityCase):
    def test_a_pooled_connection_prepares_nothing_and_sets_its_schema_per_transaction(self):
        # A transaction pooler may hand any transaction another server session: no server-side
        # prepared statements (psycopg prepares a statement after 5 runs), the schema set with
        # SET LOCAL in every transaction. A socket directory named like a pooler's stands in.
        link = os.path.join(os.path.dirname(self.server.dir), "pgbouncer-%s" % uuid.uuid4().hex[:8])
        os.symlink(self.server.dir, link)
        self.addCleanup(os.unlink, link)
        dsn = _pg_as(self.admin, self.la).replace("host=%s " % self.server.dir, "host=%s " % link)
        self.assertTrue(pg.pg_pooled(dsn, {}))
        st = pg.Store({"dsn": dsn, "project": self.a}, environ={})
        self.addCleanup(st.close)
        rt = st.register(harness="test")["id"]
        for i in range(8):
            st.claim(rt, ["f%d" % i])
            st.release(rt, ["f%d" % i])
        self.assertEqual(st.conn.raw.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0], 0)
        # A session whose search_path is not the project's (as the pooler's next session may be):
        # every transaction still finds the project's tables.
        st.conn.raw.execute("SET search_path TO public")
        self.assertEqual([l["resource"] for l in st.claim(rt, ["g"])], ["g"])
        with st.snapshot():
            self.assertEqual(st.conn.execute("SELECT count(*) FROM leases").fetchone()[0], 1)

class IntegrationFenceTest(StoreCase):
    """integration/<bookmark> carries a fencing number (issue 25, item 4): it goes up by one
    every time the lease is newly acquired, in the claim's own transaction, and a holder whose
    number is no longer current (the lease lapsed and another took it) is told so."""

    def test_the_number_goes_up_on_every_new_acquisition_and_stays_on_a_renewal(self):
        a, b = self.rt(), self.rt()
        res = "integration/main"
        first = self.st.claim_integration(a, res, "land x")
        self.assertEqual((first["fence"], first["new"]), (1, True))
        self.assertEqual(self.st.claim_integration(a, res)["fence"], 1)  # a renewal, not an acquisition
        self.assertEqual(self.st.confirm_fence(a, res, 1), {"ok": True, "current": 1})
        self.st.release(a, [res])
        got = self.st.claim_integration(b, res)
        self.assertEqual((got["fence"], got["new"]), (2, True))
        self.st.release(b, [res])
        self.assertEqual(self.st.claim_integration(a, res)["fence"], 3)  # a again: a new acquisition
        self.assertEqual(self.st.integration_fence(res)["runtime"], a)
        self.assertEqual(self.st.claim_integration(a, "integration/dev")["fence"], 1)  # one counter per lease
        self.assertEqual([json.loads(l)["data"]["fence"] for l in self.st.audit_lines()
                          if json.loads(l)["event"] == "integration.fenced"], [1, 2, 3, 1])

    def test_a_holder_whose_lease_lapsed_and_was_taken_is_fenced_off(self):
        a, b = self.rt(), self.rt()
        res = "integration/main"
        now = time.time()
        fence = self.st.claim_integration(a, res, ttl=1, now=now - 5)["fence"]
        # a paused past its lease's expiry; nobody took the lease: it is still a's, renewed
        self.assertEqual(self.st.confirm_fence(a, res, fence, now=now)["ok"], True)
        self.assertEqual(self.st.leases_of(a, [res])[0]["expires_at"], now + 1)
        later = now + 5  # a paused again, past the renewed expiry: b takes the lease
        taken = self.st.claim_integration(b, res, ttl=1, now=later)
        self.assertEqual(taken["fence"], fence + 1)
        got = self.st.confirm_fence(a, res, fence, now=later)
        self.assertFalse(got["ok"])
        self.assertEqual((got["current"], got["held"]), (fence + 1, False))
        self.assertEqual(got["holder"], self.st.runtime(b)["handle"])
        self.assertEqual(self.st.confirm_fence(b, res, fence + 1, now=later)["ok"], True)
        # b's lease lapses, a re-acquires: a new number, and b is fenced off in turn
        latest = later + 5
        self.assertEqual(self.st.claim_integration(a, res, now=latest)["fence"], fence + 2)
        self.assertFalse(self.st.confirm_fence(b, res, fence + 1, now=latest)["ok"])

    def test_a_failed_claim_takes_no_number(self):
        a, b = self.rt(), self.rt()
        res = "integration/main"
        self.st.claim_integration(a, res)
        with self.assertRaises(Refused):
            self.st.claim_integration(b, res)
        self.assertEqual(self.st.integration_fence(res)["fence"], 1)


class PgIntegrationFenceTest(PostgresEngine, IntegrationFenceTest):
    pass


class PgReapOffTheHotPathTest(PostgresEngine, StoreCase):
    """On PostgreSQL a hot operation does not scan the project for the dead (the host process
    reaps on a timer, test_host.ReapTimerTest); it reaps only what it touches, and a reader
    judges expiry and liveness itself, so what is not reaped yet blocks nobody."""

    def statements(self, fn, *args, **kw):
        seen = []
        self.st.conn.set_trace_callback(seen.append)
        try:
            fn(*args, **kw)
        finally:
            self.st.conn.set_trace_callback(None)
        return seen

    def test_no_hot_operation_scans_every_runtime_or_every_expired_lease(self):
        a, b = self.rt(), self.rt()
        t0 = time.time()
        self.st.claim(b, ["elsewhere"], ttl=1, now=t0 - 10)  # expired, on a name nobody touches below
        ops = [(self.st.claim, (a, ["src/x.py"]), {}), (self.st.renew, (a,), {}), (self.st.heartbeat, (a,), {}),
               (self.st.send, (a, "hi", b), {}), (self.st.release, (a, ["src/x.py"]), {}),
               (self.st.register, (), {"conversation": "conv-r", "harness": "x"})]
        for fn, args, kw in ops:
            with self.subTest(op=fn.__name__):
                for sql in self.statements(fn, *args, **kw):
                    self.assertNotIn("FROM runtimes WHERE ended_at IS NULL", sql)
                    self.assertNotIn("WHERE l.expires_at <= ?", sql)
        self.assertEqual([l["resource"] for l in self.st.leases_of(b)], ["elsewhere"], "left for the timer")
        self.assertEqual(self.st.conflicts(["elsewhere"], as_runtime=a), [], "expired: blocks nobody")
        self.st.claim(a, ["elsewhere"])
        self.st.reap()
        self.assertEqual(self.st.leases_of(b), [])
        self.assertIn("lease.expired", [json.loads(l)["event"] for l in self.st.audit_lines()])

    def test_sqlite_still_reaps_inline(self):
        self.assertTrue(self.st.reap_on_timer)
        lite = store.Store(self.db)
        self.addCleanup(lite.close)
        self.assertFalse(lite.reap_on_timer)


class PgCodeOffTheHookPathTest(support.CoordTestCase):
    """The PostgreSQL engine's module-level state costs the hook's imports nothing."""

    def test_importing_store_loads_no_threading(self):
        out = subprocess.run([sys.executable, "-I", "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]);"
                              " import store; print('threading' in sys.modules)", support.ROOT],
                             stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
        self.assertEqual(out, "False")


# --------------------------------------------------------------------------- the lease copy's wake-ups and rules
# (issue 25, pglisten) Every transaction that changes what the host process's lease copy decides
# sends the payload-free wake-up on commit; writes that only lengthen what the copy holds do not.
# The copy's own rules (pg.LeaseCopy) answer only what they are sure of. test_host.LeaseCopyTest
# runs them in a real host process.

class PgLeaseWakeTest(PostgresEngine, StoreCase):
    MARK = "coord_test_mark"

    def setUp(self):
        super().setUp()
        self.listener = self.raw()
        self.channel = pg.pg_wake_channel(self.pg_project)
        self.listener.execute("LISTEN %s" % self.channel)
        self.listener.execute("LISTEN %s" % self.MARK)
        self.marker = self.raw()

    def raw(self):
        import psycopg
        conn = psycopg.connect(self.pg_dsn, autocommit=True)
        self.addCleanup(conn.close)
        return conn

    def wakes_of(self, fn, *args, **kw):
        """The wake-ups `fn` sent: what arrives before a marker NOTIFY sent after it (one queue,
        in commit order), within a bounded wait."""
        fn(*args, **kw)
        self.marker.execute("NOTIFY %s" % self.MARK)
        got = []
        for n in self.listener.notifies(timeout=30):
            if n.channel == self.MARK:
                return sorted(set(got))  # one per transaction that changed something
            got.append((n.channel, n.payload))
        self.fail("the marker did not arrive")

    def test_each_lease_or_runtime_change_wakes_and_a_heartbeat_does_not(self):
        woke = [(self.channel, "")]
        a = self.st.register(conversation="conv-a", harness="x", pid=os.getpid(),
                             pid_start=store.process_start(os.getpid()))["id"]
        b = self.rt(harness="x")
        self.assertEqual(self.wakes_of(lambda: None), woke, "the registrations above")
        self.assertEqual(self.wakes_of(self.st.register, conversation="conv-c", harness="x"), woke)
        self.assertEqual(self.wakes_of(self.st.claim, a, ["src/a.py"]), woke)
        self.assertEqual(self.wakes_of(self.st.heartbeat, a), [], "a heartbeat only lengthens")
        self.assertEqual(self.wakes_of(self.st.renew, a), [], "a renewal only lengthens")
        self.assertEqual(self.wakes_of(self.st.release, a, ["src/a.py"]), woke)
        self.st.claim(b, ["gone.py"], ttl=1, now=time.time() - 10)
        self.assertEqual(self.wakes_of(self.st.reap), woke, "expiry")
        self.assertEqual(self.wakes_of(self.st.claim, b, ["held.py"]), woke)
        with self.assertRaises(store.Refused):
            self.st.claim(a, ["held.py"])  # refused: rolled back, nothing to wake for
        self.assertEqual(self.wakes_of(lambda: None), [], "the refusal woke nobody")
        self.assertEqual(self.wakes_of(self.st.bye, b), woke)

    def test_which_writes_wake(self):
        for sql, wakes in (("UPDATE runtimes SET heartbeat_at = %s WHERE id = ?" % store.Store._BEAT, False),
                           ("UPDATE leases SET expires_at = max(expires_at, ? + ttl) WHERE runtime = ?", False),
                           ("INSERT INTO audit (at) VALUES (?)", False),
                           ("UPDATE runtimes SET heartbeat_at = heartbeat_at - ?", True),
                           ("UPDATE runtimes SET heartbeat_at = ?, ended_at = NULL WHERE id = ?", True),
                           ("UPDATE leases SET expires_at = ?, ttl = ? WHERE resource = ? AND runtime = ?", True),
                           ("UPDATE leases SET runtime = ? WHERE runtime = ?", True),
                           ("INSERT INTO leases (resource) VALUES (?)", True),
                           ("DELETE FROM leases WHERE runtime = ?", True),
                           ("INSERT INTO runtimes (id) VALUES (?)", True)):
            with self.subTest(sql=sql):
                self.assertEqual(pg.pg_write_wakes(sql), wakes)


class LeaseCopyRulesTest(StoreCase):
    """pg.LeaseCopy on rows as lease_copy_read gives them (a SQLite Store as the judge: every
    pid is this host's)."""

    def copy(self, leases, runtimes):
        cols = store.Store._RUNTIME_COLS.split(", ")
        rows = [tuple(rt.get(c) for c in cols) for rt in runtimes]
        return pg.LeaseCopy({"leases": leases, "runtimes": rows, "hosts": []}, (1, 1), 0.0)

    def runtime(self, rid, pid=None, **kw):
        rt = {"id": rid, "handle": "h-" + rid, "conversation": "conv-" + rid, "harness": "x", "pid": pid,
              "pid_start": store.process_start(pid) if pid else None, "started_at": 1.0,
              "heartbeat_at": time.time() + store.BEAT_AHEAD if pid else time.time()}
        rt.update(kw)
        return rt

    def test_the_writer_s_own_lease_that_may_have_lapsed_is_left_to_the_database_at_every_offset(self):
        # A partition at every offset: `now` and the copy's last word from the server (`heard`)
        # from 3 s before the lease's expiry to 3 s after it, in steps of 0.1 s. The copy answers a
        # write under the writer's own exclusive lease only while the lease cannot have lapsed
        # (safe mode's margin), or once it heard from the server a margin after the lapse.
        exp = time.time() + 100
        me = self.runtime("me", os.getpid())
        c = self.copy([("src/x.py", "me", "exclusive", "", exp), ("docs", "me", "append", "", exp)], [me])
        steps = [exp + i / 10.0 for i in range(-30, 31)]
        for now in steps:
            for heard in [h for h in steps if h <= now] + [None]:
                got = c.hook_write_decision("conv-me", None, ["src/x.py"], now, self.st, heard=heard)
                safe = now + store.SAFE_MARGIN < exp or (heard is not None and heard >= exp + store.SAFE_MARGIN)
                self.assertEqual(got is not None, safe, (now - exp, heard and heard - exp))
                if got is not None:
                    self.assertEqual(got["blocking"], [])
        # Another name, or the writer's append lease: the copy answers as before.
        self.assertEqual(c.write_conflicts("me", ["src/y.py", "docs/a.md"], exp + 1, self.st, heard=exp - 5), [])

    def test_a_live_holder_blocks_an_expired_lease_or_an_unsure_holder_leaves_it_to_the_database(self):
        now = time.time()
        me = self.runtime("me", os.getpid())
        live = self.runtime("live", os.getpid())
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        proc.wait()
        dead = self.runtime("dead", proc.pid, pid_start=1)
        ended = self.runtime("ended", os.getpid(), ended_at=now - 1)
        rts = [me, live, dead, ended]
        lease = lambda name, rid, exp=now + 60, mode="exclusive": (name, rid, mode, "", exp)
        c = self.copy([lease("src", "live"), lease("old.py", "live", now - 1), lease("d.py", "dead"),
                       lease("e.py", "ended"), lease("mine.py", "me")], rts)
        got = c.hook_write_decision("conv-me", None, ["src/a.py"], now, self.st)
        self.assertEqual((got["runtime"]["id"], [(b["resource"], b["requested"]) for b in got["blocking"]]),
                         ("me", [("src", "src/a.py")]))
        self.assertEqual(c.write_conflicts("me", ["mine.py", "free.py"], now, self.st), [])
        for name in ("old.py", "d.py", "e.py"):
            with self.subTest(name=name):
                self.assertIsNone(c.write_conflicts("me", [name], now, self.st))
        self.assertIsNone(c.hook_write_decision("conv-dead", None, ["free.py"], now, self.st),
                          "the conversation's newest runtime is not surely live")
        self.assertEqual(c.hook_write_decision("conv-none", None, ["free.py"], now, self.st)["runtime"], None)


# --------------------------------------------------------------------------- pgsession (issue 25)
class PgBoundaryRoundTripTest(PostgresEngine, StoreCase):
    """A hook boundary's reads and writes in few waits on PostgreSQL (docs/postgresql.md,
    "SessionStart and message delivery in few waits"): the figures are pinned, and the delivery
    rules (a body shown once, marked only when shown, re-delivered as a reminder until acked, a
    lost-lease note told once) hold when a parallel boundary changes the inbox in between."""

    # Before pgsession: pending_context 1 with nothing open, 4 with one queued message (the
    # existence read, the open deliveries under the lock, the body, COMMIT), 3 for a reminder;
    # SessionStart's lease lines 2 or 3 (leases_of, the peers' rows, their count).
    NOW = {"nothing open": 1, "one queued message": 2, "a reminder": 2, "two queued, one lost note": 2,
           "nothing, with the lost read": 1, "session leases": 1}

    def trips(self, fn, *args, **kw):
        before = self.st.conn.round_trips
        out = fn(*args, **kw)
        return self.st.conn.round_trips - before, out

    def test_round_trips_of_a_boundary(self):
        a, b = self.rt(), self.rt()
        self.st.claim(a, ["src/x.py"])
        got = {}
        got["nothing open"], text = self.trips(self.st.pending_context, b)
        self.assertIsNone(text)
        self.st.send(a, "hello", b)
        got["one queued message"], text = self.trips(self.st.pending_context, b)
        self.assertIn("hello", text)
        got["a reminder"], text = self.trips(self.st.pending_context, b)
        self.assertNotIn("hello", text)
        self.assertIn("#", text)
        self.st.ack_shown(b)
        self.st.send(a, "one", b)
        self.st.send(a, "two", b)
        self.st.claim(b, ["src/y.py"])
        with self.st.transaction():
            self.st._lose(b, "src/y.py", "exclusive", a, "peer-a", store.now())
        got["two queued, one lost note"], (lost, text) = self.trips(self.st.boundary_context, b)
        self.assertIn("src/y.py", lost)
        self.assertTrue("one" in text and "two" in text)
        got["nothing, with the lost read"], out = self.trips(self.st.boundary_context, a)
        self.assertEqual(out, ("", None))
        got["session leases"], parts = self.trips(self.st.hook_session_leases, b, 5)
        self.assertEqual((parts["mine"], [h["resource"] for h in parts["held"]], parts["total"]),
                         ([], ["src/x.py"], 1))  # its own was lost to a (_lose drops it)
        self.assertEqual(got, self.NOW)

    def test_the_old_path_gives_the_same_answers(self):
        # The same inbox read by the two-wait path and by SQLite's statements (the old path, on
        # this engine) from the same state: the same text, the same marks.
        a, b = self.rt(), self.rt()
        for body in ("first", "second " * 200, "third"):
            self.st.send(a, body, b)
        fast = self.st.pending_context(b, budget=1200)
        marks = self.st.q("SELECT message, state, shown FROM deliveries WHERE recipient = ? ORDER BY message",
                          (b,)).fetchall()
        c = self.rt()
        for body in ("first", "second " * 200, "third"):
            self.st.send(a, body, c)
        with self.st.transaction():  # inside a transaction: the old path (nothing speculates there)
            slow = self.st.pending_context(c, budget=1200)
        ids = lambda t: re.sub(r"(#|ack )\d+", r"\1N", t)
        self.assertEqual(ids(fast), ids(slow))
        self.assertEqual([r[1:] for r in marks], [r[1:] for r in self.st.q(
            "SELECT message, state, shown FROM deliveries WHERE recipient = ? ORDER BY message", (c,)).fetchall()])
        self.assertIn("first", fast)
        self.assertNotIn("third", fast)  # the second did not fit: the rest waits, in order

    def test_a_parallel_boundary_between_the_two_waits_shows_each_body_once(self):
        a, b = self.rt(), self.rt()
        self.st.send(a, "only once", b)
        other = self.open_store()
        self.addCleanup(other.close)
        seen, speculate = [], self.st._speculate

        def racing(*args):  # the other boundary runs, and commits, after this one's read
            seen.append(other.pending_context(b))
            return speculate(*args)
        self.st._speculate = racing
        mine = self.st.pending_context(b)
        self.st._speculate = speculate
        self.assertEqual(len(seen), 1, "the read and the write are two steps")
        texts = seen + [mine]
        self.assertEqual(sum(t.count("only once") for t in texts), 1, texts)
        self.assertEqual(self.st.q("SELECT state, shown FROM deliveries WHERE recipient = ?", (b,)).fetchall(),
                         [("delivered", 2)])  # shown by the other as a body, then by this one as a reminder
        self.assertIn("only once", seen[0])


class PgRegisterRoundTripTest(PostgresEngine, StoreCase):
    """SessionStart's registration: the take-over's reads made before the insert and the
    inherited deliveries counted by the server, so a new conversation's register waits once (its
    guess, then COMMIT; 4 before), one that supersedes a runtime holding leases, which the hook
    saw on the copy (live=True), twice (5 before); the turn goes with it. The records and audit
    rows are the same."""

    def trips(self, fn, *args, **kw):
        before = self.st.conn.round_trips
        out = fn(*args, **kw)
        return self.st.conn.round_trips - before, out

    def test_register_waits_and_records(self):
        got = {}
        got["new conversation, with its turn"], first = self.trips(
            self.st.register, conversation="conv", harness="claude", turn="busy")
        self.assertEqual(self.st.turn(first["id"])["state"], "busy")
        peer = self.rt()
        self.st.claim(first["id"], ["src/b.py", "src/a.py"])
        self.st.send(peer, "kept for the conversation", first["id"])
        self.st.bye(first["id"])
        second = self.st.register(conversation="conv", harness="claude")  # inherits the open delivery
        self.st.claim(second["id"], ["src/b.py", "src/a.py"])
        got["superseding one with leases"], third = self.trips(
            self.st.register, conversation="conv", harness="claude", turn="busy", live=True)
        self.st.set_turn(third["id"], "idle")
        got["same process: heartbeat with its turn"], _ = self.trips(self.st.heartbeat, third["id"], turn="busy")
        self.assertEqual(self.st.turn(third["id"])["state"], "busy")
        self.assertEqual(got, {"new conversation, with its turn": 1, "superseding one with leases": 2,
                               "same process: heartbeat with its turn": 1})  # 2 before: heartbeat, set_turn
        self.assertEqual([l["resource"] for l in self.st.leases_of(third["id"])], ["src/a.py", "src/b.py"])
        self.assertEqual(self.st.runtime(second["id"])["superseded_by"], third["id"])
        self.assertEqual(self.st.turn(third["id"])["state"], "busy")
        rows = {r[0]: json.loads(r[1]) for r in self.st.q(
            "SELECT event, data FROM audit WHERE event IN ('message.inherited', 'runtime.superseded')").fetchall()}
        self.assertEqual(rows, {"message.inherited": {"deliveries": 1},
                                "runtime.superseded": {"moved_leases": ["src/a.py", "src/b.py"]}})
        raw = self.st.q("SELECT data FROM audit WHERE event = 'message.inherited'").fetchone()[0]
        self.assertEqual(raw, json.dumps({"deliveries": 1}, sort_keys=True, separators=(",", ":")))
        self.assertEqual([m["id"] for m in self.st.open_messages(third["id"])], [1])


class SessionLeasesCopyTest(StoreCase):
    """LeaseCopy.hook_session_leases: the database's answer on the copy, or None when unsure."""

    copy, runtime = LeaseCopyRulesTest.copy, LeaseCopyRulesTest.runtime

    def test_the_lease_lines_from_the_copy(self):
        now = time.time()
        rts = [self.runtime("me", os.getpid()), self.runtime("live", os.getpid()),
               self.runtime("ended", os.getpid(), ended_at=now - 1)]
        lease = lambda name, rid, exp=now + 60, mode="exclusive": (name, rid, mode, "p", exp)
        c = self.copy([lease("a.py", "live"), lease("b.py", "ended"), lease("c.py", "live", mode="append"),
                       lease("d.py", "me", now - 5), lease("e.py", "live")], rts)
        got = c.hook_session_leases("me", 1, now, self.st)
        self.assertEqual(got, {"mine": ["d.py"], "held": [{"resource": "a.py", "handle": "h-live", "purpose": "p"}],
                               "total": 2, "from": "copy"})
        self.assertEqual(c.hook_session_leases("me", 0, now, self.st)["total"], 0)
        unsure = self.copy([lease("a.py", "live", now - 1)], rts)  # a heartbeat may have lengthened it
        self.assertIsNone(unsure.hook_session_leases("me", 5, now, self.st))
        unknown = self.copy([lease("a.py", "nobody")], rts)
        self.assertIsNone(unknown.hook_session_leases("me", 5, now, self.st))
