"""The resume wrappers bin/claude and bin/codex (installed as .coord/bin/claude, .coord/bin/codex).

Real processes only: a person's terminal on a pseudo-terminal (support.Terminal) runs the
wrapper in a managed clone made by the real `coord work create` (jj, git); the "real" CLI is a
stand-in script later on PATH that records its argv, environment, terminals and pid, can run
coord's real SessionStart hook as a harness would, prints fixed bytes and exits with a chosen
status.
"""

import json
import os
import shutil
import subprocess
import sys
import uuid

import support
from support import CoordTestCase

import store
import launch
import workspace

BIN = os.path.join(support.ROOT, "bin")
HOOK = os.path.join(support.ROOT, "hook.py")

STANDIN = r"""#!%(python)s
import json, os, subprocess, sys
name = os.path.basename(sys.argv[0])
log = os.environ["STANDIN_LOG"]
rec = {"name": name, "argv": sys.argv[1:], "pid": os.getpid(), "cwd": os.getcwd(),
       "tty": [os.isatty(0), os.isatty(1)],
       "env": {k: v for k, v in os.environ.items() if k.startswith("COORD_")}}
session = os.environ.get("STANDIN_SESSION")
if session:  # start up as a harness does: SessionStart hook, payload on stdin
    payload = {"session_id": session, "hook_event_name": "SessionStart", "cwd": os.getcwd(), "source": "startup"}
    p = subprocess.run([sys.executable, %(hook)r, "--harness", name], input=json.dumps(payload).encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    rec["hook"] = [p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")]
# numbered records, each complete before it is visible, none overwritten by a concurrent run
tmp = os.path.join(log, ".run-%%d" %% os.getpid())
with open(tmp, "w") as f:
    json.dump(rec, f)
i = 0
while True:
    try:
        os.link(tmp, os.path.join(log, "%%d.json" %% i))
        break
    except FileExistsError:
        i += 1
os.unlink(tmp)
sys.stdout.buffer.write(b"standin out\x00\xff\n" + " ".join(sys.argv[1:]).encode() + b"\n")
sys.stdout.flush()
sys.exit(int(os.environ.get("STANDIN_EXIT", "0")))
"""


class WrapperCase(CoordTestCase):
    """A canonical jj repository, a private scratch root, and stand-in `claude`/`codex` CLIs in
    a directory that PATH lists after the wrappers' own."""

    def setUp(self):
        super().setUp()
        self.use_jj()
        self.real_bin = os.path.join(self.tmp, "realbin")
        os.mkdir(self.real_bin)
        for name in ("claude", "codex"):
            path = os.path.join(self.real_bin, name)
            with open(path, "w") as f:
                f.write(STANDIN % {"python": os.path.realpath(sys.executable), "hook": HOOK})
            os.chmod(path, 0o755)
        self.log = os.path.join(self.tmp, "standin-log")
        os.mkdir(self.log)
        self.env.update({"STANDIN_LOG": self.log,
                         "PATH": os.pathsep.join([BIN, self.real_bin, os.environ.get("PATH", "")])})
        os.environ.update(self.env)
        self.canon = os.path.join(self.tmp, "canon")
        self.jj(self.tmp, "git", "init", "--colocate", self.canon)
        with open(os.path.join(self.canon, "README"), "w") as f:
            f.write("hello\n")
        self.jj(self.canon, "commit", "-m", "initial")
        self.jj(self.canon, "bookmark", "create", "main", "-r", "@-")

    def jj(self, cwd, *args):
        proc = subprocess.run(["jj", "--no-pager", "--color=never"] + list(args), cwd=cwd, env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc.stdout

    def terminal(self):
        """The person's terminal, in the canonical checkout."""
        return support.Terminal(self, self.env, self.canon)

    def create_in(self, term, task="wrapped"):
        """`work create` typed at the person's terminal; -> (handle, clone path)."""
        code, out = term.run("%s %s work create %s" % (sys.executable, support.COORD, task))
        self.assertEqual(code, 0, out)
        handle, path = [l for l in out.splitlines() if l.strip()][:2]
        return handle, path

    def runs(self):
        """The stand-in's recorded runs, in order."""
        out = []
        names = [n for n in os.listdir(self.log) if n.endswith(".json")]
        for name in sorted(names, key=lambda n: int(n[:-5])):
            with open(os.path.join(self.log, name)) as f:
                out.append(json.load(f))
        return out

    def record(self, handle):
        return support.work_record(self.env, handle)  # `work inspect --json`'s record, read in process

    def events(self, handle, event):
        wid = self.record(handle)["id"]
        rows = [json.loads(l) for l in self.coord("audit", check=0).stdout.splitlines()]
        return [r for r in rows if r["event"] == event and r["subject"] == wid]


class InteractiveTest(WrapperCase):
    """Run at a terminal in a managed clone, a session is recorded in the work, then exec'd."""

    def test_claude_resume_is_recorded_and_forwarded(self):
        term = self.terminal()
        handle, path = self.create_in(term)
        conv = str(uuid.uuid4())
        code, out = term.run("cd %s && STANDIN_EXIT=3 claude --resume %s --model opus" % (path, conv))
        self.assertEqual(code, 3, out)
        self.assertIn("standin out", out)
        run, = self.runs()
        self.assertEqual(run["argv"], ["--resume", conv, "--model", "opus"])
        self.assertEqual(run["tty"], [True, True])
        w = self.record(handle)
        self.assertEqual(run["env"]["COORD_WORK_ID"], w["id"])
        self.assertEqual(run["env"]["COORD_PORT_BASE"], str(w["data"]["port_base"]))
        direct = w["data"]["direct"]
        self.assertEqual((direct["harness"], direct["kind"], direct["conversation"], direct["pid"]),
                         ("claude", "resume", conv, run["pid"]), "exec keeps the wrapper's pid")
        self.assertEqual(store.work_conversation(w), (conv, "claude"))
        self.assertIn("claude session from a terminal (resume wrapper): %s" % conv,
                      self.coord("work", "inspect", handle, check=0).stdout)
        self.assertEqual(len(self.events(handle, "work.direct")), 1)

    def test_work_resume_then_resumes_the_conversation_the_wrapper_recorded(self):
        tmux = support.require_tool(self, "tmux")
        sock = os.path.join(self.tmp, "tmux.sock")
        self.env.update({"COORD_TMUX_SOCKET": sock, "TMUX_TMPDIR": self.tmp,
                         "COORD_CODEX_CMD": os.path.join(self.real_bin, "codex")})
        self.addCleanup(subprocess.run, [tmux, "-S", sock, "kill-server"], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, timeout=10)
        term = self.terminal()
        handle, path = self.create_in(term)
        conv = str(uuid.uuid4())
        code, out = term.run("cd %s && codex resume %s" % (path, conv))
        self.assertEqual(code, 0, out)
        code, out = term.run("cd %s && %s %s work resume %s" % (self.canon, sys.executable, support.COORD, handle))
        self.assertEqual(code, 0, out)
        # (`work start`/`resume` also ask the Codex CLI for --help, to see whether it has --no-daemon)
        def sessions():
            runs = [r for r in self.runs() if r["argv"] != ["--help"]]
            return runs if len(runs) >= 2 else None
        runs = support.retry_until(sessions)
        # (a resumed Codex runs no hook until its first prompt, so work resume gives it one)
        self.assertEqual(runs[1]["argv"], ["resume", conv, "--", launch.RESUME_PROMPT])
        w = self.record(handle)
        self.assertEqual((w["state"], w["data"]["tmux"]["conversation"]), ("resumed", conv))
        self.assertNotIn("direct", w["data"], "the window coord launched is now the newest record")

    def test_fresh_codex_session_is_linked_by_its_session_start_hook(self):
        term = self.terminal()
        handle, path = self.create_in(term)
        conv = str(uuid.uuid4())
        code, out = term.run("cd %s && STANDIN_SESSION=%s codex -m gpt-x 'fix the parser'" % (path, conv))
        self.assertEqual(code, 0, out)
        run, = self.runs()
        self.assertEqual(run["argv"], ["-m", "gpt-x", "fix the parser"])
        self.assertEqual(run["hook"][0], 0, run["hook"])
        w = self.record(handle)
        direct = w["data"]["direct"]
        self.assertEqual((direct["harness"], direct["kind"], direct["conversation"]), ("codex", "start", conv))
        self.assertTrue(direct["runtime_id"])
        attached = self.events(handle, "work.attached")
        self.assertEqual([(e["runtime"], e["data"]["via"]) for e in attached], [(direct["runtime_id"], "wrapper")])
        # The agent so started is the work's harness: it may act on its work.
        agent = self.coord_json("hello", "--conversation", conv)["runtime"]
        self.coord("work", "gate", handle, "--pass", runtime=agent["id"], check=0)
        stranger = self.hello()["runtime"]
        self.assertEqual(self.coord("work", "gate", handle, "--pass", runtime=stranger["id"]).returncode, 3)

    def test_parked_and_archived_work_is_resumed_by_it(self):
        term = self.terminal()
        handle, path = self.create_in(term)
        code, out = term.run("%s %s work archive %s" % (sys.executable, support.COORD, handle))
        self.assertEqual(code, 0, out)
        self.assertEqual(self.record(handle)["state"], "archived")
        code, out = term.run("cd %s && codex resume --last" % path)
        self.assertEqual(code, 0, out)
        self.assertIn("was archived; it is resumed now", out)
        w = self.record(handle)
        self.assertEqual(w["state"], "resumed")
        self.assertEqual((w["data"]["direct"]["kind"], w["data"]["direct"]["conversation"]), ("resume", None))

    def test_someone_elses_work_is_not_recorded_but_still_runs(self):
        owner = self.hello()["runtime"]  # an agent's work, not this person's
        proc = self.coord("work", "create", "theirs", runtime=owner["id"], cwd=self.canon, check=0)
        handle, path = proc.stdout.splitlines()[:2]
        term = self.terminal()
        code, out = term.run("cd %s && STANDIN_EXIT=4 claude" % path)
        self.assertEqual(code, 4, out)
        self.assertIn("not recorded in the work", out)
        self.assertNotIn("direct", self.record(handle)["data"])
        self.assertNotIn("COORD_WORK_ID", self.runs()[0]["env"])

    def test_outside_a_clone_and_for_subcommands_nothing_is_recorded(self):
        term = self.terminal()
        handle, path = self.create_in(term)
        for line in ("claude --resume %s" % uuid.uuid4(),            # the shared checkout is no clone
                     "cd %s && claude mcp list" % path,              # a subcommand, not a session
                     "codex exec 'do it'",                           # automation at a terminal
                     "codex --help"):
            code, out = term.run(line)
            self.assertEqual(code, 0, (line, out))
        self.assertEqual([r["tty"] for r in self.runs()], [[True, True]] * 4)
        self.assertNotIn("direct", self.record(handle)["data"])
        self.assertEqual(self.events(handle, "work.direct"), [])


class AutomationTest(WrapperCase):
    """No terminal (pipes), or automation flags: the real CLI, same argv, status and stdout bytes."""

    def run_both(self, name, argv, cwd, status):
        """(wrapper's CompletedProcess, the stand-in's run directly) for the same argv and status."""
        env = dict(self.env, STANDIN_EXIT=str(status))
        via = subprocess.run([os.path.join(BIN, name)] + argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        direct = subprocess.run([os.path.join(self.real_bin, name)] + argv, cwd=cwd, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        return via, direct

    def test_pipes_go_straight_to_the_real_cli(self):
        term = self.terminal()
        handle, path = self.create_in(term)
        cases = [("claude", ["-p", "summarise", "--output-format", "json"], 0),
                 ("claude", ["--resume", str(uuid.uuid4())], 9),   # even a resume, without a terminal
                 ("codex", ["exec", "--json", "fix it"], 1),
                 ("codex", ["resume", str(uuid.uuid4())], 130)]
        for name, argv, status in cases:
            via, direct = self.run_both(name, argv, path, status)
            self.assertEqual(via.returncode, status, (name, argv, via.stderr))
            self.assertEqual(via.stdout, direct.stdout, (name, argv))
            self.assertEqual(via.stderr, b"", (name, argv))
        runs = self.runs()
        self.assertEqual([r["argv"] for r in runs], [a for _, a, _ in cases for _ in (0, 1)])
        self.assertEqual({tuple(r["tty"]) for r in runs}, {(False, False)})
        self.assertFalse(any("COORD_WORK_ID" in r["env"] for r in runs))
        self.assertNotIn("direct", self.record(handle)["data"])
        self.assertEqual(self.events(handle, "work.direct"), [])

    def test_a_terminal_with_stdout_redirected_is_automation(self):
        term = self.terminal()
        handle, path = self.create_in(term)
        out_file = os.path.join(self.tmp, "out.bin")
        code, _ = term.run("cd %s && STANDIN_EXIT=5 claude -p hello > %s" % (path, out_file))
        self.assertEqual(code, 5)
        with open(out_file, "rb") as f:
            self.assertEqual(f.read(), b"standin out\x00\xff\n-p hello\n")
        self.assertNotIn("direct", self.record(handle)["data"])


class FindingTheRealCliTest(WrapperCase):
    """The wrapper never runs itself: it takes the first CLI after its own PATH entry."""

    def test_copies_and_links_of_the_wrappers_on_path_still_reach_the_real_cli(self):
        copy = os.path.join(self.tmp, "copy", "bin")
        shutil.copytree(BIN, copy)
        link = os.path.join(self.tmp, "linked-bin")
        os.symlink(BIN, link)
        linked_file = os.path.join(self.tmp, "one")
        os.mkdir(linked_file)
        os.symlink(os.path.join(BIN, "codex"), os.path.join(linked_file, "codex"))
        path = os.pathsep.join([BIN, link, copy, linked_file, BIN, self.real_bin, os.environ.get("PATH", "")])
        for first in (os.path.join(BIN, "codex"), os.path.join(copy, "codex"), os.path.join(linked_file, "codex"),
                      "codex"):
            proc = subprocess.run([first, "exec", "x"], env=dict(self.env, PATH=path, STANDIN_EXIT="6"),
                                  cwd=self.tmp, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, timeout=60)
            self.assertEqual(proc.returncode, 6, (first, proc.stderr))
        self.assertEqual(len(self.runs()), 4)

    def test_no_real_cli_after_it_is_exit_127_with_a_message(self):
        proc = subprocess.run([os.path.join(BIN, "claude"), "-p", "x"],
                              env=dict(self.env, PATH=os.pathsep.join([self.real_bin, BIN])), cwd=self.tmp,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(proc.returncode, 127)
        self.assertEqual(proc.stdout, b"")
        self.assertIn(b"no claude on PATH after", proc.stderr)
        self.assertEqual(self.runs(), [])

    def test_the_two_wrappers_differ_only_in_their_name(self):
        with open(os.path.join(BIN, "claude")) as a, open(os.path.join(BIN, "codex")) as b:
            la, lb = a.read().splitlines(), b.read().splitlines()
        self.assertEqual([(x, y) for x, y in zip(la, lb) if x != y], [("name=claude", "name=codex")])
        self.assertEqual(len(la), len(lb))
        for name in ("claude", "codex"):
            self.assertTrue(os.access(os.path.join(BIN, name), os.X_OK))
            proc = subprocess.run(["sh", "-n", os.path.join(BIN, name)], stderr=subprocess.PIPE, timeout=10)
            self.assertEqual(proc.returncode, 0, proc.stderr)


class OtherDirectoryTest(WrapperCase):
    """The wrapper as ./install installs it (.coord/bin first on PATH, the installation committed):
    a session whose command line works somewhere else than the clone it was typed in (`codex -C
    OTHER`, a new worktree) is not that clone's session: nothing recorded, nothing exported."""

    def setUp(self):
        super().setUp()
        proc = subprocess.run(support.script_argv(os.path.join(support.ROOT, "install")) + [self.canon,
                               "--project-id", "test-project"], env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        import workspace
        proc = subprocess.run(workspace.commit_command(self.canon, environ=self.env), shell=True, env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.env["PATH"] = os.pathsep.join([os.path.join(self.canon, ".coord", "bin"), self.real_bin,
                                            os.environ.get("PATH", "").split(os.pathsep, 1)[-1]])
        os.environ.update(self.env)

    def create_in(self, term, task="wrapped"):
        code, out = term.run(".coord/coord work create %s" % task)
        self.assertEqual(code, 0, out)
        return [l for l in out.splitlines() if l.strip()][:2]

    def test_codex_cd_into_another_clone_is_not_recorded_in_either(self):
        term = self.terminal()
        a, a_path = self.create_in(term, "alpha")
        b, b_path = self.create_in(term, "beta")
        lines = ["cd %s && codex -C %s 'fix it'" % (a_path, b_path),
                 "cd %s && codex --cd=%s resume --last" % (a_path, b_path),
                 "cd %s && codex -C%s" % (a_path, self.canon),
                 "cd %s && codex --worktree" % a_path,
                 "cd %s && claude --worktree" % a_path,
                 "cd %s && claude -w topic" % a_path]
        for line in lines:
            code, out = term.run(line)
            self.assertEqual(code, 0, (line, out))
        runs = self.runs()
        self.assertEqual([os.path.basename(r["name"]) for r in runs], ["codex"] * 4 + ["claude"] * 2)
        for line, run in zip(lines, runs):
            self.assertNotIn("COORD_WORK_ID", run["env"], line)
            self.assertNotIn("COORD_PORT_BASE", run["env"], line)
        for handle in (a, b):
            self.assertNotIn("direct", self.record(handle)["data"])
            self.assertEqual(self.events(handle, "work.direct"), [])

    def test_codex_cd_within_the_same_clone_and_claude_add_dir_are_recorded(self):
        term = self.terminal()
        a, a_path = self.create_in(term, "alpha")
        os.mkdir(os.path.join(a_path, "sub"))
        code, out = term.run("cd %s && codex -C sub" % a_path)
        self.assertEqual(code, 0, out)
        w = self.record(a)
        self.assertEqual(self.runs()[0]["env"]["COORD_WORK_ID"], w["id"])
        self.assertEqual(w["data"]["direct"]["cwd"], os.path.join(os.path.realpath(a_path), "sub"))
        code, out = term.run("cd %s && claude --add-dir %s" % (a_path, self.canon))  # more access, same cwd
        self.assertEqual(code, 0, out)
        self.assertEqual(self.runs()[1]["env"]["COORD_WORK_ID"], w["id"])
        self.assertEqual(len(self.events(a, "work.direct")), 2)


class SessionArgvTest(CoordTestCase):
    """launch.wrapped_session: which command lines start, resume or fork a session."""

    def test_claude_and_codex_command_lines(self):
        import launch
        u = str(uuid.uuid4())
        cases = [
            ("claude", [], {"kind": "start", "conversation": None}),
            ("claude", ["fix it"], {"kind": "start", "conversation": None}),
            ("claude", ["--session-id", u], {"kind": "start", "conversation": u}),
            ("claude", ["--resume", u], {"kind": "resume", "conversation": u}),
            ("claude", ["-r", u, "--model", "x"], {"kind": "resume", "conversation": u}),
            ("claude", ["--resume=" + u], {"kind": "resume", "conversation": u}),
            ("claude", ["-r"], {"kind": "resume", "conversation": None}),
            ("claude", ["--continue"], {"kind": "resume", "conversation": None}),
            ("claude", ["--resume", u, "--fork-session"], {"kind": "fork", "conversation": None}),
            ("claude", ["-p", "x"], None), ("claude", ["--print"], None), ("claude", ["mcp", "list"], None),
            ("claude", ["--version"], None), ("claude", ["--", "-p"], {"kind": "start", "conversation": None}),
            ("codex", [], {"kind": "start", "conversation": None}),
            ("codex", ["-m", "exec", "prompt"], {"kind": "start", "conversation": None}),
            ("codex", ["resume", u], {"kind": "resume", "conversation": u}),
            ("codex", ["-c", "k=v", "resume", u], {"kind": "resume", "conversation": u}),
            ("codex", ["resume", "--last"], {"kind": "resume", "conversation": None}),
            ("codex", ["resume", "my-name"], {"kind": "resume", "conversation": None}),
            ("codex", ["fork", u], {"kind": "fork", "conversation": None}),
            ("codex", ["exec", "x"], None), ("codex", ["e", "x"], None), ("codex", ["review"], None),
            ("codex", ["-V"], None), ("codex", ["app-server"], None),
        ]
        for harness, argv, want in cases:
            self.assertEqual(launch.wrapped_session(harness, argv), want, (harness, argv))


if __name__ == "__main__":
    import unittest
    unittest.main()
