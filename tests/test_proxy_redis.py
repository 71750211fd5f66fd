"""The proxy on a Redis store (``store=redis://...``): it serves from Redis, and while Redis is
down a managed request gets a clean 503 in its API's error shape (never a 500, never a hang),
then succeeds again once Redis is back; settings refuse a store given twice."""

from __future__ import annotations

import time
from pathlib import Path

import anthropic
import openai
import pytest

from context_summarizer.core.errors import ConfigurationError
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import TestUpstream

from .redis_server import RedisServer

KEY = "sk-redis-proxy-0123456789abcdef"


def test_a_store_is_given_once_and_as_a_redis_url(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"db and store are both set"):
        Settings(db=tmp_path / "c.db", store="redis://127.0.0.1:6379/0")
    with pytest.raises(ConfigurationError, match=r"store: .*redis://"):
        Settings(store=str(tmp_path / "c.db"))
    with pytest.raises(ConfigurationError, match="lease_ttl"):
        Settings(lease_ttl=0)
    env = {"SUMMARIZER_STORE": "rediss://cache:6380/2", "SUMMARIZER_LEASE_TTL": "4.5"}
    settings = Settings.from_env(env)
    assert (settings.store_spec(), settings.lease_ttl) == ("rediss://cache:6380/2", 4.5)
    assert Settings(db=tmp_path / "c.db").store_spec() == tmp_path / "c.db"


def test_redis_down_answers_503_in_each_apis_shape_then_recovers(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path / "redis", durable=True).start()
    try:
        with (
            TestUpstream() as upstream,
            ProxyServer(
                Settings(upstream=upstream.base_url, port=0, store=redis.url, lease_ttl=5)
            ) as proxy,
        ):
            chat = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0, timeout=20)
            messages = anthropic.Anthropic(
                base_url=proxy.base_url.removesuffix("/v1"), api_key=KEY, max_retries=0, timeout=20
            ).messages
            hello = [{"role": "user", "content": "Say hello."}]
            assert chat.chat.completions.create(model="gpt-4o-mini", messages=hello).choices
            sent_before = len(upstream.requests)
            redis.stop()
            began = time.monotonic()
            with pytest.raises(openai.InternalServerError) as refused:
                chat.chat.completions.create(model="gpt-4o-mini", messages=hello)
            assert refused.value.status_code == 503
            assert refused.value.response.headers["retry-after"] == "1"
            body = refused.value.body
            assert isinstance(body, dict)
            assert (body["type"], body["code"]) == ("server_error", "store_unavailable")
            with pytest.raises(anthropic.APIStatusError) as refused_messages:
                messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=hello)  # type: ignore[arg-type]
            assert refused_messages.value.status_code == 503
            assert refused_messages.value.body["type"] == "error"  # type: ignore[index]
            assert time.monotonic() - began < 15
            assert len(upstream.requests) == sent_before  # nothing went upstream meanwhile
            redis.start()
            assert chat.chat.completions.create(model="gpt-4o-mini", messages=hello).choices
            answer = messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=hello)  # type: ignore[arg-type]
            assert answer.content
    finally:
        redis.stop()
