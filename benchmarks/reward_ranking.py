"""Reward ranking: does the summary reward order a real model's candidate summaries as gold
recall does?

The shared agent runs (the 31 mini-swe-agent SWE-bench runs, then the Claude Code sessions and
SWE-agent trajectories that still hold a task and an exchange once cut) are cut to what a small
window holds (``real_model_cases.cut_case``: ``CUT_TOKENS`` of conversation, the gold facts
that part states); the first ``MAX_CASES`` are taken. Each goes through ``summarizer eval
--candidates 4 --temperature 1.0`` with Qwen2.5-Coder-0.5B behind llama.cpp: the self-summary
engine run's first summary request is answered four times (seeds 0-3), and each answer scored by
the reward (the online gate's facts and cap) and by gold recall, whole and the summary's own
part. Reported: cases, candidates, the mean per-case spread of the reward, the mean per-case
Spearman correlation of the reward (and of its facts part alone) with the summary's gold recall
and of the reward with whole gold recall, the share of candidate pairs ordered alike, each case,
the candidates by what the online gate makes of them, and the wall time.

Needs the ``real-model`` extra (the model and llama.cpp's server). About 3 minutes a case on 2
cores (one cold prefill, then four answers of at most ``SUMMARY_CAP`` tokens); ``--quick`` takes
3 cases. The run directory is ``--work`` (default ``benchmarks/.reward-ranking``): candidates are
written as they are answered and a rerun resumes.

    python -m benchmarks.reward_ranking [--quick] [--work DIR] [--upstream URL]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from context_summarizer.evaluation.candidate_files import (
    CandidateLine,
    rank_stored,
    read_candidates,
)
from context_summarizer.evaluation.candidates import rescore_candidates
from context_summarizer.evaluation.dataset import Case, write_dataset
from context_summarizer.evaluation.evaluate import RowSettings
from context_summarizer.evaluation.inputs import read_inputs
from context_summarizer.evaluation.ranking import Mean, RankingSummary
from context_summarizer.evaluation.runner import EvalSettings, run_eval
from context_summarizer.loaders.tokenizers import make_counter

from .real_model import BUDGET, CAP_FIELD, CUT_TOKENS, N_CTX
from .real_model_cases import cut_cases
from .results import Section, markdown_table, print_section

TITLE = "Reward ranking"
COMMAND = "python -m benchmarks.reward_ranking"

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "trajectories"
WORK = Path(__file__).resolve().with_name(".reward-ranking")
CANDIDATES = 4
TEMPERATURE = 1.0
QUICK_CASES = 3
MAX_CASES = 14
"""The first cut runs taken (of 36; about a third are infeasible at the budget): four answers
of up to ``SUMMARY_CAP`` tokens each take about 3 minutes a case on 2 cores."""
SUMMARY_CAP = 768
"""The summaries' cap. At the real-model section's 256, the 0.5B model ran to the cap in 53 of
67 candidates (cut off, so refused): too few usable answers to rank."""
CASES_FILE = "cases.jsonl"


def trajectory_files(shared: Path) -> list[Path]:
    """The runs to cut: mini-swe-agent's, then Claude Code's sessions and SWE-agent's."""
    return [
        *sorted((shared / "mini-swe-agent").glob("*.traj.json")),
        *sorted((shared / "claude-code").glob("*.jsonl")),
        *sorted((shared / "swe-agent").glob("*.traj")),
    ]


def load_cases(shared: Path) -> list[Case]:
    """Every run read and cut to ``CUT_TOKENS`` (o200k); the ones that cannot be are left out."""
    inputs = read_inputs(trajectory_files(shared))
    return cut_cases(inputs.cases, CUT_TOKENS, make_counter("gpt-4o"))


def run(
    *,
    quick: bool,
    out_dir: Path,
    shared: Path = SHARED,
    work: Path = WORK,
    upstream: str | None = None,
) -> Section:
    """Ask and rank the candidates of every cut run (``quick``: three); ``upstream``: an
    OpenAI-compatible base URL to use instead of starting llama.cpp."""
    del out_dir  # the run directory is ``work``
    if not shared.is_dir():
        return _not_run(f"the trajectories are not here: `{shared}`")
    cases = load_cases(shared)
    cases = cases[: QUICK_CASES if quick else MAX_CASES]
    if not cases:
        return _not_run("no run holds a task and an exchange once cut")
    work.mkdir(parents=True, exist_ok=True)
    write_dataset(cases, work / CASES_FILE)
    started = time.monotonic()
    if upstream is not None:
        server, model = "the given upstream", "gpt-4o"
        _evaluate(cases, work, upstream, model)
    else:
        from context_summarizer.testing.real_model import (
            MODEL_ALIAS,
            LlamaServer,
            ModelUnavailable,
            model_file,
        )

        try:
            path = model_file()
        except ModelUnavailable as exc:
            return _not_run(f"the model is not installed ({exc})")
        server, model = f"llama-cpp-python's server, `n_ctx` {N_CTX:,}, 2 threads", MODEL_ALIAS
        with LlamaServer(path, n_ctx=N_CTX) as llama:
            _evaluate(cases, work, llama.base_url, model)
    seconds = time.monotonic() - started
    ranking = rank_stored(work, cases, CANDIDATES)
    command = COMMAND + (" --quick" if quick else "")
    body = _body(ranking, seconds, server, len(cases))
    gate = _gate_table([c for c in read_candidates(work).values() if c.case_id in ids(cases)])
    return Section(title=TITLE, command=command, body=f"{body}\n\n{gate}")


def ids(cases: Sequence[Case]) -> set[str]:
    """The cases' ids."""
    return {case.id for case in cases}


def _gate_table(lines: Sequence[CandidateLine]) -> str:
    """The candidates by what the online gate makes of them: how many, their mean reward facts
    part and their mean summary gold recall (where measured)."""
    groups: dict[str, list[CandidateLine]] = {}
    for line in lines:
        if line.error is None and line.parts is not None:
            problem = line.parts.get("problem")
            groups.setdefault(f"refused: {problem}" if problem else "usable", []).append(line)

    def mean(values: Sequence[float | None]) -> str:
        found = [v for v in values if v is not None]
        return "n/a" if not found else f"{sum(found) / len(found):.2f} ({len(found)})"

    rows = [
        [
            name,
            str(len(group)),
            mean([(g.parts or {}).get("facts") for g in group]),
            mean([g.summary_gold_recall for g in group]),
        ]
        for name, group in sorted(groups.items(), key=lambda item: (item[0] != "usable", item[0]))
    ]
    table = markdown_table(
        ["the online gate", "candidates", "mean facts part", "mean summary gold recall"], rows
    )
    return (
        f"{table}\n\nEvery candidate by what the online gate would make of it (a refused one "
        "earns 0 whatever it names): the mean share of the run's ledger facts it names, and of "
        "the gold facts its summary message stands for (how many measured in brackets)."
    )


def _evaluate(cases: Sequence[Case], work: Path, upstream: str, model: str) -> None:
    """``summarizer eval --candidates`` on ``cases`` into ``work`` (resuming what is there)."""
    settings = EvalSettings(
        datasets=[work / CASES_FILE],
        strategies=["truncate"],  # the rows are a by-product: the candidates are the point
        budget=BUDGET,
        out=work,
        model=model,
        upstream=upstream,
        concurrency=1,  # llama.cpp serves one request at a time on these 2 cores
        probes=False,
        progress=False,
        max_summary_tokens=SUMMARY_CAP,
        summary_cap_field=CAP_FIELD,
        candidates=CANDIDATES,
        temperature=TEMPERATURE,
    )
    run_eval(settings, cases)
    # Answers stored by an earlier run are judged by today's online check and reward.
    row = RowSettings(
        budget=BUDGET, model=model, max_summary_tokens=SUMMARY_CAP, summary_cap_field=CAP_FIELD
    )
    rescore_candidates(work, cases, row)


def _rho(mean: Mean) -> str:
    return "n/a" if mean.value is None else f"{mean.value:.2f} ({mean.cases})"


def _body(ranking: RankingSummary, seconds: float, server: str, cases: int) -> str:
    spread = "n/a" if ranking.mean_spread is None else f"{ranking.mean_spread:.3f}"
    agreement = (
        "n/a"
        if ranking.agreement is None
        else f"{ranking.agreement:.0%} ({ranking.agreeing}/{ranking.pairs})"
    )
    table = markdown_table(
        [
            "cases",
            "candidates",
            "mean reward spread",
            "Spearman reward vs summary gold recall",
            "Spearman reward vs gold recall",
            "Spearman facts part vs summary gold recall",
            "pairs ordered alike",
            "wall time",
        ],
        [
            [
                f"{len(ranking.cases)} of {cases}",
                str(ranking.candidates),
                spread,
                _rho(ranking.rho_summary),
                _rho(ranking.rho_gold),
                _rho(ranking.rho_facts),
                agreement,
                f"{seconds / 60:.1f} min",
            ]
        ],
    )
    per_case = markdown_table(
        ["case", "reward min..max", "Spearman vs summary gold", "vs gold", "pairs alike"],
        [
            [
                case.case_id[:48],
                f"{case.reward_min:.2f}..{case.reward_max:.2f}",
                "n/a" if case.rho_summary is None else f"{case.rho_summary:.2f}",
                "n/a" if case.rho_gold is None else f"{case.rho_gold:.2f}",
                f"{case.agreeing}/{case.pairs}",
            ]
            for case in ranking.cases
        ],
    )
    return "\n".join(
        [
            table,
            "",
            per_case,
            "",
            f"{CANDIDATES} answers per case to the self-summary engine run's first summary "
            f"request, temperature {TEMPERATURE}, seeds 0-{CANDIDATES - 1}; {server}; runs cut "
            f"to {CUT_TOKENS:,} tokens, budget {BUDGET}, summary cap {SUMMARY_CAP}. "
            "Spearman: mean per case over the cases where both scores vary (how many in "
            "brackets). Summary gold recall: of the gold facts the compacted context misses "
            "without the run's summary message (its text and its ledger), the share the "
            "candidate's text names. Pairs: candidate pairs "
            "of a case that neither score ties, ordered alike by the reward and summary gold "
            "recall. Wall time: this run's (a resumed run counts only what it asked).",
        ]
    )


def _not_run(why: str) -> Section:
    return Section(
        title=TITLE,
        command=COMMAND,
        body=f"Not run: {why}. Install the `real-model` extra and rerun `{COMMAND}`.",
    )


def main() -> None:
    """Command line: print the section's Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"smoke mode: {QUICK_CASES} runs")
    parser.add_argument("--shared", type=Path, default=SHARED, help="the shared trajectories")
    parser.add_argument("--work", type=Path, default=WORK, help="run directory; resumes")
    parser.add_argument(
        "--upstream", help="an OpenAI-compatible base URL to use instead of starting llama.cpp"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        section = run(
            quick=args.quick,
            out_dir=Path(folder),
            shared=args.shared,
            work=args.work,
            upstream=args.upstream,
        )
    print_section(section)


if __name__ == "__main__":
    main()
