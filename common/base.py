"""What every contract of common/ is built on: the strict model base and the name patterns."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# A name a user gives (a job, a model, a data set, a label, a secret...): short, plain, safe in a URL path.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
# A model's version.
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$"


class StrictModel(BaseModel):
    """The base of every spec model: unknown fields are errors, a validated spec never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
