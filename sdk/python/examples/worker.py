"""A complete AsyncGate worker: resizes "images" (it only pretends to).

    pip install ./sdk/python            # or the wheel make python-wheel built
    export ASYNCGATE_KEY=agw_…          # a worker key; ASYNCGATE_URL names the gate
    python3 worker.py

SIGINT or SIGTERM stops it: at once when it is waiting for work, after the
task in hand otherwise (at most the runner's shutdown_timeout).
"""

import logging
import os

from asyncgate_worker import Client, FatalError, Runner

logging.basicConfig(level=logging.INFO)
runner = Runner(Client(os.environ.get("ASYNCGATE_URL", "http://127.0.0.1:8080"), os.environ["ASYNCGATE_KEY"]),
                worker_id=os.environ.get("ASYNCGATE_WORKER_ID", ""), concurrency=4)


@runner.task("image.resize")
def resize(task):
    url, width = task.params.get("url"), task.params.get("width", 100)
    if not url:
        raise FatalError("params.url is missing")          # dead letter, no retry
    for step in range(1, 5):
        task.check()   # raises TaskStopped: lease lost, task canceled or shutting down
        # … do a quarter of the work …
        task.progress(25 * step, "step %d of 4" % step)
    return {"url": url, "width": width, "bytes": 12345}     # inline JSON result


if __name__ == "__main__":
    runner.run_forever()
