"""A streamed Gemini round of the recall loop (``GeminiStream``), and what the Gemini codec
(``recall_gemini``) and it both do to a candidate's parts: read them, take a function's calls
out of them, put them back into an answer or a chunk. Pure: events in, events out.

``streamGenerateContent?alt=sse`` sends ``data:`` events with no names, each a whole
``GenerateContentResponse`` carrying the next parts of the candidate (a function call always
whole, in one chunk), the usage so far and, on the last, the finish reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .sse_events import build_event, event_json, event_name

SIGNATURE = "thoughtSignature"
"""The part field carrying a thinking model's thought signature."""

SKIP_SIGNATURE = "skip_thought_signature_validator"
"""Google's documented stand-in signature for a function call that lost (or never had) the one
the model gave: when a recall call that carried the step's signature is taken out, the agent's
call that is now first gets this, since Gemini 3 refuses a step whose first call has none."""


EMPTY_TEXT = {"text": ""}
"""The part an answer left with none once recall is out gets: Gemini refuses a content without
parts when the client sends it back, and answers an empty reply so itself."""


def answer_parts(answer: Mapping[str, Any]) -> list[Any]:
    """The parts of an answer's (or a stream chunk's) first candidate ([] when it has none)."""
    candidates = answer.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        return []
    first = candidates[0]
    content = first.get("content") if isinstance(first, Mapping) else None
    parts = content.get("parts") if isinstance(content, Mapping) else None
    return parts if isinstance(parts, list) else []


def call_of(part: Any) -> Mapping[str, Any] | None:
    """A part's ``functionCall``, when it is a well-formed one."""
    call = part.get("functionCall") if isinstance(part, Mapping) else None
    return call if isinstance(call, Mapping) and isinstance(call.get("name"), str) else None


def kept_parts(parts: Sequence[Any], name: str, orphaned: bool = False) -> tuple[list[Any], bool]:
    """``parts`` without the calls of function ``name``; a kept call left first in its step
    without the signature a taken-out call carried gets ``SKIP_SIGNATURE``. ``orphaned`` (in and
    out): a signature was taken out and no kept call has followed yet (for a stream's chunks)."""
    kept = []
    for part in parts:
        call = call_of(part)
        if call is not None and call["name"] == name:
            orphaned = orphaned or SIGNATURE in part
            continue
        if call is not None:
            if orphaned and SIGNATURE not in part:
                part = {**part, SIGNATURE: SKIP_SIGNATURE}
            orphaned = False
        kept.append(part)
    return kept, orphaned


def with_parts(answer: Mapping[str, Any], parts: list[Any]) -> dict[str, Any]:
    """``answer`` (or a chunk) with its first candidate's parts replaced (a new dict; the rest
    shared)."""
    candidates = answer["candidates"]
    first = candidates[0]
    content = first.get("content")
    content = {**content, "parts": parts} if isinstance(content, Mapping) else {"parts": parts}
    return {**answer, "candidates": [{**first, "content": content}, *candidates[1:]]}


def _plain(part: Any) -> bool:
    """Whether a part is bare text (or bare thought text), which may join its neighbour."""
    if not isinstance(part, Mapping) or not isinstance(part.get("text"), str):
        return False
    return set(part) == {"text"} or (set(part) == {"text", "thought"} and part["thought"] is True)


class GeminiStream:
    """One streamed round on Gemini (``RecallStream``). Every chunk is a whole
    ``GenerateContentResponse`` whose calls arrive whole, so a round is relayed chunk by chunk
    until the first chunk with a ``functionCall`` part and held from there; a round that
    continues an earlier one is relayed unchanged too, as Gemini's chunks carry no start
    event and no indexes."""

    def __init__(self, after: GeminiStream | None = None) -> None:
        self._chunks: list[dict[str, Any]] = []
        self._held: list[tuple[bytes, dict[str, Any] | None]] = []
        self._holding = False
        self._shown: bool = after is not None and after._shown
        """Whether the client was sent a part (this round's or an earlier one's)."""

    def feed(self, event: bytes) -> list[bytes]:
        """``event`` itself while no call has come; nothing from the first call on (held)."""
        chunk = event_json(event)
        if chunk is not None:
            self._chunks.append(chunk)
            if any(call_of(part) is not None for part in answer_parts(chunk)):
                self._holding = True
        if self._holding:
            self._held.append((event, chunk))
            return []
        self._shown = self._shown or bool(chunk and answer_parts(chunk))
        return [event]

    def answer(self) -> dict[str, Any]:
        """The round's chunks as one ``generateContent`` answer: the parts in order (adjacent
        bare text joined), the last of every other field (``finishReason``,
        ``usageMetadata``, ...)."""
        parts: list[Any] = []
        candidate: dict[str, Any] = {}
        top: dict[str, Any] = {}
        for chunk in self._chunks:
            top.update((key, value) for key, value in chunk.items() if key != "candidates")
            candidates = chunk.get("candidates")
            if isinstance(candidates, list) and candidates and isinstance(candidates[0], Mapping):
                first = candidates[0]
                candidate.update((key, value) for key, value in first.items() if key != "content")
            for part in answer_parts(chunk):
                if parts and _plain(part) and _plain(parts[-1]) and set(part) == set(parts[-1]):
                    parts[-1] = {**parts[-1], "text": parts[-1]["text"] + part["text"]}
                else:
                    parts.append(part)
        content = {"role": "model", "parts": parts}
        return {"candidates": [{"content": content, **candidate}], **top}

    def release(self, name: str | None) -> list[bytes]:
        """The held events; with ``name``, its calls taken out of them (a chunk left with no
        parts, no ``finishReason`` and no ``usageMetadata`` dropped)."""
        if name is None:
            return [event for event, _ in self._held]
        out = []
        orphaned = False
        for event, chunk in self._held:
            if chunk is None:
                out.append(event)
                continue
            parts = answer_parts(chunk)
            kept, orphaned = kept_parts(parts, name, orphaned)
            if len(kept) == len(parts) and all(a is b for a, b in zip(kept, parts, strict=True)):
                out.append(event)  # untouched: the same bytes
                continue
            first = chunk["candidates"][0]
            if not kept and "finishReason" not in first and "usageMetadata" not in chunk:
                continue
            if not kept and not self._shown and "finishReason" in first:
                kept = [EMPTY_TEXT]  # the stream's last chunk, and the client has no part
            self._shown = self._shown or bool(kept)
            out.append(build_event(with_parts(chunk, kept), event_name(event)))
        return out
