"""End-to-end tests of asyncgate_worker against a real gate.

Usage: python3 test_worker.py URL ADMIN_KEY AGENT_KEY WORKER_KEY WORKER_ID

Run from Go by cmd/gate's TestWorkerPython (``go test ./cmd/gate -run
Worker``), which starts ``gate serve`` and makes the keys. Conditions are
polled with generous timeouts; the only timing assertions are lower bounds
(a wait that must last at least a Retry-After), never upper bounds on how
fast something happens, beyond "within 20 s" for a call with a 0.5 s
deadline.

FakeGateTests run against a local fake gate that misbehaves on purpose
(hung heartbeats, answers cut mid-body) and need no arguments:
``python3 -m unittest -v test_worker.FakeGateTests``.
"""

import base64
import datetime
import email.utils
import http.client
import json
import logging
import os
import shutil
import socket
import ssl
import sys
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import asyncgate_worker as aw  # noqa: E402

URL = ADMIN = AGENT = WORKER = WORKER_ID = ""


def call(method, path, key, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(URL + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + key)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            raw = res.read()
            return res.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, (json.loads(raw) if raw else None)


def put_type(name, lease_seconds=10, **extra):
    body = {"task_type": name, "lease_seconds": lease_seconds, "requeue_delay_seconds": 0}
    body.update(extra)
    st, out = call("PUT", "/v1/admin/task-types/" + name, ADMIN, body)
    assert st == 200, (st, out)


def enqueue(task_type, params, **extra):
    body = {"task_type": task_type, "params": params}
    body.update(extra)
    st, out = call("POST", "/v1/tasks", AGENT, body)
    assert st == 201, (st, out)
    return out["task_id"]


def get_task(tid):
    st, out = call("GET", "/v1/tasks/" + tid, AGENT)
    assert st == 200, (st, out)
    return out


def wait_for(what, cond, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("gave up waiting for " + what)


def wait_task(tid, what, cond):
    box = {}

    def check():
        box["t"] = get_task(tid)
        return cond(box["t"])

    try:
        wait_for(what, check)
    except AssertionError:
        raise AssertionError("task %s: gave up waiting for %s; last %s" % (tid, what, box.get("t")))
    return box["t"]


def read_file(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def status_is(s):
    return lambda t: t["status"] == s


def result_content(t):
    ptr = t["result"]["result_pointer"]
    prefix = "data:application/json;base64,"
    if ptr.startswith(prefix):
        return json.loads(base64.b64decode(ptr[len(prefix):]))
    st, out = call("GET", "/v1/tasks/%s/result" % t["task_id"], AGENT)
    assert st == 200, (st, out)
    return out["content"]


class FlakyClient(aw.Client):
    """A client whose heartbeats or completions can be made to fail with a
    network error, as a partition would."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.drop_heartbeats = False
        self.drop_completions = False

    def heartbeat(self, *a, **kw):
        if self.drop_heartbeats:
            raise urllib.error.URLError("heartbeat dropped by the test")
        return super().heartbeat(*a, **kw)

    def complete(self, *a, **kw):
        if self.drop_completions:
            raise urllib.error.URLError("completion dropped by the test")
        return super().complete(*a, **kw)


class RefusingClient(aw.Client):
    """A client whose calls the gate refuses as the test says: a heartbeat
    whose progress message holds ``refuse_progress`` gets 413, every snooze
    400 while ``refuse_snoozes`` is set."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.refuse_progress = ""
        self.refuse_snoozes = False
        self.refused = 0

    def heartbeat(self, *a, **kw):
        if self.refuse_progress and self.refuse_progress in kw.get("progress_message", ""):
            self.refused += 1
            raise aw.AsyncGateError(413, "too_large", "progress_message is longer than 4096 bytes")
        return super().heartbeat(*a, **kw)

    def snooze(self, *a, **kw):
        if self.refuse_snoozes:
            self.refused += 1
            raise aw.AsyncGateError(400, "bad_request", "snooze refused by the test")
        return super().snooze(*a, **kw)


class CountingClient(aw.Client):
    """Counts outcome calls; with old=True the batch route answers 404 as on
    a gate without it. Single completions and failures wait for ``release``
    (set it to let them go), so a test decides which outcomes become ready
    while calls are in flight instead of racing the gate."""

    def __init__(self, *a, old=False, **kw):
        super().__init__(*a, **kw)
        self.old = old
        self.counts = {"batch": 0, "single": 0}
        self._count_lock = threading.Lock()
        self.release = threading.Event()

    def _call(self, method, path, body=None, timeout=None, trace=None):
        kind = "batch" if path == "/v1/leases/batch" else \
            "single" if path.endswith("/complete") or path.endswith("/fail") else ""
        if kind:
            with self._count_lock:
                self.counts[kind] += 1
        if kind == "batch" and self.old:
            raise aw.AsyncGateError(404, "not_found", "no route POST /v1/leases/batch")
        if kind == "single" and not self.release.wait(60):
            raise AssertionError("single outcome calls were never released")
        return super()._call(method, path, body, timeout=timeout, trace=trace)


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat().replace("+00:00", "Z")


class FakeGate:
    """A local stand-in for the gate's worker API that offers one task of
    type "fake" with a ``lease_s`` lease, then no more. ``hang_heartbeats``
    keeps heartbeat answers back until ``release`` is set; ``cut_completions``
    cuts that many completion answers off mid-body. ``ended(fake)``, when it
    returns true, has a heartbeat answered 409 lease_expired with
    task_status succeeded (the task already ended: what the gate tells the
    worker that held the lease); ``completions_unavailable`` answers every
    completion 503. ``calls`` records (path, body) of every request."""

    def __init__(self, test, lease_s=30.0, hang_heartbeats=False, cut_completions=0, refuse=None, ended=None,
                 completions_unavailable=False):
        self.lease_s, self.hang_heartbeats, self.cut_completions = lease_s, hang_heartbeats, cut_completions
        self.ended, self.completions_unavailable = ended, completions_unavailable
        # refuse=(suffix, status, retry_after(now)): the first request whose
        # path ends in suffix is answered status with that Retry-After (and
        # Date now); refused_at is when that answer began, retried_at when
        # the next such request arrived.
        self.refuse = refuse
        self.refused_at = self.retried_at = None
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.calls = []
        self.traces = []  # (path, traceparent header) of every call
        self.offered = False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def answer(self, code, obj):
                b = b"" if obj is None else json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                try:
                    self.wfile.write(b)
                except OSError:
                    pass  # the worker gave up on a hung answer

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
                arrived = time.time()
                with fake.lock:
                    fake.calls.append((self.path, body))
                    fake.traces.append((self.path, self.headers.get("traceparent", "")))
                    refused = False
                    if fake.refuse and self.path.endswith(fake.refuse[0]):
                        if fake.refused_at is None:
                            fake.refused_at, refused = arrived, True
                        elif fake.retried_at is None:
                            fake.retried_at = arrived
                if refused:
                    _, status, retry_after = fake.refuse
                    b = json.dumps({"error": "database_unavailable" if status == 503 else "quota_exceeded",
                                    "detail": "refused by the test"}).encode()
                    self.send_response_only(status)
                    self.send_header("Date", email.utils.formatdate(arrived, usegmt=True))
                    self.send_header("Retry-After", retry_after(arrived))
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(b)))
                    self.end_headers()
                    self.wfile.write(b)
                    return
                with fake.lock:
                    first = not fake.offered and self.path == "/v1/leases"
                    fake.offered = fake.offered or first
                    cut = self.path.endswith("/complete") and fake.cut_completions > 0
                    if cut:
                        fake.cut_completions -= 1
                now = time.time()
                lease = {"lease_expires_at": iso(now + fake.lease_s), "server_time": iso(now)}
                if self.path == "/v1/leases":
                    if not first:
                        return self.answer(204, None)
                    return self.answer(200, {"leases": [dict(lease, lease_id="L1", run_id="L1", attempt=1, task={
                        "task_id": "T1", "task_type": "fake", "params": {}, "traceparent": TRACEPARENT})]})
                if self.path.endswith("/heartbeat") and fake.ended is not None and fake.ended(fake):
                    return self.answer(409, {"error": "lease_expired", "task_status": "succeeded",
                                             "detail": "lease L1 is no longer held: the task is succeeded"})
                if self.path.endswith("/complete") and fake.completions_unavailable:
                    return self.answer(503, {"error": "database_unavailable", "detail": "restarting"})
                if self.path.endswith("/heartbeat"):
                    if fake.hang_heartbeats:
                        fake.release.wait(60)
                    now = time.time()
                    return self.answer(200, {"status": "leased", "lease_expires_at": iso(now + fake.lease_s),
                                             "server_time": iso(now), "cancel_requested": False})
                if cut:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "100")
                    self.end_headers()
                    self.wfile.write(b'{"status":')
                    self.close_connection = True
                    return
                if self.path.endswith("/complete"):
                    return self.answer(200, {"status": "succeeded", "task_id": "T1", "receipt_id": "R1"})
                return self.answer(200, {"status": "ok"})

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]
        test.addCleanup(self.close)

    def close(self):
        self.release.set()
        self.srv.shutdown()
        self.srv.server_close()

    def paths(self, suffix):
        with self.lock:
            return [b for p, b in self.calls if p.endswith(suffix)]


class TrickleServer:
    """A local server that answers every request with a 200 trickled a byte
    every 0.1 s, for much longer than any client timeout in these tests:
    ``where="body"`` sends the headers at once (a 1000-byte body announced),
    ``where="headers"`` sends the status line and then one long header a byte
    at a time. It stops when the test ends."""

    def __init__(self, test, where):
        self.where, self.done = where, threading.Event()
        self.ls = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self.ls.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()
        test.addCleanup(self.close)

    def serve(self):
        while not self.done.is_set():
            try:
                conn, _ = self.ls.accept()
            except OSError:
                return
            threading.Thread(target=self.trickle, args=(conn,), daemon=True).start()

    def trickle(self, conn):
        with conn:
            try:
                got = b""
                while b"\r\n\r\n" not in got:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    got += chunk
                if self.where == "body":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 1000\r\n\r\n")
                    drip = b" " * 1000
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\n")
                    drip = b"X-Slow: " + b"a" * 990
                for i in range(len(drip)):
                    if self.done.wait(0.1):
                        return
                    conn.sendall(drip[i:i + 1])
            except OSError:
                pass  # the client gave up

    def close(self):
        self.done.set()
        self.ls.close()


OUTCOME_ERRORS = {409: "lease_expired", 502: "channel_error", 504: "plugin_timeout", 500: "internal"}
"""OutcomeGate's error codes by status (others: database_unavailable)."""


class OutcomeGate:
    """A local gate for spool tests: lease calls get 204 (no work); each
    completion or failure is recorded in ``outcomes`` as (time.monotonic(),
    path) and answered ``answer(n, path)`` -> (status, extra headers), n
    counting from 0. Non-2xx answers carry the gate's error body."""

    def __init__(self, test, answer):
        self.answer, self.lock, self.outcomes = answer, threading.Lock(), []
        gate = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/v1/leases":
                    status, headers, obj = 204, {}, None
                else:
                    with gate.lock:
                        n = len(gate.outcomes)
                        gate.outcomes.append((time.monotonic(), self.path))
                    status, headers = gate.answer(n, self.path)
                    obj = ({"status": "succeeded"} if status < 300 else
                           {"error": OUTCOME_ERRORS.get(status, "database_unavailable"), "detail": "test"})
                b = b"" if obj is None else json.dumps(obj).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]
        test.addCleanup(self.close)

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()

    def paths(self):
        with self.lock:
            return [p for _, p in self.outcomes]


class HeaderGate:
    """A local gate that answers every request 200 ``{"status":
    "succeeded"}`` and records its headers in ``seen``; over HTTPS with
    ``tls=(certfile, keyfile)``."""

    def __init__(self, test, tls=None):
        self.seen = []
        gate = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                gate.seen.append(dict(self.headers))
                b = json.dumps({"status": "succeeded"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        scheme = "http"
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.srv.socket = ctx.wrap_socket(self.srv.socket, server_side=True)
            scheme = "https"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = "%s://127.0.0.1:%d" % (scheme, self.srv.server_address[1])
        test.addCleanup(self.close)

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def self_signed_cert(test):
    """(certfile, keyfile) of a fresh self-signed certificate for 127.0.0.1,
    made with the openssl command; skips the test without it."""
    if not shutil.which("openssl"):
        test.skipTest("no openssl command to make a certificate")
    d = tempfile.mkdtemp()
    test.addCleanup(shutil.rmtree, d, True)
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"], capture_output=True, timeout=60)
    if r.returncode != 0:
        test.skipTest("openssl could not make a certificate: %s" % r.stderr.decode(errors="replace")[-300:])
    return cert, key


def install_opener(test, opener):
    """urllib.request.install_opener for one test; the previous one (or
    none) comes back when it ends."""
    before = urllib.request._opener
    urllib.request.install_opener(opener)
    test.addCleanup(urllib.request.install_opener, before)


class _MarkHandler(urllib.request.BaseHandler):
    """An application's handler: marks every request it sees."""

    def http_request(self, req):
        req.add_unredirected_header("X-App-Handler", "yes")
        return req

    https_request = http_request


def write_spool(path, leases):
    """A spool file (the SDKs' JSON lines) with one completion per lease id."""
    with open(path, "w") as f:
        for lid in leases:
            f.write(json.dumps({"kind": "complete", "lease_id": lid, "task_id": "T-" + lid, "task_type": "fake",
                                "body": {"result": {"lease": lid}}, "spooled_at": "2025-03-01T12:00:00Z"}) + "\n")


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class FakeGateTests(unittest.TestCase):
    """The Runner against a fake gate that misbehaves on purpose."""

    def test_lease_calls_carry_the_tasks_trace(self):
        # The gate hands out the task's W3C traceparent with the offer; every
        # call about the lease sends it back, and the handler sees it.
        fake = FakeGate(self)
        seen = []

        def handler(task):
            seen.append(task.trace)
            task.progress(50, "half")
            return {"ok": 1}

        self.run_worker(fake, handler)
        wait_for("the completion", lambda: fake.paths("/complete"), timeout=20)
        self.assertEqual(seen, [(TRACEPARENT, "")])
        with fake.lock:
            calls = [(p, tp) for p, tp in fake.traces if p.startswith("/v1/leases/")]
        self.assertTrue(any(p.endswith("/accept") for p, _ in calls), calls)
        self.assertTrue(any(p.endswith("/heartbeat") for p, _ in calls), calls)
        for p, tp in calls:
            self.assertEqual(tp, TRACEPARENT, p)

    def run_worker(self, fake, handler, **kw):
        opts = dict(poll_wait=0, idle_wait=0.1, delivery_backoff=(0.05, 0.2), shutdown_timeout=10.0,
                    spool_path=os.path.join(tempfile.mkdtemp(), "spool.jsonl"))
        opts.update(kw)
        r = aw.Runner(aw.Client(fake.url, "agw_fake"), **opts)
        r.task("fake")(handler)
        th = threading.Thread(target=r.run, daemon=True)
        th.start()

        def stop():
            r.stop()
            fake.release.set()
            th.join(60)
            self.assertFalse(th.is_alive(), "run() did not return")
        self.addCleanup(stop)
        return r

    def test_hung_heartbeat_loses_lease_at_local_expiry(self):
        # The heartbeat call is bounded by the lease's local expiry, not by
        # the client's 30 s socket timeout: the handler is told the lease is
        # lost when it runs out.
        fake = FakeGate(self, lease_s=3.0, hang_heartbeats=True)
        told = []

        def handler(task):
            task.cancelled.wait(60)
            told.append(task.stop_reason)

        self.run_worker(fake, handler)
        wait_for("the handler to be told (lease 3 s, client timeout 30 s)", lambda: told, timeout=20)
        self.assertEqual(told, ["lease_lost"])
        self.assertEqual(fake.paths("/complete") + fake.paths("/fail"), [])

    def test_task_ended_while_completing(self):
        # The handler returned and its completion is being retried (its
        # answer lost, the gate restarting) when a heartbeat answers that
        # the task already succeeded: the Runner says so at INFO, stops
        # heartbeating and sending the completion, and never calls the lease
        # lost (no warning, nothing spooled).
        fake = FakeGate(self, lease_s=3.0, completions_unavailable=True,
                        ended=lambda f: any(p.endswith("/complete") for p, _ in f.calls))
        spool = os.path.join(tempfile.mkdtemp(), "spool.jsonl")
        with self.assertLogs("asyncgate_worker", level="DEBUG") as logs:
            self.run_worker(fake, lambda task: {"ok": 1}, spool_path=spool, single_outcomes=True,
                            delivery_attempts=100, delivery_backoff=(0.2, 0.5))
            wait_for("the completion to be given up", lambda: any("not sent again" in m for m in logs.output),
                     timeout=30)
            beats, completes = len(fake.paths("/heartbeat")), len(fake.paths("/complete"))
        out = "\n".join(logs.output)
        self.assertNotIn("lost", out)
        self.assertIn("INFO:asyncgate_worker:task T1 already ended at the gate (succeeded); heartbeats stop", out)
        self.assertFalse(os.path.exists(spool) and os.path.getsize(spool) > 0, "the completion was spooled")
        self.assertEqual((len(fake.paths("/heartbeat")), len(fake.paths("/complete"))), (beats, completes))

    def test_task_ended_while_running(self):
        # A heartbeat answers that the task already succeeded while the
        # handler runs: the handler is stopped, nothing is reported, and the
        # log says the task ended (INFO), not that the lease was lost.
        fake = FakeGate(self, lease_s=3.0, ended=lambda f: True)
        told = []

        def handler(task):
            task.cancelled.wait(60)
            told.append(task.stop_reason)

        with self.assertLogs("asyncgate_worker", level="DEBUG") as logs:
            self.run_worker(fake, handler)
            wait_for("the task to stop", lambda: any("stopped" in m for m in logs.output), timeout=30)
        out = "\n".join(logs.output)
        self.assertEqual(told, ["lease_lost"])
        self.assertNotIn("WARNING", out)
        self.assertIn("task T1 stopped: it already ended at the gate (succeeded); outcome not reported", out)
        self.assertEqual(fake.paths("/complete") + fake.paths("/fail"), [])
        self.assertEqual(len(fake.paths("/heartbeat")), 1)

    def test_task_finished(self):
        self.assertEqual(aw.AsyncGateError(409, "lease_expired", task_status="succeeded").task_finished, "succeeded")
        self.assertEqual(aw.AsyncGateError(409, "lease_expired", task_status="leased").task_finished, "")
        self.assertEqual(aw.AsyncGateError(409, "lease_expired").task_finished, "")
        self.assertEqual(aw.AsyncGateError(409, "conflict", task_status="succeeded").task_finished, "")
        e = aw.outcome_error({"http_status": 409, "error": "lease_expired", "task_status": "succeeded"})
        self.assertEqual(e.task_finished, "succeeded")

    def test_completion_cut_mid_answer_is_retried(self):
        # An answer cut off mid-body is a temporary error: the completion is
        # sent again (the gate answers a repeat as a duplicate), not dropped.
        fake = FakeGate(self, cut_completions=1)
        self.run_worker(fake, lambda task: {"ok": 1}, spool_path="")
        wait_for("the completion to be sent again", lambda: len(fake.paths("/complete")) >= 2, timeout=20)
        self.assertEqual(fake.paths("/complete"), [{"result": {"ok": 1}, "task_id": "T1"}] * 2)
        for exc in (http.client.IncompleteRead(b"{"), http.client.BadStatusLine(""),
                    http.client.RemoteDisconnected(), aw.BadAnswerError("not JSON")):
            self.assertTrue(aw.is_temporary(exc), repr(exc))
        self.assertFalse(aw.is_temporary(ValueError("a bug, not the network")))

    def test_progress_does_not_flood_the_gate(self):
        # Progress in a tight loop for a second sends a handful of heartbeats
        # (early ones are max(1 s, lease/10) apart), and the last progress
        # still reaches the gate before the completion.
        fake = FakeGate(self, lease_s=30.0)
        reports = []

        def handler(task):
            n, end = 0, time.time() + 1.0
            while time.time() < end:
                task.progress(n % 100, "step")
                n += 1
            task.progress(100, "all done")
            reports.append(n + 1)
            return "ok"

        self.run_worker(fake, handler)
        wait_for("the completion", lambda: fake.paths("/complete"), timeout=20)
        with fake.lock:
            before = [b for p, b in fake.calls[:[p for p, _ in fake.calls].index("/v1/leases/L1/complete")]
                      if p.endswith("/heartbeat")]
        # A 30 s lease: a 3 s gap. The first report goes at once, the last
        # one before the completion; at most one regular heartbeat besides.
        self.assertLessEqual(len(before), 3, "%d progress reports sent %d heartbeats" % (reports[0], len(before)))
        self.assertEqual((before[-1].get("progress_percent"), before[-1].get("progress_message")), (100, "all done"))

    def test_heartbeat_pacing(self):
        # Early heartbeats: max(1 s, lease/10), never more than lease/3.
        self.assertEqual(aw.Runner._progress_gap(30.0), 3.0)
        self.assertEqual(aw.Runner._progress_gap(5.0), 1.0)
        self.assertAlmostEqual(aw.Runner._progress_gap(2.0), 2.0 / 3)
        self.assertEqual(aw.Runner._progress_gap(0.06), 0.05)
        # Retries after failed heartbeats back off, never faster with more
        # failures, up to the interval and within half the time left.
        waits = [aw.Runner._heartbeat_retry(n, 10.0, 25.0) for n in range(1, 11)]
        self.assertEqual(waits, sorted(waits))
        self.assertEqual((waits[0], waits[-1]), (0.25, 10.0))
        self.assertEqual(aw.Runner._heartbeat_retry(1, 10.0, 0.3), 0.15)
        self.assertEqual(aw.Runner._heartbeat_retry(1, 10.0, 0.01), 0.05)


    def refused_then_retried(self, suffix, status, retry_after, lease_s=30.0):
        """Run a worker against a fake gate that refuses the first request
        for suffix; return how long after the refusal began it was retried
        (a lower bound of the worker's wait)."""
        fake = FakeGate(self, lease_s=lease_s, refuse=(suffix, status, retry_after))

        def handler(task):
            if suffix == "/heartbeat":  # run until the refused heartbeat was retried
                wait_for("the heartbeat to be retried", lambda: fake.retried_at or task.cancelled.is_set())
            return {"ok": 1}

        # The worker's own backoffs are short: only Retry-After makes it wait.
        self.run_worker(fake, handler, poll_backoff=(0.05, 0.2))
        wait_for("the refused %s to be retried" % suffix, lambda: fake.retried_at, timeout=60)
        return fake.retried_at - fake.refused_at

    def test_lease_call_waits_for_retry_after(self):
        waited = self.refused_then_retried("/v1/leases", 503, lambda now: "1")
        self.assertGreaterEqual(waited, 1.0, "the lease call was retried %.3fs after a Retry-After of 1 s" % waited)

    def test_accept_waits_for_retry_after(self):
        waited = self.refused_then_retried("/accept", 503, lambda now: "1")
        self.assertGreaterEqual(waited, 1.0, "the accept was retried %.3fs after a Retry-After of 1 s" % waited)

    def test_heartbeat_waits_for_retry_after(self):
        # A 9 s lease: heartbeats every 3 s, and half the lease left at the
        # first one (the bound of a heartbeat retry) is well over 1 s.
        waited = self.refused_then_retried("/heartbeat", 503, lambda now: "1", lease_s=9.0)
        self.assertGreaterEqual(waited, 1.0, "the heartbeat was retried %.3fs after a Retry-After of 1 s" % waited)

    def test_completion_waits_for_retry_after_date(self):
        # A 429 whose Retry-After is an HTTP-date 2 s after the answer's Date.
        date = lambda now: email.utils.formatdate(int(now) + 2, usegmt=True)  # noqa: E731
        waited = self.refused_then_retried("/complete", 429, date)
        self.assertGreaterEqual(waited, 2.0, "the completion was retried %.3fs after a Retry-After of 2 s" % waited)

    def test_retry_after_parsing_and_bounds(self):
        self.assertEqual(aw._parse_retry_after("5", None), 5.0)
        self.assertEqual(aw._parse_retry_after("", None), 0.0)
        self.assertEqual(aw._parse_retry_after("soon", None), 0.0)
        self.assertEqual(aw._parse_retry_after("-1", None), 0.0)
        self.assertEqual(aw._parse_retry_after("Sat, 01 Mar 2025 12:00:07 GMT", 1740830400.0), 7.0)
        self.assertEqual(aw._parse_retry_after("Sat, 01 Mar 2025 11:00:00 GMT", 1740830400.0), 0.0)
        # An HTTP-date is bounded to 24 h as delay-seconds is.
        self.assertEqual(aw._parse_retry_after("99999999999", None), 86400.0)
        self.assertEqual(aw._parse_retry_after("Mon, 03 Mar 2025 12:00:00 GMT", 1740830400.0), 86400.0)
        self.assertEqual(aw._parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", 1740830400.0), 86400.0)
        busy = aw.AsyncGateError(503, "busy", "", retry_after=2.0)
        for _ in range(100):
            self.assertTrue(2.0 <= aw.retry_after(busy) <= 2.2)
        for ra in (aw.MAX_RETRY_AFTER, 3600.0):
            # Capped first, then jittered: workers told 60 s (the gate's 429
            # quota_exceeded) or more do not all come back at once.
            waits = {aw.retry_after(aw.AsyncGateError(429, "quota_exceeded", "", ra)) for _ in range(100)}
            self.assertTrue(all(aw.MAX_RETRY_AFTER <= w <= 1.1 * aw.MAX_RETRY_AFTER for w in waits), waits)
            self.assertGreater(len(waits), 1, "a Retry-After of %s: every wait was %s, want jitter" % (ra, waits))
        self.assertEqual(aw.retry_after(aw.AsyncGateError(400, "bad_request", "", 5.0)), 0.0)
        self.assertEqual(aw.retry_after(OSError("network")), 0.0)
        # Heartbeat retries wait for it, never past half the time left.
        self.assertEqual(aw.Runner._heartbeat_retry(1, 3.0, 20.0, 5.0), 5.0)
        self.assertEqual(aw.Runner._heartbeat_retry(1, 3.0, 4.0, 5.0), 2.0)
        self.assertEqual(aw.Runner._heartbeat_retry(5, 3.0, 60.0, 0.1), 3.0)
        self.assertEqual(aw.ResourceHolder._retry(3.0, 20.0, 5.0), 5.0)
        self.assertEqual(aw.ResourceHolder._retry(3.0, 4.0, 5.0), 2.0)
        self.assertEqual(aw.ResourceHolder._retry(3.0, 20.0, 0.0), 0.75)

    def test_retry_after_zoneless_date_is_utc(self):
        # An asctime-format HTTP-date (and one with the "-0000" zone) has no
        # zone: it is UTC, whatever the local zone is.
        old = os.environ.get("TZ")
        os.environ["TZ"] = "America/New_York"
        time.tzset()
        try:
            self.assertEqual(aw._parse_retry_after("Sat Mar  1 12:00:07 2025", 1740830400.0), 7.0)
            self.assertEqual(aw._parse_retry_after("Sat, 01 Mar 2025 12:00:07 -0000", 1740830400.0), 7.0)
            self.assertEqual(aw._http_date("Sat Mar  1 12:00:00 2025"), 1740830400.0)  # an answer's Date
            self.assertEqual(aw._http_date("Sat, 01 Mar 2025 12:00:00 GMT"), 1740830400.0)
            self.assertIsNone(aw._http_date("soon"))
            self.assertIsNone(aw._http_date(None))
        finally:
            if old is None:
                del os.environ["TZ"]
            else:
                os.environ["TZ"] = old
            time.tzset()

    def test_retry_after_is_ascii_digits(self):
        # delay-seconds is ASCII digits (RFC 9110): a digit Python's isdigit
        # takes but int() does not ("²"), another script's digit, a sign, all
        # read as unreadable (0), never as an exception.
        for v in ("\xb2", "\u0663", "+5", "5\xb2"):
            self.assertEqual(aw._parse_retry_after(v, None), 0.0, repr(v))
        self.assertEqual(aw._parse_retry_after("9" * 5000, None), 86400.0)  # past int()'s digit limit
        # A stray byte in a 503's Retry-After keeps the answer temporary.
        fake = FakeGate(self, refuse=("/v1/leases", 503, lambda now: "\xb2"))
        with self.assertRaises(aw.AsyncGateError) as cm:
            aw.Client(fake.url, "agw_fake").lease(["fake"])
        self.assertTrue(cm.exception.temporary)
        self.assertEqual(cm.exception.retry_after, 0.0)

    def test_call_deadline_covers_a_trickled_answer(self):
        # The client's timeout bounds the whole call, not each socket read:
        # an answer trickled a byte every 0.1 s (headers or body, for 100 s)
        # ends in a timeout error, which is temporary, long before it ends.
        for where in ("body", "headers"):
            with self.subTest(where=where):
                srv = TrickleServer(self, where)
                box = {}

                def complete():
                    try:
                        box["out"] = aw.Client(srv.url, "agw_fake", timeout=0.5).complete("L1", {"result": {}})
                    except Exception as e:  # noqa: BLE001 - checked below
                        box["err"] = e

                th = threading.Thread(target=complete, daemon=True)
                th.start()
                th.join(20)
                self.assertFalse(th.is_alive(), "a call with a 0.5 s timeout was still running after 20 s")
                self.assertNotIn("out", box)
                self.assertIsInstance(box.get("err"), socket.timeout)
                self.assertTrue(aw.is_temporary(box["err"]))

    def test_installed_opener_handlers_are_used(self):
        # An opener the application installed with install_opener is the
        # base of the client's: its handlers see the gate's requests, and
        # the call still keeps its deadline.
        install_opener(self, urllib.request.build_opener(_MarkHandler()))
        gate = HeaderGate(self)
        c = aw.Client(gate.url, "agw_fake")
        for _ in range(2):
            self.assertEqual(c.complete("L1", {"result": {}})["status"], "succeeded")
        self.assertEqual([h.get("X-App-Handler") for h in gate.seen], ["yes", "yes"])
        self.assertEqual(gate.seen[0].get("User-Agent"), "asyncgate-worker-python/1")
        # Not rebuilt per call; rebuilt when the application installs another.
        first = aw._client_opener(None)
        self.assertIs(aw._client_opener(None), first)
        install_opener(self, urllib.request.build_opener())
        self.assertIsNot(aw._client_opener(None), first)
        self.assertEqual(c.complete("L1", {"result": {}})["status"], "succeeded")
        self.assertIsNone(gate.seen[-1].get("X-App-Handler"))
        install_opener(self, urllib.request.build_opener(_MarkHandler()))
        srv = TrickleServer(self, "body")
        start = time.monotonic()
        with self.assertRaises(socket.timeout):
            aw.Client(srv.url, "agw_fake", timeout=0.5).complete("L1", {"result": {}})
        self.assertLess(time.monotonic() - start, 20, "the deadline was lost with an installed opener")

    def test_https_gate_with_a_private_ca(self):
        # A gate whose certificate only the application trusts: through an
        # installed opener's HTTPSHandler(context=...), or the client's
        # ssl_context. Without either the certificate is refused.
        cert, key = self_signed_cert(self)
        gate = HeaderGate(self, tls=(cert, key))
        trusting = ssl.create_default_context(cafile=cert)
        with self.subTest("installed opener"):
            install_opener(self, urllib.request.build_opener(urllib.request.HTTPSHandler(context=trusting),
                                                             _MarkHandler()))
            out = aw.Client(gate.url, "agw_fake").complete("L1", {"result": {}})
            self.assertEqual(out["status"], "succeeded")
            self.assertEqual(gate.seen[-1].get("X-App-Handler"), "yes")
        with self.subTest("ssl_context"):
            install_opener(self, None)
            n = len(gate.seen)
            out = aw.Client(gate.url, "agw_fake", ssl_context=trusting).complete("L1", {"result": {}})
            self.assertEqual(out["status"], "succeeded")
            self.assertEqual(len(gate.seen), n + 1)
        with self.subTest("neither"):
            install_opener(self, None)
            with self.assertRaises(urllib.error.URLError) as cm:
                aw.Client(gate.url, "agw_fake").complete("L1", {"result": {}})
            self.assertIsInstance(cm.exception.reason, ssl.SSLCertVerificationError)

    def test_spool_pass_goes_past_an_entry_the_gate_fails(self):
        # 502 channel_error, 504 plugin_timeout, 500: about one entry, not
        # the gate. That entry stays spooled and the pass goes on; the next
        # pass tries it again.
        for status in (502, 504, 500):
            with self.subTest(status=status):
                mode = {"L1": status, "L2": 200, "L3": status}
                gate = OutcomeGate(self, lambda n, path: (mode[path.split("/")[3]], {"Retry-After": "1"}))
                spool = os.path.join(tempfile.mkdtemp(), "spool.jsonl")
                write_spool(spool, ["L1", "L2", "L3"])
                r = aw.Runner(aw.Client(gate.url, "agw_fake"), spool_path=spool)
                left, stopped = r._flush_spool_pass()
                self.assertEqual(left, 2)
                self.assertIsNone(stopped)
                self.assertEqual(gate.paths(), ["/v1/leases/%s/complete" % lid for lid in ("L1", "L2", "L3")])
                self.assertEqual([json.loads(ln)["lease_id"] for ln in read_file(spool).splitlines()],
                                 ["L1", "L3"])
                mode["L3"] = 200
                self.assertEqual(r.flush_spool(), 1)
                self.assertEqual(gate.paths()[3:], ["/v1/leases/L1/complete", "/v1/leases/L3/complete"])
                self.assertEqual([json.loads(ln)["lease_id"] for ln in read_file(spool).splitlines()], ["L1"])

    def test_spool_pass_stops_when_the_gate_is_unreachable_or_busy(self):
        # 408, 429, 503 and network errors say the gate, not the entry: the
        # pass stops at the first, every entry left untouched.
        for status in (408, 429, 503):
            with self.subTest(status=status):
                gate = OutcomeGate(self, lambda n, path: (status, {"Retry-After": "1"}))
                spool = os.path.join(tempfile.mkdtemp(), "spool.jsonl")
                write_spool(spool, ["L1", "L2"])
                before = read_file(spool)
                r = aw.Runner(aw.Client(gate.url, "agw_fake"), spool_path=spool)
                left, stopped = r._flush_spool_pass()
                self.assertEqual(left, 2)
                self.assertEqual(getattr(stopped, "status", None), status)
                self.assertEqual(gate.paths(), ["/v1/leases/L1/complete"])
                self.assertEqual(read_file(spool), before)
        with self.subTest("network error"):
            ls = socket.create_server(("127.0.0.1", 0))
            url = "http://127.0.0.1:%d" % ls.getsockname()[1]
            ls.close()  # nothing listens there now
            calls = []

            class Counting(aw.Client):
                def complete(self, *a, **kw):
                    calls.append(a[0])
                    return super().complete(*a, **kw)

            spool = os.path.join(tempfile.mkdtemp(), "spool.jsonl")
            write_spool(spool, ["L1", "L2"])
            left, stopped = aw.Runner(Counting(url, "agw_fake"), spool_path=spool)._flush_spool_pass()
            self.assertEqual((left, calls), (2, ["L1"]))
            self.assertIsInstance(stopped, OSError)

    def test_spool_pass_stops_at_first_temporary_failure(self):
        # A gate answering 503 + Retry-After gets one request per pass, not
        # one per spooled outcome: the pass stops there and every entry
        # stays, untouched. Outcomes refused for good are still dropped.
        mode = {"L1": 503, "L2": 503, "L3": 503}
        gate = OutcomeGate(self, lambda n, path: (mode[path.split("/")[3]], {"Retry-After": "1"}))
        spool = os.path.join(tempfile.mkdtemp(), "spool.jsonl")
        write_spool(spool, ["L1", "L2", "L3"])
        before = read_file(spool)
        r = aw.Runner(aw.Client(gate.url, "agw_fake"), spool_path=spool)
        self.assertEqual(r.flush_spool(), 3)
        self.assertEqual(gate.paths(), ["/v1/leases/L1/complete"])
        self.assertEqual(read_file(spool), before)
        # The first refused for good (409 lease_expired): dropped, and the
        # pass goes on to the next, which stops it.
        mode["L1"] = 409
        self.assertEqual(r.flush_spool(), 2)
        self.assertEqual(gate.paths()[1:], ["/v1/leases/L1/complete", "/v1/leases/L2/complete"])
        self.assertEqual([json.loads(ln)["lease_id"] for ln in read_file(spool).splitlines()], ["L2", "L3"])
        mode.update(L2=200, L3=200)
        self.assertEqual(r.flush_spool(), 0)
        self.assertEqual(gate.paths()[3:], ["/v1/leases/L2/complete", "/v1/leases/L3/complete"])
        self.assertFalse(os.path.exists(spool))

    def test_spool_waits_for_retry_after(self):
        # The spool is retried every 0.05 s, but after a 503 with
        # Retry-After: 1 the next pass waits at least that second.
        gate = OutcomeGate(self, lambda n, path: (503, {"Retry-After": "1"}) if n == 0 else (200, {}))
        spool = os.path.join(tempfile.mkdtemp(), "spool.jsonl")
        write_spool(spool, ["L1", "L2"])
        r = aw.Runner(aw.Client(gate.url, "agw_fake"), poll_wait=0, idle_wait=0.1, spool_path=spool,
                      spool_interval=0.05, shutdown_timeout=10.0)
        r.task("fake")(lambda task: None)
        th = threading.Thread(target=r.run, daemon=True)
        th.start()

        def stop():
            r.stop()
            th.join(60)
            self.assertFalse(th.is_alive(), "run() did not return")
        self.addCleanup(stop)
        wait_for("the spool to be delivered", lambda: not os.path.exists(spool), timeout=30)
        with gate.lock:
            (refused, first), (retried, second) = gate.outcomes[:2]
        self.assertGreaterEqual(retried - refused, 1.0, "the next spooled outcome went %.3fs after a 503 "
                                "with Retry-After: 1" % (retried - refused))
        self.assertEqual((first, second), ("/v1/leases/L1/complete",) * 2)
        self.assertEqual(gate.paths()[2:], ["/v1/leases/L2/complete"])


class WorkerTest(unittest.TestCase):
    def make_runner(self, client=None, **kw):
        opts = dict(worker_id=WORKER_ID, poll_wait=1.0, idle_wait=0.1, poll_backoff=(0.1, 1.0),
                    delivery_attempts=20, delivery_backoff=(0.1, 0.5),
                    spool_path=os.path.join(tempfile.mkdtemp(), "spool.jsonl"), spool_interval=0.2,
                    shutdown_timeout=10.0, data_uri_fallback=True)
        opts.update(kw)
        return aw.Runner(client or aw.Client(URL, WORKER), **opts)

    def start(self, runner):
        th = threading.Thread(target=runner.run, daemon=True)
        th.start()

        def stop():
            runner.stop()
            th.join(60)
            self.assertFalse(th.is_alive(), "run() did not return")
        self.addCleanup(stop)
        return stop

    def test_success_inline_pointer_progress(self):
        put_type("py-echo")
        put_type("py-store")
        r = self.make_runner()
        go = threading.Event()

        @r.task("py-echo")
        def echo(task):
            task.progress(50, "halfway")
            wait_for("go", lambda: go.is_set() or task.cancelled.is_set())
            task.check()
            return task.params

        @r.task("py-store")
        def store(task):
            return aw.Pointer(pointer="s3://bucket/" + task.task_id, channel="s3", summary="stored it",
                              metadata={"bytes": 3})

        self.start(r)
        tid = enqueue("py-echo", {"hello": "world"})
        wait_task(tid, "progress", lambda t: t.get("progress_message") == "halfway" and t.get("progress_percent") == 50)
        go.set()
        t = wait_task(tid, "succeeded", status_is("succeeded"))
        self.assertEqual(result_content(t), {"hello": "world"})
        tid = enqueue("py-store", {})
        t = wait_task(tid, "succeeded", status_is("succeeded"))
        self.assertEqual(t["result"]["result_pointer"], "s3://bucket/" + tid)
        self.assertEqual(t["result"]["result_channel"], "s3")
        self.assertEqual(t["result"]["metadata"], {"bytes": 3})

    def test_fan_in_reads_dependency_result(self):
        # A payload too large to be inline is stored in the gate's file
        # channel; the task that waited on it reads it under its lease.
        put_type("py-dep-big")
        put_type("py-dep-fanin")
        big = "a long answer " * (300 * 1024 // 14)
        r = self.make_runner()
        read = []

        @r.task("py-dep-big")
        def producer(task):
            return {"text": big}

        @r.task("py-dep-fanin")
        def fan_in(task):
            dep = task.dependencies[0]["task_id"]
            read.append(json.loads(task.dependency_result(dep))["text"])
            return {"read": len(read[0])}

        self.start(r)
        dep = enqueue("py-dep-big", {})
        tid = enqueue("py-dep-fanin", {}, after=[dep])
        wait_task(tid, "succeeded", status_is("succeeded"))
        st, t = call("GET", "/v1/tasks/" + dep, AGENT)
        self.assertTrue(t["result"]["result_pointer"].startswith("file:"), t["result"])
        self.assertEqual(read, [big])

    def test_snooze_uses_no_attempt(self):
        put_type("py-snooze")
        r = self.make_runner()
        runs = []

        @r.task("py-snooze")
        def snoozy(task):
            runs.append(time.time())
            if len(runs) == 1:
                raise aw.Snooze(1.5, "upstream not ready")
            return {"run": len(runs)}

        self.start(r)
        tid = enqueue("py-snooze", {}, max_retries=0)
        wait_task(tid, "scheduled by the snooze", status_is("scheduled"))
        t = wait_task(tid, "succeeded", status_is("succeeded"))
        self.assertEqual((t["attempts"], t["lease_count"]), (0, 2))
        self.assertEqual(result_content(t), {"run": 2})
        self.assertGreaterEqual(runs[1] - runs[0], 1.0)
        st, tl = call("GET", "/v1/tasks/%s/timeline" % tid, AGENT)
        self.assertEqual(st, 200)
        snoozed = [e for e in tl["events"] if e["event_type"] == "task.snoozed"]
        self.assertEqual(len(snoozed), 1, tl["events"])
        self.assertEqual(snoozed[0]["details"]["snooze_seconds"], 2)
        self.assertEqual(snoozed[0]["details"]["reason"], "upstream not ready")

    def test_retryable_then_success(self):
        put_type("py-flaky", policy={"name": "backoff", "config": {"base_seconds": 0, "jitter": 0}})
        r = self.make_runner()
        calls = {}

        @r.task("py-flaky")
        def flaky(task):
            calls[task.task_id] = calls.get(task.task_id, 0) + 1
            if calls[task.task_id] == 1:
                raise aw.RetryableError("upstream timeout")
            return {"call": calls[task.task_id]}

        self.start(r)
        tid = enqueue("py-flaky", {})
        t = wait_task(tid, "succeeded", status_is("succeeded"))
        self.assertEqual(t["attempts"], 1)
        self.assertEqual(result_content(t), {"call": 2})

    def test_result_over_the_body_limit_is_reported(self):
        """A result far over the gate's body limit (12 MB against 1 MiB) is
        refused with 413, which the Runner sees (the gate reads the body it
        refuses, so urllib's send is not cut off) and reports as the task's
        failure, instead of spooling it as undeliverable."""
        put_type("py-huge", lease_seconds=60)
        r = self.make_runner(delivery_attempts=2, data_uri_fallback=False)

        @r.task("py-huge")
        def huge(task):
            return {"blob": "b" * 12_000_000}

        self.start(r)
        tid = enqueue("py-huge", {}, max_retries=3)
        t = wait_task(tid, "dead letter", status_is("dead_letter"))
        self.assertIn("413", t["error_message"])

    def test_fatal_and_exception(self):
        put_type("py-bad")
        put_type("py-boom")
        r = self.make_runner()

        @r.task("py-bad")
        def bad(task):
            raise aw.FatalError("params are unusable")

        @r.task("py-boom")
        def boom(task):
            return {}["missing"]  # KeyError: a plain exception, retryable

        self.start(r)
        tid = enqueue("py-bad", {}, max_retries=3)
        t = wait_task(tid, "dead letter", status_is("dead_letter"))
        self.assertEqual(t["dead_reason"], "fatal_error")
        self.assertIn("params are unusable", t["error_message"])
        tid = enqueue("py-boom", {}, max_retries=0)
        t = wait_task(tid, "dead letter", status_is("dead_letter"))
        self.assertEqual(t["dead_reason"], "max_retries_exceeded")
        self.assertIn("missing", t["error_message"])

    def test_failure_holding_nul_reaches_the_gate(self):
        # The gate refuses a NUL character in any string; an error's text may hold one.
        put_type("py-nul")
        r = self.make_runner()

        @r.task("py-nul")
        def nul(task):
            raise aw.FatalError("bad\x00byte")

        self.start(r)
        tid = enqueue("py-nul", {}, max_retries=3)
        t = wait_task(tid, "dead letter", status_is("dead_letter"))
        self.assertIn("bad\ufffdbyte", t["error_message"])

    def test_client_outcomes(self):
        put_type("py-batch", lease_seconds=30)
        tids = [enqueue("py-batch", {"i": i}) for i in range(2)]
        c = aw.Client(URL, WORKER)
        offers = []
        while len(offers) < 2:
            offers += c.lease(["py-batch"], worker_id=WORKER_ID, max_tasks=2 - len(offers), wait_seconds=2)
        res = c.outcomes([
            {"id": "c", "lease_id": offers[0]["lease_id"], "complete": {"result": {"ok": True}}},
            {"id": "f", "lease_id": offers[1]["lease_id"], "fail": {"error_message": "no", "retryable": False}},
            {"id": "x", "lease_id": "lease-01M8GME6G9P78S4Y21S82KRJ2A", "heartbeat": {}},
        ])
        self.assertEqual([r["id"] for r in res], ["c", "f", "x"])
        self.assertTrue(res[0]["ok"])
        self.assertEqual(res[0]["complete"]["status"], "completed")
        self.assertEqual(res[1]["fail"]["status"], "dead_letter")
        self.assertFalse(res[2]["ok"])
        self.assertTrue(aw.outcome_error(res[2]).lease_lost)
        by_id = {o["task"]["task_id"]: o for o in offers}
        for tid in tids:
            want = "succeeded" if by_id[tid] is offers[0] else "dead_letter"
            wait_task(tid, want, status_is(want))

    def test_batch_answer_whose_results_are_not_objects(self):
        """A batch answered with results that are not objects (a proxy's or
        a broken gate's answer) is BadAnswerError for each outcome; no
        outcome waits forever for an answer that never comes."""
        class NullResults(aw.Client):
            def _call(self, method, path, body=None, timeout=None, trace=None):
                if path == "/v1/leases/batch":
                    return 200, {"results": [None] * len(body["entries"])}, None
                return super()._call(method, path, body, timeout, trace)

        c = NullResults(URL, WORKER)
        with self.assertRaises(aw.BadAnswerError):
            c.outcomes([{"lease_id": "lease-a", "heartbeat": {}}, {"lease_id": "lease-b", "heartbeat": {}}])
        batcher = aw._OutcomeBatcher(c)
        pending = [{"kind": "fail", "lease_id": "lease-%d" % i, "body": {"error_message": "x"}, "trace": None,
                    "done": threading.Event()} for i in range(2)]
        t = threading.Thread(target=batcher._deliver, args=(pending,), daemon=True)
        t.start()
        t.join(10)
        self.assertFalse(t.is_alive())
        for p in pending:
            self.assertTrue(p["done"].is_set())
            self.assertIsInstance(p.get("error"), aw.BadAnswerError)

    def run_together(self, client, task_type, n):
        """n tasks (every third failing for good) on a runner of n slots whose
        handlers all finish at the same moment; the first outcomes' calls are
        held (client.release) until the rest are waiting behind them, then
        let go. Waits for each task to end."""
        put_type(task_type, lease_seconds=30)
        r = self.make_runner(client=client, concurrency=n)
        started, go = [], threading.Event()

        @r.task(task_type)
        def together(task):
            started.append(task.task_id)
            wait_for("go", lambda: go.is_set() or task.cancelled.is_set())
            if task.params["i"] % 3 == 0:
                raise aw.FatalError("three")
            return {"i": task.params["i"]}

        self.start(r)
        tids = [enqueue(task_type, {"i": i}) for i in range(n)]
        wait_for("every handler running", lambda: len(started) == n)
        go.set()
        batcher = r._outcomes
        wait_for("outcomes waiting behind the calls in flight",
                 lambda: len(batcher._pending) == n - batcher.max_in_flight)
        client.release.set()
        for i, tid in enumerate(tids):
            want = "dead_letter" if i % 3 == 0 else "succeeded"
            wait_task(tid, want, status_is(want))

    def test_outcomes_ready_together_share_batch_calls(self):
        c = CountingClient(URL, WORKER)
        self.run_together(c, "py-together", 12)
        self.assertGreaterEqual(c.counts["batch"], 1, c.counts)
        self.assertLess(c.counts["batch"] + c.counts["single"], 12, c.counts)

    def test_outcomes_on_an_older_gate(self):
        c = CountingClient(URL, WORKER, old=True)
        self.run_together(c, "py-older", 12)
        self.assertGreaterEqual(c.counts["batch"], 1, c.counts)
        self.assertLessEqual(c.counts["batch"], 2, c.counts)
        self.assertEqual(c.counts["single"], 12, c.counts)

    def test_cancel_mid_task(self):
        put_type("py-long", lease_seconds=3)
        r = self.make_runner()
        started, reasons = threading.Event(), []

        @r.task("py-long")
        def long(task):
            started.set()
            task.cancelled.wait(60)
            reasons.append(task.stop_reason)
            task.check()
            return "not reached"

        self.start(r)
        tid = enqueue("py-long", {})
        wait_for("started", started.is_set)
        st, _ = call("POST", "/v1/tasks/%s/cancel" % tid, AGENT, {"reason": "changed my mind"})
        self.assertEqual(st, 200)
        wait_task(tid, "canceled", status_is("canceled"))
        self.assertEqual(reasons, ["canceled"])

    def test_lease_lost_when_heartbeats_fail(self):
        put_type("py-lost", lease_seconds=3)
        client = FlakyClient(URL, WORKER)
        client.drop_heartbeats = True
        r = self.make_runner(client)
        reasons, calls = [], []

        @r.task("py-lost")
        def lost(task):
            calls.append(1)
            if len(calls) > 1:
                return "second time"
            task.cancelled.wait(60)
            reasons.append(task.stop_reason)
            task.check()

        self.start(r)
        tid = enqueue("py-lost", {})
        wait_for("the handler stopped", lambda: reasons)
        self.assertEqual(reasons, ["lease_lost"])
        client.drop_heartbeats = False
        t = wait_task(tid, "succeeded", status_is("succeeded"))
        self.assertGreaterEqual(t["lease_expiries"], 1)

    def test_spool_delivered_later(self):
        put_type("py-spool", lease_seconds=60)
        client = FlakyClient(URL, WORKER)
        client.drop_completions = True
        r = self.make_runner(client, delivery_attempts=1, spool_interval=3600)

        @r.task("py-spool")
        def spool(task):
            return aw.Pointer(pointer="s3://bucket/" + task.task_id)

        stop_r = self.start(r)
        tid = enqueue("py-spool", {})
        wait_for("the spool", lambda: tid in read_file(r.spool_path))
        self.assertEqual(get_task(tid)["status"], "leased")
        client.drop_completions = False
        # While r runs, no second runner may use its spool.
        r2 = self.make_runner(spool_path=r.spool_path)
        with self.assertRaises(aw.SpoolLockedError):
            r2.flush_spool()
        self.assertIn(tid, read_file(r.spool_path))
        stop_r()
        # A new runner with the same spool delivers it when it starts.

        @r2.task("py-spool")
        def never(task):
            raise aw.FatalError("must not run again")

        self.start(r2)
        t = wait_task(tid, "succeeded", status_is("succeeded"))
        self.assertEqual(t["result"]["result_pointer"], "s3://bucket/" + tid)
        wait_for("an empty spool", lambda: not os.path.exists(r.spool_path))

    def test_default_spool_per_worker(self):
        # Workers without a worker_id get one spool per key, never a shared one.
        a = aw.Runner(aw.Client(URL, "agw_keyA")).spool_path
        b = aw.Runner(aw.Client(URL, "agw_keyB")).spool_path
        self.assertNotEqual(a, b)
        self.assertEqual(a, aw.Runner(aw.Client(URL, "agw_keyA")).spool_path)
        self.assertNotIn("agw_keyA", a)
        self.assertEqual(os.path.basename(aw.Runner(aw.Client(URL, "k"), worker_id="codegen.i-1").spool_path),
                         "spool-codegen.i-1.jsonl")

    def test_spool_locked_against_second_process(self):
        path = os.path.join(tempfile.mkdtemp(), "spool.jsonl")
        holder = subprocess.Popen(
            [sys.executable, "-c",
             "import fcntl, sys\n"
             "f = open(sys.argv[1] + '.lock', 'a+')\n"
             "fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
             "print('locked', flush=True)\n"
             "sys.stdin.read()\n", path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(holder.stdout.readline().strip(), "locked")
            r = self.make_runner(spool_path=path)

            @r.task("py-locked")
            def never(task):
                raise aw.FatalError("must not run")

            with self.assertRaises(aw.SpoolLockedError) as cm:
                r.run()
            self.assertIn(path, str(cm.exception))
            with self.assertRaises(aw.SpoolLockedError):
                r.flush_spool()
        finally:
            holder.stdin.close()
            holder.wait(60)
        self.assertEqual(self.make_runner(spool_path=path).flush_spool(), 0)

    def test_graceful_shutdown(self):
        put_type("py-job", lease_seconds=30)
        r = self.make_runner(concurrency=2, shutdown_timeout=1.5)
        started, finish_a, reasons = [], threading.Event(), []

        @r.task("py-job")
        def job(task):
            started.append(task.params["name"])
            if task.params["name"] == "A":
                finish_a.wait(60)
                return "A done"
            task.cancelled.wait(60)
            reasons.append(task.stop_reason)
            task.check()

        th = threading.Thread(target=r.run, daemon=True)
        th.start()
        a = enqueue("py-job", {"name": "A"})
        b = enqueue("py-job", {"name": "B"})
        wait_for("both started", lambda: len(started) == 2)
        r.stop()
        finish_a.set()
        th.join(60)
        self.assertFalse(th.is_alive())
        self.assertEqual(reasons, ["shutdown"])
        self.assertEqual(get_task(a)["status"], "succeeded")
        tb = get_task(b)
        self.assertEqual((tb["status"], tb["attempts"]), ("queued", 0))


class LimitTests(unittest.TestCase):
    """The gate's limits the Runner keeps to: progress_message at most 4096
    bytes of UTF-8 without NUL, snooze_seconds 1..31622400, and at most 50
    task types per lease call."""

    make_runner = WorkerTest.make_runner
    start = WorkerTest.start

    def test_progress_message_made_one_the_gate_takes(self):
        for given, want in [
            ("halfway", "halfway"),
            ("a\x00b", "a\ufffdb"),
            ("\u00e9" * 3000, "\u00e9" * 2048),
            ("\u20ac" * 2000, "\u20ac" * 1365),
            ("x" * 4095 + "\u20ac", "x" * 4095),
            ("x" * 4096 + "\u20ac", "x" * 4096),
            ("\x00" * 2000, "\ufffd" * 1365),
            ("lone \udc80 surrogate", "lone ? surrogate"),
        ]:
            got = aw._progress_message(given)
            self.assertEqual(got, want)
            self.assertLessEqual(len(got.encode("utf-8")), 4096)

    def test_snooze_seconds_within_the_gates_bound(self):
        for given, want in [(0, 1), (-5, 1), (0.2, 1), (1.5, 2), (60, 60), (31622400, 31622400),
                            (400 * 86400, 31622400), (float("inf"), 31622400), (float("nan"), 1)]:
            self.assertEqual(aw._snooze_seconds(given), want, given)

    def test_type_chunks(self):
        for n in (1, 49, 50, 51, 100, 101, 250):
            types = ["t-%03d" % i for i in range(n)]
            chunks = aw._type_chunks(types)
            self.assertEqual(len(chunks), (n + 49) // 50)
            self.assertTrue(all(0 < len(c) <= 50 for c in chunks))
            self.assertEqual([t for c in chunks for t in c], types)

    def test_progress_kept_to_the_gates_limits(self):
        put_type("py-lim-progress")
        r = self.make_runner()
        step = threading.Event()

        @r.task("py-lim-progress")
        def progress(task):
            for msg in ("\u00e9" * 3000, "before\x00after"):  # 6000 bytes; NUL
                step.clear()
                task.progress(50, msg)
                wait_for("the next step", lambda: step.is_set() or task.cancelled.is_set())
                task.check()
            return "ok"

        self.start(r)
        tid = enqueue("py-lim-progress", {})

        def shows(msg):
            def check(t):
                if t["status"] == "queued" and not t["lease_count"]:
                    return False  # not leased yet
                if t["lease_expiries"] or t["status"] not in ("leased", "succeeded"):
                    self.fail("the handler was stopped after reporting progress: %s" % t)
                return t.get("progress_message") == msg
            return check

        wait_task(tid, "the long progress message, cut", shows("\u00e9" * 2048))
        step.set()
        wait_task(tid, "the progress message with NUL", shows("before\ufffdafter"))
        step.set()
        t = wait_task(tid, "succeeded", status_is("succeeded"))
        self.assertEqual((t["lease_count"], t["lease_expiries"]), (1, 0))

    def test_progress_refused_keeps_the_lease(self):
        put_type("py-lim-refused")
        client = RefusingClient(URL, WORKER)
        client.refuse_progress = "refuse me"
        r = self.make_runner(client)
        go, reasons = threading.Event(), []

        @r.task("py-lim-refused")
        def refused(task):
            task.progress(10, "refuse me")
            wait_for("the refusal", lambda: client.refused or task.cancelled.is_set())
            task.progress(20, "accepted")
            wait_for("go", lambda: go.is_set() or task.cancelled.is_set())
            if task.cancelled.is_set():
                reasons.append(task.stop_reason)
            task.check()
            return "ok"

        self.start(r)
        tid = enqueue("py-lim-refused", {})

        def later_progress(t):
            if reasons:
                self.fail("the handler was stopped (%s) after the gate refused a progress report" % reasons)
            return t.get("progress_message") == "accepted"

        wait_task(tid, "the later progress", later_progress)
        go.set()
        t = wait_task(tid, "succeeded", status_is("succeeded"))
        self.assertEqual((t["lease_count"], t["lease_expiries"], reasons), (1, 0, []))

    def test_snooze_beyond_the_gates_bound(self):
        put_type("py-lim-snooze-long", lease_seconds=3)
        r = self.make_runner()

        @r.task("py-lim-snooze-long")
        def snoozy(task):
            raise aw.Snooze(400 * 86400, "not\x00yet" + "." * 2000)  # the reason: NUL, over 1000 characters

        self.start(r)
        tid = enqueue("py-lim-snooze-long", {})

        def scheduled(t):
            if t["lease_expiries"]:
                self.fail("the lease ran out instead of the task being snoozed: %s" % t)
            return t["status"] == "scheduled"

        t = wait_task(tid, "scheduled by the snooze", scheduled)
        at = datetime.datetime.strptime(t["available_at"][:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
        until = at.timestamp() - time.time()
        self.assertTrue(365 * 86400 < until < 367 * 86400, until)

    def test_snooze_refused_fails_the_task(self):
        put_type("py-lim-snooze-refused", lease_seconds=3)
        client = RefusingClient(URL, WORKER)
        client.refuse_snoozes = True
        r = self.make_runner(client)

        @r.task("py-lim-snooze-refused")
        def snoozy(task):
            raise aw.Snooze(60)

        self.start(r)
        tid = enqueue("py-lim-snooze-refused", {}, max_retries=3)

        def dead(t):
            if t["lease_expiries"]:
                self.fail("the lease ran out instead of the task failing: %s" % t)
            return t["status"] == "dead_letter"

        t = wait_task(tid, "dead letter", dead)
        self.assertEqual(t["dead_reason"], "fatal_error")
        self.assertIn("snooze refused by the test", t["error_message"])

    def test_serves_more_than_50_types(self):
        r = self.make_runner()
        for i in range(120):
            r.task("py-lim-many-%03d" % i)(lambda task: task.task_type)
        errors = []

        def run():
            try:
                r.run()
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        th = threading.Thread(target=run, daemon=True)
        th.start()
        self.addCleanup(lambda: (r.stop(), th.join(60)))
        tids = []
        for i in (0, 49, 50, 99, 100, 119):
            put_type("py-lim-many-%03d" % i)
            tids.append(enqueue("py-lim-many-%03d" % i, {}))
        for tid in tids:
            def done(t):
                if errors:
                    self.fail("run() stopped: %s" % errors[0])
                return t["status"] == "succeeded"
            t = wait_task(tid, "succeeded", done)
            self.assertEqual(result_content(t), t["task_type"])


class SpoolFileTests(unittest.TestCase):
    """The spool file itself, without a gate."""

    def test_entry_after_a_torn_line_is_kept(self):
        # A crash cut the last line short: an outcome spooled after it starts
        # a line of its own, so it is not skipped with the torn one.
        path = os.path.join(tempfile.mkdtemp(), "spool.jsonl")
        r = aw.Runner(aw.Client(URL, "agw_spool"), spool_path=path)
        r._spool_add({"kind": "complete", "lease_id": "lease-1", "task_id": "T-1", "body": {}})
        with open(path, "ab") as f:
            f.write(b'{"kind":"complete","lease_id":"lease-01OLD')
        r._spool_add({"kind": "fail", "lease_id": "lease-2", "task_id": "T-2", "body": {}})
        self.assertEqual([e["lease_id"] for e in r._spool_load()], ["lease-1", "lease-2"])


class LeaseClockTests(unittest.TestCase):
    """Client._clock: the lease length by the gate's clock."""

    def test_server_time_takes_nothing_off(self):
        sent = time.time()
        ttl, deadline = aw.Client._clock(sent, None, "2026-01-01T00:00:04.7Z", "2026-01-01T00:00:00.7Z")
        self.assertAlmostEqual(ttl, 4.0, places=3)
        self.assertAlmostEqual(deadline, sent + 4.0, delta=0.5)

    def test_date_header_takes_a_second_off(self):
        server = aw._parse_time("2026-01-01T00:00:00Z")
        ttl, _ = aw.Client._clock(time.time(), server, "2026-01-01T00:00:04.7Z")
        self.assertAlmostEqual(ttl, 3.7, places=3)

    def test_live_offer_carries_server_time(self):
        put_type("py.clock", lease_seconds=7)
        enqueue("py.clock", {})
        c = aw.Client(URL, WORKER)
        offers = []
        wait_for("an offer", lambda: offers.extend(c.lease(["py.clock"], WORKER_ID)) or offers)
        o = offers[0]
        self.assertIn("server_time", o)
        self.assertAlmostEqual(o["_ttl"], 7.0, places=3)
        c.complete(o["lease_id"], {"result_pointer": "s3://bucket/clock"})


class ResourceLeaseTests(unittest.TestCase):
    """Resource leases (KLIS-3) through ResourceLeases and ResourceHolder."""

    def test_holder_keeps_then_releases(self):
        rl = aw.ResourceLeases(aw.Client(URL, AGENT))
        other = aw.ResourceLeases(aw.Client(URL, WORKER))
        with rl.hold([("FILE:/py/held.py", "MUTATES")], ttl_ms=2000) as h:
            first = h.leases[0]
            acquired = aw._parse_time(first["acquired_at"])

            def extended():
                out = rl.verify(h.lease_ids)["leases"][0]
                return out["state"] == "active" and aw._parse_time(out["expires_at"]) - acquired > 4.0

            # Past two TTLs of 2 s: only heartbeats, one after the first
            # expiry among them, can have kept it.
            wait_for("the lease to be extended past two TTLs", extended)
            self.assertFalse(h.lost.is_set(), h.lost_reason)
            with self.assertRaises(aw.AsyncGateError) as cm:
                other.acquire([("file:/py/held.py", "READS")])
            self.assertEqual((cm.exception.status, cm.exception.code), (409, "resource_conflict"))
            self.assertIn(first["lease_id"], cm.exception.detail)
        out = other.acquire([("FILE:/py/held.py", "MUTATES")])
        other.release([out["leases"][0]["lease_id"]])

    def test_holder_sees_loss(self):
        rl = aw.ResourceLeases(aw.Client(URL, AGENT))
        h = rl.hold([("FILE:/py/lost.py", "MUTATES")], ttl_ms=3000)
        st, _ = call("POST", "/v1/resource-leases/release", ADMIN, {"lease_ids": h.lease_ids})
        self.assertEqual(st, 200)
        self.assertTrue(h.lost.wait(60), "the holder never noticed its lease was gone")
        self.assertIn("lease_expired", h.lost_reason)
        out = h.release()  # idempotent
        self.assertEqual(out["leases"][0]["state"], "released")

    def test_task_fencing_token(self):
        t = aw.Task(None, {"lease_id": "lease-1", "task": {"task_id": "t1"},
                           "resource_leases": [{"resource": "DB:x", "fencing_token": 7}]})
        self.assertEqual((t.fencing_token("DB:x"), t.fencing_token("DB:y")), (7, 0))
        self.assertEqual(aw.Task(None, {"lease_id": "lease-2", "task": {}}).resource_leases, [])

    def test_fencing_tokens_holders_and_server_time(self):
        rl = aw.ResourceLeases(aw.Client(URL, AGENT))
        other = aw.ResourceLeases(aw.Client(URL, WORKER))
        res = "FILE:/py/fenced.py"
        with rl.hold([(res, "MUTATES")], ttl_ms=10000) as h:
            first = h.fencing_token(res)
            self.assertGreaterEqual(first, 1)
            self.assertEqual(first, h.leases[0]["fencing_token"])
            held = other.holders("file:/py/fenced.py")
            self.assertEqual([(l["lease_id"], l["fencing_token"]) for l in held["leases"]], [(h.lease_ids[0], first)])
            self.assertTrue(held["server_time"])
        with self.assertRaises(aw.AsyncGateError) as cm:
            rl.heartbeat(h.lease_ids)
        self.assertEqual((cm.exception.status, cm.exception.code), (409, "lease_expired"))
        self.assertTrue(cm.exception.server_time, "a lease_expired refusal without the gate's server time")
        nxt = other.acquire([(res, "MUTATES")])
        self.assertGreater(nxt["leases"][0]["fencing_token"], first)
        other.release([nxt["leases"][0]["lease_id"]])
        self.assertEqual(other.holders(res)["leases"], [])

    def test_sessions_and_revoke(self):
        rl = aw.ResourceLeases(aw.Client(URL, AGENT))
        other = aw.ResourceLeases(aw.Client(URL, WORKER))
        admin = aw.ResourceLeases(aw.Client(URL, ADMIN))
        s = rl.create_session(ttl_ms=10000)["session"]
        self.assertEqual((s["state"], s["ttl_ms"]), ("active", 10000))
        got = rl.acquire([("FILE:/py/sess.py", "MUTATES"), ("DB:py-sess", "READS")], session_id=s["session_id"])
        self.assertEqual([l["expires_at"] for l in got["leases"]], [s["expires_at"]] * 2)
        hb = rl.heartbeat_session(s["session_id"])
        self.assertEqual(len(hb["leases"]), 2)
        with self.assertRaises(aw.AsyncGateError) as cm:
            other.heartbeat_session(s["session_id"])
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        admin.revoke(got["leases"][1]["lease_id"])
        with self.assertRaises(aw.AsyncGateError) as cm:
            rl.heartbeat([got["leases"][1]["lease_id"]])
        self.assertEqual((cm.exception.status, cm.exception.code), (409, "lease_revoked"))
        self.assertEqual(rl.end_session(s["session_id"])["session"]["state"], "ended")
        with self.assertRaises(aw.AsyncGateError) as cm:
            rl.heartbeat_session(s["session_id"])
        self.assertEqual((cm.exception.status, cm.exception.code), (409, "session_ended"))
        self.assertEqual(other.holders("FILE:/py/sess.py")["leases"], [])

    def test_holders_wait_for_release(self):
        rl = aw.ResourceLeases(aw.Client(URL, AGENT))
        other = aw.ResourceLeases(aw.Client(URL, WORKER))
        res = "FILE:/py/await.py"
        got = rl.acquire([(res, "MUTATES")], ttl_ms=10000)
        self.assertEqual(len(other.holders(res, wait_seconds=0.05, predicate="READS")["leases"]), 1)
        out = {}
        waiter = threading.Thread(target=lambda: out.update(other.holders(res, wait_seconds=20)))
        waiter.start()
        rl.release([got["leases"][0]["lease_id"]])
        waiter.join(30)
        self.assertEqual(out.get("leases"), [])
        with self.assertRaises(aw.AsyncGateError) as cm:
            other.holders(res, wait_seconds=1, predicate="OWNS")
        self.assertEqual((cm.exception.status, cm.exception.code), (400, "bad_request"))


if __name__ == "__main__":
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    URL, ADMIN, AGENT, WORKER, WORKER_ID = sys.argv[1:6]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[6:])
