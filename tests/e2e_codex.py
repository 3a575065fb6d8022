"""End-to-end tests: the real Codex CLI, offline, against tests/modelserver.py.

HarnessFacts pins what coord relies on in Codex itself (both trust gates, tools run, project
hooks fire, how a deny reason and additionalContext reach the model, what a sub-agent's shell
sees), using a recording hook of the tests' own. The coord scenarios live in CoordScenarios.
"""

import os
import shutil
import subprocess
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses as h  # noqa: E402
import support  # noqa: E402
from modelserver import apply_patch, function_call, say, shell  # noqa: E402

sys.path.insert(0, h.ROOT)
import hook  # noqa: E402


def add_file(rel, text):
    body = "".join("+" + line + "\n" for line in text.splitlines())
    return apply_patch("*** Begin Patch\n*** Add File: %s\n%s*** End Patch" % (rel, body))


class HarnessFacts(h.HarnessCase):
    harness = "codex"

    def setUp(self):
        super().setUp()
        self.log = os.path.join(self.tmp, "hooks.jsonl")
        self.replies = os.path.join(self.tmp, "replies")
        self.hooks_json = self.write_hooks(h.recording_hooks(self.log, self.replies))

    def records(self, event=None, tool_name=None):
        return [r for r in h.read_hook_log(self.log)
                if (event is None or r["payload"].get("hook_event_name") == event)
                and (tool_name is None or r["payload"].get("tool_name") == tool_name)]

    def test_computed_hook_hashes_are_what_codex_trusts(self):
        self.server.load([])
        h.trust_codex_repo(self.codex_home, self.server, self.repo)
        reply = h.codex_hooks_list(self.cli, self.repo, self.home, self.codex_home, self.server)
        listed = [hk for entry in reply["result"]["data"] for hk in entry["hooks"]]
        ours = h.codex_hook_hashes(self.hooks_json)
        self.assertEqual(sorted(hk["key"] for hk in listed), sorted(ours))
        for hk in listed:
            self.assertEqual(hk["currentHash"], ours[hk["key"]])
            self.assertEqual(hk["trustStatus"], "trusted", hk)

    def test_scripted_patch_runs_offline_and_fires_project_hooks(self):
        result = self.run_agent([add_file("a.txt", "hello"), say("done")])
        self.assertEqual(self.read_file("a.txt"), "hello\n")
        events = [r["payload"]["hook_event_name"] for r in self.records()]
        for ev in ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop",
                   "SessionEnd"):
            self.assertIn(ev, events)
        pre = self.records("PreToolUse", "apply_patch")[0]["payload"]
        self.assertIn("*** Add File: a.txt", pre["tool_input"]["command"])
        self.assertEqual(pre["session_id"], result.session_id())
        self.assertEqual([r.path for r in self.server.requests], ["/v1/responses"] * 2)

    def test_untrusted_hooks_do_not_run(self):
        self.run_agent([add_file("a.txt", "hello"), say("done")], trust=False)
        self.assertEqual(self.read_file("a.txt"), "hello\n")
        self.assertEqual(self.records(), [])

    def test_deny_reason_comes_back_as_the_tool_output(self):
        h.write_reply(self.replies, "PreToolUse-apply_patch", h.deny("REASON-held-by-peer"))
        self.run_agent([add_file("a.txt", "x"), say("done")])
        self.assertIsNone(self.read_file("a.txt"))
        tail = self.server.model_requests()[1].tail()
        self.assertEqual(tail[-1]["type"], "custom_tool_call_output")
        self.assertTrue(tail[-1]["output"].startswith(
            "Command blocked by PreToolUse hook: REASON-held-by-peer. Command: *** Begin Patch"),
            tail[-1]["output"])

    def test_additional_context_comes_back_as_developer_messages(self):
        h.write_reply(self.replies, "PreToolUse-Bash", h.context("PreToolUse", "PRE-CTX"))
        h.write_reply(self.replies, "PostToolUse-Bash", h.context("PostToolUse", "POST-CTX"))
        self.run_agent([shell("true"), say("done")])
        tail = self.server.model_requests()[1].tail()
        self.assertEqual([(i["type"], i.get("role")) for i in tail],
                         [("message", "developer"), ("message", "developer"),
                          ("function_call_output", None)])
        self.assertEqual(tail[0]["content"], [{"type": "input_text", "text": "PRE-CTX"}])
        self.assertEqual(tail[1]["content"], [{"type": "input_text", "text": "POST-CTX"}])

    def test_session_start_context_is_a_developer_message(self):
        h.write_reply(self.replies, "SessionStart", h.context("SessionStart", "SS-CTX"))
        self.run_agent([say("done")])
        items = self.server.model_requests()[0].items()
        self.assertIn({"type": "input_text", "text": "SS-CTX"},
                      [c for i in items if i.get("role") == "developer" for c in i["content"]])

    def test_subagent_shell_sees_its_own_thread_id(self):
        # Inside a sub-agent, CODEX_THREAD_ID is the sub-agent's agent_id (the hook payloads'
        # agent_id); CODEX_SESSION_ID stays the parent's session.
        penv = os.path.join(self.tmp, "env-parent")
        senv = os.path.join(self.tmp, "env-sub")
        self.run_agent(
            [shell("env > %s" % penv),
             function_call("spawn_agent", {"task_name": "sub1", "fork_turns": "none",
                                           "message": "SUBTASK-1"}, namespace="collaboration"),
             # wait_agent is refused in exec mode ("unsupported call"): poll for the sub's file.
             shell("for i in $(seq 200); do [ -s %s ] && break; sleep 0.05; done" % senv),
             say("done")],
            lanes={"SUBTASK-1": [shell("env > %s" % senv), say("sub done")]},
            features={"multi_agent_v2": True})

        def env_of(path):
            with open(path) as f:
                return dict(l.split("=", 1) for l in f.read().splitlines() if "=" in l)
        parent, sub = env_of(penv), env_of(senv)
        session = self.records("SessionStart")[0]["payload"]["session_id"]
        agent_id = self.records("SubagentStart")[0]["payload"]["agent_id"]
        self.assertEqual(parent["CODEX_THREAD_ID"], session)
        self.assertEqual(parent["CODEX_SESSION_ID"], session)
        self.assertEqual(sub["CODEX_THREAD_ID"], agent_id)
        self.assertEqual(sub["CODEX_SESSION_ID"], session)
        sub_bash = [r["payload"] for r in self.records("PreToolUse", "Bash")
                    if r["payload"].get("agent_id")]
        self.assertEqual([p["agent_id"] for p in sub_bash], [agent_id])

    def test_shell_patch_shapes_codex_applies_are_the_ones_the_hook_checks(self):
        # Codex applies some `apply_patch` shell commands itself and runs the rest as plain
        # shell; the hook must recognise exactly the first kind (a Codex release that changes
        # its parser fails here).
        os.makedirs(os.path.join(self.repo, "sub"))
        body = "*** Begin Patch\n*** Add File: f-%d.txt\n+hi\n*** End Patch"
        commands = [shape % (body % i) for i, shape in enumerate(SHELL_PATCH_SHAPES)]
        self.run_agent([shell(c) for c in commands] + [say("done")])
        for i, command in enumerate(commands):
            written = [rel for rel in ("f-%d.txt" % i, "sub/f-%d.txt" % i)
                       if os.path.exists(os.path.join(self.repo, rel))]
            self.assertEqual([os.path.normpath(p) for p in hook.shell_patch_targets({"command": command})],
                             written, command)
        self.assertIn("sub/f-0.txt", [os.path.normpath(p) for p in hook.shell_patch_targets(
            {"command": commands[0]})], "the table starts with an accepted shape")

    def test_no_hook_runs_once_its_settings_are_gone(self):
        os.unlink(self.hooks_json)
        self.run_agent([add_file("a.txt", "x"), say("done")])
        self.assertEqual(self.records(), [])
        self.assertEqual(self.read_file("a.txt"), "x\n")


SHELL_PATCH_SHAPES = (  # %s is the patch
    "cd sub && apply_patch <<'EOF'\n%s\nEOF",
    "apply_patch <<'EOF'\n%s\nEOF",
    "apply_patch <<EOF\n%s\nEOF\n",
    'applypatch <<"PATCH"\n%s\nPATCH',
    "apply_patch << 'EOF'\n%s\nEOF",
    "apply_patch <<\\EOF\n%s\nEOF",
    "apply_patch <<-EOF\n%s\n\tEOF",
    "\n  apply_patch <<'EOF'\n%s\nEOF",
    "FOO=1 apply_patch <<'EOF'\n%s\nEOF",
    "apply_patch <<'EOF'\r\n%s\r\nEOF\r\n",
    "apply_patch <<'EOF'\n%s\n",
    "cd sub && applypatch <<PATCH\n%s\nPATCH",
    "cd 'sub' && apply_patch <<'EOF'\n%s\nEOF",
    'cd "sub" && apply_patch <<\'EOF\'\n%s\nEOF',
    "cd sub &&\n  apply_patch <<'EOF'\n%s\nEOF",
    "cd sub && apply_patch ignored <<'EOF'\n%s\nEOF",
    "FOO=1 cd sub && apply_patch <<'EOF'\n%s\nEOF",
    # run as plain shell
    "echo x; apply_patch <<'EOF'\n%s\nEOF",
    "apply_patch <<'EOF'\n%s\nEOF\necho done",
    "apply_patch foo <<'EOF'\n%s\nEOF",
    "apply_patch 2>&1 <<'EOF'\n%s\nEOF",
    "apply_patch <<'EOF' 2>&1\n%s\nEOF",
    "cd sub && cd . && apply_patch <<'EOF'\n%s\nEOF",
    "cd sub; apply_patch <<'EOF'\n%s\nEOF",
    'cd "$NOPE""sub" && apply_patch <<\'EOF\'\n%s\nEOF',
    "bash -lc \"apply_patch <<'EOF'\n%s\nEOF\"",
    "apply_patch '%s'",
    "cat <<'EOF' | apply_patch\n%s\nEOF",
    "(apply_patch <<'EOF'\n%s\nEOF\n)",
    "# edit\napply_patch <<'EOF'\n%s\nEOF",
    "/usr/bin/apply_patch <<'EOF'\n%s\nEOF",
    'apply_patch <<E"O"F\n%s\nEOF',
)


def patch(*lines):
    return apply_patch("*** Begin Patch\n%s\n*** End Patch" % "\n".join(lines))


DENIED_PATCHES = (
    ("add", patch("*** Add File: src/a.py", "+agent")),
    ("update", patch("*** Update File: src/a.py", "@@", "-original", "+agent")),
    ("move", patch("*** Update File: src/b.py", "*** Move to: src/a.py", "@@", "-bee", "+agent")),
)


def shell_patch(script, *lines, **extra):
    """Codex's shell tool running `script` (with %s for the patch), as models write it."""
    return shell(script % ("*** Begin Patch\n%s\n*** End Patch" % "\n".join(lines)), **extra)


DENIED_SHELL_PATCHES = (
    ("heredoc update", shell_patch("apply_patch <<'EOF'\n%s\nEOF", "*** Update File: src/a.py", "@@",
                                   "-original", "+agent 1")),
    ("cd, alias, move", shell_patch("cd src && applypatch <<PATCH\n%s\nPATCH", "*** Update File: b.py",
                                    "*** Move to: a.py", "@@", "-bee", "+agent 2")),
    ("workdir add", shell_patch("apply_patch <<'EOF'\n%s\nEOF", "*** Add File: a.py", "+agent 3",
                                workdir="src")),
)


class CoordScenarios(h.CoordCase):
    """coord installed by ./install; the real hooks, trusted by the test; Codex driven by the
    script."""

    harness = "codex"

    def agent_runtime(self, session):
        mains = [rt for rt in self.runtimes_of(session) if not rt.get("agent_id")]
        self.assertEqual(len(mains), 1, self.coord_state())
        return mains[0]

    def test_start_up_registers_the_agent_until_the_session_ends(self):
        def script(repo):
            return [add_file("a.txt", "x"), say("done")]
        result = self.run_agent(script(self.repo))
        session = result.session_id()
        self.assertTrue(session)
        rt = self.agent_runtime(session)
        self.assertIsNotNone(rt["ended_at"], rt)
        self.assertFalse(rt["live"], rt)

    def test_patches_onto_a_peers_exclusive_lease_are_denied(self):
        peer = self.peer_holding_a()

        def script(repo):
            return [p for _, p in DENIED_PATCHES] + [say("done")]
        self.run_agent(script(self.repo))
        self.assertEqual(self.read_file("src/a.py"), "original\n")
        self.assertEqual(self.read_file("src/b.py"), "bee\n")
        self.assert_each_blocked(DENIED_PATCHES, "custom_tool_call_output", peer)
        self.control(script)  # without coord the same patches rewrite the leased file
        with open(os.path.join(self.plain, "src", "a.py")) as f:
            self.assertNotEqual(f.read(), "original\n")

    def peer_holding_a(self):
        """A peer holding src/a.py exclusively, with src/a.py and src/b.py in both repositories."""
        peer = self.peer()
        self.rcoord("claim", "src/a.py", "--runtime", peer["id"], "-p", "peer work")
        for repo in (self.repo, self.plain):
            self.write_file("src/a.py", "original\n", repo=repo)
            self.write_file("src/b.py", "bee\n", repo=repo)
        return peer

    def assert_each_blocked(self, patches, output_type, peer):
        """The model saw each of `patches` blocked by coord's hook, naming the peer and src/a.py."""
        reqs = self.server.model_requests()
        for i, (what, _) in enumerate(patches):
            item = reqs[i + 1].tail()[-1]
            self.assertEqual(item["type"], output_type, what)
            self.assertTrue(item["output"].startswith("Command blocked by PreToolUse hook: "),
                            (what, item["output"]))
            self.assertIn(peer["handle"], item["output"], what)
            self.assertIn("src/a.py", item["output"].split(". Command: ")[0], what)

    def test_shell_patches_onto_a_peers_exclusive_lease_are_denied(self):
        # Codex applies `apply_patch <<EOF` run through its shell with its own patch engine.
        peer = self.peer_holding_a()

        def script(repo):
            return [p for _, p in DENIED_SHELL_PATCHES] + [
                shell_patch("apply_patch <<'EOF'\n%s\nEOF", "*** Add File: src/c.py", "+free"), say("done")]
        self.run_agent(script(self.repo))
        self.assertEqual(self.read_file("src/a.py"), "original\n")
        self.assertEqual(self.read_file("src/b.py"), "bee\n")
        self.assertEqual(self.read_file("src/c.py"), "free\n", "an unleased path is not held up")
        self.assert_each_blocked(DENIED_SHELL_PATCHES, "function_call_output", peer)
        # Control: the same run without coord's hooks rewrites the leased file.
        self.control(script)
        plain = {}
        for rel in ("src/a.py", "src/b.py", "src/c.py"):
            path = os.path.join(self.plain, rel)
            if os.path.exists(path):
                with open(path) as f:
                    plain[rel] = f.read()
        self.assertEqual(plain, {"src/a.py": "agent 3\n", "src/c.py": "free\n"})

    def test_patch_to_an_unleased_path_goes_through(self):
        peer = self.peer()
        self.rcoord("claim", "src/a.py", "--runtime", peer["id"])

        def script(repo):
            return [add_file("src/c.py", "c"), say("done")]
        self.run_agent(script(self.repo))
        self.assertEqual(self.read_file("src/c.py"), "c\n")
        self.assertNotIn(peer["handle"], self.server.model_requests()[1].tail_text())

    def test_message_is_injected_then_reminded_until_acked(self):
        peer = self.peer()
        body = "BODY-7f3: please leave src/a.py alone"
        sent = {}

        def send(req):
            agents = [rt for rt in self.rcoord("list")["runtimes"] if rt["id"] != peer["id"]]
            self.assertEqual(len(agents), 1, agents)
            sent.update(self.rcoord("send", body, "--to", agents[0]["handle"],
                                    "--runtime", peer["id"]))
            return shell("true")

        def ack(req):
            return shell(".coord/coord ack %d" % sent["id"])

        self.run_agent([send, shell("true"), ack, shell("true"), say("done")])
        reqs = self.server.model_requests()
        first, second, after_ack, later = (reqs[i].tail_text() for i in (1, 2, 3, 4))
        self.assertIn(body, first)
        self.assertNotIn(body, second)
        for part in (str(sent["id"]), peer["handle"], sent["digest"][:8], "coord inbox --peek"):
            self.assertIn(part, second)
        self.assertNotIn(peer["handle"], after_ack)
        self.assertNotIn(peer["handle"], later)

    def test_installed_hooks_are_all_trusted_by_the_entries_the_test_writes(self):
        self.server.load([])
        h.trust_codex_repo(self.codex_home, self.server, self.repo)
        reply = h.codex_hooks_list(self.cli, self.repo, self.home, self.codex_home, self.server)
        listed = [hk for entry in reply["result"]["data"] for hk in entry["hooks"]]
        self.assertTrue(listed)
        self.assertEqual([hk["key"] for hk in listed if hk["trustStatus"] != "trusted"], [])
        events = set(hk["eventName"] for hk in listed)
        self.assertTrue({"sessionStart", "preToolUse", "postToolUse", "sessionEnd"} <= events,
                        events)

    def test_hooks_fail_open_when_the_database_cannot_be_opened(self):
        blocker = os.path.join(self.tmp, "not-a-directory")
        with open(blocker, "w") as f:
            f.write("x")
        corrupt = os.path.join(self.tmp, "corrupt.sqlite3")
        with open(corrupt, "wb") as f:
            f.write(b"this is not an SQLite database" * 100)
        for n, db in enumerate((os.path.join(blocker, "db.sqlite3"), corrupt)):
            result = self.run_agent([add_file("f%d.txt" % n, "x"), say("done")],
                                    env={"COORD_DB": db})
            self.assertEqual(self.read_file("f%d.txt" % n), "x\n")
            self.assertIn({"type": "turn.completed"},
                          [{"type": e.get("type")} for e in result.events], result.describe())

    def test_agents_own_claim_resolves_to_its_runtime(self):
        seen = {}

        def look(req):
            seen["state"] = self.coord_state()
            seen["output"] = req.tool_results()
            return say("done")
        result = self.run_agent([shell(".coord/coord claim src/x.py"), look])
        rt = self.agent_runtime(result.session_id())
        held = [l for l in seen["state"]["leases"] if l["resource"] == "src/x.py"]
        self.assertEqual([l["runtime"] for l in held], [rt["id"]], seen)

    def test_login_shell_outside_any_list_keeps_one_runtime(self):
        # SHELL names a shell no list knows (a copy of bash called tcsh). Observed with Codex
        # 0.171.0: it ignores $SHELL here and runs hooks and tool commands as `/bin/bash -c CMD`
        # (the passwd entry's shell, not a login shell); whatever stands between them, the
        # hook must record the codex binary itself, and the agent's claim must resolve to it.
        tcsh = os.path.join(self.tmp, "shells", "tcsh")
        os.makedirs(os.path.dirname(tcsh))
        shutil.copy(support.require_tool(self, "bash"), tcsh)
        seen = {}

        def look(req):
            seen["state"] = self.coord_state()
            seen["output"] = req.tool_results()
            mains = [rt for rt in seen["state"]["runtimes"] if not rt.get("agent_id") and rt.get("live")]
            seen["comm"] = [open("/proc/%d/comm" % rt["pid"]).read().strip() for rt in mains
                            if rt.get("pid") and os.path.exists("/proc/%d" % rt["pid"])]
            return say("done")
        result = self.run_agent([shell(".coord/coord claim src/x.py -p e2e"), shell("echo two"), look],
                                env={"SHELL": tcsh})
        rt = self.agent_runtime(result.session_id())  # one runtime across all its hooks
        self.assertEqual(seen["comm"], ["codex"], seen)
        held = [l for l in seen["state"]["leases"] if l["resource"] == "src/x.py"]
        self.assertEqual([l["runtime"] for l in held], [rt["id"]], seen)

    def test_sub_agent_is_its_own_runtime_and_cannot_patch_the_parents_lease(self):
        # Not in Claude's form only: Codex sub-agents (multi_agent_v2) are identified by
        # CODEX_THREAD_ID in their shell and by agent_id in their hook payloads.
        done = os.path.join(self.tmp, "sub-done")
        seen = {}

        def look(req):  # while the sub-agent still runs: its leases end with it
            seen["state"] = self.coord_state()
            return shell("touch %s" % done)
        result = self.run_agent(
            [shell(".coord/coord claim src/a.py -p parent"),
             function_call("spawn_agent", {"task_name": "sub1", "fork_turns": "none",
                                           "message": "SUBTASK-5"}, namespace="collaboration"),
             shell("for i in $(seq 300); do [ -e %s ] && break; sleep 0.05; done" % done),
             say("done")],
            lanes={"SUBTASK-5": [add_file("src/a.py", "sub"), shell(".coord/coord claim src/s.py"),
                                 look, say("sub done")]},
            features={"multi_agent_v2": True})
        self.assertIsNone(self.read_file("src/a.py"))
        session = result.session_id()
        parent = self.agent_runtime(session)
        denial = self.server.model_requests("SUBTASK-5")[1].tool_results()
        self.assertIn(parent["handle"], denial[0])
        subs = [rt for rt in self.runtimes_of(session) if rt.get("agent_id")]
        self.assertEqual(len(subs), 1, self.coord_state())
        self.assertNotEqual(subs[0]["id"], parent["id"])
        held = dict((l["resource"], l["runtime"]) for l in seen["state"]["leases"])
        self.assertEqual(held.get("src/a.py"), parent["id"])
        self.assertEqual(held.get("src/s.py"), subs[0]["id"])

    def test_process_whose_conversation_was_resumed_elsewhere_cannot_act_for_it(self):
        # Process A runs the conversation and claims; process B resumes it (`codex exec resume`)
        # while A still runs, superseding A's runtime. A's own `.coord/coord` calls through
        # CODEX_THREAD_ID are then refused with B's handle; B's succeed.
        a_go, b_go = os.path.join(self.tmp, "a-go"), os.path.join(self.tmp, "b-go")
        wait = "for i in $(seq 1200); do [ -e %s ] && break; sleep 0.05; done"
        seen = {}

        def a_look(req):
            seen["a"] = req.tool_results()
            return say("a done")

        def b_look(req):
            seen["b"] = req.tool_results()
            seen["state"] = self.coord_state()
            return say("b done")
        lanes = {"RESUMED-B": [shell(wait % b_go), shell(".coord/coord claim src/b.py; echo rc=$?"), b_look],
                 "TASK-A": [shell(".coord/coord claim src/a.py"), shell(wait % a_go),
                            shell(".coord/coord claim src/grab.py; echo rc=$?;"
                                  " .coord/coord release --all; echo rc=$?"), a_look]}
        self.server.load([], lanes)
        h.trust_codex_repo(self.codex_home, self.server, self.repo)
        env = h.codex_env(self.home, self.codex_home, self.server, self.agent_env())
        results, threads = {}, []

        def run(name, argv, env):
            results[name] = h._run(argv, self.repo, env, 180)

        def start(name, argv, env):
            threads.append(threading.Thread(target=run, args=(name, argv, env)))
            threads[-1].start()

        def release(*paths):
            for path in paths:
                open(path, "w").close()

        def finish():  # let both scripts end, whatever happened
            release(a_go, b_go)
            for t in threads:
                t.join(180)
        self.addCleanup(finish)
        start("a", [self.cli, "exec", "--json", "TASK-A"], env)
        held = support.retry_until(lambda: [l for l in self.coord_state()["leases"] if l["resource"] == "src/a.py"],
                                   timeout=120)
        session = [rt for rt in self.coord_state()["runtimes"] if rt["id"] == held[0]["runtime"]][0]["conversation"]
        # Codex keeps one writer per thread in a CODEX_HOME (thread-writer-locks/), so while A
        # runs, the conversation can be resumed only from another home holding its history.
        other_home = os.path.join(self.tmp, "codex-home-b")
        shutil.copytree(self.codex_home, other_home, ignore=shutil.ignore_patterns("thread-writer-locks"))
        env_b = h.codex_env(self.home, other_home, self.server, self.agent_env())
        start("b", [self.cli, "exec", "resume", "--json", session, "RESUMED-B"], env_b)
        support.retry_until(lambda: len(self.runtimes_of(session)) == 2 or "b" in results, timeout=120)
        self.assertNotIn("b", results, results["b"].describe() if "b" in results else "")
        old_rt = [rt for rt in self.runtimes_of(session) if rt["id"] == held[0]["runtime"]][0]
        new_rt = [rt for rt in self.runtimes_of(session) if rt["id"] != old_rt["id"]][0]
        self.assertEqual(old_rt["superseded_by"], new_rt["id"])
        release(a_go)
        threads[0].join(180)
        release(b_go)
        threads[1].join(180)
        for name in ("a", "b"):
            self.assertEqual(results[name].code, 0, results[name].describe())
        refusals = "\n".join(seen["a"])
        self.assertEqual(refusals.count("rc=3"), 2, refusals)
        self.assertIn("superseded by %s" % new_rt["handle"], refusals)
        self.assertIn("rc=0", "\n".join(seen["b"]))
        held = sorted((l["resource"], l["runtime"]) for l in seen["state"]["leases"])
        self.assertEqual(held, [("src/a.py", new_rt["id"]), ("src/b.py", new_rt["id"])])

    def test_workspace_write_sandbox_keeps_peers_and_identifies_the_agent(self):
        # Codex's workspace-write sandbox runs shell commands in their own PID namespace, where
        # the harness pids coord recorded from the host cannot be seen. Only the database
        # directory is added to the writable roots (with /tmp excluded), as for a real user
        # whose database lives under HOME. The agent lists, claims (following a refusal's hint
        # as a model would: `coord hello`, then claim as that handle), reads a peer's message
        # (delivered by the hooks, which run outside the sandbox) and acks it.
        sleeper = subprocess.Popen(["sleep", "600"])
        self.addCleanup(sleeper.wait)
        self.addCleanup(sleeper.kill)
        peer = self.rcoord("hello", "--harness", "codex", "--pid", str(sleeper.pid))["runtime"]
        self.rcoord("claim", "src/peer.py", "--runtime", peer["id"], "-p", "peer work")
        host_ns = os.readlink("/proc/self/ns/pid")
        body = "BODY-51c: peer.py is mine"
        seen = {}

        def claim(req):
            seen["list"] = req.tool_results()
            agents = [rt for rt in self.rcoord("list")["runtimes"] if rt["id"] != peer["id"]]
            seen["agents"] = agents
            if len(agents) == 1:
                seen["sent"] = self.rcoord("send", body, "--to", agents[0]["handle"], "--runtime", peer["id"])
            return shell(".coord/coord claim src/own.py; echo rc=$?")

        def follow_hint(req):  # a refusal that says to register is followed, as models do
            seen["claim"] = req.tool_results()
            if "coord hello" in "\n".join(seen["claim"]):
                return shell('H=$(.coord/coord hello) && .coord/coord claim src/own.py --runtime "$H"; echo rc=$?')
            return shell("true")

        def ack(req):
            return shell(".coord/coord ack %d; echo rc=$?" % seen.get("sent", {}).get("id", 0))

        def look(req):
            seen["ack"] = req.tool_results()
            seen["state"] = self.coord_state()
            seen["ns"] = {}
            for r in seen["state"]["runtimes"]:
                try:
                    seen["ns"][r["id"]] = os.readlink("/proc/%d/ns/pid" % r["pid"])
                except (OSError, TypeError):
                    pass
            return say("done")
        db_dir = os.path.dirname(self.db)
        outside = os.path.join(self.tmp, "outside")  # /tmp is no writable root here
        result = self.run_agent(
            [shell("readlink /proc/self/ns/pid; touch %s; echo touch=$?; .coord/coord list" % outside),
             claim, follow_hint, ack, look],
            sandbox="workspace-write",
            config="[sandbox_workspace_write]\nwritable_roots = [%s]\nexclude_slash_tmp = true\n"
                   "exclude_tmpdir_env_var = true" % h._toml_str(db_dir))
        listed = "\n".join(seen["list"])
        if "pid:[" not in listed or host_ns in listed:
            msg = "Codex's workspace-write sandbox did not run the shell in its own PID namespace:\n" + listed
            if support.IN_CI:
                self.fail(msg)
            self.skipTest(msg)
        self.assertIn("touch=1", listed)
        self.assertFalse(os.path.exists(outside))
        # The peer is still live and holds its lease: nothing was reaped.
        state = self.coord_state()
        after = [r for r in state["runtimes"] if r["id"] == peer["id"]][0]
        self.assertIsNone(after["ended_at"], after)
        self.assertTrue(after["live"], after)
        self.assertEqual([(l["resource"], l["runtime"]) for l in state["leases"]], [("src/peer.py", peer["id"])])
        self.assertEqual([e for e in self.rcoord("audit")["events"] if e["event"] == "runtime.reaped"], [])
        self.assertIn(peer["handle"], [line.split()[0] for line in listed.splitlines() if line.startswith("  ")],
                      "the sandboxed list shows the live peer among the agents")
        # The agent's own claim succeeded at once and was held by the runtime its SessionStart
        # hook registered; that hook ran in the host's namespace (its harness process, Codex,
        # is visible there), and the runtime ended at SessionEnd.
        self.assertIn("rc=0", "\n".join(seen["claim"]), seen["claim"])
        rt = self.agent_runtime(result.session_id())
        self.assertEqual([a["id"] for a in seen["agents"]], [rt["id"]])
        self.assertEqual(seen["ns"].get(rt["id"]), host_ns)
        held = sorted((l["resource"], l["runtime"]) for l in seen["state"]["leases"])
        self.assertEqual(held, [("src/own.py", rt["id"]), ("src/peer.py", peer["id"])])
        self.assertEqual(rt["end_reason"], "session-end", rt)
        # Messages come through the hooks: the body once, a reminder, then the sandboxed ack
        # is the agent's own and ends the reminders.
        reqs = self.server.model_requests()
        self.assertIn(body, reqs[2].tail_text())
        self.assertIn("coord inbox --peek", reqs[3].tail_text())
        self.assertIn("rc=0", "\n".join(seen["ack"]), seen["ack"])
        self.assertNotIn(peer["handle"], reqs[4].tail_text())

    def test_workspace_write_agent_edits_of_the_hook_runtime_never_run(self):
        # Codex runs project hooks outside its sandbox. The sandboxed agent patches one line into
        # the repository's .coord/hook.py and one into .coord/store.py, each of which would
        # create a marker outside the workspace (where the agent's own `touch` fails); then more
        # tool calls fire every hook. The hooks run coord's content-addressed runtime copy outside
        # the repository, so neither line ever runs; the edits themselves succeed (control).
        # With 0.3.0's layout (the hook command imports the repository's .coord/hook.py) the
        # markers appear.
        markers = {name: os.path.join(self.tmp, "escaped-" + name) for name in ("hook", "store")}
        outside = os.path.join(self.tmp, "outside")  # /tmp is no writable root here

        def plant(name):
            line = "open(%r, 'w').close()  # planted" % markers[name]
            return apply_patch("*** Begin Patch\n*** Update File: .coord/%s.py\n@@\n+%s\n*** End Patch" % (name, line))
        seen = {}
        peer = self.peer()

        def after_plants(req):
            seen["plants"] = req.tool_results()
            # the test's own calls use the source tree's coord from here on: the repository's
            # copy now holds the agent's lines (a person running it is another matter: see DESIGN.md)
            seen["sent"] = self.coord_json("send", "BODY-sbx: the hooks still run", "--to", "*",
                                           "--runtime", peer["id"])
            return shell("touch %s; echo touch=$?" % outside)

        def write_more(req):
            seen["touch"] = req.tool_results()
            seen["tail"] = req.tail_text()
            return add_file("src/more.py", "x = 1")
        db_dir = os.path.dirname(self.db)
        result = self.run_agent(
            [plant("hook"), plant("store"), after_plants, write_more, say("done")],
            sandbox="workspace-write",
            config="[sandbox_workspace_write]\nwritable_roots = [%s]\nexclude_slash_tmp = true\n"
                   "exclude_tmpdir_env_var = true" % h._toml_str(db_dir))
        # Control: the sandbox holds for the agent's own commands, its edits of the repository's
        # copy went through, and the hooks ran after them (they registered the agent and
        # delivered the peer's message, sent after both edits).
        self.assertIn("touch=1", "\n".join(seen["touch"]), seen["touch"])
        self.assertFalse(os.path.exists(outside))
        for name in markers:
            with open(os.path.join(self.repo, ".coord", name + ".py")) as f:
                self.assertIn("# planted", f.read(), "the agent's edit of .coord/%s.py did not land" % name)
        self.assertEqual(self.read_file("src/more.py"), "x = 1\n")
        mains = [rt for rt in self.coord_json("list", "--all")["runtimes"]
                 if rt.get("conversation") == result.session_id() and not rt.get("agent_id")]
        self.assertEqual(len(mains), 1, mains)
        self.assertIn("BODY-sbx", seen["tail"] + self.server.model_requests()[-1].tail_text())
        # The line the agent wrote never ran outside its sandbox.
        self.assertEqual([".coord/%s.py" % name for name, path in sorted(markers.items()) if os.path.exists(path)], [],
                         "the agent's edits ran outside the sandbox")


class CloneTrust(h.CoordCase):
    """`coord work start --harness codex` in a managed clone: Codex keys project and hook trust by
    absolute path, so a clone has none of the approvals a person gave the shared checkout. With
    the opt-in (`coord trust --carry-over on`) coord carries them over and the agent's write to a
    peer's leased file is denied; without it, `work start` names what to approve, and (the
    control) the same write goes through."""

    harness = "codex"

    def setUp(self):
        super().setUp()
        managed = self.managed_env()
        self.launch_env = h.codex_env(self.home, self.codex_home, self.server, self.agent_env(dict(managed, **{
            # the prompt rides in the command: passing one through `work start` is issue 14 item 6
            "COORD_CODEX_CMD": "%s exec --json TASK-CLONE" % self.cli})))
        # The person trusted the shared checkout and approved coord's hooks there.
        h.trust_codex_repo(self.codex_home, self.server, self.repo)
        self.owner = self.rcoord("hello", env=self.launch_env)["runtime"]

    def clone_run(self, carry):
        """Create a clone, let a peer lease src/a.py, start Codex there by `work start` with a
        script that rewrites src/a.py; -> (start reply, clone path, peer, config bytes before)."""
        if carry:
            self.coord_at_terminal("trust", "--carry-over", "on", env=self.launch_env, cwd=self.repo, check=0)
        with open(os.path.join(self.codex_home, "config.toml"), "rb") as f:
            before = f.read()
        work = self.rcoord("work", "create", "trusty", "--runtime", self.owner["id"], env=self.launch_env)["work"]
        clone = work["path"]
        peer = self.rcoord("hello", env=self.launch_env)["runtime"]
        self.rcoord("claim", "src/a.py", "--runtime", peer["id"], "-p", "peer work", env=self.launch_env)
        self.write_file("src/a.py", "original\n", repo=clone)
        self.server.load([patch("*** Update File: src/a.py", "@@", "-original", "+agent"), say("done")])
        started = self.rcoord("work", "start", work["handle"], "--harness", "codex", "--runtime", self.owner["id"],
                              env=self.launch_env)
        support.retry_until(lambda: len(self.server.model_requests()) >= 2, timeout=120)
        with open(os.path.join(clone, "src", "a.py")) as f:
            text = f.read()
        return started, work, clone, peer, before, text

    def test_carried_over_approvals_let_coord_deny_a_peers_file(self):
        started, work, clone, peer, before, text = self.clone_run(carry=True)
        self.assertEqual(text, "original\n", "the write to the peer's leased file went through")
        self.assertEqual(started.get("approvals"), [], started)
        out = self.server.model_requests()[1].tail()[-1]["output"]
        self.assertTrue(out.startswith("Command blocked by PreToolUse hook: "), out)
        self.assertIn(peer["handle"], out)
        # Codex itself now lists every coord hook in the clone as trusted.
        reply = h.codex_hooks_list(self.cli, clone, self.home, self.codex_home, self.server)
        listed = [hk for entry in reply["result"]["data"] for hk in entry["hooks"]]
        self.assertTrue(listed)
        self.assertEqual([hk["key"] for hk in listed if hk["trustStatus"] != "trusted"], [])
        added = self.rcoord("work", "inspect", work["handle"], env=self.launch_env)["work"]["data"]["trust"]["added"]
        self.assertEqual(added["codex"]["project"], clone)
        self.assertEqual(sorted(added["codex"]["hooks"]), sorted(hk["key"] for hk in listed))
        # Removing the work takes exactly those entries away: every byte of the config is back.
        os.unlink(os.path.join(clone, "src", "a.py"))
        support.retry_until(lambda: self.remove(work), timeout=60, interval=0.5)  # once Codex has exited
        with open(os.path.join(self.codex_home, "config.toml"), "rb") as f:
            self.assertEqual(f.read(), before)

    def remove(self, work):
        """Waive the gate and remove the work once its window has gone; True when removed."""
        self.rcoord("work", "gate", work["handle"], "--waive", "--reason", "e2e", "--runtime", self.owner["id"],
                    env=self.launch_env)
        reply = self.rcoord("work", "remove", work["handle"], "--confirm", work["handle"], "--runtime",
                            self.owner["id"], env=self.launch_env, check=None)
        return bool(reply and reply.get("removed"))

    def test_without_the_opt_in_start_names_the_approvals_and_nothing_blocks(self):
        started, work, clone, peer, before, text = self.clone_run(carry=False)
        approvals = "\n".join(started.get("approvals") or [])
        self.assertIn("trust the project %s" % clone, approvals)
        self.assertIn("/hooks", approvals)
        with open(os.path.join(self.codex_home, "config.toml"), "rb") as f:
            self.assertEqual(f.read(), before, "nothing may be written without the opt-in")
        # The control: Codex ran coord's hooks nowhere, so the leased file was rewritten.
        self.assertEqual(text, "agent\n")


class Nudge(h.CoordCase):
    """Interactive Codex, launched by `coord work start` in tmux with `approval_policy =
    "on-request"`, asks to run an escalated command: its PermissionRequest hook marks the turn,
    so `send --to WORK --nudge` types nothing (0.3.0 typed its line: the "c" cancelled the request
    and the rest went in as a prompt); the request stays open, and the person's own "y" still
    runs the command."""

    harness = "codex"

    def setUp(self):
        super().setUp()
        managed = self.managed_env()
        self.launch_env = h.codex_env(self.home, self.codex_home, self.server, self.agent_env(dict(managed, **{
            "COORD_REGISTER_GRACE": "0", "COORD_CODEX_CMD": self.cli})))
        h.trust_codex_repo(self.codex_home, self.server, self.repo, sandbox="workspace-write",
                           extra='[notice.model_migrations]\n"gpt-5.5" = "gpt-6-sol"')
        path = os.path.join(self.codex_home, "config.toml")
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace('approval_policy = "never"', 'approval_policy = "on-request"'))
        self.owner = self.rcoord("hello", env=self.launch_env)["runtime"]
        self.as_owner = dict(self.launch_env, COORD_RUNTIME_ID=self.owner["id"])
        self.coord_at_terminal("trust", "--carry-over", "on", env=self.launch_env, cwd=self.repo, check=0)

    def test_a_nudge_wakes_an_agent_idle_after_its_turn(self):
        import session
        self.server.load([say("ok")] * 50)
        work = self.rcoord("work", "create", "idle-codex", env=self.as_owner)["work"]
        self.rcoord("work", "start", work["handle"], "--harness", "codex", "--prompt", "Say ok.", env=self.as_owner)
        rec = support.retry_until(lambda: (lambda r: r if r.get("runtime_id") else None)(
            self.rcoord("work", "inspect", work["handle"], env=self.launch_env)["work"]["data"].get("tmux") or {}),
            timeout=90, interval=0.5)
        support.retry_until(lambda: self.turn(rec) == "idle", timeout=90, interval=0.25)
        marker = "NUDGED-BODY-%d" % os.getpid()
        self.rcoord("send", "look at %s" % marker, "--to", work["handle"], env=self.as_owner)
        reply = self.rcoord("send", "and again", "--to", work["handle"], "--nudge", env=self.as_owner)
        self.assertTrue(reply["nudged"], reply)
        seen = support.retry_until(lambda: [r for r in list(self.server.requests) if r.api and marker in r.text()],
                                   timeout=60, interval=0.25)
        self.assertIn(session.NUDGE, seen[0].text())

    def test_the_watch_shows_working_waiting_and_idle_and_tells_the_person(self):
        import threading
        told = self.person_watch(env=self.launch_env)
        gate, asked = threading.Event(), []

        def step(request):  # the main loop's request waits for the test, then asks for an escalated command
            if not asked and "exec_command" in request.text() and h.CODEX_TITLE_REQUEST not in request.text():
                asked.append(request)
                gate.wait(90)  # meanwhile the agent is in its turn: working
                return shell("touch ESCALATED", sandbox_permissions="require_escalated",
                             justification="the scripted task needs it")
            return say("done")
        self.server.load([step] * 50, lanes=h.CODEX_TITLE_LANE)  # the title request never takes the gate
        self.addCleanup(gate.set)
        work = self.rcoord("work", "create", "watched", env=self.as_owner)["work"]
        self.rcoord("work", "start", work["handle"], "--harness", "codex", "--prompt", "Run the scripted command.",
                    env=self.as_owner)
        rec = support.retry_until(lambda: (lambda r: r if r.get("runtime_id") else None)(
            self.rcoord("work", "inspect", work["handle"], env=self.launch_env)["work"]["data"].get("tmux") or {}),
            timeout=90, interval=0.5)
        work = self.rcoord("work", "inspect", work["handle"], env=self.launch_env)["work"]
        self.watch_state(work, "working")
        gate.set()
        row = self.watch_state(work, "waiting")
        self.assertEqual((row["tool"], row["harness"]), ("Bash", "codex"))
        self.assertEqual(self.told(told, "waits for you"),
                         ["coord: %s (watched) waits for you: it asks to run Bash" % work["handle"]])
        support.retry_until(lambda: "touch ESCALATED" in self.pane_text(rec), timeout=30, interval=0.25)
        support.TmuxClient(self, self.sock, rec["pane_id"]).type("y")  # the person approves
        support.retry_until(lambda: os.path.exists(os.path.join(work["path"], "ESCALATED")), timeout=60,
                            interval=0.25)
        self.watch_state(work, "idle")
        self.assertIn("coord: %s (watched) finished its turn" % work["handle"], self.told(told, "finished its turn"))

    def test_a_nudge_never_cancels_an_approval_request(self):
        asked = []

        def step(request):  # the main loop's request (it offers exec_command) asks once; others get text
            if not asked and "exec_command" in request.text() and h.CODEX_TITLE_REQUEST not in request.text():
                asked.append(request)
                return shell("touch ESCALATED", sandbox_permissions="require_escalated",
                             justification="the scripted task needs it")
            return say("done")
        self.server.load([step] * 50, lanes=h.CODEX_TITLE_LANE)
        work = self.rcoord("work", "create", "escalates", env=self.as_owner)["work"]
        self.rcoord("work", "start", work["handle"], "--harness", "codex", "--prompt", "Run the scripted command.",
                    env=self.as_owner)
        rec = support.retry_until(lambda: (lambda r: r if r.get("runtime_id") else None)(
            self.rcoord("work", "inspect", work["handle"], env=self.launch_env)["work"]["data"].get("tmux") or {}),
            timeout=90, interval=0.5)
        try:
            support.retry_until(lambda: self.turn(rec) == "dialog", timeout=90, interval=0.25)
        except AssertionError:
            raise AssertionError("no PermissionRequest seen (turn %r); the pane shows:\n%s"
                                 % (self.turn(rec), self.pane_text(rec)))
        support.retry_until(lambda: "touch ESCALATED" in self.pane_text(rec), timeout=30, interval=0.25)
        reply = self.rcoord("send", "status please", "--to", work["handle"], "--nudge", env=self.as_owner)
        self.assertFalse(reply["nudged"], reply)
        self.assertIn("permission dialog", reply["nudge_problem"])
        self.assertFalse(os.path.exists(os.path.join(work["path"], "ESCALATED")))
        # The request is still open: the person's own answer runs the command.
        person = support.TmuxClient(self, self.sock, rec["pane_id"])
        person.type("y")
        support.retry_until(lambda: os.path.exists(os.path.join(work["path"], "ESCALATED")), timeout=60,
                            interval=0.25)
        self.assertNotIn("coord: new messages", self.pane_text(rec))



if __name__ == "__main__":
    unittest.main()


class ResumedFirstBoundary(h.ResumedFirstBoundary, h.CoordCase):
    """Issue 24, 4: interactive Codex 0.171.0 resumed (`codex resume ID`) runs no hook until its
    first prompt is submitted, so a resumed window sat unregistered (coord blamed a trust prompt)
    and could not be nudged. `work resume` gives Codex a fixed first message on its command line:
    the resumed agent reaches its first boundary at once, registers and sees its messages."""

    harness = "codex"

    def launch_setup(self):
        env = h.codex_env(self.home, self.codex_home, self.server, self.launch_managed({"COORD_CODEX_CMD": self.cli}))
        h.trust_codex_repo(self.codex_home, self.server, self.repo, sandbox="workspace-write",
                           extra='[notice.model_migrations]\n"gpt-5.5" = "gpt-6-sol"')
        return env

    def test_resume_interrupted_brings_codex_to_its_first_boundary(self):
        self.resume_and_nudge("src/kept.py")
        self.told_kept("src/kept.py", self.requests_at_resume)


# --------------------------------------------------------------------------- Codex's sandbox and the host socket (issue 25, pgcodex)

SOCKET_PROBE = ("python3 -I -S -c 'import socket,sys\n"
                "s=socket.socket(socket.AF_UNIX)\n"
                "try:\n s.connect(sys.argv[1]); print(\"connect=ok\")\n"
                "except OSError as e: print(\"connect=errno%%d\" %% e.errno)' %s")


class PgSandbox(support.PostgresProject, h.CoordCase):
    """A PostgreSQL project (its URL in the project's settings file), the real Codex in its
    workspace-write sandbox with no writable root but the workspace (/tmp and TMPDIR excluded).
    The host process is started outside the sandbox first, as a person (or SessionStart) does."""

    harness = "codex"
    PG_PROJECT = h.CoordCase.project_id

    def setUp(self):
        super().setUp()
        self.rcoord("db", "start")
        self.peer_rt = self.peer()
        with open(self._mk("src/peer.py"), "w") as f:
            f.write("original\n")
        self.rcoord("claim", "src/peer.py", "--runtime", self.peer_rt["id"], "-p", "peer work")

    def _mk(self, rel):
        path = os.path.join(self.repo, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path

    def run_sandboxed(self, script, network):
        config = ("[sandbox_workspace_write]\nexclude_slash_tmp = true\nexclude_tmpdir_env_var = true\n"
                  "network_access = %s" % ("true" if network else "false"))
        return self.run_agent(script, sandbox="workspace-write", config=config)

    def script(self, own_command):
        """The agent probes both sockets (the host process's, the database server's), runs its own
        `.coord/coord` command, then patches the peer's leased file and a free one."""
        server = support.require_postgres(self)[0]
        pg_socket = os.path.join(server.dir, ".s.PGSQL.%d" % server.port)
        seen = {}

        def own(req):
            seen["probe"] = "\n".join(req.tool_results())
            return shell(own_command + "; echo rc=$?")

        def peer_patch(req):
            seen["own"] = "\n".join(req.tool_results())
            seen["state"] = self.coord_state()  # while the agent runs (SessionEnd ends its runtime)
            return apply_patch("*** Begin Patch\n*** Update File: src/peer.py\n@@\n-original\n+agent\n*** End Patch")

        def free_patch(req):
            seen["peer_patch"] = "\n".join(req.tool_results())
            return add_file("src/free.py", "x = 1")

        def end(req):
            seen["free_patch"] = "\n".join(req.tool_results())
            return say("done")
        probe = "echo host; %s; echo server; %s" % (SOCKET_PROBE % self.host_socket, SOCKET_PROBE % pg_socket)
        return [shell(probe), own, peer_patch, free_patch, end], seen

    def host_pid(self):
        with open(self.host_socket + ".lock") as f:
            return f.read().strip()

    def assert_hooks_held(self, seen):
        # Hooks run outside the sandbox: they reach the socket whatever network_access says.
        self.assertIn("Command blocked by PreToolUse hook: coord: write refused. src/peer.py: blocked by %s's"
                      " exclusive lease" % self.peer_rt["handle"], seen["peer_patch"])
        self.assertEqual(self.read_file("src/peer.py"), "original\n")
        self.assertEqual(self.read_file("src/free.py"), "x = 1\n")
        self.assertNotIn("refused", seen["free_patch"])

    def test_without_network_access_the_agents_coord_exits_4_and_the_hooks_still_hold(self):
        before = self.host_pid()
        script, seen = self.script(".coord/coord claim src/own.py")
        result = self.run_sandboxed(script, network=False)
        # Codex 0.171.0: connect() on any Unix socket is EPERM in the sandbox (the host process's
        # and the database server's alike), so agent code reaches neither.
        self.assertRegex(seen["probe"], r"host\nconnect=errno1\nserver\nconnect=errno1", seen["probe"])
        own = seen["own"]
        self.assertIn("rc=4", own)
        self.assertIn("was refused: Operation not permitted; inside Codex's workspace-write sandbox a Unix socket"
                      " needs network access", own)
        self.assertIn("next: the person sets network_access = true under [sandbox_workspace_write] in Codex's"
                      " config.toml (.coord/install . --doctor shows it), or approves running this command outside"
                      " the sandbox; meanwhile coord's hooks still check every write and deliver messages", own)
        self.assertNotIn("--override", own)
        self.assertNotIn("db start", own, "no hint to start a host process inside the sandbox")
        self.assert_hooks_held(seen)
        # Nothing was claimed, and no host process was started from inside the sandbox.
        state = self.coord_state()
        self.assertEqual([l["resource"] for l in state["leases"]], ["src/peer.py"])
        self.assertEqual(self.host_pid(), before)
        mains = [rt for rt in state["runtimes"] if rt.get("conversation") == result.session_id()]
        self.assertEqual(len(mains), 1, "SessionStart registered the agent through the socket: %s" % state)

    def test_with_network_access_the_agents_claim_goes_through_the_socket_as_itself(self):
        script, seen = self.script(".coord/coord claim src/own.py && .coord/coord release src/peer.py")
        result = self.run_sandboxed(script, network=True)
        # With network access the sandbox no longer refuses connect(): agent code reaches the host
        # process's socket, and any other the uid may open, the database server's included (what
        # --doctor says before a person turns it on). The test server's socket answers EACCES, not
        # EPERM: its directory is 0700 and owned by nobody, and the sandboxed root has no
        # CAP_DAC_OVERRIDE; a packaged server's socket (0777 in /var/run/postgresql) would connect.
        self.assertRegex(seen["probe"], r"host\nconnect=ok\nserver\nconnect=(ok|errno13)\n", seen["probe"])
        self.assertNotIn("--override", seen["own"])
        self.assert_hooks_held(seen)
        # The claim is the agent's own runtime's (caller facts from inside the sandbox's PID
        # namespace resolve to it); the peer's lease stays the peer's.
        agent = [rt for rt in self.coord_state()["runtimes"]
                 if rt.get("conversation") == result.session_id() and not rt.get("agent_id")]
        self.assertEqual(len(agent), 1, agent)
        held = sorted((l["resource"], l["runtime"]) for l in seen["state"]["leases"])
        self.assertEqual(held, sorted([("src/own.py", agent[0]["id"]), ("src/peer.py", self.peer_rt["id"])]), seen["own"])
        self.assertIn("coord: not held by you: src/peer.py", seen["own"])
        self.assertIn("rc=3", seen["own"])
