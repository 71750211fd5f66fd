"""Keys never reach a stored checkpoint, an activity record or what ``summarizer show`` and
``/ui/api`` display: the request's own credential, the server's upstream keys and
credential-shaped strings are replaced by ``[REDACTED]`` in what the proxy writes (summaries,
ledgers, cut or masked outputs), on SQLite and on Redis, through a real proxy run.

The conversation the client sent goes upstream as it is; what the proxy wrote from it (the
summary it inserts in place of earlier turns) carries ``[REDACTED]`` where a key was, in the
compacting request and in every request rewritten from the checkpoint later, byte for byte.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from typer.testing import CliRunner

from context_summarizer.cli.main import app
from context_summarizer.core.activity import REDACTED, RequestRecord
from context_summarizer.core.checkpoints import Checkpoint, Slot
from context_summarizer.core.codecs import OPAQUE_KEY
from context_summarizer.core.redaction import redact_checkpoint
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.headers import credential_namespace
from context_summarizer.proxy.settings import Settings
from context_summarizer.stores import SQLiteStore, open_store
from context_summarizer.testing import RoutingResponder, TestUpstream, echo_responder

from .redis_server import RedisServer
from .test_proxy import long_history

MODEL = "gpt-4o-mini"
# Neither key has a credential's shape (no ``sk-`` prefix): only knowing them redacts them.
CLIENT_KEY = "client-credential-alpha-0123456789"
SERVER_KEY = "server-upstream-secret-9876543210"
SHAPED = "sk-live-" + "z" * 32


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=16_000, responder=RoutingResponder(echo_responder)) as server:
        yield server


@pytest.fixture(params=["sqlite", "redis"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "checkpoints.db")
        return
    redis = RedisServer(tmp_path / "redis").start()
    try:
        yield redis.url
    finally:
        redis.stop()


def conversation(turns: int) -> list[dict[str, Any]]:
    """``long_history`` whose first tool outputs (summarized at the first compaction) quote
    the client's key, the server's key and a credential-shaped string."""
    messages = long_history(turns, task=f"Fix the failing invoice test. My key is {CLIENT_KEY}.")
    leak = (
        f"src/billing/auth.py raised PermissionError: rejected {CLIENT_KEY} "
        f"and {SERVER_KEY} and {SHAPED}\n"
    )
    for message in messages[3:7]:
        if message["role"] == "tool":
            message["content"] = leak + message["content"]
    return messages


def stored_text(spec: str, session: str) -> str:
    """Every checkpoint and activity record of ``session`` as one JSON text."""
    namespace = credential_namespace(CLIENT_KEY)
    with open_store(spec) as store:
        checkpoints = store.list_session(namespace, session)
        assert checkpoints, "the run should have compacted"
        records = store.session_requests(namespace, session)
        recordings = store.recordings(namespace, session)
    return json.dumps(
        [
            *(c.model_dump(mode="json") for c in checkpoints),
            *(r.model_dump(mode="json") for r in records),
            *(r.model_dump(mode="json") for r in recordings),
        ]
    )


def assert_no_key(text: str) -> None:
    for secret in (CLIENT_KEY, SERVER_KEY, SHAPED):
        assert secret not in text


def test_no_key_is_stored_or_shown_and_rewrites_carry_the_redacted_summary(
    upstream: TestUpstream, store_spec: str
) -> None:
    settings = Settings(
        upstream=upstream.base_url,
        port=0,
        store=store_spec if "://" in store_spec else None,
        db=Path(store_spec) if "://" not in store_spec else None,
        context_window=16_000,
        upstream_api_key=SERVER_KEY,
        client_keys=[CLIENT_KEY],
        record=True,
        ui=True,
    )
    with ProxyServer(settings) as proxy:
        sdk = openai.OpenAI(base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0)
        session = ""
        later = [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "Thanks."}]
        for messages in (*(conversation(turns) for turns in (2, 3, 8)), conversation(8) + later):
            raw = sdk.chat.completions.with_raw_response.create(model=MODEL, messages=messages)
            raw.parse()
            session = raw.headers["x-summarizer-session"]
        time.sleep(0.5)  # the activity log is written after each answer is sent
        page = httpx2.get(
            f"{proxy.base_url.removesuffix('/v1')}/ui/api/sessions/{session}",
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
        )
    assert page.status_code == 200, page.text
    assert_no_key(page.text)

    stored = stored_text(store_spec, session)
    assert_no_key(stored)
    assert REDACTED in stored  # the keys were there to redact: the summary quoted them

    shown = CliRunner().invoke(app, ["show", session, "--store", store_spec])
    assert shown.exit_code == 0, shown.output
    assert_no_key(shown.output)
    assert REDACTED in shown.output

    # The client's own messages go upstream as they were; the inserted summary is the redacted
    # one, in the compacting request and, byte for byte, in the one rewritten from it later.
    chats = [r.body["messages"] for r in upstream.requests if not r.is_summary]
    compacting, extending = chats[2], chats[3]
    summary = next(m for m in compacting if "[Context summary]" in str(m.get("content")))
    assert REDACTED in summary["content"]
    assert_no_key(summary["content"])
    assert extending[: len(compacting)] == compacting
    assert any(CLIENT_KEY in str(m.get("content")) for m in compacting)  # the task, kept


def test_a_checkpoint_is_redacted_everywhere_it_wrote_and_nowhere_opaque() -> None:
    thinking = {"type": "thinking", "thinking": f"uses {SHAPED}", "signature": f"sig-{SHAPED}"}
    message = {"role": "user", "content": f"[Context summary] the key {CLIENT_KEY}"}
    checkpoint = Checkpoint(
        namespace="key-x",
        session="s",
        basis_count=4,
        basis_hash="h",
        slots=[
            Slot(
                start=1,
                end=2,
                message=message,
                summary=f"the key {CLIENT_KEY}",
                ledger=[{"kind": "error", "text": f"denied {SERVER_KEY}"}],
                failure=f"upstream said {SHAPED}",
            )
        ],
        overrides={
            2: {
                "role": "tool",
                "tool_call_id": f"call-{SHAPED}",
                "content": f"...{SERVER_KEY}...",
                OPAQUE_KEY: [thinking],
            }
        },
        summary=f"the key {CLIENT_KEY}",
        ledger=[{"kind": "error", "text": f"denied {SERVER_KEY}"}],
        tokens_before=10,
        tokens_after=5,
        model=MODEL,
        summary_model=MODEL,
        trigger="threshold",
    )
    redacted = redact_checkpoint(checkpoint, [CLIENT_KEY, SERVER_KEY])
    (slot,) = redacted.slots
    assert slot.summary == redacted.summary == f"the key {REDACTED}"
    assert slot.message["content"] == f"[Context summary] the key {REDACTED}"
    assert slot.ledger == redacted.ledger == [{"kind": "error", "text": f"denied {REDACTED}"}]
    assert slot.failure == f"upstream said {REDACTED}"
    cut = redacted.overrides[2]
    assert cut["content"] == f"...{REDACTED}..."
    # A provider's own objects and ids are carried byte for byte: a changed one breaks them.
    assert cut[OPAQUE_KEY] == [thinking] and cut["tool_call_id"] == f"call-{SHAPED}"
    # Nothing to redact: the very same checkpoint; redacting twice changes nothing more.
    assert redact_checkpoint(redacted, [CLIENT_KEY, SERVER_KEY]) is redacted
    clean = checkpoint.model_copy(
        update={"slots": [], "overrides": {}, "summary": "", "ledger": []}
    )
    assert redact_checkpoint(clean) is clean


def test_a_checkpoint_stored_before_redaction_is_shown_redacted(tmp_path: Path) -> None:
    # A store written by an earlier version holds the summary as the model wrote it: ``show``
    # and ``/ui`` still hide what has a credential's shape (the keys themselves are unknown).
    db = tmp_path / "old.db"
    leak = f"deploy with {SHAPED}"
    with SQLiteStore(db) as store:
        store.log_request(
            RequestRecord(
                namespace="key-old",
                session="s-old",
                at=1_800_000_000.0,
                model=MODEL,
                tokens_before=10,
                tokens_sent=5,
                window=16_000,
            )
        )
        store.put(
            Checkpoint(
                namespace="key-old",
                session="s-old",
                basis_count=3,
                basis_hash="h",
                slots=[
                    Slot(
                        start=1,
                        end=2,
                        message={"role": "user", "content": leak},
                        summary=leak,
                        ledger=[{"kind": "command", "text": leak}],
                    )
                ],
                summary=leak,
                tokens_before=10,
                tokens_after=5,
                model=MODEL,
                summary_model=MODEL,
                trigger="threshold",
                failure=leak,
            )
        )
    for args in (("show", "s-old"), ("show", "s-old", "--json")):
        shown = CliRunner().invoke(app, [*args, "--store", str(db)])
        assert shown.exit_code == 0, shown.output
        assert SHAPED not in shown.output and REDACTED in shown.output
