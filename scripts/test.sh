#!/usr/bin/env bash
# Set up, then run the whole test suite (unit, integration against real Redis/SecantusDB/model servers, end to end).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The LLM tests run a real vLLM: its CPU build in its own environment, cached outside the clone by version (fails
# soft, except under CI, where those tests must run).
bash scripts/install_vllm.sh
# llama.cpp's server, built from its sources (PyPI's llama-cpp-python sdist), cached outside the clone by version.
bash scripts/install_llamacpp.sh
# The deployment tests build images with podman and start a real Kubernetes (../shared/k8s): its packages, podman-compose
# and promtool.
bash scripts/install_deploy_tools.sh
# Two workers, a module whole on one of them (tests/conftest.py groups them; BENCHFLEET_TEST_WORKERS=0 runs in one
# process); the longest modules first, in the order tests/conftest.py gives.
exec .venv/bin/python -m pytest -n "${BENCHFLEET_TEST_WORKERS:-2}" --dist loadscope --no-loadscope-reorder "$@"
