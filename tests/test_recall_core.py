"""Spans (``core.spans``), recall over them (``core.recall``) and the recall tool
(``core.recall_tool``): ids, index lines, search by text and regex, fetch by id, every bound,
the tool's name, index and calls."""

from __future__ import annotations

import time
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from context_summarizer.core.messages import message_text
from context_summarizer.core.recall import MAX_QUERY_CHARS, fetch, search
from context_summarizer.core.recall_tool import (
    PARAMETERS,
    TOOL_NAMES,
    RecallCall,
    answer_call,
    index_text,
    read_call,
    recall_tool,
)
from context_summarizer.core.spans import Span, index_line, span_id, spans_of
from context_summarizer.loaders.prompts import load_prompt_set


def conversation() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test in src/app/models.py"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd": "pytest -x tests"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "E   KeyError: 'user_id'\nFAILED tests/test_models.py::test_save",
        },
        {"role": "assistant", "content": "The save path drops user_id; patching models.py."},
        {"role": "user", "content": "Also keep the KeyError message in the changelog."},
    ]


def test_a_span_id_is_a_digest_of_its_messages() -> None:
    raw = conversation()
    assert span_id(raw[1:4]) == span_id([dict(m) for m in raw[1:4]])
    assert span_id(raw[1:4]) != span_id(raw[1:5])
    edited = [*raw[1:3], {**raw[3], "content": "E   KeyError: 'account_id'"}]
    assert span_id(edited) != span_id(raw[1:4])
    assert span_id(raw[1:4]).startswith("span-") and len(span_id(raw[1:4])) == len("span-") + 12


def test_spans_follow_raw_order_and_leave_out_ranges_past_the_conversation() -> None:
    raw = conversation()
    spans = spans_of([(4, 5), (1, 3), (3, 99), (2, 2)], raw)
    assert [(s.start, s.end) for s in spans] == [(1, 3), (4, 5)]
    assert spans[0].id == span_id(raw[1:3]) and spans[0].covers(2) and not spans[0].covers(3)


def test_an_index_line_names_the_span_its_messages_files_commands_and_errors() -> None:
    raw = conversation()
    (span,) = spans_of([(1, 5)], raw)
    line = index_line(span, raw)
    assert line.startswith(f"{span.id}: messages 2-5")
    assert "src/app/models.py" in line
    assert "commands: pytest -x tests" in line
    assert "KeyError: 'user_id'" in line
    assert "\n" not in line


def test_an_index_line_is_bounded() -> None:
    raw = [{"role": "tool", "content": f"edited src/module_{i}/{'x' * 80}.py"} for i in range(50)]
    (span,) = spans_of([(0, 50)], raw)
    assert len(index_line(span, raw)) <= 400


def test_search_finds_text_case_insensitively_only_inside_the_spans() -> None:
    raw = conversation()
    spans = spans_of([(1, 5)], raw)
    answer = search(spans, raw, "keyerror")
    assert answer.error is None and not answer.more
    assert [(hit.message, hit.role) for hit in answer.hits] == [(3, "tool")]
    # The last user message says KeyError too, but it was not replaced: recall never shows it.
    assert all(spans[0].covers(hit.message) for hit in answer.hits)
    assert "KeyError: 'user_id'" in answer.render()
    assert f"[{spans[0].id}, message 4, tool]" in answer.render()


def test_search_takes_a_regular_expression() -> None:
    raw = conversation()
    spans = spans_of([(1, 5)], raw)
    answer = search(spans, raw, r"test_\w+\.py::test_\w+", is_regex=True)
    assert len(answer.hits) == 1 and "tests/test_models.py::test_save" in answer.hits[0].text
    assert search(spans, raw, r"test_\w+\.py::test_\w+").hits == []  # as text, no match


def test_an_excerpt_is_exact_text_of_its_own_message_around_the_match() -> None:
    raw = [
        {"role": "tool", "content": "a" * 500 + "NEEDLE" + "b" * 500},
        {"role": "tool", "content": "c" * 50},
    ]
    spans = spans_of([(0, 2)], raw)
    (hit,) = search(spans, raw, "needle", context_chars=20).hits
    text = message_text(raw[0])
    assert hit.text == text[hit.start : hit.start + len(hit.text)]
    assert hit.text == "a" * 20 + "NEEDLE" + "b" * 20 and not hit.whole
    assert "from character 481" in search(spans, raw, "needle", context_chars=20).render()
    (edge,) = search(spans, raw, "ccc", context_chars=1_000).hits
    assert edge.text == "c" * 50 and edge.whole  # never past its message


def test_search_stops_at_its_hit_and_character_bounds_and_says_so() -> None:
    raw = [{"role": "tool", "content": f"line {i}: error here"} for i in range(40)]
    spans = spans_of([(0, 40)], raw)
    few = search(spans, raw, "error", max_hits=3)
    assert len(few.hits) == 3 and few.more
    assert "more matched than is shown" in few.render()
    short = search(spans, raw, "error", max_chars=30)
    assert short.chars <= 30 and short.more


def test_search_refuses_empty_long_and_broken_queries_with_a_reason() -> None:
    raw = conversation()
    spans = spans_of([(1, 5)], raw)
    assert search(spans, raw, "  ").error == "the query is empty"
    assert "longer than" in (search(spans, raw, "x" * (MAX_QUERY_CHARS + 1)).error or "")
    broken = search(spans, raw, "(unclosed", is_regex=True)
    assert broken.error is not None and broken.render().startswith("recall failed:")


def test_a_catastrophic_pattern_is_stopped_and_reported() -> None:
    raw = [{"role": "tool", "content": "a" * 5_000 + "!"} for _ in range(20)]
    spans = spans_of([(0, 20)], raw)
    started = time.monotonic()
    answer = search(spans, raw, r"(a+)+$", is_regex=True)
    assert time.monotonic() - started < 2.0
    assert answer.error is not None and "too long" in answer.error


def test_fetch_returns_a_span_in_order_from_an_offset_within_bounds() -> None:
    raw = conversation()
    spans = spans_of([(1, 5)], raw)
    whole = fetch(spans, raw, spans[0].id)
    assert [hit.message for hit in whole.hits] == [1, 2, 3, 4] and not whole.more
    assert all(hit.text == message_text(raw[hit.message]) for hit in whole.hits)
    later = fetch(spans, raw, spans[0].id, offset=2)
    assert [hit.message for hit in later.hits] == [3, 4]
    cut = fetch(spans, raw, spans[0].id, max_chars=60)
    assert cut.more and cut.chars <= 60


def test_fetch_of_an_unknown_span_names_the_known_ones() -> None:
    raw = conversation()
    spans = spans_of([(1, 5)], raw)
    answer = fetch(spans, raw, "span-000000000000")
    assert answer.hits == [] and answer.error is not None and spans[0].id in answer.error
    assert "none" in (fetch([], raw, "span-x").error or "")


words = st.text(alphabet="abcXYZ _-.:/\n", min_size=0, max_size=60)


@settings(max_examples=150, deadline=None)
@given(
    contents=st.lists(words, min_size=1, max_size=8),
    query=st.text(alphabet="abcXYZ_-.", min_size=1, max_size=4),
    context=st.integers(min_value=0, max_value=30),
)
def test_every_hit_is_exact_text_of_a_replaced_message(
    contents: list[str], query: str, context: int
) -> None:
    raw = [{"role": "tool", "content": text} for text in contents]
    cut = len(raw) // 2
    spans = [Span(span_id(raw[:cut]), 0, cut)] if cut else []
    answer = search(spans, raw, query, context_chars=context, max_hits=50, max_chars=10_000)
    for hit in answer.hits:
        assert hit.message < cut
        text = message_text(raw[hit.message])
        assert text[hit.start : hit.start + len(hit.text)] == hit.text
        assert query.lower() in hit.text.lower() or answer.more


# -- the tool (core.recall_tool) -----------------------------------------------------------------


def test_the_tool_takes_the_first_name_the_agent_does_not_use() -> None:
    prompts = load_prompt_set()
    tool = recall_tool(prompts, ["bash", "read_file"])
    assert tool is not None and tool.name == "recall"
    assert tool.description == prompts.recall_tool and "span" in tool.description
    assert tool.parameters is PARAMETERS
    renamed = recall_tool(prompts, ["recall", "bash"])
    assert renamed is not None and renamed.name == "summarizer_recall"
    assert recall_tool(prompts, TOOL_NAMES) is None


def test_the_summary_index_lists_every_span_and_names_the_tool() -> None:
    raw = conversation()
    spans = spans_of([(1, 3), (3, 5)], raw)
    text = index_text(load_prompt_set(), "summarizer_recall", spans, raw)
    assert "`summarizer_recall`" in text
    assert [line for line in text.splitlines() if line.startswith("- ")] == [
        f"- {index_line(span, raw)}" for span in spans
    ]


def test_a_call_is_read_from_json_text_or_an_object() -> None:
    assert read_call('{"query": "KeyError"}') == RecallCall(query="KeyError")
    assert read_call({"query": "a.*b", "regex": True}) == RecallCall(query="a.*b", regex=True)
    assert read_call({"span": "span-abc", "offset": 2}) == RecallCall(span="span-abc", offset=2)


def test_a_malformed_call_is_answered_with_what_is_wrong() -> None:
    cases = {
        "": "needs either query or span",
        "{not json": "not valid JSON",
        "[1, 2]": "must be an object",
        '{"query": "x", "span": "y"}': "not both",
        "{}": "not both",
        '{"query": 3}': "query must be a string",
        '{"span": ["a"]}': "span must be a string",
        '{"query": "x", "regex": "yes"}': "regex must be true or false",
        '{"span": "s", "offset": -1}': "offset must be",
        '{"span": "s", "offset": true}': "offset must be",
        '{"query": "x", "path": "/etc"}': "unknown arguments: path",
    }
    for arguments, reason in cases.items():
        read = read_call(arguments)
        assert isinstance(read, str) and reason in read, (arguments, read)
        rendered = answer_call(read, spans_of([(0, 1)], conversation()), conversation()).render()
        assert rendered.startswith("recall failed:") and reason in rendered


def test_a_call_is_answered_by_search_or_fetch() -> None:
    raw = conversation()
    spans = spans_of([(1, 5)], raw)
    found = answer_call(RecallCall(query="keyerror"), spans, raw)
    assert found.hits and found.hits[0].message == 3
    read = answer_call(RecallCall(span=spans[0].id, offset=3), spans, raw)
    assert [hit.message for hit in read.hits] == [4]
    nothing = answer_call(RecallCall(query="x"), [], raw)
    assert nothing.error == "nothing of this conversation has been replaced"


def test_a_text_query_has_no_time_bound_and_a_regex_takes_the_callers() -> None:
    raw = [{"role": "tool", "content": ("x" * 999 + "\n") * 2_000 + "TokenRefresher"}]
    spans = spans_of([(0, 1)], raw)
    # A tiny bound stops a regular expression, never a literal (which cannot backtrack).
    assert search(spans, raw, "tokenrefresher", timeout=1e-9).hits
    stopped = search(spans, raw, r"token\w+", is_regex=True, timeout=1e-9)
    assert stopped.error is not None and "too long" in stopped.error
    assert search(spans, raw, r"token\w+", is_regex=True, timeout=None).hits
