#!/usr/bin/env bash
# Install what benchfleet needs on a fresh Debian machine: redis-server, chromium and the sandbox tools (apt) and the
# Python environment (.venv).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

apt_packages=()
command -v redis-server >/dev/null 2>&1 || apt_packages+=(redis-server)
# The browser tests drive Debian's chromium through Playwright (no browser download).
command -v chromium >/dev/null 2>&1 || apt_packages+=(chromium)
# Model servers run sandboxed (follower/host/sandbox.py): bubblewrap, a network namespace (iproute2), a firewall
# rule (nftables) and setpriv (util-linux).
command -v bwrap >/dev/null 2>&1 || apt_packages+=(bubblewrap)
command -v ip >/dev/null 2>&1 || apt_packages+=(iproute2)
command -v nft >/dev/null 2>&1 || apt_packages+=(nftables)
command -v setpriv >/dev/null 2>&1 || apt_packages+=(util-linux)
# tmux: the CLI's tables are tested in a real 80-column terminal; npm: the browser assets are vendored from npm.
command -v tmux >/dev/null 2>&1 || apt_packages+=(tmux)
command -v npm >/dev/null 2>&1 || apt_packages+=(npm)
# A C++ toolchain: scripts/install_llamacpp.sh builds llama.cpp's server from source.
command -v cmake >/dev/null 2>&1 || apt_packages+=(cmake)
command -v ninja >/dev/null 2>&1 || apt_packages+=(ninja-build)
command -v g++ >/dev/null 2>&1 || apt_packages+=(g++)
for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || apt_packages+=("$pkg")
done
if [ ${#apt_packages[@]} -gt 0 ]; then
    echo "setup: apt-get install ${apt_packages[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null
fi
# The distribution starts redis-server as a service on install; benchfleet starts its own on a free port.
$SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv with $($PYTHON --version)"
    "$PYTHON" -m venv .venv
fi
stamp=".venv/.benchfleet-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "setup: installing benchfleet and its dependencies into .venv"
    .venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
    .venv/bin/python -m pip install -q -e '.[dev]' 2>&1 | grep -v "^WARNING: Location" || true
    .venv/bin/python -c "import fastapi, celery, pymongo, gridfs, onnxruntime, hdrh, aiohttp, cryptography, sklearn"
    echo "$want" > "$stamp"
fi

# The torch extra for the TorchScript backend and the canonical model generator: the torch==2.13.0 wheel these
# machines hold is the CPU build, and the check below refuses a CUDA one; fail soft: those tests skip without it.
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
    echo "setup: installing torch==2.13.0 (CPU)"
    .venv/bin/python -m pip install -q "torch==2.13.0" 2>&1 | grep -v "^WARNING" | tail -2 || true
    .venv/bin/python -c "import torch; assert not torch.version.cuda, 'a CUDA torch was installed'" \
        || echo "setup: torch unavailable or not the CPU build; TorchScript tests will skip"
fi
.venv/bin/python -c "import skimage" >/dev/null 2>&1 || .venv/bin/python -m pip install -q "scikit-image>=0.22" 2>&1 | tail -1 || true
# Swagger UI for /docs, copied into the package from npm (pinned); /docs answers 503 naming this step without it.
bash scripts/vendor_web.sh || echo "setup: browser assets not vendored (npm unreachable?): /docs answers 503 and pages show tables without charts"
# A real tritonserver extracted from the nvidia-pytriton wheel (idempotent, cached under .benchfleet/; fails soft).
bash scripts/install_triton.sh || true
