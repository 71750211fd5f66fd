"""``summaries.jsonl``: the summary records of an evaluation run, beside its ``results.jsonl``.

Each compaction a model summarized under the engine's online gate (``self-summary``,
``self-summary-no-ledger``, ``hybrid``) yields one ``core.summary_records.SummaryRecord`` per
summarized run: the summary request exactly as sent, each answer, how the gate judged it, the
facts and the cap. The runner appends them as each row finishes, one line per record::

    {"row": {"case_id": ..., "strategy": ..., "variant": ..., "repeat": ...}, "record": {...}}

``from-scratch`` writes none: it has no online gate, so nothing judged its answers. A row that
is recomputed (an errored row, on the next run into the directory) appends its records again;
``read_summary_records`` keeps, per row key, only the records of the last computation (the
records of one computation share their compaction's ``checkpoint_id``), as ``results.jsonl``
keeps the last row. ``summarizer export`` reads a run's records with ``read_summary_records``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

from ..core.summary_records import SummaryRecord
from .jsonl_files import JsonlAppender
from .records import RowKey

logger = logging.getLogger("summarizer.eval")

SUMMARIES_FILE = "summaries.jsonl"
"""The records' file in an evaluation's output directory."""


class RowRef(BaseModel):
    """The row a record belongs to (``ResultRow.key`` spelled out)."""

    case_id: str
    strategy: str
    variant: str = ""
    repeat: int = 0

    @property
    def key(self) -> RowKey:
        """The row's key, as ``ResultRow.key``."""
        return (self.case_id, self.strategy, self.variant, self.repeat)


class SummaryLine(BaseModel):
    """One line of ``summaries.jsonl``."""

    row: RowRef
    record: SummaryRecord


def summary_lines(key: RowKey, records: Sequence[SummaryRecord]) -> list[str]:
    """The lines (without newline) recording ``records`` for the row ``key``."""
    case_id, strategy, variant, repeat = key
    row = RowRef(case_id=case_id, strategy=strategy, variant=variant, repeat=repeat)
    return [SummaryLine(row=row, record=record).model_dump_json() for record in records]


class SummaryRecordWriter:
    """Appends a row's records to ``summaries.jsonl``, flushed as written."""

    def __init__(self, out_dir: Path) -> None:
        self._file = JsonlAppender(out_dir / SUMMARIES_FILE)

    def write(self, key: RowKey, records: Sequence[SummaryRecord]) -> None:
        """Append ``records`` of the row ``key`` (nothing when there are none)."""
        self._file.write_lines(summary_lines(key, records))

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def read_summary_records(out_dir: Path) -> list[tuple[RowKey, SummaryRecord]]:
    """The summary records of the evaluation in ``out_dir``, each with its row's key
    ``(case_id, strategy, variant or "", repeat)``, in file order.

    Per row key only the last computation's records are kept (a recomputed row's records
    replace the earlier ones). Unreadable lines (a line cut short by an interrupt) are skipped
    with a warning; a directory without ``summaries.jsonl`` has none.
    """
    path = out_dir / SUMMARIES_FILE
    if not path.exists():
        return []
    lines: list[SummaryLine] = []
    with path.open(encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                lines.append(SummaryLine.model_validate(json.loads(text)))
            except ValueError:
                logger.warning("%s:%d: unreadable summary record skipped", path, number)
    last = {line.row.key: line.record.checkpoint_id for line in lines}
    return [
        (line.row.key, line.record)
        for line in lines
        if last[line.row.key] == line.record.checkpoint_id
    ]
