"""Writing one summary for one run of a compaction: the request, the checks, the one retry.

Pure: the model call is *yielded* as a ``SummarizeCall`` and its ``SummaryOutcome`` received
back, like everything the engine asks of the outside world. The result is a ``Slot`` ready to go
into a checkpoint: the summary message (framing, summary, fact ledger), its score, or the
mechanical fallback when the model's answer cannot be used.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .checkpoints import Slot
from .config import CompactionConfig
from .facts import Fact, extract_facts, merge_ledger, render_ledger, score_summary
from .messages import INSTRUCTION_ROLES, Message, message_text
from .planner import ViewItem, summary_request_end
from .prompt_set import PromptSet
from .results import SummarizeCall, SummaryOutcome
from .summary_request import (
    build_summary_request,
    cut_at_sentence,
    strict_instruction,
    summary_message,
    summary_problem,
)
from .tokens import TokenCounter

logger = logging.getLogger("summarizer")

FRAME_TOKENS = 120
"""Allowance for the summary message's framing text and overhead."""
ANCHOR_CHARS = 200
"""How much of the kept message before a later run the summary instruction quotes."""


@dataclass(frozen=True)
class RunRequest:
    """Everything needed to summarize one run of the view."""

    view: Sequence[ViewItem]
    raw: Sequence[Message]
    run: range
    compacted: tuple[Sequence[ViewItem], range] | None
    """The view with the earlier runs already replaced by their new summaries, and the run's
    place in it: the summary request's prefix when the live one does not fit the window (the
    provider cannot have cached a prefix over its window anyway)."""
    previous_facts: list[Fact]
    """Facts of the earlier summaries this run folds in."""
    model: str
    tools: list[Mapping[str, Any]] | None
    fixed_tokens: int
    window_tokens: int | None
    """The model's window, or None when it is known to be smaller than configured."""
    ratio: float
    """The calibration ratio: provider tokens per counted token."""
    summary_cap: int
    ledger_cap: int
    cap_key: str
    session: str
    prompts: PromptSet


@dataclass(frozen=True)
class RunSummary:
    """What summarizing one run produced."""

    slot: Slot
    outcome: SummaryOutcome | None
    """The model's last answer (None when no call was made)."""
    facts: list[Fact]


def anchor_of(view: Sequence[ViewItem], run: range, first_user: int | None) -> str | None:
    """The text a later run's instruction quotes (the kept message right before it), or None
    when everything before the run is system instructions and the task: the plain instruction
    applies then."""
    plain = all(
        item.raw_index is not None
        and (item.message.get("role") in INSTRUCTION_ROLES or item.raw_index == first_user)
        for item in view[: run.start]
    )
    if plain:
        return None
    text = " ".join(message_text(view[run.start - 1].message).split())
    if len(text) > ANCHOR_CHARS:
        text = text[: ANCHOR_CHARS - 1] + "…"
    return text or f"(a {view[run.start - 1].message.get('role', 'message')} message)"


def summarize_run(
    request: RunRequest,
    *,
    config: CompactionConfig,
    counter: TokenCounter,
    anchor: str | None,
) -> Generator[SummarizeCall, SummaryOutcome, RunSummary]:
    """Ask the model for the run's summary (and once more, stricter, if it is unusable)."""
    view, run = request.view, request.run
    raw_span = [
        request.raw[item.raw_index]
        for item in view[run.start : run.stop]
        if item.raw_index is not None
    ]
    facts = merge_ledger(
        request.previous_facts,
        extract_facts(raw_span),
        max_tokens=request.ledger_cap,
        count_tokens=counter.count_text,
    )
    prompts = request.prompts
    instruction = (
        prompts.self_summary if anchor is None else prompts.self_summary_since.format(anchor=anchor)
    )
    # Room for the summary request's messages, in counted tokens, with a 2% margin.
    room = 0
    if request.window_tokens is not None:
        spare = request.window_tokens - request.summary_cap - counter.count_text(instruction) - 64
        room = max(1, int(spare / (request.ratio * 1.02)))
    end = summary_request_end(view, run, fixed_tokens=request.fixed_tokens, room_tokens=room)
    source = view
    if end < run.stop and request.compacted is not None:
        view_c, run_c = request.compacted
        end_c = summary_request_end(
            view_c, run_c, fixed_tokens=request.fixed_tokens, room_tokens=room
        )
        if end_c - run_c.start > end - run.start:
            source, run, end = view_c, run_c, end_c
    text: str | None = None
    score: float | None = None
    failure: str | None = None
    outcome: SummaryOutcome | None = None
    if end <= run.start:
        failure = "the turns to summarize do not fit the window"
    else:
        if end < run.stop:
            logger.warning(
                "session %s: the turns to summarize do not fit the window; the summary covers "
                "%d of their %d messages, the fact ledger the rest",
                request.session,
                end - run.start,
                len(run),
            )
        text, score, failure, outcome = yield from _ask(
            request,
            [item.message for item in source[:end]],
            instruction,
            facts,
            anchor,
            config,
            counter,
        )
    if text is None:
        text_used = prompts.fallback_summary.format(
            reason=failure,
            message_count=len(raw_span),
            original_tokens=sum(view[i].tokens for i in request.run),
        )
        score = None
    else:
        text_used = text
    message = summary_message(text_used, render_ledger(facts), prompts.summary_frame)
    first, last = view[request.run.start], view[request.run.stop - 1]
    start, end_raw = first.raw_range[0], last.raw_range[1]
    slot = Slot(
        start=start,
        end=end_raw,
        message=message,
        summary=text_used,
        ledger=[f.model_dump() for f in facts],
        score=score,
        failure=failure if text is None else None,
    )
    return RunSummary(slot=slot, outcome=outcome, facts=facts)


def _ask(
    request: RunRequest,
    prefix: list[Message],
    instruction: str,
    facts: Sequence[Fact],
    anchor: str | None,
    config: CompactionConfig,
    counter: TokenCounter,
) -> Generator[
    SummarizeCall, SummaryOutcome, tuple[str | None, float | None, str | None, SummaryOutcome]
]:
    """The model's summary, its score and why it failed (text None), after at most one retry."""
    cap = request.summary_cap
    body = build_summary_request(
        prefix,
        model=config.summary_model or request.model,
        tools=request.tools,
        max_summary_tokens=cap,
        instruction=instruction,
        cap_key=request.cap_key,
    )
    outcome = yield SummarizeCall(body=body)
    text, problem, score = _judge(outcome, facts, counter, cap)
    if problem is None and score is not None and score >= config.min_summary_score:
        return text, score, None, outcome
    first = (text, problem, score, outcome)
    if outcome.error is None:
        missed = [f.text for f in score_summary(text or "", facts).missed]
        max_words = int(cap * 0.6)
        prompts = request.prompts
        if anchor is None:
            strict = strict_instruction(
                prompts.self_summary_strict, max_words=max_words, required_facts=missed
            )
        else:
            strict = strict_instruction(
                prompts.self_summary_since_strict,
                max_words=max_words,
                required_facts=missed,
                anchor=anchor,
            )
        retry_body = dict(body)
        retry_body["messages"] = [*prefix, {"role": "user", "content": strict}]
        outcome = yield SummarizeCall(body=retry_body, attempt="strict")
        text, problem, score = _judge(outcome, facts, counter, cap)
        if problem is None and score is not None and score >= config.min_summary_score:
            return text, score, None, outcome
        # Keep the better of the two usable attempts.
        if first[0] and (not text or (first[2] or 0) > (score or 0)):
            text, problem, score, outcome = first
    if text and problem == "too_long":
        text = cut_at_sentence(text, cap, counter.count_text)
        return text, score_summary(text, facts).recall, None, outcome
    if text and problem is None:
        return text, score, None, outcome  # usable, just under min_summary_score
    return None, None, outcome.error or problem or "unusable summary", outcome


def _judge(
    outcome: SummaryOutcome, facts: Sequence[Fact], counter: TokenCounter, cap: int
) -> tuple[str | None, str | None, float | None]:
    if outcome.error is not None:
        return None, "error", None
    text = (outcome.text or "").strip()
    tokens = counter.count_text(text) if text else 0
    problem = summary_problem(text, outcome.finish_reason, max_tokens=cap, tokens=tokens)
    score = score_summary(text, facts).recall if text else None
    return (text or None), problem, score
