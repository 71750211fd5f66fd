"""What the proxy's in-process caches hold per session, measured in this process.

``cache_footprints`` sends sessions through a ``ContextManager`` configured as ``summarizer
serve`` is, under ``tracemalloc``, then empties each cache in turn: the traced memory it frees is
its footprint.
"""

from __future__ import annotations

import gc
import json
import tempfile
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from context_summarizer.core.caches import ChainCache
from context_summarizer.core.results import SummarizeCall, SummaryOutcome
from context_summarizer.core.tokens import TiktokenCounter
from context_summarizer.library.manager import ContextManager
from context_summarizer.loaders.tokenizers import load_encoding, make_counter
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import Reply, summary_responder

from .proxy_memory_sessions import MODEL, ConversationBuilder, request_body


@dataclass
class Footprint:
    """What one in-process cache held after the in-process sessions: entries, traced bytes."""

    entries: int
    bytes: int


def compact_summary(body: dict[str, Any]) -> Reply:
    """The scripted summary, written to fit its cap: the task section (the task message stays in
    place anyway) left out, and whole lines dropped from the end until it fits. This benchmark
    measures memory, so every session must compact with a summary the online check accepts."""
    text = summary_responder(body).content or ""
    sections = text.split("\n\n")
    if sections and sections[0].startswith("## Task and constraints"):
        sections = sections[1:]
    lines = "\n\n".join(sections).splitlines()
    cap = int(body.get("max_completion_tokens") or body.get("max_tokens") or 2_000)
    encoding = load_encoding("o200k_base")
    while len(lines) > 2 and len(encoding.encode_ordinary("\n".join(lines))) > cap * 0.9:
        lines.pop()
    return Reply(content="\n".join(lines))


def _summarize(call: SummarizeCall) -> SummaryOutcome:
    reply = compact_summary(dict(call.body))
    return SummaryOutcome(text=reply.content, finish_reason="stop")


def cache_footprints(
    builder: ConversationBuilder, *, sessions: int, window: int, summary_tokens: int
) -> dict[str, Footprint]:
    """Bytes per cache, measured in this process with the proxy's engine and configuration.

    ``sessions`` sessions go through a ``ContextManager`` configured as ``summarizer serve`` is
    (its ``Settings.compaction``, a SQLite store), each parsed from its request bytes
    as the proxy parses it, under ``tracemalloc``. Then each cache is emptied in turn and the
    traced memory it frees is its footprint: the chain cache first, then the token counts
    (which so count the message digests they share with it, as they do for every conversation
    the chain cache has evicted), then the latest-checkpoint memo.
    """
    settings = Settings(  # as the proxy runs in §4: no drafts ahead of time
        context_window=window, max_summary_tokens=summary_tokens, prepare_ratio=None
    )
    counter = make_counter(MODEL)
    if not isinstance(counter, TiktokenCounter):
        raise RuntimeError(f"{MODEL} is not counted with tiktoken here: {counter!r}")
    with tempfile.TemporaryDirectory() as folder:
        context = ContextManager(
            store=Path(folder) / "c.db", summarizer=_summarize, config=settings.compaction
        )
        engine = context.engine

        def send(index: int) -> None:
            body = json.loads(request_body(builder.build(index).messages))
            result = context.prepare(
                body["messages"], model=MODEL, tools=body["tools"], request=body
            )
            if not result.compacted:
                raise RuntimeError(f"session {index} did not compact in process")

        send(-3)  # warm-up: everything loaded before tracing starts
        engine._chains = ChainCache()
        engine._latest.clear()
        counter.clear_cache()
        gc.collect()
        tracemalloc.start()
        try:
            for index in range(sessions):
                send(-1_000 - index)
            gc.collect()
            found: dict[str, Footprint] = {}
            chains = engine._chains._entries  # private: the benchmark looks inside the caches
            clears = {
                "chains": (len(chains), chains.clear),
                "tokens": (counter.cache_info().size, counter.clear_cache),
                "latest": (len(engine._latest), engine._latest.clear),
            }
            for name, (entries, clear) in clears.items():
                before = tracemalloc.get_traced_memory()[0]
                clear()
                gc.collect()
                found[name] = Footprint(entries, before - tracemalloc.get_traced_memory()[0])
        finally:
            tracemalloc.stop()
            context.close()
    return found
