"""Numerical checks of a converted model against its source, with the tolerance recorded beside the verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# FP32 graphs re-ordered by an exporter differ in the last bits; these bounds catch real faults, not rounding.
DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-5


@dataclass(frozen=True)
class ConversionCheck:
    """The outcome of comparing a converted model's outputs with the source model's on the same inputs."""

    target: str
    passed: bool
    max_abs_diff: float
    max_rel_diff: float
    rtol: float
    atol: float
    samples: int

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (stored in bundle metadata)."""
        return asdict(self)


class ConversionMismatch(RuntimeError):
    """A converted model's outputs differ from its source's beyond the tolerance (`check`: by how much)."""

    def __init__(self, message: str, check: ConversionCheck) -> None:
        super().__init__(message)
        self.check = check


def compare(
    target: str,
    expected: list[np.ndarray],
    actual: list[np.ndarray],
    *,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    samples: int = 1,
) -> ConversionCheck:
    """Compare output lists elementwise (np.allclose semantics) and record the largest differences."""
    if len(expected) != len(actual):
        return ConversionCheck(target, False, float("inf"), float("inf"), rtol, atol, samples)
    max_abs = max_rel = 0.0
    passed = True
    for e, a in zip(expected, actual, strict=True):
        e = np.asarray(e, dtype=np.float64)
        a = np.asarray(a, dtype=np.float64)
        if e.shape != a.shape:
            return ConversionCheck(target, False, float("inf"), float("inf"), rtol, atol, samples)
        diff = np.abs(e - a)
        max_abs = max(max_abs, float(diff.max(initial=0.0)))
        max_rel = max(max_rel, float((diff / np.maximum(np.abs(e), 1e-12)).max(initial=0.0)))
        passed = passed and bool(np.allclose(a, e, rtol=rtol, atol=atol))
    return ConversionCheck(target, passed, max_abs, max_rel, rtol, atol, samples)


def require(check: ConversionCheck) -> ConversionCheck:
    """Return the check if it passed; raise ConversionMismatch naming the differences otherwise."""
    if not check.passed:
        raise ConversionMismatch(
            f"{check.target} output differs from the source model: max abs {check.max_abs_diff:.3g}, "
            f"max rel {check.max_rel_diff:.3g} (rtol {check.rtol:g}, atol {check.atol:g})",
            check,
        )
    return check
