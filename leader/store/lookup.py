"""Reading one document by its id, the way every store reports a missing one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from common.errors import InvalidRequest, NotFound

# The shortest prefix of an id that names a document (the console shows 8 characters of a job's 32).
MIN_PREFIX = 4
_HEX = frozenset("0123456789abcdef")


# PerfDB's embedded server matches every document it fetches by id against the whole `$in` list again, so a command on
# n ids costs it O(n^2): the stamps of a page of 100 jobs took 31 ms in one read, 17 ms in five of 20; a waiting reason
# stated for 500 queued jobs stalled it 1.5 s in one write, 32 ms at most in writes of 20. (A server with a real index
# pays one round trip more per 20 ids.)
IDS_PER_READ = 20


def id_chunks(ids: list[str]) -> Iterator[list[str]]:
    """`ids` in lists of at most IDS_PER_READ, for one command each."""
    for start in range(0, len(ids), IDS_PER_READ):
        yield ids[start : start + IDS_PER_READ]


async def by_ids(
    db: AsyncDatabase, collection: str, ids: list[str], projection: Mapping[str, Any] | None = None
) -> AsyncIterator[dict[str, Any]]:
    """The documents of `ids` that exist (with `projection`), read IDS_PER_READ ids at a time."""
    for chunk in id_chunks(ids):
        async for doc in db[collection].find({"_id": {"$in": chunk}}, projection):
            yield doc


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


async def resolve_prefix(
    db: AsyncDatabase, collection: str, ref: str, *, what: str, field: str = "id", team: str | None = None
) -> str:
    """The full _id that `ref` names (of `team`, when given): the id itself, or the one id (hex, as jobs' are) that
    starts with it, at least MIN_PREFIX characters. NotFound as by_id does (another team's is not there); a prefix
    that several ids start with is a 400 naming `field`."""
    if await db[collection].find_one({"_id": ref, **team_query(team)}, {"_id": 1}) is not None:
        return ref
    if len(ref) >= MIN_PREFIX and set(ref) <= _HEX:
        # Hex ids that start with `ref` sort from `ref` up to (not including) `ref` + "g", just after "f".
        where = {"_id": {"$gte": ref, "$lt": ref + "g"}, **team_query(team)}
        docs = await db[collection].find(where, {"_id": 1}).sort("_id", 1).limit(2).to_list(2)
        if len(docs) == 1:
            return str(docs[0]["_id"])
        if docs:
            raise InvalidRequest(f"{what} id {ref} is the start of more than one {what}'s: give more of it", field=field)
    raise NotFound(f"{what} {ref} does not exist", field=field)
