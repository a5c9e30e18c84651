"""End-to-end tests of asyncgate_client against a real gate.

Usage: python3 test_client.py URL ADMIN_KEY AGENT_KEY WORKER_KEY WORKER_ID

Run from Go by cmd/gate's TestClientPython (``go test ./cmd/gate -run
ClientPython``), which starts ``gate serve`` on SQLite and on PostgreSQL and
makes the keys. The tasks are completed by a worker of asyncgate_worker.
Conditions are polled with generous timeouts; the only timing assertions
are lower bounds (a wait that must last at least a Retry-After) and "at
once" for a wait that must not sleep through a Retry-After of 30 s.

FakeGateTests run against a local fake gate (headers, Retry-After, errors
without a JSON body) and need no arguments:
``python3 -m unittest -v test_client.FakeGateTests``.
"""

import base64
import datetime
import email.utils
import json
import logging
import os
import sys
import tempfile
import threading
import time
import unittest
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import asyncgate_client as ac  # noqa: E402
import asyncgate_worker as aw  # noqa: E402

URL = ADMIN = AGENT = WORKER = WORKER_ID = ""


def put_type(name, lease_seconds=10, **extra):
    body = {"task_type": name, "lease_seconds": lease_seconds, "requeue_delay_seconds": 0}
    body.update(extra)
    st, out = ac.Client(URL, ADMIN).do("PUT", "/v1/admin/task-types/" + name, body)
    assert st == 200, (st, out)


def wait_for(what, cond, timeout=60.0):
    deadline = time.time() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.02)


def unique(prefix):
    return prefix + "-" + uuid.uuid4().hex[:12]


def every(page, **kw):
    """Every item of a paged list method, following its cursors."""
    items, cursor = page(**kw)
    while cursor:
        more, cursor = page(cursor=cursor, **kw)
        items += more
    return items


class GateTests(unittest.TestCase):
    def setUp(self):
        self.c = ac.Client(URL, AGENT)

    def start_worker(self, task_type, handler):
        r = aw.Runner(aw.Client(URL, WORKER), worker_id=WORKER_ID, poll_wait=1.0, idle_wait=0.1,
                      poll_backoff=(0.1, 1.0), spool_path=os.path.join(tempfile.mkdtemp(), "spool.jsonl"),
                      shutdown_timeout=10.0)
        r.task(task_type)(handler)
        th = threading.Thread(target=r.run, daemon=True)
        th.start()

        def stop():
            r.stop()
            th.join(60)
            self.assertFalse(th.is_alive(), "run() did not return")
        self.addCleanup(stop)

    def test_enqueue_worker_completes_wait_result_inbox(self):
        put_type("pyc.echo")
        ack = self.c.enqueue("pyc.echo", {"hello": "world"}, summary="say it back", priority=7)
        tid = ack["task_id"]
        self.assertEqual((ack["status"], ack["is_duplicate"]), ("queued", False))
        self.assertTrue(ack["receipt_id"])
        # The wait is polling before any worker runs: it must wait, not
        # return the queued task.
        seen, out = [], {}
        waiter = threading.Thread(target=lambda: out.update(
            task=self.c.wait(tid, timeout=60, interval=0.05, on_poll=lambda t: seen.append(t["status"]))))
        waiter.start()
        wait_for("a poll of the queued task", lambda: "queued" in seen)
        self.assertTrue(waiter.is_alive())

        def echo(task):
            task.progress(50, "halfway")
            return {"echo": task.params}
        self.start_worker("pyc.echo", echo)
        waiter.join(60)
        self.assertFalse(waiter.is_alive())
        t = out["task"]
        self.assertEqual((t["task_id"], t["status"], t["priority"], t["task_summary"]),
                         (tid, "succeeded", 7, "say it back"))
        self.assertEqual(seen[-1], "succeeded")
        self.assertEqual(self.c.result_value(tid), {"echo": {"hello": "world"}})
        res = self.c.result(tid)
        self.assertIs(res["checksum_valid"], True)
        self.assertEqual(ac.decode_result(res), {"echo": {"hello": "world"}})
        self.assertEqual([p.get("message") for p in self.c.progress(tid)], ["halfway"])
        self.assertEqual([a["outcome"] for a in self.c.attempts(tid)], ["succeeded"])
        kinds = [e["event_type"] for e in self.c.timeline(tid)["events"]]
        self.assertIn("lease.granted", kinds)
        receipts, _ = self.c.receipts(tid)
        self.assertGreaterEqual(len(receipts), 2)
        first = receipts[0]["receipt_id"]
        got = self.c.get_receipt(first)
        self.assertEqual((got["receipt_id"], got["task_id"]), (first, tid))
        self.assertTrue(got.get("terminated_by"))
        self.assertIs(self.c.check_terminator(first)["has_terminator"], True)
        self.assertEqual(self.c.receipt_chain(receipts[-1]["receipt_id"])[0]["receipt_id"], receipts[-1]["receipt_id"])
        tasks, _ = self.c.list_tasks(status=["succeeded"], task_types=["pyc.echo"])
        self.assertIn(tid, [x["task_id"] for x in tasks])

        # The outcome is in the agent's inbox, unread, until it is marked.
        items, _ = self.c.inbox(unread=True, task_id=tid)
        self.assertEqual(len(items), 1, items)
        iid = items[0]["inbox_id"]
        self.assertIsNone(items[0]["read_at"])
        self.assertEqual(self.c.mark_read([iid])["marked"], 1)
        self.assertEqual(self.c.inbox(unread=True, task_id=tid)[0], [])
        items, _ = self.c.inbox(task_id=tid)
        self.assertEqual([i["inbox_id"] for i in items], [iid])
        self.assertIsNotNone(items[0]["read_at"])
        again = self.c.mark_read([iid])
        self.assertEqual((again["marked"], again["already_read"]), (0, [iid]))
        with self.assertRaises(ac.NotFoundError) as cm:
            self.c.mark_read(["IN-not-mine"])
        self.assertEqual(cm.exception.code, "not_found")

        # The archive leaves the task readable.
        self.c.archive(tid)
        self.assertTrue(self.c.get_task(tid)["result"].get("archived_at"))

    def test_idempotent_reenqueue(self):
        put_type("pyc.idem")
        key = unique("idem")
        first = self.c.enqueue("pyc.idem", {"n": 1}, idempotency_key=key)
        again = self.c.enqueue("pyc.idem", {"n": 1}, ac.EnqueueOptions(idempotency_key=key))
        self.assertEqual((first["is_duplicate"], again["is_duplicate"]), (False, True))
        self.assertEqual(again["task_id"], first["task_id"])
        self.assertEqual(self.c.get_task(first["task_id"])["idempotency_key"], key)
        other = self.c.enqueue("pyc.idem", {"n": 1}, idempotency_key=unique("idem"))
        self.assertNotEqual(other["task_id"], first["task_id"])
        with self.assertRaises(TypeError):
            self.c.enqueue("pyc.idem", {}, ac.EnqueueOptions(), priority=3)

    def test_enqueue_options_reach_the_gate(self):
        put_type("pyc.opts")
        dep = self.c.enqueue("pyc.opts", {})["task_id"]
        ack = self.c.enqueue("pyc.opts", {"x": 1}, delay=0.2, max_retries=2, after=[dep],
                             after_rule=ac.ALL_FINISHED, resource_intents=[("FILE:/pyc/a", ac.MUTATES)])
        t = self.c.get_task(ack["task_id"])
        self.assertEqual((t["status"], t["max_retries"]), ("waiting", 2))
        self.assertIn({"resource": "FILE:/pyc/a", "predicate": "MUTATES"}, t["resource_intents"])
        later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        t = self.c.get_task(self.c.enqueue("pyc.opts", {}, not_before=later)["task_id"])
        self.assertEqual(t["status"], "scheduled")

    def test_batch_per_item_answers(self):
        put_type("pyc.batch")
        k0, k1 = unique("b0"), unique("b1")
        first = self.c.enqueue("pyc.batch", {"i": 0}, idempotency_key=k0)
        got = self.c.enqueue_batch([
            ac.NewTask("pyc.batch", {"i": 0}, ac.EnqueueOptions(idempotency_key=k0)),
            ac.NewTask("pyc.batch", {"i": 1}, ac.EnqueueOptions(idempotency_key=k1, priority=9)),
            ac.NewTask("pyc.no-such-type", {"i": 2}),
        ])
        self.assertEqual([g.ok for g in got], [True, True, False])
        self.assertEqual((got[0].task["task_id"], got[0].task["is_duplicate"]), (first["task_id"], True))
        self.assertEqual(got[1].task["is_duplicate"], False)
        self.assertEqual(self.c.get_task(got[1].task["task_id"])["priority"], 9)
        self.assertIsInstance(got[2].error, ac.APIError)
        self.assertEqual((got[2].error.status, got[2].error.code), (400, "unknown_task_type"))
        self.assertTrue(got[2].error.detail)
        with self.assertRaises(ValueError):
            self.c.enqueue_batch([])

    def test_cancel(self):
        put_type("pyc.idle")
        tid = self.c.enqueue("pyc.idle", {})["task_id"]
        t = self.c.cancel(tid, "not needed")
        self.assertEqual((t["task_id"], t["status"]), (tid, "canceled"))
        self.assertEqual(self.c.get_task(tid)["status"], "canceled")
        self.assertEqual(self.c.wait(tid, timeout=10)["status"], "canceled")
        with self.assertRaises(ac.NotFoundError):
            self.c.cancel("T-no-such-task")

    def test_open_obligations(self):
        put_type("pyc.owed")
        tid = self.c.enqueue("pyc.owed", {})["task_id"]
        obs = every(self.c.open_obligations, role="obligee", limit=20)
        mine = [o for o in obs if o.get("task_id") == tid]
        boot = self.c.session_bootstrap(limit=500)
        me = boot["principal"]
        self.assertEqual([(o["receipt_type"], o["obligor"], o["obligee"]) for o in mine],
                         [("task.assigned", "asyncgate", me)])
        self.assertEqual(every(self.c.open_obligations, role="obligor"), [])  # the agent owes nothing
        self.assertIn(tid, [o.get("task_id") for o in boot["owed_to_you"]])
        self.c.cancel(tid)
        obs = every(self.c.open_obligations, role="obligee", limit=20)
        self.assertNotIn(tid, [o.get("task_id") for o in obs])

    def test_workflow_submit_get_cancel(self):
        put_type("pyc.wf")
        key = unique("wf")
        sub = self.c.submit_workflow("py-flow", [
            ac.step("fetch", "pyc.wf", {"url": "u"}),
            ac.step("digest", "pyc.wf", {"style": "short"}, "fetch"),
        ], idempotency_key=key)
        wid = sub["workflow_id"]
        self.assertEqual((sub["status"], sub["is_duplicate"], sorted(sub["steps"])),
                         ("running", False, ["digest", "fetch"]))
        again = self.c.submit_workflow("py-flow", [
            ac.step("fetch", "pyc.wf", {"url": "u"}),
            ac.step("digest", "pyc.wf", {"style": "short"}, "fetch"),
        ], idempotency_key=key)
        self.assertEqual((again["workflow_id"], again["is_duplicate"]), (wid, True))
        w = self.c.get_workflow(wid)
        self.assertEqual((w["status"], w["final_step"], w["step_count"]), ("running", "digest", 2))
        self.assertEqual({s["name"]: s.get("after", []) for s in w["steps"]}, {"fetch": [], "digest": ["fetch"]})
        self.assertIn(wid, [x["workflow_id"] for x in every(self.c.list_workflows, status="running")])
        w = self.c.cancel_workflow(wid, "changed my mind")
        self.assertEqual(w["status"], "canceled")
        self.assertEqual(self.c.wait_workflow(wid, timeout=10, interval=0.05)["status"], "canceled")
        self.assertEqual(self.c.get_task(sub["steps"]["fetch"])["status"], "canceled")
        with self.assertRaises(ac.NotFoundError):
            self.c.get_workflow("WF-no-such-workflow")
        with self.assertRaises(ac.APIError) as cm:
            self.c.submit_workflow("loop", [ac.step("a", "pyc.wf", {}, "b"), ac.step("b", "pyc.wf", {}, "a")])
        self.assertEqual((cm.exception.status, cm.exception.code), (400, "workflow_cycle"))

    def test_workflow_step_start_and_intents(self):
        # A step's delay, not_before and resource_intents reach the gate: the
        # workflow shows when each delayed step may start, its task runs
        # under the intents, a changed start under the same key is a
        # conflict, and a bad intent is the error an enqueue gets.
        put_type("pyc.timed")
        key = unique("timed")
        nb = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=2)).replace(microsecond=0)

        def steps(delay):
            return [ac.step("a", "pyc.timed", {}),
                    ac.step("b", "pyc.timed", {}, "a", delay=delay, resource_intents=[("REPO:pyc", ac.READS)]),
                    ac.step("c", "pyc.timed", {}, not_before=nb)]
        before = time.time()
        sub = self.c.submit_workflow("py-timed", steps(3600), final_step="b", idempotency_key=key)
        w = self.c.get_workflow(sub["workflow_id"])
        b, c = w["steps"][1], w["steps"][2]
        self.assertEqual((b["name"], b["status"], c["name"], c["status"]), ("b", "waiting", "c", "scheduled"))
        at_b = datetime.datetime.fromisoformat(b["available_at"].replace("Z", "+00:00")).timestamp()
        self.assertGreaterEqual(at_b, before + 3600 - 1, b)
        self.assertLessEqual(at_b, time.time() + 3600, b)
        self.assertEqual(datetime.datetime.fromisoformat(c["available_at"].replace("Z", "+00:00")), nb)
        self.assertEqual(self.c.get_task(sub["steps"]["b"])["resource_intents"],
                         [{"resource": "REPO:pyc", "predicate": "READS"}])
        with self.assertRaises(ac.APIError) as cm:
            self.c.submit_workflow("py-timed", steps(60), final_step="b", idempotency_key=key)
        self.assertEqual((cm.exception.status, cm.exception.code), (409, "idempotency_conflict"))
        with self.assertRaises(ac.APIError) as cm:
            self.c.submit_workflow("py-bad", [ac.step("x", "pyc.timed", {}, resource_intents=[("FILE:", ac.READS)])])
        self.assertEqual((cm.exception.status, cm.exception.code), (400, "invalid_resource"))
        self.c.cancel_workflow(sub["workflow_id"])

    def test_schedule_lifecycle(self):
        put_type("pyc.sched")
        name = unique("py-hourly")
        s = self.c.create_schedule(name, ac.schedule_template("pyc.sched", {"k": 1}, priority=4),
                                   interval_seconds=3600, missed_policy=ac.MISSED_SKIP)
        sid = s["schedule_id"]
        self.assertEqual((s["name"], s["interval_seconds"], s["paused"], len(s["next_runs"])),
                         (name, 3600, False, 5))
        self.assertEqual(s["template"]["priority"], 4)
        self.assertIn(sid, [x["schedule_id"] for x in every(self.c.list_schedules)])
        p = self.c.pause_schedule(sid)
        self.assertEqual((p["paused"], p["next_runs"]), (True, []))
        self.assertIs(self.c.get_schedule(sid)["paused"], True)
        r = self.c.resume_schedule(sid)
        self.assertIs(r["paused"], False)
        u = self.c.update_schedule(sid, name=name + "-daily", cron="0 9 * * *", timezone="Europe/Berlin")
        self.assertEqual((u["name"], u["cron"], u["timezone"]), (name + "-daily", "0 9 * * *", "Europe/Berlin"))
        self.assertEqual(len(self.c.get_schedule(sid, next_runs=2)["next_runs"]), 2)
        self.c.delete_schedule(sid)
        with self.assertRaises(ac.NotFoundError):
            self.c.get_schedule(sid)
        types = [rc["receipt_type"] for rc in every(self.c.schedule_receipts, schedule_id=sid, limit=2)]
        self.assertEqual(types, ["schedule.created", "schedule.paused", "schedule.resumed", "schedule.updated", "schedule.deleted"])
        self.assertNotIn(sid, [x["schedule_id"] for x in every(self.c.list_schedules)])
        with self.assertRaises(ac.APIError) as cm:
            self.c.create_schedule(unique("bad"), ac.schedule_template("pyc.sched"), cron="not a cron")
        self.assertEqual(cm.exception.status, 400)
        with self.assertRaises(TypeError):
            self.c.update_schedule(sid, nmae="typo")

    def test_bad_requests_raise_the_typed_error(self):
        with self.assertRaises(ac.APIError) as cm:
            self.c.enqueue("pyc.no-such-type", {})
        e = cm.exception
        self.assertNotIsInstance(e, ac.NotFoundError)
        self.assertEqual((e.status, e.code, e.temporary), (400, "unknown_task_type", False))
        self.assertIn("pyc.no-such-type", e.detail)
        self.assertIn("unknown_task_type", str(e))
        with self.assertRaises(ac.NotFoundError) as cm:
            self.c.get_task("T-no-such-task")
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        with self.assertRaises(ac.APIError) as cm:  # strict bodies: an unknown field is a 400
            self.c.do("POST", "/v1/tasks", {"task_type": "x", "params": {}, "bogus": 1})
        self.assertEqual((cm.exception.status, cm.exception.code), (400, "bad_request"))
        with self.assertRaises(ac.APIError) as cm:
            ac.Client(URL, "agw_not-a-key").list_tasks()
        self.assertEqual((cm.exception.status, cm.exception.code), (401, "unauthorized"))
        with self.assertRaises(ac.APIError) as cm:  # a worker key may not queue
            ac.Client(URL, WORKER).enqueue("pyc.echo", {})
        self.assertEqual((cm.exception.status, cm.exception.code), (403, "forbidden"))


class FakeGate:
    """A local HTTP server answering from a list of (status, headers, body)
    in turn (the last one repeats) and recording each request."""

    def __init__(self, test, answers):
        self.answers, self.requests = list(answers), []
        gate = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def handle_one(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                gate.requests.append((self.command, self.path, self.headers, body))
                i = min(len(gate.requests), len(gate.answers)) - 1
                status, headers, out = gate.answers[i]
                raw = out if isinstance(out, bytes) else json.dumps(out).encode()
                # send_response would add a Date of its own ahead of an
                # answer's: a test's Date must be the only one.
                self.send_response_only(status)
                if "Date" not in headers:
                    self.send_header("Date", self.date_time_string())
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_PATCH = do_DELETE = handle_one

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]
        test.addCleanup(self.close)

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def busy(retry_after=None, code="database_unavailable"):
    h = {"Content-Type": "application/json"}
    if retry_after is not None:
        h["Retry-After"] = retry_after
    return 503, h, {"error": code, "detail": "try later"}


def task(status):
    return 200, {"Content-Type": "application/json"}, {"task_id": "T1", "status": status}


class FakeGateTests(unittest.TestCase):
    def test_requests_carry_key_agent_and_trace(self):
        gate = FakeGate(self, [(201, {}, {"task_id": "T1", "status": "queued", "is_duplicate": False})])
        c = ac.Client(gate.url + "/", "agw_k")
        c.enqueue("t", {"a": 1}, idempotency_key="k1", delay=1.5, not_before=datetime.datetime(2030, 1, 2, 3, 4, 5))
        c.with_trace("00-aaaa-bbbb-01", "v=1").cancel("T 1/x")
        ac.Client(gate.url, "agw_k", trace_propagator=lambda h: h.update(traceparent="00-cccc-dddd-01")).get_task("T1")
        (m1, p1, h1, b1), (m2, p2, h2, b2), (m3, p3, h3, _) = gate.requests
        self.assertEqual((m1, p1), ("POST", "/v1/tasks"))
        self.assertEqual((h1["Authorization"], h1["User-Agent"], h1["Content-Type"], h1["Accept"]),
                         ("Bearer agw_k", "asyncgate-client-python", "application/json", "application/json"))
        self.assertNotIn("traceparent", h1)
        self.assertEqual(json.loads(b1), {"task_type": "t", "params": {"a": 1}, "idempotency_key": "k1",
                                          "delay_seconds": 2, "not_before": "2030-01-02T03:04:05Z"})
        self.assertEqual((m2, p2, b2), ("POST", "/v1/tasks/T%201%2Fx/cancel", b""))
        self.assertEqual((h2["traceparent"], h2["tracestate"]), ("00-aaaa-bbbb-01", "v=1"))
        self.assertEqual((m3, p3, h3["traceparent"]), ("GET", "/v1/tasks/T1", "00-cccc-dddd-01"))

    def test_wait_polls_again_after_retry_after(self):
        gate = FakeGate(self, [task("queued"), busy("1"), task("succeeded")])
        start = time.monotonic()
        t = ac.Client(gate.url, "k").wait("T1", timeout=30, interval=0.05)
        self.assertEqual(t["status"], "succeeded")
        self.assertGreaterEqual(time.monotonic() - start, 1.0)  # the Retry-After, not the interval
        self.assertEqual(len(gate.requests), 3)

    def test_wait_polls_again_after_retry_after_date(self):
        now = time.time()
        date = email.utils.formatdate(now, usegmt=True)
        later = email.utils.formatdate(now + 1, usegmt=True)
        gate = FakeGate(self, [(429, {"Date": date, "Retry-After": later}, {"error": "quota_exceeded"}),
                               task("succeeded")])
        start = time.monotonic()
        self.assertEqual(ac.Client(gate.url, "k").wait("T1", timeout=30, interval=0.05)["status"], "succeeded")
        self.assertGreaterEqual(time.monotonic() - start, 0.9)

    def test_wait_ends_on_an_answer_without_retry_after(self):
        for answer in (busy(None), (400, {}, {"error": "bad_request", "detail": "no"}),
                       (404, {}, {"error": "not_found", "detail": "no such task"})):
            gate = FakeGate(self, [answer, task("succeeded")])
            with self.assertRaises(ac.APIError) as cm:
                ac.Client(gate.url, "k").wait("T1", timeout=30, interval=0.05)
            self.assertEqual(cm.exception.status, answer[0])
            self.assertFalse(cm.exception.has_retry_after)
            self.assertEqual(len(gate.requests), 1)

    def test_wait_gives_up_when_retry_after_outlasts_its_timeout(self):
        gate = FakeGate(self, [busy("30"), task("succeeded")])
        start = time.monotonic()
        with self.assertRaises(ac.APIError) as cm:
            ac.Client(gate.url, "k").wait("T1", timeout=5, interval=0.05)
        self.assertEqual((cm.exception.code, cm.exception.retry_after), ("database_unavailable", 30.0))
        self.assertLess(time.monotonic() - start, 4.0)
        self.assertEqual(len(gate.requests), 1)

    def test_wait_times_out_with_the_last_task(self):
        gate = FakeGate(self, [task("leased")])
        with self.assertRaises(ac.WaitTimeoutError) as cm:
            ac.Client(gate.url, "k").wait("T1", timeout=0.3, interval=0.05)
        self.assertEqual(cm.exception.last["status"], "leased")
        self.assertIsInstance(cm.exception, TimeoutError)

    def test_wait_ends_on_an_archived_task(self):
        # Past its retention a task is archived: finished, so wait returns it
        # instead of polling until its timeout.
        gate = FakeGate(self, [task("archived")])
        start = time.monotonic()
        got = ac.Client(gate.url, "k").wait("T1", timeout=5, interval=0.05)
        self.assertEqual(got["status"], "archived")
        self.assertLess(time.monotonic() - start, 2.0)
        self.assertEqual(len(gate.requests), 1)

    def test_errors_without_a_json_body(self):
        gate = FakeGate(self, [(502, {"Content-Type": "text/plain"}, b"upstream went away\n")])
        with self.assertRaises(ac.APIError) as cm:
            ac.Client(gate.url, "k").get_task("T1")
        self.assertEqual((cm.exception.status, cm.exception.code, cm.exception.detail),
                         (502, "Bad Gateway", "upstream went away"))
        self.assertTrue(cm.exception.temporary)

    def test_two_hundred_that_is_not_json(self):
        gate = FakeGate(self, [(200, {}, b"{cut off")])
        with self.assertRaises(ac.BadAnswerError):
            ac.Client(gate.url, "k").get_task("T1")

    def test_batch_answer_of_the_wrong_length(self):
        gate = FakeGate(self, [(200, {}, {"results": [], "succeeded": 0, "failed": 0})])
        with self.assertRaises(ac.BadAnswerError):
            ac.Client(gate.url, "k").enqueue_batch([ac.NewTask("t", {})])

    def test_retry_after_parsing(self):
        p = ac._parse_retry_after
        self.assertEqual(p(None, None), (0.0, False))
        self.assertEqual(p("", None), (0.0, False))
        self.assertEqual(p("soon", None), (0.0, False))
        self.assertEqual(p("-1", None), (0.0, False))
        self.assertEqual(p("0", None), (0.0, True))
        self.assertEqual(p(" 7 ", None), (7.0, True))
        self.assertEqual(p("9" * 40, None), (86400.0, True))
        self.assertEqual(p(email.utils.formatdate(1000.0, usegmt=True), 990.0), (10.0, True))
        self.assertEqual(p(email.utils.formatdate(1000.0, usegmt=True), 2000.0), (0.0, True))
        e = ac.APIError(503, "busy", retry_after=0.0, has_retry_after=True)
        self.assertEqual(ac._retry_after(e), 0.0)
        self.assertIsNone(ac._retry_after(ac.APIError(503, "busy")))
        self.assertIsNone(ac._retry_after(ac.APIError(409, "conflict", retry_after=5)))
        d = ac._retry_after(ac.APIError(429, "quota_exceeded", retry_after=600))
        self.assertTrue(60.0 <= d <= 66.0, d)

    def test_step_body(self):
        self.assertEqual(ac.step("s", "t"), {"name": "s", "task_type": "t"})
        naive = datetime.datetime(2026, 1, 2, 3, 4, 5)
        self.assertEqual(
            ac.step("s", "t", {"p": 1}, "a", "b", delay=0.2, not_before=naive,
                    resource_intents=[("FILE:/x", ac.MUTATES), {"resource": "REPO:r", "predicate": ac.READS}]),
            {"name": "s", "task_type": "t", "params": {"p": 1}, "after": ["a", "b"], "delay_seconds": 1,
             "not_before": "2026-01-02T03:04:05Z",
             "resource_intents": [{"resource": "FILE:/x", "predicate": "MUTATES"},
                                  {"resource": "REPO:r", "predicate": "READS"}]})
        self.assertEqual(ac.step("s", "t", not_before="2026-01-02T03:04:05+02:00", delay=-5)["not_before"],
                         "2026-01-02T03:04:05+02:00")
        self.assertNotIn("delay_seconds", ac.step("s", "t", delay=-5))

    def test_fire_key_and_result_decoding(self):
        at = datetime.datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=datetime.timezone.utc)
        self.assertEqual(ac.fire_key("S-1", at), "schedule:S-1:2026-01-02T03:04:05.12Z")
        plus2 = datetime.timezone(datetime.timedelta(hours=2))
        self.assertEqual(ac.fire_key("S-1", datetime.datetime(2026, 1, 2, 5, 4, 5, tzinfo=plus2)),
                         "schedule:S-1:2026-01-02T03:04:05Z")
        self.assertEqual(ac.decode_result({"content": {"a": 1}}), {"a": 1})
        self.assertEqual(ac.decode_result({"content_base64": base64.b64encode(b'{"b": 2}').decode()}), {"b": 2})
        with self.assertRaises(ac.NoContentError):
            ac.decode_result({"task_id": "T1", "result_pointer": "s3://x"})


if __name__ == "__main__":
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    URL, ADMIN, AGENT, WORKER, WORKER_ID = sys.argv[1:6]
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[6:])
