"""``CompactionTally``: the compactions this proxy makes, counted in its metrics, passed to the
``on_compaction`` listener, and numbered, so a request located before the latest one knows a
checkpoint may exist now (the lane sends no body early on an older settling, ``lane.bound``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..core.results import CompactionEvent
from .metrics import ProxyMetrics

logger = logging.getLogger("context_summarizer.proxy")


class CompactionTally:
    """Counts and reports each compaction (``record``, the context managers' ``on_compaction``).

    ``local``: only this process writes the store's checkpoints (SQLite, memory), so its count
    is every compaction there is; with a shared store (Redis) another replica's is unseen."""

    def __init__(
        self,
        metrics: ProxyMetrics,
        *,
        local: bool,
        listener: Callable[[CompactionEvent], None] | None = None,
    ) -> None:
        self._metrics = metrics
        self._listener = listener
        self._local = local
        self._count = 0
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        """Compactions made so far (read it before the store, to compare with later)."""
        return self._count

    def none_since(self, count: int) -> bool:
        """Whether no compaction can have been made since ``count`` was read: this process
        writes every checkpoint of its store and has made none since."""
        return self._local and count == self._count

    def record(self, event: CompactionEvent) -> None:
        """Count ``event`` in the metrics and pass it to the listener (whose failure is logged,
        never the request's)."""
        with self._lock:
            self._count += 1
        m = self._metrics
        m.compactions.labels(event.trigger, _outcome(event)).inc()
        for problem in event.problems:
            m.summary_problems.labels(problem).inc()
        if event.applied:  # an abandoned compaction wrote no summary and changed nothing
            m.tokens_before.observe(event.tokens_before)
            m.tokens_after.observe(event.tokens_after)
            m.summary_latency.observe(event.latency_s)
            if event.score is not None:
                m.summary_score.observe(event.score)
            for verdict in event.verdicts:
                m.summaries.labels(verdict).inc()
        if self._listener is not None:
            try:
                self._listener(event)
            except Exception:  # a listener's bug must not fail the request
                logger.exception("on_compaction callback failed")


def _outcome(event: CompactionEvent) -> str:
    """The ``outcome`` label of ``summarizer_compactions_total`` for ``event``."""
    if not event.applied:
        return "abandoned"
    if event.failure:
        return "fallback"
    if event.ledger_only:
        return "ledger"
    return "masked" if event.masked and not event.verdicts else "summary"
