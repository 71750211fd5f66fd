"""The drivers (``library.drive``): an effect that fails is raised in the generator at its
``yield`` (which may catch it, or release what it holds in its ``finally``), in both drivers; and
a cancellation that arrives while ``drive_async`` runs a step in a worker thread waits for that
step, then is raised at its next ``yield``, so the generator's ``finally`` still runs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Generator
from typing import Any

import pytest

from context_summarizer.library.drive import drive_async, drive_sync


class Refused(Exception):
    pass


def performer(performed: list[str]) -> Callable[[str], str]:
    """Performs an effect (a string) by writing it down; ``"fail"`` raises ``Refused``."""

    def perform(effect: str) -> str:
        performed.append(effect)
        if effect == "fail":
            raise Refused(effect)
        return effect.upper()

    return perform


def aperformer(performed: list[str]) -> Callable[[str], Awaitable[str]]:
    perform = performer(performed)

    async def aperform(effect: str) -> str:
        return perform(effect)

    return aperform


def drive(how: str, steps: Generator[str, Any, Any], performed: list[str]) -> Any:
    """``steps`` driven ``how``: sync, async, or async with each step in a worker thread."""
    if how == "sync":
        return drive_sync(steps, performer(performed))
    offload = how == "offloaded"
    return asyncio.run(drive_async(steps, aperformer(performed), offload=offload))


HOW = ["sync", "async", "offloaded"]


@pytest.mark.parametrize("how", HOW)
def test_a_failed_effect_is_raised_at_its_yield_and_may_be_caught(how: str) -> None:
    def steps() -> Generator[str, Any, str]:
        first = yield "take"
        try:
            yield "fail"
        except Refused as exc:
            again = yield f"after {exc}"
            return f"{first} {again}"
        raise AssertionError("the failure was not raised here")

    performed: list[str] = []
    assert drive(how, steps(), performed) == "TAKE AFTER FAIL"
    assert performed == ["take", "fail", "after fail"]


@pytest.mark.parametrize("how", HOW)
def test_a_failed_effect_not_caught_reaches_the_caller_after_the_generators_finally(
    how: str,
) -> None:
    def steps() -> Generator[str, Any, None]:
        yield "take"
        try:
            yield "fail"
            yield "never"
        finally:
            yield "release"

    performed: list[str] = []
    with pytest.raises(Refused, match="fail"):
        drive(how, steps(), performed)
    assert performed == ["take", "fail", "release"]


@pytest.mark.parametrize("returns", [False, True], ids=["yields-next", "returns"])
def test_a_cancellation_during_an_offloaded_step_waits_for_it_then_is_raised_at_its_yield(
    returns: bool,
) -> None:
    started, go = threading.Event(), threading.Event()

    def steps() -> Generator[str, Any, str]:
        yield "take"
        try:
            started.set()
            assert go.wait(10)  # CPU work in the worker thread, which nothing can interrupt
            if returns:
                return "done"
            yield "after the step"  # never performed: the cancellation is raised here instead
            return "not reached"
        finally:
            if not returns:
                yield "release"

    async def main() -> list[str]:
        performed: list[str] = []
        task = asyncio.ensure_future(drive_async(steps(), aperformer(performed), offload=True))
        assert await asyncio.to_thread(started.wait, 10)
        task.cancel()
        await asyncio.sleep(0.05)
        task.cancel()  # however often: the step is still waited for
        await asyncio.sleep(0.05)
        assert not task.done()
        go.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        return performed

    performed = asyncio.run(main())
    assert performed == (["take"] if returns else ["take", "release"])


def test_offload_may_pick_the_steps_to_run_in_a_worker_thread() -> None:
    loop_thread = threading.get_ident()

    def steps() -> Generator[str, Any, list[bool]]:
        where = [threading.get_ident() == loop_thread]  # the first step: answers no effect
        for effect in ("cheap", "heavy", "cheap"):
            yield effect
            where.append(threading.get_ident() == loop_thread)
        return where

    performed: list[str] = []
    on_the_loop = asyncio.run(
        drive_async(steps(), aperformer(performed), offload=lambda effect: effect == "heavy")
    )
    assert on_the_loop == [True, True, False, True]
    assert performed == ["cheap", "heavy", "cheap"]
