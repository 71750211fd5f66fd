"""The read-only web page ``/ui``: off by default; on, the page with its security headers, its
JSON API under the sessions API's credential rules, and the page itself in a real headless
Chromium after a real compacting session through a live proxy."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import openai
import pytest
from typer.testing import CliRunner

from context_summarizer.cli.main import app
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.headers import credential_namespace
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import ScriptedToolAgent, TestUpstream
from context_summarizer.testing.scenario import CodingSession

from .chromium import Dom, chromium_path, count_near, png_rows, run_chromium
from .conftest import ProxyFactory

MODEL = "gpt-4o-mini"
KEY = "sk-test-ui-tenant-a-0123456789abcdef"
OTHER_KEY = "sk-test-ui-tenant-b-0123456789abcdef"
WINDOW = 16_000
TURNS = 30
HOSTILE = "NOTE: keep <img src=x onerror=alert(1)> and <script>alert(2)</script> literal."
"""Carried into every summary verbatim by the test upstream's summarizer (it keeps NOTE lines)."""
SESSION = "team/invoice-fix"


@pytest.fixture
def coding() -> CodingSession:
    return CodingSession(turns=TURNS, seed=7)


@pytest.fixture
def upstream(coding: CodingSession) -> Iterator[TestUpstream]:
    agent = ScriptedToolAgent(coding.steps)
    with TestUpstream(context_window=WINDOW, responder=agent) as server:
        yield server


@dataclass
class Driven:
    """A session driven through the proxy: its id, the messages sent last, and how many
    requests the proxy said it compacted."""

    session: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    compactions: int = 0


def drive(
    proxy: ProxyServer,
    coding: CodingSession,
    *,
    key: str | None = KEY,
    session: str | None = SESSION,
    stop_after: int | None = None,
) -> Driven:
    """The coding session's agent loop with the real openai SDK, until the script ends (or
    ``stop_after`` compactions)."""
    sdk = openai.OpenAI(base_url=proxy.base_url, api_key=key or "unused", max_retries=0)
    headers: dict[str, Any] = {"x-summarizer-session": session} if session else {}
    if key is None:  # the SDK insists on a key; a keyless client sends no Authorization at all
        headers["Authorization"] = openai.Omit()
    task = {"role": "user", "content": f"{coding.task['content']}\n{HOSTILE}"}
    driven = Driven(session="", messages=[coding.system, task])
    for turn in range(TURNS + 1):
        raw = sdk.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=driven.messages,  # type: ignore[arg-type]
            tools=coding.tools,  # type: ignore[arg-type]
            max_completion_tokens=500,
            extra_headers=headers,
        )
        reply = raw.parse().choices[0].message
        driven.session = raw.headers["x-summarizer-session"]
        driven.compactions += raw.headers.get("x-summarizer-compacted") == "true"
        driven.messages.append(reply.model_dump(exclude_none=True))
        if not reply.tool_calls or driven.compactions == stop_after:
            break
        for call in reply.tool_calls:
            output = coding.execute(turn, call.function.name, call.function.arguments)
            driven.messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    sdk.close()
    time.sleep(0.3)  # the activity log is written just after each answer
    return driven


def root(proxy: ProxyServer) -> str:
    return proxy.base_url.removesuffix("/v1")


def get(proxy: ProxyServer, path: str, key: str | None = None) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx2.get(root(proxy) + path, headers=headers)


def error_code(response: httpx2.Response) -> str:
    return str(response.json()["error"]["code"])


# ---------------------------------------------------------------------------------- HTTP level


def test_ui_is_off_by_default_and_every_ui_path_is_an_unknown_path(
    start_proxy: ProxyFactory,
) -> None:
    proxy = start_proxy()
    unknown = get(proxy, "/elsewhere")
    for path in ("/ui", "/ui/api/sessions", f"/ui/api/sessions/{SESSION}"):
        answer = get(proxy, path, KEY)
        assert answer.status_code == 404, path
        assert answer.json() == {
            "error": {**unknown.json()["error"], "message": f"Unknown path {path}."}
        }
    assert Settings().ui is False
    assert Settings.from_env({"SUMMARIZER_UI": "true"}).ui is True
    assert Settings.from_env({"SUMMARIZER_UI": "true"}, ui=False).ui is False
    help_text = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"}).output
    assert "--ui" in help_text and "--no-ui" in help_text


def _inline_hash(html: str, tag: str) -> str:
    (text,) = re.findall(rf"<{tag}>(.*?)</{tag}>", html, flags=re.DOTALL)
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_the_page_loads_without_a_key_with_strict_headers_and_no_outside_url(
    start_proxy: ProxyFactory,
) -> None:
    proxy = start_proxy(ui=True, client_keys=[KEY])
    page = get(proxy, "/ui")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert page.headers["cache-control"] == "no-store"
    policy = dict(
        directive.partition(" ")[::2]
        for directive in page.headers["content-security-policy"].split("; ")
    )
    assert policy["default-src"] == "'none'"
    assert policy["connect-src"] == "'self'"
    assert policy["img-src"] == "data:"
    assert policy["script-src"] == _inline_hash(page.text, "script")
    assert policy["style-src"] == _inline_hash(page.text, "style")
    assert "unsafe" not in page.headers["content-security-policy"]
    # Nothing the page could fetch from elsewhere: the only URL is the SVG namespace name.
    assert set(re.findall(r"[a-z]+://[^\s\"'`]*", page.text)) == {"http://www.w3.org/2000/svg"}
    assert set(re.findall(r"(?:src|href|action)=\"([^\"]*)\"", page.text)) <= {"#", "data:,"}
    assert "url(" not in page.text and "@import" not in page.text
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in page.text, sink

    # Only the page is open: its data, other methods and neighbouring paths still need a key.
    for path in ("/ui/api/sessions", f"/ui/api/sessions/{SESSION}", "/ui/", "/ui.html"):
        refused = get(proxy, path)
        assert refused.status_code == 401 and error_code(refused) == "invalid_api_key", path
    posted = httpx2.post(root(proxy) + "/ui")
    assert posted.status_code == 401
    wrong = get(proxy, "/ui/api/sessions", "sk-not-a-client-key-0000000000")
    assert wrong.status_code == 401
    assert get(proxy, "/ui/api/sessions", KEY).json()["data"] == []


def test_the_api_shows_each_credential_only_its_own_sessions(
    start_proxy: ProxyFactory, coding: CodingSession
) -> None:
    proxy = start_proxy(ui=True, record=True)
    mine = drive(proxy, coding, stop_after=1)
    assert mine.compactions == 1 and mine.session == SESSION
    theirs = drive(proxy, coding, key=OTHER_KEY, session="their-notes", stop_after=0)

    listed = get(proxy, "/ui/api/sessions", KEY)
    assert listed.status_code == 200
    (row,) = listed.json()["data"]
    assert row["session"] == SESSION and row["compactions"] == 1 and row["window"] == WINDOW
    assert row["requests"] == sum(m["role"] == "assistant" for m in mine.messages)
    assert row["namespace"] == credential_namespace(KEY)[:12]
    assert [r["session"] for r in get(proxy, "/ui/api/sessions", OTHER_KEY).json()["data"]] == [
        theirs.session
    ]

    view = get(proxy, f"/ui/api/sessions/{quote(SESSION, safe='')}", KEY)
    assert view.status_code == 200 and view.headers["cache-control"] == "no-store"
    data = view.json()
    assert data["session"] == SESSION and data["recorded"] is True
    assert len(data["requests"]) == row["requests"]
    (compaction,) = data["compactions"]
    (summary,) = compaction["summaries"]
    # Hostile text is data: returned as the string it is, for the page to show as text.
    assert HOSTILE in summary["summary"]
    assert view.headers["content-type"] == "application/json"
    assert summary["replaced"] == mine.messages[summary["start"] : summary["end"]]
    assert summary["start"] >= 2 and summary["ledger"]

    for answer in (listed, view):
        assert credential_namespace(KEY) not in answer.text  # the label only, never the hash
        assert KEY not in answer.text

    # Another tenant's session is the same 404 as one that does not exist.
    foreign = get(proxy, f"/ui/api/sessions/{quote(SESSION, safe='')}", OTHER_KEY)
    missing = get(proxy, "/ui/api/sessions/nope", OTHER_KEY)
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json()["error"]["message"].replace(SESSION, "X") == missing.json()["error"][
        "message"
    ].replace("nope", "X")
    assert error_code(foreign) == error_code(missing) == "session_not_found"

    # keyed (the default): a keyless reader is refused.
    for path in ("/ui/api/sessions", f"/ui/api/sessions/{SESSION}"):
        keyless = get(proxy, path)
        assert keyless.status_code == 401 and error_code(keyless) == "invalid_api_key"


def test_sessions_api_all_serves_keyless_readers_and_off_serves_no_one(
    start_proxy: ProxyFactory, coding: CodingSession
) -> None:
    shared = start_proxy(ui=True, sessions_api="all", db=":memory:")
    keyless = drive(shared, coding, key=None, session="shared-notes", stop_after=0)
    drive(shared, coding, key=KEY, session="keyed-notes", stop_after=0)
    listed = get(shared, "/ui/api/sessions")
    assert listed.status_code == 200
    assert [(r["session"], r["namespace"]) for r in listed.json()["data"]] == [
        (keyless.session, "keyless")
    ]
    assert get(shared, "/ui/api/sessions/shared-notes").json()["row"]["namespace"] == "keyless"
    assert get(shared, "/ui/api/sessions/keyed-notes").status_code == 404

    closed = start_proxy(ui=True, sessions_api="off", db=":memory:")
    drive(closed, coding, session="notes", stop_after=0)
    for path in ("/ui/api/sessions", "/ui/api/sessions/notes"):
        for key in (None, KEY):
            answer = get(closed, path, key)
            assert answer.status_code == 404 and error_code(answer) == "not_found"


# ------------------------------------------------------------------------- a real browser


def test_the_page_in_headless_chromium_after_a_compacting_session(
    start_proxy: ProxyFactory, coding: CodingSession, tmp_path: Path
) -> None:
    chromium_path()
    proxy = start_proxy(ui=True, record=True, client_keys=[KEY])
    driven = drive(proxy, coding)
    assert driven.compactions >= 2
    fragment = f"key={quote(KEY, safe='')}&session={quote(SESSION, safe='')}"
    url = f"{root(proxy)}/ui#{fragment}"

    dom = Dom(run_chromium(tmp_path, url, "--dump-dom"))
    assert dom.by_id("status").content == ""  # no error: the key from the fragment was used
    (row,) = [e for e in dom.elements if e.tag == "tr" and e.attrs.get("data-session")]
    assert row.attrs["data-session"] == SESSION and "selected" in row.classes
    assert SESSION in row.content and f"{WINDOW:,}" in row.content
    assert dom.by_id("session-title").content.startswith(f"Session {SESSION}")
    (chart,) = [e for e in dom.elements if e.tag == "svg"]
    assert chart.attrs["id"] == "chart"
    assert len(dom.by_class("window-line")) == 1
    marks = dom.by_class("compaction-mark")
    assert len(marks) == driven.compactions
    assert len(dom.by_class("dot-sent")) == sum(m["role"] == "assistant" for m in driven.messages)
    assert {"request", "tokens", f"window {WINDOW:,}"} <= {
        e.content for e in dom.elements if e.tag == "text"
    }
    assert len(dom.by_class("compaction")) == driven.compactions
    summaries = dom.by_class("summary-text")
    assert len(summaries) >= driven.compactions
    assert all(HOSTILE in s.content for s in summaries)  # shown as text...
    assert not [e for e in dom.elements if e.tag in ("img", "iframe", "object")]  # ...not markup
    assert len([e for e in dom.elements if e.tag == "script"]) == 1
    replaced = [e.content for e in dom.by_class("message")]
    first_call = driven.messages[2]["tool_calls"][0]["function"]
    assert f"-> {first_call['name']}({first_call['arguments']})" in replaced[0]
    assert driven.messages[3]["content"][:200] in replaced[1]
    assert any("Missed by the summary" in e.content for e in dom.elements if e.tag == "h4")
    # The session's tokens saved: its requests' own figures added up, as /metrics counts them.
    requests = get(proxy, f"/ui/api/sessions/{quote(SESSION, safe='')}", KEY).json()["requests"]
    saved = sum(r["tokens_saved"] for r in requests)
    assert saved > 0 and requests[0]["tokens_saved"] == 0  # nothing saved before a compaction
    assert dom.by_id("tokens-saved").content == f"{saved:,}"
    assert f"tokens saved by compaction {saved:,}" in dom.by_id("session-facts").content
    scraped = get(proxy, "/metrics").text
    assert f'summarizer_tokens_saved_total{{route="chat"}} {float(saved)}' in scraped

    # Without the key the page still loads, and says what it needs; no data is shown.
    keyless = Dom(run_chromium(tmp_path, f"{root(proxy)}/ui#session={SESSION}", "--dump-dom"))
    assert "needs your API key" in keyless.by_id("status").content
    assert not [e for e in keyless.elements if e.attrs.get("data-session")]

    shot = tmp_path / "ui.png"
    run_chromium(tmp_path, url, f"--screenshot={shot}", "--window-size=1280,900")
    png = shot.read_bytes()
    assert len(png) > 20_000
    width, height, rows = png_rows(png)
    assert (width, height) == (1280, 900)
    sampled = {row[i : i + 3] for row in rows[::10] for i in range(0, len(row), 30)}
    assert len(sampled) > 50  # not a blank page
    window_red, mark_purple = count_near(rows, [(220, 38, 38), (124, 58, 237)])
    assert window_red > 100 and mark_purple > 100  # the chart, drawn
    if target := os.environ.get("SUMMARIZER_UI_SCREENSHOT"):
        shutil.copyfile(shot, target)


def test_keyless_in_chromium_without_record_names_the_range_it_replaced(
    start_proxy: ProxyFactory, coding: CodingSession, tmp_path: Path
) -> None:
    chromium_path()
    proxy = start_proxy(ui=True, sessions_api="all")
    driven = drive(proxy, coding, key=None, stop_after=1)
    assert driven.compactions == 1

    url = f"{root(proxy)}/ui#session={quote(SESSION, safe='')}"
    dom = Dom(run_chromium(tmp_path, url, "--dump-dom"))
    assert dom.by_id("status").content == ""
    assert [e.attrs["data-session"] for e in dom.elements if e.attrs.get("data-session")] == [
        SESSION
    ]
    assert dom.by_id("session-title").content == f"Session {SESSION} (keyless)"
    assert len(dom.by_class("compaction-mark")) == 1
    assert dom.by_class("message") == []
    (replaced,) = dom.by_class("replaced")
    assert re.search(
        r"messages 2-\d+ \(not recorded: run the proxy with --record\)", replaced.content
    )
    (summary,) = dom.by_class("summary-text")
    assert HOSTILE in summary.content
