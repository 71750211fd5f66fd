"""Which tiktoken encoding counts which model: the names and the table, no files (the loader in
``context_summarizer.loaders.tokenizers`` reads them)."""

from __future__ import annotations

from collections.abc import Mapping

from ..model_limits import canonical_model_name, longest_prefix_key

O200K_BASE = "o200k_base"
CL100K_BASE = "cl100k_base"
APPROXIMATE = "approximate"
"""The ``tokenizer`` value that opts in to ``ApproximateCounter``."""

MODEL_ENCODINGS: Mapping[str, str] = {
    "gpt-4o": O200K_BASE,
    "chatgpt-4o": O200K_BASE,
    "gpt-4.1": O200K_BASE,
    "gpt-4.5": O200K_BASE,
    "gpt-5": O200K_BASE,
    "o1": O200K_BASE,
    "o3": O200K_BASE,
    "o4": O200K_BASE,
    "gpt-oss": O200K_BASE,  # o200k_harmony: o200k_base's ranks plus chat special tokens
    "gpt-4": CL100K_BASE,  # gpt-4, gpt-4-32k, gpt-4-turbo (gpt-4o / gpt-4.x matched above)
    "gpt-3.5": CL100K_BASE,
    "gpt-35": CL100K_BASE,  # Azure's spelling
}
"""Model-name prefix -> tiktoken encoding, as tiktoken's own model table maps them."""

DEFAULT_ENCODING = O200K_BASE
"""Encoding for models the table does not know: an approximation for non-OpenAI tokenizers,
which ``Calibration`` corrects from the provider's reported usage."""


def encoding_for_model(model: str, overrides: Mapping[str, str] | None = None) -> str:
    """The tiktoken encoding name to count ``model``'s tokens with.

    ``overrides`` maps exact names or prefixes (``{"claude-": "cl100k_base"}``) to encodings and is
    checked first, longest match winning, against the routed and the canonical name. Then the
    built-in table, on the name without provider routing (``openai/gpt-4o`` is ``gpt-4o``). Any
    other model gets ``DEFAULT_ENCODING``.
    """
    raw = model.strip().lower()
    canonical = canonical_model_name(raw)
    if overrides:
        key = longest_prefix_key((raw, canonical), overrides)
        if key is not None:
            return overrides[key]
    key = longest_prefix_key((canonical,), MODEL_ENCODINGS)
    return MODEL_ENCODINGS[key] if key is not None else DEFAULT_ENCODING
