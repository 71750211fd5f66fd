"""The pure core: message structure and digests, token accounting, policy and cut-point planning,
summary requests, fact extraction and scoring, and the engine that decides what to send.

Nothing here performs I/O: storage, prompt files, tokenizer files and clocks reach it through the
drivers (``summarizer.library``, ``summarizer.proxy``), as the summary call does.
"""
