"""Unit tests for ``context_summarizer.proxy.body``: the request body the proxy sends upstream."""

from __future__ import annotations

import json
from typing import Any

import pytest

from context_summarizer.proxy.body import outgoing_body, parse_body, wants_usage

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Bonjour, ça va? 日本語 🚀"},
]


def _body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "messages": MESSAGES,
        "temperature": 1.0,
        "seed": 2**70 + 1,
        "x_vendor_field": {"nested": [1, {"deep": None}], "flag": False},
        "metadata": {"ключ": "значение"},
        **extra,
    }


def _raw(body: dict[str, Any], **dumps: Any) -> bytes:
    return json.dumps(body, **dumps).encode("utf-8")


# -- wants_usage ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, False),
        ({"stream_options": None}, False),
        ({"stream_options": {}}, False),
        ({"stream_options": {"include_usage": False}}, False),
        ({"stream_options": {"include_usage": "true"}}, False),
        ({"stream_options": {"include_usage": 1}}, False),
        ({"stream_options": [["include_usage", True]]}, False),
        ({"stream_options": {"include_usage": True}}, True),
        ({"stream_options": {"include_usage": True, "foo": 1}}, True),
    ],
)
def test_wants_usage(body: dict[str, Any], expected: bool) -> None:
    assert wants_usage(body) is expected


# -- unchanged bodies -----------------------------------------------------------------------------


def test_not_streaming_without_messages_returns_the_same_bytes_object() -> None:
    body = _body()
    raw = _raw(body, indent=2)
    assert outgoing_body(raw, body, messages=None, stream=False) is raw


def test_streaming_with_include_usage_already_true_returns_the_same_bytes_object() -> None:
    body = _body(stream=True, stream_options={"include_usage": True})
    raw = _raw(body)
    assert outgoing_body(raw, body, messages=None, stream=True) is raw


# -- stream without stream_options ----------------------------------------------------------------


def test_stream_without_options_adds_include_usage_and_keeps_every_other_field() -> None:
    body = _body(stream=True)
    raw = _raw(body, ensure_ascii=False, indent=1)

    out = json.loads(outgoing_body(raw, body, messages=None, stream=True))

    assert out == {**body, "stream_options": {"include_usage": True}}
    assert isinstance(out["temperature"], float)
    assert out["seed"] == 2**70 + 1
    assert out["messages"][1]["content"] == "Bonjour, ça va? 日本語 🚀"


def test_stream_without_options_keeps_the_client_bytes_around_the_insertion() -> None:
    body = _body(stream=True)
    raw = _raw(body, ensure_ascii=False)

    out = outgoing_body(raw, body, messages=None, stream=True)

    # Only the option is added: the client's own bytes (spacing, escapes) follow it untouched.
    option = b'"stream_options":{"include_usage":true},'
    assert out == b"{" + option + raw[1:]


def test_stream_without_options_with_leading_whitespace() -> None:
    body = _body(stream=True)
    raw = b" \r\n\t " + _raw(body)

    out = outgoing_body(raw, body, messages=None, stream=True)

    assert json.loads(out) == {**body, "stream_options": {"include_usage": True}}


def test_stream_without_options_with_ascii_escapes() -> None:
    body = _body(stream=True)
    raw = _raw(body, ensure_ascii=True)

    out = outgoing_body(raw, body, messages=None, stream=True)

    assert json.loads(out) == {**body, "stream_options": {"include_usage": True}}


# -- stream with other stream_options -------------------------------------------------------------


def test_existing_stream_options_keys_are_kept() -> None:
    body = _body(stream=True, stream_options={"foo": 1, "bar": {"baz": [True]}})
    raw = _raw(body)

    out = json.loads(outgoing_body(raw, body, messages=None, stream=True))

    assert out == {
        **body,
        "stream_options": {"foo": 1, "bar": {"baz": [True]}, "include_usage": True},
    }


def test_include_usage_false_becomes_true() -> None:
    body = _body(stream=True, stream_options={"include_usage": False, "foo": 1})
    raw = _raw(body)

    out = json.loads(outgoing_body(raw, body, messages=None, stream=True))

    assert out["stream_options"] == {"include_usage": True, "foo": 1}
    assert {k: v for k, v in out.items() if k != "stream_options"} == {
        k: v for k, v in body.items() if k != "stream_options"
    }


def test_null_stream_options_becomes_include_usage() -> None:
    body = _body(stream=True, stream_options=None)
    raw = _raw(body)

    out = json.loads(outgoing_body(raw, body, messages=None, stream=True))

    assert out == {**body, "stream_options": {"include_usage": True}}


# -- rewritten messages ---------------------------------------------------------------------------

NEW_MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "[summary] résumé ✓"},
]


def test_messages_replaced_and_nothing_else_changes_when_not_streaming() -> None:
    body = _body()
    raw = _raw(body)

    out = json.loads(outgoing_body(raw, body, messages=NEW_MESSAGES, stream=False))

    assert out == {**body, "messages": NEW_MESSAGES}
    assert isinstance(out["temperature"], float)
    assert out["seed"] == 2**70 + 1


def test_messages_replaced_with_include_usage_already_true() -> None:
    body = _body(stream=True, stream_options={"include_usage": True, "foo": 1})
    raw = _raw(body)

    out = json.loads(outgoing_body(raw, body, messages=NEW_MESSAGES, stream=True))

    assert out == {**body, "messages": NEW_MESSAGES}


def test_messages_replaced_and_usage_added_when_streaming_without_options() -> None:
    body = _body(stream=True)
    raw = _raw(body)

    out = json.loads(outgoing_body(raw, body, messages=NEW_MESSAGES, stream=True))

    assert out == {**body, "messages": NEW_MESSAGES, "stream_options": {"include_usage": True}}


def test_rewritten_body_is_utf8_not_ascii_escaped() -> None:
    body = _body()
    out = outgoing_body(_raw(body), body, messages=NEW_MESSAGES, stream=False)
    assert "résumé ✓".encode() in out


def test_input_body_is_not_mutated() -> None:
    body = _body(stream=True, stream_options={"foo": 1})
    snapshot = json.loads(json.dumps(body))

    outgoing_body(_raw(body), body, messages=NEW_MESSAGES, stream=True)

    assert body == snapshot


def test_parse_body_accepts_what_the_stdlib_accepts() -> None:
    assert parse_body(b'{"a": NaN}')["a"] != parse_body(b'{"a": NaN}')["a"]  # NaN, not an error
    with pytest.raises(ValueError):
        parse_body(b"{nope")


def test_rewriting_keeps_integers_beyond_64_bits_exact_even_after_a_fast_parse() -> None:
    big = 2**70 + 1
    raw = json.dumps(
        {
            "model": "m",
            "seed": big,
            "messages": [
                {"role": "system", "content": "s", "x-tag": big},
                {"role": "user", "content": "old"},
                {"role": "user", "content": "new"},
            ],
        }
    ).encode()
    body = parse_body(raw)
    assert body["seed"] != big  # orjson reads it as a float: the reason for the exact path
    kept, _, latest = body["messages"]
    rewritten = [kept, {"role": "user", "content": "[summary]"}, latest]
    sent = json.loads(outgoing_body(raw, body, messages=rewritten, stream=True))
    assert sent["seed"] == big
    assert sent["messages"][0] == {"role": "system", "content": "s", "x-tag": big}
    assert sent["messages"][1:] == [
        {"role": "user", "content": "[summary]"},
        {"role": "user", "content": "new"},
    ]
    assert sent["stream_options"] == {"include_usage": True}
