"""``summarizer export --format sft|preference|reward``: what a recording proxy's compactions
become as training data, loaded as a trainer would load it, and read back by the evaluator.

A real proxy (``--record``) in front of the test upstream, driven by the real openai SDK: one
session whose first summary is an echo of the instruction (repaired by the strict retry) and
one whose summary is accepted at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from typer.testing import CliRunner

from context_summarizer import SummaryReward
from context_summarizer.cli.main import app
from context_summarizer.core.activity import redact
from context_summarizer.testing import (
    RoutingResponder,
    TestUpstream,
    echo_responder,
    summary_responder,
    weak_summary_responder,
)

from .conftest import ProxyFactory
from .test_proxy import long_history

MODEL = "gpt-4o-mini"
KEY = "sk-test-training-0123456789abcdef"
PLANTED = "sk-live-" + "t" * 32
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read one file.",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
        },
    }
]


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=8_000) as server:
        yield server


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def _session(proxy: Any, upstream: TestUpstream, responder: Any, task: str) -> list[Any]:
    """One request over the window: it compacts. Returns the summary requests received."""
    upstream.responder = RoutingResponder(echo_responder, responder)
    before = len(upstream.requests)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
    messages = long_history(9, size=400, task=f"{task} The deploy key is {PLANTED}.")
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS
    )
    assert raw.headers["x-summarizer-compacted"] == "true"
    return [
        r.body for r in upstream.requests[before:] if r.body and r.body.get("tool_choice") == "none"
    ]


@pytest.fixture
def recorded(start_proxy: ProxyFactory, upstream: TestUpstream, tmp_path: Path) -> dict[str, Any]:
    proxy = start_proxy(record=True, context_window=8_000, max_summary_tokens=500)
    repaired = _session(proxy, upstream, weak_summary_responder("echo"), "Fix the echo bug.")
    accepted = _session(proxy, upstream, summary_responder, "Fix the careful bug.")
    time.sleep(0.5)  # the activity log is written after each answer is sent
    assert len(repaired) == 2 and len(accepted) == 1
    return {"db": tmp_path / "checkpoints.db", "repaired": repaired, "accepted": accepted}


def _export(recorded: dict[str, Any], tmp_path: Path, fmt: str, *extra: str) -> list[Any]:
    out = tmp_path / f"{fmt}{'-'.join(extra)}.jsonl"
    result = run(
        "export",
        "--all",
        "--format",
        fmt,
        "--store",
        str(recorded["db"]),
        "--out",
        str(out),
        *extra,
    )
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert KEY not in text and PLANTED not in text
    return [json.loads(line) for line in text.splitlines()]


ROLES = {"system", "developer", "user", "assistant", "tool"}


def _check_chat_schema(line: dict[str, Any]) -> None:
    """A line in the chat fine-tuning formats: each conversation a list of messages with a
    known role, each answer exactly one assistant message with text."""
    conversations = [
        line.get("messages"),
        line.get("prompt"),
        (line.get("input") or {}).get("messages"),
    ]
    answers = [
        line.get(k)
        for k in ("completion", "chosen", "rejected", "preferred_output", "non_preferred_output")
    ]
    for conversation in filter(None, conversations):
        assert isinstance(conversation, list) and conversation
        assert all(isinstance(m, dict) and m.get("role") in ROLES for m in conversation)
    for answer in filter(None, answers):
        assert isinstance(answer, list) and len(answer) == 1
        assert answer[0]["role"] == "assistant" and isinstance(answer[0]["content"], str)
    if "messages" in line:
        assert line["messages"][-1]["role"] == "assistant"


def _load_as_a_trainer_would(path: Path, tmp_path: Path) -> tuple[int, set[str]]:
    """Rows and columns of ``path`` as Hugging Face ``datasets`` loads it (the schema checked
    line by line all the same, and alone where ``datasets`` is not installed)."""
    lines = [json.loads(text) for text in path.read_text().splitlines()]
    for line in lines:
        _check_chat_schema(line)
    try:
        import datasets
    except ImportError:
        return len(lines), {key for line in lines for key in line}
    loaded = datasets.load_dataset(
        "json", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf")
    )
    return loaded.num_rows, set(loaded.column_names)


def test_sft_pairs_each_first_summary_request_as_sent_with_the_summary_used(
    recorded: dict[str, Any], tmp_path: Path
) -> None:
    lines = _export(recorded, tmp_path, "sft")
    assert len(lines) == 2
    by_task = {line["messages"][1]["content"].split(".")[0]: line for line in lines}
    repaired, accepted = by_task["Fix the echo bug"], by_task["Fix the careful bug"]
    for line, sent in ((repaired, recorded["repaired"][0]), (accepted, recorded["accepted"][0])):
        # The prompt is the first summary request exactly as the upstream received it (with
        # the keys redacted), the answer the summary that stood.
        assert line["messages"][:-1] == redact(sent["messages"], [KEY])
        assert line["messages"][-1]["role"] == "assistant"
        assert line["tools"] == TOOLS
        assert line["metadata"]["source"] == "summarizer export"
    assert repaired["metadata"]["verdict"] == "repaired"
    assert repaired["metadata"]["attempt"] == "strict"
    assert accepted["metadata"]["verdict"] == "accepted"
    rows, columns = _load_as_a_trainer_would(tmp_path / "sft.jsonl", tmp_path)
    assert rows == 2 and {"messages", "tools", "metadata"} <= columns
    trl = _export(recorded, tmp_path, "sft", "--style", "trl", "--no-metadata")
    assert all(set(line) == {"prompt", "completion", "tools"} for line in trl)


def test_preference_chooses_the_repaired_summary_over_the_echo(
    recorded: dict[str, Any], tmp_path: Path
) -> None:
    (pair,) = _export(recorded, tmp_path, "preference")
    assert pair["input"]["messages"] == redact(recorded["repaired"][0]["messages"], [KEY])
    assert pair["input"]["tools"] == TOOLS and "tools" not in pair
    rejected = pair["non_preferred_output"][0]["content"]
    assert rejected.strip() and pair["preferred_output"][0]["content"] != rejected
    meta = pair["metadata"]
    assert meta["chosen"]["attempt"] == "strict" and meta["rejected"]["attempt"] == "first"
    assert meta["rejected"]["parts"]["problem"] == "echo" and meta["rejected"]["reward"] == 0.0
    assert meta["chosen"]["reward"] > 0.5
    rows, columns = _load_as_a_trainer_would(tmp_path / "preference.jsonl", tmp_path)
    assert rows == 1 and {"input", "preferred_output", "non_preferred_output"} <= columns
    (trl,) = _export(recorded, tmp_path, "preference", "--style", "trl")
    assert trl["prompt"] == pair["input"]["messages"]
    assert trl["chosen"] == pair["preferred_output"]
    assert trl["rejected"] == pair["non_preferred_output"]


def test_reward_lines_score_every_answer_as_a_trainer_recomputes_it(
    recorded: dict[str, Any], tmp_path: Path
) -> None:
    lines = _export(recorded, tmp_path, "reward")
    assert len(lines) == 3  # the echo, its repair, and the accepted summary
    echo = next(line for line in lines if line["metadata"]["parts"]["problem"] == "echo")
    assert echo["reward"] == 0.0 and echo["label"] is False
    # Each prompt is its own request as sent: the strict retry's says what was wrong.
    strict = next(line for line in lines if line["metadata"]["attempt"] == "strict")
    assert strict["prompt"] == redact(recorded["repaired"][1]["messages"], [KEY])
    assert strict["label"] is True and strict["reward"] > 0.5
    reward_fn = SummaryReward()
    recomputed = reward_fn(
        prompts=[line["prompt"] for line in lines],
        completions=[line["completion"] for line in lines],
        facts=[line["facts"] for line in lines],
        cap=[line["cap"] for line in lines],
    )
    assert recomputed == pytest.approx([line["reward"] for line in lines], abs=0.01)
    rows, columns = _load_as_a_trainer_would(tmp_path / "reward.jsonl", tmp_path)
    assert rows == 3 and {"prompt", "completion", "reward", "label"} <= columns


def test_an_export_round_trips_through_the_evaluator(
    recorded: dict[str, Any], tmp_path: Path
) -> None:
    lines = _export(recorded, tmp_path, "reward")
    scored = run(
        "eval",
        str(tmp_path / "reward.jsonl"),
        "-s",
        "given",
        "--out",
        str(tmp_path / "ev"),
        "--no-progress",
    )
    assert scored.exit_code == 0, scored.output
    assert "as summarizer training data (3 cases)" in scored.output
    rows = [json.loads(x) for x in (tmp_path / "ev" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    for row in rows:
        number = int(row["case_id"].rsplit("#", 1)[1])
        line = lines[number - 1]
        assert row["gold"]["total"] == len(line["facts"])
        # The evaluator's gold recall of each answer is the share of facts its reward counted.
        assert row["gold"]["recall"] == pytest.approx(line["metadata"]["parts"]["facts"])
    _export(recorded, tmp_path, "preference")
    pairs = str(tmp_path / "preference.jsonl")
    paired = run("eval", pairs, "-s", "given", "--out", str(tmp_path / "ev2"), "--no-progress")
    assert paired.exit_code == 0, paired.output
    recall = {
        json.loads(x)["variant"]: json.loads(x)["gold"]["recall"]
        for x in (tmp_path / "ev2" / "results.jsonl").read_text().splitlines()
    }
    assert recall["chosen"] > recall["rejected"]


def test_export_says_what_it_cannot_do(
    start_proxy: ProxyFactory, upstream: TestUpstream, tmp_path: Path
) -> None:
    proxy = start_proxy(context_window=8_000, max_summary_tokens=500)  # no --record
    _session(proxy, upstream, summary_responder, "Fix the unrecorded bug.")
    time.sleep(0.5)
    db = str(tmp_path / "checkpoints.db")
    nothing = run("export", "--all", "--format", "sft", "--store", db, "--out", str(tmp_path / "x"))
    assert nothing.exit_code == 1 and "--record" in nothing.output
    assert not (tmp_path / "x").exists()
    assert run("export", "--format", "sft", "--store", db).exit_code == 2
    mixed = run("export", "--eval", str(tmp_path), "--store", db)
    assert mixed.exit_code == 2 and "--format" in mixed.output


def test_min_reward_leaves_out_weak_examples_and_says_so(
    recorded: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "strict.jsonl"
    result = run(
        "export", "--all", "--format", "sft", "--min-reward", "1.0",
        "--store", str(recorded["db"]), "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 1 and "below --min-reward" in result.output


def test_an_evaluator_runs_summaries_and_candidates_export_as_training_data(
    tmp_path: Path,
) -> None:
    from .eval_responders import EvalResponder, seeded_summary_responder
    from .test_eval_candidates import dataset, model_args
    from .test_eval_runner import invoke

    out = tmp_path / "run"
    with TestUpstream(responder=EvalResponder(summarize=seeded_summary_responder)) as server:
        result = invoke(
            dataset(tmp_path, count=2),
            *model_args(server, out, "-s", "self-summary", "--candidates", "3"),
        )
    assert result.exit_code == 0, result.output
    sft = tmp_path / "sft.jsonl"
    exported = run("export", "--eval", str(out), "--format", "sft", "--out", str(sft))
    assert exported.exit_code == 0, exported.output
    lines = [json.loads(x) for x in sft.read_text().splitlines()]
    assert len(lines) == 2  # one self-summary row per case; candidates are never "used"
    assert {line["metadata"]["from"] for line in lines} == {"eval"}
    assert all(line["metadata"]["id"].endswith("/self-summary/0") for line in lines)

    pairs = tmp_path / "pairs.jsonl"
    assert run("export", "--eval", str(out), "--format", "preference", "--style", "trl",
               "--out", str(pairs)).exit_code == 0  # fmt: skip
    found = [json.loads(x) for x in pairs.read_text().splitlines()]
    assert len(found) == 2 and {p["metadata"]["from"] for p in found} == {"candidates"}
    for pair in found:
        # The best and the worst of the three candidates, for their one request.
        chosen, rejected = pair["metadata"]["chosen"], pair["metadata"]["rejected"]
        assert (chosen["attempt"], rejected["attempt"]) == ("candidate-0", "candidate-2")
        assert chosen["reward"] > rejected["reward"]
        assert len(pair["chosen"][0]["content"]) > len(pair["rejected"][0]["content"])

    scored = tmp_path / "scored.jsonl"
    assert (
        run("export", "--eval", str(out), "--format", "reward", "--out", str(scored)).exit_code == 0
    )
    rows = [json.loads(x) for x in scored.read_text().splitlines()]
    assert len(rows) == 2 + 2 * 3  # each row's one answer, and each case's three candidates
    # Evaluator rows and candidates in one file load as one table.
    assert _load_as_a_trainer_would(scored, tmp_path)[0] == len(rows)
    back = run("eval", str(scored), "-s", "given", "--out", str(tmp_path / "ev"), "--no-progress")
    assert back.exit_code == 0, back.output
    recall = [json.loads(x) for x in (tmp_path / "ev" / "results.jsonl").read_text().splitlines()]
    for row in recall:
        line = rows[int(row["case_id"].rsplit("#", 1)[1]) - 1]
        assert row["gold"]["recall"] == pytest.approx(line["metadata"]["parts"]["facts"])


def test_the_default_file_is_named_after_the_format(
    recorded: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = run("export", "--all", "--format", "reward", "--store", str(recorded["db"]))
    assert result.exit_code == 0 and "to reward.jsonl" in result.output
    assert (tmp_path / "reward.jsonl").read_text().count("\n") == 3
