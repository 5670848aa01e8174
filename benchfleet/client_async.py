"""The asyncio client of the leader's REST API: the same methods as `BenchfleetClient` (benchfleet/client.py), as
coroutines, each sending the same `Call` (benchfleet/calls.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from benchfleet.calls import Call, Calls, Described, FollowerAction, T
from benchfleet.client import UNAVAILABLE_RETRY_S, raise_for, retry_in
from common.formats.datasets import DataSetMeta
from common.spec.job import JobSpec
from common.wire.analysis import CompareResponse, FleetCheckView, LeaderboardPage, RecommendQuery, RecommendResponse
from common.wire.auth import TokenIssued, TokenView
from common.wire.followers import FollowerView
from common.wire.imports import ImportSummary
from common.wire.jobs import JobFootprint, JobResults, JobView
from common.wire.models import ModelMeta, ModelQuery, ModelUpdate
from common.wire.secrets import SecretView


class AsyncBenchfleetClient:
    """Asyncio client with the same methods as `BenchfleetClient`, as coroutines."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        unavailable_retry_s: float = UNAVAILABLE_RETRY_S,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s, transport=transport
        )
        self._unavailable_retry_s = unavailable_retry_s

    async def __aenter__(self) -> AsyncBenchfleetClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _do(self, call: Call[T]) -> T:
        started = time.monotonic()
        response = await self._http.request(call.method, call.path, **call.request_args())
        while (wait := retry_in(response, call, started, self._unavailable_retry_s)) is not None:
            await asyncio.sleep(wait)
            response = await self._http.request(call.method, call.path, **call.request_args())
        raise_for(response)
        return call.parse(response)

    async def health(self) -> dict[str, Any]:
        """The leader's /healthz answer."""
        return await self._do(Calls.health())

    async def submit_yaml(self, text: str) -> JobView:
        """Submit a job written in YAML."""
        return await self._do(Calls.submit_yaml(text))

    async def submit(self, spec: JobSpec) -> JobView:
        """Submit a job spec object."""
        return await self._do(Calls.submit(spec))

    async def jobs(self, *, state: str | None = None, limit: int = 50) -> list[JobView]:
        """Jobs, newest first."""
        return await self._do(Calls.jobs(state, limit))

    async def job(self, job_id: str) -> JobView:
        """One job with its state and progress."""
        return await self._do(Calls.job(job_id))

    async def results(self, job_id: str) -> JobResults:
        """A job's point results of its current attempt."""
        return await self._do(Calls.results(job_id))

    async def progress(self, job_id: str) -> dict[str, Any]:
        """Live per-point progress of a running job."""
        return await self._do(Calls.progress(job_id))

    async def export(self, job_id: str, format: str = "csv") -> bytes:
        """A job's results as a file (csv, json or parquet; llm-d or mlperf: the reports those tools read, as JSON)."""
        return await self._do(Calls.export(job_id, format))

    async def cancel(self, job_id: str) -> JobView:
        """Cancel a job that has not ended."""
        return await self._do(Calls.cancel(job_id))

    async def delete_job(self, job_id: str) -> JobFootprint:
        """Delete a finished job and all its data; returns what was removed."""
        return await self._do(Calls.delete_job(job_id))

    async def upload_model(
        self, data: bytes | Path, *, name: str, version: str, format: str = "onnx", described: Described | None = None
    ) -> ModelMeta:
        """Push a model file into the repository; `described`: signature (JSON), description, tags (Calls.upload_model)."""
        content = data.read_bytes() if isinstance(data, Path) else data
        return await self._do(Calls.upload_model(content, name, version, format, described))

    async def models(self, query: ModelQuery | None = None) -> list[ModelMeta]:
        """The models in the repository (those `query` keeps)."""
        return await self._do(Calls.models(query))

    async def delete_model(self, name: str, version: str) -> None:
        """Remove a model version."""
        await self._do(Calls.delete_model(name, version))

    async def update_model(self, name: str, version: str, update: ModelUpdate) -> ModelMeta:
        """Change a model's description, tags (its owner or an admin) or trusted mark (admins)."""
        return await self._do(Calls.update_model(name, version, update))

    async def upload_data(self, data: bytes | Path, *, name: str, format: str) -> DataSetMeta:
        """Push a request-data set (npz, jsonl, images zip or trace); jobs name it by the returned id."""
        content = data.read_bytes() if isinstance(data, Path) else data
        filename = data.name if isinstance(data, Path) else f"{name}.{format}"
        return await self._do(Calls.upload_data(content, name, format, filename))

    async def import_files(
        self, files: list[Path], *, tool: str | None = None, name: str | None = None, model: str | None = None
    ) -> ImportSummary:
        """Import another tool's result files (one run) as a job of kind `imported`."""
        return await self._do(Calls.import_files({f.name: f.read_bytes() for f in files}, tool, name, model))

    async def data_sets(self) -> list[DataSetMeta]:
        """Every stored request-data set."""
        return await self._do(Calls.data_sets())

    async def delete_data(self, data_id: str) -> None:
        """Remove a request-data set."""
        await self._do(Calls.delete_data(data_id))

    async def followers(self) -> list[FollowerView]:
        """Registered followers with their state."""
        return await self._do(Calls.followers())

    async def leaderboard(
        self,
        *,
        sort: str | None = None,
        filters: Mapping[str, str] | Sequence[str] | None = None,
        limit: int | None = None,
        order: str | None = None,
        offset: int | None = None,
    ) -> LeaderboardPage:
        """One page of leaderboard rows, sorted and filtered by the leader, and how many rows match."""
        return await self._do(Calls.leaderboard(sort, filters, limit, order, offset))

    async def recommend(
        self, query: RecommendQuery, *, filters: Mapping[str, str] | Sequence[str] | None = None
    ) -> RecommendResponse:
        """The configurations the recommender picks for a query (an SLO, traffic, a budget, a floor), or `missing`."""
        return await self._do(Calls.recommend(query, filters))

    async def compare(
        self,
        a: str,
        b: str,
        *,
        threshold: float | None = None,
        quality_threshold: float | None = None,
        include_imported: bool = False,
    ) -> CompareResponse:
        """Job (or `baseline:NAME`) b against a, point by point; `regressions`: latency and accuracy regressions;
        `include_imported`: judge points another tool measured too."""
        return await self._do(Calls.compare(a, b, threshold, quality_threshold, include_imported))

    async def pin_baseline(self, name: str, job_id: str) -> dict[str, str]:
        """Pin a job as the team's named baseline (compare with `baseline:NAME`)."""
        return await self._do(Calls.pin_baseline(name, job_id))

    async def report(self, job_id: str) -> bytes:
        """The job's self-contained HTML report."""
        return await self._do(Calls.report(job_id))

    async def follower_action(self, follower_id: str, action: FollowerAction) -> FollowerView:
        """Admins: drain a follower (no new job), resume it, or approve a pending one (it takes jobs from now on)."""
        return await self._do(Calls.follower_action(follower_id, action))

    async def start_fleet_check(
        self, model: str, *, hardware: str | None = None, rate: float = 50.0, duration_s: float = 10.0
    ) -> FleetCheckView:
        """Start a fleet check (admins): the model's fixed benchmark pinned to every follower of the hardware class."""
        return await self._do(Calls.start_fleet_check(model, hardware, rate, duration_s))

    async def fleet_check(self, check_id: str) -> FleetCheckView:
        """A fleet check: running, or done with its outliers and their evidence."""
        return await self._do(Calls.fleet_check(check_id))

    async def create_token(
        self, user: str, role: str, *, team: str | None = None, label: str = "", expires_in_s: int | None = None
    ) -> TokenIssued:
        """Issue a user token (admins); the secret is in the answer only."""
        return await self._do(Calls.create_token(user, role, team, label, expires_in_s))

    async def tokens(self) -> list[TokenView]:
        """Every token, without secrets (admins)."""
        return await self._do(Calls.tokens())

    async def revoke_token(self, token_id: str) -> TokenView:
        """Revoke a token at once (admins)."""
        return await self._do(Calls.revoke_token(token_id))

    async def put_secret(self, name: str, value: str, *, kind: str = "header", header: str = "Authorization") -> SecretView:
        """Store a target secret for your team (a header sent to the target, or a CA bundle); never shown again."""
        return await self._do(Calls.put_secret(name, value, kind, header))

    async def secrets(self) -> list[SecretView]:
        """Your team's target secrets, without values."""
        return await self._do(Calls.secrets())

    async def delete_secret(self, name: str) -> SecretView:
        """Remove one of your team's target secrets."""
        return await self._do(Calls.delete_secret(name))
