"""Prompt texts, loaded by name and version from the ``prompts/`` folder; never inlined in code.

Prompts live in ``prompts/<version>/<name>.md`` at the top of the repository, and inside the
installed wheel as ``context_summarizer/prompt_files/``. A prompt's text is stable for a given
version, which keeps a summary request's appended instruction, and so the request, byte-identical.
"""

from __future__ import annotations

import functools
from pathlib import Path

from ..core.errors import ConfigurationError
from ..core.prompt_set import PromptSet

DEFAULT_VERSION = "v2"


def prompt_dirs() -> list[Path]:
    """Folders searched for prompts: the installed package's copy, then the source checkout's."""
    package = Path(__file__).resolve().parent.parent  # summarizer/
    return [package / "prompt_files", package.parent / "prompts"]


@functools.cache
def load_prompt(name: str, version: str = DEFAULT_VERSION) -> str:
    """The text of prompt ``name`` at ``version`` (one trailing newline removed)."""
    for folder in prompt_dirs():
        path = folder / version / f"{name}.md"
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            return text[:-1] if text.endswith("\n") else text
    raise ConfigurationError(
        f"prompt {name!r} version {version!r} not found in {[str(d) for d in prompt_dirs()]}"
    )


def render_prompt(name: str, version: str = DEFAULT_VERSION, **fields: object) -> str:
    """Prompt ``name`` with its ``{field}`` placeholders filled in."""
    return load_prompt(name, version).format(**fields)


def load_prompt_set(version: str = DEFAULT_VERSION) -> PromptSet:
    """Every prompt the core fills in, at ``version``."""
    return _prompt_set(version)


@functools.cache
def _prompt_set(version: str) -> PromptSet:
    texts = {name: load_prompt(name, version) for name in PromptSet.names()}
    return PromptSet(version=version, **texts)
