"""``summarizer.reward`` and ``SummaryReward``: a summary's reward from the online gate's checks.

The agreement tests compact real conversations through ``ContextManager`` against the test
upstream (the real openai SDK over HTTP), the summary answers scripted by the weak and careful
responders, and score each recorded attempt with ``reward``: the reward must find the problem
the gate found, and count the share of facts the gate counted.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import context_summarizer
from context_summarizer import ContextManager, SummaryReward, reward
from context_summarizer.core.rewards import BREVITY_WEIGHT, prefix_facts
from context_summarizer.core.summary_records import SummaryRecord
from context_summarizer.loaders.tokenizers import make_counter
from context_summarizer.rewards import with_instruction
from context_summarizer.testing import (
    WEAK_KINDS,
    RoutingResponder,
    TestUpstream,
    WeakKind,
    echo_responder,
    summary_responder,
    weak_summary_responder,
)

from .test_proxy import long_history

MODEL = "gpt-4o-mini"

CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test in src/app/models.py"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"cmd": "pytest tests/test_models.py"}'},
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "FAILED tests/test_models.py::test_save - KeyError: 'owner_id'",
    },
]
GOOD = (
    "## Progress\nRan `pytest tests/test_models.py`: tests/test_models.py::test_save fails with "
    "KeyError: 'owner_id' (FAILED tests/test_models.py::test_save - KeyError: 'owner_id'). "
    "Next: fix the lookup in src/app/models.py."
)
PARTIAL = "## Progress\nOne test in tests/test_models.py fails; the cause is not found yet."


def test_a_summary_naming_more_facts_earns_more_and_one_naming_none_earns_nothing() -> None:
    request = with_instruction(CONVERSATION)
    good, partial = reward(request, GOOD), reward(request, PARTIAL)
    nothing = reward(request, "I will now fix the test as asked by the user.")
    assert good.problem is None and good.facts == 1.0 and good.facts_total >= 3
    assert 0.0 < partial.reward < good.reward <= 1.0
    assert partial.facts_named < good.facts_named and partial.missed
    assert nothing.problem is None and nothing.facts == 0.0 and nothing.reward == 0.0
    # The parts make the number: facts x (1 - w + w x brevity).
    expected = good.facts * (1 - BREVITY_WEIGHT + BREVITY_WEIGHT * good.brevity)
    assert good.reward == pytest.approx(expected)
    assert good.brevity == pytest.approx(1 - good.tokens / good.cap)


def test_among_summaries_naming_the_same_facts_the_shorter_earns_more() -> None:
    request = with_instruction(CONVERSATION)
    steps = ("read", "checked", "compared", "noted", "reviewed", "listed")
    padded = (
        GOOD
        + "\n\n"
        + " ".join(
            f"Step {n}: the agent {steps[n % 6]} part {n * 7} of the module." for n in range(40)
        )
    )
    short, long = reward(request, GOOD, cap=800), reward(request, padded, cap=800)
    assert short.facts == long.facts == 1.0
    assert long.tokens > short.tokens and short.reward > long.reward
    assert long.reward >= 1.0 - BREVITY_WEIGHT  # length never costs more than its weight


@pytest.mark.parametrize(
    ("summary", "options", "problem"),
    [
        (GOOD, {"finish_reason": "length"}, "cut_off"),
        (GOOD, {"cap": 20}, "cut_off"),
        ("Edited src/app/views.py and lib/payments/charge.py; ran the suite.", {}, "invented"),
        ("ok", {}, "empty"),
        ('{"summary": "tests fail", "files": ["src/app/models.py"]}', {}, "wrong_format"),
    ],
)
def test_a_summary_the_gate_would_refuse_earns_zero_and_says_why(
    summary: str, options: dict[str, Any], problem: str
) -> None:
    scored = reward(with_instruction(CONVERSATION), summary, **options)
    assert scored.problem == problem and scored.reward == 0.0
    assert scored.problem_text and not scored.usable
    if problem == "invented":
        assert "src/app/views.py" in scored.invented


def test_an_echo_of_the_instruction_earns_zero() -> None:
    request = with_instruction(CONVERSATION)
    echoed = request[-1]["content"]
    scored = reward(request, echoed)
    assert scored.problem == "echo" and scored.reward == 0.0


def test_given_facts_replace_the_extracted_ones() -> None:
    request = with_instruction(CONVERSATION)
    facts = [{"kind": "path", "text": "src/app/models.py"}, {"kind": "path", "text": "setup.cfg"}]
    scored = reward(request, GOOD, facts=facts)
    assert scored.facts_total == 2 and scored.facts_named == 1 and scored.missed == ["setup.cfg"]


def test_the_default_facts_are_the_runs_not_the_system_prompt_or_the_task() -> None:
    conversation = [
        {"role": "system", "content": "Always read docs/STYLE.md first."},
        {"role": "user", "content": "Fix src/app/models.py"},
        *CONVERSATION[2:],
    ]
    counter = make_counter("", tokenizer="o200k_base")
    texts = [
        f.text
        for f in prefix_facts(conversation, ledger_tokens=600, count_tokens=counter.count_text)
    ]
    assert "docs/STYLE.md" not in texts and "tests/test_models.py::test_save" in texts


@pytest.fixture(scope="module")
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream() as server:
        yield server


def _records(upstream: TestUpstream, messages: list[dict[str, Any]]) -> list[SummaryRecord]:
    client = openai.OpenAI(base_url=upstream.base_url, api_key="sk-test-rewards", max_retries=0)
    manager = ContextManager(client=client, context_window=8_000, max_summary_tokens=500)
    result = manager.prepare(messages, model=MODEL, force="manual")
    assert result.compacted
    return result.summary_records


@pytest.mark.parametrize("kind", WEAK_KINDS)
def test_the_reward_finds_the_problem_the_online_gate_found(
    upstream: TestUpstream, kind: WeakKind
) -> None:
    upstream.responder = RoutingResponder(echo_responder, weak_summary_responder(kind))
    (record,) = _records(upstream, long_history(9, size=400, task=f"Fix the {kind} bug."))
    assert record.verdict == "repaired"
    first, strict = record.attempts
    assert first.problem == kind and strict.problem is None
    for attempt in (first, strict):
        scored = reward(
            attempt.request["messages"],
            attempt.summary,
            facts=record.facts,
            cap=record.cap,
            finish_reason=attempt.finish_reason,
            model=MODEL,
        )
        assert scored.problem == attempt.problem, kind
        assert (scored.reward == 0.0) == (attempt.problem is not None)
        if attempt.summary is not None and attempt.score is not None:
            assert scored.facts == pytest.approx(attempt.score)  # the gate's own fact score
    # The summary that stood is the strict retry's, and it earns more than the refused one.
    assert record.used is strict


def test_a_careful_summary_is_accepted_and_scored_alike(upstream: TestUpstream) -> None:
    upstream.responder = RoutingResponder(echo_responder, summary_responder)
    (record,) = _records(upstream, long_history(9, size=400, task="Fix the careful bug."))
    assert record.verdict == "accepted" and len(record.attempts) == 1
    (attempt,) = record.attempts
    assert attempt.request["messages"][-1]["role"] == "user"  # the instruction, last
    scored = reward(attempt.request["messages"], attempt.summary, facts=record.facts, model=MODEL)
    assert scored.problem is None and scored.facts == pytest.approx(attempt.score)
    assert scored.reward > 0.5


def test_summary_reward_has_the_call_shape_trainers_use() -> None:
    reward_fn = SummaryReward()
    assert reward_fn.__name__ == "summary_reward"
    parameters = inspect.signature(reward_fn).parameters
    assert list(parameters)[:2] == ["prompts", "completions"]
    assert parameters["columns"].kind is inspect.Parameter.VAR_KEYWORD
    request = with_instruction(CONVERSATION)
    # TRL calls reward functions with keywords, its own extras included.
    conversational = reward_fn(
        prompts=[request, request, request],
        completions=[
            [{"role": "assistant", "content": GOOD}],
            [{"role": "assistant", "content": PARTIAL}],
            [{"role": "assistant", "content": "Edited src/nowhere/ghost.py."}],
        ],
        completion_ids=[[1], [2], [3]],
        trainer_state=None,
    )
    assert all(isinstance(value, float) for value in conversational)
    assert conversational[0] > conversational[1] > conversational[2] == 0.0
    assert [r.reward for r in reward_fn.last] == conversational
    assert conversational[0] == reward(request, GOOD).reward
    standard = reward_fn(["Ran pytest tests/test_models.py: KeyError: 'owner_id'"], ["ok then"])
    assert standard == [0.0]


def test_summary_reward_reads_the_facts_and_cap_columns() -> None:
    reward_fn = SummaryReward()
    request = with_instruction(CONVERSATION)
    facts = [
        [{"kind": "path", "text": "setup.cfg"}],
        [{"kind": "path", "text": "src/app/models.py"}],
    ]
    values = reward_fn([request, request], [GOOD, GOOD], facts=facts, cap=[2000, 30])
    assert values[0] == 0.0 and reward_fn.last[0].facts == 0.0  # names none of its facts
    assert reward_fn.last[1].problem == "cut_off"  # over a cap of 30
    with pytest.raises(ValueError, match="one value per completion"):
        reward_fn([request, request], [GOOD, GOOD], facts=facts[:1])
    with pytest.raises(ValueError, match="2 prompts but 1 completions"):
        reward_fn([request, request], [GOOD])


def test_summary_reward_extracts_a_prompts_facts_once_for_all_its_completions() -> None:
    reward_fn = SummaryReward(cache_size=2)
    request = with_instruction(CONVERSATION)
    reward_fn([request] * 4, [GOOD, PARTIAL, GOOD, PARTIAL])
    assert len(reward_fn._facts) == 1
    other = with_instruction([*CONVERSATION[:2]])
    third = with_instruction([CONVERSATION[0], {"role": "user", "content": "Fix setup.cfg"}])
    reward_fn([other, third], [GOOD, GOOD])
    assert len(reward_fn._facts) == 2  # bounded: the oldest prompt went


def test_reward_is_exported_from_the_package() -> None:
    assert context_summarizer.reward is reward
    assert "reward" in context_summarizer.__all__ and "SummaryReward" in context_summarizer.__all__
    assert reward.__doc__ and SummaryReward.__doc__


def test_the_docs_example_runs_and_scores_a_good_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    page = (Path(__file__).parent.parent / "docs" / "training.md").read_text(encoding="utf-8")
    example = re.findall(r"```python\n(.*?)```", page, re.DOTALL)[0]
    exec(compile(example, "docs/training.md", "exec"), {})
    value, named, total, problem = capsys.readouterr().out.split()
    assert float(value) > 0.9 and named == total != "0" and problem == "None"


def test_a_compaction_whose_summaries_all_failed_still_records_its_answers(
    upstream: TestUpstream,
) -> None:
    # Over the trigger, under the window: both answers are refused, the request goes out as it
    # is and no checkpoint is written; the refused answers are still there to learn from.
    upstream.responder = RoutingResponder(
        echo_responder, weak_summary_responder("task_only", repair=False)
    )
    client = openai.OpenAI(base_url=upstream.base_url, api_key="sk-test-rewards", max_retries=0)
    manager = ContextManager(client=client, context_window=16_000, max_summary_tokens=500)
    messages = long_history(11, size=500, task="Fix the held-back bug.")  # 10,112 tokens
    result = manager.prepare(messages, model=MODEL)
    assert result.held_back is not None and not result.rewritten
    (record,) = result.summary_records
    assert record.verdict == "replaced" and record.checkpoint_id == "" and record.used is None
    assert [a.problem for a in record.attempts] == ["task_only", "task_only"]
    for attempt in record.attempts:
        scored = reward(attempt.request["messages"], attempt.summary, facts=record.facts)
        assert scored.problem == "task_only" and scored.reward == 0.0
