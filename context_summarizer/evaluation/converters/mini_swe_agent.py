"""mini-swe-agent ``.traj.json`` files: ``messages`` as the chat, ``info.submission`` as the
final patch, and the gold facts the run recorded (``evidence.run_facts``).

mini-swe-agent uses no tool-calling API: each assistant message carries its one bash command in
a fenced block, and the command's output comes back as the next **user** message
(``<returncode>0</returncode><output>...</output>``). The case keeps those observations as the
user turns they were, because a proxy or ``wrap()`` in front of this agent sees exactly that;
turning them into ``tool_calls``/``role: tool`` pairs would measure a conversation no deployment
ever sends (and would flatter the strategies that only touch tool outputs, such as masking).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ...core.errors import ConversionError
from ...core.messages import message_text
from ..dataset import Case, Probe
from .cases import _validated
from .evidence import run_facts
from .messages import openai_messages

_FENCE = re.compile(r"```[ \t]*(?:bash|sh|shell|console)?[ \t]*\n(.*?)```", re.DOTALL)


def bash_commands(text: str) -> Iterator[str]:
    """The lines of the fenced ``bash`` (or unlabelled) blocks in an assistant message."""
    for block in _FENCE.finditer(text):
        yield from block.group(1).splitlines()


def convert_mini_swe_agent(
    data: Mapping[str, Any], *, source: str, resolved: bool | None = None
) -> Case:
    """One case from a parsed mini-swe-agent trajectory (``source`` names the file).

    ``resolved`` (from the run's ``results_summary.json``, when known) goes into the metadata.
    Gold facts: the files and definitions of ``info.submission``, the failing tests and error
    lines in the observations (and the task), the reproduce and test commands the agent ran.
    """
    info: Mapping[str, Any] = data["info"] if isinstance(data.get("info"), Mapping) else {}
    messages = openai_messages(data.get("messages"), where=source)
    if not messages:
        raise ConversionError(f"{source}: no messages")
    submission = info.get("submission")
    patch = submission if isinstance(submission, str) else ""
    observed = "\n".join(message_text(m) for m in messages if m["role"] == "user")
    said = "\n".join(message_text(m) for m in messages)
    commands = [
        line
        for m in messages
        if m["role"] == "assistant"
        for line in bash_commands(message_text(m))
    ]
    facts = run_facts(patch, observed, commands, said)
    instance = str(data.get("instance_id") or info.get("instance_id") or _stem(source))
    changed = [f.text for f in facts if f.kind == "path"]
    stats = info.get("model_stats") if isinstance(info.get("model_stats"), Mapping) else {}
    return _validated(
        source,
        id=instance,
        messages=messages,
        facts=facts,
        probes=[Probe(question="Which file did the final patch change first?", answer=changed[0])]
        if changed
        else [],
        metadata={
            "source": source,
            "format": "mini-swe-agent",
            "instance_id": instance,
            "exit_status": info.get("exit_status"),
            "resolved": resolved,
            "mini_version": info.get("mini_version"),
            "api_calls": stats.get("api_calls") if isinstance(stats, Mapping) else None,
            "trajectory_format": data.get("trajectory_format"),
        },
    )


def resolved_instances(summary: Any) -> dict[str, bool]:
    """``instance_id -> resolved`` from a parsed ``results_summary.json`` (``instances`` list)."""
    instances = summary.get("instances") if isinstance(summary, Mapping) else None
    return {
        str(item["instance_id"]): bool(item.get("resolved"))
        for item in instances or ()
        if isinstance(item, Mapping) and item.get("instance_id") is not None
    }


def _stem(source: str) -> str:
    return Path(source).name.removesuffix(".json").removesuffix(".traj")
