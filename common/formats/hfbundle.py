"""A Hugging Face model directory as one upload (model format "hf": a zip of the directory): checked the same way by
the leader, which describes it at upload, and by the follower, which unpacks it for the server.

Only JSON and the safetensors headers are ever read; nothing in it is executed, and nothing that a server would
execute is accepted: no Python (a config's `auto_map` asks the server to run the repository's code), no pickled
weights (.bin, .pt: loading a pickle runs code), no links, no path that leaves the directory.
"""

from __future__ import annotations

import json
import math
import stat
import struct
import zipfile
from pathlib import Path, PurePosixPath
from typing import IO, Any

from common.formats.ziplimits import ArchiveTooLarge, check_claims, check_ratio
from common.wire.models import LlmParams

CONFIG = "config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")
ALLOWED_SUFFIXES = (".json", ".safetensors", ".txt", ".model", ".jinja", ".md")
CODE_OR_PICKLE = (".py", ".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".so", ".sh")
MAX_MEMBERS = 512
MAX_JSON_BYTES = 64 * 1024 * 1024  # a tokenizer.json is a few MiB; a config far less
MAX_CONFIG_BYTES = 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024 * 1024  # a safetensors header lists tensor names and shapes
# A directory may unpack to at most this many times its upload's size (weights do not compress; a zip bomb does).
UNPACK_FACTOR = 2


def unpack_limit(path: Path) -> int:
    """The most a stored upload at `path` may unpack to."""
    return UNPACK_FACTOR * max(path.stat().st_size, 1)


class HfBundleError(ValueError):
    """The upload is not an acceptable model directory; the message says what is wrong."""


def _members(archive: zipfile.ZipFile, limit_bytes: int) -> tuple[str, list[zipfile.ZipInfo]]:
    """(the directory's prefix in the archive, its files), every name and size checked."""
    infos = [i for i in archive.infolist() if not i.is_dir()]
    if not infos:
        raise HfBundleError("the archive is empty")
    if len(infos) > MAX_MEMBERS:
        raise HfBundleError(f"the archive holds {len(infos)} files; at most {MAX_MEMBERS}")
    try:
        check_claims(archive)
    except ArchiveTooLarge as exc:
        raise HfBundleError(str(exc)) from None
    total = 0
    for info in infos:
        path = PurePosixPath(info.filename)
        if info.filename.startswith("/") or "\\" in info.filename or ".." in path.parts or ":" in info.filename:
            raise HfBundleError(f"{info.filename!r}: paths must stay inside the model directory")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise HfBundleError(f"{info.filename!r}: links are not accepted")
        suffix = path.suffix.lower()
        if suffix in CODE_OR_PICKLE:
            raise HfBundleError(f"{info.filename!r}: code and pickled weights are not accepted (weights as .safetensors)")
        if suffix not in ALLOWED_SUFFIXES:
            raise HfBundleError(f"{info.filename!r}: not a model file ({', '.join(ALLOWED_SUFFIXES)})")
        try:
            check_ratio(info)
        except ArchiveTooLarge as exc:
            raise HfBundleError(str(exc)) from None
        total += info.file_size
        if total > limit_bytes:
            raise HfBundleError(f"the files unpack to more than {limit_bytes} bytes")
    # Files at the archive's root, or all under one folder (a zipped directory).
    tops = {PurePosixPath(i.filename).parts[0] for i in infos}
    prefix = ""
    nested = all(len(PurePosixPath(i.filename).parts) > 1 for i in infos)
    if CONFIG not in {i.filename for i in infos} and len(tops) == 1 and nested:
        prefix = tops.pop() + "/"
    return prefix, infos


def _read(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    if info.file_size > limit:
        raise HfBundleError(f"{info.filename!r} is larger than {limit} bytes")
    with archive.open(info) as member:
        data = member.read(limit + 1)
    if len(data) > limit:
        raise HfBundleError(f"{info.filename!r} is larger than {limit} bytes")
    return data


def _json(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> Any:
    try:
        return json.loads(_read(archive, info, limit))
    except (ValueError, RecursionError) as exc:
        raise HfBundleError(f"{info.filename!r} is not JSON: {exc}") from None


def _tensor_count(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> int:
    """Parameters in one safetensors file, from its header (8-byte length, then JSON of names, dtypes, shapes)."""
    with archive.open(info) as member:
        head = member.read(8)
        if len(head) < 8:
            raise HfBundleError(f"{info.filename!r} is not a safetensors file")
        (length,) = struct.unpack("<Q", head)
        if length > min(MAX_HEADER_BYTES, info.file_size):
            raise HfBundleError(f"{info.filename!r}: its header claims {length} bytes")
        try:
            header = json.loads(member.read(length))
        except (ValueError, RecursionError) as exc:
            raise HfBundleError(f"{info.filename!r}: its header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise HfBundleError(f"{info.filename!r}: its header is not an object")
    count = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise HfBundleError(f"{info.filename!r}: tensor {name!r} has no valid shape")
        count += math.prod(shape)
    return count


def describe(source: IO[bytes] | Path, limit_bytes: int) -> LlmParams:
    """What the model is, read from its config and weight headers; HfBundleError naming what is wrong."""
    try:
        archive = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError) as exc:
        raise HfBundleError(f"not a zip archive of a model directory: {exc}") from None
    with archive:
        prefix, infos = _members(archive, limit_bytes)
        by_name = {i.filename[len(prefix) :]: i for i in infos}
        if CONFIG not in by_name:
            raise HfBundleError(f"the directory has no {CONFIG}")
        if not any(t in by_name for t in TOKENIZER_FILES):
            raise HfBundleError(f"the directory has no tokenizer ({' or '.join(TOKENIZER_FILES)})")
        weights = [i for n, i in by_name.items() if n.endswith(".safetensors")]
        if not weights:
            raise HfBundleError("the directory has no .safetensors weights")
        docs = {
            name: _json(archive, info, MAX_JSON_BYTES)  # every JSON file parses, so the server's loader gets JSON
            for name, info in by_name.items()
            if name.endswith(".json") and name != CONFIG
        }
        tokenizer_config = docs.get("tokenizer_config.json")
        cfg = _json(archive, by_name[CONFIG], MAX_CONFIG_BYTES)
        if not isinstance(cfg, dict):
            raise HfBundleError(f"{CONFIG} must be an object")
        if "auto_map" in cfg:
            raise HfBundleError(f"{CONFIG} names custom code (auto_map): only architectures the server ships are run")
        architectures = cfg.get("architectures")
        if not (isinstance(architectures, list) and architectures and all(isinstance(a, str) for a in architectures)):
            raise HfBundleError(f"{CONFIG} needs `architectures`, a list of class names")

        def number(key: str) -> int | None:
            value = cfg.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

        context = number("max_position_embeddings")
        vocab = number("vocab_size")
        if context is None or vocab is None:
            raise HfBundleError(f"{CONFIG} needs positive integers max_position_embeddings and vocab_size")
        dtype = cfg.get("torch_dtype")
        return LlmParams(
            architecture=architectures[0],
            model_type=str(cfg.get("model_type", "")),
            parameters=sum(_tensor_count(archive, i) for i in weights),
            context_length=context,
            vocab_size=vocab,
            layers=number("num_hidden_layers"),
            hidden=number("hidden_size"),
            dtype=dtype if isinstance(dtype, str) else None,
            chat_template=isinstance(tokenizer_config, dict) and isinstance(tokenizer_config.get("chat_template"), str),
        )


def tokenizer_files(source: IO[bytes] | Path, limit_bytes: int) -> tuple[str, dict[str, Any]]:
    """The directory's tokenizer.json (a fast tokenizer's whole definition: the client counts tokens with it) and its
    tokenizer_config.json ({} when absent: it holds the chat template and the special tokens' names)."""
    with zipfile.ZipFile(source) as archive:
        prefix, infos = _members(archive, limit_bytes)
        by_name = {i.filename[len(prefix) :]: i for i in infos}
        if "tokenizer.json" not in by_name:
            raise HfBundleError("the directory has no tokenizer.json (a fast tokenizer is needed to count tokens)")
        config_info = by_name.get("tokenizer_config.json")
        config = _json(archive, config_info, MAX_JSON_BYTES) if config_info is not None else {}
        text = _read(archive, by_name["tokenizer.json"], MAX_JSON_BYTES).decode("utf-8")
        return text, config if isinstance(config, dict) else {}


def extract(source: IO[bytes] | Path, dest: Path, limit_bytes: int) -> Path:
    """Unpack the checked directory into `dest` (created) and return it: regular files only, each inside `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    with zipfile.ZipFile(source) as archive:
        prefix, infos = _members(archive, limit_bytes)
        for info in infos:
            target = (root / info.filename[len(prefix) :]).resolve()
            if root not in target.parents:
                raise HfBundleError(f"{info.filename!r}: paths must stay inside the model directory")
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as member, open(target, "wb") as out:
                while chunk := member.read(1 << 20):
                    out.write(chunk)
    return root
