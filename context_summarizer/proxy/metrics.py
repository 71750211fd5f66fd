"""The proxy's Prometheus metrics, in a registry of their own (one per app, none global).

Labels are bounded: route names and HTTP statuses, never models, sessions or credentials.
"""

from __future__ import annotations

from typing import Any, Literal, Self

import prometheus_client
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics import MetricWrapperBase

from .tokens_saved import SavedTokens

_TOKEN_BUCKETS = (1e3, 2e3, 4e3, 8e3, 16e3, 32e3, 64e3, 128e3, 256e3, 512e3, 1e6, 2e6)
_OVERHEAD_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
_SUMMARY_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)
_SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class _KeptChildren(MetricWrapperBase):
    """A labelled metric whose children are kept by their label values: the client library's
    ``labels`` checks and locks on every call, and the proxy asks for the same few children on
    every request (its labels are bounded, and no child is ever removed)."""

    def labels(self, *labelvalues: Any, **labelkwargs: Any) -> Self:
        """The child for ``labelvalues`` (given by position; by name, as the library does)."""
        if labelkwargs:
            return super().labels(*labelvalues, **labelkwargs)
        kept: dict[tuple[Any, ...], Self] = self.__dict__.setdefault("_kept", {})
        child = kept.get(labelvalues)
        if child is None:
            child = kept[labelvalues] = super().labels(*labelvalues)
        return child


class Counter(_KeptChildren, prometheus_client.Counter):
    """``prometheus_client.Counter``, its children kept."""


class Histogram(_KeptChildren, prometheus_client.Histogram):
    """``prometheus_client.Histogram``, its children kept."""


Call = Literal["agent", "summary"]
"""Whose upstream call a figure is: a client's own request, or one of the proxy's summary calls."""


class UpstreamErrors:
    """``summarizer_upstream_errors_total``: ``labels(status)`` counts an agent call's failure,
    ``labels(status, "summary")`` a summary call's."""

    def __init__(self, counter: Counter) -> None:
        self.counter = counter

    def labels(self, status: str, call: Call = "agent") -> Counter:
        """The counter child for ``status`` (bounded: statuses and a few names) and ``call``."""
        return self.counter.labels(status, call)


class TokenCounts:
    """The token counters: the usage providers reported (``add``), by route and call, and the
    prompt tokens compaction kept from being sent (``saved``), by route."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.savings = SavedTokens()
        """The figures ``saved`` counts are computed with (a memo per checkpoint)."""
        self._children: dict[tuple[str, str], tuple[Counter, ...]] = {}
        labels = ["route", "call"]
        calls = (
            "by route (the front door: chat, responses, messages, gemini) and call ('agent': "
            "the clients' requests, every upstream round of one included; 'summary': the "
            "proxy's summary calls)"
        )
        share = (
            "Cache share: rate(summarizer_cached_prompt_tokens_total[5m]) / "
            "rate(summarizer_prompt_tokens_total[5m])."
        )
        self.prompt = Counter(
            "summarizer_prompt_tokens",
            f"Prompt (input) tokens the provider reported, {calls}: the whole prompt, its "
            "cached part included (chat prompt_tokens, Responses input_tokens, Messages "
            "input_tokens + cache_read_input_tokens + cache_creation_input_tokens, Gemini "
            f"promptTokenCount). {share}",
            labels,
            registry=registry,
        )
        self.cached = Counter(
            "summarizer_cached_prompt_tokens",
            "Of summarizer_prompt_tokens_total, the tokens the provider reported read from its "
            "prompt cache (chat prompt_tokens_details.cached_tokens, Responses "
            "input_tokens_details.cached_tokens, Messages cache_read_input_tokens, Gemini "
            f"cachedContentTokenCount), {calls}. {share}",
            labels,
            registry=registry,
        )
        self.completion = Counter(
            "summarizer_completion_tokens",
            f"Completion (output) tokens the provider reported, {calls}: chat "
            "completion_tokens, Responses output_tokens, Messages output_tokens (a stream's "
            "final count, from message_delta), Gemini candidatesTokenCount (thoughts not "
            "included).",
            labels,
            registry=registry,
        )
        self.saved_tokens = Counter(
            "summarizer_tokens_saved",
            "Prompt tokens the clients' requests did not send because of compaction, by route: "
            "for each request answered 2xx, the conversation as the client sent it (messages "
            "and tools) minus what was sent instead (the checkpoint's rewrite), both estimated "
            "and calibrated as x-summarizer-prompt-tokens is (0 for a request no compaction "
            "applies to). Every request on a compacted conversation counts its saving again; "
            "/ui shows each session's total (the activity log's tokens_saved).",
            ["route"],
            registry=registry,
        )

    def add(
        self,
        route: str,
        call: Call,
        prompt: int | None,
        cached: int | None,
        completion: int | None,
    ) -> None:
        """Count one upstream answer's reported usage (a figure it did not report, None, is
        not counted)."""
        children = self._children.get((route, call))
        if children is None:  # the three children at once: this runs on every answer
            found = (c.labels(route, call) for c in (self.prompt, self.cached, self.completion))
            children = self._children[(route, call)] = tuple(found)
        for child, tokens in zip(children, (prompt, cached, completion), strict=True):
            if tokens is not None:
                child.inc(tokens)

    def saved(self, route: str, tokens: int) -> None:
        """Count what compaction kept one answered request from sending (0 counts too: the
        series exists from a route's first request)."""
        self.saved_tokens.labels(route).inc(tokens)


class ProxyMetrics:
    """Counters and histograms of one proxy app."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "summarizer_requests",
            "Requests handled, by route and response status.",
            ["route", "status"],
            registry=r,
        )
        self.compactions = Counter(
            "summarizer_compactions",
            "Compactions, by trigger and outcome (summary, fallback, masked: the hybrid or "
            "masking policy's masking was enough and no summary was asked for, ledger: the "
            "masking or ledger-only policy replaced old turns by their fact ledger with no model "
            "call, or abandoned: every summary failed while the request still fit, so it went "
            "out unchanged).",
            ["trigger", "outcome"],
            registry=r,
        )
        self.tokens_before = Histogram(
            "summarizer_compaction_tokens_before",
            "Estimated prompt tokens of a request before its compaction.",
            buckets=_TOKEN_BUCKETS,
            registry=r,
        )
        self.tokens_after = Histogram(
            "summarizer_compaction_tokens_after",
            "Estimated prompt tokens of a request after its compaction.",
            buckets=_TOKEN_BUCKETS,
            registry=r,
        )
        self.summary_latency = Histogram(
            "summarizer_summary_latency_seconds",
            "Wall time of a compaction, summary calls included.",
            buckets=_SUMMARY_BUCKETS,
            registry=r,
        )
        self.summary_score = Histogram(
            "summarizer_summary_score",
            "Fact score of each accepted summary (share of ledger facts it mentions).",
            buckets=_SCORE_BUCKETS,
            registry=r,
        )
        self.summaries = Counter(
            "summarizer_summaries",
            "Summaries written, by what the online check made of them: 'accepted' (the model's "
            "first answer), 'repaired' (its strict retry) or 'replaced' (the mechanical "
            "fallback).",
            ["verdict"],
            registry=r,
        )
        self.summary_problems = Counter(
            "summarizer_summary_problems",
            "Model answers the online check rejected, by problem (echo, cut_off, invented, ...).",
            ["problem"],
            registry=r,
        )
        self.upstream_errors = UpstreamErrors(
            Counter(
                "summarizer_upstream_errors",
                "Upstream failures, by HTTP status ('unreachable' and 'timeout' for no response, "
                "'stream_interrupted' for an answer cut short, 'invalid_response' for one that is "
                "not a chat completion) and by call ('agent': the client's own request, "
                "'summary': each failed attempt of a summary call).",
                ["status", "call"],
                registry=r,
            )
        )
        self.unmanaged = Counter(
            "summarizer_unmanaged_requests",
            "Conversation requests forwarded without context management, by reason (the "
            "error that stopped it, e.g. an unknown model's window; previous_response_id, "
            "conversation or item_reference for a Responses history the provider keeps).",
            ["reason"],
            registry=r,
        )
        self.upstream_counts = Counter(
            "summarizer_upstream_token_counts",
            "Messages requests whose estimate was near the trigger and was checked against "
            "the upstream's /messages/count_tokens (and calibrated by it).",
            registry=r,
        )
        self.ahead = Counter(
            "summarizer_ahead_compactions",
            "Compactions drafted ahead of time (--prepare-ratio), by what became of them: "
            "'started', 'adopted' (a request over the trigger used it), 'deferred' (one that "
            "still fit went out as it was while the draft was written), 'waited' (one that did "
            "not fit waited for it), 'stale' (its conversation was compacted another way: "
            "dropped), 'evicted' (dropped unused by the bounds: 4 per session, 256 in all), "
            "'failed' (its summaries failed, or it found nothing to compact), 'busy' (not "
            "started: too many under way).",
            ["outcome"],
            registry=r,
        )
        self.fast_path = Counter(
            "summarizer_fast_path",
            "Chat requests by how the fast path took them: same or appended (built from the "
            "conversation's previous body, only new messages parsed), no_match or unproven "
            "(parsed whole), not_learned (parsed whole and not remembered).",
            ["outcome"],
            registry=r,
        )
        self.lane = Counter(
            "summarizer_lane_requests",
            "Chat requests the lane claimed (streamed upstream as they arrived, see "
            "context_summarizer.proxy.lane), by what became of them: 'taken' (answered on the "
            "lane), "
            "'handed_over' (given to the full path: no remembered body to extend, bytes that "
            "differ, a body the fast path could not prove, a compaction due, a slow client), "
            "'sent_over_bound' (sent before it was located, on a bound its count then "
            "contradicted); and, counted apart, 'sent_early' (its last bytes sent before it was "
            "located, which happened while the upstream worked).",
            ["outcome"],
            registry=r,
        )
        self.recall_calls = Counter(
            "summarizer_recall_calls",
            "Recall tool calls the proxy answered, by API and by what became of the answer: "
            "'asked_again' (the model called recall alone and was asked again with the result) "
            "or 'held' (it called the agent's tools too: the result waits for the next request).",
            ["api", "outcome"],
            registry=r,
        )
        self.recall_chars = Counter(
            "summarizer_recall_chars",
            "Characters of exact raw text the recall tool returned, by API.",
            ["api"],
            registry=r,
        )
        self.recall_rounds = Counter(
            "summarizer_recall_rounds",
            "Times the proxy asked the model again after answering its recall calls, by API.",
            ["api"],
            registry=r,
        )
        self.activity_dropped = Counter(
            "summarizer_activity_dropped",
            "Request records not written to the activity log because its queue was full.",
            registry=r,
        )
        self.overhead = Histogram(
            "summarizer_proxy_overhead_seconds",
            "Time the proxy adds to a chat request, upstream time and compactions excluded.",
            ["stream"],
            buckets=_OVERHEAD_BUCKETS,
            registry=r,
        )
        self.tokens = TokenCounts(r)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
