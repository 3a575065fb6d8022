"""session.py against a real tmux server on a private socket per test.

Every tmux command here names the test's own socket (or a default socket inside the test's
temporary TMUX_TMPDIR), and cleanup kills only that server.
"""

import fcntl
import json
import os
import pty
import re
import shlex
import shutil
import struct
import subprocess
import sys
import termios
import time
import unittest
import uuid

import support
from support import CoordTestCase, retry_until

import session
import store

FAKE = os.path.join(support.FIXTURES, "fake_harness.py")


def _zombie(pid):
    try:
        with open("/proc/%s/stat" % pid) as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


class HarnessArgvTest(CoordTestCase):
    """Harness command configuration needs no tmux."""

    def test_defaults_are_plain_harness_names(self):
        env = {}
        self.assertEqual(session.harness_argv("claude", environ=env), ["claude"])
        self.assertEqual(session.harness_argv("codex", environ=env), ["codex"])

    def test_resume_argv_for_both_harnesses(self):
        env = {}
        self.assertEqual(session.harness_argv("claude", "conv-1", environ=env),
                         ["claude", "--resume", "conv-1"])
        self.assertEqual(session.harness_argv("codex", "conv-2", environ=env),
                         ["codex", "resume", "conv-2"])

    def test_qwen_resumes_by_session_id_and_takes_its_first_prompt_interactively(self):
        # Qwen Code 0.24.4: a positional prompt is one-shot (headless); -i/--prompt-interactive
        # keeps the session open after it
        env = {"COORD_QWEN_CMD": "/opt/qwen --model m"}
        self.assertEqual(session.harness_argv("qwen", "s-1", environ=env), ["/opt/qwen", "--model", "m", "--resume", "s-1"])
        self.assertEqual(session.harness_argv("qwen", prompt="-fix it", environ={}),
                         ["qwen", "--prompt-interactive=-fix it"])
    def test_pi_resumes_by_session_and_keeps_a_prompt_from_reading_as_an_option(self):
        # pi 0.73.1: `--` is read as a flag; a leading - or @ as an option or a file to attach
        env = {"COORD_PI_CMD": "/opt/p/pi"}
        self.assertEqual(session.harness_argv("pi", "01a2", environ=env), ["/opt/p/pi", "--session", "01a2"])
        self.assertEqual(session.harness_argv("pi", prompt="go", environ=env), ["/opt/p/pi", "go"])
        self.assertEqual(session.harness_argv("pi", prompt="-x @y", environ=env), ["/opt/p/pi", " -x @y"])
        self.assertEqual(session.reusable_args("pi", ["--model", "m", "-c", "--session", "s", "--fork", "f"]),
                         ["--model", "m"])

    def test_auggie_resumes_by_id_and_keeps_allow_indexing(self):
        # Auggie 0.36.0: `auggie [instruction] [options]`, -r/--resume [sessionId]
        env = {"COORD_AUGGIE_CMD": "/opt/a/auggie"}
        self.assertEqual(session.harness_argv("auggie", "c-1", extra=["--allow-indexing"], environ=env),
                         ["/opt/a/auggie", "--resume", "c-1", "--allow-indexing"])
        self.assertEqual(session.reusable_args("auggie", ["--allow-indexing", "-c", "-i", "x", "--resume", "r"]),
                         ["--allow-indexing"])

    def test_droid_resumes_by_id_and_takes_its_first_prompt_as_its_positional(self):
        # Factory Droid 0.225.2: `droid [options] [prompt...]`, -r/--resume [sessionId]
        env = {"COORD_DROID_CMD": "/opt/f/droid"}
        self.assertEqual(session.harness_argv("droid", "s-1", environ=env), ["/opt/f/droid", "--resume", "s-1"])
        self.assertEqual(session.harness_argv("droid", prompt="-go", environ=env), ["/opt/f/droid", "--", "-go"])
        self.assertEqual(session.reusable_args("droid", ["--auto", "high", "-r", "x", "--last", "--fork", "f"]),
                         ["--auto", "high"])

    def test_kilo_resumes_with_session_and_takes_its_prompt_as_an_option(self):
        # Kilo Code 7.7.7's TUI, as OpenCode's: `kilo [project]`, --prompt, --session ID
        env = {"COORD_KILO_CMD": "/opt/k/kilo"}
        self.assertEqual(session.harness_argv("kilo", "ses_1", environ=env), ["/opt/k/kilo", "--session", "ses_1"])
        self.assertEqual(session.harness_argv("kilo", extra=["-m", "a/b"], prompt="go", environ=env),
                         ["/opt/k/kilo", "-m", "a/b", "--prompt=go"])
        self.assertEqual(session.reusable_args("kilo", ["--model", "m", "-s", "s", "--cloud-fork", "--prompt", "p"]),
                         ["--model", "m"])

    def test_opencode_resumes_with_session_and_takes_its_prompt_as_an_option(self):
        # its TUI's positional is the project directory: a prompt there would be a path
        env = {"COORD_OPENCODE_CMD": "/opt/oc/opencode"}
        self.assertEqual(session.harness_argv("opencode", "ses_1", environ=env),
                         ["/opt/oc/opencode", "--session", "ses_1"])
        self.assertEqual(session.harness_argv("opencode", extra=["-m", "a/b"], prompt="-go", environ=env),
                         ["/opt/oc/opencode", "-m", "a/b", "--prompt=-go"])

    def test_configured_wrappers_are_shell_words(self):
        env = {"COORD_CLAUDE_CMD": "claude-direct --model 'big one'",
               "COORD_CODEX_CMD": "/opt/bin/codex-direct"}
        self.assertEqual(session.harness_argv("claude", "c1", extra=["-x"], environ=env),
                         ["claude-direct", "--model", "big one", "--resume", "c1", "-x"])
        self.assertEqual(session.harness_argv("codex", "c2", environ=env),
                         ["/opt/bin/codex-direct", "resume", "c2"])

    def test_bad_configuration_is_a_clear_error(self):
        with self.assertRaises(store.UsageError) as cm:
            session.harness_argv("claude", environ={"COORD_CLAUDE_CMD": "claude 'open"})
        self.assertIn("COORD_CLAUDE_CMD", cm.exception.message)
        with self.assertRaises(store.UsageError):
            session.harness_argv("aider", environ={})

    def test_gemini_resumes_by_session_id_and_takes_its_first_message_as_prompt_interactive(self):
        # Gemini CLI 0.61.0 ignores a query after `--`; --prompt-interactive=TEXT keeps a leading `-`.
        env = {"COORD_GEMINI_CMD": "/opt/gemini"}
        self.assertEqual(session.harness_argv("gemini", "9b1f", environ=env), ["/opt/gemini", "--resume", "9b1f"])
        self.assertEqual(session.harness_argv("gemini", extra=["-m", "x", "--", "y"], prompt="-do it", environ=env),
                         ["/opt/gemini", "--prompt-interactive=-do it", "-m", "x", "--", "y"])

    def test_window_name_is_short_task_and_four_id_characters(self):
        self.assertEqual(session.window_name("Cache audit: v2!", "9f3a77-xx"),
                         "cache-audit-v2-9f3a")
        self.assertEqual(session.window_name("", "abcd"), "work-abcd")

    def test_socket_resolution_order(self):
        tmpdir = os.path.realpath(self.tmp)
        env = {"TMUX_TMPDIR": self.tmp}
        uid = os.getuid()
        self.assertEqual(session.resolve_socket(environ=env),
                         os.path.join(tmpdir, "tmux-%d" % uid, "coord"))
        env["TMUX"] = "/x/tmux-0/outer,123,4"
        self.assertEqual(session.resolve_socket(environ=env), os.path.join(tmpdir, "tmux-%d" % uid, "coord"),
                         "never the server the caller runs in: its panes would stop being the person's")
        env["COORD_TMUX_SOCKET"] = "coordlabel"
        self.assertEqual(session.resolve_socket(environ=env),
                         os.path.join(tmpdir, "tmux-%d" % uid, "coordlabel"))
        env["COORD_TMUX_SOCKET"] = "/y/sock"
        self.assertEqual(session.resolve_socket(environ=env), "/y/sock")
        self.assertEqual(session.resolve_socket("/z/explicit", environ=env), "/z/explicit")


class TmuxTestCase(CoordTestCase):
    """A private tmux server per test, and a stand-in harness that records how it started."""

    def setUp(self):
        super().setUp()
        self.tmux_bin = support.require_tool(self, "tmux")
        os.environ.pop("COORD_TMUX_SOCKET", None)
        # Even a call that forgot its socket would land in this test's directory.
        os.environ["TMUX_TMPDIR"] = self.tmp
        self.sock = os.path.join(self.tmp, "tmux.sock")
        self.addCleanup(self.kill_server, self.sock)
        self.rec = os.path.join(self.tmp, "rec")
        os.makedirs(self.rec)
        self.work_dir = os.path.join(self.tmp, "clone")
        os.makedirs(self.work_dir)
        os.environ["COORD_CLAUDE_CMD"] = shlex.join([sys.executable, FAKE, "--record", self.rec])
        os.environ["COORD_CODEX_CMD"] = shlex.join(
            [sys.executable, FAKE, "--record", self.rec, "--codex-wrapper"])
        self.tmux = session.Tmux(self.sock)

    def kill_server(self, sock):
        """Kill the server on `sock` (only ever a socket of this test) and wait until it is gone."""
        def run(*args):
            return subprocess.run([self.tmux_bin, "-S", sock] + list(args),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, timeout=10)
        pid = run("display-message", "-p", "#{pid}").stdout.strip()
        run("kill-server")
        if pid.isdigit():
            retry_until(lambda: not os.path.exists("/proc/%s" % pid) or _zombie(pid))

    def t(self, *args):
        """Run a raw tmux command on the private server; return stdout."""
        return subprocess.run(["tmux", "-S", self.sock] + list(args), check=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=10).stdout

    def launch(self, work_id=None, harness="claude", conversation=None, extra=(), env=None,
               **kw):
        work_id = work_id or str(uuid.uuid4())
        kw.setdefault("project", "test-project")
        kw.setdefault("task", "cache audit")
        kw.setdefault("socket", self.sock)
        kw.setdefault("cwd", self.work_dir)
        full_env = {"COORD_WORK_ID": work_id, "COORD_DB": self.db,
                    "COORD_PROJECT_ID": kw["project"]}
        full_env.update(env or {})
        return session.launch(
            work_id=work_id, argv=session.harness_argv(harness, conversation, extra),
            env=full_env, conversation=conversation, harness=harness, **kw)

    def seen(self, record_or_pid, suffix=".json"):
        """What the stand-in harness recorded about itself (waits for it)."""
        pid = record_or_pid if isinstance(record_or_pid, int) else record_or_pid["pane_pid"]
        path = os.path.join(self.rec, "%d%s" % (pid, suffix))
        retry_until(lambda: os.path.exists(path), timeout=20)
        with open(path) as fh:
            return json.load(fh)

    def windows(self):
        try:
            out = self.t("list-windows", "-a", "-F", "#{window_id}")
        except subprocess.CalledProcessError:
            return set()  # the server exited with its last window
        return set(out.split())

    def option(self, flag, target, name):
        args = ["show-options"] + ([flag] if flag else []) + ["-v", "-t", target, name]
        return self.t(*args).rstrip("\n")

    def attach_client(self, target):
        """A real tmux client on a pty attached to `target`; returns its client name."""
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        env = dict(os.environ, TERM="xterm")
        env.pop("TMUX", None)
        proc = subprocess.Popen(["tmux", "-S", self.sock, "attach-session", "-t", target],
                                stdin=slave, stdout=slave, stderr=slave, env=env,
                                start_new_session=True)
        os.close(slave)
        drain = support.PtyDrain(master)

        def stop():
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
            drain.stop()
            os.close(master)
        self.addCleanup(stop)
        return retry_until(lambda: next(
            (c for c, _ in self.tmux.clients() if self.client_pid(c) == proc.pid), None))

    def client_pid(self, name):
        out = self.t("list-clients", "-F", "#{client_name}\t#{client_pid}")
        for line in out.splitlines():
            n, pid = line.split("\t")
            if n == name:
                return int(pid)
        return None

    def client_where(self, name):
        out = self.t("list-clients", "-F", "#{client_name}\t#{session_id}\t#{pane_id}")
        for line in out.splitlines():
            n, sid, pid = line.split("\t")
            if n == name:
                return sid, pid
        return None


class LaunchTest(TmuxTestCase):

    def test_launch_returns_ids_and_labels_every_level(self):
        work = "9f3a" + str(uuid.uuid4())[4:]
        rec = self.launch(work_id=work, conversation="conv-1")
        self.assertRegex(rec["session_id"], r"^\$\d+$")
        self.assertRegex(rec["window_id"], r"^@\d+$")
        self.assertRegex(rec["pane_id"], r"^%\d+$")
        self.assertEqual(rec["socket"], self.sock)
        self.assertEqual(rec["server_pid"], int(self.t("display-message", "-p", "#{pid}")))
        self.assertEqual(self.seen(rec)["pid"], rec["pane_pid"])
        for flag, target in ((None, rec["session_id"]), ("-w", rec["window_id"]),
                             ("-p", rec["pane_id"])):
            self.assertEqual(self.option(flag, target, "@coord-project"), "test-project")
            self.assertEqual(self.option(flag, target, "@coord-work"), work)
            self.assertEqual(self.option(flag, target, "@coord-conversation"), "conv-1")
        name = self.t("list-windows", "-t", rec["window_id"], "-F", "#{window_id} #{window_name}")
        self.assertIn("%s cache-audit-9f3a" % rec["window_id"], name.splitlines())
        self.assertEqual(rec["window_name"], "cache-audit-9f3a")
        self.assertEqual(self.option("-w", rec["window_id"], "automatic-rename"), "off")
        self.assertEqual(self.option("-w", rec["window_id"], "allow-rename"), "off")

    def test_renaming_stays_off_even_when_the_server_allows_it(self):
        self.launch()
        self.t("set-option", "-g", "allow-rename", "on")
        self.t("set-option", "-g", "-w", "automatic-rename", "on")
        rec = self.launch()
        self.assertEqual(self.option("-w", rec["window_id"], "automatic-rename"), "off")
        self.assertEqual(self.option("-w", rec["window_id"], "allow-rename"), "off")

    def test_harness_gets_environment_cwd_and_resume_argv(self):
        rec = self.launch(conversation="conv-7", extra=["--flag"],
                          env={"EXTRA_VAR": "two words"})
        seen = self.seen(rec)
        self.assertEqual(seen["args"], ["--resume", "conv-7", "--flag"])
        self.assertEqual(seen["env"]["COORD_WORK_ID"], rec["work_id"])
        self.assertEqual(seen["env"]["COORD_DB"], self.db)
        self.assertEqual(seen["env"]["COORD_PROJECT_ID"], "test-project")
        self.assertEqual(seen["env"]["EXTRA_VAR"], "two words")
        self.assertEqual(seen["env"]["TMUX_PANE"], rec["pane_id"])
        self.assertEqual(os.path.realpath(seen["cwd"]), os.path.realpath(self.work_dir))

    def test_codex_resume_through_configured_wrapper(self):
        rec = self.launch(harness="codex", conversation="thread-9")
        self.assertEqual(self.seen(rec)["args"], ["--codex-wrapper", "resume", "thread-9"])

    def test_leaked_identity_never_reaches_the_harness(self):
        # The caller's own identity and git variables, and a server whose global
        # environment carries another agent's runtime.
        os.environ.update({"COORD_RUNTIME_ID": "caller-runtime", "GIT_DIR": "/nope/.git",
                           "CLAUDE_CODE_SESSION_ID": "caller-conv"})
        first = self.launch()
        self.t("set-environment", "-g", "CODEX_THREAD_ID", "other-agent")
        second = self.launch()
        for rec in (first, second):
            env = self.seen(rec)["env"]
            for name in ("COORD_RUNTIME_ID", "GIT_DIR", "CLAUDE_CODE_SESSION_ID",
                         "CODEX_THREAD_ID"):
                self.assertNotIn(name, env)

    def test_values_ending_in_semicolon_and_cwd_with_hash_survive(self):
        odd = os.path.join(self.tmp, "dir##x")
        os.makedirs(odd)
        rec = self.launch(project="proj;", extra=["x;", ";"], cwd=odd)
        seen = self.seen(rec)
        self.assertEqual(seen["args"], ["x;", ";"])
        self.assertEqual(os.path.realpath(seen["cwd"]), os.path.realpath(odd))
        self.assertEqual(self.option("-w", rec["window_id"], "@coord-project"), "proj;")
        self.assertIsNone(session.problem(rec))

    def test_missing_cwd_is_refused_before_tmux_runs(self):
        with self.assertRaises(store.Refused):
            self.launch(cwd=os.path.join(self.tmp, "gone"))
        self.assertFalse(os.path.exists(self.sock))

    def test_missing_harness_cli_is_an_environment_error_before_tmux_runs(self):
        os.environ["COORD_CLAUDE_CMD"] = "coord-test-no-such-harness --flag"
        with self.assertRaises(store.EnvError) as cm:
            self.launch()
        self.assertIn("coord-test-no-such-harness not found", cm.exception.message)
        self.assertIn("COORD_CLAUDE_CMD", cm.exception.hint)
        self.assertFalse(os.path.exists(self.sock))

    def test_relaunch_reuses_recorded_session_when_it_is_this_projects(self):
        first = self.launch()
        again = self.launch(work_id=first["work_id"], previous=first)
        self.assertEqual(again["session_id"], first["session_id"])
        self.assertNotEqual(again["window_id"], first["window_id"])

    def test_relaunch_opens_new_session_when_recorded_one_is_gone_or_foreign(self):
        first = self.launch()
        self.t("set-option", "-t", first["session_id"], "@coord-project", "other")
        foreign = self.launch(work_id=first["work_id"], previous=first)
        self.assertNotEqual(foreign["session_id"], first["session_id"])
        self.t("kill-session", "-t", foreign["session_id"])
        gone = self.launch(work_id=first["work_id"], previous=foreign)
        self.assertNotIn(gone["session_id"], (first["session_id"], foreign["session_id"]))

    def test_same_task_twice_gets_a_numbered_session(self):
        work = str(uuid.uuid4())
        a = self.launch(work_id=work)
        b = self.launch(work_id=work)
        self.assertNotEqual(a["session_id"], b["session_id"])
        self.assertEqual(a["window_name"], b["window_name"])

    def test_default_socket_matches_what_tmux_reports(self):
        # `tmux -L coord`: tmux puts the label's socket inside this test's TMUX_TMPDIR.
        expected = session.resolve_socket(environ=dict(os.environ))
        self.addCleanup(self.kill_server, expected)
        env = session.client_env()
        subprocess.run(["tmux", "-L", session.AGENTS_LABEL, "new-session", "-d", "sleep", "60"], env=env, check=True,
                       timeout=10)
        out = subprocess.run(["tmux", "-L", session.AGENTS_LABEL, "display-message", "-p", "#{socket_path}"], env=env,
                             check=True, stdout=subprocess.PIPE, text=True, timeout=10)
        self.assertEqual(out.stdout.strip(), expected)
        self.assertTrue(expected.startswith(os.path.realpath(self.tmp)))

    def test_tmux_errors_are_typed(self):
        self.launch()
        with self.assertRaises(session.TmuxError) as cm:
            self.tmux.run("kill-window", "-t", "@999")
        self.assertEqual(cm.exception.returncode, 1)
        self.assertIn("@999", cm.exception.stderr)
        self.assertEqual(cm.exception.argv[:3], ["tmux", "-S", self.sock])
        self.assertIsInstance(cm.exception, store.EnvError)  # one error family: exit 4 with a hint
        self.assertEqual(cm.exception.exit_code, 4)
        self.assertTrue(cm.exception.hint)

    def test_missing_tmux_binary_says_install_tmux(self):
        empty = os.path.join(self.tmp, "empty-bin")
        os.makedirs(empty)
        os.environ["PATH"] = empty
        with self.assertRaises(session.TmuxNotFound) as cm:
            self.tmux.run("list-sessions")
        self.assertEqual(cm.exception.message, "tmux not found: install tmux")
        self.assertIsInstance(cm.exception, store.EnvError)
        self.assertIn("install tmux", cm.exception.hint)


class ValidateTest(TmuxTestCase):

    def test_fresh_record_validates(self):
        rec = self.launch()
        live = session.validate(rec)
        self.assertEqual(live["panes"], [rec["pane_id"]])
        self.assertEqual(live["sessions"], [rec["session_id"]])
        self.assertFalse(live["dead"])

    def test_renamed_window_still_validates_because_names_are_presentation(self):
        rec = self.launch()
        self.t("rename-window", "-t", rec["window_id"], "someone-else")
        self.assertIsNone(session.problem(rec))

    def test_relabelled_window_is_refused(self):
        rec = self.launch()
        self.t("set-option", "-w", "-t", rec["window_id"], "@coord-work", "another-work")
        with self.assertRaises(store.Refused) as cm:
            session.validate(rec)
        self.assertIn("another-work", cm.exception.message)
        self.t("set-option", "-w", "-u", "-t", rec["window_id"], "@coord-work")
        self.assertIn("not this work", session.problem(rec))

    def test_replaced_pane_is_refused(self):
        rec = self.launch()
        self.seen(rec)
        self.t("respawn-pane", "-k", "-t", rec["pane_id"], "sleep", "60")
        self.assertIn("replaced", session.problem(rec))

    def test_pane_moved_out_of_window_is_refused(self):
        rec = self.launch()
        self.t("split-window", "-d", "-t", rec["window_id"], "sleep", "60")
        self.t("break-pane", "-d", "-s", rec["pane_id"])
        self.assertIn("no longer in window", session.problem(rec))

    def test_closed_window_is_refused(self):
        rec = self.launch()
        other = self.launch()  # keeps the server alive
        self.t("kill-window", "-t", rec["window_id"])
        self.assertIn("no longer exists", session.problem(rec))
        self.assertIsNone(session.problem(other))

    def test_restarted_server_with_reused_ids_is_refused(self):
        rec = self.launch()
        self.kill_server(self.sock)
        # A fresh server hands out the same IDs again, here even with our labels.
        again = self.launch(work_id=rec["work_id"])
        self.assertEqual(again["window_id"], rec["window_id"])
        self.assertIn("restarted", session.problem(rec))

    def test_no_server_is_refused(self):
        rec = self.launch()
        self.kill_server(self.sock)
        self.assertIn("not running", session.problem(rec))

    def test_dead_pane_kept_by_remain_on_exit_is_reported(self):
        rec = self.launch()
        self.t("set-option", "-w", "-t", rec["window_id"], "remain-on-exit", "on")
        self.seen(rec)
        os.kill(rec["pane_pid"], 15)
        live = retry_until(lambda: (lambda v: v if v["dead"] else None)(session.validate(rec)))
        self.assertTrue(live["dead"])
        session.close(rec, caller_pane=None)
        self.assertNotIn(rec["window_id"], self.windows())


class AttachTest(TmuxTestCase):

    def test_attach_command_outside_and_inside(self):
        rec = self.launch()
        self.assertEqual(session.attach_command(rec, inside_tmux=False, environ={}),
                         ["tmux", "-S", self.sock, "attach-session", "-t", rec["pane_id"]])
        self.assertEqual(session.attach_command(rec, inside_tmux=True, environ={}),
                         ["tmux", "-S", self.sock, "switch-client", "-t", rec["pane_id"]])
        inside = {"TMUX": "%s,1,0" % self.sock}
        other = {"TMUX": "/elsewhere/sock,1,0"}
        self.assertEqual(session.attach_command(rec, environ=inside)[3], "switch-client")
        self.assertEqual(session.attach_command(rec, environ=other)[3], "attach-session")
        self.assertEqual(session.attach_command(rec, environ={})[3], "attach-session")

    def test_the_attach_command_works_from_a_pane_of_another_tmux_server(self):
        """The person's own tmux is not coord's (agents run in `-L coord`): the printed command,
        typed in a pane of the person's server, attaches a nested client to coord's (tmux 3.3a
        refuses to nest only a client whose terminal is one of its own panes)."""
        import shlex
        rec = self.launch()
        own = os.path.join(self.tmp, "own.sock")
        self.addCleanup(self.kill_server, own)
        argv = session.attach_command(rec, environ={"TMUX": "%s,1,0" % own})
        subprocess.run(["tmux", "-S", own, "new-session", "-d", "-x", "80", "-y", "24",
                        " ".join(shlex.quote(a) for a in argv)], check=True, timeout=30)
        clients = support.retry_until(lambda: subprocess.run(
            ["tmux", "-S", self.sock, "list-clients", "-F", "#{client_tty}"], stdout=subprocess.PIPE,
            text=True, timeout=10).stdout.strip(), timeout=30)
        self.assertTrue(clients, "a client of the person's server attached to coord's")

    def test_attach_command_lands_on_the_recorded_pane(self):
        rec = self.launch()
        self.t("new-window", "-d", "-t", rec["session_id"], "sleep", "60")
        self.t("select-window", "-t", rec["session_id"] + ":" + "^")
        client = self.attach_client(session.attach_command(rec, inside_tmux=False)[-1])
        self.assertEqual(self.client_where(client), (rec["session_id"], rec["pane_id"]))

    def test_attach_from_inside_switches_the_operators_client(self):
        target = self.launch()
        here = self.launch(env={"FAKE_ACTION": "attach",
                                "FAKE_RECORD": os.path.join(self.tmp, "target.json")})
        client = self.attach_client(here["pane_id"])
        self.assertEqual(self.client_where(client)[1], here["pane_id"])
        with open(os.path.join(self.tmp, "target.json.tmp"), "w") as fh:  # atomically: the stand-in polls
            json.dump(target, fh)
        os.replace(os.path.join(self.tmp, "target.json.tmp"), os.path.join(self.tmp, "target.json"))
        result = self.seen(here, ".action.json")
        self.assertEqual(result, {"ok": 0})
        self.assertEqual(self.client_where(client), (target["session_id"], target["pane_id"]))

    def test_attach_refuses_a_stale_record(self):
        rec = self.launch()
        self.launch()
        self.t("kill-window", "-t", rec["window_id"])
        with self.assertRaises(store.Refused):
            session.attach(rec)


class CloseTest(TmuxTestCase):

    def test_close_kills_exactly_the_window_despite_equal_names(self):
        work = str(uuid.uuid4())
        a = self.launch(work_id=work)
        b = self.launch(work_id=work[:4] + str(uuid.uuid4())[4:], previous=a)
        self.assertEqual(a["window_name"], b["window_name"])
        decoy = self.t("new-window", "-d", "-P", "-F", "#{window_id}", "-t", a["session_id"],
                       "-n", a["window_name"], "sleep", "60").strip()
        before = self.windows()
        result = session.close(a, caller_pane=None)
        self.assertEqual(result["window_id"], a["window_id"])
        self.assertEqual(self.windows(), before - {a["window_id"]})
        self.assertIn(decoy, self.windows())
        self.assertIsNone(session.problem(b))

    def test_close_refuses_caller_pane_inside_window(self):
        rec = self.launch()
        self.launch()
        self.t("split-window", "-d", "-t", rec["window_id"], "sleep", "60")
        other_pane = [p for p in self.t("list-panes", "-t", rec["window_id"], "-F",
                                        "#{pane_id}").split() if p != rec["pane_id"]][0]
        for pane in (rec["pane_id"], other_pane):
            with self.assertRaises(store.Refused) as cm:
                session.close(rec, caller_pane=pane, caller_socket=self.sock)
            self.assertIn("from inside", cm.exception.message)
        self.assertIn(rec["window_id"], self.windows())
        # The same pane ID on another server is not this window.
        session.close(rec, caller_pane=rec["pane_id"], caller_socket="/other/server")
        self.assertNotIn(rec["window_id"], self.windows())

    def test_close_from_a_process_in_the_window_is_refused(self):
        for drop_tmux in ("", "1"):
            record_file = os.path.join(self.tmp, "self%s.json" % drop_tmux)
            rec = self.launch(env={"FAKE_ACTION": "close", "FAKE_RECORD": record_file,
                                   "FAKE_DROP_TMUX": drop_tmux})
            with open(record_file + ".tmp", "w") as fh:  # atomically: the stand-in polls for it
                json.dump(rec, fh)
            os.replace(record_file + ".tmp", record_file)
            result = self.seen(rec, ".action.json")
            self.assertEqual(result.get("type"), "Refused", result)
            self.assertIn(rec["window_id"], self.windows())

    def test_close_switches_attached_client_off_the_last_window(self):
        a = self.launch()
        b = self.launch()  # another session of the same project
        self.t("new-session", "-d", "sleep", "60")  # an unlabelled session is never chosen
        client = self.attach_client(a["pane_id"])
        result = session.close(a, caller_pane=None)
        self.assertEqual(result["switched"], [{"client": client, "session_id": b["session_id"]}])
        self.assertEqual(self.client_where(client)[0], b["session_id"])
        self.assertNotIn(a["window_id"], self.windows())

    def test_close_refuses_last_window_with_client_and_no_project_session(self):
        a = self.launch()
        self.launch(project="other-project")
        self.t("new-session", "-d", "sleep", "60")
        client = self.attach_client(a["pane_id"])
        with self.assertRaises(store.Refused) as cm:
            session.close(a, caller_pane=None)
        self.assertIn("last window", cm.exception.message)
        self.assertIn("detach-client", cm.exception.hint)
        self.assertIn(a["window_id"], self.windows())
        self.assertEqual(self.client_where(client)[0], a["session_id"])

    def test_close_leaves_client_alone_when_session_keeps_other_windows(self):
        a = self.launch()
        b = self.launch(previous=a)
        client = self.attach_client(a["pane_id"])
        result = session.close(a, caller_pane=None)
        self.assertEqual(result["switched"], [])
        self.assertEqual(self.client_where(client), (a["session_id"], b["pane_id"]))

    def test_close_refuses_a_stale_record(self):
        rec = self.launch()
        self.launch()
        self.t("respawn-pane", "-k", "-t", rec["pane_id"], "sleep", "60")
        with self.assertRaises(store.Refused):
            session.close(rec, caller_pane=None)
        self.assertIn(rec["window_id"], self.windows())


class ReusableArgsTest(CoordTestCase):
    """What `work resume` reuses of a start's harness arguments: all but a first message and the
    choice of session, in each form the CLIs take them."""

    def test_one_shot_arguments_are_left_out(self):
        self.assertEqual(session.reusable_args("copilot", ["--allow-all-tools", "-i", "do it", "--model", "m",
                                                           "--interactive=again", "--resume", "--continue"]),
                         ["--allow-all-tools", "--model", "m"])
        self.assertEqual(session.reusable_args("gemini", ["--approval-mode", "yolo", "--prompt-interactive=x",
                                                          "-p", "y", "--", "query"]), ["--approval-mode", "yolo"])
        self.assertEqual(session.reusable_args("qwen", ["--approval-mode=auto-edit", "-r", "--yolo", "-c"]),
                         ["--approval-mode=auto-edit", "--yolo"])
        self.assertEqual(session.reusable_args("claude", ["-r", "abc", "--permission-mode", "plan", "--resume",
                                                          "--verbose"]), ["--permission-mode", "plan", "--verbose"])
        self.assertEqual(session.reusable_args("codex", ["--model", "gpt-5.5", "-c", "x=1", "--", "-prompt"]),
                         ["--model", "gpt-5.5", "-c", "x=1"])
        self.assertEqual(session.reusable_args("opencode", ["--model", "m", "--session", "s", "--prompt", "p"]),
                         ["--model", "m"])
        self.assertEqual(session.reusable_args("shell", ["-l"]), ["-l"])


class PromptArgvTest(CoordTestCase):
    """The initial prompt is the harness's last positional, after a `--` (no tmux needed)."""

    def test_prompt_follows_the_extra_arguments_after_a_separator(self):
        for harness in ("claude", "codex"):
            self.assertEqual(session.harness_argv(harness, extra=["--model", "m"], environ={}, prompt="review"),
                             [harness, "--model", "m", "--", "review"])

    def test_copilot_takes_its_prompt_and_conversation_as_option_values(self):
        # Copilot CLI 1.0.102 has no positional prompt; `--resume` takes an optional value.
        self.assertEqual(session.harness_argv("copilot", "c-1", extra=["--model", "m"], environ={}, prompt="-go"),
                         ["copilot", "--resume=c-1", "--model", "m", "--interactive=-go"])
        self.assertEqual(session.harness_argv("copilot", environ={"COORD_COPILOT_CMD": "/opt/copilot --yolo"}),
                         ["/opt/copilot", "--yolo"])

    def test_a_shell_agent_runs_its_command_and_takes_no_prompt_or_conversation(self):
        self.assertEqual(session.harness_argv("shell", extra=["-x"], environ={"SHELL": "/bin/bash"}), ["/bin/bash", "-x"])
        self.assertEqual(session.harness_argv("shell", environ={"COORD_SHELL_CMD": "aider --no-git", "SHELL": "/x"}),
                         ["aider", "--no-git"])
        for kw in ({"prompt": "go"}, {"conversation": "c"}):
            with self.assertRaises(store.UsageError):
                session.harness_argv("shell", environ={}, **kw)

    def test_a_separator_in_the_extra_arguments_is_not_repeated(self):
        self.assertEqual(session.harness_argv("codex", extra=["--", "x"], environ={}, prompt="-p"),
                         ["codex", "--", "x", "-p"])


HOOK_HARNESS = os.path.join(support.FIXTURES, "hook_harness.py")


class HarnessLabelTest(TmuxTestCase):
    """@coord-runtime and @coord-conversation land on the launched window and pane when the
    harness registers (its SessionStart hook), from inside the pane."""

    def test_label_harness_sets_both_options_on_window_and_pane(self):
        rec = self.launch()
        session.label_harness(rec, "rt-1", "conv-1")
        for flag, target in (("-w", rec["window_id"]), ("-p", rec["pane_id"])):
            self.assertEqual(self.option(flag, target, "@coord-runtime"), "rt-1")
            self.assertEqual(self.option(flag, target, "@coord-conversation"), "conv-1")
        session.validate(rec)

    def start_hook_harness(self, env=None):
        """Launch the stand-in in a window of a recorded work; fire its SessionStart; -> (record, reply)."""
        st = store.Store(self.db)
        self.addCleanup(st.close)
        wid = str(uuid.uuid4())
        with st.transaction():
            st.insert_work("labelled", "active", "token", path=self.work_dir, work_id=wid)
        go, out = os.path.join(self.tmp, "go"), os.path.join(self.tmp, "out")
        argv = [sys.executable, HOOK_HARNESS, go, out, "conv-labelled"]
        rec = session.launch("test-project", wid, self.work_dir, argv, env=dict(
            env or {}, COORD_WORK_ID=wid, COORD_DB=self.db, COORD_PROJECT_ID="test-project"), task="labelled",
            harness="claude", socket=self.sock)
        with st.transaction():
            st.update_work(wid, data={"tmux": rec})
        open(go, "w").close()
        retry_until(lambda: os.path.exists(out), timeout=30)
        with open(out) as f:
            reply = f.read()
        return rec, reply, st

    def test_session_start_in_the_pane_labels_it_with_runtime_and_conversation(self):
        rec, reply, st = self.start_hook_harness()
        self.assertIn("coord: you are", reply)
        rt = st.find_conversation_runtime("conv-labelled")
        for flag, target in (("-w", rec["window_id"]), ("-p", rec["pane_id"])):
            self.assertEqual(self.option(flag, target, "@coord-runtime"), rt["id"])
            self.assertEqual(self.option(flag, target, "@coord-conversation"), "conv-labelled")
        session.validate(rec)

    def test_without_tmux_naming_the_pane_nothing_is_labelled(self):
        rec, reply, st = self.start_hook_harness(env={"HOOK_DROP_TMUX": "1"})
        self.assertIn("coord: you are", reply)
        self.assertIsNotNone(st.find_conversation_runtime("conv-labelled"))
        self.assertEqual(self.t("show-options", "-w", "-t", rec["window_id"]).count("@coord-runtime"), 0)
class NudgeTest(TmuxTestCase):
    """nudge types one fixed line into a validated pane, and nothing into any other: not while
    the pane is in a tmux mode, and not after a person typed into its session since the agent's
    turn began (what they typed may still sit in the prompt)."""

    def screen(self, rec):
        return self.t("capture-pane", "-p", "-J", "-t", rec["pane_id"])

    # `since` is when the agent's turn began; tmux keeps activity in whole seconds (a new
    # session's creation included), so a turn "now" is given as beginning in the next second.

    def test_the_fixed_line_reaches_a_validated_pane_once(self):
        rec = self.launch()
        self.seen(rec)
        self.assertEqual(session.nudge(rec, time.time() + 1), rec["pane_id"])
        retry_until(lambda: session.NUDGE in self.screen(rec))
        self.assertEqual(self.screen(rec).count(session.NUDGE), 1)

    def test_a_pane_that_fails_validation_is_never_typed_into(self):
        rec = self.launch()
        self.seen(rec)
        self.t("set-option", "-w", "-t", rec["window_id"], "@coord-work", "another-work")
        with self.assertRaises(store.Refused):
            session.nudge(rec, time.time() + 1)
        moved = dict(rec, pane_pid=rec["pane_pid"] + 1)  # a record whose pane was replaced
        self.t("set-option", "-w", "-t", rec["window_id"], "@coord-work", rec["work_id"])
        with self.assertRaises(store.Refused):
            session.nudge(moved, time.time() + 1)
        # The terminal echoes in order: one nudge now shows once, so the refused ones typed nothing.
        session.nudge(rec, time.time() + 1)
        retry_until(lambda: session.NUDGE in self.screen(rec))
        self.assertEqual(self.screen(rec).count(session.NUDGE), 1)

    def test_a_shell_left_in_the_pane_is_never_typed_into(self):
        # The harness exited and what launched it left a shell at the prompt (here the "harness"
        # is that shell): the pane validates, but a nudge would run as a command.
        marker = os.path.join(self.tmp, "typed")
        os.environ["COORD_CLAUDE_CMD"] = "/bin/sh"
        rec = self.launch()
        retry_until(lambda: os.path.basename(self.t("display-message", "-p", "-t", rec["pane_id"],
                                                      "#{pane_current_command}").strip()) == "sh")
        with self.assertRaises(store.Refused) as cm:
            session.nudge(rec, time.time() + 1)
        self.assertIn("shows a sh prompt, not the agent", cm.exception.message)
        self.t("send-keys", "-t", rec["pane_id"], "-l", "touch %s" % marker)  # the shell does run what is typed
        self.t("send-keys", "-t", rec["pane_id"], "Enter")
        retry_until(lambda: os.path.exists(marker))
        self.assertNotIn(session.NUDGE, self.screen(rec))

    def test_half_typed_text_since_the_turn_began_is_never_submitted(self):
        rec = self.launch()
        self.seen(rec)
        began = time.time() - 5  # the agent's turn began before the person came to its pane
        person = support.TmuxClient(self, self.sock, rec["pane_id"])
        person.type("please do NOT touch the database, first")
        retry_until(lambda: "NOT touch the database" in self.screen(rec))
        with self.assertRaises(store.Refused) as cm:
            session.nudge(rec, began)
        self.assertIn("someone typed into tmux session", cm.exception.message)
        self.assertNotIn(session.NUDGE, self.screen(rec))
        # A turn that began after that typing (its prompt was submitted since) may be nudged.
        session.nudge(rec, time.time() + 1)
        retry_until(lambda: session.NUDGE in self.screen(rec))

    def test_a_turn_that_began_in_the_second_its_window_opened_is_nudged(self):
        # tmux counts a session's creation as activity, in whole seconds: a harness that started
        # and began its turn within that second looked typed into (2 e2e runs of 112 under load).
        # No client ever attached, so no key was typed: the clock does not matter.
        rec = self.launch()
        self.seen(rec)
        created = int(self.t("display-message", "-p", "-t", rec["pane_id"], "#{session_activity}").strip())
        self.assertEqual(session.nudge(rec, created + 0.5), rec["pane_id"])
        retry_until(lambda: session.NUDGE in self.screen(rec))

    def test_a_pane_in_copy_mode_is_never_typed_into(self):
        rec = self.launch()
        self.seen(rec)
        self.t("copy-mode", "-t", rec["pane_id"])
        with self.assertRaises(store.Refused) as cm:
            session.nudge(rec, time.time() + 1)
        self.assertIn("tmux mode", cm.exception.message)
        self.t("send-keys", "-t", rec["pane_id"], "-X", "cancel")
        session.nudge(rec, time.time() + 1)
        retry_until(lambda: session.NUDGE in self.screen(rec))

    def starting(self, env, taken=False):
        """A stand-in harness launched with `env` (FAKE_TTY_AFTER, FAKE_DROP_FOR: see
        fake_harness.py), with its terminal out of canonical mode when `taken`; -> (record, the
        file its keys go to)."""
        rec = self.launch(env=env)
        self.seen(rec)
        if taken:
            retry_until(lambda: session.reads_keys(self.t("display", "-p", "-t", rec["pane_id"],
                                                          "#{pane_tty}").strip()))
        return rec, os.path.join(self.rec, "%d.keys" % rec["pane_pid"])

    def assert_entered_once(self, keys):
        """The harness read the nudge's line and one Enter, nothing else."""
        retry_until(lambda: os.path.exists(keys) and open(keys).read().endswith("\n"))
        self.assertEqual(open(keys).read(), session.NUDGE + "\n")

    def ready_wait(self, seconds):
        self.addCleanup(setattr, session, "NUDGE_READY_WAIT", session.NUDGE_READY_WAIT)
        session.NUDGE_READY_WAIT = seconds

    def test_a_tui_still_starting_is_nudged_once_it_reads_keys(self):
        # A resumed harness's SessionStart can run before its TUI takes the terminal (Kilo Code
        # 7.7.7: 1.06 s before); keys typed in between are echoed, then dropped when it starts.
        rec, keys = self.starting({"FAKE_TTY_AFTER": "1.5"})
        self.assertEqual(session.nudge(rec, time.time() + 1), rec["pane_id"])
        self.assert_entered_once(keys)

    def test_a_line_the_tui_dropped_is_typed_again_and_entered_once_shown(self):
        # OpenCode 1.18.33 and Kilo Code 7.7.7 resuming a session take the terminal, then drop
        # keys until they have drawn it: Enter alone would have submitted an empty prompt.
        rec, keys = self.starting({"FAKE_DROP_FOR": "1.5"}, taken=True)
        self.assertEqual(session.nudge(rec, time.time() + 1), rec["pane_id"])
        self.assert_entered_once(keys)

    def test_a_line_that_never_shows_gets_no_enter_and_gives_the_prompt_back(self):
        rec, keys = self.starting({"FAKE_DROP_FOR": "600"}, taken=True)
        self.ready_wait(1.0)
        given_back = []
        with self.assertRaises(store.Refused) as cm:
            session.nudge(rec, time.time() + 1, claim=lambda: True, unclaim=lambda: given_back.append(1))
        self.assertIn("never showed there, so Enter was not pressed", cm.exception.message)
        self.assertEqual(given_back, [1])
        self.assertFalse(os.path.exists(keys))

    def test_a_terminal_that_stays_line_buffered_is_never_typed_into(self):
        rec, _ = self.starting({"FAKE_TTY": "cooked"})
        self.ready_wait(0.5)
        with self.assertRaises(store.Refused) as cm:
            session.nudge(rec, time.time() + 1, claim=lambda: self.fail("claimed a nudge it could not type"))
        self.assertIn("does not read its terminal key by key: it is still starting", cm.exception.message)
        time.sleep(0.5)
        self.assertNotIn(session.NUDGE, self.screen(rec))

    def test_a_claim_lost_to_another_sender_types_nothing(self):
        rec = self.launch()
        self.seen(rec)
        with self.assertRaises(store.Refused) as cm:
            session.nudge(rec, time.time() + 1, claim=lambda: False)
        self.assertIn("another nudge", cm.exception.message)
        session.nudge(rec, time.time() + 1, claim=lambda: True)
        retry_until(lambda: session.NUDGE in self.screen(rec))
        self.assertEqual(self.screen(rec).count(session.NUDGE), 1)


if __name__ == "__main__":
    unittest.main()


class CodexNoDaemonTest(CoordTestCase):
    """Codex sessions launched by coord run their app-server in their own process (`--no-daemon`)
    when the CLI offers it, so each session's hooks see its own window's environment."""

    def fake_codex(self, help_text):
        path = os.path.join(self.tmp, "fake-codex-%d" % len(os.listdir(self.tmp)))
        with open(path, "w") as f:
            f.write("#!/bin/sh\ncat <<'EOF'\n%s\nEOF\n" % help_text)
        os.chmod(path, 0o755)
        return [path]

    def test_flag_goes_after_the_resume_words_and_before_the_prompt(self):
        env = {}
        self.assertEqual(session.harness_argv("codex", environ=env, no_daemon=True), ["codex", "--no-daemon"])
        self.assertEqual(session.harness_argv("codex", "c1", extra=["-m", "x"], environ=env, prompt="go",
                                              no_daemon=True),
                         ["codex", "resume", "c1", "--no-daemon", "-m", "x", "--", "go"])
        self.assertEqual(session.harness_argv("codex", extra=["--no-daemon"], environ=env, no_daemon=True),
                         ["codex", "--no-daemon"], "never twice")
        self.assertEqual(session.harness_argv("claude", environ=env, no_daemon=True), ["claude"])
        self.assertEqual(session.harness_argv("codex", environ=env), ["codex"])

    def test_offered_only_when_the_cli_lists_it(self):
        self.assertTrue(session.codex_offers_no_daemon(self.fake_codex(
            "Usage: codex [OPTIONS] [PROMPT]\n      --no-daemon\n          Run without the shared background server")))
        self.assertFalse(session.codex_offers_no_daemon(self.fake_codex("Usage: codex [OPTIONS] [PROMPT]")))
        self.assertFalse(session.codex_offers_no_daemon([os.path.join(self.tmp, "no-such-codex")]))


class TmuxRestraintTest(support.CoordTestCase):
    """What coord never asks of tmux, whoever else uses the server: it kills windows by their
    recorded ID only (never a session or the server, which hold other people's work), and reads
    state from tmux's own fields and coord's records, never by scraping a pane's screen: the one
    screen read is the nudge's, for its own typed line before it presses Enter."""

    FORBIDDEN = ("kill-server", "kill-session", "pipe-pane")

    def test_the_only_screen_read_is_the_nudge_s_own_line(self):
        import ast
        with open(os.path.join(support.ROOT, "session.py"), encoding="utf-8") as f:
            tree = ast.parse(f.read(), "session.py")
        readers = [fn.name for fn in tree.body if isinstance(fn, ast.FunctionDef)
                   for node in ast.walk(fn) if isinstance(node, ast.Constant) and node.value == "capture-pane"]
        self.assertEqual(readers, ["_type_until_shown"])

    def test_no_product_file_asks_tmux_for_these(self):
        import ast
        for name in ("coord", "store.py", "workspace.py", "land.py", "cleanup.py", "session.py", "hook.py", "trust.py", "install"):
            with open(os.path.join(support.ROOT, name), encoding="utf-8") as f:
                tree = ast.parse(f.read(), name)
            found = ["line %d: %r" % (node.lineno, node.value[:60]) for node in ast.walk(tree)
                     if isinstance(node, ast.Constant) and isinstance(node.value, str)
                     and any(word in node.value for word in self.FORBIDDEN + (() if name == "session.py"
                                                                               else ("capture-pane",)))]
            self.assertEqual(found, [], "%s asks tmux for what coord never does" % name)
