"""What a compaction costs the agent in waiting, with and without ahead-of-time compaction.

Each workload is replayed request by request through ``summarizer serve``'s app (a real server on
127.0.0.1, the real openai SDK) in front of the test upstream, whose agent replies take
``AGENT_DELAY_S`` (a model writing a turn) and whose summaries take ``SUMMARY_DELAY_S``. The
agent's next request follows the previous answer at once, as an agent loop does. Each request's
latency is measured at the client, and the requests are split into those that compacted
(``x-summarizer-compacted: true``) and the others. The same replay runs with the default settings
(the request crossing the trigger waits for the summary) and with ``--prepare-ratio 0.6``.

Workloads: the demo's scripted coding session, and one real mini-swe-agent SWE-bench run from
``../shared/trajectories/mini-swe-agent`` (the one with the most turns; not run when that folder is
absent), replayed from its recorded turns.

    python -m benchmarks.ahead_latency [--quick]
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import openai

from summarizer.core.config import CompactionConfig
from summarizer.core.messages import Message
from summarizer.loaders.tokenizers import make_counter
from summarizer.proxy import ProxyServer
from summarizer.proxy.settings import Settings
from summarizer.testing import Reply, RoutingResponder, TestUpstream, summary_responder

from .cache_replay_session import Session, coding_session, reply_indices
from .real_model import TRAJECTORIES
from .real_model_cases import load_runs
from .results import Floor, Section, markdown_table, percentile, print_section

TITLE = "Compaction latency, ahead of time"
COMMAND = "python -m benchmarks.ahead_latency"

AGENT_DELAY_S = 2.0
SUMMARY_DELAY_S = 10.0
PREPARE_RATIO = 0.6
DEMO_WINDOW = 16_000
"""The demo's own window (``summarizer demo``)."""
REAL_WINDOW = 10_000
MODEL = "gpt-4o-mini"
KEY = "sk-bench-ahead-0123456789abcdef"


def delayed(seconds: float, answer: Callable[[dict[str, Any]], Reply]) -> Any:
    """A responder that takes ``seconds`` before answering as ``answer`` does."""

    def respond(body: dict[str, Any]) -> Reply:
        time.sleep(seconds)
        return answer(body)

    return respond


@dataclass
class Run:
    """One replay: each request's latency and whether it compacted."""

    workload: str
    ahead: bool
    latencies: list[tuple[float, bool]] = field(default_factory=list)
    summary_calls: int = 0
    largest: int = 0
    window: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    """``summarizer_ahead_compactions_total`` by outcome, at the end of the replay."""

    def of(self, compacted: bool) -> list[float]:
        """Latencies of the requests that compacted (or of the others)."""
        return [seconds for seconds, did in self.latencies if did == compacted]


def replay(
    session: Session,
    *,
    window: int,
    ahead: bool,
    agent_delay: float,
    summary_delay: float,
    limit: int,
) -> Run:
    """``session`` replayed through a proxy, one request per recorded assistant turn."""
    responder = RoutingResponder(
        delayed(agent_delay, lambda body: Reply(content="ok")),
        summary=delayed(summary_delay, summary_responder),
    )
    run = Run(session.name, ahead, window=window)
    with (
        tempfile.TemporaryDirectory() as folder,
        TestUpstream(responder=responder) as upstream,
    ):
        settings = Settings(
            upstream=upstream.base_url,
            port=0,
            db=Path(folder) / "checkpoints.db",
            compaction=CompactionConfig(
                context_window=window,
                reserve_output_tokens=window // 8,
                prepare_ratio=PREPARE_RATIO if ahead else None,
            ),
            log_level="warning",
        )
        with ProxyServer(settings) as proxy:
            client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
            for index in reply_indices(session.messages)[:limit]:
                messages: list[Message] = session.messages[:index]
                began = time.perf_counter()
                raw = client.chat.completions.with_raw_response.create(
                    model=MODEL,
                    messages=messages,  # type: ignore[arg-type]
                    tools=session.tools,  # type: ignore[arg-type]
                )
                raw.parse()
                seconds = time.perf_counter() - began
                run.latencies.append((seconds, raw.headers["x-summarizer-compacted"] == "true"))
                run.largest = max(run.largest, int(raw.headers["x-summarizer-prompt-tokens"]))
            time.sleep(summary_delay + 1)  # a draft still under way is counted too
            metrics = httpx2.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
            run.outcomes = {
                outcome: int(float(value))
                for outcome, value in re.findall(
                    r'summarizer_ahead_compactions_total\{outcome="(\w+)"\} (\S+)', metrics
                )
            }
        run.summary_calls = sum(1 for r in upstream.requests if r.is_summary)
    return run


def real_session(trajectories: Path, window: int) -> Session | None:
    """The mini-swe-agent run with the most assistant turns among those whose every message fits
    in a quarter of ``window`` (one huge observation would leave nothing to compact around);
    None without the folder."""
    if not trajectories.is_dir():
        return None
    counter = make_counter(MODEL)
    cases = [
        case
        for case in load_runs(trajectories)
        if max(counter.count_message(m) for m in case.messages) <= window // 4
    ]
    if not cases:
        return None
    case = max(cases, key=lambda c: len(reply_indices(c.messages)))
    return Session(case.id, case.messages, case.tools)


def _s(values: Sequence[float], share: float) -> str:
    return f"{percentile(values, share):.2f}" if values else "–"


def run(*, quick: bool, out_dir: Path, trajectories: Path = TRAJECTORIES) -> Section:
    """Both workloads, without and with ahead-of-time compaction."""
    del out_dir  # this section writes no files
    agent_delay, summary_delay = (0.02, 0.2) if quick else (AGENT_DELAY_S, SUMMARY_DELAY_S)
    limit = 16 if quick else 60
    workloads: list[tuple[Session, int]] = [(coding_session(120, seed=7), DEMO_WINDOW)]
    real = real_session(trajectories, REAL_WINDOW)
    if real is not None:
        workloads.append((real, REAL_WINDOW))
    runs = [
        replay(
            session,
            window=window,
            ahead=ahead,
            agent_delay=agent_delay,
            summary_delay=summary_delay,
            limit=limit,
        )
        for session, window in workloads
        for ahead in (False, True)
    ]
    rows = []
    floors = []
    for item in runs:
        compacting, others = item.of(True), item.of(False)
        rows.append(
            [
                item.workload,
                f"prepare {PREPARE_RATIO}" if item.ahead else "off",
                str(len(item.latencies)),
                str(len(compacting)),
                str(item.summary_calls),
                _s(others, 0.5),
                _s(others, 0.99),
                _s(compacting, 0.5),
                _s(compacting, 0.99),
                f"{item.largest:,} / {item.window:,}",
                ", ".join(f"{k} {v}" for k, v in sorted(item.outcomes.items()) if v) or "–",
            ]
        )
        if item.ahead and compacting and others:
            ratio = percentile(compacting, 0.5) / percentile(others, 0.5)
            floors.append(
                Floor(
                    f"{item.workload}: compacting requests' median latency against the others'",
                    f"{ratio:.2f}×",
                    "≤ 1.1×",
                    ratio <= 1.1,
                )
            )
    table = markdown_table(
        ["workload", "ahead of time", "requests", "compacted", "summary calls",
         "others p50 s", "others p99 s", "compacting p50 s", "compacting p99 s",
         "largest sent / window", "drafts"],
        rows,
    )  # fmt: skip
    note = (
        ""
        if real is not None
        else f"\n\nThe real-trajectory workload did not run: `{trajectories}` is not here."
    )
    body = (
        f"Agent replies take {agent_delay:g} s and summaries {summary_delay:g} s at the test "
        f"upstream; a {DEMO_WINDOW:,}-token window for the demo session and "
        f"{REAL_WINDOW:,} for the real run, an eighth kept for the reply, "
        f"trigger 0.8, target 0.4; the first {limit} requests of each workload, each following "
        "the previous answer at once. *Compacting* requests are those that compacted "
        "(`x-summarizer-compacted: true`): without ahead-of-time compaction each waits for its "
        "summary; with it, the request over the trigger adopts the summary drafted since the "
        f"prepare threshold ({PREPARE_RATIO}), or goes out unchanged while it fits and the "
        "draft is still being written." + note + "\n\n" + table
    )
    return Section(title=TITLE, command=COMMAND, body=body, floors=floors)


def main() -> None:
    """Command line: print the section's Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode: tiny delays")
    parser.add_argument("--trajectories", type=Path, default=TRAJECTORIES)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        section = run(quick=args.quick, out_dir=Path(folder), trajectories=args.trajectories)
    print_section(section)


if __name__ == "__main__":
    main()
