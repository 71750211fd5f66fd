"""``ArrivedBody``: a request body as it arrives on the lane (``proxy.lane``), kept as the pieces
read, never copied on the way.

The lane compares each piece with the body it guessed and writes it upstream as it comes. A
growing buffer would copy every byte once more on each append and once again for each write
(a write the socket cannot take at once keeps a reference to its bytes, so a view of a buffer
that later grows cannot be given to it). The pieces are immutable: views of them can be
compared, and queued for the upstream, as they are. They are joined once, when the whole body
is in (not at all when it came in one piece).
"""

from __future__ import annotations

from bisect import bisect_right


class ArrivedBody:
    """The pieces of a body read so far, with their offsets in the body."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self._starts: list[int] = []
        self._length = 0

    def __len__(self) -> int:
        return self._length

    def append(self, piece: bytes) -> None:
        """One more piece, as read."""
        if piece:
            self._starts.append(self._length)
            self.pieces.append(piece)
            self._length += len(piece)

    def views(self, start: int, end: int) -> list[bytes | memoryview]:
        """The bytes from ``start`` to ``end`` (within what arrived), as the pieces or views of
        them: nothing is copied."""
        out: list[bytes | memoryview] = []
        index = bisect_right(self._starts, start) - 1
        while start < end:
            piece, offset = self.pieces[index], start - self._starts[index]
            take = min(len(piece) - offset, end - start)
            whole = offset == 0 and take == len(piece)
            out.append(piece if whole else memoryview(piece)[offset : offset + take])
            start += take
            index += 1
        return out

    def byte(self, index: int) -> int:
        """The byte at ``index`` (within what arrived)."""
        piece = bisect_right(self._starts, index) - 1
        return self.pieces[piece][index - self._starts[piece]]

    def same_as(self, other: bytes, start: int, end: int) -> bool:
        """Whether the bytes from ``start`` to ``end`` equal ``other``'s at the same offsets
        (one memcmp per piece; ``other`` holds at least ``end`` bytes)."""
        for view in self.views(start, end):
            if not other.startswith(view, start):
                return False
            start += len(view)
        return True

    def joined(self) -> bytes:
        """The bytes so far, as one ``bytes`` (the pieces joined once, then kept so)."""
        if len(self.pieces) > 1:
            self.pieces = [b"".join(self.pieces)]
            self._starts = [0]
        return self.pieces[0] if self.pieces else b""
