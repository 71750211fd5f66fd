"""What compaction keeps on real sessions nobody here wrote: the dev set in ``../shared``.

The dev set is every trajectory in ``../shared/trajectories`` the converters read: the 2 Claude
Code sessions (with the summary Claude Code wrote at its real compaction), the 31 mini-swe-agent
SWE-bench runs, the SWE-agent runs and the first trial of each tau-bench task. A third of it is
**held aside** (``held_aside``: by a hash of the case's id, fixed; never the Claude Code sessions,
which the issue names) and reported on its own, so the ledger's ranking is not judged only on
what it was tuned on. Gold facts are the converters' own (what the run did: files its tool calls
or final patch changed, commands it ran and how they ended, errors its tools reported, the
user's own words), never the fact ledger's extractor.

Every offline strategy compacts each case to each of ``BUDGETS`` of its own tokens: 0.1 (the
issue's, where only the long sessions leave room for more than their task) and 0.3. Precision is
judged on a fixed sample of ledger items by a reader (``ledger_precision.json``: one verdict per
item, kept in the repository so it can be audited); items no verdict covers are listed, not
guessed.

The ledger's figures before the ranked ledger of issue 27 are kept per case in
``ledger_before.json`` (written at commit 7592c02 with ``--record``), so the table sets them
beside today's on exactly the same cases.

    python -m benchmarks.real_sessions [--shared PATH] [--sample-out FILE] [--record FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from context_summarizer.core.errors import BudgetExceeded, ConversionError
from context_summarizer.core.facts import parse_ledger
from context_summarizer.core.messages import content_text
from context_summarizer.evaluation.compaction import CompactionInput, request_tokens
from context_summarizer.evaluation.converters import (
    read_chat,
    read_claude_code,
    read_mini_swe_agent,
    read_swe_agent,
)
from context_summarizer.evaluation.dataset import Case
from context_summarizer.evaluation.metrics import context_text, gold_fact_recall
from context_summarizer.evaluation.recoverable import recoverable_recall
from context_summarizer.evaluation.strategies import STRATEGIES
from context_summarizer.loaders.tokenizers import make_counter

from .results import Floor, markdown_table

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"
BUDGETS = (0.1, 0.3)
STRATEGY_NAMES = ("given", "ledger-only", "masking", "observation-masking", "truncate")
LABELS = Path(__file__).with_name("ledger_precision.json")
BEFORE = Path(__file__).with_name("ledger_before.json")
BEFORE_COMMIT = "7592c02"
SAMPLE_SIZE = 30
"""Ledger items judged per converter (all of a converter's, when it wrote fewer)."""
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
    recovered: int = 0
    """Of the gold facts missed (``total - kept``), how many one recall search gives back."""


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


def ledger_items(messages: Sequence[Mapping[str, object]]) -> list[str]:
    """The ledger lines (``kind: text``) of the summary messages in ``messages``."""
    items: list[str] = []
    for message in messages:
        for fact in parse_ledger(content_text(message)):
            items.append(f"{fact.kind}: {fact.text}")
    return items


def evaluate(
    cases: Sequence[DevCase], budget_share: float, names: Sequence[str] = STRATEGY_NAMES
) -> tuple[list[Outcome], list[tuple[str, str]]]:
    """What each strategy kept of each case compacted to ``budget_share`` of its tokens, and
    every ledger item ledger-only wrote, with the converter of its case."""
    outcomes: list[Outcome] = []
    items: list[tuple[str, str]] = []
    counter = make_counter(AGENT_MODEL)
    for item in cases:
        case = item.case
        budget = max(1, int(budget_share * request_tokens(counter, case.messages, case.tools)))
        part = "held aside" if item.held_aside else "dev"
        for name in names:
            strategy = STRATEGIES[name]
            for variant in strategy.variants(case):
                job = CompactionInput(case, budget, counter, AGENT_MODEL, variant=variant)
                kept: int | None = None
                recovered = 0
                try:
                    compaction = strategy.compact(job)
                except BudgetExceeded:
                    compaction = None
                if compaction is not None:
                    recall = gold_fact_recall(context_text(compaction.messages), case.facts)
                    kept = recall.kept
                    missed = {fact.id for fact in recall.missed}
                    recovered = recoverable_recall(
                        case.messages,
                        compaction.messages,
                        [fact for fact in case.facts if fact.id in missed],
                    ).kept
                    if name == "ledger-only":
                        items += [(item.converter, t) for t in ledger_items(compaction.messages)]
                outcomes.append(
                    Outcome(
                        budget_share,
                        part,
                        item.converter,
                        case.id,
                        name,
                        kept,
                        len(case.facts),
                        recovered,
                    )
                )
    return outcomes, items


def sample(items: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """A fixed sample of the distinct ledger items, ``SAMPLE_SIZE`` per converter (seeded),
    each with the converter of the first case that wrote it."""
    first: dict[str, str] = {}
    for converter, text in items:
        first.setdefault(text, converter)
    chosen: list[tuple[str, str]] = []
    for converter in sorted(set(first.values())):
        texts = sorted(text for text, where in first.items() if where == converter)
        picked = random.Random(SAMPLE_SEED).sample(texts, min(SAMPLE_SIZE, len(texts)))
        chosen += [(converter, text) for text in picked]
    return chosen


def precision(
    items: Sequence[tuple[str, str]], labels: Mapping[str, bool]
) -> tuple[int, int, list[str]]:
    """Of ``sample(items)``: how many a reader called facts, how many were judged, and the
    sampled items no verdict covers yet."""
    chosen = [text for _, text in sample(items)]
    judged = [text for text in chosen if text in labels]
    facts = sum(1 for text in judged if labels[text])
    return facts, len(judged), [text for text in chosen if text not in labels]


def precision_by_converter(
    items: Sequence[tuple[str, str]], labels: Mapping[str, bool]
) -> dict[str, tuple[int, int]]:
    """Of ``sample(items)``, by converter: facts among the judged items, and judged items."""
    out: dict[str, tuple[int, int]] = {}
    for converter, text in sample(items):
        if text in labels:
            facts, judged = out.get(converter, (0, 0))
            out[converter] = (facts + labels[text], judged + 1)
    return dict(sorted(out.items()))


def _key(budget: float, case_id: str) -> str:
    return f"{budget:g}|{case_id}"


def _cell(kept: int, total: int) -> str:
    return f"{kept}/{total} ({kept / total:.1%})" if total else "–"


@dataclass
class Group:
    """The cases of one (budget, part, converter) every strategy (and the recorded ledger)
    could compact, and what each kept of them."""

    budget: float
    part: str
    converter: str
    cases: int
    left_out: int
    kept: dict[str, tuple[int, int]]
    """By strategy (and ``before``): gold facts kept, of how many."""
    recovered: dict[str, tuple[int, int]] = field(default_factory=dict)
    """By strategy: gold facts missed that one recall search gives back, of how many missed."""


def groups(outcomes: Sequence[Outcome], before: Mapping[str, int | None]) -> list[Group]:
    """Per (budget, part, converter): each strategy's gold facts kept, pooled over the cases
    every strategy with a row there could compact, and the ledger's recorded figure on them
    (so the columns compare like with like)."""
    found: dict[tuple[float, str, str], list[Outcome]] = {}
    for outcome in outcomes:
        found.setdefault((outcome.budget, outcome.part, outcome.converter), []).append(outcome)
    out: list[Group] = []
    for (budget, part, converter), group in sorted(found.items()):
        present = {o.strategy for o in group}
        by_case: dict[str, list[Outcome]] = {}
        for outcome in group:
            by_case.setdefault(outcome.case_id, []).append(outcome)
        common = [
            rows
            for case_id, rows in by_case.items()
            if {o.strategy for o in rows} == present
            and all(o.kept is not None for o in rows)
            and (not before or before.get(_key(budget, case_id)) is not None)
        ]
        kept: dict[str, tuple[int, int]] = {}
        recovered: dict[str, tuple[int, int]] = {}
        for name in sorted(present):
            ran = [o for rows in common for o in rows if o.strategy == name]
            kept[name] = (sum(o.kept or 0 for o in ran), sum(o.total for o in ran))
            recovered[name] = (sum(o.recovered for o in ran), kept[name][1] - kept[name][0])
        if before and common:
            totals = [rows[0].total for rows in common]
            recorded = [before[_key(budget, rows[0].case_id)] or 0 for rows in common]
            kept["before"] = (sum(recorded), sum(totals))
        out.append(
            Group(budget, part, converter, len(common), len(by_case) - len(common), kept, recovered)
        )
    return out


def table(found: Sequence[Group]) -> str:
    """The before/after table."""
    names = [n for n in STRATEGY_NAMES if any(n in g.kept for g in found)]
    header = ["budget", "part", "converter", "cases", "left out", "ledger-only before", *names]
    lines = [
        [
            f"{g.budget:g}",
            g.part,
            g.converter,
            str(g.cases),
            str(g.left_out),
            _cell(*g.kept["before"]) if "before" in g.kept else "–",
            *(_cell(*g.kept[n]) if n in g.kept and g.kept[n][1] else "–" for n in names),
        ]
        for g in found
        if g.cases
    ]
    return markdown_table(header, lines, align="rllrr" + "r" * (len(names) + 1))


def recoverable_table(found: Sequence[Group]) -> str:
    """Beside each strategy's gold recall (``table``), its recoverable recall: of the gold facts
    its compacted contexts missed, how many one recall search gives back."""
    names = [n for n in STRATEGY_NAMES if any(n in g.recovered for g in found)]
    header = ["budget", "part", "converter", "cases"]
    for name in names:
        header += [f"{name}: gold", f"{name}: recoverable"]
    lines = []
    for g in found:
        if not g.cases:
            continue
        line = [f"{g.budget:g}", g.part, g.converter, str(g.cases)]
        for name in names:
            gold = g.kept.get(name, (0, 0))
            line += [
                f"{gold[0] / gold[1]:.1%}" if gold[1] else "–",
                _share(*g.recovered.get(name, (0, 0))),
            ]
        lines.append(line)
    return markdown_table(header, lines, align="rllr" + "r" * (2 * len(names)))


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole:.0%})" if whole else "–"


def floors(found: Sequence[Group]) -> list[Floor]:
    """The issue's bars: on the Claude Code sessions at 0.1, ledger-only keeps at least as many
    gold facts as Claude Code's own summary; on the held-aside part (pooled, each budget), no
    fewer than masking."""
    out: list[Floor] = []
    for g in found:
        if g.budget == 0.1 and g.converter == "claude-code" and "given" in g.kept:
            ledger, given = g.kept["ledger-only"][0], g.kept["given"][0]
            out.append(
                Floor(
                    "Claude Code sessions at 0.1: gold facts ledger-only keeps",
                    f"{ledger}/{g.kept['given'][1]}",
                    f"≥ Claude Code's own summary ({given})",
                    ledger >= given,
                )
            )
    for budget in BUDGETS:
        aside = [g for g in found if g.part == "held aside" and g.budget == budget and g.cases]
        for other in ("masking", "observation-masking"):
            ledger = sum(g.kept.get("ledger-only", (0, 0))[0] for g in aside)
            rival = sum(g.kept.get(other, (0, 0))[0] for g in aside)
            total = sum(g.kept.get("ledger-only", (0, 0))[1] for g in aside)
            out.append(
                Floor(
                    f"held aside at {budget:g}: gold facts ledger-only keeps",
                    f"{ledger}/{total}",
                    f"≥ {other} ({rival})",
                    ledger >= rival,
                )
            )
    return out


def measure(shared: Path) -> tuple[list[Group], list[tuple[str, str]]]:
    """Every group of the dev set at every budget, and the ledger items ledger-only wrote."""
    cases = dev_set(shared)
    outcomes: list[Outcome] = []
    items: list[tuple[str, str]] = []
    for budget in BUDGETS:
        found, written = evaluate(cases, budget)
        outcomes += found
        items += written
    return groups(outcomes, recorded()["kept"]), items


def recorded() -> dict[str, Any]:
    """What ``--record`` wrote before the ranked ledger: each case's gold facts kept by
    ledger-only (``kept``) and every ledger item it wrote (``items``)."""
    if not BEFORE.is_file():
        return {"kept": {}, "items": []}
    data: dict[str, Any] = json.loads(BEFORE.read_text(encoding="utf-8"))
    return data


def main() -> None:
    """Print the dev set's table and the ledger's precision on the judged sample."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=SHARED)
    parser.add_argument("--sample-out", type=Path, help="write the unjudged sample items here")
    parser.add_argument(
        "--record", type=Path, help="write each case's ledger-only gold facts kept here, and stop"
    )
    args = parser.parse_args()
    if args.record is not None:
        kept: dict[str, int | None] = {}
        written: list[tuple[str, str]] = []
        cases = dev_set(args.shared)
        for budget in BUDGETS:
            outcomes, items = evaluate(cases, budget, ("ledger-only",))
            kept.update({_key(budget, o.case_id): o.kept for o in outcomes})
            written += items
        record = {"kept": kept, "items": sorted(set(written))}
        args.record.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        return
    found, items = measure(args.shared)
    print(table(found))
    print()
    print(recoverable_table(found))
    labels = json.loads(LABELS.read_text()) if LABELS.is_file() else {}
    facts, judged, unjudged = precision(items, labels)
    share = f"{facts / judged:.1%}" if judged else "–"
    old = [(c, t) for c, t in recorded()["items"]]
    old_facts, old_judged, old_unjudged = precision(old, labels)
    print(f"before: {old_facts}/{old_judged} judged facts; {len(old_unjudged)} unjudged")
    unjudged += old_unjudged
    print(
        f"\nledger precision: {facts}/{judged} judged items are facts ({share}); "
        f"{len(unjudged)} sampled items unjudged"
    )
    for floor in floors(found):
        print(f"{'met' if floor.met else 'MISSED'}: {floor.name}: {floor.measured} {floor.limit}")
    if args.sample_out is not None:
        args.sample_out.write_text(json.dumps({item: None for item in unjudged}, indent=1))


if __name__ == "__main__":
    main()
