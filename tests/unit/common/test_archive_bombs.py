"""Decompression bombs: an archive's inflated size and ratio are checked from its directory before anything is
inflated, on the leader (data sets, model bundles, model directories) and again on the follower (request data,
SavedModels); a refusal names the member. A SavedModel member cannot leave its directory by a prefix trick."""

from __future__ import annotations

import io
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from common.formats import hfbundle
from common.formats.bundle import BundleError, read_member, write_bundle
from common.formats.datasets import BadData, inspect_data, load_samples
from common.formats.ziplimits import ArchiveTooLarge

MIB = 1024 * 1024


def _npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_an_npz_of_zeros_that_inflates_a_thousand_fold_is_refused_naming_its_member(tmp_path: Path) -> None:
    bomb = _npz(x=np.zeros((64, 1024, 1024), dtype=np.uint8))  # 64 MiB of zeros in ~64 KiB
    assert len(bomb) < MIB
    with pytest.raises(BadData, match=r"member 'x.npy' inflates [\d,]+-fold .* at most 100-fold"):
        inspect_data(io.BytesIO(bomb), "npz")
    stored = tmp_path / "bomb.npz"
    stored.write_bytes(bomb)
    with pytest.raises(ArchiveTooLarge, match="x.npy"):  # the follower checks again before it inflates
        load_samples(str(stored), "npz")


def test_an_npz_is_inspected_from_its_headers_without_inflating_its_arrays() -> None:
    rng = np.random.default_rng(0)
    data = _npz(x=rng.random((2048, 1024), dtype=np.float32), y=rng.integers(0, 9, (2048, 3)))  # 8 MiB of floats
    tracemalloc.start()
    try:
        assert inspect_data(io.BytesIO(data), "npz") == (2048, ["x", "y"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MIB, peak  # the arrays (8 MiB) were never read


def test_an_npz_whose_header_lies_about_its_data_is_refused() -> None:
    data = io.BytesIO()
    np.save(data, np.zeros(10, dtype=np.float64))
    short = data.getvalue()[:-8]  # one element missing
    with pytest.raises(BadData, match="declares 80 bytes of data but holds 72"):
        inspect_data(io.BytesIO(_zip({"x.npy": short})), "npz")


def test_a_model_bundle_member_that_inflates_a_thousand_fold_is_refused() -> None:
    bomb = _zip({"model.onnx": bytes(64 * MIB), "meta.json": b"{}"})
    with pytest.raises(BundleError, match="member 'model.onnx' inflates"):
        read_member(bomb, "model.onnx")
    plain = write_bundle({"model.onnx": b"onnx" * 1000}, {})
    assert read_member(plain, "model.onnx") == b"onnx" * 1000


def test_a_model_directory_whose_weights_are_a_bomb_is_refused() -> None:
    bomb = _zip({"config.json": b"{}", "model.safetensors": bytes(64 * MIB)})
    with pytest.raises(hfbundle.HfBundleError, match="member 'model.safetensors' inflates"):
        hfbundle.describe(io.BytesIO(bomb), limit_bytes=10**10)


def _lying(archive: bytes, member: str, claims: int) -> bytes:
    """The archive with its central directory claiming `claims` compressed bytes for `member` (the attack's npz: a
    1 MB file whose directory says 20 MB, so 1 GiB inflated reads as a 50-fold ratio)."""
    name = member.encode()
    at = archive.index(b"PK\x01\x02")  # the central directory's entries: the name at 46, the compressed size at 20
    while archive[at + 46 : at + 46 + len(name)] != name:
        at = archive.index(b"PK\x01\x02", at + 4)
    return archive[: at + 20] + claims.to_bytes(4, "little") + archive[at + 24 :]


@pytest.mark.parametrize("kind", ["npz", "bundle", "hf"])
def test_an_archive_whose_directory_lies_about_its_compressed_size_is_refused(kind: str, tmp_path: Path) -> None:
    """The ratio bound is held on the bytes really in the archive: 64 MiB of zeros deflate to ~64 KiB; a directory
    claiming 1 MiB for them (a 64-fold ratio, under the bound) lies, since the whole file is smaller than that."""
    if kind == "npz":
        honest, member = _npz(x=np.zeros((64, 1024, 1024), dtype=np.uint8)), "x.npy"
    elif kind == "bundle":
        honest, member = _zip({"model.onnx": bytes(64 * MIB), "meta.json": b"{}"}), "model.onnx"
    else:
        honest, member = _zip({"config.json": b"{}", "model.safetensors": bytes(64 * MIB)}), "model.safetensors"
    lie = _lying(honest, member, claims=MIB)
    assert len(lie) < MIB and zipfile.ZipFile(io.BytesIO(lie)).getinfo(member).compress_size == MIB
    said = rf"member '{member}' claims 1,048,576 compressed bytes that the archive \([\d,]+ bytes\) does not hold"
    if kind == "npz":
        with pytest.raises(BadData, match=said):
            inspect_data(io.BytesIO(lie), "npz")
        stored = tmp_path / "lie.npz"
        stored.write_bytes(lie)
        with pytest.raises(ArchiveTooLarge, match=said):  # and on the follower, before it inflates
            load_samples(str(stored), "npz")
    elif kind == "bundle":
        with pytest.raises(BundleError, match=said):
            read_member(lie, member)
    else:
        with pytest.raises(hfbundle.HfBundleError, match=said):
            hfbundle.describe(io.BytesIO(lie), limit_bytes=10**10)


def test_a_savedmodel_member_cannot_leave_its_directory_by_a_name_prefix(tmp_path: Path) -> None:
    from follower.backends.tfserving import unpack_savedmodel

    evil = tmp_path / "evil.zip"
    evil.write_bytes(_zip({"m/saved_model.pb": b"pb", "m/../1evil/x": b"x"}))
    with pytest.raises(RuntimeError, match="would leave the model directory"):
        unpack_savedmodel(evil, tmp_path / "out")
    assert not (tmp_path / "out" / "1evil").exists()
    bomb = tmp_path / "bomb.zip"
    bomb.write_bytes(_zip({"m/saved_model.pb": b"pb", "m/variables/v": bytes(64 * MIB)}))
    with pytest.raises(ArchiveTooLarge, match="m/variables/v"):
        unpack_savedmodel(bomb, tmp_path / "out2")
