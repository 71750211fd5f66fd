"""The settings of ``summarizer serve``, each read from its one declaration.

A field of ``Settings`` marked ``Setting`` (``core.setting``) is a setting, and so is each marked
field of a model ``Settings`` takes flat (``CompactionConfig``, its ``compaction``). The field
declares the type, default, bounds, choices and help; the mark, how it is offered.
``declared_settings`` lists them as ``DeclaredSetting`` records, which make the ``serve`` flags
(``cli.options``), the ``SUMMARIZER_*`` variables (``environment_values``), the config-file keys
(``config_file``) and the tables of docs/configuration.md (``markdown_tables``).
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr

from ..core.setting import Setting, setting_of

ENV_PREFIX = "SUMMARIZER_"
"""What every setting's environment variable begins with."""

_COLLECTIONS = (frozenset, set, tuple, list)
_TYPE_NAMES: dict[Any, str] = {int: "INTEGER", float: "FLOAT", str: "TEXT", Path: "PATH"}


@dataclass(frozen=True)
class DeclaredSetting:
    """One setting, as its declaration gives it."""

    name: str
    """The field's name: the keyword of ``Settings`` and ``Settings.from_env``."""
    kind: Any
    """The field's type without None: ``int``, ``float``, ``str``, ``bool``, ``Path``,
    ``SecretStr``, a ``Literal`` of strings, or a collection of strings."""
    default: Any
    """The proxy's default value (what ``Settings()`` holds)."""
    help: str
    """The field's ``description``."""
    mark: Setting
    group: str
    """The heading it is listed under."""

    @property
    def flag(self) -> str | None:
        """The ``serve`` flag (None: none; never for a key)."""
        if self.secret or not (self.mark.command_line and self.mark.top_level):
            return None
        return self.mark.flag or "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str | None:
        """The environment variable (None: none)."""
        if not (self.mark.environment and self.mark.top_level):
            return None
        return ENV_PREFIX + self.name.upper()

    @property
    def file_key(self) -> str | None:
        """The top-level key of the config file: the name, or for a secret ``<name>_env`` (the
        file names the variable that holds it); None when only ``[[models]]`` entries set it."""
        if not self.mark.top_level:
            return None
        return f"{self.name}_env" if self.secret else self.name

    @property
    def secret(self) -> bool:
        """Whether the value is a key (never written in the file, never a flag)."""
        return self.kind is SecretStr

    @property
    def choices(self) -> tuple[str, ...]:
        """The values it takes, when its type lists them (a ``Literal``)."""
        return tuple(get_args(self.kind)) if get_origin(self.kind) is Literal else ()

    @property
    def repeatable(self) -> bool:
        """Whether it holds several values (a flag given once per value)."""
        return get_origin(self.kind) in _COLLECTIONS

    @property
    def switch(self) -> bool:
        """Whether it is on or off (``--name/--no-name``)."""
        return self.kind is bool

    @property
    def metavar(self) -> str:
        """The value's name in ``--help``: ``INTEGER``, ``[keyed|all|off]``, ``FLOAT|off``..."""
        if self.switch:
            return ""
        if self.choices:
            return "[" + "|".join(self.choices) + "]"
        base = self.mark.metavar or _TYPE_NAMES.get(self.kind, "TEXT")
        return f"{base}|off" if self.mark.off else base

    @property
    def default_text(self) -> str:
        """The default as ``--help`` and docs/configuration.md say it."""
        value = self.default
        if self.switch:
            shown = "on" if value else "off"
        elif value is None or (isinstance(value, _COLLECTIONS) and not value):
            shown = "none"
        elif isinstance(value, float) and value.is_integer():
            shown = str(int(value))
        else:
            shown = str(value)
        return self.mark.default_text.format(default=shown) if self.mark.default_text else shown

    @property
    def full_help(self) -> str:
        """The help, with what the declaration adds: how ``off`` and a list are given."""
        text = self.help
        if self.mark.off:
            text += " off (or 0) turns it off."
        if self.repeatable and self.env:
            text += f" Repeatable; {self.env} takes them comma-separated."
        return text


def declared_settings(model: type[BaseModel], defaults: BaseModel) -> tuple[DeclaredSetting, ...]:
    """Every setting of ``model``, in the order of its fields, with the defaults ``defaults``
    (an instance of ``model``) holds: its marked fields, and those of the models it takes flat
    (its ``_flattened`` fields, whose own mark gives their heading)."""
    flattened: frozenset[str] = getattr(model, "_flattened", frozenset())
    found: list[DeclaredSetting] = []
    for name, field in model.model_fields.items():
        mark = setting_of(field)
        if name in flattened:
            inner = field.annotation
            assert isinstance(inner, type) and issubclass(inner, BaseModel)
            group = mark.group if mark is not None else ""
            for setting in declared_settings(inner, getattr(defaults, name)):
                found.append(setting if setting.group else _in_group(setting, group))
        elif mark is not None:
            found.append(
                DeclaredSetting(
                    name=name,
                    kind=without_none(field.annotation),
                    default=getattr(defaults, name),
                    help=field.description or "",
                    mark=mark,
                    group=mark.group,
                )
            )
    return tuple(found)


def _in_group(setting: DeclaredSetting, group: str) -> DeclaredSetting:
    return DeclaredSetting(
        setting.name, setting.kind, setting.default, setting.help, setting.mark, group
    )


def marked_fields(model: type[BaseModel], *, per_model: bool = False) -> tuple[str, ...]:
    """The names of ``model``'s settings: those of their own (a flag, a variable, a key at the
    top of the file), or with ``per_model`` those a ``[[models]]`` entry may set."""
    names = []
    for name, field in model.model_fields.items():
        mark = setting_of(field)
        if mark is not None and (mark.per_model if per_model else mark.top_level):
            names.append(name)
    return tuple(names)


def without_none(annotation: Any) -> Any:
    """``annotation`` without None: ``int | None`` is ``int``."""
    if get_origin(annotation) not in (Union, types.UnionType):
        return annotation
    rest = tuple(arg for arg in get_args(annotation) if arg is not type(None))
    return rest[0] if len(rest) == 1 else Union[rest]  # noqa: UP007 (a value, not an annotation)


def environment_values(
    settings: Iterable[DeclaredSetting], environ: Mapping[str, str]
) -> dict[str, str]:
    """The values ``environ`` gives ``settings``, by name: each ``SUMMARIZER_<NAME>`` that is
    set and not empty."""
    found = {}
    for setting in settings:
        raw = environ.get(setting.env) if setting.env else None
        if raw:
            found[setting.name] = raw
    return found


def markdown_tables(settings: Iterable[DeclaredSetting]) -> str:
    """The tables of the settings in docs/configuration.md: one per heading, a row each."""
    groups: dict[str, list[DeclaredSetting]] = {}
    for setting in settings:
        groups.setdefault(setting.group, []).append(setting)
    parts = []
    for group, members in groups.items():
        rows = [
            f"**{group}**",
            "",
            "| flag | variable | config file | default | what it does |",
            "|---|---|---|---|---|",
        ]
        rows.extend(_markdown_row(setting) for setting in members)
        parts.append("\n".join(rows))
    return "\n\n".join(parts) + "\n"


def _markdown_row(setting: DeclaredSetting) -> str:
    flag = setting.flag
    if flag and setting.switch:
        flag = f"{flag}, --no-{flag[2:]}"
    elif flag:
        flag = f"{flag} {setting.metavar}"
    key = setting.file_key
    if key and setting.repeatable and _holds_tables(setting.kind):
        key = f"[[{key}]]"
    if key:
        where = _code(key) + (", and per model" if setting.mark.per_model else "")
    else:
        where = "per model: " + _code(setting.name) if setting.mark.per_model else "none"
    cells = [_code(flag), _code(setting.env), where, setting.default_text, setting.full_help]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _holds_tables(kind: Any) -> bool:
    """Whether a collection holds models (each a table of the file: ``[[models]]``)."""
    items = get_args(kind)
    return bool(items) and isinstance(items[0], type) and issubclass(items[0], BaseModel)


def _code(text: str | None) -> str:
    return f"`{text}`" if text else "none"
