"""AsyncGate worker client for Python (standard library only).

One module, no dependencies: copy it next to your worker. It talks to the
gate's canonical worker API (``POST /v1/leases`` and
``/v1/leases/{lease_id}/accept|heartbeat|complete|fail|release``) with
``urllib`` and runs handlers in threads.

A complete worker::

    from asyncgate_worker import Client, Runner, FatalError

    runner = Runner(Client("http://127.0.0.1:8080", api_key="agw_…"),
                    worker_id="worker.py-1", concurrency=4)

    @runner.task("doc.index")
    def index(task):
        paths = task.params.get("paths")
        if not paths:
            raise FatalError("params.paths is missing")   # no retry
        for i, p in enumerate(paths):
            task.check()                    # raises if the lease is lost,
                                            # the task canceled, or shutting down
            task.progress(100 * (i + 1) / len(paths), "indexed " + p)
        return {"indexed": len(paths)}      # inline JSON result

    runner.run_forever()                    # SIGINT/SIGTERM: graceful stop

What the Runner does, following the seeds (Lease Protocol, KLIS-3, "Lease to
Receipt flow") and the Go SDK (``sdk/worker``):

* long-polls for as many tasks as it has free slots (``concurrency``); network
  errors and 5xx answers back off 5 s → 10 s → 20 s → 40 s, at most 60 s;
* accepts every offer before its handler starts;
* heartbeats at a third of the lease length in a thread; when the gate answers
  409 ``lease_expired``, when no heartbeat gets through before the lease's
  conservative local expiry (KLIS-3 §6.1), when a heartbeat answers
  ``cancel_requested``, or when the shutdown grace is over, the task's
  ``cancelled`` event is set and ``task.check()`` raises ``TaskStopped``.
  Each heartbeat call is bounded by that local expiry; a failed one (network
  error, 429, 5xx) is retried after 250 ms doubling with each failure, at
  most the regular interval and half the time left on the lease.
  ``task.progress()`` sends progress with an early heartbeat, at most once
  per max(1 s, a tenth of the lease); faster reports are coalesced (the
  latest wins) and progress still unsent when the handler returns goes with
  one last heartbeat before the outcome.
  Python threads cannot be killed: handlers must call ``task.check()`` (or
  wait on ``task.cancelled``) in their loops;
* results: ``dict``/``list``/str/numbers go inline as JSON, ``bytes`` inline as
  base64, a ``Pointer`` names a result the handler stored itself;
* exceptions: ``Snooze(seconds)`` gives the task back until ``seconds`` from
  now without using an attempt (its retry budget is untouched; River's
  JobSnooze, SQS's ChangeMessageVisibility); ``FatalError`` dead-letters the
  task at once; any other
  exception (including ``RetryableError``) is a retryable failure with the
  traceback in the failure's metadata;
* every call it retries (lease, accept, heartbeat, complete, fail, release,
  a ResourceHolder's heartbeat, a spool pass) waits at least the Retry-After
  of a 429 or 5xx answer (seconds or an HTTP-date, at most
  ``MAX_RETRY_AFTER``, plus up to 10% jitter) when that is longer than its
  own backoff, within the bounds it already keeps (an accept is dropped
  rather than retried past the lease; a heartbeat retry never waits past
  half the time left on it);
* completions and failures are retried with exponential backoff, then
  appended (fsync'd) to a spool file of JSON lines — the same format as the Go
  SDK's — which is retried at start and every ``spool_interval`` seconds; a
  pass stops at the first outcome that finds the gate unreachable or busy
  (network error, timeout, 408, 429, 503), leaving it and the rest spooled
  for the next, which waits for that answer's Retry-After when it is longer
  than ``spool_interval``; an outcome that gets another 5xx (500, 502
  ``channel_error``, 504 ``plugin_timeout``: about that outcome, not the
  gate) stays spooled and the pass goes on with the next;
* ``stop()`` (or SIGINT/SIGTERM in ``run_forever``) stops leasing at once
  (a lease call long-polling is cut off, so an idle worker exits within a
  second), lets in-flight tasks finish for ``shutdown_timeout`` seconds, then stops them and
  releases their leases so the tasks go back to the queue.
"""

from __future__ import annotations

import base64
import copy
import datetime as _dt
import email.utils
import functools
try:
    import fcntl
except ImportError:  # not on Windows: the spool is not locked there
    fcntl = None
import hashlib
import http.client
import io
import json
import logging
import math
import os
import random
import re
import signal
import socket
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = [
    "AsyncGateError", "RetryableError", "FatalError", "Snooze", "TaskStopped",
    "Pointer", "Task", "Client", "Runner",
]

log = logging.getLogger("asyncgate_worker")


# --------------------------------------------------------------------------
# Errors


class AsyncGateError(Exception):
    """An error answer of the gate: ``{"error": code, "detail": text}``.
    ``retry_after`` is the answer's Retry-After in seconds (0 when absent,
    unreadable or past): the gate sets it on every 429 and 503, and the
    Runner waits at least that long (at most ``MAX_RETRY_AFTER``, plus up to
    10% jitter) before it tries again. ``server_time`` is the gate's clock
    (RFC 3339) when it decided a refusal that judges a lease by it (resource
    leases: lease_expired, verify_required, quota_exceeded), else "".
    ``task_status`` is the state of the task on a 409 lease_expired answer to
    the worker that held the lease ("succeeded": the task already ended, its
    completion taken), else "" (see ``task_finished``)."""

    def __init__(self, status: int, code: str, detail: str = "", retry_after: float = 0.0, server_time: str = "",
                 task_status: str = ""):
        super().__init__("gate answered %d %s: %s" % (status, code, detail))
        self.status, self.code, self.detail = status, code, detail
        self.retry_after = retry_after
        self.server_time = server_time
        self.task_status = task_status

    @property
    def task_finished(self) -> str:
        """The task's state when this is a lease_expired answer saying the
        task already ended ("succeeded", "canceled", "dead_letter",
        "archived"), which the gate tells only the worker that held the
        lease; "" otherwise, a lost lease included."""
        if self.lease_lost and self.task_status in ("succeeded", "canceled", "dead_letter", "archived"):
            return self.task_status
        return ""

    @property
    def lease_lost(self) -> bool:
        """True for 409 lease_expired: the lease is no longer held."""
        return self.status == 409 and self.code == "lease_expired"

    @property
    def temporary(self) -> bool:
        """True for answers worth retrying later (5xx, 408, 429)."""
        return self.status >= 500 or self.status in (408, 429)


class BatchUnsupportedError(AsyncGateError):
    """The gate has no POST /v1/leases/batch (an older gate): send the
    outcomes one by one."""


MAX_OUTCOME_BATCH = 100
"""The most entries one POST /v1/leases/batch may carry."""


def outcome_error(result: Dict[str, Any]) -> AsyncGateError:
    """The AsyncGateError a refused batch entry stands for: the code, detail
    and status its single call would have answered."""
    if not isinstance(result, dict):
        raise BadAnswerError("a batch entry's result is %s, not an object" % type(result).__name__)
    return AsyncGateError(int(result.get("http_status") or 0), result.get("error") or "", result.get("detail") or "",
                          task_status=result.get("task_status") or "")


class _OutcomeBatcher:
    """Sends a Runner's completions and failures. An outcome that finds no
    call in flight goes at once on its own; outcomes that become ready while
    calls are in flight wait for one to end and then go together in one
    POST /v1/leases/batch (a lone outcome is never held back; several ready
    at once share a call). An older gate (404) gets single calls from then
    on."""

    def __init__(self, client: "Client", single: bool = False, max_in_flight: int = 2):
        self.client = client
        self.unsupported = single
        self.max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._pending: List[Dict[str, Any]] = []
        self._in_flight = 0

    def send(self, kind: str, lease_id: str, body: Dict[str, Any], trace=None) -> Dict[str, Any]:
        """Deliver one outcome (kind "complete" or "fail"); return the
        verb's answer or raise as the single call would."""
        if self.unsupported:
            return self._single(kind, lease_id, body, trace)
        p = {"kind": kind, "lease_id": lease_id, "body": body, "trace": trace, "done": threading.Event()}
        flush = False
        with self._lock:
            self._pending.append(p)
            if self._in_flight < self.max_in_flight:
                self._in_flight += 1
                flush = True
        if flush:
            self._flush(p)
        p["done"].wait()
        if "error" in p:
            raise p["error"]
        return p["answer"]

    def _flush(self, mine: Optional[Dict[str, Any]]) -> None:
        """Send what is pending, batch after batch, until nothing is. The
        caller whose outcome (``mine``) is answered hands what is left to a
        thread of its own instead of working on for others."""
        while True:
            with self._lock:
                if mine is not None and mine["done"].is_set() and self._pending:
                    threading.Thread(target=self._flush, args=(None,), name="asyncgate-outcomes", daemon=True).start()
                    return
                batch = self._pending[:MAX_OUTCOME_BATCH]
                del self._pending[:len(batch)]
                if not batch:
                    self._in_flight -= 1
                    return
            self._deliver(batch)

    def _deliver(self, batch: List[Dict[str, Any]]) -> None:
        if len(batch) == 1 or self.unsupported:
            for p in batch:
                try:
                    p["answer"] = self._single(p["kind"], p["lease_id"], p["body"], p["trace"])
                except Exception as e:  # noqa: BLE001
                    p["error"] = e
                p["done"].set()
            return
        entries = [{"lease_id": p["lease_id"], p["kind"]: p["body"]} for p in batch]
        try:
            results = self.client.outcomes(entries, trace=batch[0]["trace"])
        except BatchUnsupportedError:
            self.unsupported = True
            self._deliver(batch)
            return
        except AsyncGateError as e:
            if e.status != 413 and not (e.status == 400 and len(batch) > 1):
                for p in batch:
                    p["error"] = e
                    p["done"].set()
                return
            # Together over the gate's body limit (large inline results), or
            # one entry's value refused for the whole body (the gate checks a
            # body's strings before its entries): each on its own, as it would
            # have gone without batching, so that only that one fails.
            for p in batch:
                self._deliver([p])
            return
        except Exception as e:  # noqa: BLE001
            for p in batch:
                p["error"] = e
                p["done"].set()
            return
        for p, r in zip(batch, results):
            if r.get("ok"):
                p["answer"] = r.get(p["kind"]) or {}
            else:
                p["error"] = outcome_error(r)
            p["done"].set()

    def _single(self, kind: str, lease_id: str, body: Dict[str, Any], trace) -> Dict[str, Any]:
        if kind == "complete":
            return self.client.complete(lease_id, body, trace=trace)
        return self.client.fail(lease_id, body, trace=trace)


MAX_RETRY_AFTER = 60.0
"""The cap on the Retry-After the Runner and ResourceHolder wait for (s); up
to 10% jitter comes on top of the capped wait."""


def _no_nul(text: str) -> str:
    """text with every NUL character, which the gate refuses in any string, written U+FFFD."""
    return text.replace("\x00", "\ufffd")


MAX_PROGRESS_MESSAGE = 4096
"""The longest progress message the gate takes, in bytes of UTF-8 (not
characters)."""


def _progress_message(message: str) -> str:
    """message as the gate takes it: NUL written U+FFFD (a lone surrogate,
    which UTF-8 cannot carry, "?"), cut to at most MAX_PROGRESS_MESSAGE bytes
    of UTF-8 on a character boundary."""
    raw = _no_nul(str(message)).encode("utf-8", "replace")[:MAX_PROGRESS_MESSAGE]
    return raw.decode("utf-8", "ignore")  # "ignore" drops only a character cut at the end


def _http_date(value: Optional[str]) -> Optional[float]:
    """Read an HTTP-date (a Date or Retry-After header) as Unix time; None
    when absent or unreadable. A date without a zone (asctime format, or
    "-0000") is UTC, never local time."""
    if not value:
        return None
    try:
        at = email.utils.parsedate_to_datetime(value)
        if at.tzinfo is None:
            at = at.replace(tzinfo=_dt.timezone.utc)
        return at.timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


_RETRY_AFTER_BOUND = 86400.0
"""The bound on a Retry-After _parse_retry_after reads, in both forms (s)."""


def _parse_retry_after(value: Optional[str], server: Optional[float]) -> float:
    """Read a Retry-After header: delay-seconds, or an HTTP-date measured
    against the answer's Date (``server``, Unix time; the local clock when
    None), at most _RETRY_AFTER_BOUND. 0 for an absent or unreadable header
    and for a date past."""
    value = (value or "").strip()
    if not value:
        return 0.0
    if value.isascii() and value.isdigit():  # delay-seconds: ASCII digits only
        digits = value.lstrip("0")
        if len(digits) > len(str(int(_RETRY_AFTER_BOUND))):
            return _RETRY_AFTER_BOUND  # past the bound (and maybe past int()'s digit limit)
        return float(min(int(digits or "0"), _RETRY_AFTER_BOUND))
    at = _http_date(value)
    if at is None:
        return 0.0
    return min(max(at - (time.time() if server is None else server), 0.0), _RETRY_AFTER_BOUND)


def retry_after(exc: BaseException) -> float:
    """How long a temporary answer asks to wait before the next attempt, in
    seconds: its Retry-After, at most MAX_RETRY_AFTER, plus up to 10% jitter
    (so that workers told the same do not come back at the same instant; the
    cap comes first, so a Retry-After at or past it is jittered too); 0 for
    other errors."""
    if not isinstance(exc, AsyncGateError) or exc.retry_after <= 0 or not exc.temporary:
        return 0.0
    return min(exc.retry_after, MAX_RETRY_AFTER) * (1 + random.uniform(0, 0.1))


def _retry_wait(exc: BaseException, backoff: float) -> float:
    """The wait before the next attempt after exc: backoff, or the answer's
    Retry-After when that is longer (see retry_after)."""
    return max(backoff, retry_after(exc))


class BadAnswerError(http.client.HTTPException):
    """A 2xx answer of the gate whose body is not JSON: cut off mid-body or
    garbled on the way. Temporary: the call is retried."""


def is_temporary(exc: BaseException) -> bool:
    """Report whether a client call error is worth retrying later: network
    errors, timeouts, answers cut off or garbled on the way (IncompleteRead,
    BadStatusLine, a body that is not JSON) and 5xx/408/429 answers. Other
    4xx answers are final."""
    if isinstance(exc, AsyncGateError):
        return exc.temporary
    return isinstance(exc, (urllib.error.URLError, OSError, socket.timeout, TimeoutError, ConnectionError,
                            http.client.HTTPException))


class RetryableError(Exception):
    """Raise from a handler for a failure worth another attempt. Any exception
    that is not a ``FatalError`` is retryable; this one says so explicitly."""


class FatalError(Exception):
    """Raise from a handler for a failure that must not be retried: the task
    goes to the dead-letter queue at once."""


class Snooze(Exception):
    """Raise from a handler to give the task back until ``seconds`` from now
    (rounded up to whole seconds, at least one, at most the gate's 366 days)
    without using an attempt: the task is offered again after that, and its
    retry budget is untouched. ``reason`` goes into the task's history (the
    task.snoozed receipt; NUL written U+FFFD, cut to the gate's 1000
    characters). Should the gate refuse the snooze (400), the task is failed
    for good with the refusal as its error."""

    def __init__(self, seconds: float, reason: str = ""):
        super().__init__("snooze for %ss" % seconds)
        self.seconds = seconds
        self.reason = reason


MAX_LEASE_TYPES = 50
"""How many task types one lease call may name (the gate refuses more)."""


def _type_chunks(types: List[str]) -> List[List[str]]:
    """types split into lease calls' worth: at most MAX_LEASE_TYPES each."""
    return [types[i:i + MAX_LEASE_TYPES] for i in range(0, len(types), MAX_LEASE_TYPES)] or [[]]


MAX_SNOOZE_SECONDS = 366 * 86400
"""The longest snooze the gate takes (snooze_seconds 1..31622400)."""


def _snooze_seconds(seconds: float) -> int:
    """seconds rounded up to whole seconds, at least one and at most
    MAX_SNOOZE_SECONDS (infinity is the most, NaN the least)."""
    if seconds != seconds:  # NaN
        return 1
    if seconds >= MAX_SNOOZE_SECONDS:
        return MAX_SNOOZE_SECONDS
    return max(1, int(math.ceil(seconds)))


class TaskStopped(Exception):
    """Raised by ``Task.check()`` once the task must stop. ``reason`` is
    ``"lease_lost"``, ``"canceled"`` or ``"shutdown"``."""

    def __init__(self, reason: str):
        super().__init__("task stopped: " + reason)
        self.reason = reason


# --------------------------------------------------------------------------
# Results


@dataclass
class Pointer:
    """A result the handler stored itself (S3, a mailbox, a file share): the
    gate records where it is and never sees the payload."""

    pointer: str
    channel: str = ""
    checksum: str = ""
    summary: str = ""
    metadata: Optional[Dict[str, Any]] = None
    artifacts: Optional[List[Dict[str, Any]]] = None


def _completion(value: Any) -> Dict[str, Any]:
    """Turn a handler's return value into the completion body."""
    if value is None:
        return {"result": {}}
    if isinstance(value, Pointer):
        if not value.pointer:
            raise FatalError("Pointer without a pointer")
        body: Dict[str, Any] = {"result_pointer": value.pointer}
        for k, v in (("result_channel", value.channel), ("result_checksum", value.checksum),
                     ("summary", value.summary), ("metadata", value.metadata), ("artifacts", value.artifacts)):
            if v:
                body[k] = v
        return body
    if isinstance(value, (bytes, bytearray)):
        if not value:
            return {"result": {}}
        return {"result_base64": base64.b64encode(bytes(value)).decode("ascii")}
    try:
        json.dumps(value)
    except (TypeError, ValueError) as e:
        raise FatalError("the result is not JSON-encodable: %s" % e)
    return {"result": value}


def _data_uri_fallback(body: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """Rewrite an inline completion as a self-contained data: URI pointer
    (for gates without result channels); None when not possible."""
    if "result" in body:
        payload, mime = json.dumps(body["result"], separators=(",", ":")).encode(), "application/json"
    elif "result_base64" in body:
        payload, mime = base64.b64decode(body["result_base64"]), "application/octet-stream"
    else:
        return None
    uri = "data:%s;base64,%s" % (mime, base64.b64encode(payload).decode("ascii"))
    if len(uri) > 8000:
        return None
    out = {k: v for k, v in body.items() if k not in ("result", "result_base64")}
    out.update(result_channel="data", result_pointer=uri,
               result_checksum="sha256:" + hashlib.sha256(payload).hexdigest())
    return out


# --------------------------------------------------------------------------
# Client


def _parse_time(s: str) -> float:
    """Parse the gate's RFC 3339 timestamps into a Unix time."""
    s = s.strip().replace("Z", "+00:00")
    m = re.match(r"^(.*T\d\d:\d\d:\d\d)(\.\d+)?(.*)$", s)
    if m:  # before 3.11, fromisoformat takes exactly 6 fraction digits
        frac = "." + (m.group(2) or ".")[1:7].ljust(6, "0")
        s = m.group(1) + frac + m.group(3)
    return _dt.datetime.fromisoformat(s).timestamp()


# A deadline for a whole call. urllib's timeout bounds each socket operation
# (connect, one send, one read), not the call: an answer trickled a byte at a
# time keeps a call alive indefinitely. The connections below set the socket
# timeout to the time left before every connect, send and read, and raise
# socket.timeout once the deadline has passed.


def _time_left(deadline: float) -> float:
    """Seconds left before deadline (time.monotonic); socket.timeout when
    none are."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("the call's deadline passed")
    return left


class _DeadlineReader(io.RawIOBase):
    """An answer's socket stream whose every read is bounded by the time left
    before the deadline."""

    def __init__(self, sock, deadline: float):
        super().__init__()
        self._sock, self._deadline = sock, deadline
        self._raw = sock.makefile("rb", buffering=0)  # holds the socket open until closed, as urllib expects

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        self._sock.settimeout(_time_left(self._deadline))
        return self._raw.readinto(b)

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class _DeadlineResponse(http.client.HTTPResponse):
    def __init__(self, sock, debuglevel=0, method=None, url=None, *, deadline: float):
        super().__init__(sock, debuglevel, method, url)
        fp, self.fp = self.fp, io.BufferedReader(_DeadlineReader(sock, deadline))
        fp.close()


class _DeadlineConnectionMixin:
    def __init__(self, *args, deadline: float, **kwargs):
        super().__init__(*args, **kwargs)
        self._deadline = deadline
        self.response_class = functools.partial(_DeadlineResponse, deadline=deadline)

    def connect(self) -> None:
        self.timeout = _time_left(self._deadline)
        super().connect()
        self.sock.settimeout(_time_left(self._deadline))
        abort = getattr(_call_deadline, "abort", None)
        if abort is not None:
            abort.add(self.sock)

    def send(self, data) -> None:
        if self.sock is not None:
            self.sock.settimeout(_time_left(self._deadline))
        super().send(data)


class _DeadlineHTTPConnection(_DeadlineConnectionMixin, http.client.HTTPConnection):
    pass


_DEADLINE_CONNECTIONS = [(http.client.HTTPConnection, _DeadlineHTTPConnection)]
if hasattr(http.client, "HTTPSConnection"):  # Python built with ssl
    class _DeadlineHTTPSConnection(_DeadlineConnectionMixin, http.client.HTTPSConnection):
        pass

    _DEADLINE_CONNECTIONS.insert(0, (http.client.HTTPSConnection, _DeadlineHTTPSConnection))


_call_deadline = threading.local()
"""The deadline (time.monotonic) of the call this thread is making, in
``at``: urllib opens a redirect's connection in the same thread; and in
``abort``, a _PollAbort that may cut the call short."""


class _PollAbort:
    """Cuts a Runner's long-poll short: the lease call's connections register
    their sockets here, and fire() (from stop(), maybe in a signal handler
    running on the very thread blocked in the poll's read) shuts them down,
    so the read returns at once instead of when the poll's wait_seconds end.
    No lock: a signal handler may run while add() is half done, and
    appending before checking ``fired`` (fire() sets it before looking)
    means one of the two always shuts the socket."""

    def __init__(self):
        self.fired = False
        self._socks: List[Any] = []

    def add(self, sock) -> None:
        self._socks.append(sock)
        if self.fired:
            self._shut(sock)

    def done(self) -> None:
        self._socks = []

    def fire(self) -> None:
        self.fired = True
        for sock in list(self._socks):
            self._shut(sock)

    @staticmethod
    def _shut(sock) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _DeadlineHandlerMixin:
    """Opens urllib's connections as deadline connections while this thread
    makes a call with a deadline (proxies, redirects and TLS settings as
    urllib's defaults)."""

    def do_open(self, http_class, req, **http_conn_args):
        deadline = getattr(_call_deadline, "at", None)
        if deadline is not None:
            for base, cls in _DEADLINE_CONNECTIONS:
                if issubclass(http_class, base):
                    return super().do_open(functools.partial(cls, deadline=deadline), req, **http_conn_args)
        return super().do_open(http_class, req, **http_conn_args)


class _DeadlineHTTPHandler(_DeadlineHandlerMixin, urllib.request.HTTPHandler):
    pass


_DEADLINE_HANDLERS: List[Any] = [_DeadlineHTTPHandler]
if hasattr(urllib.request, "HTTPSHandler"):  # Python built with ssl
    class _DeadlineHTTPSHandler(_DeadlineHandlerMixin, urllib.request.HTTPSHandler):
        pass

    _DEADLINE_HANDLERS.append(_DeadlineHTTPSHandler)


def _deadline_handler(h: urllib.request.BaseHandler) -> urllib.request.BaseHandler:
    """A copy of an application's handler for the SDK's opener: an
    HTTPHandler or HTTPSHandler (or a subclass) becomes its deadline version
    with the same state (an HTTPS handler's SSL context, check_hostname,
    debuglevel); any other handler is copied as is, so that the copy's
    parent is the SDK's opener and the application's stays untouched."""
    h = copy.copy(h)
    if isinstance(h, urllib.request.AbstractHTTPHandler) and not isinstance(h, _DeadlineHandlerMixin):
        cls = type(h)
        derived = _DEADLINE_CLASSES.get(cls)
        if derived is None:
            derived = type("_Deadline" + cls.__name__, (_DeadlineHandlerMixin, cls), {})
            _DEADLINE_CLASSES[cls] = derived
        h.__class__ = derived
    return h


_DEADLINE_CLASSES: Dict[type, type] = {urllib.request.HTTPHandler: _DeadlineHTTPHandler}
if hasattr(urllib.request, "HTTPSHandler"):
    _DEADLINE_CLASSES[urllib.request.HTTPSHandler] = _DeadlineHTTPSHandler

_default_opener: Optional[urllib.request.OpenerDirector] = None
_derived_opener: Optional[tuple] = None  # (the installed opener, the SDK's opener derived from it)


def _client_opener(ssl_context) -> urllib.request.OpenerDirector:
    """The opener of a call: built from ssl_context when given (cached on
    the client, see Client); else derived from the opener the application
    installed with urllib.request.install_opener, if any (rebuilt only when
    another is installed); else urllib's defaults with deadline
    connections (built once)."""
    global _default_opener, _derived_opener
    if ssl_context is not None:
        return urllib.request.build_opener(_DeadlineHTTPHandler(), _DeadlineHTTPSHandler(context=ssl_context))
    installed = urllib.request._opener
    if installed is not None:
        derived = _derived_opener
        if derived is None or derived[0] is not installed:
            opener = urllib.request.OpenerDirector()
            opener.addheaders = list(installed.addheaders)
            for h in installed.handlers:
                opener.add_handler(_deadline_handler(h))
            derived = _derived_opener = (installed, opener)
        return derived[1]
    if _default_opener is None:
        _default_opener = urllib.request.build_opener(*(h() for h in _DEADLINE_HANDLERS))
    return _default_opener


def _open(opener: urllib.request.OpenerDirector, req: urllib.request.Request, deadline: float, timeout: float):
    """Open req with opener as urllib.request.urlopen does, its connect,
    send and answer all bounded by deadline."""
    _call_deadline.at = deadline
    try:
        return opener.open(req, timeout=timeout)
    finally:
        _call_deadline.at = None


class Client:
    """The gate's worker API over HTTP. Thread-safe (one request per call).

    ``base_url`` is the gate (``http://127.0.0.1:8080``); ``api_key`` a worker
    (or admin) key; ``timeout`` the deadline of a whole call in seconds
    (connect, send, and the answer's headers and body: an answer trickled
    byte by byte does not keep a call alive past it); a lease call that
    long-polls gets it plus its ``wait_seconds``. A call past its deadline
    raises ``socket.timeout`` (an OSError; the same class as
    ``TimeoutError`` on Python 3.10+), a temporary error.

    ``ssl_context`` (an ``ssl.SSLContext``) verifies an HTTPS gate, e.g. one
    whose certificate a private CA signed:
    ``ssl.create_default_context(cafile="ca.pem")``. Without it the client
    uses the opener the application installed with
    ``urllib.request.install_opener``, if any: its handlers (an
    ``HTTPSHandler(context=...)``, proxies, auth, cookies) see every call,
    with HTTP and HTTPS connections made deadline-bound (a copy of the
    opener, built again only when another is installed). Otherwise urllib's
    defaults (the system's CAs). Given an ``ssl_context``, an installed
    opener is not used."""

    def __init__(self, base_url: str, api_key: str, timeout: float = 30.0, ssl_context=None):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.ssl_context = ssl_context
        self._opener = None if ssl_context is None else _client_opener(ssl_context)

    def _call(self, method: str, path: str, body: Any = None, timeout: Optional[float] = None,
              trace: Optional[Tuple[str, str]] = None):
        """Send a request; return (status, decoded JSON or None, server Date as
        Unix time or None). Raise AsyncGateError for non-2xx answers.
        ``trace`` is a W3C (traceparent, tracestate) pair sent as headers."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.api_key)
        if trace and trace[0]:
            req.add_header("traceparent", trace[0])
            if trace[1]:
                req.add_header("tracestate", trace[1])
        req.add_header("Accept", "application/json")
        req.add_header("User-Agent", "asyncgate-worker-python/1")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        budget = timeout or self.timeout
        deadline = time.monotonic() + budget
        refused: Optional[urllib.error.HTTPError] = None
        try:
            try:
                opener = self._opener if self._opener is not None else _client_opener(None)
                with _open(opener, req, deadline, budget) as res:
                    raw = res.read()
                    status, date = res.status, res.headers.get("Date")
            except urllib.error.HTTPError as e:
                refused, raw = e, e.read()
        except (OSError, http.client.HTTPException) as e:
            if isinstance(e, socket.timeout) or isinstance(getattr(e, "reason", None), socket.timeout) or \
                    time.monotonic() >= deadline:
                raise socket.timeout("%s %s: no complete answer within %gs" % (method, path, budget)) from e
            raise
        if refused is not None:
            code, detail = "http_%d" % refused.code, raw.decode("utf-8", "replace")[:200]
            server_time, task_status = "", ""
            try:
                j = json.loads(raw)
                code, detail = j.get("error", code), j.get("detail", "")
                server_time = j.get("server_time") or ""
                task_status = j.get("task_status") or ""
            except (ValueError, AttributeError):
                pass
            hdrs = refused.headers
            edate = _http_date(hdrs.get("Date") if hdrs else None)
            raise AsyncGateError(refused.code, code, detail,
                                 _parse_retry_after(hdrs.get("Retry-After") if hdrs else None, edate), server_time,
                                 task_status)
        server = _http_date(date)
        try:
            out = json.loads(raw) if raw else None
        except ValueError as e:
            raise BadAnswerError("the gate's %d answer to %s %s is not JSON: %s" % (status, method, path, e)) from None
        return status, out, server

    @staticmethod
    def _clock(sent: float, server: Optional[float], expires_at: str, server_time: Optional[str] = None):
        """Lease length and conservative local deadline (KLIS-3 §6.2): the
        remaining time by the gate's clock, its ``server_time`` (to the
        microsecond) or else the Date header (whole seconds: one is taken off),
        counted from the later of the send and the arrival less one more
        second: latency only makes it earlier, and a long-poll's wait is not
        taken off the lease."""
        exp = _parse_time(expires_at)
        if server_time:
            ttl = exp - _parse_time(server_time)
        elif server is not None:
            ttl = exp - server - 1.0
        else:
            ttl = exp - time.time()
        ttl = max(ttl, 0.0)
        return ttl, max(sent, time.time() - 1.0) + ttl

    def lease(self, task_types: List[str], worker_id: str = "", max_tasks: int = 1,
              lease_seconds: int = 0, wait_seconds: float = 0) -> List[Dict[str, Any]]:
        """POST /v1/leases: up to ``max_tasks`` offers, [] when no work. Each
        offer gets ``_ttl`` and ``_deadline`` (local monotonic-free Unix time)."""
        body: Dict[str, Any] = {"task_types": task_types, "max_tasks": max_tasks}
        if worker_id:
            body["worker_id"] = worker_id
        if lease_seconds:
            body["lease_seconds"] = lease_seconds
        if wait_seconds:
            body["wait_seconds"] = wait_seconds
        sent = time.time()
        status, out, server = self._call("POST", "/v1/leases", body, timeout=self.timeout + wait_seconds)
        if status == 204 or not out:
            return []
        offers = out.get("leases") or []
        for o in offers:
            o["_ttl"], o["_deadline"] = self._clock(sent, server, o["lease_expires_at"], o.get("server_time"))
        return offers

    def accept(self, lease_id: str, task_id: str = "", trace: Optional[Tuple[str, str]] = None) -> Dict[str, Any]:
        """POST /v1/leases/{id}/accept: the offer becomes an obligation.
        ``trace`` (on every lease call) is the task's (traceparent,
        tracestate), as the offer handed it out (``Task.trace``)."""
        return self._call("POST", "/v1/leases/%s/accept" % urllib.parse.quote(lease_id), {"task_id": task_id},
                          trace=trace)[1]

    def heartbeat(self, lease_id: str, task_id: str = "", progress_percent: Optional[float] = None,
                  progress_message: str = "", extend_lease_seconds: int = 0,
                  timeout: Optional[float] = None, trace: Optional[Tuple[str, str]] = None) -> Dict[str, Any]:
        """POST /v1/leases/{id}/heartbeat; the answer has ``cancel_requested``
        and ``_ttl``/``_deadline``. ``timeout`` overrides the client's."""
        body: Dict[str, Any] = {"task_id": task_id}
        if progress_percent is not None:
            body["progress_percent"] = progress_percent
        if progress_message:
            body["progress_message"] = progress_message
        if extend_lease_seconds:
            body["extend_lease_seconds"] = extend_lease_seconds
        sent = time.time()
        _, out, server = self._call("POST", "/v1/leases/%s/heartbeat" % urllib.parse.quote(lease_id), body,
                                    timeout=timeout, trace=trace)
        out["_ttl"], out["_deadline"] = self._clock(sent, server, out["lease_expires_at"], out.get("server_time"))
        return out

    def complete(self, lease_id: str, body: Dict[str, Any], trace: Optional[Tuple[str, str]] = None) -> Dict[str, Any]:
        """POST /v1/leases/{id}/complete with a completion body (result,
        result_base64, result_pointer, summary, metadata, artifacts…)."""
        return self._call("POST", "/v1/leases/%s/complete" % urllib.parse.quote(lease_id), body, trace=trace)[1]

    def fail(self, lease_id: str, body: Dict[str, Any], trace: Optional[Tuple[str, str]] = None) -> Dict[str, Any]:
        """POST /v1/leases/{id}/fail with error_message, retryable, metadata."""
        return self._call("POST", "/v1/leases/%s/fail" % urllib.parse.quote(lease_id), body, trace=trace)[1]

    def dependency_result(self, lease_id: str, task_id: str) -> Optional[bytes]:
        """The payload of ``task_id``, a task the task of the live lease
        ``lease_id`` waits (or waited) on, read under that lease
        (GET /v1/tasks/{id}/result?lease_id=): a fan-in reads its inputs
        whatever channel the gate stored them in. A JSON payload comes as
        its JSON text (bytes), any other as its bytes; None when the result
        has no payload. A checksum mismatch raises ValueError."""
        _, out, _ = self._call("GET", "/v1/tasks/%s/result?lease_id=%s" % (
            urllib.parse.quote(task_id, safe=""), urllib.parse.quote(lease_id, safe="")))
        out = out or {}
        if out.get("checksum_valid") is False:
            raise ValueError("the result of %s does not match its checksum" % task_id)
        if out.get("content_base64"):
            return base64.b64decode(out["content_base64"])
        if "content" in out:
            return json.dumps(out["content"]).encode()
        return None

    def outcomes(self, entries: List[Dict[str, Any]], trace: Optional[Tuple[str, str]] = None) -> List[Dict[str, Any]]:
        """POST /v1/leases/batch: up to MAX_OUTCOME_BATCH entries, each
        ``{"lease_id": …, "complete"|"fail"|"heartbeat": body}`` (and an
        optional ``id``), in one call. Returns one result per entry, in their
        order: ``ok``, ``http_status`` and the verb's answer, or ``error`` and
        ``detail`` (``outcome_error(result)`` makes it the AsyncGateError the
        single call would have raised). Raises AsyncGateError for the call as
        a whole; BatchUnsupportedError when the gate has no such route (an
        older gate answers 404)."""
        try:
            out = self._call("POST", "/v1/leases/batch", {"entries": entries}, trace=trace)[1] or {}
        except AsyncGateError as e:
            if e.status in (404, 405):
                raise BatchUnsupportedError(e.status, e.code, e.detail) from e
            raise
        results = out.get("results") if isinstance(out, dict) else None
        if not isinstance(results, list) or len(results) != len(entries):
            raise BadAnswerError("the gate answered a batch of %d outcomes with %s" % (
                len(entries), "%d results" % len(results) if isinstance(results, list) else "no list of results"))
        for i, r in enumerate(results):
            if not isinstance(r, dict):
                raise BadAnswerError("the gate answered entry %d of a batch with %s, not an object" % (i, type(r).__name__))
        return results

    def snooze(self, lease_id: str, seconds: int, task_id: str = "", reason: str = "",
               trace: Optional[Tuple[str, str]] = None) -> Dict[str, Any]:
        """POST /v1/leases/{id}/snooze: back to the queue until ``seconds``
        from now without using an attempt; the answer's available_at says
        when the task is offered again."""
        return self._call("POST", "/v1/leases/%s/snooze" % urllib.parse.quote(lease_id),
                          {"task_id": task_id, "reason": reason, "snooze_seconds": int(seconds)}, trace=trace)[1]

    def release(self, lease_id: str, task_id: str = "", reason: str = "",
                trace: Optional[Tuple[str, str]] = None) -> Dict[str, Any]:
        """POST /v1/leases/{id}/release: back to the queue without using an
        attempt (a task whose cancel was requested is canceled)."""
        return self._call("POST", "/v1/leases/%s/release" % urllib.parse.quote(lease_id),
                          {"task_id": task_id, "reason": reason}, trace=trace)[1]


# --------------------------------------------------------------------------
# Tasks


class Task:
    """One leased task, handed to a handler.

    Attributes: ``task_id``, ``task_type``, ``params`` (dict), ``priority``,
    ``lease_id`` (also ``run_id``), ``attempt``, ``raw`` (the task JSON),
    ``resource_leases`` (the leases granted with this run on the resources
    the task's intents name, each with its ``fencing_token``; see
    ``fencing_token``), ``dependencies`` (for a task enqueued with
    ``after``: the outcomes of the tasks it waited on, in order, each with
    ``task_id``, ``status`` and ``result`` or ``error_message``), ``trace`` (the W3C (traceparent, tracestate) pair
    the gate handed out with the lease, sent with every call about it: a
    handler that records spans of its own starts them under it), and
    ``cancelled`` — a ``threading.Event`` set when
    the task must stop (``stop_reason`` says why)."""

    def __init__(self, runner: "Runner", offer: Dict[str, Any]):
        t = offer.get("task") or {}
        self.raw = t
        self.task_id: str = t.get("task_id", "")
        self.task_type: str = t.get("task_type", "")
        self.params: Dict[str, Any] = t.get("params") or {}
        self.priority: int = t.get("priority", 0)
        self.lease_id: str = offer["lease_id"]
        self.run_id: str = offer.get("run_id", self.lease_id)
        self.attempt: int = offer.get("attempt", 1)
        self.resource_leases: List[Dict[str, Any]] = offer.get("resource_leases") or []
        self.dependencies: List[Dict[str, Any]] = offer.get("dependencies") or []
        self.trace: Tuple[str, str] = (t.get("traceparent", ""), t.get("tracestate", ""))
        self.cancelled = threading.Event()
        self.stop_reason: Optional[str] = None
        self.log = logging.LoggerAdapter(log, {"task_id": self.task_id, "lease_id": self.lease_id})
        self._runner = runner
        self._lock = threading.Lock()
        self._ttl: float = offer.get("_ttl", 0.0)
        self._deadline: float = offer.get("_deadline", 0.0)
        self._pending: Optional[Dict[str, Any]] = None
        self._nudge = threading.Event()
        self._beat_lock = threading.Lock()  # one heartbeat at a time
        self._retry_after = 0.0  # the last failed heartbeat's Retry-After (s)
        self._progress_refused = False  # the gate refused a progress report (logged once)
        self._reporting = False  # the handler returned: its outcome is being reported (or was)
        self._ended = ""  # the task's state once a heartbeat was answered that it already ended

    def fencing_token(self, resource: str) -> int:
        """The fencing token of this run's lease on ``resource`` (its name as
        the gate normalized it), or 0 when the run holds none on it. Pass it
        with every change the task makes to the resource, so that the system
        holding it refuses a change from a run whose lease already ended."""
        for lease in self.resource_leases:
            if lease.get("resource") == resource:
                return int(lease.get("fencing_token", 0))
        return 0

    def dependency_result(self, task_id: str) -> Optional[bytes]:
        """The payload of ``task_id``, one of the tasks this one waited on
        (``dependencies``), read under this run's lease
        (Client.dependency_result)."""
        return self._runner.client.dependency_result(self.lease_id, task_id)

    def progress(self, percent: Optional[float] = None, message: str = "") -> None:
        """Report progress (percent 0..100 and/or a message). It is sent with an
        early heartbeat, but early heartbeats are at least max(1 s, a tenth of
        the lease) apart (never more than the regular third of the lease):
        faster reports are coalesced and the latest is sent when the gap is
        over. Progress still unsent when the handler returns goes with one
        last heartbeat before the outcome. Cheap to call in a tight loop.
        The message is made one the gate takes: NUL is written U+FFFD and a
        message over the gate's 4096 bytes of UTF-8 is cut there, on a
        character boundary. Should the gate still refuse a report, it is
        dropped (logged) and the lease kept."""
        if percent is not None and not (0 <= percent <= 100):
            raise ValueError("progress percent must be 0..100")
        with self._lock:
            self._pending = {"progress_percent": percent, "progress_message": _progress_message(message)}
        self._nudge.set()

    def check(self) -> None:
        """Raise TaskStopped when the lease was lost, the task canceled, or the
        worker's shutdown grace is over. Call it in every loop."""
        if self.cancelled.is_set():
            raise TaskStopped(self.stop_reason or "stopped")

    def _stop(self, reason: str) -> bool:
        with self._lock:
            if self.stop_reason is not None:
                return False
            self.stop_reason = reason
        self.cancelled.set()
        return True


# --------------------------------------------------------------------------
# Runner


class Runner:
    """Leases tasks of the registered types and runs them with heartbeats.

    Register handlers with the ``task(task_type)`` decorator; a handler takes a
    ``Task`` and returns the result (see the module docstring). Then call
    ``run_forever()`` (installs SIGINT/SIGTERM handlers) or ``run()`` in a
    thread and ``stop()`` from another.

    Parameters mirror the Go SDK's Config: ``worker_id`` ("{type}.{instance}",
    default: the key's own), ``concurrency``, ``lease_seconds`` (0: the task
    type's), ``poll_wait`` (long-poll seconds, ≤ 30; a lease call names at
    most 50 task types, so a Runner with more handlers asks for them in
    chunks of 50, in turn, each call long-polling its share of poll_wait),
    ``idle_wait``,
    ``poll_backoff`` and ``delivery_backoff`` (initial, max seconds),
    ``delivery_attempts``, ``spool_path`` (default
    ``~/.cache/asyncgate/spool-<worker id>.jsonl``, or ``spool-key-<hash of
    the key>.jsonl`` without a worker_id; ``""`` disables the spool; run()
    holds a flock on ``<spool_path>.lock`` and raises SpoolLockedError when
    another process holds it),
    ``spool_interval`` (seconds between spool passes; longer after a
    temporary answer with Retry-After that stopped a pass, when it asks for
    more), ``shutdown_timeout``,
    ``data_uri_fallback`` (complete with a data: URI when the gate refuses an
    inline result with 400), ``single_outcomes`` (send every completion and
    failure by its own call; by default outcomes ready while others are being
    sent go together in one POST /v1/leases/batch, a lone one at once, and a
    gate without that route gets single calls)."""

    def __init__(self, client: Client, worker_id: str = "", concurrency: int = 1, lease_seconds: int = 0,
                 poll_wait: float = 30.0, idle_wait: float = 5.0, poll_backoff=(5.0, 60.0),
                 delivery_attempts: int = 5, delivery_backoff=(1.0, 15.0), spool_path: Optional[str] = None,
                 spool_interval: float = 30.0, shutdown_timeout: float = 30.0, data_uri_fallback: bool = False,
                 logger: Optional[logging.Logger] = None, single_outcomes: bool = False):
        self.client = client
        self._outcomes = _OutcomeBatcher(client, single=single_outcomes)
        self.worker_id = worker_id
        self.concurrency = max(1, min(100, concurrency))
        self.lease_seconds = lease_seconds
        self.poll_wait = min(poll_wait, 30.0)
        self.idle_wait = idle_wait
        self.poll_backoff = poll_backoff
        self.delivery_attempts = max(1, delivery_attempts)
        self.delivery_backoff = delivery_backoff
        if spool_path is None:
            spool_path = default_spool_path(worker_id, client.api_key)
        self.spool_path = spool_path
        self.spool_interval = spool_interval
        self.shutdown_timeout = shutdown_timeout
        self.data_uri_fallback = data_uri_fallback
        self.log = logger or log
        self._handlers: Dict[str, Callable[[Task], Any]] = {}
        self._stop = threading.Event()
        self._hard = threading.Event()
        self._live: Dict[str, Task] = {}
        self._live_lock = threading.Lock()
        self._spool_lock = threading.Lock()
        self._spool_file_lock = None  # the open <spool>.lock while held
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self._threads: List[threading.Thread] = []
        self._poll_abort = _PollAbort()

    # ---- registration

    def task(self, task_type: str):
        """Decorator: register the handler for a task type."""
        def deco(fn: Callable[[Task], Any]):
            self._handlers[task_type] = fn
            return fn
        return deco

    # ---- life cycle

    def stop(self) -> None:
        """Ask run() to stop gracefully (safe from any thread or signal
        handler). A lease call long-polling is cut off at once: the worker
        stops within a second, not when the poll ends. The gate gives back
        a task whose offer was on its way as the poll was cut off when that
        lease expires."""
        self._stop.set()
        self._poll_abort.fire()

    def run_forever(self) -> None:
        """run() with SIGINT and SIGTERM wired to a graceful stop."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.stop())
        self.run()

    def run(self) -> None:
        """Lease and run tasks until stop(); then stop leasing, wait for
        in-flight tasks for shutdown_timeout, stop the rest and release their
        leases. Raises AsyncGateError when the gate refuses this worker's
        lease calls (401, 403, 400)."""
        if not self._handlers:
            raise ValueError("no handlers registered")
        types = sorted(self._handlers)
        held = self._lock_spool()
        try:
            self._run(types)
        finally:
            if held:
                self._unlock_spool()

    def _run(self, types: List[str]) -> None:
        self.log.info("worker starting: types=%s concurrency=%d gate=%s spool=%s",
                      types, self.concurrency, self.client.base_url, self.spool_path)
        spooler = threading.Thread(target=self._spool_loop, name="asyncgate-spool", daemon=True)
        spooler.start()
        err: Optional[BaseException] = None
        try:
            self._lease_loop(types)
        except AsyncGateError as e:
            err = e
        self._stop.set()
        self.log.info("worker stopping: waiting for %d in-flight task(s)", len(self._live))
        deadline = time.time() + self.shutdown_timeout
        for th in list(self._threads):
            th.join(max(0.0, deadline - time.time()))
        if any(th.is_alive() for th in self._threads):
            self.log.warning("shutdown grace is over; stopping in-flight tasks")
            self._hard.set()
            with self._live_lock:
                for t in self._live.values():
                    t._stop("shutdown")
            for th in list(self._threads):
                th.join()
        spooler.join(timeout=5)
        self.log.info("worker stopped")
        if err is not None:
            raise err

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless stop() is called; True when the full time passed."""
        return not self._stop.wait(max(0.0, seconds))

    @staticmethod
    def _delay(backoff, n: int) -> float:
        initial, maximum = backoff
        d = min(initial * (2 ** (n - 1)), maximum)
        return d * (1 + random.uniform(-0.1, 0.1))

    def _lease_loop(self, types: List[str]) -> None:
        """Ask for work while slots are free, until stop() or a permanent
        refusal. More types than one lease call may name are split into
        chunks of at most MAX_LEASE_TYPES, asked for in turn, each call
        long-polling its share of poll_wait: every type is asked for at
        least once a poll_wait."""
        chunks = _type_chunks(types)
        wait = self.poll_wait / len(chunks)
        nxt = 0  # the chunk the next lease call asks for
        fails = 0
        while not self._stop.is_set():
            if not self._slots.acquire(timeout=0.5):
                continue
            n = 1
            while n < self.concurrency and self._slots.acquire(blocking=False):
                n += 1
            start = time.time()
            _call_deadline.abort = self._poll_abort
            try:
                offers = self.client.lease(chunks[nxt], worker_id=self.worker_id, max_tasks=n,
                                           lease_seconds=self.lease_seconds, wait_seconds=wait)
            except Exception as e:  # noqa: BLE001 - every error is classified
                for _ in range(n):
                    self._slots.release()
                if self._stop.is_set():
                    break  # stop() cut the poll off
                if isinstance(e, AsyncGateError) and e.status in (400, 401, 403):
                    self.log.error("the gate refuses this worker's lease calls: %s", e)
                    raise
                fails += 1
                d = _retry_wait(e, self._delay(self.poll_backoff, fails))
                self.log.warning("lease call failed (%s); retrying in %.1fs", e, d)
                self._sleep(d)
                continue
            finally:
                _call_deadline.abort = None
                self._poll_abort.done()
            fails = 0
            nxt = (nxt + 1) % len(chunks)
            for _ in range(n - len(offers)):
                self._slots.release()
            self._threads = [th for th in self._threads if th.is_alive()]
            for o in offers:
                th = threading.Thread(target=self._work, args=(o,), name="asyncgate-task", daemon=True)
                self._threads.append(th)
                th.start()
            # An empty answer that did not long-poll pauses the loop, once
            # a round of the chunks is over.
            if not offers and nxt == 0 and (self.poll_wait <= 0 or time.time() - start < wait / 2):
                self._sleep(self.idle_wait)

    # ---- one task

    def _work(self, offer: Dict[str, Any]) -> None:
        task = Task(self, offer)
        try:
            self._run_task(task)
        except Exception:  # noqa: BLE001 - never let a task thread die silently
            task.log.exception("internal error while running task %s", task.task_id)
        finally:
            with self._live_lock:
                self._live.pop(task.lease_id, None)
            self._slots.release()

    def _run_task(self, task: Task) -> None:
        handler = self._handlers.get(task.task_type)
        if handler is None:
            self._release(task, "no handler for task type " + task.task_type)
            return
        if not self._accept(task):
            return
        with self._live_lock:
            self._live[task.lease_id] = task
        if self._hard.is_set():
            task._stop("shutdown")
        done = threading.Event()
        hb = threading.Thread(target=self._heartbeat_loop, args=(task, done), name="asyncgate-heartbeat", daemon=True)
        hb.start()
        try:
            task.log.info("task %s (%s) started, attempt %d", task.task_id, task.task_type, task.attempt)
            started = time.time()
            result, error, tb = None, None, ""
            try:
                result = handler(task)
            except Exception as e:  # noqa: BLE001 - a handler error is a failure, not a crash
                error, tb = e, traceback.format_exc()
            took = time.time() - started
            with task._lock:
                task._reporting = True
            reason = task.stop_reason
            if reason is None and task._pending is not None:
                # Progress the gap held back goes before the outcome.
                self._beat(task)
                if task.stop_reason == "lease_lost":
                    reason = task.stop_reason
            if reason == "lease_lost" and task._ended:
                task.log.info("task %s stopped: it already ended at the gate (%s); outcome not reported",
                              task.task_id, task._ended)
            elif reason == "lease_lost":
                task.log.warning("task %s stopped: the lease was lost; outcome not reported", task.task_id)
            elif reason == "canceled":
                task.log.info("task %s canceled by the gate; releasing", task.task_id)
                self._release(task, "canceled: cancel_requested")
            elif error is None:
                try:
                    body = _completion(result)
                except FatalError as e:
                    self._deliver_fail(task, e, "")
                else:
                    body["task_id"] = task.task_id
                    self._deliver_complete(task, body, took)
            elif reason == "shutdown":
                task.log.info("task %s interrupted by shutdown; releasing", task.task_id)
                self._release(task, "worker shutting down")
            elif isinstance(error, Snooze):
                task.log.info("task %s snoozed for %ss", task.task_id, error.seconds)
                self._snooze(task, error)
            else:
                self._deliver_fail(task, error, tb)
        finally:
            done.set()
            task._nudge.set()
            hb.join()

    def _accept(self, task: Task) -> bool:
        n = 0
        while True:
            n += 1
            try:
                self.client.accept(task.lease_id, task.task_id, trace=task.trace)
                return True
            except Exception as e:  # noqa: BLE001
                if isinstance(e, AsyncGateError) and e.lease_lost:
                    task.log.warning("offer %s expired before it was accepted", task.lease_id)
                    return False
                if not is_temporary(e):
                    task.log.error("the gate refused to accept %s: %s", task.lease_id, e)
                    self._release(task, "accept refused")
                    return False
                d = _retry_wait(e, self._delay(self.delivery_backoff, n))
                if task._deadline and time.time() + d > task._deadline:
                    task.log.warning("could not accept %s before its lease ran out: %s", task.lease_id, e)
                    return False
                time.sleep(d)

    @staticmethod
    def _heartbeat_interval(ttl: float) -> float:
        """The regular heartbeat period: a third of the lease."""
        return max(ttl / 3.0, 0.05)

    @staticmethod
    def _progress_gap(ttl: float) -> float:
        """The least time between two heartbeats sent early for progress:
        max(1 s, a tenth of the lease), never longer than the regular
        interval. Faster reports are coalesced; the latest wins."""
        return min(max(1.0, ttl / 10.0), Runner._heartbeat_interval(ttl))

    @staticmethod
    def _heartbeat_retry(fails: int, interval: float, left: float, hint: float = 0.0) -> float:
        """The wait before retrying a failed heartbeat after ``fails`` failures
        in a row: 250 ms doubling with every failure, at most the regular
        interval, or the failed answer's Retry-After (``hint``) when that is
        longer; never more than half the time left on the lease (at least
        50 ms), so a retry still has time to get through."""
        d = max(min(0.25 * 2.0 ** min(fails - 1, 30), interval), hint)
        return max(min(d, left / 2.0), 0.05)

    def _heartbeat_loop(self, task: Task, done: threading.Event) -> None:
        fails = 0
        last = 0.0  # when the last heartbeat was sent
        while not done.is_set():
            with task._lock:
                ttl, deadline = task._ttl, task._deadline
            interval = self._heartbeat_interval(ttl)
            remaining = deadline - time.time()
            if remaining <= 0:
                if task._stop("lease_lost"):
                    task.log.warning("lease %s lost: no heartbeat reached the gate before its local expiry", task.lease_id)
                return
            if fails:
                interval = self._heartbeat_retry(fails, interval, remaining, task._retry_after)
            due = time.time() + min(interval, remaining)
            gap = self._progress_gap(ttl)
            while not done.is_set():
                task._nudge.clear()
                with task._lock:
                    # Progress goes early, once the gap since the last
                    # heartbeat is over; never while retrying a failed one
                    # (the retry carries it).
                    wake = due if fails or task._pending is None else min(due, last + gap)
                wait = wake - time.time()
                if wait <= 0:
                    break
                task._nudge.wait(wait)
            if done.is_set():
                return
            if time.time() >= task._deadline:
                continue  # the check at the top stops the task
            last = time.time()
            if self._beat(task, done):
                fails = 0
            else:
                fails += 1
            if task._ended:
                return  # the task already ended at the gate: no more heartbeats

    def _beat(self, task: Task, done: Optional[threading.Event] = None) -> bool:
        """Send one heartbeat with the latest unsent progress; the call is
        bounded by the lease's local expiry (and the client's timeout). Report
        whether the gate answered; a refusal of the heartbeat stops the task
        (lease_lost). A progress report the gate refuses (400, 413) is
        dropped and the heartbeat sent again without it: it says nothing
        about the lease."""
        with task._beat_lock:
            with task._lock:
                pending = task._pending
            while True:
                with task._lock:
                    deadline = task._deadline
                left = deadline - time.time()
                if left <= 0:
                    return False
                kw: Dict[str, Any] = {"extend_lease_seconds": self.lease_seconds,
                                      "timeout": min(self.client.timeout, left)}
                if pending:
                    kw.update(pending)
                try:
                    res = self.client.heartbeat(task.lease_id, task.task_id, trace=task.trace, **kw)
                except Exception as e:  # noqa: BLE001
                    if done is not None and done.is_set():
                        return True  # the task is over; nothing more to do
                    if pending and isinstance(e, AsyncGateError) and e.status in (400, 413):
                        self._drop_progress(task, pending, e)
                        pending = None
                        continue
                    if isinstance(e, AsyncGateError) and e.task_finished:
                        self._task_ended(task, e.task_finished)
                        return True
                    if isinstance(e, AsyncGateError) and (e.lease_lost or not e.temporary):
                        if task._stop("lease_lost"):
                            task.log.warning("lease %s lost: %s", task.lease_id, e)
                        return True
                    task.log.warning("heartbeat for %s failed: %s", task.lease_id, e)
                    task._retry_after = retry_after(e)
                    return False
                with task._lock:
                    if res.get("_ttl", 0) > 0:
                        task._ttl, task._deadline = res["_ttl"], res["_deadline"]
                    if task._pending is pending:
                        task._pending = None
                if res.get("cancel_requested") and task._stop("canceled"):
                    task.log.info("the gate asks to cancel task %s", task.task_id)
                return True

    @staticmethod
    def _task_ended(task: Task, status: str) -> None:
        """A heartbeat was answered that the task already ended (status, its
        state): the gate told the worker that held the lease, so it is not a
        lease lost to another worker. Heartbeats stop. With the handler's
        outcome being reported (or reported already: an answer lost, a gate
        restarted) that is all; with the handler still running, it is
        stopped and its outcome not reported, as the task needs none."""
        with task._lock:
            first = not task._ended
            task._ended = status
            running = not task._reporting
        if not first:
            return
        if not running:
            task.log.info("task %s already ended at the gate (%s); heartbeats stop", task.task_id, status)
            return
        task.log.info("task %s already ended at the gate (%s); stopping the handler", task.task_id, status)
        task._stop("lease_lost")

    @staticmethod
    def _drop_progress(task: Task, pending: Dict[str, Any], err: AsyncGateError) -> None:
        """Forget the progress report the gate refused (unless a newer one
        replaced it meanwhile); the first refusal of a task is logged as a
        warning, later ones at debug level."""
        with task._lock:
            if task._pending is pending:
                task._pending = None
            first = not task._progress_refused
            task._progress_refused = True
        if first:
            task.log.warning("the gate refused a progress report for %s (%s); dropping it and heartbeating "
                             "without it", task.lease_id, err)
        else:
            task.log.debug("the gate refused a progress report for %s (%s); dropping it", task.lease_id, err)

    # ---- outcomes

    def _snooze(self, task: Task, sn: Snooze) -> None:
        """Give the lease back until sn.seconds from now (within the gate's
        bound), retrying network errors a few times; a lease that cannot be
        snoozed expires on its own. A snooze the gate refuses with 400 will
        never be taken: the task is failed for good instead, with the
        refusal as its error."""
        seconds = _snooze_seconds(sn.seconds)
        reason = _no_nul(str(sn.reason or ""))[:1000]
        for n in range(1, 4):
            try:
                self.client.snooze(task.lease_id, seconds, task.task_id, reason, trace=task.trace)
                return
            except Exception as e:  # noqa: BLE001
                if isinstance(e, AsyncGateError) and e.status == 400:
                    task.log.error("the gate refused to snooze %s (%s); reporting a failure instead", task.lease_id, e)
                    self._deliver_fail(task, FatalError("the gate refused the snooze: %s" % e), "")
                    return
                if not is_temporary(e) or n == 3:
                    task.log.warning("could not snooze %s (%s); it will expire on its own", task.lease_id, e)
                    return
                time.sleep(_retry_wait(e, self._delay(self.delivery_backoff, n)))

    def _release(self, task: Task, reason: str) -> None:
        for n in range(1, 4):
            try:
                self.client.release(task.lease_id, task.task_id, reason, trace=task.trace)
                return
            except Exception as e:  # noqa: BLE001
                if not is_temporary(e) or n == 3:
                    task.log.warning("could not release %s (%s); it will expire on its own", task.lease_id, e)
                    return
                time.sleep(_retry_wait(e, self._delay(self.delivery_backoff, n)))

    def _deliver_complete(self, task: Task, body: Dict[str, Any], took: float) -> None:
        tried_fallback = False

        def send():
            nonlocal body, tried_fallback
            try:
                res = self._outcomes.send("complete", task.lease_id, body, trace=task.trace)
            except AsyncGateError as e:
                if self.data_uri_fallback and not tried_fallback and e.status == 400:
                    fb = _data_uri_fallback(body)
                    if fb is not None:
                        tried_fallback, body = True, fb
                        task.log.info("inline result refused (%s); completing with a data: URI", e)
                        res = self.client.complete(task.lease_id, body, trace=task.trace)
                        task.log.info("task %s completed in %.2fs (data: URI)", task.task_id, took)
                        return
                raise
            task.log.info("task %s completed in %.2fs: %s", task.task_id, took, res.get("result_pointer", "")[:120])

        err = self._deliver(task, "complete", send, lambda: body)
        if err is not None and isinstance(err, AsyncGateError) and not err.temporary and not err.lease_lost:
            task.log.error("the gate refused the result of %s (%s); reporting a failure", task.task_id, err)
            self._deliver_fail(task, FatalError("the gate refused the result: %s" % err), "")

    def _deliver_fail(self, task: Task, error: BaseException, tb: str) -> None:
        # The gate refuses a NUL character in any string (PostgreSQL keeps none in text); an error's text
        # may hold one, and must still reach it.
        body: Dict[str, Any] = {"task_id": task.task_id,
                                "error_message": _no_nul((str(error) or type(error).__name__)[:8000]),
                                "retryable": not isinstance(error, FatalError)}
        if tb:
            body["metadata"] = {"exception": type(error).__name__, "traceback": _no_nul(tb[-8000:])}

        def send():
            res = self._outcomes.send("fail", task.lease_id, body, trace=task.trace)
            task.log.warning("task %s failed (%s, retryable=%s): status=%s will_retry=%s", task.task_id, error,
                             body["retryable"], res.get("status"), res.get("will_retry"))

        self._deliver(task, "fail", send, lambda: body)

    def _deliver(self, task: Task, kind: str, send: Callable[[], None], body: Callable[[], Dict[str, Any]]):
        """Try send with backoff; spool the body when the gate stays
        unreachable. Returns None on success or the last error."""
        err: Optional[BaseException] = None
        for n in range(1, self.delivery_attempts + 1):
            try:
                send()
                return None
            except Exception as e:  # noqa: BLE001
                err = e
            if isinstance(err, AsyncGateError) and err.task_finished:
                task.log.info("%s for %s not sent again: the task already ended at the gate (%s)",
                              kind, task.lease_id, err.task_finished)
                return err
            if isinstance(err, AsyncGateError) and err.lease_lost:
                task.log.warning("%s refused for %s: the lease is no longer held; the task will be leased again",
                                 kind, task.lease_id)
                return err
            if not is_temporary(err):
                task.log.error("%s refused for %s: %s", kind, task.lease_id, err)
                return err
            if task._ended:
                task.log.info("%s for %s not sent again: the task already ended at the gate (%s)",
                              kind, task.lease_id, task._ended)
                return None
            if task.stop_reason == "lease_lost" or n == self.delivery_attempts or self._hard.is_set():
                break
            d = _retry_wait(err, self._delay(self.delivery_backoff, n))
            task.log.warning("could not deliver %s for %s (%s); retrying in %.1fs", kind, task.lease_id, err, d)
            self._hard.wait(d)
        if not self.spool_path:
            task.log.error("could not deliver %s for %s and the spool is disabled: %s", kind, task.lease_id, err)
            return err
        entry = {"kind": kind, "lease_id": task.lease_id, "task_id": task.task_id, "task_type": task.task_type,
                 "body": body(), "spooled_at": _dt.datetime.now(_dt.timezone.utc).isoformat().replace("+00:00", "Z")}
        try:
            self._spool_add(entry)
        except OSError as e:
            task.log.error("could not deliver %s for %s nor spool it: %s / %s", kind, task.lease_id, err, e)
            return err
        task.log.warning("could not deliver %s for %s (%s); spooled to %s", kind, task.lease_id, err, self.spool_path)
        return None

    # ---- spool

    def _spool_add(self, entry: Dict[str, Any]) -> None:
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        with self._spool_lock:
            d = os.path.dirname(self.spool_path) or "."
            os.makedirs(d, mode=0o700, exist_ok=True)
            new = not os.path.exists(self.spool_path)
            fd = os.open(self.spool_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                data = line.encode()
                # A line a crash cut short ends the file without its
                # newline: the entry starts a line of its own, or it would
                # be glued to that one and skipped with it.
                size = os.fstat(fd).st_size
                if size > 0:
                    os.lseek(fd, size - 1, os.SEEK_SET)  # (no os.pread on Windows)
                    if os.read(fd, 1) != b"\n":
                        data = b"\n" + data
                while data:  # a short write goes on where it stopped
                    n = os.write(fd, data)
                    data = data[n:]
                os.fsync(fd)
            finally:
                os.close(fd)
            if new:
                _fsync_dir(d)

    def _spool_load(self) -> List[Dict[str, Any]]:
        try:
            with open(self.spool_path, "rb") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for ln in lines:
            if not ln.strip():
                continue
            try:
                e = json.loads(ln)
            except ValueError:
                self.log.warning("spool: skipping a line that does not parse")
                continue
            if isinstance(e, dict) and e.get("lease_id") and e.get("kind") in ("complete", "fail"):
                out.append(e)
        return out

    def _lock_spool(self) -> bool:
        """Take the exclusive lock on <spool>.lock (flock, shared with the Go
        SDK); raise SpoolLockedError when another process or Runner holds
        it. Return whether this call took it."""
        if not self.spool_path or self._spool_file_lock is not None or fcntl is None:
            return False
        d = os.path.dirname(self.spool_path) or "."
        os.makedirs(d, mode=0o700, exist_ok=True)
        f = open(self.spool_path + ".lock", "a+")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            owner = f.read().strip()
            f.close()
            raise SpoolLockedError(self.spool_path, owner)
        except BaseException:
            f.close()
            raise
        f.seek(0)
        f.truncate()
        f.write("%d\n" % os.getpid())
        f.flush()
        self._spool_file_lock = f
        return True

    def _unlock_spool(self) -> None:
        f, self._spool_file_lock = self._spool_file_lock, None
        if f is not None:
            f.close()  # closing releases the flock

    def flush_spool(self) -> int:
        """Try the spooled outcomes once, in order; return how many remain.
        Delivered ones and ones the gate refuses for good leave the spool.
        One that gets another 5xx answer (500, 502, 504, ...: about that
        outcome, e.g. its result channel down) stays for the next pass and
        this one goes on. The first that finds the gate unreachable or busy
        (network error, timeout, 408, 429, 503) ends the pass: it and the
        ones after it stay for the next, untried. Raises SpoolLockedError
        when another worker process holds the spool."""
        return self._flush_spool_pass()[0]

    def _flush_spool_pass(self):
        """flush_spool, also returning the error that ended the pass early
        (None when it tried every outcome)."""
        if not self.spool_path:
            return 0, None
        held = self._lock_spool()
        try:
            return self._flush_spool()
        finally:
            if held:
                self._unlock_spool()

    def _flush_spool(self):
        with self._spool_lock:
            entries = self._spool_load()
        done = set()
        stopped: Optional[BaseException] = None
        for e in entries:
            key = (e["kind"], e["lease_id"])
            try:
                if e["kind"] == "complete":
                    self.client.complete(e["lease_id"], e["body"])
                else:
                    self.client.fail(e["lease_id"], e["body"])
                self.log.info("spool: delivered %s for task %s", e["kind"], e.get("task_id"))
                done.add(key)
            except Exception as exc:  # noqa: BLE001
                if is_temporary(exc) and not _gate_down(exc):
                    self.log.warning("spool: could not deliver %s for task %s (%s); it stays for the next "
                                     "try, going on with the rest", e["kind"], e.get("task_id"), exc)
                    continue
                if is_temporary(exc):
                    self.log.warning("spool: could not deliver %s for task %s (%s); %d spooled outcome(s) "
                                     "left for the next try", e["kind"], e.get("task_id"), exc,
                                     len(entries) - len(done))
                    stopped = exc
                    break
                self.log.warning("spool: the gate refused %s for task %s (%s); dropping it",
                                 e["kind"], e.get("task_id"), exc)
                done.add(key)
        if done:
            with self._spool_lock:
                keep = [e for e in self._spool_load() if (e["kind"], e["lease_id"]) not in done]
                d = os.path.dirname(self.spool_path) or "."
                if not keep:
                    try:
                        os.remove(self.spool_path)
                    except FileNotFoundError:
                        pass
                else:
                    tmp = self.spool_path + ".tmp"
                    with open(tmp, "w") as f:
                        for e in keep:
                            f.write(json.dumps(e, separators=(",", ":")) + "\n")
                        f.flush()
                        os.fsync(f.fileno())
                    os.replace(tmp, self.spool_path)
                _fsync_dir(d)
        return len(entries) - len(done), stopped

    def _spool_loop(self) -> None:
        while True:
            wait = self.spool_interval
            try:
                _, stopped = self._flush_spool_pass()
                if stopped is not None:
                    # The answer's Retry-After (capped, jittered) when it
                    # asks for longer than the interval.
                    wait = _retry_wait(stopped, self.spool_interval)
            except Exception as e:  # noqa: BLE001
                self.log.warning("spool retry failed: %s", e)
            if self._stop.wait(wait):
                return


def _gate_down(exc: BaseException) -> bool:
    """Report whether a temporary error says the whole gate is unreachable
    or busy (a network error, a timeout, an answer cut off, 408, 429, 503),
    so that a spool pass stops, rather than something about one outcome
    (another 5xx: 500, 502 channel_error, 504 plugin_timeout)."""
    if isinstance(exc, AsyncGateError):
        return exc.status in (408, 429, 503)
    return True


class SpoolLockedError(RuntimeError):
    """Another worker process (or Runner) holds this spool: two workers must
    not share one spool file. Give each its own worker_id or spool_path."""

    def __init__(self, path: str, owner: str = ""):
        super().__init__("the spool %s is in use by another worker process (pid %s); give each worker "
                         "process its own worker_id or spool_path" % (path, owner or "?"))
        self.path = path


def default_spool_path(worker_id: str, api_key: str) -> str:
    """The default spool: named after the worker id or, without one, after a
    hash of the key (a worker key acts as its own worker id) — the same name
    the Go SDK uses, under ~/.cache/asyncgate (or $XDG_CACHE_HOME)."""
    if worker_id:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", worker_id)
    else:
        name = "key-" + hashlib.sha256(api_key.encode()).hexdigest()[:16]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "asyncgate", "spool-%s.jsonl" % name)


def _fsync_dir(d: str) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --------------------------------------------------------------------------
# Resource leases (KLIS-3): lock what you are about to change.


class ResourceLeases:
    """The gate's resource lease API (``/v1/resource-leases``) through a
    Client; any key may hold leases, the holder is the key's principal.

    ``hold`` acquires a manifest and keeps it alive in a thread::

        rl = ResourceLeases(Client(url, api_key))
        with rl.hold([("FILE:/repo/x.go", "MUTATES")], ttl_ms=30000) as h:
            for step in work:
                if h.lost.is_set():
                    raise RuntimeError(h.lost_reason)   # stop: the lease is gone
                step()
    """

    def __init__(self, client: "Client"):
        self.client = client

    def acquire(self, intents, ttl_ms: int = 0, priority_at: str = "", wait_seconds: float = 0, session_id: str = "") -> Dict[str, Any]:
        """POST /v1/resource-leases with ``intents`` as (resource, predicate)
        pairs or dicts; all granted, or AsyncGateError 409 resource_conflict
        (its detail names the lease in the way). With ``session_id`` the
        leases follow that session's heartbeats and end with it."""
        body: Dict[str, Any] = {"intents": [i if isinstance(i, dict) else {"resource": i[0], "predicate": i[1]} for i in intents]}
        if session_id:
            body["session_id"] = session_id
        if ttl_ms:
            body["ttl_ms"] = ttl_ms
        if priority_at:
            body["priority_at"] = priority_at
        if wait_seconds:
            body["wait_seconds"] = wait_seconds
        return self.client._call("POST", "/v1/resource-leases", body, timeout=self.client.timeout + wait_seconds)[1]

    def holders(self, resource: str, wait_seconds: float = 0, predicate: str = "") -> Dict[str, Any]:
        """Who holds ``resource`` now, without taking it: ``{"leases": [...],
        "server_time": ...}``, the leases honoured at the gate's now.

        With ``wait_seconds``, wait (taking nothing) until nothing in the way
        of taking it with ``predicate`` (READS or MUTATES, the default) is
        held, and answer what is still in the way when the wait ran out: the
        wait of an acquire refused with wait_die "die"."""
        path = "/v1/resource-leases?resource=" + urllib.parse.quote(resource, safe="")
        if wait_seconds:
            path += "&wait_seconds=" + repr(float(wait_seconds))
        if predicate:
            path += "&predicate=" + urllib.parse.quote(predicate, safe="")
        return self.client._call("GET", path, None, timeout=self.client.timeout + wait_seconds)[1]

    def heartbeat(self, lease_ids: List[str]) -> Dict[str, Any]:
        """Extend every lease by its TTL from the gate's now, or none."""
        return self.client._call("POST", "/v1/resource-leases/heartbeat", {"lease_ids": lease_ids})[1]

    def release(self, lease_ids: List[str]) -> Dict[str, Any]:
        """Release the leases (idempotent)."""
        return self.client._call("POST", "/v1/resource-leases/release", {"lease_ids": lease_ids})[1]

    def verify(self, lease_ids: Optional[List[str]] = None) -> Dict[str, Any]:
        """VERIFY_ALL: the leases' state by the gate's clock (none: all you hold)."""
        return self.client._call("POST", "/v1/resource-leases/verify", {"lease_ids": lease_ids} if lease_ids else {})[1]

    def create_session(self, ttl_ms: int = 0) -> Dict[str, Any]:
        """Open a session (``{"session": {...}, "leases": [], ...}``): leases
        acquired with its ``session_id`` follow one heartbeat and end with it."""
        return self.client._call("POST", "/v1/resource-sessions", {"ttl_ms": ttl_ms} if ttl_ms else {})[1]

    def heartbeat_session(self, session_id: str, ttl_ms: int = 0) -> Dict[str, Any]:
        """Extend the session and every lease in it; AsyncGateError 409
        session_ended when it was lost or ended (its leases are gone)."""
        return self.client._call("POST", "/v1/resource-sessions/" + urllib.parse.quote(session_id, safe="") + "/heartbeat",
                                 {"ttl_ms": ttl_ms} if ttl_ms else {})[1]

    def end_session(self, session_id: str) -> Dict[str, Any]:
        """End the session and release every lease in it (idempotent)."""
        return self.client._call("POST", "/v1/resource-sessions/" + urllib.parse.quote(session_id, safe="") + "/end", {})[1]

    def revoke(self, lease_id: str, tenant: str = "") -> Dict[str, Any]:
        """Revoke a lease as an operator (admin key); its holder's next
        heartbeat is AsyncGateError 409 lease_revoked."""
        path = "/v1/admin/resource-leases/" + urllib.parse.quote(lease_id, safe="") + "/revoke"
        if tenant:
            path += "?tenant=" + urllib.parse.quote(tenant, safe="")
        return self.client._call("POST", path, {})[1]

    def die_restart(self) -> Dict[str, Any]:
        """Declare DIE_RESTART: each live lease gets its one grace period;
        heartbeats are refused until ``verify``."""
        return self.client._call("POST", "/v1/resource-leases/die-restart", {})[1]

    def hold(self, intents, ttl_ms: int = 0, priority_at: str = "", wait_seconds: float = 0) -> "ResourceHolder":
        """Acquire and keep the manifest alive (heartbeats at TTL/3)."""
        sent = time.time()
        m = self.acquire(intents, ttl_ms, priority_at, wait_seconds)
        return ResourceHolder(self, m, sent)


class ResourceHolder:
    """A held manifest: a thread heartbeats it at TTL/3. ``lost`` is set (and
    ``lost_reason`` says why) the moment the holder can no longer be sure it
    holds every lease: a refused heartbeat, or no answer before the lease's
    expiry measured on the gate's clock from when the last heartbeat was sent.
    Use it as a context manager, or call ``release``.

    Every lease carries a ``fencing_token``, larger than every earlier
    grant's of its resource: pass ``fencing_token(resource)`` with each change
    to the resource, so that the system holding it refuses a change from a
    holder whose lease already ended."""

    def __init__(self, rl: ResourceLeases, manifest: Dict[str, Any], sent: float):
        self.rl = rl
        self.leases = manifest["leases"]
        self.lease_ids = [l["lease_id"] for l in self.leases]
        self.lost = threading.Event()
        self.lost_reason = ""
        self._stop = threading.Event()
        self._deadline = self._local_deadline(sent, manifest)
        ttl = self.leases[0]["ttl_ms"] / 1000.0
        self._every = max(ttl / 3.0, 0.01)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def _local_deadline(sent: float, answer: Dict[str, Any]) -> float:
        now = _parse_time(answer["server_time"])
        left = min(_parse_time(l["expires_at"]) - now for l in answer["leases"])
        return sent + max(left, 0.0)

    @staticmethod
    def _retry(every: float, left: float, hint: float) -> float:
        """The wait before retrying a failed heartbeat: a quarter of the
        period (at most 1 s), or the failed answer's Retry-After (``hint``)
        when that is longer, but never more than half the time left."""
        d = min(every / 4.0, 1.0)
        if hint > d:
            d = max(min(hint, left / 2.0), d)
        return d

    def _lose(self, reason: str) -> None:
        self.lost_reason = reason
        self.lost.set()

    def _run(self) -> None:
        wait = self._every
        while not self._stop.wait(min(wait, max(self._deadline - time.time(), 0.0))):
            if time.time() >= self._deadline:
                self._lose("no heartbeat was answered before the lease's expiry")
                return
            sent = time.time()
            try:
                out = self.rl.heartbeat(self.lease_ids)
            except Exception as exc:  # noqa: BLE001 - classified below
                quota = isinstance(exc, AsyncGateError) and exc.code == "quota_exceeded"
                if is_temporary(exc) and not quota:
                    wait = self._retry(self._every, self._deadline - time.time(), retry_after(exc))
                    continue
                self._lose(str(exc))
                return
            self.leases = out["leases"]
            self._deadline = self._local_deadline(sent, out)
            wait = self._every

    def fencing_token(self, resource: str) -> int:
        """The fencing token of the held lease on ``resource`` (its name as
        the gate normalized it), or 0 when the manifest holds none on it."""
        for lease in self.leases:
            if lease["resource"] == resource:
                return int(lease.get("fencing_token", 0))
        return 0

    def release(self) -> Dict[str, Any]:
        """Stop heartbeating and release the leases (idempotent)."""
        self._stop.set()
        self._thread.join()
        return self.rl.release(self.lease_ids)

    def __enter__(self) -> "ResourceHolder":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

