"""The canonical model with a true accuracy: trained on scikit-learn's digits, scored on the held-out ones."""

from __future__ import annotations

import io

import numpy as np
import onnxruntime as ort

from benchfleet.generate.digits import digits, digits_mlp, digits_npz


def test_the_split_is_fixed_and_disjoint() -> None:
    data = digits()
    assert (len(data.train_x), len(data.test_x)) == (1257, 540) and data.train_x.shape[1] == 64
    assert float(data.train_x.max()) == 16.0  # raw pixels
    train_rows = {row.tobytes() for row in data.train_x}
    assert sum(row.tobytes() in train_rows for row in data.test_x) < 10  # the digits set repeats a few images itself
    again = digits()
    assert np.array_equal(again.test_y, data.test_y) and np.array_equal(again.test_x, data.test_x)


def test_the_trained_model_is_accurate_the_same_everywhere_and_onnx_runtime_agrees() -> None:
    model, accuracy = digits_mlp()
    assert accuracy > 0.95  # 10 classes: chance is 0.1
    assert digits_mlp()[0] == model  # the same seed, the same bytes
    held = np.load(io.BytesIO(digits_npz()))
    assert held["input"].dtype == np.float32 and held["labels"].dtype == np.int64 and len(held["labels"]) == 540
    scores = ort.InferenceSession(model).run(None, {"input": held["input"]})[0]
    assert float((scores.argmax(axis=1) == held["labels"]).mean()) == accuracy
