"""Real model: every strategy with Qwen2.5-Coder-0.5B behind llama.cpp, on real agent runs.

The 31 mini-swe-agent SWE-bench runs of ``../shared/trajectories/mini-swe-agent`` are cut to
what a small window holds (``real_model_cases``), then each strategy compacts each cut run to
the same budget, the model strategies with the real model writing every summary. Reported: gold
recall overall and by kind, summary tokens, what became of the model's summaries (accepted,
repaired, replaced), and the self-summary call timed cold and warm (llama.cpp's KV cache holding
the conversation the agent just sent, as in production).

Needs the ``real-model`` extra (the model and llama.cpp's server); it takes about 2.5 hours on
2 cores (about 5 minutes a run), so ``python -m benchmarks`` runs it only when asked
(``--only 6``). Rows are written as
they are computed into ``--work`` (default ``benchmarks/.real-model``) and a rerun resumes.

    python -m benchmarks.real_model [--quick] [--trajectories DIR] [--work DIR] [--written]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from context_summarizer.core.config import SummaryCapField
from context_summarizer.evaluation.dataset import Case
from context_summarizer.evaluation.evaluate import Evaluator, RowSettings, plan_jobs
from context_summarizer.evaluation.metrics import aggregate
from context_summarizer.evaluation.records import ResultRow
from context_summarizer.evaluation.runner import RowWriter, make_client, read_rows
from context_summarizer.evaluation.strategies import resolve_strategies
from context_summarizer.loaders.tokenizers import make_counter

from .real_model_cases import CacheTiming, LiveCache, cut_cases, load_runs
from .real_model_report import report
from .results import Section, print_section

TITLE = "Real model"
COMMAND = "python -m benchmarks.real_model"

ROOT = Path(__file__).resolve().parent.parent
TRAJECTORIES = ROOT.parent / "shared" / "trajectories" / "mini-swe-agent"
WORK = Path(__file__).resolve().with_name(".real-model")
N_CTX = 8_192
CUT_TOKENS = 5_000
"""Each run is cut to this many tokens (o200k) of conversation: with the summary instruction
and the summary's cap it fits ``N_CTX`` in the model's own tokens."""
BUDGET = 0.7
MAX_SUMMARY_TOKENS = 256
CAP_FIELD: SummaryCapField = "max_tokens"
"""llama-cpp-python's server ignores ``max_completion_tokens``."""
STRATEGIES = (
    "self-summary",
    "self-summary-no-ledger",
    "hybrid",  # before from-scratch, whose transcript would evict the conversation from the cache
    "from-scratch",
    "masking",
    "ledger-only",
    "truncate",
)
QUICK_CASES = 2
LLAMA = f"llama-cpp-python's server, `n_ctx` {N_CTX:,}, 2 threads"
ROWS, TIMINGS = "rows.jsonl", "timings.jsonl"


def run(
    *,
    quick: bool,
    out_dir: Path,
    trajectories: Path = TRAJECTORIES,
    work: Path = WORK,
    upstream: str | None = None,
    written: bool = False,
    strategies: Sequence[str] = STRATEGIES,
    timing: bool = True,
) -> Section:
    """Evaluate ``strategies`` (default: every one) on the cut runs (``quick``: two of them)
    and report.

    ``upstream`` is an OpenAI-compatible base URL to use instead of starting llama.cpp (the
    tests use the project's test upstream). ``written``: run nothing, report the runs whose
    rows are all in ``work`` already. ``timing``: time each case's self-summary call cold as
    well (a flushed cache), about 75 s a case on 2 cores.
    """
    del out_dir  # the rows go to ``work``; the tables go in RESULTS.md
    if not trajectories.is_dir():
        return _not_run(f"the trajectories are not here: `{trajectories}`")
    counter = make_counter("gpt-4o")  # o200k_base, which an unknown model is counted with
    cases = cut_cases(load_runs(trajectories), CUT_TOKENS, counter)
    runs = len(list(trajectories.glob("*.traj.json")))
    if quick:
        cases = cases[:QUICK_CASES]
    if written:
        server = LLAMA
        rows, timings = _written(cases, work, server, strategies)
        done = {row.case_id for row in rows}
        cases = [case for case in cases if case.id in done]
    elif upstream is not None:
        server = "the given upstream"
        rows, timings = _evaluate(cases, upstream, work, server, strategies, timing)
    else:
        from context_summarizer.testing.real_model import LlamaServer, ModelUnavailable, model_file

        try:
            path = model_file()
        except ModelUnavailable as exc:
            return _not_run(f"the model is not installed ({exc})")
        server = LLAMA
        with LlamaServer(path, n_ctx=N_CTX) as llama:
            rows, timings = _evaluate(cases, llama.base_url, work, server, strategies, timing)
    body, floors = report(
        rows,
        timings,
        aggregates=aggregate(rows),
        runs=runs,
        cases=cases,
        server=server,
        settings={
            "cut": CUT_TOKENS,
            "budget": BUDGET,
            "max_summary_tokens": MAX_SUMMARY_TOKENS,
        },
    )
    command = f"{COMMAND} --written" if written else COMMAND
    if tuple(strategies) != STRATEGIES:
        command += " --strategies " + ",".join(strategies)
    if not timing:
        command += " --no-timing"
    return Section(title=TITLE, command=command, body=body, floors=floors)


def _written(
    cases: Sequence[Case], work: Path, server: str, strategies: Sequence[str]
) -> tuple[list[ResultRow], list[CacheTiming]]:
    """The rows and timings in ``work`` of the cases every strategy has a row for."""
    if not _same_settings(work, server, strategies):
        return [], []
    rows = read_rows(work / ROWS)
    timings = _read_timings(work / TIMINGS)
    wanted = plan_jobs(cases, resolve_strategies(strategies))
    complete = {
        case.id
        for case in cases
        if all(job.key in rows for job in wanted if job.case.id == case.id)
    }
    return (
        [rows[job.key] for job in wanted if job.case.id in complete],
        [timings[case_id] for case_id in complete if case_id in timings],
    )


def _read_timings(path: Path) -> dict[str, CacheTiming]:
    """The timings file by case; a line an interrupted run cut short is skipped."""
    timings: dict[str, CacheTiming] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                timing = CacheTiming(**json.loads(line))
            except (ValueError, TypeError):
                continue
            timings[timing.case_id] = timing
    return timings


def _same_settings(work: Path, server: str, strategies: Sequence[str]) -> bool:
    """Whether the rows in ``work`` were made with this section's settings."""
    stamp = work / "settings.json"
    wanted = json.dumps(_settings(server, strategies))
    return stamp.exists() and stamp.read_text(encoding="utf-8") == wanted


def _settings(server: str, strategies: Sequence[str]) -> dict[str, object]:
    """What the rows in the work folder depend on."""
    return {
        "n_ctx": N_CTX,
        "cut": CUT_TOKENS,
        "budget": BUDGET,
        "max_summary_tokens": MAX_SUMMARY_TOKENS,
        "cap_field": CAP_FIELD,
        "strategies": list(strategies),
        "server": server,
    }


def _not_run(why: str) -> Section:
    return Section(
        title=TITLE,
        command=COMMAND,
        body=f"Not run: {why}. Install the `real-model` extra and rerun `{COMMAND}`.",
    )


def _evaluate(
    cases: Sequence[Case],
    base_url: str,
    work: Path,
    server: str,
    strategies: Sequence[str],
    timing: bool,
) -> tuple[list[ResultRow], list[CacheTiming]]:
    """Every (case, strategy) row, resuming from ``work``, and (``timing``) each case's
    cold/warm timing."""
    from context_summarizer.testing.real_model import MODEL_ALIAS

    work.mkdir(parents=True, exist_ok=True)
    rows_file, timings_file = work / ROWS, work / TIMINGS
    if not _same_settings(work, server, strategies):
        # Rows of other settings (or another upstream) must not be mixed in: start afresh.
        rows_file.unlink(missing_ok=True)
        timings_file.unlink(missing_ok=True)
        stamp = json.dumps(_settings(server, strategies))
        (work / "settings.json").write_text(stamp, encoding="utf-8")
    done = read_rows(rows_file)
    timings = _read_timings(timings_file)
    clock = LiveCache(make_client(base_url, None), base_url, MODEL_ALIAS, cold=timing)
    clock.timings = dict(timings)
    settings = RowSettings(
        budget=BUDGET,
        model=MODEL_ALIAS,
        probes=False,
        max_summary_tokens=MAX_SUMMARY_TOKENS,
        summary_cap_field=CAP_FIELD,
    )
    evaluator = Evaluator(settings, clock)
    jobs = plan_jobs(cases, resolve_strategies(strategies))
    writer = RowWriter(rows_file)
    try:
        for job in jobs:
            if job.key in done and done[job.key].status != "error":
                continue
            clock.case = job.case
            row = evaluator(job)
            done[row.key] = row
            writer.write(row)
            measured = clock.timings.get(job.case.id)
            if measured is not None and job.case.id not in timings:
                timings[job.case.id] = measured
                with timings_file.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(asdict(measured)) + "\n")
    finally:
        writer.close()
        clock.close()
    ids = {case.id for case in cases}
    return (
        [done[job.key] for job in jobs if job.key in done],
        [t for case_id, t in timings.items() if case_id in ids],
    )


def main() -> None:
    """Command line: print the section's Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"smoke mode: {QUICK_CASES} runs")
    parser.add_argument("--trajectories", type=Path, default=TRAJECTORIES)
    parser.add_argument("--work", type=Path, default=WORK, help="rows written here; resumes")
    parser.add_argument(
        "--written", action="store_true", help="run nothing: report the runs already in --work"
    )
    parser.add_argument(
        "--strategies",
        default=",".join(STRATEGIES),
        help="comma-separated strategies to run (default: every one)",
    )
    parser.add_argument(
        "--no-timing",
        action="store_true",
        help="skip the cold self-summary call of each case (about 75 s a case)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        section = run(
            quick=args.quick,
            out_dir=Path(folder),
            trajectories=args.trajectories,
            work=args.work,
            written=args.written,
            strategies=tuple(args.strategies.split(",")),
            timing=not args.no_timing,
        )
    print_section(section)


if __name__ == "__main__":
    main()
