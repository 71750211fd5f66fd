"""``summarizer sessions``, ``show`` and ``export`` on what a real proxy served, and the
activity log the proxy writes (records always; conversations only with ``--record``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from typer.testing import CliRunner

from context_summarizer.cli.main import app
from context_summarizer.cli.sessions import parse_since
from context_summarizer.core.activity import redact
from context_summarizer.evaluation.dataset import load_dataset
from context_summarizer.stores import SQLiteStore
from context_summarizer.testing import RoutingResponder, TestUpstream, echo_responder

from .conftest import ProxyFactory
from .test_proxy import long_history

MODEL = "gpt-4o-mini"
KEY = "sk-test-operator-0123456789abcdef"
PLANTED = "sk-live-" + "q" * 32


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=16_000, responder=RoutingResponder(echo_responder)) as server:
        yield server


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def agent_session(proxy: Any, key: str = KEY) -> tuple[str, list[dict[str, Any]]]:
    """Three requests of one session; the third crosses the trigger. Returns the session id."""
    sdk = openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0)
    messages = long_history(2)
    messages[1]["content"] += f" The deploy key is {PLANTED}; my API key is {key}."
    session = ""
    for turns in (2, 3, 8):
        messages = long_history(turns, task=messages[1]["content"])
        raw = sdk.chat.completions.with_raw_response.create(model=MODEL, messages=messages)
        raw.parse()
        session = raw.headers["x-summarizer-session"]
    return session, messages


def test_sessions_show_and_export_read_what_the_proxy_served(
    start_proxy: ProxyFactory, tmp_path: Path
) -> None:
    db = tmp_path / "checkpoints.db"
    proxy = start_proxy(record=True)
    session, messages = agent_session(proxy)
    time.sleep(0.5)  # the log is written after each answer is sent

    listed = run("sessions", "--store", str(db), "--json")
    assert listed.exit_code == 0, listed.output
    (row,) = [json.loads(line) for line in listed.output.splitlines()]
    assert row["session"] == session and row["requests"] == 3 and row["compactions"] == 1
    assert row["tokens_peak"] > row["tokens_now"] and row["window"] == 16_000
    assert row["namespace"].startswith("key-") and len(row["namespace"]) == 12
    table = run("sessions", "--store", str(db))
    assert session in table.output and "1 " in table.output and "16,000" in table.output

    shown = run("show", session, "--store", str(db))
    assert shown.exit_code == 0, shown.output
    assert "compaction 1" in shown.output and "summary of messages" in shown.output
    assert "ledger (" in shown.output
    view = json.loads(run("show", session, "--store", str(db), "--json").output)
    (compaction,) = view["compactions"]
    assert compaction["tokens_before"] > compaction["tokens_after"]
    assert compaction["latency_s"] is not None and compaction["latency_s"] >= 0
    (summary,) = compaction["summaries"]
    assert summary["replaced"] == redact(messages[summary["start"] : summary["end"]], [KEY])
    assert summary["start"] >= 2 and summary["summary"]

    out = tmp_path / "cases.jsonl"
    exported = run("export", session, "--store", str(db), "--out", str(out))
    assert exported.exit_code == 0, exported.output
    cases, errors = load_dataset([out])
    assert errors == [] and len(cases) == 1
    (case,) = cases
    assert len(case.messages) == len(messages)
    text = out.read_text()
    assert PLANTED not in text and KEY not in text and "[REDACTED]" in text
    assert [s.name for s in case.summaries] == ["proxy"]
    assert KEY not in db.read_bytes().decode("latin-1")
    # The exported case is a dataset `summarizer eval` scores, the proxy's own summary included.
    scored = run("eval", str(out), "--out", str(tmp_path / "eval"), "-s", "given,truncate")
    assert scored.exit_code == 0, scored.output
    results = [
        json.loads(line) for line in (tmp_path / "eval" / "results.jsonl").read_text().splitlines()
    ]
    assert {r["strategy"] for r in results} == {"given", "truncate"}
    given = next(r for r in results if r["strategy"] == "given")
    assert given.get("error") is None, given


def test_without_record_no_conversation_is_kept(start_proxy: ProxyFactory, tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    proxy = start_proxy()
    session, _ = agent_session(proxy)
    time.sleep(0.5)
    with SQLiteStore(db) as store:
        assert [r.requests for r in store.list_sessions()] == [3]
        assert store.recordings() == []
    exported = run("export", "--all", "--store", str(db), "--out", str(tmp_path / "x.jsonl"))
    assert exported.exit_code == 1 and "--record" in exported.output
    assert "not recorded" in run("show", session, "--store", str(db)).output
    assert PLANTED not in db.read_bytes().decode("latin-1")


def test_the_commands_say_what_is_wrong(tmp_path: Path) -> None:
    missing = run("sessions", "--store", str(tmp_path / "none.db"))
    assert missing.exit_code == 1 and "no store at" in missing.output
    assert not (tmp_path / "none.db").exists()
    SQLiteStore(tmp_path / "empty.db").close()
    assert "no sessions" in run("sessions", "--store", str(tmp_path / "empty.db")).output
    unknown = run("show", "nope", "--store", str(tmp_path / "empty.db"))
    assert unknown.exit_code == 1 and "no session 'nope'" in unknown.output
    both = run("export", "s", "--all", "--store", str(tmp_path / "empty.db"))
    assert both.exit_code == 2
    bad = run("sessions", "--since", "yesterday-ish", "--store", str(tmp_path / "empty.db"))
    assert bad.exit_code == 2


def test_since_reads_durations_and_dates() -> None:
    assert parse_since("2h", now=10_000.0) == 10_000.0 - 7_200
    assert parse_since("30m", now=10_000.0) == 10_000.0 - 1_800
    assert parse_since("1970-01-01T01:00:00") == 3_600.0


def test_version() -> None:
    result = run("--version")
    assert result.exit_code == 0 and result.output.startswith("summarizer ")


@pytest.mark.parametrize("api", ["messages", "responses"])
def test_the_other_front_doors_log_their_requests(api: str, tmp_path: Path) -> None:
    from context_summarizer.cli.demo import run_coding_session

    db = tmp_path / "checkpoints.db"
    stats = run_coding_session(turns=30, api=api, via="proxy", db=db)  # type: ignore[arg-type]
    time.sleep(0.3)
    with SQLiteStore(db) as store:
        (row,) = store.list_sessions()
        records = store.session_requests(None, row.session)
    assert row.requests == stats.agent_requests and row.compactions == stats.compactions >= 1
    assert {r.api for r in records} == {api}
    assert all(r.reported_tokens for r in records)
    assert row.cache_share is not None and row.cache_share > 0


# -- which store, when none is named ---------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user whose state folder is empty, and who names no store in the environment."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.delenv("SUMMARIZER_STORE", raising=False)
    monkeypatch.delenv("SUMMARIZER_DB", raising=False)
    return tmp_path


def test_sessions_finds_what_serve_test_upstream_just_served(home: Path) -> None:
    from context_summarizer.proxy.settings import default_db_path

    from .conftest import wait_until_serving
    from .test_serve_banner import _serve, _stop, free_port

    port = free_port()
    process = _serve(["serve", "--test-upstream", "--port", str(port)], home)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_serving(process, url)
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="anything", max_retries=0)
        raw = sdk.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "hello there"}]
        )
        session = raw.headers["x-summarizer-session"]
    finally:
        _stop(process)
    test_db = default_db_path().with_name("test-upstream.db")
    assert str(test_db).startswith(str(home)) and test_db.exists()

    listed = run("sessions")
    assert listed.exit_code == 0, listed.output
    assert f"store {test_db}\n" in listed.output and session in listed.output
    (row,) = [json.loads(line) for line in run("sessions", "--json").output.splitlines()]
    assert row["session"] == session and row["store"] == str(test_db)
    shown = run("show", session)
    assert shown.exit_code == 0 and f"session {session}" in shown.output, shown.output

    # With the proxy's default store there too, both are read, each under its name.
    SQLiteStore(default_db_path()).close()
    both = run("sessions")
    assert both.exit_code == 0, both.output
    assert f"store {default_db_path()}\nno sessions logged" in both.output
    assert f"store {test_db}\n" in both.output and session in both.output
    assert run("show", session).exit_code == 0
    # A store named explicitly is the only one read.
    named = run("sessions", "--store", str(default_db_path()))
    assert session not in named.output and str(test_db) not in named.output


def test_with_no_store_the_error_says_where_it_looked_and_what_to_pass(home: Path) -> None:
    from context_summarizer.proxy.settings import default_db_path

    for command in (["sessions"], ["show", "abc"], ["export", "--all"]):
        missing = run(*command)
        assert missing.exit_code == 1, missing.output
        assert f"{default_db_path()} (summarizer serve's default): none" in missing.output
        assert "test-upstream.db (serve --test-upstream's): none" in missing.output
        assert "$SUMMARIZER_STORE, $SUMMARIZER_DB: unset" in missing.output
        assert "Pass --store PATH|URL" in missing.output
    assert not default_db_path().exists()  # looking created nothing


def test_a_store_written_by_wrap_is_listed_by_sessions_and_read_by_show(
    home: Path, tmp_path: Path
) -> None:
    from context_summarizer.cli.demo import run_coding_session

    db = tmp_path / "library.db"
    stats = run_coding_session(turns=30, context_window=8_000, via="library", store=str(db))
    assert stats.compactions >= 1
    session = stats.events[0].session
    listed = run("sessions", "--store", str(db), "--json")
    assert listed.exit_code == 0, listed.output
    [row] = [json.loads(line) for line in listed.output.splitlines() if line.strip()]
    # wrap() logs each call it manages: its requests and compactions, as the proxy's are.
    assert row["session"] == session
    assert row["requests"] == stats.agent_requests
    assert row["compactions"] == stats.compactions
    shown = run("show", session, "--store", str(db))
    assert shown.exit_code == 0, shown.output
    assert f"session {session}" in shown.output and "compaction 1 at" in shown.output
    assert "of the ledger's facts" in shown.output
    # From the environment, as the proxy's own variable names it.
    with_env = CliRunner().invoke(app, ["show", session], env={"SUMMARIZER_DB": str(db)})
    assert with_env.exit_code == 0 and "compaction 1 at" in with_env.output
