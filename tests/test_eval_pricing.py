"""Cache-aware cost estimates: the two cache models, the price table and its overrides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from context_summarizer.core.errors import ConfigurationError
from context_summarizer.evaluation.pricing import (
    Cost,
    Price,
    RequestTokens,
    cached_tokens,
    default_prices,
    load_prices,
    price_for,
    request_cost,
    total_cost,
)

OPENAI = Price(input=2.0, cached_input=0.5, cache_write=2.0, output=8.0)
ANTHROPIC = Price(input=3.0, cached_input=0.3, cache_write=3.75, output=15.0, cache="explicit")


@pytest.mark.parametrize(
    ("reusable", "prompt", "expected"),
    [
        (1_023, 5_000, 0),  # under the minimum: no hit
        (1_024, 5_000, 1_024),
        (1_151, 5_000, 1_024),  # not yet a whole step past the minimum
        (1_152, 5_000, 1_152),
        (9_000, 5_000, 4_992),  # never more than the prompt, and still in steps
    ],
)
def test_automatic_caching_rounds_like_openai(reusable: int, prompt: int, expected: int) -> None:
    assert cached_tokens(OPENAI, reusable_prefix_tokens=reusable, prompt_tokens=prompt) == expected


def test_automatic_caching_bills_writes_as_plain_input() -> None:
    cost = request_cost(
        OPENAI, RequestTokens(prompt_tokens=10_000, reusable_prefix_tokens=2_000, output_tokens=500)
    )
    assert (cost.cached_tokens, cost.cache_write_tokens, cost.input_tokens) == (1_920, 0, 8_080)
    assert cost.usd == pytest.approx((8_080 * 2.0 + 1_920 * 0.5 + 500 * 8.0) / 1e6)


def test_explicit_caching_reads_the_prefix_and_writes_the_rest() -> None:
    cost = request_cost(
        ANTHROPIC,
        RequestTokens(prompt_tokens=10_000, reusable_prefix_tokens=6_000, output_tokens=100),
    )
    assert (cost.cached_tokens, cost.cache_write_tokens, cost.input_tokens) == (6_000, 4_000, 0)
    assert cost.usd == pytest.approx((6_000 * 0.3 + 4_000 * 3.75 + 100 * 15.0) / 1e6)


def test_explicit_caching_ignores_prompts_under_the_minimum() -> None:
    cost = request_cost(ANTHROPIC, RequestTokens(prompt_tokens=800, reusable_prefix_tokens=700))
    assert (cost.cached_tokens, cost.cache_write_tokens, cost.input_tokens) == (0, 0, 800)


def test_a_new_prompt_is_all_input() -> None:
    cost = request_cost(OPENAI, RequestTokens(prompt_tokens=30_000, output_tokens=1_000))
    assert cost.cached_tokens == 0 and cost.input_tokens == 30_000
    assert cost.usd == pytest.approx((30_000 * 2.0 + 1_000 * 8.0) / 1e6)


def test_costs_add_up() -> None:
    a = Cost(input_tokens=1, cached_tokens=2, cache_write_tokens=3, output_tokens=4, usd=0.5)
    total = total_cost([a, a])
    assert total == Cost(
        input_tokens=2, cached_tokens=4, cache_write_tokens=6, output_tokens=8, usd=1.0
    )


def test_the_default_table_has_list_prices_for_the_common_models() -> None:
    table = default_prices()
    for model in ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "gpt-5", "gpt-5-mini"):
        assert table[model].cache == "automatic"
    for model in ("claude-sonnet-4", "claude-haiku-4-5"):
        price = table[model]
        assert price.cache == "explicit"
        assert price.cache_write == pytest.approx(price.input * 1.25)
        assert price.cached_input == pytest.approx(price.input * 0.1)


def test_a_model_takes_the_longest_matching_price() -> None:
    table = default_prices()
    assert price_for("gpt-4o-mini-2024-07-18", table) == table["gpt-4o-mini"]
    assert price_for("gpt-4o-2024-08-06", table) == table["gpt-4o"]
    assert price_for("openai/GPT-4.1-mini", table) == table["gpt-4.1-mini"]
    assert price_for("claude-sonnet-4-5-20250929", table) == table["claude-sonnet-4"]
    assert price_for("test-model", table) is None


def test_an_override_file_replaces_and_adds_entries(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {
                "models": {
                    "gpt-4o": {"input": 1, "cached_input": 0.1, "cache_write": 1, "output": 2},
                    "test-model": {"input": 0, "cached_input": 0, "cache_write": 0, "output": 0},
                }
            }
        )
    )
    table = load_prices(path)
    assert table["gpt-4o"].input == 1
    assert price_for("test-model", table) is not None
    assert table["gpt-5"] == default_prices()["gpt-5"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "cannot read the price file"),
        ('{"gpt-4o": {}}', "a price file is a JSON object"),
        (
            '{"models": {"m": {"input": -1, "cached_input": 0, "cache_write": 0, "output": 0}}}',
            "'m'",
        ),
        ('{"models": {"m": {"input": 1}}}', "cached_input"),
    ],
)
def test_a_bad_price_file_is_refused_clearly(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "prices.json"
    path.write_text(content)
    with pytest.raises(ConfigurationError, match=message):
        load_prices(path)
