"""``summarizer eval`` reads the files users have: each recognised by its content (never by its
name), converted in memory, named in one line; anything else is one short error pointing to
``summarizer convert --help``, and a file of bad lines never floods the terminal.

The fixtures are the converters' (``tests/fixtures/converters``, real records' shapes: see its
README); the shared trajectories are used too when this machine has them.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from context_summarizer.evaluation.command import MAX_LINE_ERRORS
from context_summarizer.evaluation.dataset import Case, write_dataset
from context_summarizer.evaluation.inputs import FileProblem, FileRead, read_file, read_inputs

from .test_eval_runner import invoke, rows_of
from .test_eval_strategies import make_case

FIXTURES = Path(__file__).parent / "fixtures" / "converters"
SHARED = Path("/work/shared/trajectories")

# (fixture, format, cases)
FORMATS = [
    ("claude-code/session.jsonl", "claude-code", 1),
    ("mini-swe-agent/django__django-13820.traj.json", "mini-swe-agent", 1),
    ("function-calling.traj", "swe-agent", 1),
    ("steps-only.traj", "swe-agent", 1),
    ("tau-bench.json", "tau-bench", 2),
    ("chat.json", "chat", 2),
    ("chat.jsonl", "chat", 3),
]


def export_file(tmp_path: Path) -> Path:
    """A file as ``summarizer export`` writes it (``sessions._case``: a case with the proxy's
    summary as a given one, ``metadata.source`` naming the export)."""
    case = make_case(
        id="default-s1",
        summaries=[{"name": "proxy", "text": "Fixed the discount bug.", "covers": 6}],
        metadata={"source": "summarizer export", "namespace": "default", "session": "s1"},
    )
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps(case.model_dump(mode="json", exclude_none=True)) + "\n")
    return path


@pytest.mark.parametrize(("fixture", "fmt", "count"), FORMATS)
def test_each_format_is_recognised_by_its_content_whatever_its_name(
    tmp_path: Path, fixture: str, fmt: str, count: int
) -> None:
    source = FIXTURES / fixture
    renamed = tmp_path / "input.data"  # no extension to go by
    shutil.copyfile(source, renamed)
    for path in (source, renamed):
        read = read_file(path)
        assert isinstance(read, FileRead), read
        assert read.format == fmt and len(read.cases) == count
        assert read.line_errors == []
        assert all(isinstance(case, Case) for case in read.cases)


def test_datasets_and_exports_are_recognised(tmp_path: Path) -> None:
    dataset = tmp_path / "plain.txt"
    write_dataset([make_case(id="a"), make_case(id="b")], dataset)
    read = read_file(dataset)
    assert isinstance(read, FileRead) and read.format == "dataset" and len(read.cases) == 2
    assert read.line == f"read {dataset} as an evaluation dataset (2 cases)"

    exported = read_file(export_file(tmp_path))
    assert isinstance(exported, FileRead) and exported.format == "export"
    assert exported.cases[0].summaries[0].name == "proxy"
    assert exported.line.endswith("as a summarizer export (1 case)")

    pretty = tmp_path / "one-case.json"  # one case as a pretty-printed JSON document
    pretty.write_text(json.dumps(make_case(id="c").model_dump(mode="json"), indent=2))
    read = read_file(pretty)
    assert isinstance(read, FileRead) and read.format == "dataset"
    assert [case.id for case in read.cases] == ["c"]


@pytest.mark.parametrize(
    ("content", "looked_like"),
    [
        (b"MIT License\n\nCopyright (c) 2025\n", "text, not JSON (line 1: 'MIT License')"),
        (b"", "an empty file"),
        (b'"just a string"', "a string ('\"just a string\"')"),
        (b'{"name": "x", "version": 2}', "a JSON object with keys name, version"),
        (b"[1, 2, 3]", "a JSON list of 3 items, the first a number"),
        (b'{"a": 1,\n "b": }\n', "JSON that does not parse"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "a binary file"),
    ],
)
def test_a_file_of_no_known_format_is_one_short_error_pointing_to_convert(
    tmp_path: Path, content: bytes, looked_like: str
) -> None:
    path = tmp_path / "mystery.jsonl"
    path.write_bytes(content)
    problem = read_file(path)
    assert isinstance(problem, FileProblem)
    assert looked_like in str(problem)

    result = invoke(path, "--out", tmp_path / "run", "-s", "truncate")
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    assert line.startswith(f"error: {path}: not a file eval can read: it looks like ")
    assert looked_like in line and "`summarizer convert --help`" in line
    assert len(line) < 300
    assert not (tmp_path / "run").exists()


def test_companion_files_say_what_they_are(tmp_path: Path) -> None:
    summary = read_file(FIXTURES / "mini-swe-agent" / "results_summary.json")
    assert isinstance(summary, FileProblem) and "mini-swe-agent results summary" in str(summary)

    sidechain = tmp_path / "agent-a1.jsonl"  # a sub-agent transcript: every record a sidechain
    records = [json.loads(line) for line in (FIXTURES / "claude-code" / "session.jsonl").open()]
    sidechain.write_text("".join(json.dumps(r | {"isSidechain": True}) + "\n" for r in records))
    problem = read_file(sidechain)
    assert isinstance(problem, FileProblem) and "sub-agent transcript" in str(problem)

    store = tmp_path / "checkpoints.db"  # the proxy's store, where --record keeps sessions
    with sqlite3.connect(store) as db:
        db.execute("CREATE TABLE t (x)")
    problem = read_file(store)
    assert isinstance(problem, FileProblem)
    assert "SQLite database" in str(problem) and "summarizer export --all" in str(problem)


def test_eval_names_each_file_and_runs_on_raw_trajectories(tmp_path: Path) -> None:
    files = [FIXTURES / "claude-code" / "session.jsonl", FIXTURES / "steps-only.traj"]
    junk = tmp_path / "LICENSE"
    junk.write_text("MIT License\n")
    out = tmp_path / "run"
    result = invoke(*files, junk, "--out", out, "-s", "truncate", "--budget", "0.5")
    assert result.exit_code == 0, result.output
    errors = result.stderr.splitlines()
    assert errors[:3] == [
        f"read {files[0]} as a Claude Code session (1 case)",
        f"read {files[1]} as a SWE-agent trajectory (1 case)",
        f"error: {junk}: not a file eval can read: it looks like text, not JSON (line 1: "
        "'MIT License'); `summarizer convert --help` lists the formats eval reads",
    ]
    assert "skipped" not in result.output  # no line of a trajectory is a "bad dataset line"
    assert {row.case_id for row in rows_of(out)} == {"258c7280-fixture", "steps-only"}

    missing = tmp_path / "gone.jsonl"  # the run goes on with the files it could read
    again = invoke(files[1], missing, tmp_path, "--out", tmp_path / "two", "-s", "truncate")
    assert again.exit_code == 0, again.output
    assert f"error: {missing}: cannot read it: No such file or directory" in again.stderr
    assert f"error: {tmp_path}: cannot read it: Is a directory" in again.stderr
    assert [row.case_id for row in rows_of(tmp_path / "two")] == ["steps-only"]


def test_bad_lines_are_capped_with_a_count(tmp_path: Path) -> None:
    path = tmp_path / "noisy.jsonl"
    write_dataset([make_case(id="good")], path)
    with path.open("a") as handle:
        for i in range(2000):
            handle.write(json.dumps({"id": f"bad-{i}", "messages": [], "fatcs": []}) + "\n")
    result = invoke(path, "--out", tmp_path / "run", "-s", "truncate", "--no-progress")
    assert result.exit_code == 0, result.output
    errors = result.stderr.splitlines()
    assert errors[0] == f"read {path} as an evaluation dataset (1 case; 2000 lines skipped)"
    skipped = [line for line in errors if line.startswith("skipped ")]
    assert len(skipped) == MAX_LINE_ERRORS + 1
    assert skipped[0].startswith(f"skipped {path}:2: messages")
    assert skipped[-1] == f"skipped {2000 - MAX_LINE_ERRORS} more lines of {path}"
    assert len(result.output.splitlines()) < 40


def test_case_ids_stay_unique_across_files(tmp_path: Path) -> None:
    twice = [FIXTURES / "steps-only.traj", FIXTURES / "steps-only.traj"]
    inputs = read_inputs(twice)
    assert [case.id for case in inputs.cases] == ["steps-only", "steps-only-2"]
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_dataset([make_case(id="same")], first)
    write_dataset([make_case(id="other"), make_case(id="same")], second)
    inputs = read_inputs([first, second])
    assert [case.id for case in inputs.cases] == ["same", "other"]
    (error,) = inputs.line_errors
    assert str(error) == f"{second}:2: duplicate case id 'same'"


# --- the shared trajectories, when this machine has them --------------------------------------

needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="no shared trajectories here")


@needs_shared
@pytest.mark.parametrize(
    ("pattern", "fmt", "files", "cases"),
    [
        ("claude-code/*.jsonl", "claude-code", 2, 2),
        ("mini-swe-agent/*.traj.json", "mini-swe-agent", 31, 31),
        ("swe-agent/*.traj", "swe-agent", 6, 6),
        ("tau-bench/*.json", "tau-bench", 1, 200),
    ],
)
def test_every_shared_trajectory_is_read_as_its_format(
    pattern: str, fmt: str, files: int, cases: int
) -> None:
    paths = sorted(SHARED.glob(pattern))
    inputs = read_inputs(paths)
    assert inputs.problems == [] and len(inputs.files) == files
    assert {read.format for read in inputs.files} == {fmt}
    assert len(inputs.cases) == cases and inputs.line_errors == []


@needs_shared
def test_a_folder_glob_reads_the_trajectories_and_names_the_rest() -> None:
    inputs = read_inputs(sorted((SHARED / "mini-swe-agent").iterdir()))
    assert len(inputs.cases) == 31
    problems = {Path(p.path).name: p.message for p in inputs.problems}
    assert set(problems) == {"LICENSE", "results_summary.json"}


def test_help_names_the_formats_repeat_and_the_recommendation() -> None:
    from typer.testing import CliRunner

    from context_summarizer.cli.main import app

    result = CliRunner().invoke(app, ["eval", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.replace("│", " ").split())  # rich's boxes aside
    for words in ("Claude Code sessions", "mini-swe-agent trajectories", "SWE-agent", "tau-bench"):
        assert words in text
    assert "summarizer export" in text and "summarizer convert --help" in text
    assert "--repeat" in text and "deterministic" in text
    assert "[[models]]" in text and "baselines" in text
