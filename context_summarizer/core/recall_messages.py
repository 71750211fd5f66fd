"""The recall tool on Anthropic's Messages API (``POST /v1/messages``), for the tool loop the
proxy and the library run: the tool offered in a request body, its ``tool_use`` calls found in
a message, the request continued with their ``tool_result`` blocks, a message with them taken
out (when the model also called the agent's tools), and a held exchange put back into a later
request. Pure: bodies in, bodies out.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .recall_codec import FunctionCodec, Held, RecallStream, ToolCall
from .recall_messages_stream import NO_ANSWER, MessagesStream
from .recall_tool import RecallTool


def may_offer(body: Mapping[str, Any]) -> bool:
    """Whether a request can take the tool: no ``tool_choice``, or ``{"type": "auto"}`` (with or
    without ``disable_parallel_tool_use``); "any", "tool" and "none" are the agent's choice."""
    choice = body.get("tool_choice")
    return choice is None or (isinstance(choice, Mapping) and choice.get("type") == "auto")


def offered(body: Mapping[str, Any], tool: RecallTool) -> dict[str, Any]:
    """``body`` with the recall tool after the agent's own tools (a new dict; the agent's tool
    objects, their ``cache_control`` included, are the same objects)."""
    definition = {
        "name": tool.name,
        "description": tool.description,
        "input_schema": copy.deepcopy(dict(tool.parameters)),
    }
    return {**body, "tools": [*(body.get("tools") or []), definition]}


def calls(message: Mapping[str, Any]) -> list[ToolCall]:
    """The ``tool_use`` blocks of a message, in order, as calls (their ``input`` objects)."""
    found = []
    for block in _content(message):
        if not _is_tool_use(block) or not isinstance(block.get("id"), str):
            continue
        arguments = block.get("input")
        found.append(
            ToolCall(
                block["id"],
                str(block.get("name", "")),
                arguments if isinstance(arguments, Mapping) else None,
            )
        )
    return found


def continued(
    body: Mapping[str, Any], message: Mapping[str, Any], results: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    """``body`` followed by the message's content as an assistant turn (its thinking blocks and
    their signatures as they came, which the API checks) and one user turn with a
    ``tool_result`` block per ``(call id, result text)``: the next request of the loop."""
    assistant = {"role": "assistant", "content": list(_content(message))}
    user = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": ident, "content": text}
            for ident, text in results
        ],
    }
    return {**body, "messages": [*body.get("messages", []), assistant, user]}


def without(message: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The message with the ``tool_use`` blocks of ``name`` taken out (the agent's own calls
    stay, in order; ``stop_reason`` "tool_use" becomes "end_turn" when none is left); the
    message itself when it has none. A message left with no block says so in one text block
    (``NO_ANSWER``): the API refuses an empty assistant message when the client sends it back."""
    content = _content(message)
    kept = [block for block in content if not (_is_tool_use(block) and block.get("name") == name)]
    if len(kept) == len(content):
        return dict(message)
    out = {**message, "content": kept or [{"type": "text", "text": NO_ANSWER}]}
    if message.get("stop_reason") == "tool_use" and not any(_is_tool_use(b) for b in kept):
        out["stop_reason"] = "end_turn"
    return out


def spliced(
    body: Mapping[str, Any], find: Callable[[tuple[str, ...]], Held | None]
) -> dict[str, Any] | None:
    """``body`` with each held recall exchange put back: the assistant message whose
    ``tool_use`` ids (in order) are a held key gets the recall ``tool_use`` blocks back among
    its own (where its first stood, in the answer's order; the agent's blocks are the client's
    own objects), and the user message after it one ``tool_result`` per held result before the
    client's own blocks (a user message of them alone when none follows: the API wants every
    result of a turn in the next user message). None when nothing changed; a turn that already
    holds the recall calls is left alone."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    out: list[Any] = []
    changed = False
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        held = _held_for(message, find)
        if held is None:
            out.append(message)
            continue
        out.append(_with_recall_uses(message, held))
        following = messages[index] if index < len(messages) else None
        if isinstance(following, Mapping) and following.get("role") == "user":
            out.append(_with_recall_results(following, held))
            index += 1
        else:
            out.append({"role": "user", "content": _results(held, set())})
        changed = True
    return {**body, "messages": out} if changed else None


def _held_for(message: Any, find: Callable[[tuple[str, ...]], Held | None]) -> Held | None:
    """The held exchange of an assistant message whose recall calls were taken out, if any."""
    if not isinstance(message, Mapping) or message.get("role") != "assistant":
        return None
    uses = [block for block in _content(message) if _is_tool_use(block)]
    if not uses or not all(isinstance(block.get("id"), str) for block in uses):
        return None
    ids = tuple(block["id"] for block in uses)
    held = find(ids)
    if held is None or any(ident in dict(held.results) for ident in ids):
        return None
    return held


def _with_recall_uses(message: Mapping[str, Any], held: Held) -> dict[str, Any]:
    """The assistant message with the recall ``tool_use`` blocks back: its ``tool_use`` blocks,
    where the first stood, all the answer's in order (the client's own block for each of the
    agent's; a recall block as a request takes it)."""
    content = _content(message)
    own = {block["id"]: block for block in content if _is_tool_use(block)}
    recalled = dict(held.results)
    merged = []
    for block in _content(held.answer):
        if not _is_tool_use(block):
            continue
        ident = block.get("id")
        if ident in own:
            merged.append(own[ident])
        elif ident in recalled:
            kept = {key: block[key] for key in ("type", "id", "name", "input") if key in block}
            merged.append(copy.deepcopy(kept))
    out: list[Any] = []
    for block in content:
        if not _is_tool_use(block):
            out.append(block)
        elif merged:
            out.extend(merged)
            merged = []
    return {**message, "content": out}


def _with_recall_results(message: Mapping[str, Any], held: Held) -> dict[str, Any]:
    """The user message after the turn with the held results before its own blocks (those
    of them it holds already are not added twice)."""
    content = message.get("content")
    if isinstance(content, str):
        blocks: list[Any] = [{"type": "text", "text": content}] if content else []
    else:
        blocks = _content(message)
    there = {
        block.get("tool_use_id")
        for block in blocks
        if isinstance(block, Mapping) and block.get("type") == "tool_result"
    }
    return {**message, "content": [*_results(held, there), *blocks]}


def _results(held: Held, there: set[Any]) -> list[dict[str, Any]]:
    """One ``tool_result`` block per held result not ``there``, in order."""
    return [
        {"type": "tool_result", "tool_use_id": ident, "content": text}
        for ident, text in held.results
        if ident not in there
    ]


def _content(message: Mapping[str, Any]) -> list[Any]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _is_tool_use(block: Any) -> bool:
    return isinstance(block, Mapping) and block.get("type") == "tool_use"


def _stream(after: RecallStream | None) -> RecallStream:
    """A streamed round's reader (``MessagesStream``), continuing ``after``."""
    return MessagesStream(after if isinstance(after, MessagesStream) else None)


MESSAGES = FunctionCodec(may_offer, offered, calls, continued, without, spliced, _stream)
"""The Messages API codec of the recall loop."""
