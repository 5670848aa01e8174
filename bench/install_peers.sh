#!/usr/bin/env bash
# The peer LLM benchmark clients bench/llm.py runs beside benchfleet, each in its own virtual environment under
# BENCHFLEET_PEERS (default ~/.cache/benchfleet/peers), never in benchfleet's: AIPerf and GuideLLM from PyPI, at the
# versions below. `vllm bench serve` comes with vLLM's own environment (scripts/install_vllm.sh). Not part of the test
# command or CI: the bench reports a peer that is missing and goes on.
set -euo pipefail
PEERS="${BENCHFLEET_PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/benchfleet/peers}"
declare -A PACKAGES=([aiperf]="aiperf==0.13.0" [guidellm]="guidellm==0.8.1")
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
