"""JSON parsed with the request body's limits: no nesting deeper than ``MAX_JSON_DEPTH``. Pure.

The proxy reads a request body with these limits (``proxy.body``), and every JSON document
embedded in one (a compaction item's ``encrypted_content``, a tool call's ``arguments``) with
the same, through ``loads_bounded``: a document nested past them is refused (``NestingTooDeep``),
never handed to anything recursive (the stdlib ``json``, pydantic, the openai SDK) that would
overflow the stack on it. An embedded document is part of the body, so its size is already
bounded by the body's (``--max-body-bytes``).
"""

from __future__ import annotations

import json
from typing import Any

MAX_JSON_DEPTH = 128
"""Deepest nesting of arrays and objects accepted in a request body or a document in it.

Far beyond any real request (OpenAI's structured-output schemas stop at 10 levels), and far
enough below Python's recursion limit that nothing recursive the proxy, the stdlib ``json``,
pydantic or the openai SDK does with a message can overflow it.
"""


class NestingTooDeep(ValueError):
    """A JSON document nests arrays and objects deeper than ``MAX_JSON_DEPTH``."""

    def __init__(self, what: str = "The request body") -> None:
        super().__init__(f"{what} nests arrays and objects more than {MAX_JSON_DEPTH} levels deep.")


def deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests containers more than ``limit`` levels (without recursing)."""
    if type(value) is not dict and type(value) is not list:
        return False
    stack = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        if depth > limit:
            return True
        for child in item.values() if type(item) is dict else item:
            kind = type(child)
            if kind is dict or kind is list:
                push((child, depth + 1))
    return False


def loads_bounded(text: str | bytes, *, limit: int = MAX_JSON_DEPTH) -> Any:
    """``text`` parsed exactly (the stdlib's values), refused when it nests containers more than
    ``limit`` levels: ``NestingTooDeep``; ``ValueError`` for anything that is not JSON.

    The stdlib parser stops a document nested near the stack's end with a ``RecursionError``
    (at about a thousand levels, whatever follows), which is the same refusal here."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise NestingTooDeep("The JSON document") from None
    if deeper_than(value, limit):
        raise NestingTooDeep("The JSON document")
    return value
