"""The evaluation dataset format (a public contract): JSONL, one ``Case`` per line.

A line that does not parse or validate is reported as a ``LineError`` with its file and line
number and skipped; it is never dropped silently. ``load_dataset`` returns both, and the caller
decides whether errors are fatal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..core.errors import InvalidConversation
from ..core.messages import validate_messages


class GoldFact(BaseModel):
    """A fact a continuation needs: a path, an error, a decision, a constraint, ..."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    aliases: list[str] = Field(default_factory=list)
    kind: str = "other"


class Probe(BaseModel):
    """A question whose answer is in the trajectory."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1)
    answer: str = Field(min_length=1)


class GivenSummary(BaseModel):
    """A summary written elsewhere, replacing the first ``covers`` messages."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    text: str
    covers: int = Field(ge=1)


class Case(BaseModel):
    """One trajectory with what a good compaction of it must keep.

    ``metadata`` is free-form (source file, generator seed, ...); other unknown keys are rejected
    so that a misspelt field (``"fatcs"``) is reported instead of silently ignored.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    model: str | None = None
    facts: list[GoldFact] = Field(default_factory=list)
    probes: list[Probe] = Field(default_factory=list)
    summaries: list[GivenSummary] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("messages")
    @classmethod
    def _valid_messages(cls, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        try:
            validate_messages(messages)
        except InvalidConversation as exc:
            raise ValueError(str(exc)) from exc
        return messages

    @model_validator(mode="after")
    def _consistent(self) -> Case:
        ids = [fact.id for fact in self.facts]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate fact ids: {', '.join(duplicates)}")
        for summary in self.summaries:
            if summary.covers > len(self.messages):
                raise ValueError(
                    f"summary {summary.name!r} covers {summary.covers} messages but the case "
                    f"has {len(self.messages)}"
                )
        return self


class LineError(BaseModel):
    """A dataset line that was skipped, and why."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in error["loc"])
        parts.append(f"{where}: {error['msg']}" if where else str(error["msg"]))
    return "; ".join(parts)


def parse_lines(
    lines: Iterable[str], *, source: str = "<input>"
) -> Iterator[tuple[int, Case | LineError]]:
    """Parse JSONL text line by line into ``(line number, case or error)``.

    Blank lines are skipped; a bad line yields a ``LineError``.
    """
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            yield number, LineError(path=source, line=number, message=f"invalid JSON: {exc}")
            continue
        try:
            yield number, Case.model_validate(data)
        except ValidationError as exc:
            yield number, LineError(path=source, line=number, message=_describe(exc))


def load_dataset(
    paths: Sequence[str | PathLike[str]],
) -> tuple[list[Case], list[LineError]]:
    """Read every case of the JSONL files in ``paths``, with the lines that were skipped.

    A case id seen twice (across files too) is an error on the later line.
    """
    cases: list[Case] = []
    errors: list[LineError] = []
    seen: set[str] = set()
    for path in paths:
        source = str(path)
        with Path(path).open(encoding="utf-8") as handle:
            for number, item in parse_lines(handle, source=source):
                if isinstance(item, LineError):
                    errors.append(item)
                elif item.id in seen:
                    message = f"duplicate case id {item.id!r}"
                    errors.append(LineError(path=source, line=number, message=message))
                else:
                    seen.add(item.id)
                    cases.append(item)
    return cases, errors


def dump_case(case: Case) -> str:
    """One JSONL line for ``case`` (no trailing newline); defaults are omitted."""
    return json.dumps(
        case.model_dump(mode="json", exclude_defaults=True), ensure_ascii=False, sort_keys=False
    )


def write_dataset(cases: Iterable[Case], path: str | PathLike[str]) -> int:
    """Write ``cases`` as JSONL to ``path``; returns how many were written."""
    count = 0
    with Path(path).open("w", encoding="utf-8") as handle:
        for case in cases:
            handle.write(dump_case(case) + "\n")
            count += 1
    return count
