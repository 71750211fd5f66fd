"""Reading an upstream's answer (``proxy.body.json_object``, ``proxy.sse.usage_of``) and
counting it (``proxy.metrics``): the quicker ways give what the plain ones give, and an answer
written anew is read exactly."""

from __future__ import annotations

import json
import math

from prometheus_client import generate_latest

from context_summarizer.proxy import sse
from context_summarizer.proxy.body import json_object
from context_summarizer.proxy.metrics import ProxyMetrics


def test_an_answer_reads_as_the_standard_library_reads_it() -> None:
    completion = {
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "é日本🚀\u2028"}}],
        "usage": {"prompt_tokens": 100867, "completion_tokens": 1, "cost": 0.25},
    }
    for text in (
        json.dumps(completion),
        json.dumps(completion, ensure_ascii=False),
        '{"a": 1, "a": 2}',  # a repeated key: the last one
        '{"content": "\\ud800 lone"}',  # orjson refuses a lone surrogate; the stdlib reads it
    ):
        assert json_object(text.encode()) == json.loads(text)
        assert json_object(text.encode(), exact=True) == json.loads(text)
    big = b'{"created": 1180591620717411303425}'  # 2**70 + 1
    assert json_object(big) == {"created": 1180591620717411303425.0}  # orjson's float
    assert json_object(big, exact=True) == {"created": 1180591620717411303425}
    odd = json_object(b'{"score": NaN}')  # orjson refuses NaN too
    assert odd is not None and math.isnan(odd["score"])
    assert json_object(b"[1, 2]") is None
    assert json_object(b'{"cut": ') is None
    assert json_object(b"\xff\xfe") is None


def test_an_answer_nested_past_any_parser_is_no_answer() -> None:
    # orjson stops at 1,024 levels and the stdlib at the stack's end: neither may escape.
    deep = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    assert json_object(deep) is None
    assert json_object(deep, exact=True) is None


def test_a_streams_usage_reads_as_the_standard_library_reads_it() -> None:
    usage = {"prompt_tokens": 100867, "completion_tokens": 1, "total_tokens": 100868}
    last = {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage}
    event = b"data: " + json.dumps(last).encode() + b"\n\n"
    assert sse.usage_of(event) == usage
    assert sse.is_usage_only(event)
    with_choice = dict(last, choices=[{"index": 0, "delta": {"content": "é"}}])
    event = b"data: " + json.dumps(with_choice, ensure_ascii=False).encode() + b"\n\n"
    assert sse.usage_of(event) == usage and not sse.is_usage_only(event)
    for none in (b'data: {"usage": null}\n\n', b"data: [DONE]\n\n", b'data: {"usage": 3}\n\n'):
        assert sse.usage_of(none) is None and not sse.is_usage_only(none)


def test_kept_metric_children_count_as_the_librarys_own() -> None:
    metrics = ProxyMetrics()
    assert metrics.lane.labels("taken") is metrics.lane.labels("taken")
    assert metrics.lane.labels("taken") is not metrics.lane.labels("handed_over")
    for _ in range(3):
        metrics.lane.labels("taken").inc()
    metrics.lane.labels(outcome="taken").inc()  # by name, as the library allows
    metrics.upstream_errors.labels("502").inc()
    metrics.overhead.labels("false").observe(0.0007)
    text = generate_latest(metrics.registry).decode()
    assert 'summarizer_lane_requests_total{outcome="taken"} 4.0' in text
    assert 'summarizer_upstream_errors_total{call="agent",status="502"} 1.0' in text
    assert 'summarizer_proxy_overhead_seconds_bucket{le="0.001",stream="false"} 1.0' in text
