"""A user's TorchScript model served by ONNX Runtime: converted in the model sandbox (as nobody, its own network), checked
against the original and benchmarked, the check on the point; a conversion that cannot be done says why; an untrusted
model is not converted where the follower cannot sandbox."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from common.spec.job import PointSpec
from common.spec.slo import SLO
from common.wire.models import ModelMeta, TensorSpec
from common.wire.results import PointResult
from follower.backends.process import SOURCE_ROOT
from follower.convert import user_model
from follower.host import sandbox as sandboxes
from follower.point.context import HostFacts, ServerRun
from follower.point.runner import run_backend

pytestmark = pytest.mark.integration

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'benchfleet[torch]')")

HOST = HostFacts(follower_id="f-test", host="testhost", cpu_model="test cpu", cpu_count=os.cpu_count() or 1)


def _user_model(directory: Path, *, declared_features: int = 8) -> tuple[Path, ModelMeta]:
    """A traced MLP of 8 features → 4 classes, with the signature its uploader declared."""
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    path = directory / "user.pt"
    torch.jit.trace(mlp.eval(), torch.randn(1, 8)).save(str(path))
    path.chmod(0o644)
    data = path.read_bytes()
    meta = ModelMeta(
        name="user-mlp",
        version="1",
        format="torchscript",
        inputs=[TensorSpec(name="input", datatype="FP32", shape=[-1, declared_features])],
        outputs=[TensorSpec(name="output", datatype="FP32", shape=[-1, 4])],
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        created_at=datetime.now(UTC),
    )
    return path, meta


def _serve(path: Path, meta: ModelMeta, workdir: Path) -> list[PointResult]:
    point = PointSpec(
        index=0, backend="onnxruntime", batch_size=1, pattern="poisson", rate=50.0, duration_s=1.0, warmup_s=0.2, seed=1
    )
    run = ServerRun(model=meta, model_path=path, workdir=workdir, host_facts=HOST, slo=SLO(p99_ms=10_000.0))

    async def collect() -> list[PointResult]:
        return [r async for r in run_backend("onnxruntime", [point], run)]

    return asyncio.run(collect())


@pytest.mark.skipif(not sandboxes.support().ok, reason=f"this follower cannot sandbox: {sandboxes.support().reason}")
def test_a_torchscript_upload_is_converted_in_the_sandbox_checked_and_benchmarked_on_onnxruntime(tmp_path: Path) -> None:
    path, meta = _user_model(tmp_path)
    (result,) = _serve(path, meta, tmp_path / "work")
    conversion = result.conversion
    assert conversion is not None and conversion.passed and conversion.sandboxed
    assert (conversion.source, conversion.target, conversion.samples) == ("torchscript", "onnx", user_model.BATCH)
    assert conversion.max_abs_diff <= conversion.atol + conversion.rtol  # FP32 export: rounding only
    assert conversion.summary().startswith("converted torchscript -> onnx in ")
    assert result.ok > 0 and result.errors == 0


@pytest.mark.skipif(not sandboxes.support().ok, reason=f"this follower cannot sandbox: {sandboxes.support().reason}")
def test_a_conversion_that_cannot_be_done_says_why(tmp_path: Path) -> None:
    path, meta = _user_model(tmp_path, declared_features=6)  # the model takes 8 features; its uploader said 6
    with pytest.raises(user_model.ConversionFailed, match=r"could not be converted from torchscript to onnx: .*6.*8"):
        _serve(path, meta, tmp_path / "work")


def test_an_untrusted_model_is_not_converted_without_a_sandbox_and_a_trusted_one_is(tmp_path: Path) -> None:
    path, meta = _user_model(tmp_path)
    runtime = [Path(sys.prefix), Path(sys.base_prefix)]
    with pytest.raises(sandboxes.SandboxRefused, match="runs its own code"):
        user_model.convert(path, meta, "onnx", tmp_path, sandbox=None, runtime=runtime, source_root=SOURCE_ROOT)
    assert not (tmp_path / "conversions").exists()
    trusted = meta.model_copy(update={"trusted": True})
    served, conversion = user_model.convert(
        path, trusted, "onnx", tmp_path / "trusted", sandbox=None, runtime=runtime, source_root=SOURCE_ROOT
    )
    assert conversion.passed and not conversion.sandboxed and served.read_bytes()[:2] == b"\x08\x08"  # ONNX IR version 8
