"""Turn other tools' agent trajectories into evaluation cases (``evaluation.dataset.Case``).

Two sources:

- **SWE-agent** ``.traj`` files: ``history`` (preferred) or ``trajectory`` steps become the
  messages; gold facts are what the run itself recorded: the files its final patch changed, the
  failing tests and error lines seen in observations, and an obvious reproduce command.
- **Chat logs**: a JSON list of message lists, a single message list, records with ``messages``
  or ``traj`` (tau-bench), or JSONL of any of those. tau-bench records also give identifier facts
  from the task's ground-truth actions, kept when the conversation mentions them.

Messages are rebuilt, never passed through: only the keys OpenAI's Chat Completions accepts for
each role are kept (``agent``, ``thought``, ``action``, ``message_type``, ... are dropped),
demonstration messages (``is_demo``) are dropped, and a tool result that answers no preceding
call becomes a user message, while a call no result answers is removed, so every converted case
passes ``validate_messages`` and pairs each ``tool_calls`` id with its result. The ``convert_*``
functions are pure; ``read_*`` add file reading, and every failure is a ``ConversionError`` whose
message starts with the file name.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..core.errors import ConversionError
from ..core.messages import message_text, validate_messages
from .dataset import Case, GoldFact, Probe

_KEYS: dict[str, tuple[str, ...]] = {
    "system": ("name",),
    "developer": ("name",),
    "user": ("name",),
    "assistant": ("name", "refusal", "function_call"),
    "tool": (),
    "function": ("name",),
}


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, (str, int)) and str(value).lower() in {"true", "1"})


def _content(value: Any) -> str | list[dict[str, Any]] | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        parts: list[dict[str, Any]] = []
        for part in value:
            if isinstance(part, Mapping) and isinstance(part.get("type"), str):
                parts.append(dict(part))
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append({"type": "text", "text": part["text"]})
            else:
                text = part if isinstance(part, str) else json.dumps(part, ensure_ascii=False)
                parts.append({"type": "text", "text": text})
        return parts or ""
    return json.dumps(value, ensure_ascii=False)


def _parse_listish(value: Any) -> Any:
    """A list given as JSON or Python-literal text (SWE-agent writes both), else ``value``."""
    if not isinstance(value, str):
        return value
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(value)
        except (ValueError, SyntaxError):
            continue
    return value


def _tool_calls(value: Any, where: str, index: int) -> list[dict[str, Any]]:
    calls = _parse_listish(value)
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise ConversionError(f"{where}: tool_calls is not a list")
    out: list[dict[str, Any]] = []
    for n, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise ConversionError(f"{where}: tool_calls[{n}] has no function name")
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
        call_id = call["id"] if isinstance(call.get("id"), str) else f"call_{index}_{n}"
        out.append(
            {
                "id": call_id,
                "type": "function",
                "function": {"name": function["name"], "arguments": arguments},
            }
        )
    return out


def _answered_id(item: Mapping[str, Any]) -> str | None:
    call_id = item.get("tool_call_id")
    if isinstance(call_id, str):
        return call_id
    ids = _parse_listish(item.get("tool_call_ids"))
    return ids[0] if isinstance(ids, list) and ids and isinstance(ids[0], str) else None


def openai_messages(raw: Any, *, where: str) -> list[dict[str, Any]]:
    """Chat Completions messages rebuilt from ``raw`` (see the module docstring for the rules).

    ``where`` prefixes error messages (a file name, a record number). Raises ``ConversionError``
    for a message that is not an object or has a role Chat Completions does not know.
    """
    if not isinstance(raw, list):
        raise ConversionError(f"{where}: messages must be a list")
    out: list[dict[str, Any]] = []
    pending: set[str] = set()
    for index, item in enumerate(raw):
        at = f"{where}: message {index}"
        if not isinstance(item, Mapping):
            raise ConversionError(f"{at} is not an object")
        if _truthy(item.get("is_demo")):
            continue
        role = item.get("role")
        if not isinstance(role, str) or role not in _KEYS:
            raise ConversionError(f"{at} has unsupported role {role!r}")
        content = _content(item.get("content"))
        message: dict[str, Any] = {"role": role, "content": content}
        message.update({k: item[k] for k in _KEYS[role] if item.get(k) is not None})
        if role == "tool":
            call_id = _answered_id(item)
            if call_id is not None and call_id in pending:
                pending.discard(call_id)
                message["tool_call_id"] = call_id
            else:  # an observation that answers no call: keep what it says, as the user's turn
                message = {"role": "user", "content": content or ""}
        elif role == "assistant":
            calls = _tool_calls(item.get("tool_calls"), at, index)
            if calls:
                message["tool_calls"] = calls
            pending = {call["id"] for call in calls}
        else:
            pending = set()
        out.append(message)
    return _drop_unanswered(out)


def _drop_unanswered(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        calls = message.get("tool_calls")
        if calls:
            answered: set[str] = set()
            for later in messages[index + 1 :]:
                if later["role"] != "tool":
                    break
                answered.add(later["tool_call_id"])
            message["tool_calls"] = [call for call in calls if call["id"] in answered]
            if not message["tool_calls"]:
                del message["tool_calls"]
        if message.get("content") is None and not message.get("tool_calls"):
            message["content"] = ""
        kept.append(message)
    return validate_messages(kept)


# --- facts a trajectory records ------------------------------------------------------------------

_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.MULTILINE)
_TEST_LINE = re.compile(
    r"^(?:(?:FAILED|ERROR)\s+(\S+::\S+|\S*test\S*\.py)(?:\s|$)|(\S+::\S+)\s+(?:FAILED|ERROR)\b)"
)
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)\b.*")
_PYTEST_E = re.compile(r"^E\s{2,}((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)\b.*)")
_FRAME = re.compile(r'^\s+File "[^"]+", line \d+')
_REPRODUCE = re.compile(r"^\s*(python3?\s+\S*reproduc\w*\.py)\b")


def patch_files(patch: str) -> list[str]:
    """The files a unified diff changes, in order (the ``b/`` side of ``diff --git`` lines)."""
    return _unique(match.group(2) for match in _DIFF_FILE.finditer(patch.replace("\r\n", "\n")))


def failing_tests(text: str) -> list[str]:
    """Test ids pytest reported as failed or erroring (``FAILED path::test``, ...), in order."""
    found = []
    for line in text.replace("\r\n", "\n").split("\n"):
        match = _TEST_LINE.match(line.strip()[:500])
        if match:
            found.append(match.group(1) or match.group(2))
    return _unique(found)


def error_lines(text: str) -> list[str]:
    """The exception line ending each Python traceback (or ``File "...", line N`` report, as
    for a ``SyntaxError``), and pytest's ``E   XError: ...`` lines, in order."""
    found: list[str] = []
    in_traceback = False
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.rstrip()
        if line.startswith("Traceback (most recent call last)") or _FRAME.match(line[:500]):
            in_traceback = True
            continue
        if in_traceback and line and not line[0].isspace():
            if _EXCEPTION.match(line[:500]):
                found.append(line.strip()[:300])
            in_traceback = False
            continue
        match = _PYTEST_E.match(line[:500])
        if match:
            found.append(match.group(1).strip()[:300])
    return _unique(found)


def _unique(items: Any) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))


def _commands(message: Mapping[str, Any]) -> Iterator[str]:
    for call in message.get("tool_calls") or ():
        try:
            arguments = json.loads(call["function"]["arguments"])
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(arguments, Mapping):
            for value in arguments.values():
                if isinstance(value, str):
                    yield from value.splitlines()
    content = message.get("content")
    if isinstance(content, str):
        yield from content.splitlines()


def _numbered(prefix: str, kind: str, texts: Iterable[str]) -> list[GoldFact]:
    return [
        GoldFact(
            id=f"{prefix}-{n}",
            text=text,
            kind=kind,
            aliases=[text.replace("/", "\\")] if kind == "path" and "/" in text else [],
        )
        for n, text in enumerate(texts, start=1)
    ]


def _swe_facts(messages: list[dict[str, Any]], patch: str) -> list[GoldFact]:
    observed = "\n".join(message_text(m) for m in messages if m["role"] in ("tool", "user"))
    commands = (
        match.group(1)
        for m in messages
        if m["role"] == "assistant"
        for line in _commands(m)
        if (match := _REPRODUCE.match(line))
    )
    return [
        *_numbered("patch-file", "path", patch_files(patch)),
        *_numbered("test", "test", failing_tests(observed)),
        *_numbered("error", "error", error_lines(observed)),
        *_numbered("command", "command", list(commands)[:1]),
    ]


def _trajectory_messages(steps: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(steps, list):
        raise ConversionError(f"{where}: 'trajectory' must be a list")
    out: list[dict[str, Any]] = []
    for step in steps:
        if not isinstance(step, Mapping):
            raise ConversionError(f"{where}: a trajectory step is not an object")
        thought = str(step.get("thought") or step.get("response") or "").rstrip()
        action = str(step.get("action") or "").rstrip()
        text = f"{thought}\n\n```\n{action}\n```" if action else thought
        out.append({"role": "assistant", "content": text.strip()})
        observation = step.get("observation")
        if observation is not None:
            out.append({"role": "user", "content": _content(observation) or ""})
    return out


def convert_swe_agent(data: Mapping[str, Any], *, source: str) -> Case:
    """One case from a parsed SWE-agent ``.traj`` (``source`` names the file)."""
    info: Mapping[str, Any] = data["info"] if isinstance(data.get("info"), Mapping) else {}
    raw_history = data.get("history")
    if isinstance(raw_history, list) and raw_history:
        demos = sum(1 for m in raw_history if isinstance(m, Mapping) and _truthy(m.get("is_demo")))
        messages, origin = openai_messages(raw_history, where=source), "history"
    else:
        demos = 0
        raw = _trajectory_messages(data.get("trajectory"), source)
        messages, origin = openai_messages(raw, where=source), "trajectory"
    if not messages:
        raise ConversionError(f"{source}: no messages in 'history' or 'trajectory'")
    submission = info.get("submission")
    patch = submission if isinstance(submission, str) else ""
    facts = _swe_facts(messages, patch)
    instance = str(data.get("instance_id") or info.get("instance_id") or Path(source).stem)
    changed = [f.text for f in facts if f.kind == "path"]
    question = "Which file did the final patch change first?"
    return _validated(
        source,
        id=instance,
        messages=messages,
        facts=facts,
        probes=[Probe(question=question, answer=changed[0])] if changed else [],
        metadata={
            "source": source,
            "format": "swe-agent",
            "instance_id": instance,
            "exit_status": info.get("exit_status"),
            "messages_from": origin,
            "dropped_demos": demos,
        },
    )


def _validated(where: str, **fields: Any) -> Case:
    """A ``Case`` from ``fields`` (``None`` metadata values dropped); invalid is a
    ``ConversionError`` naming ``where``."""
    fields["metadata"] = {k: v for k, v in fields.get("metadata", {}).items() if v is not None}
    try:
        return Case(**fields)
    except ValidationError as exc:
        raise ConversionError(f"{where}: {exc.errors(include_url=False)[0]['msg']}") from exc


# --- chat logs and tau-bench ---------------------------------------------------------------------

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


# --- files ---------------------------------------------------------------------------------------


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
