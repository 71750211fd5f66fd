"""``summarizer eval --candidates N``: several answers to one summary request, each scored by
the reward and by gold recall, to see whether the reward ranks them as gold recall does.

For each case the ``self-summary`` strategy's engine run is made at the run's budget, its first
summary request (the exact body) kept, and the model asked for ``N`` answers to it with
``temperature`` T and ``seed`` i for candidate i (the body otherwise unchanged, so a prompt
cache covers it). Candidate 0 is the engine run's own first answer. Each candidate gets:

- ``reward`` and ``parts``: ``rewards.SummaryReward`` against the facts and cap of the engine's
  record of that run (exactly what the online gate counted);
- ``gold_recall``: gold recall of the compacted context with the candidate as that run's summary
  (the engine's context, its summary message rebuilt with the candidate: frame, text, ledger);
- ``summary_gold_recall``: of the gold facts the compacted context misses without the run's
  summary message (neither its text nor its ledger), the share the candidate's text mentions
  (None when it misses none): the summary's own gold recall, measured on what it stands for,
  as the reward's fact share is (the ledger's facts named by the text).

Files in the output directory: ``candidate_requests.jsonl`` (per case: the request, the engine's
record of the run, the compacted context and where the summary sits in it) and
``candidates.jsonl`` (one ``CandidateLine`` per candidate). Both are appended and flushed as
work finishes; a rerun reuses a case's stored request and asks only the ``(case, index)``
missing or errored (the last line per key wins), so a larger N adds the missing indices.
Candidates of another temperature or model in the directory are refused, not mixed.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import BudgetExceeded, ConfigurationError, SummarizerError
from ..core.facts import ledger_facts, render_ledger
from ..core.results import PrepareResult, SummarizeCall, SummaryOutcome
from ..core.summary_records import SummaryRecord, request_prompt
from ..core.summary_request import summary_message
from ..loaders.prompts import load_prompt
from ..rewards import SummaryReward
from .candidate_files import (
    CANDIDATES_FILE,
    REQUESTS_FILE,
    CandidateLine,
    CandidateRequest,
    rank_stored,
    read_candidates,
    read_jsonl,
)
from .compaction import SummaryClient
from .dataset import Case, GoldFact
from .engine_strategies import DEFAULT_LEDGER_TOKENS, engine_config, run_engine
from .evaluate import RowSettings, agent_model, case_input
from .jsonl_files import JsonlAppender
from .metrics import context_text, gold_fact_recall
from .ranking import RankingSummary

logger = logging.getLogger("summarizer.eval")


@dataclass(frozen=True)
class CandidateSettings:
    """What the candidates of a run depend on."""

    row: RowSettings
    """The run's row settings: budget, model, window, prompts, summary cap."""
    count: int
    temperature: float
    out: Path
    concurrency: int = 4


@dataclass
class CandidatesOutcome:
    """What the candidates came to."""

    ranking: RankingSummary
    computed: int
    errors: int
    notes: list[str]
    """Cases without candidates, and why."""


def validate_candidates(count: int, temperature: float) -> None:
    """``ConfigurationError`` unless ``count`` is 0 (off), or at least 2 with ``temperature``
    above 0."""
    if count == 0:
        return
    if count < 2:
        raise ConfigurationError(f"--candidates must be 0 (off) or at least 2, got {count}")
    if temperature <= 0:
        raise ConfigurationError(
            f"--temperature must be above 0 with --candidates, got {temperature}"
        )


def candidate_body(body: dict[str, Any], temperature: float, seed: int) -> dict[str, Any]:
    """``body`` with ``temperature`` and ``seed`` added and nothing else changed."""
    return {**body, "temperature": temperature, "seed": seed}


NOT_ASKED = "not asked: the candidates need only the first summary request"
"""What the engine's strict retries are answered with in a candidates run (no model call)."""


class _FirstCall:
    """Performs the engine's first summary request as candidate 0; a strict retry is answered
    with ``NOT_ASKED`` (it would cost a generation the candidates never use), and a later
    run's first request goes to the model as usual."""

    def __init__(self, client: SummaryClient, temperature: float) -> None:
        self.client = client
        self.temperature = temperature
        self.body: dict[str, Any] | None = None
        self.outcome: SummaryOutcome | None = None

    def __call__(self, call: SummarizeCall) -> SummaryOutcome:
        if call.attempt != "first":
            return SummaryOutcome(error=NOT_ASKED)
        if self.body is not None:
            return self.client(call)
        self.body = call.body
        asked = SummarizeCall(
            body=candidate_body(call.body, self.temperature, 0), recall=call.recall
        )
        self.outcome = self.client(asked)
        return self.outcome


def _summary_position(case: Case, result: PrepareResult, record: SummaryRecord) -> int | None:
    """Where the message standing for ``record``'s run is in the compacted context."""
    if result.event is None:
        return None
    raw = {id(m) for m in case.messages}
    inserted = [
        i for i, m in enumerate(result.messages) if id(m) not in raw and m.get("role") == "user"
    ]
    for (start, end), position in zip(result.event.replaced, inserted, strict=False):
        if (start, end) == (record.start, record.end):
            return position
    return None


def engine_request(
    case: Case, settings: RowSettings, client: SummaryClient, temperature: float
) -> tuple[CandidateRequest | None, SummaryOutcome | None, str | None]:
    """The ``self-summary`` engine run of ``case``, its first answer asked as candidate 0:
    the case's request (None, with why, when it has none) and that answer."""
    job, before = case_input(settings, case, client)
    if before <= job.budget_tokens:
        return None, None, f"{case.id}: fits its budget, no summary request"
    config = engine_config(
        job, ledger_max_tokens=DEFAULT_LEDGER_TOKENS, max_summary_tokens=settings.max_summary_tokens
    )
    first = _FirstCall(client, temperature)
    try:
        result, _ = run_engine(job, config, first)
    except BudgetExceeded as exc:
        return None, None, f"{case.id}: infeasible at this budget ({exc})"
    except (SummarizerError, ValueError) as exc:
        return None, None, f"{case.id}: {type(exc).__name__}: {exc} (retried on the next run)"
    body = first.body
    record = next((r for r in result.summary_records if r.attempts[0].request == body), None)
    if body is None or record is None:
        return None, None, f"{case.id}: the engine asked no summary"
    position = _summary_position(case, result, record)
    if position is None:
        return None, None, f"{case.id}: the run's summary message was not found"
    request = CandidateRequest(
        case_id=case.id,
        request=json.loads(json.dumps(body)),
        record=record,
        messages=json.loads(json.dumps(result.messages)),
        position=position,
    )
    return request, first.outcome, None


class CaseScorer:
    """Scores the candidates of one case against its stored request."""

    def __init__(self, case: Case, request: CandidateRequest, settings: RowSettings) -> None:
        self.case = case
        self.request = request
        self.reward = SummaryReward(model=agent_model(settings, case))
        self.frame = load_prompt("summary_frame", settings.prompt_version)
        self.ledger = render_ledger(ledger_facts(request.record.facts))
        engine_text = str(request.messages[request.position].get("content") or "")
        marker = self.ledger.strip()
        # What the engine's message carries after its ledger (the recall index, when on).
        self.tail = (
            engine_text[engine_text.rindex(marker) + len(marker) :]
            if marker and marker in engine_text
            else ""
        )
        kept = [m for i, m in enumerate(request.messages) if i != request.position]
        without = gold_fact_recall(context_text(kept), case.facts)
        missed = {fact.id for fact in without.missed}
        self.missed: list[GoldFact] = [f for f in case.facts if f.id in missed]

    def message(self, summary: str) -> dict[str, Any]:
        """The run's summary message with ``summary`` as its text."""
        message = summary_message(summary, self.ledger, self.frame)
        return {**message, "content": f"{message['content']}{self.tail}"}

    def context(self, summary: str) -> str:
        """The compacted context's text with ``summary`` as the run's summary."""
        messages = list(self.request.messages)
        messages[self.request.position] = self.message(summary)
        return context_text(messages)

    def line(self, index: int, temperature: float, outcome: SummaryOutcome) -> CandidateLine:
        """Candidate ``index``'s line from the model's answer."""
        body = self.request.request
        line = CandidateLine(
            case_id=self.case.id,
            index=index,
            temperature=temperature,
            seed=index,
            model=str(body.get("model", "")),
            request=body,
            finish_reason=outcome.finish_reason,
            error=outcome.error,
        )
        if outcome.error is not None:
            return line
        text = (outcome.text or "").strip()
        record = self.request.record
        scored = self.reward.score(
            request_prompt(body),
            text or None,
            facts=record.facts,
            cap=record.cap,
            finish_reason=outcome.finish_reason,
        )
        gold = gold_fact_recall(self.context(text), self.case.facts)
        own = gold_fact_recall(text, self.missed) if self.missed else None
        return line.model_copy(
            update={
                "summary": text,
                "tokens": scored.tokens,
                "reward": scored.reward,
                "parts": scored.parts(),
                "gold_recall": gold.recall,
                "summary_gold_recall": own.recall if own is not None else None,
            }
        )


def _ask(
    scorer: CaseScorer, client: SummaryClient, index: int, temperature: float
) -> CandidateLine:
    body = candidate_body(scorer.request.request, temperature, index)
    return scorer.line(index, temperature, client(SummarizeCall(body=body)))


def run_candidates(
    settings: CandidateSettings, cases: Sequence[Case], client: SummaryClient
) -> CandidatesOutcome:
    """Ask and score the candidates of ``cases`` into ``settings.out`` (see the module doc).

    Each case is one task: its engine run (unless its request is stored), then its missing
    candidates one after the other, so a server's prompt cache still holds the request's
    prefix when the next candidate is asked. ``concurrency`` cases run at once."""
    out = settings.out
    requests = read_jsonl(out / REQUESTS_FILE, CandidateRequest, lambda r: r.case_id)
    done = {key for key, line in read_candidates(out).items() if line.error is None}
    notes: list[str] = []
    lines: list[CandidateLine] = []
    lock = threading.Lock()
    request_file = JsonlAppender(out / REQUESTS_FILE)
    candidate_file = JsonlAppender(out / CANDIDATES_FILE)

    def keep(line: CandidateLine) -> None:
        with lock:
            candidate_file.write(line)
            lines.append(line)

    def one_case(case: Case) -> None:
        request = requests.get(case.id)
        if request is None:
            request, outcome, note = engine_request(
                case, settings.row, client, settings.temperature
            )
            if request is None:
                with lock:
                    notes.append(note or f"{case.id}: no summary request")
                return
            with lock:
                request_file.write(request)
            scorer = CaseScorer(case, request, settings.row)
            if outcome is not None and (case.id, 0) not in done:
                keep(scorer.line(0, settings.temperature, outcome))
                done.add((case.id, 0))
        else:
            scorer = CaseScorer(case, request, settings.row)
        for index in range(settings.count):
            if (case.id, index) not in done:
                keep(_ask(scorer, client, index, settings.temperature))

    try:
        with ThreadPoolExecutor(max_workers=settings.concurrency) as pool:
            for future in as_completed([pool.submit(one_case, case) for case in cases]):
                future.result()
    finally:
        request_file.close()
        candidate_file.close()
    return CandidatesOutcome(
        ranking=rank_stored(out, cases, settings.count),
        computed=len(lines),
        errors=sum(line.error is not None for line in lines),
        notes=notes,
    )


def rescore_candidates(out: Path, cases: Sequence[Case], settings: RowSettings) -> int:
    """Score every answer stored in ``out`` again, by the reward and gold recall as they are
    now, without asking the model (a changed online check re-judges old candidates). Lines
    whose scores changed are appended (the last line per candidate wins); returns how many."""
    requests = read_jsonl(out / REQUESTS_FILE, CandidateRequest, lambda r: r.case_id)
    stored = read_candidates(out)
    changed: list[CandidateLine] = []
    for case in cases:
        request = requests.get(case.id)
        answered = [
            line
            for (case_id, _), line in sorted(stored.items())
            if case_id == case.id and line.error is None and line.summary is not None
        ]
        if request is None or not answered:
            continue
        scorer = CaseScorer(case, request, settings)
        for line in answered:
            outcome = SummaryOutcome(text=line.summary, finish_reason=line.finish_reason)
            fresh = scorer.line(line.index, line.temperature, outcome)
            if fresh != line:
                changed.append(fresh)
    if changed:
        appender = JsonlAppender(out / CANDIDATES_FILE)
        try:
            for line in changed:
                appender.write(line)
        finally:
            appender.close()
    return len(changed)
