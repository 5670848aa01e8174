"""The roofline and the cost table as data: achieved FLOP/s against arithmetic intensity under each device's ceiling,
and cost, energy and CO2 per hardware class. `leader/web` draws them."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from leader.analysis import flops, hardware
from leader.analysis.queries import model_cost
from leader.store.rowbest import samples_per_s

Series = tuple[str, Sequence[float | None], Sequence[float | None]]


@dataclass(frozen=True)
class Roofline:
    """Measured series (one per model and device) and each device's roof over the measured intensities and the ridge
    points (a quarter of the least to four times the most): the bandwidth slope to the ridge point, then the flat."""

    measured: list[Series]
    ceilings: list[Series]


async def roofline(db: Any, rows: list[dict[str, Any]]) -> Roofline:
    """The valid rows of models whose compute cost is known, placed on the roofline of the devices they ran on."""
    costs: dict[str, flops.ModelCost | None] = {}
    series: dict[str, tuple[list[float], list[float]]] = {}
    devices: set[str] = set()
    for row in rows:
        if not row.get("valid") or not row.get("throughput"):
            continue
        model = row["model"]
        if model not in costs:
            costs[model] = await model_cost(db, model)
        cost = costs[model]
        if cost is None:
            continue
        batch = max(1, row["batch_size"])
        achieved = row["throughput"] * batch * cost.flops_per_sample
        # Per batch: the weights are read once, the FLOPs scale with the batch.
        intensity = cost.flops_per_sample * batch / cost.weight_bytes
        name, _ = hardware.ceiling_for(row["hardware"])
        devices.add(name)
        xs, ys = series.setdefault(f"{model} on {name}", ([], []))
        xs.append(intensity)
        ys.append(achieved)
    if not series:
        return Roofline([], [])
    # The roof spans the measured intensities and each device's ridge point, so its slope and its flat both show.
    spanned = [x for xs, _ in series.values() for x in xs] + [ridge_point(name) for name in devices]
    low, high = min(spanned) / 4, max(spanned) * 4
    ceilings = [roof(name, low, high) for name in sorted(devices)]
    return Roofline([(label, xs, ys) for label, (xs, ys) in series.items()], ceilings)


def ridge_point(device: str) -> float:
    """The intensity (FLOP/byte) where a device's bandwidth slope meets its compute flat."""
    c = hardware.HARDWARE.get(device, hardware.CPU_DEFAULT)
    return c.fp32_flops / c.bandwidth


def roof(device: str, low: float, high: float) -> Series:
    """A device's FP32 roof from intensity `low` to `high`: the bandwidth slope up to the ridge point (where it meets
    the compute flat), then the flat; drawn as straight lines between these corners on log axes, exact."""
    c = hardware.HARDWARE.get(device, hardware.CPU_DEFAULT)
    ridge = ridge_point(device)
    xs = [low, *([ridge] if low < ridge < high else []), high]
    return f"ceiling {device}", xs, [min(c.fp32_flops, c.bandwidth * x) for x in xs]


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def cost_by_hardware(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per hardware class: points, the most samples/s one point served, and mean energy, CO2 and cost per 1M requests
    (None: not measured)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["hardware"], []).append(r)
    return [
        {
            "hardware": hw,
            "points": len(rs),
            "samples_per_s": max((samples_per_s(r) or 0.0) for r in rs),
            "energy": _mean([r["energy_wh_per_1m"] for r in rs if r.get("energy_wh_per_1m") is not None]),
            "co2": _mean([r["co2_g_per_1m"] for r in rs if r.get("co2_g_per_1m") is not None]),
            "cost": _mean([r["cost_usd_per_1m"] for r in rs if r.get("cost_usd_per_1m") is not None]),
        }
        for hw, rs in sorted(groups.items())
    ]
