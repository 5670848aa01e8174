"""The engine side of benchfleet's own model servers, shared by both protocols (HTTP and gRPC).

An engine subclasses `KServeModel` and supplies `load()` (blocking: open the model, fill `inputs`/`outputs`, set
`handle` last) and `run_batch()`. This module owns the signature checks every request passes (one validation for
both protocols), server-side processing, dynamic batching, the queue and infer stage timings and the statistics.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from common.formats.datatypes import V2_TO_NUMPY
from follower.servers.pool import EnginePool

log = logging.getLogger("benchfleet.kserve")


class BadRequest(Exception):
    """A client error: HTTP 400 {"error": ...}, gRPC INVALID_ARGUMENT."""


@dataclass
class _Pending:
    feeds: dict[str, np.ndarray]
    rows: int
    submitted_ns: int
    future: asyncio.Future[tuple[list[np.ndarray], int, int]] = field(repr=False)


class KServeModel:
    """One model behind the Open Inference Protocol; engines override `load`, `run_batch` and `platform`."""

    platform = "unknown"
    engine_version = "unknown"

    def __init__(
        self,
        model_path: str,
        name: str,
        version: str,
        *,
        instances: int = 1,
        max_batch_size: int = 0,
        max_queue_delay_us: int = 0,
        preprocess: str | None = None,
        postprocess: str | None = None,
    ) -> None:
        self.model_path = model_path
        self.name = name
        self.version = version
        self.handle: Any = None  # the loaded engine object; set last by load()
        self.load_error: BaseException | None = None
        self.inputs: dict[str, dict[str, Any]] = {}
        self.outputs: dict[str, dict[str, Any]] = {}
        # One worker per instance: the wait for a free worker is exactly the server's queue stage.
        self.executor = EnginePool(max(1, instances), f"{self.platform}-run")
        # executions = engine runs (a dynamic batch is one); queue_ns/infer_ns are summed per request, Triton's way.
        self.stats: dict[str, Any] = {
            "requests": 0,
            "ok": 0,
            "errors": 0,
            "batches": 0,
            "batched_rows": 0,
            "executions": 0,
            "queue_ns": 0,
            "infer_ns": 0,
        }
        # Dynamic batching is on when max_batch_size > 0: requests wait up to max_queue_delay_us to share one run.
        self.max_batch_size = max_batch_size
        self.max_queue_delay_ns = max_queue_delay_us * 1000
        self._pending: list[_Pending] = []
        self._wakeup: asyncio.Event | None = None
        # Server-side processing (follower.servers.processing): the model's one input is then taken raw (BYTES [N, 1]) and
        # preprocessed here, and/or its one output is postprocessed into one JSON document per row.
        self.preprocess = preprocess
        self.postprocess = postprocess
        self._engine_inputs: dict[str, dict[str, Any]] = {}
        self._processing_ready = preprocess is None and postprocess is None
        # Processors run on their own workers, so a slow image decode never waits behind engine runs in their queue.
        self.processing = EnginePool(max(1, instances), f"{self.platform}-process")
        if preprocess or postprocess:
            self.stats.update({"preprocess_ns": 0, "postprocess_ns": 0})

    # -- engine hooks ------------------------------------------------------------------------------------------

    def load(self) -> None:
        """Open the model (blocking); fill inputs/outputs, then set `handle`."""
        raise NotImplementedError

    def run_batch(self, feeds: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
        """Run the engine once on `feeds`, returning the named outputs."""
        raise NotImplementedError

    # -- loading -----------------------------------------------------------------------------------------------

    def load_in_background(self, on_failure: Any) -> threading.Thread:
        """Load in a thread so liveness answers while the model loads; call `on_failure` if loading fails."""

        def run() -> None:
            started = time.monotonic()
            try:
                self.load()
                self._apply_processing()
                log.warning("model %s loaded from %s in %.3fs", self.name, self.model_path, time.monotonic() - started)
            except BaseException as exc:  # noqa: BLE001 - any failure must end the server, not leave it unready forever
                self.load_error = exc
                log.exception("loading %s failed", self.model_path)
                on_failure()

        thread = threading.Thread(target=run, name="model-load", daemon=True)
        thread.start()
        return thread

    @property
    def ready(self) -> bool:
        return self.handle is not None and self._processing_ready

    def _apply_processing(self) -> None:
        """Rewrite the served signature for server-side processing (raw BYTES in, JSON BYTES out); checks the names."""
        from follower.servers.processing import RAW_INPUT_SHAPE, get_processor

        self._engine_inputs = {k: dict(v) for k, v in self.inputs.items()}
        sides = (
            ("pre", self.preprocess, self.inputs, "preprocessing feeds a model with one input"),
            ("post", self.postprocess, self.outputs, "postprocessing reads a model with one output"),
        )
        for side, processor, tensors, needs in sides:
            if not processor:
                continue
            get_processor(processor, side)
            if len(tensors) != 1:
                raise ValueError(f"server-side {needs}; this one has {sorted(tensors)}")
            name = next(iter(tensors))
            tensors[name] = {"name": name, "datatype": "BYTES", "shape": list(RAW_INPUT_SHAPE)}
        self._processing_ready = True

    async def infer(
        self, feeds: dict[str, np.ndarray], names: list[str], submitted_ns: int
    ) -> tuple[list[np.ndarray], int, int, dict[str, int]]:
        """Server-side preprocess, the engine run (`submit`), server-side postprocess: outputs, queue/infer ns, and
        the processing stages' ns ({} when the server runs no processor)."""
        if self.preprocess is None and self.postprocess is None:
            arrays, queue_ns, infer_ns = await self.submit(feeds, names, submitted_ns)
            return arrays, queue_ns, infer_ns, {}
        from follower.servers.processing import server_postprocess, server_preprocess

        loop = asyncio.get_running_loop()
        stages = {"preprocess_ns": 0, "postprocess_ns": 0}
        if self.preprocess:
            name = next(iter(feeds))
            shape = self._engine_inputs[name]["shape"]
            try:
                batch = await self.processing.run(loop, server_preprocess, self.preprocess, feeds[name], shape)
            except ValueError as exc:
                raise BadRequest(f"input {name!r}: {exc}") from None
            feeds = {name: batch}
            now = time.perf_counter_ns()
            stages["preprocess_ns"] = now - submitted_ns
            submitted_ns = now
        arrays, queue_ns, infer_ns = await self.submit(feeds, names, submitted_ns)
        if self.postprocess:
            started = time.perf_counter_ns()
            arrays = [await self.processing.run(loop, server_postprocess, self.postprocess, a) for a in arrays]
            stages["postprocess_ns"] = time.perf_counter_ns() - started
        self.stats["preprocess_ns"] += stages["preprocess_ns"]
        self.stats["postprocess_ns"] += stages["postprocess_ns"]
        return arrays, queue_ns, infer_ns, stages

    # -- protocol ----------------------------------------------------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "versions": [self.version],
            "platform": self.platform,
            "inputs": list(self.inputs.values()),
            "outputs": list(self.outputs.values()),
        }

    def check_input(self, name: str, datatype: str, shape: list[int]) -> np.dtype[Any]:
        """One input's name, datatype and shape against the signature (both protocols): its dtype, or BadRequest."""
        spec = self.inputs.get(name)
        if spec is None:
            raise BadRequest(f"unknown input {name!r}; the model's inputs are {sorted(self.inputs)}")
        if datatype != spec["datatype"]:
            raise BadRequest(f"input {name!r}: datatype {datatype!r} does not match the model's {spec['datatype']}")
        dtype = np.dtype(object) if datatype == "BYTES" and self.preprocess else V2_TO_NUMPY.get(datatype)
        if dtype is None:
            raise BadRequest(f"input {name!r}: datatype {datatype} is not supported by this server")
        model_shape = spec["shape"]
        if len(shape) != len(model_shape) or any(m != -1 and m != d for m, d in zip(model_shape, shape, strict=True)):
            raise BadRequest(f"input {name!r}: shape {shape} does not fit the model's {model_shape}")
        return dtype

    def check_request(self, feeds: dict[str, np.ndarray], names: list[str] | None) -> list[str]:
        """Every input given, every output asked for known: the output names (all when `names` is None), or BadRequest."""
        missing = sorted(set(self.inputs) - set(feeds))
        if missing:
            raise BadRequest(f"missing inputs {missing}")
        if names is None:
            return list(self.outputs)
        unknown = [n for n in names if n not in self.outputs]
        if unknown:
            raise BadRequest(f"unknown outputs {unknown}; the model's outputs are {sorted(self.outputs)}")
        return names

    def run(self, feeds: dict[str, np.ndarray], names: list[str], submitted_ns: int) -> tuple[list[np.ndarray], int, int]:
        """One engine run in an executor thread; returns outputs, time queued for the executor, and run time."""
        start = time.perf_counter_ns()
        outputs = self.run_batch(feeds, names)
        return outputs, start - submitted_ns, time.perf_counter_ns() - start

    async def submit(
        self, feeds: dict[str, np.ndarray], names: list[str], submitted_ns: int
    ) -> tuple[list[np.ndarray], int, int]:
        """Run now, or through the dynamic batcher when it is on (every output is requested, then narrowed)."""
        loop = asyncio.get_running_loop()
        if self.max_batch_size <= 0:
            result = await self.executor.run(loop, self.run, feeds, names, submitted_ns)
            self.stats["executions"] += 1  # counted on the event loop: no two threads update it
            return result
        rows = min(int(a.shape[0]) if a.ndim else 1 for a in feeds.values())
        future: asyncio.Future[tuple[list[np.ndarray], int, int]] = loop.create_future()
        self._pending.append(_Pending(feeds, rows, submitted_ns, future))
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
            loop.create_task(self._batcher())
        self._wakeup.set()
        outputs, queue_ns, infer_ns = await future
        all_names = list(self.outputs)
        return [outputs[all_names.index(n)] for n in names], queue_ns, infer_ns

    async def _batcher(self) -> None:
        """Gather pending requests into batches of at most max_batch_size rows, waiting at most the queue delay."""
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        names = list(self.outputs)
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                deadline_ns = self._pending[0].submitted_ns + self.max_queue_delay_ns
                while sum(p.rows for p in self._pending) < self.max_batch_size:
                    left = deadline_ns - time.perf_counter_ns()
                    if left <= 0:
                        break
                    self._wakeup.clear()
                    try:
                        await asyncio.wait_for(self._wakeup.wait(), left / 1e9)
                    except TimeoutError:
                        break
                batch: list[_Pending] = []
                rows = 0
                while self._pending and (not batch or rows + self._pending[0].rows <= self.max_batch_size):
                    item = self._pending.pop(0)
                    batch.append(item)
                    rows += item.rows
                feeds = {k: np.concatenate([p.feeds[k] for p in batch], axis=0) for k in batch[0].feeds}
                started = time.perf_counter_ns()
                try:
                    outputs, _, infer_ns = await self.executor.run(loop, self.run, feeds, names, started)
                except Exception as exc:  # noqa: BLE001 - the engine's error goes to every request of the batch
                    for p in batch:
                        if not p.future.done():
                            p.future.set_exception(exc)
                    continue
                self.stats["batches"] += 1
                self.stats["executions"] += 1
                self.stats["batched_rows"] += rows
                offset = 0
                for p in batch:
                    part = [o[offset : offset + p.rows] for o in outputs]
                    offset += p.rows
                    if not p.future.done():
                        # Queue = time from arrival to the batch's run start (batching delay + executor wait).
                        p.future.set_result((part, started - p.submitted_ns, infer_ns))
