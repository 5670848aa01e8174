"""The committed gRPC stubs are exactly what grpcio-tools generates from the committed .proto files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PROTOS = sorted((ROOT / "protos").glob("*.proto"))


@pytest.mark.parametrize("proto", PROTOS, ids=[p.stem for p in PROTOS])
def test_stubs_match_the_proto(proto: Path, tmp_path: Path) -> None:
    grpc_tools = pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools (dev extra) regenerates the stubs")
    (tmp_path / "protos").mkdir()
    shutil.copy(proto, tmp_path / "protos" / proto.name)
    rel = f"protos/{proto.name}"
    well_known = Path(grpc_tools.__file__).parent / "_proto"  # google/protobuf/*.proto, as `python -m` adds them
    args = ["protoc", f"-I{tmp_path}", f"-I{well_known}", f"--python_out={tmp_path}", f"--grpc_python_out={tmp_path}",
            f"--pyi_out={tmp_path}"]  # fmt: skip
    assert grpc_tools.main([*args, str(tmp_path / rel)]) == 0
    for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
        name = proto.stem + suffix
        fresh = (tmp_path / "protos" / name).read_text()
        committed = (ROOT / "protos" / name).read_text()
        assert fresh == committed, f"protos/{name} is stale: regenerate it (see the comment at the top of {rel})"
