"""The demo's proxy: ``summarizer serve``'s app on a free local port in front of the test
upstream, its checkpoints in a temporary folder, for as long as the session runs; and its
sessions endpoint, read through a client."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import openai

from ..core.results import CompactionEvent
from ..testing import TestUpstream

if TYPE_CHECKING:
    from ..proxy.server import ProxyServer


@contextmanager
def demo_proxy(
    upstream: TestUpstream,
    context_window: int,
    record: Callable[[CompactionEvent], None],
    config: dict[str, Any],
) -> Iterator[ProxyServer]:
    """The running proxy (``config``: more ``Settings`` fields, ``db`` included: by default a
    temporary folder's); ``record`` hears each compaction."""
    from ..proxy.server import ProxyServer
    from ..proxy.settings import Settings

    with tempfile.TemporaryDirectory(prefix="summarizer-demo-") as folder:
        values: dict[str, Any] = {"db": Path(folder) / "checkpoints.db", **config}
        settings = Settings(
            upstream=upstream.base_url, port=0, context_window=context_window, **values
        )
        with ProxyServer(settings, on_compaction=record) as proxy:
            yield proxy


def session_lookup(client: openai.OpenAI) -> Callable[[str], Any]:
    """``GET /v1/summarizer/sessions/{id}`` through ``client`` (None when not found)."""

    def lookup(session: str) -> dict[str, Any] | None:
        found = client.get(f"/summarizer/sessions/{session}", cast_to=object)
        return found if isinstance(found, dict) else None

    return lookup
