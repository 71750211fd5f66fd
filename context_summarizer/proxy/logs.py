"""Logging for the proxy and CLI: text or JSON lines, with credentials redacted.

Nothing in this package logs a header; the redacting filter is the second line of defence for
messages from libraries (an upstream URL with ``?api-key=...``, an exception quoting a key).
"""

from __future__ import annotations

import json
import logging
import logging.config
import re
import sys
import time
from typing import Any, Literal

_SECRET_PATTERNS = (
    re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\b(sk-)[A-Za-z0-9_-]{8,}"),
    re.compile(r"(?i)([?&](?:api[-_]?key|key|token|access_token)=)[^&\s\"']+"),
)


def redact(text: str) -> str:
    """``text`` with anything shaped like a credential replaced by ``[redacted]``."""
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + "[redacted]", text)
    return text


class RedactingFilter(logging.Filter):
    """Redacts credentials from every record's rendered message."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Render the message once, redacted, and keep the record."""
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: let the handler report it as logging does
            return True
        cleaned = redact(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        return True


class RedactingFormatter(logging.Formatter):
    """The standard text formatter, with credentials redacted from tracebacks too."""

    def formatException(self, ei: Any) -> str:
        """The traceback, redacted."""
        return redact(super().formatException(ei))


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and exception)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line."""
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(log_format: Literal["text", "json"] = "text", level: str = "info") -> None:
    """Set up the root logger: one handler on stderr, in ``log_format``, credentials redacted,
    at ``level`` (the access log, ``summarizer.access``, is at info)."""
    formatter: dict[str, Any] = (
        {"()": JSONFormatter}
        if log_format == "json"
        else {
            "()": RedactingFormatter,
            "format": "%(asctime)s %(levelname)s %(name)s: %(message)s",
        }
    )
    config: dict[str, Any] = {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"redact": {"()": RedactingFilter}},
        "formatters": {"default": formatter},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "stream": sys.stderr,
                "formatter": "default",
                "filters": ["redact"],
            }
        },
        "root": {"handlers": ["default"], "level": level.upper()},
        "loggers": {
            "httpx2": {"level": "WARNING"},
            "httpcore": {"level": "WARNING"},
        },
    }
    logging.config.dictConfig(config)
