"""What ``summarizer serve`` says when it starts: where it forwards, where state lives, which
window rule applies, who may use it, and where to look at what it did. Never a credential."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

from ..core.results import MODEL_FREE_POLICIES
from ..stores.redis import display_url
from .settings import Settings

logger = logging.getLogger("context_summarizer.proxy")


def store_line(settings: Settings) -> str:
    """Where checkpoints and the activity log live."""
    if settings.store is not None:
        return f"{display_url(settings.store)} (Redis: shared by every replica using it)"
    where = settings.db_path()
    if str(where) == ":memory:":
        return ":memory: (SQLite in memory: nothing survives a restart)"
    return f"{Path(where)} (SQLite)"


def window_line(settings: Settings) -> str:
    """The window rule, and the thresholds."""
    config = settings.compaction
    if config.context_window is not None:
        rule = f"{config.context_window:,} tokens for every model"
    else:
        rule = (
            "each model's known window; a model the registry does not know is forwarded "
            "unmanaged (set --context-window)"
        )
    if config.prepare_ratio is not None:
        ahead = f", drafted ahead above {config.prepare_ratio:.0%}"
    elif config.policy in MODEL_FREE_POLICIES:
        ahead = " (no drafts ahead: this policy calls no model)"
    else:
        ahead = " (no drafts ahead: --prepare-ratio off)"
    return (
        f"{rule}; compact above {config.trigger_ratio:.0%} of it{ahead}, down to "
        f"{config.target_ratio:.0%}, policy {config.policy}"
    )


def tenancy_line(settings: Settings) -> str:
    """Who may use the proxy, whose key goes upstream, and who reads sessions."""
    keys = len(settings.client_keys)
    who = f"{keys} client key(s) required" if keys else "open: any client that can connect"
    upstream = (
        "the server's key (SUMMARIZER_UPSTREAM_API_KEY) upstream"
        if settings.upstream_api_key is not None
        else "each client's own key upstream"
    )
    keyed = sum(1 for entry in settings.models if entry.api_key is not None)
    if keyed:
        upstream += f" (the server's own key for {keyed} configured model(s))"
    return f"{who}; {upstream}; sessions API {settings.sessions_api}"


def banner_lines(
    settings: Settings, *, upstream_note: str = "", ui_fragment: str = ""
) -> list[str]:
    """The banner, a line each (``upstream_note`` follows the upstream's URL; ``ui_fragment``
    the page's address, e.g. ``#key=...`` for a demo's own key)."""
    base = f"http://{settings.host}:{settings.port}"
    ui = settings.ui
    record = (
        "on: each session's latest conversation is kept, secrets redacted"
        if settings.record
        else "off: counts and summaries only (--record keeps conversations for export)"
    )
    store_arg = display_url(settings.store) if settings.store else settings.db_path()
    look = [
        f"summarizer sessions --store {store_arg}",
        f"{base}/ui{ui_fragment}" if ui else "/ui is off (--ui)",
        f"{base}/metrics",
    ]
    return [
        f"summarizer {version('context-summarizer')} proxy: point agents at {base}/v1",
        f"  upstream   {display_url(settings.upstream)}{upstream_note}",
        *model_lines(settings),
        f"  store      {store_line(settings)}",
        f"  window     {window_line(settings)}",
        f"  tenancy    {tenancy_line(settings)}",
        f"  agents     {agents_line(settings, base)}",
        f"  recording  {record}",
        f"  look       {' | '.join(look)}",
    ]


CLAUDE_CODE_WINDOW = 64_000
"""The smallest window Claude Code works in through the proxy, with its reply cap at
``CLAUDE_CODE_REPLY_CAP``: its tools and system prompt take 11,000 to 24,000 tokens before the
first turn, and the target (40% of what the reply cap leaves) must stand above them."""
CLAUDE_CODE_REPLY_CAP = 8_000


def agents_line(settings: Settings, base: str) -> str:
    """How to point the coding agents at the proxy, and whether the window suits Claude Code."""
    window = settings.compaction.context_window
    claude = (
        f"Claude Code: ANTHROPIC_BASE_URL={base} CLAUDE_CODE_MAX_OUTPUT_TOKENS="
        f"{CLAUDE_CODE_REPLY_CAP}, in a window of {CLAUDE_CODE_WINDOW:,}+ tokens"
    )
    if window is not None and window < CLAUDE_CODE_WINDOW:
        claude += f" (this {window:,} is too small for it)"
    return f'{claude}; Codex: openai_base_url = "{base}/v1" (docs/agents.md)'


def model_lines(settings: Settings) -> list[str]:
    """A line per ``[[models]]`` entry of the config file: where it goes, with which key, in
    which window, under which policy."""
    lines = []
    for entry in settings.models:
        upstream = display_url(entry.upstream) if entry.upstream else "the top-level upstream"
        if entry.api_key is not None:
            key = "its own key"
        elif entry.upstream is None and settings.upstream_api_key is not None:
            key = "the top-level key"
        else:
            key = "the client's key"
        config = entry.compaction(settings.compaction)
        window = config.context_window
        size = f"{window:,}-token window" if window else "the registry's window"
        lines.append(
            f"  model      {entry.name} -> {upstream} ({key}, {size}, policy {config.policy})"
        )
    return lines


def print_banner(settings: Settings, lines: Sequence[str]) -> None:
    """To standard error as it is, or one log line each with JSON logs; nothing when the log
    level is above ``info``."""
    if settings.log_level not in ("info", "debug"):
        return
    if settings.log_format == "json":
        for line in lines:
            logger.info("startup: %s", line.strip())
        return
    print("\n".join(lines), file=sys.stderr, flush=True)
