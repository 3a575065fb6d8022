"""End-to-end tests: the real Claude Code CLI, offline, against tests/modelserver.py.

HarnessFacts pins what coord relies on in Claude Code itself (tools run, project hooks fire,
how a deny reason and additionalContext reach the model, what a subagent's shell sees), using
a recording hook of the tests' own. The coord scenarios live in CoordScenarios.
"""

import json
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses as h  # noqa: E402
import support  # noqa: E402
from modelserver import say, tool  # noqa: E402

sys.path.insert(0, h.ROOT)
import store  # noqa: E402
import hostclient

TITLE_REQUEST = h.CLAUDE_TITLE_REQUEST


class HarnessFacts(h.HarnessCase):
    harness = "claude"

    def setUp(self):
        super().setUp()
        self.log = os.path.join(self.tmp, "hooks.jsonl")
        self.replies = os.path.join(self.tmp, "replies")
        self.write_hooks(h.recording_hooks(self.log, self.replies))

    def records(self, event=None, tool_name=None):
        return [r for r in h.read_hook_log(self.log)
                if (event is None or r["payload"].get("hook_event_name") == event)
                and (tool_name is None or r["payload"].get("tool_name") == tool_name)]

    def test_scripted_write_runs_offline_and_fires_project_hooks(self):
        path = os.path.join(self.repo, "a.txt")
        result = self.run_agent([tool("Write", file_path=path, content="hello\n"), say("done")])
        self.assertEqual(self.read_file("a.txt"), "hello\n")
        events = [r["payload"]["hook_event_name"] for r in self.records()]
        for ev in ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop",
                   "SessionEnd"):
            self.assertIn(ev, events)
        pre = self.records("PreToolUse", "Write")[0]["payload"]
        self.assertEqual(pre["tool_input"]["file_path"], path)
        self.assertEqual(pre["session_id"], result.session_id())
        self.assertEqual(len(self.server.model_requests()), 2)
        self.assertEqual([r.path for r in self.server.requests],
                         ["/v1/messages?beta=true"] * 2)

    def test_deny_reason_comes_back_as_the_tool_error(self):
        h.write_reply(self.replies, "PreToolUse-Write", h.deny("REASON-held-by-peer"))
        self.run_agent([tool("Write", file_path=os.path.join(self.repo, "a.txt"),
                             content="x\n"), say("done")])
        self.assertIsNone(self.read_file("a.txt"))
        tail = self.server.model_requests()[1].tail()
        block = tail[-1]["content"][0]
        self.assertEqual(block["type"], "tool_result")
        self.assertIs(block["is_error"], True)
        self.assertEqual(block["content"], "REASON-held-by-peer")

    def test_additional_context_comes_back_as_a_system_reminder(self):
        self.write_file("b.txt", "old\n")
        h.write_reply(self.replies, "PreToolUse-Edit", h.context("PreToolUse", "PRE-CTX"))
        h.write_reply(self.replies, "PostToolUse-Read", h.context("PostToolUse", "POST-CTX"))
        path = os.path.join(self.repo, "b.txt")
        self.run_agent([tool("Read", file_path=path),
                        tool("Edit", file_path=path, old_string="old", new_string="new"),
                        say("done")])
        self.assertEqual(self.read_file("b.txt"), "new\n")
        reqs = self.server.model_requests()

        def texts(req):  # the text of every user message after the model's last output
            out = []
            for m in req.tail():
                content = m.get("content")
                blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
                out += [b.get("text") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
            return out

        def results(req):
            return [b for m in req.tail() if isinstance(m.get("content"), list)
                    for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
        for event, tool_name, text in (("PostToolUse", "Read", "POST-CTX"), ("PreToolUse", "Edit", "PRE-CTX")):
            reminder = "<system-reminder>\n%s:%s hook additional context: %s\n</system-reminder>" % (
                event, tool_name, text)
            carrying = [r for r in reqs if reminder in texts(r)]
            self.assertTrue(carrying, [r.tail() for r in reqs])
            self.assertTrue(results(carrying[0]), "the reminder rides with the tool's result: %r" % carrying[0].tail())

    def test_session_start_context_is_a_system_message(self):
        h.write_reply(self.replies, "SessionStart", h.context("SessionStart", "SS-CTX"))
        self.run_agent([say("done")])
        first = self.server.model_requests()[0]
        systems = [m for m in first.items() if m.get("role") == "system"]
        self.assertTrue(any("SessionStart hook additional context: SS-CTX" in m["content"]
                            for m in systems), first.tail_text()[:2000])

    def test_subagent_shell_sees_the_same_environment_as_the_parent(self):
        # A subagent's Bash commands carry nothing that identifies the subagent: same env,
        # same CLAUDE_CODE_SESSION_ID, same process. Only its hook payloads carry agent_id.
        penv = os.path.join(self.tmp, "env-parent")
        senv = os.path.join(self.tmp, "env-sub")
        self.run_agent(
            [tool("Bash", command="env > %s; echo $PPID >> %s" % (penv, penv)),
             tool("Agent", description="sub", prompt="SUBTASK-1", subagent_type="general-purpose"),
             say("done")],
            lanes={"SUBTASK-1": [tool("Bash", command="env > %s; echo $PPID >> %s" % (senv, senv)),
                                 say("sub done")]},
            args=["--allowedTools", "Bash"])
        with open(penv) as f:
            parent = sorted(f.read().splitlines())
        with open(senv) as f:
            sub = sorted(f.read().splitlines())
        self.assertEqual(parent, sub)
        self.assertTrue(any(l.startswith("CLAUDE_CODE_SESSION_ID=") for l in parent))
        start = self.records("SubagentStart")[0]["payload"]
        sub_bash = [r["payload"] for r in self.records("PreToolUse", "Bash")
                    if r["payload"].get("agent_id")]
        self.assertEqual([p["agent_id"] for p in sub_bash], [start["agent_id"]])
        self.assertEqual(sub_bash[0]["session_id"], start["session_id"])

    def test_updated_input_can_tag_a_subagents_bash_command(self):
        # The one way to tell a subagent's shell who it is: its PreToolUse payload has
        # agent_id, and a reply with updatedInput (no permissionDecision) rewrites the command.
        h.write_reply(self.replies, "PreToolUse-Bash", {"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "updatedInput": {"command": "COORD_RUNTIME_ID=tagged env > env.txt"}}})
        self.run_agent(
            [tool("Agent", description="sub", prompt="SUBTASK-2", subagent_type="general-purpose"),
             say("done")],
            lanes={"SUBTASK-2": [tool("Bash", command="env > env.txt"), say("sub done")]},
            args=["--allowedTools", "Bash"])
        self.assertIn("COORD_RUNTIME_ID=tagged\n", self.read_file("env.txt"))

    def test_bash_needs_allowed_tools_in_accept_edits_mode(self):
        # acceptEdits alone refuses this Bash command in -p mode; tests that script shell
        # commands pass --allowedTools Bash.
        self.run_agent([tool("Bash", command="env > ran.txt"), say("done")])
        self.assertIsNone(self.read_file("ran.txt"))
        self.assertIn("requires approval", self.server.model_requests()[1].tool_results()[0])
        self.run_agent([tool("Bash", command="env > ran.txt"), say("done")],
                       args=["--allowedTools", "Bash"])
        self.assertIn("CLAUDE_CODE_SESSION_ID=", self.read_file("ran.txt"))

    def test_no_hook_runs_once_its_settings_are_gone(self):
        os.unlink(os.path.join(self.repo, ".claude", "settings.json"))
        self.run_agent([tool("Write", file_path=os.path.join(self.repo, "a.txt"),
                                      content="x\n"), say("done")])
        self.assertEqual(self.records(), [])
        self.assertEqual(self.read_file("a.txt"), "x\n")


def _read_write_edit(repo):
    a = os.path.join(repo, "src", "a.py")
    return [tool("Read", file_path=a),
            tool("Write", file_path=a, content="agent\n"),
            tool("Edit", file_path=a, old_string="original", new_string="agent"),
            say("done")]


class CoordScenarios(h.CoordCase):
    """coord installed by ./install; the real hooks; Claude Code driven by the script."""

    harness = "claude"
    BASH = ["--allowedTools", "Bash"]

    def agent_runtime(self, session):
        mains = [rt for rt in self.runtimes_of(session) if not rt.get("agent_id")]
        self.assertEqual(len(mains), 1, self.coord_state())
        return mains[0]

    def test_start_up_registers_the_agent_until_the_session_ends(self):
        def script(repo):
            return [tool("Write", file_path=os.path.join(repo, "a.txt"), content="x\n"),
                    say("done")]
        result = self.run_agent(script(self.repo))
        session = result.session_id()
        self.assertTrue(session)
        rt = self.agent_runtime(session)
        self.assertIsNotNone(rt["ended_at"], rt)
        self.assertFalse(rt["live"], rt)

    def test_write_to_a_peers_exclusive_lease_is_denied(self):
        peer = self.peer()
        self.rcoord("claim", "src/a.py", "--runtime", peer["id"], "-p", "peer work")
        for repo in (self.repo, self.plain):
            self.write_file("src/a.py", "original\n", repo=repo)
        self.run_agent(_read_write_edit(self.repo))
        self.assertEqual(self.read_file("src/a.py"), "original\n")
        reqs = self.server.model_requests()
        for i, what in ((2, "Write"), (3, "Edit")):
            block = reqs[i].tail()[-1]["content"][0]
            self.assertEqual(block["type"], "tool_result", what)
            self.assertIs(block.get("is_error"), True, (what, block))
            self.assertIn(peer["handle"], h.flatten(block["content"]), what)
            self.assertIn("src/a.py", h.flatten(block["content"]), what)
        self.control(_read_write_edit)  # without coord the same session writes the file
        with open(os.path.join(self.plain, "src", "a.py")) as f:
            self.assertEqual(f.read(), "agent\n")

    def test_write_to_an_unleased_path_goes_through(self):
        peer = self.peer()
        self.rcoord("claim", "src/a.py", "--runtime", peer["id"])

        def script(repo):
            return [tool("Write", file_path=os.path.join(repo, "src", "c.py"), content="c\n"),
                    say("done")]
        self.run_agent(script(self.repo))
        self.assertEqual(self.read_file("src/c.py"), "c\n")
        self.assertNotIn(peer["handle"], self.server.model_requests()[1].tail_text())

    def test_message_is_injected_then_reminded_until_acked(self):
        peer = self.peer()
        body = "BODY-7f3: please leave src/a.py alone"
        sent = {}
        for repo in (self.repo, self.plain):
            self.write_file("notes.txt", "notes\n", repo=repo)

        def send(req):
            agents = [rt for rt in self.rcoord("list")["runtimes"] if rt["id"] != peer["id"]]
            self.assertEqual(len(agents), 1, agents)
            sent.update(self.rcoord("send", body, "--to", agents[0]["handle"],
                                    "--runtime", peer["id"]))
            return tool("Read", file_path=os.path.join(self.repo, "notes.txt"))

        def ack(req):
            return tool("Bash", command=".coord/coord ack %d" % sent["id"])

        read = tool("Read", file_path=os.path.join(self.repo, "notes.txt"))
        self.run_agent([send, read, ack, read, say("done")], args=self.BASH)
        reqs = self.server.model_requests()
        first, second, after_ack, later = (reqs[i].tail_text() for i in (1, 2, 3, 4))
        self.assertIn(body, first)
        self.assertNotIn(body, second)
        for part in (str(sent["id"]), peer["handle"], sent["digest"][:8], "coord inbox --peek"):
            self.assertIn(part, second)
        self.assertNotIn(peer["handle"], after_ack)
        self.assertNotIn(peer["handle"], later)

    def test_subagent_is_its_own_runtime_and_cannot_write_the_parents_lease(self):
        seen = {}

        def sub_write(req):
            seen["state"] = self.coord_state()
            return tool("Write", file_path=os.path.join(self.repo, "src", "a.py"),
                        content="sub\n")
        result = self.run_agent(
            [tool("Bash", command=".coord/coord claim src/a.py -p parent"),
             tool("Agent", description="sub", prompt="SUBTASK-5 write src/a.py",
                  subagent_type="general-purpose"),
             say("done")],
            lanes={"SUBTASK-5": [sub_write, say("sub done")]}, args=self.BASH)
        self.assertIsNone(self.read_file("src/a.py"))
        session = result.session_id()
        parent = self.agent_runtime(session)
        held = [l for l in seen["state"]["leases"] if l["resource"] == "src/a.py"]
        self.assertEqual([l["runtime"] for l in held], [parent["id"]])
        denial = self.server.model_requests("SUBTASK-5")[1].tool_results()
        self.assertIn(parent["handle"], denial[0])
        subs = [rt for rt in self.runtimes_of(session) if rt.get("agent_id")]
        self.assertEqual(len(subs), 1, self.coord_state())
        self.assertNotEqual(subs[0]["id"], parent["id"])
        self.assertNotEqual(subs[0]["handle"], parent["handle"])

    def test_subagents_own_claim_is_its_own_and_lets_it_write(self):
        # The subagent's shell has the parent's environment; the hook tags its coord commands
        # with the subagent's runtime, so its claim is its own and its write goes through.
        seen = {}

        def sub_write(req):
            seen["state"] = self.coord_state()
            seen["claim_output"] = req.tool_results()
            return tool("Write", file_path=os.path.join(self.repo, "src", "sub.py"), content="sub\n")
        result = self.run_agent(
            [tool("Agent", description="sub", prompt="SUBTASK-6 claim and write src/sub.py",
                  subagent_type="general-purpose"),
             say("done")],
            lanes={"SUBTASK-6": [tool("Bash", command=".coord/coord claim src/sub.py -p sub"),
                                 sub_write, say("sub done")]}, args=self.BASH)
        session = result.session_id()
        subs = [rt for rt in self.runtimes_of(session) if rt.get("agent_id")]
        self.assertEqual(len(subs), 1, self.coord_state())
        held = [l for l in seen["state"]["leases"] if l["resource"] == "src/sub.py"]
        self.assertEqual([l["runtime"] for l in held], [subs[0]["id"]], seen)
        self.assertEqual(self.read_file("src/sub.py"), "sub\n")

    def test_hooks_fail_open_when_the_database_cannot_be_opened(self):
        blocker = os.path.join(self.tmp, "not-a-directory")
        with open(blocker, "w") as f:
            f.write("x")
        for n, db in enumerate((os.path.join(blocker, "db.sqlite3"), self.corrupt_db())):
            rel = "f%d.txt" % n
            result = self.run_agent([tool("Write", file_path=os.path.join(self.repo, rel),
                                          content=db + "\n"), say("done")],
                                    env={"COORD_DB": db})
            self.assertEqual(self.read_file(rel), db + "\n")
            self.assertEqual(result.events[-1].get("subtype"), "success", result.describe())

    def corrupt_db(self):
        path = os.path.join(self.tmp, "corrupt.sqlite3")
        with open(path, "wb") as f:
            f.write(b"this is not an SQLite database" * 100)
        return path

    def test_agents_own_claim_resolves_to_its_runtime(self):
        seen = {}

        def look(req):
            seen["state"] = self.coord_state()
            seen["output"] = req.tool_results()
            return say("done")
        result = self.run_agent([tool("Bash", command=".coord/coord claim src/x.py"), look],
                                args=self.BASH)
        rt = self.agent_runtime(result.session_id())
        held = [l for l in seen["state"]["leases"] if l["resource"] == "src/x.py"]
        self.assertEqual([l["runtime"] for l in held], [rt["id"]], seen)


class AgentIsNoPerson(h.CoordCase):
    """The person creates a work at a terminal; Claude Code's agent strips every harness variable
    and detaches (`env -u ... setsid -f sh -c ...`: parent pid 1, no terminal, no harness above)
    to pass the gate of, land and remove that work. Such a caller shows no agent, but no person
    either: it is the user alone, which has no authority over a work made at a terminal, and
    may not name the person's runtime."""

    harness = "claude"
    BASH = ["--allowedTools", "Bash"]

    def test_a_detached_process_of_the_agent_cannot_gate_land_or_remove_the_persons_work(self):
        managed = self.managed_env()
        person_env = dict(self.env, **managed)
        term = support.Terminal(self, person_env, self.repo)
        rc, out = term.run(".coord/coord work create by-the-person --json")
        self.assertEqual(rc, 0, out)
        work = json.loads(out)["work"]
        rc, out = term.run(".coord/coord hello --json")
        person = json.loads(out)["runtime"]
        self.assertEqual((work["runtime"], person["person"]), (person["id"], True), out)
        handle = work["handle"]
        results = {}
        for name, extra in (("bare", ""), ("named", " --runtime " + person["handle"])):
            out_file = os.path.join(self.tmp, "%s.out" % name)
            rc_file = os.path.join(self.tmp, "%s.rc" % name)
            inner = ("(.coord/coord work gate {h} --pass{x} && .coord/coord work integrate land {h} --into main{x}"
                     " && .coord/coord work remove {h} --confirm {h}{x}) > {o} 2>&1; echo $? > {r}.part;"
                     " mv {r}.part {r}").format(h=handle, x=extra, o=out_file, r=rc_file)
            command = ("env -u CLAUDECODE -u CLAUDE_CODE_SESSION_ID -u COORD_RUNTIME_ID -u CLAUDE_CODE_ENTRYPOINT"
                       " setsid -f sh -c '%s'" % inner)
            self.run_agent([tool("Bash", command=command), say("done")], env=managed, args=self.BASH)
            support.retry_until(lambda: os.path.exists(rc_file), timeout=120, interval=0.2)
            with open(rc_file) as f, open(out_file) as g:
                results[name] = (f.read().strip(), g.read())
        self.assertEqual(results["bare"][0], "3", results)
        self.assertIn("may not pass or waive the gate of %s" % handle, results["bare"][1])
        self.assertEqual(results["named"][0], "3", results)
        self.assertIn("%s is a person's runtime" % person["handle"], results["named"][1])
        rec = self.rcoord("work", "inspect", handle)["work"]
        self.assertEqual(rec["data"]["gate"]["state"], "pending", rec)
        self.assertTrue(os.path.isdir(work["path"]))
        events = [e["event"] for e in self.rcoord("audit")["events"]]
        self.assertEqual([e for e in events if e.startswith("work.gate") or e.startswith("work.integrat")
                          or e in ("work.authority.override", "work.removed")], [], events)
        # The person, at their terminal, still may.
        self.assertEqual(term.run(".coord/coord work gate %s --pass" % handle), (0, "%s gate passed\n" % handle))


class CloneTrust(h.CoordCase):
    """Interactive Claude Code started by `coord work start` in a managed clone. Claude keys
    workspace trust by path (`projects[<dir>].hasTrustDialogAccepted` in ~/.claude.json), so a
    clone of a trusted checkout stops at the trust dialog and no hook runs. With the opt-in the
    person's trust is carried over and the agent registers; without it (the control) the dialog
    waits, `work start` said so, and `work list` flags the work."""

    harness = "claude"

    def setUp(self):
        super().setUp()
        # The person has used Claude Code before and trusted the shared checkout.
        self.claude_json = self.interactive_claude()
        self.server.load([])
        self.owner = self.rcoord("hello", env=self.launch_env)["runtime"]

    def start(self, carry):
        if carry:
            self.coord_at_terminal("trust", "--carry-over", "on", env=self.launch_env, cwd=self.repo, check=0)
        work = self.rcoord("work", "create", "trusty", "--runtime", self.owner["id"], env=self.launch_env)["work"]
        started = self.rcoord("work", "start", work["handle"], "--harness", "claude", "--runtime",
                              self.owner["id"], env=self.launch_env)
        return work, started

    def tmux_record(self, work):
        return self.rcoord("work", "inspect", work["handle"], env=self.launch_env)["work"]["data"].get("tmux") or {}

    def pane_text(self, work):
        pane = self.tmux_record(work)["pane_id"]
        return subprocess.run([self.tmux_bin, "-S", self.sock, "capture-pane", "-p", "-t", pane],
                              stdout=subprocess.PIPE, universal_newlines=True, timeout=10).stdout

    def test_carried_over_trust_lets_the_agent_register(self):
        work, started = self.start(carry=True)
        self.assertEqual(started.get("approvals"), [], started)
        rec = support.retry_until(lambda: self.tmux_record(work).get("runtime_id") and self.tmux_record(work),
                                  timeout=60, interval=0.5)
        runtime = [rt for rt in self.coord_state()["runtimes"] if rt["id"] == rec["runtime_id"]]
        self.assertEqual(len(runtime), 1, self.coord_state())
        listed = [w for w in self.rcoord("work", "list", env=self.launch_env)["work"] if w["handle"] == work["handle"]]
        self.assertNotIn("attention", listed[0])
        with open(self.claude_json) as f:
            self.assertTrue(json.load(f)["projects"][work["path"]]["hasTrustDialogAccepted"])
        # Removal takes the clone's entry away and leaves the person's own.
        self.rcoord("work", "close", work["handle"], "--runtime", self.owner["id"], env=self.launch_env)
        self.rcoord("work", "gate", work["handle"], "--waive", "--reason", "e2e", "--runtime", self.owner["id"],
                    env=self.launch_env)
        support.retry_until(lambda: (self.rcoord("work", "remove", work["handle"], "--confirm", work["handle"],
                                                 "--runtime", self.owner["id"], env=self.launch_env, check=None)
                                     or {}).get("removed"), timeout=60, interval=0.5)
        with open(self.claude_json) as f:
            projects = json.load(f)["projects"]
        self.assertNotIn(work["path"], projects)
        self.assertTrue(projects[self.repo]["hasTrustDialogAccepted"])

    def test_without_the_opt_in_the_trust_dialog_waits_and_list_says_so(self):
        work, started = self.start(carry=False)
        self.assertIn("trust dialog", "\n".join(started.get("approvals") or []), started)
        text = support.retry_until(lambda: "trust this folder" in self.pane_text(work) and self.pane_text(work),
                                   timeout=60, interval=0.5)
        self.assertIn(work["path"], text.replace("\n", ""))
        self.assertIsNone(self.tmux_record(work).get("runtime_id"))
        listed = [w for w in self.rcoord("work", "list", env=self.launch_env)["work"] if w["handle"] == work["handle"]]
        self.assertEqual(listed[0].get("attention"), "started, agent not registered: trust prompt?")



class Nudge(h.CoordCase):
    """`send --to WORK --nudge` to an interactive Claude Code that `coord work start` launched in
    tmux types coord's fixed line and Enter only when the agent's hooks saw its turn end (Stop)
    and no one typed into its pane since the turn began: it wakes an idle agent (the next model
    request carries the message), and never answers a permission dialog or submits what a person
    half-typed. The Enter comes on its own: Claude Code reads an Enter in the same write as typed
    text as part of a paste and keeps the line unsent."""

    harness = "claude"

    def setUp(self):
        super().setUp()
        self.interactive_claude()
        self.owner = self.rcoord("hello", env=self.launch_env)["runtime"]
        self.as_owner = dict(self.launch_env, COORD_RUNTIME_ID=self.owner["id"])
        self.coord_at_terminal("trust", "--carry-over", "on", env=self.launch_env, cwd=self.repo, check=0)

    def launch(self, name, script, prompt):
        """A work whose interactive Claude Code got `prompt` as its first message; -> (work, record)."""
        self.server.load(script)
        work = self.rcoord("work", "create", name, env=self.as_owner)["work"]
        self.rcoord("work", "start", work["handle"], "--harness", "claude", "--prompt", prompt, env=self.as_owner)
        rec = support.retry_until(lambda: (lambda r: r if r.get("runtime_id") else None)(
            self.rcoord("work", "inspect", work["handle"], env=self.launch_env)["work"]["data"].get("tmux") or {}),
            timeout=60, interval=0.5)
        work = self.rcoord("work", "inspect", work["handle"], env=self.launch_env)["work"]
        return work, rec

    def carrying(self, text):
        return [r for r in list(self.server.requests) if r.api and text in r.text()]

    def test_a_nudge_wakes_an_agent_idle_after_its_turn(self):
        import session
        work, rec = self.launch("idle-one", [say("ready")] + [say("ok")] * 50, "Say ready.")
        support.retry_until(lambda: self.turn(rec) == "idle", timeout=60, interval=0.25)
        marker = "NUDGED-BODY-%d" % os.getpid()
        self.rcoord("send", "look at %s" % marker, "--to", work["handle"], env=self.as_owner)
        self.assertEqual(self.carrying(marker), [], "an idle agent sees nothing without a prompt")
        reply = self.rcoord("send", "and again", "--to", work["handle"], "--nudge", env=self.as_owner)
        self.assertTrue(reply["nudged"], reply)
        seen = support.retry_until(lambda: self.carrying(marker), timeout=60, interval=0.25)
        self.assertIn(session.NUDGE, seen[0].user_text())

    def test_ctrl_c_twice_ends_claude_and_loses_nothing(self):
        """The field lost a worktree to Ctrl-C twice (claude-code#41089): here the real Claude Code,
        launched by work start, writes a file (the person approves) and ends its turn, and the
        person's Ctrl-C twice ends it; the clone, the file and the work stay, gc keeps it and remove refuses (docs/cleanup.md)."""
        work = self.rcoord("work", "create", "ctrl-c", env=self.as_owner)["work"]
        kept = os.path.join(work["path"], "kept.txt")
        wrote = []

        def step(request):  # the main loop's request (it offers Write) writes once; side requests get text
            if not wrote and any(t.get("name") == "Write" for t in (request.body or {}).get("tools") or []):
                wrote.append(request)
                return tool("Write", file_path=kept, content="the agent's work\n")
            return say("written")
        self.server.load([step] * 50)
        self.rcoord("work", "start", work["handle"], "--harness", "claude", "--prompt", "Write kept.txt.",
                    env=self.as_owner)
        rec = support.retry_until(lambda: (lambda r: r if r.get("runtime_id") else None)(
            self.rcoord("work", "inspect", work["handle"], env=self.launch_env)["work"]["data"].get("tmux") or {}),
            timeout=60, interval=0.5)
        person = support.TmuxClient(self, self.sock, rec["pane_id"])
        support.retry_until(lambda: "Do you want to create kept.txt" in self.pane_text(rec), timeout=60, interval=0.25)
        person.type("\r")  # the person lets it write
        try:
            support.retry_until(lambda: os.path.exists(kept) and self.turn(rec) == "idle", timeout=60, interval=0.25)
        except AssertionError:
            self.fail("turn %s, kept.txt %s; the pane:\n%s" % (self.turn(rec), os.path.exists(kept), self.pane_text(rec)))

        def interrupted():
            return [w for w in self.rcoord("work", "list", env=self.as_owner)["work"] if w.get("interrupted")]
        for _ in range(4):  # Ctrl-C twice, again if it did not end (a loaded machine can drop the first)
            try:
                person.type("\x03")
                time.sleep(0.3)
                person.type("\x03")
            except OSError:  # the client went with the session: it ended
                pass
            try:
                support.retry_until(interrupted, timeout=20, interval=0.5)
                break
            except AssertionError:
                pass
        else:
            self.fail("Ctrl-C twice, four times, did not end it; the pane:\n%s" % self.pane_text(rec))
        self.rcoord("work", "gate", work["handle"], "--waive", "--reason", "e2e", env=self.as_owner)
        self.rcoord("work", "close", work["handle"], env=self.as_owner)  # even waived and closed, it is kept
        gc = self.rcoord("work", "gc", env=self.as_owner)
        self.assertIn(work["handle"], [k["handle"] for k in gc["kept"]], gc)
        self.rcoord("work", "remove", work["handle"], "--confirm", work["handle"], env=self.as_owner, check=3)
        with open(kept) as f:
            self.assertEqual(f.read(), "the agent's work\n")

    def test_a_nudge_never_answers_a_permission_dialog(self):
        asked = []

        def step(request):  # the main loop's request (it offers Bash) asks once; side requests get text
            if not asked and any(t.get("name") == "Bash" for t in (request.body or {}).get("tools") or []):
                asked.append(request)
                return tool("Bash", command="touch APPROVED", description="make the marker")
            return say("done")
        work, rec = self.launch("asks", [step] * 50, "Run the scripted command.")
        support.retry_until(lambda: self.turn(rec) == "dialog", timeout=60, interval=0.25)
        support.retry_until(lambda: "touch APPROVED" in self.pane_text(rec), timeout=30, interval=0.25)
        peer = self.rcoord("hello", "--conversation", "peer-%d" % os.getpid(), "--harness", "claude",
                           env=self.launch_env)["runtime"]
        for who, why in ((self.as_owner, "permission dialog"),
                         (dict(self.launch_env, COORD_RUNTIME_ID=peer["id"]), "only the person or the work's owner")):
            reply = self.rcoord("send", "status please", "--to", work["handle"], "--nudge", env=who)
            self.assertFalse(reply["nudged"], reply)
            self.assertIn(why, reply["nudge_problem"])
        # The dialog is still open and unanswered: the person closes it (Escape, in order after anything typed).
        self.assertIn("touch APPROVED", self.pane_text(rec))
        person = support.TmuxClient(self, self.sock, rec["pane_id"])
        person.type("\x1b")
        support.retry_until(lambda: "Do you want to proceed" not in self.pane_text(rec), timeout=30, interval=0.25)
        self.assertFalse(os.path.exists(os.path.join(work["path"], "APPROVED")), "the nudge ran the command")

    def test_the_watch_shows_working_waiting_and_idle_and_tells_the_person(self):
        import threading
        told = self.person_watch(env=self.launch_env)
        gate, asked = threading.Event(), []

        def step(request):  # the main loop's request (it offers Bash) waits for the test, then asks once
            if not asked and any(t.get("name") == "Bash" for t in (request.body or {}).get("tools") or []):
                asked.append(request)
                gate.wait(90)  # meanwhile the agent is in its turn: working
                return tool("Bash", command="touch APPROVED", description="make the marker")
            return say("done")
        work, rec = self.launch("watched", [step] * 50, "Run the scripted command.")
        self.addCleanup(gate.set)
        self.watch_state(work, "working")
        gate.set()
        row = self.watch_state(work, "waiting")
        self.assertEqual((row["tool"], row["harness"]), ("Bash", "claude"))
        support.retry_until(lambda: "touch APPROVED" in self.pane_text(rec), timeout=30, interval=0.25)
        lines = self.told(told, "waits for you")
        self.assertEqual(lines, ["coord: %s (watched) waits for you: it asks to run Bash" % work["handle"]])
        frame = self.rcoord_lines("watch", "--once")
        self.assertTrue(all(len(l) <= 100 for l in frame), frame)
        self.assertIn("1 waiting for you", frame[0])
        # The person approves (Enter on "Yes"): the command runs, the model ends its turn, idle. (An
        # Escape instead interrupts the turn with no further event: docs/harness-claude.md, States.)
        support.TmuxClient(self, self.sock, rec["pane_id"]).type("\r")
        support.retry_until(lambda: os.path.exists(os.path.join(work["path"], "APPROVED")), timeout=60, interval=0.25)
        self.watch_state(work, "idle")
        self.assertIn("coord: %s (watched) finished its turn" % work["handle"], self.told(told, "finished its turn"))
        self.assertEqual(sum("waits for you" in l for l in self.told(told, "finished")), 1, "one notice per event")

    def test_what_a_person_half_typed_is_never_submitted_by_a_nudge(self):
        import session
        work, rec = self.launch("typed-into", [say("ready")] + [say("ok")] * 50, "Say ready.")
        support.retry_until(lambda: self.turn(rec) == "idle", timeout=60, interval=0.25)
        person = support.TmuxClient(self, self.sock, rec["pane_id"])
        words = "please do NOT touch the database, first"
        person.type(words)
        support.retry_until(lambda: words in self.pane_text(rec), timeout=30, interval=0.25)
        reply = self.rcoord("send", "status please", "--to", work["handle"], "--nudge", env=self.as_owner)
        self.assertFalse(reply["nudged"], reply)
        self.assertIn("someone typed into tmux session", reply["nudge_problem"])
        # The person's line is theirs alone: submitted by them, it carries no nudge text.
        person.type("\r")
        seen = support.retry_until(lambda: self.carrying(words), timeout=60, interval=0.25)
        self.assertNotIn(session.NUDGE, seen[0].user_text())
        self.assertNotIn(session.NUDGE, self.pane_text(rec))


class AgentLandsItsOwnWork(h.CoordCase):
    """The person sets `git config coord.landCheck false` in the shared checkout and starts the
    real Claude Code (interactive, `work start`, in tmux) for a work that has a described change.
    The scripted model runs `.coord/coord work integrate land W --into main --check true` from
    the clone, as a model that wants its work landed would: coord refuses it (the person lands;
    agents queue), main does not move, the hint it reads names `work integrate enqueue` and no
    `--override`, and the model's next command, the hint's, queues the work."""

    harness = "claude"

    def setUp(self):
        super().setUp()
        self.interactive_claude()
        self.owner = self.rcoord("hello", env=self.launch_env)["runtime"]

    def git(self, *args):
        return subprocess.run(["git", "-C", self.repo] + list(args), env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=60, check=True).stdout.strip()

    def test_the_launched_agent_cannot_land_or_replace_the_repository_s_check(self):
        as_owner = dict(self.launch_env, COORD_RUNTIME_ID=self.owner["id"])
        self.git("config", "coord.landCheck", "false")
        self.coord_at_terminal("trust", "--carry-over", "on", env=self.launch_env, cwd=self.repo, check=0)
        work = self.rcoord("work", "create", "agent-lands", env=as_owner)["work"]
        handle, path = work["handle"], work["path"]
        with open(os.path.join(path, "feature.txt"), "w") as f:
            f.write("feature\n")
        subprocess.run(["jj", "--no-pager", "describe", "-m", "add a feature"], cwd=path, env=dict(self.env,
                       **as_owner), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60, check=True)
        before = self.git("rev-parse", "main")
        marker = "LAND-IT-%d" % os.getpid()
        land = ".coord/coord work integrate land %s --into main --check true" % handle
        enqueue = ".coord/coord work integrate enqueue %s --into main" % handle
        steps = [tool("Bash", command=land, description="land"), tool("Bash", command=enqueue, description="queue"),
                 say("queued for the person")]

        def turn(req):  # Claude Code's side request for a session title takes no step
            if TITLE_REQUEST in req.text():
                return say('{"title": "Land the work"}')
            return steps.pop(0) if steps else say("ok")
        self.server.load([say("ok")] * 20, lanes={marker: [turn] * 20})
        argv = support.script_argv(os.path.join(self.repo, ".coord", "coord")) + ["work", "start", handle, "--harness",
                "claude", "--prompt", "%s: land your work" % marker, "--json", "--", "--allowedTools", "Bash"]
        proc = subprocess.run(argv, cwd=self.repo, env=dict(self.env, **as_owner), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

        def results():  # the tool results the model was sent (land's, then enqueue's), once every step played
            got = [t for r in self.server.model_requests(marker) for t in r.tool_results()]
            return got if not steps and len(got) >= 2 else None
        try:
            seen = support.retry_until(results, timeout=120, interval=0.5)
        except AssertionError:
            self.fail("the scripted lane did not finish: %d steps left, %d requests" % (
                len(steps), len(self.server.model_requests(marker))))
        landed = seen[0]
        self.assertIn("may not land %s" % handle, landed)
        self.assertIn("work integrate enqueue %s --into main" % handle, landed)
        self.assertIn("the person lands it", landed)
        self.assertNotIn("--override", landed, "a hint to an agent never offers the override")
        self.assertEqual(self.git("rev-parse", "main"), before, "main did not move")
        rec = self.rcoord("work", "inspect", handle, "--verbose", env=self.launch_env)["work"]
        self.assertEqual(rec["data"]["integration"]["state"], "queued", "the agent followed the hint")
        self.assertNotEqual(rec["data"]["gate"]["state"], "passed")
        self.assertNotIn("landing", [k for k, v in rec["data"].items() if v])
        harness = rec["data"]["tmux"]["runtime_id"]
        self.assertEqual(rec["data"]["integration"]["queued_by"], harness, "the work's own harness queued it")
        events = [json.loads(l) for l in subprocess.run(
            support.script_argv(os.path.join(self.repo, ".coord", "coord")) + ["audit"], cwd=self.repo, env=self.env,
            stdout=subprocess.PIPE, universal_newlines=True, timeout=60).stdout.splitlines()]
        self.assertEqual([e for e in events if e["event"].startswith(("work.authority.override", "work.landing"))],
                         [])


class AgentOpensATmuxWindow(h.CoordCase):
    """The person creates a work at a terminal; the real Claude Code that `work start` launched
    in coord's tmux server (interactive, another work) runs, through its Bash tool,
    `tmux new-window -d 'coord work gate W --pass'`: the new window's shell has a terminal and
    descends from the tmux server, not from Claude Code. It is no person: the gate refuses, and
    no audit row names the person. The person at their terminal still passes it."""

    harness = "claude"

    def setUp(self):
        super().setUp()
        self.interactive_claude()
        self.owner = self.rcoord("hello", env=self.launch_env)["runtime"]

    def test_a_window_the_agent_opens_in_coord_s_server_is_not_the_person(self):
        term = support.Terminal(self, self.launch_env, self.repo)
        rc, out = term.run(".coord/coord work create by-the-person --json")
        self.assertEqual(rc, 0, out)
        theirs = json.loads(out)["work"]["handle"]
        person = json.loads(term.run(".coord/coord hello --json")[1])["runtime"]
        self.assertTrue(person["person"], person)
        as_owner = dict(self.launch_env, COORD_RUNTIME_ID=self.owner["id"])
        self.coord_at_terminal("trust", "--carry-over", "on", env=self.launch_env, cwd=self.repo, check=0)
        work = self.rcoord("work", "create", "opens-a-window", env=as_owner)["work"]
        out_file, rc_file = os.path.join(self.tmp, "gate.out"), os.path.join(self.tmp, "gate.rc")
        inner = "cd %s && .coord/coord work gate %s --pass > %s 2>&1; echo $? > %s.part; mv %s.part %s" % (
            self.repo, theirs, out_file, rc_file, rc_file, rc_file)
        steps = [tool("Bash", command="tmux new-window -d '%s'" % inner, description="open a window"),
                 say("done")]
        marker = "WINDOW-%d" % os.getpid()

        def turn(req):  # Claude Code's side request for a session title takes no step
            if TITLE_REQUEST in req.text():
                return say('{"title": "Open a window"}')
            return steps.pop(0) if steps else say("ok")
        self.server.load([say("ok")] * 20, lanes={marker: [turn] * 20})
        argv = support.script_argv(os.path.join(self.repo, ".coord", "coord")) + ["work", "start", work["handle"],
                "--harness", "claude", "--prompt", "%s: gate it" % marker, "--json", "--", "--allowedTools", "Bash"]
        proc = subprocess.run(argv, cwd=self.repo, env=as_owner, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        try:
            support.retry_until(lambda: os.path.exists(rc_file), timeout=120, interval=0.5)
        except AssertionError:
            self.fail("the window never ran: %d steps left, %d requests" % (
                len(steps), len(self.server.model_requests(marker))))
        with open(rc_file) as f, open(out_file) as g:
            rc, out = f.read().strip(), g.read()
        self.assertEqual(rc, "3", out)
        self.assertIn("not a person", out)
        rec = self.rcoord("work", "inspect", theirs, env=self.launch_env)["work"]
        self.assertEqual(rec["data"]["gate"]["state"], "pending", rec)
        events = self.rcoord("audit", env=self.launch_env)["events"]
        self.assertEqual([e for e in events if e["event"].startswith("work.gate")], [], events)
        people = [r["conversation"] for r in self.rcoord("list", "--all", env=self.launch_env)["runtimes"]
                  if r.get("harness") == "person"]
        self.assertEqual(people, [person["conversation"]], "no other terminal became the person")
        rc, out = term.run(".coord/coord work gate %s --pass" % theirs)
        self.assertEqual(rc, 0, out)


class TheQueueSendsWorkBackAndWakesItsAgent(h.CoordCase):
    """The person makes a work and starts the real Claude Code for it (interactive, in tmux); the
    scripted model queues it (`work integrate enqueue`) and ends its turn. The person lands the
    queue with a check the change breaks: the work goes back to its agent, and the agent, idle at
    its prompt, is nudged, runs a turn, and reads the message with its steps in that turn's context."""

    harness = "claude"

    def setUp(self):
        super().setUp()
        self.interactive_claude()

    def test_a_sent_back_work_reaches_its_idle_agent_in_its_next_turn(self):
        self.coord_at_terminal("trust", "--carry-over", "on", env=self.launch_env, cwd=self.repo, check=0)
        rc, out = self.coord_at_terminal("work", "create", "queued-e2e", env=self.launch_env, cwd=self.repo)
        self.assertEqual(rc, 0, out)
        handle, path = out.split()[:2]
        with open(os.path.join(path, "broken.txt"), "w") as f:
            f.write("breaks the check\n")
        subprocess.run(["jj", "--no-pager", "describe", "-m", "add broken.txt"], cwd=path, env=dict(self.env,
                       **self.launch_env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60, check=True)
        marker = "QUEUE-IT-%d" % os.getpid()
        steps = [tool("Bash", command=".coord/coord work integrate enqueue %s --into main" % handle,
                      description="queue"), say("queued for the person")]

        def turn(req):  # Claude Code's side request for a session title takes no step
            if TITLE_REQUEST in req.text():
                return say('{"title": "Queue the work"}')
            return steps.pop(0) if steps else say("ok")
        self.server.load([say("ok")] * 20, lanes={marker: [turn] * 20})
        rc, out = self.coord_at_terminal("work", "start", handle, "--harness", "claude", "--prompt",
                                         "%s: queue your work" % marker, "--", "--allowedTools", "Bash",
                                         env=self.launch_env, cwd=self.repo)
        self.assertEqual(rc, 0, out)
        st = store.Store(environ=dict(self.env, **self.launch_env))
        self.addCleanup(st.close)

        def idle_and_queued():
            w = st.resolve_work(handle)
            if (w["data"].get("integration") or {}).get("state") != "queued" or steps:
                return None
            turn_now = st.turn(st.work_recipient(w)["id"])
            return turn_now if turn_now and turn_now["state"] == "idle" else None
        try:
            support.retry_until(idle_and_queued, timeout=120, interval=0.5)
        except AssertionError:
            self.fail("the agent did not queue its work and stop: %d steps left" % len(steps))
        rc, out = self.coord_at_terminal("work", "integrate", "land", "--queued", "--into", "main", "--check",
                                         "test ! -f broken.txt", "--json", env=self.launch_env, cwd=self.repo)
        self.assertEqual(rc, 0, out)
        reply = json.loads(out[out.index("{"):])
        self.assertEqual([(x["work"], x["outcome"], x["reason"], x["nudged"]) for x in reply["works"]],
                         [(handle, "sent-back", "check-failed", True)])

        def told():
            return [r for r in self.server.model_requests(marker) if "sent back work %s" % handle in r.text()]
        try:
            seen = support.retry_until(told, timeout=120, interval=0.5)
        except AssertionError:
            self.fail("the nudged agent's next turn did not carry the message")
        self.assertIn("coord work integrate enqueue %s --into main" % handle, seen[0].text())
        self.assertIn("test ! -f broken.txt", seen[0].text())



if __name__ == "__main__":
    unittest.main()


class ResumedFirstBoundary(h.ResumedFirstBoundary, h.CoordCase):
    """Issue 24, 4: interactive Claude Code 2.1.197 resumed (`claude --resume ID`) runs its
    SessionStart hook (source "resume") at once, with no prompt: `work resume` gives it no first
    message, and the resumed agent registers and links to its work by itself."""

    harness = "claude"

    def launch_setup(self):
        self.interactive_claude()
        return self.launch_env

    def test_resumed_claude_registers_without_a_prompt(self):
        self.resume_and_nudge("src/kept.py", timeout=60)  # idle at its prompt, not "in a turn" that never ends
        self.told_kept("src/kept.py", self.requests_at_resume)


class CloseThenRemove(h.CloseThenRemove, h.CoordCase):
    """Claude Code 2.1.197 hung up by `work close`: the remove right after succeeds."""

    harness = "claude"

    def launch_setup(self):
        self.interactive_claude()
        return self.launch_env

    def test_close_then_remove_succeeds_first_time(self):
        self.close_then_remove(timeout=60)


# --------------------------------------------------------------------------- safe mode with the real harness (issue 25, pgcodex)

class PgSafeMode(support.PostgresProject, h.CoordCase):
    """Safe mode (issue 25, item 3) with the real Claude Code on a PostgreSQL project: the agent
    claims a file exclusively through its own Bash tool; then this host is cut off from the
    database (the test's server is crashed; the host process stays up and answers every request
    with "the PostgreSQL server cannot be reached"). Once the lease may have lapsed for other hosts
    (the host process's last beat plus the host TTL), the agent's Write to that file is refused
    with the reason, and a Write anywhere else goes through (fail open)."""

    harness = "claude"
    PG_PROJECT = h.CoordCase.project_id

    def configure_project(self):
        # A short host TTL: the host process beats every TTL/6 s, and its leases may lapse (for
        # other hosts) TTL s after its last beat.
        self.env.update(COORD_HOST_TTL="2", COORD_HOST_LEASE_DELAY="1")
        super().configure_project()

    def setUp(self):
        super().setUp()
        self.rcoord("db", "start")  # outside the agent, with the short TTL above
        self.safe_file = hostclient.safe_state_path(self.host_socket)

    def safe_listed(self, resource):
        try:
            with open(self.safe_file) as f:
                return resource in [l["resource"] for l in json.load(f)["leases"]]
        except (OSError, ValueError, KeyError):
            return False

    def test_a_write_under_this_host_s_lapsed_lease_is_refused_and_elsewhere_allowed(self):
        server = support.require_postgres(self)[0]
        seen = {}

        def cut_off(req):
            seen["claim"] = "\n".join(req.tool_results())
            seen["holder"] = [l["runtime"] for l in self.coord_state()["leases"] if l["resource"] == "src/mine.py"]
            support.retry_until(lambda: self.safe_listed("src/mine.py"), 60)
            server.crash()  # the host process stays up; every request now fails
            self.addCleanup(server.start)
            # the hook's own check on the host process's file: once the last beat + TTL has passed
            support.retry_until(lambda: hostclient.safe_mode_refusals(["src/mine.py"], self.safe_file), 60)
            return tool("Write", file_path=os.path.join(self.repo, "src", "mine.py"), content="agent\n")

        def elsewhere(req):
            seen["mine"] = req.tail()[-1]["content"][0]
            return tool("Write", file_path=os.path.join(self.repo, "src", "other.py"), content="other\n")

        def end(req):
            seen["other"] = req.tail()[-1]["content"][0]
            return say("done")
        self.run_agent([tool("Bash", command=".coord/coord claim src/mine.py -p mine; echo rc=$?"),
                        cut_off, elsewhere, end], args=["--allowedTools", "Bash"])
        self.assertIn("rc=0", seen["claim"], seen["claim"])
        self.assertEqual(len(seen["holder"]), 1, "the agent's own claim went through the host process")
        # The one fail-closed case: refused, with the reason and the way back.
        mine = seen["mine"]
        self.assertIs(mine.get("is_error"), True, mine)
        reason = h.flatten(mine["content"])
        self.assertIn("coord cannot reach its database, and this host's exclusive lease on src/mine.py", reason)
        self.assertIn("another host may hold it now, so writes to src/mine.py are refused until this host reaches"
                      " the database again", reason)
        self.assertNotIn("--override", reason)
        self.assertFalse(os.path.exists(os.path.join(self.repo, "src", "mine.py")))  # a new file: no Read first
        # Everything else fails open.
        self.assertNotEqual(seen["other"].get("is_error"), True, seen["other"])
        self.assertEqual(self.read_file("src/other.py"), "other\n")
