"""The pure core: message structure and digests, token accounting, policy and cut-point planning,
summary requests, fact extraction and scoring, and the engine that decides what to send.

Nothing here performs I/O: prompt texts and tokenizers are handed in (``context_summarizer.loaders``
loads them), and storage is an effect the engine yields (``effects``), performed by the drivers
(``context_summarizer.library.drive``) as the summary call is. ``tests/test_core_purity.py`` holds
it.
"""
