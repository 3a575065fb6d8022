"""The live view (view.py): `coord watch --once` and `status` show each agent's state from real
hook runs, in 100 columns; the notices come once per event, never as a storm, and only from the
person's own watch, with the person's command."""

import json
import os
import shlex
import subprocess
import sys
import unittest

import support
import store
import view

HOOK = os.path.join(support.ROOT, "hook.py")


class ViewCase(support.CoordTestCase):

    def setUp(self):
        super().setUp()
        self.repo = os.path.join(self.tmp, "repo")
        os.makedirs(self.repo)
        subprocess.run(["git", "init", "-q", self.repo], check=True, env=self.env)

    def event(self, conversation, event, harness="claude", **fields):
        """Run the real hook for one event of `conversation`, as its harness does."""
        payload = dict(fields, hook_event_name=event, session_id=conversation, cwd=self.repo)
        proc = support.run_hook(support.hook_argv(harness), payload,
                                dict(self.env, COORD_REPO_ROOT=self.repo), self.repo)
        self.assertEqual((proc.returncode, proc.stderr), (0, ""))

    def server(self, command, name="person"):
        tmux = support.require_tool(self, "tmux")
        sock = os.path.join(self.tmp, name + ".sock")
        env = {k: v for k, v in self.env.items() if k not in ("TMUX", "TMUX_PANE")}
        subprocess.run([tmux, "-S", sock, "-f", "/dev/null", "new-session", "-d", "-x", "100", "-y", "20",
                        "-c", self.repo, command], env=env, check=True, timeout=30)
        self.addCleanup(subprocess.run, [tmux, "-S", sock, "kill-server"], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, timeout=10)
        return tmux, sock

    def agents(self):
        """Three agents: one working in Bash, one waiting on a permission dialog, one idle."""
        out = {}
        for name, harness in (("busy", "claude"), ("asks", "codex"), ("rests", "claude")):
            conv = "%s-%d" % (name, os.getpid())
            out[name] = dict(self.coord_json("hello", "--conversation", conv, "--harness", harness,
                                             cwd=self.repo)["runtime"], conv=conv)
        self.event(out["busy"]["conv"], "UserPromptSubmit", prompt="go")
        self.event(out["busy"]["conv"], "PreToolUse", tool_name="Bash", tool_input={"command": "make test"})
        self.event(out["asks"]["conv"], "PermissionRequest", harness="codex", tool_name="Bash",
                   tool_input={"command": "touch X"})
        self.event(out["rests"]["conv"], "Stop")
        return out


class WatchOnceTest(ViewCase):

    def test_once_shows_each_agent_s_state_from_its_events_in_100_columns(self):
        agents = self.agents()
        text = self.coord("watch", "--once", cwd=self.repo, check=0).stdout
        lines = text.splitlines()
        self.assertTrue(all(len(l) <= 100 for l in lines), text)
        self.assertIn("1 waiting for you", lines[0])
        row = {name: next(l for l in lines if l.startswith(a["handle"][:20])) for name, a in agents.items()}
        self.assertIn("working Bash", row["busy"])
        self.assertIn("waiting Bash", row["asks"])
        self.assertIn("idle", row["rests"])
        self.assertNotIn("make test", text, "a tool's name, never its input")
        rows = {r["handle"]: r for r in self.coord_json("watch", "--once", cwd=self.repo)["rows"]}
        self.assertEqual([rows[a["handle"]]["state"] for a in agents.values()], ["working", "waiting", "idle"])

    def test_status_shows_the_same_states(self):
        agents = self.agents()
        reply = {a["handle"]: a for a in self.coord_json("status", cwd=self.repo)["agents"]}
        self.assertEqual([(reply[a["handle"]]["state"], reply[a["handle"]]["tool"]) for a in agents.values()],
                         [("working", "Bash"), ("waiting", "Bash"), ("idle", None)])

    def test_gemini_s_own_events_give_its_state_and_its_dialog_s_tool(self):
        # Gemini CLI 0.61.0's Notification names no tool; its dialog's title does (details.title).
        conv = "gemini-%d" % os.getpid()
        rt = self.coord_json("hello", "--conversation", conv, "--harness", "gemini", cwd=self.repo)["runtime"]

        def seen():
            row = next(a for a in self.coord_json("status", cwd=self.repo)["agents"] if a["id"] == rt["id"])
            return row["state"], row["tool"]
        self.event(conv, "BeforeAgent", harness="gemini", prompt="go")
        self.assertEqual(seen(), ("working", None))
        for title, tool in (("Confirm Write: w.txt", "Write"), ("Confirm Edit: src/a.py", "Edit"),
                            ("Confirm Shell Command", "Bash"), ("Confirm MCP Tool: x", None)):
            self.event(conv, "Notification", harness="gemini", notification_type="ToolPermission",
                       message="Tool %s requires editing" % title, details={"type": "edit", "title": title})
            self.assertEqual(seen(), ("waiting", tool), title)
        self.event(conv, "BeforeTool", harness="gemini", tool_name="write_file",
                   tool_input={"file_path": os.path.join(self.repo, "w.txt"), "content": "x"})
        self.assertEqual(seen(), ("working", "Write"))
        self.event(conv, "Notification", harness="gemini", notification_type="Other", message="hi", details={})
        self.assertEqual(seen(), ("working", "Write"), "only a permission dialog")
        self.event(conv, "AfterAgent", harness="gemini", prompt="go", prompt_response="done")
        self.assertEqual(seen(), ("idle", None))

    def test_the_view_wakes_on_a_hook_event_and_on_a_commit(self):
        st = self.open_project()
        w = view.Watcher(st, self.env, self.repo)
        self.assertTrue(w.due(0.0))
        w.read(0.0)
        self.assertFalse(w.due(0.1), "nothing changed: no read")
        rt = self.coord_json("hello", "--conversation", "wake-%d" % os.getpid(), cwd=self.repo)["runtime"]
        self.assertTrue(w.due(0.2), "another connection committed (data_version)")
        w.read(0.2)
        self.event("wake-%d" % os.getpid(), "PreToolUse", tool_name="Bash", tool_input={"command": "ls"})
        self.assertTrue(w.due(0.3), "a hook event that writes no record (the activity directory)")
        self.assertEqual(w.read(0.3)["agents"][0]["id"], rt["id"])
        self.assertTrue(w.due(0.3 + view.REDRAW_EVERY), "ages move on")

    def test_without_a_terminal_watch_says_how_to_get_one_frame(self):
        proc = self.coord("watch", cwd=self.repo)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("coord watch --once", proc.stderr)


class NoticesTest(ViewCase):
    """Notices.events and Notices.send with the person's command: one per event, shared by every
    watch of the user, at most NOTICE_BURST per window and the rest summed up in one."""

    def row(self, state, since=1.0, **kw):
        r = {"kind": "work", "handle": "amber-otter", "task": "fix the parser", "state": state, "since": since,
             "tool": None, "landing": "", "landing_state": None, "landing_at": None, "interrupted": False,
             "window": "@1", "work": "amber-otter", "agent": "blue-heron", "id": "w1"}
        r.update(kw)
        return r

    def notices(self, out):
        n = view.Notices(self.env, self.repo)
        n.command = "printf '%%s|%%s|%%s\\n' \"$COORD_NOTICE_KIND\" \"$COORD_NOTICE_WORK\" \"$COORD_NOTICE\" >> %s" \
            % shlex.quote(out)
        return n

    def lines(self, out, n):
        def read():
            try:
                with open(out) as f:
                    got = f.read().splitlines()
            except OSError:
                return None
            return got if len(got) >= n else None
        return support.retry_until(read, timeout=30)

    def test_each_change_is_one_event(self):
        ev = view.Notices.events
        self.assertEqual([e[1] for e in ev({"w1": self.row("working")}, {"w1": self.row("waiting", tool="Bash")})],
                         ["waiting"])
        self.assertEqual(ev({"w1": self.row("waiting")}, {"w1": self.row("waiting")}), [], "no change, no event")
        self.assertEqual([e[1] for e in ev({"w1": self.row("working")}, {"w1": self.row("idle", 2.0)})], ["idle"])
        self.assertEqual([e[1] for e in ev({"w1": self.row("working")}, {"w1": self.row("done", 2.0)})], ["done"])
        self.assertEqual([e[1] for e in ev({"w1": self.row("working")}, {"w1": self.row("gone", None)})], ["gone"])
        stopped = ev({"w1": self.row("working", landing_state="running")},
                     {"w1": self.row("working", landing_state="failed", landing_at=5.0)})
        self.assertEqual([e[1] for e in stopped], ["landing"])
        self.assertEqual(ev({}, {"w1": self.row("waiting")}), [], "a row seen for the first time is no event")

    def test_one_notice_per_event_across_watches_and_never_a_storm(self):
        out = os.path.join(self.tmp, "notices.txt")
        first, second = self.notices(out), self.notices(out)
        events = view.Notices.events({"w1": self.row("working")}, {"w1": self.row("waiting", tool="Bash")})
        self.assertEqual(len(first.send(events, now=100.0)), 1)
        self.assertEqual(second.send(events, now=100.0), [], "another watch saw the same event: not again")
        self.assertEqual(first.send(events, now=101.0), [], "the same watch reads it again: not again")
        self.assertEqual(self.lines(out, 1), ["waiting|amber-otter|coord: amber-otter (fix the parser) waits for "
                                              "you: it asks to run Bash"])
        many = []
        for i in range(8):
            many += view.Notices.events({"w%d" % i: self.row("working", id="w%d" % i)},
                                        {"w%d" % i: self.row("waiting", since=200.0 + i, id="w%d" % i)})
        self.assertEqual(len(first.send(many, now=200.0)), view.NOTICE_BURST, "a burst, then held")
        summed = first.send([], now=200.0 + view.NOTICE_WINDOW)
        self.assertEqual(len(summed), 1)
        self.assertTrue(summed[0].startswith("coord: %d more: " % (8 - view.NOTICE_BURST)), summed)
        got = self.lines(out, 2 + view.NOTICE_BURST)
        self.assertEqual(len(got), 2 + view.NOTICE_BURST, got)
        # each notice runs the person's command on its own: lines land in any order
        self.assertEqual([g for g in got if g.startswith("more||")][:1], [g for g in got if g.startswith("more||coord: 5 more: ")], got)
        self.assertEqual(sum(1 for g in got if g.startswith("more||")), 1, got)


class PersonNoticeTest(ViewCase):
    """The person's own watch sends the notices with the command the person configured in the
    shared checkout (`git config coord.notify`); an agent's watch sends none."""

    def test_the_person_s_watch_tells_them_once_when_an_agent_asks(self):
        out = os.path.join(self.tmp, "told.txt")
        subprocess.run(["git", "-C", self.repo, "config", "coord.notify",
                        "printf '%%s\\n' \"$COORD_NOTICE\" >> %s" % shlex.quote(out)], check=True, env=self.env)
        conv = "asks-%d" % os.getpid()
        rt = self.coord_json("hello", "--conversation", conv, "--harness", "claude", cwd=self.repo)["runtime"]
        self.event(conv, "UserPromptSubmit", prompt="go")
        term = support.Terminal(self, self.env, self.repo)
        os.write(term.fd, ("%s %s watch --notify-only\n" % (sys.executable, support.COORD)).encode())
        term._read_until(rb"notices on for 0 work and 1 agents", timeout=60)  # it read the fleet once
        self.event(conv, "PermissionRequest", tool_name="Bash", tool_input={"command": "touch X"})
        told = "coord: %s waits for you: it asks to run Bash" % rt["handle"]
        self.assertEqual(self.lines(out), [told])
        self.assertTrue(term._read_until(b"\x1b]9;" + told.encode() + b"\x07"), "OSC 9 on its own terminal")
        self.event(conv, "Stop")
        self.assertEqual(self.lines(out, 2), [told, "coord: %s finished its turn" % rt["handle"]])
        os.write(term.fd, b"\x03")  # Ctrl-C: the watch ends

    def lines(self, out, n=1):
        def read():
            try:
                with open(out) as f:
                    got = f.read().splitlines()
            except OSError:
                return None
            return got if len(got) >= n else None
        return support.retry_until(read, timeout=30)

    def test_an_agent_s_watch_sends_no_notice(self):
        proc = self.coord("watch", "--notify-only", cwd=self.repo, env={"CLAUDECODE": "1"})
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("notices are the person's", proc.stderr)
        text = self.coord("watch", "--once", cwd=self.repo, env={"CLAUDECODE": "1"}, check=0).stdout
        self.assertIn("coord watch", text)


class TmuxViewTest(ViewCase):
    """coord watch in a real tmux pane of the person's own server, read with capture-pane; and a
    notice on a tmux client's terminal."""

    def test_the_view_draws_redraws_on_an_event_moves_and_quits(self):
        conv = "seen-%d" % os.getpid()
        rt = self.coord_json("hello", "--conversation", conv, "--harness", "claude", cwd=self.repo)["runtime"]
        self.event(conv, "UserPromptSubmit", prompt="go")
        tmux, sock = self.server("%s %s watch" % (shlex.quote(sys.executable), shlex.quote(support.COORD)))

        def screen(want):
            text = subprocess.run([tmux, "-S", sock, "capture-pane", "-p"], stdout=subprocess.PIPE,
                                  universal_newlines=True, timeout=10).stdout
            return text if want in text else None
        text = support.retry_until(lambda: screen("working"), timeout=30)
        self.assertIn("notices on", text, "the person's own terminal")
        self.assertIn(rt["handle"][:20], text)
        self.assertTrue(all(len(l.rstrip()) <= 100 for l in text.splitlines()), text)
        self.event(conv, "PermissionRequest", tool_name="Bash", tool_input={"command": "touch X"})
        support.retry_until(lambda: screen("waiting Bash"), timeout=30)  # redrawn on the event alone
        subprocess.run([tmux, "-S", sock, "send-keys", "n"], check=True, timeout=10)
        support.retry_until(lambda: screen("only a work's row can be nudged"), timeout=30)
        subprocess.run([tmux, "-S", sock, "send-keys", "q"], check=True, timeout=10)
        support.retry_until(lambda: subprocess.run([tmux, "-S", sock, "has-session"], stderr=subprocess.DEVNULL,
                                                   timeout=10).returncode != 0, timeout=30)

    def test_a_notice_reaches_each_client_of_a_tmux_server_with_a_bell(self):
        import pty
        tmux, sock = self.server("sleep 600", name="agents")
        pid, fd = pty.fork()
        if pid == 0:
            try:
                os.execvpe(tmux, [tmux, "-S", sock, "attach-session"], dict(self.env, TERM="xterm-256color"))
            finally:
                os._exit(127)
        self.addCleanup(os.close, fd)
        self.addCleanup(lambda: (os.kill(pid, 9), os.waitpid(pid, 0)))
        got = bytearray()

        def read(want):
            import select
            while select.select([fd], [], [], 0.2)[0]:
                try:
                    got.extend(os.read(fd, 65536))
                except OSError:
                    break
            return want in got
        support.retry_until(lambda: subprocess.run([tmux, "-S", sock, "list-clients"], stdout=subprocess.PIPE,
                                                   timeout=10).stdout.strip() or None, timeout=30)
        read(b"")
        del got[:]
        view.Notices(self.env, self.repo, sockets=[sock]).deliver("waiting", "coord: amber-otter waits for you", None)
        support.retry_until(lambda: read(b"coord: amber-otter waits for you"), timeout=30)
        self.assertIn(b"\a", bytes(got))


class WorkKeysTest(ViewCase):
    """A key on a work's row runs the coord command as typed, with the watch's own authority: a peer
    agent's view is refused closing the person's work, and says why; the person's view (another of
    their terminals) parks it."""

    def setUp(self):
        super().setUp()
        self.use_jj()
        self.repo = os.path.join(self.tmp, "canon")
        subprocess.run(["jj", "git", "init", "--colocate", self.repo], env=self.env, check=True, timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(self.repo, "README"), "w") as f:
            f.write("hello\n")
        for argv in (["commit", "-m", "initial"], ["bookmark", "create", "main", "-r", "@-"]):
            subprocess.run(["jj"] + argv, cwd=self.repo, env=self.env, check=True, timeout=120,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def screen(self, tmux, sock, want):
        text = subprocess.run([tmux, "-S", sock, "capture-pane", "-p"], stdout=subprocess.PIPE,
                              universal_newlines=True, timeout=10).stdout
        return text if want in text else None

    def press(self, tmux, sock, *keys):
        for key in keys:
            subprocess.run([tmux, "-S", sock, "send-keys", key], check=True, timeout=10)

    def state_of(self, handle):
        return self.coord_json("work", "inspect", handle, cwd=self.repo)["work"]["state"]

    def test_keys_run_the_command_with_the_watch_s_own_authority(self):
        peer = self.coord_json("hello", "--conversation", "peer-%d" % os.getpid(), cwd=self.repo)["runtime"]
        rc, out = self.coord_at_terminal("--json", "work", "create", "keyed", cwd=self.repo)  # the person's work
        self.assertEqual(rc, 0, out)
        work = json.loads(out.strip().splitlines()[-1])["work"]
        watch = "%s %s watch" % (shlex.quote(sys.executable), shlex.quote(support.COORD))
        agent = "env CLAUDECODE=1 COORD_RUNTIME_ID=%s %s" % (peer["id"], watch)
        tmux, sock = self.server(agent, name="agent")
        support.retry_until(lambda: self.screen(tmux, sock, "notices off"), timeout=30)
        self.press(tmux, sock, "c", "y", "Enter")
        text = support.retry_until(lambda: self.screen(tmux, sock, "may not close"), timeout=60)
        self.assertEqual(self.state_of(work["handle"]), "active", text)
        self.press(tmux, sock, "q")
        tmux, sock = self.server(watch, name="person")
        support.retry_until(lambda: self.screen(tmux, sock, "keyed"), timeout=30)
        self.press(tmux, sock, "p", "back after lunch", "Enter")
        try:
            support.retry_until(lambda: self.state_of(work["handle"]) == "parked" or None, timeout=20)
        except AssertionError:
            self.fail(self.screen(tmux, sock, ""))
        support.retry_until(lambda: self.screen(tmux, sock, "parked"), timeout=30)


class ActivityPruneTest(ViewCase):
    """The activity files of conversations that ended here go (at SessionEnd, and at `work gc` for
    the rest); a live conversation's, and one this project never recorded, stay."""

    def path(self, conv):
        return os.path.join(store.state_dir(self.env), store.Store.ACTIVITY_DIR, conv.encode().hex())

    def test_ended_conversations_lose_their_file_live_ones_keep_it(self):
        convs = {n: "%s-%d" % (n, os.getpid()) for n in ("ends", "quits", "lives", "elsewhere")}
        for n in ("ends", "quits", "lives"):
            self.coord_json("hello", "--conversation", convs[n], "--harness", "claude", cwd=self.repo)
        for n in ("ends", "quits", "lives"):
            self.event(convs[n], "PreToolUse", tool_name="Bash", tool_input={"command": "ls"})
        with open(self.path(convs["elsewhere"]), "w") as f:  # another project's conversation
            f.write("Stop\t\n")
        os.utime(self.path(convs["elsewhere"]), (1, 1))
        self.assertTrue(all(os.path.exists(self.path(c)) for c in convs.values()))
        self.event(convs["ends"], "SessionEnd", reason="other")
        self.assertFalse(os.path.exists(self.path(convs["ends"])), "SessionEnd prunes its own file")
        st = self.open_project()
        st.bye(st.find_conversation_runtime(convs["quits"])["id"])
        self.assertTrue(os.path.exists(self.path(convs["quits"])))
        self.coord_json("work", "gc", cwd=self.repo)
        self.assertEqual([os.path.exists(self.path(convs[n])) for n in ("quits", "lives", "elsewhere")],
                         [False, True, True])


class LandingDetailTest(WorkKeysTest):
    """The view shows each work's landing and its last check (from the work record), and the
    conflicts forecast only when asked (the key f, off the redraw path)."""

    test_keys_run_the_command_with_the_watch_s_own_authority = None

    def test_last_check_and_forecast_on_f(self):
        rc, out = self.coord_at_terminal("--json", "work", "create", "checked", cwd=self.repo)
        self.assertEqual(rc, 0, out)
        work = json.loads(out.strip().splitlines()[-1])["work"]
        with open(os.path.join(work["path"], "NEW"), "w") as f:
            f.write("new\n")
        subprocess.run(["jj", "commit", "-m", "new file"], cwd=work["path"], env=self.env, check=True, timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rc, out = self.coord_at_terminal("work", "integrate", "land", work["handle"], "--into", "main",
                                         "--check", "false", cwd=self.repo)
        self.assertNotEqual(rc, 0, out)
        text = self.coord("watch", "--once", cwd=self.repo, check=0).stdout
        line = next(l for l in text.splitlines() if l.startswith(work["handle"] + ":"))
        self.assertIn("check failed", line)
        support.assert_shown(self, ": false (exit 1)", line)
        self.assertTrue(all(len(l) <= 100 for l in text.splitlines()), text)
        row = self.coord_json("watch", "--once", cwd=self.repo)["rows"][0]
        self.assertEqual((row["check"]["state"], row["check"]["command"]), ("failed", "false"))
        watch = "%s %s watch" % (shlex.quote(sys.executable), shlex.quote(support.COORD))
        tmux, sock = self.server(watch, name="person")
        support.retry_until(lambda: self.screen(tmux, sock, "f forecasts conflicts"), timeout=30)
        self.press(tmux, sock, "f")
        try:
            support.retry_until(lambda: self.screen(tmux, sock, "forecast: no conflict"), timeout=120)
        except AssertionError:
            self.fail(self.screen(tmux, sock, ""))


class GoAndLandKeysTest(WorkKeysTest):
    """The go key shows the row's pane (`coord work attach W --execute`: a tmux client on the work's
    window, seen by tmux itself) and the land key lands the real work, each as typed."""

    test_keys_run_the_command_with_the_watch_s_own_authority = None

    def test_go_shows_the_work_s_pane_and_land_lands_it(self):
        tmux = support.require_tool(self, "tmux")
        agents = os.path.join(self.tmp, "agents.sock")
        fake = os.path.join(support.FIXTURES, "fake_harness.py")
        rec = os.path.join(self.tmp, "rec")
        os.mkdir(rec)
        self.env.update({"COORD_TMUX_SOCKET": agents, "COORD_CLAUDE_CMD": " ".join(
            shlex.quote(a) for a in [sys.executable, fake, "--record", rec])})
        self.addCleanup(subprocess.run, [tmux, "-S", agents, "kill-server"], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, timeout=10)
        rc, out = self.coord_at_terminal("--json", "work", "create", "gone-to", cwd=self.repo)
        self.assertEqual(rc, 0, out)
        work = json.loads(out.strip().splitlines()[-1])["work"]
        with open(os.path.join(work["path"], "NEW"), "w") as f:
            f.write("new\n")
        subprocess.run(["jj", "commit", "-m", "new file"], cwd=work["path"], env=self.env, check=True, timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.coord_at_terminal("work", "start", work["handle"], cwd=self.repo, check=0)
        self.coord_at_terminal("work", "gate", work["handle"], "--pass", cwd=self.repo, check=0)
        window = self.coord_json("work", "inspect", work["handle"], cwd=self.repo)["work"]["data"]["tmux"]["window_id"]
        watch = "%s %s watch" % (shlex.quote(sys.executable), shlex.quote(support.COORD))
        ptmux, psock = self.server(watch, name="person")
        support.retry_until(lambda: self.screen(ptmux, psock, "gone-to"), timeout=30)
        self.press(ptmux, psock, "Enter")

        def shown():
            got = subprocess.run([tmux, "-S", agents, "list-clients", "-F", "#{client_tty}"], stdout=subprocess.PIPE,
                                 universal_newlines=True, timeout=10).stdout.split()
            return got and subprocess.run([tmux, "-S", agents, "display", "-p", "-c", got[0], "#{window_id}"],
                                          stdout=subprocess.PIPE, universal_newlines=True, timeout=10).stdout.strip()
        self.assertEqual(support.retry_until(shown, timeout=30), window)
        for client in subprocess.run([tmux, "-S", agents, "list-clients", "-F", "#{client_tty}"],
                                     stdout=subprocess.PIPE, universal_newlines=True, timeout=10).stdout.split():
            subprocess.run([tmux, "-S", agents, "detach-client", "-t", client], check=True, timeout=10)
        try:
            support.retry_until(lambda: self.screen(ptmux, psock, "attach: exit"), timeout=30)
        except AssertionError:
            self.fail(self.screen(ptmux, psock, ""))
        self.press(ptmux, psock, "l", "main", "Enter")
        try:
            support.retry_until(lambda: self.coord_json("work", "inspect", work["handle"], cwd=self.repo)["work"][
                "data"].get("landing", {}).get("state") == "landed" or None, timeout=120)
        except AssertionError:
            self.fail(self.screen(ptmux, psock, ""))
        support.retry_until(lambda: self.screen(ptmux, psock, "landed"), timeout=30)


class StatusJsonTest(WorkKeysTest):
    """`status --json` keeps the keys it always had: each work's dirty, ahead, behind and into,
    null unless --changes read the clone."""

    test_keys_run_the_command_with_the_watch_s_own_authority = None

    def test_each_work_keeps_its_clone_keys(self):
        rc, out = self.coord_at_terminal("--json", "work", "create", "kept", cwd=self.repo)
        self.assertEqual(rc, 0, out)
        keys = ("dirty", "dirty_from", "ahead", "behind", "into")
        row = self.coord_json("status", cwd=self.repo)["work"][0]
        self.assertEqual({k: row.get(k, "absent") for k in keys}, dict.fromkeys(keys))
        row = self.coord_json("status", "--changes", cwd=self.repo)["work"][0]
        self.assertEqual((row["dirty"], row["ahead"], row["into"]), (False, 0, "main"))


class PgWatchOnceTest(support.PostgresProject, WatchOnceTest):
    """The same on PostgreSQL: the records through the host process, the events' files on this host."""

    def test_the_view_wakes_on_a_hook_event_and_on_a_commit(self):
        import hostclient
        st = hostclient.open_project_store(self.env, self.repo)  # through the host process, as coord watch
        self.addCleanup(st.close)
        w = view.Watcher(st, self.env, self.repo)
        support.retry_until(lambda: st.wake_generation(), timeout=30)  # its LISTEN is in effect
        w.read(0.0)
        self.assertFalse(w.due(0.1), "nothing changed: no read")
        self.coord_json("hello", "--conversation", "wake-%d" % os.getpid(), cwd=self.repo)
        support.retry_until(lambda: w.due(0.1) or None, timeout=30)  # the host process's wake-up, not the clock
        w.read(0.1)
        self.assertFalse(w.due(0.2), "nothing changed: no read")
        self.assertTrue(w.due(view.REMOTE_EVERY + 0.1), "another host's turn or work: read REMOTE_EVERY later")
        w.read(view.REMOTE_EVERY + 0.1)
        self.event("wake-%d" % os.getpid(), "PreToolUse", tool_name="Bash", tool_input={"command": "ls"})
        self.assertTrue(w.due(view.REMOTE_EVERY + 0.2), "a hook event on this host: at once")



class PgActivityPruneTest(support.PostgresProject, ActivityPruneTest):
    """The same on PostgreSQL: the ended conversations read through the host process."""


if __name__ == "__main__":
    unittest.main()
