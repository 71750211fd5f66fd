"""The one retry policy for a provider's "context length exceeded".

Our count said the request fits; the provider says it does not. So the window is smaller than
our figures by an unknown amount: compact once more with a tighter target (the engine's
``context_length_exceeded`` trigger) and send once more, never more. ``wrap`` (sync and async)
and the proxy all answer an overflow through this policy.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..core.results import Trigger

T = TypeVar("T")

OVERFLOW: Trigger = "context_length_exceeded"
"""The trigger of the retry's compaction."""


def retry_on_overflow(
    attempt: Callable[[Trigger | None], T], overflowed: Callable[[BaseException], bool]
) -> T:
    """``attempt(None)``; when it raises what ``overflowed`` recognizes, ``attempt(OVERFLOW)``
    once (whose own failure, overflow or not, is raised)."""
    try:
        return attempt(None)
    except Exception as exc:
        if not overflowed(exc):
            raise
    return attempt(OVERFLOW)


async def aretry_on_overflow(
    attempt: Callable[[Trigger | None], Awaitable[T]],
    overflowed: Callable[[BaseException], bool],
) -> T:
    """The async twin of ``retry_on_overflow``."""
    try:
        return await attempt(None)
    except Exception as exc:
        if not overflowed(exc):
            raise
    return await attempt(OVERFLOW)
