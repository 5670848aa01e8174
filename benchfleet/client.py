"""Typed Python clients for the leader's REST API: `BenchfleetClient` (sync) here, `AsyncBenchfleetClient` (asyncio)
in benchfleet/client_async.py.

Both send every request as the same `Call` (benchfleet/calls.py) and parse every answer with the same function, so
the two cannot drift: only the transport (httpx.Client or httpx.AsyncClient) differs. What they share is here: the
error a refusal raises and the retry of an unavailable leader.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from benchfleet.calls import Call, Calls, Described, FollowerAction, T
from common.formats.datasets import DataSetMeta
from common.spec.job import JobSpec
from common.wire.analysis import CompareResponse, FleetCheckView, LeaderboardPage, RecommendQuery, RecommendResponse
from common.wire.auth import TokenIssued, TokenView
from common.wire.followers import FollowerView
from common.wire.imports import ImportSummary
from common.wire.jobs import JobFootprint, JobResults, JobView
from common.wire.models import ModelMeta, ModelQuery, ModelUpdate
from common.wire.secrets import SecretView
from common.wire.teams import TeamSettings, TeamView, UsageReport


class ApiError(Exception):
    """An error answer from the leader, with its HTTP status, code and the field it names."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(f"{message} (HTTP {status}{', field ' + field if field else ''})")
        self.status, self.code, self.message, self.field = status, code, message, field


def raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        body: dict[str, Any] = response.json()
    except ValueError:
        body = {"error": "http_error", "message": response.text[:300] or response.reason_phrase}
    if not isinstance(body, dict):
        body = {"error": "http_error", "message": str(body)[:300]}
    message = body.get("message") or body.get("detail") or response.reason_phrase
    raise ApiError(response.status_code, str(body.get("error", "http_error")), str(message), body.get("field"))


# A read the leader answers 503 or 429 with Retry-After (its database unreachable for a moment, or too many reads at
# once) is asked again, at most once a second, until this many seconds have passed since the first try; then the
# answer is raised. A write is never repeated (it may have taken effect before the answer was lost).
UNAVAILABLE_RETRY_S = 30.0


def retry_in(response: httpx.Response, call: Call[Any], started: float, budget_s: float) -> float | None:
    """How long to wait before asking `call` again, or None to take this answer as it is."""
    if response.status_code not in (429, 503) or call.method not in ("GET", "HEAD"):
        return None
    try:
        wait = min(max(float(response.headers["Retry-After"]), 0.1), 1.0)
    except (KeyError, ValueError):
        return None  # a 503 that does not say "retry later" (e.g. a feature the leader has off)
    return wait if time.monotonic() + wait - started <= budget_s else None


class BenchfleetClient:
    """Synchronous client; one per thread of use."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        unavailable_retry_s: float = UNAVAILABLE_RETRY_S,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s, transport=transport
        )
        self._unavailable_retry_s = unavailable_retry_s

    def __enter__(self) -> BenchfleetClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _do(self, call: Call[T]) -> T:
        started = time.monotonic()
        response = self._http.request(call.method, call.path, **call.request_args())
        while (wait := retry_in(response, call, started, self._unavailable_retry_s)) is not None:
            time.sleep(wait)
            response = self._http.request(call.method, call.path, **call.request_args())
        raise_for(response)
        return call.parse(response)

    def health(self) -> dict[str, Any]:
        """The leader's /healthz answer."""
        return self._do(Calls.health())

    def submit_yaml(self, text: str) -> JobView:
        """Submit a job written in YAML."""
        return self._do(Calls.submit_yaml(text))

    def submit(self, spec: JobSpec) -> JobView:
        """Submit a job spec object."""
        return self._do(Calls.submit(spec))

    def jobs(self, *, state: str | None = None, limit: int = 50) -> list[JobView]:
        """Jobs, newest first."""
        return self._do(Calls.jobs(state, limit))

    def job(self, job_id: str) -> JobView:
        """One job with its state and progress."""
        return self._do(Calls.job(job_id))

    def results(self, job_id: str) -> JobResults:
        """A job's point results of its current attempt."""
        return self._do(Calls.results(job_id))

    def progress(self, job_id: str) -> dict[str, Any]:
        """Live per-point progress of a running job."""
        return self._do(Calls.progress(job_id))

    def export(self, job_id: str, format: str = "csv") -> bytes:
        """A job's results as a file (csv, json or parquet; llm-d or mlperf: the reports those tools read, as JSON)."""
        return self._do(Calls.export(job_id, format))

    def cancel(self, job_id: str) -> JobView:
        """Cancel a job that has not ended."""
        return self._do(Calls.cancel(job_id))

    def footprint(self, job_id: str) -> JobFootprint:
        """What a job's data holds in PerfDB, kind by kind."""
        return self._do(Calls.footprint(job_id))

    def delete_job(self, job_id: str) -> JobFootprint:
        """Delete a finished job and all its data; returns what was removed."""
        return self._do(Calls.delete_job(job_id))

    def upload_model(
        self, data: bytes | Path, *, name: str, version: str, format: str = "onnx", described: Described | None = None
    ) -> ModelMeta:
        """Push a model file into the repository (`described`: its signature, description, tags)."""
        content = data.read_bytes() if isinstance(data, Path) else data
        return self._do(Calls.upload_model(content, name, version, format, described))

    def models(self, query: ModelQuery | None = None) -> list[ModelMeta]:
        """The models in the repository (those `query` keeps)."""
        return self._do(Calls.models(query))

    def delete_model(self, name: str, version: str) -> None:
        """Remove a model version."""
        self._do(Calls.delete_model(name, version))

    def update_model(self, name: str, version: str, update: ModelUpdate) -> ModelMeta:
        """Change a model's description, tags (its owner or an admin) or trusted mark (admins)."""
        return self._do(Calls.update_model(name, version, update))

    def upload_data(self, data: bytes | Path, *, name: str, format: str) -> DataSetMeta:
        """Push a request-data set (npz, jsonl, images zip or trace); jobs name it by the returned id."""
        content = data.read_bytes() if isinstance(data, Path) else data
        filename = data.name if isinstance(data, Path) else f"{name}.{format}"
        return self._do(Calls.upload_data(content, name, format, filename))

    def import_files(
        self, files: list[Path], *, tool: str | None = None, name: str | None = None, model: str | None = None
    ) -> ImportSummary:
        """Import another tool's result files (one run) as a job of kind `imported`."""
        return self._do(Calls.import_files({f.name: f.read_bytes() for f in files}, tool, name, model))

    def data_sets(self) -> list[DataSetMeta]:
        """Every stored request-data set."""
        return self._do(Calls.data_sets())

    def delete_data(self, data_id: str) -> None:
        """Remove a request-data set."""
        self._do(Calls.delete_data(data_id))

    def followers(self) -> list[FollowerView]:
        """Registered followers with their state."""
        return self._do(Calls.followers())

    def leaderboard(
        self,
        *,
        sort: str | None = None,
        filters: Mapping[str, str] | Sequence[str] | None = None,
        limit: int | None = None,
        order: str | None = None,
        offset: int | None = None,
    ) -> LeaderboardPage:
        """One page of leaderboard rows, sorted and filtered by the leader, and how many rows match."""
        return self._do(Calls.leaderboard(sort, filters, limit, order, offset))

    def recommend(self, query: RecommendQuery, *, filters: Mapping[str, str] | Sequence[str] | None = None) -> RecommendResponse:
        """The configurations the recommender picks for a query (an SLO, traffic, a budget, a floor), or `missing`."""
        return self._do(Calls.recommend(query, filters))

    def compare(
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
        return self._do(Calls.compare(a, b, threshold, quality_threshold, include_imported))

    def pin_baseline(self, name: str, job_id: str) -> dict[str, str]:
        """Pin a job as the team's named baseline (compare with `baseline:NAME`)."""
        return self._do(Calls.pin_baseline(name, job_id))

    def report(self, job_id: str) -> bytes:
        """The job's self-contained HTML report."""
        return self._do(Calls.report(job_id))

    def follower_action(self, follower_id: str, action: FollowerAction) -> FollowerView:
        """Admins: drain a follower (no new job), resume it, or approve a pending one (it takes jobs from now on)."""
        return self._do(Calls.follower_action(follower_id, action))

    def start_fleet_check(
        self, model: str, *, hardware: str | None = None, rate: float = 50.0, duration_s: float = 10.0
    ) -> FleetCheckView:
        """Start a fleet check (admins): the model's fixed benchmark pinned to every follower of the hardware class."""
        return self._do(Calls.start_fleet_check(model, hardware, rate, duration_s))

    def fleet_check(self, check_id: str) -> FleetCheckView:
        """A fleet check: running, or done with its outliers and their evidence."""
        return self._do(Calls.fleet_check(check_id))

    def create_token(
        self, user: str, role: str, *, team: str | None = None, label: str = "", expires_in_s: int | None = None
    ) -> TokenIssued:
        """Issue a user token (admins); the secret is in the answer only."""
        return self._do(Calls.create_token(user, role, team, label, expires_in_s))

    def tokens(self) -> list[TokenView]:
        """Every token, without secrets (admins)."""
        return self._do(Calls.tokens())

    def revoke_token(self, token_id: str) -> TokenView:
        """Revoke a token at once (admins)."""
        return self._do(Calls.revoke_token(token_id))

    def teams(self) -> list[TeamView]:
        """Every team (yours, unless an admin) with its weight, its fair share and its use of the fleet now."""
        return self._do(Calls.teams())

    def set_team(self, team: str, settings: TeamSettings) -> TeamView:
        """Set a team's settings (admins): its weight, daily quotas and egress allow-list, all three replaced."""
        return self._do(Calls.set_team(team, settings))

    def usage(self, *, by: str = "team", since: str | None = None, until: str | None = None) -> UsageReport:
        """Follower- and GPU-hours with their cost over a period (default: 30 days), by team, user, class or follower."""
        return self._do(Calls.usage(by, since, until))

    def put_secret(self, name: str, value: str, *, kind: str = "header", header: str = "Authorization") -> SecretView:
        """Store a target secret for your team (a header sent to the target, or a CA bundle); never shown again."""
        return self._do(Calls.put_secret(name, value, kind, header))

    def secrets(self) -> list[SecretView]:
        """Your team's target secrets, without values."""
        return self._do(Calls.secrets())

    def delete_secret(self, name: str) -> SecretView:
        """Remove one of your team's target secrets."""
        return self._do(Calls.delete_secret(name))
