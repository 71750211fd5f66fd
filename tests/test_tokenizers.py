"""Offline resolution of tiktoken encodings: cache, then litellm's copies, else a clear error."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from summarizer.core.errors import TokenizerUnavailable
from summarizer.loaders import tokenizers
from summarizer.loaders.tokenizers import ENCODINGS, find_encoding_file, litellm_tokenizer_dir

BUNDLED = litellm_tokenizer_dir()
needs_bundle = pytest.mark.skipif(BUNDLED is None, reason="litellm (dev extra) not installed")


@needs_bundle
def test_litellm_folder_holds_both_encodings_under_tiktokens_cache_names() -> None:
    assert BUNDLED is not None
    for spec in ENCODINGS.values():
        assert (BUNDLED / spec.cache_name).is_file()


@needs_bundle
def test_tiktoken_cache_dir_wins_over_the_bundled_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert BUNDLED is not None
    spec = ENCODINGS["cl100k_base"]
    shutil.copy(BUNDLED / spec.cache_name, tmp_path / spec.cache_name)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    path, searched = find_encoding_file(spec)
    assert path == tmp_path / spec.cache_name
    assert searched == [str(tmp_path / spec.cache_name)]


@needs_bundle
def test_a_corrupt_cache_file_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert BUNDLED is not None
    spec = ENCODINGS["o200k_base"]
    (tmp_path / spec.cache_name).write_bytes(b"not the real file")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    path, searched = find_encoding_file(spec)
    assert path == BUNDLED / spec.cache_name
    assert "does not match" in searched[0]


def test_nothing_on_disk_raises_tokenizer_unavailable_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tokenizers, "litellm_tokenizer_dir", lambda: None)
    monkeypatch.setattr(tokenizers, "_loaded", {})
    with pytest.raises(TokenizerUnavailable) as info:
        tokenizers.load_encoding("o200k_base")
    message = str(info.value)
    assert str(tmp_path) in message
    assert "summarizer[tokenizers]" in message and "TIKTOKEN_CACHE_DIR" in message


def test_an_encoding_without_an_offline_definition_is_refused() -> None:
    with pytest.raises(TokenizerUnavailable, match="known encodings"):
        tokenizers.load_encoding("p50k_base")


@needs_bundle
def test_loaded_encodings_match_tiktokens_own_and_never_import_litellm() -> None:
    # In a fresh interpreter: tiktoken's own loader, pointed at the same files, must agree.
    code = f"""
import os, sys
from summarizer.loaders.tokenizers import load_encoding
texts = ["hello world", "naïve café 🚀", "<|endoftext|> is plain text", "def f(x):\\n  return x**2"]
names = ("o200k_base", "cl100k_base")
ours = {{n: [load_encoding(n).encode_ordinary(t) for t in texts] for n in names}}
assert "litellm" not in sys.modules, "litellm was imported"
os.environ["TIKTOKEN_CACHE_DIR"] = {str(BUNDLED)!r}
import tiktoken
theirs = {{n: [tiktoken.get_encoding(n).encode_ordinary(t) for t in texts] for n in ours}}
assert ours == theirs, (ours, theirs)
print("same")
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "same"


def test_importing_the_package_is_cheap() -> None:
    code = (
        "import sys, summarizer; "
        "heavy = [m for m in ('tiktoken', 'openai', 'litellm', 'sqlite3') if m in sys.modules]; "
        "print(heavy)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"
