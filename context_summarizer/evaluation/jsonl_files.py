"""Appending to the evaluator's JSON Lines files (``results.jsonl``, ``summaries.jsonl``,
``candidates.jsonl``...): one line per item, flushed as written, so an interrupted run loses only
what was in flight."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel


def ends_with_newline(path: Path) -> bool:
    """Whether the (non-empty) file at ``path`` ends with a newline."""
    with path.open("rb") as handle:
        handle.seek(-1, 2)
        return handle.read(1) == b"\n"


class JsonlAppender:
    """Appends lines to a JSONL file, each flushed as written."""

    def __init__(self, path: Path) -> None:
        cut = path.exists() and path.stat().st_size > 0 and not ends_with_newline(path)
        self._handle = path.open("a", encoding="utf-8")
        if cut:  # a line cut short by an interrupted run must not swallow the next
            self._handle.write("\n")

    def write_lines(self, lines: list[str]) -> None:
        """Append ``lines`` (each without its newline), then flush."""
        for line in lines:
            self._handle.write(line + "\n")
        self._handle.flush()

    def write(self, item: BaseModel) -> None:
        """Append ``item`` as one line."""
        self.write_lines([item.model_dump_json()])

    def close(self) -> None:
        """Close the file."""
        self._handle.close()
