"""Write the synthetic evaluation dataset: ``python datasets/generate.py --seed 2026``."""

from __future__ import annotations

import argparse
from pathlib import Path

from synthetic_sessions import generate_cases

from context_summarizer.evaluation.dataset import write_dataset


def main(argv: list[str] | None = None) -> None:
    """Generate ``--count`` cases from ``--seed`` and write them as JSONL to ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=2026, help="master seed (default: 2026)")
    parser.add_argument("--count", type=int, default=20, help="number of cases (default: 20)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).with_name("coding-sessions.jsonl"),
        help="output JSONL file (default: datasets/coding-sessions.jsonl)",
    )
    args = parser.parse_args(argv)
    written = write_dataset(generate_cases(seed=args.seed, count=args.count), args.out)
    print(f"wrote {written} cases to {args.out}")


if __name__ == "__main__":
    main()
