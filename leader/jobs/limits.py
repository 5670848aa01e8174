"""The leader's own bounds on a job (configurable, tighter than the schema's): rate, duration, grid size, concurrency;
and the size of one request, which no leader may lift."""

from __future__ import annotations

import asyncio
import contextlib
import math
import weakref
from collections.abc import AsyncIterator

from pymongo.asynchronous.database import AsyncDatabase

from common.errors import InvalidSpec, TooManyRequests
from common.tensors import MAX_REQUEST_ELEMENTS
from common.wire.models import TensorSpec, request_elements
from leader.auth.tokens import Principal
from leader.jobplan import JobPlan
from leader.settings import LeaderSettings
from leader.store import jobs as jobs_store


def _over(value: float | None, limit: float) -> bool:
    return value is not None and value > limit


def check_spec_limits(plan: JobPlan, settings: LeaderSettings) -> None:
    """422 naming the first field over this leader's limits (a shared service must not run one user's day-long job), or
    the duration too short for its points to hold a p99."""
    load, unit_rate, unit_s = plan.spec.load, "req/s", "s"
    search, stability = load.search, load.stability
    # (field, value, this leader's limit, unit) of every bounded figure of the load
    bounded: list[tuple[str, float | None, float, str]] = [
        ("load.rate", max(load.rate or [0.0]), settings.max_rate, unit_rate),
        ("load.rate_end", load.rate_end, settings.max_rate, unit_rate),
        ("load.spike_rate", load.spike_rate, settings.max_rate, unit_rate),
        ("load.search.high", search.high if search else None, settings.max_rate, unit_rate),
        ("load.duration", load.duration, settings.max_duration_s, unit_s),
        ("load.warmup", load.warmup, settings.max_duration_s, unit_s),
        ("load.stability.max_duration", stability.max_duration if stability else None, settings.max_duration_s, unit_s),
        ("load.max_concurrency", load.max_concurrency, settings.max_concurrency, ""),
        ("load.concurrency", max(load.concurrency or [0]), settings.max_concurrency, ""),
    ]
    for field, value, limit, unit in bounded:
        if _over(value, limit):
            raise InvalidSpec(
                f"{value:g}{' ' + unit if unit else ''} is over this leader's limit of {limit:g}"
                f"{' ' + unit if unit == unit_s else ''}",
                field=field,
            )
    points = len(plan.points)
    if points > settings.max_points:
        raise InvalidSpec(
            f"the grid expands to {points} points; this leader runs at most {settings.max_points} per job",
            field="batch_sizes",
        )
    sessions = plan.spec.llm.sessions if plan.spec.llm is not None else None
    # A session's turns are its requests (a session trace is replayed as recorded: not sized here).
    per_arrival = sessions.turns.expected if sessions is not None and not sessions.from_trace else 1.0
    # A point invalid by construction is refused, saying what would do.
    if (shortfall := load.p99_shortfall(per_arrival)) is not None:
        raise InvalidSpec(shortfall, field="load.duration")


def check_request_size(plan: JobPlan, inputs: list[TensorSpec], ref: str) -> None:
    """422 naming batch_sizes when one request of a point would carry more values than a request may
    (MAX_REQUEST_ELEMENTS): the follower builds its bodies before the run, and is not made to build that."""
    if not inputs:
        return
    per_sample = request_elements(inputs, 1)
    for batch in sorted({p.batch_size for p in plan.points}):
        if (n := request_elements(inputs, batch)) > MAX_REQUEST_ELEMENTS:
            most = MAX_REQUEST_ELEMENTS // per_sample
            raise InvalidSpec(
                f"a request of batch {batch} to {ref} holds {n:,} values; a request may hold at most "
                f"{MAX_REQUEST_ELEMENTS:,} (batch sizes up to {most} fit)",
                field="batch_sizes",
            )


RETRY_AFTER_IDLE_S = 30  # the queue cap's Retry-After when nothing runs (jobs are being placed)

# One lock per (event loop, user): the count and the insert of a submission happen under it, so two concurrent
# submissions of one user cannot both pass the check. The leader is one process (uvicorn workers=1), so an
# in-process lock makes admission atomic; weak values drop a user's lock once no submission holds it.
_ADMISSION: weakref.WeakValueDictionary[tuple[int, str], asyncio.Lock] = weakref.WeakValueDictionary()


def _capped(settings: LeaderSettings, principal: Principal) -> bool:
    """Whether max_waiting_per_user applies to this principal (0 = no cap; admins exempt unless limit_admins)."""
    return settings.max_waiting_per_user > 0 and not (principal.is_admin and not settings.limit_admins)


@contextlib.asynccontextmanager
async def queue_admission(
    db: AsyncDatabase, settings: LeaderSettings, principal: Principal, *, adding: int = 1
) -> AsyncIterator[None]:
    """Hold the user's admission lock while checking the cap and (in the body) inserting the job(s)."""
    if not _capped(settings, principal):
        yield  # no cap to keep: an exempt admin's submissions are not serialised
        return
    key = (id(asyncio.get_running_loop()), principal.user)
    lock = _ADMISSION.get(key)
    if lock is None:
        lock = _ADMISSION[key] = asyncio.Lock()
    async with lock:
        await check_queue_limit(db, settings, principal, adding=adding)
        yield


async def check_queue_limit(db: AsyncDatabase, settings: LeaderSettings, principal: Principal, *, adding: int = 1) -> None:
    """429 when the user's waiting jobs plus the `adding` this submission creates would pass max_waiting_per_user.

    Admins are exempt unless limit_admins. A split job adds its parts (each waits and runs as a job of its own).
    """
    limit = settings.max_waiting_per_user
    if not _capped(settings, principal):
        return
    waiting = await jobs_store.count_waiting(db, owner=principal.user)
    if waiting + adding > limit:
        what = f"this job splits into {adding} parts, each a waiting job; " if adding > 1 else ""
        # Retry-After: when the first running job should end and a waiting one start (a hint, clamped to [5, 600] s).
        soonest = await jobs_store.soonest_finish_s(db)
        retry_after = RETRY_AFTER_IDLE_S if soonest is None else min(600, max(5, math.ceil(soonest)))
        raise TooManyRequests(
            f"{what}user {principal.user} already has {waiting} jobs waiting to run; this leader allows {limit} per user "
            "(max_waiting_per_user): submit again when some have started"
            + (" (or ask for fewer parts: split.max_parts)" if adding > 1 else ""),
            field="max_waiting_per_user",
            retry_after_s=retry_after,
        )
