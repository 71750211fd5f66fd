"""Calibration shared through the store: every process sharing a store estimates alike.

The engine keeps its own ``Calibration`` (the core does no I/O); this folds each observation
into the store's sums (atomically, there) and takes the result, which includes every other
process's observations, and reads the store's sums again for a (namespace, model) when this
process's copy is older than ``CALIBRATION_REFRESH_S``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from ..core.results import PrepareResult
from ..core.tokens import Calibration
from ..stores import Store

CALIBRATION_REFRESH_S = 1.0
"""How old this process's copy of a (namespace, model)'s shared calibration may get before a
request reads the store's again (what other processes sharing the store observed)."""
PENDING_STALE_S = 30.0
"""How long an announced observation that never reached the store holds its sums off."""
_MAX_REFRESH_MARKS = 4096


class SharedCalibration:
    """The store's calibration sums, mirrored into the engine's ``Calibration``."""

    def __init__(self, store: Store, calibration: Calibration) -> None:
        self.store = store
        self.calibration = calibration
        self._read: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._pending: dict[tuple[str, str], tuple[int, float]] = {}
        """Observations announced and not yet folded, and when the newest was announced."""
        self._lock = threading.Lock()

    def expect(self, namespace: str, model: str) -> None:
        """Note that the engine learned from an observation ``share`` has yet to fold in: until
        it has, the store's sums (which lack it) are not taken over ours."""
        with self._lock:
            count = self._pending.get((namespace, model), (0, 0.0))[0]
            self._pending[(namespace, model)] = (count + 1, time.monotonic())

    def share(self, result: PrepareResult, model: str, prompt_tokens: int | None) -> None:
        """Fold what the engine learned from ``result``'s usage (announced by ``expect``) into
        the store's sums, and take the store's result (which includes every other process's
        observations) as ours, unless a newer observation of ours is still to be folded."""
        key = (result.namespace, model)
        try:
            calibration = self.calibration
            estimated = result.report.raw_estimated_tokens
            reported = prompt_tokens or 0
            observation = calibration.observation(estimated=estimated, reported=reported)
            if observation is None:
                return
            sums = self.store.fold_calibration(
                result.namespace,
                model,
                reported=observation[0],
                estimated=observation[1],
                alpha=calibration.alpha,
            )
        finally:
            with self._lock:
                count, since = self._pending.get(key, (1, 0.0))
                left = count - 1
                if left > 0:
                    self._pending[key] = (left, since)
                else:
                    self._pending.pop(key, None)
        if left <= 0:
            calibration.load(model, sums, result.namespace)
            self._mark_read(result.namespace, model, time.monotonic())

    def refresh(self, namespace: str, model: str) -> None:
        """Read the store's sums for ``(namespace, model)`` when ours are older than
        ``CALIBRATION_REFRESH_S``."""
        now = time.monotonic()
        with self._lock:
            read_at = self._read.get((namespace, model))
            since = self._pending.get((namespace, model), (0, -PENDING_STALE_S))[1]
        # An observation whose write was lost (a full queue) stops holding the store's off.
        pending = now - since < PENDING_STALE_S
        if pending or (read_at is not None and now - read_at < CALIBRATION_REFRESH_S):
            return
        sums = self.store.read_calibration(namespace, model)
        if sums is not None:
            self.calibration.load(model, sums, namespace)
        self._mark_read(namespace, model, now)

    def _mark_read(self, namespace: str, model: str, at: float) -> None:
        with self._lock:
            self._read[(namespace, model)] = at
            self._read.move_to_end((namespace, model))
            while len(self._read) > _MAX_REFRESH_MARKS:
                self._read.popitem(last=False)
