#!/usr/bin/env bash
# Regenerate the committed gRPC stubs of every protos/*.proto (tests/unit/protos checks they are current).
# Each .proto gets its own <name>_pb2.py, _pb2.pyi and _pb2_grpc.py beside it; needs grpcio-tools (dev extra).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
for proto in protos/*.proto; do
  "$PY" -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. --pyi_out=. "$proto"
done
