#!/usr/bin/env bash
# The GPU, MPS and netem checks on a lent GPU machine (the device tool, docs/gpu/): a bare image with CUDA, PyTorch
# and a CPU onnxruntime, without benchfleet's other packages or its tools. Carried beside the tree: .whl (the wheels
# benchfleet needs that the image lacks, for its Python 3.12) and .devkit (Debian's redis-server, iproute2, bubblewrap,
# nftables and setpriv with their libraries, each used only where the image has none of its own; scripts/devkit.sh
# makes both). Everything it prints is also written to $OUT/gpu-check.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
exec > >(tee "$OUT/gpu-check.log") 2>&1
echo "== host"
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,power.draw --format=csv
uname -r
grep PRETTY /etc/os-release
for t in nvidia-cuda-mps-control tc ip bwrap nft setpriv redis-server; do printf '%s: %s\n' "$t" "$(command -v "$t" || echo 'missing (carried one used)')"; done
modprobe sch_netem 2>&1 | head -2
grep -E '^(sch_netem|sch_tbf|veth) ' /proc/modules || echo "(no netem/tbf/veth modules listed: built in, or absent)"
PY=$(command -v python3)
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>&1 | tail -3
echo "$PWD" >"$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/benchfleet-src.pth"
export PATH="$PATH:$PWD/.devkit/bin"
$PY -c "import torch, onnxruntime as o; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), '| onnxruntime', o.__version__, o.get_available_providers())"
echo "== tests"
# Every GPU-only test (NVML, ONNX Runtime and TorchScript on CUDA, the GPU-busy gate, MPS, vLLM and llama.cpp on CUDA,
# the GPU fleet end to end), the sampler, netem and the sandbox on this kernel, and the GPU argv/env unit tests. What the
# machine lacks skips naming it (vLLM's and onnxruntime-gpu's CUDA builds are gigabytes and nothing is downloaded
# here: the GPU image carries them). The whole check stays within 8 minutes: the tests, then the GPU bench.
[ $# -gt 0 ] || set -- tests/integration/gpu tests/integration/follower/test_sampler.py tests/integration/follower/test_netshape.py \
    tests/integration/follower/test_sandbox.py tests/e2e/test_gpu_fleet.py tests/unit/follower/test_gpu_argv.py \
    tests/unit/follower/test_gpu_image.py
# SIGINT at the limit: pytest then prints the failures it has so far (a plain SIGTERM loses them all).
timeout -s INT -k 30 "${GPU_CHECK_TIMEOUT_S:-360}" "$PY" -m pytest -p no:cacheprovider -v -s -rA --timeout 240 "$@" \
    | tee "$OUT/pytest.log"
tests=${PIPESTATUS[0]}
echo "== the GPU bench (bench/gpu.py: TorchScript on CUDA against the CPU, power and energy)"
timeout -s INT -k 10 "${GPU_BENCH_TIMEOUT_S:-75}" "$PY" bench/gpu.py --duration 2 --batches 1 8
echo "== GPU paths: each test's outcome (and why one did not run)"
grep -E '^(PASSED|FAILED|SKIPPED|ERROR) ' "$OUT/pytest.log" | grep -E 'gpu|mps|sampler|netshape|sandbox' || echo "(no outcome: see above)"
echo "== took ${SECONDS} s (the check's budget: 480 s)"
exit "$tests"
