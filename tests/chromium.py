"""A real headless Chromium for tests (Debian's ``chromium``), and readers of what it gives
back: a serialized DOM (``Dom``) and a PNG screenshot (``png_rows``), with the standard library
only."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import struct
import subprocess
import time
import uuid
import zlib
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def chromium_path() -> str:
    """Chromium's path; skips the test when it is missing (fails under ``CI=true``)."""
    if Path(CHROMIUM).exists():
        return CHROMIUM
    reason = "Debian's chromium is not installed (apt-get install chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _group_members(group: int) -> list[int]:
    """Live (not zombie) processes of process group ``group``."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def run_chromium(tmp_path: Path, url: str, *args: str) -> str:
    """Headless Chromium (a fresh profile, in its own process group) on ``url``; its stdout.
    Every process it started is gone when this returns."""
    command = [
        chromium_path(),
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / f'chromium-{uuid.uuid4().hex}'}",
        "--virtual-time-budget=5000",
        *args,
        url,
    ]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        deadline = time.monotonic() + 10
        while _group_members(process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    assert _group_members(process.pid) == [], "chromium left processes behind"
    assert process.returncode == 0, err[-3000:]
    return out


@dataclass
class Element:
    """One element of a serialized DOM: its tag, attributes and text content."""

    tag: str
    attrs: dict[str, str]
    text: list[str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    @property
    def content(self) -> str:
        return "".join(self.text)


class Dom(HTMLParser):
    """Every element of a serialized DOM, with its text content (text of its descendants)."""

    VOID = frozenset(
        ["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "wbr"]
    )

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self._open: list[Element] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {name: value or "" for name, value in attrs})
        self.elements.append(element)
        if tag not in self.VOID:
            self._open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(Element(tag, {name: value or "" for name, value in attrs}))

    def handle_endtag(self, tag: str) -> None:
        while self._open and self._open.pop().tag != tag:
            pass

    def handle_data(self, data: str) -> None:
        for element in self._open:
            element.text.append(data)

    def by_class(self, name: str) -> list[Element]:
        return [e for e in self.elements if name in e.classes]

    def by_id(self, name: str) -> Element:
        (found,) = [e for e in self.elements if e.attrs.get("id") == name]
        return found


def _add_bytes(a: bytes, b: bytes) -> bytes:
    """``a + b`` byte by byte, modulo 256 (the PNG Up filter), on whole rows at once."""
    size = len(a)
    low = int.from_bytes(b"\x7f" * size, "big")
    x, y = int.from_bytes(a, "big"), int.from_bytes(b, "big")
    return (((x & low) + (y & low)) ^ ((x ^ y) & ~low & ((1 << 8 * size) - 1))).to_bytes(
        size, "big"
    )


def png_rows(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and rows (RGB bytes, 3 per pixel) of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, idat = 8, b""
    width = height = depth = color = interlace = 0
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position : position + 8])
        chunk = data[position + 8 : position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        elif kind == b"IEND":
            break
    assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
    size = 3 if color == 2 else 4
    stride = width * size
    raw = zlib.decompress(idat)
    assert len(raw) == height * (stride + 1)
    previous = bytes(stride)
    rows = []
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 2:
            line = bytearray(_add_bytes(bytes(line), previous))
        elif kind:
            for i in range(stride):
                left = line[i - size] if i >= size else 0
                up, corner = previous[i], previous[i - size] if i >= size else 0
                if kind == 1:
                    line[i] = (line[i] + left) & 255
                elif kind == 3:
                    line[i] = (line[i] + (left + up) // 2) & 255
                else:
                    guess = left + up - corner
                    pa, pb, pc = abs(guess - left), abs(guess - up), abs(guess - corner)
                    best = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                    line[i] = (line[i] + best) & 255
        previous = bytes(line)
        if size == 4:
            del line[3::4]
        rows.append(bytes(line))
    return width, height, rows


def count_near(
    rows: list[bytes], colors: list[tuple[int, int, int]], step: int = 2, tolerance: int = 40
) -> list[int]:
    """How many pixels (every ``step``-th of every ``step``-th row) are near each colour."""
    counts = [0] * len(colors)
    for line in rows[::step]:
        for i in range(0, len(line), 3 * step):
            r, g, b = line[i], line[i + 1], line[i + 2]
            for n, (cr, cg, cb) in enumerate(colors):
                if (
                    abs(r - cr) <= tolerance
                    and abs(g - cg) <= tolerance
                    and abs(b - cb) <= tolerance
                ):
                    counts[n] += 1
    return counts
