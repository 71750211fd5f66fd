"""Running every strategy on every case, resumably, with bounded concurrency.

An output directory holds one run: ``run.json`` (the ``RunConfig`` rows depend on),
``results.jsonl`` (one ``ResultRow`` per case, strategy, variant and repeat, appended and flushed
as each finishes, so an interrupted run loses only the rows in flight), ``summaries.jsonl`` (the
rows' summary records: ``summaries_file``), with ``--candidates`` the candidate summaries
(``candidates``), and the reports written at the end. ``repeat`` is not part of ``RunConfig``:
running again with a larger ``--repeat`` keeps the runs already there and adds the missing ones.
Running again into the same directory skips every row already there with status ``ok`` or
``infeasible`` and recomputes the ones that errored; a directory whose ``run.json`` differs from
this run's is refused rather than mixed.

Rows are computed by ``evaluate.Evaluator`` on a thread pool of ``concurrency`` workers; model
calls go through one ``upstream.OpenAISummaryClient`` (tenacity retries, the SDK's own off)
shared by the workers. A progress bar (tqdm) goes to stderr when it is a terminal.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO, get_args

from ..core.config import SummaryCapField
from ..core.errors import ConfigurationError
from ..loaders.prompts import DEFAULT_VERSION, load_prompt
from .candidate_files import check_candidates
from .candidates import CandidateSettings, CandidatesOutcome, run_candidates, validate_candidates
from .compaction import Strategy, SummaryClient
from .dataset import Case
from .evaluate import Evaluated, Evaluator, RowSettings, plan_jobs
from .jsonl_files import JsonlAppender
from .pricing import load_prices
from .records import DEFAULT_MAX_SUMMARY_TOKENS, ResultRow, RowKey, RunConfig
from .report import write_reports
from .report_candidates import candidates_markdown
from .strategies import resolve_strategies
from .summaries_file import SummaryRecordWriter

logger = logging.getLogger("summarizer.eval")

RESULTS_FILE = "results.jsonl"
RUN_FILE = "run.json"
PROMPTS_USED = (
    "self_summary",
    "self_summary_strict",
    "self_summary_since",
    "self_summary_since_strict",
    "summary_frame",
    "fallback_summary",
    "mechanical_frame",
    "ledger_summary",
    "truncated_output",
    "masked_output",
    "from_scratch_system",
    "from_scratch_summary",
    "probe_answer",
    "probe_judge",
)
"""Every prompt a strategy, the engine or a probe uses: their digest is part of ``RunConfig``."""


class RunConfigMismatch(ConfigurationError):
    """The output directory holds a run made with other settings."""


@dataclass(frozen=True)
class EvalSettings:
    """What to evaluate and where to write it."""

    datasets: Sequence[Path]
    strategies: Sequence[str]
    budget: float
    """The compacted request must fit ``budget`` x the case's tokens (or x ``context_window``)."""
    out: Path
    model: str | None = None
    upstream: str | None = None
    api_key: str | None = field(default=None, repr=False)
    context_window: int | None = None
    concurrency: int = 4
    limit: int | None = None
    probes: bool = True
    """Answer and grade probes when a model is given."""
    prices: Path | None = None
    progress: bool = True
    prompt_version: str = DEFAULT_VERSION
    max_summary_tokens: int = DEFAULT_MAX_SUMMARY_TOKENS
    """Completion cap of the summary requests the model strategies make."""
    summary_cap_field: SummaryCapField = "auto"
    """The request field that carries that cap (``CompactionConfig.summary_cap_field``)."""
    repeat: int = 1
    """Runs of each model strategy on each case (offline strategies run once)."""
    candidates: int = 0
    """Answers asked per case to its first self-summary request (0: none; else at least 2)."""
    temperature: float = 1.0
    """The candidates' sampling temperature (above 0)."""

    @property
    def uses_probes(self) -> bool:
        """Whether probes run: asked for, and a model to run them."""
        return self.probes and self.model is not None and self.upstream is not None


@dataclass
class RunOutcome:
    """What a run did."""

    rows: list[ResultRow]
    """Every row of the directory after the run (latest per key), in report order."""
    computed: int
    skipped: int
    errors: int
    """Rows of this run that ended with status ``error``."""
    elapsed_s: float
    reports: list[Path]
    config: RunConfig
    """The run's ``run.json``."""
    candidates: CandidatesOutcome | None = None
    """With ``--candidates``: what the candidates came to."""


# --- configuration ------------------------------------------------------------------------------


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def prompt_digest(version: str) -> str:
    """SHA-256 over the text of ``PROMPTS_USED`` at ``version``."""
    digest = hashlib.sha256()
    for name in PROMPTS_USED:
        digest.update(f"{name}\0{load_prompt(name, version)}\0".encode())
    return digest.hexdigest()


def run_config(settings: EvalSettings) -> RunConfig:
    """The ``RunConfig`` of ``settings``."""
    return RunConfig(
        budget=settings.budget,
        context_window=settings.context_window,
        model=settings.model,
        probes=settings.uses_probes,
        prompt_version=settings.prompt_version,
        prompt_digest=prompt_digest(settings.prompt_version),
        max_summary_tokens=settings.max_summary_tokens,
        summary_cap_field=settings.summary_cap_field,
        datasets=sorted(_file_digest(Path(p)) for p in settings.datasets),
    )


def validate_settings(settings: EvalSettings) -> list[Strategy]:
    """The strategies to run; ``ConfigurationError`` for anything wrong, before any work."""
    strategies = resolve_strategies(settings.strategies)
    if not strategies:
        raise ConfigurationError("no strategy to run: pass --strategy NAME")
    needing = [f"strategy {s.name}" for s in strategies if s.needs_model]
    needing += ["--candidates"] if settings.candidates else []
    if needing and (settings.model is None or settings.upstream is None):
        raise ConfigurationError(
            f"{', '.join(needing)} needs a model: pass --upstream URL and --model NAME"
        )
    if not 0 < settings.budget <= 1:
        raise ConfigurationError(f"--budget must be in (0, 1], got {settings.budget}")
    if settings.repeat < 1:
        raise ConfigurationError(f"--repeat must be at least 1, got {settings.repeat}")
    validate_candidates(settings.candidates, settings.temperature)
    if settings.concurrency < 1:
        raise ConfigurationError(f"--concurrency must be at least 1, got {settings.concurrency}")
    if settings.context_window is not None and settings.context_window < 1:
        raise ConfigurationError("--context-window must be positive")
    if settings.max_summary_tokens < 1:
        raise ConfigurationError("--max-summary-tokens must be positive")
    if settings.summary_cap_field not in get_args(SummaryCapField):
        raise ConfigurationError(
            "--summary-cap-field must be auto, max_tokens or max_completion_tokens, "
            f"got {settings.summary_cap_field!r}"
        )
    return strategies


def prepare_directory(out: Path, config: RunConfig) -> None:
    """Create ``out`` and its ``run.json``, or check that the one there matches ``config``."""
    out.mkdir(parents=True, exist_ok=True)
    run_file, results = out / RUN_FILE, out / RESULTS_FILE
    if run_file.exists():
        try:
            stored = RunConfig.model_validate_json(run_file.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise RunConfigMismatch(
                f"{run_file} is not a run configuration this version understands ({exc}); "
                "use a new --out directory"
            ) from exc
        differences = config.differences(stored)
        if differences:
            raise RunConfigMismatch(
                f"{out} holds results of a run with other settings ("
                + "; ".join(differences)
                + "); use a new --out directory, or the same settings to resume"
            )
        return
    if results.exists() and results.stat().st_size > 0:
        raise RunConfigMismatch(
            f"{results} exists without {RUN_FILE}, so its settings are unknown; "
            "use a new --out directory"
        )
    run_file.write_text(config.model_dump_json(indent=2) + "\n", encoding="utf-8")


# --- results file -------------------------------------------------------------------------------


def read_rows(path: Path) -> dict[RowKey, ResultRow]:
    """The rows of a results file, the last one per key; unreadable lines are skipped."""
    rows: dict[RowKey, ResultRow] = {}
    if not path.exists():
        return rows
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = ResultRow.model_validate_json(line)
            except ValueError:
                logger.warning("%s:%d: unreadable row skipped", path, number)
                continue
            rows[row.key] = row
    return rows


class RowWriter(JsonlAppender):
    """Appends rows to the results file, one line each, flushed as written."""


def make_client(upstream: str, api_key: str | None) -> SummaryClient:
    """An ``OpenAISummaryClient`` for ``upstream`` (an OpenAI-compatible base URL)."""
    import openai

    from ..library.upstream import OpenAISummaryClient

    # A local upstream usually takes any key; the SDK insists on one.
    sdk = openai.OpenAI(base_url=upstream, api_key=api_key or "unused", max_retries=0, timeout=300)
    return OpenAISummaryClient(sdk)


def order_rows(
    rows: Iterable[ResultRow], cases: Sequence[Case], strategies: Sequence[Strategy]
) -> list[ResultRow]:
    """Rows by strategy (run order, then others by name), variant, case (dataset order), then
    repeat."""
    strategy_rank = {s.name: i for i, s in enumerate(strategies)}
    case_rank = {c.id: i for i, c in enumerate(cases)}
    return sorted(
        rows,
        key=lambda r: (
            strategy_rank.get(r.strategy, len(strategy_rank)),
            r.strategy,
            r.variant or "",
            case_rank.get(r.case_id, len(case_rank)),
            r.case_id,
            r.repeat,
        ),
    )


def run_eval(
    settings: EvalSettings,
    cases: Sequence[Case],
    *,
    client: SummaryClient | None = None,
    on_row: Callable[[ResultRow], None] | None = None,
    progress_file: TextIO | None = None,
) -> RunOutcome:
    """Evaluate ``settings.strategies`` on ``cases`` into ``settings.out``; see the module doc.

    ``client`` defaults to one built from ``settings.upstream`` when a model is needed.
    ``on_row`` is called with each row after it is written (an exception there stops the run:
    rows already written stay, rows in flight are lost, as on an interrupt).
    """
    started = time.monotonic()
    strategies = validate_settings(settings)
    prices = load_prices(settings.prices)
    config = run_config(settings)
    prepare_directory(settings.out, config)
    if settings.candidates:
        check_candidates(settings.out, settings.temperature, settings.model)
    needs_client = settings.uses_probes or bool(settings.candidates)
    needs_client |= any(s.needs_model for s in strategies)
    if client is None and needs_client and settings.upstream is not None:
        client = make_client(settings.upstream, settings.api_key)
    selected = list(cases[: settings.limit] if settings.limit is not None else cases)
    results_path = settings.out / RESULTS_FILE
    existing = read_rows(results_path)
    jobs = plan_jobs(selected, strategies, settings.repeat)
    pending = [j for j in jobs if (r := existing.get(j.key)) is None or r.status == "error"]
    row_settings = RowSettings(
        budget=settings.budget,
        model=settings.model,
        context_window=settings.context_window,
        probes=settings.uses_probes,
        prompt_version=settings.prompt_version,
        max_summary_tokens=settings.max_summary_tokens,
        summary_cap_field=settings.summary_cap_field,
    )
    evaluator = Evaluator(row_settings, client)
    computed = errors = 0
    writer, summaries = RowWriter(results_path), SummaryRecordWriter(settings.out)
    stream = progress_file if progress_file is not None else sys.stderr
    try:
        from tqdm import tqdm

        bar = tqdm(
            total=len(jobs),
            initial=len(jobs) - len(pending),
            desc="eval",
            unit="row",
            file=stream,
            disable=not settings.progress or not stream.isatty(),
        )
        with bar, ThreadPoolExecutor(max_workers=settings.concurrency) as pool:
            futures: list[Future[Evaluated]] = [
                pool.submit(evaluator.evaluate, job) for job in pending
            ]
            try:
                for future in as_completed(futures):
                    row, records = future.result().row, future.result().records
                    writer.write(row)
                    summaries.write(row.key, records)
                    existing[row.key] = row
                    computed += 1
                    errors += row.status == "error"
                    bar.update(1)
                    if on_row is not None:
                        on_row(row)
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
    finally:
        writer.close()
        summaries.close()
    candidates = None
    if settings.candidates and client is not None:
        wanted = CandidateSettings(
            row_settings,
            settings.candidates,
            settings.temperature,
            settings.out,
            settings.concurrency,
        )
        candidates = run_candidates(wanted, selected, client)
    rows = order_rows(existing.values(), selected, strategies)
    extra = candidates_markdown(candidates.ranking) if candidates is not None else ""
    reports = write_reports(settings.out, rows, config=config, prices=prices, extra_markdown=extra)
    return RunOutcome(
        rows=rows,
        computed=computed,
        skipped=len(jobs) - len(pending),
        errors=errors,
        elapsed_s=time.monotonic() - started,
        reports=reports,
        config=config,
        candidates=candidates,
    )
