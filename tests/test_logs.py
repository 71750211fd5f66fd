"""Unit tests for ``context_summarizer.proxy.logs``: redaction, the JSON formatter, the logging
config."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from context_summarizer.proxy.logs import JSONFormatter, RedactingFilter, configure_logging, redact

TOKEN = "abcDEF123456xyz"
SK_KEY = "sk-proj-Abc123_def456-GHI"
_TOUCHED_LOGGERS = ("httpx2", "httpcore")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Save and restore the root logger and the loggers ``configure_logging`` configures."""
    root = logging.getLogger()
    saved_root = (root.handlers[:], root.level, root.filters[:])
    saved = {
        name: (lg.handlers[:], lg.level, lg.propagate, lg.disabled)
        for name in _TOUCHED_LOGGERS
        for lg in [logging.getLogger(name)]
    }
    try:
        yield
    finally:
        for handler in root.handlers:
            if handler not in saved_root[0]:
                handler.close()
        root.handlers[:], root.filters[:] = saved_root[0], saved_root[2]
        root.setLevel(saved_root[1])
        for name, (handlers, level, propagate, disabled) in saved.items():
            lg = logging.getLogger(name)
            lg.handlers[:] = handlers
            lg.setLevel(level)
            lg.propagate = propagate
            lg.disabled = disabled


def _record(msg: str, *args: Any, exc_info: Any = None) -> logging.LogRecord:
    return logging.LogRecord("test.logger", logging.WARNING, __file__, 1, msg, args, exc_info)


def _exc_info(message: str) -> Any:
    try:
        raise RuntimeError(message)
    except RuntimeError:
        return sys.exc_info()


# -- redact ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_redact_bearer_token(scheme: str) -> None:
    out = redact(f"Authorization: {scheme} {TOKEN}")
    assert TOKEN not in out
    assert out == f"Authorization: {scheme} [redacted]"


def test_redact_sk_key() -> None:
    out = redact(f"invalid api key {SK_KEY} provided")
    assert "Abc123" not in out
    assert out == "invalid api key sk-[redacted] provided"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "GET https://x.openai.azure.com/v1/chat?api-key=SECRET99&v=1",
            "GET https://x.openai.azure.com/v1/chat?api-key=[redacted]&v=1",
        ),
        ("https://h/v1?x=1&key=SECRET99 done", "https://h/v1?x=1&key=[redacted] done"),
        ("https://h/v1?API_KEY=SECRET99", "https://h/v1?API_KEY=[redacted]"),
        ("https://h/v1?a=b&access_token=SECRET99", "https://h/v1?a=b&access_token=[redacted]"),
    ],
)
def test_redact_query_parameter_values(text: str, expected: str) -> None:
    out = redact(text)
    assert "SECRET99" not in out
    assert out == expected


@pytest.mark.parametrize(
    "text",
    [
        "compacted 42 messages into a 1800-token summary",
        "POST https://api.openai.com/v1/chat/completions?stream=true 200",
        "task-management service: the bearer of news",
        "risk-averse desk-lamp",
        "monkey=banana and a=b",
        "",
    ],
)
def test_redact_leaves_ordinary_text_alone(text: str) -> None:
    assert redact(text) == text


# -- RedactingFilter ------------------------------------------------------------------------------


def test_filter_renders_args_and_redacts() -> None:
    record = _record("calling %s with %s", "https://h/v1?api-key=SECRET99", f"Bearer {TOKEN}")

    assert RedactingFilter().filter(record) is True

    assert record.args is None
    message = record.getMessage()
    assert message == "calling https://h/v1?api-key=[redacted] with Bearer [redacted]"


def test_filter_renders_args_without_secrets() -> None:
    record = _record("%d messages for %s", 3, "gpt-4o")

    assert RedactingFilter().filter(record) is True

    assert record.getMessage() == "3 messages for gpt-4o"


def test_filter_redacts_message_without_args() -> None:
    record = _record(f"key {SK_KEY}")
    RedactingFilter().filter(record)
    assert record.getMessage() == "key sk-[redacted]"


def test_filter_leaves_clean_record_without_args_untouched() -> None:
    record = _record("nothing to hide")
    original = record.msg
    assert RedactingFilter().filter(record) is True
    assert record.msg is original


def test_filter_does_not_raise_on_a_malformed_log_call() -> None:
    # Standard logging never raises from a bad format/args pair (it reports it via handleError);
    # the filter runs outside that protection, so it must not raise either.
    logger = logging.getLogger("test_logs.malformed")
    handler = logging.StreamHandler(io.StringIO())
    handler.addFilter(RedactingFilter())
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("%s and %s", "only one argument")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True


# -- JSONFormatter --------------------------------------------------------------------------------


def test_json_formatter_outputs_one_json_object_line() -> None:
    line = JSONFormatter().format(_record("hello %s\nworld", "there"))

    assert "\n" not in line
    entry = json.loads(line)
    assert set(entry) == {"time", "level", "logger", "message"}
    assert entry["level"] == "warning"
    assert entry["logger"] == "test.logger"
    assert entry["message"] == "hello there\nworld"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["time"])


def test_json_formatter_keeps_non_ascii() -> None:
    line = JSONFormatter().format(_record("résumé ✓"))
    assert "résumé ✓" in line


def test_json_formatter_redacts_exceptions() -> None:
    record = _record("upstream failed", exc_info=_exc_info(f"bad key {SK_KEY} and Bearer {TOKEN}"))

    line = JSONFormatter().format(record)

    assert "\n" not in line
    entry = json.loads(line)
    assert "RuntimeError" in entry["exception"]
    assert "Traceback" in entry["exception"]
    assert SK_KEY not in line
    assert TOKEN not in line
    assert "sk-[redacted]" in entry["exception"]


# -- configure_logging ----------------------------------------------------------------------------


@pytest.mark.usefixtures("restore_logging")
def test_configure_logging_json_logs_json_lines_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)

    configure_logging("json", "debug")

    assert logging.getLogger().level == logging.DEBUG

    (handler,) = logging.getLogger().handlers
    assert isinstance(handler.formatter, JSONFormatter)
    assert any(isinstance(f, RedactingFilter) for f in handler.filters)

    logging.getLogger("some.library").info("connecting to %s", "https://h/v1?api-key=SECRET99")
    (line,) = stream.getvalue().splitlines()
    entry = json.loads(line)
    assert entry["logger"] == "some.library"
    assert entry["level"] == "info"
    assert entry["message"] == "connecting to https://h/v1?api-key=[redacted]"


@pytest.mark.usefixtures("restore_logging")
def test_configure_logging_text_level(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)

    configure_logging("text", "warning")

    assert logging.getLogger().level == logging.WARNING
    logging.getLogger("some.library").info("hidden")
    logging.getLogger("some.library").warning("shown %s", f"Bearer {TOKEN}")
    output = stream.getvalue()
    assert "hidden" not in output
    assert "WARNING some.library: shown Bearer [redacted]" in output


@pytest.mark.usefixtures("restore_logging")
def test_configure_logging_text_redacts_exceptions(monkeypatch: pytest.MonkeyPatch) -> None:
    # The module promises redaction of "an exception quoting a key"; in text format too.
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging("text", "info")

    try:
        raise RuntimeError(f"upstream rejected {SK_KEY}")
    except RuntimeError:
        logging.getLogger("some.library").exception("call failed")

    output = stream.getvalue()
    assert "RuntimeError" in output
    assert SK_KEY not in output
