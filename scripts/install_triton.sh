#!/usr/bin/env bash
# Extract a real `tritonserver` (Triton 2.51, python backend) from the nvidia-pytriton wheel into .benchfleet/triton,
# and make the small venv its python-backend models run in (numpy<2 + onnxruntime). Idempotent; fails soft:
# if anything cannot be had, it says why and exits 0, and the Triton tests skip with that reason.
# A `tritonserver` already on PATH wins: then nothing is extracted.
set -uo pipefail
cd "$(dirname "$0")/.."

DEST=".benchfleet/triton"
WHEEL_VERSION="0.7.0"
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3

if command -v tritonserver >/dev/null 2>&1 && [ -z "${BENCHFLEET_FORCE_TRITON_EXTRACT:-}" ]; then
    echo "install_triton: tritonserver on PATH ($(command -v tritonserver)); nothing to extract"
    exit 0
fi

fail() { echo "install_triton: $*; Triton tests will skip" >&2; mkdir -p "$DEST"; echo "$*" > "$DEST/FAILED"; exit 0; }

if [ ! -x "$DEST/pytriton/tritonserver/bin/tritonserver" ]; then
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    echo "install_triton: downloading nvidia-pytriton==$WHEEL_VERSION (about 55 MB, not installed: only its binary is used)"
    "$PY" -m pip download -q --no-deps "nvidia-pytriton==$WHEEL_VERSION" -d "$tmp" 2>&1 | tail -2 || true
    wheel="$(ls "$tmp"/nvidia_pytriton-*.whl 2>/dev/null | head -1)"
    [ -n "$wheel" ] || fail "could not download the nvidia-pytriton wheel"
    rm -rf "$DEST" && mkdir -p "$DEST"
    "$PY" - "$wheel" "$DEST" <<'PYEOF' || fail "could not extract tritonserver from the wheel"
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as zf:
    for name in zf.namelist():
        if name.startswith("pytriton/tritonserver/python_backend_stubs/") and "/3.11/" not in name:
            continue  # only the stub of the interpreter we run (saves ~100 MB)
        if name.startswith(("pytriton/tritonserver/", "nvidia_pytriton.libs/")):
            zf.extract(name, dest)
PYEOF
    ts="$DEST/pytriton/tritonserver"
    cp "$ts/python_backend_stubs/3.11/triton_python_backend_stub" "$ts/backends/python/" || fail "no python 3.11 backend stub in the wheel"
    chmod +x "$ts/bin/tritonserver" "$ts/backends/python/triton_python_backend_stub"
    rm -f "$DEST/FAILED"
fi

# The python backend's stub runs the first python3 on PATH and needs numpy<2 (numpy 2 breaks output tensors);
# pillow decodes images for server-side preprocessing (benchfleet's processors run inside the model).
if [ ! -x "$DEST/modelenv/bin/python3" ] || ! "$DEST/modelenv/bin/python3" -c "import numpy, onnxruntime, PIL" 2>/dev/null; then
    base="$("$PY" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')"
    "$base" -m venv "$DEST/modelenv" || fail "could not create the Triton model venv"
    "$DEST/modelenv/bin/python3" -m pip install -q "numpy<2" onnxruntime pillow 2>&1 | grep -v "^WARNING" | tail -2
    "$DEST/modelenv/bin/python3" -c "import numpy, onnxruntime, PIL" || fail "the Triton model venv lacks numpy<2/onnxruntime/pillow"
fi
rm -f "$DEST/FAILED"
echo "install_triton: ready at $DEST/pytriton/tritonserver/bin/tritonserver"
