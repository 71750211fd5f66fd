"""What the model sees of a Responses API conversation: the prompt it is billed, and the chat
completion body its responder reads.

:func:`account_items` counts and caches the prompt item by item, on the server's own rendering
(:func:`rendered_item`), independent of summarizer's counting and of the chat translation:

- the rendered prompt is the ``instructions`` (as a system message), then every input item in
  order (the stored history of ``previous_response_id`` first); an item renders without its
  ``id`` and ``status``, a message's string content as one text part, so a client that drops
  ids or spells content either way still sees the same prompt;
- each item costs what its chat completion counterpart costs with
  :class:`~context_summarizer.testing.accounting.PromptTokenCounter`: a message as a message, a
  function call as an assistant tool call, a tool output as a tool message, a reasoning item as its
  summary's text (its ``encrypted_content`` is not counted: this server never reasons), a
  compaction item as the text it sealed, any other item as its JSON; then ``tools`` as their
  JSON and 3 tokens priming the reply;
- prefix caching follows :class:`~context_summarizer.testing.accounting.PrefixCache` over that
rendered
  prompt, seeded with the model and the (Responses API) tools.

:func:`chat_body` translates the request into a chat completion body ONLY to feed the existing
responders, so scripted agents and summary detection (``tool_choice == "none"``) work unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.messages import canonical_json, chain_step, message_digest
from .accounting import (
    REPLY_PRIMING_TOKENS,
    PrefixCache,
    PromptAccount,
    PromptTokenCounter,
    cached_tokens_for,
)
from .responses_input import item_type, unseal

__all__ = ["account_items", "chat_body", "rendered_item"]

_TEXT_PARTS = ("input_text", "output_text")


# --- the prompt as billed -----------------------------------------------------------------------


def rendered_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """An input item as the model sees it: no ``id`` or ``status``, content as parts."""
    kind = item_type(item)
    if kind == "message":
        role = item["role"]
        content = item["content"]
        if isinstance(content, str):
            part_type = "output_text" if role == "assistant" else "input_text"
            content = [{"type": part_type, "text": content}]
        else:
            content = [_rendered_part(part) for part in content]
        return {"type": "message", "role": role, "content": content}
    rendered = {k: v for k, v in item.items() if k not in ("id", "status")}
    rendered["type"] = kind
    return rendered


def _rendered_part(part: Mapping[str, Any]) -> dict[str, Any]:
    if part.get("type") in _TEXT_PARTS:
        return {"type": part["type"], "text": part["text"]}
    return dict(part)


def _billed_message(rendered: Mapping[str, Any]) -> dict[str, Any]:
    """The chat message a rendered item costs as much as."""
    kind = rendered["type"]
    if kind == "message":
        return {"role": rendered["role"], "content": rendered["content"]}
    if kind in ("function_call", "custom_tool_call"):
        arguments = rendered.get("arguments", rendered.get("input"))
        function = {"name": rendered["name"], "arguments": arguments}
        return {"role": "assistant", "tool_calls": [{"function": function}]}
    if kind in ("function_call_output", "custom_tool_call_output"):
        return {"role": "tool", "tool_call_id": rendered["call_id"], "content": rendered["output"]}
    if kind == "reasoning":
        return {"role": "assistant", "content": list(rendered["summary"])}
    if kind == "compaction":
        sealed = unseal(rendered["encrypted_content"], "compaction") or {}
        return {"role": "assistant", "content": str(sealed.get("summary", ""))}
    rest = {k: v for k, v in rendered.items() if k != "type"}
    return {"role": kind, "content": canonical_json(rest)}


def account_items(
    counter: PromptTokenCounter,
    cache: PrefixCache,
    body: Mapping[str, Any],
    items: Sequence[Mapping[str, Any]],
) -> PromptAccount:
    """The prompt tokens of a valid request ``body`` whose conversation is ``items``, and how
    many of them hit ``cache``."""
    tools = body.get("tools")
    rendered = [rendered_item(item) for item in items]
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        system = {"type": "message", "role": "system", "content": instructions}
        rendered.insert(0, rendered_item(system))
    chain: list[str] = []
    cumulative: list[int] = []
    running = counter.tools(tools)
    link = PrefixCache.seed(body["model"], tools)
    for item in rendered:
        digest = message_digest(item)
        link = chain_step(link, digest)
        # Keyed apart from chat messages' digests: the same digest is counted another way here.
        running += counter.message(_billed_message(item), f"responses:{digest}")
        chain.append(link)
        cumulative.append(running)
    prompt_tokens = running + REPLY_PRIMING_TOKENS
    cached_tokens = cached_tokens_for(cache.longest_prefix(chain), prompt_tokens)
    return PromptAccount(chain, cumulative, prompt_tokens, cached_tokens)


# --- the chat completion body the responder reads ----------------------------------------------


def chat_body(body: Mapping[str, Any], items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A chat completion body saying what ``body`` (its conversation: ``items``) says.

    ``instructions`` become a first system message; messages stay messages; function (and
    custom tool) calls become an assistant message's ``tool_calls``, consecutive calls in one
    message, joined to the assistant message just before them; tool outputs become ``tool``
    messages; reasoning, compaction and other items are left out. Function tools become chat
    function tools, ``tool_choice`` and ``max_output_tokens`` carry over.
    """
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    for item in items:
        kind = item_type(item)
        if kind == "message":
            messages.append(_chat_message(item))
        elif kind in ("function_call", "custom_tool_call"):
            call = _chat_call(item)
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            content = _chat_content(item["output"])
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": content})
    chat: dict[str, Any] = {"model": body["model"], "messages": messages}
    tools = [_chat_tool(tool) for tool in body.get("tools") or ()]
    if any(tool is not None for tool in tools):
        chat["tools"] = [tool for tool in tools if tool is not None]
    choice = _chat_tool_choice(body.get("tool_choice"))
    if choice is not None:
        chat["tool_choice"] = choice
    if isinstance(body.get("parallel_tool_calls"), bool):
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    if isinstance(body.get("max_output_tokens"), int):
        chat["max_completion_tokens"] = body["max_output_tokens"]
    return chat


def _chat_message(item: Mapping[str, Any]) -> dict[str, Any]:
    role = item["role"]
    content = item["content"]
    if role != "assistant":
        return {"role": role, "content": _chat_content(content)}
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts = [part["text"] for part in content if part.get("type") == "output_text"]
    refusals = [part["refusal"] for part in content if part.get("type") == "refusal"]
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if refusals:
        message["refusal"] = "".join(refusals)
    return message


def _chat_content(content: Any) -> Any:
    """Message or tool output content: a single text part as a string, else chat parts."""
    if isinstance(content, str):
        return content
    parts = [_chat_part(part) for part in content if isinstance(part, Mapping)]
    if len(parts) == 1 and parts[0]["type"] == "text":
        return parts[0]["text"]
    return parts


def _chat_part(part: Mapping[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind in _TEXT_PARTS:
        return {"type": "text", "text": part["text"]}
    if kind == "input_image":
        url = part.get("image_url") or part.get("file_id") or ""
        image: dict[str, Any] = {"url": url}
        if part.get("detail") is not None:
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        keys = ("file_id", "file_data", "filename")
        return {"type": "file", "file": {k: part[k] for k in keys if part.get(k) is not None}}
    return {"type": "text", "text": canonical_json(part)}


def _chat_call(item: Mapping[str, Any]) -> dict[str, Any]:
    if item_type(item) == "custom_tool_call":
        custom = {"name": item["name"], "input": item["input"]}
        return {"id": item["call_id"], "type": "custom", "custom": custom}
    function = {"name": item["name"], "arguments": item["arguments"]}
    return {"id": item["call_id"], "type": "function", "function": function}


def _chat_tool(tool: Any) -> dict[str, Any] | None:
    if not isinstance(tool, Mapping) or tool.get("type") not in ("function", "custom"):
        return None
    keys = ("name", "description", "parameters", "strict", "format")
    spec = {k: tool[k] for k in keys if tool.get(k) is not None}
    if tool["type"] == "custom":
        spec.pop("parameters", None)
        return {"type": "custom", "custom": spec}
    spec.pop("format", None)
    return {"type": "function", "function": spec}


def _chat_tool_choice(choice: Any) -> Any:
    if isinstance(choice, str):
        return choice
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice["name"]}}
    if isinstance(choice, Mapping) and choice.get("type") == "custom":
        return {"type": "custom", "custom": {"name": choice["name"]}}
    return None if choice is None else "auto"
