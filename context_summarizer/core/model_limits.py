"""Context windows and output limits of known models, by model-name prefix.

What this module guarantees:

- ``lookup_limits`` never guesses. A model resolves only to a registry entry (or a configured
  override) whose key is a prefix of its name; a model nothing matches raises
  ``UnknownModelError``, whose message says how to configure it.
- The longest matching prefix wins, so ``gpt-4o`` never takes ``gpt-4``'s 8k window, ``o1-mini``
  never takes ``o1``'s, and ``gpt-5-chat-latest`` never takes ``gpt-5``'s.
- Overrides are consulted before the registry: the longest matching override wins outright.
- Provider routing is ignored: ``openrouter/anthropic/claude-sonnet-4``,
  ``bedrock/us.anthropic.claude-3-5-sonnet-20240620-v1:0`` and ``claude-sonnet-4`` resolve alike
  (see ``canonical_model_name``). Matching is case-insensitive.

Every figure is the one its provider publishes (model pages of OpenAI, Anthropic, Google,
DeepSeek, Moonshot and Alibaba; the Llama and Qwen model cards; Meta's Llama API). Where
publications disagree (a model whose window grew between snapshots, "128K" that may mean 128,000
or 131,072), the entry takes the smaller figure: a window set too small only compacts early, one
set too large lets a request overflow. ``max_output_tokens`` is the published completion cap;
where a provider publishes none (the reply simply shares the window), it equals the window.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import ConfigurationError, UnknownModelError


class ModelLimits(BaseModel):
    """How many tokens a model accepts in total, and how many of them it may generate."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    context_window: int = Field(gt=0)
    """Prompt plus completion tokens the model accepts in one request."""
    max_output_tokens: int = Field(gt=0)
    """The most tokens one completion may contain (never more than the window)."""

    @model_validator(mode="after")
    def _output_fits(self) -> ModelLimits:
        if self.max_output_tokens > self.context_window:
            raise ValueError(
                f"max_output_tokens ({self.max_output_tokens}) exceeds context_window "
                f"({self.context_window})"
            )
        return self


def _limits(context_window: int, max_output_tokens: int) -> ModelLimits:
    return ModelLimits(context_window=context_window, max_output_tokens=max_output_tokens)


def _family(limits: ModelLimits, *prefixes: str) -> dict[str, ModelLimits]:
    return dict.fromkeys(prefixes, limits)


_LLAMA3 = _limits(8_192, 4_096)  # Llama 3 model card: 8k context
_LLAMA3_1 = _limits(128_000, 4_096)  # Llama 3.1-3.3 model cards / Meta Llama API: 128k
_LLAMA4 = _limits(128_000, 4_096)  # Meta Llama API serves Scout and Maverick at 128k

_REGISTRY: dict[str, ModelLimits] = {
    # --- OpenAI -------------------------------------------------------------------------------
    "gpt-3.5-turbo": _limits(16_385, 4_096),
    "gpt-3.5-turbo-0301": _limits(4_096, 4_096),
    "gpt-3.5-turbo-0613": _limits(4_096, 4_096),
    "gpt-3.5-turbo-instruct": _limits(4_096, 4_096),
    "gpt-35-turbo": _limits(16_385, 4_096),  # Azure's spelling
    "gpt-4": _limits(8_192, 8_192),
    "gpt-4-32k": _limits(32_768, 32_768),
    "gpt-4-turbo": _limits(128_000, 4_096),
    "gpt-4-1106": _limits(128_000, 4_096),  # gpt-4-1106-preview
    "gpt-4-0125": _limits(128_000, 4_096),  # gpt-4-0125-preview
    "gpt-4-vision": _limits(128_000, 4_096),
    "gpt-4o": _limits(128_000, 16_384),
    "gpt-4o-2024-05-13": _limits(128_000, 4_096),
    "gpt-4o-mini": _limits(128_000, 16_384),
    "chatgpt-4o": _limits(128_000, 16_384),
    "gpt-4.1": _limits(1_047_576, 32_768),  # gpt-4.1, gpt-4.1-mini, gpt-4.1-nano
    "gpt-4.5": _limits(128_000, 16_384),
    "gpt-5": _limits(400_000, 128_000),  # gpt-5, -mini, -nano, -codex, gpt-5.1, gpt-5.2 ...
    "gpt-5-pro": _limits(400_000, 272_000),
    **_family(_limits(128_000, 16_384), "gpt-5-chat", "gpt-5.1-chat", "gpt-5.2-chat"),
    "o1": _limits(200_000, 100_000),  # o1, o1-pro
    "o1-mini": _limits(128_000, 65_536),
    "o1-preview": _limits(128_000, 32_768),
    "o3": _limits(200_000, 100_000),  # o3, o3-pro
    "o3-mini": _limits(200_000, 100_000),
    "o4-mini": _limits(200_000, 100_000),
    "gpt-oss": _limits(131_072, 131_072),  # gpt-oss-120b, gpt-oss-20b
    # --- Anthropic ----------------------------------------------------------------------------
    **_family(_limits(200_000, 4_096), "claude-3-haiku", "claude-3-sonnet", "claude-3-opus"),
    **_family(
        _limits(200_000, 8_192),
        "claude-3-5-sonnet",
        "claude-3.5-sonnet",
        "claude-3-5-haiku",
        "claude-3.5-haiku",
    ),
    **_family(_limits(200_000, 64_000), "claude-3-7-sonnet", "claude-3.7-sonnet"),
    **_family(_limits(200_000, 64_000), "claude-sonnet-4", "claude-4-sonnet"),  # 4, 4.5
    **_family(_limits(200_000, 32_000), "claude-opus-4", "claude-4-opus"),  # 4, 4.1
    **_family(_limits(200_000, 64_000), "claude-opus-4-5", "claude-opus-4.5"),
    **_family(_limits(200_000, 64_000), "claude-haiku-4-5", "claude-haiku-4.5"),
    # --- Google -------------------------------------------------------------------------------
    "gemini-1.5-pro": _limits(2_097_152, 8_192),
    "gemini-1.5-flash": _limits(1_048_576, 8_192),  # incl. gemini-1.5-flash-8b
    "gemini-2.0-flash": _limits(1_048_576, 8_192),  # incl. gemini-2.0-flash-lite
    "gemini-2.0-flash-preview-image": _limits(32_000, 8_192),
    "gemini-2.5-pro": _limits(1_048_576, 65_536),
    "gemini-2.5-flash": _limits(1_048_576, 65_536),  # incl. gemini-2.5-flash-lite
    "gemini-2.5-flash-image": _limits(32_768, 32_768),
    "gemini-3-pro-preview": _limits(1_048_576, 65_536),
    "gemini-3-flash-preview": _limits(1_048_576, 65_536),
    # --- DeepSeek (API aliases serve the current V3.x; "128K" taken as 128,000) --------------
    "deepseek-chat": _limits(128_000, 8_192),
    "deepseek-reasoner": _limits(128_000, 65_536),
    "deepseek-v3": _limits(128_000, 8_192),  # open weights, incl. V3.1 / V3.2
    "deepseek-r1": _limits(128_000, 32_768),  # open weights, incl. the R1 distills
    # --- Moonshot / Kimi ----------------------------------------------------------------------
    "kimi-k2": _limits(131_072, 16_384),  # kimi-k2-0711: 128k
    **_family(
        _limits(262_144, 16_384),
        "kimi-k2-0905",
        "kimi-k2-instruct-0905",
        "kimi-k2-turbo",
        "kimi-k2-thinking",
    ),
    "moonshot-v1-8k": _limits(8_192, 8_192),
    "moonshot-v1-32k": _limits(32_768, 32_768),
    "moonshot-v1-128k": _limits(131_072, 131_072),
    "moonshot-v1-auto": _limits(131_072, 131_072),
    # --- Qwen ---------------------------------------------------------------------------------
    "qwen-max": _limits(32_768, 8_192),
    "qwen-plus": _limits(131_072, 8_192),
    "qwen-turbo": _limits(131_072, 8_192),  # newer snapshots accept 1M; the older 128k is kept
    **_family(_limits(32_768, 8_192), "qwen2.5", "qwen-2.5"),  # native window (YaRN extends)
    **_family(_limits(32_768, 32_768), "qwen3", "qwen-3"),  # native window (YaRN extends)
    **_family(_limits(262_144, 65_536), "qwen3-coder", "qwen-3-coder"),
    # --- Meta Llama (HF, Groq, Ollama, Bedrock and Fireworks spellings) ------------------------
    **_family(_LLAMA3, "llama-3", "llama3", "llama-v3"),
    **_family(
        _LLAMA3_1,
        *(
            f"{stem}{minor}"
            for minor in ("1", "2", "3")
            for stem in ("llama-3.", "llama3.", "llama3-", "llama-v3p")
        ),
    ),
    **_family(_LLAMA4, "llama-4-scout", "llama4-scout", "llama-4-maverick", "llama4-maverick"),
}

REGISTRY: Mapping[str, ModelLimits] = MappingProxyType(_REGISTRY)
"""Built-in limits, keyed by lower-case model-name prefix (read-only)."""

_BEDROCK_PREFIX = re.compile(
    r"^(?:(?:us|eu|apac|global|us-gov|jp|au|ca)\.)?"
    r"(?:anthropic|meta|amazon|mistral|cohere|ai21|deepseek|qwen|openai|moonshot|moonshotai|google)"
    r"\.(?=[a-z])"
)


def canonical_model_name(model: str) -> str:
    """The bare, lower-case model name that registries are matched against.

    Drops routing that says where a model is served, not what it is: everything up to the last
    ``/`` (``openai/``, ``azure/``, ``openrouter/anthropic/``, ``together_ai/meta-llama/``,
    ``vertex_ai/``, ``bedrock/``...), a fine-tune's ``ft:`` prefix, a Bedrock region and vendor
    (``us.anthropic.``, ``meta.``) and the ``meta-`` of ``Meta-Llama-3.1-...``.
    """
    name = model.strip().lower().rsplit("/", 1)[-1]
    name = name.removeprefix("ft:")
    name = _BEDROCK_PREFIX.sub("", name, count=1)
    if name.startswith("meta-llama"):
        name = name.removeprefix("meta-")
    return name


def longest_prefix_key(names: tuple[str, ...], keys: Iterable[str]) -> str | None:
    """The longest of ``keys`` (compared case-insensitively) that starts any of ``names``; the
    empty key, which starts every name, is the last resort."""
    best: str | None = None
    best_length = -1
    for key in keys:
        folded = key.strip().lower()
        if len(folded) > best_length and any(name.startswith(folded) for name in names):
            best, best_length = key, len(folded)
    return best


def _coerce(key: str, value: ModelLimits | Mapping[str, int]) -> ModelLimits:
    if isinstance(value, ModelLimits):
        return value
    try:
        return ModelLimits.model_validate(dict(value))
    except (ValidationError, TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"invalid model_limits entry {key!r}: expected context_window and max_output_tokens "
            f"as positive integers ({exc})"
        ) from exc


def lookup_limits(
    model: str,
    overrides: Mapping[str, ModelLimits | Mapping[str, int]] | None = None,
) -> ModelLimits:
    """The limits of ``model``: the longest matching override, else the longest registry prefix.

    Override keys may be a bare prefix (``"my-finetune"``) or a full routed name
    (``"azure/my-deployment"``); they are matched against both the routed and the canonical name.
    Override values are ``ModelLimits`` or mappings with ``context_window`` and
    ``max_output_tokens`` (an invalid one raises ``ConfigurationError``). Raises
    ``UnknownModelError`` when nothing matches.
    """
    raw = model.strip().lower() if isinstance(model, str) else ""
    canonical = canonical_model_name(raw) if raw else ""
    if overrides:
        key = longest_prefix_key((raw, canonical), overrides)
        if key is not None:
            return _coerce(key, overrides[key])
    if canonical:
        key = longest_prefix_key((canonical,), _REGISTRY)
        if key is not None:
            return _REGISTRY[key]
    raise UnknownModelError(model)
