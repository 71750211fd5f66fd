"""The test upstream's ``POST /v1/embeddings``: deterministic unit vectors, OpenAI's shape.

Each input gets a vector derived from its text alone (the same text, the same vector), as
floats or base64, with the input's o200k_base tokens (or its length, for token arrays) as usage.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from typing import Any

from .faults import error_body
from .injection import answer_fault
from .transport import _Exchange

EMBEDDING_DIMENSIONS = 64


def embeddings(handler: _Exchange, raw: bytes) -> None:
    """Answer an embeddings request (``raw``: its body), or the fault injected for it."""
    ok, body = handler._parse_json(raw)
    if not ok:
        return
    fault = handler.upstream._take_fault(None)
    if fault is not None and answer_fault(handler, fault, body):
        return
    if not isinstance(body, dict) or "input" not in body:
        handler._fail(400, body, error_body("'input' is a required property", param="input"))
        return
    inputs = body["input"]
    if isinstance(inputs, str) or (
        isinstance(inputs, list) and inputs and isinstance(inputs[0], int)
    ):
        inputs = [inputs]
    if not isinstance(inputs, list) or not inputs:
        handler._fail(400, body, error_body("'input' must not be empty", param="input"))
        return
    dimensions = body.get("dimensions")
    size = dimensions if isinstance(dimensions, int) and dimensions > 0 else None
    size = size or EMBEDDING_DIMENSIONS
    counter = handler.upstream.counter
    data: list[dict[str, Any]] = []
    tokens = 0
    for index, item in enumerate(inputs):
        if isinstance(item, list):
            text = " ".join(str(t) for t in item)
            tokens += len(item)
        else:
            text = str(item)
            tokens += counter.text(text)
        vector = _fake_embedding(text, size)
        encoded: Any = vector
        if body.get("encoding_format") == "base64":
            encoded = base64.b64encode(struct.pack(f"<{size}f", *vector)).decode("ascii")
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    payload = {
        "object": "list",
        "data": data,
        "model": body.get("model", handler.upstream.model_name),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    handler._record(body, 200, prompt_tokens=tokens, fault=fault.kind if fault else None)
    if fault is not None and fault.kind == "reset":
        handler._send_half(payload)
    handler._send_json(200, payload)


def _fake_embedding(text: str, size: int) -> list[float]:
    """A deterministic unit vector derived from ``text``."""
    values: list[float] = []
    block = 0
    while len(values) < size:
        digest = hashlib.sha256(f"{block}:{text}".encode()).digest()
        for offset in range(0, len(digest), 4):
            (number,) = struct.unpack_from("<I", digest, offset)
            values.append(number / 2**31 - 1.0)
        block += 1
    values = values[:size]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]
