"""Pricing a replay's requests under a provider's prompt cache. Pure, no I/O.

``bill_requests`` walks a replay's requests in order with one fresh cache per session:

- ``automatic`` (OpenAI): every prefix of every request is remembered (``PrefixCache`` over
  message digest chains seeded with model and tools); a request's reusable prefix is the longest
  one an earlier request sent, which ``pricing.request_cost`` rounds (1,024 minimum, 128 steps).
- ``explicit`` (Anthropic): only the prefixes ending at a request's breakpoints are remembered,
  and only when they reach the minimum cacheable length; a request reads the longest remembered
  prefix it starts with that ends within ``LOOKBACK_BLOCKS`` content blocks before one of its own
  breakpoints. ``request_cost`` bills the rest as a cache write. A request without breakpoints
  neither reads nor writes: plain input.

``lower_bound_bills`` prices the raw session as if every request read all of the previous one
with no minimum and no steps; ``session_cost`` totals a session in input-equivalent tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from context_summarizer.core.messages import Message, chain_step, message_digest
from context_summarizer.core.tokens import REPLY_PRIMING_TOKENS, TokenCounter
from context_summarizer.evaluation.pricing import (
    PER_TOKENS,
    Cost,
    Price,
    RequestTokens,
    request_cost,
)
from context_summarizer.testing.accounting import PrefixCache

from .cache_replay_session import REPLAY_MODEL, Purpose, SentRequest

LOOKBACK_BLOCKS = 20
"""Anthropic checks for cache hits up to about 20 content blocks before each breakpoint."""


@dataclass(frozen=True)
class Shape:
    """What pricing needs of one request: its prefix hashes and token positions."""

    chain: list[str]
    """``chain[k]`` identifies the first ``k + 1`` messages (seeded with model and tools)."""
    cumulative: list[int]
    """``cumulative[k]``: tokens of the tools and the first ``k`` messages (``k = 0 .. n``)."""
    blocks: list[int]
    """``blocks[k]``: content blocks in the first ``k`` messages."""
    prompt_tokens: int


def message_blocks(message: Mapping[str, Any]) -> int:
    """Content blocks of a message in Anthropic's format: its text, and one per tool call."""
    calls = message.get("tool_calls") or ()
    text = message.get("content")
    return max(1, (1 if text else 0) + len(calls))


class Shapes:
    """Measures requests with the replay counter; digests are memoised per message object."""

    def __init__(self, counter: TokenCounter, model: str = REPLAY_MODEL) -> None:
        self.counter = counter
        self.model = model
        self._digests: dict[int, tuple[Message, str]] = {}

    def digest(self, message: Message) -> str:
        """``message_digest(message)``, computed once per object."""
        known = self._digests.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        digest = message_digest(message)
        self._digests[id(message)] = (message, digest)
        return digest

    def measure(self, request: SentRequest) -> Shape:
        """The shape of ``request``."""
        current = PrefixCache.seed(self.model, request.tools)
        tools = self.counter.count_tools(request.tools)
        chain: list[str] = []
        cumulative = [tools]
        blocks = [0]
        for message in request.messages:
            digest = self.digest(message)
            current = chain_step(current, digest)
            chain.append(current)
            cumulative.append(cumulative[-1] + self.counter.count_message(message, digest=digest))
            blocks.append(blocks[-1] + message_blocks(message))
        return Shape(chain, cumulative, blocks, cumulative[-1] + REPLY_PRIMING_TOKENS)


@dataclass(frozen=True)
class Bill:
    """One priced request."""

    purpose: Purpose
    prompt_tokens: int
    reusable_prefix_tokens: int
    """Tokens the provider's cache could serve (before ``request_cost``'s minimum and steps)."""
    output_tokens: int
    cost: Cost
    rewritten: bool = False
    """The first agent request after a compaction."""


class ProviderCache:
    """One session's prompt cache at one provider: which prefixes earlier requests left."""

    def __init__(self, price: Price, *, lookback_blocks: int = LOOKBACK_BLOCKS) -> None:
        self.price = price
        self.lookback_blocks = lookback_blocks
        self._cache = PrefixCache(max_entries=50_000_000)

    def reusable(self, shape: Shape, breakpoints: Sequence[int]) -> int:
        """Tokens of the longest cached prefix this request can read."""
        if self.price.cache == "automatic":
            return self._cache.longest_prefix(shape.chain)
        best = 0
        for end in breakpoints:
            start = end
            while start > 1 and shape.blocks[end] - shape.blocks[start - 1] <= self.lookback_blocks:
                start -= 1
            if end >= 1:
                best = max(best, self._cache.longest_prefix(shape.chain[start - 1 : end]))
        return best

    def store(self, shape: Shape, breakpoints: Sequence[int]) -> None:
        """Remember what this request leaves in the cache."""
        if self.price.cache == "automatic":
            self._cache.register(shape.chain, shape.cumulative[1:])
            return
        for end in breakpoints:
            if end >= 1 and shape.cumulative[end] >= self.price.min_cache_tokens:
                self._cache.register([shape.chain[end - 1]], [shape.cumulative[end]])


def uncached_cost(price: Price, prompt_tokens: int, output_tokens: int) -> Cost:
    """The cost of a request that neither reads nor writes a cache."""
    usd = (prompt_tokens * price.input + output_tokens * price.output) / PER_TOKENS
    return Cost(input_tokens=prompt_tokens, output_tokens=output_tokens, usd=usd)


def bill_requests(
    requests: Sequence[SentRequest],
    price: Price,
    shapes: Shapes,
    *,
    lookback_blocks: int = LOOKBACK_BLOCKS,
) -> list[Bill]:
    """Price a replay's requests, in order, under ``price``'s cache model (one fresh cache)."""
    cache = ProviderCache(price, lookback_blocks=lookback_blocks)
    bills: list[Bill] = []
    for request in requests:
        shape = shapes.measure(request)
        if price.cache == "explicit" and not request.breakpoints:
            reusable = 0
            cost = uncached_cost(price, shape.prompt_tokens, request.output_tokens)
        else:
            reusable = cache.reusable(shape, request.breakpoints)
            tokens = RequestTokens(
                prompt_tokens=shape.prompt_tokens,
                reusable_prefix_tokens=reusable,
                output_tokens=request.output_tokens,
            )
            cost = request_cost(price, tokens)
            cache.store(shape, request.breakpoints)
        bills.append(
            Bill(
                request.purpose,
                shape.prompt_tokens,
                reusable,
                request.output_tokens,
                cost,
                rewritten=request.rewritten,
            )
        )
    return bills


def perfect(price: Price) -> Price:
    """``price`` with a cache that serves any prefix: no minimum length, no steps."""
    return price.model_copy(update={"min_cache_tokens": 0, "cache_step": 1})


def lower_bound_bills(requests: Sequence[SentRequest], price: Price, shapes: Shapes) -> list[Bill]:
    """Each request reads all of the previous one's prompt, pays for the rest (append-only,
    perfect caching: the raw session's cheapest whole-history cost)."""
    ideal = perfect(price)
    bills: list[Bill] = []
    previous = 0
    for request in requests:
        shape = shapes.measure(request)
        reusable = min(previous, shape.prompt_tokens)
        tokens = RequestTokens(
            prompt_tokens=shape.prompt_tokens,
            reusable_prefix_tokens=reusable,
            output_tokens=request.output_tokens,
        )
        bills.append(
            Bill(
                request.purpose,
                shape.prompt_tokens,
                reusable,
                request.output_tokens,
                request_cost(ideal, tokens),
            )
        )
        previous = shape.cumulative[-1]
    return bills


@dataclass(frozen=True)
class SessionCost:
    """One strategy's session under one cache model."""

    input_equivalent: float
    """Billed input-equivalent tokens: dollars over the price of one uncached input token."""
    prompt_tokens: int
    cached_tokens: int
    compaction_input_equivalent: float
    """Of ``input_equivalent``, the summary requests (prompt and output)."""
    compaction_prompt_input_equivalent: float
    """Of that, the summary requests' prompts alone."""
    compactions: int
    rewrite_uncached_tokens: int = 0
    """Prompt tokens of the first agent requests after compactions not read from the cache."""
    summary_prompt_tokens: int = 0
    summary_uncached_tokens: int = 0
    """Prompt tokens of the summary requests, and those of them not read from the cache."""
    summary_requests: int = 0
    narrowed: int = 0
    """Rolling masking only: requests that kept fewer than M turns' outputs (``Replay``)."""
    requests: int = 0
    fits: bool = True
    """Whether every request fits the priced model's real window (``no compaction`` only)."""

    @property
    def cache_share(self) -> float:
        """Share of the prompt tokens read from the cache."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def compaction_share(self) -> float:
        """Share of the cost spent on summary requests."""
        total = self.input_equivalent
        return self.compaction_input_equivalent / total if total else 0.0


def session_cost(
    bills: Sequence[Bill],
    price: Price,
    *,
    compactions: int,
    narrowed: int = 0,
    window: int | None = None,
) -> SessionCost:
    """Totals of a session's bills; ``window`` also checks that every request fits it."""
    per_token = price.input / PER_TOKENS

    def equivalent(cost: Cost) -> float:
        return cost.usd / per_token if per_token else 0.0

    summaries = [b for b in bills if b.purpose == "summary"]
    output_usd = sum(b.output_tokens * price.output / PER_TOKENS for b in summaries)
    compaction = sum(equivalent(b.cost) for b in summaries)
    return SessionCost(
        input_equivalent=sum(equivalent(b.cost) for b in bills),
        prompt_tokens=sum(b.prompt_tokens for b in bills),
        cached_tokens=sum(b.cost.cached_tokens for b in bills),
        compaction_input_equivalent=compaction,
        compaction_prompt_input_equivalent=compaction
        - (output_usd / per_token if per_token else 0),
        compactions=compactions,
        rewrite_uncached_tokens=sum(
            b.prompt_tokens - b.cost.cached_tokens for b in bills if b.rewritten
        ),
        narrowed=narrowed,
        summary_prompt_tokens=sum(b.prompt_tokens for b in summaries),
        summary_uncached_tokens=sum(b.prompt_tokens - b.cost.cached_tokens for b in summaries),
        summary_requests=len(summaries),
        requests=len(bills),
        fits=window is None or all(b.prompt_tokens + b.output_tokens <= window for b in bills),
    )
