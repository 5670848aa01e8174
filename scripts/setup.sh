#!/usr/bin/env bash
# Install what benchfleet needs on a fresh Debian machine: redis-server (apt) and the Python environment (.venv).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

apt_packages=()
command -v redis-server >/dev/null 2>&1 || apt_packages+=(redis-server)
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
    .venv/bin/python -c "import fastapi, celery, motor, onnxruntime, hdrh, aiohttp" 
    echo "$want" > "$stamp"
fi
