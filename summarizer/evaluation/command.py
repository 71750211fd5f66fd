"""``summarizer eval``: the evaluator's command line (registered by ``cli`` as ``eval``).

Exit status: 0 when every row succeeded; 1 when some rows errored (they are retried by running
the same command again); 2 for a usage problem found before any work (unknown strategy, a model
strategy without ``--upstream``/``--model``, no case loaded, a strategy asked for with
``--strategy`` that no case can be evaluated by, e.g. ``given`` on a dataset without given
summaries, an output directory of another run); 130 when interrupted (run it again to resume).
A strategy that some cases (or, when it was not asked for by name, all cases) make no row for is
named in a note, with the cases and what they lack.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from ..core.errors import ConfigurationError
from .compaction import Strategy
from .dataset import Case, load_dataset
from .evaluate import cases_without_rows, describe_missing
from .records import DEFAULT_MAX_SUMMARY_TOKENS
from .strategies import MODEL_STRATEGIES, OFFLINE_STRATEGIES, STRATEGIES

_STRATEGY_HELP = (
    "Strategy to run (repeatable, or comma-separated): "
    + ", ".join(STRATEGIES)
    + ". Default: the offline ones ("
    + ", ".join(OFFLINE_STRATEGIES)
    + "). "
    + ", ".join(MODEL_STRATEGIES)
    + " need --upstream and --model."
)


def split_strategies(values: list[str] | None) -> list[str]:
    """Strategy names from repeated and comma-separated ``--strategy`` values (default: the
    offline strategies)."""
    if not values:
        return list(OFFLINE_STRATEGIES)
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def _report_missing_inputs(
    cases: Sequence[Case], strategies: Sequence[Strategy], requested: list[str] | None
) -> bool:
    """Say which cases a strategy makes no row for, and why; False when a strategy the user asked
    for (with ``--strategy``) can evaluate none of them."""
    usable = True
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
        list[Path], typer.Argument(help="JSONL dataset files (see summarizer.evaluation.dataset).")
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
    limit: Annotated[int | None, typer.Option(help="Only the first N cases.")] = None,
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
    """Score compaction strategies offline on datasets of agent trajectories.

    Each strategy compacts every case to the same budget; the evaluator scores what would be sent
    next: gold-fact recall (and which facts were missed), extracted-fact recall, compression,
    tokens, estimated cost, latency, and, with a model, probe accuracy against the full context.
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
        limit=limit,
        probes=not no_probes,
        prices=prices,
        progress=not no_progress,
    )
    try:
        strategies = validate_settings(settings)
        cases, line_errors = load_dataset(datasets)
    except ConfigurationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except OSError as exc:
        typer.echo(f"error: cannot read dataset: {exc}", err=True)
        raise typer.Exit(2) from exc
    for line_error in line_errors:
        typer.echo(f"skipped {line_error}", err=True)
    if not cases:
        typer.echo(
            f"error: no case could be loaded from {', '.join(map(str, datasets))} "
            f"({len(line_errors)} lines skipped)",
            err=True,
        )
        raise typer.Exit(2)
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
    from .metrics import aggregate
    from .pricing import load_prices
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
        f"{outcome.elapsed_s:.1f} s; reports in {out}"
    )
    if outcome.errors:
        typer.echo(
            f"{outcome.errors} rows failed; run the same command again to retry them", err=True
        )
        raise typer.Exit(1)
