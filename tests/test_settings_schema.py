"""Each setting is declared once (``Settings`` and ``CompactionConfig``, fields marked
``Setting``); its flag, variable, config-file key, help and the tables of docs/configuration.md
come from that.

The walk below gives each declared setting a value other than its default and checks that the
flag, the ``SUMMARIZER_*`` variable and the config-file key each reach ``Settings`` with it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from context_summarizer.cli.main import app
from context_summarizer.core.config import CompactionConfig
from context_summarizer.core.errors import ConfigurationError
from context_summarizer.proxy.config_file import CONFIG_ENV, MODEL_COMPACTION_FIELDS, ModelEntry
from context_summarizer.proxy.settings import COMPACTION_SETTINGS, Settings, declared
from context_summarizer.proxy.settings_schema import DeclaredSetting, markdown_tables

SETTINGS = declared()
# The rest: [[models]] (tests/test_config_file.py) and what only an entry of it sets (below).
VALUED = [s for s in SETTINGS if s.mark.top_level and s.name != "models"]
CONFIGURATION_PAGE = Path(__file__).parent.parent / "docs" / "configuration.md"

# What users run today: every one of these must keep working.
KNOWN_FLAGS = """--config --host --port --upstream --db --store --lease-ttl --context-window
--trigger-ratio --target-ratio --prepare-ratio --keep-recent-tokens --max-summary-tokens
--summary-cap-field --summary-model --policy --log-format --log-level --max-body-bytes
--sessions-api --client-key --allow-origin --body-read-timeout --responses-upstream --fast-path
--no-fast-path --record --no-record --test-upstream --test-script --ui --no-ui
--cache-breakpoints""".split()  # noqa: SIM905 (a list literal, one per line, is 33 lines)
KNOWN_VARIABLES = [
    f"SUMMARIZER_{name}"
    for name in """HOST PORT UPSTREAM UPSTREAM_API_KEY DB STORE LEASE_TTL LOG_FORMAT LOG_LEVEL
    MAX_BODY_BYTES UPSTREAM_TIMEOUT KEEPALIVE_INTERVAL IDLE_CONNECTION_TIMEOUT SESSIONS_API
    CLIENT_KEYS ALLOW_ORIGINS BODY_READ_TIMEOUT RESPONSES_UPSTREAM FAST_PATH RECORD UI
    CACHE_BREAKPOINTS CONTEXT_WINDOW TRIGGER_RATIO TARGET_RATIO PREPARE_RATIO KEEP_RECENT_TOKENS
    MAX_SUMMARY_TOKENS SUMMARY_CAP_FIELD SUMMARY_MODEL POLICY""".split()  # noqa: SIM905
]

# Values whose form the type alone does not give.
FORMED = {
    "upstream": "http://upstream.test/v1",
    "store": "redis://127.0.0.1:1/0",
    "allow_origins": ["https://app.example"],
    "db": "/tmp/elsewhere.db",
}


def sample(setting: DeclaredSetting) -> Any:
    """A valid value of ``setting`` other than its default."""
    if setting.name in FORMED:
        return FORMED[setting.name]
    default = setting.default
    if setting.choices:
        return next(choice for choice in setting.choices if choice != default)
    if setting.switch:
        return not default
    if setting.repeatable:
        return ["first-value", "second-value"]
    if setting.kind is int:
        return 1000 if default is None else default + 1
    if setting.kind is float:
        return default + (0.05 if default < 1 else 1)
    return "some-value"  # str, SecretStr


def flag_args(setting: DeclaredSetting, value: Any) -> list[str]:
    assert setting.flag is not None
    if setting.switch:
        return [setting.flag if value else "--no-" + setting.flag[2:]]
    if setting.repeatable:
        return [arg for item in value for arg in (setting.flag, item)]
    return [setting.flag, str(value)]


def toml_value(value: Any) -> str:
    return json.dumps(value)  # strings, numbers, booleans and lists of strings read the same


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """No ``SUMMARIZER_*`` variable of the machine's; ``serve`` records its settings instead of
    serving."""
    for variable in [s.env for s in SETTINGS if s.env] + [CONFIG_ENV, "OPENAI_BASE_URL"]:
        monkeypatch.delenv(variable, raising=False)
    started: list[Settings] = []
    monkeypatch.setattr("context_summarizer.proxy.server.serve", started.append)
    return started


def help_entries(output: str) -> dict[str, str]:
    """Each option of a ``--help`` by its first flag: its lines with all whitespace taken out
    (so that wrapping, even inside a hyphenated word, does not matter)."""
    entries: dict[str, str] = {}
    current = None
    for line in output.splitlines():
        if line.startswith("  --"):
            current = line.split()[0]
            entries[current] = ""
        elif not line.startswith("   ") or not line.strip():
            current = None
        if current is not None:
            entries[current] += "".join(line.split())
    return entries


def squeezed(text: str) -> str:
    return "".join(text.split())


def serve_help() -> str:
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output


# -- one declaration: flag, variable, config key, help, default ----------------------------------


@pytest.mark.parametrize("setting", VALUED, ids=lambda s: s.name)
def test_each_setting_is_a_flag_a_variable_and_a_config_key_that_set_it(
    setting: DeclaredSetting, clean_environment: list[Settings], tmp_path: Path
) -> None:
    value = sample(setting)
    expected = Settings(**{setting.name: value})
    assert expected != Settings()  # the sample is not the default
    if setting.flag is not None:
        result = CliRunner().invoke(app, ["serve", *flag_args(setting, value)])
        assert result.exit_code == 0, result.output
        assert clean_environment[-1] == expected
    else:  # only the key, which a command line would show to every user of the machine
        assert setting.secret
    assert setting.env is not None
    text = ",".join(value) if setting.repeatable else str(value)
    assert Settings.from_env({setting.env: text}) == expected
    config = tmp_path / "summarizer.toml"
    environ = {}
    if setting.secret:
        config.write_text(f'{setting.file_key} = "SOME_VARIABLE"\n')
        environ["SOME_VARIABLE"] = value
        assert isinstance(expected.upstream_api_key, SecretStr)
    else:
        assert setting.file_key == setting.name
        config.write_text(f"{setting.file_key} = {toml_value(value)}\n")
    assert Settings.from_env(environ, config_file=config) == expected


def test_serve_help_gives_each_flag_its_type_declared_help_and_real_default() -> None:
    entries = help_entries(serve_help())
    defaults = Settings()
    for setting in SETTINGS:
        if setting.flag is None:
            continue
        entry = entries[setting.flag]
        if setting.switch:
            assert entry.startswith(f"{setting.flag}/--no-{setting.flag[2:]}"), entry
        else:
            assert entry.startswith(setting.flag + setting.metavar), entry
        assert squeezed(setting.help) in entry
        held = getattr(defaults, setting.name, None)
        if setting.name in CompactionConfig.model_fields:
            held = getattr(defaults.compaction, setting.name)
        assert held == setting.default
        assert squeezed(f"[default: {setting.default_text}]") in entry
    # The values themselves, where no words stand for them.
    for flag, shown in [
        ("--port", "[default:8787]"),
        ("--trigger-ratio", "[default:0.8]"),
        ("--max-summary-tokens", "[default:2000]"),
        ("--lease-ttl", "[default:30]"),
        ("--record", "[default:off]"),
        ("--fast-path", "[default:on]"),
        ("--prepare-ratio", "[default:0.6,midway"),
        ("--upstream", "elsehttps://api.openai.com/v1]"),
    ]:
        assert shown in entries[flag], entries[flag]


def test_serve_help_lists_the_choices_and_readable_types() -> None:
    output = serve_help()
    entries = help_entries(output)
    for typed in ("<str>", "<int>", "<float>", "<bool>", "<path>", "<list"):
        assert typed not in output
    for flag, shown in [
        ("--policy", "[self-summary|hybrid|masking|ledger-only]"),
        ("--sessions-api", "[keyed|all|off]"),
        ("--cache-breakpoints", "[managed|client]"),
        ("--log-level", "[critical|error|warning|info|debug]"),
        ("--summary-cap-field", "[auto|max_tokens|max_completion_tokens]"),
        ("--port", "INTEGER"),
        ("--trigger-ratio", "FLOAT"),
        ("--prepare-ratio", "FLOAT|off"),
        ("--host", "TEXT"),
        ("--db", "PATH"),
        ("--config", "FILE"),
        ("--test-script", "FILE"),
        ("--client-key", "KEY"),
        ("--lease-ttl", "SECONDS"),
        ("--context-window", "TOKENS"),
    ]:
        assert entries[flag].startswith(flag + shown), entries[flag]
    for setting in SETTINGS:
        if setting.choices and setting.flag:
            assert entries[setting.flag].startswith(setting.flag + "[" + "|".join(setting.choices))
    for heading in ("Server:", "Upstream:", "State:", "Logs:", "Access:", "Testing:"):
        assert f"\n{heading}\n" in output
    assert "Compaction (each also per model" in output
    assert "3 when the server cannot start (the port is taken)" in " ".join(output.split())


def test_the_flags_and_variables_users_know_still_work() -> None:
    entries = help_entries(serve_help())
    shown = set(entries) | {
        "--no-" + flag[2:] for flag, text in entries.items() if "/--no-" in text
    }
    assert set(KNOWN_FLAGS) <= shown
    assert set(KNOWN_VARIABLES) <= {s.env for s in SETTINGS}
    assert CONFIG_ENV == "SUMMARIZER_CONFIG"


def test_a_bad_flag_value_gets_the_message_a_bad_variable_gets(
    clean_environment: list[Settings],
) -> None:
    result = CliRunner().invoke(app, ["serve", "--sessions-api", "some"])
    assert result.exit_code == 2
    assert result.output.startswith("error: invalid settings: sessions_api: ")
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({"SUMMARIZER_SESSIONS_API": "some"})
    assert result.output.strip() == f"error: {caught.value}"
    started = CliRunner().invoke(app, ["serve", "--log-level", "DEBUG", "--prepare-ratio", "off"])
    assert started.exit_code == 0, started.output
    assert clean_environment[-1].log_level == "debug"
    assert clean_environment[-1].compaction.prepare_ratio is None


# -- the config file and [[models]] --------------------------------------------------------------


def test_the_compaction_settings_are_the_marked_fields_of_compaction_config() -> None:
    assert [s.name for s in SETTINGS if s.name in CompactionConfig.model_fields] == [
        *(name for name in CompactionConfig.model_fields if name in MODEL_COMPACTION_FIELDS)
    ]
    assert set(COMPACTION_SETTINGS) == set(MODEL_COMPACTION_FIELDS) - {"reserve_output_tokens"}
    (reserve,) = [s for s in SETTINGS if not s.mark.top_level]
    assert reserve.name == "reserve_output_tokens" and reserve.mark.per_model
    assert (reserve.flag, reserve.env, reserve.file_key) == (None, None, None)
    (models,) = [s for s in SETTINGS if s.name == "models"]
    assert (models.flag, models.env, models.file_key) == (None, None, "models")
    assert "pin" not in MODEL_COMPACTION_FIELDS and "tokenizer" not in MODEL_COMPACTION_FIELDS


def test_a_model_entry_takes_the_per_model_settings_with_their_bounds() -> None:
    own = {"name", "upstream", "api_key"}
    assert set(ModelEntry.model_fields) == own | set(MODEL_COMPACTION_FIELDS)
    base = Settings().compaction
    for name in MODEL_COMPACTION_FIELDS:
        setting = next(s for s in SETTINGS if s.name == name)
        value = 1000 if name == "reserve_output_tokens" else sample(setting)
        entry = ModelEntry(name="m", **{name: value})
        assert getattr(entry.compaction(base), name) == value
        assert ModelEntry.model_fields[name].description == setting.help
    with pytest.raises(ConfigurationError, match="trigger_ratio"):
        ModelEntry(name="m", trigger_ratio=2)
    with pytest.raises(ConfigurationError, match="policy"):
        ModelEntry(name="m", policy="summarize")
    assert ModelEntry(name="m", prepare_ratio=0).compaction(base).prepare_ratio is None


def test_a_top_level_key_that_is_no_setting_is_refused(tmp_path: Path) -> None:
    for text, key in [("[compaction]\npin = []\n", "compaction"), ("bogus = 1\n", "bogus")]:
        config = tmp_path / "summarizer.toml"
        config.write_text(text)
        with pytest.raises(ConfigurationError, match=rf"{key}: not a known setting"):
            Settings.from_env({}, config_file=config)
    config.write_text("reserve_output_tokens = 10\n")  # per model only
    with pytest.raises(ConfigurationError, match="reserve_output_tokens: not a known setting"):
        Settings.from_env({}, config_file=config)


# -- docs/configuration.md -----------------------------------------------------------------------


def test_the_documented_tables_are_the_declarations() -> None:
    page = CONFIGURATION_PAGE.read_text(encoding="utf-8")
    found = re.search(
        r"<!-- settings tables:.*?-->\n\n(.*?)\n<!-- end of the settings tables -->",
        page,
        flags=re.DOTALL,
    )
    assert found, "docs/configuration.md has no settings tables"
    assert found.group(1) == markdown_tables(SETTINGS), (
        "the settings tables of docs/configuration.md differ from the declarations: paste in "
        "context_summarizer.proxy.settings_schema.markdown_tables(context_summarizer.proxy.settings.declared())"
    )
