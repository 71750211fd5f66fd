"""Training data from compactions: summary records (and evaluator candidates) as JSON Lines in
the chat fine-tuning formats, for ``summarizer export --format sft|preference|reward``. Pure.

Every line's prompt is a summary request exactly as the engine sent it: the live prefix, then
the instruction, last. For a repaired run (the strict retry's summary was used) the supervised
and preference lines pair the *first* request (the instruction a model sees in production) with
the summary that was used: the answer the model should have given the first time.

- ``sft``: the summary each run used (none for a ``replaced`` run: the mechanical fallback is no
  model's answer). OpenAI style ``{"messages": [...prompt, answer]}``; TRL style ``{"prompt",
  "completion"}``.
- ``preference``: where a run had two answers of different reward (repaired, replaced, or a retry
  that did no better), or a case several candidates: the higher-reward answer chosen, the lower
  rejected, for the first request. OpenAI style ``{"input": {"messages"}, "preferred_output",
  "non_preferred_output"}``; TRL style ``{"prompt", "chosen", "rejected"}``.
- ``reward``: every answer, with its own request: ``{"prompt", "completion", "reward", "label",
  "facts", "cap"}`` (``label``: the online gate would use it, which TRL's KTO reads;
  ``facts`` and ``cap``: what ``SummaryReward`` reads back).

Each line also carries ``tools`` when the request had them and, unless left out, a ``metadata``
object (``source: "summarizer export"``, the format, where it came from, verdict, reward, and
the facts the reward counted) that ``summarizer eval`` reads the file back by.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.facts import ledger_facts
from ..core.redaction import OPAQUE_FIELDS, redact
from ..core.rewards import (
    Reward,
    score_reward,
    split_request,
    summary_source,
)
from ..core.summary_records import SummaryAttempt, SummaryRecord

TrainingFormat = Literal["sft", "preference", "reward"]
Style = Literal["openai", "trl"]
EXPORT_SOURCE = "summarizer export"
"""``metadata.source`` of every exported line (as of the exported evaluation cases)."""


@dataclass(frozen=True)
class Answer:
    """One summary written for one request, and its reward."""

    request: Mapping[str, Any]
    summary: str
    reward: Reward
    attempt: str
    """``first``/``strict`` for a record's attempt, ``candidate-<i>`` for a candidate."""


@dataclass(frozen=True)
class Origin:
    """Where a group of answers to one request came from (goes in ``metadata``)."""

    kind: Literal["session", "eval", "candidates"]
    id: str
    """A session's ``namespace-label/session``, or an evaluator row's ``case/strategy/repeat``."""
    details: Mapping[str, Any] = field(default_factory=dict)
    facts: list[dict[str, Any]] = field(default_factory=list)
    cap: int = 0


@dataclass
class Tally:
    """What an export wrote and what it left out, and why."""

    written: int = 0
    groups: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        """Count one group or answer left out for ``reason``."""
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


def attempt_answer(record: SummaryRecord, attempt: SummaryAttempt) -> Answer:
    """``attempt`` of ``record`` with its reward: the record's facts and cap, and the answer's
    tokens as the engine counted them."""
    prefix, instruction = split_request(attempt.request.get("messages") or [])
    reward = score_reward(
        attempt.summary,
        facts=ledger_facts(record.facts),
        source=summary_source(prefix, instruction or ""),
        counter=None,
        cap=record.cap,
        finish_reason=attempt.finish_reason,
        tokens=attempt.tokens,
    )
    return Answer(attempt.request, attempt.summary or "", reward, attempt.attempt)


def record_origin(label: str, record: SummaryRecord, kind: Literal["session", "eval"]) -> Origin:
    """The ``Origin`` of a stored or evaluated record."""
    details = origin_details(
        model=record.model,
        checkpoint_id=record.checkpoint_id,
        run=[record.start, record.end],
        verdict=record.verdict,
    )
    return Origin(kind, label, details, list(record.facts), record.cap)


def origin_details(
    *,
    model: str | None,
    checkpoint_id: str | None = None,
    run: list[int] | None = None,
    verdict: str | None = None,
    temperature: float | None = None,
) -> dict[str, Any]:
    """The ``metadata`` fields of where a line came from, every one present on every line (None
    where it does not apply), so a file mixing sessions, evaluator rows and candidates loads
    as one table."""
    return {
        "model": model,
        "checkpoint_id": checkpoint_id,
        "run": run,
        "verdict": verdict,
        "temperature": temperature,
    }


def _assistant(text: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": text}]


def _prompt(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(m) for m in request.get("messages") or []]


def _metadata(fmt: TrainingFormat, origin: Origin, extra: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "source": EXPORT_SOURCE,
        "format": fmt,
        "from": origin.kind,
        "id": origin.id,
        **origin.details,
        **extra,
        "facts": origin.facts,
        "cap": origin.cap,
    }


def _scored(answer: Answer) -> dict[str, Any]:
    """An answer's attempt, reward and the reward's parts, for ``metadata``."""
    return {
        "attempt": answer.attempt,
        "reward": answer.reward.reward,
        "parts": answer.reward.parts(),
    }


def _finish(
    line: dict[str, Any], request: Mapping[str, Any], metadata: dict[str, Any] | None
) -> dict[str, Any]:
    tools = request.get("tools")
    if tools:
        line["tools"] = list(tools)
    if metadata is not None:
        line["metadata"] = metadata
    # Credential-shaped strings never leave in an export, whatever the source redacted.
    redacted: dict[str, Any] = redact(line, (), skip=OPAQUE_FIELDS)
    return redacted


def sft_line(
    origin: Origin, prompt_request: Mapping[str, Any], used: Answer, style: Style, metadata: bool
) -> dict[str, Any]:
    """One supervised example: ``prompt_request``'s messages answered by ``used``."""
    prompt = _prompt(prompt_request)
    line: dict[str, Any] = (
        {"messages": [*prompt, *_assistant(used.summary)]}
        if style == "openai"
        else {"prompt": prompt, "completion": _assistant(used.summary)}
    )
    meta = _metadata("sft", origin, _scored(used))
    return _finish(line, prompt_request, meta if metadata else None)


def preference_line(
    origin: Origin,
    prompt_request: Mapping[str, Any],
    chosen: Answer,
    rejected: Answer,
    style: Style,
    metadata: bool,
) -> dict[str, Any]:
    """One preference pair for ``prompt_request``: ``chosen`` over ``rejected``."""
    prompt = _prompt(prompt_request)
    line: dict[str, Any] = (
        {
            "input": {"messages": prompt},
            "preferred_output": _assistant(chosen.summary),
            "non_preferred_output": _assistant(rejected.summary),
        }
        if style == "openai"
        else {
            "prompt": prompt,
            "chosen": _assistant(chosen.summary),
            "rejected": _assistant(rejected.summary),
        }
    )
    if style == "openai" and prompt_request.get("tools"):
        line["input"]["tools"] = list(prompt_request["tools"])
        prompt_request = {}  # the tools go in ``input``, not beside it
    extra = {"chosen": _scored(chosen), "rejected": _scored(rejected)}
    return _finish(
        line, prompt_request, _metadata("preference", origin, extra) if metadata else None
    )


def reward_line(origin: Origin, answer: Answer, metadata: bool) -> dict[str, Any]:
    """One scored answer, with its own request as the prompt."""
    line: dict[str, Any] = {
        "prompt": _prompt(answer.request),
        "completion": _assistant(answer.summary),
        "reward": answer.reward.reward,
        "label": answer.reward.usable,
        "facts": origin.facts,
        "cap": origin.cap,
    }
    extra = _scored(answer)
    return _finish(line, answer.request, _metadata("reward", origin, extra) if metadata else None)


def group_lines(
    origin: Origin,
    answers: Sequence[Answer],
    used: Answer | None,
    fmt: TrainingFormat,
    *,
    style: Style,
    metadata: bool,
    min_reward: float,
    tally: Tally,
) -> Iterable[dict[str, Any]]:
    """The lines of one group of answers to one request (a record's attempts, or a case's
    candidates; ``used``: the answer that stood, when one did). The first answer's request is
    the prompt of the supervised and preference lines."""
    tally.groups += 1
    texts = [a for a in answers if a.summary]
    if not texts:
        tally.skip("no answer had text")
        return
    first = answers[0].request
    if fmt == "reward":
        for answer in texts:
            tally.written += 1
            yield reward_line(origin, answer, metadata)
    elif fmt == "sft":
        if used is None:
            tally.skip("no summary was used (the fallback stood)")
        elif used.reward.reward < min_reward or not used.reward.usable:
            tally.skip("below --min-reward")
        else:
            tally.written += 1
            yield sft_line(origin, first, used, style, metadata)
    else:
        ranked = sorted(texts, key=lambda a: a.reward.reward, reverse=True)
        best, worst = ranked[0], ranked[-1]
        if len(ranked) < 2:
            tally.skip("one answer only")
        elif best.reward.reward <= worst.reward.reward:
            tally.skip("answers of equal reward")
        elif best.reward.reward < min_reward:
            tally.skip("below --min-reward")
        else:
            tally.written += 1
            yield preference_line(origin, first, best, worst, style, metadata)
