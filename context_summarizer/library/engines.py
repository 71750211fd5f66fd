"""Building a ``ContextEngine`` at the edge: its prompt texts and tokenizers loaded for a
configuration, so the core itself never reads a file."""

from __future__ import annotations

from typing import Any

from ..core.config import CompactionConfig
from ..core.engine import ContextEngine
from ..loaders.prompts import load_prompt_set
from ..loaders.tokenizers import counter_factory


def engine_for(config: CompactionConfig, **options: Any) -> ContextEngine:
    """A ``ContextEngine`` for ``config``: the prompts of ``config.prompt_version``
    and the tokenizers ``config.tokenizer``/``config.encodings`` choose; ``options`` are the
    engine's own keywords (``calibration``, ``on_compaction``, ...)."""
    return ContextEngine(
        config,
        prompts=load_prompt_set(config.prompt_version),
        counter_for=counter_factory(config.tokenizer, config.encodings),
        **options,
    )
