"""The Responses API's compaction contract, for any model: summarizer's compaction items. Pure.

OpenAI's server-side compaction (``context_management: [{"type": "compaction",
"compact_threshold": N}]`` and ``POST /v1/responses/compact``) answers with a ``compaction`` item
whose ``encrypted_content`` only OpenAI can read; a client passes it back in a later ``input``, and
everything before the newest one is superseded. summarizer keeps that contract for any upstream,
with an item anyone can read:

- ``id``: ``cmp_summarizer_<checkpoint id>``; ``created_by``: ``"summarizer"``;
- ``encrypted_content``: ``summarizer.compaction.v1:`` then JSON ``{"summary": <the summary the
  model will read, ledger included>, "items": [<the compacted input: the summary as a user
  message, then the kept items verbatim>]}``.

``expand`` turns an ``input`` holding such items into what the upstream reads: from the newest of
them on, with it replaced by the items it stands for. A compaction item summarizer did not write
(OpenAI's own) is left alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidConversation

PREFIX = "summarizer.compaction.v1:"
"""How ``encrypted_content`` of summarizer's compaction items begins."""
CREATED_BY = "summarizer"


def compaction_item(summary: str, kept: Sequence[Any], checkpoint_id: str | None) -> dict[str, Any]:
    """The compaction item standing for a compacted input: the ``kept`` input items (the summary
    message among them, first), and ``summary``, its text, for whoever reads the item."""
    content = json.dumps({"summary": summary, "items": list(kept)}, ensure_ascii=False)
    return {
        "id": f"cmp_summarizer_{checkpoint_id or 'unsaved'}",
        "type": "compaction",
        "encrypted_content": PREFIX + content,
        "created_by": CREATED_BY,
    }


def is_ours(item: Any) -> bool:
    """Whether ``item`` is a compaction item summarizer wrote."""
    return (
        isinstance(item, Mapping)
        and item.get("type") == "compaction"
        and isinstance(item.get("encrypted_content"), str)
        and item["encrypted_content"].startswith(PREFIX)
    )


def contents(item: Mapping[str, Any]) -> list[Any] | None:
    """The input items one of summarizer's compaction items stands for (None: unreadable)."""
    try:
        data = json.loads(item["encrypted_content"][len(PREFIX) :])
    except ValueError:
        return None
    kept = data.get("items") if isinstance(data, dict) else None
    if not isinstance(kept, list) or not all(isinstance(k, dict) for k in kept):
        return None
    return kept


def expand(items: Sequence[Any]) -> list[Any] | None:
    """``items`` from the newest of summarizer's compaction items on, that item replaced by the
    items it stands for; None when there is none. ``InvalidConversation`` for one that was
    altered past reading (``param``: ``input[i].encrypted_content``)."""
    newest = next((i for i in range(len(items) - 1, -1, -1) if is_ours(items[i])), None)
    if newest is None:
        return None
    kept = contents(items[newest])
    if kept is None:
        where = f"input[{newest}].encrypted_content"
        raise InvalidConversation(
            f"'{where}' is a summarizer compaction item that cannot be read", param=where
        )
    return [*kept, *items[newest + 1 :]]
