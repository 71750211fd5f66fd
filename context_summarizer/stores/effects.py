"""Performing the engine's storage effects against a ``Store`` (``core.effects``)."""

from __future__ import annotations

from ..core.checkpoints import prefix_candidates
from ..core.effects import FindCheckpoint, Found, RecordUsage, SaveCheckpoint, Saved
from .base import Store

StoreEffect = FindCheckpoint | SaveCheckpoint | RecordUsage


def perform_store(
    store: Store, effect: StoreEffect, *, fence: int | None = None
) -> Found | Saved | None:
    """Do what ``effect`` asks of ``store`` and return its answer (blocking: async callers run
    it in a worker thread). ``fence``: the lease token a checkpoint is saved under."""
    if isinstance(effect, FindCheckpoint):
        # Read before the lookup: a write during it then makes the engine's memo stale, never
        # wrong.
        generation = store.generation()
        unchanged = generation is not None and generation == effect.unchanged_since
        start = effect.start
        if unchanged and effect.fresh_start is not None:
            start = max(start, effect.fresh_start)
        candidates = prefix_candidates(effect.chain, start)
        found = store.find_latest(effect.namespace, candidates) if candidates else None
        return Found(found, generation)
    if isinstance(effect, SaveCheckpoint):
        store.put(effect.checkpoint, fence=fence)
        return Saved(store.generation())
    store.update_reported(
        effect.namespace, effect.checkpoint_id, reported_tokens_after=effect.reported_tokens_after
    )
    return None
