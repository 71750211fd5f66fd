"""``python -m context_summarizer.cli``: the same as the ``summarizer`` command."""

from .main import main

main()
