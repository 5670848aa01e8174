"""The placement choice on plain data: capability filter, queue-aware order and tie-breaks."""

from __future__ import annotations

from leader.domain import Candidate, Load, QueuedJob
from leader.placement.placer import choose_follower


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


# --- policies, hardware constraints, stated reasons -------------------------------------------------------

from leader.domain import Gpu, Needs  # noqa: E402
from leader.placement.placer import NO_FOLLOWER, PlacementIndex, explain_unplaceable  # noqa: E402


def gpu_job(**needs: object) -> QueuedJob:
    return QueuedJob("g1", 1, frozenset({"onnxruntime"}), 10.0, Needs(**needs))  # type: ignore[arg-type]


def test_gpu_job_is_never_placed_on_a_cpu_only_follower() -> None:
    cpu = cand("cpu")
    a100 = Candidate("gpu", frozenset({"onnxruntime"}), (Gpu("NVIDIA A100-SXM4-40GB", 40960),))
    # The CPU-only follower is idle, the GPU one loaded: still the GPU one.
    assert choose_follower(job=gpu_job(gpu=True), candidates=[cpu, a100], loads={"gpu": Load(1e6, 99)}) == "gpu"
    assert choose_follower(job=gpu_job(gpu=True), candidates=[cpu], loads={}) is None
    assert explain_unplaceable(gpu_job(gpu=True), [cpu]) == "waiting: needs a GPU; no available follower has it"
    assert choose_follower(job=gpu_job(gpu_model="h100"), candidates=[cpu, a100], loads={}) is None
    assert "matching 'h100'" in explain_unplaceable(gpu_job(gpu_model="h100"), [cpu, a100])
    assert choose_follower(job=gpu_job(gpu_model="a100", min_gpu_memory_mb=40000), candidates=[a100], loads={}) == "gpu"
    assert "at least 81920 MiB" in explain_unplaceable(gpu_job(min_gpu_memory_mb=81920), [a100])
    assert explain_unplaceable(gpu_job(), []) == NO_FOLLOWER


def test_least_queue_length_counts_jobs_not_seconds() -> None:
    loads = {"a": Load(300.0, 1), "b": Load(30.0, 3)}
    assert choose_follower(job=job(), candidates=[cand("a"), cand("b")], loads=loads, policy="least_queue_length") == "a"


def test_round_robin_cycles_over_capable_followers_from_the_cursor() -> None:
    followers = [cand("a"), cand("b", "onnxruntime", "triton"), cand("c")]
    index = PlacementIndex(followers, {"a": Load(0, 50)}, policy="round_robin", rr_last="a")
    chosen = []
    for _ in range(5):
        fid = index.choose(job())
        assert fid is not None
        chosen.append(fid)
        index.add(fid, 10.0)
    assert chosen == ["b", "c", "a", "b", "c"]  # load is ignored; the order is by id after the stored cursor
    only_triton = PlacementIndex(followers, {}, policy="round_robin", rr_last="b")
    assert only_triton.choose(job("triton")) == "b"  # wraps around to the only capable one


def test_index_agrees_with_a_linear_scan_on_many_followers() -> None:
    import random

    rng = random.Random(7)
    followers = [cand(f"f{i:04d}", *(["onnxruntime", "triton"] if i % 3 else ["onnxruntime"])) for i in range(300)]
    loads = {f.follower_id: Load(rng.uniform(0, 1000), rng.randint(0, 9)) for f in followers}
    index = PlacementIndex(followers, loads, policy="queue_aware")
    for step in range(200):
        j = job("onnxruntime", "triton") if step % 2 else job()
        able = [f.follower_id for f in followers if j.backends <= f.backends]
        expected = min(able, key=lambda fid: (index.loads.get(fid, Load()).seconds, index.loads.get(fid, Load()).jobs, fid))
        assert index.choose(j) == expected
        index.add(expected, rng.uniform(1, 100))


def test_unknown_policy_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="known: queue_aware"):
        PlacementIndex([], {}, policy="fastest")  # type: ignore[arg-type]


def test_a_split_jobs_part_stays_in_its_siblings_hardware_class() -> None:
    a100, h100 = (Gpu("NVIDIA A100-SXM4-40GB", 40960),), (Gpu("NVIDIA H100 80GB HBM3", 81559),)
    cands = [Candidate("a1", frozenset({"onnxruntime"}), a100), Candidate("a2", frozenset({"onnxruntime"}), a100),
             Candidate("h1", frozenset({"onnxruntime"}), h100)]  # fmt: skip
    loads = {"a1": Load(100.0, 1), "a2": Load(50.0, 1)}  # h1 is idle: a part on its own would go there
    index = PlacementIndex(cands, loads)
    part = QueuedJob("j-p1", 1, frozenset({"onnxruntime"}), 10.0, part_of="j")
    assert index.choose(part) == "h1"
    assert index.choose(part, same_class_as="a1") == "a2"  # the least loaded A100, as its sibling on a1
    assert index.choose(part, same_class_as="gone") == "h1"  # the sibling's follower left: any capable one


def test_a_job_asking_for_labels_goes_only_to_followers_carrying_all_of_them() -> None:
    from leader.placement.placer import unable_reason
    from leader.store.jobdocs import queued_job

    zone_a = Candidate("fa", frozenset({"onnxruntime"}), labels=(("network", "25g"), ("zone", "a")))
    zone_b = Candidate("fb", frozenset({"onnxruntime"}), labels=(("zone", "b"),))
    bare = Candidate("f0", frozenset({"onnxruntime"}))
    job = queued_job({"_id": "j1", "attempt": 1, "estimate_s": 10.0,
                      "spec": {"backends": ["onnxruntime"], "requires": {"labels": {"zone": "a"}}}})
    assert job.needs.labels == (("zone", "a"),)  # stored sorted, so the kind of job stays hashable
    index = PlacementIndex([zone_a, zone_b, bare], {"fa": Load(100.0, 5)})
    assert index.choose(job) == "fa"  # the only one labelled zone=a, though the busiest
    assert unable_reason(job, zone_b) == "needs a follower labelled zone=a"
    assert "labelled zone=a" in explain_unplaceable(job, [zone_b, bare])
    plain = QueuedJob("j2", 1, frozenset({"onnxruntime"}), 10.0)  # asking for none: any follower will do
    assert choose_follower(job=plain, candidates=[zone_b, bare], loads={}) in {"fb", "f0"}
