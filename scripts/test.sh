#!/usr/bin/env bash
# Set up, then run the whole test suite (unit, integration against real Redis/SecantusDB/model servers, end to end).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
