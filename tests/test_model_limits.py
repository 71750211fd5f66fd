"""The model registry: families, provider routing, longest prefix, overrides, unknown models."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from context_summarizer.core.errors import ConfigurationError, UnknownModelError
from context_summarizer.core.model_limits import (
    REGISTRY,
    ModelLimits,
    canonical_model_name,
    lookup_limits,
)


@pytest.mark.parametrize(
    ("model", "window", "output"),
    [
        # OpenAI
        ("gpt-3.5-turbo", 16_385, 4_096),
        ("gpt-3.5-turbo-0125", 16_385, 4_096),
        ("gpt-3.5-turbo-0613", 4_096, 4_096),
        ("gpt-4", 8_192, 8_192),
        ("gpt-4-0613", 8_192, 8_192),
        ("gpt-4-32k", 32_768, 32_768),
        ("gpt-4-turbo", 128_000, 4_096),
        ("gpt-4-turbo-2024-04-09", 128_000, 4_096),
        ("gpt-4-1106-preview", 128_000, 4_096),
        ("gpt-4o", 128_000, 16_384),
        ("gpt-4o-2024-05-13", 128_000, 4_096),
        ("gpt-4o-mini", 128_000, 16_384),
        ("chatgpt-4o-latest", 128_000, 16_384),
        ("gpt-4.1", 1_047_576, 32_768),
        ("gpt-4.1-mini", 1_047_576, 32_768),
        ("gpt-4.1-nano-2025-04-14", 1_047_576, 32_768),
        ("gpt-5", 400_000, 128_000),
        ("gpt-5-mini", 400_000, 128_000),
        ("gpt-5-nano", 400_000, 128_000),
        ("gpt-5.1", 400_000, 128_000),
        ("gpt-5.2", 400_000, 128_000),
        ("gpt-5-chat-latest", 128_000, 16_384),
        ("gpt-5-pro", 400_000, 272_000),
        ("o1", 200_000, 100_000),
        ("o1-2024-12-17", 200_000, 100_000),
        ("o1-mini", 128_000, 65_536),
        ("o1-preview", 128_000, 32_768),
        ("o3", 200_000, 100_000),
        ("o3-mini", 200_000, 100_000),
        ("o4-mini", 200_000, 100_000),
        ("gpt-oss-120b", 131_072, 131_072),
        ("gpt-oss-20b", 131_072, 131_072),
        # Anthropic
        ("claude-3-haiku-20240307", 200_000, 4_096),
        ("claude-3-sonnet-20240229", 200_000, 4_096),
        ("claude-3-opus-20240229", 200_000, 4_096),
        ("claude-3-5-sonnet-20241022", 200_000, 8_192),
        ("claude-3-5-haiku-20241022", 200_000, 8_192),
        ("claude-3-7-sonnet-20250219", 200_000, 64_000),
        ("claude-sonnet-4-20250514", 200_000, 64_000),
        ("claude-sonnet-4-5", 200_000, 64_000),
        ("claude-opus-4-20250514", 200_000, 32_000),
        ("claude-opus-4-1-20250805", 200_000, 32_000),
        ("claude-opus-4-5", 200_000, 64_000),
        ("claude-haiku-4-5-20251001", 200_000, 64_000),
        # Google
        ("gemini-1.5-pro", 2_097_152, 8_192),
        ("gemini-1.5-flash", 1_048_576, 8_192),
        ("gemini-2.0-flash", 1_048_576, 8_192),
        ("gemini-2.0-flash-lite", 1_048_576, 8_192),
        ("gemini-2.5-pro", 1_048_576, 65_536),
        ("gemini-2.5-flash", 1_048_576, 65_536),
        ("gemini-2.5-flash-image-preview", 32_768, 32_768),
        # DeepSeek
        ("deepseek-chat", 128_000, 8_192),
        ("deepseek-reasoner", 128_000, 65_536),
        ("deepseek-v3", 128_000, 8_192),
        ("deepseek-r1", 128_000, 32_768),
        # Moonshot / Kimi
        ("kimi-k2-0711-preview", 131_072, 16_384),
        ("kimi-k2-0905-preview", 262_144, 16_384),
        ("kimi-k2-turbo-preview", 262_144, 16_384),
        ("moonshot-v1-8k", 8_192, 8_192),
        ("moonshot-v1-32k", 32_768, 32_768),
        ("moonshot-v1-128k", 131_072, 131_072),
        # Qwen
        ("qwen-max", 32_768, 8_192),
        ("qwen-plus", 131_072, 8_192),
        ("qwen-turbo", 131_072, 8_192),
        ("qwen2.5-72b-instruct", 32_768, 8_192),
        ("qwen3-235b-a22b", 32_768, 32_768),
        ("qwen3-coder-480b-a35b-instruct", 262_144, 65_536),
        # Llama
        ("llama-3-70b-instruct", 8_192, 4_096),
        ("llama-3.1-8b-instant", 128_000, 4_096),
        ("llama-3.2-90b-vision-instruct", 128_000, 4_096),
        ("llama-3.3-70b-versatile", 128_000, 4_096),
        ("llama-4-scout-17b-16e-instruct", 128_000, 4_096),
        ("llama-4-maverick-17b-128e-instruct", 128_000, 4_096),
    ],
)
def test_families_resolve(model: str, window: int, output: int) -> None:
    assert lookup_limits(model) == ModelLimits(context_window=window, max_output_tokens=output)


@pytest.mark.parametrize(
    ("model", "same_as"),
    [
        ("openai/gpt-4o", "gpt-4o"),
        ("azure/gpt-4.1-mini", "gpt-4.1-mini"),
        ("anthropic/claude-3-5-sonnet-20241022", "claude-3-5-sonnet"),
        ("openrouter/anthropic/claude-sonnet-4.5", "claude-sonnet-4-5"),
        ("openrouter/anthropic/claude-3.7-sonnet", "claude-3-7-sonnet"),
        ("bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0", "claude-3-5-sonnet"),
        ("bedrock/us.anthropic.claude-sonnet-4-20250514-v1:0", "claude-sonnet-4"),
        ("bedrock/meta.llama3-1-70b-instruct-v1:0", "llama-3.1"),
        ("vertex_ai/gemini-2.5-pro", "gemini-2.5-pro"),
        ("vertex_ai/claude-3-5-sonnet-v2@20241022", "claude-3-5-sonnet"),
        ("gemini/gemini-2.0-flash", "gemini-2.0-flash"),
        ("together_ai/meta-llama/Meta-Llama-3.1-70B-Instruct-Turbo", "llama-3.1"),
        ("together_ai/deepseek-ai/DeepSeek-V3", "deepseek-v3"),
        ("together_ai/Qwen/Qwen2.5-72B-Instruct-Turbo", "qwen2.5"),
        ("groq/llama3-70b-8192", "llama-3"),
        ("groq/moonshotai/kimi-k2-instruct-0905", "kimi-k2-0905"),
        ("ollama/llama3.1:8b", "llama-3.1"),
        ("ollama/qwen3:8b", "qwen3"),
        ("openrouter/deepseek/deepseek-r1-0528:free", "deepseek-r1"),
        ("openrouter/moonshotai/kimi-k2", "kimi-k2"),
        ("openrouter/qwen/qwen-2.5-72b-instruct", "qwen2.5"),
        ("fireworks_ai/accounts/fireworks/models/llama-v3p1-405b-instruct", "llama-3.1"),
        ("bedrock/openai.gpt-oss-120b-1:0", "gpt-oss"),
        ("ft:gpt-4o-mini-2024-07-18:acme:custom:abc123", "gpt-4o-mini"),
        ("GPT-4o", "gpt-4o"),
        ("  gpt-4o  ", "gpt-4o"),
    ],
)
def test_provider_prefixes_are_stripped(model: str, same_as: str) -> None:
    assert lookup_limits(model) == lookup_limits(same_as)


def test_canonical_model_name() -> None:
    assert canonical_model_name("openrouter/anthropic/claude-sonnet-4") == "claude-sonnet-4"
    assert canonical_model_name("bedrock/eu.anthropic.claude-3-haiku") == "claude-3-haiku"
    assert canonical_model_name("Meta-Llama-3.1-8B") == "llama-3.1-8b"
    assert canonical_model_name("ft:gpt-4o:org::id") == "gpt-4o:org::id"


def test_longest_prefix_wins() -> None:
    assert lookup_limits("gpt-4o").context_window == 128_000  # not gpt-4's 8,192
    assert lookup_limits("gpt-4.1").context_window == 1_047_576  # not gpt-4's
    assert lookup_limits("gpt-4.5-preview").context_window == 128_000
    assert lookup_limits("gpt-4-turbo").max_output_tokens == 4_096
    assert lookup_limits("o1-mini").context_window == 128_000  # not o1's 200,000
    assert lookup_limits("moonshot-v1-8k").context_window == 8_192
    assert lookup_limits("moonshot-v1-8k-vision-preview").context_window == 8_192
    assert lookup_limits("moonshot-v1-128k").context_window == 131_072
    assert lookup_limits("claude-opus-4-1").max_output_tokens == 32_000
    assert lookup_limits("claude-opus-4-5-20251101").max_output_tokens == 64_000
    assert lookup_limits("qwen3-coder-plus").context_window == 262_144  # not qwen3's
    assert lookup_limits("gpt-5.1-chat-latest").context_window == 128_000  # not gpt-5's


def test_overrides_as_dict_or_model() -> None:
    overrides: dict[str, ModelLimits | dict[str, int]] = {
        "my-local": {"context_window": 32_000, "max_output_tokens": 2_000},
        "my-local-long": ModelLimits(context_window=100_000, max_output_tokens=8_000),
        "gpt-4": {"context_window": 9_000, "max_output_tokens": 1_000},
        "azure/prod-deployment": {"context_window": 50_000, "max_output_tokens": 5_000},
    }
    assert lookup_limits("my-local-7b", overrides) == ModelLimits(
        context_window=32_000, max_output_tokens=2_000
    )
    assert lookup_limits("my-local-long-v2", overrides).context_window == 100_000  # longest
    assert lookup_limits("openai/my-local-7b", overrides).context_window == 32_000
    # Overrides come first: even a longer registry prefix (gpt-4o) does not beat them.
    assert lookup_limits("gpt-4o", overrides).context_window == 9_000
    assert lookup_limits("azure/prod-deployment", overrides).context_window == 50_000
    assert lookup_limits("gpt-5", overrides) == REGISTRY["gpt-5"]
    assert lookup_limits("gpt-5", {}) == REGISTRY["gpt-5"]


def test_invalid_override_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="my-model"):
        lookup_limits("my-model", {"my-model": {"context_window": 1_000}})
    with pytest.raises(ConfigurationError):
        lookup_limits("my-model", {"my-model": {"context_window": 1_000, "max_output_tokens": 0}})


@pytest.mark.parametrize(
    "model",
    ["totally-unknown-model", "mistral-large-latest", "azure/my-deployment", "", "gpt", "claude-2"],
)
def test_unknown_model_raises(model: str) -> None:
    with pytest.raises(UnknownModelError) as caught:
        lookup_limits(model)
    assert caught.value.model == model
    message = str(caught.value)
    assert repr(model) in message
    assert "context_window" in message


def test_model_limits_validation_and_immutability() -> None:
    limits = ModelLimits(context_window=1_000, max_output_tokens=100)
    with pytest.raises(ValidationError):
        limits.context_window = 5
    with pytest.raises(ValidationError):
        ModelLimits(context_window=1_000, max_output_tokens=2_000)
    with pytest.raises(ValidationError):
        ModelLimits(context_window=0, max_output_tokens=0)
    with pytest.raises(TypeError):
        REGISTRY["new-model"] = limits  # type: ignore[index]


def test_registry_keys_are_canonical() -> None:
    for key, limits in REGISTRY.items():
        assert key == canonical_model_name(key), key
        assert 0 < limits.max_output_tokens <= limits.context_window
