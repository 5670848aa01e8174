"""A user's own model converted to the form its job's backend serves: a TorchScript upload to ONNX, for ONNX Runtime and
Triton. Loading a TorchScript file runs its code, so the conversion runs as its own process inside the model sandbox
(as nobody, no network, its own files only; follower/host/sandbox.py), or, where this follower cannot sandbox, only
for a model an admin marked trusted. The converted model is checked against the original on the same inputs
(follower/convert/check.py): one that disagrees beyond the tolerance is not served, and the check's figures go with
every point served from it (PointResult.conversion).

`python -m follower.convert.user_model --source FILE --out FILE --signature JSON` is the process that converts: it
prints the check as one JSON line and exits 0 (agrees), 3 (disagrees) or 2 (could not convert, the reason on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common.wire.models import ModelMeta, TensorSpec
from common.wire.results import Conversion
from follower.host import sandbox as sandboxes

CONVERSIONS = {("torchscript", "onnx")}  # (stored format, served form)
TIMEOUT_S = 600.0
BATCH = 4  # rows the two models are compared on (the batch dimension stays dynamic)
EXIT_DISAGREES, EXIT_FAILED = 3, 2
DTYPES = {"FP32": "float32", "FP16": "float16", "INT64": "int64", "INT32": "int32"}


class ConversionFailed(RuntimeError):
    """A model that could not be converted, or whose conversion disagrees with it: the message says why."""


def converts(model: ModelMeta, kind: str) -> bool:
    """Whether this follower converts the stored model to `kind`."""
    return (model.format, kind) in CONVERSIONS


def convert(
    model_path: Path,
    model: ModelMeta,
    kind: str,
    workdir: Path,
    *,
    sandbox: sandboxes.Sandbox | None,
    runtime: list[Path],
    source_root: Path,
) -> tuple[Path, Conversion]:
    """The model converted to `kind` (kept under workdir/conversions by content) and its check; ConversionFailed or
    SandboxRefused otherwise. `runtime`: what the converting process reads besides the model (Python, our code);
    `source_root`: where it runs from (benchfleet's source tree)."""
    kept = Path(workdir) / "conversions" / f"{model.name}-{model.sha256[:16]}.{kind}"
    if kept.exists() and kept.with_suffix(".json").exists():
        return kept, Conversion.model_validate_json(kept.with_suffix(".json").read_text())
    if sandbox is None and not model.trusted:
        raise sandboxes.SandboxRefused(
            f"converting model {model.ref} from {model.format} runs its own code, and this follower cannot sandbox it: "
            f"{sandboxes.support().reason}. An admin may mark the model trusted "
            "(PATCH /models/{name}/{version}, trusted: true)"
        )
    work = (sandbox.home if sandbox is not None else Path(workdir)) / f"convert-{model.sha256[:16]}"
    work.mkdir(parents=True, exist_ok=True)
    if sandbox is not None:
        os.chown(work, sandboxes.NOBODY, sandboxes.NOBODY)
    out = work / f"model.{kind}"
    signature = json.dumps({"inputs": [t.model_dump() for t in model.inputs], "outputs": [t.model_dump() for t in model.outputs]})
    argv = [sys.executable, "-m", "follower.convert.user_model", "--source", str(model_path), "--out", str(out)]
    argv += ["--signature", signature]
    if sandbox is not None:
        sandbox.allow_read(runtime)
        argv = sandbox.command(argv, cwd=source_root)
    started = time.monotonic()
    try:
        done = subprocess.run(
            argv,
            env=sandboxes.server_environment(),
            cwd=None if sandbox is not None else source_root,
            capture_output=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ConversionFailed(f"converting model {model.ref} to {kind} took more than {TIMEOUT_S:.0f} s") from None
    seconds = time.monotonic() - started
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    check = _check(lines[-1]) if lines else None
    why = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
    if check is None or done.returncode not in (0, EXIT_DISAGREES):
        raise ConversionFailed(f"model {model.ref} could not be converted from {model.format} to {kind}: {why[0][-400:]}")
    conversion = Conversion(source=model.format, target=kind, seconds=round(seconds, 3), sandboxed=sandbox is not None, **check)
    if not conversion.passed:
        raise ConversionFailed(f"model {model.ref} as {kind} disagrees with the original: {conversion.summary()}")
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out, kept.with_suffix(".tmp"))
    kept.with_suffix(".tmp").replace(kept)
    kept.with_suffix(".json").write_text(conversion.model_dump_json())
    return kept, conversion


def _check(line: str) -> dict[str, Any] | None:
    """The converting process's check line, with only the fields a Conversion takes from it."""
    try:
        raw = json.loads(line)
    except ValueError:
        return None
    names = ("passed", "max_abs_diff", "max_rel_diff", "rtol", "atol", "samples")
    return {k: raw[k] for k in names} if isinstance(raw, dict) and all(k in raw for k in names) else None


def _example(spec: TensorSpec) -> Any:
    """A seeded batch of BATCH rows for the one input (the batch dimension BATCH, other dynamic ones 1)."""
    import numpy as np
    import torch

    if spec.datatype not in DTYPES:
        raise ValueError(f"input {spec.name} is {spec.datatype}; conversion takes {', '.join(DTYPES)}")
    shape = [BATCH if i == 0 and d == -1 else max(d, 1) for i, d in enumerate(spec.shape)]
    rng = np.random.default_rng(0)
    dtype = DTYPES[spec.datatype]
    data = rng.integers(0, 16, size=shape) if dtype.startswith("int") else rng.standard_normal(shape)
    return torch.from_numpy(np.ascontiguousarray(data.astype(dtype)))


def main(argv: list[str] | None = None) -> int:
    """Convert one TorchScript file to ONNX and print the check (run inside the sandbox)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--signature", required=True)
    args = parser.parse_args(argv)
    from follower.convert.check import ConversionMismatch
    from follower.convert.torch_export import to_onnx

    try:
        import torch

        signature = json.loads(args.signature)
        inputs = [TensorSpec.model_validate(t) for t in signature["inputs"]]
        outputs = [TensorSpec.model_validate(t) for t in signature["outputs"]]
        if len(inputs) != 1 or len(outputs) != 1:
            counts = f"{len(inputs)} and {len(outputs)}"
            raise ValueError(f"conversion takes a model of one input and one output (this one has {counts})")
        module = torch.jit.load(str(args.source), map_location="cpu").eval()
        check = to_onnx(module, _example(inputs[0]), args.out, input_name=inputs[0].name, output_name=outputs[0].name)
    except ConversionMismatch as exc:
        print(json.dumps(exc.check.as_dict()))
        return EXIT_DISAGREES
    except Exception as exc:  # noqa: BLE001 - whatever the user's model raises is the reason the conversion failed
        print(f"{type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(check.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
