"""The summary's cap goes in the field the upstream reads.

llama-cpp-python's server reads ``max_tokens`` and ignores ``max_completion_tokens``: a summary
request capped with the latter runs on until the model stops (1,634 tokens against a cap of 256,
measured with the 0.5B model). ``summary_cap_field`` picks the field; ``auto`` mirrors the
agent's request, and a summary written past its cap is logged, naming the setting.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from context_summarizer.core.errors import ConfigurationError
from context_summarizer.core.results import SummarizeCall, SummaryOutcome
from context_summarizer.library.manager import ContextManager
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import TestUpstream

from .test_proxy import chat_requests, long_history

MODEL = "gpt-4o-mini"


@pytest.mark.parametrize(
    ("field", "agent_cap", "expected"),
    [
        ("auto", {}, "max_completion_tokens"),
        ("auto", {"max_tokens": 400}, "max_tokens"),
        ("auto", {"max_completion_tokens": 400}, "max_completion_tokens"),
        ("max_tokens", {}, "max_tokens"),
        ("max_tokens", {"max_completion_tokens": 400}, "max_tokens"),
        ("max_completion_tokens", {"max_tokens": 400}, "max_completion_tokens"),
    ],
)
def test_the_summary_request_carries_its_cap_in_the_chosen_field(
    field: str, agent_cap: dict[str, int], expected: str
) -> None:
    other = "max_tokens" if expected == "max_completion_tokens" else "max_completion_tokens"
    with (
        TestUpstream() as upstream,
        ProxyServer(
            Settings(
                upstream=upstream.base_url,
                port=0,
                db=":memory:",
                context_window=16_000,
                max_summary_tokens=700,
                summary_cap_field=field,
                prepare_ratio=None,  # one compaction's summary request, not a draft's
            )
        ) as proxy,
    ):
        sdk = openai.OpenAI(base_url=proxy.base_url, api_key="sk-cap-field", max_retries=0)
        sdk.chat.completions.create(model=MODEL, messages=long_history(9), **agent_cap)  # type: ignore[call-overload]
        summaries = chat_requests(upstream, summary=True)
    assert summaries  # the first, and the strict retry when the test model's answer is unusable
    for summary in summaries:
        assert summary.body[expected] <= 700
        assert other not in summary.body


def test_an_unknown_field_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="summary_cap_field"):
        ContextManager(context_window=16_000, summary_cap_field="max_output")


def test_a_summary_written_past_its_cap_is_logged_naming_the_setting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def ignores_the_cap(call: SummarizeCall) -> SummaryOutcome:
        cap = call.body["max_completion_tokens"]
        text = "## Task and constraints\nFix the failing invoice test in src/invoice.py."
        return SummaryOutcome(text=text, finish_reason="stop", completion_tokens=cap + 900)

    manager = ContextManager(
        summarizer=ignores_the_cap, context_window=16_000, max_summary_tokens=500
    )
    messages: list[dict[str, Any]] = long_history(9)
    with caplog.at_level("WARNING", logger="summarizer"):
        manager.prepare(messages, model=MODEL)
    (record,) = [r for r in caplog.records if "ignores that field" in r.getMessage()]
    assert "'max_completion_tokens'" in record.getMessage()
    assert "SUMMARIZER_SUMMARY_CAP_FIELD" in record.getMessage()
