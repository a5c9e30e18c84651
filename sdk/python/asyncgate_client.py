"""AsyncGate agent client for Python (standard library only).

The producer side of the gate, as ``sdk/client`` is for Go: queue tasks
(one or a batch), read them, wait for them to finish, fetch their results,
cancel them; read the inbox and mark it read, list open obligations, read
receipts and a task's timeline; submit, read and cancel workflows; create,
list, pause, resume, change and delete schedules. It speaks the gate's HTTP
API (docs/http.md; ``GET /openapi.json`` describes every route) with an agent
(or admin) key, over ``urllib``.

One module, no dependencies: install the package (``pip install
./sdk/python``, which also holds the worker module ``asyncgate_worker``) or
copy this file next to your program. ::

    from asyncgate_client import APIError, Client

    c = Client("http://127.0.0.1:8080", api_key="agw_…")
    ack = c.enqueue("image.resize", {"url": u, "width": 640},
                    idempotency_key="resize-" + u, priority=7)
    task = c.wait(ack["task_id"], timeout=300)          # polls every 0.5 s
    if task["status"] == "succeeded":
        thumb = c.result_value(task["task_id"])         # the decoded payload

Answers are the gate's JSON as ``dict`` and ``list`` (the field names of
docs/http.md), so fields a newer gate adds are there too. Every error answer
raises ``APIError`` (``NotFoundError`` for a 404) carrying the gate's machine
code (``error``) and ``detail``; a 429 or 503 also carries its Retry-After.
Like the Go client, calls are not retried: a caller decides what a refusal
means, and ``wait`` alone polls again after a 408, 429 or 5xx answer that
says when to (its Retry-After).
"""

from __future__ import annotations

import base64
import datetime as _dt
import email.utils
import http
import json
import math
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

__all__ = [
    "APIError", "NotFoundError", "NoContentError", "BadAnswerError", "WaitTimeoutError",
    "Client", "EnqueueOptions", "NewTask", "BatchEnqueued",
    "terminal", "decode_result", "step", "schedule_template", "fire_key",
    "STATE_WAITING", "STATE_QUEUED", "STATE_SCHEDULED", "STATE_LEASED", "STATE_SUCCEEDED",
    "STATE_CANCELED", "STATE_DEAD_LETTER", "STATE_ARCHIVED", "ALL_SUCCEEDED", "ANY_SUCCEEDED", "ALL_FINISHED",
    "READS", "MUTATES", "MISSED_SKIP", "MISSED_RUN_ONCE", "MISSED_RUN_ALL",
    "MAX_ENQUEUE_BATCH", "MAX_RETRY_AFTER",
]

Json = Dict[str, Any]
"""A JSON object of the gate, decoded."""

# States of a task.
STATE_WAITING = "waiting"  # queued with after; not offered until its rule is met
STATE_QUEUED = "queued"
STATE_SCHEDULED = "scheduled"  # queued, not offered before its available_at
STATE_LEASED = "leased"
STATE_SUCCEEDED = "succeeded"
STATE_CANCELED = "canceled"
STATE_DEAD_LETTER = "dead_letter"
STATE_ARCHIVED = "archived"  # finished, past its retention: its payload purged

# The rules of a task with dependencies (``after_rule``).
ALL_SUCCEEDED = "all_succeeded"  # every dependency succeeded (the default)
ANY_SUCCEEDED = "any_succeeded"
ALL_FINISHED = "all_finished"

# The predicates of a resource intent.
READS = "READS"  # shared with other readers
MUTATES = "MUTATES"  # exclusive

# Missed-run policies of a schedule.
MISSED_SKIP = "skip"  # drop the fires the gate missed
MISSED_RUN_ONCE = "run_once"  # one task for the latest
MISSED_RUN_ALL = "run_all"  # one task each, the latest missed_cap

MAX_ENQUEUE_BATCH = 1000
"""The most tasks one ``enqueue_batch`` may carry."""

MAX_RETRY_AFTER = 60.0
"""The cap (s) on the Retry-After ``wait`` waits for after a refused poll;
up to 10% jitter comes on top of the capped wait."""

_RETRY_AFTER_BOUND = 86400.0
"""The bound (s) on a Retry-After as read, in both of its forms."""


def terminal(status: str) -> bool:
    """Report whether a task in state ``status`` will not change any more (an
    operator's redrive of a dead letter aside)."""
    return status in (STATE_SUCCEEDED, STATE_CANCELED, STATE_DEAD_LETTER, STATE_ARCHIVED)


# --------------------------------------------------------------------------
# Errors


class APIError(Exception):
    """An error answer of the gate: ``{"error": code, "detail": text}``.

    ``status`` is the HTTP status, ``code`` the gate's machine code (e.g.
    ``unknown_task_type``, ``invalid_params``, ``quota_exceeded``; the status
    text when the answer has none), ``detail`` the text for people.
    ``retry_after`` is the answer's Retry-After in seconds (delay-seconds, or
    an HTTP-date measured against the answer's Date): how long the gate asks
    the caller to wait before trying again. The gate sets it on every 429
    and 503. It is 0 when the header is absent or unreadable, and also when
    it is 0 or a date already past: ``has_retry_after`` tells these apart
    (True with 0 means "try again now")."""

    def __init__(self, status: int, code: str, detail: str = "", retry_after: float = 0.0,
                 has_retry_after: bool = False):
        msg = "gate answered %d %s" % (status, code)
        if detail:
            msg += ": " + detail
        super().__init__(msg)
        self.status, self.code, self.detail = status, code, detail
        self.retry_after = retry_after
        self.has_retry_after = has_retry_after or retry_after > 0

    @property
    def temporary(self) -> bool:
        """True for answers worth trying again later (5xx, 408, 429)."""
        return self.status >= 500 or self.status in (408, 429)


class NotFoundError(APIError):
    """A 404 answer: the task (workflow, schedule, …) does not exist, or the
    key may not see it."""


def _api_error(status: int, code: str, detail: str = "", retry_after: float = 0.0,
               has_retry_after: bool = False) -> APIError:
    cls = NotFoundError if status == 404 else APIError
    return cls(status, code, detail, retry_after, has_retry_after)


class NoContentError(ValueError):
    """The result carries no payload (a worker that completed with a
    pointer only): see its ``result_pointer`` and ``result_channel``."""


class BadAnswerError(ValueError):
    """A 2xx answer of the gate whose body is not JSON."""


class WaitTimeoutError(TimeoutError):
    """``wait`` or ``wait_workflow`` ran out of time before the task (or
    workflow) ended. ``last`` is what the last poll saw (None when no poll
    got an answer)."""

    def __init__(self, what: str, last: Optional[Json]):
        super().__init__("%s did not end in time" % what)
        self.last = last


# --------------------------------------------------------------------------
# Retry-After


def _http_date(value: Optional[str]) -> Optional[float]:
    """An HTTP-date as Unix time; None when absent or unreadable. A date
    without a zone is UTC."""
    if not value:
        return None
    try:
        at = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if at is None:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=_dt.timezone.utc)
    return at.timestamp()


def _parse_retry_after(value: Optional[str], server: Optional[float]) -> Tuple[float, bool]:
    """Read a Retry-After header: delay-seconds (ASCII digits, no sign), or an
    HTTP-date measured against the answer's Date (``server``, Unix time; the
    local clock when None), at most a day; and whether it could be read. An
    absent or unreadable header is (0, False); 0 or a date past is (0, True)."""
    value = (value or "").strip()
    if not value:
        return 0.0, False
    if value.isascii() and value.isdigit():
        digits = value.lstrip("0")
        if len(digits) > len(str(int(_RETRY_AFTER_BOUND))):
            return _RETRY_AFTER_BOUND, True
        return float(min(int(digits or "0"), _RETRY_AFTER_BOUND)), True
    at = _http_date(value)
    if at is None:
        return 0.0, False
    now = time.time() if server is None else server
    return min(max(at - now, 0.0), _RETRY_AFTER_BOUND), True


def _retry_after(exc: BaseException) -> Optional[float]:
    """How long a temporary answer (408, 429, 5xx) asks to wait before the
    next attempt: its Retry-After, at most MAX_RETRY_AFTER, plus up to 10%
    jitter; 0 for a Retry-After of 0 (try again now). None for other errors
    and answers without a readable Retry-After."""
    if not isinstance(exc, APIError) or not exc.has_retry_after or not exc.temporary:
        return None
    d = min(max(exc.retry_after, 0.0), MAX_RETRY_AFTER)
    return d + random.uniform(0, 0.1) * d


# --------------------------------------------------------------------------
# Request bodies


@dataclass
class EnqueueOptions:
    """The optional fields of an enqueue (``Client.enqueue`` takes them as
    keywords too).

    ``priority`` 1..10, 10 first (0: the task type's default);
    ``recipient`` who receives the outcome ("": the caller);
    ``idempotency_key`` yours alone: your repeat for the same recipient
    answers the first task (``is_duplicate``); ``summary`` a description for
    people; ``delay`` seconds before the first lease (rounded up to whole
    seconds) or ``not_before`` a time (a ``datetime``, naive taken as UTC, or
    an RFC 3339 string); ``max_retries`` failures allowed (None: the type's
    default); ``resource_intents`` resources the task needs while it runs,
    as ``{"resource", "predicate"}`` dicts or ``(resource, predicate)``
    pairs (READS or MUTATES); ``after`` task ids this one waits on and
    ``after_rule`` (ALL_SUCCEEDED, the default, ANY_SUCCEEDED or
    ALL_FINISHED)."""

    priority: int = 0
    recipient: str = ""
    idempotency_key: str = ""
    summary: str = ""
    delay: float = 0.0
    not_before: Union[None, str, _dt.datetime] = None
    max_retries: Optional[int] = None
    resource_intents: Optional[Sequence[Any]] = None
    after: Optional[Sequence[str]] = None
    after_rule: str = ""


@dataclass
class NewTask:
    """One task of ``enqueue_batch``: its type, its params and its options
    (give each its own ``idempotency_key`` to make a retried batch safe)."""

    task_type: str
    params: Any = None
    options: Optional[EnqueueOptions] = None


@dataclass
class BatchEnqueued:
    """One task's answer in ``enqueue_batch``: ``task``, the acknowledgement
    (``is_duplicate`` for a repeated idempotency key), or ``error``, the
    APIError the single ``enqueue`` would have raised."""

    task: Optional[Json] = None
    error: Optional[APIError] = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _rfc3339(t: Union[str, _dt.datetime]) -> str:
    """t in RFC 3339 with Go's RFC3339Nano spelling (UTC "Z", the fraction
    without trailing zeros); a string is sent as given."""
    if isinstance(t, str):
        return t
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    t = t.astimezone(_dt.timezone.utc)
    s = t.strftime("%Y-%m-%dT%H:%M:%S")
    if t.microsecond:
        s += ("." + "%06d" % t.microsecond).rstrip("0")
    return s + "Z"


def _intents(intents: Sequence[Any]) -> List[Json]:
    out = []
    for i in intents:
        if isinstance(i, Mapping):
            out.append({"resource": i["resource"], "predicate": i["predicate"]})
        else:
            resource, predicate = i
            out.append({"resource": resource, "predicate": predicate})
    return out


def _enqueue_body(task_type: str, params: Any, o: Optional[EnqueueOptions]) -> Json:
    """The body of POST /v1/tasks (and one task of POST /v1/tasks/batch)."""
    body: Json = {"task_type": task_type, "params": params}
    if o is None:
        return body
    if o.priority:
        body["priority"] = o.priority
    if o.recipient:
        body["recipient_ai"] = o.recipient
    if o.idempotency_key:
        body["idempotency_key"] = o.idempotency_key
    if o.summary:
        body["task_summary"] = o.summary
    if o.delay and o.delay > 0:
        body["delay_seconds"] = int(math.ceil(o.delay))
    if o.not_before is not None:
        body["not_before"] = _rfc3339(o.not_before)
    if o.max_retries is not None:
        body["max_retries"] = o.max_retries
    if o.resource_intents:
        body["resource_intents"] = _intents(o.resource_intents)
    if o.after:
        body["after"] = list(o.after)
    if o.after_rule:
        body["after_rule"] = o.after_rule
    return body


def step(name: str, task_type: str, params: Any = None, *after: str, after_rule: str = "",
         priority: int = 0, max_retries: Optional[int] = None, summary: str = "",
         delay: float = 0.0, not_before: Union[None, str, _dt.datetime] = None,
         resource_intents: Optional[Sequence[Any]] = None) -> Json:
    """A workflow step for ``submit_workflow``: ``after`` names the steps it
    waits on (their outcomes go to its worker). ``delay`` (seconds, rounded
    up: the step's ``delay_seconds``) and ``not_before`` (a ``datetime``,
    naive taken as UTC, or an RFC 3339 string) hold its start as an
    enqueue's, counted from the submission, not from the end of the steps in
    ``after``: a step with both starts when its rule is met and its time has
    come. ``resource_intents`` are resources its task needs while it runs,
    besides its type's, as EnqueueOptions takes them."""
    s: Json = {"name": name, "task_type": task_type}
    if params is not None:
        s["params"] = params
    if priority:
        s["priority"] = priority
    if max_retries is not None:
        s["max_retries"] = max_retries
    if summary:
        s["task_summary"] = summary
    if after:
        s["after"] = list(after)
    if after_rule:
        s["after_rule"] = after_rule
    if delay and delay > 0:
        s["delay_seconds"] = int(math.ceil(delay))
    if not_before is not None:
        s["not_before"] = _rfc3339(not_before)
    if resource_intents:
        s["resource_intents"] = _intents(resource_intents)
    return s


def schedule_template(task_type: str, params: Any = None, priority: int = 0, recipient: str = "",
                      summary: str = "", max_retries: Optional[int] = None) -> Json:
    """The task a schedule enqueues at each fire (``create_schedule``)."""
    t: Json = {"task_type": task_type}
    if params is not None:
        t["params"] = params
    if priority:
        t["priority"] = priority
    if recipient:
        t["recipient_ai"] = recipient
    if summary:
        t["task_summary"] = summary
    if max_retries is not None:
        t["max_retries"] = max_retries
    return t


def fire_key(schedule_id: str, at: Union[str, _dt.datetime]) -> str:
    """The idempotency key of the task a schedule's fire at ``at`` enqueued
    (a naive datetime is UTC): a task's ``idempotency_key`` names the
    schedule and fire that made it."""
    return "schedule:" + schedule_id + ":" + _rfc3339(at)


def decode_result(result: Json) -> Any:
    """The payload of a result (``Client.result``) decoded: its JSON
    ``content``, or its ``content_base64`` holding JSON. Raises
    NoContentError when it has neither."""
    if result.get("content") is not None:
        return result["content"]
    if result.get("content_base64"):
        return json.loads(base64.b64decode(result["content_base64"]))
    raise NoContentError("the result of %s has no content" % result.get("task_id", "the task"))


def _path(*parts: str) -> str:
    return "/".join(urllib.parse.quote(p, safe="") if i else p for i, p in enumerate(parts))


def _query(path: str, **q: Any) -> str:
    """path with the query of the fields of q that are set (a list is
    comma-separated, a bool is true/false)."""
    pairs = []
    for k, v in q.items():
        if v is None or v == "" or v == 0 or v == [] or v == ():
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, (list, tuple)):
            v = ",".join(v)
        pairs.append((k, str(v)))
    return path + ("?" + urllib.parse.urlencode(pairs) if pairs else "")


# --------------------------------------------------------------------------
# The client


class Client:
    """Talks to one gate with one key. Thread-safe (one request per call).

    ``base_url`` is the gate (``http://127.0.0.1:8080``); ``api_key`` an
    agent (or admin) key, sent as ``Authorization: Bearer <key>``.
    ``timeout`` (s, default 60) bounds each blocking step of a call
    (connecting, and each read of the answer); ``wait``'s own ``timeout``
    bounds a whole wait. ``user_agent`` is the User-Agent header.
    ``ssl_context`` (an ``ssl.SSLContext``) verifies an HTTPS gate, e.g. one
    whose certificate a private CA signed; without it the opener the
    application installed with ``urllib.request.install_opener`` is used,
    if any (proxies, auth, TLS settings), else urllib's defaults.

    A gate that cannot be reached, or does not answer within the timeout,
    raises what ``urllib.request.urlopen`` raises: ``URLError`` or
    ``socket.timeout``, both ``OSError``s.

    ``trace_propagator``, when set, is called with the headers (a dict) of
    every request that carries no trace of ``with_trace``, to write the
    caller's trace context; with OpenTelemetry:
    ``lambda h: opentelemetry.propagate.inject(h)``."""

    def __init__(self, base_url: str, api_key: str, timeout: float = 60.0,
                 user_agent: str = "asyncgate-client-python", ssl_context=None,
                 trace_propagator: Optional[Callable[[Dict[str, str]], None]] = None):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.user_agent = user_agent
        self.ssl_context = ssl_context
        self.trace_propagator = trace_propagator
        self._trace: Tuple[str, str] = ("", "")

    def with_trace(self, traceparent: str, tracestate: str = "") -> "Client":
        """A copy of this client whose every request carries this W3C Trace
        Context (the ``traceparent`` and ``tracestate`` headers), so the
        gate's spans join the caller's trace and an enqueued task keeps it
        for its worker."""
        c = Client(self.base_url, self.api_key, self.timeout, self.user_agent, self.ssl_context,
                   self.trace_propagator)
        c._trace = (traceparent, tracestate)
        return c

    @property
    def trace(self) -> Tuple[str, str]:
        """The (traceparent, tracestate) ``with_trace`` set, or empty strings."""
        return self._trace

    def do(self, method: str, path: str, body: Any = None, timeout: Optional[float] = None) -> Tuple[int, Any]:
        """Send a request to ``path`` (e.g. ``/v1/admin/workers``) with
        ``body`` encoded as JSON (None: none) and return the status and the
        decoded answer (None for an empty one). Any answer other than 2xx
        raises APIError (NotFoundError for a 404). The typed methods are
        built on it; use it for the routes they do not cover
        (``/openapi.json`` lists them all)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        if self.api_key:
            req.add_header("Authorization", "Bearer " + self.api_key)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        req.add_header("User-Agent", self.user_agent)
        if self._trace[0]:
            req.add_header("traceparent", self._trace[0])
            if self._trace[1]:
                req.add_header("tracestate", self._trace[1])
        elif self.trace_propagator is not None:
            h: Dict[str, str] = {}
            self.trace_propagator(h)
            for k, v in h.items():
                req.add_header(k, v)
        kw: Dict[str, Any] = {"timeout": timeout or self.timeout}
        if self.ssl_context is not None:
            kw["context"] = self.ssl_context
        try:
            with urllib.request.urlopen(req, **kw) as res:
                status, raw = res.status, res.read(64 << 20)
        except urllib.error.HTTPError as e:
            raw = e.read(64 << 20)
            raise self._refusal(e.code, raw, e.headers) from None
        if not raw or status == 204:
            return status, None
        try:
            return status, json.loads(raw)
        except ValueError as e:
            raise BadAnswerError("decoding the gate's %d answer to %s %s: %s" % (status, method, path, e)) from None

    @staticmethod
    def _refusal(status: int, raw: bytes, headers) -> APIError:
        code = detail = ""
        try:
            j = json.loads(raw)
            if isinstance(j, dict) and j.get("error"):
                code, detail = str(j["error"]), str(j.get("detail") or "")
        except ValueError:
            pass
        if not code:
            try:
                code = http.HTTPStatus(status).phrase
            except ValueError:
                code = "HTTP %d" % status
            detail = raw.decode("utf-8", "replace").strip()[:200]
        server = _http_date(headers.get("Date") if headers else None)
        ra, has = _parse_retry_after(headers.get("Retry-After") if headers else None, server)
        return _api_error(status, code, detail, ra, has)

    def _get(self, path: str) -> Any:
        return self.do("GET", path)[1]

    def _post(self, path: str, body: Any = None) -> Any:
        return self.do("POST", path, body)[1]

    # ---- tasks

    def enqueue(self, task_type: str, params: Any = None, options: Optional[EnqueueOptions] = None,
                **kw: Any) -> Json:
        """Queue a task of ``task_type`` (POST /v1/tasks); ``params`` is sent
        as JSON (the task type's params_schema checks it: 400
        ``invalid_params``). The options are an EnqueueOptions or its fields
        as keywords (``priority=7, idempotency_key="…"``). Returns the
        acknowledgement: ``task_id``, ``status``, ``is_duplicate``,
        ``estimated_runtime_seconds``, ``poll_suggestion_seconds``,
        ``receipt_id``, ``available_at``."""
        if options is not None and kw:
            raise TypeError("give options or keywords, not both")
        if kw:
            options = EnqueueOptions(**kw)
        return self._post("/v1/tasks", _enqueue_body(task_type, params, options))

    def enqueue_batch(self, tasks: Sequence[NewTask]) -> List[BatchEnqueued]:
        """Queue up to MAX_ENQUEUE_BATCH tasks in one call (POST
        /v1/tasks/batch). Each task is judged and answered on its own, in the
        order given: one refused task leaves the others queued. An exception
        is about the call as a whole (the gate unreachable, a gate without
        the route: a NotFoundError); ValueError for an empty or too large
        batch."""
        if not 0 < len(tasks) <= MAX_ENQUEUE_BATCH:
            raise ValueError("asyncgate: a batch holds 1 to %d tasks, not %d" % (MAX_ENQUEUE_BATCH, len(tasks)))
        out = self._post("/v1/tasks/batch", {"tasks": [_enqueue_body(t.task_type, t.params, t.options) for t in tasks]})
        results = (out or {}).get("results") or []
        if len(results) != len(tasks):
            raise BadAnswerError("asyncgate: the gate answered %d tasks with %d results" % (len(tasks), len(results)))
        res = []
        for r in results:
            if r.get("ok") and r.get("task") is not None:
                res.append(BatchEnqueued(task=r["task"]))
            else:
                res.append(BatchEnqueued(error=_api_error(int(r.get("http_status") or 0), r.get("error") or "",
                                                          r.get("detail") or "")))
        return res

    def get_task(self, task_id: str) -> Json:
        """A task (GET /v1/tasks/{id}; the Go client's Status)."""
        return self._get(_path("/v1/tasks", task_id))

    def cancel(self, task_id: str, reason: str = "") -> Json:
        """Cancel a task: a queued (scheduled, waiting) one at once, a leased
        one is marked ``cancel_requested`` (its worker learns it from its
        next heartbeat). Returns the task."""
        return self._post(_path("/v1/tasks", task_id) + "/cancel", {"reason": reason} if reason else None)

    def list_tasks(self, status: Sequence[str] = (), task_types: Sequence[str] = (), recipient: str = "",
                   cursor: str = "", limit: int = 0) -> Tuple[List[Json], str]:
        """A page of the tasks the key may see, oldest first, and the cursor
        of the next page ("" after the last)."""
        out = self._get(_query("/v1/tasks", status=list(status), task_type=list(task_types),
                               recipient_ai=recipient, cursor=cursor, limit=limit))
        return out.get("tasks") or [], out.get("cursor") or ""

    def wait(self, task_id: str, timeout: Optional[float] = None, interval: float = 0.5,
             on_poll: Optional[Callable[[Json], None]] = None, poll_timeout: Optional[float] = None) -> Json:
        """Poll a task every ``interval`` seconds until it finishes
        (succeeded, canceled or dead letter) and return it; past ``timeout``
        seconds (None: no bound) raise WaitTimeoutError carrying the last
        task seen. ``on_poll``, when set, sees the task after every poll (a
        progress bar). ``poll_timeout`` bounds each poll (default: the
        client's timeout), so a gate that stops answering fails the wait
        instead of holding it.

        A poll answered 408, 429 or 5xx with a readable Retry-After (the
        gate's 503 while its database is away, for one) is tried again after
        that long (at most MAX_RETRY_AFTER, plus up to 10% jitter, and at
        least ``interval``), unless the timeout would pass first; any other
        error, and such an answer without a Retry-After, ends the wait."""
        if interval <= 0:
            interval = 0.5
        deadline = None if timeout is None else time.monotonic() + timeout
        last: Optional[Json] = None
        while True:
            started = time.monotonic()
            per = poll_timeout or self.timeout
            if deadline is not None:
                if deadline - started <= 0:
                    raise WaitTimeoutError("task " + task_id, last)
                per = min(per, deadline - started)
            try:
                t = self.do("GET", _path("/v1/tasks", task_id), timeout=per)[1]
            except APIError as e:
                d = _retry_after(e)
                if d is None:
                    raise
                d = max(d, interval)
                if deadline is not None and deadline - time.monotonic() < d:
                    raise  # the wait would end before the gate asks to be tried again
                time.sleep(d)
                continue
            last = t
            if on_poll is not None:
                on_poll(t)
            if terminal(t.get("status", "")):
                return t
            pause = interval - (time.monotonic() - started)
            if deadline is not None and time.monotonic() + max(pause, 0) >= deadline:
                raise WaitTimeoutError("task " + task_id, last)
            if pause > 0:
                time.sleep(pause)

    def result(self, task_id: str) -> Json:
        """A finished task's result, fetched through its channel: ``content``
        (JSON) or ``content_base64``, ``channel``, ``result_pointer``,
        ``checksum_valid``, ``summary``, ``metadata``, ``artifacts``. A 503
        ``busy`` (too many large fetches) is an APIError with
        ``retry_after``: try again after that long."""
        return self._get(_path("/v1/tasks", task_id) + "/result")

    def result_value(self, task_id: str) -> Any:
        """A finished task's result payload, decoded (``decode_result``; the
        Go client's ResultAs). NoContentError for a result stored elsewhere
        (a pointer only)."""
        return decode_result(self.result(task_id))

    def progress(self, task_id: str, limit: int = 0) -> List[Json]:
        """A task's progress reports (``percent``, ``message``, ``at``),
        newest first (limit 0: the gate's default)."""
        return self._get(_query(_path("/v1/tasks", task_id) + "/progress", limit=limit)).get("progress") or []

    def archive(self, task_id: str) -> None:
        """Archive a finished task's result once it has been kept elsewhere;
        the task stays readable."""
        self._post(_path("/v1/tasks", task_id) + "/archive")

    def attempts(self, task_id: str) -> List[Json]:
        """A task's attempts, oldest first: every lease, its worker, times,
        outcome and error; a live lease last (outcome ``running``)."""
        return self._get(_path("/v1/tasks", task_id) + "/attempts").get("attempts") or []

    def timeline(self, task_id: str) -> Json:
        """A task's history as events, oldest first (``events``, each with
        ``event_type``, ``event_time``, ``receipt_id``, …, and
        ``truncated``): its receipts, lease grants, expiries and progress."""
        return self._get(_path("/v1/tasks", task_id) + "/timeline")

    # ---- receipts and obligations

    def open_obligations(self, principal: str = "", role: str = "", cursor: str = "",
                         limit: int = 0) -> Tuple[List[Json], str]:
        """A page of a principal's open obligations (default: the key's) and
        the cursor of the next page. ``role`` is ``obligee`` (owed to it: the
        outcomes of what it queued) or ``obligor`` (owed by it); "": both."""
        out = self._get(_query("/v1/obligations/open", principal=principal, role=role, cursor=cursor, limit=limit))
        return out.get("open_obligations") or [], out.get("cursor") or ""

    def receipts(self, task_id: str, cursor: str = "", limit: int = 0) -> Tuple[List[Json], str]:
        """A page of a task's (or workflow's) receipts in ledger order and the
        cursor of the next page."""
        out = self._get(_query("/v1/receipts", task_id=task_id, cursor=cursor, limit=limit))
        return out.get("receipts") or [], out.get("cursor") or ""

    def get_receipt(self, receipt_id: str) -> Json:
        """A receipt (its fields, ``receipt_id``, ``receipt_type``, ``from``,
        ``to``, ``task_id``, ``parents``, ``body``, …) and the id of the
        receipt that terminated it (``terminated_by``, absent while open)."""
        return self._get(_path("/v1/receipts", receipt_id))

    def receipt_chain(self, receipt_id: str) -> List[Json]:
        """A receipt's chain up through its parents, nearest first: each a
        receipt with ``terminated_by`` and ``depth``."""
        return self._get(_path("/v1/receipts", receipt_id) + "/chain").get("chain") or []

    def check_terminator(self, parent_receipt_id: str) -> Json:
        """Whether a receipt has been terminated: ``has_terminator``,
        ``terminator_receipt_id``, ``is_obligation``."""
        return self._post("/v1/receipts/check-terminator", {"parent_receipt_id": parent_receipt_id})

    # ---- inbox

    def session_bootstrap(self, limit: int = 0) -> Json:
        """Session start: the key's open obligations (``owed_to_you``,
        ``you_owe``) and unread inbox items (``inbox``), marked delivered
        (never read)."""
        return self._get(_query("/v1/session/bootstrap", limit=limit))

    def inbox(self, unread: bool = False, task_id: str = "", recipient: str = "", cursor: str = "",
              limit: int = 0) -> Tuple[List[Json], str]:
        """A page of inbox items, oldest first (``unread``: only those not
        marked read; ``recipient``: another principal's, for admins), and the
        cursor of the next page. Listing marks the caller's own items
        delivered, never read."""
        out = self._get(_query("/v1/inbox", unread=True if unread else None, task_id=task_id,
                               recipient=recipient, cursor=cursor, limit=limit))
        return out.get("items") or [], out.get("cursor") or ""

    def mark_read(self, inbox_ids: Iterable[str]) -> Json:
        """Mark inbox items read (``marked``, and ``already_read``: the ids
        read before). An id not in the caller's inbox is a NotFoundError
        and marks nothing."""
        return self._post("/v1/inbox/mark-read", {"inbox_ids": list(inbox_ids)})

    # ---- workflows

    def submit_workflow(self, name: str, steps: Sequence[Json], final_step: str = "",
                        idempotency_key: str = "") -> Json:
        """Submit a workflow (``step`` builds its steps): ``workflow_id``,
        ``status``, ``is_duplicate``, ``receipt_id`` and ``steps`` (step name
        → task id). The gate checks the whole graph before it queues
        anything: a bad one is a 400 APIError with code ``unknown_step``,
        ``duplicate_step``, ``workflow_cycle``, ``too_many_steps``,
        ``invalid_workflow``, or a step's field as an enqueue's
        (``unknown_task_type``, ``invalid_params``, ``invalid_resource``,
        ``bad_request``; 413 ``too_large``). ``final_step`` names the step
        whose outcome is the workflow's ("": the one step nothing waits
        on)."""
        body: Json = {"name": name, "steps": list(steps)}
        if final_step:
            body["final_step"] = final_step
        if idempotency_key:
            body["idempotency_key"] = idempotency_key
        return self._post("/v1/workflows", body)

    def get_workflow(self, workflow_id: str) -> Json:
        """A workflow with its steps and their tasks' states. Another
        principal's workflow is a NotFoundError, as an unknown id is."""
        return self._get(_path("/v1/workflows", workflow_id))

    def list_workflows(self, status: str = "", cursor: str = "", limit: int = 0) -> Tuple[List[Json], str]:
        """A page of the caller's workflows (an admin's: the tenant's), newest
        first, optionally of one status, and the cursor of the next page."""
        out = self._get(_query("/v1/workflows", status=status, cursor=cursor, limit=limit))
        return out.get("workflows") or [], out.get("cursor") or ""

    def cancel_workflow(self, workflow_id: str, reason: str = "") -> Json:
        """Cancel a workflow: every step not finished is canceled (a leased
        one flagged). One already succeeded or failed is a 409 ``conflict``."""
        return self._post(_path("/v1/workflows", workflow_id) + "/cancel", {"reason": reason} if reason else None)

    def wait_workflow(self, workflow_id: str, timeout: Optional[float] = None, interval: float = 1.0) -> Json:
        """Poll a workflow every ``interval`` seconds until it ends and
        return it; past ``timeout`` raise WaitTimeoutError."""
        if interval <= 0:
            interval = 1.0
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            w = self.get_workflow(workflow_id)
            if w.get("status") not in ("running", "", None):
                return w
            if deadline is not None and time.monotonic() + interval >= deadline:
                raise WaitTimeoutError("workflow " + workflow_id, w)
            time.sleep(interval)

    # ---- schedules

    def create_schedule(self, name: str, template: Json, cron: str = "", timezone: str = "",
                        interval_seconds: int = 0, missed_policy: str = "", missed_cap: int = 0,
                        grace_seconds: Optional[int] = None, paused: bool = False) -> Json:
        """Create a schedule owned by the key's principal: exactly one of
        ``cron`` (five fields or a descriptor such as ``@hourly``, read in
        ``timezone``, default UTC) and ``interval_seconds``; ``template`` is
        the task it enqueues (``schedule_template``). Returns the schedule
        with its ``next_runs``."""
        body: Json = {"name": name, "template": template}
        if cron:
            body["cron"] = cron
        if timezone:
            body["timezone"] = timezone
        if interval_seconds:
            body["interval_seconds"] = interval_seconds
        if missed_policy:
            body["missed_policy"] = missed_policy
        if missed_cap:
            body["missed_cap"] = missed_cap
        if grace_seconds is not None:
            body["grace_seconds"] = grace_seconds
        if paused:
            body["paused"] = True
        return self._post("/v1/schedules", body)

    def get_schedule(self, schedule_id: str, next_runs: int = 0) -> Json:
        """A schedule with its next ``next_runs`` runs (0: 5)."""
        return self._get(_query(_path("/v1/schedules", schedule_id), next_runs=next_runs))

    def schedule_receipts(self, schedule_id: str, cursor: str = "", limit: int = 0) -> Tuple[List[Json], str]:
        """A page of a schedule's own receipts (``schedule.created``,
        ``.updated``, ``.paused``, ``.resumed``, ``.fired`` with the task it
        queued, ``.skipped`` with the error that stopped its template,
        ``.deleted``) in ledger order and the cursor of the next page; a
        deleted schedule's too. The schedule's ``last_skip`` (get_schedule)
        is the last skip in short."""
        out = self._get(_query(_path("/v1/schedules", schedule_id) + "/receipts", cursor=cursor, limit=limit))
        return out.get("receipts") or [], out.get("cursor") or ""

    def list_schedules(self, cursor: str = "", limit: int = 0, next_runs: int = 0) -> Tuple[List[Json], str]:
        """A page of the key's schedules (an admin key: the tenant's) and the
        cursor of the next page."""
        out = self._get(_query("/v1/schedules", cursor=cursor, limit=limit, next_runs=next_runs))
        return out.get("schedules") or [], out.get("cursor") or ""

    _SCHEDULE_FIELDS = ("name", "cron", "timezone", "interval_seconds", "template", "missed_policy",
                        "missed_cap", "grace_seconds")

    def update_schedule(self, schedule_id: str, **changes: Any) -> Json:
        """Change a schedule (PATCH /v1/schedules/{id}): only the fields given
        change (``name``, ``cron``, ``timezone``, ``interval_seconds``,
        ``template``, ``missed_policy``, ``missed_cap``, ``grace_seconds``).
        Giving ``cron`` or ``interval_seconds`` replaces the timing whole;
        ``timezone`` alone moves a cron schedule to another zone; a
        ``template`` replaces the template whole. A new timing runs from its
        first fire after now."""
        unknown = set(changes) - set(self._SCHEDULE_FIELDS)
        if unknown:
            raise TypeError("update_schedule: unknown fields %s" % ", ".join(sorted(unknown)))
        return self.do("PATCH", _path("/v1/schedules", schedule_id), changes)[1]

    def pause_schedule(self, schedule_id: str) -> Json:
        """Stop a schedule's fires until ``resume_schedule``."""
        return self._post(_path("/v1/schedules", schedule_id) + "/pause")

    def resume_schedule(self, schedule_id: str) -> Json:
        """Let a paused schedule fire again from its first fire after now."""
        return self._post(_path("/v1/schedules", schedule_id) + "/resume")

    def delete_schedule(self, schedule_id: str) -> None:
        """Delete a schedule; the tasks it enqueued stay."""
        self.do("DELETE", _path("/v1/schedules", schedule_id))
