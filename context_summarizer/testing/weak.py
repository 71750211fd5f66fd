"""What weak or distracted models write when asked for a summary, scripted for the test upstream.

``weak_summary_responder(kind)`` answers a summary request the way a small model did (issue 13's
real runs): the section template echoed back, the task restated, a loop, an answer running past
its cap, a tool call although ``tool_choice`` is ``"none"``, another language, a JSON document,
or a good-looking summary naming a file that never appeared. Asked again with the strict retry
(its instruction says the previous answer "could not be used"), it writes a real summary with
``summary_responder`` when ``repair`` is on, else the same kind of bad answer once more.
"""

from __future__ import annotations

import json
from typing import Any, Literal, get_args

from ..core.messages import content_text
from .responders import Reply, Responder, ToolCallSpec
from .summaries import summary_responder

WeakKind = Literal[
    "echo",
    "task_only",
    "repetition",
    "cut_off",
    "tool_call",
    "wrong_language",
    "wrong_format",
    "invented",
]
"""Each kind of bad answer, named as the online check names what it finds."""
WEAK_KINDS: tuple[WeakKind, ...] = get_args(WeakKind)

INVENTED_PATH = "src/billing/discounts/engine_v2.py"
"""The file the ``invented`` answer names: no scripted conversation mentions it."""


def _is_retry(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return "could not be used" in content_text(last)


def _bad(kind: WeakKind, body: dict[str, Any]) -> Reply:
    messages = body["messages"]
    instruction = content_text(messages[-1])
    if kind == "echo":
        start = instruction.find("## ")
        return Reply(content=instruction[start:] if start >= 0 else instruction)
    if kind == "task_only":
        task = next(content_text(m) for m in messages if m.get("role") == "user")
        return Reply(content=f"## Task and constraints\n{task}")
    if kind == "repetition":
        line = "The sum of all values in the amounts list equals the total of the invoice."
        return Reply(content="## Current state\n" + "\n".join([line] * 16))
    if kind == "cut_off":
        good = summary_responder(body).content or ""
        return Reply(content="\n\n".join([good] * 40))  # the server cuts it at the cap
    if kind == "tool_call":
        return Reply(tool_calls=[ToolCallSpec(name="run", arguments={"command": "ls -la"})])
    if kind == "wrong_language":
        return Reply(
            content="## 任务\n修复账单服务中折扣订单的发票总额错误。\n## 当前状态\n"
            "已经阅读了相关文件，发现计算总额的函数没有应用折扣，测试仍然失败。"
        )
    if kind == "wrong_format":
        return Reply(content=json.dumps({"name": "run", "arguments": {"command": "ls"}}))
    good = summary_responder(body).content or ""
    return Reply(content=f"{good}\n- The discount rules live in {INVENTED_PATH}.")


def weak_summary_responder(kind: WeakKind, *, repair: bool = True) -> Responder:
    """A summary responder that first answers with ``kind``'s bad answer; the strict retry gets a
    real summary (``repair``) or the same kind of bad answer again."""
    if kind not in WEAK_KINDS:
        raise ValueError(f"unknown kind {kind!r}; one of {', '.join(WEAK_KINDS)}")

    def respond(body: dict[str, Any]) -> Reply:
        if repair and _is_retry(body):
            return summary_responder(body)
        return _bad(kind, body)

    return respond
