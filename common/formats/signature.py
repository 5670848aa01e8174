"""Compare a model's input signature with what a job expects (leader at submit, follower before serving)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class _Tensor(Protocol):
    """What is compared of a tensor (read-only, as a frozen TensorSpec has it)."""

    @property
    def name(self) -> str: ...

    @property
    def datatype(self) -> str: ...

    @property
    def shape(self) -> list[int]: ...


def _fits(expected: Sequence[int], actual: Sequence[int]) -> bool:
    """Same rank, and every dimension equal or dynamic (-1) on either side."""
    return len(expected) == len(actual) and all(e == a or e == -1 or a == -1 for e, a in zip(expected, actual, strict=True))


def input_mismatches(expected: Sequence[_Tensor | dict[str, Any]], actual: Sequence[_Tensor]) -> list[str]:
    """Human-readable differences between expected and actual inputs; [] when they agree."""
    have = {t.name: t for t in actual}
    problems: list[str] = []
    want_names = []
    for item in expected:
        name, datatype, shape = (
            (item["name"], item["datatype"], item["shape"]) if isinstance(item, dict) else (item.name, item.datatype, item.shape)
        )
        want_names.append(name)
        got = have.get(name)
        if got is None:
            problems.append(f"input {name!r} is missing; the model's inputs are {sorted(have)}")
            continue
        if got.datatype != datatype:
            problems.append(f"input {name!r}: datatype {got.datatype}, expected {datatype}")
        if not _fits(shape, got.shape):
            problems.append(f"input {name!r}: shape {got.shape}, expected {list(shape)}")
    extra = sorted(set(have) - set(want_names))
    if extra:
        problems.append(f"the model takes inputs the job does not provide: {extra}")
    return problems
