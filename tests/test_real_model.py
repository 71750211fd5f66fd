"""A real model in the loop: Qwen2.5-Coder-0.5B-Instruct behind llama.cpp writes every summary.

Deselected by default (``-m real_model`` runs them; ``.ci/run`` does, in its own stage): each
starts llama.cpp's server with the verified model (``context_summarizer.testing.real_model``, the
``real-model`` extra) at ``n_ctx`` 8,192 and drives a scripted tool-using session through
``summarizer serve`` (the in-process ``ProxyServer``) or ``wrap()``, with the window set to the
server's. What reaches the model goes through a recording relay, so the test sees it exactly:

- llama.cpp refuses nothing (every request answered 200);
- at least two compactions, and between them the agent's requests are append-only;
- after calibration, the estimate is within 5% of llama.cpp's own ``usage.prompt_tokens`` (its
  tokenizer is not tiktoken's);
- each summary request reuses the server's KV cache: llama.cpp reads only its last part, and its
  time to first token is a fraction of a cold control's (the same request after the cache was
  flushed, same run);
- every summary's verdict (accepted, repaired, replaced) is counted and printed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

import context_summarizer
from context_summarizer.core.results import CompactionEvent
from context_summarizer.library.upstream import is_retryable
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing.real_model import MODEL_ALIAS, LlamaServer, model_file
from context_summarizer.testing.scenario import CodingSession

from .real_model_support import (
    RecordingRelay,
    Relayed,
    agent_requests,
    drive_session,
    first_token,
)

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(1_800)]

N_CTX = 8_192
TURNS = 40
AGENT_MAX_TOKENS = 8
"""The agent's replies are not used (the script decides): a short cap keeps decoding cheap."""
SUMMARY_TOKENS = 512
ESTIMATE_TOLERANCE = 0.05
CALIBRATION_TURNS = 6
"""Responses the calibration learns from before the estimate must be within 5%: about 2,000
tokens into the session, long before its first compaction (at about 6,500)."""


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    with LlamaServer(model_file(), n_ctx=N_CTX) as server:
        yield server


def _session() -> CodingSession:
    return CodingSession(turns=TURNS, seed=11, lines_per_output=(8, 16))


def _assert_append_only_between_compactions(log: list[Relayed]) -> int:
    """Consecutive agent requests with no summary request between them extend each other;
    returns how many compactions (runs of summary requests) the log shows."""
    compactions = 0
    previous: list[dict[str, Any]] | None = None
    summarized = False
    for entry in log:
        if entry.summary:
            if not summarized:
                compactions += 1
            summarized = True
            continue
        messages = entry.body["messages"]
        if previous is not None and not summarized:
            assert messages[: len(previous)] == previous, "an agent request rewrote its history"
        previous, summarized = messages, False
    return compactions


def _assert_estimates_close(pairs: list[tuple[int, int]]) -> None:
    """``(estimate, reported)`` per agent request: within the tolerance once calibrated."""
    assert len(pairs) > CALIBRATION_TURNS
    off = [
        (index, estimate, reported)
        for index, (estimate, reported) in enumerate(pairs)
        if index >= CALIBRATION_TURNS and abs(estimate - reported) > ESTIMATE_TOLERANCE * reported
    ]
    assert not off, f"estimates more than 5% off llama.cpp's count: {off}"


def _assert_summaries_reuse_the_cache(
    llama: LlamaServer, relay: RecordingRelay
) -> dict[str, float]:
    """Each summary request starts from llama.cpp's cache: its time to first token is under a
    third of a cold control's, the first summary request sent again after the cache was flushed
    (same server, same run)."""
    summaries = [entry for entry in relay.log if entry.summary]
    assert summaries and all(entry.first_token_s is not None for entry in summaries)
    url = f"{llama.base_url}/chat/completions"
    first_token(url, {"model": MODEL_ALIAS, "messages": [{"role": "user", "content": "Hi."}]})
    cold, _ = first_token(url, {**summaries[0].body, "max_tokens": 1})
    warm = [entry.first_token_s or 0.0 for entry in summaries]
    assert max(warm) * 3 < cold, (warm, cold)
    return {"warm_first_token_s": round(max(warm), 2), "cold_first_token_s": round(cold, 2)}


def _worst(pairs: list[tuple[int, int]]) -> float:
    """The largest relative error of the estimates once calibrated."""
    errors = [abs(e - r) / r for e, r in pairs[CALIBRATION_TURNS:]]
    return round(max(errors, default=0.0), 4)


def _report(
    name: str, events: list[CompactionEvent], log: list[Relayed], figures: dict[str, Any]
) -> None:
    applied = [event for event in events if event.applied]
    verdicts = [v for event in applied for v in event.verdicts]
    counts = {v: verdicts.count(v) for v in ("accepted", "repaired", "replaced")}
    # A compaction whose summaries all failed while the request still fit sends it unchanged;
    # its event says so (applied=False). Every compaction the relay saw has its event.
    assert _assert_append_only_between_compactions(log) == len(events)
    counts["failed_sent_unchanged"] = len(events) - len(applied)
    counts["summary_requests"] = sum(1 for entry in log if entry.summary)
    problems = [p for event in events for p in event.problems]
    print(f"\n[real model] {name}: {json.dumps({**counts, 'problems': problems, **figures})}")


def test_a_session_through_the_proxy(llama: LlamaServer, tmp_path: Any) -> None:
    events: list[CompactionEvent] = []
    with RecordingRelay(llama.base_url) as relay:
        settings = Settings(
            upstream=relay.base_url,
            port=0,
            db=tmp_path / "checkpoints.db",
            context_window=N_CTX,
            max_summary_tokens=SUMMARY_TOKENS,
            upstream_timeout=900,
            # Each compaction where the trigger is, as before drafts ahead of time became the
            # proxy's default: with them, one summary of this session's applied, not two.
            prepare_ratio=None,
        )
        pairs: list[tuple[int, int]] = []
        with ProxyServer(settings, on_compaction=events.append) as proxy:
            client = openai.OpenAI(
                base_url=proxy.base_url, api_key="sk-local", max_retries=0, timeout=1_800
            )

            def send(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
                raw = client.chat.completions.with_raw_response.create(
                    model=MODEL_ALIAS, messages=messages, tools=tools, max_tokens=AGENT_MAX_TOKENS
                )
                completion = raw.parse()
                if raw.headers["x-summarizer-compacted"] == "false":
                    estimate = int(raw.headers["x-summarizer-prompt-tokens"])
                    pairs.append((estimate, completion.usage.prompt_tokens))
                return completion

            run = drive_session(_session(), send, turns=TURNS)
        assert all(entry.status == 200 for entry in relay.log), [
            (e.status, e.answer) for e in relay.log if e.status != 200
        ]
        compactions = _assert_append_only_between_compactions(relay.log)
        assert compactions >= 2 and sum(event.applied for event in events) >= 2
        cache = _assert_summaries_reuse_the_cache(llama, relay)
    _report(
        "proxy",
        events,
        relay.log,
        {"compactions": compactions, "agent_requests": len(list(agent_requests(relay.log))),
         "seconds": round(run.seconds), "worst_estimate_error": _worst(pairs), **cache},
    )  # fmt: skip
    _assert_estimates_close(pairs)


def test_a_session_through_wrap(llama: LlamaServer) -> None:
    events: list[CompactionEvent] = []
    with RecordingRelay(llama.base_url) as relay:
        sdk = openai.OpenAI(base_url=relay.base_url, api_key="none", max_retries=0, timeout=1_800)
        client = context_summarizer.wrap(
            sdk,
            context_window=N_CTX,
            max_summary_tokens=SUMMARY_TOKENS,
            on_compaction=events.append,
        )
        pairs: list[tuple[int, int]] = []

        def send(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
            ready = client.context.unchanged(
                messages, model=MODEL_ALIAS, tools=tools, request={"max_tokens": AGENT_MAX_TOKENS}
            )
            completion = client.chat.completions.create(
                model=MODEL_ALIAS, messages=messages, tools=tools, max_tokens=AGENT_MAX_TOKENS
            )
            if ready is not None:
                pairs.append((ready.report.estimated_tokens, completion.usage.prompt_tokens))
            return completion

        run = drive_session(_session(), send, turns=TURNS)
        assert all(entry.status == 200 for entry in relay.log)
        compactions = _assert_append_only_between_compactions(relay.log)
        assert compactions >= 2 and sum(event.applied for event in events) >= 2
        cache = _assert_summaries_reuse_the_cache(llama, relay)
    _report(
        "wrap",
        events,
        relay.log,
        {"compactions": compactions, "seconds": round(run.seconds),
         "worst_estimate_error": _worst(pairs), **cache},
    )  # fmt: skip
    _assert_estimates_close(pairs)


def test_llama_cpps_500_for_a_request_it_cannot_validate_is_not_retried(
    llama: LlamaServer,
) -> None:
    # Its server refuses an assistant tool-call message with "content": null with a 500 (a
    # pydantic validation error): the summary client must not retry what fails the same way.
    client = openai.OpenAI(base_url=llama.base_url, api_key="none", max_retries=0, timeout=120)
    call = {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "List the files."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "README.md"},
    ]
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model=MODEL_ALIAS, messages=messages, max_tokens=1)
    assert caught.value.status_code == 500
    assert not is_retryable(caught.value), caught.value.body
