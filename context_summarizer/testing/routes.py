"""Which endpoint answers a request: the test upstream's request handler.

``POST /v1/chat/completions``, ``POST /v1/embeddings``, the Responses API (``POST
/v1/responses``, ``POST /v1/responses/compact``, ``GET /v1/responses/{id}``), Anthropic's
``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` and Google's ``POST
/v1beta/models/{model}:generateContent`` and ``:streamGenerateContent`` (also under ``/v1``, as
Google serves them, so a proxy whose upstream is ``.../v1`` reaches them) go to their own modules
(``chat``, ``embeddings``, ``responses_api``, ``messages_api``, ``gemini_api``); ``GET
/v1/models`` and ``GET /v1/models/{id}`` are answered here; anything else is a 404 with OpenAI's
error body (Google's under ``/v1beta``). Each request is recorded with its API (``"chat"``,
``"responses"``, ``"messages"`` or ``"gemini"``). A connection that is dropped (a fault) or that
the client closed is closed.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from .chat import chat_completions
from .embeddings import embeddings
from .faults import error_body, google_error_body
from .gemini_api import GEMINI_PREFIX, generate_content
from .messages_api import count_tokens, messages
from .responses_api import response_get, responses_compact, responses_create
from .transport import _Dropped, _Exchange


class _Handler(_Exchange):
    """The test upstream's request handler: reads a request, routes it, answers it."""

    def _dispatch(self) -> None:
        self._received = time.time()
        try:
            raw = self._read_body() if self.command in ("POST", "PUT", "PATCH") else b""
        except (OSError, ValueError):
            self.close_connection = True
            return
        path = urlsplit(self.path).path.rstrip("/")
        self._api = (
            "responses"
            if path.startswith("/v1/responses")
            else "messages"
            if path.startswith("/v1/messages")
            else "gemini"
            if path.startswith("/v1beta/") or _gemini_method(path) is not None
            else "chat"
        )
        try:
            if self.command == "POST" and path == "/v1/chat/completions":
                chat_completions(self, raw)
            elif self.command == "POST" and path == "/v1/responses":
                responses_create(self, raw)
            elif self.command == "POST" and path == "/v1/responses/compact":
                responses_compact(self, raw)
            elif self.command == "GET" and path.startswith("/v1/responses/"):
                response_get(self, path.removeprefix("/v1/responses/"))
            elif self.command == "POST" and path == "/v1/embeddings":
                embeddings(self, raw)
            elif self.command == "POST" and path == "/v1/messages":
                messages(self, raw)
            elif self.command == "POST" and path == "/v1/messages/count_tokens":
                count_tokens(self, raw)
            elif self.command == "POST" and path.startswith(GEMINI_PREFIX):
                self._gemini(path.removeprefix(GEMINI_PREFIX), raw)
            elif self.command == "POST" and (rest := _gemini_method(path)) is not None:
                self._gemini(rest, raw)
            elif self.command == "GET" and path == "/v1/models":
                self._models()
            elif self.command == "GET" and path.startswith("/v1/models/"):
                self._model(path.removeprefix("/v1/models/"))
            else:
                message = f"Invalid URL ({self.command} {urlsplit(self.path).path})"
                payload = google_error_body(404, message) if self._api == "gemini" else None
                self._fail(404, _parse_or_none(raw), payload or error_body(message))
        except _Dropped:
            self.close_connection = True
        except ConnectionError:
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch

    # endpoints

    def _gemini(self, rest: str, raw: bytes) -> None:
        """``POST /v1beta/models/{model}:{method}``: the two generate methods, else a 404."""
        model, _, method = unquote(rest).rpartition(":")
        if model and method in ("generateContent", "streamGenerateContent"):
            stream = method == "streamGenerateContent"
            sse = parse_qs(urlsplit(self.path).query).get("alt") == ["sse"]
            generate_content(self, raw, model, stream=stream, sse=sse)
            return
        message = f"Method {method or rest!r} is not found for this test model."
        self._fail(404, _parse_or_none(raw), google_error_body(404, message))

    def _models(self) -> None:
        payload = {"object": "list", "data": [self._model_object(self.upstream.model_name)]}
        self._record(None, 200)
        self._send_json(200, payload)

    def _model(self, model_id: str) -> None:
        if model_id != self.upstream.model_name:
            message = f"The model `{model_id}` does not exist or you do not have access to it."
            self._fail(404, None, error_body(message, code="model_not_found"))
            return
        self._record(None, 200)
        self._send_json(200, self._model_object(model_id))

    @staticmethod
    def _model_object(model_id: str) -> dict[str, Any]:
        return {"id": model_id, "object": "model", "created": 1_700_000_000, "owned_by": "system"}


def _gemini_method(path: str) -> str | None:
    """``{model}:{method}`` of a Gemini method under ``/v1/models/`` (None for any other path,
    an OpenAI model's ``/v1/models/{id}`` included)."""
    rest = path.removeprefix("/v1/models/")
    if rest == path or ":" not in rest:
        return None
    return rest if rest.rpartition(":")[2] in ("generateContent", "streamGenerateContent") else None


def _parse_or_none(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
