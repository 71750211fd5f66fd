"""The ``--config`` file of ``summarizer serve``: parsing, every error, precedence, and per-model
routing end to end (three real test upstreams, each model's requests and summary calls on its
own upstream with its own key, never another's).

Settings are read from an injected environment (``Settings.from_env(environ)``); ``os.environ``
is never read or touched, except by the CLI test (``CliRunner`` sets and restores it).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from context_summarizer.cli.main import app
from context_summarizer.core.errors import ConfigurationError
from context_summarizer.library.manager import ContextManager
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.model_routes import RouteTable
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import Reply, TestUpstream, is_summary_request

ALPHA_KEY = "sk-alpha-server-key-0123456789"
BRAVO_KEY = "sk-bravo-server-key-0123456789"
TOP_KEY = "sk-top-server-key-0123456789"
CLIENT_KEY = "sk-client-own-key-0123456789"
ENVIRON = {"ALPHA_KEY": ALPHA_KEY, "BRAVO_KEY": BRAVO_KEY, "TOP_KEY": TOP_KEY}

FULL = """
upstream = "https://api.openai.com/v1/"
trigger_ratio = 0.8
port = 9001

[[models]]
name = "gpt-4o"
upstream = "https://api.openai.com/v1"
api_key_env = "ALPHA_KEY"
context_window = 128000
summary_model = "gpt-4o-mini"
trigger_ratio = 0.75
target_ratio = 0.4
max_summary_tokens = 1500

[[models]]
name = "qwen-local"
upstream = "http://127.0.0.1:8080/v1"
context_window = 8192
reserve_output_tokens = 1024
"""


def write(tmp_path: Path, text: str, name: str = "summarizer.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# -- parsing ----------------------------------------------------------------------------------


def test_a_full_file_sets_the_settings_and_each_model(tmp_path: Path) -> None:
    settings = Settings.from_env(ENVIRON, config_file=write(tmp_path, FULL))
    assert settings.upstream == "https://api.openai.com/v1"
    assert settings.port == 9001
    gpt, qwen = settings.models
    assert gpt.name == "gpt-4o" and qwen.name == "qwen-local"
    assert isinstance(gpt.api_key, SecretStr) and gpt.api_key.get_secret_value() == ALPHA_KEY
    assert qwen.upstream == "http://127.0.0.1:8080/v1" and qwen.api_key is None
    gpt_config = gpt.compaction(settings.compaction)
    assert (gpt_config.context_window, gpt_config.summary_model) == (128_000, "gpt-4o-mini")
    assert (gpt_config.trigger_ratio, gpt_config.max_summary_tokens) == (0.75, 1500)
    qwen_config = qwen.compaction(settings.compaction)
    assert (qwen_config.context_window, qwen_config.reserve_output_tokens) == (8192, 1024)
    assert qwen_config.max_summary_tokens == settings.compaction.max_summary_tokens  # inherited
    held = repr(settings) + json.dumps(settings.model_dump(mode="json"))
    assert ALPHA_KEY not in held


def test_drafting_ahead_of_time_is_on_unless_the_file_or_a_model_turns_it_off(
    tmp_path: Path,
) -> None:
    text = """
[[models]]
name = "moved"
trigger_ratio = 0.95
target_ratio = 0.7

[[models]]
name = "no-drafts"
prepare_ratio = "off"

[[models]]
name = "own"
prepare_ratio = 0.5
"""
    settings = Settings.from_env({}, config_file=write(tmp_path, text))
    assert settings.compaction.prepare_ratio == 0.6
    moved, off, own = (m.compaction(settings.compaction) for m in settings.models)
    assert moved.prepare_ratio == 0.825  # 0.6 is below its target: midway between its own
    assert off.prepare_ratio is None and own.prepare_ratio == 0.5
    for value in ('"off"', "0"):
        path = write(tmp_path, f"prepare_ratio = {value}\n", name=f"off{len(value)}.toml")
        assert Settings.from_env({}, config_file=path).compaction.prepare_ratio is None


def test_the_example_file_is_valid() -> None:
    example = Path(__file__).parent.parent / "examples" / "summarizer.toml"
    environ = {"OPENAI_API_KEY": ALPHA_KEY, "ANTHROPIC_API_KEY": BRAVO_KEY}
    settings = Settings.from_env(environ, config_file=example)
    assert [m.name for m in settings.models] == ["gpt-4o", "claude-*", "qwen-local"]
    with pytest.raises(ConfigurationError, match=r"models\[0\]\.api_key_env: .*OPENAI_API_KEY"):
        Settings.from_env({}, config_file=example)


def test_summarizer_config_names_the_file_when_no_flag_does(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    assert Settings.from_env({**ENVIRON, "SUMMARIZER_CONFIG": str(path)}).port == 9001
    other = write(tmp_path, "port = 9005\n", "other.toml")
    settings = Settings.from_env({**ENVIRON, "SUMMARIZER_CONFIG": str(path)}, config_file=other)
    assert settings.port == 9005 and settings.models == ()


@pytest.mark.parametrize(
    ("text", "field", "says"),
    [
        ("bogus = 1\n", "bogus", "not a known setting"),
        ('[[models]]\nname = "m"\nwindow = 8000\n', "models[0].window", "not a known setting"),
        ('[[models]]\nname = "m"\ntrigger_ratio = 2\n', "models[0].trigger_ratio", "less than"),
        ("port = 'eighty'\n", "port", "integer"),
        ('[[models]]\nname = "m"\nupstream = "ftp://x"\n', "models[0].upstream", "http(s) URL"),
        ('[[models]]\nname = "a*b"\n', "models[0].name", "'*'"),
        (
            '[[models]]\nname = "m"\napi_key_env = "NOT_SET_ANYWHERE"\n',
            "models[0].api_key_env",
            "NOT_SET_ANYWHERE is not set",
        ),
        ('[[models]]\nname = "m"\n[[models]]\nname = "m"\n', "models[1].name", "already"),
        # The entry's target is checked against the trigger it inherits (0.8).
        ('[[models]]\nname = "m"\ntarget_ratio = 0.9\n', "models[0]", "below trigger_ratio"),
        ("models = 3\n", "models", "tuple"),
    ],
)
def test_each_invalid_file_names_the_file_and_the_field(
    tmp_path: Path, text: str, field: str, says: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({}, config_file=path)
    message = str(caught.value)
    assert str(path) in message
    assert f"{field}: " in message
    assert says in message


@pytest.mark.parametrize(
    ("text", "field", "instead"),
    [
        (f'[[models]]\nname = "m"\napi_key = "{ALPHA_KEY}"\n', "models[0].api_key", "api_key_env"),
        (f'upstream_api_key = "{ALPHA_KEY}"\n', "upstream_api_key", "upstream_api_key_env"),
    ],
)
def test_a_key_written_in_the_file_is_refused_and_not_repeated(
    tmp_path: Path, text: str, field: str, instead: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({}, config_file=path)
    message = str(caught.value)
    assert str(path) in message and f"{field}: " in message and instead in message
    assert ALPHA_KEY not in message


def test_an_unreadable_or_invalid_file_is_a_configuration_error(tmp_path: Path) -> None:
    missing = tmp_path / "absent.toml"
    with pytest.raises(ConfigurationError, match="cannot read the config file") as caught:
        Settings.from_env({}, config_file=missing)
    assert str(missing) in str(caught.value)
    broken = write(tmp_path, "upstream = [unclosed\n")
    with pytest.raises(ConfigurationError, match="is not valid TOML") as caught:
        Settings.from_env({}, config_file=broken)
    assert str(broken) in str(caught.value)


def test_the_top_level_key_comes_from_the_variable_the_file_names(tmp_path: Path) -> None:
    path = write(tmp_path, 'upstream_api_key_env = "TOP_KEY"\n')
    settings = Settings.from_env(ENVIRON, config_file=path)
    assert settings.upstream_api_key is not None
    assert settings.upstream_api_key.get_secret_value() == TOP_KEY


# -- precedence: flag, then SUMMARIZER_*, then the file, then the default -----------------------


def test_a_flag_beats_the_environment_which_beats_the_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'port = 9001\ntrigger_ratio = 0.7\nhost = "127.0.0.2"\nupstream = "http://file:1/v1"\n',
    )
    environ = {"SUMMARIZER_PORT": "9002", "SUMMARIZER_TRIGGER_RATIO": "0.75"}
    assert Settings.from_env(environ, config_file=path).port == 9002
    settings = Settings.from_env(environ, config_file=path, port=9003, host=None)
    assert settings.port == 9003  # flag over environment over file
    assert settings.compaction.trigger_ratio == 0.75  # environment over file
    assert settings.host == "127.0.0.2"  # file over default (an unset flag masks nothing)
    # OPENAI_BASE_URL is a fallback below the file; SUMMARIZER_UPSTREAM is above it.
    assert Settings.from_env({"OPENAI_BASE_URL": "http://env:2/v1"}, config_file=path).upstream == (
        "http://file:1/v1"
    )
    above = {"SUMMARIZER_UPSTREAM": "http://env:3/v1"}
    assert Settings.from_env(above, config_file=path).upstream == "http://env:3/v1"
    assert Settings.from_env({}).port == 8787


def test_a_bad_value_from_the_environment_is_not_blamed_on_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "port = 9001\n")
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({"SUMMARIZER_PORT": "abc"}, config_file=path)
    assert "port: " in str(caught.value) and str(path) not in str(caught.value)


# -- routes -------------------------------------------------------------------------------------


def routes_of(**values: Any) -> RouteTable:
    settings = Settings(upstream="http://top:1/v1", **values)
    return RouteTable(settings, lambda config: ContextManager(config=config))


def test_a_model_finds_its_route_exact_first_then_the_longest_prefix() -> None:
    table = routes_of(
        models=[
            {"name": "qwen*", "upstream": "http://qwen:1/v1"},
            {"name": "qwen3*", "upstream": "http://qwen3:1/v1"},
            {"name": "qwen3-exact", "upstream": "http://exact:1/v1"},
        ]
    )
    assert table.route_for("qwen3-exact").upstream == "http://exact:1/v1"
    assert table.route_for("qwen3-exact-2").upstream == "http://qwen3:1/v1"
    assert table.route_for("qwen2").upstream == "http://qwen:1/v1"
    assert table.route_for("gpt-4o").upstream == "http://top:1/v1"
    assert table.route_for(None) is table.default
    assert table.route_for(["qwen3-exact"]) is table.default


def test_the_top_level_key_goes_only_to_the_top_level_upstream() -> None:
    table = routes_of(
        upstream_api_key=TOP_KEY,
        models=[
            {"name": "same-upstream"},
            {"name": "own-upstream", "upstream": "http://other:1/v1"},
            {"name": "own-key", "upstream": "http://other:1/v1", "api_key": BRAVO_KEY},
        ],
    )

    def key(model: str) -> str | None:
        secret = table.route_for(model).api_key
        return None if secret is None else secret.get_secret_value()

    assert key("same-upstream") == TOP_KEY
    assert key("own-upstream") is None  # the client's credential, never the top-level key
    assert key("own-key") == BRAVO_KEY


def test_routes_with_the_same_compaction_share_one_context_manager() -> None:
    table = routes_of(
        models=[
            {"name": "a", "upstream": "http://a:1/v1"},
            {"name": "b", "context_window": 8000},
            {"name": "c", "context_window": 8000, "upstream": "http://c:1/v1"},
        ]
    )
    assert table.route_for("a").context is table.default.context
    assert table.route_for("b").context is table.route_for("c").context
    assert table.route_for("b").context is not table.default.context
    assert len(table.managers) == 2


def test_a_model_whose_upstream_is_the_proxy_itself_is_refused_at_start(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = Settings(
        port=port,
        db=":memory:",
        models=[
            {"name": "ok", "upstream": "http://127.0.0.9:1/v1"},
            {"name": "loop", "upstream": f"http://localhost:{port}/v1"},
        ],
    )
    with pytest.raises(ConfigurationError, match=r"models\[1\]\.upstream: .*itself"):
        ProxyServer(settings).start()


# -- end to end: three upstreams, one proxy ----------------------------------------------------


def answer(body: dict[str, Any]) -> Reply:
    """A summary for a summary request, else a short reply."""
    if is_summary_request(body):
        return Reply(
            content="The user went through numbered steps, each listing facts with their "
            "values, and the assistant noted every step; the user then asked to go on."
        )
    return Reply(content="Noted.")


@dataclass
class Fleet:
    proxy: ProxyServer
    top: TestUpstream
    alpha: TestUpstream
    bravo: TestUpstream


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """A proxy whose top-level upstream, ``alpha`` and ``bravo-*`` models each go to their own
    test upstream with their own key; ``delta`` goes to bravo's upstream with no key of its
    own. Windows: 100k at the top, 8k for alpha and bravo."""
    with (
        TestUpstream(responder=answer) as top,
        TestUpstream(responder=answer) as alpha,
        TestUpstream(responder=answer) as bravo,
    ):
        path = write(
            tmp_path,
            f"""
upstream = "{top.base_url}"
upstream_api_key_env = "TOP_KEY"
context_window = 100000
prepare_ratio = "off"  # summary calls counted exactly (drafts: test_ahead*)
port = 0
db = "{tmp_path / "checkpoints.db"}"

[[models]]
name = "alpha"
upstream = "{alpha.base_url}"
api_key_env = "ALPHA_KEY"
context_window = 8000
reserve_output_tokens = 1000
summary_model = "alpha-summarizer"

[[models]]
name = "bravo-*"
upstream = "{bravo.base_url}"
api_key_env = "BRAVO_KEY"
context_window = 8000
reserve_output_tokens = 1000

[[models]]
name = "delta"
upstream = "{bravo.base_url}"
""",
        )
        with ProxyServer(Settings.from_env(ENVIRON, config_file=path)) as proxy:
            yield Fleet(proxy, top, alpha, bravo)


def history(turns: int, size: int = 250, topic: str = "") -> list[dict[str, Any]]:
    """User and assistant text turns of about ``size`` words each (about 9.5k tokens for 10):
    over an 8k window, far under 100k. Each ``topic`` is its own conversation."""
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        words = " ".join(f"fact{turn}_{i} value {i * turn}" for i in range(size // 3))
        messages.append({"role": "user", "content": f"{topic} step {turn}: {words}"})
        messages.append({"role": "assistant", "content": f"Noted step {turn}."})
    messages.append({"role": "user", "content": "Go on."})
    return messages


def openai_client(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0)


def sent_credentials(upstream: TestUpstream) -> set[str]:
    """Every credential header value the upstream received."""
    return {
        value
        for request in upstream.requests
        for name, value in request.headers.items()
        if name.lower() in ("authorization", "x-api-key", "api-key")
    }


def assert_only_key(upstream: TestUpstream, *allowed: str) -> None:
    """The upstream received no credential but ``allowed``, and no other key anywhere in its
    headers."""
    assert upstream.requests
    assert sent_credentials(upstream) <= set(allowed), sent_credentials(upstream)
    keys = (ALPHA_KEY, BRAVO_KEY, TOP_KEY, CLIENT_KEY)
    others = [key for key in keys if not any(key in value for value in allowed)]
    for request in upstream.requests:
        text = json.dumps(request.headers)
        assert not any(key in text for key in others), (request.path, request.headers)


def test_each_model_and_its_summary_calls_go_to_its_own_upstream_with_its_own_key(
    fleet: Fleet,
) -> None:
    client = openai_client(fleet.proxy)
    compacted = {}
    for model in ("alpha", "bravo-large", "gamma"):
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=history(10, topic=model), max_tokens=100
        )
        raw.parse()
        assert "x-summarizer-warning" not in raw.headers  # each managed, with its window
        compacted[model] = raw.headers["x-summarizer-compacted"]
    # Conversations of one size: over alpha's and bravo's 8k windows, far under the top 100k.
    assert compacted == {"alpha": "true", "bravo-large": "true", "gamma": "false"}
    client.chat.completions.create(model="delta", messages=[{"role": "user", "content": "hi"}])

    alpha = [r for r in fleet.alpha.requests if r.body]
    assert {r.body["model"] for r in alpha if r.is_summary} == {"alpha-summarizer"}
    assert {r.body["model"] for r in alpha if not r.is_summary} == {"alpha"}
    bravo = [r for r in fleet.bravo.requests if r.body]
    assert {r.body["model"] for r in bravo if r.is_summary} == {"bravo-large"}
    assert {r.body["model"] for r in bravo if not r.is_summary} == {
        "bravo-large",
        "delta",
    }
    assert [r.body["model"] for r in fleet.top.requests] == ["gamma"]

    assert_only_key(fleet.alpha, f"Bearer {ALPHA_KEY}")
    # delta has no key of its own: the client's goes to its upstream, never the top-level key.
    assert_only_key(fleet.bravo, f"Bearer {BRAVO_KEY}", f"Bearer {CLIENT_KEY}")
    [delta] = [r for r in bravo if r.body["model"] == "delta"]
    assert delta.headers["authorization"] == f"Bearer {CLIENT_KEY}"
    assert_only_key(fleet.top, f"Bearer {TOP_KEY}")


def test_messages_responses_compact_and_count_tokens_route_by_the_model(fleet: Fleet) -> None:
    proxy = fleet.proxy
    messages_client = anthropic.Anthropic(
        base_url=proxy.base_url.removesuffix("/v1"), api_key=CLIENT_KEY, max_retries=0
    )
    conversation = history(10, topic="messages")
    raw = messages_client.messages.with_raw_response.create(
        model="bravo-large", max_tokens=100, messages=conversation
    )
    raw.parse()
    assert raw.headers["x-summarizer-compacted"] == "true"
    messages_client.messages.count_tokens(model="bravo-large", messages=conversation[:1])
    # The pass-through count (the proxy may have asked for its own count too, near the trigger).
    counted = fleet.bravo.requests[-1]
    assert (counted.path, counted.body["model"]) == ("/v1/messages/count_tokens", "bravo-large")
    summaries = [r for r in fleet.bravo.requests if r.is_summary]
    assert summaries and all(r.path == "/v1/messages" for r in summaries)
    assert_only_key(fleet.bravo, BRAVO_KEY)  # Anthropic's x-api-key, on every call

    client = openai_client(proxy)
    raw_response = client.responses.with_raw_response.create(
        model="alpha", input=history(10, topic="responses"), max_output_tokens=100
    )
    raw_response.parse()
    assert raw_response.headers["x-summarizer-compacted"] == "true"
    compact = httpx2.post(
        f"{proxy.base_url}/responses/compact",
        json={"model": "alpha", "input": history(10, topic="compact")},
        headers={"authorization": f"Bearer {CLIENT_KEY}"},
    )
    assert compact.status_code == 200, compact.text
    alpha_summaries = [r for r in fleet.alpha.requests if r.is_summary]
    assert len(alpha_summaries) >= 2  # one for the request, one for /responses/compact
    assert {r.body["model"] for r in alpha_summaries} == {"alpha-summarizer"}
    assert_only_key(fleet.alpha, f"Bearer {ALPHA_KEY}")

    # Without a model (a GET), a pass-through goes to the top-level upstream with its key.
    models = httpx2.get(
        f"{proxy.base_url}/models", headers={"authorization": f"Bearer {CLIENT_KEY}"}
    )
    assert models.status_code == 200
    assert [r.path for r in fleet.top.requests] == ["/v1/models"]
    assert_only_key(fleet.top, f"Bearer {TOP_KEY}")


# -- the unknown-model warning ----------------------------------------------------------------


def test_the_unknown_model_warning_gives_the_proxys_fixes(
    fleet: Fleet, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="context_summarizer.proxy")
    client = openai_client(fleet.proxy)
    raw = client.chat.completions.with_raw_response.create(
        model="delta", messages=[{"role": "user", "content": "hi"}]
    )
    raw.parse()
    # delta's route has the top-level 100k window but no reply reserve, and the request no cap.
    warning = raw.headers["x-summarizer-warning"]
    assert "'delta'" in warning and "reserve_output_tokens" in warning and "--config" in warning

    with TestUpstream() as upstream:
        settings = Settings(upstream=upstream.base_url, port=0, db=tmp_path / "other.db")
        with ProxyServer(settings) as proxy:
            raw = openai_client(proxy).chat.completions.with_raw_response.create(
                model="mystery-9", messages=[{"role": "user", "content": "hi"}]
            )
            raw.parse()
    warning = raw.headers["x-summarizer-warning"]
    for fix in ("--context-window", "SUMMARIZER_CONTEXT_WINDOW", "[[models]]", "--config"):
        assert fix in warning, warning
    assert "ContextManager" not in warning and "model_limits" not in warning
    logged = [r.getMessage() for r in caplog.records if "mystery-9" in r.getMessage()]
    assert len(logged) == 1 and "--context-window" in logged[0]


# -- the command line ---------------------------------------------------------------------------


def test_serve_with_a_bad_config_file_exits_2_naming_the_field(tmp_path: Path) -> None:
    path = write(tmp_path, '[[models]]\nname = "m"\ntrigger_ratio = 2\n')
    result = CliRunner().invoke(app, ["serve", "--config", str(path)])
    assert result.exit_code == 2
    assert result.output.startswith("error: invalid settings: models[0].trigger_ratio: ")
    assert str(path) in result.output
    result = CliRunner().invoke(app, ["serve"], env={"SUMMARIZER_CONFIG": str(path)})
    assert result.exit_code == 2 and "models[0].trigger_ratio" in result.output
