"""Uploaded request data: the metadata stored beside each data set, and the format check run before it is stored.

Three formats: `npz` (numpy arrays keyed by model input name, first axis = samples; pickles refused), `jsonl` (one JSON
object per line, input name → nested list of one sample), `images` (a zip of PNG/JPEG files, preprocessed on the
follower). An npz `labels` array, a JSONL `label` or an images zip's labels.csv is each sample's true class (for
`quality.accuracy`), never an input; an npz `targets` array ([n] or [n, k] numbers) or a JSONL `target` (a number or a
list of them) is each sample's true value (for `quality.regression`), never an input either. A fourth, `trace`, is not
request data but arrival times for `load.trace` (common.formats.traces); a fifth, `prompts`, is a language model's
prompts, chats, conversations or prompt lengths (common.formats.llmdata).
The check only parses (numpy headers without pickle, JSON, image headers): no user code runs anywhere.
"""

from __future__ import annotations

import csv
import io
import json
import math
import zipfile
from datetime import datetime
from typing import IO, Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from common.base import NAME_PATTERN
from common.formats.lines import bounded_lines
from common.formats.llmdata import BadPrompts, parse_lines
from common.formats.traces import BadTrace, inspect_trace
from common.formats.ziplimits import ArchiveTooLarge, check_archive
from common.spec.quality import LABEL_FIELDS, TARGET_FIELDS, TRUTH_FIELDS
from common.wire.auth import DEFAULT_TEAM

DataFormat = Literal["npz", "jsonl", "images", "trace", "prompts"]
DATA_FORMATS: tuple[str, ...] = ("npz", "jsonl", "images", "trace", "prompts")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
# An images set may carry its classes' labels: labels.txt, one per line in class order (as ImageNet's), for the
# topk post-processor's label lookup.
LABELS_FILE = "labels.txt"
# And each image's true class (for `quality.accuracy`): labels.csv, a `file,label` header then one row per image, the
# label a class number or a name from labels.txt.
IMAGE_LABELS_FILE = "labels.csv"
MAX_IMAGE_LABELS_BYTES = 16 * 1024**2
MAX_LABELS = 100_000
MAX_CLASSES = MAX_LABELS  # a sample's class (its label) is a number below this
MAX_TARGETS = 1000  # values in one JSONL sample's target
MAX_LABEL_CHARS = 200
# A data set the runner cycles through: more samples than this are never needed in one run (bodies are pre-built).
MAX_SAMPLES = 100_000
# What an archived data set (npz, images) may inflate to, besides the ratio bound of common.formats.ziplimits.
MAX_INFLATED_BYTES = 2 * 1024**3


class BadData(ValueError):
    """The uploaded bytes are not a data set of the declared format (the message says what is wrong)."""


class DataSetMeta(BaseModel):
    """A stored request-data set."""

    model_config = ConfigDict(extra="forbid")

    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9]{1,64}$")]
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    format: DataFormat
    samples: int  # rows (npz first axis, JSONL lines, images; prompts: requests, a conversation's turns each)
    fields: list[str]  # npz/jsonl: the input names present; images: ["image"]; prompts: the row kinds present
    sha256: str
    size_bytes: int
    created_at: datetime
    owner: str = "admin"
    team: str = DEFAULT_TEAM  # the uploader's team: only it (and admins) sees the data
    # trace (common.formats.traces): the last send offset, and the largest request-data row it names (None: names none).
    span_s: float | None = None
    max_input: int | None = None


def inspect_data(fp: IO[bytes], data_format: str) -> tuple[int, list[str]]:
    """(samples, fields) of a data set read from `fp`, or BadData saying why it is not one of `data_format`."""
    fp.seek(0)
    inspect = {
        "npz": _inspect_npz,
        "jsonl": _inspect_jsonl,
        "images": _inspect_images,
        "trace": _inspect_trace,
        "prompts": _inspect_prompts,
    }.get(data_format)
    if inspect is None:
        raise BadData(f"unknown data format {data_format!r}; known: {', '.join(DATA_FORMATS)}")
    try:
        return inspect(fp)
    except BadData:
        raise
    except ArchiveTooLarge as exc:
        raise BadData(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - parsers raise many types on hostile bytes; each is the user's bad file
        raise BadData(f"unreadable as {data_format}: {type(exc).__name__}: {exc}") from None


def _inspect_trace(fp: IO[bytes]) -> tuple[int, list[str]]:
    try:
        return inspect_trace(fp)
    except BadTrace as exc:
        raise BadData(str(exc)) from None


def _inspect_prompts(fp: IO[bytes]) -> tuple[int, list[str]]:
    text = io.TextIOWrapper(fp, encoding="utf-8", errors="strict")
    try:
        rows, kinds = parse_lines(text)
    except BadPrompts as exc:
        raise BadData(str(exc)) from None
    finally:
        text.detach()
    return len(rows), kinds


def _inspect_npz(fp: IO[bytes]) -> tuple[int, list[str]]:
    """Samples and fields from each array's .npy header alone: nothing is inflated past the headers, and the archive's
    directory is checked against the inflation bounds first (common.formats.ziplimits)."""
    try:
        with zipfile.ZipFile(fp) as npz:
            check_archive(npz, MAX_INFLATED_BYTES)
            counts = {}
            for info in npz.infolist():
                if not info.filename.endswith(".npy"):
                    raise BadData(f"member {info.filename!r} is not a .npy array")
                shape, dtype = _npy_header(npz, info)
                key = info.filename.removesuffix(".npy")
                if len(shape) < 1 or dtype.hasobject:
                    raise BadData(f"array {key!r} must have a sample axis and a numeric dtype")
                if key in LABEL_FIELDS and (len(shape) != 1 or dtype.kind not in "iu"):
                    raise BadData(f"array {key!r} holds each sample's class: one integer per sample, not {dtype}{list(shape)}")
                if key in TARGET_FIELDS and (len(shape) not in (1, 2) or dtype.kind not in "iuf"):
                    raise BadData(
                        f"array {key!r} holds each sample's true values: [n] or [n, k] numbers, not {dtype}{list(shape)}"
                    )
                counts[key] = int(shape[0])
    except (BadData, ArchiveTooLarge):
        raise
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise BadData(f"not a readable .npz archive of plain arrays: {exc}") from None
    if not counts:
        raise BadData("the .npz archive holds no arrays")
    if len(set(counts.values())) != 1:
        raise BadData(f"arrays disagree on the number of samples: {counts}")
    return next(iter(counts.values())), sorted(counts)


def _npy_header(npz: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple[int, ...], np.dtype]:
    """An .npy member's shape and dtype from its header; its declared data must be what the member holds."""
    with npz.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(member)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(member)
        else:
            raise BadData(f"member {info.filename!r}: .npy format {version} is not accepted (1.0 or 2.0)")
        header = member.tell()
    data = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if header + data != info.file_size:
        raise BadData(f"member {info.filename!r} declares {data:,} bytes of data but holds {info.file_size - header:,}")
    return tuple(shape), dtype


def _inspect_jsonl(fp: IO[bytes]) -> tuple[int, list[str]]:
    text = io.TextIOWrapper(fp, encoding="utf-8", errors="strict")
    try:
        return _jsonl_lines(text)
    finally:
        text.detach()  # the spooled upload stays open: it is streamed into GridFS next


def _jsonl_lines(text: IO[str]) -> tuple[int, list[str]]:
    fields: set[str] | None = None
    targets_width: int | None = None
    samples = 0
    for number, line in bounded_lines(text, bad=BadData):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadData(f"line {number} is not JSON: {exc}") from None
        if not isinstance(doc, dict) or not doc:
            raise BadData(f"line {number} must be an object mapping input names to values")
        label = next((doc[k] for k in LABEL_FIELDS if k in doc), 0)
        if not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < MAX_CLASSES:
            raise BadData(
                f"line {number}: a label is the sample's class, a whole number 0..{MAX_CLASSES - 1} "
                f"(not {json.dumps(label)[:40]})"
            )
        if (target := next((doc[k] for k in TARGET_FIELDS if k in doc), None)) is not None:
            if not _values(target):
                raise BadData(
                    f"line {number}: a target is the sample's true value: a number or a list of 1..{MAX_TARGETS} numbers"
                )
            width = len(target) if isinstance(target, list) else 1
            if targets_width not in (None, width):
                raise BadData(f"line {number}: its target holds {width} values, line 1's {targets_width}")
            targets_width = width
        if fields is None:
            fields = set(doc)
        elif set(doc) != fields:
            raise BadData(f"line {number} has fields {sorted(doc)}, line 1 had {sorted(fields)}")
        samples += 1
    if not samples or fields is None:
        raise BadData("no JSON lines")
    return samples, sorted(fields)


def _values(value: object) -> bool:
    """A target: a finite number, or a flat list of 1..MAX_TARGETS of them."""
    items = value if isinstance(value, list) else [value]
    return 1 <= len(items) <= MAX_TARGETS and all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in items
    )


def _inspect_images(fp: IO[bytes]) -> tuple[int, list[str]]:
    from PIL import Image, UnidentifiedImageError

    try:
        with zipfile.ZipFile(fp) as zf:
            check_archive(zf, MAX_INFLATED_BYTES)
            names = [n for n in zf.namelist() if not n.endswith("/")]
            images = [n for n in names if n.lower().endswith(IMAGE_SUFFIXES)]
            if not images:
                raise BadData("the zip holds no .png/.jpg images")
            for name in images:
                with zf.open(name) as member, Image.open(member) as img:
                    img.verify()  # headers and structure only; decoding happens on the follower
            classes = _labels(zf.read(LABELS_FILE)) if LABELS_FILE in names else None
            labelled = IMAGE_LABELS_FILE in names and bool(_image_truth(zf, images, classes))
    except (BadData, ArchiveTooLarge):
        raise
    except (zipfile.BadZipFile, UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise BadData(f"not a zip of readable images: {exc}") from None
    return len(images), ["image", "label"] if labelled else ["image"]


def _image_truth(zf: zipfile.ZipFile, images: list[str], classes: list[str] | None) -> list[int]:
    """Each image's class from the zip's labels.csv, in the order the images are served (sorted by name), or BadData
    naming the line that is wrong."""
    info = zf.getinfo(IMAGE_LABELS_FILE)
    if info.file_size > MAX_IMAGE_LABELS_BYTES:
        raise BadData(f"{IMAGE_LABELS_FILE}: {info.file_size:,} bytes; at most {MAX_IMAGE_LABELS_BYTES:,}")
    try:
        rows = list(csv.reader(io.StringIO(zf.read(info).decode("utf-8"))))
    except UnicodeDecodeError:
        raise BadData(f"{IMAGE_LABELS_FILE}: not UTF-8 text") from None
    if not rows or [c.strip() for c in rows[0]] != ["file", "label"]:
        raise BadData(f"{IMAGE_LABELS_FILE}: the first line must be the header file,label")
    known, by_name = set(images), {name: i for i, name in enumerate(classes or [])}
    truth: dict[str, int] = {}
    for number, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != 2 or row[0] not in known or row[0] in truth:
            what = "is not an image of the zip" if len(row) == 2 and row[0] not in known else "is not one new file,label pair"
            raise BadData(f"{IMAGE_LABELS_FILE}: line {number} {what}")
        label = row[1].strip()
        if label.isascii() and label.isdigit() and int(label) < MAX_CLASSES:
            truth[row[0]] = int(label)
        elif label in by_name:
            truth[row[0]] = by_name[label]
        else:
            raise BadData(
                f"{IMAGE_LABELS_FILE}: line {number}: {label[:40]!r} is neither a class number below {MAX_CLASSES} nor "
                f"a name in {LABELS_FILE}"
            )
    if missing := [n for n in images if n not in truth]:
        raise BadData(f"{IMAGE_LABELS_FILE}: {len(missing)} images have no label, e.g. {missing[0]}")
    return [truth[n] for n in sorted(images)[:MAX_SAMPLES]]


def load_samples(path: str, data_format: str) -> dict[str, list[np.ndarray]] | list[bytes]:
    """The samples of a stored data set: per field a list of arrays (npz, jsonl), or the encoded images (images)."""
    if data_format in ("npz", "images"):
        with zipfile.ZipFile(path) as archive:
            check_archive(archive, MAX_INFLATED_BYTES)  # again where it is inflated: the follower
    if data_format == "npz":
        with np.load(path, allow_pickle=False) as npz:
            return {key: list(npz[key][:MAX_SAMPLES]) for key in npz.files if key not in TRUTH_FIELDS}
    if data_format == "jsonl":
        return {k: v for k, v in _jsonl_columns(path).items() if k not in TRUTH_FIELDS}
    with zipfile.ZipFile(path) as zf:
        names = sorted(n for n in zf.namelist() if n.lower().endswith(IMAGE_SUFFIXES))[:MAX_SAMPLES]
        return [zf.read(n) for n in names]


def _jsonl_columns(path: str) -> dict[str, list[np.ndarray]]:
    """A stored JSONL set's fields, each a list of one array per sample (at most MAX_SAMPLES)."""
    out: dict[str, list[np.ndarray]] = {}
    with open(path, encoding="utf-8") as fh:
        for _, line in bounded_lines(fh):
            if line.strip() and sum(len(v) for v in out.values()) < MAX_SAMPLES * max(1, len(out)):
                for key, value in json.loads(line).items():
                    out.setdefault(key, []).append(np.asarray(value))
    return out


def load_truth(path: str, data_format: str) -> np.ndarray | None:
    """Each sample's true class (int64, in sample order) where a stored npz or JSONL set carries them (LABEL_FIELDS),
    None where it carries none."""
    if data_format == "npz":
        with zipfile.ZipFile(path) as archive:
            check_archive(archive, MAX_INFLATED_BYTES)
        with np.load(path, allow_pickle=False) as npz:
            key = next((k for k in LABEL_FIELDS if k in npz.files), None)
            return None if key is None else np.asarray(npz[key][:MAX_SAMPLES], dtype=np.int64)
    if data_format == "jsonl":
        columns = _jsonl_columns(path)
        key = next((k for k in LABEL_FIELDS if k in columns), None)
        return None if key is None else np.asarray(columns[key], dtype=np.int64)
    if data_format == "images":
        with zipfile.ZipFile(path) as zf:
            check_archive(zf, MAX_INFLATED_BYTES)
            names = zf.namelist()
            if IMAGE_LABELS_FILE not in names:
                return None
            images = [n for n in names if n.lower().endswith(IMAGE_SUFFIXES) and not n.endswith("/")]
            classes = _labels(zf.read(LABELS_FILE)) if LABELS_FILE in names else None
            return np.asarray(_image_truth(zf, images, classes), dtype=np.int64)
    return None


def load_targets(path: str, data_format: str) -> np.ndarray | None:
    """Each sample's true values ([n, k] float64, in sample order) where a stored npz or JSONL set carries them
    (TARGET_FIELDS), None where it carries none."""
    if data_format == "npz":
        with zipfile.ZipFile(path) as archive:
            check_archive(archive, MAX_INFLATED_BYTES)
        with np.load(path, allow_pickle=False) as npz:
            key = next((k for k in TARGET_FIELDS if k in npz.files), None)
            values = None if key is None else np.asarray(npz[key][:MAX_SAMPLES], dtype=np.float64)
    elif data_format == "jsonl":
        columns = _jsonl_columns(path)
        key = next((k for k in TARGET_FIELDS if k in columns), None)
        values = None if key is None else np.asarray([np.atleast_1d(v) for v in columns[key]], dtype=np.float64)
    else:
        return None
    return None if values is None else values.reshape(len(values), -1)


def _labels(raw: bytes) -> list[str]:
    """The labels of a labels.txt, or BadData saying what is wrong with it."""
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise BadData(f"{LABELS_FILE}: not UTF-8 text") from None
    if not lines or len(lines) > MAX_LABELS:
        raise BadData(f"{LABELS_FILE}: holds {len(lines)} labels; 1 to {MAX_LABELS} (one per line, in class order)")
    long = next((i for i, line in enumerate(lines) if len(line) > MAX_LABEL_CHARS), None)
    if long is not None:
        raise BadData(f"{LABELS_FILE}: line {long + 1} is longer than {MAX_LABEL_CHARS} characters")
    return [line.strip() for line in lines]


def load_labels(path: str, data_format: str) -> list[str] | None:
    """The class labels a stored data set carries (an images set's labels.txt), None when it carries none."""
    if data_format != "images":
        return None
    with zipfile.ZipFile(path) as zf:
        check_archive(zf, MAX_INFLATED_BYTES)
        return _labels(zf.read(LABELS_FILE)) if LABELS_FILE in zf.namelist() else None
