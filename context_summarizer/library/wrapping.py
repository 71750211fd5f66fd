"""``wrap(client)``: an ``openai`` client whose chat completions manage their own context.

Only ``chat.completions.create`` changes: its ``messages`` go through ``ContextManager.prepare``
first, and the response's ``usage`` calibrates later estimates. Every other attribute, method
and resource is the wrapped client's own: the wrapper is an instance of a subclass of the
client's class, so ``isinstance`` checks hold and ``with_options``/``copy`` stay wrapped. When
the provider still answers ``context_length_exceeded``, the call is compacted with a tighter
target and retried once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cached_property
from typing import Any, Literal, cast

import openai

from ..core.effects import Turn
from ..core.located import Located
from ..core.recall_loop import RecallLoop
from ..core.results import PrepareResult, Trigger
from .manager import ContextManager
from .overflow import aretry_on_overflow, retry_on_overflow
from .recall import AsyncRecallStream, RecallStream, WrapRecall, aanswered, answered
from .upstream import says_context_length_exceeded
from .usage_streams import AsyncUsageStream, UsageStream

SESSION_KWARG = "summarizer_session"
"""Optional keyword of ``create`` naming the session explicitly (removed before the call)."""


def is_context_length_error(exc: BaseException) -> bool:
    """Whether an upstream error says the prompt is over the model's window."""
    if not isinstance(exc, openai.APIStatusError):
        return False
    body = exc.body if exc.body is not None else {"message": exc.message}
    return says_context_length_exceeded(exc.status_code, body)


def _stream_options(kwargs: dict[str, Any]) -> bool:
    """Ask for usage on streams (to calibrate); return whether the caller asked for it."""
    if not kwargs.get("stream"):
        return True
    options = dict(kwargs.get("stream_options") or {})
    wanted = bool(options.get("include_usage"))
    options["include_usage"] = True
    kwargs["stream_options"] = options
    return wanted


class _Delegate:
    """Forwards every attribute it does not define to ``_inner``."""

    _inner: Any

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Call:
    """One ``create`` call: the raw history split from the arguments passed through."""

    def __init__(
        self, kwargs: dict[str, Any], *, parsed: bool = True, recall: WrapRecall | None = None
    ) -> None:
        self.session = kwargs.pop(SESSION_KWARG, None)
        self.raw = kwargs.pop("messages")
        self.model: str = kwargs["model"]
        # A raw response's stream is the caller's to read: its options are left as given.
        self.show_usage = _stream_options(kwargs) if parsed else True
        self.kwargs = kwargs
        # The raw and streaming-response forms give the caller the wire: no recall loop there.
        self.recall = recall if parsed else None
        self.recall_name = self.recall.name(kwargs) if self.recall is not None else None
        if self.recall is not None:
            self.raw = self.recall.spliced(self.raw, kwargs)
        self.loop: RecallLoop | None = None
        """The recall loop of what was last sent (None: the tool was not offered)."""

    def turn(self) -> Turn:
        """The call as the engine sees it."""
        return Turn(
            self.raw,
            self.model,
            tools=self.kwargs.get("tools"),
            session=self.session,
            request=self.kwargs,
            recall=self.recall_name,
        )

    def body(self, located: Located, result: PrepareResult) -> dict[str, Any]:
        """The keyword arguments to send for ``result``: the recall tool offered when the
        conversation stands on a compaction (``loop`` then set)."""
        body = {**self.kwargs, "messages": result.messages}
        self.loop = self.recall.loop(located, result) if self.recall is not None else None
        return self.loop.first(body) if self.loop is not None else body

    def finish(
        self,
        manager: ContextManager,
        result: PrepareResult,
        response: Any,
        send: Callable[..., Any],
    ) -> Any:
        """Feed the usage back (now, or as the stream ends) and return what the caller gets
        (through the recall loop when the tool was offered; ``send`` asks again)."""

        def observe(usage: Any) -> None:
            manager.observe(result, usage, model=self.model)

        if self.loop is not None and self.recall is not None:
            if self.kwargs.get("stream"):
                return RecallStream(
                    self.recall, self.loop, response, send, observe, self.show_usage
                )
            response, usage = answered(self.recall, self.loop, response, send)
            if usage is not None:
                observe(usage)
            return response
        if self.kwargs.get("stream"):
            return UsageStream(response, observe, self.show_usage)
        if getattr(response, "usage", None) is not None:
            observe(response.usage)
        return response

    async def afinish(
        self,
        manager: ContextManager,
        result: PrepareResult,
        response: Any,
        send: Callable[..., Awaitable[Any]],
    ) -> Any:
        """The async twin of ``finish`` (the usage is stored off the event loop)."""

        async def observe(usage: Any) -> None:
            await manager.aobserve(result, usage, model=self.model)

        if self.loop is not None and self.recall is not None:
            if self.kwargs.get("stream"):
                return AsyncRecallStream(
                    self.recall, self.loop, response, send, observe, self.show_usage
                )
            response, usage = await aanswered(self.recall, self.loop, response, send)
            if usage is not None:
                await observe(usage)
            return response

        if self.kwargs.get("stream"):
            return AsyncUsageStream(response, observe, self.show_usage)
        if getattr(response, "usage", None) is not None:
            await observe(response.usage)
        return response


Mode = Literal["parsed", "raw", "streaming"]
"""``create`` itself, ``with_raw_response.create`` or ``with_streaming_response.create``."""


class _Completions(_Delegate):
    """``chat.completions`` with ``create`` (and its raw and streaming-response forms)
    context-managed."""

    def __init__(
        self,
        inner: Any,
        manager: ContextManager,
        mode: Mode = "parsed",
        recall: WrapRecall | None = None,
    ) -> None:
        self._inner = inner
        self._manager = manager
        self._mode = mode
        self._recall = recall
        sender = {
            "parsed": lambda: inner.create,
            "raw": lambda: inner.with_raw_response.create,
            "streaming": lambda: inner.with_streaming_response.create,
        }
        self._send = sender[mode]()

    @property
    def with_raw_response(self) -> Any:
        """``create`` returning the raw HTTP response, the context still managed."""
        return type(self)(self._inner, self._manager, "raw")

    @property
    def with_streaming_response(self) -> Any:
        """``create`` as a streamed raw response, the context still managed (no calibration,
        and no compact-and-retry: the status is only known once the caller enters it)."""
        return type(self)(self._inner, self._manager, "streaming")

    @staticmethod
    def _raw_usage(call: _Call, response: Any) -> Any:
        """The usage of a raw (not streamed) response, else None."""
        if call.kwargs.get("stream"):
            return None
        # The SDK caches what parse() returns (sync, also on an async client's raw response):
        # the caller's own parse() gets the same.
        return getattr(response.parse(), "usage", None)

    def create(self, **kwargs: Any) -> Any:
        """``chat.completions.create`` with the context managed."""
        call = _Call(kwargs, parsed=self._mode == "parsed", recall=self._recall)
        manager = self._manager
        located = manager.locate(call.turn())

        def attempt(force: Trigger | None) -> tuple[PrepareResult, Any]:
            result = manager.compact(located, force=force)
            return result, self._send(**call.body(located, result))

        result, response = retry_on_overflow(attempt, is_context_length_error)
        if self._mode == "parsed":
            return call.finish(manager, result, response, self._send)
        if self._mode == "raw" and (usage := self._raw_usage(call, response)) is not None:
            manager.observe(result, usage, model=call.model)
        return response


class _AsyncStreamingResponse:
    """``with_streaming_response`` of an async client: ``create`` returns an async context
    manager (as the SDK's does) that compacts when entered."""

    def __init__(self, inner: Any, manager: ContextManager) -> None:
        self._inner = inner
        self._manager = manager

    def create(self, **kwargs: Any) -> Any:
        """The streamed raw response, as an async context manager."""
        inner, manager = self._inner, self._manager

        class Entered:
            async def __aenter__(self) -> Any:
                call = _Call(kwargs, parsed=False)
                result = await manager.acompact(await manager.alocate(call.turn()))
                send = inner.with_streaming_response.create
                self.sdk = send(messages=result.messages, **call.kwargs)
                return await self.sdk.__aenter__()

            async def __aexit__(self, *exc_info: Any) -> Any:
                return await self.sdk.__aexit__(*exc_info)

        return Entered()


class _AsyncCompletions(_Completions):
    @property
    def with_streaming_response(self) -> Any:
        """``create`` as a streamed raw response (an async context manager), the context still
        managed (no calibration, and no compact-and-retry)."""
        return _AsyncStreamingResponse(self._inner, self._manager)

    async def create(self, **kwargs: Any) -> Any:
        """``chat.completions.create`` with the context managed (async)."""
        call = _Call(kwargs, parsed=self._mode == "parsed", recall=self._recall)
        manager = self._manager
        located = await manager.alocate(call.turn())

        async def attempt(force: Trigger | None) -> tuple[PrepareResult, Any]:
            result = await manager.acompact(located, force=force)
            return result, await self._send(**call.body(located, result))

        result, response = await aretry_on_overflow(attempt, is_context_length_error)
        if self._mode == "parsed":
            return await call.afinish(manager, result, response, self._send)
        if self._mode == "raw" and (usage := self._raw_usage(call, response)) is not None:
            await manager.aobserve(result, usage, model=call.model)
        return response


class _Chat(_Delegate):
    def __init__(self, inner: Any, completions: _Completions) -> None:
        self._inner = inner
        self.completions = completions


class _ContextManaged:
    """Mixed into a subclass of the client's own class: see ``wrap``.

    Only ``chat`` (its ``completions.create``), ``copy``/``with_options`` (which keep the
    wrapper and its ``ContextManager``) and ``context`` are this class's; the rest is the SDK's.
    """

    _summarizer_context: ContextManager
    _summarizer_recall: WrapRecall

    @property
    def context(self) -> ContextManager:
        """The ``ContextManager`` applied to each call (shared with every copy)."""
        return self._summarizer_context

    @cached_property
    def chat(self) -> _Chat:
        """The SDK's ``chat`` resource, with ``completions.create`` context-managed."""
        inner = cast(Any, super()).chat
        manager = self._summarizer_context
        completions_type = (
            _AsyncCompletions if isinstance(self, openai.AsyncOpenAI) else _Completions
        )
        recall = self._summarizer_recall
        return _Chat(inner, completions_type(inner.completions, manager, "parsed", recall))

    def copy(self, *args: Any, **kwargs: Any) -> Any:
        """The SDK's ``copy`` (same options, some overridden), still context-managed."""
        copied = cast(Any, super()).copy(*args, **kwargs)
        copied._summarizer_context = self._summarizer_context
        copied._summarizer_recall = self._summarizer_recall
        return copied

    with_options = copy


_WRAPPED_TYPES: dict[type, type] = {}


def _wrapped_type(client_type: type) -> type:
    """The subclass of ``client_type`` that ``wrap`` makes its instances of (one per type)."""
    wrapped = _WRAPPED_TYPES.get(client_type)
    if wrapped is None:
        wrapped = type(
            f"ContextManaged{client_type.__name__}",
            (_ContextManaged, client_type),
            {
                "__module__": __name__,
                "__doc__": f"An ``{client_type.__name__}`` whose chat completions are "
                "context-managed; see ``context_summarizer.wrap``.",
            },
        )
        _WRAPPED_TYPES[client_type] = wrapped
    return wrapped


def _cached_attributes(client_type: type) -> set[str]:
    """The names of ``client_type``'s cached properties (resources built on first use)."""
    return {
        name
        for klass in client_type.__mro__
        for name, value in vars(klass).items()
        if isinstance(value, cached_property)
    }


def wrap(client: openai.OpenAI | openai.AsyncOpenAI, **config: Any) -> Any:
    """Wrap an ``openai.OpenAI`` or ``openai.AsyncOpenAI`` client.

    ``config`` takes ``CompactionConfig`` fields plus ``store`` and ``on_compaction`` (see
    ``ContextManager``). Summary calls go through the same client, with its retries off and
    tenacity's on.

    The result is an instance of a subclass of the client's own class (``isinstance(wrapped,
    openai.OpenAI)`` holds) sharing the client's state: its options and connection pool. Its
    ``with_options(...)`` and ``copy(...)`` stay wrapped, with the same ``ContextManager``
    (``wrapped.context``). The client passed in is left as it was, unwrapped.
    """
    if not isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)):
        raise TypeError(
            f"wrap() takes an openai.OpenAI or openai.AsyncOpenAI, not {type(client)!r}"
        )
    if isinstance(client, _ContextManaged):
        raise TypeError("this client is already wrapped; its ContextManager is client.context")
    manager = ContextManager(client=client, **config)
    wrapped: Any = object.__new__(_wrapped_type(type(client)))
    # The client's state, minus the resources it already built (they are bound to the client,
    # and its ``chat`` is not context-managed): the wrapper builds its own on first use.
    built = _cached_attributes(type(client))
    vars(wrapped).update({k: v for k, v in vars(client).items() if k not in built})
    wrapped._summarizer_context = manager
    wrapped._summarizer_recall = WrapRecall(manager)
    return wrapped
