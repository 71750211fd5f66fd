"""What a client asks of one request's compaction, and why a request was not compacted.

Two request headers, on any API (never sent upstream: no ``x-summarizer-*`` header is):

- ``X-Summarizer-Compact``: ``auto`` (the default: compact when the trigger is crossed), ``now``
  (compact this request whatever its size, as if the trigger were crossed at its present size:
  Claude Code's ``/compact``), or ``off`` (forward this request exactly as sent);
- ``X-Summarizer-Instructions``: instructions for the summaries written for this request, added
  after the model's own (``summary_instructions``).

A session's ``POST /v1/summarizer/sessions/{id}/compact`` asks the same of its next request
(``proxy.compaction_requests``). Every answer that was not compacted says why in
``X-Summarizer-Not-Compacted``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast

from ..core.located import Located
from ..core.results import PrepareResult
from .errors import ProxyError

COMPACT_HEADER = "x-summarizer-compact"
INSTRUCTIONS_HEADER = "x-summarizer-instructions"
NOT_COMPACTED_HEADER = "x-summarizer-not-compacted"

MAX_INSTRUCTIONS = 4000
"""The longest instructions a request (or a session's compact endpoint) may give, in
characters: they go into every summary request made for it."""

Mode = Literal["auto", "now", "off"]


@dataclass(frozen=True, slots=True)
class Control:
    """What a client asks of a request's compaction."""

    mode: Mode = "auto"
    instructions: str | None = None
    via: str = "header"
    """Where the ask came from: ``header`` (this request's) or ``session`` (the session's
    compact endpoint, taken up by this request)."""


AUTO = Control()


def request_control(headers: Any) -> Control:
    """The control a request's headers ask for; ``ProxyError`` (a 400) for a value that is not
    one (the proxy never guesses what a client meant)."""
    raw_mode = headers.get(COMPACT_HEADER)
    instructions = headers.get(INSTRUCTIONS_HEADER)
    if raw_mode is None and instructions is None:
        return AUTO
    mode = (raw_mode or "auto").strip().lower()
    if mode not in ("auto", "now", "off"):
        raise ProxyError(
            400,
            f"{COMPACT_HEADER} must be one of auto, now, off.",
            param=COMPACT_HEADER,
            code="invalid_header",
        )
    if instructions is not None:
        instructions = _utf8(instructions)
    return Control(cast(Mode, mode), checked_instructions(instructions, INSTRUCTIONS_HEADER))


def _utf8(value: str) -> str:
    """A header value as the UTF-8 text its bytes spell, where they do (ASGI servers give
    header bytes as latin-1 characters); else as given."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


def is_off(headers: Any) -> bool:
    """Whether a request's headers turn compaction off for it (an invalid value is not: it is
    refused when the request is located)."""
    return str(headers.get(COMPACT_HEADER) or "").strip().lower() == "off"


def checked_instructions(text: Any, where: str) -> str | None:
    """``text`` as summary instructions (None: none given); ``ProxyError`` (a 400) when it is
    not text or is longer than ``MAX_INSTRUCTIONS``."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise ProxyError(400, f"{where} must be a string.", param=where, code="invalid_type")
    text = text.strip()
    if len(text) > MAX_INSTRUCTIONS:
        raise ProxyError(
            400,
            f"{where} is {len(text)} characters long; at most {MAX_INSTRUCTIONS} are accepted.",
            param=where,
            code="instructions_too_long",
        )
    return text or None


def not_compacted_reason(
    result: PrepareResult | None, located: Located | None, control: Control = AUTO
) -> str | None:
    """Why the answered request was not compacted now (None: it was). Said in plain ASCII; it
    never quotes the request."""
    if result is None:
        return None  # forwarded unmanaged: the caller gives its own reason
    if result.compacted:
        return None
    if located is None:
        return "not located"
    if control.mode == "now":
        return (
            f"asked to compact now ({control.via}), but nothing could be compacted: all of it "
            "stays verbatim (the system prompt, the task, the latest turn)"
        )
    tokens, budget = located.calibrated_tokens, located.budget
    if tokens <= budget.trigger_tokens:
        standing = " (it stands on an earlier compaction)" if result.rewritten else ""
        return f"below the trigger: {tokens} of {budget.trigger_tokens} tokens{standing}"
    over = f"over the trigger ({tokens} of {budget.trigger_tokens} tokens)"
    if result.held_back:
        return ascii_reason(f"{over} but sent as is, since it fits: {result.held_back}")
    return f"{over} but nothing could be compacted"


def ascii_reason(text: str) -> str:
    """``text`` as a header value: printable ASCII, at most 300 characters."""
    text = " ".join(text.split())[:300]
    return "".join(ch if " " <= ch <= "~" else "?" for ch in text)
