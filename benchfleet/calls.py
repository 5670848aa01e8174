"""Every endpoint of the leader's REST API as a `Call`: the request to make and how to read its answer. The sync and
async clients (benchfleet/client.py) both send these, so the two cannot drift."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import httpx
from pydantic import TypeAdapter

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

T = TypeVar("T")
FollowerAction = Literal["drain", "resume", "approve"]  # what an admin does to a follower (POST followers/ID/ACTION)

API = "/api/v1"
# The leader's exports: flat rows (csv, json, parquet), or the reports other tools read (llm-d v0.2, LoadGen's summary).
EXPORT_FORMATS = ("csv", "json", "parquet", "llm-d", "mlperf")


def _query_params(query: ModelQuery) -> dict[str, Any]:
    """A model search as the API's query parameters."""
    named = {"text": "q", "tags": "tag"}
    return {named.get(k, k): v for k, v in query.model_dump(exclude_none=True).items() if v != []}


def _json(response: httpx.Response) -> Any:
    return response.json()


def _none(response: httpx.Response) -> None:
    return None


def _bytes(response: httpx.Response) -> bytes:
    return response.content


def _model(adapter: TypeAdapter[T]) -> Callable[[httpx.Response], T]:
    return lambda response: adapter.validate_python(response.json())


_JOB = _model(TypeAdapter(JobView))
_CHECK = _model(TypeAdapter(FleetCheckView))
_JOBS = _model(TypeAdapter(list[JobView]))
_RESULTS = _model(TypeAdapter(JobResults))
_MODEL = _model(TypeAdapter(ModelMeta))
_MODELS = _model(TypeAdapter(list[ModelMeta]))
_DATASET = _model(TypeAdapter(DataSetMeta))
_IMPORT = _model(TypeAdapter(ImportSummary))
_DATASETS = _model(TypeAdapter(list[DataSetMeta]))
_FOLLOWERS = _model(TypeAdapter(list[FollowerView]))
_FOLLOWER = _model(TypeAdapter(FollowerView))
_LEADERBOARD = _model(TypeAdapter(LeaderboardPage))
_RECOMMEND = _model(TypeAdapter(RecommendResponse))
_COMPARE = _model(TypeAdapter(CompareResponse))
_TOKEN = _model(TypeAdapter(TokenView))
_TOKENS = _model(TypeAdapter(list[TokenView]))
_SECRET = _model(TypeAdapter(SecretView))
_SECRETS = _model(TypeAdapter(list[SecretView]))
_ISSUED = _model(TypeAdapter(TokenIssued))
_PINNED = _model(TypeAdapter(dict[str, str]))


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API request and how to read its answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Mapping[str, Any] = field(default_factory=dict)
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def request_args(self) -> dict[str, Any]:
        params = {k: v for k, v in self.params.items() if v is not None}
        return {"params": params, **self.kwargs}


def _filters(filters: Mapping[str, str] | Sequence[str] | None) -> list[str] | None:
    """`{"backend": "triton"}` or raw expressions (`backend=triton`, `p99<20`) as repeated `filter` parameters."""
    if not filters:
        return None
    if isinstance(filters, Mapping):
        return [f"{key}={value}" for key, value in filters.items()]
    return list(filters)


def _upload(path: str, parse: Callable[[httpx.Response], T], content: bytes, filename: str, **fields: str) -> Call[T]:
    """A multipart upload: the file's bytes beside its form fields."""
    files = {"file": (filename, content, "application/octet-stream")}
    return Call("POST", path, parse, kwargs={"data": fields, "files": files})


@dataclass(frozen=True)
class Described:
    """What an upload says of a model besides its bytes: its signature as JSON (for a format the leader does not read
    it from: torchscript, savedmodel), a description, tags."""

    signature: str | None = None
    description: str | None = None
    tags: Sequence[str] = ()

    def fields(self) -> dict[str, str]:
        """The upload's form fields, those given."""
        given = {"signature": self.signature, "description": self.description, "tags": ",".join(self.tags)}
        return {k: v for k, v in given.items() if v}


class Calls:
    """Every endpoint as a `Call`; shared by the sync and async clients."""

    @staticmethod
    def health() -> Call[dict[str, Any]]:
        return Call("GET", "/healthz", _json)

    @staticmethod
    def submit_yaml(text: str) -> Call[JobView]:
        headers = {"Content-Type": "application/yaml"}
        return Call("POST", f"{API}/jobs", _JOB, kwargs={"content": text.encode(), "headers": headers})

    @staticmethod
    def submit(spec: JobSpec) -> Call[JobView]:
        body = spec.model_dump_json()
        return Call("POST", f"{API}/jobs", _JOB, kwargs={"content": body, "headers": {"Content-Type": "application/json"}})

    @staticmethod
    def jobs(state: str | None, limit: int) -> Call[list[JobView]]:
        return Call("GET", f"{API}/jobs", _JOBS, params={"state": state, "limit": limit})

    @staticmethod
    def job(job_id: str) -> Call[JobView]:
        return Call("GET", f"{API}/jobs/{job_id}", _JOB)

    @staticmethod
    def results(job_id: str) -> Call[JobResults]:
        return Call("GET", f"{API}/jobs/{job_id}/results", _RESULTS)

    @staticmethod
    def progress(job_id: str) -> Call[dict[str, Any]]:
        return Call("GET", f"{API}/jobs/{job_id}/progress", _json)

    @staticmethod
    def export(job_id: str, format: str) -> Call[bytes]:
        return Call("GET", f"{API}/jobs/{job_id}/export", _bytes, params={"format": format})

    @staticmethod
    def cancel(job_id: str) -> Call[JobView]:
        return Call("POST", f"{API}/jobs/{job_id}/cancel", _JOB)

    @staticmethod
    def footprint(job_id: str) -> Call[JobFootprint]:
        return Call("GET", f"{API}/jobs/{job_id}/footprint", _model(TypeAdapter(JobFootprint)))

    @staticmethod
    def delete_job(job_id: str) -> Call[JobFootprint]:
        return Call("DELETE", f"{API}/jobs/{job_id}", _model(TypeAdapter(JobFootprint)))

    @staticmethod
    def upload_model(content: bytes, name: str, version: str, format: str, described: Described | None = None) -> Call[ModelMeta]:
        fields = {"name": name, "version": version, "format": format, **(described.fields() if described else {})}
        return _upload(f"{API}/models", _MODEL, content, f"{name}.{format}", **fields)

    @staticmethod
    def models(query: ModelQuery | None = None) -> Call[list[ModelMeta]]:
        params = _query_params(query) if query is not None else {}
        return Call("GET", f"{API}/models", _MODELS, kwargs={"params": params})

    @staticmethod
    def delete_model(name: str, version: str) -> Call[None]:
        return Call("DELETE", f"{API}/models/{name}/{version}", _none)

    @staticmethod
    def update_model(name: str, version: str, update: ModelUpdate) -> Call[ModelMeta]:
        return Call("PATCH", f"{API}/models/{name}/{version}", _MODEL, kwargs={"json": update.model_dump(exclude_none=True)})

    @staticmethod
    def upload_data(content: bytes, name: str, format: str, filename: str) -> Call[DataSetMeta]:
        return _upload(f"{API}/data", _DATASET, content, filename, name=name, format=format)

    @staticmethod
    def import_files(files: Mapping[str, bytes], tool: str | None, name: str | None, model: str | None) -> Call[ImportSummary]:
        parts = [("file", (filename, content, "application/octet-stream")) for filename, content in files.items()]
        fields = {k: v for k, v in (("tool", tool), ("name", name), ("model", model)) if v}
        return Call("POST", f"{API}/imports", _IMPORT, kwargs={"data": fields, "files": parts})

    @staticmethod
    def data_sets() -> Call[list[DataSetMeta]]:
        return Call("GET", f"{API}/data", _DATASETS)

    @staticmethod
    def delete_data(data_id: str) -> Call[None]:
        return Call("DELETE", f"{API}/data/{data_id}", _none)

    @staticmethod
    def followers() -> Call[list[FollowerView]]:
        return Call("GET", f"{API}/followers", _FOLLOWERS)

    @staticmethod
    def leaderboard(
        sort: str | None,
        filters: Mapping[str, str] | Sequence[str] | None,
        limit: int | None,
        order: str | None = None,
        offset: int | None = None,
    ) -> Call[LeaderboardPage]:
        params = {"sort": sort, "order": order, "filter": _filters(filters), "limit": limit, "offset": offset}
        return Call("GET", f"{API}/leaderboard", _LEADERBOARD, params=params)

    @staticmethod
    def recommend(query: RecommendQuery, filters: Mapping[str, str] | Sequence[str] | None) -> Call[RecommendResponse]:
        asked = query.model_dump(exclude_none=True, exclude_defaults=True)
        params = {**asked, "filter": _filters(filters)} | ({"confident": "true"} if query.confident else {})
        return Call("GET", f"{API}/recommend", _RECOMMEND, params=params)

    @staticmethod
    def compare(
        a: str, b: str, threshold: float | None, quality_threshold: float | None = None, include_imported: bool = False
    ) -> Call[CompareResponse]:
        params = {"a": a, "b": b, "threshold": threshold, "quality_threshold": quality_threshold}
        params |= {"include_imported": "true"} if include_imported else {}
        return Call("GET", f"{API}/compare", _COMPARE, params=params)

    @staticmethod
    def pin_baseline(name: str, job_id: str) -> Call[dict[str, str]]:
        return Call("PUT", f"{API}/baselines/{name}", _PINNED, kwargs={"json": {"job_id": job_id}})

    @staticmethod
    def report(job_id: str) -> Call[bytes]:
        return Call("GET", f"{API}/jobs/{job_id}/report.html", _bytes)

    @staticmethod
    def follower_action(follower_id: str, action: FollowerAction) -> Call[FollowerView]:
        return Call("POST", f"{API}/followers/{follower_id}/{action}", _FOLLOWER)

    @staticmethod
    def start_fleet_check(model: str, hardware: str | None, rate: float, duration_s: float) -> Call[FleetCheckView]:
        body = {"model": model, "rate": rate, "duration_s": duration_s} | ({"hardware": hardware} if hardware else {})
        return Call("POST", f"{API}/fleet-checks", _CHECK, kwargs={"json": body})

    @staticmethod
    def fleet_check(check_id: str) -> Call[FleetCheckView]:
        return Call("GET", f"{API}/fleet-checks/{check_id}", _CHECK)

    @staticmethod
    def create_token(user: str, role: str, team: str | None, label: str, expires_in_s: int | None) -> Call[TokenIssued]:
        body: dict[str, Any] = {"user": user, "role": role, "label": label}
        body |= ({"team": team} if team else {}) | ({"expires_in_s": expires_in_s} if expires_in_s is not None else {})
        return Call("POST", f"{API}/tokens", _ISSUED, kwargs={"json": body})

    @staticmethod
    def tokens() -> Call[list[TokenView]]:
        return Call("GET", f"{API}/tokens", _TOKENS)

    @staticmethod
    def revoke_token(token_id: str) -> Call[TokenView]:
        return Call("DELETE", f"{API}/tokens/{token_id}", _TOKEN)

    @staticmethod
    def teams() -> Call[list[TeamView]]:
        return Call("GET", f"{API}/teams", _model(TypeAdapter(list[TeamView])))

    @staticmethod
    def set_team(team: str, settings: TeamSettings) -> Call[TeamView]:
        return Call("PUT", f"{API}/teams/{team}", _model(TypeAdapter(TeamView)), kwargs={"json": settings.model_dump()})

    @staticmethod
    def usage(by: str, since: str | None, until: str | None) -> Call[UsageReport]:
        params = {"by": by, "since": since, "until": until}
        return Call("GET", f"{API}/usage", _model(TypeAdapter(UsageReport)), params=params)

    @staticmethod
    def put_secret(name: str, value: str, kind: str, header: str) -> Call[SecretView]:
        body = {"name": name, "value": value, "kind": kind, "header": header}
        return Call("POST", f"{API}/secrets", _SECRET, kwargs={"json": body})

    @staticmethod
    def secrets() -> Call[list[SecretView]]:
        return Call("GET", f"{API}/secrets", _SECRETS)

    @staticmethod
    def delete_secret(name: str) -> Call[SecretView]:
        return Call("DELETE", f"{API}/secrets/{name}", _SECRET)
