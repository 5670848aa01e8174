"""Our model server's dynamic batcher (follower/servers/engine.py) on a real ONNX Runtime session: batches form up to
the configured size, a request waits no longer than the queue delay for others to join it, and every request gets
back exactly its own rows of the batch's answer."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from benchfleet.generate.modelgen import mlp_onnx
from follower.servers.ort_server import ModelServer

pytestmark = pytest.mark.integration
MS = 1_000_000


class Recording(ModelServer):
    """The ORT server's engine, with the rows of each engine run written down."""

    runs: list[int]

    def load(self) -> None:
        self.runs = []
        super().load()

    def run_batch(self, feeds: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
        self.runs.append(int(feeds["input"].shape[0]))
        return super().run_batch(feeds, names)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("batcher") / "mlp.onnx"
    path.write_bytes(mlp_onnx(inputs=16, hidden=32, outputs=4, seed=7))
    return path


def _server(path: Path, max_batch_size: int, delay_us: int) -> Recording:
    server = Recording(
        str(path), "mlp", "1", ["CPUExecutionProvider"], 1, max_batch_size=max_batch_size, max_queue_delay_us=delay_us
    )
    server.load()
    return server


def _reference(path: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["output"], {"input": x})[0]


async def _submit_all(server: Recording, inputs: list[np.ndarray]) -> list[tuple[np.ndarray, int]]:
    async def one(x: np.ndarray) -> tuple[np.ndarray, int]:
        outputs, queue_ns, _ = await server.submit({"input": x}, ["output"], time.perf_counter_ns())
        return outputs[0], queue_ns

    return await asyncio.gather(*(one(x) for x in inputs))


def test_batches_form_up_to_the_size_and_each_request_gets_its_own_rows(model_path: Path) -> None:
    server = _server(model_path, max_batch_size=8, delay_us=200_000)
    rng = np.random.default_rng(1)
    # 11 requests of 1 to 3 rows (22 rows), all at once: runs of at most 8 rows; a request is never split.
    sizes = [1, 2, 3, 1, 1, 3, 2, 2, 3, 1, 3]
    inputs = [rng.standard_normal((n, 16)).astype(np.float32) for n in sizes]
    answers = asyncio.run(_submit_all(server, inputs))
    assert sum(server.runs) == sum(sizes) and all(1 <= r <= 8 for r in server.runs), server.runs
    assert len(server.runs) < len(sizes)  # requests shared runs
    assert max(server.runs) >= 7  # with 22 rows waiting at once, a run fills (or nearly: a request is never split)
    reference = _reference(model_path, np.concatenate(inputs))
    offset = 0
    for x, (got, _) in zip(inputs, answers, strict=True):
        assert got.shape == (len(x), 4)
        np.testing.assert_allclose(got, reference[offset : offset + len(x)], rtol=1e-5, atol=1e-6)
        offset += len(x)
    assert server.stats["batches"] == len(server.runs) and server.stats["batched_rows"] == sum(sizes)


def test_a_lone_request_waits_the_queue_delay_and_no_longer(model_path: Path) -> None:
    delay_ms = 40
    server = _server(model_path, max_batch_size=8, delay_us=delay_ms * 1000)
    x = np.ones((1, 16), dtype=np.float32)
    ((got, queue_ns),) = asyncio.run(_submit_all(server, [x]))
    np.testing.assert_allclose(got, _reference(model_path, x), rtol=1e-5, atol=1e-6)
    assert server.runs == [1]
    # Alone, it waits out the delay for company, then runs: its queue time is the delay, give or take the event loop
    # (a wide margin: a busy 2-core host may wake the loop late, never early).
    assert delay_ms * MS <= queue_ns <= (delay_ms + 150) * MS, queue_ns / MS


def test_a_full_batch_runs_without_waiting_out_the_delay(model_path: Path) -> None:
    server = _server(model_path, max_batch_size=4, delay_us=5_000_000)  # a 5 s delay that a full batch must not wait
    inputs = [np.full((1, 16), i, dtype=np.float32) for i in range(4)]
    started = time.perf_counter()
    answers = asyncio.run(_submit_all(server, inputs))
    assert server.runs == [4] and time.perf_counter() - started < 2.5, server.runs
    reference = _reference(model_path, np.concatenate(inputs))
    for i, (got, _) in enumerate(answers):
        np.testing.assert_allclose(got, reference[i : i + 1], rtol=1e-5, atol=1e-6)
