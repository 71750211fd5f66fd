"""What ``summarizer eval`` reads: any file a user has, recognised by its content and converted in
memory.

Each file is read as one of ``FORMATS``, decided by what it holds (its name is never needed):

- an **evaluation dataset** (JSONL, one ``dataset.Case`` per line; a file ``summarizer export``
  wrote is one too, told apart by its cases' ``metadata.source``). Lines that do not validate are
  skipped and reported, as ``dataset.load_dataset`` does;
- **training data** ``summarizer export --format sft|preference|reward`` wrote (with its
  metadata): each line a case whose given summaries are the line's answers
  (``converters.training``);
- a **Claude Code session** (JSONL of ``user``/``assistant``/... records with a ``message``);
- a **mini-swe-agent trajectory** (one object with ``messages`` and ``trajectory_format``
  ``mini-swe-agent*`` or ``info.mini_version``);
- a **SWE-agent trajectory** (one object with ``history`` or ``trajectory``);
- **tau-bench results** (records with ``traj``) or a **chat log** (message lists, records with
  ``messages``, as JSON or JSONL).

Converted files go through the ``converters`` (the same as ``summarizer convert``). A file that
is none of these, or that fails to convert, is a ``FileProblem``: one sentence naming the file and
what it looked like. Case ids stay unique across files: a repeated dataset id is a skipped line (as
in ``load_dataset``), a repeated converted id gets a ``-<k>`` suffix (as ``summarizer convert``
gives it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

from ..core.errors import ConversionError
from .converters.training import is_training_line, read_training_lines
from .dataset import Case, LineError, parse_lines

FORMATS: Mapping[str, str] = {
    "dataset": "an evaluation dataset",
    "export": "a summarizer export",
    "training": "summarizer training data",
    "claude-code": "a Claude Code session",
    "mini-swe-agent": "a mini-swe-agent trajectory",
    "swe-agent": "a SWE-agent trajectory",
    "tau-bench": "tau-bench results",
    "chat": "a chat log",
}
"""Every format ``read_inputs`` recognises, with how it names it ("read X as <name>")."""

EXPORT_SOURCE = "summarizer export"
"""``metadata.source`` of the cases ``summarizer export`` writes (from ``serve --record``)."""

CONVERT_HINT = "`summarizer convert --help` lists the formats eval reads"
"""Where every problem with a file points."""

_JSON_TYPES: Mapping[type, str] = {
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
    list: "a list",
}
_SQLITE = b"SQLite format 3\x00"
_SNIFF = 8192


@dataclass
class FileRead:
    """A file read as one of ``FORMATS``: its cases and the lines it skipped."""

    path: str
    format: str
    cases: list[Case]
    line_errors: list[LineError] = field(default_factory=list)
    case_lines: list[int] = field(default_factory=list)
    """The line of each case in a dataset file (empty for a converted file)."""

    @property
    def line(self) -> str:
        """``read PATH as a Claude Code session (1 case)``, with the skipped lines counted."""
        count = len(self.cases)
        what = f"{count} case" + ("" if count == 1 else "s")
        if self.line_errors:
            skipped = len(self.line_errors)
            what += f"; {skipped} line{'' if skipped == 1 else 's'} skipped"
        return f"read {self.path} as {FORMATS[self.format]} ({what})"


@dataclass(frozen=True)
class FileProblem:
    """A file that could not be read: what it looked like, or why its conversion failed."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}; {CONVERT_HINT}"


@dataclass
class Inputs:
    """Every case of the files given, in file order, with what each file was read as."""

    cases: list[Case] = field(default_factory=list)
    files: list[FileRead] = field(default_factory=list)
    problems: list[FileProblem] = field(default_factory=list)

    @property
    def line_errors(self) -> list[LineError]:
        """The skipped lines of every file, in order."""
        return [error for read in self.files for error in read.line_errors]


class _Unreadable(Exception):
    """Raised inside ``read_file`` with what the file looked like."""


def _shown(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit - 1] + "…")


def _keys(value: Mapping[str, Any]) -> str:
    keys = [str(k) for k in value]
    shown = ", ".join(keys[:6]) + (", ..." if len(keys) > 6 else "")
    return f"a JSON object with keys {shown}" if keys else "an empty JSON object"


def _looks_like(value: Any) -> str:
    """A few words on what a JSON value is, for a file no format matched."""
    if isinstance(value, Mapping):
        return _keys(value)
    if isinstance(value, list):
        if not value:
            return "an empty JSON list"
        first = value[0]
        inner = _keys(first) if isinstance(first, Mapping) else _JSON_TYPES[type(first)]
        return f"a JSON list of {len(value)} items, the first {inner}"
    return f"{_JSON_TYPES[type(value)]} ({_shown(json.dumps(value))})"


def _is_case(value: Any) -> bool:
    return isinstance(value, Mapping) and "id" in value and "messages" in value


def _valid_case(value: Any) -> bool:
    try:
        Case.model_validate(value)
    except ValueError:
        return False
    return True


def _is_message_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(m, Mapping) and "role" in m for m in value)


def _is_chat_document(value: Any) -> bool:
    """A message list, a record with ``messages``/``traj``, or a list of either."""
    if isinstance(value, Mapping):
        return isinstance(value.get("messages", value.get("traj")), list)
    if not isinstance(value, list) or not value:
        return False
    return _is_message_list(value) or all(
        _is_message_list(item) or _is_chat_document(item) for item in value
    )


def _has_traj(value: Any) -> bool:
    if isinstance(value, Mapping):
        return "traj" in value
    return isinstance(value, list) and any(isinstance(v, Mapping) and "traj" in v for v in value)


def _claude_code_records(records: Sequence[Any]) -> bool:
    return any(
        isinstance(r, Mapping)
        and r.get("type") in ("user", "assistant")
        and isinstance(r.get("message"), Mapping)
        for r in records
    )


def _sidechain_only(records: Sequence[Any]) -> bool:
    spoken = [
        r for r in records if isinstance(r, Mapping) and r.get("type") in ("user", "assistant")
    ]
    return bool(spoken) and all(r.get("isSidechain") for r in spoken)


def _document_format(data: Any) -> str:
    """The format of a file that parsed as one JSON document; ``_Unreadable`` when none fits."""
    if is_training_line(data):
        return "training"
    if isinstance(data, Mapping):
        if isinstance(data.get("history"), list) or isinstance(data.get("trajectory"), list):
            return "swe-agent"
        info = data.get("info")
        mini = str(data.get("trajectory_format", "")).startswith("mini-swe-agent") or (
            isinstance(info, Mapping) and "mini_version" in info
        )
        if mini and isinstance(data.get("messages"), list):
            return "mini-swe-agent"
        if isinstance(data.get("instances"), list) and "pass_rate" in data:
            raise _Unreadable(
                "a mini-swe-agent results summary, not a trajectory (it is read beside the "
                ".traj.json files it describes: pass those)"
            )
        if _is_case(data) and _valid_case(data):
            return "dataset"
        if _claude_code_records([data]):
            return "claude-code"
    if _is_chat_document(data):
        return "tau-bench" if _has_traj(data) else "chat"
    raise _Unreadable(_looks_like(data))


def _lines_format(documents: Sequence[Any]) -> str:
    """The format of a JSONL file, from the lines that parse."""
    if _claude_code_records(documents):
        if _sidechain_only(documents):
            raise _Unreadable(
                "a Claude Code sub-agent transcript (every record is a sidechain): pass the "
                "session's own <session>.jsonl"
            )
        return "claude-code"
    if any(_is_case(d) for d in documents):
        return "dataset"
    if all(is_training_line(d) for d in documents):
        return "training"
    if all(_is_chat_document(d) for d in documents):
        return "tau-bench" if any(_has_traj(d) for d in documents) else "chat"
    raise _Unreadable(f"JSON lines, the first {_looks_like(documents[0])}")


def _text_of(path: Path) -> str:
    with path.open("rb") as handle:
        head = handle.read(_SNIFF)
    if head.startswith(_SQLITE):
        raise _Unreadable(
            "a SQLite database (the proxy's store?): write its recorded sessions as a dataset "
            "with `summarizer export --all --db FILE --out cases.jsonl`, then evaluate that"
        )
    if b"\x00" in head:
        raise _Unreadable("a binary file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise _Unreadable("a binary or non-UTF-8 file") from None


def _detect(text: str) -> tuple[str, Any, bool]:
    """``(format, parsed data, whether it was JSONL)``; ``_Unreadable`` when nothing fits."""
    if not text.strip():
        raise _Unreadable("an empty file")
    try:
        data = json.loads(text)
    except ValueError as exc:
        whole_error = exc
    else:
        return _document_format(data), data, False
    documents = []
    for line in text.splitlines():
        if line.strip():
            try:
                documents.append(json.loads(line))
            except ValueError:
                continue
    if not documents:
        first = next(line for line in text.splitlines() if line.strip())
        if text.lstrip()[:1] in ("{", "["):
            raise _Unreadable(f"JSON that does not parse ({whole_error})")
        raise _Unreadable(f"text, not JSON (line 1: {_shown(first)})")
    return _lines_format(documents), documents, True


def _convert(path: Path, fmt: str) -> list[Case]:
    from .converters import read_chat, read_claude_code, read_mini_swe_agent, read_swe_agent

    if fmt == "claude-code":
        return [read_claude_code(path)]
    if fmt == "mini-swe-agent":
        return [read_mini_swe_agent(path)]
    if fmt == "swe-agent":
        return [read_swe_agent(path)]
    if fmt == "training":
        lines = [json.loads(line) for line in _text_of(path).splitlines() if line.strip()]
        return read_training_lines(lines, str(path))
    return read_chat(path)


def read_file(path: str | PathLike[str]) -> FileRead | FileProblem:
    """One file, recognised by its content (see the module doc) and read; the cases' ids are
    not yet made unique across files (``read_inputs`` does)."""
    source, file = str(path), Path(path)
    try:
        text = _text_of(file)
        fmt, data, jsonl = _detect(text)
    except _Unreadable as exc:
        return FileProblem(source, f"not a file eval can read: it looks like {exc}")
    except OSError as exc:
        return FileProblem(source, f"cannot read it: {exc.strerror or exc}")
    if fmt != "dataset":
        try:
            return FileRead(source, fmt, _convert(file, fmt))
        except ConversionError as exc:
            reason = str(exc).removeprefix(source).lstrip(":").strip()
            return FileProblem(source, f"looks like {FORMATS[fmt]} but did not convert: {reason}")
    read = FileRead(source, "dataset", [])
    if not jsonl:  # one case, as one JSON document (perhaps over several lines)
        text = json.dumps(data)
    for number, item in parse_lines(text.splitlines(), source=source):
        if isinstance(item, LineError):
            read.line_errors.append(item)
        else:
            read.cases.append(item)
            read.case_lines.append(number)
    if read.cases and all(c.metadata.get("source") == EXPORT_SOURCE for c in read.cases):
        read.format = "export"
    return read


def read_inputs(paths: Sequence[str | PathLike[str]]) -> Inputs:
    """Every file of ``paths`` read (``read_file``), their cases' ids made unique."""
    inputs = Inputs()
    seen: dict[str, int] = {}
    for path in paths:
        result = read_file(path)
        if isinstance(result, FileProblem):
            inputs.problems.append(result)
            continue
        kept: list[Case] = []
        lines = result.case_lines or [0] * len(result.cases)
        for case, number in zip(result.cases, lines, strict=True):
            count = seen[case.id] = seen.get(case.id, 0) + 1
            if count == 1:
                kept.append(case)
            elif result.case_lines:
                message = f"duplicate case id {case.id!r}"
                result.line_errors.append(LineError(path=result.path, line=number, message=message))
            else:
                kept.append(case.model_copy(update={"id": f"{case.id}-{count}"}))
        result.line_errors.sort(key=lambda error: error.line)
        result.cases = kept
        inputs.files.append(result)
        inputs.cases.extend(kept)
    return inputs
