"""The recommendation that ends every eval report: the proxy policy ``RULE`` picks (never a
baseline), its ratios, and a ``[[models]]`` block the proxy's own config-file loader accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import pytest

from context_summarizer.core.errors import ConfigurationError
from context_summarizer.core.results import Policy
from context_summarizer.evaluation.dataset import write_dataset
from context_summarizer.evaluation.metrics import aggregate
from context_summarizer.evaluation.recommend import (
    MARGIN,
    PROXY_POLICIES,
    RULE,
    is_policy,
    needs_model,
    recommend,
)
from context_summarizer.evaluation.records import FactRecall, ResultRow, RunConfig
from context_summarizer.evaluation.report_sections import choice_table
from context_summarizer.evaluation.strategies import STRATEGIES
from context_summarizer.proxy.config_file import read_config_file
from context_summarizer.proxy.settings import Settings, declared

from .test_eval_runner import invoke
from .test_eval_strategies import make_case

CONFIG = RunConfig(
    budget=0.3,
    context_window=None,
    model=None,
    probes=False,
    prompt_version="v2",
    prompt_digest="0" * 64,
    datasets=["1" * 64],
)


def row(
    strategy: str, recall: float, tokens: int = 300, case: str = "a", **update: object
) -> ResultRow:
    """A successful row of ``strategy`` within a 300-token budget (1,000 tokens before)."""
    base = ResultRow(
        case_id=case,
        strategy=strategy,
        status="ok",
        agent_model="gpt-4o",
        tokens_before=1000,
        budget_tokens=300,
        tokens_after=tokens,
        met_budget=tokens <= 300,
        compression_ratio=tokens / 1000,
        gold=FactRecall(total=100, kept=round(recall * 100), recall=recall),
    )
    return base.model_copy(update=update)


def chosen(rows: list[ResultRow], config: RunConfig = CONFIG) -> str | None:
    return recommend(aggregate(rows), config).policy


def test_every_strategy_is_a_policy_or_a_baseline_and_says_what_it_needs() -> None:
    assert [name for name in STRATEGIES if is_policy(name)] == [
        "self-summary",
        "hybrid",
        "masking",
        "ledger-only",
    ]
    assert sorted(name for name in STRATEGIES if not is_policy(name)) == [
        "from-scratch",
        "given",
        "observation-masking",
        "self-summary-no-ledger",
        "truncate",
    ]
    assert set(PROXY_POLICIES) <= set(STRATEGIES)
    assert is_policy("masking") and not is_policy("given:claude-code")
    assert needs_model("hybrid") and needs_model("from-scratch")
    assert not needs_model("masking") and not needs_model("given:claude-code")


def test_the_best_gold_recall_among_policies_wins_and_a_baseline_never_does() -> None:
    rows = [
        row("truncate", 0.99),
        row("given", 1.0, tokens=30, variant="claude-code"),
        row("from-scratch", 1.0),
        row("self-summary-no-ledger", 1.0),
        row("masking", 0.70),
        row("ledger-only", 0.80),
        row("self-summary", 0.90),
    ]
    recommendation = recommend(aggregate(rows), CONFIG)
    assert recommendation.policy == "self-summary"
    assert recommendation.reason.startswith(
        "self-summary kept 90.0% of the gold facts in 300 tokens (0.30 of the tokens before), "
        "the best gold recall of the 3 proxy policies"
    )
    assert recommendation.reason.endswith(
        "the 3 proxy policies that kept every case within the budget; next: ledger-only, 80.0%."
    )
    headers, lines, _ = choice_table(aggregate(rows), recommendation)
    standing = {line[0]: line[headers.index("standing")] for line in lines}
    assert standing["self-summary"] == "recommended"
    assert standing["masking"] == standing["ledger-only"] == "compared"
    for baseline in ("truncate", "given:claude-code", "from-scratch", "self-summary-no-ledger"):
        assert standing[baseline] == "never recommended"
    needs = {line[0]: line[headers.index("needs")] for line in lines}
    assert needs["self-summary"] == "a model" and needs["masking"] == "nothing"
    assert {line[0]: line[1] for line in lines}["truncate"] == "baseline"
    # recall per 1k tokens after: a tenth of the budget's tokens, ten times the rate
    per_1k = {line[0]: line[headers.index("gold recall per 1k tokens")] for line in lines}
    assert per_1k["given:claude-code"] == "3333.3%" and per_1k["self-summary"] == "300.0%"


def test_only_baselines_or_policies_with_errors_recommend_nothing_and_say_why() -> None:
    only_baselines = recommend(aggregate([row("truncate", 1.0)]), CONFIG)
    assert only_baselines.policy is None and only_baselines.block is None
    assert only_baselines.reason.startswith("No proxy policy was evaluated; run with -s ")
    assert only_baselines.lines()[0] == "Recommendation: none."

    failed = row("masking", 0.9).model_copy(update={"status": "error", "gold": None})
    none = recommend(aggregate([row("truncate", 1.0), failed]), CONFIG)
    assert none.policy is None
    assert none.reason == "No proxy policy can be compared (masking: 1 error (run again to retry))."


def test_errors_rule_a_policy_out_and_so_does_missing_the_budget_more_often() -> None:
    rows = [
        row("ledger-only", 1.0, case="a"),
        row("ledger-only", 1.0, case="b").model_copy(update={"status": "error", "gold": None}),
        row("hybrid", 0.95, case="a", tokens=350),  # over budget
        row("hybrid", 0.95, case="b"),
        row("masking", 0.6, case="a"),
        row("masking", 0.6, case="b"),
    ]
    recommendation = recommend(aggregate(rows), CONFIG)
    assert recommendation.policy == "masking"
    assert recommendation.reason.endswith(
        "Not compared: ledger-only: 1 error (run again to retry); hybrid: 1 over budget."
    )
    headers, lines, _ = choice_table(aggregate(rows), recommendation)
    standing = {line[0]: line[headers.index("standing")] for line in lines}
    assert standing == {
        "ledger-only": "not compared: 1 error (run again to retry)",
        "hybrid": "not compared: 1 over budget",
        "masking": "recommended",
    }


def test_when_no_policy_fits_every_case_those_missing_it_least_compete() -> None:
    infeasible = {"status": "infeasible", "tokens_after": None, "gold": None, "met_budget": False}
    rows = [
        row("masking", 0.7, case="a"),
        row("masking", 0.7, case="b", tokens=350),  # over budget
        row("ledger-only", 0.9, case="a"),
        row("ledger-only", 0.9, case="b").model_copy(update=infeasible),
        row("self-summary", 0.99, case="a", tokens=350),
        row("self-summary", 0.99, case="b", tokens=350),
    ]
    recommendation = recommend(aggregate(rows), CONFIG)
    assert recommendation.policy == "ledger-only"
    assert (
        "the best gold recall of the 2 proxy policies that missed the budget on the fewest cases "
        "(1 each; ledger-only: 1 infeasible at this budget); next: masking, 70.0%. "
    ) in recommendation.reason
    assert recommendation.reason.endswith("Not compared: self-summary: 2 over budget.")
    headers, lines, _ = choice_table(aggregate(rows), recommendation)
    standing = {line[0]: line[headers.index("standing")] for line in lines}
    assert standing["masking"] == "compared (1 over budget)"


def test_a_near_tie_goes_to_the_policy_needing_no_model_then_to_fewer_tokens() -> None:
    within = 0.9 - MARGIN + 0.005
    rows = [row("hybrid", 0.9), row("masking", within, tokens=290)]
    recommendation = recommend(aggregate(rows), CONFIG)
    assert recommendation.policy == "masking"
    assert "within 2 points of hybrid's 90.0%" in recommendation.reason
    assert "needs no model, so it wins the near-tie" in recommendation.reason
    # outside the margin the model policy's better recall wins
    assert chosen([row("hybrid", 0.9), row("masking", 0.9 - MARGIN - 0.005)]) == "hybrid"
    # two policies needing no model: the fewer tokens after
    assert chosen([row("masking", 0.9, tokens=280), row("ledger-only", 0.91)]) == "masking"
    assert chosen([row("masking", 0.9, tokens=300), row("ledger-only", 0.91)]) == "ledger-only"


@pytest.mark.parametrize(
    ("budget", "window", "trigger", "target"),
    [(0.3, None, 0.8, 0.24), (0.5, None, 0.8, 0.4), (0.3, 128_000, 0.8, 0.3)],
)
def test_the_ratios_follow_from_the_budget(
    budget: float, window: int | None, trigger: float, target: float
) -> None:
    config = CONFIG.model_copy(update={"budget": budget, "context_window": window})
    recommendation = recommend(aggregate([row("masking", 0.9)]), config)
    assert (recommendation.trigger_ratio, recommendation.target_ratio) == (trigger, target)
    assert recommendation.flags == (
        f"--policy masking --trigger-ratio {trigger:g} --target-ratio {target:g}"
    )
    assert recommendation.ratios is not None and f"target_ratio {target:g}" in recommendation.ratios


@pytest.mark.parametrize("policy", PROXY_POLICIES)
def test_the_models_block_loads_through_the_proxys_config_file_loader(
    tmp_path: Path, policy: str
) -> None:
    config = CONFIG.model_copy(
        update={
            "model": "gpt-4.1-mini",
            "context_window": 200_000,
            "max_summary_tokens": 512,
            "summary_cap_field": "max_tokens",
        }
    )
    recommendation = recommend(aggregate([row(policy, 0.9)]), config)
    assert recommendation.policy == policy and recommendation.block is not None
    path = tmp_path / "summarizer.toml"
    path.write_text(recommendation.block + "\n")

    (entry,) = read_config_file(path, environ={}, settings=declared())["models"]
    expected = {
        "name": "gpt-4.1-mini",
        "policy": policy,
        "trigger_ratio": 0.8,
        "target_ratio": 0.3,
        "context_window": 200_000,
    }
    if needs_model(policy):  # the summary cap the run used matters only where a model writes
        expected |= {"max_summary_tokens": 512, "summary_cap_field": "max_tokens"}
    assert entry == expected

    if policy not in get_args(Policy):  # another change adds the model-free policies
        with pytest.raises(ConfigurationError, match=r"models\[0\]\.policy"):
            Settings.from_env({}, config_file=path)
        assert recommendation.note is not None and "does not accept" in recommendation.note
        return
    settings = Settings.from_env({}, config_file=path)
    (model,) = settings.models
    compaction = model.compaction(settings.compaction)
    assert (compaction.policy, compaction.trigger_ratio, compaction.target_ratio) == (
        policy,
        0.8,
        0.3,
    )
    assert compaction.context_window == 200_000
    assert recommendation.note is None


def test_without_a_model_the_block_names_every_model(tmp_path: Path) -> None:
    recommendation = recommend(aggregate([row("self-summary", 0.9)]), CONFIG)
    assert recommendation.block is not None
    path = tmp_path / "summarizer.toml"
    path.write_text(recommendation.block + "\n")
    (entry,) = read_config_file(path, environ={}, settings=declared())["models"]
    # the run's cap was the default: nothing to set; "*" matches any model name
    assert entry == {
        "name": "*",
        "policy": "self-summary",
        "trigger_ratio": 0.8,
        "target_ratio": 0.24,
    }
    assert Settings.from_env({}, config_file=path).models[0].name == "*"


def test_the_terminal_and_the_reports_end_with_the_recommendation(tmp_path: Path) -> None:
    dataset = tmp_path / "cases.jsonl"
    write_dataset([make_case(id=f"case-{i}", exchanges=10 + 2 * i) for i in range(2)], dataset)
    out = tmp_path / "run"
    result = invoke(dataset, "--out", out, "-s", "truncate,masking,ledger-only", "--budget", "0.4")
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    policy = report["recommendation"]["policy"]
    assert policy in ("masking", "ledger-only")
    lines = result.stdout.rstrip("\n").splitlines()
    assert lines[-1] == f"Rule: {RULE}"
    start = lines.index(
        f"Recommendation: --policy {policy} --trigger-ratio 0.8 --target-ratio 0.32 "
        "(needs no model)"
    )
    assert start > lines.index(
        "| strategy | cases | errors | infeasible | within budget "
        "| gold recall | recoverable | extracted recall | after/before | tokens after "
        "| summary tokens | latency (s) |"
    )
    assert "[[models]]" in lines[start:] and f'policy = "{policy}"' in lines[start:]

    markdown = (out / "report.md").read_text()
    last = markdown[markdown.rindex("\n## ") :]
    assert last.startswith("\n## Recommendation\n")
    assert f"**Recommendation: --policy {policy}" in last
    assert "```toml\n[[models]]\n" in last and last.rstrip().endswith(RULE)
    page = (out / "report.html").read_text()
    assert page.rindex("<h2>Recommendation</h2>") > page.rindex("<h2>Notes</h2>")
    assert "<pre><code>[[models]]" in page
