"""Each compaction strategy on small hand-made cases, with real tiktoken counts.

Model strategies get an in-process summary client here (the engine's sans-I/O seam: a function
that takes the request body and returns the outcome); test_eval_runner.py runs them against the
real test upstream through the openai SDK.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from context_summarizer.core.errors import ConfigurationError
from context_summarizer.core.facts import LEDGER_HEADER
from context_summarizer.core.results import SummarizeCall, SummaryOutcome
from context_summarizer.evaluation.compaction import CompactionInput, request_tokens
from context_summarizer.evaluation.dataset import Case
from context_summarizer.evaluation.engine_strategies import render_transcript
from context_summarizer.evaluation.mechanical import mask_tool_outputs
from context_summarizer.evaluation.strategies import (
    MODEL_STRATEGIES,
    OFFLINE_STRATEGIES,
    STRATEGIES,
    resolve_strategies,
)
from context_summarizer.loaders.prompts import load_prompt
from context_summarizer.loaders.tokenizers import make_counter

from .test_engine import assert_valid_conversation

COUNTER = make_counter("gpt-4o")
SYSTEM = {"role": "system", "content": "You are a careful coding agent."}
TASK = {
    "role": "user",
    "content": "Fix the discount bug in src/billing/invoice.py. Keep Python 3.9 compatibility.",
}
LAST = {"role": "user", "content": "Please continue until the tests pass."}


def exchange(i: int, lines: int) -> list[dict[str, Any]]:
    """An assistant tool call reading a file and its output of ``lines`` lines."""
    path = f"src/billing/module_{i}.py"
    body = [f"    value_{j} = compute_{i}({j}) * rate_{j}  # line {j}" for j in range(lines)]
    if i == 1:
        body.insert(3, "KeyError: 'discount_code' raised in src/billing/discounts.py line 88")
        body.insert(5, "NOTE: the staging database is postgres://db.internal:5432/billing")
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
    }
    return [
        {"role": "assistant", "content": f"Reading {path}.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": "\n".join(body)},
    ]


def make_case(exchanges: int = 12, lines: int = 40, **fields: Any) -> Case:
    """System, task, ``exchanges`` tool exchanges (a user note halfway), a reply, a last ask."""
    messages: list[dict[str, Any]] = [SYSTEM, TASK]
    for i in range(exchanges):
        if i == exchanges // 2:
            messages.append({"role": "user", "content": "Note: the service listens on port 8123."})
        messages += exchange(i, lines)
    messages.append({"role": "assistant", "content": "The discount is applied after tax."})
    messages.append(LAST)
    fields.setdefault(
        "facts", [{"id": "err", "text": "KeyError: 'discount_code'", "kind": "error"}]
    )
    return Case(id=fields.pop("id", "case"), messages=messages, model="gpt-4o", **fields)


def job(case: Case, ratio: float = 0.4, **fields: Any) -> CompactionInput:
    before = request_tokens(COUNTER, case.messages, case.tools)
    return CompactionInput(
        case=case,
        budget_tokens=int(before * ratio),
        counter=COUNTER,
        agent_model="gpt-4o",
        **fields,
    )


def assert_keeps_the_essentials(case: Case, messages: list[dict[str, Any]]) -> None:
    """System prompt, task and latest user message kept (the case's own objects), every tool
    call with its result."""
    assert messages[0] is case.messages[0] and messages[0]["content"] == SYSTEM["content"]
    assert messages[1] is case.messages[1] and messages[1]["content"] == TASK["content"]
    assert messages[-1] is case.messages[-1] and messages[-1]["content"] == LAST["content"]
    assert_valid_conversation(messages)


class FakeModel:
    """An in-process summary client that records every request body."""

    def __init__(
        self,
        text: str = "## Task and constraints\nFix the discount bug.\n\n## Current state\n"
        "KeyError: 'discount_code' is still raised; the fix is not written yet.",
    ) -> None:
        self.text = text
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, call: SummarizeCall) -> SummaryOutcome:
        self.bodies.append(call.body)
        return SummaryOutcome(text=self.text, finish_reason="stop")


def test_strategy_names_are_the_public_contract() -> None:
    assert list(STRATEGIES) == [
        "self-summary",
        "self-summary-no-ledger",
        "from-scratch",
        "hybrid",
        "masking",
        "truncate",
        "ledger-only",
        "given",
        "observation-masking",
    ]
    assert set(MODEL_STRATEGIES) == {
        "self-summary",
        "self-summary-no-ledger",
        "from-scratch",
        "hybrid",
    }
    assert set(OFFLINE_STRATEGIES) == {"masking", "truncate", "ledger-only", "given"}
    # The published baseline runs when named, never by default.
    assert "observation-masking" in STRATEGIES and "observation-masking" not in OFFLINE_STRATEGIES


def test_an_unknown_strategy_is_refused_with_the_valid_names() -> None:
    with pytest.raises(ConfigurationError, match=r"'summarise'.*valid strategies: self-summary"):
        resolve_strategies(["truncate", "summarise"])
    assert [s.name for s in resolve_strategies(["truncate", "masking", "truncate"])] == [
        "truncate",
        "masking",
    ]


def test_truncate_drops_the_oldest_units_until_it_fits() -> None:
    case = make_case()
    task = job(case)
    result = STRATEGIES["truncate"].compact(task)
    assert result.met_budget and result.tokens_after <= task.budget_tokens
    assert result.tokens_after == request_tokens(COUNTER, result.messages, None)
    assert_keeps_the_essentials(case, result.messages)
    # What is left of the exchanges is the newest ones, in order, with nothing in between lost.
    kept_calls = [m["tool_calls"][0]["id"] for m in result.messages if m.get("tool_calls")]
    assert kept_calls == [f"call_{i}" for i in range(12 - len(kept_calls), 12)]
    assert 0 < len(kept_calls) < 12
    assert result.compacted and result.summary is None and result.calls == []


def test_masking_is_the_engines_masking_policy_oldest_outputs_first() -> None:
    """``masking`` runs the engine's ``masking`` policy: where masking is enough it sends what
    ``hybrid`` sends (the same masking), with no model at all."""
    case = make_case()
    task = job(case, ratio=0.5)
    result = STRATEGIES["masking"].compact(task)
    assert result.met_budget and result.compacted
    assert result.calls == [] and result.summary is None
    hybrid = STRATEGIES["hybrid"].compact(job(case, ratio=0.5, client=FakeModel()))
    assert hybrid.calls == [] and result.messages == hybrid.messages
    masked_count = int(next(n for n in result.notes if n.startswith("masked=")).split("=")[1])
    assert not any(n.startswith("ledger_only=") for n in result.notes)
    # Every message is still there; the oldest outputs are placeholders, the others verbatim.
    assert len(result.messages) == len(case.messages)
    assert_keeps_the_essentials(case, result.messages)
    outputs = [m["content"] for m in result.messages if m["role"] == "tool"]
    placeholder = load_prompt("masked_output").split("{")[0]
    assert 0 < masked_count < len(outputs) - 3
    assert all(o.startswith(placeholder) for o in outputs[:masked_count])
    assert not any(o.startswith(placeholder) for o in outputs[masked_count:])


def test_masking_falls_back_to_the_fact_ledger_when_masking_everything_is_not_enough() -> None:
    case = make_case(exchanges=30, lines=4)
    task = job(case, ratio=0.4)
    result = STRATEGIES["masking"].compact(task)
    assert result.met_budget and result.calls == [] and result.summary is None
    assert any(n.startswith("masked=") for n in result.notes)
    assert "ledger_only=1" in result.notes
    assert_keeps_the_essentials(case, result.messages)
    inserted = [m for m in result.messages if m["content"].startswith("[Context summary]")]
    (slot,) = inserted
    assert LEDGER_HEADER in slot["content"] and "no model summary" in slot["content"]
    assert "written by you" not in slot["content"]


def test_ledger_only_replaces_the_span_with_the_fact_ledger() -> None:
    case = make_case()
    task = job(case)
    result = STRATEGIES["ledger-only"].compact(task)
    assert result.met_budget and result.calls == [] and result.summary is None
    assert result.notes == ["ledger_only=1"]
    assert_keeps_the_essentials(case, result.messages)
    inserted = result.messages[2]
    assert inserted["role"] == "user" and LEDGER_HEADER in inserted["content"]
    # The engine's ledger-only note, in the frame for text no model wrote: not a failure.
    assert inserted["content"].startswith(load_prompt("mechanical_frame").split("{")[0])
    assert "compacted mechanically, with no model summary" in inserted["content"]
    assert "could not summarize" not in inserted["content"]
    # The error of turn 1 is gone from the kept turns but is in the ledger.
    ledger = inserted["content"].split(LEDGER_HEADER, 1)[1]
    assert "KeyError: 'discount_code' raised in src/billing/discounts.py" in ledger
    assert not any(m is case.messages[5] for m in result.messages)


def test_given_puts_the_summary_after_the_instructions() -> None:
    case = make_case(summaries=[{"name": "mine", "text": "I read modules 0-4.", "covers": 12}])
    strategy = STRATEGIES["given"]
    assert strategy.variants(case) == ["mine"]
    assert strategy.variants(make_case()) == []
    result = strategy.compact(job(case, variant="mine"))
    assert result.messages[0] is case.messages[0]
    assert "I read modules 0-4." in result.messages[1]["content"]
    assert result.messages[2:] == case.messages[12:]
    assert result.summary == "I read modules 0-4."
    assert result.summary_tokens == COUNTER.count_text("I read modules 0-4.")


def test_a_case_within_budget_is_left_alone() -> None:
    case = make_case(exchanges=2)
    for name in ("truncate", "masking", "ledger-only", "self-summary", "from-scratch"):
        result = STRATEGIES[name].compact(job(case, ratio=1.0, client=FakeModel()))
        assert not result.compacted and result.messages == case.messages, name
        assert result.met_budget and result.notes == ["within_budget"]


def test_self_summary_sends_the_live_conversation_plus_the_instruction() -> None:
    case = make_case()
    model = FakeModel()
    task = job(case, client=model)
    result = STRATEGIES["self-summary"].compact(task)
    assert result.met_budget and result.compacted
    (body,) = model.bodies
    sent = body["messages"]
    # the live conversation up to the end of the replaced turns, byte for byte
    assert 2 < len(sent) - 1 < len(case.messages)
    assert sent[:-1] == case.messages[: len(sent) - 1]
    assert sent[-1] == {"role": "user", "content": load_prompt("self_summary")}
    (call,) = result.calls
    assert call.purpose == "summary" and call.model == "gpt-4o"
    instruction = COUNTER.count_message(sent[-1])
    assert call.reusable_prefix_tokens == call.prompt_tokens - instruction
    assert_keeps_the_essentials(case, result.messages)
    inserted = result.messages[2]["content"]
    assert model.text in inserted and LEDGER_HEADER in inserted
    assert result.summary == model.text
    assert result.reusable_prefix_tokens == COUNTER.count_messages([SYSTEM, TASK]) - 3


def test_self_summary_without_ledger_has_no_ledger() -> None:
    case = make_case()
    result = STRATEGIES["self-summary-no-ledger"].compact(job(case, client=FakeModel()))
    assert result.met_budget
    assert LEDGER_HEADER not in result.messages[2]["content"]


def test_from_scratch_replaces_the_span_self_summary_replaces() -> None:
    case = make_case()
    own = STRATEGIES["self-summary"].compact(job(case, client=FakeModel()))
    model = FakeModel("## Task and constraints\nFrom scratch.")
    scratch = STRATEGIES["from-scratch"].compact(job(case, client=model))
    assert scratch.met_budget
    # Same kept prefix, same tail: only the summary message differs.
    assert scratch.messages[:2] == own.messages[:2]
    assert scratch.messages[3:] == own.messages[3:]
    assert "From scratch." in scratch.messages[2]["content"]
    assert LEDGER_HEADER not in scratch.messages[2]["content"]
    (body,) = model.bodies
    assert "tools" not in body
    system, user = body["messages"]
    assert system == {"role": "system", "content": load_prompt("from_scratch_system")}
    span = [m for m in case.messages if not any(m is k for k in own.messages)]
    assert render_transcript(span) in user["content"]
    assert "AI: Reading src/billing/module_0.py.\nread_file(" in user["content"]
    (call,) = scratch.calls
    assert call.purpose == "from-scratch" and call.reusable_prefix_tokens == 0


def test_a_failed_summary_call_is_reported() -> None:
    def broken(call: SummarizeCall) -> SummaryOutcome:
        return SummaryOutcome(error="upstream returned HTTP 500")

    for name in ("self-summary", "from-scratch"):
        result = STRATEGIES[name].compact(job(make_case(), client=broken))
        assert [c.error for c in result.calls] == ["upstream returned HTTP 500"], name
        assert result.failure == "upstream returned HTTP 500", name


def test_model_strategies_need_a_client() -> None:
    with pytest.raises(ValueError, match="needs a model"):
        STRATEGIES["self-summary"].compact(job(make_case()))


MASKED = load_prompt("masked_output").split("{")[0]


def test_hybrid_masks_old_outputs_and_asks_no_model_when_that_fits() -> None:
    case = make_case()
    model = FakeModel()
    result = STRATEGIES["hybrid"].compact(job(case, client=model))
    assert result.met_budget and result.compacted
    assert model.bodies == [] and result.calls == [] and result.summary is None
    assert any(note.startswith("masked=") for note in result.notes)
    assert_keeps_the_essentials(case, result.messages)
    masked = [m for m in result.messages if str(m.get("content")).startswith(MASKED)]
    assert masked and all(m["role"] == "tool" and m["tool_call_id"] for m in masked)
    # The newest turns keep their outputs.
    assert result.messages[-3] is case.messages[-3] and result.messages[-3]["role"] == "tool"


def test_hybrid_asks_the_model_when_masking_is_not_enough() -> None:
    case = make_case()
    model = FakeModel(
        "## Task and constraints\nFix the discount bug in src/billing/invoice.py.\n\n"
        "## Current state\nRead the billing modules; the KeyError 'discount_code' in "
        "src/billing/discounts.py is still open."
    )
    result = STRATEGIES["hybrid"].compact(job(case, ratio=0.2, client=model))
    assert result.met_budget and result.compacted
    assert model.bodies and len(result.calls) == len(model.bodies)
    assert result.summary is not None and "discount_code" in result.summary
    assert any(note.startswith("masked=") for note in result.notes)
    assert_keeps_the_essentials(case, result.messages)


class ScriptedModel(FakeModel):
    """Answers each summary request with the next of ``texts``."""

    def __init__(self, *texts: str) -> None:
        super().__init__()
        self.texts = list(texts)

    def __call__(self, call: SummarizeCall) -> SummaryOutcome:
        self.bodies.append(call.body)
        return SummaryOutcome(text=self.texts.pop(0), finish_reason="stop")


ECHO = load_prompt("self_summary")


@pytest.mark.parametrize(
    ("texts", "verdicts"),
    [
        ((FakeModel().text,), ["accepted"]),
        ((ECHO, FakeModel().text), ["repaired"]),
        ((ECHO, ECHO), ["replaced"]),
    ],
    ids=["accepted", "repaired", "replaced"],
)
def test_a_rows_verdicts_say_what_became_of_the_models_summary(
    texts: tuple[str, ...], verdicts: list[str]
) -> None:
    model = ScriptedModel(*texts)
    result = STRATEGIES["self-summary"].compact(job(make_case(), client=model))
    assert result.verdicts == verdicts
    assert len(model.bodies) == len(texts)
    assert [c.purpose for c in result.calls] == ["summary", "summary-strict"][: len(texts)]


def test_from_scratch_uses_any_summary_that_is_not_empty() -> None:
    used = STRATEGIES["from-scratch"].compact(job(make_case(), client=FakeModel()))
    assert used.verdicts == ["accepted"]
    empty = STRATEGIES["from-scratch"].compact(job(make_case(), client=ScriptedModel("  ")))
    assert empty.verdicts == ["replaced"] and empty.failure == "empty"


@pytest.mark.parametrize("name", ["self-summary", "from-scratch"])
@pytest.mark.parametrize(
    ("field", "key"),
    [("auto", "max_completion_tokens"), ("max_tokens", "max_tokens")],
)
def test_the_summary_cap_reaches_the_summary_request(name: str, field: str, key: str) -> None:
    model = FakeModel()
    task = job(make_case(), client=model, max_summary_tokens=321, summary_cap_field=field)
    STRATEGIES[name].compact(task)
    (body,) = model.bodies
    assert body[key] == 321
    other = "max_tokens" if key == "max_completion_tokens" else "max_completion_tokens"
    assert other not in body


def test_observation_masking_keeps_the_outputs_of_the_largest_number_of_recent_turns() -> None:
    case = make_case()
    task = job(case, ratio=0.5)
    result = STRATEGIES["observation-masking"].compact(task)
    assert result.met_budget
    keep = int(result.notes[0].removeprefix("keep_turns="))
    assert 0 < keep < 13
    assert result.messages == mask_tool_outputs(
        case.messages, keep_turns=keep, counter=COUNTER, version="v1"
    )

    def size(turns: int) -> int:
        masked = mask_tool_outputs(case.messages, keep_turns=turns, counter=COUNTER, version="v1")
        return request_tokens(COUNTER, masked, None)

    assert size(keep) <= task.budget_tokens < size(keep + 1)
    # Every message is still there; the old outputs are placeholders, the recent ones verbatim.
    assert len(result.messages) == len(case.messages)
    assert_keeps_the_essentials(case, result.messages)
    outputs = [m["content"] for m in result.messages if m["role"] == "tool"]
    placeholder = load_prompt("masked_output").split("{")[0]
    # 13 assistant turns: 12 tool calls, then the final reply (which has no output to keep).
    masked = 13 - keep
    assert all(o.startswith(placeholder) for o in outputs[:masked])
    assert not any(o.startswith(placeholder) for o in outputs[masked:])


def test_observation_masking_drops_old_units_when_masking_everything_does_not_fit() -> None:
    case = make_case(exchanges=30, lines=4)
    task = job(case, ratio=0.4)
    result = STRATEGIES["observation-masking"].compact(task)
    assert result.notes[0] == "keep_turns=0"
    assert result.notes[1].startswith("dropped_units=") and result.notes[1] != "dropped_units=0"
    assert result.met_budget
    assert_keeps_the_essentials(case, result.messages)
