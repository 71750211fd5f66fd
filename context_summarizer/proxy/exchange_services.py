"""``ExchangeServices``: what a managed request's exchange uses of the proxy, and nothing else.

An exchange (``exchange.Exchange``, its ``chat_context.ChatContext``, the lane's answer) reaches
the upstream, counts in the metrics, reads the compaction count, locates in the lane's threads
and notes its request in the activity log. It sees no store (its route's context manager holds
that), no settings beyond the two it reads, and no lifecycle: ``proxy.Proxy`` builds, opens and
closes each service."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..library.recall_held import HeldRecalls
from .activity_writer import ActivityWriter
from .compaction_tally import CompactionTally
from .locator import Locator
from .metrics import ProxyMetrics
from .upstream import Upstream


@dataclass(frozen=True, slots=True)
class ExchangeServices:
    """The services every managed request's exchange shares."""

    upstream: Upstream
    """Where requests go: routes, the HTTP client, forwarded headers, failures."""
    metrics: ProxyMetrics
    tally: CompactionTally
    """The compactions made so far (a located request's settling, ``fast_path.settle``)."""
    locator: Locator
    """The lane's locating threads."""
    activity: ActivityWriter | None
    """Writes the activity log off the request path (None: the store keeps none)."""
    record: bool
    """Whether each request's conversation is recorded too (``--record``)."""
    keepalive_interval: float
    """Seconds between SSE keepalives while a streamed request waits."""
    held: HeldRecalls = field(default_factory=HeldRecalls)
    """Recall results waiting for their conversation's next request (``recall_held``)."""
    warned_models: set[str] = field(default_factory=set)
    """The models and reasons already warned about as forwarded unmanaged (once each)."""
