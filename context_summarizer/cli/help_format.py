"""``--help`` laid out as click lays it out, whatever Typer's version.

Typer 0.27 (its "metavar printing" change) names each value by its Python type in angle brackets:
``--port <int>``, ``--via <str>``, ``FILE <list[Path]>``, and in its Rich panels ``<bool>`` beside
every switch, ``--help`` included. Every command of ``summarizer`` is a ``ClickStyleCommand``
(its groups ``ClickStyleGroup``), which names values as click does: ``--port INTEGER``,
``--api [chat|messages|responses]`` (a fixed set: a ``Literal`` or an ``Enum``), ``FILE...``,
nothing after a switch; an option declared with its own ``metavar`` keeps it. Help is plain text,
never Rich's: ``serve``'s thirty flags need the columns, and the command starts sooner without
importing Rich.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import Any, get_args

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

_VALUE_NAMES: dict[Any, str] = {
    str: "TEXT",
    int: "INTEGER",
    float: "FLOAT",
    bool: "BOOLEAN",
    Path: "PATH",
}


def value_name(param: TyperOption | TyperArgument) -> str:
    """click's name for one value of ``param``: ``TEXT``, ``INTEGER``, ``FLOAT``, ``PATH``, or
    ``[a|b|c]`` for a fixed set."""
    described = param.type_descriptor
    if described.choices is not None:
        choices = (c.value if isinstance(c, Enum) else c for c in described.choices)
        return "[" + "|".join(str(choice) for choice in choices) + "]"
    if described.is_path:
        return "PATH"
    kind = described.annotation
    if described.is_list:
        (kind,) = get_args(kind)
    return _VALUE_NAMES.get(kind, getattr(kind, "__name__", "VALUE").upper())


def argument_name(argument: TyperArgument, *, usage: bool = False) -> str:
    """An argument as click writes it: its metavar (else its name in capitals), ``...`` when it
    takes several values; in the usage line, in brackets when it is optional."""
    name = argument.metavar or (argument.name or "").upper()
    if usage and not argument.required:
        name = f"[{name}]"
    if argument.nargs != 1 and not name.endswith("..."):
        name += "..."
    return name


def _named(params: Iterable[Any]) -> list[Any]:
    """``params``, each option that takes a value and has no metavar given click's name for it
    (Typer's own writing of a metavar, ``<type>``, is then never used)."""
    params = list(params)
    for param in params:
        if isinstance(param, TyperOption) and param.metavar is None and not param.is_flag:
            param.metavar = value_name(param)
    return params


def help_sections(params: Iterable[Any], ctx: Any) -> dict[str, list[tuple[str, str]]]:
    """Each parameter's help line (name, help) under its heading: ``Arguments``, then each
    option's ``rich_help_panel`` (none: ``Options``), in their first parameter's order."""
    sections: dict[str, list[tuple[str, str]]] = {"Arguments": []}
    for param in _named(params):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        if isinstance(param, TyperArgument):
            # Typer writes the argument's type after its name; click's name alone is wanted.
            sections["Arguments"].append((argument_name(param), record[1]))
        else:
            heading = getattr(param, "rich_help_panel", None) or "Options"
            sections.setdefault(heading, []).append(record)
    return {heading: records for heading, records in sections.items() if records}


class ClickStyleCommand(TyperCommand):
    """A Typer command whose help names values as click does (see the module), its options under
    their headings (each one's ``rich_help_panel``; none: ``Options``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rich_markup_mode = None

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """``[OPTIONS]``, then each argument as click writes it (``FILE...``, ``[SESSION]``)."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                pieces.append(argument_name(param, usage=True))
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """Each parameter's help line, under its heading."""
        for heading, records in help_sections(self.get_params(ctx), ctx).items():
            with formatter.section(heading):
                formatter.write_dl(records)


class ClickStyleGroup(TyperGroup):
    """A Typer group whose help is laid out as ``ClickStyleCommand``'s, then its commands, each
    with the first paragraph of its help (``command_summary``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rich_markup_mode = None

    def command_summary(self, ctx: Any, name: str) -> str | None:
        """The line listing the command ``name``: its short help, else its help's first
        paragraph; None for a hidden or unknown command."""
        command = self.get_command(ctx, name)
        if command is None or command.hidden:
            return None
        return first_paragraph(command.short_help or command.help or "")

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """The group's own options, then its commands."""
        for heading, records in help_sections(self.get_params(ctx), ctx).items():
            with formatter.section(heading):
                formatter.write_dl(records)
        self.format_commands(ctx, formatter)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """Each command with its summary line."""
        rows = []
        for name in self.list_commands(ctx):
            summary = self.command_summary(ctx, name)
            if summary is not None:
                rows.append((name, summary))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def first_paragraph(text: str) -> str:
    """``text``'s first paragraph on one line."""
    return " ".join(text.strip().split("\n\n", 1)[0].split())
