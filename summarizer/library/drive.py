"""Running the engine's generators: each effect they yield is performed by a function the edge
gives (``summarizer.library.effects.Performer`` performs them against a store and a model), and
its result sent back. The sync and async drivers share every decision, which stays in the
generators."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from ..core.effects import Effect, Effects, T


def drive_sync(steps: Effects[T], perform: Callable[[Effect], Any]) -> T:
    """Run ``steps`` to completion, performing each effect with ``perform``."""
    try:
        effect = next(steps)
        while True:
            effect = steps.send(perform(effect))
    except StopIteration as stop:
        result: T = stop.value
        return result


async def drive_async(
    steps: Effects[T], perform: Callable[[Effect], Awaitable[Any]], *, offload: bool = False
) -> T:
    """``drive_sync`` for async callers.

    ``offload``: run each step of the generator (hashing, counting, planning: CPU work) in a
    worker thread, so the event loop keeps serving other requests meanwhile.
    """
    answer: Any = None
    while True:
        if offload:
            done, value = await asyncio.to_thread(_advance, steps, answer)
        else:
            done, value = _advance(steps, answer)
        if done:
            result: T = value
            return result
        answer = await perform(value)


def _advance(steps: Effects[Any], answer: Any) -> tuple[bool, Any]:
    """One step: ``(False, the next effect)`` or ``(True, the result)``.

    A ``StopIteration`` cannot cross ``asyncio.to_thread``; it becomes a flag here.
    """
    try:
        return False, steps.send(answer)
    except StopIteration as stop:
        return True, stop.value
