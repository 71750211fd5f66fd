"""The real-model section's inputs and its clock: real trajectories cut to what a small window
holds, and a summary client that makes each call with the server's cache as live use leaves it.

A mini-swe-agent run is 10-80k tokens; a 0.5B model on two cores serves a few thousand. Each
run is cut at the last observation that keeps its conversation within ``max_tokens`` (the agent
is about to be called there, as at any compaction), and keeps only the gold facts that this
part of the run already states: a fact from the final patch the agent has not written yet is no
fact a summary could keep.

``LiveCache`` wraps the evaluator's summary client. Before each first summary request that
extends the conversation (self-summary's, with or without the ledger) it sends the agent's own
request (the cut conversation, one token of answer), so llama.cpp's KV cache holds what it holds
in production when compaction starts: the conversation just sent. The first such call of each
case is made once more before that, after an unrelated request has flushed the cache: the same
request, cold. Both are timed whole (prefill and decode). Other calls meet the cache as the
previous call left it, as in production: a strict retry extends the conversation its first
attempt just sent; hybrid's masked conversation shares its start with the one the cache holds;
from-scratch's request starts with its own system prompt, which no cache holds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2

from context_summarizer.core.results import SummarizeCall, SummaryOutcome
from context_summarizer.core.tokens import TokenCounter
from context_summarizer.evaluation.compaction import SummaryClient
from context_summarizer.evaluation.converters.mini_swe_agent import convert_mini_swe_agent
from context_summarizer.evaluation.dataset import Case
from context_summarizer.evaluation.metrics import context_text, fact_kept

FLUSH = {"messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 1}
"""A request that shares no prefix with any case: after it, llama.cpp's cache holds nothing
of the conversation."""


def load_runs(folder: Path) -> list[Case]:
    """Every ``*.traj.json`` in ``folder`` as a case, in name order."""
    return [
        convert_mini_swe_agent(json.loads(path.read_text(encoding="utf-8")), source=path.name)
        for path in sorted(folder.glob("*.traj.json"))
    ]


def cut_case(case: Case, max_tokens: int, counter: TokenCounter) -> Case | None:
    """``case`` up to its last user turn (past the task) within ``max_tokens``, with the gold
    facts that part states and no probes; None when not even the task and one exchange fit."""
    total = 0
    end = 0
    for index, message in enumerate(case.messages):
        total += counter.count_message(message)
        if total > max_tokens:
            break
        if message.get("role") == "user" and index >= 3:
            end = index + 1
    if end == 0:
        return None
    messages = case.messages[:end]
    text = context_text(messages)
    facts = [fact for fact in case.facts if fact_kept(text, fact)]
    metadata = {**case.metadata, "cut_messages": f"{end} of {len(case.messages)}"}
    return case.model_copy(
        update={"messages": messages, "facts": facts, "probes": [], "metadata": metadata}
    )


def cut_cases(cases: Iterable[Case], max_tokens: int, counter: TokenCounter) -> list[Case]:
    """Each case cut to ``max_tokens`` (see ``cut_case``), the ones that cannot be left out."""
    return [cut for case in cases if (cut := cut_case(case, max_tokens, counter)) is not None]


@dataclass
class CacheTiming:
    """One case's self-summary call, made cold and then warm (seconds, output tokens)."""

    case_id: str
    cold_s: float
    warm_s: float
    cold_output_tokens: int | None
    warm_output_tokens: int | None


class LiveCache:
    """A summary client whose calls meet the server's cache as production leaves it (see the
    module docstring); ``case`` must be set to the case being evaluated."""

    def __init__(
        self, inner: SummaryClient, base_url: str, model: str, *, cold: bool = True
    ) -> None:
        self.inner = inner
        self.cold = cold
        """Whether to time each case's first self-summary call cold too (a flushed cache)."""
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.case: Case | None = None
        self.timings: dict[str, CacheTiming] = {}
        self.http = httpx2.Client(timeout=600)

    def close(self) -> None:
        """Close the HTTP client."""
        self.http.close()

    def _send(self, body: Mapping[str, Any]) -> None:
        self.http.post(self.url, json={"model": self.model, **body}).raise_for_status()

    def _agent_request(self, case: Case) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": case.messages, "max_tokens": 1}
        if case.tools:
            body["tools"] = case.tools
        return body

    def _is_self_summary(self, call: SummarizeCall, case: Case) -> bool:
        """The live conversation (a prefix of the case) plus one instruction, first attempt."""
        sent: Sequence[Any] = call.body.get("messages", [])
        return (
            call.attempt == "first"
            and 1 < len(sent) <= len(case.messages)
            and list(sent[:-1]) == case.messages[: len(sent) - 1]
        )

    def __call__(self, call: SummarizeCall) -> SummaryOutcome:
        case = self.case
        if case is None:
            raise RuntimeError("LiveCache.case is not set")
        extends = self._is_self_summary(call, case)
        cold: tuple[float, SummaryOutcome] | None = None
        if self.cold and extends and case.id not in self.timings:
            self._send(FLUSH)
            cold = self._timed(call)
        if extends:
            self._send(self._agent_request(case))
        warm_s, outcome = self._timed(call)
        if cold is not None:
            self.timings[case.id] = CacheTiming(
                case_id=case.id,
                cold_s=round(cold[0], 3),
                warm_s=round(warm_s, 3),
                cold_output_tokens=cold[1].completion_tokens,
                warm_output_tokens=outcome.completion_tokens,
            )
        return outcome

    def _timed(self, call: SummarizeCall) -> tuple[float, SummaryOutcome]:
        started = time.perf_counter()
        outcome = self.inner(call)
        return time.perf_counter() - started, outcome
