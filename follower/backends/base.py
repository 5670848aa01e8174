"""The Backend protocol: what every serving system looks like to the point runner."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from common.wire.models import ModelMeta
from common.wire.results import Conversion
from follower.protocols import Endpoint


@runtime_checkable
class Backend(Protocol):
    """A serving system the follower can start, wait for, point load at, and stop."""

    name: str
    extra_env: dict[str, str]  # more environment for the server (e.g. MPS's pipe directory and thread share)
    conversion: Conversion | None  # the user's model as converted for this server, with its check (None: served as stored)

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether this host can run the serving system, with the reason (what was found, or what is missing)."""
        ...

    def version(self) -> str:
        """The serving system's version string, recorded with every result."""
        ...

    def start(self, model_path: Path, model: ModelMeta, workdir: Path) -> None:
        """Spawn the server for `model` (its log goes under `workdir`); returns without waiting for readiness."""
        ...

    def wait_ready(self, timeout_s: float) -> float:
        """Block until the server serves the model; return seconds from process start to ready."""
        ...

    @property
    def endpoint(self) -> str:
        """Base URL of the running server, e.g. http://127.0.0.1:8000."""
        ...

    def serves(self, model: ModelMeta) -> Endpoint:
        """Where and in which protocol the running server takes requests for `model`."""
        ...

    def pid(self) -> int | None:
        """The server's process (the root of the tree the resource sampler follows); None when none is ours."""
        ...

    def log_tail(self, n_lines: int = 40) -> str:
        """The end of the server's log, for a reason that says it is gone ("" when there is none)."""
        ...

    def alive(self) -> bool:
        """Whether the server process is still running."""
        ...

    def stats(self) -> dict[str, Any]:
        """Server-side statistics, if the system keeps any ({} otherwise)."""
        ...

    def stop(self) -> None:
        """Stop the server and everything it spawned; idempotent."""
        ...
