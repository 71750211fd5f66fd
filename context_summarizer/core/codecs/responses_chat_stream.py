"""A streamed chat completion as the Responses API's stream events. Pure.

``ChatStreamTranslator`` takes the completion's chunks in order and gives the events a Responses
client reads: ``response.created`` and ``response.in_progress`` first; for text,
``response.output_item.added``, ``response.content_part.added``, ``response.output_text.delta``
per piece, then the ``.done`` events; for each tool call, ``response.output_item.added`` and
``response.function_call_arguments.delta`` per piece, then ``.done``; and at the end
``response.completed`` (``response.incomplete`` when the reply was cut at its cap) with the whole
response and its usage. Every event has its ``sequence_number``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .responses_chat import call_item, message_item, response_object


class ChatStreamTranslator:
    """One streamed answer's translation (feed it every chunk, then ``finish``)."""

    def __init__(self, body: Mapping[str, Any], response_id: str) -> None:
        self.body = body
        self.response_id = response_id
        self.sequence = 0
        self.started = False
        self.output: list[dict[str, Any]] = []
        self.text: str | None = None  # the open message's text so far
        self.text_index = -1
        self.calls: dict[int, tuple[int, dict[str, Any]]] = {}  # chat index -> output index
        self.usage: Mapping[str, Any] | None = None
        self.finish_reason: str | None = None

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def _start(self) -> list[dict[str, Any]]:
        if self.started:
            return []
        self.started = True
        response = response_object(self.body, self.response_id, [], None, None, in_progress=True)
        return [
            self._event("response.created", response=response),
            self._event("response.in_progress", response=response),
        ]

    def feed(self, chunk: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The events one chunk makes."""
        events = self._start()
        if isinstance(chunk.get("usage"), Mapping):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, Mapping):
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                events.extend(self._text(content))
            for call in delta.get("tool_calls") or ():
                if isinstance(call, Mapping):
                    events.extend(self._call(call))
            if isinstance(choice.get("finish_reason"), str):
                self.finish_reason = choice["finish_reason"]
        return events

    def _text(self, piece: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        item_id = f"msg_{self.response_id[5:]}"
        if self.text is None:
            self.text = ""
            self.text_index = len(self.output)
            self.output.append(message_item(item_id, "", done=False))
            added = self.output[-1]
            events.append(
                self._event("response.output_item.added", output_index=self.text_index, item=added)
            )
            events.append(
                self._event(
                    "response.content_part.added",
                    item_id=item_id,
                    output_index=self.text_index,
                    content_index=0,
                    part={"type": "output_text", "text": "", "annotations": []},
                )
            )
        self.text += piece
        events.append(
            self._event(
                "response.output_text.delta",
                item_id=item_id,
                output_index=self.text_index,
                content_index=0,
                delta=piece,
                logprobs=[],
            )
        )
        return events

    def _call(self, call: Mapping[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        number = call.get("index", 0)
        if number not in self.calls:
            index = len(self.output)
            item = call_item(f"fc_{self.response_id[5:]}_{number}", call, done=False)
            self.calls[number] = (index, item)
            self.output.append(item)
            events.append(self._event("response.output_item.added", output_index=index, item=item))
        index, item = self.calls[number]
        function = call.get("function") or {}
        if isinstance(function.get("name"), str) and not item["name"]:
            item["name"] = function["name"]
        if isinstance(call.get("id"), str) and not item["call_id"]:
            item["call_id"] = call["id"]
        piece = function.get("arguments")
        if isinstance(piece, str) and piece:
            item["arguments"] += piece
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=index,
                    delta=piece,
                )
            )
        return events

    def finish(self) -> list[dict[str, Any]]:
        """The closing events: every open item done, then the whole response."""
        events = self._start()
        if self.text is not None:
            item_id = f"msg_{self.response_id[5:]}"
            part = {"type": "output_text", "text": self.text, "annotations": []}
            done = message_item(item_id, self.text)
            self.output[self.text_index] = done
            events.append(
                self._event(
                    "response.output_text.done",
                    item_id=item_id,
                    output_index=self.text_index,
                    content_index=0,
                    text=self.text,
                    logprobs=[],
                )
            )
            events.append(
                self._event(
                    "response.content_part.done",
                    item_id=item_id,
                    output_index=self.text_index,
                    content_index=0,
                    part=part,
                )
            )
            events.append(
                self._event("response.output_item.done", output_index=self.text_index, item=done)
            )
        for index, item in self.calls.values():
            item["status"] = "completed"
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
            events.append(self._event("response.output_item.done", output_index=index, item=item))
        response = response_object(
            self.body, self.response_id, self.output, self.usage, self.finish_reason
        )
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        events.append(self._event(kind, response=response))
        return events
