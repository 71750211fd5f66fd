"""``summarizer serve``: the proxy's command line (every ``Settings`` field as a flag)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def serve_command(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help="TOML file of settings and per-model routes ([[models]]: upstream, "
            "api_key_env, context_window, summary_model, thresholds); flags and SUMMARIZER_* "
            "variables override it. See the README's 'Configuration file'. "
            "(default: $SUMMARIZER_CONFIG, else none)",
        ),
    ] = None,
    host: Annotated[
        str | None, typer.Option(help="Interface to listen on. (default: 127.0.0.1)")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on. (default: 8787)")] = None,
    upstream: Annotated[
        str | None,
        typer.Option(
            help="OpenAI-compatible base URL to forward to. "
            "(default: the --config file's, else $OPENAI_BASE_URL, else https://api.openai.com/v1)"
        ),
    ] = None,
    db: Annotated[
        Path | None,
        typer.Option(
            help="SQLite checkpoint file. (default: checkpoints.db in the user state folder)"
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            help="A Redis URL (redis://HOST:PORT/DB or rediss://...) holding checkpoints, leases "
            "and calibration for several replicas; instead of --db. (default: none, SQLite)"
        ),
    ] = None,
    lease_ttl: Annotated[
        float | None,
        typer.Option(
            help="Seconds a session's compaction lease outlives a replica that died holding it "
            "(how long that session then waits). (default: 30)"
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
    prepare_ratio: Annotated[
        str | None,
        typer.Option(
            help="Ahead-of-time compaction: above this share of the window (between the target "
            "and the trigger) the summary is written in the background while requests go out "
            "as they are, and the request that crosses the trigger uses it instead of waiting "
            "for the model. 'off' (or 0) turns it off. (default: midway between the target and "
            "the trigger: 0.6)"
        ),
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
            help="'self-summary' (the model summarizes), 'hybrid' (old tool outputs masked "
            "first, a summary if needed), 'masking' (masked first, the fact ledger if needed) or "
            "'ledger-only' (the fact ledger); the last two call no model. (default: self-summary)"
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
    allow_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-origin",
            metavar="ORIGIN",
            help="A web origin (scheme://host[:port]) whose pages may use the proxy, answered "
            "with CORS (repeatable; or SUMMARIZER_ALLOW_ORIGINS=O1,O2). Requests from any other "
            "origin's pages (Origin, Sec-Fetch-Site: cross-site or same-site) and bodies that "
            "are not JSON get 403, so no web page can spend the server's key. (default: none)",
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
            "new bytes only, and stream it upstream as it arrives (the same bytes go upstream "
            "either way). (default: on)",
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
            "the user state folder unless --db or --store is given; the window is 16000 unless "
            "--context-window is.",
        ),
    ] = False,
    test_script: Annotated[
        Path | None,
        typer.Option(
            "--test-script",
            metavar="FILE",
            help="With --test-upstream: a JSON list of steps the test model takes, one per agent "
            'request that offers the step\'s tools: {"tool": NAME, "arguments": {...}} (or '
            '"input": "raw text" for a custom tool), {"calls": [...]} (parallel calls), '
            '{"text": "..."} (a final answer). Other requests, and all once the script is '
            "done, get the usual answer. See the README's 'Seeing what happened'.",
        ),
    ] = None,
    ui: Annotated[
        bool | None,
        typer.Option(
            "--ui/--no-ui",
            help="Serve a read-only web page at /ui: sessions, a token chart per session, each "
            "summary next to what it replaced; same key rules as --sessions-api. "
            "(default: off)",
            show_default=False,
        ),
    ] = None,
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

    Every flag can also be set in the environment (SUMMARIZER_CONTEXT_WINDOW for
    --context-window, and so on) and in the --config file; a flag wins over the environment,
    which wins over the file. SUMMARIZER_UPSTREAM_API_KEY,
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
        context_window = context_window or 16_000
    elif test_script is not None:
        typer.echo(
            "error: --test-script needs --test-upstream (it scripts the test model)", err=True
        )
        raise typer.Exit(2)
    script = None
    if test_script is not None:
        from ..testing.tool_script import ToolScriptError, load_tool_script

        try:
            script = load_tool_script(test_script)
        except ToolScriptError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
    try:
        settings = Settings.from_env(
            config_file=config,
            host=host,
            port=port,
            upstream=upstream,
            db=db,
            store=store,
            lease_ttl=lease_ttl,
            context_window=context_window,
            trigger_ratio=trigger_ratio,
            target_ratio=target_ratio,
            prepare_ratio=prepare_ratio,
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
            allow_origins=allow_origin or None,
            body_read_timeout=body_read_timeout,
            cache_breakpoints=cache_breakpoints,
            responses_upstream=responses_upstream,
            record=record,
            fast_path=fast_path,
            ui=ui,
        )
        if test_upstream:
            from .test_upstream_serve import serve_with_test_upstream

            if db is None and settings.store is None:  # a Redis store is used as given
                test_db = default_db_path().with_name("test-upstream.db")
                settings = settings.model_copy(update={"db": test_db})

            serve_with_test_upstream(settings, script=script)
        else:
            run_server(settings)
    except SummarizerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
