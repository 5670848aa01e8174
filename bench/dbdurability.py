"""What the embedded database keeps of acknowledged writes when it is SIGKILLed, and what keeping them costs.

SecantusDB is launched as benchfleet launches it (benchfleet/stack.py). For each way of writing, `--inserts` job-sized
documents are inserted one at a time, each acknowledged, then the server is SIGKILLed at once and restarted on the
same data, and the documents still there are counted:

  - default: write concern w:1 (what the leader used before #17);
  - journal: w:1, j:true, the leader's write concern now (leader/app.py: journal=True): acknowledged once in the
    journal;
  - sync: w:1 against a server started with --sync-on-commit (fsync of the log on every commit).

Rounds alternate the modes (these machines are noisy); the medians are reported, throughput as a ratio to the
default measured in the same run. Ends with one line: RESULT dbdurability key=value ...
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pymongo import MongoClient, WriteConcern

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchfleet.stack import port_open, secantus_binary  # noqa: E402
from common.procs import free_port  # noqa: E402

MODES = ("default", "journal", "sync")
DOC = {"spec": {"name": "bench", "model": "m:1", "batch_sizes": [1, 2, 4, 8]}, "history": [], "pad": "x" * 1500}


def _start(data: Path, port: int, sync: bool) -> subprocess.Popen[bytes]:
    argv = [secantus_binary(), "--host", "127.0.0.1", "--port", str(port), "--storage-path", str(data), "--standalone"]
    if sync:
        argv.append("--sync-on-commit")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while not port_open(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("SecantusDB did not start")
        time.sleep(0.05)
    return proc


def _kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def one_round(mode: str, inserts: int, workdir: Path) -> tuple[float, int]:
    """(acknowledged inserts per second, how many of them survived SIGKILL)."""
    data = workdir / f"db-{mode}"
    shutil.rmtree(data, ignore_errors=True)
    port = free_port()
    url = f"mongodb://127.0.0.1:{port}/?directConnection=true&retryWrites=false"
    proc = _start(data, port, sync=mode == "sync")
    try:
        with MongoClient(url) as client:
            concern = WriteConcern(w=1, j=True) if mode == "journal" else WriteConcern(w=1)
            jobs = client.bench.get_collection("jobs", write_concern=concern)
            jobs.insert_one({"warm": True})
            started = time.perf_counter()
            for i in range(inserts):
                jobs.insert_one({"_id": i, **DOC})
            rate = inserts / (time.perf_counter() - started)
    finally:
        _kill(proc)  # at once, the moment the last insert was acknowledged
    proc = _start(data, port, sync=False)
    try:
        with MongoClient(url) as client:
            kept = client.bench.jobs.count_documents({"_id": {"$gte": 0}})
    finally:
        _kill(proc)
    return rate, kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inserts", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    kept: dict[str, list[int]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="bench-dbdurability-") as tmp:
        for r in range(args.rounds):
            for mode in MODES if r % 2 == 0 else reversed(MODES):
                rate, survived = one_round(mode, args.inserts, Path(tmp))
                rates[mode].append(rate)
                kept[mode].append(survived)
                print(
                    f"round {r + 1} {mode:8s} {rate:8.0f} acknowledged inserts/s, {survived}/{args.inserts} survived SIGKILL",
                    flush=True,
                )
    median = {m: statistics.median(rates[m]) for m in MODES}
    lost = {m: args.inserts - min(kept[m]) for m in MODES}  # the worst round
    print()
    print(f"{'mode':10s} {'inserts/s':>10s} {'vs default':>11s} {'lost (worst round)':>19s}")
    for m in MODES:
        print(f"{m:10s} {median[m]:10.0f} {median[m] / median['default']:10.2f}x {lost[m]:>19d}")
    print(
        f"RESULT dbdurability inserts={args.inserts} rounds={args.rounds} lost_default={lost['default']} "
        f"lost_journal={lost['journal']} lost_sync={lost['sync']} default_per_s={median['default']:.0f} "
        f"journal_per_s={median['journal']:.0f} sync_per_s={median['sync']:.0f} "
        f"journal_vs_default={median['journal'] / median['default']:.2f} sync_vs_default={median['sync'] / median['default']:.2f}"
    )


if __name__ == "__main__":
    main()
