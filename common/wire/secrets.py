"""Secrets for targets (API schemas): a header an endpoint wants (an API key, a bearer token) or the CA bundle its
certificate is checked against. A value goes in once and never comes out through the API: the views carry none."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from common.base import NAME_PATTERN

MAX_HEADER_VALUE = 8 * 1024
MAX_CA_BUNDLE = 256 * 1024
# Headers the transports set themselves (or that would change the request's framing): never from a secret.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "te",
        "upgrade",
        "expect",
        "keep-alive",
        "accept",
        "user-agent",
    }
)


class SecretCreate(BaseModel):
    """A secret to store (replacing one of the same name): a header sent with every request to a target, or a CA
    bundle (PEM) a target's TLS certificate is checked against."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    kind: Literal["header", "ca_bundle"] = "header"
    header: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")] = "Authorization"
    value: SecretStr

    @field_validator("header")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value.lower() in RESERVED_HEADERS:
            raise ValueError(f"{value} is set by the load generator itself; name another header")
        return value

    @model_validator(mode="after")
    def _value_fits_kind(self) -> SecretCreate:
        value = self.value.get_secret_value()
        if self.kind == "header":
            if not re.fullmatch(rf"[\x20-\x7e\t]{{1,{MAX_HEADER_VALUE}}}", value):
                raise ValueError(
                    f"value: a header value is 1 to {MAX_HEADER_VALUE} printable ASCII characters, with no line breaks"
                )
        elif len(value) > MAX_CA_BUNDLE or "-----BEGIN CERTIFICATE-----" not in value:
            raise ValueError(
                f"value: a CA bundle is PEM certificates (-----BEGIN CERTIFICATE-----), at most {MAX_CA_BUNDLE} bytes"
            )
        return self


class SecretView(BaseModel):
    """A stored secret as the API shows it: never its value."""

    name: str
    team: str
    kind: Literal["header", "ca_bundle"]
    header: str | None
    created_at: datetime
    created_by: str


class TargetCredentials(BaseModel):
    """What the follower running an attempt of a target job gets: the headers to send and the CA bundle, opened, and
    the non-public networks the job's team may reach (the leader's allow-list and the team's: common/egress.py)."""

    model_config = ConfigDict(extra="forbid")

    headers: list[tuple[str, str]] = []
    ca_pem: str | None = None
    egress_allow: list[str] = []
