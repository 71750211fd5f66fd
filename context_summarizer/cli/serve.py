"""``summarizer serve``: the proxy's command line.

Its flags are the declared settings (``proxy.settings.declared``: one for each, made by
``cli.options``), besides ``--config`` and the test-model options, which are the command's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..proxy.settings import declared
from .options import SettingsCommand, with_setting_options

EPILOG = (
    "Exit status: 0 when stopped (Ctrl-C), 2 for a bad flag, variable or config file, "
    "3 when the server cannot start (the port is taken)."
)
"""What ``serve --help`` ends with."""


def _serve(
    *,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help="TOML file of settings (the keys of the settings tables in docs/configuration.md) "
            "and per-model routes ([[models]]: name, upstream, api_key_env and the compaction "
            "settings); flags and SUMMARIZER_* variables override it. "
            "[default: $SUMMARIZER_CONFIG, else none]",
        ),
    ] = None,
    test_upstream: Annotated[
        bool,
        typer.Option(
            "--test-upstream",
            metavar="",
            help="Forward to the built-in test model (started on 127.0.0.1; it answers what it "
            "received and writes heuristic summaries) instead of an upstream: point a real agent "
            "at the proxy with no key and no network. Its checkpoints go to test-upstream.db in "
            "the user state folder (summarizer sessions reads it too) unless --db or --store is "
            "given; the window is 16000 unless --context-window is.",
            rich_help_panel="Testing",
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
            "done, get the usual answer. See docs/operating.md, 'Trying it with the test model'.",
            rich_help_panel="Testing",
        ),
    ] = None,
    **settings: Any,
) -> None:
    """Run the OpenAI-compatible proxy: point an agent's base URL at http://HOST:PORT/v1.

    Every setting is also a SUMMARIZER_* variable and a key of the --config file, named after
    it (--context-window: SUMMARIZER_CONTEXT_WINDOW, context_window); a flag wins over the
    variable, which wins over the file. SUMMARIZER_UPSTREAM_API_KEY, when set, is sent upstream
    instead of each client's own key (deliberately no flag: command lines are visible to other
    users of the machine); with it and no --client-key, serve refuses any interface but loopback.
    """
    from ..core.errors import SummarizerError
    from ..proxy.server import serve as run_server
    from ..proxy.settings import Settings

    if test_upstream:
        if settings.get("upstream") is not None:
            typer.echo("error: --test-upstream and --upstream name two upstreams", err=True)
            raise typer.Exit(2)
        settings["context_window"] = settings.get("context_window") or 16_000
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
        chosen = Settings.from_env(config_file=config, **settings)
        if test_upstream:
            from .test_upstream_serve import serve_with_test_upstream

            if settings.get("db") is None and chosen.store is None:  # a Redis store as given
                from .session_stores import default_test_upstream_db

                # Its own file: the test model's sessions and calibration stay apart from a
                # real upstream's (summarizer sessions reads both).
                chosen = chosen.model_copy(update={"db": default_test_upstream_db()})

            serve_with_test_upstream(chosen, script=script)
        else:
            run_server(chosen)
    except SummarizerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


serve_command = with_setting_options(_serve, declared(), before="test_upstream")
"""The ``serve`` command: ``_serve`` with a flag per declared setting."""

serve_app = typer.Typer(add_completion=False, rich_markup_mode=None)
"""What ``summarizer`` loads for ``serve`` (``cli.lazy``): the command, its help laid out by
heading, ending with ``EPILOG``."""
serve_app.command("serve", cls=SettingsCommand, epilog=EPILOG)(serve_command)
