"""What compaction keeps on real sessions nobody here wrote: the dev set in ``../shared``.

The dev set is every trajectory in ``../shared/trajectories`` the converters read: the 2 Claude
Code sessions (with the summary Claude Code wrote at its real compaction), the 31 mini-swe-agent
SWE-bench runs, the SWE-agent runs and the first trial of each tau-bench task. A third of it is
**held aside** (``held_aside``: by a hash of the case's id, fixed; never the Claude Code sessions,
which the issue names) and reported on its own, so the ledger's ranking is not judged only on
what it was tuned on. Gold facts are the converters' own (what the run did: files its tool calls
or final patch changed, commands it ran and how they ended, errors its tools reported, the
user's own words), never the fact ledger's extractor.

Every offline strategy compacts each case to each of ``BUDGETS`` of its own tokens (0.1, the issue's, where only
the long sessions leave room for more than their task; 0.3). Precision is judged on
a fixed sample of ledger items by a reader (``ledger_precision.json``: one verdict per item, kept
in the repository so it can be audited); items no verdict covers are listed, not guessed.

    python -m benchmarks.real_sessions [--shared PATH] [--sample-out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from summarizer.core.errors import BudgetExceeded, ConversionError
from summarizer.core.facts import parse_ledger
from summarizer.core.messages import content_text
from summarizer.evaluation.compaction import CompactionInput, request_tokens
from summarizer.evaluation.converters import (
    read_chat,
    read_claude_code,
    read_mini_swe_agent,
    read_swe_agent,
)
from summarizer.evaluation.dataset import Case
from summarizer.evaluation.metrics import context_text, gold_fact_recall
from summarizer.evaluation.strategies import STRATEGIES
from summarizer.loaders.tokenizers import make_counter

from .results import markdown_table

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"
BUDGETS = (0.1, 0.3)
STRATEGY_NAMES = ("given", "ledger-only", "masking", "truncate")
LABELS = Path(__file__).with_name("ledger_precision.json")
SAMPLE_SIZE = 120
SAMPLE_SEED = 27
AGENT_MODEL = "gpt-4o"


@dataclass(frozen=True)
class DevCase:
    """One case of the dev set, with where it came from and which part it is in."""

    case: Case
    converter: str
    held_aside: bool


@dataclass
class Outcome:
    """What one strategy kept of one case's gold facts (None: infeasible at the budget)."""

    budget: float
    part: str
    converter: str
    case_id: str
    strategy: str
    kept: int | None
    total: int


def held_aside(case_id: str) -> bool:
    """Whether a case is in the held-aside third (a fixed hash of its id)."""
    return hashlib.sha256(case_id.encode()).digest()[0] % 3 == 0


def dev_set(shared: Path) -> list[DevCase]:
    """Every case the converters read from ``shared/trajectories``."""
    root = shared / "trajectories"
    found: list[DevCase] = []

    def add(case: Case, converter: str) -> None:
        aside = converter != "claude-code" and held_aside(case.id)
        found.append(DevCase(case, converter, aside))

    for path in sorted((root / "claude-code").glob("*.jsonl")):
        add(read_claude_code(path), "claude-code")
    for path in sorted((root / "mini-swe-agent").glob("*.traj.json")):
        add(read_mini_swe_agent(path), "mini-swe-agent")
    for path in sorted((root / "swe-agent").glob("*.traj")):
        try:
            add(read_swe_agent(path), "swe-agent")
        except ConversionError:
            continue
    for path in sorted((root / "tau-bench").glob("*.json")):
        for case in read_chat(path):
            if case.metadata.get("trial") == 0:
                add(case, "tau-bench")
    return [item for item in found if item.case.facts]


def ledger_items(messages: Sequence[dict[str, object]]) -> list[str]:
    """The ledger lines (``kind: text``) of the summary messages in ``messages``."""
    items: list[str] = []
    for message in messages:
        for fact in parse_ledger(content_text(message)):
            items.append(f"{fact.kind}: {fact.text}")
    return items


def evaluate(cases: Sequence[DevCase], budget_share: float) -> tuple[list[Outcome], list[str]]:
    """What each strategy kept of each case compacted to ``budget_share`` of its tokens, and
    every ledger item ledger-only wrote."""
    outcomes: list[Outcome] = []
    items: list[str] = []
    counter = make_counter(AGENT_MODEL)
    for item in cases:
        case = item.case
        budget = max(1, int(budget_share * request_tokens(counter, case.messages, case.tools)))
        part = "held aside" if item.held_aside else "dev"
        for name in STRATEGY_NAMES:
            strategy = STRATEGIES[name]
            for variant in strategy.variants(case):
                job = CompactionInput(case, budget, counter, AGENT_MODEL, variant=variant)
                kept: int | None = None
                try:
                    compaction = strategy.compact(job)
                except BudgetExceeded:
                    compaction = None
                if compaction is not None:
                    recall = gold_fact_recall(context_text(compaction.messages), case.facts)
                    kept = recall.kept
                    if name == "ledger-only":
                        items += ledger_items(compaction.messages)
                outcomes.append(
                    Outcome(
                        budget_share, part, item.converter, case.id, name, kept, len(case.facts)
                    )
                )
    return outcomes, items


def precision(items: Sequence[str], labels: dict[str, bool]) -> tuple[int, int, list[str]]:
    """Of a fixed sample of ``items``: how many a reader called facts, how many were judged,
    and the sampled items no verdict covers yet."""
    unique = sorted(set(items))
    sample = random.Random(SAMPLE_SEED).sample(unique, min(SAMPLE_SIZE, len(unique)))
    judged = [item for item in sample if item in labels]
    facts = sum(1 for item in judged if labels[item])
    return facts, len(judged), [item for item in sample if item not in labels]


def rows(outcomes: Sequence[Outcome]) -> Iterator[list[str]]:
    """Table rows, one per (part, converter): each strategy's gold facts kept, pooled over the
    cases every strategy with a row there could compact (so the columns compare like with
    like), and how many cases were left out because one of them could not."""
    groups: dict[tuple[float, str, str], list[Outcome]] = {}
    for outcome in outcomes:
        groups.setdefault((outcome.budget, outcome.part, outcome.converter), []).append(outcome)
    for (budget, part, converter), group in sorted(groups.items()):
        present = {o.strategy for o in group}
        by_case: dict[str, list[Outcome]] = {}
        for outcome in group:
            by_case.setdefault(outcome.case_id, []).append(outcome)
        common = [
            found
            for found in by_case.values()
            if {o.strategy for o in found} == present and all(o.kept is not None for o in found)
        ]
        cells = []
        for name in STRATEGY_NAMES:
            ran = [o for found in common for o in found if o.strategy == name]
            kept = sum(o.kept or 0 for o in ran)
            total = sum(o.total for o in ran)
            cells.append(f"{kept}/{total} ({kept / total:.1%})" if ran and total else "–")
        left_out = len(by_case) - len(common)
        yield [f"{budget:g}", part, converter, str(len(common)), str(left_out), *cells]


def main() -> None:
    """Print the dev set's table and the ledger's precision on the judged sample."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=SHARED)
    parser.add_argument("--sample-out", type=Path, help="write the unjudged sample items here")
    args = parser.parse_args()
    cases = dev_set(args.shared)
    outcomes: list[Outcome] = []
    items: list[str] = []
    for budget in BUDGETS:
        found, written = evaluate(cases, budget)
        outcomes += found
        items += written
    header = ["budget", "part", "converter", "cases", "infeasible", *STRATEGY_NAMES]
    table = list(rows(outcomes))
    print(markdown_table(header, table, align="rllrr" + "r" * len(STRATEGY_NAMES)))
    labels = json.loads(LABELS.read_text()) if LABELS.is_file() else {}
    facts, judged, unjudged = precision(items, labels)
    share = f"{facts / judged:.1%}" if judged else "–"
    print(
        f"\nledger precision: {facts}/{judged} judged items are facts ({share}); "
        f"{len(unjudged)} sampled items unjudged"
    )
    if args.sample_out is not None:
        args.sample_out.write_text(json.dumps({item: None for item in unjudged}, indent=1))


if __name__ == "__main__":
    main()
