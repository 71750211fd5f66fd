"""The ``read_*`` converters: a file read and parsed as JSON or JSONL, then converted; every
failure is a ``ConversionError`` whose message starts with the file name."""

from __future__ import annotations

import json
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from ...core.errors import ConversionError
from ..dataset import Case
from .chat import convert_chat
from .claude_code import convert_claude_code
from .mini_swe_agent import convert_mini_swe_agent, resolved_instances
from .swe_agent import convert_swe_agent

RESULTS_SUMMARY = "results_summary.json"
"""The file beside mini-swe-agent trajectories that says which instances were resolved."""


def _read_json(path: str | PathLike[str]) -> tuple[Any, bool]:
    """The parsed file, and whether it was JSONL (then: the list of its documents)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConversionError(f"{path}: cannot read: {exc}") from exc
    try:
        return json.loads(text), False
    except ValueError as exc:
        json_error = exc
    documents = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            documents.append(json.loads(line))
        except ValueError:
            if not documents:
                raise ConversionError(f"{path}: invalid JSON: {json_error}") from json_error
            raise ConversionError(f"{path}:{number}: invalid JSON line") from None
    if not documents:
        raise ConversionError(f"{path}: empty file")
    return documents, True


def read_swe_agent(path: str | PathLike[str]) -> Case:
    """The case in one SWE-agent ``.traj`` file."""
    data, lines = _read_json(path)
    if lines or not isinstance(data, Mapping):
        raise ConversionError(f"{path}: a .traj file must hold one JSON object")
    if "history" not in data and "trajectory" not in data:
        raise ConversionError(f"{path}: neither 'history' nor 'trajectory' found")
    return convert_swe_agent(data, source=str(path))


def read_chat(path: str | PathLike[str]) -> list[Case]:
    """The cases in one chat JSON or JSONL file."""
    data, lines = _read_json(path)
    cases = list(convert_chat(data, source=str(path), lines=lines))
    if not cases:
        raise ConversionError(f"{path}: no conversations found")
    return cases


def read_mini_swe_agent(path: str | PathLike[str]) -> Case:
    """The case in one mini-swe-agent ``.traj.json`` file; whether the run was resolved comes
    from a ``results_summary.json`` in the same folder, when there is one (else unknown)."""
    data, lines = _read_json(path)
    if lines or not isinstance(data, Mapping):
        raise ConversionError(f"{path}: a .traj.json file must hold one JSON object")
    if not isinstance(data.get("messages"), list):
        raise ConversionError(f"{path}: no 'messages' list")
    resolved: bool | None = None
    summary = Path(path).parent / RESULTS_SUMMARY
    if summary.is_file():
        results, _ = _read_json(summary)
        instance = data.get("instance_id")
        resolved = resolved_instances(results).get(str(instance)) if instance else None
    return convert_mini_swe_agent(data, source=str(path), resolved=resolved)


def read_claude_code(path: str | PathLike[str]) -> Case:
    """The case in one Claude Code session transcript (``<session>.jsonl``)."""
    data, lines = _read_json(path)
    records = data if lines else [data]
    if not any(isinstance(r, Mapping) and r.get("type") in ("user", "assistant") for r in records):
        raise ConversionError(f"{path}: no user or assistant records (not a Claude Code session)")
    return convert_claude_code(records, source=str(path))
