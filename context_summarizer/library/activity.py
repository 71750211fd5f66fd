"""What the library logs of each call it manages, when its store keeps an activity log: the
same ``RequestRecord`` the proxy logs, so ``summarizer sessions --store PATH`` lists the
sessions of a ``wrap()``ped client too."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ..core.activity import RequestRecord
from ..core.results import PrepareResult


def _field(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, Mapping) else getattr(value, name, None)


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def call_record(
    result: PrepareResult, usage: Any, *, model: str, prompt_tokens: int | None
) -> RequestRecord:
    """The record of one call sent for ``result``, answered with ``usage`` (an SDK object or a
    dict), whose ``prompt_tokens`` the caller has read already; its cached tokens as reported,
    when they are a count."""
    report, event = result.report, result.event
    before = report.estimated_tokens
    if result.compacted and event is not None:
        before = event.tokens_before
    return RequestRecord(
        namespace=result.namespace,
        session=result.session,
        at=time.time(),
        model=model,
        tokens_before=before,
        tokens_sent=report.estimated_tokens,
        window=report.context_window,
        reported_tokens=prompt_tokens,
        cached_tokens=_count(_field(_field(usage, "prompt_tokens_details"), "cached_tokens")),
        compacted=result.compacted,
        checkpoint_id=result.checkpoint_id,
        compaction_s=event.latency_s if result.compacted and event is not None else None,
        ahead=bool(result.compacted and event is not None and event.ahead_of_time),
    )
