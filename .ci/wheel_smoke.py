"""What a stranger runs after ``pip install context-summarizer``, from the built wheel alone.

Run by ``.ci/run`` with the python of a clean virtual environment that holds the wheel and its
dependencies only (no checkout on its path, a fresh HOME, tiktoken's cache empty): the package
imports from that environment, ``--version``, ``demo``, ``serve --test-upstream`` answering a
real ``openai`` SDK request and ``sessions`` then listing it, and ``eval`` offline on the
shipped dataset. Exits non-zero on the first failure.

    .ci/wheel_smoke.py DATASET
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

BIN = Path(sys.executable).parent
SUMMARIZER = str(BIN / "summarizer")


def say(text: str) -> None:
    print(f"  wheel: {text}", flush=True)


def run(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 600) -> str:
    done = subprocess.run(
        [SUMMARIZER, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise SystemExit(f"summarizer {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    dataset = Path(sys.argv[1]).resolve()
    home = Path(tempfile.mkdtemp(prefix="summarizer-wheel-home-"))
    empty = home / "no-tiktoken-cache"
    empty.mkdir()
    env = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "HOME": str(home),
        "TIKTOKEN_CACHE_DIR": str(empty),  # the encodings must come from the installed wheels
        "LANG": "C.UTF-8",
    }
    code = "import context_summarizer, sys; print(context_summarizer.__file__)"
    where = subprocess.run(
        [sys.executable, "-c", code], cwd=home, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    if not where.startswith(str(BIN.parent)):
        raise SystemExit(f"context_summarizer was imported from {where}, not the clean venv")
    say(f"imports from {where}")
    say(run(["--version"], env, home).strip())
    shown = run(["demo", "--turns", "40"], env, home)
    if "planted facts still in context" not in shown:
        raise SystemExit("the demo printed no session table:\n" + shown)
    say("demo ran")

    port = free_port()
    server = subprocess.Popen(
        [SUMMARIZER, "serve", "--test-upstream", "--port", str(port)],
        cwd=home,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("serve --test-upstream did not start") from None
                time.sleep(0.2)
        import openai

        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="test")
        answer = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hello from the wheel"}]
        )
        text = answer.parse().choices[0].message.content or ""
        if "summarizer test model" not in text or "x-summarizer-compacted" not in answer.headers:
            raise SystemExit(f"unexpected answer through the proxy: {text!r}")
        say("serve --test-upstream answered the openai SDK")
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
    listed = run(["sessions"], env, home)
    if "gpt-4o-mini" not in listed:
        raise SystemExit("summarizer sessions did not list the session just served:\n" + listed)
    say("sessions listed it")

    out = home / "eval-out"
    run(["eval", str(dataset), "--out", str(out), "--limit", "3", "--no-progress"], env, home)
    report = json.loads((out / "run.json").read_text())
    say(f"eval wrote run.json ({len(report)} keys)")

    # The reward, with the instruction from the wheel's own prompt files.
    code = (
        "from context_summarizer import reward\n"
        "from context_summarizer.rewards import with_instruction\n"
        "chat = [{'role': 'user', 'content': 'Fix it.'}, {'role': 'assistant', 'content': "
        "'Ran pytest tests/test_app.py: FAILED tests/test_app.py::test_save'}]\n"
        "print(reward(with_instruction(chat), 'Ran pytest tests/test_app.py; "
        "tests/test_app.py::test_save fails.').reward)"
    )
    scored = subprocess.run(
        [sys.executable, "-c", code], cwd=home, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    if not 0.5 < float(scored) <= 1.0:
        raise SystemExit(f"reward() scored a good summary {scored}")
    say(f"reward() scored a summary {scored}")


if __name__ == "__main__":
    main()
