"""Cache-aware cost estimates of chat requests: a price per model and a prompt-cache model. Pure.

A request's prompt is billed in three parts, each at its own rate, plus its output:

- **cached** tokens, read from the provider's prompt cache (``Price.cached_input``);
- **cache writes**, tokens stored into the cache for later requests (``Price.cache_write``);
- the rest, plain **input** (``Price.input``);
- **output** tokens (``Price.output``), never cached.

What can be cached depends on what an earlier request already sent byte for byte: the request's
*reusable prefix*. The caller estimates it for each request (this module never guesses it); the
evaluator does it this way:

- a **self-summary request** is the live conversation plus one appended instruction, so all of it
  but that instruction is reusable;
- a **from-scratch summary request** is a new prompt (its own system prompt, then the transcript
  as text), so nothing of it is reusable;
- the **next request after a compaction** shares with the requests before it only the leading
  messages that did not change (tools, system prompt, usually the task); from the first changed
  message on it is new.

Given the reusable prefix, the two cache styles bill differently:

- ``automatic`` (OpenAI): the provider caches prefixes on its own. A hit needs at least
  ``min_cache_tokens`` (1,024) matching tokens and grows in ``cache_step`` (128) token steps;
  writing costs nothing extra, so ``cache_write`` normally equals ``input`` and no token is
  counted as a cache write.
- ``explicit`` (Anthropic): the client marks cache breakpoints. The estimate assumes the usual
  agent placement, a breakpoint at the end of every request: the reusable prefix is read when it
  reaches the model's minimum cacheable length, and the rest of the prompt is written (for the
  next request) when the whole prompt reaches it.

The default table (``prices.json`` beside this module) holds list prices as of 2025; a JSON file
of the same shape overrides or extends it (``load_prices``). Everything here is pure except
``load_prices``/``default_prices``, which read those files.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from os import PathLike
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..core.errors import ConfigurationError
from ..core.model_limits import canonical_model_name, longest_prefix_key

CacheStyle = Literal["automatic", "explicit"]
"""How a provider caches prompts: by itself (OpenAI) or at client-marked breakpoints (Anthropic)."""

PER_TOKENS = 1_000_000
"""Prices are in US dollars per this many tokens."""

DEFAULT_PRICES_FILE = Path(__file__).with_name("prices.json")
"""The default price table: list prices as of 2025, overridable with ``load_prices``."""


class Price(BaseModel):
    """What one model costs, in US dollars per million tokens, and how it caches prompts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0)
    """Uncached prompt tokens."""
    cached_input: float = Field(ge=0)
    """Prompt tokens read from the cache."""
    cache_write: float = Field(ge=0)
    """Prompt tokens written to the cache (Anthropic: 1.25x input; OpenAI: the input price)."""
    output: float = Field(ge=0)
    """Completion tokens."""
    cache: CacheStyle = "automatic"
    """The cache model (see the module docstring)."""
    min_cache_tokens: int = Field(default=1024, ge=0)
    """The shortest prefix the provider caches."""
    cache_step: int = Field(default=128, ge=1)
    """``automatic`` only: cache hits grow in steps of this many tokens past the minimum."""


class RequestTokens(BaseModel):
    """The token figures of one request that its cost depends on."""

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = Field(ge=0)
    reusable_prefix_tokens: int = Field(default=0, ge=0)
    """Leading prompt tokens an earlier request already sent byte for byte."""
    output_tokens: int = Field(default=0, ge=0)


class Cost(BaseModel):
    """A request's (or several requests') tokens by billing class, and their price."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    """Prompt tokens billed as plain input."""
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            input_tokens=self.input_tokens + other.input_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            usd=self.usd + other.usd,
        )


def cached_tokens(price: Price, *, reusable_prefix_tokens: int, prompt_tokens: int) -> int:
    """How many prompt tokens are read from the cache, given the reusable prefix.

    ``automatic``: nothing under ``min_cache_tokens``, else the minimum plus whole
    ``cache_step``s (OpenAI's rounding). ``explicit``: the whole prefix once it reaches the minimum.
    Never more than the prompt.
    """
    prefix = min(reusable_prefix_tokens, prompt_tokens)
    if prefix < max(1, price.min_cache_tokens):
        return 0
    if price.cache == "explicit":
        return prefix
    steps = (prefix - price.min_cache_tokens) // price.cache_step
    return min(price.min_cache_tokens + steps * price.cache_step, prompt_tokens)


def request_cost(price: Price, request: RequestTokens) -> Cost:
    """The cost of one request under ``price`` and its cache model (see the module docstring)."""
    cached = cached_tokens(
        price,
        reusable_prefix_tokens=request.reusable_prefix_tokens,
        prompt_tokens=request.prompt_tokens,
    )
    written = 0
    if price.cache == "explicit" and request.prompt_tokens >= max(1, price.min_cache_tokens):
        written = request.prompt_tokens - cached
    plain = request.prompt_tokens - cached - written
    usd = (
        plain * price.input
        + cached * price.cached_input
        + written * price.cache_write
        + request.output_tokens * price.output
    ) / PER_TOKENS
    return Cost(
        input_tokens=plain,
        cached_tokens=cached,
        cache_write_tokens=written,
        output_tokens=request.output_tokens,
        usd=usd,
    )


def total_cost(costs: Iterable[Cost]) -> Cost:
    """The sum of several costs."""
    total = Cost()
    for cost in costs:
        total = total + cost
    return total


def price_for(model: str, prices: Mapping[str, Price]) -> Price | None:
    """The price of ``model``: the longest table key that prefixes its name, or None.

    Matching ignores case and provider routing (``openai/gpt-4o`` is ``gpt-4o``), and the longest
    key wins, so ``gpt-4o-mini`` never takes ``gpt-4o``'s price.
    """
    raw = model.strip().lower()
    key = longest_prefix_key((raw, canonical_model_name(raw)), prices)
    return prices[key] if key is not None else None


def parse_prices(data: Any, *, source: str = "<prices>") -> dict[str, Price]:
    """A price table from decoded JSON: ``{"models": {name: {...Price fields}}}``.

    A ``note`` key beside ``models`` is allowed and ignored. Raises ``ConfigurationError`` naming
    the bad entry.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("models"), Mapping):
        raise ConfigurationError(
            f'{source}: a price file is a JSON object {{"models": {{"<model>": {{"input": ..., '
            '"cached_input": ..., "cache_write": ..., "output": ...}}}}}} (US dollars per '
            "million tokens)"
        )
    unknown = sorted(set(data) - {"models", "note"})
    if unknown:
        raise ConfigurationError(f"{source}: unknown top-level keys {unknown}")
    table: dict[str, Price] = {}
    for name, entry in data["models"].items():
        try:
            table[str(name)] = Price.model_validate(entry)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'entry'}: {error['msg']}"
                for error in exc.errors(include_url=False, include_input=False)
            )
            raise ConfigurationError(f"{source}: price of {name!r}: {problems}") from exc
    return table


@functools.cache
def default_prices() -> dict[str, Price]:
    """The shipped price table (list prices as of 2025)."""
    text = DEFAULT_PRICES_FILE.read_text(encoding="utf-8")
    return parse_prices(json.loads(text), source=str(DEFAULT_PRICES_FILE))


def load_prices(path: str | PathLike[str] | None = None) -> dict[str, Price]:
    """The default table, with the entries of the JSON file at ``path`` (when given) added or
    replacing those of the same name."""
    table = dict(default_prices())
    if path is None:
        return table
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read the price file {path}: {exc}") from exc
    table.update(parse_prices(data, source=str(path)))
    return table
