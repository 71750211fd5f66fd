"""How far our count is off from the provider's: learned from ``usage.prompt_tokens``."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Mapping

from ..errors import ConfigurationError


class Calibration:
    """Ratio of provider-reported prompt tokens to our estimate, learned from usage, kept apart
    per namespace and model.

    Each observation's ratio ``reported / estimated`` is clamped to ``[min_ratio, max_ratio]`` and
    folded into an exponential moving average (weight ``alpha`` for the new sample; the first
    sample is taken as is). Each ``(namespace, model)`` is calibrated on its own, so one tenant's
    traffic (say, image-heavy requests) never moves another tenant's estimates. The number of
    pairs remembered is bounded (``max_entries``, least recently used dropped first), since both
    come from clients. Thread-safe.
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
        self._ratios: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._lock = threading.Lock()

    def _clamp(self, ratio: float) -> float:
        return min(self.max_ratio, max(self.min_ratio, ratio))

    def observe(self, model: str, *, estimated: int, reported: int, namespace: str = "") -> None:
        """Fold one response's ``usage.prompt_tokens`` (``reported``) against our ``estimated``.

        Non-positive values (a missing or zero usage) are ignored.
        """
        if estimated <= 0 or reported <= 0:
            return
        sample = self._clamp(reported / estimated)
        key = (namespace, model)
        with self._lock:
            previous = self._ratios.pop(key, None)
            self._ratios[key] = (
                sample if previous is None else self.alpha * sample + (1 - self.alpha) * previous
            )
            while len(self._ratios) > self.max_entries:
                self._ratios.popitem(last=False)

    def ratio(self, model: str, namespace: str = "") -> float:
        """The learned ratio for ``model`` in ``namespace`` (1.0 before any observation)."""
        with self._lock:
            value = self._ratios.get((namespace, model), 1.0)
        return self._clamp(value)

    def apply(self, model: str, estimated: int, namespace: str = "") -> int:
        """``ceil(estimated * ratio)``, immune to float noise such as 110.00000000000001."""
        return math.ceil(round(estimated * self.ratio(model, namespace), 6))

    def snapshot(self, namespace: str = "") -> dict[str, float]:
        """The learned ratios of ``namespace``, by model, for persisting."""
        with self._lock:
            return {model: r for (ns, model), r in self._ratios.items() if ns == namespace}

    def restore(self, data: Mapping[str, float], namespace: str = "") -> None:
        """Replace the learned ratios of ``namespace`` with a snapshot's; entries that are not
        positive finite numbers are skipped, the others clamped to the bounds."""
        restored: dict[tuple[str, str], float] = {}
        for model, value in data.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if math.isfinite(value) and value > 0:
                restored[(namespace, str(model))] = self._clamp(float(value))
        with self._lock:
            for key in [k for k in self._ratios if k[0] == namespace]:
                del self._ratios[key]
            self._ratios.update(restored)
