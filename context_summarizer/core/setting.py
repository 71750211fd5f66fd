"""``Setting``: the mark of a configuration field that users set by name, outside Python.

A field so marked is one of ``summarizer serve``'s settings: a flag (``--trigger-ratio``), an
environment variable (``SUMMARIZER_TRIGGER_RATIO``) and a config-file key (``trigger_ratio``),
all named after the field unless the mark says otherwise. The field declares everything else
once: its type (a ``Literal`` lists the choices), default, bounds and help (``description``).
The mark rides in the field's ``Annotated`` metadata, which pydantic keeps and ignores::

    trigger_ratio: Annotated[float, Setting(per_model=True)] = Field(
        default=0.8, gt=0, le=1, description="Compact above this share of the usable window."
    )

``CompactionConfig`` marks the fields the proxy takes; the proxy's ``Settings`` marks its own.
``proxy.settings_schema`` reads the marks and makes the flags, variables, keys and help from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class Setting:
    """How a field is offered as a setting (the parts that its name and type do not say)."""

    group: str = ""
    """The heading it is listed under in ``--help`` and docs/configuration.md. On a field whose
    model's settings are given flat (``Settings.compaction``), the heading of those."""
    default_text: str = ""
    """The default in words, where the value alone does not say it (``{default}`` stands for the
    value): ``"each model's known window"`` for a None that means that."""
    metavar: str = ""
    """The value's name in ``--help`` when the type's (``INTEGER``, ``TEXT``...) says less:
    ``URL``, ``SECONDS``, ``TOKENS``."""
    flag: str = ""
    """The flag, when it is not ``--`` and the name with dashes (``--client-key``, each use one
    key, for ``client_keys``)."""
    command_line: bool = True
    """Whether it has a flag (a key never has one: command lines are visible to other users)."""
    environment: bool = True
    """Whether ``SUMMARIZER_<NAME>`` sets it."""
    top_level: bool = True
    """Whether it is a setting of its own (a flag, a variable, a top-level key of the config
    file); False: only a ``[[models]]`` entry of the file sets it."""
    per_model: bool = False
    """Whether a ``[[models]]`` entry of the config file may set it for its model alone."""
    off: bool = False
    """Whether the word ``off`` (or 0) turns it off (its value is then None)."""


def setting_of(field: FieldInfo) -> Setting | None:
    """The ``Setting`` mark of ``field``, or None when it is not a setting."""
    marks: list[Any] = [mark for mark in field.metadata if isinstance(mark, Setting)]
    return marks[0] if marks else None
