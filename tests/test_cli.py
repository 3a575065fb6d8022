"""The `coord` command line: exit codes, concise and JSON output, identity, batch."""

import json
import os
import subprocess
import sys

import support


class CliTest(support.CoordTestCase):
    def test_version_comes_from_VERSION(self):
        with open(os.path.join(support.ROOT, "VERSION")) as f:
            want = f.read().strip()
        self.assertEqual(self.coord("--version", check=0).stdout.strip(), "coord " + want)

    def test_hello_prints_only_the_handle(self):
        out = self.coord("hello", check=0).stdout
        self.assertEqual(len(out.strip().split("-")), 5, out)
        self.assertEqual(out.count("\n"), 1)

    def test_claim_success_prints_nothing_and_conflict_exits_3_naming_holder(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        ok = self.coord("claim", "src/a.py", "-p", "refactor parser", runtime=a["handle"], check=0)
        self.assertEqual((ok.stdout, ok.stderr), ("", ""))
        refused = self.coord("claim", "src", runtime=b["handle"], check=3)
        self.assertIn(a["handle"], refused.stderr)
        self.assertIn("refactor parser", refused.stderr)
        self.assertIn("coord send", refused.stderr)
        self.assertNotIn("Traceback", refused.stderr)
        data = json.loads(self.coord("claim", "src", "--json", runtime=b["handle"], check=3).stdout)
        self.assertEqual((data["ok"], data["exit"], data["conflicts"][0]["handle"]), (False, 3, a["handle"]))

    def test_check_exit_status_and_as(self):
        a = self.hello()["runtime"]
        b = self.hello()["runtime"]
        self.coord("claim", "docs", runtime=a["id"], check=0)
        self.assertEqual(self.coord("check", "docs/x.md", "--as", b["handle"]).returncode, 3)
        self.assertEqual(self.coord("check", "docs/x.md", "--as", a["handle"]).returncode, 0)
        self.assertEqual(self.coord("check", "other").stdout, "")
        data = json.loads(self.coord("check", "docs", "--json").stdout)
        self.assertFalse(data["free"])

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
        proc = self.coord("claim", "x", check=3)
        self.assertIn("coord hello", proc.stderr)

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
        data = self.coord_json("batch", "claim", "docs/plan.md", "-p", "plan", ":", "send", "a : b", "--to",
                               b["handle"], ":", "list", runtime=a["id"])
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


if __name__ == "__main__":
    import unittest
    unittest.main()
