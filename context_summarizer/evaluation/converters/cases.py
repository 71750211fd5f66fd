"""What every converter ends with: a validated ``Case`` (invalid is a ``ConversionError`` naming
the source), and its facts' texts in first-seen order without repeats."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ...core.errors import ConversionError
from ..dataset import Case


def _unique(items: Any) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))


def _validated(where: str, **fields: Any) -> Case:
    """A ``Case`` from ``fields`` (``None`` metadata values dropped); invalid is a
    ``ConversionError`` naming ``where``."""
    fields["metadata"] = {k: v for k, v in fields.get("metadata", {}).items() if v is not None}
    try:
        return Case(**fields)
    except ValidationError as exc:
        raise ConversionError(f"{where}: {exc.errors(include_url=False)[0]['msg']}") from exc
