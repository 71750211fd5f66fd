"""One row of an evaluation: compact a case with a strategy, then measure the result.

``Evaluator`` is what the runner's workers call: it counts the case with the agent model's
tokenizer, sets the budget (``budget`` x the case's tokens, or x ``context_window``), runs the
strategy, and fills a ``ResultRow`` with the metrics and, when a model is given, the probes. A
strategy's error (``BudgetExceeded``, a summary call that failed after its retries, a probe call
that failed) makes an ``error`` row, which the next run into the same directory recomputes.
Each case's full-context probe answers are computed once and shared by its rows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..core.config import SummaryCapField
from ..core.errors import BudgetExceeded, SummarizerError
from ..core.summary_records import SummaryRecord
from ..loaders.prompts import DEFAULT_VERSION
from ..loaders.tokenizers import make_counter
from .compaction import CompactionInput, Strategy, SummaryClient, request_tokens
from .dataset import Case
from .metrics import compression_ratio, context_text, extracted_fact_recall, gold_fact_recall
from .probes import Graded, accuracy, grade_probe_with_recall, grade_probes, probe_results
from .records import DEFAULT_MAX_SUMMARY_TOKENS, ResultRow, RowKey
from .recoverable import recoverable_recall, replaced_spans

DEFAULT_AGENT_MODEL = "gpt-4o"
"""Counts and prices a case that names no model when the run names none either."""


@dataclass(frozen=True)
class RowSettings:
    """The run settings a row depends on."""

    budget: float
    model: str | None = None
    context_window: int | None = None
    probes: bool = False
    """Answer and grade the case's probes (needs a client)."""
    prompt_version: str = DEFAULT_VERSION
    max_summary_tokens: int = DEFAULT_MAX_SUMMARY_TOKENS
    summary_cap_field: SummaryCapField = "auto"


@dataclass(frozen=True)
class Job:
    """One row to compute."""

    case: Case
    strategy: Strategy
    variant: str | None
    repeat: int = 0
    """Which run of a model strategy (``--repeat``); 0 for the first."""

    @property
    def key(self) -> RowKey:
        """The row's key."""
        return (self.case.id, self.strategy.name, self.variant or "", self.repeat)


@dataclass(frozen=True)
class Evaluated:
    """A row, and the summary records of the compaction it measured (none: no model wrote a
    summary, or the strategy keeps none: ``from-scratch`` has no online gate)."""

    row: ResultRow
    records: list[SummaryRecord]


def agent_model(settings: RowSettings, case: Case) -> str:
    """The run's model, else the case's, else ``DEFAULT_AGENT_MODEL``."""
    return settings.model or case.model or DEFAULT_AGENT_MODEL


def case_input(
    settings: RowSettings,
    case: Case,
    client: SummaryClient | None,
    variant: str | None = None,
) -> tuple[CompactionInput, int]:
    """``case`` as a strategy is given it under ``settings`` (the agent model, its counter, the
    budget: ``budget`` x the case's tokens, or x ``context_window``, at least 1), and the
    case's tokens before compaction."""
    model = agent_model(settings, case)
    counter = make_counter(model)
    before = request_tokens(counter, case.messages, case.tools)
    base = settings.context_window or before
    job = CompactionInput(
        case=case,
        budget_tokens=max(1, int(settings.budget * base)),
        counter=counter,
        agent_model=model,
        variant=variant,
        client=client,
        context_window=settings.context_window,
        prompt_version=settings.prompt_version,
        max_summary_tokens=settings.max_summary_tokens,
        summary_cap_field=settings.summary_cap_field,
    )
    return job, before


class FullContextProbes:
    """Each case's probes answered from its full context, computed once and shared."""

    def __init__(self, compute: Callable[[Case], list[Graded]]) -> None:
        self._compute = compute
        self._results: dict[str, list[Graded]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, case: Case) -> list[Graded]:
        """The case's full-context grades (computed on first use; concurrent callers wait)."""
        with self._guard:
            lock = self._locks.setdefault(case.id, threading.Lock())
        with lock:
            if case.id not in self._results:
                self._results[case.id] = self._compute(case)
            return self._results[case.id]


class Evaluator:
    """Computes one row: compaction, metrics, probes."""

    def __init__(self, settings: RowSettings, client: SummaryClient | None) -> None:
        self.settings = settings
        self.client = client
        self.probing = settings.probes and client is not None
        self.full_probes = FullContextProbes(self._full_context_probes)

    def agent_model(self, case: Case) -> str:
        """The run's model, else the case's, else ``DEFAULT_AGENT_MODEL``."""
        return agent_model(self.settings, case)

    def _full_context_probes(self, case: Case) -> list[Graded]:
        assert self.client is not None
        return grade_probes(
            self.client,
            case.messages,
            case.tools,
            case.probes,
            model=self.agent_model(case),
            version=self.settings.prompt_version,
        )

    def __call__(self, job: Job) -> ResultRow:
        """The row of ``job`` (``evaluate`` without the summary records)."""
        return self.evaluate(job).row

    def evaluate(self, job: Job) -> Evaluated:
        """The row of ``job`` and its summary records. A summarizer error or ``ValueError`` from
        the strategy, or a model call that failed after its retries, makes an ``error`` row;
        other exceptions (bugs) propagate and stop the run."""
        case = job.case
        given, before = case_input(self.settings, case, self.client, job.variant)
        model = given.agent_model
        row = ResultRow(
            case_id=case.id,
            strategy=job.strategy.name,
            variant=job.variant,
            repeat=job.repeat,
            status="ok",
            agent_model=model,
            tokens_before=before,
            budget_tokens=given.budget_tokens,
        )
        started = time.monotonic()
        try:
            compaction = job.strategy.compact(given)
        except BudgetExceeded as exc:
            update: dict[str, object] = {
                "status": "infeasible",
                "error": str(exc),
                "met_budget": False,
                "latency_s": time.monotonic() - started,
            }
            return Evaluated(row.model_copy(update=update), [])
        except (SummarizerError, ValueError) as exc:
            update = {
                "status": "error",
                "error": f"{type(exc).__name__}: {exc}",
                "latency_s": time.monotonic() - started,
            }
            return Evaluated(row.model_copy(update=update), [])
        records = list(compaction.summary_records)
        latency = time.monotonic() - started
        failed_calls = [call.error for call in compaction.calls if call.error]
        update = {
            "tokens_after": compaction.tokens_after,
            "met_budget": compaction.met_budget,
            "compacted": compaction.compacted,
            "compression_ratio": compression_ratio(before, compaction.tokens_after),
            "summary_tokens": compaction.summary_tokens,
            "inserted_tokens": compaction.inserted_tokens,
            "next_reusable_prefix_tokens": compaction.reusable_prefix_tokens,
            "calls": compaction.calls,
            "failure": compaction.failure,
            "notes": compaction.notes,
            "verdicts": compaction.verdicts,
            "summary": compaction.summary,
            "latency_s": latency,
        }
        if failed_calls:
            update |= {"status": "error", "error": f"model call failed: {failed_calls[0]}"}
            return Evaluated(row.model_copy(update=update), records)
        gold = gold_fact_recall(context_text(compaction.messages), case.facts)
        missed = {fact.id for fact in gold.missed}
        update["gold"] = gold
        update["recoverable"] = recoverable_recall(
            case.messages, compaction.messages, [f for f in case.facts if f.id in missed]
        )
        update["extracted"] = extracted_fact_recall(case.messages, compaction.messages)
        if self.probing and case.probes:
            update |= self._probes(case, compaction.messages, model)
        return Evaluated(row.model_copy(update=update), records)

    def _probes(
        self, case: Case, messages: list[dict[str, object]], model: str
    ) -> dict[str, object]:
        assert self.client is not None
        started = time.monotonic()
        compacted = grade_probes(
            self.client,
            messages,
            case.tools,
            case.probes,
            model=model,
            version=self.settings.prompt_version,
        )
        full = self.full_probes.get(case)
        spans = replaced_spans(case.messages, messages)
        recalled = [
            grade_probe_with_recall(
                self.client,
                messages,
                spans,
                case.messages,
                probe,
                model=model,
                version=self.settings.prompt_version,
            )
            for probe in case.probes
        ]
        update: dict[str, object] = {"probe_latency_s": time.monotonic() - started}
        errors = [g.error for g in [*compacted, *full, *recalled] if g.error]
        if errors:
            return update | {"status": "error", "error": errors[0]}
        ours = accuracy([g.correct for g in compacted])
        theirs = accuracy([g.correct for g in full])
        return update | {
            "probes": probe_results(case.probes, compacted, full, recalled),
            "probe_accuracy": ours,
            "probe_accuracy_full": theirs,
            "probe_gap": theirs - ours if ours is not None and theirs is not None else None,
            "probe_accuracy_recall": accuracy([g.correct for g in recalled]),
        }


def plan_jobs(cases: Iterable[Case], strategies: Sequence[Strategy], repeat: int = 1) -> list[Job]:
    """Every (case, strategy, variant, repeat): each case's strategies in order, then the next
    case. A model strategy runs ``repeat`` times (repeats 0 to ``repeat - 1``); an offline one
    is deterministic and runs once whatever ``repeat`` is."""
    return [
        Job(case, strategy, variant, index)
        for case in cases
        for strategy in strategies
        for variant in strategy.variants(case)
        for index in range(repeat if strategy.needs_model else 1)
    ]


def cases_without_rows(
    cases: Sequence[Case], strategies: Sequence[Strategy]
) -> dict[str, list[str]]:
    """For each strategy that makes no row for some of ``cases``, those cases' ids, in order.

    Only a strategy that needs something in the case can miss one (``given`` needs the case's
    own summaries).
    """
    out: dict[str, list[str]] = {}
    for strategy in strategies:
        missing = [case.id for case in cases if not strategy.variants(case)]
        if missing:
            out[strategy.name] = missing
    return out


def describe_missing(strategy: Strategy, missing: Sequence[str], total: int) -> str:
    """What ``cases_without_rows`` found for ``strategy``, for a person: which cases lack what."""
    needs = getattr(strategy, "case_requirement", "what this strategy evaluates")
    if len(missing) == total:
        return (
            f"{strategy.name}: none of the {total} cases carries {needs}, "
            "so it has nothing to evaluate"
        )
    shown = ", ".join(missing[:10]) + (
        f" and {len(missing) - 10} more" if len(missing) > 10 else ""
    )
    return (
        f"{strategy.name}: {len(missing)} of {total} cases have no rows, lacking {needs}: {shown}"
    )
