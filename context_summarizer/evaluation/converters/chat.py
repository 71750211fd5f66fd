"""Chat logs: a JSON list of message lists, a single message list, records with ``messages`` or
``traj`` (tau-bench), or the documents of a JSONL file. tau-bench records also give identifier
facts from the task's ground-truth actions, kept when the conversation mentions them."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ...core.errors import ConversionError
from ...core.messages import message_text
from ..dataset import Case, GoldFact, Probe
from .cases import _unique, _validated
from .messages import openai_messages

_ID_VALUE = re.compile(r"(?=[^ ]*\d)(?=[^ ]*[A-Za-z])[A-Za-z0-9_.\-]{4,}")
_ID_KEY = re.compile(r"(?:^|_)(?:id|ids|number|code)$")


def action_identifiers(actions: Any) -> list[str]:
    """String identifiers in tau-bench ground-truth ``actions`` (``[{name, kwargs}]``), in order.

    An identifier is a string under a key like ``*_id``/``*_number``, or any single token mixing
    letters and digits (``HAT136``, ``mia_li_3668``); words, dates and amounts are not.
    """
    found: list[str] = []

    def walk(value: Any, key: str) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, str(k))
        elif isinstance(value, list):
            for v in value:
                walk(v, key)
        elif isinstance(value, str) and (_ID_KEY.search(key) or _ID_VALUE.fullmatch(value)):
            found.append(value.strip())

    for action in actions if isinstance(actions, list) else ():
        if isinstance(action, Mapping):
            walk(action.get("kwargs"), "")
    return _unique(found)


def _records(data: Any) -> list[Any]:
    """The conversations in one parsed chat document: a message list or a record per item."""
    if isinstance(data, Mapping):
        return [data]
    if not isinstance(data, list):
        return [data]
    if data and all(isinstance(m, Mapping) and "role" in m for m in data):
        return [data]  # a single message list
    return data


def convert_chat(data: Any, *, source: str, lines: bool = False) -> Iterator[Case]:
    """Cases from parsed chat data: one document, or (``lines``) the documents of a JSONL file.

    A document is a message list, a list of message lists, a record with ``messages`` (or
    ``traj``), or a list of records. Case ids come from ``id``, else ``task_id`` (with the
    ``trial`` when present), else ``<file stem>-<n>`` counting conversations from 1 through the
    file; a repeated id gets a ``-<k>`` suffix.
    """
    documents = data if lines else [data]
    if not isinstance(documents, list):
        raise ConversionError(f"{source}: expected the list of a JSONL file's documents")
    records = [record for document in documents for record in _records(document)]
    stem = Path(source).stem
    seen: dict[str, int] = {}
    for number, item in enumerate(records, start=1):
        where = f"{source}: conversation {number}"
        record = {"messages": item} if isinstance(item, list) else item
        if not isinstance(record, Mapping):
            raise ConversionError(f"{where}: expected a message list or an object")
        raw = record.get("messages", record.get("traj"))
        if raw is None:
            raise ConversionError(f"{where}: no 'messages' or 'traj' key")
        messages = openai_messages(raw, where=where)
        facts, probes, extra = _tau_facts(record, messages) if "traj" in record else ([], [], {})
        case_id = _record_id(record, stem, number)
        seen[case_id] = seen.get(case_id, 0) + 1
        tools = record.get("tools")
        yield _validated(
            where,
            id=case_id if seen[case_id] == 1 else f"{case_id}-{seen[case_id]}",
            messages=messages,
            tools=tools if isinstance(tools, list) else None,
            facts=facts,
            probes=probes,
            metadata={"source": source, "format": "chat", "index": number, **extra},
        )


def _record_id(record: Mapping[str, Any], stem: str, number: int) -> str:
    if record.get("id") is not None:
        return str(record["id"])
    if record.get("task_id") is None:
        return f"{stem}-{number}"
    trial = record.get("trial")
    return f"{stem}-task-{record['task_id']}" + (f"-trial-{trial}" if trial is not None else "")


def _tau_facts(
    record: Mapping[str, Any], messages: list[dict[str, Any]]
) -> tuple[list[GoldFact], list[Probe], dict[str, Any]]:
    info = record.get("info") if isinstance(record.get("info"), Mapping) else {}
    task = info.get("task") if isinstance(info, Mapping) else None
    task = task if isinstance(task, Mapping) else {}
    said = "\n".join(message_text(m) for m in messages)
    identifiers = action_identifiers(task.get("actions"))
    present = [value for value in identifiers if value in said]
    facts = [
        GoldFact(id=f"identifier-{n}", text=value, kind="identifier")
        for n, value in enumerate(present, start=1)
    ]
    probes = []
    user_id = task.get("user_id")
    if isinstance(user_id, str) and user_id in said:
        probes.append(Probe(question="What is the customer's user id?", answer=user_id))
    metadata = {
        "format": "tau-bench",
        "task_id": record.get("task_id"),
        "trial": record.get("trial"),
        "reward": record.get("reward"),
        "instruction": task.get("instruction"),
        "identifiers_not_in_conversation": [v for v in identifiers if v not in present] or None,
    }
    return facts, probes, metadata
