"""The fast path (``context_summarizer.proxy.fast_path``) gives exactly what parsing the body whole
gives.

On random conversations sent as successive bodies (appended turns, forks, edits in the middle,
changed fields after the messages, whitespace and key-order changes, strings full of quotes,
backslashes, brackets and unicode, streams on and off), every request the fast path builds has
the same parse, the same engine view and the same upstream bytes as the full path's; over real
HTTP, a proxy with the fast path and one without send the upstream byte-identical bodies and
answer with the same ``x-summarizer-*`` headers. Each body it cannot prove goes the full way,
and is counted so.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_summarizer import ContextManager
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.body import outgoing_body
from context_summarizer.proxy.chat_request import ChatRequest, parse_chat_request
from context_summarizer.proxy.errors import ProxyError
from context_summarizer.proxy.fast_path import KEY_BYTES, FastPath, Outcome
from context_summarizer.proxy.managed_request import sender
from context_summarizer.proxy.remembered import Remembered
from context_summarizer.testing import TestUpstream, summary_responder

from .recording_relay import Recorder, recorded_proxy

MODEL = "gpt-4o-mini"
HEADERS = {"authorization": "Bearer sk-fast-path-test"}
TRICKY = '"\\]}[{,:' + "\n\t é日本🚀\u2028"


# -- building bodies byte by byte -----------------------------------------------------------------


@dataclass
class Style:
    """How a client writes JSON: separators, escaping, and whitespace around the array."""

    item: str = ","
    key: str = ":"
    ascii: bool = False
    indent: int | None = None
    before_close: str = ""

    def dumps(self, value: Any) -> str:
        if self.indent is not None:
            return json.dumps(value, ensure_ascii=self.ascii, indent=self.indent)
        return json.dumps(value, ensure_ascii=self.ascii, separators=(self.item, self.key))


STYLES = st.builds(
    Style,
    item=st.sampled_from([",", ", ", " ,\n "]),
    key=st.sampled_from([":", ": "]),
    ascii=st.booleans(),
    indent=st.sampled_from([None, None, 2]),
    before_close=st.sampled_from(["", " ", "\n"]),
)


@dataclass
class Request:
    """A body as fields before ``messages``, the messages, and fields after them."""

    before: dict[str, Any]
    messages: list[dict[str, Any]]
    after: dict[str, Any]
    styles: list[Style] = field(default_factory=list)
    """One per message (how the client wrote each; the last style writes the fields)."""

    def raw(self, style: Style) -> bytes:
        def fields(values: dict[str, Any]) -> list[str]:
            return [f"{json.dumps(k)}{style.key}{style.dumps(v)}" for k, v in values.items()]

        items = [
            (self.styles[i] if i < len(self.styles) else style).dumps(m)
            for i, m in enumerate(self.messages)
        ]
        array = "[" + style.item.join(items) + style.before_close + "]"
        parts = [*fields(self.before), f'"messages"{style.key}{array}', *fields(self.after)]
        return ("{" + style.item.join(parts) + "}").encode()


def message_strategy(number: int) -> st.SearchStrategy[dict[str, Any]]:
    text = st.text(alphabet=st.sampled_from(list(TRICKY) + list("abc xyz")), max_size=30)
    extra = st.sampled_from([{}, {"name": "a"}, {"x_big": 2**70 + 1}, {"x_num": 1.5}])
    return st.builds(
        lambda role, words, more: {"role": role, "content": f"m{number} {words}", **more},
        st.sampled_from(["user", "assistant"]),
        text,
        extra,
    )


STEPS = st.sampled_from(["append", "append", "append", "same", "fork", "edit", "tail", "style"])


@st.composite
def sessions(draw: st.DrawFn) -> list[bytes]:
    """Successive bodies of one client, each usually its previous plus a turn."""
    style = draw(STYLES)
    system = {"role": "system", "content": "You are a careful agent. " * 6}
    request = Request(
        before={"model": MODEL},
        messages=[system, {"role": "user", "content": "Fix the build " + draw(st.text())}],
        after=draw(st.sampled_from([{}, {"max_tokens": 32}, {"stream": True}])),
    )
    bodies = [request.raw(style)]
    for number in range(draw(st.integers(1, 8))):
        step = draw(STEPS)
        if step == "append":
            for _ in range(draw(st.integers(1, 3))):
                request.messages.append(draw(message_strategy(number)))
                request.styles.append(draw(STYLES) if draw(st.booleans()) else style)
        elif step == "fork" and len(request.messages) > 2:
            keep = draw(st.integers(2, len(request.messages) - 1))
            del request.messages[keep:]
            request.messages.append(draw(message_strategy(number)))
        elif step == "edit" and len(request.messages) > 2:
            at = draw(st.integers(1, len(request.messages) - 1))
            request.messages[at] = draw(message_strategy(number))
        elif step == "tail":
            request.after = draw(
                st.sampled_from(
                    [{}, {"stream": True}, {"stream": False, "max_tokens": 9}, {"tools": []}]
                )
            )
        elif step == "style":
            style = draw(STYLES)
        bodies.append(request.raw(style))
    return bodies


# -- the fast path against the full one, in process ------------------------------------------------


def counting() -> tuple[FastPath, list[Outcome]]:
    outcomes: list[Outcome] = []
    return FastPath(count=outcomes.append), outcomes


def take_any(fast: FastPath, raw: bytes) -> tuple[ChatRequest | None, ChatRequest | ProxyError]:
    """What the fast path builds for ``raw`` (None: it declined) and the full parse (learned
    when the fast path declined, as the proxy does; the 400 refusing an invalid body)."""
    quick = fast.parse(raw, HEADERS)
    try:
        whole: ChatRequest | ProxyError = parse_chat_request(raw, HEADERS)
    except ProxyError as refused:
        whole = refused
    if quick is None and isinstance(whole, ChatRequest):
        fast.learn(whole)
    return quick, whole


def take(fast: FastPath, raw: bytes) -> tuple[ChatRequest | None, ChatRequest]:
    """``take_any`` for a valid body."""
    quick, whole = take_any(fast, raw)
    assert isinstance(whole, ChatRequest)
    return quick, whole


def extension_of(fast: FastPath, raw: bytes) -> tuple[Remembered, list[Any]] | None:
    """What ``FastPath.extension`` proves ``raw`` appends to the newest remembered body of its
    conversation, when its bytes before that body's last message are that body's (as the lane
    checks them): the body and the new messages."""
    who = sender(HEADERS)
    known = fast.newest(raw[:KEY_BYTES], who) if len(raw) >= KEY_BYTES else None
    if known is None or not raw.startswith(known.raw[: known.end]):
        return None
    extended = fast.extension(known, raw[known.end :], len(raw))
    return None if extended is None else (known, extended[0])


def assert_same_request(quick: ChatRequest, whole: ChatRequest) -> None:
    # json.dumps tells 1 from 1.0 and True, and keeps key order: the parse is the same, exactly.
    assert json.dumps(quick.body) == json.dumps(whole.body)
    assert (quick.model, quick.stream, quick.namespace, quick.session) == (
        whole.model,
        whole.stream,
        whole.namespace,
        whole.session,
    )
    assert quick.outgoing(None) == whole.outgoing(None)
    # A rewrite (a summary, then the newest messages, the client's own objects) is written the
    # same way too: kept messages come out as the client wrote them on both paths.
    summary = {"role": "user", "content": "summary of earlier turns"}

    def rewritten(request: ChatRequest) -> bytes:
        kept = request.body["messages"]
        return outgoing_body(
            request.raw,
            request.body,
            messages=[kept[0], summary, *kept[-2:]],
            stream=request.stream,
        )

    assert rewritten(quick) == rewritten(whole)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_fast_path_requests_are_the_full_paths_on_random_sessions(bodies: list[bytes]) -> None:
    fast, _ = counting()
    quick_engine, whole_engine = ContextManager(), ContextManager()
    for raw in bodies:
        extended = extension_of(fast, raw)
        quick, whole = take(fast, raw)
        if extended is not None:  # what the lane proves from the new bytes alone
            known, new = extended
            assert json.dumps([*known.body["messages"], *new]) == json.dumps(whole.body["messages"])
            assert quick is not None
        if quick is None:
            continue
        assert_same_request(quick, whole)
        a, b = quick_engine.locate(quick.turn()), whole_engine.locate(whole.turn())
        assert (a.digests, a.chain, a.raw_tokens, a.session) == (
            b.digests,
            b.chain,
            b.raw_tokens,
            b.session,
        )


def growing(turns: int, style: Style | None = None) -> list[bytes]:
    request = Request(
        before={"model": MODEL},
        messages=[
            {"role": "system", "content": "You are a careful agent. " * 6},
            {"role": "user", "content": "Fix the build"},
        ],
        after={"max_tokens": 16},
    )
    style = style or Style(item=", ", key=": ")
    bodies = [request.raw(style)]
    for turn in range(turns):
        request.messages.append({"role": "assistant", "content": f"step {turn}: {TRICKY}"})
        request.messages.append({"role": "user", "content": f"go on {turn}"})
        bodies.append(request.raw(style))
    return bodies


def test_an_append_only_session_is_read_from_its_new_bytes_after_the_first_request() -> None:
    fast, outcomes = counting()
    bodies = growing(5)
    for raw in [*bodies, bodies[-1]]:
        quick, whole = take(fast, raw)
        if quick is not None:
            assert_same_request(quick, whole)
    assert outcomes == ["no_match", *["appended"] * 5, "same"]
    assert len(fast) == 1  # each body replaced the one it extended


def outcome_after(first: bytes, second: bytes) -> tuple[Outcome, ChatRequest | None]:
    fast, outcomes = counting()
    take(fast, first)
    seen = len(outcomes)
    quick, _ = take_any(fast, second)
    return outcomes[seen], quick  # the fast path's verdict (learning may follow)


def with_messages(raw: bytes, old: bytes, new: bytes) -> bytes:
    assert raw.count(old) == 1
    return raw.replace(old, new)


@pytest.mark.parametrize(
    ("case", "second"),
    [
        # an edit inside the prefix
        ("edit", lambda b: with_messages(b, b'"go on 1"', b'"go on X"')),
        # a fork: the last turn replaced
        ("fork", lambda b: b.replace(b'"go on 2"', b'"went off"')),
        # a changed field after the messages
        ("tail", lambda b: b.replace(b'"max_tokens": 16', b'"max_tokens": 17')),
        # whitespace inside the prefix
        ("space", lambda b: b.replace(b'"role": "system"', b'"role":  "system"')),
        # the same fields in another order
        (
            "order",
            lambda b: b.replace(b'{"model": "gpt-4o-mini", ', b"{").replace(
                b', "max_tokens": 16}', b', "max_tokens": 16, "model": "gpt-4o-mini"}'
            ),
        ),
    ],
)
def test_a_body_that_does_not_extend_the_previous_one_goes_the_full_way(
    case: str, second: Any
) -> None:
    first = growing(3)[-1]
    outcome, quick = outcome_after(first, second(first))
    assert (outcome, quick) == ("no_match", None), case


@pytest.mark.parametrize(
    "added",
    [
        b', {"role": "user", "content": "x"',  # cut short
        b', {"role": "user", "content": "x"}, ',  # a trailing comma
        b' {"role": "user", "content": "x"}',  # no comma
        b', {"role": "user", "content": NaN}',  # what only the stdlib reads
        b", ",  # nothing after the comma
        b", " + b"[" * 130 + b"]" * 130,  # nested past the limit
    ],
)
def test_new_bytes_that_are_not_a_plain_list_of_values_go_the_full_way(added: bytes) -> None:
    first = growing(1)[-1]
    close = first.rindex(b"]")
    second = first[:close] + added + first[close:]
    outcome, quick = outcome_after(first, second)
    assert (outcome, quick) == ("unproven", None)
    if added != b', {"role": "user", "content": NaN}':  # the stdlib reads that one
        with pytest.raises(ProxyError) as refused:
            parse_chat_request(second, HEADERS)
        assert refused.value.status == 400


def test_strings_that_look_like_the_end_of_the_messages_array_do_not_fool_it() -> None:
    # The last bytes of the body hold "]" and "}" inside strings, and a second array.
    tail = ', "stop": ["]}", "],\\"messages\\": []"], "user": "]"}'
    first = growing(2)[-1][:-1] + tail.encode()
    fast, outcomes = counting()
    take(fast, first)
    assert outcomes == ["no_match"]  # learned: the real "]" was found
    close = first.index(b'], "max_tokens"')
    second = first[:close] + b', {"role": "user", "content": "more ]}"}' + first[close:]
    quick, whole = take(fast, second)
    assert quick is not None and outcomes[-1] == "appended"
    assert_same_request(quick, whole)


def test_a_duplicate_messages_key_is_not_learned() -> None:
    body = growing(2)[-1]
    duplicated = body[:-1] + b', "messages": [{"role": "user", "content": "the other one"}]}'
    fast, outcomes = counting()
    take(fast, duplicated)
    assert outcomes == ["no_match", "not_learned"]
    # An append to either array is then parsed whole (the last "messages" wins).
    for close in (body.rindex(b"]"), len(duplicated) - 2):
        appended = duplicated[:close] + b', {"role": "user", "content": "x"}' + duplicated[close:]
        quick, whole = take(fast, appended)
        assert quick is None
    assert whole.body["messages"][-1] == {"role": "user", "content": "x"}


def test_a_body_the_stdlib_had_to_read_is_not_learned() -> None:
    body = growing(1)[-1].replace(b'"max_tokens": 16', b'"x_weird": NaN')
    fast, outcomes = counting()
    take(fast, body)
    assert outcomes == ["no_match", "not_learned"]
    assert len(fast) == 0


def test_another_credential_or_session_never_extends_a_body() -> None:
    bodies = growing(2)
    fast, outcomes = counting()
    take(fast, bodies[0])
    assert fast.parse(bodies[1], {"authorization": "Bearer sk-someone-else"}) is None
    assert fast.parse(bodies[1], {**HEADERS, "x-summarizer-session": "other"}) is None
    assert outcomes[-2:] == ["no_match", "no_match"]
    assert fast.parse(bodies[1], HEADERS) is not None


def test_memory_is_bounded_by_bodies_and_bytes() -> None:
    fast = FastPath(max_bodies=3, max_bytes=10**9)
    for n in range(6):
        take(fast, growing(0, Style())[0].replace(b"Fix the build", f"task {n}".encode()))
    assert len(fast) == 3
    size = len(growing(0)[0])
    assert size > KEY_BYTES  # else nothing would be remembered
    small = FastPath(max_bodies=100, max_bytes=2 * size + 1)
    for n in range(6):
        take(small, growing(0)[0].replace(b"Fix the build", f"task {n}".encode()))
    assert len(small) == 2 and small.bytes_held <= 2 * size + 1


# -- over HTTP: a proxy with the fast path and one without ----------------------------------------


@dataclass
class Pair:
    """Two proxies, fast path on and off, each behind its own capture relay."""

    on: tuple[ProxyServer, Recorder]
    off: tuple[ProxyServer, Recorder]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with TestUpstream(responder=summary_responder) as upstream, ExitStack() as stack:
        on, off = (
            stack.enter_context(recorded_proxy(upstream, folder, fast_path=fast))
            for fast in (True, False)
            for folder in [tmp_path_factory.mktemp(f"fast-{fast}")]
        )
        yield Pair(on, off)


SUMMARIZER_HEADERS = ("x-summarizer-compacted", "x-summarizer-prompt-tokens")


def send_both(pair: Pair, bodies: list[bytes], session: str) -> int:
    """Send each body to both proxies; assert they sent the same bytes upstream and answered
    with the same headers; return how many requests compacted."""
    headers = {**HEADERS, "content-type": "application/json", "x-summarizer-session": session}
    compacted = 0
    with httpx2.Client(timeout=60) as client:
        for raw in bodies:
            answers = []
            for proxy, capture in (pair.on, pair.off):
                sent = len(capture.whole)
                reply = client.post(
                    f"{proxy.base_url}/chat/completions", content=raw, headers=headers
                )
                answers.append((reply, capture.whole[sent:]))
            (on, on_bodies), (off, off_bodies) = answers
            assert on.status_code == off.status_code
            assert on_bodies == off_bodies  # byte for byte, summary requests included
            for name in SUMMARIZER_HEADERS:
                assert on.headers.get(name) == off.headers.get(name), name
            assert bool(on.headers.get("x-summarizer-checkpoint")) == bool(
                off.headers.get("x-summarizer-checkpoint")
            )
            compacted += on.headers.get("x-summarizer-compacted") == "true"
    return compacted


def proxy_outcomes(proxy: ProxyServer) -> dict[str, float]:
    text = httpx2.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("summarizer_fast_path_total{"):
            label, value = line.split("} ")
            found[label.split('"')[1]] = float(value)
    return found


def test_both_proxies_send_the_same_bytes_through_compactions(pair: Pair) -> None:
    rng = random.Random(16)
    request = Request(
        before={"model": MODEL},
        messages=[
            {"role": "system", "content": "You are a careful agent."},
            {"role": "user", "content": "Fix the invoices " + TRICKY},
        ],
        after={"max_tokens": 16},
    )
    style = Style(item=", ", key=": ")
    bodies = [request.raw(style)]
    for turn in range(14):
        words = " ".join(rng.choice(["alpha", "beta", TRICKY, "gamma"]) for _ in range(60))
        request.messages.append({"role": "assistant", "content": f"step {turn} {words}"})
        request.messages.append({"role": "user", "content": f"NOTE: go on {turn}"})
        request.after = {"max_tokens": 16, "stream": True} if turn % 3 == 0 else {"max_tokens": 16}
        bodies.append(request.raw(style))
    compacted = send_both(pair, bodies, "scripted")
    assert compacted >= 1  # summaries written, then every later request rewritten
    on = proxy_outcomes(pair.on[0])
    assert on.get("appended", 0) >= 10  # it did act
    assert "appended" not in proxy_outcomes(pair.off[0])  # and the other proxy never did


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(bodies=sessions(), session=st.integers(0, 10**9))
def test_both_proxies_send_the_same_bytes_on_random_sessions(
    pair: Pair, bodies: list[bytes], session: int
) -> None:
    send_both(pair, bodies, f"random-{session}")
