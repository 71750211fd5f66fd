"""The operator's terminal: ``summarizer sessions`` and ``show`` print client data (model
names, summaries, ledgers, failures) with every control character shown as an escape, so an
OSC sequence (window title, clipboard), a carriage return or a bidi override in what a client
sent never reaches the terminal as itself; ``--json`` escapes them as JSON does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from typer.testing import CliRunner

from context_summarizer.cli.main import app
from context_summarizer.cli.printable import printable
from context_summarizer.core.activity import RequestRecord
from context_summarizer.core.checkpoints import Checkpoint, Slot
from context_summarizer.proxy.headers import credential_namespace
from context_summarizer.stores import SQLiteStore
from context_summarizer.testing import TestUpstream

from .conftest import ProxyFactory

OSC = "\x1b]0;TERMPWN\x07"
EVIL_MODEL = f"test-model{OSC}"
CLIPBOARD = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
C1_CSI = "\x9b2J"
BIDI = "\u202eexe.txt"
KEY = "sk-printable-test-0123456789"
# Nothing a terminal acts on: no ESC, BEL, CR, C1 control or bidi control.
UNSAFE = ("\x1b", "\x07", "\r", "\x9b", "\u202e", "\x00")


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def assert_safe(output: str) -> None:
    for char in UNSAFE:
        assert char not in output, repr(char)


def test_printable_escapes_controls_and_keeps_text() -> None:
    assert printable(EVIL_MODEL) == "test-model\\x1b]0;TERMPWN\\x07"
    assert printable("a\tb\nc\r") == "a\\x09b\\x0ac\\x0d"
    assert printable("a\tb\nc\r", lines=True) == "a\tb\nc\\x0d"
    assert (
        printable(C1_CSI + BIDI + "\u2066\u2029\x7f") == "\\x9b2J\\u202eexe.txt\\u2066\\u2029\\x7f"
    )
    assert printable("plain ünïcödé, 中文 and emoji 🎉") == "plain ünïcödé, 中文 and emoji 🎉"


def store_with_hostile_text(db: Path) -> None:
    namespace = credential_namespace(KEY)
    with SQLiteStore(db) as store:
        store.log_request(
            RequestRecord(
                namespace=namespace,
                session="s-hostile",
                at=1_800_000_000.0,
                model=EVIL_MODEL,
                tokens_before=9_000,
                tokens_sent=3_000,
                window=16_000,
                compacted=True,
                checkpoint_id="c1",
            )
        )
        summary = f"Did the work.{CLIPBOARD}\nThen\rOVERWRITTEN {BIDI}"
        store.put(
            Checkpoint(
                id="c1",
                namespace=namespace,
                session="s-hostile",
                basis_count=3,
                basis_hash="h",
                slots=[
                    Slot(
                        start=1,
                        end=2,
                        message={"role": "user", "content": summary},
                        summary=summary,
                        ledger=[{"kind": f"error{OSC}", "text": f"boom {C1_CSI} {CLIPBOARD}"}],
                    )
                ],
                summary=summary,
                tokens_before=9_000,
                tokens_after=3_000,
                model=EVIL_MODEL,
                summary_model=EVIL_MODEL,
                trigger="threshold",
                failure=f"upstream said {OSC}",
            )
        )


def test_sessions_and_show_escape_control_characters(tmp_path: Path) -> None:
    db = tmp_path / "hostile.db"
    store_with_hostile_text(db)

    table = run("sessions", "--store", str(db))
    assert table.exit_code == 0, table.output
    assert_safe(table.output)
    assert "test-model\\x1b]0;TERMPWN\\x07" in table.output

    shown = run("show", "s-hostile", "--store", str(db))
    assert shown.exit_code == 0, shown.output
    assert_safe(shown.output)
    assert "model test-model\\x1b]0;TERMPWN\\x07" in shown.output
    assert "\\x1b]52;c;ZWNobyBwd25lZA==\\x07" in shown.output
    assert "Then\\x0dOVERWRITTEN \\u202eexe.txt" in shown.output
    assert "[error\\x1b]0;TERMPWN\\x07] boom \\x9b2J" in shown.output
    assert "FAILED: upstream said \\x1b]0;TERMPWN\\x07" in shown.output
    assert "    | Did the work." in shown.output  # a multi-line summary still shows as lines

    missing = run("show", f"nope{OSC}", "--store", str(db))
    assert missing.exit_code == 1
    assert_safe(missing.output)

    # JSON output escapes every control character itself.
    for args in (("sessions", "--json"), ("show", "s-hostile", "--json")):
        listed = run(*args, "--store", str(db))
        assert listed.exit_code == 0, listed.output
        assert_safe(listed.output)
        assert all(json.loads(line) for line in listed.output.splitlines())


@pytest.fixture
def upstream() -> Any:
    with TestUpstream(context_window=16_000) as server:
        yield server


def test_a_model_name_a_client_sent_is_printed_escaped(
    start_proxy: ProxyFactory, tmp_path: Path
) -> None:
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
    raw = sdk.chat.completions.with_raw_response.create(
        model=EVIL_MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    )
    raw.parse()
    session = raw.headers["x-summarizer-session"]
    proxy.stop()  # the activity log is written before the proxy stops
    db = tmp_path / "checkpoints.db"
    for args in (("sessions",), ("show", session)):
        out = run(*args, "--store", str(db))
        assert out.exit_code == 0, out.output
        assert_safe(out.output)
        assert "test-model\\x1b]0;TERMPWN\\x07" in out.output
