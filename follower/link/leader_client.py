"""The follower's side of the leader↔follower protocol: typed calls, retried with backoff on transient errors."""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from tenacity import retry, retry_if_exception, stop_after_delay, wait_exponential_jitter

from common.formats.datasets import DataSetMeta
from common.wire.followers import FollowerInfo, FollowerRegistration, FollowerView, Heartbeat, HeartbeatReply, Leaving
from common.wire.jobs import Claim, FinishReport, JobTask, PointReport
from common.wire.models import ModelMeta
from common.wire.secrets import TargetCredentials
from common.wire.shards import BarrierAnswer, PointShards, ShardFigures

log = logging.getLogger(__name__)

# How long a report keeps being retried while the leader is unreachable before the attempt gives up.
RETRY_FOR_S = 120.0
# How long a restarted agent waits, in all, for the leader to see its previous incarnation go missing.
TAKEOVER_WAIT_S = 120.0


class StaleAttempt(Exception):
    """The leader no longer wants this attempt (requeued, cancelled or already claimed)."""


class LeaderRejected(Exception):
    """The leader refused a request for a reason retrying will not fix."""


def _read_credential(path: Path | None) -> str | None:
    try:
        return path.read_text().strip() or None if path is not None else None
    except OSError:
        return None


def _write_credential(path: Path | None, credential: str) -> None:
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # a file already there keeps its mode through O_CREAT: owner-only whatever it was
        with os.fdopen(fd, "w") as fh:
            fh.write(credential)
    except OSError as exc:
        log.warning("could not keep this agent's credential at %s: %s", path, exc)


class _WaitToTakeOver(Exception):
    """Registration refused for now: this id's previous incarnation still counts as live at the leader."""

    def __init__(self, seconds: float, text: str) -> None:
        super().__init__(f"register: HTTP 409: {text}")
        self.seconds = min(max(seconds, 0.5), 60.0)


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code >= 500


_retrying = retry(
    retry=retry_if_exception(_transient),
    wait=wait_exponential_jitter(initial=0.2, max=5.0),
    stop=stop_after_delay(RETRY_FOR_S),
    reraise=True,
)


class LeaderClient:
    """Thread-safe client for the follower routes of the leader's REST API."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 10.0,
        credential_path: Path | None = None,
        ca_file: Path | None = None,
    ) -> None:
        # `token` is the join token: it only registers; registration returns this agent's own credential, kept at
        # `credential_path` (owner-only) so that a restarted agent proves it is the same follower and takes its id
        # back at once (the join token alone cannot take over a live id).
        self._join_token = token
        self._credential_path = credential_path
        self._credential: str | None = _read_credential(credential_path)
        self._info: FollowerInfo | None = None
        self.telemetry_address: str | None = None  # the leader's live-progress gRPC address, from registration
        self._lock = threading.Lock()
        # https: the leader's certificate is checked (against `ca_file` when given, else the system's CAs).
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(ca_file)) if ca_file is not None else True
        self._http = httpx.Client(base_url=base_url, timeout=timeout_s, verify=verify)

    def close(self) -> None:
        self._http.close()

    def _auth(self) -> dict[str, str]:
        with self._lock:
            return {"Authorization": f"Bearer {self._credential or self._join_token}"}

    def credential(self) -> str | None:
        """This agent's own credential (None before registration); for the gRPC progress stream."""
        with self._lock:
            return self._credential

    def _rejoin(self) -> bool:
        """The leader no longer accepts our credential (revoked, or PerfDB lost it): join again with the join token."""
        with self._lock:
            if self._credential is None or self._info is None:
                return False
            self._credential = None
            info = self._info
        log.warning("leader refused this agent's credential; joining again")
        self.register(info)  # waits, as told, while the leader still counts this id as live
        return True

    def _post(self, path: str, body: str) -> httpx.Response:
        return self._send("POST", path, content=body.encode(), content_type="application/json")

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        content: bytes | None = None,
        content_type: str | None = None,
    ) -> httpx.Response:
        """One authenticated request (joining again once if the credential was refused); StaleAttempt for 409,
        LeaderRejected for another 4xx, httpx.HTTPStatusError for a 5xx (the retried kind)."""
        headers = {"Content-Type": content_type} if content_type else {}
        response = self._http.request(method, path, params=params, content=content, headers={**headers, **self._auth()})
        if response.status_code == 401 and self._rejoin():
            response = self._http.request(method, path, params=params, content=content, headers={**headers, **self._auth()})
        if response.status_code == 409:
            raise StaleAttempt(response.text)
        if 400 <= response.status_code < 500:
            raise LeaderRejected(f"{path}: HTTP {response.status_code}: {response.text[:300]}")
        response.raise_for_status()
        return response

    def _register_once(self, info: FollowerInfo) -> FollowerView:
        response = self._http.post(
            "/api/v1/followers/register",
            content=info.model_dump_json(),
            headers={"Content-Type": "application/json", **self._auth()},
        )
        if response.status_code in (401, 403) and self._credential is not None:
            # A kept credential this leader does not take (revoked, another leader's, another follower's): join with
            # the join token.
            with self._lock:
                self._credential = None
            log.warning("leader refused this agent's kept credential; joining with the join token")
            return self._register_once(info)
        if response.status_code == 409 and "retry-after" in response.headers:
            raise _WaitToTakeOver(float(response.headers["retry-after"]), response.text[:300])
        if 400 <= response.status_code < 500:
            raise LeaderRejected(f"register: HTTP {response.status_code}: {response.text[:300]}")
        response.raise_for_status()
        reply = FollowerRegistration.model_validate_json(response.content)
        with self._lock:
            self._info = info
            if reply.credential is not None:
                self._credential = reply.credential
                _write_credential(self._credential_path, reply.credential)
            self.telemetry_address = reply.telemetry_address
        return FollowerView.model_validate(reply.model_dump(exclude={"credential"}))

    @_retrying
    def register(self, info: FollowerInfo) -> FollowerView:
        """Register (or re-register) this agent; keeps the credential the leader returns for every later call.

        A restarted agent whose previous incarnation still counts as live is told to wait (409 with Retry-After)
        until the leader has seen it go missing: it waits as told, for at most TAKEOVER_WAIT_S in all.
        """
        deadline = time.monotonic() + TAKEOVER_WAIT_S
        while True:
            try:
                return self._register_once(info)
            except _WaitToTakeOver as wait:
                if time.monotonic() + wait.seconds > deadline:
                    raise LeaderRejected(str(wait)) from None
                log.info("follower id %s still live at the leader; registering again in %.0f s", info.follower_id, wait.seconds)
                time.sleep(wait.seconds)

    def heartbeat(self, follower_id: str, beat: Heartbeat) -> HeartbeatReply:
        """One heartbeat; not retried (the next one is seconds away)."""
        response = self._post(f"/api/v1/followers/{follower_id}/heartbeat", beat.model_dump_json())
        return HeartbeatReply.model_validate_json(response.content)

    def leave(self, follower_id: str, incarnation: str) -> None:
        """Tell the leader this agent is stopping: it takes back the jobs held and running here. Not retried: a
        stopping agent has seconds, and a leader that missed it requeues them once the heartbeats stop."""
        self._post(f"/api/v1/followers/{follower_id}/leave", Leaving(incarnation=incarnation).model_dump_json())

    @_retrying
    def claim(self, job_id: str, claim: Claim) -> JobTask:
        """Ask to start this attempt; StaleAttempt when the leader gave it elsewhere."""
        return JobTask.model_validate_json(self._post(f"/api/v1/jobs/{job_id}/claim", claim.model_dump_json()).content)

    @_retrying
    def report_point(self, job_id: str, report: PointReport) -> None:
        """Send one point's result (idempotent at the leader)."""
        self._post(f"/api/v1/jobs/{job_id}/points", report.model_dump_json())

    @_retrying
    def upload_records(self, job_id: str, attempt: int, index: int, blob: bytes, probe: int | None = None) -> None:
        """Send one point's (or one probe's of its search) raw records blob (npz); the leader replaces any earlier
        upload of it."""
        self._send(
            "POST",
            f"/api/v1/jobs/{job_id}/points/{index}/records",
            params={"attempt": attempt} if probe is None else {"attempt": attempt, "probe": probe},
            content=blob,
            content_type="application/octet-stream",
        )

    @_retrying
    def target_credentials(self, job_id: str, attempt: int, follower_id: str) -> TargetCredentials:
        """The opened secrets of the target of the attempt this follower runs (kept in memory, never logged)."""
        response = self._send(
            "GET", f"/api/v1/jobs/{job_id}/target-credentials", params={"attempt": attempt, "follower_id": follower_id}
        )
        return TargetCredentials.model_validate_json(response.content)

    def clock_offset(self, samples: int = 16, enough_ns: int = 0, budget_s: float = 0.0) -> tuple[int, int]:
        """(the leader's clock minus ours, its uncertainty), in ns: of the round trips the fastest is kept, the leader's
        reading taken as half way through it, so the uncertainty is half that round trip. `samples` round trips, then
        more while the uncertainty is over `enough_ns` and `budget_s` lasts (a busy host's round trips are slow in
        bursts: one fast one between them is what the offset needs)."""
        best: tuple[int, int] | None = None
        deadline = time.monotonic() + budget_s
        taken = 0
        while best is None or taken < samples or (best[1] > enough_ns and time.monotonic() < deadline):
            t0 = time.time_ns()
            response = self._http.get("/api/v1/clock")  # open: no token lookup inside the round trip
            t1 = time.time_ns()
            response.raise_for_status()
            leader_ns = int(response.json()["now_ns"])
            taken += 1
            if best is None or t1 - t0 < best[1] * 2:
                best = (leader_ns - (t0 + t1) // 2, (t1 - t0) // 2)
        return best

    @_retrying
    def shard_ready(self, job_id: str, shard: int, index: int, attempt: int, follower_id: str) -> BarrierAnswer:
        """Say this shard is ready for point `index`: the barrier's answer (waiting, go with the start, or skip)."""
        path = f"/api/v1/jobs/{job_id}/shards/{shard}/points/{index}/ready"
        response = self._send("POST", path, params={"attempt": attempt, "follower_id": follower_id})
        return BarrierAnswer.model_validate_json(response.content)

    @_retrying
    def put_shard_records(
        self, job_id: str, shard: int, index: int, attempt: int, follower_id: str, blob: bytes, figures: ShardFigures
    ) -> None:
        """Hand this shard's records of a point (and its run's figures) to the coordinator, through the leader."""
        params = {"attempt": attempt, "follower_id": follower_id, "meta": figures.model_dump_json()}
        path = f"/api/v1/jobs/{job_id}/shards/{shard}/points/{index}/records"
        self._send("POST", path, params=params, content=blob, content_type="application/octet-stream")

    @_retrying
    def shard_status(self, job_id: str, index: int, attempt: int, follower_id: str) -> PointShards:
        """For the coordinator: each shard of a started point, uploaded, waiting, lost or absent."""
        path = f"/api/v1/jobs/{job_id}/shards/points/{index}"
        response = self._send("GET", path, params={"attempt": attempt, "follower_id": follower_id})
        return PointShards.model_validate_json(response.content)

    @_retrying
    def shard_records(self, job_id: str, shard: int, index: int, attempt: int, follower_id: str) -> bytes:
        """For the coordinator: a shard's records blob of a point."""
        response = self._send(
            "GET",
            f"/api/v1/jobs/{job_id}/shards/{shard}/points/{index}/records",
            params={"attempt": attempt, "follower_id": follower_id},
        )
        return response.content

    @_retrying
    def finish(self, job_id: str, report: FinishReport) -> None:
        """Close the attempt as succeeded or failed."""
        self._post(f"/api/v1/jobs/{job_id}/finish", report.model_dump_json())

    @_retrying
    def data_meta(self, data_id: str) -> DataSetMeta:
        """A request-data set's metadata."""
        response = self._http.get(f"/api/v1/data/{data_id}", headers=self._auth())
        if response.status_code == 404:
            raise LeaderRejected(f"data set {data_id} is no longer stored")
        response.raise_for_status()
        return DataSetMeta.model_validate_json(response.content)

    @_retrying
    def download_data(self, meta: DataSetMeta, dest: Path) -> None:
        """Stream a data set to dest, checking its sha256; the file appears only when complete and correct."""
        self._download(f"/api/v1/data/{meta.id}/file", dest, sha256=meta.sha256, what=f"data set {meta.id}")

    @_retrying
    def download_model(self, model: ModelMeta, dest: Path) -> None:
        """Stream the model file to dest, checking its sha256; the file appears only when complete and correct."""
        self._download(f"/api/v1/models/{model.name}/{model.version}/file", dest, sha256=model.sha256, what=f"model {model.ref}")

    def _download(self, path: str, dest: Path, *, sha256: str, what: str) -> None:
        """Stream path to a temporary file, verify its checksum, then move it into place (no half file is ever visible)."""
        tmp = dest.with_name(dest.name + f".part{os.getpid()}")
        digest = hashlib.sha256()
        try:
            with self._http.stream("GET", path, headers=self._auth()) as response:
                if response.status_code == 404:
                    raise LeaderRejected(f"{what} is no longer stored")
                response.raise_for_status()
                with tmp.open("wb") as fh:
                    for chunk in response.iter_bytes(1 << 20):
                        digest.update(chunk)
                        fh.write(chunk)
            if digest.hexdigest() != sha256:
                raise LeaderRejected(f"{what}: checksum mismatch after download")
            tmp.replace(dest)
        finally:
            tmp.unlink(missing_ok=True)
