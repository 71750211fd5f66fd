"""Unit tests for ``context_summarizer.proxy.sse``: splitting a byte stream into whole SSE
events."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from context_summarizer.proxy.sse import (
    EventSplitter,
    comment,
    data_event,
    event_data,
    is_usage_only,
    usage_of,
)

USAGE = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}

# -- strategies -----------------------------------------------------------------------------------

# Field values never contain a line break (a line break inside a value would end the line).
_value = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"),
    max_size=20,
)
_line = st.builds(
    lambda field, value: (field + value).encode("utf-8"),
    st.sampled_from(["data: ", "data:", "event: ", "id: ", ": "]),
    _value,
)
_newline = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def _event(draw: st.DrawFn) -> bytes:
    """One complete event: non-empty lines ending in one line-ending style, then a blank line."""
    newline = draw(_newline)
    lines = draw(st.lists(_line, min_size=1, max_size=4))
    return b"".join(line + newline for line in lines) + newline


def _split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(stream)) for c in cuts})
    chunks, start = [], 0
    for point in [*points, len(stream)]:
        chunks.append(stream[start:point])
        start = point
    return chunks


def _feed_all(chunks: list[bytes]) -> tuple[list[bytes], bytes]:
    splitter = EventSplitter()
    events: list[bytes] = []
    for chunk in chunks:
        events.extend(splitter.feed(chunk))
    return events, splitter.rest()


# -- EventSplitter --------------------------------------------------------------------------------


def test_single_event_with_lf_terminator() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b'data: {"a":1}\n\n') == [b'data: {"a":1}\n\n']
    assert splitter.rest() == b""


def test_single_event_with_crlf_terminator() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b'data: {"a":1}\r\n\r\n') == [b'data: {"a":1}\r\n\r\n']
    assert splitter.rest() == b""


def test_event_with_cr_terminator() -> None:
    assert EventSplitter().feed(b"data: x\r\r") == [b"data: x\r\r"]


def test_multiple_events_in_one_chunk_come_out_in_order() -> None:
    chunk = b"data: one\n\ndata: two\r\n\r\n: keepalive\n\ndata: [DONE]\n\n"
    assert EventSplitter().feed(chunk) == [
        b"data: one\n\n",
        b"data: two\r\n\r\n",
        b": keepalive\n\n",
        b"data: [DONE]\n\n",
    ]


def test_event_split_across_chunks_is_returned_once_complete() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b"data: hel") == []
    assert splitter.feed(b"lo\n") == []
    assert splitter.feed(b"\ndata: next") == [b"data: hello\n\n"]
    assert splitter.feed(b"\n\n") == [b"data: next\n\n"]


def test_crlf_terminator_split_between_chunks() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b"data: a\r\n") == []
    assert splitter.feed(b"\r") == []
    assert splitter.feed(b"\n") == [b"data: a\r\n\r\n"]


def test_empty_feed_returns_nothing() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b"") == []
    assert splitter.rest() == b""


def test_rest_returns_unterminated_tail_and_clears_it() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b"data: done\n\ndata: partial\n") == [b"data: done\n\n"]
    assert splitter.rest() == b"data: partial\n"
    assert splitter.rest() == b""


@settings(max_examples=150, deadline=None)
@given(
    events=st.lists(_event(), max_size=6),
    tail=st.one_of(st.just(b""), _line),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_chunk_boundaries_do_not_change_the_events(
    events: list[bytes], tail: bytes, cuts: list[int]
) -> None:
    stream = b"".join(events) + tail

    whole, whole_rest = _feed_all([stream])
    chunked, chunked_rest = _feed_all(_split(stream, cuts))
    byte_by_byte, bytes_rest = _feed_all([stream[i : i + 1] for i in range(len(stream))])

    assert whole == events
    assert chunked == events
    assert byte_by_byte == events
    assert whole_rest == chunked_rest == bytes_rest == tail


# -- event_data -----------------------------------------------------------------------------------


def test_event_data_joins_multiple_data_lines_with_newlines() -> None:
    assert event_data(b"data: first\ndata: second\n\n") == b"first\nsecond"


def test_event_data_with_crlf_lines() -> None:
    assert event_data(b"data: first\r\ndata: second\r\n\r\n") == b"first\nsecond"


def test_event_data_space_after_colon_is_optional() -> None:
    assert event_data(b"data:{}\n\n") == b"{}"
    assert event_data(b"data: {}\n\n") == b"{}"


def test_event_data_removes_only_one_leading_space() -> None:
    assert event_data(b"data:  indented\n\n") == b" indented"


def test_event_data_ignores_other_fields_and_comments() -> None:
    assert event_data(b": hi\nevent: message\nid: 7\ndata: payload\nretry: 10\n\n") == b"payload"


def test_event_data_of_event_without_data_is_empty() -> None:
    assert event_data(b": keepalive\n\n") == b""


# -- usage_of / is_usage_only ---------------------------------------------------------------------


def _chunk(**fields: Any) -> bytes:
    return b"data: " + json.dumps(fields).encode() + b"\n\n"


CONTENT_CHUNK = (
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":'
    b'[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n'
)


def test_usage_of_null_usage_without_space() -> None:
    event = b'data: {"id":"c1","choices":[{"index":0,"delta":{}}],"usage":null}\n\n'
    assert usage_of(event) is None


def test_usage_of_null_usage_with_space() -> None:
    event = b'data: {"id": "c1", "choices": [{"index": 0, "delta": {}}], "usage": null}\n\n'
    assert usage_of(event) is None


def test_usage_of_null_usage_with_space_before_colon() -> None:
    assert usage_of(b'data: {"choices": [], "usage" : null}\n\n') is None


def test_usage_of_chunk_without_usage() -> None:
    assert usage_of(CONTENT_CHUNK) is None


def test_usage_of_real_usage_chunk_returns_the_dict() -> None:
    assert usage_of(_chunk(id="c1", choices=[], usage=USAGE)) == USAGE


def test_usage_of_usage_split_over_data_lines() -> None:
    event = b'data: {"choices": [],\ndata: "usage": {"total_tokens": 3}}\n\n'
    assert usage_of(event) == {"total_tokens": 3}


def test_usage_of_done_is_none() -> None:
    assert usage_of(b"data: [DONE]\n\n") is None


def test_usage_of_invalid_json_is_none() -> None:
    assert usage_of(b'data: {"usage": {"prompt_tokens": 1\n\n') is None


def test_usage_of_non_object_payloads_is_none() -> None:
    assert usage_of(b'data: [{"usage": {"prompt_tokens": 1}}]\n\n') is None
    assert usage_of(b'data: {"usage": 5}\n\n') is None


def test_is_usage_only_for_empty_choices_plus_usage() -> None:
    assert is_usage_only(_chunk(id="c1", choices=[], usage=USAGE)) is True


def test_is_usage_only_false_for_content_chunk_carrying_usage() -> None:
    event = _chunk(
        id="c1",
        choices=[{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}],
        usage=USAGE,
    )
    assert usage_of(event) == USAGE
    assert is_usage_only(event) is False


def test_is_usage_only_false_without_usage() -> None:
    assert is_usage_only(CONTENT_CHUNK) is False
    assert is_usage_only(_chunk(id="c1", choices=[], usage=None)) is False
    assert is_usage_only(b"data: [DONE]\n\n") is False


# -- comment / data_event -------------------------------------------------------------------------


def test_comment_is_a_terminated_comment_line() -> None:
    event = comment("keepalive")
    assert event == b": keepalive\n\n"
    assert EventSplitter().feed(event) == [event]
    assert event_data(event) == b""


def test_data_event_is_one_terminated_event() -> None:
    event = data_event({"a": 1})
    assert event == b'data: {"a":1}\n\n'


def test_data_event_usage_chunk_is_recognised() -> None:
    event = data_event({"id": "c1", "choices": [], "usage": USAGE})
    assert usage_of(event) == USAGE
    assert is_usage_only(event) is True


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None)
@given(payload=_json)
def test_data_event_round_trips_through_splitter_and_event_data(payload: Any) -> None:
    event = data_event(payload)
    # Even a payload with blank lines inside its strings stays a single event.
    assert EventSplitter().feed(event) == [event]
    assert json.loads(event_data(event)) == payload
