"""Requests a web page can make: never forwarded with the server's key. The real proxy (with
``SUMMARIZER_UPSTREAM_API_KEY``'s setting and no client keys, as on loopback) in front of the
test upstream, over real HTTP; and a real page in headless Chromium, from another origin,
posting a form and ``fetch``ing with ``mode: "no-cors"``."""

from __future__ import annotations

import http.server
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from context_summarizer.cli.main import app
from context_summarizer.core.errors import ConfigurationError
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.cross_site import normalize_origin
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import TestUpstream

from .chromium import chromium_path, run_chromium
from .conftest import ProxyFactory

SERVER_KEY = "sk-server-side-key-cross-site-0123"
CHAT = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}'
EVIL = "http://evil.example"


@pytest.fixture
def proxy(start_proxy: ProxyFactory) -> ProxyServer:
    return start_proxy(upstream_api_key=SecretStr(SERVER_KEY), ui=True, sessions_api="all")


def root(proxy: ProxyServer) -> str:
    return proxy.base_url.removesuffix("/v1")


def post(proxy: ProxyServer, path: str, body: bytes, **headers: str) -> httpx2.Response:
    return httpx2.post(root(proxy) + path, content=body, headers=headers, timeout=10)


def refused(upstream: TestUpstream, answer: httpx2.Response, before: int) -> dict[str, Any]:
    """The refusal's body, once checked: a 403 in OpenAI's shape, nothing forwarded."""
    assert answer.status_code == 403, answer.text
    assert len(upstream.requests) == before, "a refused request is never forwarded"
    error: dict[str, Any] = answer.json()["error"]
    return error


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        None,
    ],
)
def test_a_body_that_is_not_json_is_refused_on_every_route(
    upstream: TestUpstream, proxy: ProxyServer, content_type: str | None
) -> None:
    before = len(upstream.requests)
    headers = {} if content_type is None else {"content-type": content_type}
    for path in ("/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/ui/api/sessions"):
        error = refused(upstream, post(proxy, path, CHAT, **headers), before)
        assert error["code"] == "unsupported_content_type"
        assert "send Content-Type: application/json" in error["message"]
    messages = post(proxy, "/v1/messages", CHAT, **headers)
    assert messages.status_code == 403 and messages.json()["type"] == "error"
    assert "application/json" in messages.json()["error"]["message"]  # Anthropic's shape
    assert len(upstream.requests) == before


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "application/x+json"]
)
def test_json_bodies_and_requests_without_a_body_are_served(
    upstream: TestUpstream, proxy: ProxyServer, content_type: str
) -> None:
    chat = post(proxy, "/v1/chat/completions", CHAT, **{"content-type": content_type})
    assert chat.status_code == 200, chat.text
    assert upstream.requests[-1].headers["authorization"] == f"Bearer {SERVER_KEY}"
    assert httpx2.get(proxy.base_url + "/models", timeout=10).status_code == 200
    assert upstream.requests[-1].path == "/v1/models"
    empty = httpx2.post(proxy.base_url + "/batches/b1/cancel", timeout=10)  # no body at all
    assert empty.status_code != 403 and upstream.requests[-1].path == "/v1/batches/b1/cancel"


def test_the_sdks_and_an_upload_route_are_served(
    upstream: TestUpstream, proxy: ProxyServer
) -> None:
    client = openai.OpenAI(base_url=proxy.base_url, api_key="unused", max_retries=0)
    reply = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content == "ok"
    before = len(upstream.requests)
    upload = httpx2.post(
        proxy.base_url + "/files", files={"file": ("a.jsonl", b"{}\n")}, data={"purpose": "batch"}
    )
    assert upload.status_code != 403, "multipart/form-data is OpenAI's upload format"
    assert len(upstream.requests) == before + 1 and upstream.requests[-1].path == "/v1/files"


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": EVIL},
        {"origin": EVIL, "sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "cross-site"},
        {"origin": "http://localhost:3000", "sec-fetch-site": "same-site"},
        {"origin": "null"},
    ],
)
def test_a_request_a_browser_marks_as_another_sites_is_refused(
    upstream: TestUpstream, proxy: ProxyServer, headers: dict[str, str]
) -> None:
    before = len(upstream.requests)
    json_type = {"content-type": "application/json"}
    for path in ("/v1/chat/completions", "/v1/models", "/ui/api/sessions"):
        answer = httpx2.request(
            "POST" if "chat" in path else "GET",
            root(proxy) + path,
            content=CHAT if "chat" in path else None,
            headers={**headers, **json_type},
            timeout=10,
        )
        error = refused(upstream, answer, before)
        assert (error["code"], error["type"]) == ("cross_site_request", "permission_error")
        assert "--allow-origin" in error["message"]


def test_the_proxys_own_pages_are_served(upstream: TestUpstream, proxy: ProxyServer) -> None:
    own = root(proxy)
    for headers in (
        {"origin": own, "sec-fetch-site": "same-origin"},
        {"origin": own},  # a browser that sends no Sec-Fetch-Site
        {"sec-fetch-site": "none"},
        {"origin": EVIL.replace("evil", "proxy"), "sec-fetch-site": "same-origin"},  # TLS ahead
    ):
        answer = post(
            proxy, "/v1/chat/completions", CHAT, **headers, **{"content-type": "application/json"}
        )
        assert answer.status_code == 200, (headers, answer.text)


def test_an_allowed_origin_is_served_with_cors(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(
        upstream_api_key=SecretStr(SERVER_KEY), allow_origins="http://localhost:3000/"
    )
    origin = {"origin": "http://localhost:3000", "sec-fetch-site": "same-site"}
    preflight = httpx2.options(
        proxy.base_url + "/chat/completions",
        headers={
            **origin,
            "access-control-request-method": "POST",
            "access-control-request-headers": "content-type, authorization",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "http://localhost:3000"
    answer = post(
        proxy, "/v1/chat/completions", CHAT, **origin, **{"content-type": "application/json"}
    )
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "x-summarizer-compacted" in answer.headers["access-control-expose-headers"]
    other = post(
        proxy, "/v1/chat/completions", CHAT, origin=EVIL, **{"content-type": "application/json"}
    )
    assert other.status_code == 403 and "access-control-allow-origin" not in other.headers


def test_origins_are_normalized_and_checked() -> None:
    assert normalize_origin("HTTPS://App.Example:443/") == "https://app.example"
    assert normalize_origin("http://localhost:3000") == "http://localhost:3000"
    for bad in ("localhost:3000", "http://x/path", "null", "*"):
        with pytest.raises(ValueError, match="not an origin"):
            normalize_origin(bad)


def test_allowed_origins_come_from_flags_the_environment_and_the_config_file(
    tmp_path: Path,
) -> None:
    config = tmp_path / "summarizer.toml"
    config.write_text('allow_origins = ["https://App.example/"]\n')
    assert Settings.from_env({}, config_file=config).allow_origins == {"https://app.example"}
    environ = {"SUMMARIZER_ALLOW_ORIGINS": "http://localhost:3000, https://b.example:443"}
    from_env = Settings.from_env(environ, config_file=config).allow_origins
    assert from_env == {"http://localhost:3000", "https://b.example"}
    flag = Settings.from_env(environ, allow_origins=["http://127.0.0.1:5173"]).allow_origins
    assert flag == {"http://127.0.0.1:5173"}
    with pytest.raises(ConfigurationError, match="allow_origins"):
        Settings.from_env({"SUMMARIZER_ALLOW_ORIGINS": "localhost:3000"})
    help_text = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"}).output
    assert "--allow-origin" in help_text


PAGE = """<!doctype html>
<html><body>
<iframe name="sink"></iframe>
<form id="form" method="post" enctype="text/plain" target="sink" action="{chat}">
<input name='{{"model": "gpt-4o-mini", "messages": [{{"role": "user", "content": "hi"}}], "x": "'
 value='"}}'>
</form>
<script>
const chat = "{chat}";
const body = '{body}';
const form = new FormData();
form.append("model", "gpt-4o-mini");
Promise.allSettled([
  fetch(chat, {{method: "POST", mode: "no-cors", body: body}}),
  fetch(chat, {{method: "POST", mode: "no-cors", body: new Blob([body])}}),
  fetch(chat, {{method: "POST", mode: "no-cors", body: form}}),
  fetch(chat, {{method: "POST", mode: "no-cors", body: new URLSearchParams({{q: body}})}}),
]).then(() => {{
  document.getElementById("form").submit();
  document.body.setAttribute("data-sent", "yes");
}});
</script>
</body></html>
"""


@pytest.fixture
def page_server() -> Iterator[tuple[http.server.HTTPServer, list[bytes]]]:
    """A second HTTP server on 127.0.0.1 (another origin), serving the page set on it."""
    pages: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(pages[0])))
            self.end_headers()
            self.wfile.write(pages[0])

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, pages
    server.shutdown()
    server.server_close()


def refusals(proxy: ProxyServer) -> int:
    text = httpx2.get(root(proxy) + "/metrics").text
    found = re.search(r'summarizer_requests_total\{route="chat",status="403"\} (\d+)', text)
    return int(float(found[1])) if found else 0


def test_a_page_of_another_origin_in_chromium_spends_nothing(
    tmp_path: Path,
    upstream: TestUpstream,
    proxy: ProxyServer,
    page_server: tuple[http.server.HTTPServer, list[bytes]],
) -> None:
    chromium_path()
    server, pages = page_server
    chat = f"{proxy.base_url}/chat/completions"  # http://127.0.0.1:PORT: another site
    pages.append(PAGE.format(chat=chat, body=CHAT.decode()).encode())
    before = len(upstream.requests)
    # localhost and 127.0.0.1 are different sites: the browser marks these requests cross-site.
    run_chromium(tmp_path, f"http://localhost:{server.server_address[1]}/", "--dump-dom")
    deadline = time.monotonic() + 15
    while refusals(proxy) < 5 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert refusals(proxy) == 5, "the form post and the four fetches reached the proxy, refused"
    assert len(upstream.requests) == before, "the upstream received nothing"
