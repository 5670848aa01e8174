"""The recommender's accuracy floor: the fastest configuration whose answers score at least the floor (held at the
lower end of their 95% interval with `confident`); a point never scored fails a floor; a floor no point reaches says
which configuration came closest."""

from __future__ import annotations

from typing import Any

from common.wire.analysis import RecommendQuery
from follower.point.quality import share
from leader.analysis.recommend import recommend


def _row(i: int, model: str, samples_per_s: float, hits: int | None, samples: int = 540) -> dict[str, Any]:
    row: dict[str, Any] = {
        "_id": f"j:{i}",
        "job_id": "j",
        "job_name": "j",
        "attempt": 1,
        "index": i,
        "model": model,
        "backend": "onnxruntime",
        "hardware": "cpu",
        "follower_id": "f",
        "batch_size": 1,
        "pattern": "poisson",
        "rate": 100.0,
        "load": "100 req/s",
        "throughput": samples_per_s,
        "samples_per_s": samples_per_s,
        "p99_ms": 5.0,
        "p99_ci_high_ms": 6.0,
        "valid": True,
    }
    if hits is not None:
        scored = share(hits, samples)
        row.update(accuracy=scored.value, accuracy_low=scored.low, accuracy_high=scored.high, accuracy_samples=samples)
    return row


# float32: 98.3% at 1,000 samples/s; INT8: 96.3% at 1,500; a model never scored, fastest of all.
ROWS = [_row(0, "digits:f32", 1000.0, 531), _row(1, "digits:int8", 1500.0, 520), _row(2, "other:1", 3000.0, None)]


def test_without_a_floor_the_fastest_ranks_first_and_shows_its_accuracy() -> None:
    answer = recommend(ROWS, RecommendQuery(p99_ms=10))
    assert [r.model for r in answer.recommendations] == ["other:1", "digits:int8", "digits:f32"]
    assert answer.recommendations[1].accuracy == 520 / 540 and answer.recommendations[0].accuracy is None


def test_a_loose_floor_keeps_the_faster_int8_and_a_tight_one_excludes_it() -> None:
    loose = recommend(ROWS, RecommendQuery(p99_ms=10, min_accuracy=0.96))
    assert [r.model for r in loose.recommendations] == ["digits:int8", "digits:f32"]  # the unscored model fails a floor
    tight = recommend(ROWS, RecommendQuery(p99_ms=10, min_accuracy=0.975))
    assert [r.model for r in tight.recommendations] == ["digits:f32"] and tight.considered == 1
    assert "top-1 accuracy >= 97.5%" in tight.query.describe()


def test_confident_holds_the_floor_at_the_lower_end_of_the_interval() -> None:
    # float32's 98.3% of 540 has an interval reaching down to about 96.9%: a floor of 97.5% it meets only by estimate.
    assert share(531, 540).low < 0.975 < share(531, 540).value
    held = recommend(ROWS, RecommendQuery(p99_ms=10, min_accuracy=0.975, confident=True))
    assert held.recommendations == [] and held.missing is not None
    assert "none reaches top-1 accuracy >= 97.5%" in held.missing and "digits:f32" not in held.missing
    assert "onnxruntime on cpu, batch 1, at 100 req/s, scored 98.3% (95% interval" in held.missing


def test_a_floor_with_no_scored_point_says_to_add_a_quality_check() -> None:
    answer = recommend([ROWS[2]], RecommendQuery(p99_ms=10, min_accuracy=0.5))
    assert answer.recommendations == [] and answer.missing is not None
    assert "none was scored for accuracy; add quality: {accuracy: {}} with labelled data" in answer.missing


def test_a_drop_from_the_models_most_accurate_is_a_floor_for_each_model_of_its_own() -> None:
    """"The fastest configuration within a point of the most accurate": each model's floor is its own best score less
    the drop (98.3% - 1 point for digits), so INT8 at 96.3% is out and float16 at 98.0% is in; another model's
    configurations are held to that model's best, not to digits'."""
    f32, int8, f16 = (_row(i, "digits:1", rate, hits) for i, rate, hits in ((0, 1000.0, 531), (1, 1500.0, 520), (2, 1200.0, 529)))
    for row, precision in ((f32, "float32"), (int8, "int8_dynamic"), (f16, "float16")):
        row["options"] = f'{{"precision": "{precision}"}}'
    other = [_row(3, "other:1", 900.0, 300), _row(4, "other:1", 2000.0, 297)]  # 55.6% and 55.0%: within a point
    other[1].update(rate=200.0, load="200 req/s")  # a higher load of the same configuration, not a repeat of the first
    answer = recommend([f32, int8, f16, *other], RecommendQuery(p99_ms=10, max_accuracy_drop=0.01))
    assert [(r.model, r.accuracy) for r in answer.recommendations] == [
        ("other:1", 297 / 540),
        ("digits:1", 529 / 540),
        ("digits:1", 531 / 540),
    ]
    assert "accuracy within 1 points of the model's most accurate" in answer.query.describe()
    both = recommend([f32, int8, f16, *other], RecommendQuery(p99_ms=10, max_accuracy_drop=0.01, min_accuracy=0.9))
    assert [r.accuracy for r in both.recommendations] == [529 / 540, 531 / 540]  # other:1 is under the absolute floor
    none = recommend([f32, int8, f16], RecommendQuery(p99_ms=10, max_accuracy_drop=0.01, min_accuracy=0.99))
    assert none.missing is not None and "none reaches top-1 accuracy >= 99% and accuracy within 1 points" in none.missing


def test_a_point_below_its_own_jobs_floor_is_never_recommended_nor_the_boards_best() -> None:
    """A job's `quality.min_accuracy` marks its points below it: the recommender passes them over with no floor of its
    own asked, and the leaderboard's best under SLO is the next fastest that met its floor (rows of jobs without a
    floor, None, are not held to one)."""
    from leader.store.rowbest import best_rows

    fast, slow, unfloored = _row(0, "digits:1", 1500.0, 520), _row(1, "digits:1", 1000.0, 531), _row(2, "digits:1", 900.0, None)
    fast.update(quality_floor_met=False, options="int8")
    slow.update(quality_floor_met=True, options="f32")
    unfloored.update(options="f16", rate=200.0)
    answer = recommend([fast, slow, unfloored], RecommendQuery(p99_ms=10))
    assert [r.accuracy for r in answer.recommendations] == [531 / 540, None]
    for row in (fast, slow, unfloored):
        row.update(team="t", slo_p99_ms=10.0)
    assert best_rows([fast, slow, unfloored])[("t", "digits:1")] is slow
    assert best_rows([dict(fast, quality_floor_met=None), slow])[("t", "digits:1")]["_id"] == fast["_id"]
