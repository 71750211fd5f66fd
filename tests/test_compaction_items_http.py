"""summarizer's compaction items over real HTTP: the JSON inside one is parsed with the body's
limits (a 400 naming ``input[i].encrypted_content``, never a 500), and an item verifies only as
written, for the key and conversation it was written for, on every replica sharing the store
and after a restart; the signing secret never leaves the store."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from context_summarizer.core.codecs.responses_compaction import PREFIX, compaction_item
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.headers import credential_namespace
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import TestUpstream

from .conftest import ProxyFactory
from .redis_server import RedisServer
from .test_proxy_responses import KEY, MODEL, responses_requests

TASK = {"role": "user", "content": "Fix the parser in src/parse.py."}
TRIGGER = {"type": "compaction_trigger"}


def client(proxy: ProxyServer, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0)


def post(proxy: ProxyServer, path: str, items: list[Any], key: str = KEY) -> httpx2.Response:
    return httpx2.post(
        f"{proxy.base_url}{path}",
        json={"model": MODEL, "input": items},
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )


def item_for(proxy: ProxyServer, items: list[Any]) -> dict[str, Any]:
    """The compaction item the proxy answers a Codex-style trigger on ``items`` with."""
    response = client(proxy).responses.create(model=MODEL, input=[*items, TRIGGER])  # type: ignore[list-item]
    assert [item.type for item in response.output] == ["compaction"]
    return response.output[0].model_dump(exclude_none=True)


def db_secret(path: Path) -> bytes:
    with sqlite3.connect(path) as conn:
        (value,) = conn.execute("SELECT value FROM secrets").fetchone()
    return bytes(value)


@pytest.mark.parametrize("path", ["/responses", "/responses/compact"])
@pytest.mark.parametrize("prefix", [PREFIX, "summarizer.compaction.v1:"])
def test_a_bracket_bomb_in_an_item_gets_a_400_naming_the_field(
    upstream: TestUpstream, start_proxy: ProxyFactory, path: str, prefix: str
) -> None:
    proxy = start_proxy()
    bomb = {"type": "compaction", "encrypted_content": prefix + "[" * 100_000}
    answer = post(proxy, path, [TASK, bomb])
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "input[1].encrypted_content"
    assert not upstream.requests


def test_nesting_inside_a_signed_items_items_is_bounded_like_the_body(
    upstream: TestUpstream, start_proxy: ProxyFactory, tmp_path: Path
) -> None:
    proxy = start_proxy()
    item_for(proxy, [TASK])  # the store's secret exists from the first item on
    deep: Any = "x"
    for _ in range(300):  # under the stdlib's recursion limit, far over the body's 128
        deep = [deep]
    kept = [TASK, {"type": "reasoning", "summary": [], "x": deep}]
    namespace = credential_namespace(KEY)
    item = compaction_item(
        "s", kept, "ck", key=db_secret(tmp_path / "checkpoints.db"), namespace=namespace
    )
    for stream in (False, True):
        answer = httpx2.post(
            f"{proxy.base_url}/responses",
            json={
                "model": MODEL,
                "input": [item, {"role": "user", "content": "go"}],
                "stream": stream,
            },
            headers={"Authorization": f"Bearer {KEY}"},
        )
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["param"] == "input[0].encrypted_content"
        assert error["code"] == "nested_too_deeply"
    assert not responses_requests(upstream)


def test_an_altered_or_replayed_item_is_refused_and_the_follow_ups_are_not(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    reply = {"role": "assistant", "content": "Looking at src/parse.py now."}
    item = item_for(proxy, [TASK, reply])
    go_on = {"role": "user", "content": "Go on."}
    sdk = client(proxy)
    # The legitimate follow-ups: after the task (Codex's retained user messages), or alone.
    for before in ([TASK], [TASK, reply], []):
        answer = sdk.responses.create(model=MODEL, input=[*before, item, go_on])  # type: ignore[list-item]
        assert answer.status == "completed"
    sent = len(upstream.requests)
    altered = {**item, "encrypted_content": item["encrypted_content"].replace("Fix", "Wipe")}
    assert altered != item and json.loads(altered["encrypted_content"].removeprefix(PREFIX))
    for items, key in (
        ([TASK, altered, go_on], KEY),  # summary text changed, still valid JSON
        ([TASK, item, go_on], "sk-test-another-key-000000000000"),  # replayed by another key
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            client(proxy, key).responses.create(model=MODEL, input=items)  # type: ignore[arg-type]
        assert refused.value.status_code == 400
        body: Any = refused.value.body
        assert body["param"] == "input[1].encrypted_content", body
    assert len(upstream.requests) == sent  # nothing refused reached the upstream
    # Pasted by its own key after another conversation's items: those are superseded, so the
    # upstream reads the item's conversation and the new turn, nothing of the other.
    other_task = {"role": "user", "content": "Write a poem."}
    sdk.responses.create(model=MODEL, input=[other_task, item, go_on])  # type: ignore[list-item]
    assert "Write a poem." not in json.dumps(responses_requests(upstream)[-1].body)


def test_replicas_sharing_a_sqlite_file_verify_each_others_items_and_a_restart_keeps_them(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    first, second = start_proxy(), start_proxy()
    item = item_for(first, [TASK])
    go_on = {"role": "user", "content": "Go on."}
    assert post(second, "/responses", [TASK, item, go_on]).status_code == 200
    first.stop()
    restarted = start_proxy()
    assert post(restarted, "/responses", [TASK, item, go_on]).status_code == 200
    assert post(first_of_other_db(upstream), "/responses", [item, go_on]).status_code == 400


def first_of_other_db(upstream: TestUpstream) -> ProxyServer:
    """A proxy with a store of its own (its memory): another server's secret."""
    return _started(ProxyServer(Settings(upstream=upstream.base_url, port=0, db=":memory:")))


_RUNNING: list[ProxyServer] = []


def _started(proxy: ProxyServer) -> ProxyServer:
    _RUNNING.append(proxy.start())
    return proxy


@pytest.fixture(autouse=True)
def _stop_started() -> Any:
    yield
    while _RUNNING:
        _RUNNING.pop().stop()


def test_replicas_sharing_redis_verify_each_others_items(
    upstream: TestUpstream, redis_server: RedisServer
) -> None:
    settings = Settings(upstream=upstream.base_url, port=0, store=redis_server.url)
    first, second = _started(ProxyServer(settings)), _started(ProxyServer(settings))
    assert first.app.state.proxy.compaction_key == second.app.state.proxy.compaction_key
    item = item_for(first, [TASK])
    answer = post(second, "/responses", [TASK, item, {"role": "user", "content": "Go on."}])
    assert answer.status_code == 200, answer.text


def test_the_secret_never_leaves_the_store(
    upstream: TestUpstream,
    start_proxy: ProxyFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    proxy = start_proxy(record=True)
    item = item_for(proxy, [TASK])
    refused = post(proxy, "/responses", [{"role": "user", "content": "x"}, item])
    secret = db_secret(tmp_path / "checkpoints.db")
    assert secret == proxy.app.state.proxy.compaction_key
    seen = [
        refused.text,
        json.dumps(item),
        httpx2.get(f"{proxy.base_url.removesuffix('/v1')}/metrics").text,
        caplog.text,
    ]
    with sqlite3.connect(tmp_path / "checkpoints.db") as conn:
        tables = [
            name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        for table in tables:
            if table != "secrets":
                seen.extend(repr(row) for row in conn.execute(f"SELECT * FROM {table}"))
    for form in (secret.hex(), secret.decode("latin-1"), repr(secret)):
        assert not any(form in text for text in seen)
