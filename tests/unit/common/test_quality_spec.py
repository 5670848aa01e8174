"""`quality:` in the job spec, and labelled request data: labels are each sample's class, never a model input."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest

from common.errors import InvalidSpec
from common.formats.datasets import BadData, inspect_data, load_samples, load_targets, load_truth
from common.spec.parse import parse_spec_yaml

BASE = "name: j\nmodel: m:1\nload: {rate: 10, duration: 1s, allow_short: true}\n"
UPLOAD = "data: {source: upload, id: abc}\n"


def test_quality_defaults_to_top1_and_top5_over_a_thousand_samples() -> None:
    spec = parse_spec_yaml(BASE + UPLOAD + "quality: {}\n")
    assert spec.quality is not None and spec.quality.accuracy is not None
    assert (spec.quality.accuracy.top_k, spec.quality.samples("tensor")) == (5, 1000)
    assert parse_spec_yaml(BASE).quality is None


@pytest.mark.parametrize(
    ("extra", "field", "needle"),
    [
        ("quality: {}\n", "quality", "scores against labelled data: give data: {source: upload"),
        (UPLOAD + "quality: {max_samples: 10001}\n", "quality.max_samples", "must be <= 10000"),
        (UPLOAD + "quality: {accuracy: {top_k: 0}}\n", "quality.accuracy.top_k", "must be >= 1"),
        (UPLOAD + "quality: {accuracy: {top_k: 3}, extra: 1}\n", "quality.extra", "unknown field"),
        (UPLOAD + "backends: [vllm]\nquality: {accuracy: {}}\n", "quality", "a language model has none to score"),
        ("backends: [vllm]\nquality: {}\n", "quality", "quality.evaluation or quality.agreement: ask for one"),
        ("backends: [vllm]\nquality: {evaluation: {}}\n", "quality", "give llm.dataset (a prompt set with answers)"),
        ("backends: [vllm]\nquality: {agreement: true, evaluation: {scorer: regex}}\n", "quality.evaluation.scorer", "exact"),
        ("backends: [vllm]\nquality: {agreement: true, answer_tokens: 4097}\n", "quality.answer_tokens", "<= 4096"),
        (UPLOAD + "quality: {evaluation: {}}\n", "quality", "a tensor model's is quality.accuracy"),
        ("quality: {regression: true}\n", "quality", "quality.regression scores against true values: give data"),
        ("backends: [vllm]\nquality: {regression: true}\n", "quality", "a language model's is quality.evaluation"),
        # A co-location job sends synthetic requests only: never labelled data.
        (UPLOAD + "colocate: {models: [other:1]}\nquality: {}\n", "colocate", "synthetic requests from its own signature"),
    ],
)
def test_a_quality_check_that_cannot_be_run_is_refused_naming_why(extra: str, field: str, needle: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        parse_spec_yaml(BASE + extra)
    assert caught.value.field == field and needle in str(caught.value)


def test_a_quality_check_can_be_turned_off() -> None:
    spec = parse_spec_yaml(BASE + "quality: {accuracy: null}\n")  # nothing to score: no labelled data needed
    assert spec.quality is not None and spec.quality.accuracy is None


def _npz(**arrays: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.savez(out, **arrays)  # type: ignore[arg-type]
    return out.getvalue()


def test_npz_labels_are_read_as_the_truth_and_kept_out_of_the_samples(tmp_path: Path) -> None:
    content = _npz(input=np.arange(12, dtype=np.float32).reshape(4, 3), labels=np.array([3, 1, 4, 1], np.uint8))
    assert inspect_data(io.BytesIO(content), "npz") == (4, ["input", "labels"])
    path = tmp_path / "d.npz"
    path.write_bytes(content)
    samples = load_samples(str(path), "npz")
    assert isinstance(samples, dict) and list(samples) == ["input"] and len(samples["input"]) == 4
    truth = load_truth(str(path), "npz")
    assert truth is not None and truth.dtype == np.int64 and truth.tolist() == [3, 1, 4, 1]


def test_jsonl_label_is_read_as_the_truth_and_kept_out_of_the_samples(tmp_path: Path) -> None:
    content = b'{"x": [1, 2], "label": 7}\n{"x": [3, 4], "label": 0}\n'
    assert inspect_data(io.BytesIO(content), "jsonl") == (2, ["label", "x"])
    path = tmp_path / "d.jsonl"
    path.write_bytes(content)
    samples = load_samples(str(path), "jsonl")
    assert isinstance(samples, dict) and list(samples) == ["x"]
    truth = load_truth(str(path), "jsonl")
    assert truth is not None and truth.tolist() == [7, 0]


def test_a_set_without_labels_has_no_truth(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    path.write_bytes(_npz(input=np.zeros((2, 3), np.float32)))
    assert load_truth(str(path), "npz") is None
    assert load_truth(str(path), "images") is None  # an images set's labels.txt names classes, not each sample's


def _images(labels_csv: str | None, classes: str | None = None) -> bytes:
    import zipfile

    from PIL import Image

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name in ("b.png", "a.png", "c.png"):
            png = io.BytesIO()
            Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(png, format="PNG")
            zf.writestr(name, png.getvalue())
        if labels_csv is not None:
            zf.writestr("labels.csv", labels_csv)
        if classes is not None:
            zf.writestr("labels.txt", classes)
    return out.getvalue()


def test_an_images_zip_labels_each_image_in_the_order_they_are_served(tmp_path: Path) -> None:
    # Numbers or names from labels.txt; the truth follows the images' served order (sorted by name: a, b, c).
    content = _images("file,label\nb.png,cat\na.png,2\nc.png,dog\n", classes="dog\ncat\nbird\n")
    assert inspect_data(io.BytesIO(content), "images") == (3, ["image", "label"])
    path = tmp_path / "d.zip"
    path.write_bytes(content)
    truth = load_truth(str(path), "images")
    assert truth is not None and truth.tolist() == [2, 1, 0]
    samples = load_samples(str(path), "images")
    assert isinstance(samples, list) and len(samples) == 3  # labels.csv is not an image
    assert inspect_data(io.BytesIO(_images(None)), "images") == (3, ["image"])


@pytest.mark.parametrize(
    ("labels_csv", "needle"),
    [
        ("a.png,1\n", "the first line must be the header file,label"),
        ("file,label\na.png,1\nb.png,1\n", "1 images have no label, e.g. c.png"),
        ("file,label\na.png,1\nb.png,1\nc.png,1\nd.png,1\n", "line 5 is not an image of the zip"),
        ("file,label\na.png,1\na.png,2\n", "line 3 is not one new file,label pair"),
        ("file,label\na.png,cat\n", "line 2: 'cat' is neither a class number below 100000 nor a name in labels.txt"),
        ("file,label\na.png,\u00b2\n", "line 2: '\u00b2' is neither a class number"),
    ],
)
def test_a_bad_labels_csv_is_refused_naming_the_line(labels_csv: str, needle: str) -> None:
    from common.formats.datasets import BadData

    with pytest.raises(BadData) as caught:
        inspect_data(io.BytesIO(_images(labels_csv)), "images")
    assert needle in str(caught.value)


def test_regression_targets_are_read_as_true_values_and_kept_out_of_the_samples(tmp_path: Path) -> None:
    """An npz `targets` ([n] or [n, k]) or a JSONL `target` (a number or a list) is each sample's true value, read as
    [n, k] float64, never a model input; what is not numbers of one width is refused at upload naming it."""
    content = _npz(input=np.zeros((3, 2), np.float32), targets=np.array([0.5, -1, 2], np.float32))
    assert inspect_data(io.BytesIO(content), "npz") == (3, ["input", "targets"])
    path = tmp_path / "d.npz"
    path.write_bytes(content)
    samples = load_samples(str(path), "npz")
    assert isinstance(samples, dict) and list(samples) == ["input"]
    targets = load_targets(str(path), "npz")
    assert targets is not None and targets.dtype == np.float64 and targets.tolist() == [[0.5], [-1.0], [2.0]]
    lines = b'{"x": [1, 2], "target": [0.25, 1e3]}\n{"x": [3, 4], "target": [1, 2]}\n'
    assert inspect_data(io.BytesIO(lines), "jsonl") == (2, ["target", "x"])
    (tmp_path / "d.jsonl").write_bytes(lines)
    assert list(load_samples(str(tmp_path / "d.jsonl"), "jsonl")) == ["x"]  # type: ignore[arg-type]
    jsonl = load_targets(str(tmp_path / "d.jsonl"), "jsonl")
    assert jsonl is not None and jsonl.tolist() == [[0.25, 1000.0], [1.0, 2.0]]
    assert load_targets(str(tmp_path / "d.jsonl"), "images") is None and load_truth(str(path), "npz") is None
    for bad, needle in [
        (b'{"x": 1, "target": "7"}\n', "line 1: a target is the sample's true value"),
        (b'{"x": 1, "target": [1, [2]]}\n', "line 1: a target is the sample's true value"),
        (b'{"x": 1, "target": true}\n', "line 1: a target is the sample's true value"),
        (b'{"x": 1, "target": [1, 2]}\n{"x": 1, "target": 3}\n', "line 2: its target holds 1 values, line 1's 2"),
    ]:
        with pytest.raises(BadData, match=re.escape(needle)):
            inspect_data(io.BytesIO(bad), "jsonl")
    with pytest.raises(BadData, match="holds each sample's true values: \\[n\\] or \\[n, k\\] numbers"):
        inspect_data(io.BytesIO(_npz(input=np.zeros((2, 1)), targets=np.zeros((2, 1, 1)))), "npz")


def test_regression_turns_accuracy_off_unless_it_is_asked_too() -> None:
    alone = parse_spec_yaml(BASE + UPLOAD + "quality: {regression: true, agreement: true}\n").quality
    assert alone is not None and alone.accuracy is None and alone.regression and alone.agreement
    both = parse_spec_yaml(BASE + UPLOAD + "quality: {regression: true, accuracy: {top_k: 2}}\n").quality
    assert both is not None and both.accuracy is not None and both.accuracy.top_k == 2


def test_a_jobs_own_floor_needs_a_score_to_hold_and_marks_each_point() -> None:
    from common.wire.quality import Accuracy, Quality, Share

    for extra, needle in [
        (UPLOAD + "quality: {regression: true, min_accuracy: 0.9}\n", "holds top-1 accuracy to a floor: keep quality.accuracy"),
        ("backends: [vllm]\nquality: {agreement: true, min_accuracy: 0.9}\n", "ask for quality.evaluation"),
        (UPLOAD + "quality: {min_accuracy: 1.5}\n", "quality.min_accuracy: must be <= 1.0"),
    ]:
        with pytest.raises(InvalidSpec, match=re.escape(needle)):
            parse_spec_yaml(BASE + extra)
    spec = parse_spec_yaml(BASE + UPLOAD + "quality: {min_accuracy: 0.97}\n").quality
    assert spec is not None and spec.min_accuracy == 0.97
    scored = Quality(accuracy=Accuracy(top1=Share(hits=96, samples=100, value=0.96, low=0.9, high=0.98), k=1))
    assert (scored.held_to(0.97).floor_met, scored.held_to(0.96).floor_met, scored.held_to(None).floor_met) == (False, True, None)
    assert Quality(not_run=["accuracy: no labels"]).held_to(0.5).floor_met is False  # unscored fails a floor
