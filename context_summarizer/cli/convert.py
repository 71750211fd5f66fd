"""``summarizer convert``: other tools' trajectories to an evaluation dataset (JSONL).

Each file is converted on its own: a file that fails is reported on stderr with its name and
the others are still written; the exit code is 1 when any file failed, else 0. Case ids are made
unique across the files of one run (a repeated id gets a ``-<k>`` suffix).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated

import typer

from ..core.errors import SummarizerError
from ..evaluation.dataset import Case, dump_case
from .help_format import ClickStyleCommand, ClickStyleGroup

convert_app = typer.Typer(
    cls=ClickStyleGroup,
    help="Convert agent trajectories from other tools into an evaluation dataset (JSONL).\n\n"
    "`summarizer eval` reads these formats directly too, recognising each file by its content "
    "(and datasets, `summarizer export` files): convert a file to edit its cases (gold facts, "
    "probes) or to keep the dataset.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)

Files = Annotated[list[Path], typer.Argument(help="Files to convert.", show_default=False)]
Out = Annotated[
    Path | None, typer.Option("--out", help="Write the JSONL here instead of to stdout.")
]


def _unique_ids(cases: Iterable[Case]) -> list[Case]:
    seen: dict[str, int] = {}
    out: list[Case] = []
    for case in cases:
        seen[case.id] = seen.get(case.id, 0) + 1
        if seen[case.id] > 1:
            case = case.model_copy(update={"id": f"{case.id}-{seen[case.id]}"})
        out.append(case)
    return out


def _run(files: list[Path], out: Path | None, read: Callable[[Path], list[Case]]) -> None:
    cases: list[Case] = []
    failed = 0
    for path in files:
        try:
            cases.extend(read(path))
        except SummarizerError as exc:
            failed += 1
            typer.echo(f"error: {exc}", err=True)
    lines = [dump_case(case) for case in _unique_ids(cases)]
    if out is None:
        for line in lines:
            typer.echo(line)
    else:
        try:
            out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        except OSError as exc:
            typer.echo(f"error: cannot write {out}: {exc}", err=True)
            raise typer.Exit(1) from exc
    typer.echo(
        f"converted {len(lines)} case(s) from {len(files) - failed} of {len(files)} file(s)",
        err=True,
    )
    raise typer.Exit(1 if failed else 0)


@convert_app.command("swe-agent", cls=ClickStyleCommand)
def swe_agent(files: Files, out: Out = None) -> None:
    """Convert SWE-agent .traj files (one case per file)."""
    from ..evaluation.converters import read_swe_agent

    _run(files, out, lambda path: [read_swe_agent(path)])


@convert_app.command("chat", cls=ClickStyleCommand)
def chat(files: Files, out: Out = None) -> None:
    """Convert chat logs: JSON or JSONL message lists, or records with messages/traj (tau-bench)."""
    from ..evaluation.converters import read_chat

    _run(files, out, read_chat)


@convert_app.command("mini-swe-agent", cls=ClickStyleCommand)
def mini_swe_agent(files: Files, out: Out = None) -> None:
    """Convert mini-swe-agent .traj.json files (one case per file; observations stay user turns;
    a results_summary.json beside them says which runs were resolved)."""
    from ..evaluation.converters import read_mini_swe_agent

    _run(files, out, lambda path: [read_mini_swe_agent(path)])


@convert_app.command("claude-code", cls=ClickStyleCommand)
def claude_code(files: Files, out: Out = None) -> None:
    """Convert Claude Code session .jsonl transcripts (the turns before the first compaction,
    whose summary becomes the case's given summary)."""
    from ..evaluation.converters import read_claude_code

    _run(files, out, lambda path: [read_claude_code(path)])
