"""Library use: ``ContextManager`` for hand-written agent loops, ``wrap`` for ``openai`` clients,
and the summary calls made through the ``openai`` SDK."""

from .manager import ContextManager
from .wrapping import wrap

__all__ = ["ContextManager", "wrap"]
