"""An images data set may carry its classes' labels (labels.txt, one per line in class order) for the top-k
post-processor: read back in order on the follower; an unreadable, empty or oversized labels file is refused at
upload naming labels.txt; other formats carry none."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from common.formats.datasets import MAX_LABEL_CHARS, BadData, inspect_data, load_labels


def _images(labels: bytes | None) -> bytes:
    from PIL import Image

    png = io.BytesIO()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(png, format="PNG")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("a.png", png.getvalue())
        if labels is not None:
            archive.writestr("labels.txt", labels)
    return buf.getvalue()


def test_labels_are_read_back_in_class_order(tmp_path: Path) -> None:
    data = _images(b"tench\ngoldfish\r\ngreat white shark\n")
    assert inspect_data(io.BytesIO(data), "images") == (1, ["image"])  # labels.txt is not an image
    path = tmp_path / "set.images"
    path.write_bytes(data)
    assert load_labels(str(path), "images") == ["tench", "goldfish", "great white shark"]
    path.write_bytes(_images(None))
    assert load_labels(str(path), "images") is None
    assert load_labels(str(path), "npz") is None


@pytest.mark.parametrize(
    ("labels", "said"),
    [
        (b"\xff\xfe", "labels.txt: not UTF-8"),
        (b"", "labels.txt: holds 0 labels"),
        (b"ok\n" + b"x" * (MAX_LABEL_CHARS + 1) + b"\n", "labels.txt: line 2 is longer"),
    ],
)
def test_a_bad_labels_file_is_refused_at_upload(labels: bytes, said: str) -> None:
    with pytest.raises(BadData, match=said):
        inspect_data(io.BytesIO(_images(labels)), "images")
