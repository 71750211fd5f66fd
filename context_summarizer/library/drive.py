"""Running the engine's generators: each effect they yield is performed by a function the edge
gives (``context_summarizer.library.effects.Performer`` performs them against a store and a model),
and its result sent back. The sync and async drivers share every decision, which stays in the
generators.

An effect that fails is raised inside the generator, at the ``yield`` that asked for it, so a
generator holding something (a lock, a lease: ``library.settling``) releases it in its own
``finally``, by yielding the effects that do. A generator that does not catch it passes it on
to the driver's caller unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

from ..core.effects import T

E = TypeVar("E")


def drive_sync(steps: Generator[E, Any, T], perform: Callable[[E], Any]) -> T:
    """Run ``steps`` to completion, performing each effect with ``perform``."""
    answer: Any = None
    failure: BaseException | None = None
    while True:
        done, value = _advance(steps, answer, failure)
        if done:
            result: T = value
            return result
        try:
            answer, failure = perform(value), None
        except BaseException as exc:  # raised in the generator, at its yield
            answer, failure = None, exc


async def drive_async(
    steps: Generator[E, Any, T],
    perform: Callable[[E], Awaitable[Any]],
    *,
    offload: bool | Callable[[E | None], bool] = False,
) -> T:
    """``drive_sync`` for async callers.

    ``offload``: run each step of the generator (hashing, counting, planning: CPU work) in a
    worker thread, so the event loop keeps serving other requests meanwhile; or, given a
    function, the steps it picks by the effect they answer (None: the first step). A
    cancellation that arrives while a step runs there waits for that step to reach its next
    effect, and is raised in the generator at that ``yield`` instead of performing it (a step
    cannot be stopped halfway, and what the generator holds must still be released).
    """
    answer: Any = None
    failure: BaseException | None = None
    effect: E | None = None
    while True:
        cancelled: asyncio.CancelledError | None = None
        if offload is True or (callable(offload) and offload(effect)):
            done, value, cancelled = await _advance_in_thread(steps, answer, failure)
        else:
            done, value = _advance(steps, answer, failure)
        if done:
            if cancelled is not None:
                raise cancelled
            result: T = value
            return result
        effect = value
        if cancelled is not None:  # raised at the effect reached, instead of performing it
            answer, failure = None, cancelled
            continue
        try:
            answer, failure = await perform(effect), None
        except GeneratorExit:  # this coroutine is being closed: nothing can be awaited now
            raise
        except BaseException as exc:  # raised in the generator, at its yield
            answer, failure = None, exc


def _advance(
    steps: Generator[Any, Any, Any], answer: Any, failure: BaseException | None
) -> tuple[bool, Any]:
    """One step: ``(False, the next effect)`` or ``(True, the result)``; ``failure``, when
    given, is raised in the generator instead of sending ``answer``.

    A ``StopIteration`` cannot cross ``asyncio.to_thread``; it becomes a flag here.
    """
    try:
        if failure is not None:
            return False, steps.throw(failure)
        return False, steps.send(answer)
    except StopIteration as stop:
        return True, stop.value


async def _advance_in_thread(
    steps: Generator[Any, Any, Any], answer: Any, failure: BaseException | None
) -> tuple[bool, Any, asyncio.CancelledError | None]:
    """``_advance`` in a worker thread, and the cancellation that arrived meanwhile, if any
    (the step is waited for all the same, however often the caller is cancelled)."""
    step = asyncio.ensure_future(asyncio.to_thread(_advance, steps, answer, failure))
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            done, value = await asyncio.shield(step)
        except asyncio.CancelledError as exc:
            if step.cancelled():  # the step itself was (the loop is closing): nothing to wait
                raise
            cancelled = exc
            continue
        return done, value, cancelled
