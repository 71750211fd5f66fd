"""The prepare-scaling benchmark's helpers: bucket statistics, the session it drives, its chart.

No timing is asserted: the figures belong in ``benchmarks/RESULTS.md``, not in tests.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

from benchmarks.prepare_scaling import run
from benchmarks.prepare_scaling_chart import CHART, chart
from benchmarks.prepare_scaling_report import buckets, edge_ratio
from benchmarks.prepare_scaling_session import Turn, assistant_turn
from benchmarks.results import percentile
from context_summarizer.core.messages import validate_messages
from context_summarizer.testing.scenario import CodingSession


def _turn(index: int, ms: float, *, compacted: bool = False, raw: int = 0) -> Turn:
    return Turn(
        index=index,
        seconds=ms / 1000,
        summary_seconds=0.0,
        compacted=compacted,
        raw_tokens=raw,
        sent_tokens=raw // 2,
        raw_messages=2 + 2 * index,
    )


def test_percentile_is_nearest_rank() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(values, 0.0) == 1.0
    assert percentile(values, 0.5) == 3.0
    assert percentile(values, 1.0) == 5.0
    assert percentile([7.0], 0.95) == 7.0


def test_buckets_summarise_consecutive_turns() -> None:
    turns = [_turn(i, float(i + 1), compacted=i in (2, 5), raw=100 * (i + 1)) for i in range(7)]
    got = buckets(turns, 3)
    assert [(b.first, b.last) for b in got] == [(0, 2), (3, 5), (6, 6)]
    assert [b.raw_tokens_end for b in got] == [300, 600, 700]
    assert [b.compactions for b in got] == [1, 1, 0]
    assert [b.compactions_so_far for b in got] == [1, 2, 2]
    first = got[0]
    assert math.isclose(first.median_ms, 2.0)
    assert math.isclose(first.max_ms, 3.0)
    assert math.isclose(first.median_plain_ms or 0, 1.5)  # turn 2 compacted: median of 1, 2
    assert math.isclose(got[0].median_sent_tokens, 100.0)


def test_buckets_without_plain_turns() -> None:
    (only,) = buckets([_turn(0, 9.0, compacted=True)], 100)
    assert only.median_plain_ms is None


def test_edge_ratio_compares_the_two_ends() -> None:
    turns = [_turn(i, 1.0) for i in range(4)] + [_turn(4 + i, 2.5) for i in range(4)]
    assert math.isclose(edge_ratio(turns, 4), 2.5)
    turns[-1] = _turn(7, 500.0, compacted=True)
    assert math.isclose(edge_ratio(turns, 4, plain=True), 2.5)
    assert math.isnan(edge_ratio([_turn(0, 1.0, compacted=True)], 1, plain=True))


def test_assistant_turns_are_valid_and_varied() -> None:
    session = CodingSession(turns=30)
    history = [session.system, session.task]
    for turn, step in enumerate(session.steps[:30]):
        history.extend(assistant_turn(session, turn, step))
    validate_messages(history)
    tool_outputs = [m["content"] for m in history if m["role"] == "tool"]
    assert len(set(tool_outputs)) == len(tool_outputs)
    ids = [c["id"] for m in history for c in m.get("tool_calls", [])]
    assert len(set(ids)) == len(ids)
    answered = [m["tool_call_id"] for m in history if m["role"] == "tool"]
    assert answered == ids


def test_chart_is_self_contained_svg() -> None:
    turns = [
        _turn(i, 0.3 + (50.0 if i % 7 == 6 else 0), compacted=i % 7 == 6, raw=1000 * i)
        for i in range(40)
    ]
    svg = chart(turns, title="t <&> title")
    root = ET.fromstring(svg)  # well-formed, title escaped
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "<script" not in svg and "href" not in svg and "url(" not in svg
    assert svg.count("compaction,") == 5  # one marker (with its tooltip) per compaction turn


def test_quick_run_produces_section_and_chart(tmp_path: Path) -> None:
    section = run(quick=True, out_dir=tmp_path)
    assert section.files == [CHART]
    assert (tmp_path / CHART).read_text(encoding="utf-8").startswith("<svg")
    assert f"]({CHART})" in section.body
    assert section.command == "python -m benchmarks.prepare_scaling"
    (floor,) = section.floors
    assert floor.limit == "≤ 3×" and floor.measured.endswith("×")
    assert "compaction turns (turns" in section.body  # the quick window does compact
