"""The contract checker of ``tests/invariants.py`` on hand-made rewrites.

A correct rewrite passes, and each kind of violation the state machines must catch is caught,
with the rule named in the error.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from context_summarizer.core.planner import truncate_message
from context_summarizer.loaders.prompts import load_prompt, render_prompt

from .invariants import (
    BELONGS,
    FINAL_UNIT,
    FITS,
    FRESH,
    GAPS,
    INSTRUCTIONS,
    LATEST_USER,
    ORDER,
    TENANCY,
    VALID,
    check_final_unit_kept,
    check_fits,
    check_latest_user_kept,
    check_request,
    check_same_as_fresh,
    check_summaries_exclude,
    check_valid_conversation,
    is_summary,
    place_messages,
)

Message = dict[str, Any]

MARKER = load_prompt("truncated_output")


def calls(*ids: str) -> Message:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
            for i in ids
        ],
    }


def result(call_id: str, text: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


LONG = " ".join(f"line {n} of the ledger module output" for n in range(60))

RAW: list[Message] = [
    {"role": "system", "content": "[t000001-0001] You are a careful coding agent."},
    {"role": "user", "content": "[t000001-0002] Fix the failing invoice test."},
    calls("c1"),
    result("c1", "[t000001-0003] " + LONG),
    {"role": "user", "content": "[t000001-0004] Look at the ledger too."},
    {"role": "assistant", "content": "[t000001-0005] I will read it next."},
    {"role": "developer", "content": "[t000001-0006] Use the staging database from now on."},
    calls("c2", "c3"),
    result("c3", "[t000001-0007] " + LONG),
    result("c2", "[t000001-0008] tests passed"),
    {"role": "user", "content": "[t000001-0009] Now run everything."},
    calls("c4"),
    result("c4", "[t000001-0010] 12 passed, 1 failed"),
]
"""Indices: 0 system, 1 task, 2-3 a tool pair, 4 user, 5 assistant, 6 a mid-conversation
developer message, 7-9 parallel calls answered out of order, 10 the latest user message,
11-12 the final unit."""

TAGS = re.compile(r"\[t\d{6}-\d{4}\]")


def summary(text: str = "the earlier work") -> Message:
    content = render_prompt("summary_frame", summary=text, ledger="- src/invoice.py").rstrip()
    return {"role": "user", "content": content}


def fallback() -> Message:
    text = render_prompt("fallback_summary", reason="empty", message_count=4, original_tokens=300)
    return {"role": "user", "content": text}


def raw(*indices: int) -> list[Message]:
    return [RAW[i] for i in indices]


def truncated(index: int) -> Message:
    return truncate_message(RAW[index], keep_tokens=40, original_tokens=250, marker=MARKER)


# -- correct rewrites pass ------------------------------------------------------------------------


def test_a_correct_rewrite_passes() -> None:
    sent = [*raw(0, 1), summary(), *raw(6, 7), truncated(8), *raw(9, 10, 11, 12)]
    placed = check_request(RAW, sent, tag_pattern=TAGS)
    assert [p.raw_index for p in placed] == [0, 1, None, 6, 7, 8, 9, 10, 11, 12]
    assert [p.kind for p in placed][5] == "replaced"


def test_a_summary_in_each_gap_and_a_truncated_output_pass() -> None:
    sent = [*raw(0, 1, 2), truncated(3), summary(), RAW[6], fallback(), *raw(10, 11, 12)]
    check_request(RAW, sent, tag_pattern=TAGS)


def test_the_conversation_sent_unchanged_passes() -> None:
    check_request(RAW, list(RAW), tag_pattern=TAGS)


def test_summaries_are_recognised_framed_or_mechanical() -> None:
    assert is_summary(summary())
    assert is_summary(fallback())
    assert not is_summary(RAW[1])


# -- each violation is caught ---------------------------------------------------------------------


def test_swapped_order_is_caught() -> None:
    sent = [*raw(0, 1), summary(), *raw(10, 6), *raw(11, 12)]
    with pytest.raises(AssertionError, match=rf"\[{ORDER}\] sent\[4\] is raw\[6\]"):
        check_request(RAW, sent)


def test_a_message_of_another_conversation_is_caught() -> None:
    sibling = {"role": "user", "content": "[t000001-0042] Deploy the sibling branch instead."}
    sent = [*raw(0, 1), summary(), RAW[6], sibling, *raw(11, 12)]
    with pytest.raises(AssertionError, match=rf"\[{BELONGS}\] sent\[4\]"):
        check_request(RAW, sent)


def test_another_conversations_tool_output_is_caught() -> None:
    """A truncated output of a sibling's call (issue 11, item 1) is no message of this one."""
    foreign = truncate_message(
        result("c9", "[t000001-0050] " + LONG), keep_tokens=40, original_tokens=250, marker=MARKER
    )
    sent = [*raw(0, 1), summary(), *raw(6, 7, 8, 9), foreign]
    with pytest.raises(AssertionError, match=rf"\[{VALID}\]|\[{BELONGS}\]"):
        check_request(RAW, sent)
    with pytest.raises(AssertionError, match=rf"\[{BELONGS}\] sent\[7\]"):
        place_messages(RAW, sent)


def test_a_replacement_that_is_not_the_original_cut_short_is_caught() -> None:
    wrong = truncated(3)
    wrong["content"] = "something else" + wrong["content"]
    sent = [*raw(0, 1, 2), wrong, summary(), *raw(6), summary(), *raw(10, 11, 12)]
    with pytest.raises(AssertionError, match=rf"\[{BELONGS}\] sent\[3\]"):
        check_request(RAW, sent)


def test_a_summary_mentioning_a_siblings_turn_is_caught() -> None:
    leaked = summary("The latest turn was [t000001-0042].")
    sent = [*raw(0, 1), leaked, *raw(6, 7, 8, 9, 10, 11, 12)]
    check_request(RAW, sent)  # without tags the leak cannot be seen...
    with pytest.raises(AssertionError, match=rf"\[{BELONGS}\] .*\['\[t000001-0042\]'\]"):
        check_request(RAW, sent, tag_pattern=TAGS)  # ...with them it is


def test_a_gap_without_a_summary_is_caught() -> None:
    sent = [*raw(0, 1, 6, 7, 8, 9, 10, 11, 12)]
    with pytest.raises(AssertionError, match=rf"\[{GAPS}\] raw\[2:6\] \(4 messages\)"):
        check_request(RAW, sent)


def test_a_summary_after_the_latest_user_message_it_should_precede_is_caught() -> None:
    """The latest user message pulled ahead of a summary of the turns before it (item 2)."""
    conversation = [*raw(0, 1, 2, 3, 4, 5), *raw(10, 11, 12)]
    sent = [*raw(0, 1, 10), summary(), *raw(11, 12)]
    with pytest.raises(AssertionError, match=rf"\[{GAPS}\] raw\[2:6\] .* sent\[1\] and sent\[2\]"):
        check_request(conversation, sent)


def test_a_summary_where_nothing_is_missing_is_caught() -> None:
    sent = [*raw(0, 1), summary(), *raw(2, 3, 4, 5, 6), summary(), *raw(7, 8, 9, 10, 11, 12)]
    with pytest.raises(AssertionError, match=rf"\[{GAPS}\] summary at sent\[2\] stands in for"):
        check_request(RAW, sent)


def test_a_split_tool_pair_is_caught() -> None:
    sent = [*raw(0, 1), summary(), *raw(6, 7, 8, 10, 11, 12)]
    with pytest.raises(AssertionError, match=rf"\[{VALID}\] the tool pair of sent\[4\] is split"):
        check_request(RAW, sent)


def test_a_tool_result_without_its_call_is_caught() -> None:
    sent = [*raw(0, 1), summary(), RAW[6], *raw(8, 9, 10, 11, 12)]
    with pytest.raises(AssertionError, match=rf"\[{VALID}\] sent\[4\] is a tool message"):
        check_valid_conversation(sent)


def test_a_conversation_the_api_refuses_is_caught() -> None:
    with pytest.raises(AssertionError, match=rf"\[{VALID}\] validate_messages"):
        check_valid_conversation([{"role": "tool", "content": "no call id"}])


def test_a_summarized_mid_conversation_instruction_is_caught() -> None:
    sent = [*raw(0, 1), summary(), *raw(10, 11, 12)]
    with pytest.raises(AssertionError, match=rf"\[{INSTRUCTIONS}\] raw\[6\] \(developer"):
        check_request(RAW, sent)


def test_a_dropped_latest_user_message_is_caught() -> None:
    sent = [*raw(0, 1), summary(), *raw(6, 7, 8, 9), summary(), *raw(11, 12)]
    placed = place_messages(RAW, sent)
    with pytest.raises(AssertionError, match=rf"\[{LATEST_USER}\] raw\[10\]"):
        check_latest_user_kept(RAW, placed)


def test_a_cut_output_in_the_final_unit_is_caught_unless_the_unit_is_over_the_window() -> None:
    sent = [*raw(0, 1), summary(), *raw(6, 7, 8, 9, 10, 11), truncated(12)]
    with pytest.raises(AssertionError, match=rf"\[{FINAL_UNIT}\] raw\[12\] .* was replaced"):
        check_request(RAW, sent)
    check_final_unit_kept(RAW, place_messages(RAW, sent), unit_over_window=True)


def test_a_request_over_the_usable_window_is_caught() -> None:
    check_fits(3_000, context_window=4_000, reserve_output_tokens=1_000)
    with pytest.raises(AssertionError, match=rf"\[{FITS}\] estimated 3001"):
        check_fits(3_001, context_window=4_000, reserve_output_tokens=1_000)


def test_a_fresh_process_sending_otherwise_is_caught() -> None:
    sent = [*raw(0, 1), summary(), *raw(6, 7, 8, 9, 10, 11, 12)]
    check_same_as_fresh(sent, list(sent), estimates=[100], trigger_tokens=2_000)
    other = [*raw(0, 1), summary("another summary"), *raw(6, 7, 8, 9, 10, 11, 12)]
    with pytest.raises(AssertionError, match=rf"\[{FRESH}\] .*first difference at \[2\]"):
        check_same_as_fresh(sent, other, estimates=[100], trigger_tokens=2_000)


def test_a_fresh_process_compacting_again_is_allowed_only_over_the_trigger() -> None:
    check_same_as_fresh(RAW, None, estimates=[1_900, 2_100], trigger_tokens=2_000)
    with pytest.raises(AssertionError, match=rf"\[{FRESH}\] a fresh process would compact"):
        check_same_as_fresh(RAW, None, estimates=[1_900, 2_000], trigger_tokens=2_000)


def test_another_tenants_summary_is_caught() -> None:
    theirs = summary("Summary written for tenant bravo. The earlier work.")
    check_summaries_exclude([*raw(0, 1), theirs], ["tenant alpha"])
    with pytest.raises(AssertionError, match=rf"\[{TENANCY}\] the summary at sent\[2\]"):
        check_summaries_exclude([*raw(0, 1), theirs], ["tenant bravo"])
