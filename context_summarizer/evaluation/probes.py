"""Probe questions: answered by the model from a context, then graded by the model as judge.

Each probe is answered twice: from the compacted context (what a strategy would send next) and
from the full, uncompacted one. The answer request is the context plus ``probe_answer.md`` as a
last user message, with the case's tools and ``tool_choice: "none"`` (so, like a self-summary
request, it is the context the agent would send, plus one message). The judge request is
``probe_judge.md`` alone, with the question, the reference answer and the answer to grade; the
judge replies ``CORRECT`` or ``INCORRECT``. The gap between the two accuracies is what the
compaction cost in answers. A third answer, from the compacted context with the recall tool
offered (``grade_probe_with_recall``: ``probe_answer_recall.md``, which tells the model to look
there, the tool alone, ``tool_choice: "auto"``; each recall call
answered from the messages the compaction replaced, as the proxy would, for at most
``recall_loop.MAX_ROUNDS`` rounds), says how much of that the model gets back by asking.

Model calls go through a ``SummaryClient`` (``upstream.OpenAISummaryClient``: tenacity retries,
never raises). A call that fails after its retries leaves the probe ungraded (``None``) and its
error is returned, so the runner can mark the row for another attempt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.recall_chat import CHAT
from ..core.recall_loop import MAX_ROUNDS
from ..core.recall_tool import answer_call, chat_definition, read_call
from ..core.results import SummarizeCall
from ..core.spans import Span
from ..loaders.prompts import load_prompt_set, render_prompt
from .compaction import SummaryClient
from .dataset import Probe
from .metrics import mean
from .records import ProbeResult

ANSWER_MAX_TOKENS = 512
"""Completion cap of an answer (room for a reasoning model's hidden tokens too)."""
JUDGE_MAX_TOKENS = 256
"""Completion cap of a verdict."""

_VERDICT = re.compile(r"\b(INCORRECT|CORRECT)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Graded:
    """One probe answered from one context, and graded."""

    answer: str | None
    correct: bool | None
    error: str | None = None
    recall_calls: int = 0
    """Recall calls made before the answer (``grade_probe_with_recall``)."""


def answer_request(
    context: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    question: str,
    *,
    model: str,
    version: str,
) -> dict[str, Any]:
    """The request that asks ``model`` to answer ``question`` from ``context``."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            *context,
            {"role": "user", "content": render_prompt("probe_answer", version, question=question)},
        ],
        "max_completion_tokens": ANSWER_MAX_TOKENS,
    }
    if tools:
        body["tools"] = tools
        body["tool_choice"] = "none"
    return body


def judge_request(
    question: str, reference: str, answer: str, *, model: str, version: str
) -> dict[str, Any]:
    """The request that asks ``model`` whether ``answer`` matches ``reference``."""
    prompt = render_prompt(
        "probe_judge", version, question=question, reference=reference, answer=answer
    )
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_completion_tokens": JUDGE_MAX_TOKENS,
    }


def parse_verdict(text: str | None) -> bool | None:
    """``True`` for CORRECT, ``False`` for INCORRECT (the first that appears), else None."""
    match = _VERDICT.search(text or "")
    if match is None:
        return None
    return match[1].upper() == "CORRECT"


def grade_probe(
    client: SummaryClient,
    context: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    probe: Probe,
    *,
    model: str,
    version: str,
) -> Graded:
    """Answer ``probe`` from ``context`` and grade the answer."""
    asked = client(
        SummarizeCall(
            body=answer_request(context, tools, probe.question, model=model, version=version)
        )
    )
    if asked.error is not None:
        return Graded(answer=None, correct=None, error=f"probe answer: {asked.error}")
    answer = (asked.text or "").strip()
    if not answer:
        return Graded(answer="", correct=False)
    judged = client(
        SummarizeCall(
            body=judge_request(probe.question, probe.answer, answer, model=model, version=version)
        )
    )
    if judged.error is not None:
        return Graded(answer=answer, correct=None, error=f"probe judge: {judged.error}")
    return Graded(answer=answer, correct=parse_verdict(judged.text))


def grade_probe_with_recall(
    client: SummaryClient,
    context: Sequence[Mapping[str, Any]],
    spans: Sequence[Span],
    raw: Sequence[Mapping[str, Any]],
    probe: Probe,
    *,
    model: str,
    version: str,
) -> Graded:
    """Answer ``probe`` from ``context`` with the recall tool offered over ``spans`` of ``raw``
    (the messages the compaction replaced), its calls answered until the model answers or the
    rounds run out; then grade the answer."""
    body = answer_request(context, None, probe.question, model=model, version=version)
    asked_with_recall = render_prompt("probe_answer_recall", version, question=probe.question)
    body["messages"][-1] = {"role": "user", "content": asked_with_recall}
    body |= {"tools": [chat_definition("recall", load_prompt_set(version))], "tool_choice": "auto"}
    calls = 0
    for round_ in range(MAX_ROUNDS + 1):
        asked = client(SummarizeCall(body=body))
        if asked.error is not None:
            return Graded(None, None, error=f"probe answer with recall: {asked.error}")
        if not asked.tool_calls or round_ == MAX_ROUNDS:
            break
        results = []
        for call in asked.tool_calls:
            function = call.get("function") or {}
            calls += 1
            found = answer_call(read_call(function.get("arguments")), spans, raw)
            results.append((str(call.get("id")), found.render()))
        message = {"role": "assistant", "content": asked.text, "tool_calls": asked.tool_calls}
        body = CHAT.continued(body, {"choices": [{"message": message}]}, results)
    answer = (asked.text or "").strip()
    if not answer:
        return Graded(answer="", correct=False, recall_calls=calls)
    judged = client(
        SummarizeCall(
            body=judge_request(probe.question, probe.answer, answer, model=model, version=version)
        )
    )
    if judged.error is not None:
        return Graded(answer, None, error=f"probe judge: {judged.error}", recall_calls=calls)
    return Graded(answer, parse_verdict(judged.text), recall_calls=calls)


def grade_probes(
    client: SummaryClient,
    context: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    probes: Sequence[Probe],
    *,
    model: str,
    version: str,
) -> list[Graded]:
    """``grade_probe`` for each probe, in order."""
    return [
        grade_probe(client, context, tools, probe, model=model, version=version) for probe in probes
    ]


def probe_results(
    probes: Sequence[Probe],
    compacted: Sequence[Graded],
    full: Sequence[Graded],
    recalled: Sequence[Graded] | None = None,
) -> list[ProbeResult]:
    """The row's probe records: each probe with its answers and grades (``recalled``: the ones
    with the recall tool, when asked)."""
    with_recall: Sequence[Graded | None] = recalled or [None] * len(probes)
    return [
        ProbeResult(
            question=probe.question,
            reference=probe.answer,
            answer=c.answer,
            correct=c.correct,
            full_answer=f.answer,
            full_correct=f.correct,
            recall_answer=r.answer if r is not None else None,
            recall_correct=r.correct if r is not None else None,
            recall_calls=r.recall_calls if r is not None else 0,
        )
        for probe, c, f, r in zip(probes, compacted, full, with_recall, strict=True)
    ]


def accuracy(grades: Sequence[bool | None]) -> float | None:
    """Share of graded probes that are correct (ungraded ones left out); None if none graded."""
    return mean(1.0 if g else 0.0 for g in grades if g is not None)
