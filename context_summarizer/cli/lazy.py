"""Subcommands imported only when they are run or asked for their own help.

``summarizer --help`` and ``--version`` must answer at once, and several subcommands are declared
in modules that import a great deal on the way (``eval``: the evaluator, the ``openai`` SDK;
``serve``: the settings' models). A ``LazyGroup`` lists each such command by name and summary,
and imports its module the first time the command itself is wanted.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any, ClassVar

import typer
from typer.main import get_command

from .help_format import ClickStyleCommand, ClickStyleGroup


@dataclass(frozen=True)
class LazyCommand:
    """Where a subcommand is declared, and the line that lists it."""

    module: str
    """The module declaring it, relative to ``context_summarizer.cli`` (``..evaluation.x``)."""
    attribute: str
    """The command's function (made a ``ClickStyleCommand``), or a ``typer.Typer`` holding it
    (its one command) or its subcommands (a group)."""
    summary: str
    """The line listing it in ``summarizer --help``: the first paragraph of its help (a test
    holds them equal)."""


class LazyGroup(ClickStyleGroup):
    """A group whose ``lazy`` commands are imported when first wanted; the rest are Typer's."""

    lazy: ClassVar[dict[str, LazyCommand]] = {}

    def list_commands(self, ctx: Any) -> list[str]:
        """The commands registered with Typer, then the lazy ones, in their order."""
        return [*self.commands, *(name for name in self.lazy if name not in self.commands)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command named ``cmd_name``, imported now if it is a lazy one."""
        command = self.commands.get(cmd_name)
        if command is None and cmd_name in self.lazy:
            command = self.commands[cmd_name] = load(cmd_name, self.lazy[cmd_name])
        return command

    def command_summary(self, ctx: Any, name: str) -> str | None:
        """A lazy command's declared summary (nothing imported), else the command's own."""
        if name in self.lazy and name not in self.commands:
            return self.lazy[name].summary
        return super().command_summary(ctx, name)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """As Typer resolves it, a mistyped name matched against every command (Typer's own
        suggestion knows the imported ones only)."""
        known = self.list_commands(ctx)
        if args and args[0] not in known:
            matches = get_close_matches(args[0], known)
            if matches:
                named = ", ".join(repr(match) for match in matches)
                ctx.fail(f"No such command {args[0]!r}. Did you mean {named}?")
        return super().resolve_command(ctx, args)


def load(name: str, lazy: LazyCommand) -> Any:
    """The click command ``lazy`` declares, named ``name``."""
    target = getattr(importlib.import_module(lazy.module, __package__), lazy.attribute)
    if not isinstance(target, typer.Typer):
        holder = typer.Typer(add_completion=False, rich_markup_mode=None)
        holder.command(name, cls=ClickStyleCommand)(target)
        target = holder
    command = get_command(target)
    command.name = name
    return command
