"""Typed Python clients for the leader's REST API: `BenchfleetClient` (sync) and `AsyncBenchfleetClient` (asyncio).

Both build every request with the same `_Call` description and parse every answer with the same function, so the
two cannot drift: only the transport (httpx.Client or httpx.AsyncClient) differs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import httpx
from pydantic import TypeAdapter

from common.datasets import DataSetMeta
from common.followers import FollowerView
from common.jobs import JobResults, JobView
from common.models import ModelMeta
from common.spec import JobSpec

T = TypeVar("T")

API = "/api/v1"
EXPORT_FORMATS = ("csv", "json", "parquet")


class ApiError(Exception):
    """An error answer from the leader, with its HTTP status, code and the field it names."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(f"{message} (HTTP {status}{', field ' + field if field else ''})")
        self.status, self.code, self.message, self.field = status, code, message, field


def _raise_for(response: httpx.Response) -> None:
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


def _json(response: httpx.Response) -> Any:
    return response.json()


def _none(response: httpx.Response) -> None:
    return None


def _bytes(response: httpx.Response) -> bytes:
    return response.content


def _model(adapter: TypeAdapter[T]) -> Callable[[httpx.Response], T]:
    return lambda response: adapter.validate_python(response.json())


_JOB = _model(TypeAdapter(JobView))
_JOBS = _model(TypeAdapter(list[JobView]))
_RESULTS = _model(TypeAdapter(JobResults))
_MODEL = _model(TypeAdapter(ModelMeta))
_MODELS = _model(TypeAdapter(list[ModelMeta]))
_DATASET = _model(TypeAdapter(DataSetMeta))
_DATASETS = _model(TypeAdapter(list[DataSetMeta]))
_FOLLOWERS = _model(TypeAdapter(list[FollowerView]))


@dataclass(frozen=True)
class _Call(Generic[T]):
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


def _upload(path: str, parse: Callable[[httpx.Response], T], content: bytes, filename: str, **fields: str) -> _Call[T]:
    """A multipart upload: the file's bytes beside its form fields."""
    files = {"file": (filename, content, "application/octet-stream")}
    return _Call("POST", path, parse, kwargs={"data": fields, "files": files})


class _Calls:
    """Every endpoint as a `_Call`; shared by the sync and async clients."""

    @staticmethod
    def health() -> _Call[dict[str, Any]]:
        return _Call("GET", "/healthz", _json)

    @staticmethod
    def submit_yaml(text: str) -> _Call[JobView]:
        headers = {"Content-Type": "application/yaml"}
        return _Call("POST", f"{API}/jobs", _JOB, kwargs={"content": text.encode(), "headers": headers})

    @staticmethod
    def submit(spec: JobSpec) -> _Call[JobView]:
        body = spec.model_dump_json()
        return _Call("POST", f"{API}/jobs", _JOB, kwargs={"content": body, "headers": {"Content-Type": "application/json"}})

    @staticmethod
    def jobs(state: str | None, limit: int) -> _Call[list[JobView]]:
        return _Call("GET", f"{API}/jobs", _JOBS, params={"state": state, "limit": limit})

    @staticmethod
    def job(job_id: str) -> _Call[JobView]:
        return _Call("GET", f"{API}/jobs/{job_id}", _JOB)

    @staticmethod
    def results(job_id: str) -> _Call[JobResults]:
        return _Call("GET", f"{API}/jobs/{job_id}/results", _RESULTS)

    @staticmethod
    def progress(job_id: str) -> _Call[dict[str, Any]]:
        return _Call("GET", f"{API}/jobs/{job_id}/progress", _json)

    @staticmethod
    def export(job_id: str, format: str) -> _Call[bytes]:
        return _Call("GET", f"{API}/jobs/{job_id}/export", _bytes, params={"format": format})

    @staticmethod
    def cancel(job_id: str) -> _Call[JobView]:
        return _Call("POST", f"{API}/jobs/{job_id}/cancel", _JOB)

    @staticmethod
    def upload_model(content: bytes, name: str, version: str, format: str) -> _Call[ModelMeta]:
        return _upload(f"{API}/models", _MODEL, content, f"{name}.{format}", name=name, version=version, format=format)

    @staticmethod
    def models() -> _Call[list[ModelMeta]]:
        return _Call("GET", f"{API}/models", _MODELS)

    @staticmethod
    def delete_model(name: str, version: str) -> _Call[None]:
        return _Call("DELETE", f"{API}/models/{name}/{version}", _none)

    @staticmethod
    def trust_model(name: str, version: str, trusted: bool) -> _Call[ModelMeta]:
        return _Call("PUT", f"{API}/models/{name}/{version}/trusted", _MODEL, kwargs={"json": {"trusted": trusted}})

    @staticmethod
    def upload_data(content: bytes, name: str, format: str, filename: str) -> _Call[DataSetMeta]:
        return _upload(f"{API}/data", _DATASET, content, filename, name=name, format=format)

    @staticmethod
    def data_sets() -> _Call[list[DataSetMeta]]:
        return _Call("GET", f"{API}/data", _DATASETS)

    @staticmethod
    def delete_data(data_id: str) -> _Call[None]:
        return _Call("DELETE", f"{API}/data/{data_id}", _none)

    @staticmethod
    def followers() -> _Call[list[FollowerView]]:
        return _Call("GET", f"{API}/followers", _FOLLOWERS)

    @staticmethod
    def leaderboard(sort: str | None, filters: Mapping[str, str] | Sequence[str] | None, limit: int | None) -> _Call[Any]:
        return _Call("GET", f"{API}/leaderboard", _json, params={"sort": sort, "filter": _filters(filters), "limit": limit})

    @staticmethod
    def recommend(p99_ms: float | None, filters: Mapping[str, str] | Sequence[str] | None, confident: bool) -> _Call[Any]:
        params = {"p99_ms": p99_ms, "filter": _filters(filters)} | ({"confident": "true"} if confident else {})
        return _Call("GET", f"{API}/recommend", _json, params=params)

    @staticmethod
    def compare(a: str, b: str) -> _Call[Any]:
        return _Call("GET", f"{API}/compare", _json, params={"a": a, "b": b})


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class BenchfleetClient:
    """Synchronous client; one per thread of use."""

    def __init__(
        self, base_url: str, token: str, *, timeout_s: float = 30.0, transport: httpx.BaseTransport | None = None
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=_headers(token), timeout=timeout_s, transport=transport
        )

    def __enter__(self) -> BenchfleetClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _do(self, call: _Call[T]) -> T:
        response = self._http.request(call.method, call.path, **call.request_args())
        _raise_for(response)
        return call.parse(response)

    def health(self) -> dict[str, Any]:
        """The leader's /healthz answer."""
        return self._do(_Calls.health())

    def submit_yaml(self, text: str) -> JobView:
        """Submit a job written in YAML."""
        return self._do(_Calls.submit_yaml(text))

    def submit(self, spec: JobSpec) -> JobView:
        """Submit a job spec object."""
        return self._do(_Calls.submit(spec))

    def jobs(self, *, state: str | None = None, limit: int = 50) -> list[JobView]:
        """Jobs, newest first."""
        return self._do(_Calls.jobs(state, limit))

    def job(self, job_id: str) -> JobView:
        """One job with its state and progress."""
        return self._do(_Calls.job(job_id))

    def results(self, job_id: str) -> JobResults:
        """A job's point results of its current attempt."""
        return self._do(_Calls.results(job_id))

    def progress(self, job_id: str) -> dict[str, Any]:
        """Live per-point progress of a running job."""
        return self._do(_Calls.progress(job_id))

    def export(self, job_id: str, format: str = "csv") -> bytes:
        """A job's results as a file (csv, json or parquet)."""
        return self._do(_Calls.export(job_id, format))

    def cancel(self, job_id: str) -> JobView:
        """Cancel a job that has not ended."""
        return self._do(_Calls.cancel(job_id))

    def upload_model(self, data: bytes | Path, *, name: str, version: str, format: str = "onnx") -> ModelMeta:
        """Push a model file into the repository."""
        content = data.read_bytes() if isinstance(data, Path) else data
        return self._do(_Calls.upload_model(content, name, version, format))

    def models(self) -> list[ModelMeta]:
        """Every model in the repository."""
        return self._do(_Calls.models())

    def delete_model(self, name: str, version: str) -> None:
        """Remove a model version."""
        self._do(_Calls.delete_model(name, version))

    def trust_model(self, name: str, version: str, trusted: bool = True) -> ModelMeta:
        """Mark a model trusted (admins): followers that cannot sandbox its server run its code anyway."""
        return self._do(_Calls.trust_model(name, version, trusted))

    def upload_data(self, data: bytes | Path, *, name: str, format: str) -> DataSetMeta:
        """Push a request-data set (npz, jsonl, images zip or trace); jobs name it by the returned id."""
        content = data.read_bytes() if isinstance(data, Path) else data
        filename = data.name if isinstance(data, Path) else f"{name}.{format}"
        return self._do(_Calls.upload_data(content, name, format, filename))

    def data_sets(self) -> list[DataSetMeta]:
        """Every stored request-data set."""
        return self._do(_Calls.data_sets())

    def delete_data(self, data_id: str) -> None:
        """Remove a request-data set."""
        self._do(_Calls.delete_data(data_id))

    def followers(self) -> list[FollowerView]:
        """Registered followers with their state."""
        return self._do(_Calls.followers())

    def leaderboard(
        self, *, sort: str | None = None, filters: Mapping[str, str] | Sequence[str] | None = None, limit: int | None = None
    ) -> Any:
        """The leaderboard rows, sorted and filtered by the leader."""
        return self._do(_Calls.leaderboard(sort, filters, limit))

    def recommend(self, *, p99_ms: float | None = None, filters: Mapping[str, str] | Sequence[str] | None = None,
                  confident: bool = False) -> Any:  # fmt: skip
        """The configuration the recommender picks for an SLO (`confident`: at the upper end of each p99's CI)."""
        return self._do(_Calls.recommend(p99_ms, filters, confident))

    def compare(self, a: str, b: str) -> Any:
        """A comparison of two jobs."""
        return self._do(_Calls.compare(a, b))


class AsyncBenchfleetClient:
    """Asyncio client with the same methods as `BenchfleetClient`, as coroutines."""

    def __init__(
        self, base_url: str, token: str, *, timeout_s: float = 30.0, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=_headers(token), timeout=timeout_s, transport=transport
        )

    async def __aenter__(self) -> AsyncBenchfleetClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _do(self, call: _Call[T]) -> T:
        response = await self._http.request(call.method, call.path, **call.request_args())
        _raise_for(response)
        return call.parse(response)

    async def health(self) -> dict[str, Any]:
        """The leader's /healthz answer."""
        return await self._do(_Calls.health())

    async def submit_yaml(self, text: str) -> JobView:
        """Submit a job written in YAML."""
        return await self._do(_Calls.submit_yaml(text))

    async def submit(self, spec: JobSpec) -> JobView:
        """Submit a job spec object."""
        return await self._do(_Calls.submit(spec))

    async def jobs(self, *, state: str | None = None, limit: int = 50) -> list[JobView]:
        """Jobs, newest first."""
        return await self._do(_Calls.jobs(state, limit))

    async def job(self, job_id: str) -> JobView:
        """One job with its state and progress."""
        return await self._do(_Calls.job(job_id))

    async def results(self, job_id: str) -> JobResults:
        """A job's point results of its current attempt."""
        return await self._do(_Calls.results(job_id))

    async def progress(self, job_id: str) -> dict[str, Any]:
        """Live per-point progress of a running job."""
        return await self._do(_Calls.progress(job_id))

    async def export(self, job_id: str, format: str = "csv") -> bytes:
        """A job's results as a file (csv, json or parquet)."""
        return await self._do(_Calls.export(job_id, format))

    async def cancel(self, job_id: str) -> JobView:
        """Cancel a job that has not ended."""
        return await self._do(_Calls.cancel(job_id))

    async def upload_model(self, data: bytes | Path, *, name: str, version: str, format: str = "onnx") -> ModelMeta:
        """Push a model file into the repository."""
        content = data.read_bytes() if isinstance(data, Path) else data
        return await self._do(_Calls.upload_model(content, name, version, format))

    async def models(self) -> list[ModelMeta]:
        """Every model in the repository."""
        return await self._do(_Calls.models())

    async def delete_model(self, name: str, version: str) -> None:
        """Remove a model version."""
        await self._do(_Calls.delete_model(name, version))

    async def trust_model(self, name: str, version: str, trusted: bool = True) -> ModelMeta:
        """Mark a model trusted (admins): followers that cannot sandbox its server run its code anyway."""
        return await self._do(_Calls.trust_model(name, version, trusted))

    async def upload_data(self, data: bytes | Path, *, name: str, format: str) -> DataSetMeta:
        """Push a request-data set (npz, jsonl, images zip or trace); jobs name it by the returned id."""
        content = data.read_bytes() if isinstance(data, Path) else data
        filename = data.name if isinstance(data, Path) else f"{name}.{format}"
        return await self._do(_Calls.upload_data(content, name, format, filename))

    async def data_sets(self) -> list[DataSetMeta]:
        """Every stored request-data set."""
        return await self._do(_Calls.data_sets())

    async def delete_data(self, data_id: str) -> None:
        """Remove a request-data set."""
        await self._do(_Calls.delete_data(data_id))

    async def followers(self) -> list[FollowerView]:
        """Registered followers with their state."""
        return await self._do(_Calls.followers())

    async def leaderboard(
        self, *, sort: str | None = None, filters: Mapping[str, str] | Sequence[str] | None = None, limit: int | None = None
    ) -> Any:
        """The leaderboard rows, sorted and filtered by the leader."""
        return await self._do(_Calls.leaderboard(sort, filters, limit))

    async def recommend(self, *, p99_ms: float | None = None, filters: Mapping[str, str] | Sequence[str] | None = None,
                        confident: bool = False) -> Any:  # fmt: skip
        """The configuration the recommender picks for an SLO (`confident`: at the upper end of each p99's CI)."""
        return await self._do(_Calls.recommend(p99_ms, filters, confident))

    async def compare(self, a: str, b: str) -> Any:
        """A comparison of two jobs."""
        return await self._do(_Calls.compare(a, b))
