"""Compute and memory-bandwidth ceilings per device, for the roofline (vendor datasheet peaks, dense)."""

from __future__ import annotations

from typing import NamedTuple


class Ceiling(NamedTuple):
    """Peak dense FP32 (and FP16 tensor) FLOP/s and memory bandwidth in bytes/s."""

    fp32_flops: float
    fp16_flops: float
    bandwidth: float


# Datasheet figures (dense, no sparsity). Matched by substring of the reported device name.
HARDWARE: dict[str, Ceiling] = {
    "H200": Ceiling(67e12, 989e12, 4.8e12),
    "H100": Ceiling(67e12, 989e12, 3.35e12),
    "A100": Ceiling(19.5e12, 312e12, 2.0e12),
    "L40S": Ceiling(91.6e12, 362e12, 0.864e12),
    "L4": Ceiling(30.3e12, 121e12, 0.3e12),
    "A10": Ceiling(31.2e12, 125e12, 0.6e12),
    "T4": Ceiling(8.1e12, 65e12, 0.32e12),
    "V100": Ceiling(15.7e12, 125e12, 0.9e12),
}
# A CPU host without a table entry: a modest server core count (the roofline is indicative only there).
CPU_DEFAULT = Ceiling(1.0e12, 1.0e12, 0.1e12)


def ceiling_for(hardware: str) -> tuple[str, Ceiling]:
    """The table entry whose name appears in the device name, else the generic CPU entry."""
    upper = hardware.upper()
    for name in sorted(HARDWARE, key=len, reverse=True):
        if name in upper:
            return name, HARDWARE[name]
    return "CPU (generic)", CPU_DEFAULT
