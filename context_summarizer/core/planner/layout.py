"""The units of a view and which of them are kept verbatim by rule: every system/developer
message (a mid-conversation one only in its newest copy), the first and the latest user message,
pinned units and the final unit; the units in between form the *runs* a summary may replace.

A mid-conversation instruction that recurs word for word (Claude Code appends the same reminder
as a ``system`` message after each of its turns) is kept where it last stands: its earlier copies
say nothing the newest does not, and keeping every one would split the history into a run per
copy and never let it shrink. Leading instructions (the system prompt) are always kept."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..config import PinRule
from ..messages import INSTRUCTION_ROLES, Unit, group_units, message_digest, message_text
from .view import ViewItem


@dataclass(frozen=True, slots=True)
class _Run:
    first: int
    """First unit index."""
    stop: int
    """One past the last unit index."""
    tokens: int


class _Layout:
    """The units of a view and what is known about them, computed once per plan."""

    def __init__(self, view: Sequence[ViewItem], pins: Sequence[PinRule]) -> None:
        self.view = view
        self.units = group_units([item.message for item in view])
        self.tokens = [sum(view[i].tokens for i in unit.indices) for unit in self.units]
        self.inserted = [view[unit.start].raw_index is None for unit in self.units]
        self.protected = _protected(view, self.units, self.inserted, pins)
        last_inserted = max((u for u, ins in enumerate(self.inserted) if ins), default=-1)
        self.floor = last_inserted + 1
        """The tail never reaches back over an inserted summary."""

    @property
    def last(self) -> int:
        return len(self.units) - 1

    def runs(self, cut: int) -> list[_Run]:
        """Maximal stretches of units before ``cut`` that are not kept by rule."""
        found: list[_Run] = []
        first: int | None = None
        for u in range(cut + 1):
            if u < cut and u not in self.protected:
                if first is None:
                    first = u
                continue
            if first is not None:
                found.append(_Run(first, u, sum(self.tokens[first:u])))
                first = None
        return found

    def view_range(self, run: _Run) -> range:
        return range(self.units[run.first].start, self.units[run.stop - 1].end)


def _protected(
    view: Sequence[ViewItem],
    units: Sequence[Unit],
    inserted: Sequence[bool],
    pins: Sequence[PinRule],
) -> set[int]:
    """Units kept verbatim by rule (see the module docstring)."""
    protected: set[int] = set()
    users: list[int] = []
    leading = True
    newer: set[str] = set()  # mid-conversation instructions met, walking from the end
    superseded: set[int] = set()
    for u in range(len(units) - 1, -1, -1):
        message = view[units[u].start].message
        if not inserted[u] and message.get("role") in INSTRUCTION_ROLES:
            digest = message_digest(message)
            if digest in newer:
                superseded.add(u)
            newer.add(digest)
    for u, unit in enumerate(units):
        if inserted[u]:
            leading = False
            continue
        role = view[unit.start].message.get("role")
        if role in INSTRUCTION_ROLES:
            if leading or u not in superseded:
                protected.add(u)
            continue
        leading = False
        if role == "user":
            users.append(u)
    if users:
        protected.update((users[0], users[-1]))
    protected |= _pinned_units(view, units, inserted, pins)
    if units:
        protected.add(len(units) - 1)
    return protected


def _pinned_units(
    view: Sequence[ViewItem],
    units: Sequence[Unit],
    inserted: Sequence[bool],
    pins: Sequence[PinRule],
) -> set[int]:
    """For each rule, the newest ``rule.keep`` raw units it matches."""
    if not pins:
        return set()
    call_names: dict[str, str] = {}
    for item in view:
        for call in item.message.get("tool_calls") or ():
            if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                function = call.get("function")
                if isinstance(function, Mapping) and isinstance(function.get("name"), str):
                    call_names[call["id"]] = function["name"]
    pinned: set[int] = set()
    for rule in pins:
        matched = 0
        for u in range(len(units) - 1, -1, -1):
            if matched >= rule.keep:
                break
            if inserted[u]:
                continue
            for i in units[u].indices:
                message = view[i].message
                answered = call_names.get(message.get("tool_call_id", ""))
                if rule.matches(message, message_text(message), answered):
                    pinned.add(u)
                    matched += 1
                    break
    return pinned
