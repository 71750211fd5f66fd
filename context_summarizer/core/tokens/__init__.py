"""Count the tokens of a Chat Completions request, and learn how far the count is off.

What this module guarantees:

- Counting is real tokenization. ``TiktokenCounter`` encodes with a tiktoken encoding the edge
  loads offline (``context_summarizer.loaders.tokenizers``; when no file is available that raises
  ``TokenizerUnavailable``). Nothing here ever falls back to an estimate on its own:
  ``ApproximateCounter`` (characters / 4) is used only when asked for by name.
- Text is encoded with ``encode_ordinary``: a message containing ``<|endoftext|>`` or any other
  special-token spelling is counted as the plain text it is, and never raises.
- Counting never raises on a message's shape: unknown fields and content parts are counted as
  their canonical JSON, since they reach the upstream too.
- The chat overheads are the OpenAI cookbook's ("How to count tokens with tiktoken"): 3 tokens per
  message, 1 more per ``name``, 3 to prime the reply; tool definitions follow its
  ``num_tokens_for_tools``. On the cookbook's examples the counts equal the ones it reports the
  API returning (124 and 129 for its conversation, 101 and 105 with its weather tool).
- Per-message counts are cached in a bounded, thread-safe LRU keyed by
  ``messages.message_digest``, so turn N of a long session only tokenizes what is new.
- Images are estimated with OpenAI's published tile formula; audio and file parts with a
  documented flat charge. These are estimates: ``Calibration`` learns, per model, the ratio of the
  provider-reported ``usage.prompt_tokens`` to our count and corrects for it (within bounds).
"""

from __future__ import annotations

from .cache import CacheInfo
from .calibration import Calibration
from .counters import ApproximateCounter, TiktokenCounter
from .counting import (
    REPLY_PRIMING_TOKENS,
    TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME,
    TOOL_CALL_TOKENS,
    TOOL_CONSTANTS,
    TokenCounter,
    ToolTokenConstants,
)
from .encodings import (
    APPROXIMATE,
    CL100K_BASE,
    DEFAULT_ENCODING,
    MODEL_ENCODINGS,
    O200K_BASE,
    encoding_for_model,
)
from .images import (
    AUDIO_PART_TOKENS,
    DEFAULT_IMAGE_SIZE,
    FILE_PART_TOKENS,
    IMAGE_LOW_TOKENS,
    IMAGE_MAX_SIDE,
    IMAGE_SHORT_SIDE,
    IMAGE_TILE_SIZE,
    IMAGE_TILE_TOKENS,
    data_url_image_size,
    image_size,
    image_tokens,
)

__all__ = [
    "APPROXIMATE",
    "AUDIO_PART_TOKENS",
    "CL100K_BASE",
    "DEFAULT_ENCODING",
    "DEFAULT_IMAGE_SIZE",
    "FILE_PART_TOKENS",
    "IMAGE_LOW_TOKENS",
    "IMAGE_MAX_SIDE",
    "IMAGE_SHORT_SIDE",
    "IMAGE_TILE_SIZE",
    "IMAGE_TILE_TOKENS",
    "MODEL_ENCODINGS",
    "O200K_BASE",
    "REPLY_PRIMING_TOKENS",
    "TOKENS_PER_MESSAGE",
    "TOKENS_PER_NAME",
    "TOOL_CALL_TOKENS",
    "TOOL_CONSTANTS",
    "ApproximateCounter",
    "CacheInfo",
    "Calibration",
    "TiktokenCounter",
    "TokenCounter",
    "ToolTokenConstants",
    "data_url_image_size",
    "encoding_for_model",
    "image_size",
    "image_tokens",
]
