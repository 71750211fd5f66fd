"""Writing one summary for one run of a compaction: the request, the checks, the one retry.

Pure: the model call is *yielded* as a ``SummarizeCall`` and its ``SummaryOutcome`` received
back, like everything the engine asks of the outside world. The result is a ``Slot`` ready to go
into a checkpoint: the summary message (framing, summary, fact ledger), its score, or the
mechanical fallback when the model's answer cannot be used.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from .checkpoints import Slot
from .config import CompactionConfig
from .facts import Fact, merge_ledger, rank_facts, render_ledger, score_summary
from .messages import INSTRUCTION_ROLES, Message, message_text
from .planner import ViewItem, summary_request_end
from .prompt_set import PromptSet
from .recall_tool import RecallTool, index_text
from .results import SummarizeCall, SummaryOutcome
from .spans import spans_of
from .summary_answers import Answer, facts_within, judge, warn_if_cap_ignored
from .summary_checks import PROBLEM_TEXT, Problem, SummarySource
from .summary_records import SummaryAttempt
from .summary_request import build_summary_request, strict_instruction, summary_message
from .tokens import TokenCounter

logger = logging.getLogger("summarizer")

FRAME_TOKENS = 120
"""Allowance for the summary message's framing text and overhead."""
RECALL_INDEX_TOKENS = 160
"""Allowance for the recall index a summary carries when recall is on (its header and one
line of at most ``spans.MAX_INDEX_CHARS`` characters)."""


def frame_tokens(recall: str | None) -> int:
    """The allowance of a summary message beside its summary and ledger: the frame, and the
    recall index when recall is on (``recall``: the tool's name)."""
    return FRAME_TOKENS + (RECALL_INDEX_TOKENS if recall is not None else 0)


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
    recall: str | None = None
    """The recall tool's name: the summary lists the span it replaces under it (None: off)."""
    recall_offered: RecallTool | None = None
    """The tool, when the conversation's requests are offered it already (they stand on a
    compaction): the summary request offers it too (``tools`` has it), for the cached prefix."""
    instructions: str | None = None
    """The user's own instructions for this summary (the model's configured ones, then the
    request's), added after the summary instruction."""


Verdict = Literal["accepted", "repaired", "replaced"]
"""What became of a run's summary: the model's first answer used, its strict retry used, or
the mechanical fallback in their place."""


@dataclass(frozen=True)
class RunSummary:
    """What summarizing one run produced."""

    slot: Slot
    outcome: SummaryOutcome | None
    """The model's last answer (None when no call was made)."""
    facts: list[Fact]
    verdict: Verdict | None = "replaced"
    """None when no model was asked (a ``ledger_run``)."""
    problems: tuple[Problem, ...] = ()
    """What was wrong with each rejected answer, in order."""
    attempts: tuple[SummaryAttempt, ...] = ()
    """Each summary request as sent and its answer, judged, in order (none: no model asked)."""
    cap: int = 0
    """The summary's completion cap."""


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
    raw_span, facts = _run_facts(request, counter)
    prompts = request.prompts
    instruction = (
        prompts.self_summary if anchor is None else prompts.self_summary_since.format(anchor=anchor)
    )
    instruction = _with_instructions(instruction, request)
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
    verdict: Verdict = "replaced"
    problems: tuple[Problem, ...] = ()
    attempts: tuple[SummaryAttempt, ...] = ()
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
        asked = yield from _ask(
            request,
            [item.message for item in source[:end]],
            instruction,
            facts,
            anchor,
            config,
            counter,
        )
        text, score, failure, outcome = asked.text, asked.score, asked.failure, asked.outcome
        verdict, problems, attempts = asked.verdict, asked.problems, asked.attempts
    if text is None:
        fallback = prompts.fallback_summary.format(
            reason=failure, message_count=len(raw_span), original_tokens=_run_tokens(request)
        )
        slot = _slot(request, fallback, facts, prompts.mechanical_frame, None, failure)
    else:
        slot = _slot(request, text, facts, prompts.summary_frame, score, None)
    return RunSummary(
        slot=slot,
        outcome=outcome,
        facts=facts,
        verdict=verdict,
        problems=problems,
        attempts=attempts,
        cap=request.summary_cap,
    )


def _with_instructions(instruction: str, request: RunRequest) -> str:
    """``instruction`` followed by the user's own instructions for this summary, if any."""
    if not request.instructions:
        return instruction
    extra = request.prompts.summary_instructions.format(instructions=request.instructions)
    return f"{instruction}\n\n{extra}"


def ledger_run(request: RunRequest, *, counter: TokenCounter) -> RunSummary:
    """The run's slot with no model asked (the ``masking`` and ``ledger-only`` policies): the
    note of ``ledger_summary`` (how many messages and tokens went) and the fact ledger, in the
    mechanical frame. Not a failure: no ``failure``, no verdict."""
    raw_span, facts = _run_facts(request, counter)
    prompts = request.prompts
    note = prompts.ledger_summary.format(
        message_count=len(raw_span), original_tokens=_run_tokens(request)
    )
    slot = _slot(request, note, facts, prompts.mechanical_frame, None, None)
    return RunSummary(slot=slot, outcome=None, facts=facts, verdict=None)


def ledger_note_tokens(prompts: PromptSet, counter: TokenCounter) -> int:
    """The most tokens a ``ledger_summary`` note takes (its numbers at their widest): the
    allowance of a model-free run's text, beside its ledger and frame."""
    widest = prompts.ledger_summary.format(message_count=9_999_999, original_tokens=9_999_999_999)
    return counter.count_text(widest)


def _run_facts(request: RunRequest, counter: TokenCounter) -> tuple[list[Message], list[Fact]]:
    """The run's raw messages, and its ledger: their facts merged with the folded summaries'."""
    raw_span = [
        request.raw[item.raw_index]
        for item in request.view[request.run.start : request.run.stop]
        if item.raw_index is not None
    ]
    facts = merge_ledger(
        request.previous_facts,
        rank_facts(raw_span),
        max_tokens=request.ledger_cap,
        count_tokens=counter.count_text,
    )
    return raw_span, facts


def _run_tokens(request: RunRequest) -> int:
    """The counted tokens of the run's view items (what its slot replaces)."""
    return sum(request.view[i].tokens for i in request.run)


def _slot(
    request: RunRequest,
    text: str,
    facts: Sequence[Fact],
    frame: str,
    score: float | None,
    failure: str | None,
) -> Slot:
    """The slot standing for the run: ``text`` and the ledger in ``frame``."""
    view, run = request.view, request.run
    start, end = view[run.start].raw_range[0], view[run.stop - 1].raw_range[1]
    message = summary_message(text, render_ledger(facts), frame)
    if request.recall is not None:
        spans = spans_of([(start, end)], request.raw)
        index = index_text(request.prompts, request.recall, spans, request.raw)
        message = {**message, "content": f"{message['content']}\n\n{index}"}
    return Slot(
        start=start,
        end=end,
        message=message,
        summary=text,
        ledger=[f.model_dump() for f in facts],
        score=score,
        failure=failure,
    )


@dataclass(frozen=True)
class _Asked:
    """What asking for a run's summary came to."""

    text: str | None
    """The summary to use; None when the fallback must stand in."""
    score: float | None
    failure: str | None
    outcome: SummaryOutcome
    verdict: Verdict
    problems: tuple[Problem, ...]
    attempts: tuple[SummaryAttempt, ...]


def _attempt(
    body: dict[str, Any], answer: Answer, attempt: Literal["first", "strict"]
) -> SummaryAttempt:
    """``answer`` to the request ``body``, as a training record keeps it."""
    outcome = answer.outcome
    return SummaryAttempt(
        attempt=attempt,
        request=body,
        summary=answer.text,
        finish_reason=outcome.finish_reason,
        problem=answer.problem if outcome.error is None else None,
        score=answer.score,
        tokens=answer.tokens,
        error=outcome.error,
    )


def _ask(
    request: RunRequest,
    prefix: list[Message],
    instruction: str,
    facts: Sequence[Fact],
    anchor: str | None,
    config: CompactionConfig,
    counter: TokenCounter,
) -> Generator[SummarizeCall, SummaryOutcome, _Asked]:
    """The model's summary, judged; after one stricter retry (saying what was wrong) if it
    cannot be used or misses facts. A summary with a problem is never used."""
    cap = request.summary_cap
    body = build_summary_request(
        prefix,
        model=config.summary_model or request.model,
        tools=request.tools,
        max_summary_tokens=cap,
        instruction=instruction,
        cap_key=request.cap_key,
    )
    source = SummarySource(
        conversation="\n".join(message_text(m) for m in prefix),
        instruction=instruction,
        task=next((message_text(m) for m in prefix if m.get("role") == "user"), None),
    )
    offered = request.recall_offered
    first = judge((yield SummarizeCall(body=body, recall=offered)), facts, counter, cap, source)
    warn_if_cap_ignored(first.outcome, cap, request.cap_key)
    minimum = config.min_summary_score
    attempts: tuple[SummaryAttempt, ...] = (_attempt(body, first, "first"),)
    if first.good(minimum):
        return _Asked(first.text, first.score, None, first.outcome, "accepted", (), attempts)
    problems: tuple[Problem, ...] = (first.problem,) if first.problem else ()
    answers = [first]
    if first.outcome.error is None:
        missed = facts_within(
            [f.text for f in score_summary(first.text or "", facts).missed],
            cap // 2,
            counter,
        )
        prompts = request.prompts
        reason = PROBLEM_TEXT[first.problem] if first.problem else "it left out key facts"
        template, anchored = (
            (prompts.self_summary_strict, {})
            if anchor is None
            else (prompts.self_summary_since_strict, {"anchor": anchor})
        )
        strict = strict_instruction(
            template,
            max_words=first.words_allowed(cap),
            required_facts=missed,
            problem=reason,
            **anchored,
        )
        strict = _with_instructions(strict, request)
        retry_body = dict(body)
        retry_body["messages"] = [*prefix, {"role": "user", "content": strict}]
        # An echo of either instruction is an echo.
        strict_source = replace(source, instruction=f"{instruction}\n{strict}")
        second = judge(
            (yield SummarizeCall(body=retry_body, attempt="strict", recall=offered)),
            facts,
            counter,
            cap,
            strict_source,
        )
        attempts += (_attempt(retry_body, second, "strict"),)
        if second.good(minimum):
            return _Asked(
                second.text, second.score, None, second.outcome, "repaired", problems, attempts
            )
        problems += (second.problem,) if second.problem else ()
        answers.append(second)
    # Neither reached the score: the better usable one, if any (a problem is never usable).
    usable = [a for a in answers if a.problem is None and a.text]
    if usable:
        best = max(usable, key=lambda a: a.score or 0.0)
        verdict: Verdict = "accepted" if best is first else "repaired"
        return _Asked(best.text, best.score, None, best.outcome, verdict, problems, attempts)
    last = answers[-1]
    failure = last.outcome.error or (PROBLEM_TEXT[last.problem] if last.problem else "unusable")
    return _Asked(None, None, failure, last.outcome, "replaced", problems, attempts)
