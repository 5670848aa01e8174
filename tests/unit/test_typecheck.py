"""The code checks clean: mypy over common/, leader/, follower/ and benchfleet/, and ruff over the tree (pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def mypy_cache() -> Path:
    """mypy's incremental cache, kept between runs outside the clone and keyed on what can change its answer besides
    the sources (which mypy itself checks by hash): the pinned tools and stubs (pyproject.toml), mypy and Python."""
    import hashlib
    import os
    from importlib.metadata import version

    key = hashlib.sha256(f"{(ROOT / 'pyproject.toml').read_bytes()!r}{version('mypy')}{sys.version}".encode()).hexdigest()
    base = Path(
        os.environ.get("BENCHFLEET_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "benchfleet"
    )
    return base / f"mypy-{key[:16]}"


def test_mypy_finds_no_errors() -> None:
    import fcntl

    cache = mypy_cache()
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:  # one run at a time writes it (two clones on one machine)
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(
            [sys.executable, "-m", "mypy", "--cache-dir", str(cache)], cwd=ROOT, capture_output=True, text=True, timeout=600
        )
    assert done.returncode == 0, f"mypy found errors:\n{done.stdout[-6000:]}{done.stderr[-2000:]}"
    assert "Success: no issues found" in done.stdout, done.stdout


def test_ruff_finds_nothing() -> None:
    """The lint rules of pyproject.toml hold over the whole tree."""
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, f"ruff found problems:\n{done.stdout[-6000:]}{done.stderr[-2000:]}"


def test_the_formatter_has_laid_out_the_packages_and_the_benchmarks() -> None:
    """`ruff format` (pyproject.toml's line length) leaves the packages, the benchmarks and the scripts unchanged."""
    folders = ["common", "leader", "follower", "benchfleet", "bench", "scripts"]
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", *folders],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"ruff format would change:\n{done.stdout[-6000:]}{done.stderr[-2000:]}"
