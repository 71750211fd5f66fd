"""Token counting against the real tiktoken encodings (loaded offline), no mocks."""

from __future__ import annotations

import base64
import struct
import threading
import zlib
from typing import Any

import pytest

from context_summarizer.core.errors import ConfigurationError, TokenizerUnavailable
from context_summarizer.core.messages import canonical_json
from context_summarizer.core.tokens import (
    AUDIO_PART_TOKENS,
    FILE_PART_TOKENS,
    IMAGE_LOW_TOKENS,
    REPLY_PRIMING_TOKENS,
    TOKENS_PER_MESSAGE,
    TOKENS_PER_NAME,
    TOOL_CALL_TOKENS,
    TOOL_CONSTANTS,
    ApproximateCounter,
    Calibration,
    TiktokenCounter,
    TokenCounter,
    data_url_image_size,
    encoding_for_model,
    image_size,
    image_tokens,
)
from context_summarizer.loaders.tokenizers import load_encoding, make_counter

O200K = "o200k_base"
CL100K = "cl100k_base"


def enc_len(text: str, encoding: str = O200K) -> int:
    return len(load_encoding(encoding).encode_ordinary(text))


@pytest.fixture
def counter() -> TiktokenCounter:
    return TiktokenCounter(load_encoding(O200K))


# The cookbook's example conversation ("How to count tokens with tiktoken", section 6). The
# cookbook prints 129 prompt tokens from the API for gpt-3.5-turbo / gpt-4 and 124 for gpt-4o /
# gpt-4o-mini, matching its num_tokens_from_messages().
COOKBOOK_MESSAGES: list[dict[str, Any]] = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate "
        "jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities "
        "for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client "
        "deliverable.",
    },
]

# The cookbook's tools example (section 7): the API reported 105 prompt tokens for gpt-3.5-turbo /
# gpt-4 and 101 for gpt-4o / gpt-4o-mini.
COOKBOOK_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {
                        "type": "string",
                        "description": "The city and state, e.g. San Francisco, CA",
                    },
                    "unit": {
                        "type": "string",
                        "description": "The unit of temperature to return",
                        "enum": ["celsius", "fahrenheit"],
                    },
                },
                "required": ["location"],
            },
        },
    }
]
COOKBOOK_TOOL_MESSAGES: list[dict[str, Any]] = [
    {
        "role": "system",
        "content": "You are a helpful assistant that can answer to questions about the weather.",
    },
    {"role": "user", "content": "What's the weather like in San Francisco?"},
]


# --- text and messages ----------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", [O200K, CL100K])
@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello world",
        "antidisestablishmentarianism",
        "2 + 2 = 4",
        "お誕生日おめでとう",
        "x" * 5000,
    ],
)
def test_count_text_is_exact(encoding: str, text: str) -> None:
    assert TiktokenCounter(load_encoding(encoding)).count_text(text) == enc_len(text, encoding)


@pytest.mark.parametrize(("encoding", "published"), [(O200K, 124), (CL100K, 129)])
def test_cookbook_conversation_matches_published_count(encoding: str, published: int) -> None:
    assert TiktokenCounter(load_encoding(encoding)).count_messages(COOKBOOK_MESSAGES) == published


def test_message_count_is_fields_plus_overheads(counter: TiktokenCounter) -> None:
    message = {"role": "user", "content": "What is the capital of France?"}
    expected = TOKENS_PER_MESSAGE + enc_len("user") + enc_len("What is the capital of France?")
    assert counter.count_message(message) == expected
    assert counter.count_messages([message, message]) == 2 * expected + REPLY_PRIMING_TOKENS
    assert counter.count_messages([]) == REPLY_PRIMING_TOKENS


def test_name_adds_its_text_and_one_token(counter: TiktokenCounter) -> None:
    plain = {"role": "user", "content": "hi"}
    named = {"role": "user", "content": "hi", "name": "alice"}
    assert counter.count_message(named) - counter.count_message(plain) == (
        enc_len("alice") + TOKENS_PER_NAME
    )


@pytest.mark.parametrize(
    "text", ["<|endoftext|>", "before <|endofprompt|> after", "<|im_start|>user<|im_end|>"]
)
def test_special_token_text_is_ordinary_text(counter: TiktokenCounter, text: str) -> None:
    assert counter.count_text(text) == enc_len(text)
    assert counter.count_text(text) > 1
    message = {"role": "user", "content": text}
    assert counter.count_message(message) == TOKENS_PER_MESSAGE + enc_len("user") + enc_len(text)
    assert ApproximateCounter().count_message(message) > 0


def test_tool_calls_count_name_arguments_and_overhead(counter: TiktokenCounter) -> None:
    arguments = '{"location": "Paris", "unit": "celsius"}'
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": arguments},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_time", "arguments": "{}"},
            },
        ],
    }
    expected = (
        TOKENS_PER_MESSAGE
        + enc_len("assistant")
        + TOOL_CALL_TOKENS
        + enc_len("get_weather")
        + enc_len(arguments)
        + TOOL_CALL_TOKENS
        + enc_len("get_time")
        + enc_len("{}")
    )
    assert counter.count_message(message) == expected


def test_legacy_function_call_counts_like_a_tool_call(counter: TiktokenCounter) -> None:
    message = {"role": "assistant", "function_call": {"name": "f", "arguments": '{"a": 1}'}}
    expected = TOKENS_PER_MESSAGE + enc_len("assistant") + TOOL_CALL_TOKENS
    expected += enc_len("f") + enc_len('{"a": 1}')
    assert counter.count_message(message) == expected


def test_tool_message_counts_tool_call_id(counter: TiktokenCounter) -> None:
    message = {"role": "tool", "tool_call_id": "call_abc123", "content": "22 degrees"}
    expected = TOKENS_PER_MESSAGE + enc_len("tool") + enc_len("call_abc123") + enc_len("22 degrees")
    assert counter.count_message(message) == expected


def test_refusal_and_text_parts(counter: TiktokenCounter) -> None:
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "part one"}, {"type": "refusal", "refusal": "no"}],
        "refusal": "I can't",
    }
    expected = TOKENS_PER_MESSAGE + enc_len("assistant") + enc_len("part one") + enc_len("no")
    expected += enc_len("I can't")
    assert counter.count_message(message) == expected


def test_unknown_fields_count_as_canonical_json(counter: TiktokenCounter) -> None:
    base = {"role": "user", "content": "hello"}
    extra = {**base, "metadata": {"b": [1, 2], "a": "x"}}
    assert counter.count_message(extra) - counter.count_message(base) == enc_len(
        canonical_json({"b": [1, 2], "a": "x"})
    )
    assert counter.count_message({**base, "reasoning_content": "think"}) - counter.count_message(
        base
    ) == enc_len("think")


def test_unknown_and_odd_parts_do_not_crash(counter: TiktokenCounter) -> None:
    weird = {"type": "something_new", "payload": {"k": [1, 2, 3]}}
    message = {"role": "user", "content": [weird, {"type": "text", "text": 5}, "bare string"]}
    count = counter.count_message(message)
    assert count >= TOKENS_PER_MESSAGE + enc_len(canonical_json(weird)) + enc_len("bare string")
    assert counter.count_message({"role": "user", "content": {"unexpected": "dict"}}) > 0
    assert counter.count_message({"role": "assistant", "tool_calls": "not a list"}) > 0
    assert counter.count_message({"role": "user", "content": [{"type": "image_url"}]}) > 0


def test_audio_and_file_parts_use_documented_constants(counter: TiktokenCounter) -> None:
    base = {"role": "user", "content": []}
    audio = {"type": "input_audio", "input_audio": {"data": "UklGR" * 1000, "format": "wav"}}
    file = {"type": "file", "file": {"filename": "report.pdf", "file_data": "JVBER" * 1000}}
    assert counter.count_message({**base, "content": [audio]}) - counter.count_message(base) == (
        AUDIO_PART_TOKENS
    )
    assert counter.count_message({**base, "content": [file]}) - counter.count_message(base) == (
        FILE_PART_TOKENS + enc_len("report.pdf")
    )


def test_non_json_values_are_counted_uncached(counter: TiktokenCounter) -> None:
    message = {"role": "user", "content": "hi", "when": {1, 2}}  # a set: not JSON-serialisable
    assert counter.count_message(message) > TOKENS_PER_MESSAGE
    assert counter.cache_info().size == 0


# --- images ---------------------------------------------------------------------------------------


def png_bytes(width: int, height: int) -> bytes:
    """A valid RGB PNG of the given size, all black."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"".join(b"\x00" + b"\x00\x00\x00" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def image_message(url: str, detail: str | None = None) -> dict[str, Any]:
    image: dict[str, Any] = {"url": url}
    if detail is not None:
        image["detail"] = detail
    return {"role": "user", "content": [{"type": "image_url", "image_url": image}]}


def image_part_tokens(counter: TiktokenCounter, url: str, detail: str | None = None) -> int:
    return counter.count_message(image_message(url, detail)) - (
        TOKENS_PER_MESSAGE + enc_len("user")
    )


def test_published_image_examples() -> None:
    # OpenAI vision guide: 1024x1024 high = 765, 2048x4096 high = 1105, any low = 85.
    assert image_tokens(1024, 1024, "high") == 765
    assert image_tokens(2048, 4096, "high") == 1105
    assert image_tokens(4096, 8192, "low") == 85
    assert image_tokens(128, 64, "high") == IMAGE_LOW_TOKENS + 170  # small images are not upscaled
    assert image_tokens(None, None, "auto") == 765


def test_remote_image_estimates(counter: TiktokenCounter) -> None:
    url = "https://example.com/cat.jpg"
    assert image_part_tokens(counter, url, "low") == 85
    assert image_part_tokens(counter, url, "high") == 765
    assert image_part_tokens(counter, url, "auto") == 765
    assert image_part_tokens(counter, url) == 765


def test_png_data_url_dimensions_are_read() -> None:
    tiny = png_bytes(16, 16)
    assert image_size(tiny) == (16, 16)
    counter = TiktokenCounter(load_encoding(O200K))
    assert image_part_tokens(counter, data_url(tiny), "high") == 85 + 170
    assert image_part_tokens(counter, data_url(tiny), "low") == 85
    # 1600x800 -> shortest side 800 > 768 -> 1536x768 -> 3 x 2 tiles.
    wide = png_bytes(1600, 800)
    assert data_url_image_size(data_url(wide)) == (1600, 800)
    assert image_part_tokens(counter, data_url(wide), "auto") == 85 + 6 * 170


def test_gif_webp_jpeg_headers() -> None:
    gif = b"GIF89a" + struct.pack("<HH", 300, 200) + b"\x00" * 20
    assert image_size(gif) == (300, 200)

    vp8x = b"RIFF" + b"\x00" * 4 + b"WEBPVP8X" + struct.pack("<I", 10) + b"\x00" * 4
    vp8x += (640 - 1).to_bytes(3, "little") + (480 - 1).to_bytes(3, "little")
    assert image_size(vp8x) == (640, 480)

    bits = (1000 - 1) | ((700 - 1) << 14)
    vp8l = b"RIFF" + b"\x00" * 4 + b"WEBPVP8L" + b"\x00" * 4 + b"\x2f" + bits.to_bytes(4, "little")
    assert image_size(vp8l) == (1000, 700)

    vp8 = b"RIFF" + b"\x00" * 4 + b"WEBPVP8 " + b"\x00" * 4 + b"\x00" * 3 + b"\x9d\x01\x2a"
    vp8 += struct.pack("<HH", 320, 240)
    assert image_size(vp8) == (320, 240)

    def jpeg(app_payload: int) -> bytes:
        app1 = b"\xff\xe1" + struct.pack(">H", app_payload + 2) + b"E" * app_payload
        sof = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, 900, 1200, 3) + b"\x00" * 9
        return b"\xff\xd8" + app1 + sof + b"\xff\xd9"

    assert image_size(jpeg(16)) == (1200, 900)
    # An EXIF block larger than the first decoded window: the size is still found.
    big = jpeg(30_000)
    assert data_url_image_size(data_url(big, "image/jpeg")) == (1200, 900)
    assert image_size(b"not an image at all") is None
    assert data_url_image_size("data:image/png;base64,!!!not-base64") is None
    assert data_url_image_size("https://example.com/x.png") is None


# --- caching --------------------------------------------------------------------------------------


def conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"question number {i}"})
        messages.append({"role": "assistant", "content": f"answer number {i}"})
    return messages


def test_repeated_conversation_hits_cache_and_only_new_messages_miss() -> None:
    counter = TiktokenCounter(load_encoding(O200K))
    messages = conversation(10)
    first = counter.count_messages(messages)
    info = counter.cache_info()
    assert (info.hits, info.misses, info.size) == (0, len(messages), len(messages))

    assert counter.count_messages(messages) == first
    info = counter.cache_info()
    assert (info.hits, info.misses) == (len(messages), len(messages))

    grown = [*messages, {"role": "user", "content": "one more"}]
    counter.count_messages(grown)
    info = counter.cache_info()
    assert (info.hits, info.misses) == (2 * len(messages), len(messages) + 1)

    counter.clear_cache()
    assert counter.cache_info() == (0, 0, 0, 200_000)


def test_cache_is_bounded() -> None:
    counter = TiktokenCounter(load_encoding(O200K), cache_size=3)
    counter.count_messages(conversation(5))
    assert counter.cache_info().size == 3
    with pytest.raises(ConfigurationError):
        TiktokenCounter(load_encoding(O200K), cache_size=-1)


def test_counting_is_thread_safe() -> None:
    counter = TiktokenCounter(load_encoding(O200K), cache_size=50)
    messages = conversation(40)
    expected = TiktokenCounter(load_encoding(O200K)).count_messages(messages)
    results: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(5):
            value = counter.count_messages(messages)
            with lock:
                results.append(value)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 40
    assert counter.cache_info().size <= 50


# --- tools ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("encoding", "published"), [(O200K, 101), (CL100K, 105)])
def test_cookbook_tools_example_matches_published_count(encoding: str, published: int) -> None:
    counter = TiktokenCounter(load_encoding(encoding))
    total = counter.count_messages(COOKBOOK_TOOL_MESSAGES) + counter.count_tools(COOKBOOK_TOOLS)
    assert total == published


def tool(properties: dict[str, Any] | None = None) -> dict[str, Any]:
    parameters: dict[str, Any] = {"type": "object", "properties": properties or {}}
    return {
        "type": "function",
        "function": {"name": "search", "description": "Search the docs.", "parameters": parameters},
    }


def test_tools_estimate_follows_cookbook_formula(counter: TiktokenCounter) -> None:
    c = TOOL_CONSTANTS[O200K]
    bare = counter.count_tools([tool()])
    assert bare == c.func_init + enc_len("search:Search the docs") + c.func_end

    one = counter.count_tools([tool({"query": {"type": "string", "description": "Terms."}})])
    assert one - bare == c.prop_init + c.prop_key + enc_len("query:string:Terms")

    enum_prop = {"type": "string", "description": "Terms.", "enum": ["a", "bb"]}
    with_enum = counter.count_tools([tool({"query": enum_prop})])
    assert with_enum - one == c.enum_init + 2 * c.enum_item + enc_len("a") + enc_len("bb")

    two = counter.count_tools(
        [tool({"query": {"type": "string", "description": "Terms."}, "limit": {"type": "integer"}})]
    )
    assert two > one
    nested = {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "string"}}}}
    assert counter.count_tools([tool({"query": nested})]) > counter.count_tools(
        [tool({"query": {"type": "array"}})]
    )


def test_tools_edge_cases_and_cache(counter: TiktokenCounter) -> None:
    assert counter.count_tools(None) == 0
    assert counter.count_tools([]) == 0
    legacy = {"name": "search", "description": "Search the docs.", "parameters": {}}
    assert counter.count_tools([legacy]) == counter.count_tools([tool()])
    assert counter.count_tools([{"type": "web_search"}]) == enc_len(
        canonical_json({"type": "web_search"})
    )
    before = counter.tools_cache_info()
    counter.count_tools(COOKBOOK_TOOLS)
    counter.count_tools(COOKBOOK_TOOLS)
    after = counter.tools_cache_info()
    assert after.hits == before.hits + 1
    assert after.misses == before.misses + 1


# --- encodings and factories ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", O200K),
        ("gpt-4o-mini-2024-07-18", O200K),
        ("chatgpt-4o-latest", O200K),
        ("gpt-4.1-nano", O200K),
        ("gpt-4.5-preview", O200K),
        ("gpt-5", O200K),
        ("gpt-5.1-codex", O200K),
        ("o1-mini", O200K),
        ("o3", O200K),
        ("o4-mini", O200K),
        ("gpt-oss-120b", O200K),
        ("gpt-4", CL100K),
        ("gpt-4-0613", CL100K),
        ("gpt-4-32k", CL100K),
        ("gpt-4-turbo-2024-04-09", CL100K),
        ("gpt-3.5-turbo", CL100K),
        ("gpt-35-turbo", CL100K),
        ("openai/gpt-4o", O200K),
        ("azure/gpt-4", CL100K),
        ("openrouter/openai/gpt-3.5-turbo", CL100K),
        ("ft:gpt-4o-mini-2024-07-18:acme::abc123", O200K),
        ("GPT-4", CL100K),
        ("claude-sonnet-4-5", O200K),  # unknown: the documented default
        ("deepseek-chat", O200K),
    ],
)
def test_encoding_for_model_table(model: str, encoding: str) -> None:
    assert encoding_for_model(model) == encoding


def test_encoding_overrides() -> None:
    overrides = {"claude-": CL100K, "claude-3-5": O200K, "gpt-4o": CL100K, "my-exact-model": CL100K}
    assert encoding_for_model("claude-3-opus", overrides) == CL100K
    assert encoding_for_model("claude-3-5-sonnet", overrides) == O200K  # longest match wins
    assert encoding_for_model("anthropic/claude-3-opus", overrides) == CL100K
    assert encoding_for_model("gpt-4o", overrides) == CL100K  # checked before the table
    assert encoding_for_model("my-exact-model", overrides) == CL100K
    assert encoding_for_model("gpt-4", overrides) == CL100K
    assert encoding_for_model("gpt-5", overrides) == O200K


def test_make_counter_shares_counters_per_encoding() -> None:
    a = make_counter("gpt-4o")
    b = make_counter("openai/gpt-5-mini")
    assert isinstance(a, TiktokenCounter)
    assert a is b
    assert a.name == O200K
    assert make_counter("gpt-4").name == CL100K
    assert make_counter("gpt-4o", tokenizer=CL100K) is make_counter("gpt-3.5-turbo")
    assert make_counter("claude-3-opus", encoding_overrides={"claude": CL100K}).name == CL100K
    assert isinstance(a, TokenCounter)


def test_approximate_counter_only_on_explicit_request() -> None:
    assert not isinstance(make_counter("some-unknown-model"), ApproximateCounter)
    approx = make_counter("gpt-4o", tokenizer="approximate")
    assert isinstance(approx, ApproximateCounter)
    assert approx.name == "approximate"
    assert approx.count_text("abcd" * 3) == 3
    assert approx.count_text("abcde") == 2
    assert approx.count_text("") == 0
    message = {"role": "user", "content": "x" * 40, "name": "bob"}
    assert approx.count_message(message) == TOKENS_PER_MESSAGE + 1 + 10 + 1 + TOKENS_PER_NAME
    assert approx.count_messages([message]) == approx.count_message(message) + REPLY_PRIMING_TOKENS
    assert approx.count_tools([tool()]) > 0


def test_unavailable_encoding_raises_instead_of_falling_back() -> None:
    with pytest.raises(TokenizerUnavailable):
        make_counter("gpt-4o", tokenizer="p50k_base")
    with pytest.raises(TokenizerUnavailable):
        make_counter("some-model", encoding_overrides={"some-": "r50k_base"})


# --- calibration ----------------------------------------------------------------------------------


def test_calibration_is_a_quotient_of_decaying_sums_and_apply_rounds_up() -> None:
    cal = Calibration()
    assert cal.ratio("gpt-4o") == 1.0
    assert cal.apply("gpt-4o", 1000) == 1000
    cal.observe("gpt-4o", estimated=100, reported=120)
    assert cal.ratio("gpt-4o") == pytest.approx(1.2)
    cal.observe("gpt-4o", estimated=100, reported=100)
    assert cal.ratio("gpt-4o") == pytest.approx((0.7 * 120 + 100) / (0.7 * 100 + 100))
    cal.restore({"m": 1.1})
    assert cal.apply("m", 100) == 110  # not 111 from 110.00000000000001
    assert cal.apply("m", 7) == 8  # ceil(7.7)


def test_calibration_weighs_a_request_by_its_size() -> None:
    # A small first request is mostly a chat template's fixed overhead: once a long one
    # follows, the long one's ratio dominates (an average of ratios would be halfway).
    cal = Calibration()
    cal.observe("m", estimated=200, reported=290)
    cal.observe("m", estimated=6_000, reported=5_400)
    assert cal.ratio("m") == pytest.approx((0.7 * 290 + 5_400) / (0.7 * 200 + 6_000))
    assert abs(cal.ratio("m") - 0.9) < 0.02


def test_a_restored_ratio_weighs_as_one_request_of_a_thousand_tokens() -> None:
    cal = Calibration()
    cal.restore({"m": 1.2})
    cal.observe("m", estimated=1_000, reported=1_000)
    assert cal.ratio("m") == pytest.approx((0.7 * 1_200 + 1_000) / (0.7 * 1_000 + 1_000))


def test_calibration_clamps_ignores_and_isolates() -> None:
    cal = Calibration(min_ratio=0.8, max_ratio=1.25, alpha=0.5)
    cal.observe("a", estimated=100, reported=1000)
    assert cal.ratio("a") == 1.25
    cal.observe("b", estimated=1000, reported=10)
    assert cal.ratio("b") == 0.8
    cal.observe("c", estimated=0, reported=100)
    cal.observe("c", estimated=100, reported=0)
    cal.observe("c", estimated=-5, reported=100)
    assert cal.ratio("c") == 1.0
    assert "c" not in cal.snapshot()
    assert cal.ratio("a") == 1.25 and cal.ratio("b") == 0.8


def test_calibration_snapshot_restore() -> None:
    cal = Calibration()
    cal.observe("gpt-4o", estimated=100, reported=110)
    cal.observe("claude", estimated=100, reported=130)
    snap = cal.snapshot()
    other = Calibration()
    other.restore(snap)
    assert other.snapshot() == snap
    assert other.ratio("claude") == pytest.approx(1.3)
    other.restore({"x": float("nan"), "y": -1.0, "z": 9.0, "w": 1.1, "v": True})
    assert set(other.snapshot()) == {"z", "w"}
    assert other.ratio("z") == 1.5
    assert other.ratio("gpt-4o") == 1.0  # restore replaces


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_ratio": 0},
        {"min_ratio": 1.2},
        {"max_ratio": 0.9},
        {"max_ratio": float("inf")},
        {"alpha": 0},
        {"alpha": 1.5},
    ],
)
def test_calibration_rejects_bad_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        Calibration(**kwargs)


def test_calibration_is_thread_safe() -> None:
    cal = Calibration(alpha=0.1)

    def work() -> None:
        for _ in range(500):
            cal.observe("m", estimated=100, reported=120)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cal.ratio("m") == pytest.approx(1.2)
