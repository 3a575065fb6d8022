"""hook.py: every harness payload, write enforcement, delivery, identity, and failing open.

Hooks run as real subprocesses (`python3 -I -S hook.py --harness ...`) on real SQLite files.
The hook's harness is its parent process: the test process itself, or a FakeHarness (a real
long-lived process that spawns the hook) when two attachments of one conversation must be told
apart. Payloads are the harnesses' recorded samples (tests/fixtures/payloads/) with their
/home/user/repo paths pointed at a temporary repository.
"""

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid

import support
import store
import pg
import hostclient
import hook

HOOK = os.path.join(support.ROOT, "hook.py")
PAYLOADS = os.path.join(support.FIXTURES, "payloads")
SAMPLE_ROOT = "/home/user/repo"
CLAUDE_MAIN = "61dfc1a5-feda-4891-9142-f7defe73b697"      # SessionStart..SessionEnd samples
CLAUDE_PARENT = "692aa4d9-1628-42d9-8ff7-8164f04a4f6e"    # the Agent/subagent samples
CLAUDE_AGENT = "a3141b31c0dcb97ce"
CODEX_MAIN = "01a22af1-31cf-7f50-a411-97b001022a84"
CODEX_PARENT = "01a22af2-649e-7440-84c1-522c2b8d8ea9"
CODEX_AGENT = "01a22af2-65e3-7763-bdfa-b47e2231db0c"
COPILOT_MAIN = "1a82358c-a61d-4bc3-b6e3-8ec20dc481d7"    # every copilot-* sample
COPILOT_AGENT = "a215bec6-f276-45d0-95cc-622d7b889bdb"   # its task subagent
COPILOT_ENV = {"COPILOT_CLI": "1", "COPILOT_PROJECT_DIR": SAMPLE_ROOT}  # Copilot's hook environment
OPENCODE_MAIN = "ses_dce34fc1dffegBT2VQOtzqGMTj"    # opencode-* samples (coord's plugin, OpenCode 1.18.33)
OPENCODE_PATCH_MAIN = "ses_dce34960cffehgBegw8vJkNzxs"  # its apply_patch samples (a gpt- model's session)
OPENCODE_AGENT = "ses_dce34c16dffeHAnCLKHXWOvvps"   # its task subagent's child session
GEMINI_MAIN = "458754c8-62bc-483b-99cc-c3cd570eec2f"     # every gemini-* sample

FakeHarness = support.FakeHarness


def context_of(out):
    """The additionalContext of a reply in either shape (Claude/Codex/Gemini or Copilot), else None."""
    if not out:
        return None
    reply = json.loads(out)
    return reply["additionalContext"] if "additionalContext" in reply \
        else reply["hookSpecificOutput"]["additionalContext"]


class HookCase(support.CoordTestCase):

    def setUp(self):
        super().setUp()
        self.repo = os.path.join(self.tmp, "repo")
        os.makedirs(os.path.join(self.repo, ".coord"))
        os.makedirs(os.path.join(self.repo, "src"))
        self._st = None

    @property
    def st(self):
        if self._st is None:
            self._st = self.open_project()
        return self._st

    def reset_project(self):
        """No records at all, as before the first hook ran (the database file gone)."""
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(self.db + suffix):
                os.unlink(self.db + suffix)
        if self._st is not None:
            self._st.close()
            self._st = None

    # -- payloads and runs

    def payload(self, name, **changes):
        with open(os.path.join(PAYLOADS, name + ".json"), encoding="utf-8") as f:
            data = json.loads(f.read().replace(SAMPLE_ROOT, self.repo))
        data.update(changes)
        return data

    def write(self, path, session=CLAUDE_MAIN, **changes):
        """A Claude Write PreToolUse payload for `path` (relative to the repository or absolute)."""
        return self.payload("claude-PreToolUse-Write", session_id=session, tool_input={
            "file_path": os.path.join(self.repo, path), "content": "x\n"}, **changes)

    def patch(self, text, session=CODEX_MAIN, **changes):
        return self.payload("codex-PreToolUse-apply_patch", session_id=session,
                            tool_input={"command": text}, **changes)

    def run_hook(self, data, harness="claude", env=None, cwd=None, via=None, python=None, script=HOOK):
        """Run the hook once; check the invariants every run keeps; return (stdout, stderr)."""
        raw = data if isinstance(data, (bytes, str)) else json.dumps(data)
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "surrogateescape")
        e = dict(self.env)
        e.update(env or {})
        e = {k: v for k, v in e.items() if v is not None}
        argv = ([python, "-I", "-S", script, "--harness", harness] if python  # as a script: its own version check
                else support.hook_argv(harness, script))
        cwd = cwd or self.repo
        if via is not None:
            rc, out, err = via.run(argv, raw, e, cwd)
        else:
            p = support.run_hook(argv, raw, e, cwd)
            rc, out, err = p.returncode, p.stdout, p.stderr
        self.assertEqual(rc, 0, "hook exited %d: %s" % (rc, err))
        self.assertNotIn("Traceback", err)
        self.assertLessEqual(len(err.strip().splitlines()), 1, err)
        if out:
            self.check_reply(out)
        return out, err

    def check_reply(self, out):
        reply = json.loads(out)
        if "decision" in reply:  # Gemini CLI's deny: the reason goes to the model as the tool's error
            self.assertEqual(set(reply), {"decision", "reason"})
            self.assertEqual(reply["decision"], "deny")
            self.assertTrue(reply["reason"].strip())
            return reply
        if "additionalContext" in reply:  # Copilot CLI's shape: context at the top level only
            self.assertEqual(set(reply), {"additionalContext"})
            self.assertTrue(reply["additionalContext"].strip())
            return reply
        spec = reply["hookSpecificOutput"]
        self.assertEqual(set(reply), {"hookSpecificOutput"})
        if "permissionDecision" in spec:
            self.assertEqual(spec["permissionDecision"], "deny")
            self.assertEqual(set(spec), {"hookEventName", "permissionDecision", "permissionDecisionReason"})
            self.assertEqual(spec["hookEventName"], "PreToolUse")
            self.assertTrue(spec["permissionDecisionReason"].strip())
        elif "updatedInput" in spec:
            self.assertEqual(set(spec), {"hookEventName", "updatedInput"})
            self.assertEqual(spec["hookEventName"], "PreToolUse")
            self.assertTrue(spec["updatedInput"]["command"].startswith("export COORD_RUNTIME_ID="))
        else:
            self.assertEqual(set(spec), {"hookEventName", "additionalContext"})
            self.assertTrue(spec["additionalContext"].strip())
        return reply

    def context(self, data, **kw):
        out, _ = self.run_hook(data, **kw)
        return context_of(out)

    def denial(self, data, **kw):
        out, _ = self.run_hook(data, **kw)
        if not out:
            return None
        if "decision" in json.loads(out):
            return json.loads(out)["reason"]
        spec = json.loads(out)["hookSpecificOutput"]
        return spec.get("permissionDecisionReason")

    # -- state

    def start(self, session=CLAUDE_MAIN, harness="claude", **kw):
        """SessionStart for `session`; return its runtime record."""
        sample = "claude-SessionStart" if harness == "claude" else "codex-SessionStart"
        self.run_hook(self.payload(sample, session_id=session), harness=harness, **kw)
        rt = self.st.find_conversation_runtime(session)
        self.assertIsNotNone(rt)
        return rt

    def peer(self, *resources, mode="exclusive", purpose="peer work", pid=None):
        """A live peer runtime (registered like `coord hello`) holding `resources`."""
        rt = self.st.register(harness="codex", pid=pid)
        if resources:
            self.st.claim(rt["id"], list(resources), mode, purpose)
        return rt

    def audit_count(self):
        return self.st.q("SELECT count(*) FROM audit").fetchone()[0]


class SampleTest(HookCase):
    """Every recorded payload, run alone on an empty database, has its documented effect."""

    def expect(self, name, data):
        event = data.get("hook_event_name")
        if event is None:  # Copilot's SubagentStart: camelCase, no event name; not coord's event
            return "nothing, and no database"
        session, agent = data["session_id"], data.get("agent_id")
        if name.startswith("gemini-"):  # its own event names, for the same boundaries
            event = hook.GEMINI_EVENTS[event]
            if event == "UserPromptSubmit":
                return "context + runtime"  # a first prompt repeats SessionStart's lines
        if event.startswith("PreToolUse"):
            return "nothing, and no database"
        if event in ("SessionStart",):
            return "context + runtime"
        if event in ("SubagentStop", "SessionEnd", "PermissionRequest"):  # marks a live runtime only
            return "nothing live"
        return "runtime" if agent is None else "subagent"

    def test_every_sample_has_its_effect(self):
        names = sorted(f[:-5] for f in os.listdir(PAYLOADS) if f.endswith(".json"))
        self.assertEqual(len([n for n in names if not n.endswith(".variant")]), 56 + 18 + 11, "every recorded sample")
        self.assertGreaterEqual(len(names), 59, "and our own variants")
        for name in names:
            with self.subTest(sample=name):
                self.reset_project()
                harness = name.split("-")[0]
                data = self.payload(name)
                if harness == "copilot":  # it runs the Claude entries, in its own environment
                    out, err = self.run_hook(data, harness="claude", env=COPILOT_ENV)
                else:
                    out, err = self.run_hook(data, harness=harness)
                self.assertEqual(err, "")
                want = self.expect(name, data)
                if want == "nothing, and no database":
                    self.assertEqual(out, "")
                    self.assertFalse(os.path.exists(self.db), "PreToolUse created the database")
                    continue
                session, agent = data["session_id"], data.get("agent_id")
                if want == "context + runtime":
                    rt = self.st.find_conversation_runtime(session)
                    self.assertEqual(rt["harness"], harness)
                    self.assertEqual(rt["pid"], os.getpid())  # the hook's parent is its harness
                    self.assertIn("you are %s" % rt["handle"], context_of(out))
                    continue
                self.assertEqual(out, "")
                if harness == "copilot" and agent is not None:
                    session = data["parent_agent_id"]  # keyed under its parent's conversation
                if want == "runtime":
                    rt = self.st.find_conversation_runtime(session)
                    self.assertIsNotNone(rt, "registered quietly")
                    self.assertIsNone(rt["agent_id"])
                elif want == "subagent":
                    rt = self.st.find_conversation_runtime(session, agent_id=agent)
                    self.assertEqual(rt["id"], store.subagent_uuid(session, agent))
                    self.assertIsNone(self.st.find_conversation_runtime(session), "the parent is not registered by it")
                else:
                    self.assertEqual(self.st.live_runtimes(), [])

    def lifecycle(self, harness, samples, session):
        seen = []
        for name in samples:
            data = self.payload(name, session_id=session)
            out, err = self.run_hook(data, harness=harness)
            self.assertEqual(err, "")
            seen.append((name, out))
        return seen

    def test_claude_session_lifecycle(self):
        seen = self.lifecycle("claude", ["claude-SessionStart", "claude-UserPromptSubmit", "claude-PreToolUse-Write",
                                         "claude-PostToolUse-Write", "claude-PreToolUse-Edit", "claude-Stop"],
                              CLAUDE_MAIN)
        self.assertTrue(seen[0][1])
        self.assertEqual([out for _, out in seen[1:]], [""] * 5)
        rt = self.st.find_conversation_runtime(CLAUDE_MAIN)
        self.assertEqual(len(self.st.live_runtimes()), 1, "one attachment, registered once")
        self.run_hook(self.payload("claude-SessionEnd"))
        self.assertEqual(self.st.runtime(rt["id"])["end_reason"], "session-end")

    def test_codex_session_lifecycle(self):
        seen = self.lifecycle("codex", ["codex-SessionStart", "codex-UserPromptSubmit", "codex-PreToolUse-apply_patch",
                                        "codex-PostToolUse-apply_patch", "codex-PreToolUse-apply_patch-update",
                                        "codex-PreToolUse-apply_patch-move", "codex-PreToolUse-Bash-exec_command",
                                        "codex-PostToolUse-Bash-exec_command", "codex-Stop"], CODEX_MAIN)
        self.assertIn("you are", seen[0][1])
        self.assertEqual([out for _, out in seen[1:]], [""] * 8)
        rt = self.st.find_conversation_runtime(CODEX_MAIN)
        self.assertEqual(rt["harness"], "codex")
        self.run_hook(self.payload("codex-SessionEnd"), harness="codex")
        self.assertIsNotNone(self.st.runtime(rt["id"])["ended_at"])

    def test_subagent_samples_give_the_subagent_its_own_runtime(self):
        for harness, session, agent, samples in (
                ("claude", CLAUDE_PARENT, CLAUDE_AGENT,
                 ["claude-PreToolUse-Agent", "claude-SubagentStart", "claude-PreToolUse-Write-in-subagent",
                  "claude-PostToolUse-Write-in-subagent"]),
                ("codex", CODEX_PARENT, CODEX_AGENT,
                 ["codex-SubagentStart", "codex-PreToolUse-apply_patch-in-subagent"])):
            with self.subTest(harness=harness):
                self.start(session, harness)
                self.lifecycle(harness, samples, session)
                sub = self.st.find_conversation_runtime(session, agent_id=agent)
                self.assertEqual(sub["id"], store.subagent_uuid(session, agent))
                self.assertNotEqual(sub["handle"], self.st.find_conversation_runtime(session)["handle"])
                stop = "%s-SubagentStop" % harness
                self.run_hook(self.payload(stop), harness=harness)
                self.assertEqual(self.st.runtime(sub["id"])["end_reason"], "subagent-stop")
                self.assertIsNotNone(self.st.find_conversation_runtime(session), "the parent lives on")
                post = "claude-PostToolUse-Agent" if harness == "claude" else "codex-PostToolUse-spawn_agent"
                out, _ = self.run_hook(self.payload(post), harness=harness)
                self.assertEqual(out, "")


class CopilotTest(HookCase):
    """Copilot CLI (1.0.102) runs the Claude entries of .claude/settings.json with COPILOT_CLI=1,
    under Claude's tool names with its own argument names (recorded copilot-* samples): its
    writes are checked, its runtime is `copilot`, and its context goes where it reads it."""

    def copilot(self, name, env=COPILOT_ENV, **changes):
        return self.run_hook(self.payload(name, **changes), harness="claude", env=env)

    def start_copilot(self):
        out, _ = self.copilot("copilot-SessionStart")
        rt = self.st.find_conversation_runtime(COPILOT_MAIN)
        return rt, out

    def test_edit_create_and_apply_patch_of_a_peers_lease_are_denied(self):
        self.start_copilot()
        # w.txt and p.txt do not exist: a create of a leased path is a write like any other
        holder = self.peer("e.txt", "w.txt", "p.txt", purpose="peer work")
        for env in (COPILOT_ENV, {}):  # the path fields are read whoever sends them
            for name, paths in (("copilot-PreToolUse-Edit", ["e.txt"]), ("copilot-PreToolUse-Write", ["w.txt"]),
                                ("copilot-PreToolUse-Edit-apply_patch", ["e.txt", "p.txt"])):
                with self.subTest(sample=name, env=env):
                    out, _ = self.copilot(name, env=env)
                    spec = json.loads(out)["hookSpecificOutput"]  # the deny Copilot honours
                    self.assertEqual(spec["permissionDecision"], "deny")
                    for path in paths:
                        self.assertIn(path, spec["permissionDecisionReason"])
                    self.assertIn("--to %s" % holder["handle"], spec["permissionDecisionReason"])
        self.assertEqual(self.copilot("copilot-PreToolUse-Bash")[0], "", "its shell stays advisory")

    def test_runtime_is_copilot_and_context_is_top_level(self):
        rt, out = self.start_copilot()
        self.assertEqual(rt["harness"], "copilot")
        self.assertEqual(rt["pid"], os.getpid())
        self.assertEqual(list(json.loads(out)), ["additionalContext"])
        self.assertIn("you are %s" % rt["handle"], json.loads(out)["additionalContext"])
        # A Claude Code started from Copilot's shell inherits COPILOT_CLI=1: still Claude.
        out, _ = self.run_hook(self.payload("claude-SessionStart"), env=COPILOT_ENV)
        self.assertEqual(self.st.find_conversation_runtime(CLAUDE_MAIN)["harness"], "claude")
        self.assertIn("hookSpecificOutput", json.loads(out))

    def delivery_state(self, msg_id):
        return self.st.q("SELECT state FROM deliveries WHERE message = ?", (msg_id,)).fetchone()[0]

    def test_message_is_delivered_in_the_shape_copilot_shows(self):
        me, _ = self.start_copilot()
        sender = self.peer()
        for boundary in ("copilot-PostToolUse-Edit", "copilot-UserPromptSubmit"):
            with self.subTest(boundary=boundary):
                msg = self.st.send(sender["id"], "BODY via %s" % boundary, to=me["handle"])
                self.assertEqual(self.delivery_state(msg["id"]), "queued")
                out, _ = self.copilot(boundary)
                self.assertEqual(list(json.loads(out)), ["additionalContext"])
                self.assertIn("BODY via %s" % boundary, json.loads(out)["additionalContext"])
                self.assertEqual(self.delivery_state(msg["id"]), "delivered")

    def test_subagent_is_keyed_under_its_parent_and_blocked_by_its_lease(self):
        me, _ = self.start_copilot()
        self.st.claim(me["id"], ["s.txt"], "exclusive", "parent")
        self.copilot("copilot-UserPromptSubmit-in-subagent")
        sub = self.st.find_conversation_runtime(COPILOT_MAIN, agent_id=COPILOT_AGENT)
        self.assertEqual(sub["id"], store.subagent_uuid(COPILOT_MAIN, COPILOT_AGENT))
        self.assertEqual(sub["harness"], "copilot")
        self.assertIsNone(self.st.find_conversation_runtime(COPILOT_AGENT), "not a conversation of its own")
        self.assertIn(me["handle"], self.denial(self.payload("copilot-PreToolUse-Write-in-subagent"),
                                                env=COPILOT_ENV))
        self.copilot("copilot-SubagentStop-in-subagent")
        self.assertEqual(self.st.runtime(sub["id"])["end_reason"], "subagent-stop")
        self.copilot("copilot-SessionEnd")
        self.assertEqual(self.st.runtime(me["id"])["end_reason"], "session-end")

    def test_a_command_from_copilots_shell_is_its_runtime(self):
        # Copilot's shell has COPILOT_AGENT_SESSION_ID (the hooks' session_id) and no coord
        # variable; the harness here is another process, so only the variable names it.
        harness = FakeHarness(self)
        self.addCleanup(harness.close)
        self.run_hook(self.payload("copilot-SessionStart"), env=COPILOT_ENV, via=harness)
        me = self.st.find_conversation_runtime(COPILOT_MAIN)
        self.coord("claim", "src/c.py", env={"COPILOT_AGENT_SESSION_ID": COPILOT_MAIN}, check=0)
        self.assertEqual([l["resource"] for l in self.st.leases_of(me["id"])], ["src/c.py"])


class OpenCodeTest(HookCase):
    """OpenCode (1.18.33) through coord's plugin, which sends Claude-shaped payloads with
    OpenCode's own tool names and arguments (recorded opencode-* samples): write and edit
    {filePath}, apply_patch {patchText}; a task subagent's events carry its child session as
    agent_id under the parent's session_id."""

    def opencode(self, name, **changes):
        return self.run_hook(self.payload(name, **changes), harness="opencode")

    def test_write_edit_and_every_path_of_a_patch_of_a_peers_lease_are_denied(self):
        self.opencode("opencode-SessionStart")
        self.opencode("opencode-SessionStart", session_id=OPENCODE_PATCH_MAIN)
        holder = self.peer("src/a.py", "src/new.py", "src/p.py", purpose="peer work")
        for name, session, paths in (("opencode-PreToolUse-edit", OPENCODE_MAIN, ["src/a.py"]),
                                     ("opencode-PreToolUse-write", OPENCODE_MAIN, ["src/new.py"]),
                                     ("opencode-PreToolUse-apply_patch", OPENCODE_PATCH_MAIN, ["src/p.py", "src/a.py"]),
                                     ("opencode-PreToolUse-write-in-subagent", OPENCODE_MAIN, [])):
            with self.subTest(sample=name):
                if not paths:  # the subagent writes src/sub.py: free
                    self.assertEqual(self.opencode(name)[0], "")
                    continue
                out, _ = self.opencode(name)
                spec = json.loads(out)["hookSpecificOutput"]  # the plugin throws this reason
                self.assertEqual(spec["permissionDecision"], "deny")
                for path in paths:
                    self.assertIn(path, spec["permissionDecisionReason"])
                self.assertIn(".coord/coord send", spec["permissionDecisionReason"])
                self.assertIn("--to %s" % holder["handle"], spec["permissionDecisionReason"])

    def test_kilo_code_runs_the_same_plugin_under_its_own_name(self):
        # Kilo Code 7.7.7 (OpenCode's fork) sends the same payloads through coord's plugin.
        self.run_hook(self.payload("opencode-SessionStart"), harness="kilo")
        self.assertEqual(self.st.find_conversation_runtime(OPENCODE_MAIN)["harness"], "kilo")
        holder = self.peer("src/a.py", "src/p.py")
        for name in ("opencode-PreToolUse-edit", "opencode-PreToolUse-apply_patch"):
            with self.subTest(sample=name):
                reason = self.denial(self.payload(name), harness="kilo")
                self.assertIn("src/a.py", reason)
                self.assertIn("--to %s" % holder["handle"], reason)
        self.assertIsNone(self.denial(self.payload("opencode-PreToolUse-write"), harness="kilo"))

    def test_one_held_path_in_a_patch_denies_it_and_a_free_patch_passes(self):
        holder = self.peer("src/held.py")
        patch = "*** Begin Patch\n*** Add File: src/free.py\n+x\n*** Delete File: src/held.py\n*** End Patch"
        reason = self.denial(self.payload("opencode-PreToolUse-apply_patch", tool_input={"patchText": patch}),
                             harness="opencode")
        self.assertIn("src/held.py", reason)
        self.assertIn(holder["handle"], reason)
        free = "*** Begin Patch\n*** Add File: src/free.py\n+x\n*** End Patch"
        self.assertIsNone(self.denial(self.payload("opencode-PreToolUse-apply_patch", tool_input={"patchText": free}),
                                      harness="opencode"))

    def test_claudes_argument_names_are_not_opencodes(self):
        # OpenCode's tools are lower-case with filePath; a Claude-shaped Write sent as opencode
        # is not one of its tools, and OpenCode's write sent as claude is not Claude's.
        self.peer("src/a.py")
        self.assertIsNone(self.denial(self.write("src/a.py"), harness="opencode"))
        self.assertIsNone(self.denial(self.payload("opencode-PreToolUse-edit"), harness="claude"))

    def test_its_shell_is_advisory_and_never_opens_the_database(self):
        self.peer("src/a.py")
        os.unlink(self.db)
        out, err = self.opencode("opencode-PreToolUse-bash.variant")
        self.assertEqual((out, err), ("", ""))
        self.assertFalse(os.path.exists(self.db))

    def test_lifecycle_registers_delivers_and_ends(self):
        out, _ = self.opencode("opencode-SessionStart")
        rt = self.st.find_conversation_runtime(OPENCODE_MAIN)
        self.assertEqual(rt["harness"], "opencode")
        self.assertIn("you are %s" % rt["handle"], context_of(out))
        self.assertEqual(rt["cwd"], self.repo)
        peer = self.peer()
        self.st.send(peer["id"], "MSG-FOR-OPENCODE", to=rt["handle"])
        self.assertIn("MSG-FOR-OPENCODE", context_of(self.opencode("opencode-PostToolUse-read")[0]))
        again = context_of(self.opencode("opencode-PostToolUse-bash")[0]) or ""
        self.assertNotIn("MSG-FOR-OPENCODE", again, "the body is delivered once (then an unacked reminder)")
        self.opencode("opencode-SubagentStart")
        sub = self.st.find_conversation_runtime(OPENCODE_MAIN, agent_id=OPENCODE_AGENT)
        self.assertEqual(sub["id"], store.subagent_uuid(OPENCODE_MAIN, OPENCODE_AGENT))
        self.opencode("opencode-SubagentStop")
        self.assertIsNotNone(self.st.runtime(sub["id"])["ended_at"])
        self.opencode("opencode-Stop")
        self.opencode("opencode-SessionEnd")
        self.assertEqual(self.st.runtime(rt["id"])["end_reason"], "session-end")


class TurnTest(HookCase):
    """The hook records where the main agent is in its turn, for send --nudge: busy from its
    prompt, idle at Stop, dialog at a permission request (its subagent's too), busy again at a
    tool after Stop; a session that starts or resumes waits at its prompt (idle) unless coord
    launched it with a first message. PreToolUse stays silent."""

    def turn(self, session=CLAUDE_MAIN):
        return self.st.turn(self.st.find_conversation_runtime(session)["id"])

    def test_the_boundaries_of_a_turn(self):
        self.start()
        self.assertEqual(self.turn()["state"], "idle", "started, at its prompt")
        self.assertIsNone(self.turn()["began"], "no prompt yet")
        self.run_hook(self.payload("claude-UserPromptSubmit"))
        began = self.turn()["began"]
        self.assertEqual((self.turn()["state"], self.turn()["at"]), ("busy", began))
        self.run_hook(self.payload("claude-PostToolUse-Write"))
        self.assertEqual(self.turn()["at"], began, "a tool inside a busy turn writes no boundary")
        self.run_hook(dict(self.payload("claude-UserPromptSubmit"), hook_event_name="PermissionRequest",
                           tool_name="Bash", tool_input={"command": "touch APPROVED"}))
        self.assertEqual(self.turn()["state"], "dialog")
        self.run_hook(self.payload("claude-Stop"))
        self.assertEqual((self.turn()["state"], self.turn()["began"]), ("idle", began))
        self.run_hook(self.payload("claude-PostToolUse-Write"))  # a turn that began without a prompt
        self.assertEqual(self.turn()["state"], "busy")
        self.run_hook(self.payload("claude-Stop"))
        self.assertEqual(self.turn()["state"], "idle")
        self.run_hook(self.payload("claude-UserPromptSubmit"))
        self.run_hook(self.payload("claude-SessionStart", source="compact"))  # inside a turn: unchanged
        self.assertEqual(self.turn()["state"], "busy")
        self.run_hook(self.payload("claude-SessionStart", source="clear"))  # the same process, /clear: at its prompt
        self.assertEqual(self.turn()["state"], "idle")

    def test_a_resumed_session_waits_at_its_prompt(self):
        for source in ("startup", "resume"):
            session = "%s-%s" % (CLAUDE_MAIN[:-8], source[:8].rjust(8, "0"))
            self.run_hook(self.payload("claude-SessionStart", session_id=session, source=source))
            self.assertEqual((self.turn(session)["state"], self.turn(session)["began"]), ("idle", None), source)
        self.run_hook(self.payload("codex-SessionStart", session_id=CODEX_MAIN, source="resume"), harness="codex")
        self.assertEqual(self.turn(CODEX_MAIN)["state"], "idle")

    def test_a_session_launched_with_a_first_message_is_in_a_turn(self):
        # work start --prompt (or a resume prompt): its first turn begins at once, its prompt follows
        self.start(env={"COORD_LAUNCH_PROMPT": "1"})
        self.assertEqual(self.turn()["state"], "busy")
        self.run_hook(self.payload("claude-UserPromptSubmit"))
        self.run_hook(self.payload("claude-Stop"))
        self.assertEqual(self.turn()["state"], "idle")
        self.run_hook(self.payload("claude-SessionStart", source="clear"), env={"COORD_LAUNCH_PROMPT": "1"})
        self.assertEqual(self.turn()["state"], "idle", "/clear starts no turn, whatever the launch had")

    def test_a_subagents_permission_request_marks_its_parent(self):
        self.start(CLAUDE_PARENT)
        self.run_hook(self.payload("claude-UserPromptSubmit", session_id=CLAUDE_PARENT))
        self.run_hook(self.payload("claude-Stop", session_id=CLAUDE_PARENT))
        self.run_hook(self.payload("claude-PreToolUse-Write-in-subagent", hook_event_name="PermissionRequest"))
        self.assertEqual(self.turn(CLAUDE_PARENT)["state"], "dialog")

    def test_codex_boundaries(self):
        self.start(CODEX_MAIN, "codex")
        for name in ("codex-UserPromptSubmit", "codex-Stop"):
            self.run_hook(self.payload(name), harness="codex")
        self.assertEqual(self.turn(CODEX_MAIN)["state"], "idle")
        self.run_hook(self.payload("codex-PreToolUse-Bash-exec_command", hook_event_name="PermissionRequest"),
                      harness="codex")
        self.assertEqual(self.turn(CODEX_MAIN)["state"], "dialog")


class AgentStateTest(HookCase):
    """Each agent's state from its harness's own events (store.Store.agent_state): the turn the
    hook records plus the last event of its conversation (hook.mark's activity file, written with
    os alone on every event, PreToolUse of a tool it does not check included): working with the
    tool it runs, waiting while a permission dialog is open and working again once the tool ran,
    idle at Stop, stuck in a turn with no event, gone at its end; a subagent's events are its
    parent's work."""

    def agent(self, session=CLAUDE_MAIN, now=None, stuck_after=None):
        rt = self.st.find_conversation_runtime(session) or self.st.last_runtime_of(session)
        return store.Store.agent_state(rt, self.st.turn(rt["id"]), store.Store.activity(session, self.env),
                                       now if now is not None else store.now(), stuck_after)

    def test_a_claude_turn_with_a_permission_dialog(self):
        self.start()
        self.assertEqual(self.agent()[0], "idle")
        self.run_hook(self.payload("claude-UserPromptSubmit"))
        self.assertEqual(self.agent()[0], "working")
        self.run_hook(self.payload("claude-PreToolUse-Bash", session_id=CLAUDE_MAIN))  # not a write: allowed without the store
        self.assertEqual(self.agent()[::2], ("working", "Bash"))
        self.run_hook(dict(self.payload("claude-PreToolUse-Bash", session_id=CLAUDE_MAIN), hook_event_name="PermissionRequest"))
        self.assertEqual(self.agent()[::2], ("waiting", "Bash"))
        self.assertEqual(self.st.turn(self.st.find_conversation_runtime(CLAUDE_MAIN)["id"])["state"], "dialog")
        self.run_hook(self.payload("claude-PostToolUse-Bash", session_id=CLAUDE_MAIN))  # answered: the tool ran
        self.assertEqual(self.agent()[0], "working")
        self.assertEqual(self.agent(now=store.now() + 1000)[0], "stuck")
        self.assertEqual(self.agent(stuck_after=2000.0, now=store.now() + 1000)[0], "working")
        self.run_hook(self.payload("claude-PreToolUse-Write-in-subagent", session_id=CLAUDE_MAIN))
        self.assertEqual(self.agent()[::2], ("working", "Write"), "a subagent's tool is its parent's work")
        self.run_hook(self.payload("claude-Stop"))
        self.assertEqual(self.agent()[0], "idle")
        self.assertEqual(self.agent(now=store.now() + 1000)[0], "idle", "idle is never stuck")
        self.run_hook(self.payload("claude-SessionEnd"))
        self.assertEqual(self.agent()[0], "gone")

    def test_codex_approval_and_the_turn_alone(self):
        self.start(CODEX_MAIN, "codex")
        self.run_hook(self.payload("codex-UserPromptSubmit", session_id=CODEX_MAIN), harness="codex")
        self.run_hook(self.payload("codex-PreToolUse-Bash-exec_command", session_id=CODEX_MAIN,
                                   hook_event_name="PermissionRequest"),
                      harness="codex")
        self.assertEqual(self.agent(CODEX_MAIN)[::2], ("waiting", "Bash"))
        self.run_hook(self.payload("codex-Stop", session_id=CODEX_MAIN), harness="codex")
        self.assertEqual(self.agent(CODEX_MAIN)[0], "idle")
        # Another host's agent (no activity file here): its recorded turn alone.
        rt = self.st.find_conversation_runtime(CODEX_MAIN)
        for turn, state in (("busy", "working"), ("dialog", "waiting"), ("idle", "idle"), ("nudged", "idle")):
            self.assertEqual(store.Store.agent_state(rt, {"state": turn, "at": store.now(), "began": None}, None,
                                                     store.now())[0], state)
        self.assertEqual(store.Store.agent_state(rt, None, None, store.now())[0], "unknown")

    def test_the_activity_file_is_the_events_alone(self):
        self.start()
        self.run_hook(self.payload("claude-PreToolUse-Bash", session_id=CLAUDE_MAIN))
        folder = os.path.join(store.state_dir(self.env), store.Store.ACTIVITY_DIR)
        name = CLAUDE_MAIN.encode().hex()
        self.assertEqual(os.listdir(folder), [name], "one file per conversation, no temporary left")
        with open(os.path.join(folder, name)) as f:
            self.assertEqual(f.read(), "PreToolUse\tBash\n", "the event and the tool's name, never its input")
        self.assertEqual(os.stat(os.path.join(folder, name)).st_mode & 0o777, 0o600)


class PatchParsingTest(HookCase):
    """hook.patch_paths finds exactly the paths Codex's apply_patch would write."""

    def test_add_update_delete_and_move(self):
        text = ("*** Begin Patch\n*** Add File: a.txt\n+one\n*** Update File: b.py\n@@\n-x\n+y\n"
                "*** Delete File: c.md\n*** Update File: d.txt\n*** Move to: e/d.txt\n@@\n-1\n+2\n*** End Patch\n")
        self.assertEqual(hook.patch_paths(text), ["a.txt", "b.py", "c.md", "d.txt", "e/d.txt"])

    def test_multi_file_variant(self):
        text = self.payload("codex-PreToolUse-apply_patch-multi.variant")["tool_input"]["command"]
        self.assertEqual(hook.patch_paths(text), ["notes/new file.md", "src/old name.py", "src/new name.py",
                                                  "../outside.txt", self.repo + "/abs.txt"])

    def test_recorded_samples(self):
        for name, want in (("codex-PreToolUse-apply_patch", ["added.txt"]),
                           ("codex-PreToolUse-apply_patch-update", ["added.txt"]),
                           ("codex-PreToolUse-apply_patch-move", ["added.txt", "moved.txt"]),
                           ("codex-PreToolUse-apply_patch-in-subagent", ["sub.txt"])):
            self.assertEqual(hook.patch_paths(self.payload(name)["tool_input"]["command"]), want)

    def test_odd_whitespace_crlf_and_spaces_in_paths(self):
        text = ("  *** Begin Patch  \r\n\t*** Add File:   dir with space/new file.txt  \r\n+x\r\n"
                " *** Update File: old name.txt\t\r\n*** Move to:  new name.txt \r\n@@\r\n-a\r\n+b\r\n"
                "***  Delete File:gone.txt\r\n*** End Patch")
        self.assertEqual(hook.patch_paths(text),
                         ["dir with space/new file.txt", "old name.txt", "new name.txt", "gone.txt"])

    def test_marker_text_inside_hunks_is_content(self):
        text = ("*** Begin Patch\n*** Add File: doc.md\n+*** Add File: not-a-file.txt\n"
                "*** Update File: notes.md\n@@\n *** Delete File: context-line.txt\n-*** Move to: removed.txt\n"
                "+*** Update File: added-line.txt\n*** End of File\n *** Add File: still-content.txt\n"
                "*** End Patch\n")
        self.assertEqual(hook.patch_paths(text), ["doc.md", "notes.md"])

    def test_markers_are_read_as_the_case_blind_regex_read_them(self):
        # hook.patch_marker replaced these regexes (their import cost a Codex write check a few
        # ms); on random lines built from their pieces it must find exactly what they found
        import re
        regexes = {("add", "update", "delete"): re.compile(r"\*\*\*\s*(add|update|delete)\s+file\s*:(.*)$", re.I),
                   ("move",): re.compile(r"\*\*\*\s*move\s+to\s*:(.*)$", re.I)}
        pieces = ["***", "**", "*", " ", "  ", "\t", "\u00a0", "\u2003", "\x1c", "add", "ADD", "Update", "dElEtE",
                  "delet", "move", "MOVE", "to", "TO", "file", "FILE", "f\u0131le", "F\u0130LE", "fi\u0307le",
                  "\ufb01le", "tO", "t0", ":", "::", " :", "x", "a.txt", "\u017f", "\u212a", "\r", ":\u00e9"]
        rng = random.Random(7)
        lines = ["*** Add File: a", "***add file:a", "*** Move to:", "***MOVE\tTO :b", "*** Update File:"]
        for _ in range(20000):
            lines.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 9))))
            if rng.random() < 0.5:
                lines[-1] = "***" + lines[-1]
        for line in lines:
            for words, regex in regexes.items():
                noun = "to" if words == ("move",) else "file"
                m = regex.match(line)
                want = None if m is None else (m.group(1).lower() if noun == "file" else "move", m.groups()[-1])
                self.assertEqual(hook.patch_marker(line, words, noun), want, repr(line))

    def test_heredoc_wrapper_and_empty_paths(self):
        text = "<<'EOF'\n*** Begin Patch\n*** Add File: \n*** Delete File: x\n*** End Patch\nEOF\n"
        self.assertEqual(hook.patch_paths(text), ["x"])
        self.assertEqual(hook.patch_paths(""), [])
        self.assertEqual(hook.patch_paths("no patch at all\n*** Move to: y"), [])

    def test_write_targets_by_tool(self):
        self.assertEqual(hook.write_targets("claude", "Write", {"file_path": "/r/a"}), ["/r/a"])
        self.assertEqual(hook.write_targets("claude", "Edit", {"file_path": "/r/b"}), ["/r/b"])
        self.assertEqual(hook.write_targets("claude", "NotebookEdit", {"notebook_path": "/r/n.ipynb"}), ["/r/n.ipynb"])
        self.assertEqual(hook.write_targets("codex", "apply_patch", {"command": "*** Begin Patch\n*** Delete File: d\n"}),
                         ["d"])
        self.assertEqual(hook.write_targets("copilot", "Edit", "*** Begin Patch\n*** Delete File: d\n"), ["d"])
        self.assertEqual(hook.write_targets("claude", "Bash", {"command": "echo > a"}), [])
        self.assertEqual(hook.write_targets("claude", "Read", {"file_path": "/r/a"}), [])
        self.assertEqual(hook.write_targets("claude", "Write", {"file_path": 7}), [])
        self.assertEqual(hook.write_targets("claude", "Write", "file_path"), [])
        self.assertEqual(hook.write_targets("qwen", "Write", {"file_path": "/r/a"}), [], "not a tool of Qwen's")

    def test_the_written_argument_comes_first_then_every_named_path(self):
        # Copilot writes `path`; a `file_path` beside it is checked too, never instead.
        self.assertEqual(hook.write_targets("copilot", "Edit", {"file_path": "/r/free", "path": "/r/a"}),
                         ["/r/a", "/r/free"])
        self.assertEqual(hook.write_targets("claude", "Write", {"path": "/r/p", "file_path": "/r/a",
                                                                 "edits": [{"filePath": ["/r/b", 3]}], "x": "/r/no"}),
                         ["/r/a", "/r/p", "/r/b"])
        self.assertEqual(hook.write_targets("opencode", "apply_patch", {
            "patchText": "*** Begin Patch\n*** Add File: n\n+x\n*** End Patch", "notebook_path": "/r/a"}), ["n", "/r/a"])
        # an unknown harness: any harness's write tools, each with every argument any of them writes
        self.assertEqual(hook.write_targets("", "write", {"filePath": "/r/a"}), ["/r/a"])
        deep = {"path": "/r/a"}
        for _ in range(5000):
            deep = {"x": [deep]}
        self.assertEqual(hook.write_targets("claude", "Write", dict(deep, file_path="/r/w")), ["/r/w"], "bounded")
        many = {"paths": ["/r/%d" % i for i in range(1000)]}
        self.assertEqual(len(hook.write_targets("claude", "Write", many)), hook.NAMED_PATHS)


class EnforcementTest(HookCase):

    def test_deny_names_resource_holder_purpose_and_next_commands(self):
        self.start()
        holder = self.peer("src/app.py", purpose="auth refactor")
        reason = self.denial(self.write("src/app.py"))
        self.assertIn("src/app.py", reason)
        self.assertIn(holder["handle"], reason)
        self.assertIn("auth refactor", reason)
        self.assertIn(".coord/coord send", reason)
        self.assertIn("--to %s" % holder["handle"], reason)
        self.assertIn(".coord/coord inbox", reason)

    def test_free_paths_and_own_leases_are_allowed(self):
        me = self.start()
        self.peer("src/app.py")
        self.st.claim(me["id"], ["src/mine.py"])
        self.assertIsNone(self.denial(self.write("src/other.py")))
        self.assertIsNone(self.denial(self.write("src/mine.py")))
        self.assertIsNone(self.denial(self.write("src/app.py.bak")))

    def test_notebook_edit_is_a_write(self):
        self.start()
        self.peer("analysis/report.ipynb", purpose="rerun")
        self.assertIn("analysis/report.ipynb", self.denial(self.payload("claude-PreToolUse-NotebookEdit.variant")))

    def test_ancestor_and_descendant_leases_block(self):
        self.start()
        holder = self.peer("src/pkg", purpose="split pkg")
        reason = self.denial(self.write("src/pkg/deep/mod.py"))
        self.assertIn("src/pkg/deep/mod.py: blocked by %s's exclusive lease on src/pkg/ (\"split pkg\")"
                      % holder["handle"], reason)
        self.assertNotIn("src/pkg is", reason)
        holder = self.peer("docs/api/index.md")
        reason = self.denial(self.payload("claude-PreToolUse-Write",
                                          tool_input={"file_path": os.path.join(self.repo, "docs")}))
        self.assertIn("docs: blocked by %s's exclusive lease on docs/api/index.md (" % holder["handle"], reason)
        self.assertNotIn("docs is", reason)

    def test_unregistered_session_is_checked_against_every_live_lease(self):
        self.peer("src/app.py")
        self.assertIsNotNone(self.denial(self.write("src/app.py", session="never-registered")))

    def test_expired_and_dead_holders_do_not_block(self):
        self.start()
        dead = subprocess.Popen(["sleep", "600"])
        self.peer("src/dead.py", pid=dead.pid)
        self.assertIsNotNone(self.denial(self.write("src/dead.py")))
        dead.kill()
        dead.wait()
        rt = self.peer()
        self.st.claim(rt["id"], ["src/expired.py"], ttl=1, now=store.now() - 5)  # expired 4 s ago
        self.assertIsNone(self.denial(self.write("src/dead.py")))
        self.assertIsNone(self.denial(self.write("src/expired.py")))

    def test_append_holders_block_plain_writers_but_not_fellow_appenders(self):
        me = self.start()
        self.peer("log/changes.md", mode="append", purpose="release notes")
        reason = self.denial(self.write("log/changes.md"))
        self.assertIn("'s append lease (\"release notes\")", reason)
        self.assertIn("claim log/changes.md --mode append", reason)
        self.st.claim(me["id"], ["log/changes.md"], mode="append")
        self.assertIsNone(self.denial(self.write("log/changes.md")))
        self.peer("log/locked.md", purpose="exclusive one")
        self.assertIsNotNone(self.denial(self.write("log/locked.md")), "an exclusive lease still blocks an appender")

    def test_other_tools_and_outside_paths_are_not_coordinated(self):
        self.start()
        self.peer("src/app.py")
        bash = self.payload("claude-PreToolUse-Bash", session_id=CLAUDE_MAIN,
                            tool_input={"command": "echo x > src/app.py"})
        self.assertIsNone(self.denial(bash))
        odd = self.write("src/app.py", tool_name="Frobnicate")
        self.assertIsNone(self.denial(odd))
        outside = os.path.join(self.tmp, "elsewhere.txt")
        self.assertIsNone(self.denial(self.payload("claude-PreToolUse-Write", tool_input={"file_path": outside})))

    def test_pre_tool_use_writes_nothing(self):
        self.start()
        self.peer("src/app.py")
        probe = sqlite3.connect(self.db)
        self.addCleanup(probe.close)
        before = (probe.execute("PRAGMA data_version").fetchone()[0], self.audit_count())
        self.assertIsNotNone(self.denial(self.write("src/app.py")))
        self.assertIsNone(self.denial(self.write("src/free.py")))
        self.run_hook(self.patch("*** Begin Patch\n*** Add File: src/new.py\n+x\n*** End Patch\n"), harness="codex")
        after = (probe.execute("PRAGMA data_version").fetchone()[0], self.audit_count())
        self.assertEqual(before, after)


class PatchEnforcementTest(HookCase):

    def test_every_path_of_the_multi_file_variant_is_checked(self):
        self.start(CODEX_MAIN, "codex")
        data = self.payload("codex-PreToolUse-apply_patch-multi.variant")
        self.assertIsNone(self.denial(data, harness="codex"))
        for resource in ("notes/new file.md", "src/old name.py", "src/new name.py", "abs.txt", "notes"):
            with self.subTest(resource=resource):
                holder = self.peer(resource)
                self.assertIn(holder["handle"], self.denial(data, harness="codex"))
                self.st.bye(holder["id"])
        self.peer("outside.txt")
        self.assertIsNone(self.denial(data, harness="codex"), "../outside.txt is outside the repository")

    def test_move_destination_is_blocked(self):
        self.start(CODEX_MAIN, "codex")
        holder = self.peer("moved.txt")
        reason = self.denial(self.payload("codex-PreToolUse-apply_patch-move"), harness="codex")
        self.assertIn("moved.txt", reason)
        self.assertIn(holder["handle"], reason)

    def test_any_file_of_a_multi_file_patch_blocks(self):
        self.start(CODEX_MAIN, "codex")
        self.peer("c/three.txt")
        text = ("*** Begin Patch\n*** Add File: a/one.txt\n+1\n*** Delete File: b/two.txt\n"
                "*** Update File: c/three.txt\n@@\n-x\n+y\n*** End Patch\n")
        self.assertIn("c/three.txt", self.denial(self.patch(text), harness="codex"))
        self.assertIsNone(self.denial(self.patch(text.replace("c/three", "c/four")), harness="codex"))

    def test_paths_resolve_against_the_payload_cwd(self):
        self.start(CODEX_MAIN, "codex")
        self.peer("src/sub/x.py")
        os.makedirs(os.path.join(self.repo, "src", "sub"))
        text = "*** Begin Patch\n*** Add File: x.py\n+1\n*** End Patch\n"
        cwd = os.path.join(self.repo, "src", "sub")
        reason = self.denial(self.patch(text, cwd=cwd), harness="codex", cwd=cwd)
        self.assertIn("src/sub/x.py", reason)
        self.assertIn("../../.coord/coord send", reason, "commands are given relative to the agent's cwd")

    def test_dotdot_escapes_and_absolute_paths(self):
        self.start(CODEX_MAIN, "codex")
        self.peer("held.txt")
        outside = os.path.join(self.tmp, "held.txt")
        for path, blocked in (("src/../held.txt", True), ("../held.txt", False), ("../repo/held.txt", True),
                              ("src/../../repo/held.txt", True), (os.path.join(self.repo, "held.txt"), True),
                              (outside, False), ("./held.txt", True), ("src//..//held.txt", True)):
            with self.subTest(path=path):
                text = "*** Begin Patch\n*** Update File: %s\n@@\n-a\n+b\n*** End Patch\n" % path
                self.assertEqual(self.denial(self.patch(text), harness="codex") is not None, blocked)

    def test_spaces_and_crlf_in_a_real_patch(self):
        self.start(CODEX_MAIN, "codex")
        self.peer("my docs/read me.md")
        text = "*** Begin Patch\r\n*** Update File:  my docs/read me.md \r\n@@\r\n-a\r\n+b\r\n*** End Patch\r\n"
        self.assertIn("my docs/read me.md", self.denial(self.patch(text), harness="codex"))


BODY = "*** Begin Patch\n*** Update File: a.py\n*** Move to: b.py\n@@\n-x\n+y\n*** Delete File: c.py\n*** End Patch"


class ShellPatchTest(HookCase):
    """Codex applies `apply_patch <<EOF` shell commands with its own patch engine (tool_name
    Bash). The shapes below were run through the pinned Codex CLI: the accepted ones wrote
    files, the others ran as plain shell (`apply_patch: command not found`)."""

    ACCEPTED = (
        ("apply_patch <<'EOF'\n%s\nEOF", ""),
        ("apply_patch <<EOF\n%s\nEOF\n", ""),
        ('apply_patch <<"PATCH"\n%s\nPATCH', ""),
        ("apply_patch << 'EOF'\n%s\nEOF", ""),
        ("apply_patch <<\\EOF\n%s\nEOF", ""),
        ("apply_patch <<-EOF\n%s\n\tEOF", ""),
        ("applypatch <<'EOF'\n%s\nEOF", ""),
        ("\n  apply_patch <<'EOF'\n%s\nEOF", ""),
        ("FOO=1 apply_patch <<'EOF'\n%s\nEOF", ""),
        ("apply_patch <<'EOF'\r\n%s\r\nEOF\r\n", ""),
        ("apply_patch <<'EOF'\n%s\n", ""),  # no end line: Codex still applies it
        ("cd sub && apply_patch <<'EOF'\n%s\nEOF", "sub"),
        ("cd sub && applypatch <<PATCH\n%s\nPATCH", "sub"),
        ("cd 'my dir' && apply_patch <<'EOF'\n%s\nEOF", "my dir"),
        ('cd "my dir" && apply_patch <<\'EOF\'\n%s\nEOF', "my dir"),
        ('cd "x$HOME" && apply_patch <<\'EOF\'\n%s\nEOF', "x"),  # Codex does not expand it
        ("cd sub &&\n  apply_patch <<'EOF'\n%s\nEOF", "sub"),
        ("cd sub && apply_patch ignored <<'EOF'\n%s\nEOF", "sub"),
        ("FOO=1 cd sub && apply_patch <<'EOF'\n%s\nEOF", "sub"),
        ("cd ~ && apply_patch <<'EOF'\n%s\nEOF", "~"),
        ('cd "s\\"ub" && apply_patch <<\'EOF\'\n%s\nEOF', 's\\"ub'),  # raw text, escape and all
    )
    PLAIN_SHELL = (
        "echo x; apply_patch <<'EOF'\n%s\nEOF",
        "apply_patch <<'EOF'\n%s\nEOF\necho done",
        "apply_patch <<'EOF'\n%s\nEOF\n;",
        "apply_patch foo <<'EOF'\n%s\nEOF",
        "apply_patch 2>&1 <<'EOF'\n%s\nEOF",
        "apply_patch <<'EOF' 2>&1\n%s\nEOF",
        "apply_patch <<'EOF' &\n%s\nEOF",
        "cd a && cd b && apply_patch <<'EOF'\n%s\nEOF",
        "cd a b && apply_patch <<'EOF'\n%s\nEOF",
        "cd a; apply_patch <<'EOF'\n%s\nEOF",
        "cd a || apply_patch <<'EOF'\n%s\nEOF",
        'cd "$NOPE""sub" && apply_patch <<\'EOF\'\n%s\nEOF',
        "bash -lc \"apply_patch <<'EOF'\n%s\nEOF\"",
        "apply_patch '%s'",
        "cat <<'EOF' | apply_patch\n%s\nEOF",
        "(apply_patch <<'EOF'\n%s\nEOF\n)",
        "# edit\napply_patch <<'EOF'\n%s\nEOF",
        "/usr/bin/apply_patch <<'EOF'\n%s\nEOF",
        "cat > notes.md <<'EOF'\napply_patch <<X\n%s\nX\nEOF",
        "grep -rn apply_patch . # %s",
        'apply_patch <<E"O"F\n%s\nEOF',
    )

    def bash(self, command, cwd=None, **changes):
        data = self.payload("codex-PreToolUse-Bash-exec_command", tool_input={"command": command}, **changes)
        if cwd:
            data["cwd"] = cwd
        return data

    def test_every_shape_codex_accepts_yields_the_patch_paths(self):
        for script, workdir in self.ACCEPTED:
            with self.subTest(script=script):
                want = [os.path.join(workdir, p) for p in ("a.py", "b.py", "c.py")]
                self.assertEqual(hook.shell_patch_targets({"command": script % BODY}), want)

    def test_argv_forms(self):
        script = "cd sub && apply_patch <<'EOF'\n%s\nEOF" % BODY
        for argv, want in ((["apply_patch", BODY], ""), (["applypatch", BODY], ""),
                           (["bash", "-lc", script], "sub"), (["/bin/zsh", "-c", script], "sub"),
                           (["pwsh", "-NoProfile", "-Command", script], "sub"), (["cmd.exe", "/c", script], "sub")):
            with self.subTest(argv=argv[:2]):
                self.assertEqual(hook.shell_patch_targets({"command": argv}),
                                 [os.path.join(want, p) for p in ("a.py", "b.py", "c.py")])
        for argv in (["python3", "-c", script], ["bash", "-x", script], ["bash", "-lc", script, "x"],
                     ["apply_patch"], ["bash", "-lc", 7]):
            self.assertEqual(hook.shell_patch_targets({"command": argv}), [], argv)

    def test_shapes_codex_runs_as_plain_shell_are_not_patches(self):
        for script in self.PLAIN_SHELL:
            with self.subTest(script=script):
                self.assertEqual(hook.shell_patch_targets({"command": script % BODY}), [])
        for odd in (None, 7, {"command": 7}, {"command": ""}, {"cmd": "apply_patch <<EOF\n%s\nEOF" % BODY}):
            self.assertEqual(hook.shell_patch_targets(odd), [])

    def test_recorded_shell_patches_onto_a_peers_lease_are_denied(self):
        self.start(CODEX_MAIN, "codex")
        os.makedirs(os.path.join(self.repo, "src", "sub"))
        for sample, leased, free in (
                ("codex-PreToolUse-Bash-apply_patch-heredoc", ("src/app.py", "src/main.py"), "src/other.py"),
                ("codex-PreToolUse-Bash-apply_patch-cd-applypatch", ("src/added.py", "src"), "added.py"),
                ("codex-PreToolUse-Bash-apply_patch-workdir", ("src/main.py",), "main.py")):
            data = self.payload(sample, session_id=CODEX_MAIN)
            with self.subTest(sample=sample):
                holder = self.peer(free)
                self.assertIsNone(self.denial(data, harness="codex"))
                self.st.bye(holder["id"])
                for resource in leased:
                    holder = self.peer(resource, purpose="peer work")
                    reason = self.denial(data, harness="codex")
                    self.assertIn(holder["handle"], reason)
                    self.assertIn(resource, reason)
                    self.st.bye(holder["id"])

    def test_cd_directory_and_payload_cwd_both_count(self):
        self.start(CODEX_MAIN, "codex")
        os.makedirs(os.path.join(self.repo, "src", "sub"))
        holder = self.peer("src/sub/a.py")
        inside = os.path.join(self.repo, "src")
        for command, cwd in (("cd src/sub && apply_patch <<'EOF'\n%s\nEOF", None),
                             ("cd sub && apply_patch <<'EOF'\n%s\nEOF", inside),
                             ("cd %s && apply_patch <<'EOF'\n%%s\nEOF" % os.path.join(inside, "sub"), inside),
                             ("cd ../src/sub && apply_patch <<'EOF'\n%s\nEOF", os.path.join(self.repo, "docs"))):
            with self.subTest(command=command, cwd=cwd):
                self.assertIn(holder["handle"], self.denial(self.bash(command % BODY, cwd=cwd), harness="codex"))
        self.assertIsNone(self.denial(self.bash("apply_patch <<'EOF'\n%s\nEOF" % BODY), harness="codex"),
                          "without the cd the patch writes a.py at the top")

    def test_hostile_shell_commands_fail_open_and_a_buried_conflict_still_denies(self):
        self.start(CODEX_MAIN, "codex")
        holder = self.peer("a.py")
        filler = "*** Add File: pad.txt\n" + "+%s\n" % ("x" * 200) * 20000
        buried = "apply_patch <<'EOF'\n*** Begin Patch\n%s*** Update File: a.py\n@@\n-x\n+y\n*** End Patch\nEOF" % filler
        self.assertIn(holder["handle"], self.denial(self.bash(buried), harness="codex"))
        for command in ("apply_patch " + "<<" * 50000, "cd " + "'" * 9999 + " && apply_patch <<EOF\n",
                        "apply_patch <<EOF\n*** Add File: \ud800.py\n+x\nEOF", "apply_patch <<EOF\n\x00\x1b[2J\nEOF",
                        "applypatch <<'EOF'\n*** Add File: /etc/passwd\n*** Delete File: ../../x\nEOF",
                        ["apply_patch", "*** Delete File: \ud800"], ["bash", "-lc", None], [], {"x": 1}):
            with self.subTest(command=str(command)[:40]):
                out, err = self.run_hook(self.bash(command), harness="codex")
                self.assertEqual((out, err), ("", ""))

    def test_plain_shell_stays_advisory_without_the_store(self):
        self.start(CODEX_MAIN, "codex")
        self.peer("shell_out.txt", "a.py")
        for data in (self.payload("codex-PreToolUse-Bash-exec_command"),
                     self.bash("echo x; apply_patch <<'EOF'\n%s\nEOF" % BODY),
                     self.bash("git commit -m 'use apply_patch for a.py'")):
            with self.subTest(command=data["tool_input"]["command"]):
                self.assertIsNone(self.denial(data, harness="codex"))
                p = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", HOOK, "--harness", "codex"],
                                   input=json.dumps(data).encode(), env=self.env, cwd=self.repo,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
                loaded = {line.split("|")[-1].strip() for line in p.stderr.decode().splitlines() if "|" in line}
                self.assertNotIn("store", loaded)
                self.assertNotIn("sqlite3", loaded)
        self.assertIsNotNone(self.denial(self.bash("apply_patch <<'EOF'\n%s\nEOF" % BODY), harness="codex"))
        # Claude Code has no patch engine behind its Bash tool: the same text is plain shell.
        data = self.payload("claude-PreToolUse-Bash", session_id=CLAUDE_MAIN,
                            tool_input={"command": "apply_patch <<'EOF'\n%s\nEOF" % BODY})
        self.assertIsNone(self.denial(data))


class SymlinkTest(HookCase):

    def setUp(self):
        super().setUp()
        os.makedirs(os.path.join(self.repo, "real"))
        os.symlink("real", os.path.join(self.repo, "link"))
        self.start()

    def test_symlinked_parent_of_a_new_file(self):
        self.peer("real/new.py")
        self.assertIn("real/new.py", self.denial(self.write("link/new.py")))

    def test_symlink_from_outside_into_the_repository(self):
        self.peer("src/a.py")
        way_in = os.path.join(self.tmp, "way-in")
        os.symlink(os.path.join(self.repo, "src"), way_in)
        self.assertIsNotNone(self.denial(self.payload("claude-PreToolUse-Write",
                                                      tool_input={"file_path": os.path.join(way_in, "a.py")})))

    def test_symlink_leading_out_of_the_repository_is_not_coordinated(self):
        elsewhere = os.path.join(self.tmp, "elsewhere")
        os.makedirs(elsewhere)
        os.symlink(elsewhere, os.path.join(self.repo, "out"))
        self.peer("out")
        self.assertIsNone(self.denial(self.write("out/file.txt")))

    def test_file_symlink_checks_link_name_and_target(self):
        with open(os.path.join(self.repo, "target.txt"), "w") as f:
            f.write("t\n")
        os.symlink("target.txt", os.path.join(self.repo, "alias.txt"))
        holder = self.peer("target.txt")
        self.assertIn("target.txt", self.denial(self.write("alias.txt")))
        self.st.release(holder["id"], everything=True)
        self.peer("alias.txt")
        text = "*** Begin Patch\n*** Delete File: alias.txt\n*** End Patch\n"
        self.assertIsNotNone(self.denial(self.patch(text), harness="codex"))

    def test_cli_claim_through_a_link_is_enforced_on_both_names(self):
        # The CLI resolves `link/guide.md` to `real/guide.md`, the name the hook checks.
        with open(os.path.join(self.repo, "real", "guide.md"), "w") as f:
            f.write("guide\n")
        for claimed in ("link/guide.md", "real/guide.md", "link"):
            peer = self.coord_json("hello")["runtime"]
            self.coord("claim", claimed, "-p", "docs pass", runtime=peer["id"], cwd=self.repo, check=0)
            for written in ("real/guide.md", "link/guide.md"):
                reason = self.denial(self.write(written))
                self.assertIsNotNone(reason, (claimed, written))
                self.assertIn(peer["handle"], reason)
            text = "*** Begin Patch\n*** Update File: link/guide.md\n@@\n-guide\n+new\n*** End Patch\n"
            self.assertIsNotNone(self.denial(self.patch(text), harness="codex"), claimed)
            self.coord("release", claimed, runtime=peer["id"], cwd=self.repo, check=0)
            self.assertIsNone(self.denial(self.write("link/guide.md")), claimed)

    def test_cli_claim_on_a_file_symlink_protects_its_target(self):
        with open(os.path.join(self.repo, "target.txt"), "w") as f:
            f.write("t\n")
        os.symlink("target.txt", os.path.join(self.repo, "alias.txt"))
        peer = self.coord_json("hello")["runtime"]
        self.coord("claim", "alias.txt", runtime=peer["id"], cwd=self.repo, check=0)
        self.assertIn(peer["handle"], self.denial(self.write("target.txt")))
        self.assertIn(peer["handle"], self.denial(self.write("alias.txt")))

    def test_repository_reached_through_a_symlink(self):
        self.peer("src/a.py")
        alias = os.path.join(self.tmp, "repo-alias")
        os.symlink(self.repo, alias)
        data = self.payload("claude-PreToolUse-Write", cwd=alias,
                            tool_input={"file_path": os.path.join(alias, "src", "a.py")})
        self.assertIsNotNone(self.denial(data, cwd=alias))


class FailOpenTest(HookCase):
    """Anything that is not a positively recognised conflict: exit 0, no deny, <= 1 stderr line."""

    def setUp(self):
        super().setUp()
        self.start()
        self.peer("src/app.py")
        self.blocked = self.write("src/app.py")
        self.assertIsNotNone(self.denial(self.blocked), "the conflict the cases below must not report")

    def assertAllowed(self, data, **kw):
        out, err = self.run_hook(data, **kw)
        self.assertEqual(out, "")
        return err

    def test_unreadable_payloads(self):
        for raw in (b"", b"not json", b"[1, 2]", b'"PreToolUse"', b"{", b"\xff\xfe\x00garbage", b"null",
                    json.dumps(self.blocked)[:-5].encode(), b"[" * 100000):
            with self.subTest(raw=raw[:20]):
                self.assertAllowed(raw)

    def test_unknown_events_and_wrong_types(self):
        cases = [dict(self.blocked, hook_event_name="PreToolUseX"), dict(self.blocked, hook_event_name=["PreToolUse"]),
                 dict(self.blocked, session_id=12), dict(self.blocked, session_id=""), dict(self.blocked, agent_id=5),
                 dict(self.blocked, tool_input="src/app.py"), dict(self.blocked, tool_input={"file_path": ["x"]}),
                 dict(self.blocked, tool_name=None), dict(self.blocked, tool_input={"file_path": "src/app\0.py"}),
                 dict(self.blocked, hook_event_name="SubagentStart"),
                 dict(self.payload("claude-SessionStart"), session_id={"a": 1})]
        for data in cases:
            with self.subTest(data=str(data)[:80]):
                self.assertAllowed(data)

    def test_wrong_cwd_type_falls_back_to_the_hook_cwd(self):
        data = dict(self.blocked, cwd=17, tool_input={"file_path": "src/app.py"})
        self.assertIsNotNone(self.denial(data, cwd=self.repo))

    def test_missing_project_id(self):
        env = {"COORD_DB": None, "COORD_PROJECT_ID": None}
        err = self.assertAllowed(self.blocked, env=env)
        self.assertIn("project ID", err)
        self.assertEqual(self.run_hook(self.payload("claude-UserPromptSubmit"), env=env)[0], "")

    def test_unusable_database_paths(self):
        as_dir = os.path.join(self.tmp, "db-is-a-dir")
        os.makedirs(as_dir)
        under_file = os.path.join(self.repo, "src", "file", "x.sqlite3")
        with open(os.path.join(self.repo, "src", "file"), "w") as f:
            f.write("x")
        for db in (as_dir, under_file):
            with self.subTest(db=db):
                self.assertAllowed(self.blocked, env={"COORD_DB": db})
                self.assertAllowed(self.payload("claude-PostToolUse-Write"), env={"COORD_DB": db})
                self.assertAllowed(self.payload("claude-SessionStart"), env={"COORD_DB": db})

    def test_corrupt_database(self):
        bad = os.path.join(self.tmp, "corrupt.sqlite3")
        with open(bad, "wb") as f:
            f.write(b"this is not a database" * 200)
        for name in ("claude-PreToolUse-Write", "claude-PostToolUse-Write", "claude-SessionStart", "claude-Stop"):
            with self.subTest(sample=name):
                data = self.blocked if name == "claude-PreToolUse-Write" else self.payload(name)
                err = self.assertAllowed(data, env={"COORD_DB": bad})
                self.assertIn("damaged", err)

    def test_database_without_tables(self):
        empty = os.path.join(self.tmp, "empty.sqlite3")
        sqlite3.connect(empty).close()
        self.assertAllowed(self.blocked, env={"COORD_DB": empty})
        self.assertEqual(sqlite3.connect(empty).execute("PRAGMA user_version").fetchone()[0], 0,
                         "PreToolUse does not migrate (it writes nothing)")

    def test_locked_database_fails_open_but_a_conflict_still_denies(self):
        sender = self.peer()
        self.st.send(sender["id"], "please look", to=self.st.find_conversation_runtime(CLAUDE_MAIN)["handle"])
        locker = sqlite3.connect(self.db, isolation_level=None)
        self.addCleanup(locker.close)
        locker.execute("BEGIN IMMEDIATE")
        try:
            err = self.assertAllowed(self.payload("claude-PostToolUse-Write"))
            self.assertIn("busy", err)
            self.assertIsNotNone(self.denial(self.blocked), "WAL readers are not blocked: the check still runs")
        finally:
            locker.execute("ROLLBACK")
        self.assertIn("please look", self.context(self.payload("claude-PostToolUse-Write")), "delivered once unlocked")

    def test_store_missing_beside_the_hook(self):
        lone = os.path.join(self.tmp, "lone", ".coord")
        os.makedirs(lone)
        shutil.copy(HOOK, lone)
        err = self.assertAllowed(self.blocked, script=os.path.join(lone, "hook.py"))
        self.assertIn("store", err)

    def test_old_python_exits_quietly(self):
        old = "/root/.pyenv/versions/3.8.18/bin/python3"
        if not os.path.exists(old):
            self.skipTest("no Python 3.8 here")
        self.assertEqual(self.assertAllowed(self.blocked, python=old), "")

    def test_bad_numeric_environment_means_the_defaults(self):
        """The CLI refuses these (exit 2); a hook must neither crash nor act on them."""
        silent = self.peer("src/old.py")
        with self.st.transaction():  # silent for 5 hours: gone under the default 4 h presence limit
            self.st.conn.execute("UPDATE runtimes SET heartbeat_at = heartbeat_at - 5 * 3600 WHERE id = ?",
                                 (silent["id"],))
        me = self.st.find_conversation_runtime(CLAUDE_MAIN)
        for name, value in (("COORD_RUNTIME_TTL", "1e309"), ("COORD_RUNTIME_TTL", "inf"),
                            ("COORD_RUNTIME_TTL", "nan"), ("COORD_LEASE_TTL", "inf"), ("COORD_LEASE_TTL", "-1"),
                            ("COORD_BUSY_TIMEOUT", "inf"), ("COORD_BUSY_TIMEOUT", "nan")):
            with self.subTest(var=name, value=value):
                env = {name: value}
                self.assertIsNotNone(self.denial(self.blocked, env=env), "a live holder still blocks")
                self.assertEqual(self.run_hook(self.write("src/old.py"), env=env), ("", ""),
                                 "a runtime silent for 5 h is gone whatever the variable says")
                msg = self.st.send(self.peer()["id"], "note under %s=%s" % (name, value), me["handle"])
                self.assertIn("note under", self.context(self.payload("claude-PostToolUse-Write"), env=env))
                self.st.ack(me["id"], [msg["id"]])

    def test_oversized_payload(self):
        data = dict(self.blocked)
        data["tool_input"] = dict(data["tool_input"], content="x" * (hook.MAX_INPUT + 10))
        err = self.assertAllowed(data)
        self.assertIn("larger than", err)


class DeliveryTest(HookCase):

    def test_body_once_then_reminders_until_ack_then_silence(self):
        me = self.start()
        self.assertEqual(self.run_hook(self.payload("claude-PostToolUse-Write"))[0], "", "idle: nothing printed")
        sender = self.peer()
        msg = self.st.send(sender["id"], "tests are red on main", to=me["handle"], kind="alert")
        out, _ = self.run_hook(self.payload("claude-PostToolUse-Write"))
        # framed as information from a named peer, added as context: never a block, a decision or a prompt
        self.assertEqual(json.loads(out), {"hookSpecificOutput": {
            "hookEventName": "PostToolUse",
            "additionalContext": "coord message #%d from %s (alert), for your information:\n"
                                 "tests are red on main\n(acknowledge: .coord/coord ack %d)"
                                 % (msg["id"], sender["handle"], msg["id"])}})
        for sample in ("claude-PostToolUse-Edit", "claude-UserPromptSubmit", "claude-SessionStart"):
            with self.subTest(boundary=sample):
                text = self.context(self.payload(sample, session_id=CLAUDE_MAIN))
                self.assertNotIn("tests are red on main", text)
                self.assertIn("#%d" % msg["id"], text)
                self.assertIn("inbox --peek", text)
        self.assertEqual(self.st.find_conversation_runtime(CLAUDE_MAIN)["id"], me["id"])
        self.st.ack(me["id"], [msg["id"]])
        for sample in ("claude-PostToolUse-Write", "claude-UserPromptSubmit", "claude-Stop"):
            self.assertEqual(self.run_hook(self.payload(sample))[0], "")

    def test_bidi_controls_never_reach_the_model(self):
        me = self.start()
        sender = self.peer()
        bidi = "\u202e\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
        self.st.send(sender["id"], "run tests%s then txt.exe" % bidi, to=me["handle"], kind="al\u202eert")
        text = self.context(self.payload("claude-PostToolUse-Write"))
        self.assertIn("run tests then txt.exe", text)
        self.assertIn("(alert)", text)
        self.peer("src/app.py", purpose="fix \u202eoof")
        reason = self.denial(self.write("src/app.py"))
        self.assertIn("fix oof", reason)
        for ch in bidi:
            self.assertNotIn(ch, text + reason, "U+%04X" % ord(ch))

    def delivery_states(self, runtime_id):
        return dict(self.st.q("SELECT state, count(*) FROM deliveries WHERE recipient = ? GROUP BY state",
                              (runtime_id,)).fetchall())

    def test_sixty_maximal_messages_never_overflow_a_boundary_and_all_arrive(self):
        me = self.start()
        sender = self.peer()
        marker = "coord-test-message-%02d "
        ids = [self.st.send(sender["id"], (marker % i).ljust(store.MAX_BODY, "x"), me["handle"])["id"]
               for i in range(60)]
        seen = {}
        for boundary in range(20):
            text = self.context(self.payload("claude-PostToolUse-Write"))
            self.assertLessEqual(len(text), 10000, "Claude Code replaces longer context with a 2 KB preview")
            self.assertLessEqual(len(text.encode()), store.CONTEXT_BUDGET)
            shown = [i for i in range(60) if marker % i in text]
            self.assertEqual(len(shown), 1, "one maximal message fits a boundary, beside the reminders")
            for i in shown:
                self.assertNotIn(i, seen, "a body is injected once")
                seen[i] = boundary
            self.assertIn("%d new messages (%d bytes) not shown here; read them with: .coord/coord inbox"
                          % (59 - boundary, (59 - boundary) * store.MAX_BODY), text)
            self.assertLessEqual(text.count("coord: unacked #"), store.REMINDERS)
            self.assertEqual(self.delivery_states(me["id"]), {"delivered": boundary + 1, "queued": 59 - boundary},
                             "only what was injected is marked delivered")
        self.assertEqual(sorted(seen), list(range(20)), "in the order sent")
        inbox = self.coord("inbox", runtime=me["id"], check=0).stdout
        for i in range(60):
            self.assertIn(marker % i, inbox, "the rest arrive with inbox (and delivered ones are reread)")
        self.assertEqual(self.delivery_states(me["id"]), {"delivered": 60})
        later = self.context(self.payload("claude-UserPromptSubmit"))
        self.assertNotIn("coord-test-message-", later)
        self.assertEqual(later.count("coord: unacked #"), store.REMINDERS)
        self.assertIn("%d more unacked messages" % (60 - store.REMINDERS), later)
        self.assertLessEqual(len(later.splitlines()), store.REMINDERS + 1)
        self.assertLess(len(later.encode()), 2000)
        self.coord("ack", *ids, runtime=me["id"], check=0)
        self.assertEqual(self.run_hook(self.payload("claude-PostToolUse-Write"))[0], "")

    def test_small_messages_fill_a_boundary_in_order_and_session_start_is_bounded_too(self):
        me = self.start()
        sender = self.peer()
        for i in range(300):
            self.st.send(sender["id"], "small note %03d" % i, me["handle"])
        text = self.context(self.payload("claude-SessionStart"))
        self.assertLessEqual(len(text.encode()), store.CONTEXT_BUDGET)
        self.assertTrue(text.startswith("coord: you are %s" % me["handle"]))
        first = [i for i in range(300) if "small note %03d" % i in text]
        self.assertEqual(first, list(range(len(first))), "oldest first, none skipped")
        self.assertGreater(len(first), 10)
        self.assertEqual(self.delivery_states(me["id"]).get("delivered"), len(first))
        delivered = len(first)
        while delivered < 300:
            text = self.context(self.payload("claude-PostToolUse-Write"))
            self.assertLessEqual(len(text.encode()), store.CONTEXT_BUDGET)
            now = [i for i in range(300) if "small note %03d\n" % i in text]
            self.assertEqual(now, list(range(delivered, delivered + len(now))))
            self.assertTrue(now)
            delivered += len(now)
            self.assertEqual(self.delivery_states(me["id"]).get("delivered"), delivered)

    def test_a_body_larger_than_a_boundary_stays_queued_for_inbox(self):
        me = self.start()
        sender = self.peer()
        first = self.st.send(sender["id"], "first, small", me["handle"])["id"]
        huge = "legacy " + "y" * (16 * 1024)
        with self.st.transaction():  # what 0.1.0 accepted: a 16 KiB body
            mid = self.st.conn.execute("INSERT INTO messages (sender, kind, body, digest, broadcast, created_at)"
                                       " VALUES (?, 'note', ?, 'ab', 0, 0)", (sender["id"], huge)).lastrowid
            self.st.conn.execute("INSERT INTO deliveries (message, recipient, state) VALUES (?, ?, 'queued')",
                                 (mid, me["id"]))
        after = self.st.send(sender["id"], "after the big one", me["handle"])["id"]
        for _ in range(3):
            text = self.context(self.payload("claude-PostToolUse-Write"))
            self.assertLessEqual(len(text.encode()), store.CONTEXT_BUDGET)
            self.assertNotIn("yyyy", text)
            self.assertNotIn("after the big one", text, "messages arrive in order")
            self.assertIn("2 new messages (%d bytes) not shown here; read them with: .coord/coord inbox"
                          % (len(huge) + len("after the big one")), text)
        states = dict(self.st.q("SELECT message, state FROM deliveries WHERE recipient = ?", (me["id"],)).fetchall())
        self.assertEqual(states, {first: "delivered", mid: "queued", after: "queued"})
        inbox = self.coord("inbox", runtime=me["id"], check=0).stdout
        self.assertIn(huge, inbox)
        self.assertIn("after the big one", inbox)
        text = self.context(self.payload("claude-PostToolUse-Write"))
        self.assertNotIn("not shown here", text)
        self.assertEqual(text.count("coord: unacked #"), 3)

    def test_tool_boundaries_inside_a_turn_write_nothing_until_the_heartbeat_is_due(self):
        me = self.start()
        probe = sqlite3.connect(self.db)
        self.addCleanup(probe.close)
        # The prompt and the turn's end each record the turn boundary (for send --nudge); the
        # tool calls between them write nothing.
        self.assertEqual(self.run_hook(self.payload("claude-UserPromptSubmit", session_id=CLAUDE_MAIN))[0], "")
        before = probe.execute("PRAGMA data_version").fetchone()[0]
        for sample in ("claude-PostToolUse-Write", "claude-PostToolUse-Edit"):
            self.assertEqual(self.run_hook(self.payload(sample, session_id=CLAUDE_MAIN))[0], "")
        self.assertEqual(probe.execute("PRAGMA data_version").fetchone()[0], before)
        self.assertEqual(self.run_hook(self.payload("claude-Stop", session_id=CLAUDE_MAIN))[0], "")
        self.assertEqual(self.st.turn(me["id"])["state"], "idle")
        stale = me["heartbeat_at"] - store.HEARTBEAT_EVERY - 5
        with self.st.transaction():
            self.st.conn.execute("UPDATE runtimes SET heartbeat_at = ? WHERE id = ?", (stale, me["id"]))
        self.run_hook(self.payload("claude-PostToolUse-Write"))
        self.assertGreater(self.st.runtime(me["id"])["heartbeat_at"], me["heartbeat_at"])

    def test_session_start_lists_peer_exclusive_leases_bounded(self):
        holder = self.peer(*["src/f%02d.py" % i for i in range(12)], purpose="big change")
        self.peer("notes.md", mode="append")
        text = self.context(self.payload("claude-SessionStart"))
        self.assertIn("%s: src/f00.py, src/f01.py" % holder["handle"], text)
        self.assertNotIn("src/f11.py", text)
        self.assertIn("+4 more", text)
        self.assertNotIn("notes.md", text, "append leases do not stop a fellow appender")

    def test_a_reminder_line_carries_what_it_must_within_its_bytes(self):
        me = self.start()
        sender = self.peer()
        msg = self.st.send(sender["id"], "leave src/parser.py to me", me["handle"], kind="request")
        self.assertIn("leave src/parser.py", self.context(self.payload("claude-PostToolUse-Write")))
        line = self.context(self.payload("claude-UserPromptSubmit"))
        self.assertEqual(line, "coord: unacked #%d from %s (request, sha256:%s); read: .coord/coord inbox --peek,"
                         " then ack %d" % (msg["id"], sender["handle"], msg["digest"][:8], msg["id"]))
        self.assertLessEqual(len(line.encode("utf-8")), store.REMINDER_BYTES)

    def test_session_start_own_lines_stay_within_their_bytes(self):
        alone = self.context(self.payload("claude-SessionStart"))
        self.assertLessEqual(len(alone.encode("utf-8")), hook.START_BYTES)
        me = self.st.find_conversation_runtime(CLAUDE_MAIN)
        self.st.claim(me["id"], ["src/mine/deeply/nested/module_%02d.py" % i for i in range(12)], purpose="mine")
        text = self.context(self.payload("claude-SessionStart"))
        self.assertLessEqual(len(text.encode("utf-8")), hook.START_BYTES, text)
        self.assertRegex(text, r"\nYour leases: src/mine/deeply/nested/module_00\.py.* \(\+\d+ more\)$")
        holders = [self.peer(*["lib/peer%d/long_component_name_%02d.py" % (p, i) for i in range(6)],
                   purpose="x" * 400) for p in range(3)]
        text = self.context(self.payload("claude-SessionStart"))
        self.assertTrue(text.startswith("coord: you are %s (" % me["handle"]), text)
        self.assertLessEqual(len(text.encode("utf-8")), hook.START_BYTES, text)
        # Peers' leases come first; the agent's own names fill what is left, else their count.
        self.assertRegex(text, r"\nYour leases: (src/mine/deeply/nested/module_00\.py.* \(\+\d+ more\)"
                               r"|12 \(\.coord/coord list\))\n")
        self.assertIn("  %s: lib/peer0/long_component_name_00.py" % holders[0]["handle"], text)
        self.assertRegex(text, r"\n  \+\d+ more: \.coord/coord list$")
        self.assertNotIn("xxx", text, "purposes are in list --verbose")
        self.st.send(holders[1]["id"], "a message still arrives at SessionStart", me["handle"])
        with_message = self.context(self.payload("claude-SessionStart"))
        self.assertIn("a message still arrives at SessionStart", with_message)
        self.assertLessEqual(len(with_message.encode("utf-8")), store.CONTEXT_BUDGET)

    def test_session_start_is_short_when_alone(self):
        text = self.context(self.payload("codex-SessionStart"), harness="codex")
        self.assertEqual(len(text.splitlines()), 1)

    def test_claude_env_file_gets_the_runtime_export(self):
        env_file = os.path.join(self.tmp, "claude-env")
        with open(env_file, "w") as f:
            f.write("export OTHER=1")  # no trailing newline: the export must start its own line
        self.run_hook(self.payload("claude-SessionStart"), env={"CLAUDE_ENV_FILE": env_file})
        rt = self.st.find_conversation_runtime(CLAUDE_MAIN)
        with open(env_file) as f:
            self.assertEqual(f.read(), "export OTHER=1\nexport COORD_RUNTIME_ID=%s\n" % rt["id"])
        seen = subprocess.run(["sh", "-c", '. "$1"; echo "$COORD_RUNTIME_ID"', "sh", env_file],
                              stdout=subprocess.PIPE, text=True).stdout.strip()
        self.assertEqual(seen, rt["id"])
        self.run_hook(self.payload("claude-SubagentStart"), env={"CLAUDE_ENV_FILE": env_file})
        with open(env_file) as f:
            self.assertEqual(f.read().count("COORD_RUNTIME_ID"), 1, "a subagent does not take the export")


class IdentityTest(HookCase):

    def test_resume_in_a_new_process_supersedes_and_the_old_process_goes_stale(self):
        old_proc, new_proc = FakeHarness(self), FakeHarness(self)
        old = self.start(via=old_proc)
        self.assertEqual(old["pid"], old_proc.pid)
        self.st.claim(old["id"], ["src/app.py"], purpose="mine")
        text = self.context(self.payload("claude-SessionStart-resume.variant"), via=new_proc)
        new = self.st.find_conversation_runtime(CLAUDE_MAIN)
        self.assertNotEqual(new["id"], old["id"])
        self.assertIn("you are %s" % new["handle"], text)
        self.assertIn("Your leases: src/app.py", text)
        self.assertEqual(self.st.runtime(old["id"])["superseded_by"], new["id"])
        self.assertIsNone(self.denial(self.write("src/app.py"), via=new_proc))
        reason = self.denial(self.write("src/app.py"), via=old_proc)
        self.assertIn("resumed elsewhere as %s" % new["handle"], reason)
        msg = self.st.send(self.peer()["id"], "for the live one", to=new["handle"])
        for sample in ("claude-PostToolUse-Write", "claude-Stop", "claude-SessionEnd"):
            self.assertEqual(self.run_hook(self.payload(sample), via=old_proc)[0], "")
        notice = self.context(self.payload("claude-UserPromptSubmit"), via=old_proc)
        self.assertIn("resumed elsewhere as %s" % new["handle"], notice)
        self.assertNotIn("for the live one", notice)
        self.assertEqual(self.st.open_messages(new["id"])[0]["state"], "queued", "the stale process took nothing")
        self.assertIsNone(self.st.runtime(new["id"])["ended_at"], "the stale SessionEnd ended nothing")
        self.assertIn("for the live one", self.context(self.payload("claude-PostToolUse-Write"), via=new_proc))
        self.assertEqual(msg["recipients"], [new["handle"]])

    def test_same_process_session_start_keeps_the_attachment(self):
        first = self.start()
        again = self.context(self.payload("claude-SessionStart-compact.variant"))
        self.assertIn("you are %s" % first["handle"], again)
        self.assertEqual(len(self.st.live_runtimes()), 1)

    def test_codex_resume_in_a_new_process_supersedes(self):
        first, second = FakeHarness(self), FakeHarness(self)
        old = self.start(CODEX_MAIN, "codex", via=first)
        self.context(self.payload("codex-SessionStart-resume.variant"), harness="codex", via=second)
        new = self.st.find_conversation_runtime(CODEX_MAIN)
        self.assertEqual((new["pid"], self.st.runtime(old["id"])["superseded_by"]), (second.pid, new["id"]))

    def test_shells_between_harness_and_hook_are_skipped(self):
        harness = FakeHarness(self)
        argv_runner = harness.run

        def through_shell(argv, data, env, cwd):
            return argv_runner(["sh", "-c", '"$@"; exit $?', "sh"] + argv, data, env, cwd)
        harness.run = through_shell
        rt = self.start(via=harness)
        self.assertEqual(rt["pid"], harness.pid)

    def test_missing_runtime_is_registered_again_quietly(self):
        rt = self.start()
        self.st.bye(rt["id"])
        self.assertEqual(self.run_hook(self.payload("claude-PostToolUse-Write"))[0], "")
        again = self.st.find_conversation_runtime(CLAUDE_MAIN)
        self.assertIsNotNone(again)
        self.assertNotEqual(again["id"], rt["id"])

    def test_subagent_is_independent_of_its_parent(self):
        parent = self.start(CLAUDE_PARENT)
        self.run_hook(self.payload("claude-SubagentStart"))
        sub_id = store.subagent_uuid(CLAUDE_PARENT, CLAUDE_AGENT)
        self.st.claim(parent["id"], ["sub.txt"], purpose="parent's")
        in_sub = self.payload("claude-PreToolUse-Write-in-subagent")
        self.assertIn(parent["handle"], self.denial(in_sub), "the parent's lease binds its subagent")
        self.st.release(parent["id"], everything=True)
        self.st.claim(sub_id, ["sub.txt"], purpose="subagent's")
        self.assertIsNone(self.denial(in_sub))
        as_parent = self.write("sub.txt", session=CLAUDE_PARENT)
        self.assertIn(self.st.runtime(sub_id)["handle"], self.denial(as_parent))
        self.st.send(parent["id"], "sub only", to=self.st.runtime(sub_id)["handle"])
        self.assertEqual(self.run_hook(self.payload("claude-PostToolUse-Agent"))[0], "")
        self.assertIn("sub only", self.context(self.payload("claude-PostToolUse-Write-in-subagent")))
        self.run_hook(self.payload("claude-SubagentStop"))
        self.assertIsNone(self.denial(as_parent), "SubagentStop released the subagent's leases")
        self.assertIsNotNone(self.st.find_conversation_runtime(CLAUDE_PARENT))

    def test_session_end_releases_leases(self):
        me = self.start()
        self.st.claim(me["id"], ["src/app.py"])
        self.run_hook(self.payload("claude-SessionEnd"))
        self.assertEqual(self.st.all_leases(), [])

    def test_a_works_agent_whose_window_is_killed_keeps_its_leases_and_is_told_at_resume(self):
        # Claude Code runs SessionEnd (reason "other") when tmux hangs its window up: coord did not
        # close the work, so its unlanded change stays protected, as after a crash.
        me = self.start()
        with self.st.transaction():
            w = self.st.insert_work("killed-window", "active", "token", data={"tmux": {"conversation": CLAUDE_MAIN}})
        self.st.claim(me["id"], ["src/app.py"])
        self.run_hook(self.payload("claude-SessionEnd"))
        peer = self.peer()
        self.assertEqual([l["resource"] for l in self.st.conflicts(["src/app.py"], as_runtime=peer["id"])],
                         ["src/app.py"], "check still says held")
        holder = self.st.runtime(self.st.runtime(me["id"])["superseded_by"])
        self.assertEqual(holder["harness"], store.PARKED)
        # resumed (the same conversation, a new process): its leases again, and it is told
        text = context_of(self.run_hook(self.payload("claude-SessionStart", source="resume"))[0])
        self.assertIn("Your leases, kept for your work while it was away: src/app.py", text)
        # /clear is no goodbye to the work but no interruption either: the same process goes on
        again = self.st.find_conversation_runtime(CLAUDE_MAIN)
        self.run_hook(dict(self.payload("claude-SessionEnd"), reason="clear"))
        self.assertEqual(self.st.all_leases(), [], "released, as before")
        with self.st.transaction():  # coord closing it: the SessionEnd it caused releases too
            self.st.update_work(w["id"], data={"closing": {"at": 1, "by": None}})
        self.start()
        self.st.claim(self.st.find_conversation_runtime(CLAUDE_MAIN)["id"], ["src/app.py"])
        self.run_hook(self.payload("claude-SessionEnd"))
        self.assertEqual(self.st.all_leases(), [])
        self.assertIsNotNone(again)


def shell_copy(testcase, name, source="bash"):
    """A copy of shell `source` under the test's directory, named `name` (a shell no list knows)."""
    path = os.path.join(testcase.tmp, "shells", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    shutil.copy(support.require_tool(testcase, source), path)
    return path


def through(harness, *shells):
    """Make `harness` run each command as `$SHELL -lc` would, through `shells` (outermost
    first: (argv0, flag)); every shell keeps running until the command ends (no exec)."""
    direct = harness.run

    def run(argv, data, env, cwd):
        for shell, flag in reversed(shells):
            argv = [shell, flag, '"$@"; exit $?', os.path.basename(shell)] + argv
        return direct(argv, data, env, cwd)
    harness.run = run
    return harness


class HarnessBehindShellsTest(HookCase):
    """The hook records the harness process itself, past login shells whatever their name, and
    a command from the agent's shell resolves to that runtime by its ancestry."""

    def events(self, via, session=CODEX_MAIN):
        """SessionStart and three more hook runs of one Codex conversation through `via`."""
        rt = self.start(session, harness="codex", via=via)
        self.run_hook(self.payload("codex-UserPromptSubmit", session_id=session), harness="codex", via=via)
        self.run_hook(self.patch("*** Begin Patch\n*** Add File: src/a.py\n+x\n*** End Patch\n",
                                 session=session), harness="codex", via=via)
        self.run_hook(self.payload("codex-Stop", session_id=session), harness="codex", via=via)
        return rt

    def assert_one_runtime_held_by(self, harness, session=CODEX_MAIN):
        rows = self.st.q("SELECT id, pid FROM runtimes WHERE conversation = ?", (session,)).fetchall()
        self.assertEqual([r[1] for r in rows], [harness.pid], rows)
        self.assertTrue(self.st.runtime_live(self.st.runtime(rows[0][0])))
        return rows[0][0]

    def claim_from_agent_shell(self, harness, path):
        """`coord claim` run by the agent's shell (a child of the harness), with no identity in
        its environment: only its ancestry names it."""
        env = {k: v for k, v in self.env.items() if not k.startswith(("CODEX_", "CLAUDE_", "COORD_RUNTIME"))}
        return harness.run([sys.executable, support.COORD, "claim", path, "-p", "x", "--json"],
                           "", env, self.repo)

    def test_codex_under_login_shells_outside_any_list_keeps_one_runtime(self):
        shells = [("tcsh", "bash"), ("elvish", "bash"), ("dash", "dash"), ("bash", "bash")]
        if shutil.which("zsh"):
            shells.append(("zsh", "zsh"))
        for name, source in shells:
            with self.subTest(login_shell=name):
                session, path = store.new_uuid(), "src/%s.py" % name
                harness = through(FakeHarness(self, name="codex"),
                                  (shell_copy(self, name, source), "-lc"), ("/bin/sh", "-c"))
                rt = self.events(harness, session)
                rid = self.assert_one_runtime_held_by(harness, session)
                self.assertEqual(rt["id"], rid)
                rc, out, err = self.claim_from_agent_shell(harness, path)
                self.assertEqual(rc, 0, out + err)
                self.assertEqual(json.loads(out)["ok"], True)
                held = self.st.q("SELECT runtime FROM leases WHERE resource = ?", (path,)).fetchall()
                self.assertEqual(held, [(rid,)])
                harness.close()

    def test_unrecognised_parent_behind_an_unknown_shell_is_the_harness(self):
        # No process looks like Codex or Claude: the walk passes the shells only, so it stops
        # at the stand-in (and never climbs to whatever agent runs the test suite).
        harness = through(FakeHarness(self), (shell_copy(self, "nu"), "-lc"), ("/bin/sh", "-c"))
        self.events(harness)
        self.assert_one_runtime_held_by(harness)

    def test_claude_recognised_as_node_running_its_cli_script(self):
        pkg = os.path.join(self.tmp, "lib", "node_modules", "@anthropic-ai", "claude-code")
        os.makedirs(pkg)
        script = os.path.join(pkg, "cli.js")
        with open(script, "w") as f:
            f.write(support._HARNESS_DRIVER)
        node = os.path.join(self.tmp, "node-bin", "node")
        os.makedirs(os.path.dirname(node))
        os.symlink(os.path.realpath(sys.executable), node)
        harness = FakeHarness(self)
        harness.close()
        harness.proc = subprocess.Popen([node, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        harness.pid = harness.proc.pid
        through(harness, (shell_copy(self, "xonsh"), "-c"), ("/bin/sh", "-c"))
        # The new process's /proc entries can still show the forking test process for a moment.
        support.retry_until(lambda: store.harness_of_process(harness.pid) == "claude", timeout=10)
        self.start(CLAUDE_MAIN, via=harness)
        self.run_hook(self.payload("claude-UserPromptSubmit"), via=harness)
        rows = self.st.q("SELECT pid FROM runtimes WHERE conversation = ?", (CLAUDE_MAIN,)).fetchall()
        self.assertEqual(rows, [(harness.pid,)])


class GeminiTest(HookCase):
    """Gemini CLI (0.61.0) runs `.gemini/settings.json` hooks under its own event and tool names
    (recorded gemini-* samples): write_file and replace are checked by their file_path (relative
    to the payload's cwd), its shell stays advisory, its deny is {"decision": "deny", "reason"},
    its context is hookSpecificOutput.additionalContext, and its turn boundaries are recorded."""

    def gemini(self, name, **changes):
        return self.run_hook(self.payload(name, **changes), harness="gemini")

    def start_gemini(self, name="gemini-SessionStart"):
        out, _ = self.gemini(name)
        return self.st.find_conversation_runtime(GEMINI_MAIN), out

    def test_write_file_and_replace_of_a_peers_lease_are_denied_in_its_shape(self):
        self.start_gemini()
        holder = self.peer("w.txt", "e.txt", purpose="peer work")
        for name, path in (("gemini-BeforeTool-write_file", "w.txt"), ("gemini-BeforeTool-replace", "e.txt")):
            with self.subTest(sample=name):
                out, _ = self.gemini(name)
                reply = json.loads(out)
                self.assertEqual(set(reply), {"decision", "reason"})
                self.assertEqual(reply["decision"], "deny")
                self.assertIn("coord: write refused", reply["reason"])
                self.assertIn(path, reply["reason"])
                self.assertIn('.coord/coord send "<what you need>" --to %s' % holder["handle"], reply["reason"])
        # replace's file_path "e.txt" is relative: resolved against the payload's cwd, the project
        out, _ = self.gemini("gemini-BeforeTool-replace", cwd=os.path.join(self.repo, "src"))
        self.assertEqual(out, "", "src/e.txt is nobody's")
        self.assertEqual(self.gemini("gemini-BeforeTool-write_file", tool_input={
            "file_path": os.path.join(self.repo, "free.txt"), "content": "x"})[0], "")
        # its shell stays advisory, even on a leased path
        self.assertEqual(self.gemini("gemini-BeforeTool-run_shell_command", tool_input={
            "command": "echo x > w.txt", "description": "x"})[0], "")
        # Gemini's names map to coord's own: a Claude name in its payload is no write of Gemini's
        self.assertEqual(self.gemini("gemini-BeforeTool-write_file", tool_name="Write")[0], "")

    def test_runtime_is_gemini_and_context_comes_in_its_shape(self):
        rt, out = self.start_gemini()
        self.assertEqual((rt["harness"], rt["pid"]), ("gemini", os.getpid()))
        spec = json.loads(out)["hookSpecificOutput"]
        self.assertEqual(spec["hookEventName"], "SessionStart")
        self.assertIn("you are %s" % rt["handle"], spec["additionalContext"])
        sender = self.peer()
        for boundary, event in (("gemini-AfterTool-replace", "AfterTool"), ("gemini-BeforeAgent", "BeforeAgent")):
            with self.subTest(boundary=boundary):
                msg = self.st.send(sender["id"], "BODY via %s" % boundary, to=rt["handle"])
                out, _ = self.gemini(boundary)
                spec = json.loads(out)["hookSpecificOutput"]
                self.assertEqual(spec["hookEventName"], event)
                self.assertIn("BODY via %s" % boundary, spec["additionalContext"])
                self.assertEqual(self.st.q("SELECT state FROM deliveries WHERE message = ?",
                                           (msg["id"],)).fetchone()[0], "delivered")
        # resumed (`gemini --resume ID` keeps the session_id; source "resume"): the same attachment
        again, out = self.start_gemini("gemini-SessionStart-resume")
        self.assertEqual(again["id"], rt["id"])
        self.assertIn("you are %s" % rt["handle"], context_of(out))

    def test_turn_boundaries_and_the_end(self):
        rt, _ = self.start_gemini()
        self.gemini("gemini-BeforeAgent")
        self.assertEqual(self.st.turn(rt["id"])["state"], "busy")
        self.assertIsNotNone(self.st.turn(rt["id"])["began"])
        self.gemini("gemini-Notification-ToolPermission.variant")
        self.assertEqual(self.st.turn(rt["id"])["state"], "dialog")
        self.gemini("gemini-AfterAgent")
        self.assertEqual(self.st.turn(rt["id"])["state"], "idle")
        out, _ = self.gemini("gemini-Notification-ToolPermission.variant", notification_type="Other")
        self.assertEqual((out, self.st.turn(rt["id"])["state"]), ("", "idle"), "only a permission dialog")
        self.gemini("gemini-SessionEnd")
        self.assertEqual(self.st.runtime(rt["id"])["end_reason"], "session-end")

    def test_the_first_prompt_carries_the_session_lines_again(self):
        # Interactive Gemini does not wait for SessionStart's context before its first prompt.
        rt, _ = self.start_gemini()
        first = context_of(self.gemini("gemini-BeforeAgent")[0])
        self.assertIn("coord: you are %s" % rt["handle"], first)
        self.assertLessEqual(len(first.encode()), hook.START_BYTES + store.CONTEXT_BUDGET)
        self.assertEqual(self.gemini("gemini-BeforeAgent")[0], "", "once: later prompts carry messages only")
        self.assertEqual(self.run_hook(self.payload("claude-UserPromptSubmit"))[0], "", "Gemini's alone")



class CopilotProcessTest(HookCase):
    """Copilot CLI's native process (npm's node loader runs .../copilot-linux-x64/copilot) is
    named `MainThread`: it is recognised as the harness by its executable, and what runs under
    it is an agent, never the person at the terminal."""

    def fake_copilot(self):
        exe = os.path.join(self.tmp, "copilot-linux-x64", "copilot")
        os.makedirs(os.path.dirname(exe))
        shutil.copy(os.path.realpath(sys.executable), exe)
        harness = FakeHarness(self)
        harness.close()
        code = "import ctypes; ctypes.CDLL(None).prctl(15, b'MainThread', 0, 0, 0)\n" + support._HARNESS_DRIVER
        harness.proc = subprocess.Popen([exe, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        harness.pid = harness.proc.pid
        support.retry_until(lambda: store.process_parent(harness.pid)[1] == "MainThread", timeout=10)
        return harness

    def test_recognised_by_its_executable_and_never_a_person(self):
        if not os.path.isdir("/proc"):
            self.skipTest("needs /proc")
        harness = self.fake_copilot()
        self.assertEqual(store.harness_of_process(harness.pid), "copilot")
        env = {k: v for k, v in self.env.items() if not k.startswith(("CODEX_", "CLAUDE_", "COORD_RUNTIME"))}
        rc, out, err = harness.run([sys.executable, support.COORD, "claim", "src/a.py", "--json"], "", env, self.repo)
        self.assertEqual(rc, 3, out + err)
        self.assertIn("not a person: copilot", out + err)
        self.assertEqual(self.st.live_runtimes(), [], "no person registered under Copilot")
        through(harness, ("/bin/sh", "-c"))
        self.run_hook(self.payload("copilot-SessionStart"), env=COPILOT_ENV, via=harness)
        rt = self.st.find_conversation_runtime(COPILOT_MAIN)
        self.assertEqual((rt["harness"], rt["pid"]), ("copilot", harness.pid))


class WorkLinkTest(HookCase):
    """A harness launched for a work record tells the record its conversation at SessionStart."""

    def work(self, pane_pid):
        with self.st.transaction():
            return self.st.insert_work("task", "active", "secret-token",
                                       data={"tmux": {"pane_pid": pane_pid, "window_id": "@1"}})

    def test_launched_harness_records_its_conversation_and_runtime(self):
        harness = FakeHarness(self)
        w = self.work(harness.pid)
        rt = self.start(env={"COORD_WORK_ID": w["id"]}, via=harness)
        tmux = self.st.work(w["id"])["data"]["tmux"]
        self.assertEqual((tmux["conversation"], tmux["runtime_id"]), (CLAUDE_MAIN, rt["id"]))
        self.assertEqual(tmux["window_id"], "@1")

    def test_a_process_outside_the_recorded_pane_records_nothing(self):
        harness = FakeHarness(self)
        w = self.work(harness.pid + 100000)
        self.start(env={"COORD_WORK_ID": w["id"]}, via=harness)
        self.assertNotIn("conversation", self.st.work(w["id"])["data"]["tmux"])

    def test_a_bogus_work_id_fails_open(self):
        harness = FakeHarness(self)
        for bogus in ("not-a-uuid", store.new_uuid(), "x" * 5000):
            self.start(env={"COORD_WORK_ID": bogus}, via=harness)


class SubagentShellTest(HookCase):
    """A Claude subagent's coord commands are tagged with its own runtime (updatedInput)."""

    def bash(self, command, **changes):
        data = self.payload("claude-PreToolUse-Bash", tool_input={"command": command, "description": "d"})
        data.update(changes)
        return data

    def test_subagent_coord_command_gets_its_own_runtime(self):
        data = self.bash(".coord/coord claim src/x.py", agent_id="sub-7", agent_type="t")
        out, _ = self.run_hook(data)
        spec = json.loads(out)["hookSpecificOutput"]
        self.assertEqual(set(spec), {"hookEventName", "updatedInput"})
        rid = store.subagent_uuid(data["session_id"], "sub-7")
        self.assertEqual(spec["updatedInput"], {"command": "export COORD_RUNTIME_ID=%s; .coord/coord claim src/x.py"
                                                % rid, "description": "d"})
        # The rewritten command really runs as the subagent: same shell semantics as Claude's.
        env = dict(self.env, COORD_RUNTIME_ID="parent-id")
        got = subprocess.run(["bash", "-c", spec["updatedInput"]["command"].replace(
            ".coord/coord claim src/x.py", "echo $COORD_RUNTIME_ID")], env=env, stdout=subprocess.PIPE, text=True)
        self.assertEqual(got.stdout.strip(), rid)

    def test_other_commands_and_other_agents_are_left_alone(self):
        for data, harness in ((self.bash("ls -la", agent_id="sub-7"), "claude"),
                              (self.bash(".coord/coord claim x"), "claude"),
                              (self.bash(".coord/coord claim x", agent_id="sub-7"), "codex"),
                              (self.bash(["not", "a", "string"], agent_id="sub-7"), "claude")):
            out, _ = self.run_hook(data, harness=harness)
            self.assertEqual(out, "", data)


def _holder(db, how):
    """Start a process that holds the database the way `how` says; return it once it holds."""
    if how == "writer":  # BEGIN IMMEDIATE: writers wait; WAL readers still read
        script = ("import sqlite3,sys;c=sqlite3.connect(sys.argv[1],isolation_level=None);"
                  "c.execute('BEGIN IMMEDIATE');print('held',flush=True);sys.stdin.read()")
    else:  # an exclusive-locking-mode writer: nobody else can even read
        script = ("import sqlite3,sys;c=sqlite3.connect(sys.argv[1],isolation_level=None);"
                  "c.execute('PRAGMA locking_mode=EXCLUSIVE');c.execute('BEGIN EXCLUSIVE');"
                  "c.execute('CREATE TABLE IF NOT EXISTS coord_test_lock(x)');"
                  "print('held',flush=True);sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", script, db], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    line = proc.stdout.readline()
    if line.strip() != "held":
        proc.kill()
        proc.wait()
        raise AssertionError("lock holder did not start")
    return proc


class InstalledHookTest(support.CoordTestCase):
    """The hook commands exactly as the installer writes them, run by a shell."""

    SESSION = "0b5e6f0e-6c4e-4a43-9d87-5a1d1e7c0a11"

    def setUp(self):
        super().setUp()
        support.require_tool(self, "git")
        self.repo = os.path.join(self.tmp, "repo")
        subprocess.run(["git", "init", "-q", self.repo], check=True, env=self.env)
        self.env["CODEX_HOME"] = os.path.join(self.tmp, "codex-home")
        proc = subprocess.run(support.script_argv(os.path.join(support.ROOT, "install")) + [self.repo, "--project-id", "hooked"], env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for key in ("COORD_DB", "COORD_PROJECT_ID"):
            self.env.pop(key)
        self.db = os.path.join(self.state, "fleet-agent-coord", "hooked.sqlite3")
        os.makedirs(os.path.join(self.repo, "src"))
        self.held = os.path.join(self.repo, "src", "held.py")

    def payload(self, harness, event, path=None, **extra):
        p = {"session_id": self.SESSION if harness == "claude" else "01a22af1-31cf-7f50-a411-97b001022a84",
             "transcript_path": os.path.join(self.tmp, "transcript.jsonl"), "cwd": self.repo,
             "hook_event_name": event}
        if harness == "codex":
            p["turn_id"] = "01a22af1-31e6-7820-90fa-c089c2d29b7c"
        if event in ("PreToolUse", "PostToolUse"):
            rel = os.path.relpath(path, self.repo)
            if harness == "claude":
                p.update(tool_name="Write", tool_input={"file_path": path, "content": "x\n"},
                         tool_use_id="toolu_reliability")
            else:
                p.update(tool_name="apply_patch", tool_use_id="call_reliability",
                         tool_input={"command": "*** Begin Patch\n*** Add File: %s\n+x\n*** End Patch\n" % rel})
            if event == "PostToolUse":
                p["tool_response"] = {"type": "create", "filePath": path} if harness == "claude" else "Success"
        if event == "SessionStart":
            p["source"] = "startup"
        if event == "UserPromptSubmit":
            p["prompt"] = "go on"
        p.update(extra)
        return p

    def run_hook(self, harness, event, path=None):
        command, timeout = support.installed_hook(self.repo, harness, event)
        env = dict(self.env)
        if harness == "claude":
            env["CLAUDE_PROJECT_DIR"] = self.repo
        start = time.monotonic()
        proc = support.run_hook(command, self.payload(harness, event, path), env, self.repo, timeout=timeout + 30,
                                text=False)
        return proc, time.monotonic() - start, timeout

    def peer_holds(self, purpose="peer work"):
        st = store.Store(self.db)
        try:
            peer = st.register(harness="claude", pid=os.getpid())
            st.claim(peer["id"], ["src/held.py"], purpose=purpose)
            return peer
        finally:
            st.close()

    def assert_no_deny(self, proc):
        self.assertNotIn(b"deny", proc.stdout)
        self.assertNotIn(b'"block"', proc.stdout)

    def test_hooks_under_a_hung_writer_finish_within_their_bound_and_fail_open(self):
        peer = self.peer_holds()
        for harness in ("claude", "codex"):
            proc, _, _ = self.run_hook(harness, "SessionStart")
            self.assertEqual(proc.returncode, 0, proc.stderr)
        # Unlocked, the installed PreToolUse hook does deny: the checks below can fail.
        for harness in ("claude", "codex"):
            proc, _, _ = self.run_hook(harness, "PreToolUse", self.held)
            self.assertIn(b"deny", proc.stdout, (harness, proc.stdout, proc.stderr))
            self.assertIn(peer["handle"].encode(), proc.stdout)
        free = os.path.join(self.repo, "src", "free.py")
        for how in ("writer", "exclusive"):
            holder = _holder(self.db, how)
            try:
                for harness in ("claude", "codex"):
                    for event, path in (("PreToolUse", self.held), ("PreToolUse", free), ("PostToolUse", self.held),
                                        ("UserPromptSubmit", None)):
                        with self.subTest(lock=how, harness=harness, event=event, path=path):
                            proc, elapsed, bound = self.run_hook(harness, event, path)
                            self.assertEqual(proc.returncode, 0, proc.stderr)
                            self.assertLess(elapsed, bound, "%s %s took %.1fs under a %s lock (bound %ss)"
                                            % (harness, event, elapsed, how, bound))
                            if how == "writer" and path == self.held and event == "PreToolUse":
                                # WAL readers are not blocked by a writer: the check still knows.
                                self.assertIn(b"deny", proc.stdout)
                            else:
                                self.assert_no_deny(proc)
                            if how == "exclusive":
                                self.assertIn(b"allowed", proc.stderr, "fail open says so on stderr")
            finally:
                holder.stdin.close()
                holder.wait(timeout=10)
                holder.stdout.close()

    def test_escapes_in_bodies_and_purposes_never_reach_the_model(self):
        self.peer_holds(purpose="\x1b[31mred purpose\x1b[0m\x07")
        proc, _, _ = self.run_hook("claude", "SessionStart")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        st = store.Store(self.db)
        try:
            me = st.find_conversation_runtime(self.SESSION)
            sender = st.register(harness="codex")
            st.send(sender["id"], "look \x1b]0;pwned\x07 here \x1b[2J\x9b31m done\x07", to=me["handle"],
                    kind="note\x1b[5m")
        finally:
            st.close()
        seen = []
        for event, path in (("UserPromptSubmit", None), ("PostToolUse", self.held), ("SessionStart", None),
                            ("PreToolUse", self.held)):
            with self.subTest(event=event):
                proc, _, _ = self.run_hook("claude", event, path)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                for c in support.CONTROL:
                    self.assertNotIn(c, proc.stdout)
                    self.assertNotIn(c, proc.stderr)
                if proc.stdout.strip():
                    reply = json.loads(proc.stdout)
                    text = json.dumps(reply, ensure_ascii=False)
                    out = reply["hookSpecificOutput"]
                    shown = out.get("additionalContext") or out.get("permissionDecisionReason") or ""
                    for c in ("\x1b", "\x07", "\x9b"):
                        self.assertNotIn(c, shown, "decoded JSON carries a control character")
                    seen.append(text)
        joined = "\n".join(seen)
        self.assertIn("red purpose", joined)
        self.assertIn("here", joined, "the message body was delivered")


class LayoutTest(HookCase):

    def install(self):
        coord_dir = os.path.join(self.repo, ".coord")
        for name in ("hook.py", "store.py", "harness_facts.py"):
            shutil.copy(os.path.join(support.ROOT, name), coord_dir)
        with open(os.path.join(coord_dir, "project-id"), "w") as f:
            f.write("layout-test\n")
        return os.path.join(coord_dir, "hook.py")

    def test_installed_hook_uses_its_repository_and_project_database(self):
        script = self.install()
        env = {"COORD_DB": None, "COORD_PROJECT_ID": None}
        sub = os.path.join(self.repo, "src")
        self.run_hook(self.payload("codex-SessionStart", cwd=sub), harness="codex", env=env, cwd=sub, script=script)
        db = os.path.join(self.state, "fleet-agent-coord", "layout-test.sqlite3")
        st = store.Store(db)
        self.addCleanup(st.close)
        holder = st.register(harness="claude")
        st.claim(holder["id"], ["src/held.py"])
        text = "*** Begin Patch\n*** Add File: held.py\n+x\n*** End Patch\n"
        out, _ = self.run_hook(self.patch(text, cwd=sub), harness="codex", env=env, cwd=sub, script=script)
        self.assertIn("src/held.py", out)
        elsewhere = tempfile.mkdtemp(dir=self.tmp)
        data = self.payload("claude-PreToolUse-Write", cwd=elsewhere,
                            tool_input={"file_path": os.path.join(self.repo, "src", "held.py")})
        self.assertIn("deny", self.run_hook(data, env=env, cwd=elsewhere, script=script)[0])

    def test_the_runtime_copy_holds_everything_the_hook_imports(self):
        # The installed command imports only from the runtime copy (install.HOOK_RUNTIME): a
        # coord module the hook comes to import must be copied too, or it fails open everywhere.
        import ast
        installer = support.load_install()
        local = {n[:-3] for n in os.listdir(support.ROOT) if n.endswith(".py")} | {"coord", "install"}
        todo, seen = ["hook", "host"], set()  # host.py: SessionStart runs it from the copy (PostgreSQL)
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            with open(os.path.join(support.ROOT, name + ".py")) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
                todo.extend(n.split(".")[0] for n in names if n.split(".")[0] in local)
        self.assertEqual(sorted(m + ".py" for m in seen), sorted(installer.HOOK_RUNTIME))

    def test_imported_as_a_module_and_through_the_installer_command(self):
        script = self.install()
        env = dict(self.env, CLAUDE_PROJECT_DIR=self.repo)
        for key in ("COORD_DB", "COORD_PROJECT_ID"):
            env.pop(key)
        db = os.path.join(self.state, "fleet-agent-coord", "layout-test.sqlite3")
        st = store.Store(db)
        self.addCleanup(st.close)
        holder = st.register(harness="codex")
        st.claim(holder["id"], ["src/held.py"])
        data = json.dumps(self.write("src/held.py")).encode()
        module = "import sys,os;sys.path[0]=sys.argv[1];del sys.argv[1];import hook;os._exit(hook.main())"
        installer = support.load_install()
        support.install_hook_runtime(installer=installer)
        for argv in ([sys.executable, "-E", "-S", "-c", module, os.path.dirname(script), "--harness", "claude"],
                     ["sh", "-c", installer.hook_command("claude")]):
            with self.subTest(argv=argv[:3]):
                p = subprocess.run(argv, input=data, env=env, cwd=os.path.join(self.repo, "src"),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
                self.assertEqual((p.returncode, p.stderr), (0, b""))
                self.check_reply(p.stdout.decode())
                self.assertIn(holder["handle"], p.stdout.decode())

    def test_on_a_sqlite_project_the_installed_hook_loads_no_postgresql_module(self):
        # The installed command (the runtime copy, as a harness runs it) under `python3 -X importtime`:
        # on a SQLite project neither the PostgreSQL engine nor the host process's client loads.
        self.install()
        env = dict(self.env, CLAUDE_PROJECT_DIR=self.repo)
        for key in ("COORD_DB", "COORD_PROJECT_ID"):
            env.pop(key)
        installer = support.load_install()
        support.install_hook_runtime(installer=installer)
        python = os.path.join(self.tmp, "python-importtime")
        with open(python, "w") as f:
            f.write('#!/bin/sh\nexec "%s" -X importtime "$@"\n' % sys.executable)
        os.chmod(python, 0o755)
        env["COORD_PYTHON"] = python
        st = store.Store(os.path.join(self.state, "fleet-agent-coord", "layout-test.sqlite3"))
        self.addCleanup(st.close)
        st.claim(st.register(harness="codex")["id"], ["src/held.py"])
        for data in (self.payload("claude-SessionStart"), self.write("src/held.py"), self.write("src/free.py"),
                     self.payload("claude-PostToolUse-Write")):
            with self.subTest(event=data.get("hook_event_name")):
                p = subprocess.run(["sh", "-c", installer.hook_command("claude")], input=json.dumps(data).encode(),
                                   env=env, cwd=self.repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
                loaded = {line.split("|")[-1].strip() for line in p.stderr.decode().splitlines() if "|" in line}
                self.assertIn("hook", loaded, p.stderr.decode()[-2000:])
                self.assertIn("store", loaded)
                self.assertEqual(loaded & {"pg", "hostclient"}, set())

    def test_repo_root_override(self):
        self.peer("src/app.py")
        elsewhere = tempfile.mkdtemp(dir=self.tmp)
        data = self.payload("claude-PreToolUse-Write", cwd=elsewhere,
                            tool_input={"file_path": os.path.join(self.repo, "src", "app.py")})
        self.assertIsNone(self.denial(data, cwd=elsewhere), "no repository above the cwd: not coordinated")
        self.assertIsNotNone(self.denial(data, cwd=elsewhere, env={"COORD_REPO_ROOT": self.repo}))

    def test_hot_path_imports_only_what_it_needs(self):
        self.start()
        self.peer("src/other.py")
        idle = self.payload("claude-PostToolUse-Write")
        self.run_hook(idle)  # the first PostToolUse after SessionStart records the turn busy (a write)
        # a write check (a deny included) writes nothing: it loads neither json nor re; nor does an
        # event that writes (a registration, a turn, the audit) or replies with context
        fresh = self.payload("claude-SessionStart", session_id=str(uuid.uuid4()))
        patch = self.payload("codex-PreToolUse-apply_patch", cwd=self.repo)  # Codex's write: the patch is parsed
        for harness, data in [("claude", d) for d in (
                self.write("src/app.py"), self.write("src/other.py"), idle, fresh, self.payload("claude-SessionStart"),
                self.payload("claude-UserPromptSubmit"), self.payload("claude-Stop"),
                self.payload("claude-SessionEnd"))] + [("codex", patch)]:
            p = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", HOOK, "--harness", harness],
                               input=json.dumps(data).encode(), env=self.env, cwd=self.repo,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
            loaded = {line.split("|")[-1].strip() for line in p.stderr.decode().splitlines() if "|" in line}
            self.assertIn("store", loaded)
            # json (and re, which it loads) cost a few ms, the sqlite3 package datetime: the payload is
            # read by json's C scanner, the database opened through _sqlite3 (hook.read_json, store.py)
            for heavy in ("subprocess", "argparse", "hashlib", "workspace", "session", "traceback", "tempfile",
                          "sqlite3", "datetime", "pg", "hostclient", "json", "re"):
                self.assertNotIn(heavy, loaded)

    def test_the_json_writer_writes_what_json_dumps_writes(self):
        # replies and audit rows: store.json_text, json's C encoder without importing json
        rng = random.Random(11)

        def text(top):
            return "".join(chr(rng.randrange(top)) for _ in range(rng.randint(0, 6)))

        def value(depth=0):
            kinds = (lambda: text(0x110000), lambda: text(0x80), lambda: rng.randint(-2 ** 70, 2 ** 70),
                     lambda: rng.random() * 10 ** rng.randint(-5, 20), lambda: rng.choice((None, True, False)),
                     lambda: rng.choice((float("nan"), float("inf"), -0.0)),
                     lambda: {"hookSpecificOutput": {"additionalContext": text(0x110000)}},
                     lambda: [value(depth + 1) for _ in range(rng.randint(0, 3))],
                     lambda: {text(0x3000): value(depth + 1) for _ in range(rng.randint(0, 3))})
            return kinds[rng.randrange(len(kinds) if depth < 3 else 7)]()
        for _ in range(3000):
            v = value()
            for sort, compact in ((False, False), (True, True)):
                self.assertEqual(store.json_text(v, sort=sort, compact=compact),
                                 json.dumps(v, sort_keys=sort, separators=(",", ":") if compact else None))
        for v in ({"a": [1, None]}, {"a": 1.5}, {1: "x"}, "\ud800", {}, (1, 2), {"b": 1, "a": {"d": 2, "c": 3}}):
            self.assertEqual(store.json_text(v), json.dumps(v))
            self.assertEqual(store.json_text(v, sort=True, compact=True),
                             json.dumps(v, sort_keys=True, separators=(",", ":")))
        cycle = []
        cycle.append(cycle)
        for bad in ({1: "x", "a": 2}, {"a": object()}, cycle):
            with self.assertRaises((TypeError, ValueError)) as caught:
                store.json_text(bad, sort=True)
            with self.assertRaises(type(caught.exception)):
                json.dumps(bad, sort_keys=True)

    def test_the_payload_reader_gives_json_s_value_or_json_s_error(self):
        import hook
        samples = [f for f in sorted(os.listdir(PAYLOADS)) if f.endswith(".json")]
        raws = []
        for name in samples:
            with open(os.path.join(PAYLOADS, name), "rb") as f:
                raws.append(f.read())
        raws += [b"", b"  \n", b"{", b'{"a": 1} x', b'{"a": 1}\n\n', b"\xef\xbb\xbf{}", b'{"a": "\xff"}',
                 b'"\xed\xa0\x80"', b'[NaN, Infinity, -Infinity, 1e999, 12345678901234567890]', b"[" * 100000,
                 '{"a": "\u00e9"}'.encode("utf-16"), b'{"a": "\\ud800"}', b"\x00{}", b"nul"]
        rng = random.Random(7)
        for raw in raws[:20]:
            cut = bytearray(raw)
            for _ in range(3):
                if cut:
                    cut[rng.randrange(len(cut))] = rng.randrange(256)
            raws.append(bytes(cut))

        def outcome(read, raw):
            try:
                return "value", repr(read(raw))
            except (ValueError, RecursionError) as exc:
                return "error", type(exc).__name__, str(exc)
        for raw in raws:
            with self.subTest(raw=raw[:40]):
                self.assertEqual(outcome(hook.read_json, raw), outcome(json.loads, raw))


class GarbageTest(HookCase):
    """Random and malformed payloads: always exit 0, never a traceback, never a baseless deny."""

    def setUp(self):
        super().setUp()
        self.me = self.start()
        self.peer("locked.txt", purpose="garbage target")
        self.rng = random.Random(20261130)

    def junk_value(self, depth=0):
        r = self.rng.random()
        if depth > 2 or r < 0.3:
            return self.rng.choice([None, True, 0, -1, 2 ** 70, 1.5, float("inf"), "", " ", "\x00", "\udc80",
                                    "../../etc/passwd", "/", "locked.txt", "*** Begin Patch", "a" * 5000,
                                    os.path.join(self.repo, "locked.txt"), "PreToolUse", "\u202e"])
        if r < 0.6:
            return [self.junk_value(depth + 1) for _ in range(self.rng.randint(0, 3))]
        return {self.rng.choice(["file_path", "command", "x", "notebook_path", ""]): self.junk_value(depth + 1)
                for _ in range(self.rng.randint(0, 3))}

    def cases(self, n):
        samples = [self.payload(f[:-5]) for f in sorted(os.listdir(PAYLOADS)) if f.endswith(".json")]
        samples += [self.payload(QWEN + f[5:-5]) for f in sorted(os.listdir(os.path.join(PAYLOADS, "qwen")))]
        for i in range(n):
            kind = i % 4
            if kind == 0:
                yield bytes(self.rng.getrandbits(8) for _ in range(self.rng.randint(0, 300)))
                continue
            data = dict(self.rng.choice(samples))
            data["session_id"] = CLAUDE_MAIN
            if kind == 1:
                for key in self.rng.sample(sorted(data), self.rng.randint(1, 3)):
                    data[key] = self.junk_value()
            elif kind == 2:
                data["tool_input"] = self.junk_value()
                data["hook_event_name"] = self.rng.choice(["PreToolUse", "PostToolUse", "SessionStart", "Bogus"])
                data["tool_name"] = self.rng.choice(["Write", "Edit", "NotebookEdit", "apply_patch", "Bash", 3])
            raw = json.dumps(data).encode()
            if kind == 3:
                cut = self.rng.randint(0, len(raw))
                raw = raw[:cut] + bytes(self.rng.getrandbits(8) for _ in range(self.rng.randint(0, 8))) + raw[cut:]
            yield raw

    def mentions_target(self, raw):
        return b"locked.txt" in raw

    def test_in_process_garbage_loop(self):
        count = 0
        for raw in self.cases(2000):
            out, err = hook.run(raw, ["--harness", "claude"])
            count += 1
            self.assertLessEqual(len(err.splitlines()), 1, err)
            self.assertNotIn("internal error", err, "an unexpected exception on %r" % raw[:200])
            if out:
                reply = self.check_reply(out)
                if "permissionDecision" in reply["hookSpecificOutput"]:
                    self.assertTrue(self.mentions_target(raw), "deny without a real conflict: %r" % raw[:300])
        self.assertEqual(count, 2000)
        self.assertFalse(os.path.exists(os.path.join(self.state, "fleet-agent-coord", "errors.log")))

    def test_subprocess_garbage(self):
        for raw in list(self.cases(40)) + [os.urandom(2 << 20), b"{" * 50000 + b"}" * 50000]:
            out, _ = self.run_hook(raw)
            if "permissionDecision" in out:
                self.assertTrue(self.mentions_target(raw))


class LivenessTest(HookCase):
    """Issue 15: an idle agent past COORD_RUNTIME_TTL keeps its identity and leases while its
    harness process lives; a peer taking a lapsed lease is told to the holder once."""

    TTL = {"COORD_RUNTIME_TTL": "60", "COORD_LEASE_TTL": "60"}

    def idle(self, seconds):
        """As if nothing had happened for `seconds`: every heartbeat and lease that much older."""
        with self.st.transaction():
            self.st.conn.execute("UPDATE runtimes SET heartbeat_at = heartbeat_at - ?", (seconds,))
            self.st.conn.execute("UPDATE leases SET expires_at = expires_at - ?, acquired_at = acquired_at - ?",
                                 (seconds, seconds))

    def prompt(self, **kw):
        return self.context(self.payload("claude-UserPromptSubmit", session_id=CLAUDE_MAIN), env=self.TTL, **kw)

    def test_idle_past_the_ttls_keeps_the_claim_while_the_process_lives(self):
        harness = FakeHarness(self)
        me = self.start(via=harness, env=self.TTL)
        self.assertEqual(me["pid"], harness.pid)
        self.coord("claim", "src/keep.py", runtime=me["id"], env=self.TTL, cwd=self.repo, check=0)
        self.idle(300)
        self.prompt(via=harness)
        self.assertEqual(self.st.find_conversation_runtime(CLAUDE_MAIN)["id"], me["id"])
        self.assertIsNone(self.st.runtime(me["id"])["ended_at"])
        lease = self.st.leases_of(me["id"])
        self.assertEqual([l["resource"] for l in lease], ["src/keep.py"])
        self.assertGreater(lease[0]["expires_at"], store.time.time())
        self.assertIsNotNone(self.denial(self.write("src/keep.py", session="another-session"), env=self.TTL))
        self.assertIsNone(self.denial(self.write("src/keep.py"), via=harness, env=self.TTL))
        harness.close()  # the process is gone: now the runtime ends and the claim with it
        self.prompt()
        self.assertEqual(self.st.runtime(me["id"])["end_reason"], "process-gone")
        self.assertEqual(self.st.leases_of(me["id"]), [])
        self.assertIsNone(self.denial(self.write("src/keep.py", session="another-session"), env=self.TTL))

    def test_a_lapsed_lease_a_peer_took_is_reported_once(self):
        harness = FakeHarness(self)
        me = self.start(via=harness, env=self.TTL)
        self.st.claim(me["id"], ["src/keep.py"], ttl=60)
        self.idle(300)
        peer = self.peer("src/keep.py")
        text = self.prompt(via=harness)
        self.assertIsNotNone(text)
        lines = [l for l in text.splitlines() if "lease lost" in l]
        self.assertEqual(len(lines), 1, text)
        self.assertIn("src/keep.py to %s" % peer["handle"], lines[0])
        self.assertIn("send", lines[0])
        self.assertEqual(self.st.leases_of(me["id"]), [])
        self.idle(60)
        again = self.prompt(via=harness) or ""
        self.assertNotIn("lease lost", again)


class GeminiProcessTest(HookCase):
    """Gemini CLI's process is node running .../bundle/gemini.js (npm's bin links to it; with its
    default relaunch, a second node running the same script is the one that runs tools and
    hooks): recognised as the harness by that script, and what runs under it is an agent."""

    def fake_gemini(self):
        bundle = os.path.join(self.tmp, "gemini-cli", "bundle")
        os.makedirs(bundle)
        node = os.path.join(self.tmp, "bin", "node")
        os.makedirs(os.path.dirname(node))
        shutil.copy(os.path.realpath(sys.executable), node)
        script = os.path.join(bundle, "gemini.js")
        with open(script, "w") as f:
            f.write(support._HARNESS_DRIVER)
        harness = FakeHarness(self)
        harness.close()
        harness.proc = subprocess.Popen([node, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        harness.pid = harness.proc.pid
        def started():
            with open("/proc/%d/cmdline" % harness.pid, "rb") as f:
                return f.read().split(b"\0")[1:2] == [script.encode()]
        support.retry_until(started, timeout=10)
        return harness

    def test_recognised_by_its_script_never_a_person_and_its_shell_is_its_runtime(self):
        if not os.path.isdir("/proc"):
            self.skipTest("needs /proc")
        harness = self.fake_gemini()
        self.assertEqual(store.harness_of_process(harness.pid), "gemini")
        env = {k: v for k, v in self.env.items() if not k.startswith(("CODEX_", "CLAUDE_", "COORD_RUNTIME"))}
        rc, out, err = harness.run([sys.executable, support.COORD, "claim", "src/a.py", "--json"], "", env, self.repo)
        self.assertEqual(rc, 3, out + err)
        self.assertIn("not a person: gemini", out + err)
        through(harness, ("bash", "-c"))  # Gemini runs a hook as `bash -c COMMAND`
        self.run_hook(self.payload("gemini-SessionStart"), harness="gemini", via=harness)
        rt = self.st.find_conversation_runtime(GEMINI_MAIN)
        self.assertEqual((rt["harness"], rt["pid"]), ("gemini", harness.pid))
        # its shell tool sets GEMINI_CLI=1 and no session variable: the process ancestry names it
        rc, out, err = harness.run([sys.executable, support.COORD, "claim", "src/a.py", "--json"], "",
                                   dict(env, GEMINI_CLI="1"), self.repo)
        self.assertEqual(rc, 0, out + err)
        self.assertEqual([l["resource"] for l in self.st.leases_of(rt["id"])], ["src/a.py"])


class ToolMatcherTest(HookCase):
    """The hook checks exactly the tools the installer's PreToolUse matchers send it. Claude Code
    compares a matcher of letters, digits, `_` and `|` name by name, and has no MultiEdit tool."""

    def test_checked_tools_are_the_matched_tools(self):
        installer = support.load_install()
        matched = set()
        for harness in ("claude", "codex"):
            for event, group in installer.desired_groups(harness):
                if event == "PreToolUse":
                    matched.update(group["matcher"].split("|"))
        checked = set(hook.WRITES["claude"]) | set(hook.WRITES["codex"]) | set(hook.SHELL_TOOLS)
        self.assertEqual(checked, matched)

    def test_gemini_matches_exactly_its_file_tools(self):
        # Gemini tests its matcher as an unanchored JavaScript RegExp against the tool name.
        import re
        installer = support.load_install()
        matcher = dict(installer.desired_groups("gemini"))["BeforeTool"]["matcher"]
        files = set(name for name, as_ in hook.GEMINI_TOOLS.items() if as_ in hook.WRITES[hook.GEMINI])
        self.assertEqual(files, {"write_file", "replace"})
        for name in sorted(files) + ["run_shell_command", "read_file", "mcp_x_replace", "write_file_2"]:
            self.assertEqual(bool(re.search(matcher, name)), name in files, name)


@support.slow
class WorkContextTest(HookCase):
    """SessionStart in a real managed clone (made by `coord work create`) names the work, its
    task and owner, and the rules for finishing, within CLONE_START_BYTES; elsewhere nothing
    of it, within START_BYTES."""

    def setUp(self):
        super().setUp()
        scratch = self.use_jj()
        self.canon = os.path.join(self.tmp, "canon")
        for argv, cwd in ((["jj", "git", "init", "--colocate", self.canon], self.tmp),
                          (["jj", "commit", "-m", "initial"], self.canon),
                          (["jj", "bookmark", "create", "main", "-r", "@-"], self.canon)):
            subprocess.run(argv, cwd=cwd, env=self.env, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=120)
        self.owner = self.hello()
        self.task = "t" * 48  # the longest task name

    def create(self):
        out = self.coord("work", "create", self.task, runtime=self.owner["runtime"]["id"], cwd=self.canon, check=0)
        handle, path = out.stdout.splitlines()[:2]
        return handle, path

    def start_in(self, path, session=CLAUDE_MAIN):
        return self.context(self.payload("claude-SessionStart", session_id=session, cwd=path), cwd=path)

    def test_in_a_clone_the_agent_learns_its_work_owner_and_how_to_finish(self):
        handle, path = self.create()
        ctx = self.start_in(path)
        owner = self.owner["runtime"]["handle"]
        self.assertIn("Your work: %s (task %s)" % (handle, self.task), ctx)
        self.assertIn("report to %s" % owner, ctx)
        self.assertIn('send "done: <summary>" --to %s' % owner, ctx)
        for rule in ("jj describe -m", "jj new", "jj commit -m", "Never git commit", "never push",
                     "never move main or other shared bookmarks"):
            self.assertIn(rule, ctx)
        self.assertLessEqual(len(ctx.encode()), hook.CLONE_START_BYTES)
        outside = self.start_in(self.canon, session=CODEX_MAIN)
        self.assertNotIn("Your work", outside)
        self.assertLessEqual(len(outside.encode()), hook.START_BYTES)

    def test_the_bound_holds_with_own_and_peer_leases(self):
        handle, path = self.create()
        for i in range(6):
            peer = self.hello()["runtime"]
            self.coord("claim", *["src/pkg%d/%s_%02d.py" % (i, "m" * 40, j) for j in range(4)],
                       runtime=peer["id"], check=0)
        me = self.hello()["runtime"]
        self.coord("claim", *["docs/%s_%d.md" % ("d" * 50, j) for j in range(5)], runtime=me["id"], check=0)
        ctx = self.start_in(path, session=me["conversation"])
        self.assertIn("Your work: %s" % handle, ctx)
        # Both counts, in one line or two, whichever the handles' lengths leave room for (random
        # handles: a test that asked for the one-line form failed 1 run in 6).
        self.assertTrue("Leases: 5 yours, 24 " in ctx or
                        ("\nYour leases: 5 (" in ctx and "\nPeers hold 24 exclusively" in ctx), ctx)
        self.assertLessEqual(len(ctx.encode()), hook.CLONE_START_BYTES, ctx)

    def test_a_copied_clone_or_a_foreign_marker_is_no_work(self):
        handle, path = self.create()
        copy = os.path.join(self.tmp, "copy")
        shutil.copytree(path, copy, symlinks=True)
        self.assertNotIn("Your work", self.start_in(copy))
        marker = os.path.join(path, ".jj", "coord-owner")
        with open(marker) as f:
            data = json.load(f)
        with open(marker, "w") as f:
            json.dump(dict(data, token="0" * 64), f)
        self.assertNotIn("Your work", self.start_in(path, session=CODEX_MAIN))

    def test_no_peer_header_without_an_entry(self):
        # In a clone the work lines leave room for the header and a count line, not for one
        # peer entry with a long name: the peers' leases are counted in one line, no header.
        self.task = "encoding-errors-here"  # 20 characters: with any handles the header fits, the entry does not
        handle, path = self.create()
        peer = self.hello()["runtime"]
        name = "src/%s.py" % ("n" * 53)  # 60 characters, the most an entry shows
        self.coord("claim", name, runtime=peer["id"], check=0)
        me = self.hello()["runtime"]
        ctx = self.start_in(path, session=me["conversation"])
        self.assertIn("Your work: %s" % handle, ctx)
        self.assertLessEqual(len(ctx.encode()), hook.CLONE_START_BYTES, ctx)
        self.assertNotIn("Held exclusively by peers", ctx, "a header over no entry")
        self.assertTrue(ctx.endswith("\nPeers hold 1 exclusively (ask before editing): .coord/coord list"), ctx)


if __name__ == "__main__":
    import unittest
    unittest.main()


class WorkLinkCwdTest(HookCase):
    """A session proves it is a work's launched harness by its process and its directory: a
    session started elsewhere whose hooks inherited the work's COORD_WORK_ID and pane (a
    harness process shared by several sessions) is not linked to that work."""

    def work(self, pane_pid, path):
        os.makedirs(path, exist_ok=True)
        with self.st.transaction():
            return self.st.insert_work("task", "active", "secret-token", path=os.path.realpath(path),
                                       data={"tmux": {"pane_pid": pane_pid, "window_id": "@1"}})

    def test_only_a_session_inside_the_clone_links_itself(self):
        harness = FakeHarness(self)
        clone = os.path.join(self.tmp, "scratch", "first.1234")
        other = os.path.join(self.tmp, "scratch", "second.5678")
        os.makedirs(other)
        w = self.work(harness.pid, clone)
        self.run_hook(self.payload("codex-SessionStart", session_id="conv-second", cwd=other), harness="codex",
                      env={"COORD_WORK_ID": w["id"]}, via=harness)
        self.assertIsNotNone(self.st.find_conversation_runtime("conv-second"), "the session still registers")
        self.assertNotIn("conversation", self.st.work(w["id"])["data"]["tmux"])
        self.run_hook(self.payload("codex-SessionStart", session_id="conv-first", cwd=os.path.join(clone)),
                      harness="codex", env={"COORD_WORK_ID": w["id"]}, via=harness)
        self.assertEqual(self.st.work(w["id"])["data"]["tmux"]["conversation"], "conv-first")


# --------------------------------------------------------------------------- Qwen Code

class PiTest(HookCase):
    """pi (0.73.1) through coord's extension, which sends Claude-shaped payloads with pi's own tool
    names and arguments: write {path, content}, edit {path, edits}; paths relative to its cwd."""

    def test_write_and_edit_of_a_peers_lease_are_denied_by_path(self):
        holder = self.peer("src/a.py")
        for tool_name, tool_input in (("write", {"path": "src/a.py", "content": "x\n"}),
                                      ("edit", {"path": "src/a.py", "edits": [{"oldText": "a", "newText": "b"}]})):
            with self.subTest(tool=tool_name):
                data = self.payload("claude-PreToolUse-Write", tool_name=tool_name, tool_input=tool_input)
                self.assertIn("--to %s" % holder["handle"], self.denial(data, harness="pi") or "")
        free = self.payload("claude-PreToolUse-Write", tool_name="write", tool_input={"path": "src/b.py", "content": ""})
        self.assertIsNone(self.denial(free, harness="pi"))


AUGGIE = os.path.join("auggie", "auggie-")                # the recorded samples: payloads/auggie/
AUGGIE_MAIN = "3adf5b30-009b-4625-abdd-fcc7485ff4d8"      # every auggie-* sample


class AuggieTest(HookCase):
    """Auggie (0.36.0) runs `.augment/settings.json` hooks with its own payload fields (recorded
    auggie-* samples, --harness auggie): conversation_id for the session, workspace_roots for the
    directory, PromptSubmit for the prompt. Only PostToolUse's context reaches its model."""

    def auggie(self, name, **changes):
        return self.run_hook(self.payload(AUGGIE + name, **changes), harness="auggie")

    def test_it_registers_from_its_own_fields_and_hears_who_it_is_at_its_first_tool_result(self):
        self.auggie("SessionStart")
        rt = self.st.find_conversation_runtime(AUGGIE_MAIN)
        self.assertEqual((rt["harness"], rt["cwd"]), ("auggie", self.repo))
        self.assertEqual(self.auggie("PromptSubmit")[0], "", "it would print it to the person")
        self.assertEqual(self.st.turn(rt["id"])["state"], "busy")
        first = json.loads(self.auggie("PostToolUse-view")[0])["hookSpecificOutput"]["additionalContext"]
        self.assertIn("coord: you are %s" % rt["handle"], first)
        self.assertNotIn("coord: you are", self.auggie("PostToolUse-view")[0], "only the first")
        self.auggie("Stop")
        self.assertEqual(self.st.turn(rt["id"])["state"], "idle")

    def test_every_write_tool_of_a_peers_lease_is_denied(self):
        self.auggie("SessionStart")
        held = {"str-replace-editor": "src/a.py", "save-file": "src/new.py", "apply_patch": "src/p.py",
                "remove-files": "src/gone.py"}
        holder = self.peer(*held.values())
        for tool_name, path in held.items():
            with self.subTest(tool=tool_name):
                reason = self.denial(self.payload(AUGGIE + "PreToolUse-" + tool_name), harness="auggie")
                self.assertIn(path, reason or "")
                self.assertIn("--to %s" % holder["handle"], reason)
        self.st.release(holder["id"], list(held.values()))
        for tool_name in held:
            self.assertIsNone(self.denial(self.payload(AUGGIE + "PreToolUse-" + tool_name), harness="auggie"))


DROID = os.path.join("droid", "droid-")                   # the recorded samples: payloads/droid/
DROID_MAIN = "2c1056ec-63ba-4844-9500-d24ca0981600"       # every droid-* sample


class DroidTest(HookCase):
    """Factory Droid (0.225.2) runs `.factory/hooks.json` hooks with Claude's snake_case payloads
    and reply shapes under its own tool names (recorded droid-* samples, --harness droid):
    Create and Edit {file_path}, ApplyPatch {input: PATCH}, paths relative to the payload's cwd."""

    def droid(self, name, **changes):
        return self.run_hook(self.payload(DROID + name, **changes), harness="droid")

    def test_it_registers_as_droid_and_hears_who_it_is(self):
        out, _ = self.droid("SessionStart")
        rt = self.st.find_conversation_runtime(DROID_MAIN)
        self.assertEqual(rt["harness"], "droid")
        self.assertIn("coord: you are %s" % rt["handle"], json.loads(out)["hookSpecificOutput"]["additionalContext"])
        for name in ("UserPromptSubmit", "PostToolUse-Create", "Stop"):
            self.droid(name)
        self.assertEqual(self.st.turn(rt["id"])["state"], "idle")

    def test_create_edit_and_every_path_of_a_patch_of_a_peers_lease_are_denied(self):
        self.droid("SessionStart")
        held = {"PreToolUse-Create": "b.txt", "PreToolUse-Edit": "a.txt", "PreToolUse-ApplyPatch": "src/free.py"}
        holder = self.peer(*held.values())
        for name, path in held.items():
            with self.subTest(sample=name):
                reason = self.denial(self.payload(DROID + name), harness="droid")
                self.assertIn("--to %s" % holder["handle"], reason or "")
                self.assertIn(path, reason)
        self.st.release(holder["id"], list(held.values()))
        for name in ("PreToolUse-Create", "PreToolUse-Edit", "PreToolUse-ApplyPatch"):
            self.assertIsNone(self.denial(self.payload(DROID + name), harness="droid"), name)

    def test_a_task_subagents_session_is_keyed_under_its_caller_until_it_ends(self):
        # its SessionStart names the caller; its later events carry only its own session_id
        self.droid("SessionStart")
        self.droid("SessionStart-subagent")
        sub = "90fb2588-d8d0-4674-9c14-a0a815f2c967"
        rid = store.subagent_uuid(DROID_MAIN, sub)
        self.assertIsNotNone(self.st.runtime(rid))
        self.assertIsNone(self.st.find_conversation_runtime(sub))
        holder = self.peer("b.txt")
        self.assertIn(holder["handle"], self.denial(self.payload(DROID + "PreToolUse-Create", session_id=sub),
                                                    harness="droid"))
        self.droid("SessionEnd", session_id=sub)
        self.assertIsNotNone(self.st.runtime(rid)["ended_at"])
        self.assertIsNotNone(self.st.find_conversation_runtime(DROID_MAIN)["id"])
        self.droid("SessionStart", session_id=sub)  # the link went with it: a new session of that ID is its own
        self.assertIsNotNone(self.st.find_conversation_runtime(sub))


QWEN = os.path.join("qwen", "qwen-")                      # the recorded samples: payloads/qwen/
QWEN_MAIN = "af143507-e6a2-4d49-b5c6-e715c8aebda3"       # every qwen-* sample
QWEN_AGENT = "general-purpose-call_0014e2e0e2e0e2e0e2e0"  # its agent-tool subagent


class QwenTest(HookCase):
    """Qwen Code (0.24.4) runs `.qwen/settings.json` hooks with Claude's payload and reply
    shapes under its own tool ids (recorded qwen-* samples, --harness qwen): every write tool
    is checked by its own path field, its shell stays advisory, its UserPromptSubmit before
    each later model request of a turn delivers without beginning a turn."""

    def qwen(self, name, via=None, **changes):
        return self.run_hook(self.payload(QWEN + name, **changes), harness="qwen", via=via)

    def samples(self):
        return sorted(f[5:-5] for f in os.listdir(os.path.join(PAYLOADS, "qwen")) if f.endswith(".json"))

    def test_every_sample_has_its_effect(self):
        names = self.samples()
        self.assertEqual(len(names), 18, names)
        for name in names:
            with self.subTest(sample=name):
                self.reset_project()
                data = self.payload(QWEN + name)
                out, err = self.run_hook(data, harness="qwen")
                self.assertEqual(err, "")
                if name.startswith("PreToolUse"):
                    self.assertEqual(out, "")
                    self.assertFalse(os.path.exists(self.db), "PreToolUse created the database")
                    continue
                agent = data.get("agent_id")
                if name.startswith("SessionStart"):
                    rt = self.st.find_conversation_runtime(QWEN_MAIN)
                    self.assertEqual((rt["harness"], rt["pid"]), ("qwen", os.getpid()))
                    self.assertIn("you are %s" % rt["handle"], context_of(out))
                    continue
                self.assertEqual(out, "")
                if name == "SubagentStop":
                    self.assertEqual(self.st.live_runtimes(), [])
                elif agent is None:
                    self.assertIsNone(self.st.find_conversation_runtime(QWEN_MAIN)["agent_id"])
                else:
                    rt = self.st.find_conversation_runtime(QWEN_MAIN, agent_id=agent)
                    self.assertEqual((rt["id"], rt["harness"]), (store.subagent_uuid(QWEN_MAIN, agent), "qwen"))

    def test_every_write_tool_of_a_peers_lease_is_denied_and_the_shell_is_not(self):
        self.qwen("SessionStart-startup")
        holder = self.peer("src/a.py", "src/new.py", "src/n.ipynb", "src/sub.py")
        for name, path in (("PreToolUse-edit", "src/a.py"), ("PreToolUse-write_file", "src/new.py"),
                           ("PreToolUse-notebook_edit", "src/n.ipynb"),
                           ("PreToolUse-write_file-in-subagent", "src/sub.py")):
            with self.subTest(sample=name):
                out, _ = self.qwen(name)
                spec = json.loads(out)["hookSpecificOutput"]  # the deny Qwen honours: its reason is the tool result
                self.assertEqual(spec["permissionDecision"], "deny")
                self.assertIn(path, spec["permissionDecisionReason"])
                self.assertIn(".coord/coord send \"<what you need>\" --to %s" % holder["handle"],
                              spec["permissionDecisionReason"])
        self.assertEqual(self.qwen("PreToolUse-run_shell_command", tool_input={"command": "echo x > src/a.py"})[0],
                         "", "its shell stays advisory")
        self.assertEqual(self.qwen("PreToolUse-agent")[0], "")

    def test_a_continuation_delivers_and_does_not_begin_a_turn(self):
        self.qwen("SessionStart-startup")
        me = self.st.find_conversation_runtime(QWEN_MAIN)
        self.qwen("UserPromptSubmit")
        began = self.st.turn(me["id"])["began"]
        self.assertIsNotNone(began)
        self.qwen("Stop")
        self.assertEqual(self.st.turn(me["id"])["state"], "idle")
        sender = self.peer()
        msg = self.st.send(sender["id"], "BODY-continuation", to=me["handle"])
        time.sleep(1.1)  # turn marks are whole seconds: a new turn would show a later `began`
        out, _ = self.qwen("UserPromptSubmit-continuation")
        self.assertIn("BODY-continuation", context_of(out))
        self.assertEqual(self.st.q("SELECT state FROM deliveries WHERE message = ?", (msg["id"],)).fetchone()[0],
                         "delivered")
        turn = self.st.turn(me["id"])
        self.assertEqual((turn["state"], turn["began"]), ("busy", began), "the prompt's turn goes on")
        self.qwen("UserPromptSubmit", prompt="next", submitted_prompt="next")
        self.assertNotEqual(self.st.turn(me["id"])["began"], began, "a person's prompt begins a turn")

    def test_a_command_from_qwens_shell_is_its_runtime_or_its_subagents(self):
        # Qwen's shell carries QWEN_CODE_SESSION_ID (its hooks' session_id) and, in a subagent,
        # QWEN_CODE_AGENT_ID (its hooks' agent_id); the harness here is another process.
        harness = FakeHarness(self)
        self.qwen("SessionStart-startup", via=harness)
        self.qwen("SubagentStart", via=harness)
        me = self.st.find_conversation_runtime(QWEN_MAIN)
        sub = self.st.find_conversation_runtime(QWEN_MAIN, agent_id=QWEN_AGENT)
        for env, rt, path in (({"QWEN_CODE_SESSION_ID": QWEN_MAIN, "QWEN_CODE_AGENT_ID": ""}, me, "src/c.py"),
                              ({"QWEN_CODE_SESSION_ID": QWEN_MAIN, "QWEN_CODE_AGENT_ID": QWEN_AGENT}, sub, "src/d.py")):
            self.coord("claim", path, env=env, check=0)
            self.assertEqual([l["resource"] for l in self.st.leases_of(rt["id"])], [path])

    def test_qwens_node_process_is_the_harness(self):
        if not os.path.isdir("/proc"):
            self.skipTest("needs /proc")
        # npm's qwen is node running .../@qwen-code/qwen-code/cli.js (0.24.4 relaunches itself
        # once: the hooks' parent is the inner node process)
        cli = os.path.join(self.tmp, "node_modules", "@qwen-code", "qwen-code", "cli.js")
        os.makedirs(os.path.dirname(cli))
        with open(cli, "w") as f:
            f.write(support._HARNESS_DRIVER)
        node = os.path.join(self.tmp, "bin", "node")
        os.makedirs(os.path.dirname(node))
        os.symlink(os.path.realpath(sys.executable), node)
        harness = FakeHarness(self)
        harness.close()
        harness.proc = subprocess.Popen([node, cli], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        harness.pid = harness.proc.pid
        support.retry_until(lambda: store.harness_of_process(harness.pid) == "qwen", timeout=10)
        through(harness, ("/bin/bash", "-c"))
        self.qwen("SessionStart-startup", via=harness)
        rt = self.st.find_conversation_runtime(QWEN_MAIN)
        self.assertEqual((rt["harness"], rt["pid"]), ("qwen", harness.pid))

    def test_checked_tools_are_the_matched_tools(self):
        installer = support.load_install()
        group = dict(installer.desired_groups("qwen"))["PreToolUse"]
        self.assertTrue(group["matcher"].startswith("^(") and group["matcher"].endswith(")$"), "anchored")
        self.assertEqual(set(group["matcher"][2:-2].split("|")), set(hook.WRITES[hook.QWEN]))


# --------------------------------------------------------------------------- every write shape

class WriteArgumentSweepTest(HookCase):
    """Every harness's write tools, in every shape of argument a model can send: the call is
    denied when the path the harness writes, or any path the call names (a decoy `file_path`,
    `path`, `filePath` or `notebook_path` beside it, a list, a nested edit), overlaps a peer's
    exclusive lease, written relative, absolute, through `..` or through a symlink; it is allowed
    when none does. Run in process (hook.run), one real SQLite database, so each shape is cheap."""

    LEASED, FREE = "src/leased.py", "src/free.py"
    DECOYS = ("file_path", "path", "filePath", "notebook_path")
    # (harness as recorded, --harness, environment, sample, tool as the hook receives it, argument)
    # where the argument is the one the harness writes; None: the whole input is a patch.
    TOOLS = (("claude", "claude", {}, "claude-PreToolUse-Write", "Write", "file_path"),
             ("claude", "claude", {}, "claude-PreToolUse-Write", "Edit", "file_path"),
             ("claude", "claude", {}, "claude-PreToolUse-Write", "NotebookEdit", "notebook_path"),
             ("copilot", "claude", COPILOT_ENV, "copilot-PreToolUse-Write", "Write", "path"),
             ("copilot", "claude", COPILOT_ENV, "copilot-PreToolUse-Write", "Edit", "path"),
             ("copilot", "claude", COPILOT_ENV, "copilot-PreToolUse-Write", "Edit", None),
             ("codex", "codex", {}, "codex-PreToolUse-apply_patch", "apply_patch", "command"),
             ("gemini", "gemini", {}, "gemini-BeforeTool-write_file", "write_file", "file_path"),
             ("gemini", "gemini", {}, "gemini-BeforeTool-write_file", "replace", "file_path"),
             ("qwen", "qwen", {}, "qwen/qwen-PreToolUse-write_file", "write_file", "file_path"),
             ("qwen", "qwen", {}, "qwen/qwen-PreToolUse-write_file", "edit", "file_path"),
             ("qwen", "qwen", {}, "qwen/qwen-PreToolUse-write_file", "notebook_edit", "notebook_path"),
             ("opencode", "opencode", {}, "opencode-PreToolUse-write", "write", "filePath"),
             ("opencode", "opencode", {}, "opencode-PreToolUse-write", "edit", "filePath"),
             ("opencode", "opencode", {}, "opencode-PreToolUse-write", "apply_patch", "patchText"))
    PATCH_ARGS = {"command", "patchText"}

    def setUp(self):
        super().setUp()
        with open(os.path.join(self.repo, self.LEASED), "w") as f:
            f.write("leased\n")
        os.symlink("leased.py", os.path.join(self.repo, "src", "alias.py"))
        self.holder = self.peer(self.LEASED, purpose="peer work")

    def abs(self, rel):
        return os.path.join(self.repo, rel)

    def path_shapes(self, arg):
        """(name, tool_input, denied) for a tool whose argument `arg` is the path it writes."""
        leased, free = self.abs(self.LEASED), self.abs(self.FREE)
        yield "written", {arg: leased}, True
        yield "written relative", {arg: self.LEASED}, True
        yield "written through ..", {arg: self.abs("other/../src/leased.py")}, True
        yield "written relative through ..", {arg: "src/../src/leased.py"}, True
        yield "written through a symlink", {arg: self.abs("src/alias.py")}, True
        yield "written as a list", {arg: [free, leased]}, True
        for key in self.DECOYS:
            if key != arg:
                yield "written, decoy %s free" % key, {arg: leased, key: free}, True
                yield "free, %s names the lease" % key, {arg: free, key: leased}, True
                yield "free, %s names the lease relative" % key, {arg: free, key: self.LEASED}, True
        yield "free, a list of paths names the lease", {arg: free, "paths": [free, leased]}, True
        yield "free, a nested edit names the lease", {arg: free, "edits": [{"file_path": leased}]}, True
        yield "free", {arg: free}, False
        yield "free with free decoys", dict({k: free for k in self.DECOYS}, paths=[free], **{arg: free}), False

    def patch_shapes(self, arg):
        """The same for a tool whose argument `arg` (None: the whole input) is patch text."""
        def text(*paths):
            return "*** Begin Patch\n%s*** End Patch\n" % "".join(
                "*** Update File: %s\n@@\n-a\n+b\n" % p for p in paths)

        def shape(patch, **decoys):
            return patch if arg is None else dict(decoys, **{arg: patch})
        yield "patch", shape(text(self.LEASED)), True
        yield "patch absolute", shape(text(self.abs(self.LEASED))), True
        yield "patch through ..", shape(text("src/../src/leased.py")), True
        yield "patch through a symlink", shape(text("src/alias.py")), True
        yield "patch of two files", shape(text(self.FREE, self.LEASED)), True
        if arg is not None:
            for key in self.DECOYS:
                yield "free patch, %s names the lease" % key, shape(text(self.FREE), **{key: self.abs(self.LEASED)}), True
        yield "patch free", shape(text(self.FREE)), False

    def decision(self, label, env, sample, tool, tool_input):
        data = self.payload(sample, tool_name=tool, tool_input=tool_input)
        out, err = hook.run(json.dumps(data).encode(), ["--harness", label], dict(self.env, **env))
        self.assertEqual(err, "")
        if not out:
            return False
        reply = self.check_reply(out)
        reason = reply.get("reason") or reply["hookSpecificOutput"]["permissionDecisionReason"]
        self.assertIn(self.LEASED, reason)
        self.assertIn(self.holder["handle"], reason)
        return True

    def test_every_write_shape_of_every_harness(self):
        swept = 0
        for harness, label, env, sample, tool, arg in self.TOOLS:
            shapes = self.patch_shapes(arg) if arg is None or arg in self.PATCH_ARGS else self.path_shapes(arg)
            for name, tool_input, denied in shapes:
                swept += 1
                with self.subTest(harness=harness, tool=tool, shape=name):
                    self.assertEqual(self.decision(label, env, sample, tool, tool_input), denied, tool_input)
        self.assertEqual(swept, 254)


class ParkedWorkTest(HookCase):
    """Parking a work moves its agent's leases and messages to a holder runtime (no process); the
    closing harness's last hooks (Stop, SessionEnd, a stray prompt) must not act as that holder:
    its SessionEnd used to end the holder and drop the work's leases at once (issue seen with
    Claude Code 2.1.197 closing in the parked window). A resume (SessionStart) takes them over."""

    def test_the_closing_harness_leaves_the_parked_holder_and_its_leases_alone(self):
        self.assertEqual(hook.PARKED, store.PARKED)
        agent = self.start()
        self.st.claim(agent["id"], ["src/parked.py"], "exclusive", "the work's change")
        holder = self.st.hold_parked(CLAUDE_MAIN, "work-1")
        self.assertIsNotNone(holder)
        for name in ("claude-Stop", "claude-PostToolUse-Edit", "claude-SessionEnd"):
            self.run_hook(self.payload(name, session_id=CLAUDE_MAIN))
        self.assertIsNone(self.st.runtime(holder["id"])["ended_at"], "the holder stays")
        self.assertEqual([l["resource"] for l in self.st.leases_of(holder["id"])], ["src/parked.py"])
        out, _ = self.run_hook(self.payload("claude-UserPromptSubmit", session_id=CLAUDE_MAIN))
        self.assertIn("work is parked", context_of(out) or "")
        self.assertIsNone(self.st.runtime(holder["id"])["ended_at"])
        peer = self.peer()
        with self.assertRaises(store.Refused):
            self.st.claim(peer["id"], ["src/parked.py"], "exclusive", "peer")
        # The resumed conversation registers anew and inherits what the holder kept.
        self.run_hook(self.payload("claude-SessionStart", session_id=CLAUDE_MAIN))
        resumed = self.st.find_conversation_runtime(CLAUDE_MAIN)
        self.assertNotEqual(resumed["id"], holder["id"])
        self.assertEqual([l["resource"] for l in self.st.leases_of(resumed["id"])], ["src/parked.py"])


class DatabaseUrlHookTest(HookCase):
    """A COORD_DB that is a URL: the hook fails open (exit 0, nothing denied) and creates no
    directory `postgresql:` in the repository, as it once did."""

    def test_fails_open_and_writes_nothing_in_the_repository(self):
        env = {"COORD_DB": "postgresql://coord@db.example.invalid/coord"}
        for name in ("claude-SessionStart", "claude-PreToolUse-Write", "claude-PostToolUse-Write"):
            with self.subTest(sample=name):
                out, err = self.run_hook(self.payload(name), env=env)
                self.assertEqual(out, "")
                self.assertIn("coord's host process is not running", err)
        self.assertFalse(os.path.exists(os.path.join(self.repo, "postgresql:")))


# --------------------------------------------------------------------------- the same hooks on a PostgreSQL project (issue 25, pgroute)
# Each class below is an existing one with PostgresHooks first: the project is in PostgreSQL
# (COORD_DB a postgresql:// URL), its host process runs, and every hook reaches it through the
# socket; the test arranges records with its own engine store (self.st).

class PostgresHooks(support.PostgresProject):
    def configure_project(self):
        super().configure_project()
        hostclient.start_host(self.pg_project, self.pg_url, self.host_socket, environ=self.env)

    def reset_project(self):
        st = self.st
        with st.transaction():
            for table, _key, _cols in reversed(pg.COPY_TABLES):
                if table != "meta":
                    st.conn.execute("DELETE FROM %s" % table)


class PgSampleTest(PostgresHooks, SampleTest):
    pass


class PgEnforcementTest(PostgresHooks, EnforcementTest):
    test_pre_tool_use_writes_nothing = None  # SQLite's PRAGMA data_version


class PgPatchEnforcementTest(PostgresHooks, PatchEnforcementTest):
    pass


class PgAgentStateTest(PostgresHooks, AgentStateTest):
    pass


class PgDeliveryTest(PostgresHooks, DeliveryTest):
    test_tool_boundaries_inside_a_turn_write_nothing_until_the_heartbeat_is_due = None  # PRAGMA data_version


class PgIdentityTest(PostgresHooks, IdentityTest):
    pass


class PgTurnTest(PostgresHooks, TurnTest):
    pass


class PgLivenessTest(PostgresHooks, LivenessTest):
    pass


class PgWorkContextTest(PostgresHooks, WorkContextTest):
    pass


class PgCopilotTest(PostgresHooks, CopilotTest):
    pass


class PgOpenCodeTest(PostgresHooks, OpenCodeTest):
    test_its_shell_is_advisory_and_never_opens_the_database = None  # removes the SQLite file


class PgShellPatchTest(PostgresHooks, ShellPatchTest):
    pass


class PgSymlinkTest(PostgresHooks, SymlinkTest):
    pass


class PgGeminiTest(PostgresHooks, GeminiTest):
    pass


class PgQwenTest(PostgresHooks, QwenTest):
    pass


class PgParkedWorkTest(PostgresHooks, ParkedWorkTest):
    pass


class PgHarnessBehindShellsTest(PostgresHooks, HarnessBehindShellsTest):
    pass


class PgSubagentShellTest(PostgresHooks, SubagentShellTest):
    pass


class PgHookRoutingTest(PostgresHooks, HookCase):
    """A hook on a PostgreSQL project: through the host process only, never the driver; down, it
    fails open, and SessionStart starts it in the background."""

    PROBE = ("import json, sys\n"
             "sys.path.insert(0, sys.argv[1])\n"
             "import hook\n"
             "out, err = hook.run(sys.stdin.buffer.read(), ['--harness', 'claude'])\n"
             "print(json.dumps({'out': out, 'err': err, 'modules': sorted(m for m in sys.modules"
             " if m.split('.')[0] in ('psycopg', 'psycopg_binary', 'psycopg_c', 'subprocess', 'argparse'))}))\n")

    def probe(self, data):
        """Run the hook in a child that could import psycopg (it is on its path); -> its reply
        and the driver modules (and subprocess/argparse) it had loaded at the end."""
        proc = subprocess.run([sys.executable, "-S", "-c", self.PROBE, support.ROOT], input=json.dumps(data).encode(),
                              env=dict(self.env, PYTHONPATH=support.psycopg_dir()), cwd=self.repo,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return json.loads(proc.stdout)

    def test_a_hook_reaches_the_project_and_never_imports_the_driver(self):
        start = self.probe(self.payload("claude-SessionStart"))
        self.assertEqual(start["err"], "")
        self.assertIn("you are %s" % self.st.find_conversation_runtime(CLAUDE_MAIN)["handle"], context_of(start["out"]))
        self.assertEqual(start["modules"], [])
        peer = self.st.register(conversation="peer", harness="codex")
        self.st.claim(peer["id"], ["src/a.py"])
        write = self.probe(self.write("src/a.py"))
        self.assertIn("permissionDecision", write["out"])
        self.assertIn(peer["handle"], write["out"])
        self.assertEqual(write["modules"], [])

    def test_down_it_fails_open_and_session_start_starts_it_in_the_background(self):
        peer = self.st.register(conversation="peer", harness="codex")
        self.st.claim(peer["id"], ["src/a.py"])
        self.assertIn("permissionDecision", self.run_hook(self.write("src/a.py"))[0])
        support.stop_host_process(self.host_socket)
        self.assertFalse(hostclient.host_status(self.pg_project, self.host_socket)["running"])
        out, err = self.run_hook(self.write("src/a.py"))
        self.assertEqual(out, "", "allowed: fail open")
        self.assertIn("coord hook: coord's host process is not running", err)
        self.assertFalse(hostclient.host_status(self.pg_project, self.host_socket)["running"], "PreToolUse starts nothing")
        out, err = self.run_hook(self.payload("claude-SessionStart"))
        self.assertEqual(out, "")
        self.assertIn("not running", err)
        support.retry_until(lambda: hostclient.host_status(self.pg_project, self.host_socket)["running"], 60)
        self.assertIn("permissionDecision", self.run_hook(self.write("src/a.py"))[0])


class PgSafeModeHookTest(PostgresHooks, HookCase):
    """Safe mode in the hook (issue 25, item 3), the one fail-closed case: on a PostgreSQL project
    whose host process cannot answer, a write under this host's own exclusive lease is refused
    once that lease may have lapsed (from the host process's safe-mode file alone); any other
    write fails open as before."""

    def configure_project(self):
        # A short host TTL: the host process beats every TTL/6 s, and its leases may lapse (for
        # other hosts) TTL s after its last beat.
        self.env.update(COORD_HOST_TTL="2", COORD_HOST_LEASE_DELAY="1")
        super().configure_project()

    def safe_listed(self, resource):
        try:
            with open(hostclient.safe_state_path(self.host_socket)) as f:
                return resource in [l["resource"] for l in json.load(f)["leases"]]
        except (OSError, ValueError, KeyError):
            return False

    def test_a_write_under_the_host_s_own_lapsed_lease_is_refused_while_the_host_process_is_down(self):
        self.run_hook(self.payload("claude-SessionStart"))
        me = self.st.find_conversation_runtime(CLAUDE_MAIN)
        self.st.claim(me["id"], ["src/a.py"], "exclusive", "mine", ttl=3600)
        self.assertEqual(self.run_hook(self.write("src/a.py"))[0], "", "its own lease: allowed")
        support.retry_until(lambda: self.safe_listed("src/a.py"), 60)
        support.stop_host_process(self.host_socket)
        self.assertFalse(hostclient.host_status(self.pg_project, self.host_socket)["running"])
        out, err = self.run_hook(self.write("src/free.py"))
        self.assertEqual(out, "", "a path no lease of this host covers: fail open")
        self.assertIn("host process is not running", err)
        refused = []

        def denied():
            out, _err = self.run_hook(self.write("src/a.py"))
            if out:
                refused.append(json.loads(out)["hookSpecificOutput"]["permissionDecisionReason"])
            return bool(out)
        support.retry_until(denied, 60)  # once the last beat + TTL (less the margin) has passed
        self.assertIn("cannot reach its database", refused[0])
        self.assertIn("exclusive lease on src/a.py (held by %s)" % me["handle"], refused[0])
        self.assertIn(".coord/coord db start", refused[0])
        self.assertEqual(self.run_hook(self.write("src/free.py"))[0], "", "still fail open elsewhere")


class PgOtherHostPidHookTest(PostgresHooks, HookCase):
    """hook.py's own comparisons of a recorded pid with its parent (Hook.ours) hold only for a
    runtime recorded on this host: another host's pid with the same number is not this process."""

    def test_a_runtime_of_another_host_with_this_parent_s_pid_is_not_this_process(self):
        other = self.open_project()
        other.host = {"id": "another-boot/pid:[4026531836]", "name": "far", "boot_id": "another-boot",
                      "pid_ns": "pid:[4026531836]"}
        me = os.getpid()  # the hook's parent, the process its harness walk finds
        far = other.register(conversation=CLAUDE_MAIN, harness="claude", pid=me, pid_start=store.process_start(me))
        self.assertEqual(far["host"], other.host["id"])
        self.run_hook(self.payload("claude-SessionStart"))
        now = self.st.find_conversation_runtime(CLAUDE_MAIN)
        self.assertNotEqual(now["id"], far["id"], "this host's SessionStart is a new attachment")
        self.assertEqual(now["host"], store.host_identity()["id"])
        self.assertEqual(self.st.runtime(far["id"])["superseded_by"], now["id"])


class PgHookLeaseCopyTest(PostgresHooks, HookCase):
    """The real hook's PreToolUse on a PostgreSQL project: one request, answered by the host
    process from its lease copy (pglisten), which sees a peer's claim after its wake-up and its
    release after the next."""

    def copy_status(self):
        client = hostclient.HostClient(self.pg_project, self.host_socket)
        try:
            return client.call("ping")["lease_copy"]
        finally:
            client.close()

    def test_the_write_decision_comes_from_the_copy_and_follows_a_peer_s_claim_and_release(self):
        self.run_hook(self.payload("claude-SessionStart"))
        support.retry_until(lambda: self.copy_status()["fresh"], 60)
        hits = self.copy_status()["hits"]
        self.assertEqual(self.run_hook(self.write("src/a.py"))[0], "")
        self.assertGreater(self.copy_status()["hits"], hits, "answered from the copy")
        peer = self.st.register(conversation="peer", harness="codex")
        self.st.claim(peer["id"], ["src/a.py"])
        support.retry_until(lambda: "permissionDecision" in self.run_hook(self.write("src/a.py"))[0], 60)
        self.assertIn(peer["handle"], self.run_hook(self.write("src/a.py"))[0])
        self.st.release(peer["id"], ["src/a.py"])
        support.retry_until(lambda: self.run_hook(self.write("src/a.py"))[0] == "", 60)


class PgOtherHostWorkLinkTest(PostgresHooks, HookCase):
    """link_work and link_direct compare a work's recorded pids (its tmux pane, its resume
    wrapper) with the hook's ancestry only for a work of this host (pgpeer): a work whose
    runtime was recorded on another host has pids of that host, whatever their numbers."""

    FAR = {"id": "another-boot/pid:[4026531836]", "name": "far", "boot_id": "another-boot",
           "pid_ns": "pid:[4026531836]"}

    def work(self, creator, harness):
        with self.st.transaction():
            return self.st.insert_work("task", "active", "secret-token", runtime=creator["id"], data={
                "tmux": {"pane_pid": harness.pid, "window_id": "@1"},
                "direct": {"pid": harness.pid, "pid_start": store.process_start(harness.pid)}})

    def test_a_work_of_another_host_with_this_harness_s_pid_is_not_linked(self):
        other = self.open_project()
        other.host = dict(self.FAR)
        creator = other.register(conversation="creator-far", harness="codex")
        self.assertEqual(creator["host"], self.FAR["id"])
        harness = FakeHarness(self)
        w = self.work(creator, harness)
        self.start(env={"COORD_WORK_ID": w["id"]}, via=harness)
        data = self.st.work(w["id"])["data"]
        self.assertNotIn("conversation", data["tmux"], "another host's pane %d is not this harness" % harness.pid)
        self.assertNotIn("conversation", data["direct"], "nor its wrapper")
        with self.st.transaction():  # a wrapper's record alone (link_direct)
            w = self.st.insert_work("task", "active", "secret-token", runtime=creator["id"], data={
                "direct": {"pid": harness.pid, "pid_start": store.process_start(harness.pid)}})
        self.start(env={"COORD_WORK_ID": w["id"]}, via=harness)
        self.assertNotIn("conversation", self.st.work(w["id"])["data"]["direct"])

    def test_a_work_of_this_host_is_linked(self):
        creator = self.st.register(conversation="creator-here", harness="codex")
        harness = FakeHarness(self)
        w = self.work(creator, harness)
        rt = self.start(env={"COORD_WORK_ID": w["id"]}, via=harness)
        tmux = self.st.work(w["id"])["data"]["tmux"]
        self.assertEqual((tmux["conversation"], tmux["runtime_id"]), (CLAUDE_MAIN, rt["id"]))


class PgSessionStartCopyTest(PgHookLeaseCopyTest):
    """The real hook's SessionStart on a PostgreSQL project (pgsession): the conversation's
    runtime and the lease lines answered by the host process from its lease copy, the messages
    shown once and then reminded, in one boundary operation."""

    test_the_write_decision_comes_from_the_copy_and_follows_a_peer_s_claim_and_release = None

    def test_session_start_reads_the_copy_and_delivers_once(self):
        first = json.loads(self.run_hook(self.payload("claude-SessionStart"))[0])
        self.assertIn("coord: you are", first["hookSpecificOutput"]["additionalContext"])
        peer = self.st.register(conversation="peer", harness="codex")
        self.st.claim(peer["id"], ["src/held.py"])
        me = self.st.find_conversation_runtime(self.payload("claude-SessionStart")["session_id"])
        self.st.send(peer["id"], "read me once", me["id"])
        support.retry_until(lambda: self.copy_status()["fresh"], 60)
        hits = self.copy_status()["hits"]
        text = json.loads(self.run_hook(self.payload("claude-SessionStart"))[0])["hookSpecificOutput"][
            "additionalContext"]
        self.assertIn("src/held.py", text)
        self.assertIn("read me once", text)
        self.assertGreater(self.copy_status()["hits"], hits, "answered from the copy")
        again = json.loads(self.run_hook(self.payload("claude-UserPromptSubmit"))[0])["hookSpecificOutput"][
            "additionalContext"]
        self.assertNotIn("read me once", again)  # a reminder now, until it is acknowledged
        self.assertIn("ack", again)

    def test_a_host_process_of_an_older_coord_gets_the_separate_requests(self):
        """After an upgrade the running host process may lack session_start and session_beat:
        its refusal of an operation it does not run sends the hook to the requests it has."""
        remote = hostclient.RemoteStore(self.pg_project, self.host_socket)
        try:
            self.assertEqual(hook.older_host(lambda: remote.session_start_of_a_later_coord(), lambda: "separately"),
                             "separately")
            with self.assertRaises(store.UsageError):  # any other refusal stays one
                hook.older_host(lambda: remote.claim("no-such-runtime", ["x"], mode="neither"), lambda: "no")
        finally:
            remote.client.close()

    def test_a_new_attachment_is_told_its_peers_leases_and_its_conversation_s_messages(self):
        """session_start: the registration brings back the lease lines and whether anything waits;
        a message to the conversation's ended attachment is shown to the new one."""
        peer = self.st.register(conversation="peer", harness="codex")
        self.st.claim(peer["id"], ["src/held.py"])
        quiet = json.loads(self.run_hook(self.payload("claude-SessionStart", session_id="quiet-one"))[0])[
            "hookSpecificOutput"]["additionalContext"]
        self.assertEqual(quiet.splitlines()[1:], ["Held exclusively by peers (ask before editing):",
                                                  "  %s: src/held.py" % peer["handle"]])
        earlier = self.st.register(conversation="come-back", harness="claude")
        self.st.send(peer["id"], "while you were away", earlier["id"])
        self.st.bye(earlier["id"])
        text = json.loads(self.run_hook(self.payload("claude-SessionStart", session_id="come-back"))[0])[
            "hookSpecificOutput"]["additionalContext"]
        self.assertIn("while you were away", text)
        self.assertIn("src/held.py", text)
