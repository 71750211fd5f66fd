"""The test upstream in its own process, so its work never shares a GIL with the load generator.

    python -m benchmarks.upstream --port 8900

Answers every chat completion, response and message with a fixed one-word reply and no delay,
keeping no request log.
"""

from __future__ import annotations

import argparse
import signal
import threading

from context_summarizer.testing import Reply, TestUpstream


def main() -> None:
    """Serve until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    upstream = TestUpstream(responder=lambda body: Reply(content="ok"), port=args.port, max_log=0)
    with upstream:
        stop.wait()


if __name__ == "__main__":
    main()
