"""``python -m summarizer``: the command line."""

from .cli import main

main()
