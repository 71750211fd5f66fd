"""``summarizer export``: recorded sessions as evaluation cases, and compactions as training data.

``--format cases`` (the default) writes each recorded conversation (``serve --record``) as a
``summarizer eval`` case. ``--format sft|preference|reward`` writes the summary requests the
proxy sent and the answers its model wrote (``serve --record`` keeps them), and those of
evaluator runs (``--eval DIR``: the records the model strategies wrote, and the candidates of
``eval --candidates``), as JSON Lines (``evaluation.training_data``). Everything is redacted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from ..core.activity import Recording, namespace_label, redact
from ..core.summary_records import SummaryRecord
from ..evaluation.training_data import (
    Answer,
    Origin,
    Style,
    Tally,
    TrainingFormat,
    attempt_answer,
    group_lines,
    origin_details,
    record_origin,
)
from .session_stores import StoreOption, opened

ExportFormat = Literal["cases", "sft", "preference", "reward"]


def export_command(
    session: Annotated[
        str | None, typer.Argument(help="The session to export (or --all).", show_default=False)
    ] = None,
    export_all: Annotated[bool, typer.Option("--all", help="Every recorded session.")] = False,
    fmt: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            help="cases: recorded conversations as a `summarizer eval` dataset. sft: each "
            "summary request with the summary used. preference: the better and the worse of two "
            "answers to one request (repaired or replaced runs, eval candidates). reward: every "
            "answer with its reward.",
        ),
    ] = "cases",
    style: Annotated[
        Style,
        typer.Option(
            help="sft and preference layout: openai (messages; input, preferred_output, "
            "non_preferred_output) or trl (prompt, completion; prompt, chosen, rejected)."
        ),
    ] = "openai",
    eval_dirs: Annotated[
        list[Path] | None,
        typer.Option(
            "--eval",
            help="An evaluator output directory to export from (repeatable): its model "
            "strategies' summaries and its --candidates. Not for --format cases.",
        ),
    ] = None,
    min_reward: Annotated[
        float,
        typer.Option(help="sft and preference: leave out examples whose (chosen) reward is lower."),
    ] = 0.0,
    metadata: Annotated[
        bool,
        typer.Option(
            help="Write each line's metadata object (where it came from, reward, facts; "
            "`summarizer eval` reads an export back by it). --no-metadata for services that "
            "refuse unknown keys."
        ),
    ] = True,
    out: Annotated[
        Path | None,
        typer.Option(help="The JSONL file to write.", show_default="FORMAT.jsonl, e.g. sft.jsonl"),
    ] = None,
    store: StoreOption = None,
) -> None:
    """Write recorded conversations as a `summarizer eval` dataset, or compactions as training
    data (needs `serve --record`, or `--eval DIR`)."""
    out = out if out is not None else Path(f"{fmt}.jsonl")
    from_store = session is not None or export_all
    if session is not None and export_all:
        typer.echo("error: name one SESSION or pass --all, not both", err=True)
        raise typer.Exit(2)
    if not from_store and not eval_dirs:
        typer.echo("error: name one SESSION, pass --all, or --eval DIR", err=True)
        raise typer.Exit(2)
    if fmt == "cases":
        if eval_dirs:
            typer.echo(
                "error: --eval exports training data: pass --format sft|preference|reward", err=True
            )
            raise typer.Exit(2)
        nothing = "no recorded conversation" + (f" for session {session!r}" if session else "")
        _write(
            out,
            _cases(session, store),
            "case(s)",
            f"{nothing} (the proxy records only with --record)",
        )
        return
    lines: list[dict[str, Any]] = []
    tally = Tally()
    options = {"style": style, "metadata": metadata, "min_reward": min_reward, "tally": tally}
    if from_store:
        with opened(store) as stores:
            records = [r for each in stores for r in each.log.summary_records(None, session)]
        for record in records:
            label = f"{namespace_label(record.namespace)}/{record.session}"
            lines += _record_lines(record, label, "session", fmt, options)
    for directory in eval_dirs or []:
        lines += _eval_lines(directory, fmt, options)
    what = {"sft": "example(s)", "preference": "pair(s)", "reward": "scored answer(s)"}[fmt]
    nothing = "no summary records" + (f" for session {session!r}" if session else "")
    if from_store:
        nothing += " (the proxy keeps them only with --record)"
    _write(out, lines, what, nothing, tally)


def _record_lines(
    record: SummaryRecord,
    label: str,
    kind: Literal["session", "eval"],
    fmt: TrainingFormat,
    options: dict[str, Any],
) -> list[dict[str, Any]]:
    """The lines of one record's attempts."""
    answers = [attempt_answer(record, a) for a in record.attempts]
    used_attempt = record.used
    used = next((a for a in answers if used_attempt and a.attempt == used_attempt.attempt), None)
    return list(group_lines(record_origin(label, record, kind), answers, used, fmt, **options))


def _eval_lines(
    directory: Path, fmt: TrainingFormat, options: dict[str, Any]
) -> list[dict[str, Any]]:
    """The lines of an evaluator output directory: its records, then its candidates."""
    from ..evaluation.summaries_file import read_summary_records

    if not directory.is_dir():
        typer.echo(f"error: no evaluator output directory at {directory}", err=True)
        raise typer.Exit(1)
    lines: list[dict[str, Any]] = []
    for key, record in read_summary_records(directory):
        case_id, strategy, _, repeat = key
        label = f"{case_id}/{strategy}/{repeat}"
        lines += _record_lines(record, label, "eval", fmt, options)
    lines += _candidate_lines(directory, fmt, options)
    return lines


def _candidate_lines(
    directory: Path, fmt: TrainingFormat, options: dict[str, Any]
) -> list[dict[str, Any]]:
    """One group per case of ``eval --candidates``: its candidates (none of them used), judged
    against the facts and cap of the engine's record of the run."""
    from ..core.rewards import Reward
    from ..evaluation.candidate_files import (
        REQUESTS_FILE,
        CandidateRequest,
        read_candidates,
        read_jsonl,
    )

    requests = read_jsonl(directory / REQUESTS_FILE, CandidateRequest, lambda r: r.case_id)
    groups: dict[str, list[Any]] = {}
    for line in read_candidates(directory).values():
        if line.error is None and line.summary and line.parts is not None:
            groups.setdefault(line.case_id, []).append(line)
    lines: list[dict[str, Any]] = []
    for case_id, found in groups.items():
        request = requests.get(case_id)
        if request is None:
            continue
        found.sort(key=lambda c: c.index)
        answers = [
            Answer(
                c.request,
                c.summary,
                Reward.model_validate({**c.parts, "reward": c.reward}),
                f"candidate-{c.index}",
            )
            for c in found
        ]
        details = origin_details(model=found[0].model, temperature=found[0].temperature)
        record = request.record
        origin = Origin("candidates", case_id, details, list(record.facts), record.cap)
        lines += group_lines(origin, answers, None, fmt, **options)
    return lines


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def _write(
    out: Path,
    lines: list[dict[str, Any]],
    what: str,
    nothing: str,
    tally: Tally | None = None,
) -> None:
    """Write ``lines`` to ``out`` and say so; exit 1 saying ``nothing`` when there are none."""
    if not lines:
        detail = _skipped(tally) if tally is not None and tally.groups else ""
        typer.echo(f"error: {nothing}{detail}", err=True)
        raise typer.Exit(1)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(json.dumps(line) + "\n")
    typer.echo(f"wrote {len(lines)} {what} to {out}" + (_skipped(tally) if tally else ""))


def _skipped(tally: Tally) -> str:
    if not tally.skipped:
        return ""
    parts = ", ".join(f"{n} {reason}" for reason, n in sorted(tally.skipped.items()))
    return f"; of {tally.groups} summaries, left out: {parts}"


def _cases(session: str | None, store: str | None) -> list[dict[str, Any]]:
    with opened(store) as stores:
        return [
            _case(each.log, recording)
            for each in stores
            for recording in each.log.recordings(session=session)
        ]


def _case(log: Any, recording: Recording) -> dict[str, Any]:
    """One recording as an evaluation case, with the proxy's latest summary as a given one."""
    from ..evaluation.dataset import Case
    from .sessions import when

    label = namespace_label(recording.namespace)
    checkpoints = log.list_session(recording.namespace, recording.session)
    summaries = []
    if checkpoints and checkpoints[-1].slots:
        latest = checkpoints[-1]
        covers = max(slot.end for slot in latest.slots)
        text = redact("\n\n".join(slot.summary for slot in latest.slots if slot.summary))
        if text and covers <= len(recording.messages):
            summaries.append({"name": "proxy", "text": text, "covers": covers})
    case = Case.model_validate(
        {
            "id": f"{label}-{recording.session}",
            "messages": recording.messages,
            "tools": recording.tools,
            "model": recording.model,
            "summaries": summaries,
            "metadata": {
                "source": "summarizer export",
                "namespace": label,
                "session": recording.session,
                "recorded_at": when(recording.at),
            },
        }
    )
    return case.model_dump(mode="json", exclude_none=True)
