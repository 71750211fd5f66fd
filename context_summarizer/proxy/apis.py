"""Which API a request speaks, decided in one place, from its path.

Each API the proxy knows is an ``Api``: its name (the ``route`` label of the metrics, the ``api``
of the activity log), the shape of its error bodies, the header its keys travel in, and which
paths are its own. ``api_for_path`` answers for any path; a path no API claims is OpenAI's (the
passthrough's ``/v1/embeddings``, ``/v1/models``...). The routes each API's front door manages
and how it reads a request are the front doors' (``front_doors``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Shape = Literal["openai", "anthropic", "google"]
"""The shape of an API's error bodies (``errors.error_payload``)."""


@dataclass(frozen=True, slots=True)
class Api:
    """One API, as every part of the proxy that must tell APIs apart sees it."""

    name: str
    """Its label: ``route`` in the metrics, ``api`` in the activity log."""
    shape: Shape
    """The shape of the error bodies and error events its clients read."""
    key_header: str
    """The header an upstream key is sent in (``authorization`` as a bearer token)."""
    owns: Callable[[str], bool]
    """Whether a request path is one of this API's."""


_GEMINI_VERSIONS = ("v1beta", "v1alpha")
_GEMINI_METHODS = frozenset(
    {
        "generateContent",
        "streamGenerateContent",
        "countTokens",
        "embedContent",
        "batchEmbedContents",
        "batchGenerateContent",
        "predict",
        "predictLongRunning",
    }
)


def is_gemini_path(path: str) -> bool:
    """Whether ``path`` is one of Google's Gemini API: under ``/v1beta`` or ``/v1alpha``, or a
    Gemini method on a model under ``/v1`` (``/v1/models/NAME:generateContent``; an OpenAI model
    id with colons, ``ft:...``, is not one)."""
    first = path.lstrip("/").split("/", 1)[0]
    if first in _GEMINI_VERSIONS:
        return True
    if not path.startswith("/v1/models/"):
        return False
    _, colon, method = path.rpartition("/")[2].rpartition(":")
    return bool(colon) and method in _GEMINI_METHODS


def _under(prefix: str) -> Callable[[str], bool]:
    return lambda path: path == prefix or path.startswith(prefix + "/")


CHAT = Api("chat", "openai", "authorization", lambda path: path == "/v1/chat/completions")
"""OpenAI's Chat Completions."""
RESPONSES = Api("responses", "openai", "authorization", _under("/v1/responses"))
"""OpenAI's Responses."""
MESSAGES = Api("messages", "anthropic", "x-api-key", _under("/v1/messages"))
"""Anthropic's Messages."""
GEMINI = Api("gemini", "google", "x-goog-api-key", is_gemini_path)
"""Google's Gemini (``generateContent``)."""
OTHER = Api("passthrough", "openai", "authorization", lambda path: path.startswith("/v1/"))
"""Any other ``/v1`` route: forwarded as OpenAI's."""

APIS = (CHAT, RESPONSES, MESSAGES, GEMINI, OTHER)


def api_for_path(path: str) -> Api | None:
    """The API ``path`` belongs to (None: none of them, e.g. ``/healthz``)."""
    return next((api for api in APIS if api.owns(path)), None)


def shape_for_path(path: str) -> Shape:
    """The error shape of requests to ``path`` (OpenAI's for a path no API claims)."""
    api = api_for_path(path)
    return api.shape if api is not None else "openai"
