"""A long, scripted, tool-using coding session with facts planted early.

``CodingSession`` gives the three halves of a realistic agent run that tests, the demo and the
benchmarks share: the script the test upstream's agent follows (``steps``), the client-side tool
executor that answers each call with a large, deterministic output (``execute``), and the facts a
continuation must not lose (``planted``). Everything derives from ``seed``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .agents import Step

SYSTEM_PROMPT = (
    "You are a careful software engineering agent working in a Python repository. Use the tools "
    "to read files, search and run commands. Explain decisions briefly. Never modify files under "
    "tests/ unless asked."
)

TASK = (
    "The invoice totals in the billing service are wrong for discounted orders. Fix the bug in "
    "the billing package so that tests/test_billing.py passes. Constraints: keep Python 3.9 "
    "compatibility, do not change the public signature of billing.invoice.compute_total, and do "
    "not add new dependencies."
)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "Relative path"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a shell command in the repository and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the repository for a regular expression.",
            "parameters": {
                "type": "object",
                "properties": {"pattern": {"type": "string"}},
                "required": ["pattern"],
            },
        },
    },
]

FILES = [
    "src/billing/invoice.py",
    "src/billing/discounts.py",
    "src/billing/tax.py",
    "src/billing/models.py",
    "src/billing/currency.py",
    "src/billing/api/routes.py",
    "src/billing/api/schemas.py",
    "src/billing/storage/repository.py",
    "src/billing/storage/migrations/0007_discount_codes.py",
    "tests/test_billing.py",
    "tests/test_discounts.py",
    "config/settings.toml",
]


@dataclass(frozen=True)
class PlantedFact:
    """A fact put into one early tool output that must still be in context at the end."""

    turn: int
    text: str


@dataclass
class CodingSession:
    """A deterministic coding-agent session of ``turns`` agent turns."""

    turns: int = 120
    seed: int = 7
    lines_per_output: tuple[int, int] = (40, 90)
    planted: list[PlantedFact] = field(default_factory=list)
    _plants: dict[int, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        plants = {
            2: "FAILED tests/test_billing.py::test_invoice_total_with_discount - "
            "AssertionError: expected 1042.50, got 1040.00",
            4: "NOTE: the staging database is postgres://billing-staging.internal:5432/billing",
            6: "NOTE: decided to keep rounding in billing.currency.round_half_even; "
            "ROUND_HALF_UP broke the tax tests",
            9: "KeyError: 'discount_code' raised in src/billing/discounts.py line 88",
            12: "NOTE: commit 4f2a9c1e7b was the last green build before the regression",
        }
        self._plants = {t: text for t, text in plants.items() if t < self.turns}
        self.planted = [PlantedFact(t, text) for t, text in sorted(self._plants.items())]

    @property
    def system(self) -> dict[str, Any]:
        """The system message."""
        return {"role": "system", "content": SYSTEM_PROMPT}

    @property
    def task(self) -> dict[str, Any]:
        """The first user message."""
        return {"role": "user", "content": TASK}

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tool definitions the agent sends with every request."""
        return TOOLS

    @property
    def steps(self) -> list[Step]:
        """The script for ``ScriptedToolAgent``: one step per agent turn, then a final text."""
        rng = random.Random(self.seed)
        steps: list[Step] = []
        for turn in range(self.turns):
            kind = turn % 5
            if turn == 2 or kind == 4:
                steps.append(("run", {"command": "python -m pytest -x tests/test_billing.py"}))
            elif kind == 3:
                steps.append(
                    [
                        ("read_file", {"path": rng.choice(FILES)}),
                        ("search", {"pattern": rng.choice(["discount", "round", "Decimal"])}),
                    ]
                )
            elif kind == 2:
                steps.append(("search", {"pattern": rng.choice(["compute_total", "tax_rate"])}))
            else:
                steps.append(("read_file", {"path": rng.choice(FILES)}))
        steps.append(
            "Fixed: discounts are now applied before tax in src/billing/invoice.py and "
            "tests/test_billing.py passes."
        )
        return steps

    def execute(self, turn: int, name: str, arguments: str | Mapping[str, Any]) -> str:
        """The output of tool ``name`` called at agent turn ``turn`` (deterministic)."""
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        rng = random.Random(f"{self.seed}:{turn}:{name}:{json.dumps(args, sort_keys=True)}")
        low, high = self.lines_per_output
        lines: list[str]
        if name == "read_file":
            path = str(args.get("path", "unknown.py"))
            lines = [f"# {path}", *(_code_line(rng, i) for i in range(rng.randint(low, high)))]
        elif name == "run":
            lines = [f"$ {args.get('command', '')}", *_pytest_output(rng, rng.randint(low, high))]
        else:
            pattern = str(args.get("pattern", ""))
            lines = [
                f"{rng.choice(FILES)}:{rng.randint(1, 400)}: {_code_line(rng, 0).strip()}  "
                f"# matches {pattern!r}"
                for _ in range(rng.randint(low // 2, high // 2))
            ]
        plant = self._plants.get(turn)
        if plant is not None:
            lines.insert(len(lines) // 2, plant)
        return "\n".join(lines)


_NAMES = ["total", "subtotal", "discount", "rate", "amount", "line", "order", "tax", "currency"]


def _code_line(rng: random.Random, index: int) -> str:
    a, b = rng.sample(_NAMES, 2)
    pattern = rng.randrange(4)
    if pattern == 0:
        price = f"{rng.randint(1, 99)}.{rng.randint(0, 99):02d}"
        return f"    {a}_{index} = Decimal({b}.value) * Decimal('{price}')"
    if pattern == 1:
        return f"def compute_{a}_{b}({a}: Decimal, {b}: Decimal) -> Decimal:"
    if pattern == 2:
        return f"    if {a} is None:  # {b} may be missing for legacy orders"
    return f"    return round_half_even({a} - {b}, places={rng.randint(0, 4)})"


def _pytest_output(rng: random.Random, count: int) -> list[str]:
    lines = ["============================= test session starts =============================="]
    for i in range(count):
        status = "PASSED" if rng.random() > 0.1 else "FAILED"
        test_file = rng.choice(["tests/test_billing.py", "tests/test_discounts.py"])
        lines.append(f"{test_file}::test_case_{i:03d} {status}")
    seconds = f"{rng.randint(1, 9)}.{rng.randint(10, 99)}s"
    lines.append(
        f"======================== {count} tests ran in {seconds} ========================"
    )
    return lines
