"""Codecs: one wire format (an API's request body) to and from the engine's conversation. Pure.

The engine works on Chat Completions messages. A front door for another API (the Anthropic
Messages API, the OpenAI Responses API) is a codec around that one engine:

- ``decode(body)`` turns the request's conversation into chat messages (``Decoded``): what the
  engine counts, hashes, plans cuts on and summarizes. Each chat message remembers where it came
  from (``Decoded.origins``) so that what the engine keeps goes back out as the client sent it.
- ``encode(decoded, messages)`` turns the messages the engine chose (the client's own chat
  dicts for what it kept, new ones for a summary) back into the body's conversation fields: a
  kept wire item is the client's own object, byte for byte once serialised; only what the engine
  wrote is translated.

What a chat message may carry beyond the Chat Completions fields: opaque parts that must survive
but are never summarized (Anthropic ``thinking``/``redacted_thinking`` blocks with their
signatures, Responses ``reasoning`` items with ``encrypted_content``) sit under ``OPAQUE_KEY`` on
the assistant message they belong to, so they are hashed (a changed signature is a different
message) and counted (as JSON text, then calibrated by the provider's usage). Client cache
markers (``cache_control``) are never copied into chat messages: a client moving its breakpoint
from one message to the next must not change the conversation's identity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..messages import Message

OPAQUE_KEY = "x_opaque"
"""Key of an assistant chat message under which a codec keeps wire parts the engine must carry
byte for byte and never summarize (a list of the wire objects, in their order)."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where one chat message came from in the wire request.

    ``items``: the indices of the wire items (Messages: entries of ``messages``; Responses:
    entries of ``input``) it was decoded from. ``blocks``: for a chat message decoded from part of
    one wire message (Anthropic's mixed ``tool_result`` + ``text`` user turn), the indices of the
    content blocks it carries; None when it carries its items whole.
    """

    items: tuple[int, ...]
    blocks: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Decoded:
    """A wire request's conversation as the engine sees it."""

    messages: list[Message]
    """Chat Completions messages, in the wire order: the engine's ``Turn.messages``."""
    tools: list[dict[str, Any]] | None
    """The request's tools as Chat Completions tool definitions (what the engine counts)."""
    origins: Mapping[int, Origin] = field(default_factory=dict)
    """``id(message)`` -> its ``Origin``, for every message of ``messages``. Valid while
    ``messages`` lives (one request); the engine returns kept messages as the same objects."""
    items: Sequence[Any] = ()
    """The wire items the messages were decoded from (the body's own list), for ``encode``."""
    system_items: int = 0
    """How many leading chat messages stand for a top-level field rather than wire items
    (Anthropic ``system``, Responses ``instructions``): ``encode`` never emits them as items."""


class Codec(Protocol):
    """Translates one API's request conversation to and from chat messages."""

    def decode(self, body: Mapping[str, Any]) -> Decoded:
        """The conversation of a request body; ``InvalidConversation`` (with ``param`` named in
        the API's own terms) for one the API would refuse."""
        ...

    def encode(self, decoded: Decoded, messages: Sequence[Message]) -> dict[str, Any]:
        """The body fields that carry ``messages`` (chosen by the engine from
        ``decoded.messages``, plus messages it wrote): e.g. ``{"system": ..., "messages": [...]}``
        or ``{"input": [...]}``. Kept wire items are the client's own objects."""
        ...
