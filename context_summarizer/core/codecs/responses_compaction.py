"""The Responses API's compaction contract, for any model: summarizer's compaction items. Pure.

OpenAI's server-side compaction (``context_management: [{"type": "compaction",
"compact_threshold": N}]`` and ``POST /v1/responses/compact``) answers with a ``compaction`` item
whose ``encrypted_content`` only OpenAI can read; a client passes it back in a later ``input``, and
everything before the newest one is superseded. summarizer keeps that contract for any upstream,
with an item anyone can read and only the proxy can write:

- ``id``: ``cmp_summarizer_<checkpoint id>``; ``created_by``: ``"summarizer"``;
- ``encrypted_content``: ``summarizer.compaction.v2:`` then JSON ``{"summary": <the summary the
  model will read, ledger included>, "items": [<the compacted input: the summary as a user
  message, then the kept items verbatim>], "sig": <HMAC-SHA256, hex>}``.

The signature (``sig``, always the last member) is an HMAC-SHA256, with the server's secret (kept
in the store, so every replica shares it), over the tenant's namespace (the keyed hash of the
client's credential) and the exact text of the JSON before it, which names the conversation it
stands for (its items, the summary and the checkpoint). So an item verifies only for the
credential it was written for, and only unaltered.

What it does not promise: secrecy (anyone holding the item reads it, as before), freshness (the
same client may send an older item again: it stands for what it stood for), anything about
items after it (new turns are the client's), or that the items a client sends before it are the
ones it replaced. Everything before the newest item is superseded, as OpenAI's contract says, so
those items never reach the upstream whatever they are; and they cannot be checked, since
clients resend them rewritten (Codex re-creates its developer messages, reorders them after its
retained user messages and adds fields of its own to those). So a client that pastes one of its
own items into another of its conversations continues the item's conversation there, never a
mix of the two; another key's item is refused. An item written before signatures
(``summarizer.compaction.v1:``) is refused with a 400 saying so.

``expand`` turns an ``input`` holding such items into what the upstream reads: from the newest of
them on, with it replaced by the items it stands for. A compaction item summarizer did not write
(OpenAI's own) is left alone.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..bounded_json import NestingTooDeep, loads_bounded
from ..errors import InvalidConversation

PREFIX = "summarizer.compaction.v2:"
"""How ``encrypted_content`` of summarizer's (signed) compaction items begins."""
V1_PREFIX = "summarizer.compaction.v1:"
"""How the unsigned items of summarizer before signatures began: refused now."""
CREATED_BY = "summarizer"
_DOMAIN = b"summarizer.compaction.v2\x00"
_SIG = re.compile(r', "sig": "([0-9a-f]{64})"\}\Z')


class BadCompactionItem(InvalidConversation):
    """An item that claims to be summarizer's and is not usable: altered, unsigned, another
    key's or another conversation's. ``code`` is the error code of the 400."""

    def __init__(self, message: str, *, param: str, code: str = "invalid_encrypted_content"):
        super().__init__(message, param=param)
        self.code = code


@dataclass(frozen=True, slots=True)
class Expansion:
    """An ``input`` with summarizer's compaction items expanded."""

    items: list[Any]
    """What the upstream reads: the newest item's contents, then the items after it."""


def _signature(key: bytes, namespace: str, text: str) -> str:
    message = _DOMAIN + namespace.encode("utf-8") + b"\x00" + text.encode("utf-8")
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def compaction_item(
    summary: str,
    kept: Sequence[Any],
    checkpoint_id: str | None,
    *,
    key: bytes,
    namespace: str,
) -> dict[str, Any]:
    """The compaction item standing for a compacted input: the ``kept`` input items (the summary
    message among them, first), and ``summary``, its text, for whoever reads the item; signed
    with ``key`` for ``namespace``."""
    data = {"summary": summary, "items": list(kept)}
    text = json.dumps(data, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: escaped, so the text survives a round trip
        text = json.dumps(data)
    signed = text[:-1] + f', "sig": "{_signature(key, namespace, text)}"}}'
    return {
        "id": f"cmp_summarizer_{checkpoint_id or 'unsaved'}",
        "type": "compaction",
        "encrypted_content": PREFIX + signed,
        "created_by": CREATED_BY,
    }


def is_ours(item: Any) -> bool:
    """Whether ``item`` claims to be a compaction item summarizer wrote (signed or not)."""
    return (
        isinstance(item, Mapping)
        and item.get("type") == "compaction"
        and isinstance(item.get("encrypted_content"), str)
        and item["encrypted_content"].startswith((PREFIX, V1_PREFIX))
    )


def opened(item: Mapping[str, Any], where: str, *, key: bytes, namespace: str) -> dict[str, Any]:
    """The verified contents of one of summarizer's items (``items``), or
    ``BadCompactionItem`` naming ``where`` (``input[i].encrypted_content``). The signature is
    checked before anything is parsed; the JSON is parsed with the body's limits."""
    content: str = item["encrypted_content"]
    if content.startswith(V1_PREFIX):
        raise BadCompactionItem(
            f"'{where}' is a compaction item of an older summarizer, written without a signature, "
            "and is no longer accepted: send the conversation without it (or start a new one)",
            param=where,
        )
    found = _SIG.search(content, len(PREFIX))
    text = content[len(PREFIX) : found.start()] + "}" if found is not None else ""
    if found is None or not hmac.compare_digest(found.group(1), _signature(key, namespace, text)):
        raise BadCompactionItem(
            f"'{where}' is not a compaction item this proxy wrote for this API key: it was "
            "altered, or written for another key",
            param=where,
        )
    try:
        data = loads_bounded(text)
    except NestingTooDeep as exc:
        raise BadCompactionItem(
            f"'{where}': {exc}", param=where, code="nested_too_deeply"
        ) from None
    except ValueError:
        data = None
    kept = data.get("items") if isinstance(data, dict) else None
    if not isinstance(kept, list) or not all(isinstance(k, dict) and not is_ours(k) for k in kept):
        raise BadCompactionItem(f"'{where}' is a compaction item that cannot be read", param=where)
    return {"items": kept}


def expand(items: Sequence[Any], *, key: bytes, namespace: str) -> Expansion | None:
    """``items`` from the newest of summarizer's compaction items on, that item replaced by the
    items it stands for; None when there is none. ``BadCompactionItem`` (``param``:
    ``input[i].encrypted_content``) for one that does not verify for ``namespace``. Only the
    newest item is read: everything before it is superseded."""
    newest = next((i for i in range(len(items) - 1, -1, -1) if is_ours(items[i])), None)
    if newest is None:
        return None
    where = f"input[{newest}].encrypted_content"
    data = opened(items[newest], where, key=key, namespace=namespace)
    return Expansion([*data["items"], *items[newest + 1 :]])
