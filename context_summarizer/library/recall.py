"""The recall tool loop of ``wrap``'s ``chat.completions.create`` (``core.recall_loop``
decides; this module calls the SDK).

Once a call's conversation has a compaction, the model is offered the recall tool: recall
calls alone are answered from the raw history the call passed and the model asked again; the
caller gets the last answer (a ``ChatCompletion``, or the chunks of one stream), the recall
calls never in it. Recall beside the caller's own tools: the caller gets its calls, and the
results are held (``HeldRecalls``) and put back into that turn when the caller sends it again.
Only the first round's usage calibrates (it is the request the engine counted). Parsed calls
only: ``with_raw_response`` and ``with_streaming_response`` give the caller the wire, so the tool
is not offered there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from ..core.located import Located
from ..core.recall_chat import CHAT
from ..core.recall_codec import RecallStream as RoundStream
from ..core.recall_loop import RecallLoop, Step, loop_for
from ..core.recall_tool import declared_tool_names, recall_tool
from ..core.results import PrepareResult
from ..core.sse_events import build_event, event_json
from .manager import ContextManager
from .recall_held import HeldRecalls

NAMESPACE = ""
"""What a ``wrap``ped client holds results under: one client, one tenant."""


class WrapRecall:
    """A wrapped client's recall: its tool's name per call, its held results, its loops."""

    def __init__(self, manager: ContextManager) -> None:
        self.manager = manager
        self.held = HeldRecalls()

    def name(self, kwargs: dict[str, Any]) -> str | None:
        """The tool's name for a call (None: ``recall`` is off, or the call's tool choice or
        ``n`` leaves it no room)."""
        if not self.manager.config.recall or not CHAT.may_offer(kwargs):
            return None
        tool = recall_tool(self.manager.engine.prompts, declared_tool_names(kwargs.get("tools")))
        return tool.name if tool is not None else None

    def spliced(self, messages: Any, kwargs: dict[str, Any]) -> Any:
        """``messages`` with the recall exchanges held for their turns put back."""
        find = self.held.finder(NAMESPACE)
        if find is None or not isinstance(messages, list):
            return messages
        body = CHAT.spliced({**kwargs, "messages": messages}, find)
        return messages if body is None else body["messages"]

    def loop(self, located: Located, result: PrepareResult) -> RecallLoop | None:
        """The loop of a compacted call (None: the tool is not offered)."""
        return loop_for(CHAT, located, result, self.manager.engine.prompts)

    def ended(self, step: Step) -> None:
        """Hold what the last step holds."""
        if step.held is not None:
            self.held.put(NAMESPACE, step.held)


def _settled(recall: WrapRecall, loop: RecallLoop, response: Any) -> tuple[Any, Any]:
    """After a round's completion: the caller's completion (None while the model is asked
    again, the recall calls taken out when any are left), and the body to ask again with."""
    answer = response.model_dump()
    step = loop.step(answer)
    if step.again is not None:
        return None, step.again
    recall.ended(step)
    final = response if step.answer is answer else type(response).model_validate(step.answer)
    return final, None


def answered(
    recall: WrapRecall, loop: RecallLoop, response: Any, send: Callable[..., Any]
) -> tuple[Any, Any]:
    """The caller's completion after the rounds, and the first round's usage."""
    usage = getattr(response, "usage", None)
    final, again = _settled(recall, loop, response)
    while again is not None:
        final, again = _settled(recall, loop, send(**again))
    return final, usage


async def aanswered(
    recall: WrapRecall, loop: RecallLoop, response: Any, send: Callable[..., Awaitable[Any]]
) -> tuple[Any, Any]:
    """The async twin of ``answered``."""
    usage = getattr(response, "usage", None)
    final, again = _settled(recall, loop, response)
    while again is not None:
        final, again = _settled(recall, loop, await send(**again))
    return final, usage


class _Chunks:
    """What both stream classes hold: the loop, the SDK stream of the round under way, how to
    ask again, and where the first round's usage goes."""

    def __init__(
        self,
        recall: WrapRecall,
        loop: RecallLoop,
        inner: Any,
        send: Callable[..., Any],
        on_usage: Callable[[Any], Any],
        show_usage: bool,
    ) -> None:
        self._recall = recall
        self._loop = loop
        self._inner = inner
        self._send = send
        self._on_usage = on_usage
        self._show_usage = show_usage

    def _fed(self, stream: RoundStream, chunk: Any, kind: Any) -> list[Any]:
        """The chunks to give the caller for one SDK chunk of the round under way."""
        events = stream.feed(build_event(chunk.model_dump(exclude_unset=True)))
        return [shown for out in events if (shown := self._shown(kind, out)) is not None]

    def _ended(self, stream: RoundStream, kind: Any) -> tuple[list[Any], dict[str, Any] | None]:
        """At a round's end: the chunks to give the caller, and the body to ask again with
        (None: the stream is over, its held chunks released, recall calls taken out)."""
        answer = stream.answer()
        step = self._loop.step(answer)
        if step.again is not None:
            return [], step.again
        self._recall.ended(step)
        name = self._loop.tool.name if step.answer is not answer else None
        released = stream.release(name)
        return [shown for out in released if (shown := self._shown(kind, out)) is not None], None

    def _shown(self, kind: Any, event: bytes) -> Any:
        """The chunk an event is, as the SDK types it; None for a usage chunk the caller did
        not ask for."""
        data = event_json(event)
        if data is None or kind is None:
            return None
        if data.get("usage") is not None and not data.get("choices") and not self._show_usage:
            return None
        return kind.model_validate(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class RecallStream(_Chunks):
    """The chunks of a streamed call through the loop: each round's relayed until its first
    tool call delta, the last round's held ones at its end (recall calls taken out)."""

    def __iter__(self) -> Iterator[Any]:
        stream = self._loop.codec.stream(None)
        first = True
        while True:
            kind = None
            for chunk in self._inner:
                kind = type(chunk)
                if first and getattr(chunk, "usage", None) is not None:
                    self._on_usage(chunk.usage)
                yield from self._fed(stream, chunk, kind)
            first = False
            last, again = self._ended(stream, kind)
            yield from last
            if again is None:
                return
            self._inner.close()
            self._inner = self._send(**again)
            stream = self._loop.codec.stream(stream)

    def __enter__(self) -> RecallStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the underlying HTTP response."""
        self._inner.close()


class AsyncRecallStream(_Chunks):
    """The async twin of ``RecallStream``."""

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[Any]:
        stream = self._loop.codec.stream(None)
        first = True
        while True:
            kind = None
            async for chunk in self._inner:
                kind = type(chunk)
                if first and getattr(chunk, "usage", None) is not None:
                    await self._on_usage(chunk.usage)
                for shown in self._fed(stream, chunk, kind):
                    yield shown
            first = False
            last, again = self._ended(stream, kind)
            for shown in last:
                yield shown
            if again is None:
                return
            await self._inner.close()
            self._inner = await self._send(**again)
            stream = self._loop.codec.stream(stream)

    async def __aenter__(self) -> AsyncRecallStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the underlying HTTP response."""
        await self._inner.close()
