"""``python -m context_summarizer``: the command line."""

from .cli import main

main()
