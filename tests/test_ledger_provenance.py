"""The fact ledger takes facts only from what the agent and its tools said, never from a summary.

Issue 13 saw a weak model's invention (``amounts``, a word only its previous summary used) come
back in the next ledger under "extracted verbatim from the compacted turns". These tests cover
every way summary text can reach ``extract_facts``: a summary message inside the agent's own
history (a client that keeps the rewritten messages, or an agent such as Claude Code that
compacts by itself), and the earlier slots' ledgers that a later compaction folds in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from context_summarizer import ContextManager
from context_summarizer.core.facts import (
    LEDGER_HEADER,
    extract_facts,
    is_summary_message,
    parse_ledger,
)
from context_summarizer.core.results import SummarizeCall, SummaryOutcome
from context_summarizer.core.summary_request import summary_message
from context_summarizer.loaders.prompts import load_prompt

PROMPTS = Path(__file__).resolve().parent.parent / "prompts"
INVENTED = (
    "The sum of all values in the `amounts` list equals 26936, checked by "
    "`reconcile_amounts()` in src/invented/ledger_math.py (run `make reconcile`)."
)
INVENTED_KEYS = {"amounts", "reconcile_amounts", "src/invented/ledger_math.py", "make reconcile"}


def invent(call: SummarizeCall) -> SummaryOutcome:
    """A weak model's summary: it restates the task and invents facts no turn contains."""
    return SummaryOutcome(text=f"## Task and constraints\nFix the billing bug.\n\n{INVENTED}")


def tool_turn(turn: int) -> list[dict[str, Any]]:
    call_id = f"call_{turn}"
    arguments = json.dumps({"command": f"pytest tests/test_part_{turn}.py"})
    output = "\n".join(
        [
            f"$ pytest tests/test_part_{turn}.py",
            f"src/billing/part_{turn}.py:{turn + 10}: in total",
            f"ERR-{41000 + turn}: ledger out of balance for order {turn}",
            *(f"    line {i} of the captured log for part {turn}" for i in range(25)),
        ]
    )
    return [
        {
            "role": "assistant",
            "content": f"Checking part {turn}.",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "bash", "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def start() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Make tests/test_billing.py pass."},
    ]


def ledgers(messages: list[dict[str, Any]]) -> list[list[str]]:
    """The fact keys of every ledger block in ``messages``."""
    return [
        [fact.key for fact in parse_ledger(m["content"])]
        for m in messages
        if isinstance(m.get("content"), str) and LEDGER_HEADER in m["content"]
    ]


def said(messages: list[dict[str, Any]]) -> set[str]:
    """Every fact key in what the agent and its tools said (summary messages left out)."""
    return {fact.key for fact in extract_facts(messages)}


def test_a_client_keeping_the_rewritten_messages_never_launders_its_summary() -> None:
    context = ContextManager(summarizer=invent, context_window=3_000, max_summary_tokens=200)
    history = start()
    own: list[dict[str, Any]] = list(history)  # what the agent and tools said, nothing else
    compactions = 0
    seen_ledgers: list[list[str]] = []
    for turn in range(40):
        result = context.prepare(history, model="gpt-4o")
        if result.compacted:
            compactions += 1
            seen_ledgers += ledgers(result.messages)
            history = list(result.messages)  # the client continues from what was sent
        new = tool_turn(turn)
        history += new
        own += new
    assert compactions >= 2
    assert seen_ledgers, "no ledger was written"
    for keys in seen_ledgers:
        assert not INVENTED_KEYS & set(keys), keys
        assert set(keys) <= said(own), set(keys) - said(own)


def test_a_client_keeping_its_raw_history_folds_in_only_extracted_facts() -> None:
    context = ContextManager(summarizer=invent, context_window=3_000, max_summary_tokens=200)
    history = start()
    compactions = 0
    seen_ledgers: list[list[str]] = []
    for turn in range(40):
        result = context.prepare(history, model="gpt-4o")
        if result.compacted:
            compactions += 1
            seen_ledgers += ledgers(result.messages)
        history += tool_turn(turn)
    assert compactions >= 2
    # a later compaction folds the earlier slots' ledgers in: still only what was said
    for keys in seen_ledgers:
        assert not INVENTED_KEYS & set(keys), keys
        assert set(keys) <= said(history)


def test_the_engines_summary_message_gives_no_facts() -> None:
    frame = load_prompt("summary_frame")
    ledger = "\n".join([LEDGER_HEADER, "- path: src/real.py", "- error: ERR-41001: out of balance"])
    with_ledger = summary_message(INVENTED, ledger, frame)
    without_ledger = summary_message(INVENTED, "", frame)
    assert is_summary_message(with_ledger) and is_summary_message(without_ledger)
    assert extract_facts([with_ledger]) == []
    assert extract_facts([without_ledger]) == []
    as_parts = {"role": "user", "content": [{"type": "text", "text": with_ledger["content"]}]}
    assert extract_facts([as_parts]) == []


def test_every_shipped_frame_is_recognised() -> None:
    frames = sorted(PROMPTS.glob("*/summary_frame.md"))
    assert frames
    for path in frames:
        frame = path.read_text(encoding="utf-8")
        message = summary_message("Edited `src/x.py`.", "", frame)
        assert is_summary_message(message), path


def test_another_agents_own_compaction_summary_gives_no_facts() -> None:
    continued = {
        "role": "user",
        "content": (
            "This session is being continued from a previous conversation that ran out of "
            "context. The summary below covers the earlier portion of the conversation.\n\n"
            "Summary:\n1. Edited `lib/spotter/annotation.ex` and ran `mix test`."
        ),
    }
    assert is_summary_message(continued)
    assert extract_facts([continued]) == []


def test_only_summaries_are_skipped() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "What does the [Context summary] marker in src/app.py mean?"},
        {"role": "assistant", "content": f"It opens the summary.\n{LEDGER_HEADER} is quoted."},
        {"role": "tool", "tool_call_id": "c", "content": "[Context summary] in src/frame.py"},
    ]
    assert not any(is_summary_message(m) for m in messages[:1])
    assert [(f.kind, f.text) for f in extract_facts(messages)] == [
        ("path", "src/app.py"),
        ("constraint", "What does the [Context summary] marker in src/app.py mean?"),
        ("path", "src/frame.py"),
    ]
