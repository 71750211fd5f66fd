"""The generator of ``datasets/coding-sessions.jsonl``: synthetic coding-agent sessions.

Not part of the ``summarizer`` wheel: its users are ``datasets/generate.py`` (which runs with
``datasets/`` on ``sys.path``) and the tests (``pythonpath`` in pyproject's pytest section).
``generator`` builds the cases; ``project``, ``code``, ``files``, ``output`` and ``session`` hold
the names, the source files, the tool outputs and the conversation it builds them from.
"""

from __future__ import annotations

from .generator import GENERATOR, MODEL, TOOLS, generate_cases

__all__ = ["GENERATOR", "MODEL", "TOOLS", "generate_cases"]
