"""The placement choice on plain data: capability filter, queue-aware order and tie-breaks."""

from __future__ import annotations

from leader.domain import Candidate, Load, QueuedJob
from leader.scheduler.placement import choose_follower


def job(*backends: str, estimate: float = 10.0) -> QueuedJob:
    return QueuedJob("j1", 1, frozenset(backends or ("onnxruntime",)), estimate)


def cand(fid: str, *backends: str) -> Candidate:
    return Candidate(fid, frozenset(backends or ("onnxruntime",)))


def test_no_candidates_means_stay_queued() -> None:
    assert choose_follower(job=job(), candidates=[], loads={}) is None


def test_needs_every_backend_of_the_job() -> None:
    followers = [cand("a", "onnxruntime"), cand("b", "onnxruntime", "triton")]
    assert choose_follower(job=job("onnxruntime", "triton"), candidates=followers, loads={}) == "b"
    assert choose_follower(job=job("tfserving"), candidates=followers, loads={}) is None


def test_queue_that_finishes_first_wins_over_fewest_jobs() -> None:
    followers = [cand("a"), cand("b")]
    # a holds one long job, b three short ones: b's queue ends first.
    loads = {"a": Load(300.0, 1), "b": Load(30.0, 3)}
    assert choose_follower(job=job(), candidates=followers, loads=loads) == "b"


def test_idle_follower_has_zero_load() -> None:
    assert choose_follower(job=job(), candidates=[cand("a"), cand("z")], loads={"a": Load(1.0, 1)}) == "z"


def test_ties_break_on_job_count_then_id() -> None:
    followers = [cand("c"), cand("b"), cand("a")]
    assert (
        choose_follower(job=job(), candidates=followers, loads={"a": Load(10.0, 2), "b": Load(10.0, 1), "c": Load(10.0, 1)})
        == "b"
    )
    assert choose_follower(job=job(), candidates=followers, loads={}) == "a"


def test_successive_choices_spread_when_loads_are_updated() -> None:
    followers = [cand("a"), cand("b")]
    loads: dict[str, Load] = {}
    chosen = []
    for _ in range(4):
        fid = choose_follower(job=job(estimate=10.0), candidates=followers, loads=loads)
        assert fid is not None
        chosen.append(fid)
        loads[fid] = loads.get(fid, Load()).plus(10.0)
    assert chosen == ["a", "b", "a", "b"]
