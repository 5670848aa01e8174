"""A run's per-request records as a structure of arrays (no per-request Python objects survive a run), and their blob."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from common.wire import records as fmt
from common.wire.records import DROPPED, NOT_SENT, OPTIONAL_STAGES, STAGES, TRANSPORT_ERROR, UNANSWERED
from follower.loadgen.llmrecords import LlmColumns

__all__ = [
    "DROPPED",
    "NOT_SENT",
    "OPTIONAL_STAGES",
    "STAGES",
    "TRANSPORT_ERROR",
    "UNANSWERED",
    "LoadRecords",
    "decode_records",
    "encode_records",
    "shifted",
]


@dataclass(repr=False)
class LoadRecords:
    """A run as a structure of arrays, one entry per scheduled request (absolute monotonic ns; -1 = did not happen)."""

    intended_ns: np.ndarray
    sent_ns: np.ndarray
    first_byte_ns: np.ndarray
    done_ns: np.ndarray
    status: np.ndarray  # HTTP status, TRANSPORT_ERROR (0), NOT_SENT (-1), DROPPED (-2) or UNANSWERED (-3)
    stages_ns: dict[str, np.ndarray]  # server stage timings from "parameters"; -1 where absent
    start_ns: int
    cpu_s: float = 0.0
    wall_s: float = 0.0
    loop_lag_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    error_sample: str | None = None
    timer: str = "yield"
    # Of cpu_s, the wall time the dispatcher spun before sends (timing.WakeMargin): a core kept busy, not work done.
    spin_s: float = 0.0
    # The timerfd's wake margin at the run's end (ns; None: the thread timer)
    wake_margin_ns: int | None = None
    # Requests that found max_concurrency in flight at their time: they waited (counted as latency from the
    # intended time, and as send lag) or were dropped (status DROPPED). Never hidden.
    capped: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    stopped_ns: int | None = None  # when a tick callback ended the run early
    # Share of the run the generator thread was runnable but waiting for its core (None: not measured here).
    run_queue_share: float | None = None
    # The generator thread's scheduling ("fifo", or "nice N (SCHED_FIFO refused: why)"); None: not set here.
    scheduling: str | None = None
    # The in-flight cap in force at the end of the run (it may have followed the load after warm-up).
    cap: int | None = None
    # A language model's token records (None: the answers carried no stream).
    llm: LlmColumns | None = None
    # The body each request sent, where that is decided during the run (a closed loop cycles its bodies); None: the
    # schedule's own (bodies[i % n], or its body_index).
    body: np.ndarray | None = None
    # The local port of the connection each request went out on (-1: unknown; empty: not recorded by this driver): the
    # wire audit pairs a request with its own connection's (follower/loadgen/wireaudit.py).
    port: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))

    @classmethod
    def allocate(cls, start_ns: int, offsets_ns: np.ndarray, timer: str = "yield") -> LoadRecords:
        """Empty records for a schedule: intended times filled, everything else -1."""
        n = len(offsets_ns)

        def blank() -> np.ndarray:
            return np.full(n, -1, dtype=np.int64)

        return cls(
            intended_ns=start_ns + np.asarray(offsets_ns, dtype=np.int64),
            sent_ns=blank(),
            first_byte_ns=blank(),
            done_ns=blank(),
            status=np.full(n, NOT_SENT, dtype=np.int32),
            stages_ns={stage: blank() for stage in STAGES},
            start_ns=start_ns,
            timer=timer,
            capped=np.zeros(n, dtype=bool),
            port=np.full(n, -1, dtype=np.int32),
        )

    def __len__(self) -> int:
        return len(self.intended_ns)

    def __repr__(self) -> str:
        # Short: asyncio formats a finished task's result when it restores the SIGINT handler after asyncio.Runner.run
        # (signal.getsignal's enum lookup fails on its partial and formats it), and the arrays' own repr took ~0.5 s of
        # CPU after every run of 1,000 streamed requests.
        return f"LoadRecords({len(self)} requests from {self.start_ns} ns, {int(self.ok.sum())} answered 200)"

    @property
    def ok(self) -> np.ndarray:
        """Mask of requests answered 200."""
        return self.status == 200

    @property
    def sent(self) -> np.ndarray:
        """Mask of requests that were handed to the HTTP client."""
        return self.sent_ns >= 0

    @property
    def cpu_share(self) -> float:
        """The generator process's CPU time over the run's wall time (1.0 = one core busy)."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def spin_share(self) -> float:
        """Of cpu_share, the dispatcher's spinning before sends over the run's wall time (at most cpu_share)."""
        return min(self.spin_s, self.cpu_s) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def work_cpu_s(self) -> float:
        """The generator's CPU less its spinning before sends: what its requests and answers cost."""
        return max(self.cpu_s - self.spin_s, 0.0)

    def window(self, start_ns: int, end_ns: int) -> LoadRecords:
        """The requests whose *intended* time falls in [start_ns, end_ns); run-level figures are kept."""
        mask = (self.intended_ns >= start_ns) & (self.intended_ns < end_ns)
        return LoadRecords(
            intended_ns=self.intended_ns[mask],
            sent_ns=self.sent_ns[mask],
            first_byte_ns=self.first_byte_ns[mask],
            done_ns=self.done_ns[mask],
            status=self.status[mask],
            stages_ns={k: v[mask] for k, v in self.stages_ns.items()},
            start_ns=start_ns,
            cpu_s=self.cpu_s,
            wall_s=self.wall_s,
            loop_lag_ns=self.loop_lag_ns,
            error_sample=self.error_sample,
            timer=self.timer,
            spin_s=self.spin_s,
            wake_margin_ns=self.wake_margin_ns,
            capped=self.capped[mask] if len(self.capped) == len(mask) else np.zeros(int(mask.sum()), dtype=bool),
            stopped_ns=self.stopped_ns,
            run_queue_share=self.run_queue_share,
            scheduling=self.scheduling,
            cap=self.cap,
            llm=self.llm.subset(mask) if self.llm is not None else None,
            port=self.port[mask] if len(self.port) == len(mask) else np.zeros(0, dtype=np.int32),
        )


def decode_records(blob: bytes, *, cpu_s: float = 0.0, wall_s: float = 0.0) -> LoadRecords:
    """Records read back from their blob, a language model's token columns included (without the texts: the client's
    count of each, where the blob has it); the run's CPU and wall time travel beside the blob."""
    arrays = fmt.decode(blob)
    n = len(arrays["intended_ns"])

    def column(name: str) -> np.ndarray:
        return np.asarray(arrays[name], dtype=np.int64) if name in arrays else np.full(n, -1, dtype=np.int64)

    llm = None
    if fmt.LLM_OFFSETS in arrays:
        tokens, offsets = np.asarray(arrays[fmt.LLM_TOKENS], dtype=np.int64), np.asarray(arrays[fmt.LLM_OFFSETS])
        llm = LlmColumns(
            column("llm_prompt_tokens"),
            column("llm_completion_tokens"),
            column("llm_events"),
            [tokens[offsets[i] : offsets[i + 1]] for i in range(n)],
            [None] * n,
            column("llm_client_tokens"),
        )

    return LoadRecords(
        intended_ns=column("intended_ns"),
        sent_ns=column("sent_ns"),
        first_byte_ns=column("first_byte_ns"),
        done_ns=column("done_ns"),
        status=np.asarray(arrays["status"]).astype(np.int32),
        stages_ns={stage: column(f"{fmt.STAGE_PREFIX}{stage}") for stage in STAGES},
        start_ns=int(np.asarray(arrays[fmt.START]).ravel()[0]),
        cpu_s=cpu_s,
        wall_s=wall_s,
        capped=column("capped") > 0 if "capped" in arrays else np.zeros(n, dtype=bool),
        llm=llm,
    )


def shifted(records: LoadRecords, delta_ns: int) -> LoadRecords:
    """The records with every instant moved by `delta_ns` (onto another clock); durations and -1 stay as they are."""

    def move(values: np.ndarray) -> np.ndarray:
        return np.where(values >= 0, values + delta_ns, values)

    return LoadRecords(
        intended_ns=records.intended_ns + delta_ns,
        sent_ns=move(records.sent_ns),
        first_byte_ns=move(records.first_byte_ns),
        done_ns=move(records.done_ns),
        status=records.status,
        stages_ns=records.stages_ns,
        start_ns=records.start_ns + delta_ns,
        cpu_s=records.cpu_s,
        wall_s=records.wall_s,
        loop_lag_ns=records.loop_lag_ns,
        error_sample=records.error_sample,
        timer=records.timer,
        spin_s=records.spin_s,
        wake_margin_ns=records.wake_margin_ns,
        capped=records.capped,
        scheduling=records.scheduling,
        cap=records.cap,
        llm=records.llm.shifted(delta_ns) if records.llm is not None else None,
        port=records.port,
    )


def encode_records(records: LoadRecords, client_tokens: np.ndarray | None = None) -> bytes:
    """The records in the raw-records format (common.wire.records); `client_tokens`: a language model's client counts of
    each text, for a blob another follower merges (the texts themselves stay here)."""
    capped = records.capped if len(records.capped) == len(records) else np.zeros(len(records), dtype=bool)
    columns = {
        "intended_ns": records.intended_ns,
        "sent_ns": records.sent_ns,
        "first_byte_ns": records.first_byte_ns,
        "done_ns": records.done_ns,
        "status": records.status,
        "capped": capped,
    }
    llm = None
    if records.llm is not None:
        cols = records.llm
        times = [t if t is not None else np.zeros(0, dtype=np.int64) for t in cols.token_times]
        llm = {
            "llm_prompt_tokens": cols.prompt_tokens,
            "llm_completion_tokens": cols.completion_tokens,
            "llm_events": cols.events,
            fmt.LLM_TOKENS: np.concatenate(times) if times else np.zeros(0, dtype=np.int64),
            fmt.LLM_OFFSETS: np.concatenate([[0], np.cumsum([len(t) for t in times])]),
        }
        if client_tokens is not None:
            llm["llm_client_tokens"] = client_tokens
    return fmt.encode(columns, records.stages_ns, records.start_ns, llm)
