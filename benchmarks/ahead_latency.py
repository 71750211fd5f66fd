"""What a compaction costs the agent in waiting, with and without ahead-of-time compaction.

Each workload is replayed request by request through ``summarizer serve``'s app (a real server on
127.0.0.1, the real openai SDK) in front of the test upstream, whose agent replies take
``AGENT_DELAY_S`` (a model writing a turn) and whose summaries take ``SUMMARY_DELAY_S``. The
agent's next request follows the previous answer at once, as an agent loop does. Each request's
latency is measured at the client, and the requests are split into those that compacted
(``x-summarizer-compacted: true``) and the others. The same replay runs with the default settings
with ``--prepare-ratio off`` (the request crossing the trigger waits for the summary) and with
the default (drafts ahead of time from 0.6 of the window).

Workloads: the demo's scripted coding session; one real mini-swe-agent SWE-bench run from
``../shared/trajectories/mini-swe-agent`` (the one with the most turns; not run when that folder is
absent), replayed from its recorded turns; and two conversations of one key with the same system
prompt and task, interleaved request by request (parallel attempts at one task share a session).

    python -m benchmarks.ahead_latency [--quick] [--delays AGENT SUMMARY] [--trace]
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

from context_summarizer.core.config import CompactionConfig
from context_summarizer.core.messages import Message
from context_summarizer.loaders.tokenizers import make_counter
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import Reply, RoutingResponder, TestUpstream, summary_responder

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
    trace: list[tuple[int, int, float, bool]] = field(default_factory=list)
    """Per request: the conversation (its index in the workload), the prompt tokens sent, the
    latency and whether it compacted (for ``--trace``)."""

    def of(self, compacted: bool) -> list[float]:
        """Latencies of the requests that compacted (or of the others)."""
        return [seconds for seconds, did in self.latencies if did == compacted]

    def open_drafts(self) -> int:
        """Drafts written for a compaction still to come when the replay ended (started, and
        neither adopted nor dropped)."""
        ended = ("adopted", "failed", "stale", "evicted")
        return max(0, self.outcomes.get("started", 0) - sum(self.outcomes.get(k, 0) for k in ended))

    def calls_per_compaction(self) -> float | None:
        """Summary calls made per compaction, drafts never adopted included, but not those of
        the drafts still open at the end (each for the next compaction, past the replay)."""
        compactions = len(self.of(True))
        calls = self.summary_calls - self.open_drafts()
        return calls / compactions if compactions else None


@dataclass(frozen=True)
class Workload:
    """Conversations replayed together, request by request in turn (one: a single session;
    two of one key with the same system prompt and task: interleaved branches)."""

    name: str
    sessions: tuple[Session, ...]
    window: int


def replay(
    workload: Workload,
    *,
    ahead: bool,
    agent_delay: float,
    summary_delay: float,
    limit: int,
) -> Run:
    """``workload`` replayed through a proxy, one request per recorded assistant turn of each
    conversation (the conversations taking turns), ``limit`` requests in all."""
    responder = RoutingResponder(
        delayed(agent_delay, lambda body: Reply(content="ok")),
        summary=delayed(summary_delay, summary_responder),
    )
    window = workload.window
    run = Run(workload.name, ahead, window=window)
    per = limit // len(workload.sessions)
    turns = [reply_indices(session.messages)[:per] for session in workload.sessions]
    order = [
        (which, index)
        for step in range(per)
        for which, indices in enumerate(turns)
        if step < len(indices)
        for index in (indices[step],)
    ]
    with (
        tempfile.TemporaryDirectory() as folder,
        TestUpstream(responder=responder) as upstream,
    ):
        settings = Settings(
            upstream=upstream.base_url,
            port=0,
            db=Path(folder) / "checkpoints.db",
            compaction=_config(window, ahead=ahead),
            log_level="warning",
        )
        assert (settings.compaction.prepare_ratio is not None) == ahead
        with ProxyServer(settings) as proxy:
            client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
            for which, index in order:
                session = workload.sessions[which]
                messages: list[Message] = session.messages[:index]
                began = time.perf_counter()
                raw = client.chat.completions.with_raw_response.create(
                    model=MODEL,
                    messages=messages,  # type: ignore[arg-type]
                    tools=session.tools,  # type: ignore[arg-type]
                )
                raw.parse()
                seconds = time.perf_counter() - began
                compacted = raw.headers["x-summarizer-compacted"] == "true"
                sent = int(raw.headers["x-summarizer-prompt-tokens"])
                run.latencies.append((seconds, compacted))
                run.trace.append((which, sent, seconds, compacted))
                run.largest = max(run.largest, sent)
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


def _config(window: int, *, ahead: bool) -> CompactionConfig:
    """The workload's compaction settings: ahead of time, prepare_ratio unset (the proxy's
    default); else turned off."""
    if ahead:
        return CompactionConfig(context_window=window, reserve_output_tokens=window // 8)
    return CompactionConfig(
        context_window=window, reserve_output_tokens=window // 8, prepare_ratio=None
    )


def interleaved(window: int) -> Workload:
    """Two attempts at one task under one key: the demo session (seed 7) and another played
    out from seed 8 with seed 7's system prompt and task, so both have one derived session."""
    first, second = coding_session(120, seed=7), coding_session(120, seed=8)
    other = Session(second.name, [*first.messages[:2], *second.messages[2:]], second.tools)
    return Workload("interleaved: seed7 + seed8, one session", (first, other), window)


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


def run(
    *,
    quick: bool,
    out_dir: Path,
    trajectories: Path = TRAJECTORIES,
    delays: tuple[float, float] | None = None,
    trace: bool = False,
) -> Section:
    """Every workload, without and with ahead-of-time compaction (``delays``: the agent's and
    the summaries' seconds instead of the defaults; ``trace``: print each request)."""
    del out_dir  # this section writes no files
    agent_delay, summary_delay = (0.02, 0.2) if quick else (AGENT_DELAY_S, SUMMARY_DELAY_S)
    if delays is not None:
        agent_delay, summary_delay = delays
    limit = 16 if quick else 60
    demo = coding_session(120, seed=7)
    workloads = [Workload(demo.name, (demo,), DEMO_WINDOW)]
    real = real_session(trajectories, REAL_WINDOW)
    if real is not None:
        workloads.append(Workload(real.name, (real,), REAL_WINDOW))
    workloads.append(interleaved(DEMO_WINDOW))
    runs = []
    for workload in workloads:
        for ahead in (False, True):
            item = replay(
                workload,
                ahead=ahead,
                agent_delay=agent_delay,
                summary_delay=summary_delay,
                limit=limit,
            )
            runs.append(item)
            if trace:
                _print_trace(item)
    rows = []
    floors = []
    for off, on in zip(runs[::2], runs[1::2], strict=True):
        for item in (off, on):
            compacting, others = item.of(True), item.of(False)
            per = item.calls_per_compaction()
            rows.append(
                [
                    item.workload,
                    f"default ({PREPARE_RATIO})" if item.ahead else "off",
                    str(len(item.latencies)),
                    str(len(compacting)),
                    f"{item.summary_calls}"
                    + (f" ({item.open_drafts()} open)" if item.open_drafts() else ""),
                    f"{per:.2f}" if per is not None else "–",
                    _s(others, 0.5),
                    _s(others, 0.99),
                    _s(compacting, 0.5),
                    _s(compacting, 0.99),
                    f"{item.largest:,} / {item.window:,}",
                    ", ".join(f"{k} {v}" for k, v in sorted(item.outcomes.items()) if v) or "–",
                ]
            )
        floors.extend(_floors(off, on))
    table = markdown_table(
        ["workload", "ahead of time", "requests", "compacted", "summary calls",
         "calls per compaction", "others p50 s", "others p99 s", "compacting p50 s",
         "compacting p99 s", "largest sent / window", "drafts"],
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
        "the previous answer at once. The interleaved workload is two conversations of one key "
        "with the same system prompt and task (so one derived session: parallel attempts at "
        "one task), the demo session and one played out from seed 8, taking turns request by "
        f"request ({limit // 2} each). *Compacting* requests are those that compacted "
        "(`x-summarizer-compacted: true`): without ahead-of-time compaction (`--prepare-ratio "
        "off`) each waits for its summary; with it (the default), the request over the trigger "
        "adopts the summary drafted since the prepare threshold "
        f"({PREPARE_RATIO}), or goes out unchanged while it fits and the draft is still being "
        "written. *Calls per compaction* counts every summary call, drafts dropped unused "
        "included, but not the drafts still open when the replay ended (*open*: written for "
        "the next compaction, past the replay's last request)." + note + "\n\n" + table
    )
    return Section(title=TITLE, command=COMMAND, body=body, floors=floors)


def _floors(off: Run, on: Run) -> list[Floor]:
    """The issue's goals for one workload: summary calls per compaction with drafts against
    without (≤ 1.2×), and compacting requests' latency against the others' at p50 and p99."""
    floors = []
    with_drafts, without = on.calls_per_compaction(), off.calls_per_compaction()
    if with_drafts is not None and without:
        ratio = with_drafts / without
        floors.append(
            Floor(
                f"{on.workload}: summary calls per compaction, drafting ahead against not",
                f"{ratio:.2f}× ({with_drafts:.2f} / {without:.2f})",
                "≤ 1.2×",
                ratio <= 1.2,
            )
        )
    compacting, others = on.of(True), on.of(False)
    if compacting and others:
        for share, label in ((0.5, "median"), (0.99, "p99")):
            ratio = percentile(compacting, share) / percentile(others, share)
            floors.append(
                Floor(
                    f"{on.workload}: compacting requests' {label} latency against the others'",
                    f"{ratio:.2f}×",
                    "≤ 1.1×",
                    ratio <= 1.1,
                )
            )
    return floors


def _print_trace(item: Run) -> None:
    print(f"# {item.workload} ahead={item.ahead} outcomes={item.outcomes}")
    for n, (which, sent, seconds, compacted) in enumerate(item.trace):
        mark = " COMPACTED" if compacted else ""
        print(f"{n:3d} conv{which} {sent:6,} / {item.window:,} {seconds:6.2f} s{mark}")


def main() -> None:
    """Command line: print the section's Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode: tiny delays")
    parser.add_argument("--trajectories", type=Path, default=TRAJECTORIES)
    parser.add_argument(
        "--delays",
        nargs=2,
        type=float,
        metavar=("AGENT", "SUMMARY"),
        help="seconds an agent reply and a summary take (default: 2 and 10)",
    )
    parser.add_argument("--trace", action="store_true", help="print every request")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        section = run(
            quick=args.quick,
            out_dir=Path(folder),
            trajectories=args.trajectories,
            delays=tuple(args.delays) if args.delays else None,
            trace=args.trace,
        )
    print_section(section)


if __name__ == "__main__":
    main()
