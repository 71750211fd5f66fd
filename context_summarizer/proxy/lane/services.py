"""``LaneServices``: what the lane uses of the proxy."""

from __future__ import annotations

from dataclasses import dataclass

from ..exchange_services import ExchangeServices
from ..fast_path import FastPath
from ..metrics import ProxyMetrics
from ..settings import Settings
from ..upstream import Upstream
from ..wire_pool import WirePool


@dataclass(frozen=True, slots=True)
class LaneServices:
    """The exchange's services, the fast path's remembered bodies, the lane's upstream
    connections, and the settings its reads and claims are bounded by."""

    exchange: ExchangeServices
    fast_path: FastPath
    wires: WirePool
    settings: Settings

    @property
    def upstream(self) -> Upstream:
        """Where requests go (the exchange's)."""
        return self.exchange.upstream

    @property
    def metrics(self) -> ProxyMetrics:
        """The proxy's metrics (the exchange's)."""
        return self.exchange.metrics
