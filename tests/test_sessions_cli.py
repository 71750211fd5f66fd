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
