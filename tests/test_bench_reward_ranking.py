"""The reward-ranking benchmark section's machinery against the project's test upstream (its
candidates varied by seed), on the converters' fixture runs: the section reports each case and
the rank correlation, and a rerun resumes without asking again. (The section itself runs the
real model: ``python -m benchmarks --only 12``.)"""

from __future__ import annotations

from pathlib import Path

from benchmarks import reward_ranking
from context_summarizer.testing import TestUpstream

from .eval_responders import EvalResponder, seeded_summary_responder

FIXTURES = Path(__file__).parent / "fixtures" / "converters"


def test_the_section_ranks_each_cases_candidates_and_resumes(tmp_path: Path) -> None:
    work = tmp_path / "work"
    with TestUpstream(responder=EvalResponder(summarize=seeded_summary_responder)) as server:
        section = reward_ranking.run(
            quick=False, out_dir=tmp_path, shared=FIXTURES, work=work, upstream=server.base_url
        )
        asked = len(server.requests)
        again = reward_ranking.run(
            quick=False, out_dir=tmp_path, shared=FIXTURES, work=work, upstream=server.base_url
        )
        assert len(server.requests) == asked  # everything was there already
    assert asked > 0 and section.title == reward_ranking.TITLE
    body = section.body
    assert "| cases | candidates | mean reward spread |" in body
    assert "Spearman vs summary gold" in body  # the per-case table
    assert "| the online gate | candidates |" in body and "usable" in body
    assert (work / "candidates.jsonl").read_text().count("\n") >= reward_ranking.CANDIDATES
    assert again.body.split("\n")[:4] == body.split("\n")[:4]
