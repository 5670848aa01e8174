#!/usr/bin/env bash
# Set up, then run the embedded default: DB + Redis + leader + one local follower, one real benchmark, results printed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/benchfleet demo "$@"
