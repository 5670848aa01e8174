#!/usr/bin/env bash
# What the deployment tests (tests/deploy) need besides the project's environment: podman and the Kubernetes kit's
# Debian packages (`cluster.sh deps`: podman, runc, containerd, ...), podman-compose (PyPI, in its own environment
# under .benchfleet/), and promtool (from Debian's prometheus package, unpacked: nothing is started). Idempotent;
# fails soft where the kit is absent (the tests then skip, naming it).
set -euo pipefail
cd "$(dirname "$0")/.."
KIT="${K8S_KIT:-$(cd .. && pwd)/shared/k8s}"
TOOLS=.benchfleet/deploy-tools

if [ -f "$KIT/cluster.sh" ]; then
    bash "$KIT/cluster.sh" deps >/dev/null
else
    echo "install_deploy_tools: no Kubernetes kit at $KIT: the deployment tests will skip" >&2
fi
if [ ! -x "$TOOLS/compose/bin/podman-compose" ]; then
    python3 -m venv "$TOOLS/compose"
    "$TOOLS/compose/bin/pip" install -q "podman-compose==1.6.*" 2>&1 | grep -v "^WARNING: Location" || true
fi
if [ ! -x "$TOOLS/bin/promtool" ]; then
    tmp="$(mktemp -d)"
    if ! (cd "$tmp" && apt-get download -q prometheus >/dev/null 2>&1); then
        apt-get update -qq && (cd "$tmp" && apt-get download -q prometheus >/dev/null)
    fi
    dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
    mkdir -p "$TOOLS/bin" && cp "$tmp/x/usr/bin/promtool" "$TOOLS/bin/promtool"
    rm -rf "$tmp"
fi
"$TOOLS/bin/promtool" --version 2>&1 | head -1
