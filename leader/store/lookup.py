"""Reading one document by its id, the way every store reports a missing one."""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from common.errors import NotFound


def team_query(team: str | None) -> dict[str, Any]:
    """The filter for documents of one team (None: every team)."""
    return {} if team is None else {"team": team}


async def by_id(
    db: AsyncDatabase, collection: str, doc_id: str, *, what: str, field: str = "id", team: str | None = None
) -> dict[str, Any]:
    """The document with this _id (of `team`, when given); NotFound naming `field` ("{what} {doc_id} does not exist")
    otherwise: another team's document is answered as if it did not exist."""
    doc = await db[collection].find_one({"_id": doc_id, **team_query(team)})
    if doc is None:
        raise NotFound(f"{what} {doc_id} does not exist", field=field)
    return doc
