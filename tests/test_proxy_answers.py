"""Reading an upstream's answer (``proxy.answers.json_object``) and counting it
(``proxy.metrics``): the quicker ways give what the plain ones give."""

from __future__ import annotations

import json
import math

from prometheus_client import generate_latest

from summarizer.proxy.answers import json_object
from summarizer.proxy.metrics import ProxyMetrics


def test_an_answer_reads_as_the_standard_library_reads_it() -> None:
    completion = {
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "é日本🚀\u2028"}}],
        "usage": {"prompt_tokens": 100867, "completion_tokens": 1, "cost": 0.25},
    }
    for text in (
        json.dumps(completion),
        json.dumps(completion, ensure_ascii=False),
        '{"big": 1180591620717411303424, "a": 1, "a": 2}',  # past 64 bits; a repeated key
        '{"content": "\\ud800 lone"}',  # orjson refuses a lone surrogate; the stdlib reads it
    ):
        assert json_object(text.encode()) == json.loads(text)
    odd = json_object(b'{"score": NaN}')  # orjson refuses NaN too
    assert odd is not None and math.isnan(odd["score"])
    assert json_object(b"[1, 2]") is None
    assert json_object(b'{"cut": ') is None
    assert json_object(b"\xff\xfe") is None


def test_an_answer_nested_past_any_parser_is_no_answer() -> None:
    # orjson stops at 1,024 levels and the stdlib at the stack's end: neither may escape.
    assert json_object(b'{"a":' * 100_000 + b"1" + b"}" * 100_000) is None


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
