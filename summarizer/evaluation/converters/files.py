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
from .swe_agent import convert_swe_agent


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
