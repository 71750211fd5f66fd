"""The time one request spends in the proxy itself, outside upstream calls and compactions
(``summarizer_proxy_overhead_seconds``)."""

from __future__ import annotations

import time

from .metrics import ProxyMetrics


class Overhead:
    """Time spent in the proxy for one request, outside upstream calls and compactions."""

    def __init__(self, metrics: ProxyMetrics, stream: bool) -> None:
        self.metrics = metrics
        self.stream = stream
        self.seconds = 0.0
        self._mark = time.perf_counter()

    def pause(self) -> None:
        """Stop counting (an upstream call or a compaction begins)."""
        self.seconds += time.perf_counter() - self._mark

    def resume(self) -> None:
        """Count again."""
        self._mark = time.perf_counter()

    def finish(self) -> None:
        """Stop, and record the total in ``summarizer_proxy_overhead_seconds``."""
        self.pause()
        label = "true" if self.stream else "false"
        self.metrics.overhead.labels(label).observe(self.seconds)
