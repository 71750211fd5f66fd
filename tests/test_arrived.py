"""``ArrivedBody`` answers as the body's plain bytes would, however it was cut into pieces."""

from __future__ import annotations

import random

from context_summarizer.proxy.lane.arrived import ArrivedBody


def arrived(body: bytes, rng: random.Random) -> ArrivedBody:
    """``body`` appended in random pieces (empty ones included)."""
    out = ArrivedBody()
    at = 0
    while at < len(body):
        size = rng.choice([0, 1, 2, 7, 64, len(body)])
        out.append(body[at : at + size])
        at += size
    return out


def test_an_arrived_body_reads_as_its_bytes_however_it_was_cut() -> None:
    rng = random.Random(5)
    for _ in range(300):
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        pieces = arrived(body, rng)
        assert len(pieces) == len(body)
        start = rng.randrange(len(body) + 1)
        end = rng.randrange(start, len(body) + 1)
        assert b"".join(pieces.views(start, end)) == body[start:end]
        index = rng.randrange(len(body))
        assert pieces.byte(index) == body[index]
        other = bytearray(body)
        assert pieces.same_as(bytes(other), start, end)
        if end > start:
            other[rng.randrange(start, end)] ^= 1
            assert not pieces.same_as(bytes(other), start, end)
        assert not pieces.same_as(body[: end - 1], start, end) or end == start
        assert pieces.joined() == body
        assert b"".join(pieces.views(start, end)) == body[start:end]  # still, once joined


def test_views_copy_nothing_and_a_body_in_one_piece_is_never_joined() -> None:
    piece = b'{"model":"m","messages":[]}'
    body = ArrivedBody()
    body.append(piece)
    assert body.views(0, len(piece))[0] is piece
    assert body.joined() is piece
    body.append(b"tail")
    view = body.views(3, len(piece) + 2)
    assert isinstance(view[0], memoryview) and view[0].obj is piece
    assert bytes(view[1]) == b"ta"
