"""Every invalid setting, at every entry point, raises the package's own ``ConfigurationError``.

Never pydantic's ``ValidationError``: the message names each offending field, and the error is
still a ``ValueError`` for callers that catch that.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from pydantic import ValidationError

import context_summarizer
from context_summarizer.core.config import CompactionConfig, PinRule
from context_summarizer.core.errors import ConfigurationError
from context_summarizer.library.manager import ContextManager
from context_summarizer.proxy.services import ProxyServices
from context_summarizer.proxy.settings import Settings
from context_summarizer.stores import MemoryStore

SECRET = "sk-test-0123456789abcdefSECRET"


@pytest.fixture
def client() -> Iterator[openai.OpenAI]:
    # Never sends a request: wrap() must refuse the configuration before any call.
    with openai.OpenAI(api_key="sk-unused", base_url="http://127.0.0.1:9/v1") as sdk:
        yield sdk


# (what is built, the fields its message must name)
CASES: list[tuple[str, Callable[[openai.OpenAI], Any], tuple[str, ...]]] = [
    ("target over trigger", lambda c: ContextManager(target_ratio=0.9), ("target_ratio",)),
    ("trigger over 1", lambda c: ContextManager(trigger_ratio=2), ("trigger_ratio",)),
    ("pin of the wrong type", lambda c: ContextManager(pin=[{"tool": 3}]), ("pin", "tool")),
    ("empty pin rule", lambda c: ContextManager(pin=[{"keep": 2}]), ("role", "tool", "pattern")),
    ("unknown keyword", lambda c: ContextManager(nonsense=1), ("nonsense",)),
    (
        "negative window via wrap",
        lambda c: context_summarizer.wrap(c, context_window=-1),
        ("context_window",),
    ),
    (
        "config and field keywords together",
        lambda c: ContextManager(config=CompactionConfig(), trigger_ratio=0.9),
        ("config", "trigger_ratio"),
    ),
    ("config not a CompactionConfig", lambda c: ContextManager(config={"x": 1}), ("config",)),
    ("store neither a Store nor a path", lambda c: ContextManager(store=12), ("store",)),
    ("client not an openai client", lambda c: ContextManager(client="sk-key"), ("client",)),
    ("on_compaction not callable", lambda c: ContextManager(on_compaction=3), ("on_compaction",)),
    ("summarizer not callable", lambda c: ContextManager(summarizer="gpt"), ("summarizer",)),
    ("store via wrap", lambda c: context_summarizer.wrap(c, store=object()), ("store",)),
    ("summary cap of 0", lambda c: CompactionConfig(max_summary_tokens=0), ("max_summary_tokens",)),
    ("unknown on_failure", lambda c: CompactionConfig(on_failure="ignore"), ("on_failure",)),
    ("pin rule of the wrong type", lambda c: PinRule(tool=3), ("tool",)),
    ("pin pattern that does not compile", lambda c: PinRule(pattern="("), ("pattern",)),
    (
        "settings: env var out of range",
        lambda c: Settings.from_env({"SUMMARIZER_KEEP_RECENT_TOKENS": "-1"}),
        ("keep_recent_tokens",),
    ),
    (
        "settings: env target over trigger",
        lambda c: Settings.from_env({"SUMMARIZER_TARGET_RATIO": "0.95"}),
        ("target_ratio",),
    ),
    (
        "settings: env var not a number",
        lambda c: Settings.from_env({"SUMMARIZER_TRIGGER_RATIO": "high"}),
        ("trigger_ratio",),
    ),
    ("settings built directly", lambda c: Settings(port=-1), ("port",)),
    (
        "settings: compaction both flat and nested",
        lambda c: Settings(compaction=CompactionConfig(), context_window=1000),
        ("compaction", "context_window"),
    ),
    (
        "settings: nested compaction field",
        lambda c: Settings(compaction={"min_summary_score": 2}),
        ("min_summary_score",),
    ),
]


@pytest.mark.parametrize(
    ("build", "fields"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_invalid_setting_raises_configuration_error_naming_the_field(
    client: openai.OpenAI, build: Callable[[openai.OpenAI], Any], fields: tuple[str, ...]
) -> None:
    # Any exception is caught: its exact type is what the test asserts.
    with pytest.raises(Exception) as info:
        build(client)
    err = info.value
    assert type(err) is ConfigurationError, f"{type(err).__name__}: {err}"
    assert not isinstance(err, ValidationError)
    assert isinstance(err, ValueError)
    for field in fields:
        assert field in str(err)


def test_every_problem_is_listed_with_its_field() -> None:
    with pytest.raises(ConfigurationError) as info:
        CompactionConfig(trigger_ratio=2, max_summary_tokens=0, ledger_max_tokens=-1)
    lines = str(info.value)
    for field in ("trigger_ratio", "max_summary_tokens", "ledger_max_tokens"):
        assert f"{field}: " in lines


def test_pydantic_prefix_is_not_in_the_message() -> None:
    # A validator's own ValueError reads as its message, not as pydantic's "Value error, ...".
    with pytest.raises(ConfigurationError) as info:
        ContextManager(target_ratio=0.9)
    assert "Value error" not in str(info.value)
    assert "must be below trigger_ratio" in str(info.value)


def test_the_error_does_not_carry_the_input_values() -> None:
    # pydantic's error prints each input; the ConfigurationError does not chain it, so a secret
    # given as a setting never reaches a traceback.
    with pytest.raises(ConfigurationError) as info:
        Settings(client_keys=[SECRET, 3])
    printed = "".join(traceback.format_exception(info.value))
    assert "client_keys" in printed
    assert SECRET not in printed
    assert "ValidationError" not in printed


def test_valid_settings_still_build() -> None:
    config = CompactionConfig(trigger_ratio=0.9, target_ratio=0.5, pin={"tool": "read_file"})
    assert config.pin == (PinRule(tool="read_file"),)
    assert CompactionConfig.model_validate(config.model_dump()) == config


# -- one config object from the settings to the engine -------------------------------------------


def test_context_manager_takes_the_config_object_itself() -> None:
    config = CompactionConfig(context_window=10_000, trigger_ratio=0.7, target_ratio=0.3)
    manager = ContextManager(config=config)
    try:
        assert manager.config is config
        assert manager.engine.config is config
    finally:
        manager.close()


def test_context_manager_field_keywords_still_build_the_config() -> None:
    manager = ContextManager(context_window=10_000, summary_model="gpt-4o-mini")
    try:
        assert manager.config == CompactionConfig(
            context_window=10_000, summary_model="gpt-4o-mini"
        )
    finally:
        manager.close()


def test_proxy_hands_its_settings_config_to_the_context_manager() -> None:
    settings = Settings.from_env(
        {"SUMMARIZER_CONTEXT_WINDOW": "64000", "SUMMARIZER_TRIGGER_RATIO": "0.7"}, db=":memory:"
    )
    state = ProxyServices(settings, store=MemoryStore())
    assert state.context.config is settings.compaction
    assert state.context.config.context_window == 64_000
    assert state.context.config.trigger_ratio == 0.7
