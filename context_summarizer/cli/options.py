"""The flags of ``summarizer serve``, made from the declared settings (``proxy.settings_schema``).

``with_setting_options(command, settings)`` gives ``command`` (a function ending in
``**settings``) one keyword parameter per setting that has a flag, annotated as Typer reads
parameters: the flag, the value's name (``INTEGER``, ``[keyed|all|off]``), the help, the
default (the model's, never retyped), its heading. An unset flag is None, so it masks neither
the environment nor the config file; the values are validated by ``Settings`` alone, so a bad
one gets the same message from a flag, a variable or the file.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any

import typer

from ..proxy.settings_schema import DeclaredSetting
from .help_format import ClickStyleCommand


def setting_help(setting: DeclaredSetting) -> str:
    """The help of ``setting``'s flag: the declared help, then its default."""
    return f"{setting.full_help} [default: {setting.default_text}]"


def setting_parameter(setting: DeclaredSetting) -> inspect.Parameter:
    """The keyword parameter that Typer makes ``setting``'s flag from (``setting.flag`` set)."""
    assert setting.flag is not None
    declaration = setting.flag
    kind: Any = str  # choices and "off" are checked by Settings, with the variable's message
    if setting.switch:
        declaration = f"{setting.flag}/--no-{setting.flag[2:]}"
        kind = bool
    elif setting.repeatable:
        kind = list[str]
    elif setting.kind in (int, float, Path) and not setting.mark.off:
        kind = setting.kind
    option = typer.Option(
        declaration,
        metavar=setting.metavar,
        help=setting_help(setting),
        show_default=False,
        rich_help_panel=setting.group or None,
    )
    return inspect.Parameter(
        setting.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[kind | None, option],
    )


def with_setting_options(
    command: Callable[..., None], settings: Iterable[DeclaredSetting], *, before: str | None = None
) -> Callable[..., None]:
    """``command`` with a flag per setting that has one, in place of its ``**settings``: listed
    before its parameter named ``before`` (None: after all of them)."""
    signature = inspect.signature(command, eval_str=True)
    own = [
        p.replace(kind=p.KEYWORD_ONLY)  # all given by name, so any order is a valid signature
        for p in signature.parameters.values()
        if p.kind is not p.VAR_KEYWORD
    ]
    flags = [setting_parameter(setting) for setting in settings if setting.flag]
    clash = {p.name for p in own} & {p.name for p in flags}
    if clash:
        raise ValueError(f"{command.__name__} already has parameters named {sorted(clash)}")
    at = next((i for i, p in enumerate(own) if p.name == before), len(own))
    parameters = [*own[:at], *flags, *own[at:]]

    @functools.wraps(command)
    def with_flags(**values: Any) -> None:
        command(**values)

    with_flags.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    with_flags.__annotations__ = {p.name: p.annotation for p in parameters}
    del with_flags.__wrapped__  # Typer reads the signature above, not the command's own
    return with_flags


class SettingsCommand(ClickStyleCommand):
    """A command with a flag per setting: its help wrapped to 100 columns at most (30 flags and
    their values), a section per heading (each option's ``rich_help_panel``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        settings = {"max_content_width": 100, **(kwargs.pop("context_settings", None) or {})}
        super().__init__(*args, context_settings=settings, **kwargs)
