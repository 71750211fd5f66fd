"""How far our count is off from the provider's: learned from ``usage.prompt_tokens``."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Mapping

from ..errors import ConfigurationError

RESTORED_WEIGHT = 1_000.0
"""How many estimated tokens a restored ratio weighs as, against the requests that follow."""


class Calibration:
    """Ratio of provider-reported prompt tokens to our estimate, learned from usage, kept apart
    per namespace and model.

    The ratio is the quotient of two decaying sums, of reported and of estimated tokens: each
    observation adds its two counts after the earlier sums were scaled by ``1 - alpha``. So a
    request weighs by its size: a small first request (whose count is mostly a chat template's
    fixed overhead, a poor guide to a long conversation's) moves the ratio little once larger
    ones follow, and the ratio settles within a few requests. The quotient is clamped to
    ``[min_ratio, max_ratio]``. Each ``(namespace, model)`` is calibrated on its own, so one
    tenant's traffic (say, image-heavy requests) never moves another tenant's estimates. The
    number of pairs remembered is bounded (``max_entries``, least recently used dropped first),
    since both come from clients. Thread-safe.
    """

    def __init__(
        self,
        *,
        min_ratio: float = 0.75,
        max_ratio: float = 1.5,
        alpha: float = 0.3,
        max_entries: int = 4096,
    ) -> None:
        if not (0 < min_ratio <= 1.0 <= max_ratio and math.isfinite(max_ratio)):
            raise ConfigurationError(
                f"calibration bounds must satisfy 0 < min_ratio <= 1 <= max_ratio, "
                f"got {min_ratio} and {max_ratio}"
            )
        if not 0 < alpha <= 1:
            raise ConfigurationError(f"calibration alpha must be in (0, 1], got {alpha}")
        self.min_ratio = min_ratio
        self.max_ratio = max_ratio
        self.alpha = alpha
        self.max_entries = max_entries
        # (decayed reported tokens, decayed estimated tokens) per (namespace, model).
        self._sums: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def _clamp(self, ratio: float) -> float:
        return min(self.max_ratio, max(self.min_ratio, ratio))

    def observe(self, model: str, *, estimated: int, reported: int, namespace: str = "") -> None:
        """Fold one response's ``usage.prompt_tokens`` (``reported``) against our ``estimated``.

        Non-positive values (a missing or zero usage) are ignored.
        """
        observation = self.observation(estimated=estimated, reported=reported)
        if observation is None:
            return
        reported, estimated = observation
        key = (namespace, model)
        keep = 1 - self.alpha
        with self._lock:
            total_reported, total_estimated = self._sums.pop(key, (0.0, 0.0))
            self._sums[key] = (keep * total_reported + reported, keep * total_estimated + estimated)
            while len(self._sums) > self.max_entries:
                self._sums.popitem(last=False)

    def observation(self, *, estimated: int, reported: int) -> tuple[int, int] | None:
        """What ``observe`` folds in for these counts: ``(reported, estimated)`` with
        ``reported`` clamped to the bounds, or None for a non-positive count."""
        if estimated <= 0 or reported <= 0:
            return None
        # One observation alone never moves the ratio past the bounds.
        reported = int(min(max(reported, estimated * self.min_ratio), estimated * self.max_ratio))
        return reported, estimated

    def sums(self, model: str, namespace: str = "") -> tuple[float, float] | None:
        """The decayed sums (reported, estimated) of ``model`` in ``namespace``, or None."""
        with self._lock:
            return self._sums.get((namespace, model))

    def load(self, model: str, sums: tuple[float, float], namespace: str = "") -> None:
        """Replace the sums of ``model`` in ``namespace`` (with ones shared by other processes);
        sums that are not positive finite numbers are ignored."""
        if not all(math.isfinite(value) and value > 0 for value in sums):
            return
        key = (namespace, model)
        with self._lock:
            self._sums.pop(key, None)
            self._sums[key] = (float(sums[0]), float(sums[1]))
            while len(self._sums) > self.max_entries:
                self._sums.popitem(last=False)

    def ratio(self, model: str, namespace: str = "") -> float:
        """The learned ratio for ``model`` in ``namespace`` (1.0 before any observation)."""
        with self._lock:
            sums = self._sums.get((namespace, model))
        return self._clamp(sums[0] / sums[1]) if sums else 1.0

    def apply(self, model: str, estimated: int, namespace: str = "") -> int:
        """``ceil(estimated * ratio)``, immune to float noise such as 110.00000000000001."""
        return math.ceil(round(estimated * self.ratio(model, namespace), 6))

    def snapshot(self, namespace: str = "") -> dict[str, float]:
        """The learned ratios of ``namespace``, by model, for persisting."""
        with self._lock:
            return {
                model: self._clamp(reported / estimated)
                for (ns, model), (reported, estimated) in self._sums.items()
                if ns == namespace
            }

    def restore(self, data: Mapping[str, float], namespace: str = "") -> None:
        """Replace the learned ratios of ``namespace`` with a snapshot's; entries that are not
        positive finite numbers are skipped, the others clamped to the bounds."""
        restored: dict[tuple[str, str], tuple[float, float]] = {}
        for model, value in data.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if math.isfinite(value) and value > 0:
                # A restored ratio weighs as one request of RESTORED_WEIGHT tokens.
                ratio = self._clamp(float(value))
                restored[(namespace, str(model))] = (ratio * RESTORED_WEIGHT, RESTORED_WEIGHT)
        with self._lock:
            for key in [k for k in self._sums if k[0] == namespace]:
                del self._sums[key]
            self._sums.update(restored)
