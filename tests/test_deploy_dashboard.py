"""``deploy/``: the Grafana dashboard queries only metrics (and labels) a running proxy exposes,
so it cannot drift from ``/metrics``; it graphs what the deploy README says it does; the
optional monitoring services stay optional (a compose profile, official images) and scrape
every replica; the image installs extras that exist."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from context_summarizer.proxy import ProxyServer
from context_summarizer.testing import Fault, ScriptedToolAgent, TestUpstream
from context_summarizer.testing.scenario import CodingSession

from .conftest import ProxyFactory

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
DASHBOARD = DEPLOY / "grafana-dashboard.json"
METRIC = re.compile(r"\bsummarizer_[a-z0-9_]+\b")
SELECTOR = re.compile(r"\b(summarizer_[a-z0-9_]+)\{([^}]*)\}")
GROUPING = re.compile(r"\bby \(([^)]*)\)")
GRAPHED = {
    "summarizer_requests_total",
    "summarizer_compactions_total",
    "summarizer_cached_prompt_tokens_total",
    "summarizer_prompt_tokens_total",
    "summarizer_completion_tokens_total",
    "summarizer_tokens_saved_total",
    "summarizer_summary_latency_seconds_bucket",
    "summarizer_upstream_errors_total",
    "summarizer_lane_requests_total",
    "summarizer_fast_path_total",
}
"""What the dashboard must graph: request rate, compactions, cache share (cached / prompt),
tokens saved, prompt and completion rates, summary latency, upstream errors, the lane's and
the fast path's outcomes."""
ADDED_BY_PROMETHEUS = {"instance", "job", "le"}


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    coding = CodingSession(turns=30, seed=7)
    with TestUpstream(context_window=16_000, responder=ScriptedToolAgent(coding.steps)) as server:
        yield server


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside rows included."""
    out = []
    for panel in board["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def queries(board: dict[str, Any]) -> list[str]:
    """Every PromQL the dashboard runs: its panels' ``expr`` and its variables' queries."""
    found = [t["expr"] for p in panels(board) for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            found.append(query["query"])
    return found


def drive(proxy: ProxyServer, upstream: TestUpstream) -> None:
    """A compacting coding session on the openai SDK (the lane and the full path, summary calls),
    one request the upstream fails (an upstream error), and a Responses request continuing a
    stored response (forwarded unmanaged)."""
    coding = CodingSession(turns=30, seed=7)
    sdk = openai.OpenAI(base_url=proxy.base_url, api_key="sk-dashboard-test", max_retries=0)
    messages: list[Any] = [coding.system, coding.task]
    arguments: dict[str, Any] = {"model": "gpt-4o-mini", "tools": coding.tools}
    for turn in range(31):
        answer = sdk.chat.completions.create(**arguments, messages=messages).choices[0].message
        reply = answer.model_dump(exclude_none=True)
        messages.append(reply)
        for call in reply.get("tool_calls", []):
            function = call["function"]
            output = coding.execute(turn, function["name"], function["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        if not reply.get("tool_calls"):
            break
    upstream.inject(Fault(kind="status", status=503, match="agent"))
    with pytest.raises(openai.InternalServerError):
        sdk.chat.completions.create(**arguments, messages=messages)
    first = sdk.responses.create(model="gpt-4o-mini", input="Remember 4711.")
    sdk.responses.create(model="gpt-4o-mini", input="Which number?", previous_response_id=first.id)
    sdk.close()


def exposed(text: str) -> dict[str, set[str]]:
    """Each sample name a scrape exposes (or would, for a family with no sample yet: a counter's
    ``_total``, a histogram's ``_bucket``, ``_sum``, ``_count``) and the labels seen on it."""
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        if family.type == "counter":
            names.setdefault(family.name + "_total", set())
        elif family.type == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                names.setdefault(family.name + suffix, set())
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def test_every_metric_and_label_the_dashboard_queries_is_on_a_live_proxys_metrics(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    drive(proxy, upstream)
    scraped = exposed(httpx2.get(proxy.base_url.removesuffix("/v1") + "/metrics").text)
    board = dashboard()
    used = {name for query in queries(board) for name in METRIC.findall(query)}
    assert used >= GRAPHED
    assert used <= set(scraped), sorted(used - set(scraped))
    # The labels each query selects on or groups by are the metrics' own.
    for query in queries(board):
        seen: set[str] = set()
        for name, matchers in SELECTOR.findall(query):
            labels = {m.split("=")[0].strip(" !~") for m in matchers.split(",") if m.strip()}
            assert labels - ADDED_BY_PROMETHEUS <= scraped[name], (query, name)
            seen |= scraped[name]
        for grouping in GROUPING.findall(query):
            wanted = {label.strip() for label in grouping.split(",")}
            assert wanted - ADDED_BY_PROMETHEUS <= seen, query
    # The traffic made the series the panels draw (not only their families).
    for name in GRAPHED:
        assert scraped[name], name


def test_the_dashboard_is_a_well_formed_grafana_dashboard() -> None:
    board = dashboard()
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 36
    every = panels(board)
    assert len({p["id"] for p in every}) == len(every)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in every:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["targets"] and panel["description"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
            # Every rate over the step Grafana picks, on the replicas selected.
            for window in re.findall(r"\[([^\]]+)\]", target["expr"]):
                assert window in ("$__rate_interval", "$__range"), target["expr"]
            for _, matchers in SELECTOR.findall(target["expr"]):
                assert 'instance=~"$instance"' in matchers, target["expr"]
    titles = {p["title"] for p in every}
    assert {"Cache share", "Tokens saved", "Summary latency", "Lane outcomes"} <= titles


def test_monitoring_is_an_optional_compose_profile_of_official_images() -> None:
    import yaml  # the dev extra's: never skipped

    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    monitoring = {name for name, s in services.items() if "monitoring" in s.get("profiles", [])}
    assert monitoring == {"prometheus", "grafana"}
    assert all("profiles" not in s for name, s in services.items() if name not in monitoring)
    assert services["prometheus"]["image"].startswith("prom/prometheus:v")
    assert services["grafana"]["image"].startswith("grafana/grafana:")
    for name in monitoring:
        for mount in services[name]["volumes"]:
            source = mount.split(":")[0]
            if source.startswith("./"):
                assert (DEPLOY / source).is_file(), source
        assert all(port.startswith("127.0.0.1:") for port in services[name]["ports"])
    # Prometheus scrapes each replica directly (never through nginx).
    scrape = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    (job,) = scrape["scrape_configs"]
    targets = {t for group in job["static_configs"] for t in group["targets"]}
    replicas = {name for name in services if name.startswith("summarizer-")}
    assert job["metrics_path"] == "/metrics"
    assert targets == {f"{name}:8787" for name in replicas}
    provider = yaml.safe_load((DEPLOY / "grafana-dashboards.yml").read_text())
    (dashboards,) = provider["providers"]
    board = "./grafana-dashboard.json"
    mounted = [v for v in services["grafana"]["volumes"] if v.startswith(board)]
    assert mounted == [f"{board}:{dashboards['options']['path']}/summarizer.json:ro"]


def test_the_image_installs_this_package_with_extras_that_exist() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    project = tomllib.loads((DEPLOY.parent / "pyproject.toml").read_text())
    (extras,) = re.findall(r"pip install [^\n]*'\.\[([^\]]*)\]'", dockerfile)
    assert set(extras.split(",")) <= set(project["project"]["optional-dependencies"])
    packages = project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    for package in packages:
        assert f"COPY {package} ./{package}" in dockerfile
        assert f"!{package}/" in ignored
    assert "tokenizers" not in dockerfile + (DEPLOY / "README.md").read_text()
