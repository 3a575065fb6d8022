"""The `coord` command line: exit codes, concise and JSON output, identity, batch."""

import importlib.machinery
import importlib.util
import json
import re
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import unittest

import support

import store
import pg
import hostclient


def claimed(resource):
    """What a successful `coord claim RESOURCE` prints."""
    return "claimed %s (exclusive, ttl %ds)\n" % (resource, store.DEFAULT_LEASE_TTL)


class CliTest(support.CoordTestCase):
    def test_version_comes_from_VERSION(self):
        with open(os.path.join(support.ROOT, "VERSION")) as f:
            want = f.read().strip()
        self.assertEqual(self.coord("--version", check=0).stdout.strip(), "coord " + want)

    def test_version_and_audit_json_replies_carry_ok(self):
        for args in (["--version", "--json"], ["--json", "--version"]):
            data = json.loads(self.coord(*args, check=0).stdout)
            self.assertEqual((data["ok"], "coord " + data["version"]), (True, self.coord("--version").stdout.strip()))
        a = self.hello()["runtime"]
        self.coord("claim", "x", runtime=a["id"], check=0)
        data = self.coord_json("audit")
        self.assertTrue(data["ok"])
        self.assertEqual([e["event"] for e in data["events"]], ["runtime.hello", "lease.claimed"])
        self.assertEqual([json.loads(l) for l in self.coord("audit", check=0).stdout.splitlines()], data["events"])
        self.assertEqual([e["event"] for e in self.coord_json("audit", "--since", "1")["events"]], ["lease.claimed"])

    def test_abbreviated_options_are_not_expanded(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        self.coord("claim", "docs", runtime=a["id"], check=0)
        for args in (["check", "docs", "--a", a["handle"]], ["claim", "x", "--run", b["id"]],
                     ["claim", "x", "--purp", "p"], ["release", "--al"], ["list", "--js"]):
            with self.subTest(args=args):
                proc = self.coord(*args, runtime=b["id"])
                self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
                self.assertIn("unrecognized arguments", proc.stderr)
        self.assertEqual([l["resource"] for l in self.coord_json("list")["leases"]], ["docs"])

    def test_abbreviated_options_are_not_expanded_in_work_and_remote(self):
        a = self.hello()["runtime"]
        for args in (["work", "remove", "h", "--conf", "h"], ["work", "create", "t", "--scratch", self.tmp],
                     ["work", "integrate", "acquire", "h", "--in", "main"],
                     ["remote", "verify", "origin", "main", "--exp", "0" * 40]):
            with self.subTest(args=args):
                proc = self.coord(*args, runtime=a["id"])
                self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
                self.assertRegex(proc.stderr, "unrecognized arguments|arguments are required")

    def test_hello_prints_only_the_handle(self):
        out = self.coord("hello", check=0).stdout
        self.assertEqual(len(out.strip().split("-")), 5, out)
        self.assertEqual(out.count("\n"), 1)

    def test_claim_success_prints_one_line_and_conflict_exits_3_naming_holder(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        ok = self.coord("claim", "src/a.py", "-p", "refactor parser", runtime=a["handle"], check=0)
        self.assertEqual((ok.stdout, ok.stderr), (claimed("src/a.py"), ""))
        refused = self.coord("claim", "src", runtime=b["handle"], check=3)
        self.assertIn(a["handle"], refused.stderr)
        self.assertIn("refactor parser", refused.stderr)
        self.assertIn("coord send", refused.stderr)
        self.assertNotIn("Traceback", refused.stderr)
        data = json.loads(self.coord("claim", "src", "--json", runtime=b["handle"], check=3).stdout)
        self.assertEqual((data["ok"], data["exit"], data["conflicts"][0]["handle"]), (False, 3, a["handle"]))

    def test_legacy_paths_spelling_is_accepted_and_hidden(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        data = self.coord_json("claim", "--paths", "src/a.py", "docs", "-p", "x", runtime=a["id"])
        self.assertEqual(sorted(l["resource"] for l in data["leases"]), ["docs", "src/a.py"])
        mixed = self.coord_json("claim", "lib", "-p", "y", "--paths", "bin", "tools", runtime=b["id"])
        self.assertEqual(sorted(l["resource"] for l in mixed["leases"]), ["bin", "lib", "tools"])
        self.assertEqual(self.coord("check", "--paths", "docs/x.md", "--as", b["handle"]).returncode, 3)
        self.assertEqual(self.coord("check", "--paths", "other", "--as", b["handle"]).returncode, 0)
        released = self.coord_json("release", "--paths", "docs", runtime=a["id"])["released"]
        self.assertEqual(released, ["docs"])
        self.assertEqual(self.coord("check", "--paths", "docs/x.md", "--as", b["handle"]).returncode, 0)
        batch = json.loads(self.coord("batch", "--json", "claim", "--paths", "docs", ":", "release", "--paths",
                                      "lib", runtime=b["id"], check=0).stdout)
        self.assertEqual([r["exit"] for r in batch["results"]], [0, 0])
        left = sorted((l["resource"], l["runtime"]) for l in self.coord_json("list")["leases"])
        self.assertEqual(left, sorted([("src/a.py", a["id"]), ("bin", b["id"]), ("tools", b["id"]),
                                       ("docs", b["id"])]))
        for command in ("claim", "release", "check"):
            with self.subTest(command=command):
                self.assertNotIn("--paths", self.coord(command, "--help", check=0).stdout)
        self.coord("claim", "--paths", check=2)
        self.assertIn("arguments are required: RESOURCE", self.coord("check", check=2).stderr)

    def test_check_exit_status_and_as(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        self.coord("claim", "docs", runtime=a["id"], check=0)
        self.assertEqual(self.coord("check", "docs/x.md", "--as", b["handle"]).returncode, 3)
        self.assertEqual(self.coord("check", "docs/x.md", "--as", a["handle"]).returncode, 0)
        self.assertEqual(self.coord("check", "other").stdout, "")
        data = json.loads(self.coord("check", "docs", "--json").stdout)
        self.assertFalse(data["free"])

    def test_claim_and_send_each_say_one_line(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        self.assertEqual(self.coord("claim", "docs", runtime=a["id"], check=0).stdout,
                         claimed("docs"))
        self.assertEqual(self.coord("claim", "a.txt", "b.txt", "--mode", "append", "--ttl", "90", runtime=a["id"],
                                    check=0).stdout, "claimed a.txt, b.txt (append, ttl 90s)\n")
        many = self.coord("claim", *["f%d" % i for i in range(7)], runtime=b["id"], check=0).stdout
        self.assertEqual(many, "claimed f0, f1, f2, f3, f4 (+2 more) (exclusive, ttl %ds)\n" % store.DEFAULT_LEASE_TTL)
        sent = self.coord("send", "hello", "--to", b["handle"], runtime=a["id"], check=0).stdout
        msg = self.coord_json("inbox", "--peek", runtime=b["id"])["messages"][0]
        self.assertEqual(sent, "#%d to %s\n" % (msg["id"], b["handle"]))
        self.assertEqual(set(self.coord_json("claim", "c.txt", runtime=a["id"])), {"ok", "runtime", "leases"},
                         "--json keeps its shape")

    def test_refusals_say_which_lease_blocks_which_path(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        self.coord("claim", "src", "-p", "move src", runtime=a["id"], check=0)
        self.coord("claim", "docs/api/index.md", runtime=a["id"], check=0)
        want = 'src/a.py: blocked by %s\'s exclusive lease on src/ ("move src")' % a["handle"]
        self.assertEqual(self.coord("check", "src/a.py", runtime=b["id"], check=3).stdout.splitlines()[0], want)
        self.assertIn("coord: " + want + "\n", self.coord("claim", "src/a.py", runtime=b["id"], check=3).stderr)
        want = "docs: blocked by %s's exclusive lease on docs/api/index.md" % a["handle"]
        self.assertEqual(self.coord("check", "docs", runtime=b["id"], check=3).stdout.splitlines()[0], want)
        self.assertIn("coord: " + want + "\n", self.coord("claim", "docs", runtime=b["id"], check=3).stderr)
        self.assertEqual(self.coord("check", "src", "--mode", "append", runtime=b["id"], check=3).stdout
                         .splitlines()[0], 'src: blocked by %s\'s exclusive lease ("move src")' % a["handle"])

    def test_usage_errors_exit_2(self):
        a = self.hello()["runtime"]
        for args in (["claim"], ["claim", "../up", "--runtime", a["id"]], ["nonsense"],
                     ["claim", "x", "--mode", "shared", "--runtime", a["id"]], ["release", "--runtime", a["id"]]):
            proc = self.coord(*args)
            self.assertEqual(proc.returncode, 2, (args, proc.stderr))
            self.assertTrue(proc.stderr.startswith("coord: "), proc.stderr)

    def test_identity_prefix_and_altered_handle_refused(self):
        a = self.hello()["runtime"]
        self.assertEqual(self.coord("claim", "x", "--runtime", a["id"][:13]).returncode, 2)
        self.assertEqual(self.coord("claim", "x", "--runtime", a["handle"].rsplit("-", 1)[0]).returncode, 2)
        self.assertEqual(self.coord("claim", "x", "--sid", a["id"]).returncode, 0)

    def test_no_identity_is_a_clear_refusal(self):
        # Under an agent harness that never registered (outside one, the caller is the person: PersonTest).
        rc, _out, err = support.FakeHarness(self, "claude").coord("claim", "x")
        self.assertEqual(rc, 3, err)
        self.assertIn("coord hello", err)
        self.assertIn("not a person", err)

    def test_superseded_runtime_is_refused_with_new_handle(self):
        old = self.hello(conversation="c-1")["runtime"]
        self.coord("claim", "x", runtime=old["id"], check=0)
        new = self.hello(conversation="c-1")["runtime"]
        proc = self.coord("renew", runtime=old["id"], check=3)
        self.assertIn(new["handle"], proc.stderr)
        listing = self.coord_json("list")
        self.assertEqual([l["handle"] for l in listing["leases"]], [new["handle"]])

    def test_missing_project_id_is_an_environment_error(self):
        env = {"COORD_DB": "", "COORD_PROJECT_ID": ""}
        proc = self.coord("list", env=env, cwd=self.tmp)
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertIn("--project-id", proc.stderr)

    def test_corrupt_database_is_reported_without_traceback(self):
        os.makedirs(os.path.dirname(self.db), mode=0o700)
        with open(self.db, "wb") as f:
            f.write(b"garbage" * 1000)
        proc = self.coord("list")
        self.assertEqual(proc.returncode, 4)
        self.assertIn("damaged", proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)

    def test_messages_through_the_cli(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        sent = self.coord_json("send", "please look at \x1b[31mthis\x1b[0m", "--to", b["handle"], runtime=a["id"])
        shown = self.coord("inbox", runtime=b["id"], check=0).stdout
        self.assertIn("please look at", shown)
        self.assertNotIn("\x1b", shown)
        self.assertIn("ack", shown)
        peek = self.coord_json("inbox", "--peek", runtime=b["id"])
        self.assertEqual(peek["messages"][0]["state"], "delivered")
        self.coord("ack", str(sent["id"]), runtime=b["id"], check=0)
        self.assertEqual(self.coord("inbox", runtime=b["id"], check=0).stdout, "")

    def test_send_refuses_a_body_over_the_limit(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        proc = self.coord("send", "x" * 16384, "--to", b["handle"], runtime=a["id"])
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("16384 bytes, larger than the limit of 6144 bytes", proc.stderr)
        self.assertIn("send its path", proc.stderr)
        self.assertEqual(self.coord_json("inbox", "--peek", runtime=b["id"])["messages"], [])
        self.coord("send", "\u00e9" * 3072, "--to", b["handle"], runtime=a["id"], check=0)  # 6144 bytes
        self.assertEqual(self.coord("send", "\u00e9" * 3072 + "x", "--to", b["handle"], runtime=a["id"]).returncode, 2)

    def test_list_is_concise_by_default_and_full_with_verbose_or_json(self):
        a = self.hello()["runtime"]
        self.coord("claim", "lib/x.py", "-p", "p", runtime=a["id"], check=0)
        plain = self.coord("list", check=0).stdout
        self.assertIn(a["handle"], plain)
        self.assertNotIn(a["id"], plain)
        self.assertIn(a["id"], self.coord("list", "--verbose", check=0).stdout)
        data = self.coord_json("list")
        self.assertEqual(data["runtimes"][0]["id"], a["id"])
        self.assertEqual(data["leases"][0]["resource"], "lib/x.py")

    def test_bidi_controls_are_stripped_from_message_text(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        self.coord("send", "ok \u202egnp.exe\u202c and \u2067x\u2069 \u200f\u061c", "--to", b["handle"],
                   runtime=a["id"], check=0)
        out = self.coord("inbox", "--peek", runtime=b["id"], check=0).stdout
        self.assertIn("ok gnp.exe and x ", out)
        for ch in "\u202e\u202c\u2067\u2069\u200f\u061c":
            self.assertNotIn(ch, out)

    def test_list_shows_only_leases_that_are_held(self):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        self.addCleanup(proc.wait)
        self.addCleanup(proc.kill)
        dead = self.coord_json("hello", "--pid", proc.pid)["runtime"]
        live = self.hello()["runtime"]
        self.coord("claim", "src/gone.py", "-p", "left behind", runtime=dead["id"], check=0)
        self.coord("claim", "src/kept.py", runtime=live["id"], check=0)
        self.assertIn("src/gone.py", self.coord("list", check=0).stdout)
        proc.kill()
        proc.wait()
        self.assertEqual(self.coord("check", "src/gone.py", "--as", live["handle"]).returncode, 0, "check: free")
        plain = self.coord("list", check=0).stdout
        verbose = self.coord("list", "--verbose", check=0).stdout
        data = self.coord_json("list")
        everything = self.coord_json("list", "--all")
        for out in (plain, verbose, json.dumps(data), json.dumps(everything)):
            self.assertNotIn("src/gone.py", out)
            self.assertIn("src/kept.py", out)
        self.assertNotIn(dead["handle"], plain)
        self.assertEqual([l["resource"] for l in data["leases"]], ["src/kept.py"])
        gone = [r for r in everything["runtimes"] if r["id"] == dead["id"]][0]
        self.assertFalse(gone["live"])

    def test_list_of_eight_agents_and_twenty_leases_fits_one_and_a_half_kilobytes(self):
        st = self.open_project()
        agents = [st.register(harness=("claude", "codex")[i % 2]) for i in range(8)]
        for i in range(20):
            st.claim(agents[i % 8]["id"], ["src/coord/module_%02d.py" % i], "append" if i == 7 else "exclusive",
                     "split the tokenizer from the parser, step %d of 20" % i)
        plain = self.coord("list", runtime=agents[0]["id"], check=0).stdout
        self.assertLessEqual(len(plain.encode("utf-8")), 1536, plain)
        for a in agents:
            self.assertIn(a["handle"], plain)
        for i in range(20):
            self.assertIn("src/coord/module_%02d.py" % i, plain)
        self.assertIn("%s  claude  (you)  src/coord/module_00.py, src/coord/module_08.py" % agents[0]["handle"], plain)
        self.assertIn("src/coord/module_07.py (append)", plain)
        self.assertIn("coord list --verbose", plain)
        verbose = self.coord("list", "--verbose", runtime=agents[0]["id"], check=0).stdout
        self.assertIn('src/coord/module_07.py  append  %s  "split the tokenizer' % agents[7]["handle"], verbose)
        self.assertIn("id=%s" % agents[3]["id"], verbose)
        self.assertEqual(len(self.coord_json("list")["leases"]), 20)

    def test_list_prints_nothing_when_there_is_nothing(self):
        self.assertEqual(self.coord("list", check=0).stdout, "")

    def test_audit_export_is_byte_identical_across_runs(self):
        a = self.hello()["runtime"]
        self.coord("claim", "x", runtime=a["id"], check=0)
        self.coord("release", "x", runtime=a["id"], check=0)
        one = self.coord("audit", check=0).stdout
        two = self.coord("audit", check=0).stdout
        self.assertEqual(one, two)
        self.assertEqual([json.loads(l)["event"] for l in one.splitlines()],
                         ["runtime.hello", "lease.claimed", "lease.released"])

    def test_paths_are_mapped_from_absolute_and_refused_outside(self):
        repo = os.path.join(self.tmp, "repo")
        os.makedirs(os.path.join(repo, ".git"))
        os.makedirs(os.path.join(repo, "sub"))
        a = self.hello()["runtime"]
        self.coord("claim", os.path.join(repo, "sub", "f.py"), runtime=a["id"], cwd=os.path.join(repo, "sub"),
                   check=0)
        self.assertEqual([l["resource"] for l in self.coord_json("list")["leases"]], ["sub/f.py"])
        proc = self.coord("claim", "/etc/passwd", runtime=a["id"], cwd=repo)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("outside the repository", proc.stderr)


class BatchTest(support.CoordTestCase):
    def test_actions_run_in_order_as_one_runtime(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        data = json.loads(self.coord("batch", "--json", "claim", "docs/plan.md", "-p", "plan", ":", "send", "a : b",
                                     "--to", b["handle"], ":", "list", runtime=a["id"], check=0).stdout)
        self.assertTrue(data["ok"])
        self.assertEqual([r["action"] for r in data["results"]], ["claim", "send", "list"])
        self.assertEqual(self.coord_json("inbox", "--peek", runtime=b["id"])["messages"][0]["body"], "a : b")

    def test_identity_flags_inside_actions_are_refused(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        for flag in ("--runtime", "--sid", "--as"):
            proc = self.coord("batch", "claim", "x", flag, b["id"], runtime=a["id"])
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn("identity flag", proc.stderr)
        proc = self.coord("batch", "claim", "x", "--runtime=%s" % b["id"], runtime=a["id"])
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(self.coord_json("list")["leases"], [])

    def test_abbreviated_identity_flags_inside_actions_are_refused(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        self.coord("claim", "x", runtime=a["id"], check=0)
        for extra in (["--a", a["handle"]], ["--a=%s" % a["handle"]], ["--run", a["id"]], ["--runt=%s" % a["id"]],
                      ["--si", a["id"]]):
            with self.subTest(extra=extra):
                # As b, x is blocked (exit 3); run as a it would be free (exit 0). Neither may happen.
                proc = self.coord("batch", "--runtime", b["id"], "check", "x", *extra)
                self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
                self.assertIn("identity flag", proc.stderr)
        self.assertEqual(self.coord("batch", "--runtime", b["id"], "check", "x").returncode, 3)
        self.assertEqual(self.coord("batch", "--runtime", b["id"], "send", "--to", a["handle"], "--",
                                    "--as is just text").returncode, 0)

    def test_json_inside_an_action_does_not_switch_the_reply(self):
        a = self.hello()["runtime"]
        for args in (["list", ":", "check", "x", "--json"], ["check", "x", "--json"], ["list", "--jso"]):
            with self.subTest(args=args):
                proc = self.coord("batch", *args, runtime=a["id"])
                self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
                self.assertEqual(proc.stdout, "", "no JSON envelope was asked for where it belongs")
                self.assertIn("coord batch --json", proc.stderr)
        plain = self.coord("batch", "check", "x", ":", "list", runtime=a["id"], check=0)
        self.assertRaises(ValueError, json.loads, plain.stdout)
        data = json.loads(self.coord("batch", "--json", "check", "x", ":", "list", runtime=a["id"], check=0).stdout)
        self.assertEqual([r["action"] for r in data["results"]], ["check", "list"])

    def test_stops_at_first_failure_and_is_not_atomic(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        self.coord("claim", "taken", runtime=b["id"], check=0)
        proc = self.coord("batch", "--json", "claim", "mine", ":", "claim", "taken", ":", "claim", "never",
                          runtime=a["id"])
        self.assertEqual(proc.returncode, 3)
        data = json.loads(proc.stdout)
        self.assertEqual(len(data["results"]), 2)
        self.assertEqual(data["stopped_at"], 1)
        held = sorted(l["resource"] for l in self.coord_json("list")["leases"] if l["runtime"] == a["id"])
        self.assertEqual(held, ["mine"])

    def test_disallowed_actions_are_refused_before_anything_runs(self):
        a = self.hello()["runtime"]
        for action in (["work", "create", "t"], ["hello"], ["bye"], ["audit"], ["batch", "list"]):
            proc = self.coord("batch", "claim", "x", ":", *action, runtime=a["id"])
            self.assertEqual(proc.returncode, 2, (action, proc.stderr))
        self.assertEqual(self.coord_json("list")["leases"], [])


class CliRaceTest(support.CoordTestCase):
    def test_eight_cli_processes_one_winner(self):
        handles = [self.hello()["runtime"]["id"] for _ in range(8)]
        for r in range(6):
            procs = [subprocess.Popen([sys.executable, support.COORD, "claim", "race/%d" % r, "--runtime", h],
                                      env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                     for h in handles]
            codes = [p.wait(60) for p in procs]
            for p in procs:
                p.stdout.close()
                p.stderr.close()
            self.assertEqual(sorted(codes), [0] + [3] * 7, "round %d" % r)


class SymlinkNameTest(support.CoordTestCase):
    """One file, one resource name: relative names through a symlink inside the repository
    resolve to the real path, in every command that takes names."""

    def setUp(self):
        super().setUp()
        self.repo = os.path.join(self.tmp, "repo")
        os.makedirs(os.path.join(self.repo, ".git"))
        os.makedirs(os.path.join(self.repo, "docs"))
        with open(os.path.join(self.repo, "docs", "guide.md"), "w") as f:
            f.write("guide\n")
        os.symlink("docs", os.path.join(self.repo, "manual"))
        self.a = self.hello()["runtime"]
        self.b = self.hello()["runtime"]

    def run_as(self, who, *args, check=None):
        return self.coord(*args, runtime=who["id"], cwd=self.repo, check=check)

    def held(self):
        return sorted((l["resource"], l["handle"]) for l in self.coord_json("list", cwd=self.repo)["leases"])

    def test_claim_through_the_link_conflicts_with_the_real_name_both_ways(self):
        self.run_as(self.a, "claim", "manual/guide.md", "-p", "via link", check=0)
        self.assertEqual(self.held(), [("docs/guide.md", self.a["handle"])])
        refused = self.run_as(self.b, "claim", "docs/guide.md", check=3)
        self.assertIn(self.a["handle"], refused.stderr)
        self.assertEqual(self.run_as(self.b, "check", "docs/guide.md").returncode, 3)
        self.run_as(self.a, "release", "manual/guide.md", check=0)
        self.assertEqual(self.held(), [])
        self.run_as(self.a, "claim", "docs/guide.md", check=0)
        self.assertIn(self.a["handle"], self.run_as(self.b, "claim", "manual/guide.md", check=3).stderr)
        self.assertEqual(self.run_as(self.b, "check", "manual/guide.md").returncode, 3)
        self.assertEqual(self.held(), [("docs/guide.md", self.a["handle"])])

    def test_two_exclusive_holders_of_one_file_cannot_coexist(self):
        self.run_as(self.a, "claim", "docs", check=0)
        self.run_as(self.b, "claim", "manual/guide.md", check=3)
        self.run_as(self.a, "release", "--all", check=0)
        self.run_as(self.a, "claim", "manual", check=0)  # the link's own name protects its target
        self.assertEqual(self.held(), [("docs", self.a["handle"])])
        self.run_as(self.b, "claim", "docs/guide.md", check=3)
        self.run_as(self.b, "claim", "manual/new/file.md", check=3)
        self.assertEqual(self.held(), [("docs", self.a["handle"])])

    def test_renew_release_and_batch_take_the_name_as_claimed(self):
        self.run_as(self.a, "claim", "manual/guide.md", check=0)
        self.run_as(self.a, "renew", "manual/guide.md", check=0)
        self.run_as(self.a, "renew", "docs/guide.md", check=0)
        self.run_as(self.a, "release", "manual/guide.md", check=0)
        self.assertEqual(self.held(), [])
        self.run_as(self.a, "batch", "claim", "manual/new.md", ":", "renew", "docs/new.md", check=0)
        self.assertEqual(self.held(), [("docs/new.md", self.a["handle"])])
        proc = self.run_as(self.b, "batch", "check", "docs/new.md", ":", "claim", "manual/new.md")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.run_as(self.a, "batch", "release", "manual/new.md", check=0)
        self.assertEqual(self.held(), [])

    def test_file_symlink_is_one_resource_with_its_target(self):
        os.symlink("guide.md", os.path.join(self.repo, "docs", "alias.md"))
        self.run_as(self.a, "claim", "docs/alias.md", check=0)
        self.assertEqual(self.held(), [("docs/guide.md", self.a["handle"])])
        self.run_as(self.b, "claim", "manual/guide.md", check=3)
        self.run_as(self.a, "release", "docs/alias.md", check=0)
        self.assertEqual(self.held(), [])

    def test_names_that_leave_the_repository_are_refused(self):
        outside = os.path.join(self.tmp, "outside")
        os.makedirs(outside)
        os.symlink(outside, os.path.join(self.repo, "ext"))
        os.symlink("..", os.path.join(self.repo, "up"))
        os.symlink(".", os.path.join(self.repo, "self"))
        os.symlink(os.path.join(outside, "secret.txt"), os.path.join(self.repo, "leak.txt"))
        for name in ("ext/file.txt", "ext", "up/outside/x", "leak.txt", "manual/../../outside/x",
                     os.path.join(self.repo, "manual", "..", "..", "outside", "x"), "self"):
            for command in ("claim", "check"):
                proc = self.run_as(self.a, command, name)
                self.assertEqual(proc.returncode, 2, (command, name, proc.stderr))
                self.assertTrue(proc.stderr.startswith("coord: "), proc.stderr)
                self.assertNotIn("Traceback", proc.stderr)
        self.assertIn("outside the repository", self.run_as(self.a, "claim", "ext/file.txt").stderr)
        self.assertEqual(self.held(), [])
        self.run_as(self.a, "claim", "self/docs/guide.md", check=0)
        self.assertEqual(self.held(), [("docs/guide.md", self.a["handle"])])

    def test_named_operations_stay_as_they_are(self):
        self.run_as(self.a, "claim", "integration/main", "push/origin/main", check=0)
        self.assertEqual([r for r, _ in self.held()], ["integration/main", "push/origin/main"])
        self.run_as(self.a, "release", "integration/main", "push/origin/main", check=0)

    def test_a_lease_stored_under_the_literal_name_is_still_released_by_it(self):
        # Compatibility: databases written before names were resolved hold the literal name.
        import store
        st = self.open_project()
        st.claim(self.a["id"], ["manual/guide.md"])
        self.run_as(self.a, "renew", "manual/guide.md", check=0)
        self.run_as(self.a, "release", "manual/guide.md", check=0)
        self.assertEqual(self.held(), [])


Harness = support.FakeHarness


class SupersededProcessTest(support.CoordTestCase):
    """A process whose conversation was resumed in another process may not act as its successor
    through the conversation variable."""

    CONVERSATION = "01a22af1-31cf-7f50-a411-97b001022a84"

    def setUp(self):
        super().setUp()
        import store
        self.st = self.open_project()
        self.old_harness, self.new_harness = Harness(self), Harness(self)
        self.old = self.st.register(conversation=self.CONVERSATION, harness="codex", pid=self.old_harness.pid)
        self.st.claim(self.old["id"], ["src/carried.py"])
        self.new = self.st.register(conversation=self.CONVERSATION, harness="codex", pid=self.new_harness.pid)
        self.st.claim(self.new["id"], ["src/new.py"])
        self.assertEqual(self.st.runtime(self.old["id"])["superseded_by"], self.new["id"])

    def leases(self):
        return sorted((l["resource"], l["handle"]) for l in self.st.all_leases())

    def assert_refused(self, result):
        rc, out, err = result
        self.assertEqual(rc, 3, err)
        self.assertIn("this process's attachment %s was superseded by %s" % (self.old["handle"], self.new["handle"]),
                      err)
        self.assertIn("next: this session is stale", err)
        self.assertNotIn("Traceback", err)

    def test_old_process_cannot_claim_or_release_through_the_conversation(self):
        before = self.leases()
        self.assertEqual(before, [("src/carried.py", self.new["handle"]), ("src/new.py", self.new["handle"])])
        for variable in ("CODEX_THREAD_ID", "CLAUDE_CODE_SESSION_ID", "CODEX_SESSION_ID"):
            env = {variable: self.CONVERSATION}
            self.assert_refused(self.old_harness.coord("release", "--all", env=env))
            self.assert_refused(self.old_harness.coord("claim", "src/grab.py", env=env))
            self.assert_refused(self.old_harness.coord("release", "src/new.py", env=env))
            self.assert_refused(self.old_harness.coord("batch", "release", "--all", env=env))
            self.assertEqual(self.leases(), before, variable)
        rc, out, err = self.old_harness.coord("claim", "src/grab.py", "--json", env={"CODEX_THREAD_ID": self.CONVERSATION})
        data = json.loads(out)
        self.assertEqual((rc, data["ok"], data["exit"], data["superseded_by"]), (3, False, 3, self.new["handle"]))

    def test_old_process_cannot_name_the_successor_or_anyone_else(self):
        # Refused with the new handle, the old process may not then name it (or another runtime):
        # its ancestry decides, whatever it names.
        peer = self.st.register(conversation="a-peer")
        before = self.leases()
        for named in (self.new, peer):
            for how in ("--runtime", "COORD_RUNTIME_ID"):
                with self.subTest(named=named["handle"], how=how):
                    if how == "--runtime":
                        result = self.old_harness.coord("claim", "src/grab.py", "--runtime", named["handle"])
                    else:
                        result = self.old_harness.coord("claim", "src/grab.py", env={"COORD_RUNTIME_ID": named["id"]})
                    rc, _out, err = result
                    self.assertEqual(rc, 3, err)
                    self.assertIn("this process's attachment %s was superseded by %s" % (
                        self.old["handle"], self.new["handle"]), err)
                    self.assertIn("may not act as %s either" % named["handle"], err)
                    self.assertNotIn("--runtime", err.split("next:", 1)[-1], "the hint hands it no other identity")
        self.assertEqual(self.leases(), before)
        rc, _out, err = self.new_harness.coord("claim", "src/grab.py", "--runtime", self.new["handle"])
        self.assertEqual(rc, 0, "the successor's own process names it: %s" % err)

    def test_the_successors_own_children_still_act(self):
        env = {"CODEX_THREAD_ID": self.CONVERSATION}
        rc, out, err = self.new_harness.coord("claim", "src/more.py", env=env)
        self.assertEqual(rc, 0, err)
        rc, out, err = self.new_harness.coord("release", "src/carried.py", env=env)
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.leases(), [("src/more.py", self.new["handle"]), ("src/new.py", self.new["handle"])])

    def test_taking_the_conversation_back_makes_the_old_process_the_owner_again(self):
        again = self.st.register(conversation=self.CONVERSATION, harness="codex", pid=self.old_harness.pid)
        env = {"CODEX_THREAD_ID": self.CONVERSATION}
        rc, out, err = self.old_harness.coord("claim", "src/back.py", env=env)
        self.assertEqual(rc, 0, err)
        rc, out, err = self.new_harness.coord("claim", "src/other.py", env=env)
        self.assertEqual(rc, 3, err)
        self.assertIn("superseded by %s" % again["handle"], err)

    def test_without_evidence_the_conversation_alone_identifies(self):
        # A caller related to neither harness (as inside a sandbox's own PID namespace), or a
        # live runtime with no recorded process: the conversation variable decides, as before.
        env = {"CODEX_THREAD_ID": self.CONVERSATION}
        self.coord("claim", "src/unrelated.py", env=env, check=0)
        other = "c-without-pid"
        first = self.st.register(conversation=other, pid=self.old_harness.pid)
        second = self.st.register(conversation=other)
        rc, out, err = self.old_harness.coord("claim", "src/no-pid.py", env={"CODEX_THREAD_ID": other})
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.st.runtime(first["id"])["superseded_by"], second["id"])
        self.assertIn(("src/no-pid.py", second["handle"]), self.leases())

    def test_runtime_variable_naming_a_superseded_runtime_names_the_newest(self):
        third = Harness(self)
        newest = self.st.register(conversation=self.CONVERSATION, harness="codex", pid=third.pid)
        for stale in (self.old, self.new):
            proc = self.coord("release", "--all", runtime=stale["id"], check=3)
            self.assertIn("was superseded by %s" % newest["handle"], proc.stderr)
            self.assertIn("next: this session is stale", proc.stderr)
        self.assertEqual([h for _, h in self.leases()], [newest["handle"]] * 2)


class LivenessCliTest(support.CoordTestCase):
    """Issue 15: renew says when it renews nothing; a stale COORD_RUNTIME_ID finds the
    conversation's live runtime; hello inside an agent never mints an unrelated identity."""

    def setUp(self):
        super().setUp()
        import store
        self.store = store
        self.st = self.open_project()

    def runtimes(self):
        return self.st.q("SELECT count(*) FROM runtimes").fetchone()[0]

    def test_renew_with_nothing_to_renew_exits_3(self):
        me = self.hello()["runtime"]
        proc = self.coord("renew", runtime=me["id"], check=3)
        self.assertIn("nothing renewed", proc.stderr)
        self.assertIn("next: claim", proc.stderr)

    def test_renew_names_the_lease_a_peer_took_after_it_lapsed(self):
        harness = Harness(self)
        me = self.st.register(conversation="conv-holder", pid=harness.pid)
        self.st.claim(me["id"], ["src/keep.py"], ttl=60)
        with self.st.transaction():
            self.st.conn.execute("UPDATE leases SET expires_at = expires_at - 120")
        peer = self.hello()["runtime"]
        self.coord("claim", "src/keep.py", runtime=peer["id"], check=0)
        proc = self.coord("renew", runtime=me["id"], check=3)
        self.assertIn("nothing renewed", proc.stderr)
        self.assertIn("src/keep.py (lost to %s)" % peer["handle"], proc.stderr)
        proc = self.coord("renew", runtime=me["id"], check=3)
        self.assertNotIn("lost to", proc.stderr)  # told once

    def test_runtime_variable_naming_an_expired_runtime_acts_as_the_live_successor(self):
        harness = Harness(self)
        old = self.st.register(conversation="conv-idle", now=self.store.time.time() - 2 * self.st.runtime_ttl)
        self.st.reap()
        self.assertEqual(self.st.runtime(old["id"])["end_reason"], "expired")
        new = self.st.register(conversation="conv-idle", harness="claude", pid=harness.pid)
        reply = self.coord_json("claim", "src/x.py", runtime=old["id"])
        self.assertEqual(reply["runtime"], new["handle"])
        self.assertEqual([l["resource"] for l in self.st.leases_of(new["id"])], ["src/x.py"])

    def test_hello_inside_an_agent_returns_its_conversations_runtime(self):
        harness = Harness(self)
        live = self.st.register(conversation="conv-agent", harness="claude", pid=harness.pid)
        before = self.runtimes()
        reply = self.hello(env={"CLAUDE_CODE_SESSION_ID": "conv-agent"})
        self.assertEqual(reply["runtime"]["id"], live["id"])
        reply = self.hello(runtime=live["id"])
        self.assertEqual(reply["runtime"]["id"], live["id"])
        self.assertEqual(self.runtimes(), before)

    def test_hello_with_an_ended_runtime_registers_its_conversation_again(self):
        old = self.st.register(conversation="conv-ended")
        self.st.bye(old["id"])
        reply = self.hello(runtime=old["id"])
        self.assertNotEqual(reply["runtime"]["id"], old["id"])
        self.assertEqual(reply["runtime"]["conversation"], "conv-ended")
        proc = self.coord("hello", runtime="rt-" + "0" * 8, check=None)
        self.assertNotEqual(proc.returncode, 0)


class StatusCliTest(support.CoordTestCase):
    """`coord status` over real runtimes, leases and messages: JSON shape, size, and reads only."""

    def fleet(self, n=8):
        rts = [self.coord_json("hello", "--harness", "claude" if i % 2 else "codex")["runtime"] for i in range(n)]
        for i, rt in enumerate(rts):
            self.coord("claim", "src/mod%d.py" % i, "src/shared%d/" % i, runtime=rt["id"], check=0)
        self.coord("send", "please look", "--to", rts[1]["handle"], runtime=rts[0]["id"], check=0)
        self.coord("send", "and this", "--to", rts[1]["handle"], runtime=rts[0]["id"], check=0)
        return rts

    def test_status_json_has_each_live_agent_with_leases_unacked_and_activity(self):
        rts = self.fleet(3)
        self.coord("ack", "1", runtime=rts[1]["id"], check=0)
        self.coord("bye", runtime=rts[2]["id"], check=0)
        reply = self.coord_json("status")
        self.assertEqual(sorted(reply), ["agents", "ok", "work"])
        self.assertTrue(reply["ok"])
        self.assertEqual(reply["work"], [])
        self.assertEqual([a["handle"] for a in reply["agents"]], [rts[0]["handle"], rts[1]["handle"]])
        a0, a1 = reply["agents"]
        self.assertEqual(sorted(a0), ["cwd", "handle", "harness", "heartbeat_age", "id", "leases", "since", "state",
                                      "subagent", "task", "tool", "unacked", "work"])
        self.assertEqual((a0["id"], a0["harness"], a0["work"], a0["unacked"]), (rts[0]["id"], "codex", None, 0))
        self.assertEqual(a0["leases"], ["src/mod0.py", "src/shared0"])
        self.assertEqual((a1["harness"], a1["unacked"]), ("claude", 1))
        self.assertGreaterEqual(a0["heartbeat_age"], 0)

    def test_status_is_one_short_line_per_agent_without_ids(self):
        rts = self.fleet(8)
        out = self.coord("status", check=0).stdout
        lines = out.splitlines()
        self.assertEqual(lines[0], "agents:")
        self.assertEqual(len(lines), 9, out)
        self.assertIn("2 leases", lines[2])
        self.assertIn("2 unacked", lines[2])
        for rt in rts:
            self.assertNotIn(rt["id"], out)
        self.assertTrue(all(len(l) <= 100 for l in lines), out)
        self.assertLess(len(out.encode()), 1000, out)
        verbose = self.coord("status", "--verbose", check=0).stdout
        self.assertTrue(all(rt["id"] in verbose for rt in rts))
        self.assertEqual(self.coord("status", env={"COORD_DB": os.path.join(self.tmp, "empty.db")},
                                    check=0).stdout, "no live agents and no work\n")

    def test_status_reads_while_another_process_holds_the_write_lock_and_imports_no_work_code(self):
        self.fleet(2)
        conn = sqlite3.connect(self.db)
        self.addCleanup(conn.close)
        conn.execute("BEGIN IMMEDIATE")
        reply = self.coord_json("status", env={"COORD_BUSY_TIMEOUT": "0"})
        self.assertEqual(len(reply["agents"]), 2)
        conn.rollback()
        proc = subprocess.run([sys.executable, "-X", "importtime", support.COORD, "status"], env=self.env,
                              cwd=self.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        imported = {l.rsplit("|", 1)[-1].strip() for l in proc.stderr.splitlines() if "|" in l}
        self.assertNotIn("workspace", imported)
        self.assertNotIn("session", imported)

    def test_list_names_no_work_for_an_agent_outside_any(self):
        rt = self.hello()["runtime"]
        reply = self.coord_json("list")
        self.assertEqual([r["work"] for r in reply["runtimes"] if r["id"] == rt["id"]], [None])


class StartupTest(support.CoordTestCase):
    """coord runs on every agent command: its /bin/sh start caches the script's bytecode, and a
    command builds only its own parser."""

    def load_coord(self):
        loader = importlib.machinery.SourceFileLoader("coord_under_test", support.COORD)
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
        loader.exec_module(module)
        return module

    def test_the_sh_start_caches_bytecode_beside_the_real_file_and_runs_without(self):
        install = os.path.join(self.tmp, "project", ".coord")
        os.makedirs(install)
        for name in ("coord", "store.py", "harness_facts.py", "VERSION"):
            shutil.copy2(os.path.join(support.ROOT, name), install)
        real = os.path.join(install, "coord")
        bindir = os.path.join(self.tmp, "bin")
        os.makedirs(bindir)
        link = os.path.join(bindir, "coord")
        os.symlink(real, link)
        rt = self.hello()["runtime"]["id"]

        def run(*args):
            return subprocess.run([link] + list(args), env=dict(self.env, COORD_PYTHON=sys.executable,
                                                                COORD_RUNTIME_ID=rt),
                                  cwd=self.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        proc = run("claim", "src/a.py")
        self.assertEqual((proc.returncode, proc.stdout, proc.stderr),
                         (0, claimed("src/a.py"), ""))
        self.assertTrue(os.path.isfile(importlib.util.cache_from_source(real)), os.listdir(install))
        self.assertEqual(sorted(os.listdir(bindir)), ["coord"])  # nothing beside the link
        proc = run("check", "src/a.py", "--json")
        self.assertEqual((proc.returncode, json.loads(proc.stdout)["free"]), (0, True))
        # Where no bytecode can be written (a read-only install; here a file in the directory's
        # place), coord compiles in memory and behaves the same.
        shutil.rmtree(os.path.join(install, "__pycache__"))
        with open(os.path.join(install, "__pycache__"), "w"):
            pass
        proc = run("release", "src/a.py")
        self.assertEqual((proc.returncode, proc.stdout, proc.stderr), (0, "", ""))
        self.assertEqual(run("--version").stdout, self.coord("--version", check=0).stdout)
        self.assertEqual(self.coord_json("list")["leases"], [])

    def test_a_command_builds_only_its_own_subparser(self):
        coord = self.load_coord()

        def commands(argv):
            parser = coord.build_parser(argv, coord.commands_needed(argv))
            return list(parser._subparsers._group_actions[0].choices)

        self.assertEqual(commands(["claim", "src/a.py"]), ["claim"])
        self.assertEqual(commands(["--json", "check", "src/a.py", "--as", "x"]), ["check"])
        self.assertEqual(sorted(commands(["batch", "claim", "a", ":", "list"])),
                         sorted(("batch",) + coord.BATCH_ACTIONS))
        self.assertEqual(commands(["status", "--json"]), ["status"])
        self.assertEqual(commands(["--version"]), [])
        # Help, no command and an unknown one build every command, so that they list them all.
        for argv in ([], ["--json"], ["--help"], ["claim", "-h"], ["bogus"]):
            with self.subTest(argv=argv):
                self.assertEqual(commands(argv), list(coord.COMMANDS))
        self.assertIn("batch", self.coord("--help", check=0).stdout)
        self.assertIn("'remote', 'db')", self.coord("bogus", check=2).stderr)
        self.assertIn("the following arguments are required: RESOURCE", self.coord("claim", check=2).stderr)

    def test_a_work_command_builds_only_its_own_subparser(self):
        coord = self.load_coord()
        import workspace

        def work_commands(argv):
            parser = coord.build_parser(argv, coord.commands_needed(argv))
            work = parser._subparsers._group_actions[0].choices["work"]
            return list(work._subparsers._group_actions[0].choices) if work._subparsers else []

        # WORK_COMMANDS is every subcommand, in the parser's order
        self.assertEqual(work_commands(["work", "--help"]), list(workspace.WORK_COMMANDS))
        self.assertEqual(work_commands(["work", "create", "t"]), ["create"])
        self.assertEqual(work_commands(["work", "--json", "integrate", "land", "h", "--into", "main"]), ["integrate"])
        self.assertEqual(work_commands(["remote", "verify", "origin", "main", "--expect", "x"]), [])
        for argv in (["work"], ["work", "bogus"], ["work", "create", "--help"]):
            with self.subTest(argv=argv):
                self.assertEqual(work_commands(argv), list(workspace.WORK_COMMANDS))
        self.assertIn("invalid choice: 'bogus'", self.coord("work", "bogus", check=2).stderr)
        self.assertIn("required: --into", self.coord("work", "integrate", "land", "h", check=2).stderr)
        proc = self.coord("work", "integrate", "land", "h", "--into", "main", check=2)
        self.assertIn("'h' is not an exact five-word work handle", proc.stderr)  # parsed, then refused

    @unittest.skipUnless(os.path.exists("/dev/full"), "needs /dev/full")
    def test_a_reply_that_cannot_be_written_is_an_environment_error(self):
        # Buffered, as in the installed form (-I ignores PYTHONUNBUFFERED): the reply is written at exit.
        env = {k: v for k, v in self.env.items() if k != "PYTHONUNBUFFERED"}
        with open("/dev/full", "w") as full:
            proc = subprocess.run([sys.executable, support.COORD, "--version"], env=env, stdout=full,
                                  stderr=subprocess.PIPE, text=True)
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertEqual(proc.stderr, "coord: cannot write the reply: [Errno 28] No space left on device\n")


def _under_a_harness():
    """Whether this test process itself runs under an agent harness (then it is no person)."""
    import store
    return store.harness_ancestor(store.ancestor_processes())[0] is not None


# A program run by the name of a harness (python started through a symlink of that name, as
# support.FakeHarness does) that leaves a process behind the way an agent's tool call can:
# `sh -c '(... ) &'` exits at once, and its background child is reparented out of the harness's
# ancestry but keeps the terminal (its stdin reopened on it: an asynchronous list's is /dev/null),
# the session and (sh -c has no job control) the process group.
_LEAVE_BEHIND = r"""
import os, subprocess, sys, time
out, line = sys.argv[1], sys.argv[2]
subprocess.run(["/bin/sh", "-c", '(%s < /dev/tty > "$1.part" 2>&1; mv "$1.part" "$1") &' % line, "sh", out])
while not os.path.exists(out):
    time.sleep(0.05)
"""

# The same, or the command run directly, on a new pseudo-terminal that this program (running
# below a harness) opens: the pty's session leader is this program's child.
_PTY_BELOW = r"""
import os, pty, subprocess, sys, time
out, line, leave = sys.argv[1], sys.argv[2], sys.argv[3] == "leave"
pid, fd = pty.fork()
if pid == 0:
    if leave:
        subprocess.run(["/bin/sh", "-c", '(%s < /dev/tty > "$1.part" 2>&1; mv "$1.part" "$1") &' % line, "sh", out])
        while not os.path.exists(out):
            time.sleep(0.05)
    else:
        subprocess.run(["/bin/sh", "-c", '%s > "$1.part" 2>&1; mv "$1.part" "$1"' % line, "sh", out])
    os._exit(0)
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
os.waitpid(pid, 0)
"""


def _named_python(testcase, name):
    """A path that runs this Python under the command name `name` (a harness's, to look like it)."""
    import tempfile
    bindir = tempfile.mkdtemp(prefix="named-", dir=testcase.tmp)
    path = os.path.join(bindir, name)
    os.symlink(os.path.realpath(sys.executable), path)
    return path


class InstalledRepoCase(support.CoordTestCase):
    """coord installed into a fresh git repository, used the way README's quick start says:
    from the repository root, with nothing exported (no COORD_DB, project ID or runtime)."""

    def setUp(self):
        super().setUp()
        if _under_a_harness():
            self.skipTest("this test process runs under an agent harness, so no caller of it is a person")
        self.repo = os.path.join(self.tmp, "repo")
        os.mkdir(self.repo)
        subprocess.run(["git", "init", "-q", self.repo], check=True, env=self.env, timeout=60)
        subprocess.run(support.script_argv(os.path.join(support.ROOT, "install")) + [self.repo, "--project-id",
                        "my-project"], check=True, env=self.env, stdout=subprocess.DEVNULL, timeout=120)
        self.plain = {k: v for k, v in self.env.items() if k not in ("COORD_DB", "COORD_PROJECT_ID")}

    def terminal(self):
        return support.Terminal(self, self.plain, self.repo)


class PersonTest(InstalledRepoCase):
    """A person at a terminal: one stable runtime, found by the terminal's login session."""

    def test_quick_start_in_one_terminal_with_nothing_exported(self):
        term = self.terminal()
        rc, out = term.run(".coord/coord hello")
        self.assertEqual(rc, 0, out)
        me = out.strip()
        self.assertEqual(len(me.split("-")), 5, out)
        self.assertEqual(term.run(".coord/coord claim src/a.py"), (0, claimed("src/a.py")))
        rc, out = term.run(".coord/coord list")
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"%s  person on [^ ]+  \(you\)  src/a.py" % me)
        self.assertEqual(term.run(".coord/coord release src/a.py"), (0, ""))
        rc, out = term.run(".coord/coord list")
        self.assertNotIn("src/a.py", out)
        self.assertEqual(term.run(".coord/coord hello"), (0, me + "\n"), "hello again is the same person")

    def test_quick_start_outside_any_terminal_is_the_user(self):
        def run(*args):
            return subprocess.run([".coord/coord"] + list(args), cwd=self.repo, env=self.plain, text=True,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True, timeout=60)  # a new session: no controlling terminal
        self.assertEqual(run("claim", "src/a.py").returncode, 0)
        listed = json.loads(run("list", "--json").stdout)
        me = [r for r in listed["runtimes"] if r["person"]]
        self.assertEqual([(r["terminal"], r["pid"]) for r in me], [("no terminal", None)])
        me = me[0]["handle"]
        self.assertEqual([(l["resource"], l["handle"]) for l in listed["leases"]], [("src/a.py", me)])
        self.assertIn("person  (you)  src/a.py", run("list").stdout)
        self.assertEqual(run("release", "src/a.py").returncode, 0)
        self.assertEqual(run("claim", "src/b.py").returncode, 0)
        self.assertIn("person  (you)  src/b.py", run("list").stdout, "the user alone, on every call")

    def test_hello_without_a_terminal_is_a_runtime_of_its_own(self):
        # An agent with no hooks (or a script) that registers with `hello` gets its own identity,
        # never the person's; its later commands act as it when they name it.
        def run(*args, **kw):
            return subprocess.run([".coord/coord"] + list(args), cwd=self.repo, env=dict(self.plain, **kw),
                                  text=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, start_new_session=True, timeout=60)
        first, second = run("hello"), run("hello")
        self.assertEqual((first.returncode, second.returncode), (0, 0))
        a, b = first.stdout.strip(), second.stdout.strip()
        self.assertNotEqual(a, b, "each bare hello without a terminal is a new runtime")
        reply = json.loads(run("hello", "--json").stdout)
        self.assertEqual((reply["runtime"]["person"], reply["not_person"]), (False, "no controlling terminal"))
        self.assertIn("not the person at a terminal: no controlling terminal", first.stderr)
        export = run("hello", "--export").stdout.strip()
        self.assertRegex(export, r"^export COORD_RUNTIME_ID=[0-9a-f-]{36}$")
        self.assertIn("--runtime %s" % a, first.stderr)
        self.assertEqual(run("claim", "src/a.py", "--runtime", a).returncode, 0)
        rid = export.split("=", 1)[1]
        self.assertEqual(run("claim", "src/a.py", COORD_RUNTIME_ID=rid).returncode, 3, "a's lease, not the exported one's")
        listed = json.loads(run("list", "--json").stdout)
        self.assertEqual([(l["resource"], l["handle"]) for l in listed["leases"]], [("src/a.py", a)])
        term = self.terminal()
        rc, out = term.run(".coord/coord hello 2>&1")
        self.assertEqual(rc, 0, out)
        rc, again = term.run(".coord/coord hello 2>&1")
        self.assertEqual((rc, again), (0, out), "at a terminal, the person: the same runtime, nothing else said")

    def test_one_runtime_per_terminal_kept_while_it_lives(self):
        one, two = self.terminal(), self.terminal()
        a = one.run(".coord/coord hello")[1].strip()
        self.assertEqual(one.run(".coord/coord claim notes.txt")[0], 0)
        self.assertEqual(one.run("sh -c '.coord/coord hello'")[1].strip(), a, "a child process, same terminal")
        b = two.run(".coord/coord hello")[1].strip()
        self.assertNotEqual(a, b)
        rc, out = two.run(".coord/coord claim notes.txt")
        self.assertEqual(rc, 3, out)
        self.assertIn(a, out)
        rc, out = two.run(".coord/coord list")
        self.assertIn("%s  person on " % a, out)
        self.assertIn("%s  person on " % b, out)
        one.close()  # the terminal closes: its person ends and its leases go with it
        rc, out = two.run(".coord/coord list")
        self.assertNotIn(a, out)
        self.assertEqual(two.run(".coord/coord claim notes.txt"), (0, claimed("notes.txt")))

    def test_an_agent_harness_above_is_never_a_person(self):
        harness = support.FakeHarness(self, "codex")
        env = dict(self.plain)
        first = harness.run([".coord/coord", "hello"], "", env, self.repo)
        second = harness.run([".coord/coord", "hello"], "", env, self.repo)
        self.assertEqual((first[0], second[0]), (0, 0))
        self.assertNotEqual(first[1], second[1], "an agent's bare hello is no person's runtime")
        rc, _out, err = harness.run([".coord/coord", "claim", "x"], "", env, self.repo)
        self.assertEqual(rc, 3, err)
        self.assertIn("not a person: codex", err)

    def test_a_process_an_agent_leaves_in_the_persons_terminal_is_no_person(self):
        # Claude Code in the person's terminal runs a tool call that leaves a process behind: no
        # harness in its ancestry any more, the person's terminal, session and foreground group
        # (the harness's). The terminal's foreground belongs to the harness, and the process
        # descends from no session leader: no person. The person typing in that terminal is.
        term = self.terminal()
        rc, out = term.run(".coord/coord hello --json")
        self.assertEqual(rc, 0, out)
        person = json.loads(out)["runtime"]
        self.assertTrue(person["person"] and person["terminal"] != "no terminal", person)
        claude = _named_python(self, "claude")
        result = os.path.join(self.tmp, "left-behind.json")
        rc, out = term.run("%s -c %s %s '.coord/coord hello --json'" % (
            claude, shlex.quote(_LEAVE_BEHIND), result))
        self.assertEqual(rc, 0, out)
        with open(result) as f:
            reply = json.load(f)
        self.assertFalse(reply["runtime"]["person"], reply)
        self.assertNotEqual(reply["runtime"]["id"], person["id"])
        self.assertRegex(reply["not_person"], r"^(not started from its terminal's session leader"
                                              r"|its terminal belongs to claude \(pid \d+\))$")

    def test_a_pty_opened_below_a_harness_is_no_persons_terminal(self):
        harness = support.FakeHarness(self, "claude")
        for leave in ("direct", "leave"):
            with self.subTest(leave=leave):
                result = os.path.join(self.tmp, "pty-%s.json" % leave)
                rc, _out, err = harness.run([sys.executable, "-c", _PTY_BELOW, result, ".coord/coord hello --json",
                                             leave], "", self.plain, self.repo)
                self.assertEqual(rc, 0, err)
                with open(result) as f:
                    reply = json.load(f)
                self.assertFalse(reply["runtime"]["person"], reply)
                self.assertEqual(reply["not_person"], "an agent harness runs above this process" if leave == "direct"
                                 else "not started from its terminal's session leader")

    def test_naming_the_persons_runtime_from_elsewhere_is_refused(self):
        term = self.terminal()
        rc, out = term.run(".coord/coord hello --json")
        person = json.loads(out)["runtime"]
        for how in ({"COORD_RUNTIME_ID": person["id"]}, None):
            args = [".coord/coord", "claim", "src/a.py"] + (["--runtime", person["handle"]] if how is None else [])
            with self.subTest(how="variable" if how else "--runtime"):
                proc = subprocess.run(args, cwd=self.repo, env=dict(self.plain, **(how or {})), text=True,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      start_new_session=True, timeout=60)
                self.assertEqual(proc.returncode, 3, proc.stderr)
                self.assertIn("%s is a person's runtime (%s): only a command typed there acts as it"
                              % (person["handle"], person["terminal"]), proc.stderr)
        harness = support.FakeHarness(self, "codex")
        rc, _out, err = harness.run([".coord/coord", "claim", "src/a.py", "--runtime", person["handle"]], "",
                                    self.plain, self.repo)
        self.assertEqual(rc, 3, err)
        self.assertEqual(term.run(".coord/coord claim src/a.py --runtime %s" % person["handle"]),
                         (0, claimed("src/a.py")),
                         "from its own terminal, by name too")

    def test_coord_keeps_the_person_labels_for_itself(self):
        for args in (["hello", "--harness", "person"], ["hello", "--conversation", "person:0"],
                     ["hello", "--harness", "parked"]):
            with self.subTest(args=args):
                self.assertEqual(self.coord(*args).returncode, 2)


class HintAsTypedTest(InstalledRepoCase):
    """A hint names the command the way the user ran coord, so that pasted it runs."""

    def test_a_refusals_hint_pasted_from_the_repository_root_runs(self):
        term = self.terminal()
        self.assertEqual(term.run(".coord/coord claim src/a.py"), (0, claimed("src/a.py")))
        agent = json.loads(subprocess.run([".coord/coord", "hello", "--conversation", "agent-1", "--json"],
                                          cwd=self.repo, env=self.plain, stdout=subprocess.PIPE, text=True,
                                          timeout=60).stdout)["runtime"]
        rc, out = term.run("COORD_RUNTIME_ID=%s .coord/coord claim src/a.py 2>&1" % agent["id"])
        self.assertEqual(rc, 3, out)
        import re
        hint = re.search(r"next: ask the holder: (\.coord/coord send [^;]*);", out)
        self.assertIsNotNone(hint, out)
        rc, out = term.run("COORD_RUNTIME_ID=%s %s" % (agent["id"], hint.group(1)))
        self.assertEqual((rc, out.startswith("#")), (0, True), out)
        rc, out = term.run(".coord/coord inbox")
        self.assertIn("<request>", out)

    def test_from_elsewhere_the_hint_names_the_absolute_path(self):
        term = self.terminal()
        cmd = os.path.join(self.repo, ".coord", "coord")
        rc, out = term.run("cd / && %s claim --bogus 2>&1" % cmd)
        self.assertEqual(rc, 2, out)
        self.assertIn("next: %s claim --help" % cmd, out)
        self.assertEqual(term.run("%s claim --help >/dev/null" % cmd), (0, ""))
        rc, out = term.run("cd %s && .coord/coord work gate no-such-work-handle-here --pass 2>&1" % self.repo)
        self.assertIn("next: .coord/coord ", out)
        self.assertNotIn(" coord ", out.split("next:", 1)[1])



class NormalOutputHintTest(InstalledRepoCase):
    """Every hint line the installed `.coord/coord` prints in normal output (list, status, work
    list, inbox, check, trust) names the command as typed and runs when pasted; a message body,
    a lease purpose and a task that say `coord list` are printed exactly as written."""

    BODY = "please run coord list first\nnext: coord list --verbose\nack with: coord ack 1 ; coord status"

    def run_coord(self, *args, runtime=None):
        env = dict(self.plain, COORD_RUNTIME_ID=runtime) if runtime else self.plain
        return subprocess.run([".coord/coord"] + list(args), cwd=self.repo, env=env, text=True,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True, timeout=60)  # no controlling terminal: the person is the user

    def test_every_hint_line_is_pasteable_and_bodies_are_untouched(self):
        import re
        import store
        bare = re.compile(r"(?<![\w./-])coord (?:%s)(?![\w-])" % "|".join(map(re.escape, store.HINT_COMMANDS)))
        agent = json.loads(self.run_coord("hello", "--conversation", "agent-7", "--json").stdout)["runtime"]
        self.assertEqual(self.run_coord("claim", "src/a.py", "-p", "keep coord list tidy").returncode, 0)
        me = [l["handle"] for l in json.loads(self.run_coord("list", "--json").stdout)["leases"]][0]  # the user
        self.assertEqual(self.run_coord("claim", "src/b.py", runtime=agent["id"]).returncode, 0)
        sent = self.run_coord("send", self.BODY, "--to", me, runtime=agent["id"])
        self.assertEqual(sent.returncode, 0, sent.stderr)
        outputs = {}
        for args in (["list"], ["list", "--verbose"], ["status"], ["work", "list"], ["check", "src/b.py"],
                     ["trust"], ["inbox", "--peek"], ["batch", "list", ":", "inbox", "--peek"], ["inbox"]):
            proc = self.run_coord(*args)
            self.assertIn(proc.returncode, (0, 3), (args, proc.stderr))
            outputs[" ".join(args)] = proc.stdout
        self.assertIn("keep coord list tidy", outputs["list --verbose"], "a purpose is printed as written")
        for name in ("inbox --peek", "batch list : inbox --peek", "inbox"):
            self.assertEqual(outputs[name].count(self.BODY), 1, "the body, exactly as sent: " + outputs[name])
        hints = []
        for name, out in outputs.items():
            rest = out.replace(self.BODY, "").replace("keep coord list tidy", "")
            for line in rest.splitlines():
                self.assertIsNone(bare.search(line), "%s printed a hint that does not paste: %r" % (name, line))
                if ".coord/coord " in line:
                    hints.append(line)
        self.assertIn("purposes and expiry: .coord/coord list --verbose", outputs["list"])
        self.assertIn("next: ask the holder: .coord/coord send", outputs["check src/b.py"])
        self.assertIn("turn on with: .coord/coord trust --carry-over on", outputs["trust"])
        ack = [l for l in outputs["inbox"].splitlines() if l.startswith("ack with: .coord/coord ")]
        self.assertEqual(len(ack), 1, outputs["inbox"])
        self.assertGreaterEqual(len(hints), 5, hints)
        # Pasted into a shell at the repository root, the hints run.
        for line in (ack[0], "purposes and expiry: .coord/coord list --verbose"):
            cmd = line.split(": ", 1)[1]
            proc = subprocess.run(cmd, shell=True, cwd=self.repo, env=self.plain, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True, timeout=60)
            self.assertEqual(proc.returncode, 0, (cmd, proc.stderr))
        self.assertEqual(self.run_coord("inbox", "--peek").stdout, "", "the pasted ack acknowledged the message")



class AckAllTest(support.CoordTestCase):
    """`ack --all` acknowledges what the caller was shown (delivered: a hook injected it or
    `inbox` printed it) in one transaction; a message not shown yet (queued, arrived after the
    read) stays open, so reminders keep coming for it only."""

    def test_ack_all_acks_what_was_shown_and_leaves_what_arrived_since(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        first = self.coord_json("send", "first", "--to", b["handle"], runtime=a["id"])
        shown = self.coord("inbox", runtime=b["id"], check=0).stdout
        self.assertIn("ack with: ", shown)
        self.assertIn(" ack --all", shown)
        later = self.coord_json("send", "arrived after the read", "--to", b["handle"], runtime=a["id"])
        reply = self.coord_json("ack", "--all", runtime=b["id"])
        self.assertEqual((reply["acked"], reply["unseen"]), ([first["id"]], 1))
        peek = self.coord_json("inbox", "--peek", runtime=b["id"])
        self.assertEqual([(m["id"], m["state"]) for m in peek["messages"]], [(later["id"], "queued")])
        import store
        st = self.open_project()
        context = st.pending_context(b["id"])
        self.assertIn("arrived after the read", context)  # its body, once
        self.assertNotIn("#%d " % first["id"], context)
        self.assertIn("unacked #%d" % later["id"], st.pending_context(b["id"]))  # then its reminder
        self.assertEqual(self.coord_json("ack", "--all", runtime=b["id"])["acked"], [later["id"]])
        self.assertIsNone(st.pending_context(b["id"]), "no reminder after ack --all")
        self.assertEqual(self.coord("ack", runtime=b["id"]).returncode, 2, "IDs or --all")
        self.assertEqual(self.coord("ack", "--all", "1", runtime=b["id"]).returncode, 2, "not both")


if __name__ == "__main__":
    unittest.main()


# --------------------------------------------------------------------------- the same CLI on a PostgreSQL project (issue 25, pgroute)
# Each class below is an existing one with support.PostgresProject first: COORD_DB is a
# postgresql:// URL, coord starts the host process on demand and every command goes through it.

class PgCliTest(support.PostgresProject, CliTest):
    test_corrupt_database_is_reported_without_traceback = None  # a SQLite file's own fault


class PgBatchTest(support.PostgresProject, BatchTest):
    pass


class PgCliRaceTest(support.PostgresProject, CliRaceTest):
    pass


class PgSupersededProcessTest(support.PostgresProject, SupersededProcessTest):
    pass


class PgLivenessCliTest(support.PostgresProject, LivenessCliTest):
    pass


class PgPersonTest(support.PostgresProject, PersonTest):
    PG_PROJECT = "my-project"


class PgAckAllTest(support.PostgresProject, AckAllTest):
    pass


class PgStatusCliTest(support.PostgresProject, StatusCliTest):
    # holds SQLite's write lock by hand; on PostgreSQL status reads in a snapshot, never the lock
    test_status_reads_while_another_process_holds_the_write_lock_and_imports_no_work_code = None


class PgCliRoutingTest(support.PostgresProject, support.CoordTestCase):
    """coord's commands on a PostgreSQL project: through the host process, started on demand,
    never the driver in the command's own process."""

    def test_a_command_starts_the_host_process_on_demand(self):
        import store
        import hostclient
        self.assertFalse(hostclient.host_status(self.pg_project, self.host_socket)["running"])
        me = self.hello()["runtime"]
        self.assertTrue(hostclient.host_status(self.pg_project, self.host_socket)["running"])
        self.coord("claim", "src/a.py", runtime=me["id"], check=0)
        self.assertEqual([l["resource"] for l in self.open_project().leases_of(me["id"])], ["src/a.py"])
        status = self.coord_json("db", "status")
        self.assertEqual((status["engine"], status["project"], status["settings"]),
                         ("postgresql", self.pg_project, "COORD_DB"))
        self.assertTrue(status["host"]["running"])
        self.assertIsInstance(status["host"]["round_trip_ms"], float)

    def test_no_command_imports_the_driver(self):
        probe = ("import json, runpy, sys, io\n"
                 "g = runpy.run_path(sys.argv[1], run_name='coord_probe')\n"
                 "code = g['main'](sys.argv[2:])\n"
                 "print(json.dumps({'code': code, 'modules': sorted(m for m in sys.modules"
                 " if m.split('.')[0] in ('psycopg', 'psycopg_binary', 'psycopg_c'))}))\n")
        me = self.hello()["runtime"]
        for args in (["claim", "src/a.py"], ["list"], ["release", "src/a.py"], ["send", "hi", "--to", me["handle"]]):
            with self.subTest(args=args):
                proc = subprocess.run([sys.executable, "-S", "-c", probe, support.COORD] + args,
                                      env=dict(self.env, COORD_RUNTIME_ID=me["id"]), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, timeout=60)
                reply = json.loads(proc.stdout.strip().splitlines()[-1])
                self.assertEqual((reply["code"], reply["modules"]), (0, []), proc.stderr)

    def test_down_and_unstartable_a_command_exits_4_with_the_command_that_starts_it(self):
        # The server is reachable but refuses this database: the host process cannot start.
        bad = self.pg_url.replace("/postgres?", "/no_such_database?")
        proc = self.coord("list", env={"COORD_DB": bad})
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertIn("coord's host process for project %s is not running and did not start: the database"
                      " no_such_database that the URL names does not exist on that server" % self.pg_project, proc.stderr)
        self.assertIn("next: start it: %s db start (its log: %s.log)" % (support.COORD, self.host_socket), proc.stderr)


class PgMigrateTest(InstalledRepoCase):
    """coord db migrate: the person moves an installed project's records to PostgreSQL and back,
    verified (counts, the audit export's digest), the old copy kept; an agent may not."""

    def setUp(self):
        super().setUp()
        import store
        import hostclient
        server, self.psycopg = support.require_postgres(self)
        self.url = support.pg_url(server)
        self.plain.update(PYTHONPATH=support.psycopg_dir(), COORD_PYTHON=sys.executable)
        self.sqlite = os.path.join(self.state, "fleet-agent-coord", "my-project.sqlite3")
        self.settings = store.project_url_path("my-project", self.plain)
        self.addCleanup(self._drop, server)
        self.addCleanup(support.stop_host_process, hostclient.project_host_socket("my-project", self.plain))

    def _drop(self, server):
        import store
        import pg
        with self.psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute('DROP SCHEMA IF EXISTS "%s" CASCADE' % pg.pg_schema("my-project"))

    def run_plain(self, *args, **env):
        return subprocess.run([".coord/coord"] + list(args), cwd=self.repo, env=dict(self.plain, **env), text=True,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True, timeout=120)

    def records(self):
        audit = self.run_plain("audit", "--private")
        self.assertEqual(audit.returncode, 0, audit.stderr)
        listed = json.loads(self.run_plain("list", "--all", "--json").stdout)
        return audit.stdout, sorted((l["resource"], l["handle"]) for l in listed["leases"])

    def test_the_person_moves_the_project_to_postgresql_and_back(self):
        agent = json.loads(self.run_plain("hello", "--conversation", "c1", "--json").stdout)["runtime"]
        self.assertEqual(self.run_plain("claim", "src/a.py", "-p", "fix", runtime=agent["id"],
                                        COORD_RUNTIME_ID=agent["id"]).returncode, 0)
        self.assertEqual(self.run_plain("send", "hello there", "--to", agent["handle"],
                                        COORD_RUNTIME_ID=agent["id"]).returncode, 0)
        before = self.records()
        term = self.terminal()
        rc, out = term.run(".coord/coord db migrate '%s'" % self.url)
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"moved project my-project from sqlite to postgresql: \d+ rows, audit 3 lines")
        self.assertFalse(os.path.exists(self.sqlite))
        aside = [f for f in os.listdir(os.path.dirname(self.sqlite)) if f.startswith("my-project.sqlite3.migrated-")
                 and not f.endswith(("-wal", "-shm"))]
        self.assertEqual(len(aside), 1, "the SQLite source is kept, renamed aside")
        with open(self.settings) as f:
            self.assertEqual(f.read().strip(), self.url)
        self.assertEqual(os.stat(self.settings).st_mode & 0o777, 0o600)
        self.assertEqual(self.records(), before, "every record, through the host process")
        status = json.loads(self.run_plain("db", "status", "--json").stdout)
        self.assertEqual((status["engine"], status["host"]["running"]), ("postgresql", True))
        self.assertEqual(self.run_plain("claim", "src/b.py", COORD_RUNTIME_ID=agent["id"]).returncode, 0)
        moved = self.records()

        rc, out = term.run(".coord/coord db migrate sqlite")
        self.assertEqual(rc, 0, out)
        self.assertIn("moved project my-project from postgresql to sqlite", out)
        self.assertFalse(os.path.exists(self.settings))
        self.assertTrue(any(f.startswith("my-project.url.migrated-") for f in os.listdir(os.path.dirname(self.sqlite))))
        self.assertTrue(os.path.exists(self.sqlite))
        self.assertEqual(self.records(), moved)
        self.assertEqual(json.loads(self.run_plain("db", "status", "--json").stdout)["engine"], "sqlite")

        # The schema still holds the records (nothing was deleted): moving there again is refused.
        rc, out = term.run(".coord/coord db migrate '%s'" % self.url)
        self.assertEqual(rc, 3, out)
        self.assertIn("already holds records", out)
        self.assertTrue(os.path.exists(self.sqlite), "the source is untouched")
        self.assertFalse(os.path.exists(self.settings))
        # The refusal names the way there again, which works as written.
        drop = re.search(r"runs (DROP SCHEMA \S+ CASCADE); then \S*coord db setup; then: \S*coord db migrate '([^']+)'",
                         " ".join(out.split()))
        self.assertIsNotNone(drop, out)
        self.assertEqual(drop.group(2), self.url)
        with self.psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(drop.group(1))
        rc, out = term.run("COORD_ADMIN_URL='%s' .coord/coord db setup" % self.url)
        self.assertEqual(rc, 0, out)
        rc, out = term.run(".coord/coord db migrate '%s'" % self.url)
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.records(), moved)
        term.close()

    def test_a_password_in_the_url_on_the_command_line_is_refused(self):
        term = self.terminal()
        for given, bare in ((self.url.replace("coord@", "coord:s3cret@"), self.url),
                            (self.url + "&password=s3cret", self.url)):
            for command in ("migrate", "join"):
                rc, out = term.run(".coord/coord db %s '%s'" % (command, given))
                self.assertEqual(rc, 2, out)
                self.assertIn("coord db %s: the URL on the command line carries a password" % command, out)
                self.assertIn("~/.pgpass", out)
                self.assertIn("db %s '%s'" % (command, bare), " ".join(out.split()))
        self.assertFalse(os.path.exists(self.settings), "nothing was written")
        term.close()

    def test_an_agent_may_not_move_the_project(self):
        self.assertEqual(self.run_plain("claim", "src/a.py").returncode, 0)
        proc = self.run_plain("db", "migrate", self.url, CLAUDECODE="1")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("moving the project's database is the person's decision", proc.stderr)
        self.assertIn("coord db migrate postgresql://...", proc.stderr)
        self.assertNotIn("coord:s", proc.stderr)
        self.assertTrue(os.path.exists(self.sqlite))
        self.assertFalse(os.path.exists(self.settings))

    def test_with_coord_db_set_it_refuses_and_moves_nothing(self):
        self.assertEqual(self.run_plain("claim", "src/a.py").returncode, 0)
        term = self.terminal()
        rc, out = term.run("COORD_DB=%s .coord/coord db migrate '%s'" % (shlex.quote(self.sqlite), self.url))
        term.close()
        self.assertEqual(rc, 3, out)
        self.assertIn("COORD_DB is set", out)
        self.assertTrue(os.path.exists(self.sqlite))
        self.assertFalse(os.path.exists(self.settings))


class PgSetupCommandTest(InstalledRepoCase):
    """coord db setup: the person creates the project's PostgreSQL roles, schema, grants and
    row-level security (pg.pg_setup), the admin URL typed at a prompt or read from
    $COORD_ADMIN_URL, never an argument; an agent may not."""

    def setUp(self):
        super().setUp()
        import store
        import pg
        server, self.psycopg = support.require_postgres(self)
        self.admin = support.pg_url(server)
        self.dsn = server.dsn()
        self.plain.update(PYTHONPATH=support.psycopg_dir(), COORD_PYTHON=sys.executable)
        self.login = "coord_host_%s" % os.urandom(4).hex()
        self.names = pg.pg_role_names("my-project")
        self.addCleanup(self._drop)

    def _drop(self):
        import store
        import pg
        with self.psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute('DROP SCHEMA IF EXISTS %s CASCADE' % pg.pg_ident(pg.pg_schema("my-project")))
            for role in [self.login] + list(self.names.values()):
                if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                    conn.execute("DROP OWNED BY %s CASCADE" % pg.pg_ident(role))
                    conn.execute("DROP ROLE %s" % pg.pg_ident(role))

    def member(self):
        with self.psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT rolcanlogin, pg_has_role(rolname, %s, 'MEMBER') FROM pg_roles WHERE rolname = %s",
                               (self.names["group"], self.login)).fetchone()
            owner = conn.execute("SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = %s",
                                 (self.names["group"],)).fetchone()
        return row, owner and owner[0]

    def test_the_person_sets_the_project_up_with_the_admin_url_typed_at_the_prompt(self):
        term = self.terminal()
        os.write(term.fd, (".coord/coord db setup --login %s; echo %s$?%s\n" % (
            self.login, term._MARK, term._MARK)).encode())
        term._read_until(b"PostgreSQL admin URL")
        os.write(term.fd, (self.admin + "\n").encode())
        buf, m = term._read_until((term._MARK + r"(\d+)" + term._MARK).encode())
        out = buf[:m.start()].decode("utf-8", "replace")
        self.assertEqual(int(m.group(1)), 0, out)
        self.assertIn("project my-project: owner %s (NOLOGIN), group %s; login roles: %s"
                      % (self.names["owner"], self.names["group"], self.login), out)
        self.assertIn("FORCE ROW LEVEL SECURITY", out)
        self.assertNotIn(self.admin, out, "the URL is not echoed")
        self.assertEqual(self.member(), ((True, True), self.names["owner"]))
        # Again, from the environment (idempotent), with --json.
        rc, out = term.run("COORD_ADMIN_URL='%s' .coord/coord db setup --json" % self.admin)
        term.close()
        self.assertEqual(rc, 0, out)
        self.assertEqual(json.loads(out.strip().splitlines()[-1])["owner"], self.names["owner"])

    def test_an_agent_may_not_and_nothing_asks_without_a_terminal(self):
        proc = subprocess.run([".coord/coord", "db", "setup", "--login", self.login], cwd=self.repo,
                              env=dict(self.plain, CLAUDECODE="1", COORD_ADMIN_URL=self.admin), text=True,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True, timeout=120)
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("setting up the project's database roles is the person's decision", proc.stderr)
        self.assertEqual(self.member(), (None, None), "nothing was created")
        term = self.terminal()  # the person, with no URL in the environment and nothing to type it on
        rc, out = term.run(".coord/coord db setup < /dev/null")
        term.close()
        self.assertEqual(rc, 2, out)
        self.assertIn("needs the admin URL", out)
        self.assertIn("COORD_ADMIN_URL", out)
        self.assertEqual(self.member(), (None, None), "nothing was created")

    def test_a_database_not_in_utf8_is_refused_in_one_sentence_that_names_the_command(self):
        db = "coord_ascii_%s" % os.urandom(4).hex()
        with self.psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE %s ENCODING 'SQL_ASCII' LOCALE_PROVIDER 'libc' LOCALE 'C'"
                         " TEMPLATE template0" % db)
        self.addCleanup(self._drop_database, db)
        admin = self.admin.replace("/postgres?", "/%s?" % db)
        term = self.terminal()
        for verbose in ("", " --verbose"):
            rc, out = term.run("COORD_ADMIN_URL='%s' .coord/coord db setup --login %s%s" % (admin, self.login, verbose))
            self.assertEqual(rc, 4, out)
            self.assertNotIn("Traceback", out)
            self.assertNotIn("...", out)
            self.assertIn("database %s is encoded SQL_ASCII, not UTF8" % db, out)
            self.assertIn("CREATE DATABASE %s ENCODING 'UTF8' TEMPLATE template0" % db, out)
        term.close()
        self.assertEqual(self.member(), (None, None), "nothing was created")

    def test_an_error_of_host_py_is_shown_whole(self):
        # A host.py that dies before its JSON (here a sitecustomize in its process alone prints a
        # long last line and exits): coord shows that line whole, never cut with an ellipsis.
        site = os.path.join(self.tmp, "site")
        os.mkdir(site)
        why = "the driver could not load: " + " ".join("part%d" % i for i in range(120))
        with open(os.path.join(site, "sitecustomize.py"), "w") as f:
            f.write("import os, sys\nif b'host.py' in open('/proc/self/cmdline', 'rb').read():\n"
                    "    sys.stderr.write('noise\\n%s\\n'); sys.stderr.flush(); os._exit(7)\n" % why)
        env = dict(self.plain, COORD_ADMIN_URL=self.admin,
                   PYTHONPATH=os.pathsep.join([site, self.plain["PYTHONPATH"]]))
        term = support.Terminal(self, env, self.repo)  # the person's command
        rc, out = term.run(".coord/coord db setup")
        term.close()
        self.assertEqual(rc, 4, out)
        self.assertIn("host.py setup exited 7): %s" % why, out)
        self.assertNotIn("\u2026", out)
        with open(os.path.join(self.plain["XDG_STATE_HOME"], "fleet-agent-coord", "errors.log")) as f:
            self.assertIn("noise\n%s" % why, f.read(), "what it printed, whole, in errors.log")

    def _drop_database(self, db):
        with self.psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS %s" % db)
