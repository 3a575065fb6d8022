"""End-to-end: the whole user path of README.md, in usage order, with the real CLIs.

One person, one plain git repository with a bare `origin`, coord installed by `./install`:

1. `work create` is refused until the installation is committed, and the command its refusal
   prints, pasted into sh, commits it;
2. a person's terminal (a shell on its own pseudo-terminal, nothing exported) says `hello`,
   claims, lists and releases;
3. with `coord trust --carry-over on`, two managed clones are created and the real Codex CLI
   (interactive, in a tmux window on a private socket, against tests/modelserver.py) is started
   in each by `work start --prompt`: agent A claims a file, edits it and describes its change
   with `jj describe` through its shell tool; agent B is denied a write to A's file by coord's
   hook, and changes another file;
4. from the shared checkout, `work integrate land A --into main --push origin --check CMD`
   lands A (main, origin/main and the files agree; `audit --work A` tells the story); then,
   main having moved with a conflicting change, landing B is refused with nothing moved and
   B's agent is told;
5. `work close` and `work remove A` succeed once the proofs hold; `work remove B` refuses
   (its change never landed) and keeps the clone and its files.

Every command is run as a person types it: `.coord/coord` from the repository, the database
and project ID found the ordinary way (no COORD_DB, no COORD_PROJECT_ID), git and jj
identities from the private HOME's own config files. Commands other than the terminal's run
without a controlling terminal, so their identity is the user.

QueueOfTwoKinds: the landing queue fed by the real Claude Code and the real Codex at once, landed
by the person with one command (a conflict and a broken check go back to their agents).
"""

import json
import os
import shlex
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harnesses as h  # noqa: E402
import support  # noqa: E402
from modelserver import ModelServer, apply_patch, say, shell, tool  # noqa: E402

PROJECT = "usage-e2e"
APP = "def greet():\n    return 'hello'\n"
NOTES = "# Notes\n\nstatus: draft\n"
TITLE_REQUEST = h.CODEX_TITLE_REQUEST
MIGRATION_NOTICE = '[notice.model_migrations]\n"gpt-5.5" = "gpt-6-sol"'


def patch(*lines):
    return apply_patch("*** Begin Patch\n%s\n*** End Patch" % "\n".join(lines))


class UsagePath(support.CoordTestCase):

    @support.slow
    def test_install_terminal_agents_land_and_clean_up(self):
        self.prepare()
        self.step_install()
        self.step_terminal()
        alpha, beta = self.step_agents()
        self.step_land(alpha, beta)
        self.step_cleanup(alpha, beta)

    # -- the machine -----------------------------------------------------------------------

    def prepare(self):
        support.require_tool(self, "git")
        support.require_tool(self, "jj")
        self.tmux_bin = support.require_tool(self, "tmux")
        self.codex = h.require_cli(self, "codex")
        self.server = ModelServer()
        self.addCleanup(self.server.close)
        self.codex_home = os.path.join(self.home, ".codex")
        self.sock = os.path.join(self.tmp, "tmux.sock")
        self.addCleanup(subprocess.run, [self.tmux_bin, "-S", self.sock, "kill-server"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
        scratch = os.path.join(self.tmp, "scratch")
        os.mkdir(scratch, 0o700)
        # The person's own configuration, where their tools look for it.
        with open(os.path.join(self.home, ".gitconfig"), "w") as f:
            f.write("[user]\n\tname = Pat Person\n\temail = pat@example.invalid\n"
                    "[init]\n\tdefaultBranch = main\n")
        os.makedirs(os.path.join(self.home, ".config", "jj"))
        with open(os.path.join(self.home, ".config", "jj", "config.toml"), "w") as f:
            f.write('user.name = "Pat Person"\nuser.email = "pat@example.invalid"\n')
        # Codex 0.171.0 runs its shell tool with the environment of a login shell (observed: a
        # PATH that /etc/profile reset, without the directories the tests' tools live in), so,
        # as on a person's machine, their profile is what puts jj and git on PATH.
        tool_dirs = [os.path.dirname(support.require_tool(self, t)) for t in ("jj", "git", "python3")]
        with open(os.path.join(self.home, ".profile"), "w") as f:
            f.write("PATH=%s:$PATH\nexport PATH\n" % ":".join(shlex.quote(d) for d in tool_dirs))
        # The person's environment: a scrubbed one with every request aimed at the scripted
        # server; nothing of coord's exported but where clones go and which tmux server to use.
        self.penv = h.codex_env(self.home, self.codex_home, self.server, {
            "COORD_SCRATCH_ROOT": scratch, "COORD_TMUX_SOCKET": self.sock, "TMUX_TMPDIR": self.tmp,
            "COORD_CODEX_CMD": self.codex})
        for name in ("COORD_DB", "COORD_PROJECT_ID", "XDG_STATE_HOME", "XDG_CONFIG_HOME"):
            self.assertNotIn(name, self.penv)
        self.person_db = os.path.join(self.home, ".local", "state", "fleet-agent-coord", PROJECT + ".sqlite3")

    def cmd(self, argv, cwd=None, check=0, env=None):
        """Run argv as the person would from a script: no controlling terminal."""
        proc = subprocess.run(argv, cwd=cwd or self.repo, env=env or self.penv, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=180, start_new_session=True)
        if check is not None and proc.returncode != check:
            self.fail("%s exited %d (wanted %d)\nstdout: %s\nstderr: %s" % (
                " ".join(argv), proc.returncode, check, proc.stdout, proc.stderr))
        return proc

    def sh(self, line, cwd=None, check=0):
        return self.cmd(["/bin/sh", "-c", line], cwd=cwd, check=check)

    def git(self, *args, cwd=None):
        return self.cmd(["git"] + list(args), cwd=cwd).stdout.strip()

    def pc(self, *args, check=0):
        """`.coord/coord ARGS` typed in the shared checkout; -> CompletedProcess."""
        return self.cmd([os.path.join(".coord", "coord")] + list(args), check=check)

    def pcj(self, *args, check=0):
        proc = self.pc(*(list(args) + ["--json"]), check=check)
        return json.loads(proc.stdout) if proc.stdout.strip() else {}

    # -- 1. a repository, coord installed and committed ----------------------------------------

    def step_install(self):
        self.origin = os.path.join(self.tmp, "origin.git")
        self.cmd(["git", "init", "-q", "--bare", self.origin], cwd=self.tmp)
        self.repo = os.path.realpath(os.path.join(self.tmp, "repo"))
        self.cmd(["git", "init", "-q", self.repo], cwd=self.tmp)
        for rel, text in (("src/app.py", APP), ("docs/notes.md", NOTES)):
            self.write(self.repo, rel, text)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "first")
        self.git("remote", "add", "origin", self.origin)
        self.git("push", "-q", "origin", "main")
        proc = self.cmd(support.script_argv(os.path.join(support.ROOT, "install")) + [self.repo, "--project-id", PROJECT],
                        cwd=self.tmp)
        # Not committed yet: a clone would start without coord's hooks, so create refuses and
        # prints the command that commits the installation.
        refused = self.pc("work", "create", "alpha", check=3)
        hint = [line for line in refused.stderr.splitlines() if "commit" in line and "git -C" in line]
        self.assertTrue(hint, refused.stderr)
        command = hint[0][hint[0].index("git -C"):]
        self.sh(command)
        self.assertEqual(self.git("status", "--porcelain"), "", "the pasted command committed everything installed")
        self.assertIn("Install coord", self.git("log", "-1", "--format=%s"))
        self.git("push", "-q", "origin", "main")
        self.assertEqual(os.listdir(self.penv["COORD_SCRATCH_ROOT"]), [], "the refused create left no clone behind")
        self.assertTrue(os.path.exists(self.person_db), "the database is where README says (%s)" % proc.stdout)

    # -- 2. a person's terminal ----------------------------------------------------------------

    def step_terminal(self):
        term = support.Terminal(self, self.penv, self.repo)
        code, out = term.run(".coord/coord hello")
        self.assertEqual(code, 0, out)
        handle = out.strip().splitlines()[-1].split()[0]
        self.assertRegex(handle, r"^[a-z]+(-[a-z]+){4}$", out)
        code, again = term.run(".coord/coord hello")
        self.assertEqual(again.strip().splitlines()[-1].split()[0], handle, "one terminal, one runtime")
        code, out = term.run(".coord/coord claim src/app.py")
        self.assertEqual((code, out.strip()), (0, "claimed src/app.py (exclusive, ttl 3600s)"),
                         "a claim says what it claimed in one line")
        code, out = term.run(".coord/coord list")
        self.assertEqual(code, 0, out)
        mine = [line for line in out.splitlines() if "(you)" in line]
        self.assertTrue(mine and "person on pts/" in mine[0] and "src/app.py" in out, out)
        # A command from elsewhere sees the person's lease.
        blocked = self.pc("check", "src/app.py", check=3)
        self.assertIn(handle, blocked.stdout + blocked.stderr)
        code, out = term.run(".coord/coord release src/app.py")
        self.assertEqual(code, 0, out)
        self.pc("check", "src/app.py", check=0)
        term.close()

    # -- 3. two clones, two Codex agents ----------------------------------------------------------

    def step_agents(self):
        # The person trusted the shared checkout and approved coord's hooks there, in Codex.
        h.trust_codex_repo(self.codex_home, self.server, self.repo, extra=MIGRATION_NOTICE)
        # A person-only setting: typed in the person's own terminal (a script's is no evidence).
        term = support.Terminal(self, self.penv, self.repo)
        self.assertEqual(term.run(".coord/coord trust --carry-over on >/dev/null"), (0, ""))
        term.close()
        alpha = self.pcj("work", "create", "alpha")["work"]
        beta = self.pcj("work", "create", "beta")["work"]
        self.me = [rt for rt in self.pcj("list")["runtimes"] if rt["id"] == alpha["runtime"]][0]
        self.assertEqual((self.me["person"], self.me["terminal"]), (True, "no terminal"), self.me)
        for w in (alpha, beta):
            self.assertEqual(w["runtime"], self.me["id"], "outside a terminal, the person is their user")
            self.assertEqual(self.read(w["path"], "src/app.py"), APP)
            self.assertTrue(os.path.exists(os.path.join(w["path"], ".coord", "hook.py")))
        seen = {}

        def beta_denied(req):
            seen["denied"] = req.tool_results()
            return patch("*** Update File: docs/notes.md", "@@", "-status: draft", "+status: beta reviewed")

        self.server.load([], lanes={
            # Interactive Codex 0.171.0 also asks the model for a thread title, in a side request
            # (read-only sandbox, a JSON schema for the answer) that quotes the user's prompt:
            # those go to a lane of their own, listed first so that they never take a task's turn.
            TITLE_REQUEST: [say('{"title": "Scripted task"}')] * 4,
            "TASK-ALPHA": [
                shell(".coord/coord claim src/app.py -p 'make greet loud'"),
                patch("*** Update File: src/app.py", "@@", "-    return 'hello'", "+    return 'HELLO'"),
                shell('jj describe -m "app: greet loudly"'),
                say("done: greet is loud"),
            ],
            "TASK-BETA": [
                patch("*** Update File: src/app.py", "@@", "-    return 'hello'", "+    return 'hi'"),
                beta_denied,
                shell('jj describe -m "notes: beta reviewed"'),
                say("done: notes reviewed"),
            ],
        })
        started = self.pcj("work", "start", alpha["handle"], "--harness", "codex",
                           "--prompt", "TASK-ALPHA: make greet loud")
        self.assertEqual(started.get("approvals"), [], "carried-over approvals: nothing left to approve")
        self.wait_lane("TASK-ALPHA", 4, alpha)
        agent_a = self.agent_of(alpha)
        held = [l for l in self.pcj("list")["leases"] if l["resource"] == "src/app.py"]
        self.assertEqual([l["runtime"] for l in held], [agent_a["id"]], "A's agent holds its claim")
        self.assertEqual(self.read(alpha["path"], "src/app.py"), APP.replace("hello", "HELLO"))
        self.assertEqual(self.jj(alpha["path"], "log", "--no-graph", "-r", "@", "-T", "description"),
                         "app: greet loudly\n", self.server.model_requests("TASK-ALPHA")[3].tool_results())

        self.pcj("work", "start", beta["handle"], "--harness", "codex", "--prompt", "TASK-BETA: review the notes")
        self.wait_lane("TASK-BETA", 4, beta)
        denial = "\n".join(seen["denied"])
        self.assertTrue(denial.startswith("Command blocked by PreToolUse hook: "), denial)
        self.assertIn(agent_a["handle"], denial, "coord's hook names the holder")
        self.assertIn("src/app.py", denial)
        self.assertEqual(self.read(beta["path"], "src/app.py"), APP, "the denied write did not happen")
        # Each session's hooks are its own (coord starts Codex with --no-daemon): B's agent is
        # linked to B, A's record still names A's agent, and their harness processes differ.
        agent_b = self.agent_of(beta)
        self.assertEqual(self.agent_of(alpha)["id"], agent_a["id"])
        self.assertNotEqual(agent_b["id"], agent_a["id"])
        self.assertNotEqual(agent_b["pid"], agent_a["pid"])
        self.assertEqual((agent_a["cwd"], agent_b["cwd"]), (alpha["path"], beta["path"]))
        self.assertIn("status: beta reviewed", self.read(beta["path"], "docs/notes.md"))
        # Codex tries to fetch from the internet too (seen: a CONNECT to raw.githubusercontent.com);
        # the proxy refuses it. No model request went anywhere but the scripted server.
        self.assertEqual([r.path for r in self.server.refused if "/v1/" in r.path], [])
        return alpha, beta

    def wait_lane(self, lane, n, work):
        def done():
            return len(self.server.model_requests(lane)) >= n
        try:
            support.retry_until(done, timeout=120, interval=0.3)
        except AssertionError:
            self.fail("%s: %d of %d model requests; the window shows:\n%s" % (
                lane, len(self.server.model_requests(lane)), n, self.screen(work)))

    def screen(self, work):
        rec = self.pcj("work", "inspect", work["handle"], "--verbose")["work"]["data"].get("tmux") or {}
        if not rec.get("pane_id"):
            return "(no window)"
        return self.cmd([self.tmux_bin, "-S", self.sock, "capture-pane", "-p", "-t", rec["pane_id"]],
                        check=None).stdout[-2000:]

    def agent_of(self, work):
        try:
            rec = support.retry_until(lambda: self.pcj("work", "inspect", work["handle"], "--verbose")["work"]["data"]
                                      ["tmux"].get("runtime_id"), timeout=30)
        except AssertionError:
            self.fail("%s's agent never registered in its window: %s" % (
                work["handle"], json.dumps(self.pcj("work", "inspect", work["handle"], "--verbose"))[-2000:]))
        rts = [rt for rt in self.pcj("list")["runtimes"] if rt["id"] == rec]
        self.assertEqual(len(rts), 1, rts)
        return rts[0]

    # -- 4. landing -----------------------------------------------------------------------------

    def at_terminal(self, term, *args, check=0):
        """`.coord/coord ARGS --json` typed at the person's terminal (landing is the person's,
        and a script without a terminal is not the person); -> (exit status, the JSON reply)."""
        import shlex
        code, out = term.run(" ".join(shlex.quote(a) for a in [".coord/coord"] + list(args) + ["--json"])
                             + " 2>/dev/null")
        if check is not None:
            self.assertEqual(code, check, out)
        lines = [l for l in out.splitlines() if l.startswith("{")]
        return code, (json.loads(lines[-1]) if lines else {})

    def step_land(self, alpha, beta):
        old = self.git("rev-parse", "main")
        term = support.Terminal(self, self.penv, self.repo)
        self.addCleanup(term.close)
        _, landed = self.at_terminal(term, "work", "integrate", "land", alpha["handle"], "--into", "main", "--push",
                                     "origin", "--check", "grep -q HELLO src/app.py")
        new = landed["landed"]
        self.assertNotEqual(new, old)
        self.assertEqual(self.git("rev-parse", "main"), new)
        self.assertEqual(self.git("rev-parse", "HEAD"), new)
        self.assertEqual(self.cmd(["git", "ls-remote", self.origin, "refs/heads/main"]).stdout.split()[0], new)
        self.assertEqual(self.read(self.repo, "src/app.py"), APP.replace("hello", "HELLO"))
        self.assertEqual(self.git("log", "-1", "--format=%s", "main"), "app: greet loudly")
        self.assertEqual(self.git("status", "--porcelain"), "")
        story = self.pc("audit", "--work", alpha["handle"]).stdout
        self.assertIn("work.integrated", story)
        for event in ("work.created", "work.landing.moved", "work.landing.pushed"):
            self.assertIn(event, story)

        # Main moves on with a change to the line B changed.
        self.write(self.repo, "docs/notes.md", NOTES.replace("draft", "final"))
        self.git("commit", "-q", "-am", "notes: final")
        self.git("push", "-q", "origin", "main")
        moved = self.git("rev-parse", "main")
        _, reply = self.at_terminal(term, "work", "integrate", "land", beta["handle"], "--into", "main", "--push",
                                    "origin", "--check", "true", check=3)
        self.assertEqual(reply.get("reason"), "conflict", reply)
        self.assertIn("docs/notes.md", reply.get("paths", []))
        self.assertEqual(self.git("rev-parse", "main"), moved, "main did not move")
        self.assertEqual(self.cmd(["git", "ls-remote", self.origin, "refs/heads/main"]).stdout.split()[0], moved)
        self.assertEqual(self.read(self.repo, "docs/notes.md"), NOTES.replace("draft", "final"))
        self.assertIn("status: beta reviewed", self.read(beta["path"], "docs/notes.md"))
        # B's agent, the one that must resolve it, is told.
        agent_b = self.agent_of(beta)
        self.assertEqual(reply.get("owner_told"), agent_b["handle"], reply)
        inbox = self.pcj("inbox", "--peek", "--runtime", agent_b["id"])
        bodies = "\n".join(m["body"] for m in inbox.get("messages", []))
        self.assertIn("docs/notes.md", bodies)
        self.assertIn("coord work integrate land %s" % beta["handle"], bodies)

    # -- 5. cleanup ------------------------------------------------------------------------------

    def step_cleanup(self, alpha, beta):
        for w in (alpha, beta):
            self.pcj("work", "close", w["handle"])

        def removed():
            proc = self.pc("work", "remove", alpha["handle"], "--confirm", alpha["handle"], "--json", check=None)
            return proc.returncode == 0 and json.loads(proc.stdout).get("removed")
        try:  # once Codex has left the clone
            support.retry_until(removed, timeout=60, interval=0.5)
        except AssertionError:
            self.fail(self.pc("work", "remove", alpha["handle"], "--confirm", alpha["handle"], check=None).stderr)
        self.assertFalse(os.path.exists(alpha["path"]))

        def refused():
            proc = self.pc("work", "remove", beta["handle"], "--confirm", beta["handle"], "--json", check=None)
            reply = json.loads(proc.stdout) if proc.stdout.strip() else {}
            if proc.returncode == 3 and not any(r.get("rule") in ("runtime-inside", "process-inside", "live-inside")
                                                for r in reply.get("reasons", [])):
                return proc
            return None
        proc = support.retry_until(refused, timeout=60, interval=0.5)
        text = self.pc("work", "remove", beta["handle"], "--confirm", beta["handle"], check=3).stderr
        self.assertIn("its landing into main stopped before anything moved", text)
        self.assertIn("none of it landed", text)
        self.assertIn(".coord/coord work integrate land %s --into main" % beta["handle"], text)
        self.assertTrue(os.path.isdir(beta["path"]))
        self.assertIn("status: beta reviewed", self.read(beta["path"], "docs/notes.md"))
        # Nothing of Codex's outlives its window: no background app-server of this HOME.
        left = []
        for pid in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else []):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    if self.home.encode() in f.read() and pid != str(os.getpid()):
                        left.append(pid)
            except OSError:
                pass
        self.assertEqual(left, [], "processes of this test's HOME still run")
        states = dict((w["handle"], w["state"]) for w in self.pcj("work", "list", "--all")["work"])
        self.assertEqual(states.get(alpha["handle"]), "removed", states)
        self.assertNotEqual(states.get(beta["handle"]), "removed", states)

    # -- small things ------------------------------------------------------------------------

    def write(self, root, rel, text):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def read(self, root, rel):
        with open(os.path.join(root, rel)) as f:
            return f.read()

    def jj(self, cwd, *args):
        return self.cmd(["jj"] + list(args), cwd=cwd).stdout


if __name__ == "__main__":
    unittest.main()


class QueueOfTwoKinds(h.CoordCase):
    """The landing queue with agents of two kinds: the real Claude Code and the real Codex, each
    launched by `work start` in its own clone, change their clone and queue it through their shell
    tools; the person's own work, queued first, changes the line Codex changes. One command of the
    person's lands the queue with a check Claude's change breaks: the person's work lands and is
    pushed, Codex's goes back for its conflict and Claude's for its check, each agent is told the
    steps, and both clones keep their changes."""

    harness = "claude"

    def setUp(self):
        super().setUp()
        codex = h.require_cli(self, "codex")
        with open(os.path.join(self.repo, "shared.txt"), "w") as f:
            f.write("one\ntwo\nthree\n")
        agent = self.agent_env(dict(self.managed_env(), COORD_REGISTER_GRACE="0", COORD_CLAUDE_CMD=self.cli,
                                    COORD_CODEX_CMD=codex))
        self.launch_env = h.claude_env(self.home, self.server, h.codex_env(self.home, self.codex_home, self.server,
                                                                           agent))
        h.trust_claude_repo(self.home, self.repo)
        h.trust_codex_repo(self.codex_home, self.server, self.repo, extra=MIGRATION_NOTICE)  # its dialog answered
        # Codex runs its shell tool as a login shell, whose profile puts jj and git on PATH (UsagePath.prepare)
        tool_dirs = [os.path.dirname(support.require_tool(self, t)) for t in ("jj", "git", "python3")]
        with open(os.path.join(self.home, ".profile"), "w") as f:
            f.write("PATH=%s:$PATH\nexport PATH\n" % ":".join(shlex.quote(d) for d in tool_dirs))
        self.origin = os.path.join(self.tmp, "origin.git")
        for argv in (["git", "init", "-q", "--bare", self.origin], ["git", "-C", self.repo, "remote", "add", "origin",
                     self.origin], ["git", "-C", self.repo, "push", "-q", "origin", "main"]):
            subprocess.run(argv, check=True, env=self.env, timeout=60)
        self.term = support.Terminal(self, dict(self.env, **self.launch_env), self.repo)
        self.typed(".coord/coord trust --carry-over on")

    def typed(self, line):
        rc, out = self.term.run(line)
        self.assertEqual(rc, 0, "%s: %s" % (line, out))
        return out

    def test_one_command_lands_the_queue_of_claude_and_codex_and_sends_back_what_it_must(self):
        import store
        works = {}
        for task in ("person-line", "claude-work", "codex-work"):
            works[task] = self.typed(".coord/coord work create %s" % task).split()[:2]
        mine, path = works["person-line"]
        with open(os.path.join(path, "shared.txt"), "w") as f:
            f.write("one\ntwo (the person)\nthree\n")
        self.typed("cd %s && jj describe -m 'the person: line two' >/dev/null 2>&1; cd %s" % (
            shlex.quote(path), shlex.quote(self.repo)))
        self.typed(".coord/coord work integrate enqueue %s --into main" % mine)
        claude_work, codex_work = works["claude-work"][0], works["codex-work"][0]
        claude_steps = [tool("Bash", description="change and queue", command=(
            "printf 'claude\\n' > claude.txt && printf 'breaks\\n' > broken.txt && jj describe -m 'claude: add' && "
            ".coord/coord work integrate enqueue %s --into main" % claude_work)), say("queued")]
        codex_steps = [shell("sed -i 's/^two$/two (codex)/' shared.txt && jj describe -m 'codex: line two' && "
                             ".coord/coord work integrate enqueue %s --into main" % codex_work), say("queued")]

        def claude_turn(req):
            if h.CLAUDE_TITLE_REQUEST in req.text():
                return say('{"title": "Queue the work"}')
            return claude_steps.pop(0) if claude_steps else say("ok")

        def codex_turn(req):
            return codex_steps.pop(0) if codex_steps else say("ok")
        marks = {"claude": "CLAUDE-QUEUES-%d" % os.getpid(), "codex": "CODEX-QUEUES-%d" % os.getpid()}
        self.server.load([say("ok")] * 40, lanes={TITLE_REQUEST: [say('{"title": "Scripted task"}')] * 4,  # Codex's
                                                 marks["claude"]: [claude_turn] * 40,
                                                 marks["codex"]: [codex_turn] * 40})
        self.typed(".coord/coord work start %s --harness claude --prompt '%s: queue your work' -- --allowedTools Bash"
                   % (claude_work, marks["claude"]))
        self.typed(".coord/coord work start %s --harness codex --prompt '%s: queue your work'"
                   % (codex_work, marks["codex"]))
        st = store.Store(environ=dict(self.env, **self.launch_env))
        self.addCleanup(st.close)

        def queued():
            states = [(st.resolve_work(w)["data"].get("integration") or {}).get("state") for w in (claude_work, codex_work)]
            return states == ["queued", "queued"] and not claude_steps and not codex_steps
        try:
            support.retry_until(queued, timeout=180, interval=0.5)
        except AssertionError:
            records = {w: self.rcoord("work", "inspect", w, env=self.launch_env)["work"]["data"].get("tmux") or {}
                       for w in (claude_work, codex_work)}
            panes = {w: self.pane_text(r) for w, r in records.items() if r.get("pane_id")}
            self.fail("the agents did not queue their work: claude %d steps left, codex %d; requests %s; panes %s" % (
                len(claude_steps), len(codex_steps), [(r.lane, r.api) for r in self.server.all_model_requests()],
                panes))
        import review
        order = [w["handle"] for w in review.queue_order(st, "main")]
        self.assertEqual((order[0], sorted(order)), (mine, sorted([mine, claude_work, codex_work])))
        out = self.typed(".coord/coord work integrate land --queued --into main --push origin --check "
                         "'test ! -f broken.txt'")
        lines = out.strip().splitlines()
        self.assertEqual(lines[-1], "queue into main: 1 landed, 2 sent back, 0 waiting", out)
        landed = next(l for l in lines if l.startswith(mine + " landed "))
        commit = landed.split()[2]
        self.assertIn(" on main and origin/main", landed)
        for handle, reason in ((claude_work, "check-failed"), (codex_work, "conflict")):
            self.assertTrue([l for l in lines if l.startswith("%s sent back (%s): " % (handle, reason))], out)
        head = lambda *a: subprocess.run(["git"] + list(a), stdout=subprocess.PIPE, text=True, check=True,
                                         env=self.env, timeout=60).stdout.strip()
        self.assertEqual(head("-C", self.repo, "rev-parse", "main"), commit)
        self.assertEqual(head("--git-dir", self.origin, "rev-parse", "main"), commit)
        # Each agent has the steps for its own work; both clones keep what their agents wrote.
        for handle, step in ((claude_work, "fix it in"), (codex_work, "jj resolve --list")):
            w = st.resolve_work(handle)
            body = json.dumps(st.inbox(st.work_recipient(w)["id"], peek=True))
            self.assertIn("sent back work %s" % handle, body)
            self.assertIn(step, body)
            self.assertIn("coord work integrate enqueue %s --into main" % handle, body)
        with open(os.path.join(works["claude-work"][1], "broken.txt")) as f:
            self.assertEqual(f.read(), "breaks\n")
        with open(os.path.join(works["codex-work"][1], "shared.txt")) as f:
            self.assertIn("two (codex)", f.read())
