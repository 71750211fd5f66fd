"""The facts of a span of conversation with what the agent did with each: ``extract_facts`` (by
first appearance) and ``rank_facts`` (most important first, for the ledger).

Each message's facts come from ``extraction``; the agent's actions (``actions``) give them their
roles: the files it edited and read, how each command it ran last ended, whether an error a run
reported was resolved by a later passing run of the same command, the ids it passed to tools.
What the user asked comes from ``constraints``. Summary messages are skipped whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..messages import message_text
from .actions import Action, find_actions, passed
from .constraints import user_constraints
from .errors import _bound
from .extraction import _message_facts
from .fact import Fact, FactKind, FactRole, normalize_fact_text
from .importance import importance, is_exploring
from .provenance import is_summary_message

_ROLE_KINDS: dict[FactRole, frozenset[FactKind]] = {
    "edited": frozenset({"path"}),
    "read": frozenset({"path"}),
    "failed": frozenset({"command", "test"}),
    "passed": frozenset({"command"}),
    "ran": frozenset({"command"}),
    "unresolved": frozenset({"error"}),
    "resolved": frozenset({"error"}),
    "argument": frozenset({"identifier"}),
}


@dataclass
class _Seen:
    fact: Fact
    first: int
    last: int
    count: int = 1


def _outcome(
    action: Action, messages: Sequence[Mapping[str, Any]], found: list[list[Fact]]
) -> FactRole:
    """How an action ended: its exit code, else the errors or failing tests its output
    reports (a command that only looks around fails by its exit code alone), else whether its
    output reads as a pass."""
    if action.exit_code is not None:
        return "passed" if action.exit_code == 0 else "failed"
    if action.output_index is None:
        return "ran"
    reported = any(f.kind in ("error", "test") for f in found[action.output_index])
    if reported and not all(is_exploring(c) for c in action.commands):
        return "failed"
    return "passed" if passed(message_text(messages[action.output_index])) else "ran"


def _roles(
    messages: Sequence[Mapping[str, Any]], found: list[list[Fact]], actions: list[Action]
) -> tuple[dict[str, FactRole], list[tuple[int, FactKind, str]]]:
    """The role of each fact key, and the facts the actions name that no message text gave."""
    roles: dict[str, FactRole] = {}
    extra: list[tuple[int, FactKind, str]] = []
    outcomes = [_outcome(action, messages, found) for action in actions]
    last_pass: dict[str, int] = {}  # family -> the last action of it that passed
    for n, action in enumerate(actions):
        if outcomes[n] == "passed" and action.family:
            last_pass[action.family] = n
    for n, action in enumerate(actions):
        for command in action.commands:
            roles[normalize_fact_text(_bound(command))] = outcomes[n]
        for path in action.read:
            key = normalize_fact_text(path)
            if roles.get(key) != "edited":
                roles[key] = "read"
            extra.append((action.index, "path", path))
        for path in action.edited:
            roles[normalize_fact_text(path)] = "edited"
            extra.append((action.index, "path", path))
        for value in action.arguments:
            roles.setdefault(normalize_fact_text(value), "argument")
            extra.append((action.index, "identifier", value))
        if action.output_index is None:
            continue
        fixed = bool(action.family) and last_pass.get(action.family or "", -1) > n
        for fact in found[action.output_index]:
            if fact.kind == "error":
                roles[fact.key] = "resolved" if fixed else "unresolved"
            elif fact.kind == "test" and not fixed:
                roles[fact.key] = "failed"
    return roles, extra


def _survey(messages: Sequence[Mapping[str, Any]]) -> list[_Seen]:
    """Every fact of ``messages`` with its role, where it first and last appeared and in how
    many messages, by first appearance."""
    skip = [is_summary_message(message) for message in messages]
    found = [[] if skip[i] else _message_facts(m) for i, m in enumerate(messages)]
    live = [m if not skip[i] else {"role": "user", "content": ""} for i, m in enumerate(messages)]
    roles, extra = _roles(live, found, find_actions(live))
    located: list[tuple[int, Fact]] = [(i, fact) for i, facts in enumerate(found) for fact in facts]
    for index, kind, text in extra:
        try:
            located.append((index, Fact(kind=kind, text=text)))
        except ValidationError:
            continue
    for index, text in user_constraints(live, skip):
        located.append((index, Fact(kind="constraint", text=text)))
    located.sort(key=lambda item: item[0])  # stable: within a message, extraction's order
    seen: dict[str, _Seen] = {}
    counted: set[tuple[str, int]] = set()
    for index, fact in located:
        key = fact.key
        entry = seen.get(key)
        if entry is None:
            role = roles.get(key)
            if role is not None and fact.kind not in _ROLE_KINDS[role]:
                role = None
            seen[key] = _Seen(fact.model_copy(update={"role": role}), index, index)
            counted.add((key, index))
        elif (key, index) not in counted:
            counted.add((key, index))
            entry.last, entry.count = index, entry.count + 1
    return list(seen.values())


def extract_facts(messages: Sequence[Mapping[str, Any]]) -> list[Fact]:
    """The facts in ``messages`` (all roles, tool calls and outputs), by first appearance, each
    with what the agent did with it (``Fact.role``).

    Deduplicated by ``Fact.key``: the first occurrence's kind and text are kept. What each
    message holds is ``extraction``'s to find (paths, URLs, identifiers, errors, commands,
    tests, commits, quantities); the agent's actions add the files they edited or read and the
    ids they passed (``actions``), the user's messages add what the user asked
    (``constraints``). Summary messages (``is_summary_message``) are skipped whole: a fact comes
    only from what the agent, its tools and its user said, never from what a model wrote about
    it.
    """
    return [entry.fact for entry in _survey(messages)]


def rank_facts(messages: Sequence[Mapping[str, Any]]) -> list[Fact]:
    """The facts of ``extract_facts``, most important first: by ``importance``, then the most
    recently seen first, then the most often seen."""
    entries = _survey(messages)
    entries.sort(key=lambda e: (importance(e.fact), -e.last, -e.count, e.first))
    return [entry.fact for entry in entries]
