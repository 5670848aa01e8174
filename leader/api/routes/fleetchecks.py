"""Fleet checks: the same fixed benchmark pinned to every follower of a hardware class, and who stands out."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field

from common.base import NAME_PATTERN, VERSION_PATTERN
from common.wire.analysis import FleetCheckView
from leader.api.deps import Admin, Db, PlacerDep, SettingsDep, Viewer
from leader.jobs import fleetcheck
from leader.store import models as models_store

router = APIRouter(prefix="/fleet-checks", tags=["followers"])


class FleetCheckBody(BaseModel):
    """What a fleet check runs: an ONNX model, at a light constant rate, on every follower of a class."""

    model: Annotated[str, Field(pattern=NAME_PATTERN[:-1] + ":" + VERSION_PATTERN[1:])]
    """The model, name:version (an ONNX model; every follower serves it with ONNX Runtime at batch 1)."""
    hardware: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    """The hardware class: followers whose CPU model or a GPU's name holds this (case-insensitive); unset: every one."""
    rate: Annotated[float, Field(gt=0, le=10_000)] = 50.0
    """The constant rate in requests/s (light: the check measures the machine, not its capacity)."""
    duration_s: Annotated[float, Field(ge=2, le=600)] = 10.0
    """How long each follower measures, after a 2 s warm-up."""


@router.post("", status_code=201, response_model=FleetCheckView)
async def create(body: FleetCheckBody, db: Db, placer: PlacerDep, admin: Admin) -> FleetCheckView:
    """Start a fleet check: one job per available follower of the class, each pinned to its follower (422 naming
    `hardware` when fewer than three followers match: a median of two cannot say which one is odd)."""
    name, version = body.model.split(":", 1)
    model = await models_store.get_model(db, name=name, version=version, field="model", team=admin.scope)
    check = await fleetcheck.create(
        db, model=model, hardware=body.hardware, rate=body.rate, duration_s=body.duration_s, owner=admin.user
    )
    placer.nudge()
    return check


@router.get("/{check_id}", response_model=FleetCheckView)
async def get(
    check_id: Annotated[str, Path(pattern=r"^[0-9a-f]{12}$")], db: Db, settings: SettingsDep, viewer: Viewer
) -> FleetCheckView:
    """A fleet check: running, or done with the test across followers, each one's history and the outliers."""
    return await fleetcheck.get(db, check_id=check_id, drain=settings.fleetcheck_drain)
