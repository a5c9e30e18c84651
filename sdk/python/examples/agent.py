"""An AsyncGate agent: queues an "image.resize" task, waits for a worker
(examples/worker.py) to finish it, prints the result and marks the outcome
read in its inbox.

    pip install ./sdk/python            # or the wheel make python-wheel built
    export ASYNCGATE_KEY=agw_…          # an agent key; ASYNCGATE_URL names the gate
    python3 agent.py https://example.com/cat.png 640
"""

import os
import sys

from asyncgate_client import APIError, Client

gate = Client(os.environ.get("ASYNCGATE_URL", "http://127.0.0.1:8080"), os.environ["ASYNCGATE_KEY"])


def main() -> int:
    url = sys.argv[1] if len(sys.argv) > 1 else "https://example.com/cat.png"
    width = int(sys.argv[2]) if len(sys.argv) > 2 else 640
    try:
        # The same idempotency key again answers the same task (is_duplicate),
        # so running this twice resizes once.
        ack = gate.enqueue("image.resize", {"url": url, "width": width},
                           idempotency_key="resize:%s:%d" % (url, width), summary="thumbnail for " + url)
    except APIError as e:  # e.code is the gate's machine code, e.g. unknown_task_type
        print("refused: %s (%s)" % (e.code, e.detail), file=sys.stderr)
        return 1
    print("queued", ack["task_id"] + (" (queued before: same idempotency key)" if ack["is_duplicate"] else ""))

    def show(task):
        if task.get("progress_percent") is not None:
            print("  %s %3.0f%% %s" % (task["status"], task["progress_percent"], task.get("progress_message", "")))

    task = gate.wait(ack["task_id"], timeout=300, on_poll=show)
    if task["status"] != "succeeded":
        print("task ended %s: %s" % (task["status"], task.get("error_message", "")), file=sys.stderr)
        return 1
    print("result:", gate.result_value(task["task_id"]))

    # The outcome is also an item of this agent's inbox: mark it read.
    items, _ = gate.inbox(unread=True, task_id=task["task_id"])
    if items:
        gate.mark_read(i["inbox_id"] for i in items)
    return 0


if __name__ == "__main__":
    sys.exit(main())
