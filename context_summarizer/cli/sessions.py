"""``summarizer sessions`` and ``show``: what the proxy did, read from its store (``export``
writes it out).

These are the operator's tools: they read the store directly, every tenant's sessions (each
shown by a label made from its namespace hash, never a credential). The proxy's own endpoints
(``/v1/summarizer/sessions/ID``, ``/ui``) show each credential only its own. Which store they
read, when none is named: ``session_stores``.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from ..core.activity import SessionRow, namespace_label
from ..core.session_view import SessionView, row_json, view_json
from ..stores.session_views import load_session_view
from .printable import printable
from .session_stores import OpenStore, StoreOption, opened

_AGO = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float | None = None) -> float:
    """``30m``, ``2h``, ``7d`` (ago) or an ISO date/time (UTC unless it says) as Unix seconds."""
    now = time.time() if now is None else now
    if match := _AGO.fullmatch(text.strip()):
        return now - float(match[1]) * _UNITS[match[2]]
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise typer.BadParameter(
            f"{text!r} is neither a duration (30m, 2h, 7d) nor an ISO date (2026-12-01)"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def when(seconds: float) -> str:
    """Unix seconds as ``YYYY-MM-DD HH:MM:SS`` (UTC)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _share(row: SessionRow) -> str:
    share = row.cache_share
    return "-" if share is None else f"{share:.0%}"


def sessions_command(
    store: StoreOption = None,
    since: Annotated[
        str | None, typer.Option(help="Only sessions seen since: 30m, 2h, 7d, or an ISO date.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per line (its store in 'store').")
    ] = False,
) -> None:
    """List the sessions the proxy served, newest first: requests, compactions, tokens."""
    cutoff = parse_since(since) if since else None
    with opened(store) as stores:
        listed = [(found, found.log.list_sessions(since=cutoff)) for found in stores]
    if as_json:
        for found, rows in listed:
            for row in rows:
                typer.echo(json.dumps({**row_json(row), "store": found.name}))
        return
    for number, (found, rows) in enumerate(listed):
        if number:
            typer.echo("")
        _print_sessions(found, rows, since)


def _print_sessions(found: OpenStore, rows: list[SessionRow], since: str | None) -> None:
    """One store's sessions as a table, under the store's name."""
    typer.echo(f"store {printable(found.name)}")
    if not rows and since:
        typer.echo(f"no sessions since {printable(since)}")
    elif not rows:
        typer.echo(
            "no sessions logged (the proxy logs every request it serves, wrap() every call it "
            "manages, ContextManager each call it observes; summarizer show SESSION --store "
            "PATH shows a session's checkpoints all the same)"
        )
    if not rows:
        return
    header = (
        "session",
        "namespace",
        "model",
        "requests",
        "compactions",
        "tokens now/peak/window",
        "cached",
        "last seen (UTC)",
    )
    table = [
        (
            printable(row.session),
            row.label,
            printable(row.model),
            str(row.requests),
            str(row.compactions),
            f"{row.tokens_now:,}/{row.tokens_peak:,}/{row.window:,}",
            _share(row),
            when(row.last_seen),
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in (header, *table)) for i in range(len(header))]
    for line in (header, *table):
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))


def _views(log: Any, session: str) -> list[SessionView]:
    """The session in every namespace that has it (an operator's view)."""
    namespaces = {r.namespace for r in log.session_requests(None, session)}
    namespaces |= {r.namespace for r in log.recordings(session=session)}
    if not namespaces:  # checkpoints without a logged request (a store from before the log)
        namespaces = {row.namespace for row in log.list_sessions() if row.session == session}
    # Checkpoints alone: wrap()'s and ContextManager's (their namespace is "" unless given).
    namespaces = namespaces or {""}
    views = (load_session_view(log, namespace, session) for namespace in sorted(namespaces))
    return [view for view in views if view is not None]


def show_command(
    session: Annotated[str, typer.Argument(help="The session id (x-summarizer-session).")],
    store: StoreOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="The whole view as JSON.")] = False,
) -> None:
    """Show one session: each compaction's summary, ledger, score, missed facts and tokens."""
    with opened(store) as stores:
        found = [(each, _views(each.log, session)) for each in stores]
    shown = [(each, views) for each, views in found if views]
    if not shown:
        where = " or ".join(each.name for each, _ in found)
        typer.echo(printable(f"error: no session {session!r} in {where}"), err=True)
        raise typer.Exit(1)
    for each, views in shown:
        for view in views:
            if as_json:
                typer.echo(json.dumps(view_json(view)))
            else:
                typer.echo(f"store {printable(each.name)}")
                _print_view(view)


def _print_view(view: SessionView) -> None:
    row = view.row
    typer.echo(f"session {printable(view.session)}  ({namespace_label(view.namespace)})")
    if row is not None:
        typer.echo(
            f"  {row.requests} requests, {row.compactions} compactions, "
            f"model {printable(row.model)}; "
            f"tokens now {row.tokens_now:,}, peak {row.tokens_peak:,}, window {row.window:,}; "
            f"cached {_share(row)}; {when(row.first_seen)} to {when(row.last_seen)} UTC"
        )
    if view.recall_calls:
        spans = ", ".join(f"{span} ({times})" for span, times in view.recalled.items())
        typer.echo(
            f"  recall: {view.recall_calls} calls answered; spans read back (requests): "
            + (spans or "none")
        )
    if not view.compactions:
        typer.echo("  no compaction yet")
    for number, compaction in enumerate(view.compactions, start=1):
        named = "n/a" if compaction.score is None else f"{compaction.score:.0%}"
        latency = "" if compaction.latency_s is None else f", {compaction.latency_s:.1f} s"
        if compaction.ahead:
            latency += " waited: drafted ahead of time"
        typer.echo("")
        typer.echo(
            f"compaction {number} at {when(compaction.created_at)} UTC "
            f"({printable(compaction.trigger)}{latency}): {compaction.tokens_before:,} -> "
            f"{compaction.tokens_after:,} tokens, summary names {named} of the ledger's facts, "
            f"summary by {printable(compaction.summary_model)}"
            + (f", FAILED: {printable(compaction.failure)}" if compaction.failure else "")
        )
        for summary in compaction.summaries:
            typer.echo(f"  summary of messages {summary.start}-{summary.end - 1}:")
            # Lines end at a newline only: a lone carriage return is shown, never obeyed.
            for line in (summary.summary or "(mechanical fallback)").split("\n"):
                typer.echo(f"    | {printable(line.removesuffix(chr(13)), lines=True)}")
            if summary.ledger:
                typer.echo(f"  ledger ({len(summary.ledger)} facts):")
                for fact in summary.ledger:
                    kind, text = fact.get("kind", "?"), fact.get("text", "")
                    typer.echo(f"    - [{printable(kind)}] {printable(text)}")
            if summary.missed:
                typer.echo(f"  missed by the summary ({len(summary.missed)}, kept in the ledger):")
                for text in summary.missed:
                    typer.echo(f"    - {printable(text)}")
    if not view.recorded:
        typer.echo("")
        typer.echo("  (conversation not recorded: run the proxy with --record to keep it)")
