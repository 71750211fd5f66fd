"""Tokens of the non-text parts of a message: images by OpenAI's published tile formula (their size
read from the first bytes of a data URL), audio and files at a documented flat charge."""

from __future__ import annotations

import base64
import binascii
import math
import struct

IMAGE_LOW_TOKENS = 85
"""OpenAI vision guide: ``detail: low`` costs 85 tokens; it is also the base of a high image."""
IMAGE_TILE_TOKENS = 170
"""OpenAI vision guide: each 512 px tile of a ``detail: high`` image costs 170 tokens."""
IMAGE_TILE_SIZE = 512
IMAGE_MAX_SIDE = 2048
"""High-detail images are first scaled down to fit a 2048 x 2048 square..."""
IMAGE_SHORT_SIDE = 768
"""...then scaled down so their shortest side is 768 px (never up)."""
DEFAULT_IMAGE_SIZE = (1024, 1024)
"""Assumed size of an image whose dimensions cannot be read (a remote URL): 765 tokens high."""

AUDIO_PART_TOKENS = 1_000
"""Rough flat charge for one ``input_audio`` part. The real cost grows with the clip's length,
which is not decoded; ``Calibration`` absorbs a systematic error."""
FILE_PART_TOKENS = 1_000
"""Rough flat charge for one ``file`` part (a PDF is billed per page, which is not decoded), on
top of its file name."""


def image_tokens(width: int | None, height: int | None, detail: str | None = "auto") -> int:
    """Tokens of one image under OpenAI's published rule.

    ``low`` is a flat 85. ``high`` and ``auto`` (and anything else): scale to fit 2048 x 2048, then
    scale the shortest side down to 768, and charge 85 + 170 per 512 px tile. Unknown dimensions
    are taken as ``DEFAULT_IMAGE_SIZE``.
    """
    if detail == "low":
        return IMAGE_LOW_TOKENS
    if not width or not height or width <= 0 or height <= 0:
        width, height = DEFAULT_IMAGE_SIZE
    w, h = float(width), float(height)
    longest = max(w, h)
    if longest > IMAGE_MAX_SIDE:
        w, h = w * IMAGE_MAX_SIDE / longest, h * IMAGE_MAX_SIDE / longest
    shortest = min(w, h)
    if shortest > IMAGE_SHORT_SIDE:
        w, h = w * IMAGE_SHORT_SIDE / shortest, h * IMAGE_SHORT_SIDE / shortest
    tiles = math.ceil(round(w) / IMAGE_TILE_SIZE) * math.ceil(round(h) / IMAGE_TILE_SIZE)
    return IMAGE_LOW_TOKENS + IMAGE_TILE_TOKENS * tiles


_HEADER_CHARS = 8_192  # base64 characters decoded first: 6 KB, enough for PNG, GIF, WebP
_JPEG_HEADER_CHARS = 131_072  # JPEG's size may follow EXIF data: look up to 96 KB in
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` read from the first bytes of a PNG, JPEG, GIF or WebP file, or None."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return int(width), int(height)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_size(data)
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        width = int.from_bytes(data[26:28], "little") & 0x3FFF
        height = int.from_bytes(data[28:30], "little") & 0x3FFF
        return width, height
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    n = len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
            continue
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in _JPEG_SOF:
            if i + 9 > n:
                return None
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return int(width), int(height)
        if length < 2:
            return None
        i += 2 + length
    return None


def data_url_image_size(url: str) -> tuple[int, int] | None:
    """Dimensions of the image in a base64 ``data:`` URL, decoding only its first kilobytes."""
    if not url.startswith("data:"):
        return None
    header, sep, payload = url.partition(",")
    if not sep or not header.endswith(";base64"):
        return None
    size: tuple[int, int] | None = None
    for limit in (_HEADER_CHARS, _JPEG_HEADER_CHARS):
        chunk = "".join(payload[:limit].split())
        chunk = chunk[: len(chunk) - len(chunk) % 4]
        try:
            data = base64.b64decode(chunk)
        except (binascii.Error, ValueError):
            return None
        size = image_size(data)
        if size is not None or data[:2] != b"\xff\xd8" or len(payload) <= limit:
            break
    return size
