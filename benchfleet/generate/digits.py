"""The canonical model with a true accuracy: an MLP trained here, in about a second, on scikit-learn's handwritten
digits (1,797 8×8 images shipped inside the package: nothing is downloaded), and the held-out digits as a labelled
data set to score it on.

The split is fixed (a seeded permutation: 70% to train, 30% held out), so the same seed gives the same model bytes
and the same test set on every machine. The model reads raw pixels (0..16, as the data set holds them): the scaling
to 0..1 it was trained on is folded into its first layer.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from benchfleet.generate.modelgen import Layer, mlp_graph

TRAIN_SHARE = 0.7
PIXEL_MAX = 16.0  # the digits' pixel values run 0..16
CLASSES = 10
INPUTS = 64


@dataclass(frozen=True)
class Digits:
    """The digits split in two: `train_*` to fit, `test_*` (never seen in training) to score."""

    train_x: np.ndarray  # [n, 64] float32 raw pixels
    train_y: np.ndarray  # [n] int64 classes 0..9
    test_x: np.ndarray
    test_y: np.ndarray


def digits(seed: int = 0) -> Digits:
    """scikit-learn's digits, split by a permutation of `seed`."""
    from sklearn.datasets import load_digits  # a core dependency; imported here so the CLI starts without it loaded

    bunch = load_digits()
    x, y = bunch.data.astype(np.float32), bunch.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(len(x) * TRAIN_SHARE)
    return Digits(x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]])


def forward(weights: list[Layer], x: np.ndarray) -> np.ndarray:
    """The MLP's scores for `x` (Relu between layers), as the ONNX graph computes them."""
    for i, (w, b) in enumerate(weights):
        x = x @ w + b
        if i < len(weights) - 1:
            x = np.maximum(x, 0)
    return x


def train(
    data: Digits, *, hidden: int = 256, layers: int = 2, steps: int = 100, rate: float = 0.01, seed: int = 0
) -> list[Layer]:
    """An MLP fitted to the training digits by full-batch Adam on the softmax cross-entropy; it reads raw pixels."""
    if min(hidden, layers, steps) < 1:
        raise ValueError("hidden, layers and steps must all be >= 1")
    rng = np.random.default_rng(seed)
    sizes = [INPUTS] + [hidden] * (layers - 1) + [CLASSES]
    params = [
        [(rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32), np.zeros(b, np.float32)]
        for a, b in zip(sizes[:-1], sizes[1:], strict=True)
    ]
    first = [np.zeros_like(p) for layer in params for p in layer]
    second = [np.zeros_like(p) for layer in params for p in layer]
    x = data.train_x / PIXEL_MAX
    onehot = np.eye(CLASSES, dtype=np.float32)[data.train_y]
    for step in range(1, steps + 1):
        acts = [x]
        for i, (w, b) in enumerate(params):
            z = acts[-1] @ w + b
            acts.append(np.maximum(z, 0) if i < len(params) - 1 else z)
        z = acts[-1] - acts[-1].max(axis=1, keepdims=True)
        p = np.exp(z)
        grad = (p / p.sum(axis=1, keepdims=True) - onehot) / len(x)
        grads: list[np.ndarray] = []
        for i in range(len(params) - 1, -1, -1):
            w = params[i][0]
            grads[:0] = [acts[i].T @ grad, grad.sum(axis=0)]
            if i > 0:
                grad = (grad @ w.T) * (acts[i] > 0)
        for k, g in enumerate(grads):
            first[k] = 0.9 * first[k] + 0.1 * g
            second[k] = 0.999 * second[k] + 0.001 * g * g
            step_k = rate * (first[k] / (1 - 0.9**step)) / (np.sqrt(second[k] / (1 - 0.999**step)) + 1e-8)
            params[k // 2][k % 2] = (params[k // 2][k % 2] - step_k).astype(np.float32)
    weights = [(w, b) for w, b in params]
    weights[0] = ((weights[0][0] / PIXEL_MAX).astype(np.float32), weights[0][1])  # raw pixels in
    return weights


def digits_mlp(*, hidden: int = 256, layers: int = 2, steps: int = 100, seed: int = 0) -> tuple[bytes, float]:
    """The trained MLP as ONNX (input "input" [batch, 64] FP32, output "output" [batch, 10]) and its top-1 accuracy
    on the held-out digits (numpy's forward pass: what a float32 server should also score)."""
    data = digits(seed)
    weights = train(data, hidden=hidden, layers=layers, steps=steps, seed=seed)
    accuracy = float((forward(weights, data.test_x).argmax(axis=1) == data.test_y).mean())
    return mlp_graph(weights), accuracy


def digits_npz(seed: int = 0) -> bytes:
    """The held-out digits as a labelled request-data set: `input` [n, 64] float32 and `labels` [n] int64."""
    data = digits(seed)
    out = io.BytesIO()
    np.savez(out, input=data.test_x, labels=data.test_y)
    return out.getvalue()
