"""The strategies that go through the project's engine with a model: ``self-summary`` (with and
without the ledger), ``hybrid`` and ``from-scratch`` (``model_free`` has the engine's
``masking`` and ``ledger-only`` policies, which ask none).

Each runs ``ContextEngine`` as production does, with a forced (``manual``) compaction, an
in-memory store and a ``CompactionConfig`` whose budget is the evaluation's: the planner's target
sits just under the budget and its trigger (where it starts eliding old outputs) at the budget.
So the cut, the kept parts, the summary request, the retries, the ledger and the fallbacks are
production's own; the evaluator only measures what comes out.

- ``self-summary``: the live conversation plus ``self_summary.md``, then the summary frame with
  the fact ledger. ``self-summary-no-ledger``: the same with ``ledger_max_tokens=0``.
- ``hybrid``: the engine's ``hybrid`` policy: old tool outputs masked first (oldest turns first,
  down to the budget), and the self-summary only when masking every maskable output is not
  enough; a case masking fits makes no model call.
- ``from-scratch``: a separate summarizer request the way LangChain's ``SummarizationMiddleware``
  makes one: its own system prompt, then the messages to replace rendered as a text transcript,
  then the instruction (``from_scratch_system.md``, ``from_scratch_summary.md``). It replaces
  exactly the span ``self-summary`` replaces (the planner's cut, taken from an engine run that
  asks no model), so the two differ only in how the summary is written; it carries no ledger.
  Unlike LangChain's default, the transcript is not trimmed to its last few thousand tokens: the
  summarizer sees the whole span, so the comparison is about the approach, not a trim setting.

Without a ``--context-window`` the engine's window is sized so the summary request can carry the
whole conversation; with one, the summary request is cut to that window as in production.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.budgets import summary_cap_key
from ..core.config import CompactionConfig
from ..core.effects import Turn
from ..core.errors import BudgetExceeded
from ..core.messages import message_text
from ..core.results import Policy, PrepareResult, SummarizeCall, SummaryOutcome
from ..core.summary_checks import summary_problem
from ..core.summary_request import cut_at_sentence, summary_message
from ..core.tokens import TokenCounter
from ..library.drive import drive_sync
from ..library.effects import Performer
from ..library.engines import engine_for
from ..loaders.prompts import load_prompt, render_prompt
from ..stores import MemoryStore
from .compaction import Compaction, CompactionInput, OneRowPerCase, SummaryClient, finish
from .records import ModelCall

FROM_SCRATCH_EMPTY_REASON = "the from-scratch summary was empty"
"""The reason the engine's fallback text gives when a from-scratch summary comes back empty."""
NO_LEDGER_TOKENS = 0
DEFAULT_LEDGER_TOKENS = CompactionConfig().ledger_max_tokens

_ROLE_NAMES = {
    "system": "System",
    "developer": "System",
    "user": "Human",
    "assistant": "AI",
    "tool": "Tool",
    "function": "Tool",
}


def engine_config(
    job: CompactionInput,
    *,
    ledger_max_tokens: int,
    max_summary_tokens: int,
    policy: Policy = "self-summary",
) -> CompactionConfig:
    """A production config whose compaction lands within ``job.budget_tokens``."""
    budget = job.budget_tokens
    window = job.context_window
    if window is None:
        instruction = job.counter.count_text(load_prompt("self_summary", job.prompt_version))
        # The engine carries the whole view in the summary request when it fits
        # ``window - max_summary - instruction - 64`` with a 2% margin.
        window = math.ceil(job.tokens_before * 1.03) + max_summary_tokens + instruction + 128
    window = max(window, budget + 1)
    return CompactionConfig(
        context_window=window,
        reserve_output_tokens=0,
        trigger_ratio=min(1.0, (budget + 0.5) / window),
        target_ratio=(budget - 0.5) / window,
        max_summary_tokens=max_summary_tokens,
        ledger_max_tokens=ledger_max_tokens,
        tokenizer=job.counter.name,
        prompt_version=job.prompt_version,
        policy=policy,
        summary_cap_field=job.summary_cap_field,
    )


def run_engine(
    job: CompactionInput,
    config: CompactionConfig,
    perform: SummaryClient,
) -> tuple[PrepareResult, MemoryStore]:
    """One forced compaction of ``job.case`` by the engine; the store holds its checkpoint.

    The engine's hard limit is the (larger) window; a compaction that lands over the budget is
    refused here as ``BudgetExceeded``, the evaluation's "infeasible".
    """
    store = MemoryStore()
    engine = engine_for(config)
    performer = Performer(store, perform)
    turn = Turn(job.case.messages, job.agent_model, tools=job.case.tools, session="eval")
    located = drive_sync(engine.locate(turn), performer)
    result = drive_sync(engine.steps(located, trigger="manual"), performer)
    if result.report.estimated_tokens > job.budget_tokens:
        raise BudgetExceeded(
            required_tokens=result.report.estimated_tokens,
            budget_tokens=job.budget_tokens,
            detail="what the engine must keep does not fit the evaluation's budget",
        )
    return result, store


class _Recorder:
    """Performs the engine's summary calls with a client and records each as a ``ModelCall``."""

    def __init__(self, client: SummaryClient, counter: TokenCounter) -> None:
        self.client = client
        self.counter = counter
        self.calls: list[ModelCall] = []

    def __call__(self, call: SummarizeCall) -> SummaryOutcome:
        outcome = self.client(call)
        body = call.body
        messages: list[dict[str, Any]] = body["messages"]
        estimate = self.counter.count_messages(messages) + self.counter.count_tools(
            body.get("tools")
        )
        prompt = outcome.prompt_tokens or estimate
        appended = self.counter.count_message(messages[-1])
        self.calls.append(
            _model_call(
                "summary" if call.attempt == "first" else "summary-strict",
                body,
                outcome,
                prompt_tokens=prompt,
                reusable=max(0, prompt - appended),
                counter=self.counter,
            )
        )
        return outcome


def _model_call(
    purpose: str,
    body: Mapping[str, Any],
    outcome: SummaryOutcome,
    *,
    prompt_tokens: int,
    reusable: int,
    counter: TokenCounter,
) -> ModelCall:
    output = outcome.completion_tokens
    if output is None:
        output = counter.count_text(outcome.text) if outcome.text else 0
    return ModelCall(
        purpose=purpose,
        model=str(body.get("model", "")),
        prompt_tokens=prompt_tokens,
        reusable_prefix_tokens=reusable,
        cached_tokens=outcome.cached_tokens,
        output_tokens=output,
        latency_s=outcome.latency_s,
        error=outcome.error,
    )


def _no_model(reason: str) -> SummaryClient:
    def perform(call: SummarizeCall) -> SummaryOutcome:
        return SummaryOutcome(error=reason)

    return perform


def _require_client(job: CompactionInput, name: str) -> SummaryClient:
    if job.client is None:
        raise ValueError(f"strategy {name!r} needs a model: pass --upstream and --model")
    return job.client


def _notes(result: PrepareResult) -> list[str]:
    return list(result.event.degraded) if result.event is not None else []


class SelfSummary(OneRowPerCase):
    """``self-summary`` / ``self-summary-no-ledger`` / ``hybrid``: production's compaction,
    model included (``hybrid``: the policy that masks old tool outputs first)."""

    needs_model = True

    def __init__(self, *, ledger: bool = True, policy: Policy = "self-summary") -> None:
        self.ledger = ledger
        self.policy: Policy = policy
        if policy == "hybrid":
            self.name = "hybrid"
        else:
            self.name = "self-summary" if ledger else "self-summary-no-ledger"

    def compact_over_budget(self, job: CompactionInput) -> Compaction:
        """Force one compaction through the engine, the summary written by ``job.client``."""
        recorder = _Recorder(_require_client(job, self.name), job.counter)
        config = engine_config(
            job,
            ledger_max_tokens=DEFAULT_LEDGER_TOKENS if self.ledger else NO_LEDGER_TOKENS,
            max_summary_tokens=job.max_summary_tokens,
            policy=self.policy,
        )
        result, _ = run_engine(job, config, recorder)
        event = result.event
        failure = event.failure if event is not None else None
        notes = _notes(result) + (["fallback"] if failure else [])
        summary = event.summary if event is not None and not failure else None
        if event is not None and event.masked:
            notes.append(f"masked={event.masked}")
            if not event.verdicts:
                summary = None  # masking was enough: no summary was written
        return finish(
            job,
            list(result.messages),
            summary=summary,
            calls=recorder.calls,
            failure=failure,
            notes=notes,
            verdicts=list(event.verdicts) if event is not None else [],
            summary_records=result.summary_records,
        )


def render_transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    """Messages as a plain-text transcript, one ``Role: text`` paragraph each (LangChain's
    ``get_buffer_string`` style; tool calls as ``name(arguments)``)."""
    lines = []
    for message in messages:
        role = _ROLE_NAMES.get(str(message.get("role")), str(message.get("role")))
        lines.append(f"{role}: {message_text(message)}")
    return "\n\n".join(lines)


def from_scratch_request(
    span: Sequence[Mapping[str, Any]],
    *,
    model: str,
    max_summary_tokens: int,
    version: str,
    cap_key: str = "max_completion_tokens",
) -> dict[str, Any]:
    """The separate summarizer request over ``span``: system prompt, transcript, instruction."""
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": load_prompt("from_scratch_system", version)},
            {
                "role": "user",
                "content": render_prompt(
                    "from_scratch_summary", version, transcript=render_transcript(span)
                ),
            },
        ],
        cap_key: max_summary_tokens,
    }


class FromScratch(OneRowPerCase):
    """``from-scratch``: a separate summarizer prompt over the span self-summary replaces."""

    name = "from-scratch"
    needs_model = True

    def compact_over_budget(self, job: CompactionInput) -> Compaction:
        """Plan with the engine, summarize the span from scratch, put the summary in its place."""
        client = _require_client(job, self.name)
        config = engine_config(
            job,
            ledger_max_tokens=DEFAULT_LEDGER_TOKENS,
            max_summary_tokens=job.max_summary_tokens,
        )
        # The plan comes from an engine run that asks no model; its fallback message is replaced
        # by the from-scratch summary, and only stays (with this reason) if that summary is empty.
        planned, _ = run_engine(job, config, _no_model(FROM_SCRATCH_EMPTY_REASON))
        event = planned.event
        assert event is not None  # a forced compaction always has its event
        raw_ids = {id(m) for m in job.case.messages}
        messages = list(planned.messages)
        # The summaries this compaction wrote, in order: the messages the agent never sent.
        positions = [
            i for i, m in enumerate(messages) if id(m) not in raw_ids and m.get("role") == "user"
        ]
        notes = _notes(planned)
        calls: list[ModelCall] = []
        texts: list[str] = []
        # No online check here (LangChain's way): a summary is used unless it is empty.
        verdicts: list[str] = []
        counter = job.counter
        for (start, end), position in zip(event.replaced, positions, strict=True):
            body = from_scratch_request(
                job.case.messages[start:end],
                model=job.agent_model,
                max_summary_tokens=job.max_summary_tokens,
                version=job.prompt_version,
                cap_key=summary_cap_key(config, {}),
            )
            outcome = client(SummarizeCall(body=body))
            prompt = outcome.prompt_tokens or counter.count_messages(body["messages"])
            calls.append(
                _model_call(
                    "from-scratch", body, outcome, prompt_tokens=prompt, reusable=0, counter=counter
                )
            )
            if outcome.error is not None:
                return finish(job, messages, calls=calls, failure=outcome.error, notes=notes)
            text = (outcome.text or "").strip()
            tokens = counter.count_text(text)
            problem = summary_problem(
                text, outcome.finish_reason, max_tokens=job.max_summary_tokens, tokens=tokens
            )
            if problem == "empty":
                # As the engine does: the mechanical fallback the plan already holds.
                notes.append("fallback")
                verdicts.append("replaced")
                continue
            if problem == "cut_off":
                text = cut_at_sentence(text, job.max_summary_tokens, counter.count_text)
                notes.append("summary_cut")
            messages[position] = summary_message(
                text, "", load_prompt("summary_frame", job.prompt_version)
            )
            texts.append(text)
            verdicts.append("accepted")
        if not texts:
            return finish(
                job, messages, calls=calls, failure="empty", notes=notes, verdicts=verdicts
            )
        summary = "\n\n".join(texts)
        return finish(job, messages, summary=summary, calls=calls, notes=notes, verdicts=verdicts)
