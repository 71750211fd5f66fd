"""The streams ``wrap`` hands back when no recall loop runs: the SDK's own, whose final usage
chunk calibrates the context manager and is hidden when the caller did not ask for it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any


class UsageStream:
    """A sync stream that feeds the final usage back and hides it when it was not asked for."""

    def __init__(self, inner: Any, on_usage: Any, show_usage: bool) -> None:
        self._inner = inner
        self._on_usage = on_usage
        self._show_usage = show_usage

    def __iter__(self) -> Iterator[Any]:
        for chunk in self._inner:
            if getattr(chunk, "usage", None) is not None:
                self._on_usage(chunk.usage)
                if not chunk.choices and not self._show_usage:
                    continue
            yield chunk

    def __enter__(self) -> UsageStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the underlying HTTP response."""
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class AsyncUsageStream:
    """The async twin of ``UsageStream``."""

    def __init__(self, inner: Any, on_usage: Any, show_usage: bool) -> None:
        self._inner = inner
        self._on_usage = on_usage
        self._show_usage = show_usage

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for chunk in self._inner:
            if getattr(chunk, "usage", None) is not None:
                await self._on_usage(chunk.usage)
                if not chunk.choices and not self._show_usage:
                    continue
            yield chunk

    async def __aenter__(self) -> AsyncUsageStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the underlying HTTP response."""
        await self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
