"""A typed Python client for the leader's REST API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from pydantic import TypeAdapter

from common.followers import FollowerView
from common.jobs import JobResults, JobView
from common.models import ModelMeta
from common.spec import JobSpec


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
    raise ApiError(response.status_code, str(body.get("error")), str(body.get("message")), body.get("field"))


class BenchfleetClient:
    """Synchronous client; one per thread of use."""

    def __init__(self, base_url: str, token: str, *, timeout_s: float = 30.0) -> None:
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s)

    def __enter__(self) -> BenchfleetClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _get(self, path: str, **params: Any) -> Any:
        response = self._http.get(path, params={k: v for k, v in params.items() if v is not None})
        _raise_for(response)
        return response.json()

    def health(self) -> dict[str, Any]:
        """The leader's /healthz answer."""
        return self._get("/healthz")

    def submit_yaml(self, text: str) -> JobView:
        """Submit a job written in YAML."""
        response = self._http.post("/api/v1/jobs", content=text.encode(), headers={"Content-Type": "application/yaml"})
        _raise_for(response)
        return JobView.model_validate(response.json())

    def submit(self, spec: JobSpec) -> JobView:
        """Submit a job spec object."""
        response = self._http.post("/api/v1/jobs", content=spec.model_dump_json(), headers={"Content-Type": "application/json"})
        _raise_for(response)
        return JobView.model_validate(response.json())

    def jobs(self, *, state: str | None = None, limit: int = 50) -> list[JobView]:
        """Jobs, newest first."""
        return TypeAdapter(list[JobView]).validate_python(self._get("/api/v1/jobs", state=state, limit=limit))

    def job(self, job_id: str) -> JobView:
        """One job with its state and progress."""
        return JobView.model_validate(self._get(f"/api/v1/jobs/{job_id}"))

    def results(self, job_id: str) -> JobResults:
        """A job's point results of its current attempt."""
        return JobResults.model_validate(self._get(f"/api/v1/jobs/{job_id}/results"))

    def cancel(self, job_id: str) -> JobView:
        """Cancel a job that has not ended."""
        response = self._http.post(f"/api/v1/jobs/{job_id}/cancel")
        _raise_for(response)
        return JobView.model_validate(response.json())

    def upload_model(self, data: bytes | Path, *, name: str, version: str, format: str = "onnx") -> ModelMeta:
        """Push a model file into the repository."""
        content = data.read_bytes() if isinstance(data, Path) else data
        response = self._http.post(
            "/api/v1/models",
            data={"name": name, "version": version, "format": format},
            files={"file": (f"{name}.{format}", content, "application/octet-stream")},
        )
        _raise_for(response)
        return ModelMeta.model_validate(response.json())

    def models(self) -> list[ModelMeta]:
        """Every model in the repository."""
        return TypeAdapter(list[ModelMeta]).validate_python(self._get("/api/v1/models"))

    def delete_model(self, name: str, version: str) -> None:
        """Remove a model version."""
        _raise_for(self._http.delete(f"/api/v1/models/{name}/{version}"))

    def followers(self) -> list[FollowerView]:
        """Registered followers with their state."""
        return TypeAdapter(list[FollowerView]).validate_python(self._get("/api/v1/followers"))
