#!/usr/bin/env bash
# llama.cpp's OpenAI-compatible server (llama-server), built from source: llama.cpp publishes no binaries to a package
# registry, so its sources come from the sdist of llama-cpp-python on PyPI (which vendors them), and only llama-server
# is built: CPU, Release, for this host's processor, statically linked to llama.cpp. The result lives in a cache outside
# the clone keyed by the version ($CACHE/llamacpp-$VERSION: bin/llama-server and VERSION), so a machine that has it does
# not build it again (about 5 minutes on 2 cores the first time), and .benchfleet/llamacpp links to it. The follower
# finds it there (or at BENCHFLEET_FOLLOWER_LLAMACPP_SERVER).
# Fails soft outside CI (the llama.cpp tests then skip, saying why); under CI a failure fails the run.
set -uo pipefail
cd "$(dirname "$0")/.."

VERSION="${BENCHFLEET_LLAMACPP_PY_VERSION:-0.3.36}"
CACHE="${BENCHFLEET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/benchfleet}"
DEST="$CACHE/llamacpp-$VERSION"
LINK=".benchfleet/llamacpp"
PY=$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )

fail() {
    echo "install_llamacpp: $*" >&2
    mkdir -p .benchfleet && echo "$*" >.benchfleet/llamacpp.FAILED
    if [ -n "${CI:-}" ]; then exit 1; fi
    echo "install_llamacpp: the llama.cpp tests will skip" >&2
    exit 0
}

# One install at a time per cache entry: two runs on one machine (two clones, say) would otherwise delete each
# other's half-built environment. The lock is held until this script exits; the second run then finds it complete.
mkdir -p "$CACHE"
exec 9>"$DEST.lock"
flock 9 || fail "could not lock $DEST.lock"
if [ ! -f "$DEST/.complete" ]; then
    for tool in cmake ninja g++; do command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (scripts/setup.sh installs it)"; done
    echo "install_llamacpp: building llama-server from llama-cpp-python==$VERSION's llama.cpp into $DEST (about 5 minutes on 2 cores)"
    WORK="$CACHE/llamacpp-build-$VERSION"
    rm -rf "$DEST" "$WORK" && mkdir -p "$WORK"
    "$PY" -m pip download -q --no-deps --no-binary=:all: -d "$WORK" "llama-cpp-python==$VERSION" 2>&1 | grep -v "^WARNING" | tail -2
    tar -xzf "$WORK"/llama_cpp_python-"$VERSION".tar.gz -C "$WORK" || fail "could not unpack llama-cpp-python==$VERSION"
    SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"
    cmake -S "$SRC" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >"$WORK/cmake.log" 2>&1 || fail "cmake failed: $(tail -3 "$WORK/cmake.log")"
    cmake --build "$WORK/build" --target llama-server -j "$(nproc)" >"$WORK/build.log" 2>&1 \
        || fail "the build failed: $(grep -m3 -i error "$WORK/build.log")"
    install -D -m 0755 "$WORK/build/bin/llama-server" "$DEST/bin/llama-server" || fail "no llama-server was built"
    "$DEST/bin/llama-server" --version >/dev/null 2>&1 || fail "the llama-server built does not run"
    built=$("$DEST/bin/llama-server" --version 2>&1 | sed -n 's/^version: //p' | head -1)
    echo "llama.cpp ${built:-(version unknown)}, from llama-cpp-python $VERSION" >"$DEST/VERSION"
    rm -rf "$WORK"
    touch "$DEST/.complete"
fi
mkdir -p .benchfleet
ln -sfn "$DEST" "$LINK"
rm -f .benchfleet/llamacpp.FAILED
echo "install_llamacpp: $(cat "$DEST/VERSION") at $LINK/bin/llama-server"
