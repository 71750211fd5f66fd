"""``summarizer eval``: the evaluator's command line (registered by ``cli`` as ``eval``).

Each file is recognised by its content (``inputs``: a dataset, a ``summarizer export``, a Claude
Code session, a mini-swe-agent or SWE-agent trajectory, tau-bench or chat JSON) and converted in
memory; one line per file says what it was read as, and a file that is none of these gets one
short error. Skipped dataset lines are listed up to ``MAX_LINE_ERRORS`` per file, then counted.
The terminal summary is the verdict lines, the strategy table, and last the recommendation
(``recommend``).

Exit status: 0 when every row succeeded; 1 when some rows (or ``--candidates`` calls) errored
(they are retried by running the same command again); 2 for a usage problem found before any
work (unknown strategy, a model strategy or ``--candidates`` without ``--upstream``/``--model``,
``--candidates 1`` or ``--temperature 0`` with candidates, no case loaded, a strategy asked for
with ``--strategy`` that no case can be evaluated by, e.g. ``given`` on a dataset without given
summaries, an output directory of another run); 130 when interrupted (run it again to resume).
A strategy that some cases (or, when it was not asked for by name, all cases) make no row for is
named in a note, with the cases and what they lack.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..core.errors import ConfigurationError
from .strategy_names import ALL, DEFAULT_MAX_SUMMARY_TOKENS, MODEL, OFFLINE, ON_REQUEST

if TYPE_CHECKING:
    from .compaction import Strategy
    from .dataset import Case
    from .inputs import Inputs
    from .runner import RunOutcome

_STRATEGY_HELP = (
    "Strategy to run (repeatable, or comma-separated): "
    + ", ".join(ALL)
    + ". Default: the offline ones ("
    + ", ".join(OFFLINE)
    + "). "
    + ", ".join(MODEL)
    + " need --upstream and --model; "
    + ", ".join(ON_REQUEST)
    + " (the published observation-masking baseline) runs only when named."
)


MAX_LINE_ERRORS = 5
"""Skipped lines listed per file; the rest are counted in one line."""

_INPUT_HELP = (
    "Files to evaluate, recognised by their content: evaluation datasets (JSONL) and "
    "`summarizer export` files, Claude Code sessions (.jsonl), mini-swe-agent trajectories "
    "(.traj.json), SWE-agent trajectories (.traj), tau-bench or chat logs (JSON or JSONL). "
    "Any other file is one error; `summarizer convert --help` lists the formats."
)


def report_inputs(inputs: Inputs) -> None:
    """One line per file read (what it was read as), its skipped lines (at most
    ``MAX_LINE_ERRORS``, then a count), and one error per file that could not be read."""
    for read in inputs.files:
        typer.echo(read.line, err=True)
        for error in read.line_errors[:MAX_LINE_ERRORS]:
            typer.echo(f"skipped {error}", err=True)
        more = len(read.line_errors) - MAX_LINE_ERRORS
        if more > 0:
            typer.echo(f"skipped {more} more lines of {read.path}", err=True)
    for problem in inputs.problems:
        typer.echo(f"error: {problem}", err=True)


def split_strategies(values: list[str] | None) -> list[str]:
    """Strategy names from repeated and comma-separated ``--strategy`` values (default: the
    offline strategies)."""
    if not values:
        return list(OFFLINE)
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def _report_missing_inputs(
    cases: Sequence[Case], strategies: Sequence[Strategy], requested: list[str] | None
) -> bool:
    """Say which cases a strategy makes no row for, and why; False when a strategy the user asked
    for (with ``--strategy``) can evaluate none of them."""
    usable = True
    from .evaluate import cases_without_rows, describe_missing

    for name, missing in cases_without_rows(cases, strategies).items():
        strategy = next(s for s in strategies if s.name == name)
        message = describe_missing(strategy, missing, len(cases))
        if requested and len(missing) == len(cases):
            typer.echo(f"error: {message}; drop -s {name} or use a dataset that has them", err=True)
            usable = False
        else:
            typer.echo(f"note: {message}", err=True)
    return usable


def eval_command(
    datasets: Annotated[
        list[Path], typer.Argument(help=_INPUT_HELP, metavar="FILE", show_default=False)
    ],
    out: Annotated[
        Path,
        typer.Option(
            help="Output directory: run.json, results.jsonl, report.json, report.md, report.html. "
            "Running again into it resumes."
        ),
    ],
    strategy: Annotated[
        list[str] | None, typer.Option("--strategy", "-s", help=_STRATEGY_HELP)
    ] = None,
    budget: Annotated[
        float,
        typer.Option(
            help="Compact every case to this fraction of its own token count "
            "(or of --context-window)."
        ),
    ] = 0.3,
    model: Annotated[
        str | None,
        typer.Option(help="Model that summarizes and answers probes (and names the agent model)."),
    ] = None,
    upstream: Annotated[
        str | None,
        typer.Option(
            help="OpenAI-compatible base URL for the model, e.g. https://api.openai.com/v1."
        ),
    ] = None,
    concurrency: Annotated[int, typer.Option(help="Rows computed at once.")] = 4,
    repeat: Annotated[
        int,
        typer.Option(
            help="Run each model strategy this many times per case and report the spread of "
            "gold recall across runs (offline strategies are deterministic: they run once). "
            "Running again with a larger N adds the missing runs."
        ),
    ] = 1,
    limit: Annotated[int | None, typer.Option(help="Only the first N cases.")] = None,
    candidates: Annotated[
        int,
        typer.Option(
            help="Also ask the model N times (N >= 2) for each case's first self-summary "
            "request, at --temperature with seed 0..N-1, and score each answer by the reward "
            "and by gold recall (candidates.jsonl; the summary says whether the reward ranks "
            "them as gold recall does). Needs --upstream and --model. 0: off. Running again "
            "with a larger N adds the missing candidates."
        ),
    ] = 0,
    temperature: Annotated[
        float, typer.Option(help="Sampling temperature of the --candidates (above 0).")
    ] = 1.0,
    context_window: Annotated[
        int | None,
        typer.Option(help="The agent's window in tokens: the budget becomes a fraction of it."),
    ] = None,
    max_summary_tokens: Annotated[
        int,
        typer.Option(help="Completion cap of the summary requests the model strategies make."),
    ] = DEFAULT_MAX_SUMMARY_TOKENS,
    summary_cap_field: Annotated[
        str,
        typer.Option(
            help="The summary request's field for that cap: auto (max_completion_tokens here), "
            "max_tokens (llama-cpp-python's server reads only this one) or "
            "max_completion_tokens."
        ),
    ] = "auto",
    prices: Annotated[
        Path | None,
        typer.Option(help="JSON price table overriding or extending the built-in list prices."),
    ] = None,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
    no_probes: Annotated[
        bool, typer.Option("--no-probes", help="Do not answer probes even with a model.")
    ] = False,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="OPENAI_API_KEY",
            show_default=False,
            help="Key for --upstream (default: $OPENAI_API_KEY). Never printed or stored.",
        ),
    ] = None,
) -> None:
    """Score compaction strategies on agent trajectories, and say which proxy policy to use.

    Reads datasets and raw logs alike (Claude Code sessions, mini-swe-agent .traj.json, SWE-agent
    .traj, tau-bench or chat JSON, summarizer export files), recognised by their content. Each
    strategy compacts every case to the same budget; the evaluator scores what would be sent
    next: gold-fact recall (and which facts were missed), extracted-fact recall, compression,
    tokens, latency, and, with a model, probe accuracy against the full context and the
    estimated cost. The report ends with a recommendation: the --policy, ratios and a ready
    [[models]] block for the proxy's config file. Policies (self-summary, hybrid, masking,
    ledger-only) can be recommended; truncate, given, from-scratch and self-summary-no-ledger are
    baselines.
    """
    from .runner import EvalSettings, RunConfigMismatch, run_eval, validate_settings

    settings = EvalSettings(
        datasets=datasets,
        strategies=split_strategies(strategy),
        budget=budget,
        out=out,
        model=model,
        upstream=upstream,
        api_key=api_key,
        context_window=context_window,
        max_summary_tokens=max_summary_tokens,
        summary_cap_field=summary_cap_field,  # type: ignore[arg-type]  # validate_settings checks it
        concurrency=concurrency,
        repeat=repeat,
        limit=limit,
        candidates=candidates,
        temperature=temperature,
        probes=not no_probes,
        prices=prices,
        progress=not no_progress,
    )
    try:
        strategies = validate_settings(settings)
    except ConfigurationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    from .inputs import read_inputs

    inputs = read_inputs(datasets)
    report_inputs(inputs)
    cases = inputs.cases
    # the run is of the files read (run.json keeps their digests), not of those skipped
    settings = dataclasses.replace(settings, datasets=[Path(read.path) for read in inputs.files])
    if not cases:
        if inputs.files or not inputs.problems:  # else each file's error said it all
            typer.echo(
                f"error: no case could be loaded from {', '.join(map(str, datasets))} "
                f"({len(inputs.line_errors)} lines skipped)",
                err=True,
            )
        raise typer.Exit(2)
    if repeat > 1:
        _say_repeats(strategies, repeat)
    if not _report_missing_inputs(
        cases[:limit] if limit is not None else cases, strategies, strategy
    ):
        raise typer.Exit(2)
    try:
        outcome = run_eval(settings, cases)
    except RunConfigMismatch as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except ConfigurationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except KeyboardInterrupt:
        typer.echo(
            f"interrupted: finished rows are in {out / 'results.jsonl'}; "
            "run the same command again to resume",
            err=True,
        )
        raise typer.Exit(130) from None
    _summary(outcome, prices, out)
    failed = outcome.candidates.errors if outcome.candidates is not None else 0
    if outcome.errors or failed:
        typer.echo(
            f"{outcome.errors} rows and {failed} candidates failed; "
            "run the same command again to retry them",
            err=True,
        )
        raise typer.Exit(1)


def _say_repeats(strategies: Sequence[Strategy], repeat: int) -> None:
    model = [s.name for s in strategies if s.needs_model]
    offline = [s.name for s in strategies if not s.needs_model]
    parts = [f"{', '.join(model)}: {repeat} runs per case"] if model else []
    if offline:
        parts.append(f"{', '.join(offline)}: deterministic, run once")
    typer.echo(f"--repeat {repeat}: " + "; ".join(parts), err=True)


def _summary(outcome: RunOutcome, prices: Path | None, out: Path) -> None:
    """The terminal summary: verdict lines, the strategy table, the run's counts, and last the
    recommendation."""
    from .metrics import aggregate
    from .pricing import load_prices
    from .recommend import recommend
    from .report import markdown_table, strategy_table
    from .report_verdicts import verdicts

    aggregates = aggregate(outcome.rows, load_prices(prices))
    for line in verdicts(aggregates):
        typer.echo(line.line)
    typer.echo("")
    typer.echo(markdown_table(strategy_table(aggregates)))
    infeasible = sum(1 for row in outcome.rows if row.status == "infeasible")
    typer.echo(
        f"\n{outcome.computed} rows computed, {outcome.skipped} already done, "
        f"{outcome.errors} errors, {infeasible} infeasible at this budget, "
        f"{outcome.elapsed_s:.1f} s; reports in {out}\n"
    )
    if outcome.candidates is not None:
        from .report_candidates import candidate_summary_lines

        candidates = outcome.candidates
        for text in candidate_summary_lines(candidates.ranking, candidates.notes):
            typer.echo(text)
        typer.echo("")
    for text in recommend(aggregates, outcome.config).lines():
        typer.echo(text)
