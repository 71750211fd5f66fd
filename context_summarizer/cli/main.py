"""The ``summarizer`` command line (Typer: typed options, generated ``--help``).

``demo`` and ``count`` are declared here; the other commands live in modules of their own and
are imported only when run or asked for their help (``Commands.lazy``), so ``summarizer --help``
and ``--version`` import neither the evaluator, the proxy, the ``openai`` SDK nor pydantic.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import typer

from .help_format import ClickStyleCommand
from .lazy import LazyCommand, LazyGroup


class Commands(LazyGroup):
    """``summarizer``'s commands: ``demo`` and ``count`` below, then these, in this order."""

    lazy: ClassVar[dict[str, LazyCommand]] = {
        "serve": LazyCommand(
            ".serve",
            "serve_app",
            "Run the OpenAI-compatible proxy: point an agent's base URL at http://HOST:PORT/v1.",
        ),
        "eval": LazyCommand(
            "..evaluation.command",
            "eval_command",
            "Score compaction strategies on agent trajectories, and say which proxy policy to use.",
        ),
        "sessions": LazyCommand(
            ".sessions",
            "sessions_command",
            "List the sessions the proxy served, newest first: requests, compactions, tokens.",
        ),
        "show": LazyCommand(
            ".sessions",
            "show_command",
            "Show one session: each compaction's summary, ledger, score, missed facts and tokens.",
        ),
        "export": LazyCommand(
            ".export",
            "export_command",
            "Write recorded conversations as a `summarizer eval` dataset, or compactions as "
            "training data (needs `serve --record`, or `--eval DIR`).",
        ),
        "convert": LazyCommand(
            ".convert",
            "convert_app",
            "Convert agent trajectories from other tools into an evaluation dataset (JSONL).",
        ),
    }


app = typer.Typer(
    cls=Commands,
    help="Keep LLM agents working past their context window.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"summarizer {version('context-summarizer')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Keep LLM agents working past their context window."""


@app.command(cls=ClickStyleCommand)
def demo(
    turns: Annotated[int, typer.Option(help="Agent turns in the scripted session.")] = 120,
    context_window: Annotated[
        int, typer.Option(help="Window of the test model, in tokens.")
    ] = 16_000,
    model: Annotated[str, typer.Option(help="Model name sent upstream.")] = "gpt-4o-mini",
    via: Annotated[
        Literal["proxy", "library"],
        typer.Option(help="proxy (summarizer serve on a free local port) or library (wrap())."),
    ] = "proxy",
    api: Annotated[
        Literal["chat", "messages", "responses"],
        typer.Option(
            help="The agent's API: chat (chat completions, the openai SDK), messages "
            "(Anthropic's Messages API, the anthropic SDK) or responses (OpenAI's Responses "
            "API, the whole input each turn); the last two through the proxy."
        ),
    ] = "chat",
    keep_serving: Annotated[
        bool,
        typer.Option(
            "--keep-serving",
            help="After the session, keep the proxy serving on --port in front of the test "
            "model, with the session's store (kept in a temporary folder it names): look at it "
            "with summarizer sessions, /ui, or point a real agent at it. Ctrl-C stops it.",
        ),
    ] = False,
    port: Annotated[int, typer.Option(help="The port --keep-serving serves on.")] = 8787,
) -> None:
    """Run a long scripted tool-using agent through summarizer against a built-in test model.

    Needs no key and no network: the model is context_summarizer.testing on 127.0.0.1 (scripted
    agent replies; summaries written by a heuristic), the proxy keeps its checkpoints in a temporary
    folder, and the agent is the real openai SDK. Prints each compaction as it happens, then what
    the model received over the session.
    """
    from .demo import TurnCompaction, run_coding_session

    if api != "chat" and via != "proxy":
        typer.echo(f"error: --api {api} runs through the proxy (--via proxy)", err=True)
        raise typer.Exit(2)
    if keep_serving and via != "proxy":
        typer.echo("error: --keep-serving keeps the proxy serving (--via proxy)", err=True)
        raise typer.Exit(2)
    kept: dict[str, Any] = {}
    if keep_serving:
        import tempfile

        kept = _kept_settings(Path(tempfile.mkdtemp(prefix="summarizer-demo-")))
    counter = {"n": 0}

    def show(seen: TurnCompaction) -> None:
        event = seen.event
        if not event.applied:
            typer.echo(f"turn {seen.turn:>3}  summaries failed ({event.failure}): sent unchanged")
            return
        counter["n"] += 1
        lines = [line.strip() for line in event.summary.splitlines()]
        first = [line for line in lines if line and not line.startswith("#")][:2]
        named = "n/a" if event.score is None else f"{event.score:.0%}"
        prompt = event.summary_prompt_tokens or 0
        cached = event.summary_cached_tokens or 0
        share = f"{cached / prompt:.0%}" if prompt else "n/a"
        typer.echo(
            f"turn {seen.turn:>3}  compaction {counter['n']:>2}: "
            f"{event.tokens_before:>6,} -> {event.tokens_after:>6,} tokens, facts named {named}, "
            f"summary request cached {share}"
            + (f", degraded: {','.join(event.degraded)}" if event.degraded else "")
            + (f", FAILED: {event.failure}" if event.failure else "")
        )
        for line in first:
            typer.echo(f"    | {line[:110]}")

    where = "the proxy" if via == "proxy" else "wrap()"
    if api == "messages":
        where += "'s /v1/messages (anthropic SDK)"
    elif api == "responses":
        where += "'s /v1/responses (openai SDK, client.responses)"
    typer.echo(
        f"scripted coding session through {where}: {turns} turns, "
        f"{context_window:,}-token window, model {model}"
    )
    typer.echo(FACTS_LEGEND)
    stats = run_coding_session(
        turns=turns,
        context_window=context_window,
        model=model,
        via=via,
        on_compaction=show,
        api=api,
        **kept,
    )
    rows = [
        ("agent requests", f"{stats.agent_requests}"),
        ("summary requests", f"{stats.summary_requests}"),
        ("compactions", f"{stats.compactions}"),
        (
            "largest request vs window",
            f"{stats.largest_prompt_tokens:,} / {stats.context_window:,} "
            f"({stats.largest_prompt_tokens / stats.context_window:.0%})",
        ),
        (
            "append-only between compactions",
            f"{stats.append_only_pairs}/{stats.consecutive_pairs - stats.compaction_boundaries} "
            f"({stats.append_only_share_between_compactions:.0%})",
        ),
        (
            "summary requests sharing the live prefix",
            f"{stats.summary_prefix_shared}/{stats.summary_requests}",
        ),
        ("prompt tokens reported cached", f"{stats.cache_share:.1%}"),
        (
            "planted facts still in context",
            f"{len(stats.planted_kept)}/{len(stats.planted_kept) + len(stats.planted_lost)}",
        ),
    ]
    if stats.session is not None and stats.stored_checkpoints is not None:
        rows.append(
            (
                "checkpoints at GET /v1/summarizer/sessions/{id}",
                f"{stats.stored_checkpoints} (session {stats.session})",
            )
        )
    width = max(len(name) for name, _ in rows)
    typer.echo("")
    for name, value in rows:
        typer.echo(f"{name:<{width}}  {value}")
    for lost in stats.planted_lost:
        typer.echo(f"lost: {lost}")
    if stats.planted_lost or stats.largest_prompt_tokens > stats.context_window:
        raise typer.Exit(1)
    if keep_serving:
        from ..proxy.settings import Settings
        from .test_upstream_serve import serve_with_test_upstream

        typer.echo("")
        # The demo's agent used the key "demo-key": its session is that key's to read.
        serve_with_test_upstream(
            Settings(port=port, context_window=context_window, **kept),
            ui_fragment="#key=demo-key",
        )


FACTS_LEGEND = (
    "each compaction: tokens before -> after; facts named: the share of the facts extracted from\n"
    "the replaced turns (the ledger, sent beside the summary) that the summary itself names (n/a:\n"
    "no model summary); summary request cached: the share of its prompt the upstream had cached"
)
"""What the demo's compaction lines mean, printed once under its header."""


def _kept_settings(folder: Path) -> dict[str, Any]:
    """The ``Settings`` fields a demo that keeps serving runs with: its store in ``folder``,
    conversations recorded, the page on."""
    return {"db": folder / "checkpoints.db", "record": True, "ui": True}


@app.command(cls=ClickStyleCommand)
def count(
    path: Annotated[Path, typer.Argument(help="JSON file: a message list or a request body.")],
    model: Annotated[str, typer.Option(help="Model whose encoding to count with.")] = "gpt-4o",
    tokenizer: Annotated[
        str | None, typer.Option(help="tiktoken encoding name, or 'approximate'.")
    ] = None,
) -> None:
    """Count the prompt tokens of a conversation, offline."""
    from ..core.errors import SummarizerError
    from ..core.messages import validate_messages
    from ..loaders.tokenizers import make_counter

    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        typer.echo(f"error: cannot read {path}: {exc}", err=True)
        raise typer.Exit(2) from exc
    body = data if isinstance(data, dict) else {"messages": data}
    try:
        messages = validate_messages(body.get("messages"))
        counter = make_counter(body.get("model", model), tokenizer=tokenizer)
    except SummarizerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    total = counter.count_messages(messages) + counter.count_tools(body.get("tools"))
    typer.echo(f"{total} tokens ({len(messages)} messages, encoding {counter.name})")


def main() -> None:
    """Entry point of the ``summarizer`` console script."""
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    app()
