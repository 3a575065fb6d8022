#!/usr/bin/env python3
"""The per-host coord process for a PostgreSQL project (docs/postgresql.md): coord's commands
start it on demand (hostclient.start_host), SessionStart in the background, a person with
`coord db start`.

It is the only process that imports the PostgreSQL driver (psycopg 3, through the PostgreSQL
engine, pg.py) and holds the server connections; hooks and commands stay stdlib and reach
it over a private Unix socket in the state directory (hostclient.HostClient). One request is one
store operation, run in one transaction here, so a claim is one round trip for its caller.
`begin` binds one server connection to the client's socket until `commit` or `rollback` (a
socket that closes first rolls back), for the callers that make several operations one
read-check-write (`with st.transaction():`).

A module of its own because it is a new outside thing: a long-lived process with a socket,
threads and a driver, none of which a hook or command may load (the ladder: host -> pg -> hostclient -> store).

    python3 host.py serve --dsn DSN --project PROJECT [--socket PATH] [--pool N] [--idle S]
    python3 host.py supervise ...same options...   (what hostclient.start_host runs, detached)

`serve` is the process itself, in the foreground. `supervise` runs `serve` as its child and
starts it again after a crash (after 0.1 s, doubling to 5 s; back to 0.1 s once a child lived a
minute), and ends when its child ends cleanly (idle for --idle seconds) or on SIGTERM. Either
holds an flock on <socket>.lock, so a state directory has one at a time: a second one exits 0
at once ("already running"); the one holding it may replace a stale socket file.
"""

import argparse
import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import hostclient
import pg
import store

# The Store methods a client may call by name; anything else is refused. Methods that read the
# *caller's* environment, terminal or process ancestry (caller, person_runtime, confirm_named,
# conversation_successor, confirm_attachment) are not here: the caller computes those facts in
# its own process and sends them as data to decide_caller / decide_person_runtime, below
# (docs/postgresql.md, "A request over the socket").
HOST_OPS = frozenset("""
    hosts register runtime resolve_runtime usable_runtime runtime_live successor last_runtime_of
    find_conversation_runtime unended_subagents superseded_attachment hold_parked unhold_parked
    end_parked turn set_turn claim_nudge heartbeat take_lost bye session_end held_again reap live_runtimes
    overlapping conflicts write_conflicts peer_exclusive_leases claim leases_of renew release
    all_leases release_landed exclusive_claims_since send work_recipient open_messages unacked_counts inbox ack
    pending_context insert_work work resolve_work update_work works works_of_runtimes
    audit_lines audit_story runtimes_of claim_integration integration_fence confirm_fence
    work_hosts
""".split())
# Routing coord and hook.py here: the decide half of the caller-side facts (the caller
# sends what store.caller_facts / person_key gathered in its own process) and the two Store
# methods coord's commands use beyond the list above.
HOST_OPS = HOST_OPS | frozenset(["decide_caller", "decide_person_runtime", "ack_shown", "audit"])
TRANSACTION_OPS = frozenset(["begin", "commit", "rollback", "ping", "doctor"])
CLOCK_EVERY = 300.0  # seconds between two measurements of the server's clock
# hosts: operations after which this host's exclusive leases may be new or
# longer, so the safe-mode file is rewritten soon (the timer rewrites it every beat anyway).
SAFE_REFRESH_OPS = frozenset(["claim", "renew", "heartbeat", "register", "session_start", "session_beat",
                              "hold_parked"])
REAP_EVERY = 5.0  # seconds between two reaps of the project (Server.keep_reaping)
# the lease copy (LeaseCopyKeeper) is read again at least every COPY_EVERY seconds,
# and answers only while its last read and the LISTEN connection's last sign of life are younger
# than COPY_STALE times that.
COPY_EVERY = 1.0
COPY_STALE = 3.0
LISTEN_RETRY = 0.1  # seconds before the LISTEN connection is made again, doubling to 5 s
# A stopped client (docs/postgresql.md): a transaction a client opened over the socket (begin)
# is rolled back by this process when no request comes for HOST_TXN_IDLE seconds or once it is
# HOST_TXN_MAX seconds old, as the server ends a session idle in its transaction (pg.PG_BOUNDS).
# Sooner than another host would take it for stuck (pg.PG_STUCK_AFTER): this process, still
# running, lets the lock go itself, and the rest of its sessions queued for the lock go on.
HOST_TXN_IDLE, HOST_TXN_MAX = pg.PG_STUCK_AFTER - 1.0, float(pg.PG_LOCK_TIMEOUT)
COPY_OPS = frozenset(["hook_write_decision"])  # what the copy may answer (Server.answer)
# SessionStart's reads from the copy too, and a boundary's notices in one operation.
COPY_OPS = COPY_OPS | frozenset(["hook_conversation_runtime", "hook_session_leases"])
HOST_OPS = HOST_OPS | frozenset(["boundary_context", "session_leases", "session_start", "session_beat"])
HOST_OPS = HOST_OPS | COPY_OPS | frozenset(["ended_conversations"])  # the activity files' pruning
HOST_OPS = HOST_OPS | frozenset(["turns"])  # the live view and status read every turn at once (view.fleet)


class _Pool:
    """Stores (one server connection each) for one project; a Store belongs to the thread that
    checked it out, as a sqlite3 connection belongs to its thread."""

    def __init__(self, dsn, project, size):
        self.dsn, self.project = dsn, project
        self.free = []
        self.lock = threading.Lock()
        self.sem = threading.BoundedSemaphore(size)

    def take(self):
        self.sem.acquire()
        with self.lock:
            st = self.free.pop() if self.free else None
        if st is not None and _connection_gone(st):  # server crash: a connection of a server that restarted
            try:
                st.close()
            except Exception:
                pass
            st = None
        try:
            if st is None:
                st = pg.Store({"dsn": self.dsn, "project": self.project}, migrate=False)
            st.adopt_thread()
        except BaseException:
            self.sem.release()
            raise
        return st

    def give(self, st, broken=False):
        try:
            st.end_transaction(commit=False)  # what a client left open is rolled back
        except store.CoordError:
            broken = True
        if broken:
            try:
                st.close()
            except Exception:
                pass
            st = None
        if st is not None:
            with self.lock:
                self.free.append(st)
        self.sem.release()


# -- server crash: after the PostgreSQL server crashed or restarted, every
# idle connection in the pool is dead, but the driver learns it only when a request uses it, so
# the first requests after the server is back would each fail (exit 4) on a stale connection.
# An idle connection has nothing to read (no LISTEN on it, no query in flight): one that is
# readable holds the server's goodbye (FATAL: terminating connection ...) or its EOF, and is
# dropped before use; the next Store connects afresh (and fails, exit 4, while the server is down).

def _connection_gone(st):
    import select
    raw = getattr(getattr(st, "conn", None), "raw", None)
    if raw is None:
        return False
    try:
        if raw.closed or raw.broken:
            return True
        readable, _, _ = select.select([raw.pgconn.socket], [], [], 0)
    except Exception:  # no socket any more
        return True
    return bool(readable)


def _still_there(bound):
    """EnvError when the server ended the session of a client's open transaction while it waited
    for the client's next request (a stopped client: the server's idle bound, or another host's
    coord_cut_stuck): nothing of it was written, since its COMMIT was never sent."""
    if _connection_gone(bound):
        raise store.EnvError("the PostgreSQL server ended this transaction while it waited for its next request"
                             " (a client stopped or slow for %g s or more): nothing of it was written"
                             % pg.PG_STUCK_AFTER, "run the command again")


# -- the lease copy (docs/postgresql.md "The write decision from memory"):
# the hook's PreToolUse question answered from memory. One thread keeps a LISTEN connection (a
# session of its own, pg.PgListener) and counts the wake-ups; another re-reads the whole copy
# (store.Store.lease_copy_read, one snapshot on a pooled connection) after each wake-up, every
# COPY_EVERY seconds, and after the LISTEN connection came back. The copy is fresh while the
# LISTEN connection is up and was seen alive within COPY_STALE, and its read began after the
# last wake-up counted and after the LISTEN began (generation); otherwise the database answers.

class LeaseCopyKeeper:
    def __init__(self, dsn, project, pool, judge, every=COPY_EVERY, stale=COPY_STALE, retry=LISTEN_RETRY):
        self.dsn, self.project, self.pool, self.judge, self.retry = dsn, project, pool, judge, retry
        self.every, self.stale = every, stale * every
        self.lock = threading.Lock()
        self.epoch = 0  # LISTEN sessions begun
        self.wakes = 0  # wake-ups counted (a new LISTEN session counts as one)
        self.listening = False
        self.seen = 0.0  # monotonic time the LISTEN connection last answered or delivered
        self.copy = None  # pg.LeaseCopy
        self.due = threading.Event()
        self.listener = None
        self.refreshes = self.hits = self.misses = self.reconnects = 0
        self.last_error = None
        threading.Thread(target=self.keep_listening, daemon=True).start()
        threading.Thread(target=self.keep_refreshing, daemon=True).start()

    def generation(self):
        with self.lock:
            return (self.epoch, self.wakes)

    def _woken(self, n):
        with self.lock:
            self.wakes += n
            self.seen = time.monotonic()
        self.due.set()

    def keep_listening(self):
        pause = self.retry
        while True:
            try:
                listener = pg.PgListener(self.dsn, self.project)
            except store.CoordError as exc:
                self.last_error = exc.message
                time.sleep(pause)
                pause = min(pause * 2, max(5.0, self.retry))
                continue
            pause = self.retry
            self.listener = listener
            with self.lock:  # LISTEN is in effect: every commit from now on wakes this connection
                self.epoch += 1
                self.wakes += 1
                self.listening = True
                self.seen = time.monotonic()
            self.due.set()
            try:
                while True:
                    n = listener.wait(self.every)
                    if n:
                        self._woken(n)
                    elif time.monotonic() - self.seen >= self.every:
                        listener.probe()  # no wake-up for a while: is the connection still there?
                        with self.lock:
                            self.seen = time.monotonic()
            except store.CoordError as exc:
                self.last_error = exc.message
            except Exception as exc:
                self.last_error = str(exc)
            with self.lock:
                self.listening = False
            self.listener = None
            listener.close()
            self.reconnects += 1
            time.sleep(pause)  # a server that just ended the session may be going down

    def keep_refreshing(self):
        while True:
            self.due.wait(self.every)
            self.due.clear()
            if not self.listening:
                continue
            generation = self.generation()  # before the snapshot: a later commit wakes us again
            started = time.monotonic()
            try:
                st = self.pool.take()
            except store.CoordError:
                time.sleep(min(self.every, 0.5))
                continue
            broken = False
            try:
                rows = st.lease_copy_read()
                self.copy = pg.LeaseCopy(rows, generation, started)
                self.refreshes += 1
            except store.CoordError:
                broken = True
            except Exception:
                broken = True
                store.log_traceback("host process: lease copy")
            finally:
                self.pool.give(st, broken)

    def fresh(self):
        """The copy, when it may answer; None otherwise."""
        copy = self.copy
        with self.lock:
            ok = (copy is not None and self.listening and copy.generation == (self.epoch, self.wakes)
                  and time.monotonic() - copy.at < self.stale and time.monotonic() - self.seen < self.stale)
        return copy if ok else None

    def answer(self, op, args, kwargs):
        """op answered from the copy, or None (the database answers)."""
        copy = self.fresh()
        result = None
        if copy is not None:
            now = store.now()
            if op == "hook_write_decision":  # when the copy last heard from the server, in server time
                with self.lock:
                    kwargs = dict(kwargs, heard=now - (time.monotonic() - max(self.seen, copy.at)))
            try:
                result = getattr(copy, op)(*args, now=now, judge=self.judge, **kwargs)
            except Exception:  # never the copy's fault in a reply: the database answers instead
                store.log_traceback("host process: lease copy answer")
                result = None
        if result is None:
            self.misses += 1
        else:
            self.hits += 1
        return result

    def status(self):
        return {"listening": self.listening, "fresh": self.fresh() is not None, "refreshes": self.refreshes,
                "hits": self.hits, "misses": self.misses, "reconnects": self.reconnects,
                "backend_pid": getattr(self.listener, "backend_pid", None), "wakes": self.wakes,
                "leases": len(self.copy.leases) if self.copy else None, "error": self.last_error}


# A request is a few levels deep (the request, kwargs, the caller's facts, the chain, a pair;
# a work record's data); one nested deeper than HOST_MAX_DEPTH is refused with an error reply,
# and the connection goes on: json.loads would raise RecursionError (a traceback in the log,
# once) near a thousand levels, and anything short of that has no business here either.
HOST_MAX_DEPTH = 32


class _TooDeep(Exception):
    pass


def _read_frame(sock):
    head = _read_exact(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">I", head)
    if size > hostclient.HOST_MAX_FRAME:
        raise ValueError("frame of %d bytes" % size)
    body = _read_exact(sock, size)
    if body is None:
        return None
    try:
        req = json.loads(body.decode("utf-8"))
    except RecursionError:
        raise _TooDeep()
    if _deeper_than(req, HOST_MAX_DEPTH):
        raise _TooDeep()
    return req


def _deeper_than(value, limit):
    """Whether `value` nests lists and objects more than `limit` levels (iteratively)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        if depth > limit:
            return True
        stack.extend((x, depth + 1) for x in v if isinstance(x, (dict, list)))
    return False


def _read_exact(sock, n):
    parts = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _error_reply(rid, exc):
    return {"id": rid, "ok": False, "error": {"class": type(exc).__name__ if isinstance(exc, store.CoordError)
                                              else "CoordError",
                                              "message": getattr(exc, "message", str(exc)),
                                              "hint": getattr(exc, "hint", None),
                                              "details": getattr(exc, "details", {})}}


# -- a host clock set ahead: every lease decision is on the server's clock.
# This process stamps every write and judges every expiry with store.now(), the server's time
# (ServerClock: monotonic clock + measured offset, so even this machine's wall clock is never
# read). The one way a client's clock could still reach a decision is an explicit `now` argument
# (most Store operations take one, for tests and for the SQLite engine's callers): a client
# whose clock is a year ahead could send reap(now=...) and expire every host's leases, or
# claim(now=...) a lease that outlives its TTL. So no request may carry it, by name or position.

_NOW_POSITIONS = {}


def _refuse_client_time(op, args, kwargs):
    if op not in _NOW_POSITIONS:
        import inspect
        names = list(inspect.signature(getattr(pg.Store, op)).parameters)[1:]  # without self
        _NOW_POSITIONS[op] = names.index("now") if "now" in names else None
    at = _NOW_POSITIONS[op]
    # None is no time at all (the operation's default: the server's clock here), which the
    # RemoteStore callers pass along (caller(now=None)); any other value is a client's time.
    if at is not None and (kwargs.get("now") is not None or (len(args) > at and args[at] is not None)):
        raise store.UsageError("the host process keeps the time: a request carries no `now` (%s)" % op,
                               "send the request without it; the server's clock decides")


# -- the caller's facts against the kernel (docs/postgresql.md "Who is calling").
# A client gathers its own ancestry chain, person key and harness pid (store.caller_facts,
# person_key, Hook.process) and sends them as data; any process of this user can connect, so a
# client could send another process's chain to be taken for that process's runtime (another
# agent's, or the person's). The socket's peer pid (SO_PEERCRED, in this process's PID namespace)
# is the kernel's word for who connected: a chain is taken only as far as it is that pid's real
# ancestry in /proc, a person key only when that pid's own session, terminal and foreground group
# are the key's, and a harness pid only when it is an ancestor of that pid. A claim the kernel
# contradicts is refused (CallerRefused); entries after the proven part that name no live
# process (an ancestor that exited meanwhile) are dropped. What no kernel fact can prove stays
# advisory: COORD_RUNTIME_ID, --runtime, the session variables, register's pid and cwd, and the
# runtime IDs every other operation names (as on SQLite, where any process of the user can write
# the database file itself).

PEER_CHECKED_OPS = frozenset(["decide_caller", "decide_person_runtime", "superseded_attachment",
                              "unended_subagents"])
PEER_HINT = ("run coord as the process it speaks for: the host process takes a caller's facts only as far as"
             " the kernel shows them for the process that connected")


def _caller_refused(message):
    return store.Refused("the host process refuses this request: %s" % message, PEER_HINT, reason="caller-facts")


class PeerFacts:
    """What the kernel says about one client connection's process: its pid (SO_PEERCRED) and,
    read on first use and kept for the connection, its ancestry in /proc."""

    def __init__(self, pid):
        self.pid = pid
        self._chain = None

    def chain(self):
        """store.ancestor_processes(pid) (nearest first, without pid itself and pid 1), one /proc
        read per process."""
        if self._chain is None:
            out = []
            parent = _stat_of(self.pid)[0] if self.pid > 0 else None
            while parent and parent > 1 and len(out) < 64:
                ppid, start = _stat_of(parent)
                out.append((parent, start))
                parent = ppid
            self._chain = out
        return self._chain

    def check(self, op, args, kwargs):
        """(args, kwargs) of op with the caller's facts the kernel proves, or CallerRefused."""
        # SO_PEERCRED gives pid 0 for a process outside this PID namespace: the kernel proves no
        # ancestry then (an empty chain), no terminal and no harness pid.
        args, kwargs = list(args), dict(kwargs)
        if op == "decide_caller":
            facts = kwargs.get("facts") if "facts" in kwargs else (args[0] if args else None)
            if not isinstance(facts, dict):
                raise TypeError("decide_caller takes the caller's facts (a dict)")
            facts = dict(facts)
            facts.pop("_environ", None)
            facts["chain"] = self.proven_chain(facts.get("chain"))
            facts.pop("harness_ancestor", None)  # Store.decide_caller reads it from the proven chain (_fact)
            facts["person"] = self.proven_person(facts.get("person"), facts["chain"])
            if "facts" in kwargs:
                kwargs["facts"] = facts
            else:
                args[0] = facts
        elif op == "decide_person_runtime":
            at = "person" in kwargs
            person = kwargs.get("person") if at else (args[0] if args else None)
            person = self.proven_person(person, self.chain())
            if at:
                kwargs["person"] = person
            else:
                args[0] = person
        else:  # superseded_attachment(conversation, pid, ...), unended_subagents(conversation, pid): the harness pid
            pid = kwargs.get("pid") if "pid" in kwargs else (args[1] if len(args) > 1 else None)
            start = kwargs.get("pid_start") if "pid_start" in kwargs else (args[2] if len(args) > 2 else None)
            if pid is not None:
                if not isinstance(pid, int) or isinstance(pid, bool):
                    raise TypeError("pid must be an integer")
                if not any(p == pid and (start is None or s == start) for p, s in [(self.pid, None)] + self.chain()):
                    raise _caller_refused("process %d is not the connecting process (%d) or one of its ancestors"
                                          % (pid, self.pid))
        return args, kwargs

    def proven_chain(self, claimed):
        """The claimed [[pid, start], ...] as far as it is the peer's real ancestry."""
        if claimed is None:
            return self.chain()
        if not isinstance(claimed, list) or not all(
                isinstance(x, (list, tuple)) and len(x) == 2 and isinstance(x[0], int) and not isinstance(x[0], bool)
                and (x[1] is None or isinstance(x[1], str)) for x in claimed):
            raise TypeError("chain must be [[pid, start], ...]")
        real = self.chain()
        proven = 0
        for (pid, start), (rpid, rstart) in zip(claimed, real):
            if pid != rpid or start != rstart:
                break
            proven += 1
        if proven < len(claimed):
            pid, start = claimed[proven]
            if start is not None and store.process_start(pid) == start:  # a live process, not this ancestry
                raise _caller_refused("its process chain names process %d, which the kernel does not show as %s of"
                                      " the process that connected (%d%s)" % (
                                          pid, "the parent" if proven == 0 else "an ancestor", self.pid,
                                          ", whose parent is %d" % real[0][0] if real else ""))
        return [list(x) for x in real[:proven]]  # the rest names processes gone meanwhile

    def proven_person(self, person, chain):
        """person_key's (key, pid, start, terminal) when the kernel shows the peer in that key's
        terminal session (its session leader, start, terminal and foreground group)."""
        if person is None:
            return [None, None, None, None]
        if not isinstance(person, (list, tuple)) or len(person) != 4:
            raise TypeError("person must be [key, pid, start, terminal]")
        key, pid, start, name = person
        if key is None:
            return [None, None, None, None]  # no person claimed: nothing to prove
        uid = os.getuid()
        if key == store.person_user_key(uid) and pid is None:
            return list(person)  # the user alone: no process, no terminal; the uid is SO_PEERCRED's
        facts = _terminal_of(self.pid)
        expected = None
        if facts is not None and isinstance(pid, int):
            pgrp, sid, tty, tpgid = facts
            expected = store.person_terminal_key(uid, tty, sid, start) \
                if tty and sid == pid and tpgid == pgrp and tpgid > 0 else None
            if expected is not None and (start is None or store.process_start(sid) != start
                                         or (sid != self.pid and sid not in [p for p, _ in chain])):
                expected = None
        if key != expected:
            raise _caller_refused("it claims the person at a terminal (%s), but the process that connected (%d) is"
                                  " not in that terminal's session and foreground" % (key, self.pid))
        return list(person)


def _stat_of(pid):
    """(parent pid, start token as store.process_start gives it) of process pid; (None, None)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()
        return int(fields[1]), fields[19].decode()
    except (OSError, ValueError, IndexError):
        return None, None


def _terminal_of(pid):
    """(pgrp, session, tty device, the tty's foreground group) of process pid, from /proc; None."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()
        return int(fields[2]), int(fields[3]), int(fields[4]), int(fields[5])
    except (OSError, ValueError, IndexError):
        return None


class _Unbound(Exception):
    def __init__(self):
        super().__init__()
        self.error = sys.exc_info()[1]


class Server:
    def __init__(self, path, dsn, project, pool=8, clock_every=CLOCK_EVERY, reap_every=REAP_EVERY,
                 copy_every=COPY_EVERY, listen_retry=LISTEN_RETRY):
        self.path, self.project = path, project
        self.pool = _Pool(dsn, project, pool)
        first = pg.Store({"dsn": dsn, "project": project})  # migrates, once, under the project lock
        self.clock = first.server_clock()
        store.set_clock(self.clock)  # every timestamp in this process: the server's time
        self.pool.free.append(first)
        self.sock = None
        threading.Thread(target=self.keep_clock, args=(clock_every,), daemon=True).start()
        # hosts: this host's heartbeat, before the first client (its runtimes' host must have a row)
        self.safe_path = hostclient.safe_state_path(path)
        self.beat_every = min(store.HOST_BEAT_EVERY, first.host_ttl / 6)
        self.beat_soon = threading.Event()
        self.beats = 0
        self.beat_once(first)
        threading.Thread(target=self.keep_host, daemon=True).start()
        self.reaps = 0
        self.cuts = 0  # client transactions rolled back for waiting too long (_cut)
        self.stuck_cut = 0  # sessions of any host ended for holding the lock while stuck (keep_cutting)
        threading.Thread(target=self.keep_reaping, args=(reap_every,), daemon=True).start()
        threading.Thread(target=self.keep_cutting, daemon=True).start()
        # the lease copy the hook's write decision is answered from (copy_every 0: none)
        self.copy = LeaseCopyKeeper(dsn, project, self.pool, first, copy_every, retry=listen_retry) \
            if copy_every else None

    # -- hosts: the host heartbeat, on the server's clock, and the safe-mode file

    def beat_once(self, st):
        """One host heartbeat and the safe-mode file it confirms. It does not reap: the
        reap timer (keep_reaping) does, every REAP_EVERY seconds, so the beat after a claim
        (beat_soon) is an upsert and one read under the project lock, not a scan of the project
        that the caller's next operation waits behind."""
        beat = st.host_beat(reap=False)
        hostclient.write_safe_state(self.safe_path, hostclient.safe_state(beat, self.clock.offset,
                                                                 getattr(self.clock, "rtt", 0.0), st.host))
        self.beats += 1

    def keep_host(self):
        """Beat every beat_every seconds, or soon after a claim or renewal (beat_soon). A beat that
        fails (the server out of reach) leaves the file as it was: its leases lapse on their own."""
        while True:
            self.beat_soon.wait(self.beat_every)
            self.beat_soon.clear()
            try:
                st = self.pool.take()
            except store.CoordError:
                time.sleep(min(self.beat_every, 1.0))
                continue
            broken = False
            try:
                self.beat_once(st)
            except Exception:
                broken = True
                time.sleep(min(self.beat_every, 1.0))
            finally:
                self.pool.give(st, broken)

    # -- the reap timer (docs/postgresql.md "Reaping on a timer"): on PostgreSQL no hot
    #    operation scans the project for dead runtimes and expired leases (Store.reap_on_timer);
    #    this thread runs the whole store.Store.reap every `every` seconds instead. Readers judge
    #    expiry and liveness as they read, so what it has not reached yet blocks nobody; it
    #    bounds how long a dead runtime's rows stay (and its runtime.reaped / lease.expired audit
    #    rows wait) to about `every` plus one reap.

    def keep_reaping(self, every):
        def reap(st):
            st.reap()
            self.reaps += 1
        self._every(every, reap, "reap")

    def _every(self, every, work, what):
        """Run work(store) on a pooled connection every `every` seconds, forever; a connection
        that failed goes back to the pool as broken, and an unexpected fault to errors.log."""
        while True:
            time.sleep(every)
            try:
                st = self.pool.take()
            except store.CoordError:
                continue
            broken = False
            try:
                work(st)
            except store.CoordError:
                broken = True
            except Exception:
                broken = True
                store.log_traceback("host process: " + what)
            finally:
                self.pool.give(st, broken)

    # -- a stopped client (docs/postgresql.md): the server ends a session idle in its transaction
    #    (pg.PG_BOUNDS), but not one stopped between two statements its pipeline sent with no
    #    Sync after them (a whole host process stopped mid-operation: no server timeout runs
    #    there). Every host process looks every PG_CUT_EVERY seconds for a session of any host that
    #    holds the project's lock and has waited for its client PG_IDLE_IN_TRANSACTION seconds,
    #    and ends it (Store.cut_stuck): its transaction is rolled back, never acknowledged.

    def keep_cutting(self, every=pg.PG_CUT_EVERY):
        def cut(st):
            self.stuck_cut += st.cut_stuck() or 0
        self._every(every, cut, "cut stuck")

    def keep_clock(self, every):
        """Measure the server's clock again every `every` seconds (a failed measurement keeps
        the last offset; the next request reports the server's trouble itself)."""
        while True:
            time.sleep(every)
            try:
                st = self.pool.take()
            except store.CoordError:
                continue
            broken = False
            try:
                st.measure_clock(self.clock)
            except Exception:
                broken = True
            finally:
                self.pool.give(st, broken)

    def listen(self):
        store.private_state_dir(os.path.dirname(self.path))
        try:
            os.unlink(self.path)  # a stale socket of a dead server (the caller holds the host lock)
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(self.path)
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        sock.listen(64)
        self.sock = sock

    def serve_forever(self, idle=0.0, parent=None):
        """Accept until idle for `idle` seconds with no client connected (0: forever), or, with
        `parent` (the supervisor's pid), until the supervisor is gone: a supervisor killed
        outright released the lock, and the next one must not find this process serving."""
        self.last = time.monotonic()
        self.clients = 0
        self.sock.settimeout(1.0 if idle or parent else None)
        while True:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                if parent is not None and os.getppid() != parent:
                    self.close()
                    return
                if idle and self.clients == 0 and time.monotonic() - self.last >= idle:
                    self.close()
                    return
                continue
            conn.settimeout(None)
            self.last = time.monotonic()
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def close(self):
        try:
            os.unlink(self.path)
        except OSError:
            pass
        self.sock.close()

    def handle(self, conn):
        bound = None  # the Store of an open begin ... commit
        began = None  # when it began (monotonic)
        self.clients += 1
        try:
            peer = self._peer(conn)  # the kernel's pid of the client (SO_PEERCRED)
            if peer is None:
                return
            while True:
                began = (began or time.monotonic()) if bound is not None else None
                # a stopped client: an open transaction waits HOST_TXN_IDLE for its next request,
                # and lives HOST_TXN_MAX in all (socket.timeout below)
                conn.settimeout(None if began is None else max(0.001, min(
                    HOST_TXN_IDLE, began + HOST_TXN_MAX - time.monotonic())))
                try:
                    req = _read_frame(conn)
                except socket.timeout:
                    cut, bound = bound, None
                    self._cut(conn, cut, time.monotonic() - began)
                    return
                except (ValueError, UnicodeDecodeError):
                    return
                except _TooDeep:
                    reply = _error_reply(None, store.UsageError(
                        "bad request: nested deeper than %d levels" % HOST_MAX_DEPTH,
                        "send the operation's arguments as coord's own client does"))
                else:
                    if req is None:
                        return
                    reply, bound = self.answer(req, bound, peer)
                data = json.dumps(reply, separators=(",", ":")).encode("utf-8")
                conn.sendall(struct.pack(">I", len(data)) + data)
        except OSError:
            pass
        except Exception:  # never a traceback in the log: errors.log has it, the client loses its connection
            store.log_traceback("host process: a client connection")
        finally:
            if bound is not None:
                self.pool.give(bound)  # rolls back what was not committed
            conn.close()
            self.clients -= 1
            self.last = time.monotonic()

    def _cut(self, conn, bound, age):
        """A client's transaction over the socket waited too long for its next request (a client
        stopped, or slow): roll it back now, so the project's lock is let go, and answer the next
        request the client sends with the error, then close. Nothing of it was written."""
        self.pool.give(bound)  # rolls back (a connection the server ended meanwhile is dropped)
        self.cuts += 1
        why = ("no request came for %g s" % HOST_TXN_IDLE if age < HOST_TXN_MAX
               else "it was open for %g s" % HOST_TXN_MAX)
        conn.settimeout(None)
        try:
            req = _read_frame(conn)
        except (ValueError, UnicodeDecodeError, _TooDeep):
            return
        if req is None:
            return
        err = store.EnvError("the host process rolled back this transaction (%s): nothing of it was written" % why,
                             "run the command again")
        data = json.dumps(_error_reply(req.get("id") if isinstance(req, dict) else None, err),
                          separators=(",", ":")).encode("utf-8")
        conn.sendall(struct.pack(">I", len(data)) + data)

    def _peer(self, conn):
        """The client's PeerFacts when it runs as this user (SO_PEERCRED), else None."""
        try:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            pid, uid, _gid = struct.unpack("3i", creds)
        except (OSError, AttributeError):
            return None
        return PeerFacts(pid) if uid == os.getuid() else None

    def answer(self, req, bound, peer=None):
        rid = req.get("id") if isinstance(req, dict) else None
        try:
            if not isinstance(req, dict) or req.get("v") != hostclient.HOST_PROTOCOL:
                raise store.UsageError("unknown request (protocol %r, this host process speaks %d)"
                                       % (req.get("v") if isinstance(req, dict) else None, hostclient.HOST_PROTOCOL))
            if req.get("project") != self.project:
                raise store.EnvError("this host process serves project %s, not %s" % (self.project, req.get("project")))
            op, args, kwargs = req.get("op"), req.get("args") or [], req.get("kwargs") or {}
            if op in TRANSACTION_OPS:
                return self._transaction_op(rid, op, req, bound)
            if op not in HOST_OPS or not isinstance(args, list) or not isinstance(kwargs, dict):
                raise store.UsageError("the host process does not run %r" % (op,))
            _refuse_client_time(op, args, kwargs)  # clock: expiry is judged by the server's clock alone
            if peer is not None and op in PEER_CHECKED_OPS:
                args, kwargs = peer.check(op, args, kwargs)  # the caller's facts against the kernel
            if op in COPY_OPS and bound is None and self.copy is not None:
                result = self.copy.answer(op, args, kwargs)  # from memory when fresh
                if result is not None:
                    return {"id": rid, "ok": True, "result": result}, None
            if bound is not None:
                _still_there(bound)
                result = _plain(getattr(bound, op)(*args, **kwargs))
                bound.settle()  # a stopped client: the server's idle bound runs only after a Sync
                if op in SAFE_REFRESH_OPS:
                    self.beat_soon.set()  # hosts: the safe-mode file (after the commit, as the next beat)
                return {"id": rid, "ok": True, "result": result}, bound
            st = self.pool.take()
            broken = False
            try:
                result = _plain(getattr(st, op)(*args, **kwargs))
                if op in SAFE_REFRESH_OPS:
                    self.beat_soon.set()  # hosts: rewrite the safe-mode file soon
                return {"id": rid, "ok": True, "result": result}, None
            except store.EnvError:
                broken = True
                raise
            finally:
                self.pool.give(st, broken)
        except _Unbound as unbound:  # the commit failed: its Store is gone, the connection unbound
            return _error_reply(rid, unbound.error), None
        except store.CoordError as exc:
            return _error_reply(rid, exc), self._settled(bound)
        except (TypeError, ValueError) as exc:  # wrong arguments from a client
            return _error_reply(rid, store.UsageError("bad request: %s" % exc)), bound
        except Exception as exc:
            store.log_traceback("host process: %s" % req.get("op") if isinstance(req, dict) else "host process")
            return _error_reply(rid, store.CoordError("internal error in the host process: %s" % exc)), bound

    def _settled(self, bound):
        """bound after a refused operation, its pipeline synced (Store.settle) so the server's idle
        bound runs while the client decides; a bound whose connection failed stays for its commit
        or rollback to report."""
        if bound is not None:
            try:
                bound.settle()
            except store.CoordError:
                pass
        return bound

    def _transaction_op(self, rid, op, req, bound):
        if op == "ping":
            return {"id": rid, "ok": True, "result": {"pid": os.getpid(), "project": self.project,
                                                     "now": store.now(), "clock_measurements":
                                                     self.clock.measurements, "host_beats": self.beats,
                                                     "reaps": self.reaps, "cuts": self.cuts,
                                                     "stuck_cut": self.stuck_cut, "lease_copy":
                                                     self.copy.status() if self.copy else None}}, bound
        if op == "doctor":  # --doctor's security lines (pg.pg_doctor_checks), on this host's own connection
            st = self.pool.take()
            broken = False
            try:
                lines = [[bool(ok), line] for ok, line in pg.pg_doctor_checks(st, self.pool.dsn)]
            except store.EnvError:
                broken = True
                raise
            finally:
                self.pool.give(st, broken)
            return {"id": rid, "ok": True, "result": lines}, bound
        if op == "begin":
            if bound is not None:
                raise store.UsageError("a transaction is already open on this connection")
            st = self.pool.take()
            try:
                st.open_transaction(bool((req.get("kwargs") or {}).get("write", True)))
                st.settle()  # the lock is held once this returns, and the server's idle bound runs
            except BaseException:
                self.pool.give(st, True)
                raise
            return {"id": rid, "ok": True, "result": None}, st
        if bound is None:
            raise store.UsageError("no transaction is open on this connection")
        if op == "rollback" and _connection_gone(bound):  # the server ended it: rolled back already
            self.pool.give(bound, True)
            return {"id": rid, "ok": True, "result": None}, None
        try:
            if op == "commit":
                _still_there(bound)
            bound.end_transaction(commit=op == "commit")
        except store.CoordError:
            self.pool.give(bound, True)
            raise _Unbound()
        self.pool.give(bound)
        if op == "commit":
            self.beat_soon.set()  # hosts: what it committed may be a claim (the safe-mode file)
        return {"id": rid, "ok": True, "result": None}, None


def _take_lock(path):
    """The flock on <socket>.lock (kept open for the life of the process), or None when another
    process holds it. The lock file records the holder's pid."""
    store.private_state_dir(os.path.dirname(path))
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, b"%d\n" % os.getpid())
    return fd


RESTART_FIRST, RESTART_MAX, RESTART_RESET = 0.1, 5.0, 60.0


def supervise(argv_serve):
    """Run `serve` as a child, again after each crash; -> 0 when it ends cleanly or on SIGTERM."""
    child = [None]
    stopping = [False]

    def stop(signum, frame):
        stopping[0] = True
        if child[0] is not None and child[0].poll() is None:
            child[0].terminate()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    pause = RESTART_FIRST
    restarts = 0
    while not stopping[0]:
        started = time.monotonic()
        child[0] = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve", "--supervised"] + argv_serve)
        code = child[0].wait()
        if stopping[0] or code == 0:
            return 0
        if code == store.EXIT_ENV:  # the worker refused to start (no driver, no server, a bad URL):
            print("host.py supervise: the host process could not start (exit %d); not restarting it" % code,
                  file=sys.stderr, flush=True)  # restarting cannot fix that; the next command's start says why
            return code
        restarts += 1
        print("host.py supervise: the host process exited with %s; starting it again (%d)" % (code, restarts),
              file=sys.stderr, flush=True)
        pause = RESTART_FIRST if time.monotonic() - started >= RESTART_RESET else min(pause * 2, RESTART_MAX)
        time.sleep(pause)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="host.py", allow_abbrev=False,
                                     description="the per-host coord process of a PostgreSQL project")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("serve", "supervise"):
        cmd = sub.add_parser(name, allow_abbrev=False)
        cmd.add_argument("--dsn", help="default: $COORD_HOST_DSN, else the project's URL (store.read_project_url)")
        cmd.add_argument("--project", required=True)
        cmd.add_argument("--socket")
        cmd.add_argument("--pool", type=int, default=8)
        cmd.add_argument("--idle", type=float, default=0.0, help="end after this many idle seconds (0: never)")
        cmd.add_argument("--clock-every", type=float, default=CLOCK_EVERY, help=argparse.SUPPRESS)
        cmd.add_argument("--reap-every", type=float, default=REAP_EVERY, help=argparse.SUPPRESS)
        cmd.add_argument("--copy-every", type=float, default=COPY_EVERY, help=argparse.SUPPRESS)  # 0: no copy
        cmd.add_argument("--listen-retry", type=float, default=LISTEN_RETRY, help=argparse.SUPPRESS)
        if name == "serve":
            cmd.add_argument("--supervised", action="store_true", help=argparse.SUPPRESS)
    # What `coord db setup` runs (the person's command): the admin URL comes in the environment
    # (COORD_ADMIN_URL), never in argv (/proc/PID/cmdline is public and shells keep history).
    setup = sub.add_parser("setup", allow_abbrev=False,
                           help="create a project's roles, schema, grants and row-level security (admin, once);"
                                " the admin URL in $%s" % store.PG_ADMIN_URL_ENV)
    setup.add_argument("--project", required=True)
    setup.add_argument("--login", action="append", default=[], help="a host's or person's login role (repeatable)")
    setup.add_argument("--json", action="store_true", help="one JSON object: the statements, or the error")
    # coord db migrate: run here, a process of its own, so coord's CLI never imports the
    # driver; the target comes in COORD_MIGRATE_TARGET (a URL may hold a password: not in argv).
    cmd = sub.add_parser("migrate", allow_abbrev=False)
    cmd.add_argument("--project", required=True)
    # coord db join (a host joins a project already in PostgreSQL): the URL in COORD_JOIN_URL.
    cmd = sub.add_parser("join", allow_abbrev=False)
    cmd.add_argument("--project", required=True)
    args = parser.parse_args(argv)
    if args.command == "migrate":
        return migrate_main(args)
    if args.command == "join":
        return migrate_main(args, lambda: pg.join_project(args.project, os.environ.get("COORD_JOIN_URL", "")))
    if args.command == "setup":  # the pg-security block of store.py does the work; print what it runs
        return setup_main(args)
    try:
        if not store.valid_project_id(args.project):
            raise store.UsageError("project ID %r must be letters, digits, '.', '_' or '-'" % args.project)
        path = args.socket or hostclient.project_host_socket(args.project)
        dsn = args.dsn or os.environ.get("COORD_HOST_DSN") or store.read_project_url(args.project)
        if not dsn:
            raise store.EnvError("no database for project %s: pass --dsn, or move it to PostgreSQL first"
                                 % args.project, "the person runs: .coord/coord db migrate postgresql://...")
        os.environ["COORD_HOST_DSN"] = dsn  # to the worker by its environment, not its argv (/proc is public)
        pool = store.check_int(args.pool, "--pool", 1, 200)
        idle = store.check_float(args.idle, "--idle", 0, 86400)
        clock_every = store.check_float(args.clock_every, "--clock-every", 0.05, 86400)
        reap_every = store.check_float(args.reap_every, "--reap-every", 0.05, 3600)
        copy_every = store.check_float(args.copy_every, "--copy-every", 0, 3600)
        listen_retry = store.check_float(args.listen_retry, "--listen-retry", 0.01, 600)
        if args.command == "supervise" or not args.supervised:
            if _take_lock(path) is None:
                print("host process already running for %s" % path, flush=True)
                return 0
        if args.command == "supervise":
            return supervise(["--project", args.project, "--socket", path,
                              "--pool", str(pool), "--idle", repr(idle), "--clock-every", repr(clock_every),
                              "--reap-every", repr(reap_every), "--copy-every", repr(copy_every),
                              "--listen-retry", repr(listen_retry)])
        server = Server(path, dsn, args.project, pool, clock_every, reap_every, copy_every, listen_retry)
        server.listen()
        print("host process %d serving %s on %s" % (os.getpid(), args.project, server.path), flush=True)
        server.serve_forever(idle, os.getppid() if args.supervised else None)
    except store.CoordError as exc:
        print("host.py: %s%s" % (exc.message, "\n(%s)" % exc.hint if exc.hint else ""), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 0


def setup_main(args):
    """`host.py setup --project ID [--login ROLE]... [--json]` with COORD_ADMIN_URL: the
    statements pg.pg_setup runs, or the error (JSON with --json), never a traceback."""
    try:
        admin = os.environ.get(store.PG_ADMIN_URL_ENV, "").strip()
        if not admin:
            raise store.UsageError("no admin URL: host.py setup reads it from $%s, never from its arguments"
                                   % store.PG_ADMIN_URL_ENV, "the person runs: %s" % store.pg_setup_command(args.project))
        show = None if args.json else (lambda sql: print(sql if sql.startswith("--") else sql + ";", flush=True))
        done = pg.pg_setup(admin, args.project, args.login, out=show)
        names = pg.pg_role_names(args.project)
        if args.json:
            print(json.dumps({"project": args.project, "owner": names["owner"], "group": names["group"],
                              "logins": args.login, "statements": done}), flush=True)
        else:
            print("-- %d statements; project %s: owner %s (NOLOGIN), group %s" % (
                len(done), args.project, names["owner"], names["group"]))
        return 0
    except Exception as exc:
        exc = _surprise(exc, "setup")
        if args.json:
            print(json.dumps(_error_reply(None, exc)["error"]), flush=True)
        else:
            print("host.py: %s%s" % (exc.message, "\n(%s)" % exc.hint if exc.hint else ""), file=sys.stderr)
        return exc.exit_code


def _surprise(exc, command):
    """exc as a CoordError: a CoordError as it is; anything else (a fault of this code or of the
    driver) logged with its traceback in errors.log and named in one line that says where."""
    if isinstance(exc, store.CoordError):
        return exc
    where = store.log_traceback("host.py %s" % command)
    return store.CoordError("internal error in host.py %s: %s: %s" % (command, type(exc).__name__, exc),
                            "its traceback is in %s" % where if where else None)


def migrate_main(args, run=None):
    """`host.py migrate --project ID` with COORD_MIGRATE_TARGET (a URL or "sqlite"): the report of
    pg.migrate_project as JSON on stdout, or the error as JSON (class, message, hint) and
    its exit code. `host.py join` passes its own `run` (pg.join_project)."""
    try:
        report = run() if run else pg.migrate_project(args.project, os.environ.get("COORD_MIGRATE_TARGET", ""))
    except Exception as exc:
        exc = _surprise(exc, args.command)
        print(json.dumps(_error_reply(None, exc)["error"]), flush=True)
        return exc.exit_code
    print(json.dumps(report, sort_keys=True), flush=True)
    return 0


def _plain(result):
    """A Store method's result as JSON can carry it (audit_lines yields its lines)."""
    if isinstance(result, (dict, list, str, int, float, bool)) or result is None:
        return result
    if isinstance(result, tuple):
        return list(result)
    return list(result)


if __name__ == "__main__":
    sys.exit(main())
