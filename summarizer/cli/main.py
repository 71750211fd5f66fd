"""The ``summarizer`` command line (Typer: typed options, generated ``--help``)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    help="Keep LLM agents working past their context window.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"summarizer {version('summarizer')}")
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


@app.command()
def demo(
    turns: Annotated[int, typer.Option(help="Agent turns in the scripted session.")] = 120,
    context_window: Annotated[
        int, typer.Option(help="Window of the test model, in tokens.")
    ] = 16_000,
    model: Annotated[str, typer.Option(help="Model name sent upstream.")] = "gpt-4o-mini",
    via: Annotated[
        str,
        typer.Option(help="'proxy' (summarizer serve on a free local port) or 'library' (wrap)."),
    ] = "proxy",
    api: Annotated[
        str,
        typer.Option(
            help="The agent's API: 'chat' (chat completions, the openai SDK), 'messages' "
            "(Anthropic's Messages API, the anthropic SDK) or 'responses' (OpenAI's Responses "
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

    Needs no key and no network: the model is summarizer.testing on 127.0.0.1 (scripted agent
    replies; summaries written by a heuristic), the proxy keeps its checkpoints in a temporary
    folder, and the agent is the real openai SDK. Prints each compaction as it happens, then what
    the model received over the session.
    """
    from .demo import TurnCompaction, run_coding_session

    if via not in ("proxy", "library"):
        typer.echo("error: --via must be 'proxy' or 'library'", err=True)
        raise typer.Exit(2)
    if api not in ("chat", "messages", "responses"):
        typer.echo("error: --api must be 'chat', 'messages' or 'responses'", err=True)
        raise typer.Exit(2)
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
        score = "n/a" if event.score is None else f"{event.score:.2f}"
        prompt = event.summary_prompt_tokens or 0
        cached = event.summary_cached_tokens or 0
        share = f"{cached / prompt:.0%}" if prompt else "n/a"
        typer.echo(
            f"turn {seen.turn:>3}  compaction {counter['n']:>2}: "
            f"{event.tokens_before:>6,} -> {event.tokens_after:>6,} tokens, fact score {score}, "
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
    stats = run_coding_session(
        turns=turns,
        context_window=context_window,
        model=model,
        via="proxy" if via == "proxy" else "library",
        on_compaction=show,
        api="messages" if api == "messages" else "responses" if api == "responses" else "chat",
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
        serve_with_test_upstream(Settings(port=port, context_window=context_window, **kept))


def _kept_settings(folder: Path) -> dict[str, Any]:
    """The ``Settings`` fields a demo that keeps serving runs with: its store in ``folder``,
    conversations recorded, the page on when this version has it."""
    from ..proxy.settings import Settings

    kept: dict[str, Any] = {"db": folder / "checkpoints.db", "record": True}
    if "ui" in Settings.model_fields:
        kept["ui"] = True
    return kept


@app.command()
def serve(
    host: Annotated[
        str | None, typer.Option(help="Interface to listen on. (default: 127.0.0.1)")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on. (default: 8787)")] = None,
    upstream: Annotated[
        str | None,
        typer.Option(
            help="OpenAI-compatible base URL to forward to. "
            "(default: $OPENAI_BASE_URL, else https://api.openai.com/v1)"
        ),
    ] = None,
    db: Annotated[
        Path | None,
        typer.Option(
            help="SQLite checkpoint file. (default: checkpoints.db in the user state folder)"
        ),
    ] = None,
    context_window: Annotated[
        int | None,
        typer.Option(help="Window in tokens for every model. (default: each model's known window)"),
    ] = None,
    trigger_ratio: Annotated[
        float | None, typer.Option(help="Compact above this share of the window. (default: 0.8)")
    ] = None,
    target_ratio: Annotated[
        float | None, typer.Option(help="Compact down to this share of the window. (default: 0.4)")
    ] = None,
    keep_recent_tokens: Annotated[
        int | None,
        typer.Option(help="Recent tokens kept verbatim. (default: as many as fit the target)"),
    ] = None,
    max_summary_tokens: Annotated[
        int | None, typer.Option(help="Cap on a summary's length. (default: 2000)")
    ] = None,
    summary_cap_field: Annotated[
        str | None,
        typer.Option(
            help="The field of the summary request that carries its cap: 'auto' (the agent's "
            "own, else max_completion_tokens), 'max_tokens' (llama-cpp-python's server reads "
            "only this one) or 'max_completion_tokens'. (default: auto)"
        ),
    ] = None,
    summary_model: Annotated[
        str | None, typer.Option(help="Model that writes summaries. (default: the agent's model)")
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(
            help="'self-summary' (the model summarizes old turns) or 'hybrid' (old tool outputs "
            "are masked first; a summary only when that is not enough). (default: self-summary)"
        ),
    ] = None,
    log_format: Annotated[
        str | None, typer.Option(help="Log lines as 'text' or 'json'. (default: text)")
    ] = None,
    log_level: Annotated[str | None, typer.Option(help="Log level. (default: info)")] = None,
    max_body_bytes: Annotated[
        int | None, typer.Option(help="Largest request body accepted. (default: 33554432 (32 MiB))")
    ] = None,
    sessions_api: Annotated[
        str | None,
        typer.Option(
            help="GET /v1/summarizer/sessions/ID: 'keyed' (only requests with a key, each for "
            "its own sessions), 'all' (keyless requests too: they share one namespace) or "
            "'off' (404). (default: keyed)"
        ),
    ] = None,
    client_key: Annotated[
        list[str] | None,
        typer.Option(
            "--client-key",
            metavar="KEY",
            help="A key clients must send (repeatable; or SUMMARIZER_CLIENT_KEYS=KEY1,KEY2). "
            "With any set, every request but /healthz and /metrics needs one of them. "
            "A value sha256:HEX (the key's SHA-256 in hex) keeps the key off the command line. "
            "(default: none, any client may use the proxy)",
        ),
    ] = None,
    body_read_timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds to wait for each next piece of a request body before answering 408. "
            "(default: 30)"
        ),
    ] = None,
    responses_upstream: Annotated[
        str | None,
        typer.Option(
            help="What serves /v1/responses: 'responses' (the upstream has the Responses API) "
            "or 'chat' (a chat-completions-only upstream such as vLLM, llama.cpp or Ollama: "
            "each request is translated; see the README for what is lost). "
            "(default: responses)"
        ),
    ] = None,
    fast_path: Annotated[
        bool | None,
        typer.Option(
            "--fast-path/--no-fast-path",
            help="Read a chat request that extends its conversation's previous body from its "
            "new bytes only (the same bytes go upstream either way). (default: on)",
            show_default=False,
        ),
    ] = None,
    record: Annotated[
        bool | None,
        typer.Option(
            "--record/--no-record",
            help="Keep each session's latest conversation (secrets redacted) for "
            "'summarizer export' and /ui. (default: off: counts and summaries only)",
            show_default=False,
        ),
    ] = None,
    test_upstream: Annotated[
        bool,
        typer.Option(
            "--test-upstream",
            help="Forward to the built-in test model (started on 127.0.0.1; it answers what it "
            "received and writes heuristic summaries) instead of an upstream: point a real agent "
            "at the proxy with no key and no network. Its checkpoints go to test-upstream.db in "
            "the user state folder unless --db is given; the window is 16000 unless "
            "--context-window is.",
        ),
    ] = False,
    cache_breakpoints: Annotated[
        str | None,
        typer.Option(
            help="Anthropic cache breakpoints on /v1/messages: 'managed' (placed at the end of "
            "the system prompt, the summary and the newest message when a request has none) or "
            "'client' (left as the client set them). (default: managed)"
        ),
    ] = None,
) -> None:
    """Run the OpenAI-compatible proxy: point an agent's base URL at http://HOST:PORT/v1.

    Every flag can also be set in the environment: SUMMARIZER_CONTEXT_WINDOW for
    --context-window, and so on; a flag wins over the environment. SUMMARIZER_UPSTREAM_API_KEY,
    when set, is sent upstream instead of each client's own key (there is deliberately no flag
    for it: command lines are visible to other users of the machine). With it and no
    --client-key, serve refuses any interface but loopback.
    """
    from ..core.errors import SummarizerError
    from ..proxy.server import serve as run_server
    from ..proxy.settings import Settings, default_db_path

    if test_upstream:
        if upstream is not None:
            typer.echo("error: --test-upstream and --upstream name two upstreams", err=True)
            raise typer.Exit(2)
        db = db or default_db_path().with_name("test-upstream.db")
        context_window = context_window or 16_000
    try:
        settings = Settings.from_env(
            host=host,
            port=port,
            upstream=upstream,
            db=db,
            context_window=context_window,
            trigger_ratio=trigger_ratio,
            target_ratio=target_ratio,
            keep_recent_tokens=keep_recent_tokens,
            max_summary_tokens=max_summary_tokens,
            summary_cap_field=summary_cap_field,
            summary_model=summary_model,
            policy=policy,
            log_format=log_format,
            log_level=log_level,
            max_body_bytes=max_body_bytes,
            sessions_api=sessions_api,
            client_keys=client_key or None,
            body_read_timeout=body_read_timeout,
            cache_breakpoints=cache_breakpoints,
            responses_upstream=responses_upstream,
            record=record,
            fast_path=fast_path,
        )
        if test_upstream:
            from .test_upstream_serve import serve_with_test_upstream

            serve_with_test_upstream(settings)
        else:
            run_server(settings)
    except SummarizerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


@app.command()
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


def _register_subcommands() -> None:
    from ..evaluation.command import eval_command
    from .convert import convert_app
    from .sessions import export_command, sessions_command, show_command

    app.command("eval")(eval_command)
    app.add_typer(convert_app, name="convert")
    app.command("sessions")(sessions_command)
    app.command("show")(show_command)
    app.command("export")(export_command)


_register_subcommands()


def main() -> None:
    """Entry point of the ``summarizer`` console script."""
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    app()
