"""``python -m summarizer.cli``: the same as the ``summarizer`` command."""

from .main import main

main()
