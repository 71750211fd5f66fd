"""Unit tests for ``context_summarizer.proxy.settings``: the proxy's settings from env and flags.

Every test passes an explicit ``environ`` mapping; ``os.environ`` is never read or touched.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from platformdirs import user_state_path
from pydantic import SecretStr
from typer.testing import CliRunner

from context_summarizer.cli.main import app
from context_summarizer.core.config import CompactionConfig
from context_summarizer.core.errors import ConfigurationError
from context_summarizer.proxy.settings import COMPACTION_SETTINGS, DEFAULT_UPSTREAM, Settings

SECRET = "sk-test-0123456789abcdefSECRET"


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.host == "127.0.0.1"
    assert settings.port == 8787
    assert settings.upstream == DEFAULT_UPSTREAM == "https://api.openai.com/v1"
    assert settings.upstream_api_key is None
    assert settings.db is None
    assert settings.compaction.context_window is None
    assert settings.compaction.trigger_ratio == 0.8
    assert settings.compaction.target_ratio == 0.4
    assert settings.compaction.prepare_ratio == 0.6  # drafts ahead of time (the library: off)
    assert CompactionConfig().prepare_ratio is None
    assert settings.compaction.keep_recent_tokens is None
    assert settings.compaction.max_summary_tokens == 2000
    assert settings.compaction.summary_model is None
    assert settings.log_format == "text"
    assert settings.log_level == "info"
    assert settings.max_body_bytes == 32 * 1024 * 1024
    assert settings.upstream_timeout == 600.0
    assert settings.keepalive_interval == 5.0


def test_env_vars_are_read_and_coerced() -> None:
    settings = Settings.from_env(
        {
            "SUMMARIZER_HOST": "0.0.0.0",
            "SUMMARIZER_PORT": "9000",
            "SUMMARIZER_UPSTREAM": "http://localhost:4000/v1",
            "SUMMARIZER_DB": "/tmp/x.db",
            "SUMMARIZER_CONTEXT_WINDOW": "128000",
            "SUMMARIZER_TRIGGER_RATIO": "0.9",
            "SUMMARIZER_TARGET_RATIO": "0.5",
            "SUMMARIZER_KEEP_RECENT_TOKENS": "0",
            "SUMMARIZER_MAX_SUMMARY_TOKENS": "1500",
            "SUMMARIZER_SUMMARY_MODEL": "gpt-4o-mini",
            "SUMMARIZER_LOG_FORMAT": "json",
            "SUMMARIZER_LOG_LEVEL": "debug",
            "SUMMARIZER_MAX_BODY_BYTES": "1024",
            "SUMMARIZER_UPSTREAM_TIMEOUT": "30.5",
            "SUMMARIZER_KEEPALIVE_INTERVAL": "1",
        }
    )
    assert settings.host == "0.0.0.0"
    assert settings.port == 9000
    assert settings.upstream == "http://localhost:4000/v1"
    assert settings.db == Path("/tmp/x.db")
    assert settings.compaction.context_window == 128000
    assert settings.compaction.trigger_ratio == 0.9
    assert settings.compaction.target_ratio == 0.5
    assert settings.compaction.keep_recent_tokens == 0
    assert settings.compaction.max_summary_tokens == 1500
    assert settings.compaction.summary_model == "gpt-4o-mini"
    assert settings.log_format == "json"
    assert settings.log_level == "debug"
    assert settings.max_body_bytes == 1024
    assert settings.upstream_timeout == 30.5
    assert settings.keepalive_interval == 1.0


def test_unprefixed_and_empty_env_vars_are_ignored() -> None:
    settings = Settings.from_env({"PORT": "1", "SUMMARIZER_PORT": "", "summarizer_host": "x"})
    assert settings.port == 8787
    assert settings.host == "127.0.0.1"


def test_flags_win_over_env() -> None:
    settings = Settings.from_env(
        {"SUMMARIZER_PORT": "9000", "SUMMARIZER_SUMMARY_MODEL": "env-model"},
        port=9100,
        summary_model="flag-model",
    )
    assert settings.port == 9100
    assert settings.compaction.summary_model == "flag-model"


def test_none_overrides_do_not_mask_env() -> None:
    settings = Settings.from_env(
        {"SUMMARIZER_PORT": "9000", "SUMMARIZER_CONTEXT_WINDOW": "1000"},
        port=None,
        context_window=None,
        upstream=None,
    )
    assert settings.port == 9000
    assert settings.compaction.context_window == 1000
    assert settings.upstream == DEFAULT_UPSTREAM


def test_openai_base_url_used_when_upstream_unset() -> None:
    settings = Settings.from_env({"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"})
    assert settings.upstream == "http://127.0.0.1:11434/v1"


def test_summarizer_upstream_wins_over_openai_base_url() -> None:
    settings = Settings.from_env(
        {"OPENAI_BASE_URL": "http://ignored/v1", "SUMMARIZER_UPSTREAM": "https://used/v1"}
    )
    assert settings.upstream == "https://used/v1"


def test_upstream_flag_wins_over_both_env_vars() -> None:
    settings = Settings.from_env(
        {"OPENAI_BASE_URL": "http://a/v1", "SUMMARIZER_UPSTREAM": "http://b/v1"},
        upstream="http://c/v1",
    )
    assert settings.upstream == "http://c/v1"


def test_empty_openai_base_url_is_ignored() -> None:
    assert Settings.from_env({"OPENAI_BASE_URL": ""}).upstream == DEFAULT_UPSTREAM


@pytest.mark.parametrize(
    "environ",
    [
        {"SUMMARIZER_UPSTREAM": "https://api.example.com/v1/"},
        {"OPENAI_BASE_URL": "https://api.example.com/v1//"},
    ],
)
def test_trailing_slash_is_stripped(environ: dict[str, str]) -> None:
    assert Settings.from_env(environ).upstream == "https://api.example.com/v1"


def test_trailing_slash_is_stripped_from_flag() -> None:
    assert Settings.from_env({}, upstream="http://x/v1/").upstream == "http://x/v1"


@pytest.mark.parametrize(
    ("environ", "field"),
    [
        ({"SUMMARIZER_PORT": "abc"}, "port"),
        ({"SUMMARIZER_PORT": "70000"}, "port"),
        ({"SUMMARIZER_LOG_FORMAT": "xml"}, "log_format"),
        ({"SUMMARIZER_UPSTREAM": "ftp://x"}, "upstream"),
        ({"OPENAI_BASE_URL": "api.openai.com/v1"}, "upstream"),
        ({"SUMMARIZER_TRIGGER_RATIO": "1.5"}, "trigger_ratio"),
        ({"SUMMARIZER_CONTEXT_WINDOW": "0"}, "context_window"),
    ],
)
def test_invalid_env_values_raise_configuration_error_naming_the_field(
    environ: dict[str, str], field: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        Settings.from_env(environ)
    assert field in str(info.value)


def test_invalid_flag_raises_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="max_body_bytes"):
        Settings.from_env({}, max_body_bytes=0)


def test_unknown_override_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="no_such_field"):
        Settings.from_env({}, no_such_field=1)


def test_target_ratio_not_below_trigger_ratio_is_a_configuration_error() -> None:
    # CompactionConfig requires target_ratio < trigger_ratio; Settings must catch it up front so
    # `summarizer serve` reports it as a configuration error rather than failing at start-up.
    with pytest.raises(ConfigurationError, match="target_ratio"):
        Settings.from_env({"SUMMARIZER_TRIGGER_RATIO": "0.5", "SUMMARIZER_TARGET_RATIO": "0.6"})


def test_unknown_log_level_is_a_configuration_error() -> None:
    # An unknown level would otherwise only fail later, in logging.config.dictConfig.
    with pytest.raises(ConfigurationError, match="log_level"):
        Settings.from_env({"SUMMARIZER_LOG_LEVEL": "verbose"})


# -- the upstream key -----------------------------------------------------------------------------


def test_upstream_api_key_is_a_secret_str() -> None:
    settings = Settings.from_env({"SUMMARIZER_UPSTREAM_API_KEY": SECRET})
    assert isinstance(settings.upstream_api_key, SecretStr)
    assert settings.upstream_api_key.get_secret_value() == SECRET


def test_repr_and_str_do_not_reveal_the_key() -> None:
    settings = Settings.from_env({"SUMMARIZER_UPSTREAM_API_KEY": SECRET})
    assert SECRET not in repr(settings)
    assert SECRET not in str(settings)
    assert SECRET not in repr(settings.upstream_api_key)


def test_configuration_error_does_not_reveal_the_key() -> None:
    with pytest.raises(ConfigurationError) as info:
        Settings.from_env({"SUMMARIZER_UPSTREAM_API_KEY": SECRET, "SUMMARIZER_PORT": "abc"})
    assert SECRET not in str(info.value)


# -- db_path --------------------------------------------------------------------------------------


def test_default_db_path_is_under_the_user_state_path() -> None:
    path = Settings.from_env({}).db_path()
    assert isinstance(path, Path)
    assert path.parent == user_state_path("summarizer", appauthor=False)
    assert path.suffix == ".db"


def test_memory_db_stays_a_string() -> None:
    assert Settings.from_env({"SUMMARIZER_DB": ":memory:"}).db_path() == ":memory:"
    assert Settings.from_env({}, db=":memory:").db_path() == ":memory:"


def test_explicit_db_path_is_returned() -> None:
    assert Settings.from_env({}, db="/tmp/summarizer.db").db_path() == Path("/tmp/summarizer.db")


# -- the embedded compaction configuration ------------------------------------------------------


def test_compaction_fields_are_declared_once_in_compaction_config() -> None:
    # Settings takes them (flat, as flags and variables) but does not re-declare them: their
    # types, bounds and defaults are CompactionConfig's alone.
    assert set(COMPACTION_SETTINGS) <= set(CompactionConfig.model_fields)
    assert set(COMPACTION_SETTINGS).isdisjoint(Settings.model_fields)
    assert Settings.model_fields["compaction"].annotation is CompactionConfig


def test_compaction_settings_from_env_reach_the_config() -> None:
    settings = Settings.from_env(
        {
            "SUMMARIZER_CONTEXT_WINDOW": "64000",
            "SUMMARIZER_TRIGGER_RATIO": "0.7",
            "SUMMARIZER_TARGET_RATIO": "0.3",
            "SUMMARIZER_KEEP_RECENT_TOKENS": "5000",
            "SUMMARIZER_MAX_SUMMARY_TOKENS": "800",
            "SUMMARIZER_SUMMARY_MODEL": "gpt-4o-mini",
        }
    )
    assert settings.compaction == CompactionConfig(
        context_window=64000,
        trigger_ratio=0.7,
        target_ratio=0.3,
        keep_recent_tokens=5000,
        max_summary_tokens=800,
        summary_model="gpt-4o-mini",
        prepare_ratio=0.5,  # midway between the target and the trigger
    )


def test_compaction_flags_win_over_env_field_by_field() -> None:
    settings = Settings.from_env(
        {"SUMMARIZER_TRIGGER_RATIO": "0.9", "SUMMARIZER_CONTEXT_WINDOW": "1000"},
        trigger_ratio=0.7,
        target_ratio=None,
    )
    assert settings.compaction.trigger_ratio == 0.7
    assert settings.compaction.context_window == 1000
    assert settings.compaction.target_ratio == CompactionConfig().target_ratio


def test_default_compaction_is_compaction_config_default_drafting_ahead() -> None:
    assert Settings.from_env({}).compaction == CompactionConfig(prepare_ratio=0.6)


def test_a_whole_compaction_config_is_kept_as_given() -> None:
    config = CompactionConfig(
        context_window=8000, tokenizer="approximate", pin={"role": "system"}, prepare_ratio=0.7
    )
    assert Settings(compaction=config).compaction is config
    assert Settings.from_env({}, compaction=config).compaction is config
    off = CompactionConfig(context_window=8000, prepare_ratio=None)
    assert Settings(compaction=off).compaction is off
    # One that leaves prepare_ratio unset gets the proxy's default, as flags do.
    unset = CompactionConfig(context_window=8000, trigger_ratio=0.9)
    assert Settings(compaction=unset).compaction == unset.model_copy(update={"prepare_ratio": 0.65})


def test_an_env_variable_named_after_the_nested_model_is_not_read() -> None:
    assert Settings.from_env({"SUMMARIZER_COMPACTION": "{}"}).compaction == CompactionConfig(
        prepare_ratio=0.6
    )


@pytest.mark.parametrize("off", ["off", "OFF", "0", "0.0", 0, None])
def test_drafting_ahead_of_time_turns_off(off: Any) -> None:
    assert Settings(prepare_ratio=off).compaction.prepare_ratio is None
    if off is not None:
        environ = {"SUMMARIZER_PREPARE_RATIO": str(off)}
        assert Settings.from_env(environ).compaction.prepare_ratio is None
        assert Settings.from_env({}, prepare_ratio=str(off)).compaction.prepare_ratio is None


def test_the_default_prepare_ratio_lies_midway_between_the_thresholds() -> None:
    environ = {"SUMMARIZER_TRIGGER_RATIO": "0.9", "SUMMARIZER_TARGET_RATIO": "0.6"}
    assert Settings.from_env(environ).compaction.prepare_ratio == 0.75
    assert Settings(target_ratio=0.7).compaction.prepare_ratio == 0.75
    assert Settings.from_env({"SUMMARIZER_PREPARE_RATIO": "0.7"}).compaction.prepare_ratio == 0.7
    with pytest.raises(ConfigurationError) as info:
        Settings(prepare_ratio="soon")
    assert info.value.problems[0][0] == "prepare_ratio"


def test_a_compaction_error_names_the_setting_as_the_user_gave_it() -> None:
    with pytest.raises(ConfigurationError) as info:
        Settings.from_env({"SUMMARIZER_MAX_SUMMARY_TOKENS": "0"})
    assert str(info.value).startswith("invalid settings: max_summary_tokens: ")
    assert info.value.problems == (("max_summary_tokens", "Input should be greater than 0"),)


# -- summarizer serve --help ----------------------------------------------------------------------


def test_serve_has_a_flag_for_each_compaction_setting_stating_its_default() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    # An option's help wraps at 100 columns, under it: its lines joined.
    lines = [" ".join(line.split()) for line in re.sub(r"\n {3,}", " ", result.output).split("\n")]
    defaults = CompactionConfig()
    for name in COMPACTION_SETTINGS:
        flag = "--" + name.replace("_", "-")
        (line,) = [line for line in lines if line.startswith(flag + " ")]
        value = getattr(defaults, name)
        if isinstance(value, bool):  # a switch: --name / --no-name
            assert f"[default: {'on' if value else 'off'}]" in line, line
        elif value is not None:  # a None default is described in words ("each model's ...")
            assert f"[default: {value}]" in line, line
