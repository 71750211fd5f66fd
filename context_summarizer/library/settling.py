"""Settling a located turn: the one loop behind ``ContextManager.compact`` and ``acompact``.

``settle`` decides everything between a located turn and what to send for it: start or await
the session's draft made ahead of time (``library.ahead``), wait for the session's lock in this
process and its lease in the store (shared by every process using it), look again after each
wait for a checkpoint another thread or replica wrote meanwhile, then adopt the draft or compact
under the lease, and look again when the lease was taken over mid-compaction (``LeaseLost``).

Like the engine's work, it is a generator: what it needs done it *yields*, the engine's effects
(``core.effects``) and those below, and ``drive_sync`` or ``drive_async`` performs them with a
``SettlingPerformer`` or ``AsyncSettlingPerformer`` (``library.settling_effects``). So sync and
async callers take the same decisions in the same order; only the performing differs (a thread
lock or an asyncio lock, ``time.sleep`` or ``asyncio.sleep``, store calls in the caller's thread
or in a worker thread). An effect that fails is raised here at its ``yield``, so the lease and
the lock are always released by this generator's own ``finally``.

- ``LockSession``, ``UnlockSession`` -> None: this process's lock of the session;
- ``TakeLease`` -> the lease's fencing token, or None while another holder has it (checkpoints
  are then saved under that token until ``ReleaseLease`` -> None);
- ``Sleep`` -> None: the wait before asking for the lease again (``LEASE_POLL_S``, doubling);
- ``StartDraft`` -> None: draft the turn's compaction ahead of time, if it should be;
- ``PendingDraft`` -> the draft job to wait for, the turn unchanged (its draft is still being
  written and it fits the window), or None (``Drafts.pending``);
- ``AwaitDraft`` -> the job's draft (None if it failed) and the seconds waited for it;
- ``AdoptedDraft`` -> the result of adopting a draft, counted (``Drafts.adopted``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from ..core.effects import Effect, T
from ..core.engine import ContextEngine
from ..core.errors import LeaseLost, StoreUnavailable
from ..core.located import Draft, Located
from ..core.results import PrepareResult, Trigger
from .ahead_jobs import AheadJob
from .sessions import LEASE_POLL_S

logger = logging.getLogger("summarizer")


@dataclass(frozen=True, slots=True)
class LockSession:
    """Wait for, then hold, this process's lock of the session."""

    namespace: str
    session: str


@dataclass(frozen=True, slots=True)
class UnlockSession:
    """Release this process's lock of the session."""

    namespace: str
    session: str


@dataclass(frozen=True, slots=True)
class TakeLease:
    """Take the session's lease in the store for ``ttl_s`` (renewed while held) if nobody else
    holds it; its fencing token, or None."""

    namespace: str
    session: str
    ttl_s: float


@dataclass(frozen=True, slots=True)
class ReleaseLease:
    """Stop renewing the session's lease and give it up."""

    namespace: str
    session: str


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds``."""

    seconds: float


@dataclass(frozen=True, slots=True)
class StartDraft:
    """Draft ``located``'s compaction ahead of time, if it should be (``Drafts.start``)."""

    located: Located


@dataclass(frozen=True, slots=True)
class PendingDraft:
    """The draft ``located`` should use (``Drafts.pending``)."""

    located: Located


@dataclass(frozen=True, slots=True)
class AwaitDraft:
    """Wait for ``job``'s draft (``Drafts.wait``)."""

    job: AheadJob


@dataclass(frozen=True, slots=True)
class AdoptedDraft:
    """Count the outcome of adopting a draft, ``result`` (None: it was stale)."""

    result: PrepareResult | None


SettlingEffect = (
    LockSession
    | UnlockSession
    | TakeLease
    | ReleaseLease
    | Sleep
    | StartDraft
    | PendingDraft
    | AwaitDraft
    | AdoptedDraft
)
"""What ``settle`` asks of a driver besides the engine's effects."""

Settling = Generator[Effect | SettlingEffect, Any, T]
"""A piece of ``settle``: yields effects, receives their results, returns a ``T``."""


def settle(
    engine: ContextEngine, located: Located, *, force: Trigger | None, lease_ttl_s: float
) -> Settling[PrepareResult]:
    """What to send for ``located``: its view when no compaction is due (and none is
    ``force``d), else a compaction (an ahead-of-time draft adopted, or made now), one per
    session at a time across threads, tasks and processes sharing the store; ``lease_ttl_s``:
    how long the lease outlives a holder that stopped renewing it.

    Raises what the engine and the effects raise (``BudgetExceeded``, ``StoreUnavailable``...),
    except ``LeaseLost``: a checkpoint refused because the lease was taken over is logged, and
    the session looked at again."""
    draft: Draft | None = None
    waited = 0.0
    if force is None:
        yield StartDraft(located)
        if not engine.needs_compaction(located):
            return engine.unchanged(located)
        pending = yield PendingDraft(located)
        if isinstance(pending, PrepareResult):
            return pending  # over the trigger but fits: its draft is on the way
        if pending is not None:
            draft, waited = yield AwaitDraft(pending)
    namespace, session = located.namespace, located.session
    yield LockSession(namespace, session)
    try:
        while True:  # again only when the lease was lost (taken over) mid-compaction
            located, done = yield from _lease(engine, located, force, lease_ttl_s)
            if done is not None:
                return done  # compacted by another holder meanwhile
            try:
                located = yield from engine.refresh(located)
                if force is None and not engine.needs_compaction(located):
                    return engine.unchanged(located)
                done = None
                if draft is not None:
                    adopting, draft = draft, None  # once: not again after a lost lease
                    adopted = yield from engine.adopt(located, adopting, waited_s=waited)
                    done = yield AdoptedDraft(adopted)
                    if done is None:
                        located = yield from engine.refresh(located)
                if done is None:
                    done = yield from engine.steps(located, trigger=force or "threshold")
                if force is None and _next_draft_due(located, done):
                    with contextlib.suppress(StoreUnavailable):  # else: at the next request
                        now = yield from engine.refresh(located)
                        yield StartDraft(now)
                return done
            except LeaseLost:
                _log_lease_lost(located)
            finally:
                yield ReleaseLease(namespace, session)
    finally:
        yield UnlockSession(namespace, session)


def off_the_loop(effect: Effect | SettlingEffect | None) -> bool:
    """``drive_async``'s ``offload`` for ``settle``: whether the step answering ``effect``
    (None: the first) runs in a worker thread. Those before the session's lock is asked for
    only compare sizes and hand drafts over, on the event loop (so a turn with no compaction
    due costs no thread hop); from the lock on, steps may be the engine's CPU work."""
    return effect is not None and not isinstance(effect, (StartDraft, PendingDraft, AwaitDraft))


def _lease(
    engine: ContextEngine, located: Located, force: Trigger | None, ttl_s: float
) -> Settling[tuple[Located, PrepareResult | None]]:
    """Take the session's lease, waiting (``LEASE_POLL_S``, doubling) while another holder has
    it: ``located`` as it is then, with None; or with its view, once no compaction is due any
    more (another thread or process compacted it meanwhile), the lease not taken."""
    delay = LEASE_POLL_S[0]
    while True:
        # Another thread or process may have compacted this session meanwhile.
        located = yield from engine.refresh(located)
        if force is None and not engine.needs_compaction(located):
            return located, engine.unchanged(located)
        token = yield TakeLease(located.namespace, located.session, ttl_s)
        if token is not None:
            return located, None
        yield Sleep(delay)
        delay = min(delay * 2, LEASE_POLL_S[1])


def _next_draft_due(located: Located, result: PrepareResult) -> bool:
    """Whether ``located``, just compacted to ``result``, is still over the prepare threshold:
    its next draft is due now (on the conversation as compacted), not at its next request, a
    turn later."""
    prepare = located.budget.prepare_tokens
    return result.compacted and prepare is not None and result.report.estimated_tokens > prepare


def _log_lease_lost(located: Located) -> None:
    logger.warning(
        "the compaction lease of session %r was taken over while this process compacted it "
        "(it stalled past its lease); its checkpoint was refused, looking again",
        located.session,
    )
