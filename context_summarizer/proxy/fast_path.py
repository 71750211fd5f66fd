"""The fast path: a chat request read from the bytes its conversation added, not from all of them.

An agent's next request is its previous body plus a turn: the same bytes up to the end of the
last message, one or more new messages, then the same bytes after the ``messages`` array
(``]``, ``tools``, ``stream``...). ``FastPath`` remembers recent bodies (per credential
namespace and ``X-Summarizer-Session``) with the offsets of their messages array, and for a new
body that begins with one of them through its last message (a memcmp) and ends with the same
bytes after the array, parses only the new messages (orjson, on a slice) and builds the request
from the remembered parse plus those. The engine then hashes and counts only the new messages
(its chain cache sees the same message objects), and the body goes upstream as the client's
bytes, exactly as on the full path.

It takes a body only when it can prove the result is what parsing it whole would give:

- the remembered body's ``]`` closing ``messages`` is proven once, when it is learned: inserting
  ``,0`` before it must give a parse whose ``messages`` is one longer and ends with ``0`` (a
  ``]`` inside a string, closing another array or an overridden duplicate ``messages`` leaves
  ``messages`` as it was);
- the new body must begin with the remembered bytes through its last message and end with its
  bytes after that ``]``, and what lies between must be whitespace, or whitespace, a comma and
  a list of JSON values that orjson parses as one array. The lexer is then in the same state as
  in the remembered body at each end, so the new body parses to the remembered one with those
  values appended to ``messages``;
- only bodies orjson read whole are remembered (not the stdlib fallback's NaN or lone
  surrogates), so orjson on the slice gives the values a whole parse would.

Anything else (a fork or an edit inside the prefix, a different key order or whitespace before
the last message, a changed field, unparsable new bytes) goes the full way. Each outcome is
counted in ``summarizer_fast_path_total{outcome}``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Literal

import orjson

from ..core.located import Located
from .body import MAX_JSON_DEPTH, deeper_than
from .chat_request import ChatRequest
from .errors import ProxyError
from .managed_request import ManagedRequest, Sender, sender
from .model_routes import ModelRoute
from .remembered import Remembered, Settled

Outcome = Literal["same", "appended", "no_match", "unproven", "not_learned"]
"""``same``: no new message; ``appended``: new messages parsed alone; ``no_match``: no
remembered body of the conversation is a prefix of this one (its first request, a fork, an
edit, a changed field); ``unproven``: one is, but the new bytes are not a plain list of values;
``not_learned``: a body taken the full way whose messages array could not be located for sure
(it is not remembered)."""

KEY_BYTES = 128
"""Bodies are grouped by their first bytes (with the namespace and session header); a body
whose messages end sooner is not remembered (too small to gain anything)."""
BUCKET_SIZE = 8
"""Remembered bodies per group (conversations sharing a system prompt and a credential)."""
DEFAULT_MAX_BODIES = 256
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
MAX_CANDIDATES = 64
"""``]`` bytes tried, from the end of a body, as the one that closes ``messages``."""

Extension = tuple[list[Any], int, int]
"""What a body appends to a remembered one: the new messages, where its last message ends and
where its ``]`` closing ``messages`` stands."""

_WHITESPACE = b" \t\r\n"
_CLOSE = ord("]")
_COMMA = ord(",")


def settle(request: ManagedRequest, located: Located, route: ModelRoute, compactions: int) -> None:
    """Note on ``request``'s remembered body that it was located with no compaction due."""
    if isinstance(request, ChatRequest) and request.remembered is not None:
        request.remembered.settled = Settled(
            route,
            located.raw_tokens,
            located.budget.trigger_tokens,
            located.checkpoint_id,
            compactions,
        )


class FastPath:
    """Recent chat bodies per (namespace, session header), and the requests built from them.

    Bounded by bodies and by their bytes (least recently used dropped); thread-safe.
    """

    def __init__(
        self,
        *,
        max_bodies: int = DEFAULT_MAX_BODIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        count: Callable[[Outcome], None] | None = None,
    ) -> None:
        self._max_bodies = max_bodies
        self._max_bytes = max_bytes
        self._count = count or (lambda outcome: None)
        self._groups: dict[tuple[str, str | None, bytes], list[Remembered]] = {}
        self._recent: OrderedDict[int, Remembered] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._recent)

    @property
    def bytes_held(self) -> int:
        """Bytes of the bodies remembered."""
        return self._bytes

    # -- the fast path --------------------------------------------------------------------------

    def parse(
        self,
        raw: bytes,
        headers: Any,
        *,
        who: Sender | None = None,
        proven: tuple[Remembered, int] | None = None,
    ) -> ChatRequest | None:
        """The request ``raw`` is, built from a remembered body it extends; None when none
        provably applies (the caller parses it whole, then ``learn``s it).

        ``who``: the sender (``sender(headers)``), when the caller has it already. ``proven``:
        a remembered body and how many of its first bytes the caller has found equal to
        ``raw``'s (the lane compares them as they arrive); they are not compared again.
        """
        try:
            found = sender(headers) if who is None else who
        except ProxyError:  # parsed whole, it is refused
            found = None
        if found is None or len(raw) < KEY_BYTES:
            self._count("no_match")
            return None
        key = (found[0], found[1], raw[:KEY_BYTES])
        with self._lock:
            candidates = list(self._groups.get(key, ()))
        outcome: Outcome = "no_match"
        for known in candidates:
            equal = proven[1] if proven is not None and proven[0] is known else 0
            extended = _extend(known, raw, equal)
            if extended is None:
                continue
            if isinstance(extended, str):
                outcome = "unproven"
                continue
            return self.adopt(known, raw, extended, headers, found)
        self._count(outcome)
        return None

    def extension(self, known: Remembered, after: bytes, length: int) -> Extension | None:
        """The messages a body of ``length`` bytes appends to ``known``, given its bytes from
        ``known.end`` on (``after``), when its bytes before are ``known``'s (the caller has
        compared them): the proof ``parse`` makes, without the whole body (``adopt`` then
        builds the request). None when it does not provably extend it (``parse`` may still
        find another remembered body it extends)."""
        extended = _extend_after(known, after, length)
        return extended if isinstance(extended, tuple) else None

    def adopt(
        self, known: Remembered, raw: bytes, extended: Extension, headers: Any, who: Sender
    ) -> ChatRequest:
        """The request ``raw`` is, proven to extend ``known`` by ``extended``; remembered in
        its place."""
        new, end, close = extended
        body = dict(known.body)
        body["messages"] = [*known.body["messages"], *new]
        remembered = Remembered(raw, end, close, body, known.key)
        self._replace(known, remembered)
        self._count("appended" if new else "same")
        return ChatRequest(
            raw,
            body,
            body["model"],
            body.get("stream") is True,
            who[0],
            who[1],
            headers,
            True,
            remembered,
            known,
        )

    def newest(self, first: bytes, who: Sender) -> Remembered | None:
        """The most recently remembered body of the conversation whose body begins with
        ``first`` (at least ``KEY_BYTES`` bytes), sent by ``who``: the one its next request
        most likely extends (the lane streams on that guess; ``parse`` proves it)."""
        if len(first) < KEY_BYTES:
            return None
        with self._lock:
            group = self._groups.get((who[0], who[1], first[:KEY_BYTES]))
            return group[0] if group else None

    def learn(self, request: ChatRequest) -> None:
        """Remember a request parsed whole, once its messages array is located for sure."""
        if not request.by_orjson:
            self._count("not_learned")
            return
        located = _locate_messages(request.raw, request.body)
        if located is None or located[0] < KEY_BYTES:
            self._count("not_learned")
            return
        key = (request.namespace, request.session, request.raw[:KEY_BYTES])
        request.remembered = Remembered(request.raw, *located, request.body, key)
        self._replace(None, request.remembered)

    # -- bookkeeping ----------------------------------------------------------------------------

    def _replace(self, old: Remembered | None, new: Remembered) -> None:
        """Remember ``new`` in place of ``old`` (the body it extends), within the bounds."""
        with self._lock:
            if old is not None and self._recent.pop(id(old), None) is not None:
                self._drop(old)
            group = self._groups.setdefault(new.key, [])
            group.insert(0, new)
            self._recent[id(new)] = new
            self._bytes += len(new.raw)
            while len(group) > BUCKET_SIZE:
                self._forget(group[-1])
            while self._recent and (
                len(self._recent) > self._max_bodies or self._bytes > self._max_bytes
            ):
                self._forget(next(iter(self._recent.values())))

    def _forget(self, known: Remembered) -> None:
        del self._recent[id(known)]
        self._drop(known)

    def _drop(self, known: Remembered) -> None:
        self._bytes -= len(known.raw)
        group = self._groups.get(known.key)
        if group is not None:
            group[:] = [k for k in group if k is not known]
            if not group:
                del self._groups[known.key]


def _extend(known: Remembered, raw: bytes, equal: int = 0) -> Extension | str | None:
    """The messages ``raw`` appends to ``known``, and where its last message ends and its
    messages array closes; None when ``raw`` does not extend ``known``'s bytes, ``"unproven"``
    when it does but the new bytes are not a plain list of JSON values. ``equal``: how many
    first bytes of the two are known to be equal already."""
    if equal < known.end and not raw.startswith(memoryview(known.raw)[: known.end]):
        return None
    return _extend_after(known, raw[known.end :], len(raw))


def _extend_after(known: Remembered, after: bytes, length: int) -> Extension | str | None:
    """``_extend`` for a body of ``length`` bytes whose first ``known.end`` are ``known``'s,
    from its bytes after those (``after``)."""
    tail = memoryview(known.raw)[known.close + 1 :]
    close = length - len(tail) - 1
    if close < known.end or after[close - known.end] != _CLOSE or not after.endswith(tail):
        return None
    between = after[: close - known.end]
    added = between.strip(_WHITESPACE)
    end = known.end + len(between.rstrip(_WHITESPACE))
    if not added:
        return [], end, close
    if added[0] != _COMMA:
        return "unproven"
    try:
        new = orjson.loads(b"[" + added[1:] + b"]")
    except orjson.JSONDecodeError:
        return "unproven"
    # Inside the body these values sit one level deeper (in "messages") than in this array.
    if not new or deeper_than(new, MAX_JSON_DEPTH - 1):
        return "unproven"
    return new, end, close


def _locate_messages(raw: bytes, body: dict[str, Any]) -> tuple[int, int] | None:
    """Where ``body["messages"]``'s last message ends in ``raw`` and the ``]`` closing the
    array stands; None unless that ``]`` is proven (see the module docstring)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    keys = list(body)
    after = keys[keys.index("messages") + 1 :]
    close = len(raw)
    for _ in range(MAX_CANDIDATES):
        close = raw.rfind(b"]", 0, close)
        if close < 0:
            return None
        if _tail_holds(raw[close + 1 :], after):
            break
    else:
        return None
    try:
        probe = orjson.loads(b"".join((raw[:close], b",0", raw[close:])))
    except orjson.JSONDecodeError:
        return None
    # Only the array the parser keeps as "messages" can gain a last element 0 this way: a "]"
    # inside a string, or closing any other array, leaves "messages" as long as it was.
    grown = probe.get("messages") if type(probe) is dict else None
    if (
        type(grown) is not list
        or len(grown) != len(messages) + 1
        or type(grown[-1]) is not int
        or grown[-1] != 0
    ):
        return None
    end = close
    while end > 0 and raw[end - 1] in _WHITESPACE:
        end -= 1
    return end, close


def _tail_holds(tail: bytes, after: list[str]) -> bool:
    """Whether ``tail`` reads as the rest of an object holding the keys ``after`` (a cheap
    filter on candidates; the proof is ``_locate_messages``'s)."""
    try:
        rest = orjson.loads(b'{"":0' + tail)
    except orjson.JSONDecodeError:
        return False
    return type(rest) is dict and list(rest)[1:] == after
