"""A request's heavy work runs off the event loop, at most CAPACITY[kind] at once: four concurrent 400 MiB uploads once
held four copies, and an export's encoding ran on the loop that answers heartbeats."""

from __future__ import annotations

import asyncio
import threading

from leader.api import heavy


def test_heavy_work_runs_in_worker_threads_a_few_at_a_time() -> None:
    together = threading.Condition()
    running, most, loop_thread = [0], [0], threading.get_ident()
    ran_on: set[int] = set()

    def work(kind: str) -> str:
        """Waits (boundedly) for a second one to run beside it: an export finds one, an upload never may."""
        ran_on.add(threading.get_ident())
        with together:
            running[0] += 1
            most[0] = max(most[0], running[0])
            together.notify_all()
            together.wait_for(lambda: most[0] >= 2, timeout=0.2 if kind == "upload" else 10)
            running[0] -= 1
        return kind

    async def main() -> tuple[list[str], int]:
        done = await asyncio.gather(*(heavy.run("upload", work, "upload") for _ in range(4)))
        uploads_most = most[0]
        most[0] = 0
        done += await asyncio.gather(*(heavy.run("export", work, "export") for _ in range(6)))
        return list(done), uploads_most

    done, uploads_most = asyncio.run(main())
    assert done == ["upload"] * 4 + ["export"] * 6
    assert uploads_most == heavy.CAPACITY["upload"] == 1 and most[0] == heavy.CAPACITY["export"] == 2
    assert loop_thread not in ran_on  # in worker threads: the loop answers heartbeats meanwhile


def test_upload_slots_bound_each_user_and_the_leader_and_free_on_the_way_out() -> None:
    import pytest

    from common.errors import TooManyRequests
    from leader.api.uploads import UploadSlots

    slots = UploadSlots(per_user=2, total=3)
    with slots.slot("ann"), slots.slot("ann"):
        with pytest.raises(TooManyRequests, match="2 of your uploads are in progress") as mine, slots.slot("ann"):
            pass
        assert (mine.value.field, mine.value.retry_after_s) == ("file", 5)
        with slots.slot("bob"), pytest.raises(TooManyRequests, match="receiving 3 uploads"), slots.slot("cy"):
            pass  # bob's is the leader's third
    with pytest.raises(ValueError), slots.slot("ann"):  # a failed upload frees its slot too
        raise ValueError
    with slots.slot("ann"), slots.slot("ann"), slots.slot("cy"):
        pass  # every slot is free again
