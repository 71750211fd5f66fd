"""Keys out of what is kept: ``redact`` replaces known secrets and credential-shaped strings by
``[REDACTED]`` in JSON-like values; ``redact_checkpoint`` does so to everything a compaction
wrote (summaries, ledgers, failures, the messages inserted or cut), before it is used or stored.

The rule: what the proxy writes (a checkpoint, an activity record, a recording) never holds a
key. A checkpoint is redacted before the request that made it is rewritten from it, so that
request and every later one rewritten from the stored checkpoint carry the same bytes, with
``[REDACTED]`` where a key was: keys never travel in summaries either. The client's own messages
that go upstream as they are (outside every summary, uncut) are never changed.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Any

from .checkpoints import Checkpoint, Slot
from .codecs import OPAQUE_KEY

__all__ = ["OPAQUE_FIELDS", "REDACTED", "redact", "redact_checkpoint", "redact_slot"]

# Shapes of common credentials: provider keys, bearer tokens, AWS access keys, private keys.
_SECRET_SHAPES = re.compile(
    r"(?:sk|pk|rk)-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_\-]{16,}"
    r"|\bBearer\s+[A-Za-z0-9._~+/\-]{16,}=*"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}\b"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"
)
REDACTED = "[REDACTED]"
"""What a secret is replaced by."""
MIN_SECRET_LENGTH = 8
"""Known secrets shorter than this are not searched for (they would match ordinary text)."""
OPAQUE_FIELDS = frozenset(
    {
        "signature",
        "encrypted_content",
        "data",
        "image_url",
        "url",
        "file_data",
        "id",
        "call_id",
        "tool_call_id",
        "tool_use_id",
        OPAQUE_KEY,
    }
)
"""Message fields a checkpoint's messages carry byte for byte (a provider's own objects such as
signed thinking blocks, signatures, encrypted or encoded content, ids): never rewritten, since a
changed one breaks the request it goes in."""


def redact(value: Any, secrets: Sequence[str] = (), *, skip: Collection[str] = ()) -> Any:
    """``value`` (JSON-like) with every string's ``secrets`` and credential-shaped substrings
    replaced by ``[REDACTED]``; other values, and the values of object fields named in
    ``skip``, are returned as they are."""
    known = sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True)

    def clean(text: str) -> str:
        for secret in known:
            text = text.replace(secret, REDACTED)
        return _SECRET_SHAPES.sub(REDACTED, text)

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return clean(item)
        if isinstance(item, dict):
            return {key: inner if key in skip else walk(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [walk(inner) for inner in item]
        return item

    return walk(value)


def redact_checkpoint(checkpoint: Checkpoint, secrets: Sequence[str] = ()) -> Checkpoint:
    """``checkpoint`` with ``secrets`` and credential-shaped strings redacted from everything it
    wrote: each summary, ledger, failure and inserted message, and the cut or masked messages
    (``overrides``); the same object when there was nothing to redact. Fields in
    ``OPAQUE_FIELDS`` are kept as they are."""
    slots = [redact_slot(slot, secrets) for slot in checkpoint.slots]
    update: dict[str, Any] = {}
    if any(new is not old for new, old in zip(slots, checkpoint.slots, strict=True)):
        update["slots"] = slots
    overrides = {
        index: redact(message, secrets, skip=OPAQUE_FIELDS)
        for index, message in checkpoint.overrides.items()
    }
    if overrides != checkpoint.overrides:
        update["overrides"] = overrides
    update.update(_redacted_texts(checkpoint, secrets))
    return checkpoint.model_copy(update=update) if update else checkpoint


def redact_slot(slot: Slot, secrets: Sequence[str] = ()) -> Slot:
    """``slot`` with ``secrets`` and credential-shaped strings redacted from its summary,
    ledger, failure and message (``OPAQUE_FIELDS`` kept); the same object when there was
    nothing to redact."""
    update: dict[str, Any] = {}
    message = redact(slot.message, secrets, skip=OPAQUE_FIELDS)
    if message != slot.message:
        update["message"] = message
    update.update(_redacted_texts(slot, secrets))
    return slot.model_copy(update=update) if update else slot


def _redacted_texts(holder: Checkpoint | Slot, secrets: Sequence[str]) -> dict[str, Any]:
    """The ``summary``, ``ledger`` and ``failure`` of ``holder`` that redaction changes."""
    update: dict[str, Any] = {}
    for name in ("summary", "ledger", "failure"):
        value = getattr(holder, name)
        cleaned = redact(value, secrets)
        if cleaned != value:
            update[name] = cleaned
    return update
