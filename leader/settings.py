"""The leader's settings: built once per process from BENCHFLEET_LEADER_* (tests pass values explicitly)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from common import egress
from common.fairshare import AGEING_PER_S, WAIT_BOUND

MIN_TOKEN_LENGTH = 16


class LeaderSettings(BaseSettings):
    """Where PerfDB and the broker live, how to listen, the tokens and the scheduler's timing."""

    model_config = SettingsConfigDict(
        env_prefix="BENCHFLEET_LEADER_", extra="ignore", populate_by_name=True, hide_input_in_errors=True
    )

    # validation_alias replaces the prefixed name, so the prefixed one is listed again beside the shared one.
    mongo_uri: str = Field(
        default="mongodb://127.0.0.1:27017/?directConnection=true&retryWrites=false",
        validation_alias=AliasChoices("BENCHFLEET_LEADER_MONGO_URI", "BENCHFLEET_MONGO_URI"),
    )
    db_name: str = "benchfleet"
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        validation_alias=AliasChoices("BENCHFLEET_LEADER_REDIS_URL", "BENCHFLEET_REDIS_URL"),
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8700, gt=0, lt=65536)
    # Live-progress gRPC server (followers stream window metrics to it); port 0 disables it. Loopback by default.
    # Followers are told `grpc_advertise` at registration (default host:port; with 0.0.0.0 they use the leader URL's host).
    grpc_host: str = "127.0.0.1"
    grpc_port: int = Field(default=8701, ge=0, lt=65536)
    grpc_advertise: str | None = None
    # TLS for the API and the live-progress gRPC server (both, with one certificate and key, PEM); unset: plaintext
    # (keep it on loopback, or behind a TLS proxy for the API).
    tls_certfile: Path | None = None
    tls_keyfile: Path | None = None
    admin_token: SecretStr
    follower_token: SecretStr
    # The key target secrets are sealed with at rest (leader/secretbox.py); unset or empty (a deployment that passes
    # the variable through without a value): the secrets API answers 503.
    # Changing it makes every stored secret unreadable (store them again).
    secret_key: SecretStr | None = None
    missing_after_s: float = Field(default=10.0, gt=0)
    # Drain a follower a fleet check finds anomalous (it finishes what it runs; an admin resumes it).
    fleetcheck_drain: bool = False
    # A job sent to a follower whose heartbeats still do not list it this long after the send is requeued: the broker
    # lost the message (a Redis restart can drop one the consumer was being handed).
    undelivered_after_s: float = Field(default=15.0, gt=0)
    place_interval_s: float = Field(default=0.5, gt=0)
    monitor_interval_s: float = Field(default=1.0, gt=0)
    # Tier-1 placement: queue_aware (the queue that finishes first), or the baselines least_queue_length / round_robin.
    placement_policy: Literal["queue_aware", "least_queue_length", "round_robin"] = "queue_aware"
    # Sharing the fleet between teams (common/fairshare.py): N keeps at most N jobs waiting on each follower beside the
    # one it runs and the rest in the leader's queue, which runs them in the fair order (teams' weights and use, classes,
    # shortest first with ageing); 1 lets a follower fetch its next job's model while it runs one. None sends every
    # job to a follower at once, where each follower orders what it holds (shortest first, by class): no team shares.
    placement_lookahead: int | None = Field(default=1, ge=0, le=1000)
    # The leader's queue's order (as a follower's, follower/settings.py): seconds of estimate forgiven per second
    # waited, and the wait bound (a job that waited this many times its FCFS turnaround goes next; 0: no bound).
    ageing_per_s: float = Field(default=AGEING_PER_S, ge=0)
    wait_bound: float = Field(default=WAIT_BOUND, ge=0)
    # The price of a follower-hour by follower class (its `class` label, else its first GPU's model, else cpu; `*` for
    # any other) for GET /usage's cost, and the currency it is in.
    prices: dict[str, Annotated[float, Field(ge=0)]] = {}
    currency: str = Field(default="USD", max_length=8)
    # Heavy reads (job lists, the leaderboard, compare, results, the console's pages) in progress at once, per client
    # (its token or login) and on this leader; one more is 429 with Retry-After 1 (leader/api/readlimit.py).
    max_reads_per_client: int = Field(default=6, gt=0)
    max_reads: int = Field(default=32, gt=0)
    # Who a follower joining with the follower (join) token must be approved by before it gets a job, a model, a data
    # set or a secret: "admin" (it is pending until `benchfleet approve ID`), or "join-token" (the token
    # is trust enough: where it never leaves the hosts an operator runs, as in the compose file and the Helm chart).
    # A follower an admin registers, or one re-registering with its own credential, keeps what it had.
    follower_approval: Literal["admin", "join-token"] = "admin"
    max_upload_bytes: int = Field(default=512 * 1024 * 1024, gt=0)
    # Uploads (models, data sets) in progress at once, per user and on this leader; one more is 429 with Retry-After.
    # Each holds a spooled file on disk while it arrives and is checked (one at a time: leader/api/heavy.py).
    max_uploads_per_user: int = Field(default=2, gt=0)
    max_uploads: int = Field(default=8, gt=0)
    max_body_bytes: int = Field(default=1024 * 1024, gt=0)
    # Seconds a client has to send a request's headers (from opening the connection, or from a later request's first
    # byte); a connection that takes longer is closed (leader/httpserver.py).
    header_timeout_s: float = Field(default=10.0, gt=0, le=300)
    # Per-job bounds checked at submission (422 naming the field); tighter than the schema's hard caps.
    max_rate: float = Field(default=20_000.0, gt=0)
    max_duration_s: float = Field(default=600.0, gt=0)
    max_points: int = Field(default=256, gt=0)
    max_concurrency: int = Field(default=1024, gt=0)
    # Per-user cap on jobs waiting to run (queued or assigned, not yet started); 0 = no cap. A submission over it is 429.
    max_waiting_per_user: int = Field(default=100, ge=0)
    # Whether admins are held to that cap too (by default they are exempt: they drain and requeue for everyone).
    limit_admins: bool = False
    # Reverse proxies whose X-Forwarded-For/-Proto are believed (comma-separated addresses or networks; "*": any).
    # Behind a TLS proxy listed here the login cookie is marked Secure and the audit log names the real client.
    trusted_proxies: str = "127.0.0.1"
    # The loopback, private and other non-public networks every team's targets may be (comma-separated addresses or
    # networks), beside each team's own allow-list (PUT /teams/TEAM egress_allow); empty: none, only public addresses.
    # One host's fleet (`benchfleet up`, the demo) allows loopback: its user is its admin. The fleet's own services,
    # link-local and the clouds' metadata services are refused whatever is allowed (common/egress.py).
    egress_allow: str = ""
    # Benchmarks as on-demand Kubernetes pods (leader/placement/ondemand.py): the batch/v1 Job template the chart renders
    # (YAML); unset: off. Its namespace (default: the leader's own), a Kueue LocalQueue to label the Jobs with, and how
    # many such pods may exist at once.
    ondemand_template: Path | None = None
    ondemand_namespace: str | None = None
    ondemand_queue: str | None = None
    ondemand_max_pods: int = Field(default=4, gt=0)
    # Retention (leader/store/retention.py), in days after a job finished; unset: kept for ever. Whole jobs (a baseline's
    # job is kept), their raw records (results stay), live progress; audit entries by their age. Swept every
    # retention_sweep_s, from the leader's start.
    retention_jobs_days: float | None = Field(default=None, ge=0)
    retention_records_days: float | None = Field(default=None, ge=0)
    retention_progress_days: float | None = Field(default=None, ge=0)
    retention_audit_days: float | None = Field(default=None, ge=0)
    retention_sweep_s: float = Field(default=3600.0, gt=0)
    # How long a user token issued over the API lives unless its request says (0: never expires). 90 days by default.
    token_ttl_s: int = Field(default=90 * 86400, ge=0)

    @model_validator(mode="after")
    def _tls_pair(self) -> LeaderSettings:
        # Both or neither: a certificate without its key (or the reverse) would serve nothing, or plaintext by mistake.
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_certfile and tls_keyfile go together: set both (PEM files) or neither")
        for name in ("tls_certfile", "tls_keyfile"):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                raise ValueError(f"{name}: no file at {path}")
        return self

    @field_validator("egress_allow")
    @classmethod
    def _networks(cls, value: str) -> str:
        return ",".join(str(n) for n in egress.networks(t for t in value.split(",") if t.strip()))

    @property
    def egress_networks(self) -> tuple[egress.Network, ...]:
        """The leader's own allow-list, parsed."""
        return egress.networks(t for t in self.egress_allow.split(",") if t)

    @field_validator("secret_key", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("placement_lookahead", mode="before")
    @classmethod
    def _off_is_none(cls, value: object) -> object:
        # The environment cannot carry null: `off` (or `none`, `null`) sends every job to a follower at once.
        return None if isinstance(value, str) and value.strip().lower() in ("off", "none", "null") else value

    @field_validator("admin_token", "follower_token", "secret_key")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        # A short or empty token is an unsafe default; refuse to start rather than serve an open API.
        if value is not None and len(value.get_secret_value()) < MIN_TOKEN_LENGTH:
            raise ValueError(f"must be at least {MIN_TOKEN_LENGTH} characters")
        return value
