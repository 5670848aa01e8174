"""Leaderboard, recommender, comparison/regression, outliers and exports against the real leader app and SecantusDB."""

from __future__ import annotations

import io
import json
import random
import re
from typing import Any

import pyarrow.parquet as pq
import pytest

from common.stats import quantile
from common.wire.analysis import RecommendQuery
from follower.point.quality import share
from leader.analysis.recommend import config_key
from leader.store.rowbest import meets_slo
from tests.integration.leader.analysis_seed import latencies, pct, seed_job
from tests.integration.leader.conftest import ADMIN, Leader

pytestmark = pytest.mark.integration


def grid_metrics(seed: int) -> Any:
    rng = random.Random(seed)

    def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
        p99 = round(rng.uniform(2, 40), 3)
        valid = rng.random() > 0.15
        return {
            "latency_ms": pct(p99),
            "achieved_rate": round(rate * rng.uniform(0.9, 1.0), 2),  # requests/s, as the follower reports it
            "valid": valid,
            "invalid_reasons": [] if valid else ["send lag"],
            "resources": {"cost_per_1m_requests": round(rng.uniform(0.1, 2.0), 3), "energy_per_request_j": 0.5},
        }

    return metrics


@pytest.fixture
def seeded(leader: Leader) -> dict[str, Any]:
    leader.upload_model()
    jobs = [
        seed_job(
            leader,
            name=f"grid{i}",
            backends=["onnxruntime", "triton"],
            batches=[1, 4, 16],
            rates=[50, 100, 200],
            p99_slo=20,
            follower_id=f"f{i}",
            metrics=grid_metrics(i),
        )
        for i in range(2)
    ]
    return {"jobs": jobs}


def get(leader: Leader, path: str, **params: Any) -> Any:
    response = leader.client.get(path, headers=ADMIN, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def test_leaderboard_sorts_filters_pages_and_highlights(leader: Leader, seeded: dict[str, Any]) -> None:
    page = get(leader, "/api/v1/leaderboard", sort="p99", order="asc", limit=100)
    assert page["total"] == 36
    p99s = [row["p99_ms"] for row in page["rows"]]
    assert p99s == sorted(p99s)
    triton = get(leader, "/api/v1/leaderboard", sort="throughput", order="desc", filter="backend:triton", limit=5, offset=2)
    assert triton["total"] == 18 and len(triton["rows"]) == 5 and {r["backend"] for r in triton["rows"]} == {"triton"}
    full = get(leader, "/api/v1/leaderboard", sort="throughput", order="desc", filter="backend=triton", limit=100)["rows"]
    assert [r["id"] for r in full[2:7]] == [r["id"] for r in triton["rows"]]
    under = get(leader, "/api/v1/leaderboard", filter=["p99<10", "valid:true"], limit=100)
    assert all(r["p99_ms"] < 10 and r["valid"] for r in under["rows"])
    best = [r for r in page["rows"] if r["best"]]
    qualifying = [r for r in page["rows"] if r["valid"] and r["p99_ms"] <= 20]
    assert all(r["samples_per_s"] == pytest.approx(r["throughput"] * r["batch_size"]) for r in page["rows"])
    assert len(best) == 1 and best[0]["samples_per_s"] == max(r["samples_per_s"] for r in qualifying)
    assert page["rows"][0]["cost_usd_per_1m"] is not None and page["rows"][0]["energy_wh_per_1m"] == pytest.approx(0.5e6 / 3600)
    bad = leader.client.get("/api/v1/leaderboard", headers=ADMIN, params={"sort": "nope"})
    assert bad.status_code == 400 and bad.json()["field"] == "sort"
    bad = leader.client.get("/api/v1/leaderboard", headers=ADMIN, params={"filter": "p99<abc"})
    assert bad.status_code == 400 and bad.json()["field"] == "filter"
    assert leader.client.get("/api/v1/leaderboard").status_code == 401


def brute_force_top3(
    rows: list[dict[str, Any]], *, slo: float, min_tp: float | None, min_samples: float | None, max_cost: float | None
) -> tuple[list[str], int]:
    """The recommender's answer worked out from the rows alone: every qualifying point, the best per configuration
    by samples/s (requests/s x batch size; then cost, p99, id), the three best configurations."""

    def ok(r: dict[str, Any]) -> bool:
        cost = r["cost_usd_per_1m"]
        return bool(
            r["valid"] and r["p99_ms"] is not None and r["throughput"] is not None and r["p99_ms"] <= slo
            and (min_tp is None or r["throughput"] >= min_tp)
            and (min_samples is None or r["throughput"] * r["batch_size"] >= min_samples)
            and (max_cost is None or (cost is not None and cost <= max_cost))
        )  # fmt: skip

    def key(r: dict[str, Any]) -> tuple[float, float, float, str]:
        cost = r["cost_usd_per_1m"]
        return (-r["throughput"] * r["batch_size"], cost if cost is not None else float("inf"), r["p99_ms"], r["id"])

    qualifying = [r for r in rows if ok(r)]
    best: dict[Any, dict[str, Any]] = {}
    for r in qualifying:
        if config_key(r) not in best or key(r) < key(best[config_key(r)]):
            best[config_key(r)] = r
    return [r["id"] for r in sorted(best.values(), key=key)[:3]], len(qualifying)


@pytest.mark.parametrize(
    "slo,min_tp,min_samples,max_cost",
    [(20, None, None, None), (10, 100, None, None), (30, None, None, 1.0), (0.5, None, None, None), (25, None, 900, None)],
)
def test_recommender_top3_matches_brute_force(
    leader: Leader, seeded: dict[str, Any], slo: float, min_tp: Any, min_samples: Any, max_cost: Any
) -> None:
    params = {"p99_ms": slo} | ({"min_throughput": min_tp} if min_tp else {}) | ({"max_cost": max_cost} if max_cost else {})
    params |= {"min_samples_per_s": min_samples} if min_samples else {}
    answer = get(leader, "/api/v1/recommend", **params)
    rows = get(leader, "/api/v1/leaderboard", limit=1000)["rows"]
    expected, considered = brute_force_top3(rows, slo=slo, min_tp=min_tp, min_samples=min_samples, max_cost=max_cost)
    got = [(r["evidence"]["id"], r["rank"]) for r in answer["recommendations"]]
    assert got == [(rid, i + 1) for i, rid in enumerate(expected)]
    assert answer["considered"] == considered
    for rec in answer["recommendations"]:
        assert rec["p99_ms"] <= slo and (min_tp is None or rec["throughput"] >= min_tp)
        assert rec["samples_per_s"] == pytest.approx(rec["throughput"] * rec["batch_size"])
        assert min_samples is None or rec["samples_per_s"] >= min_samples
        assert max_cost is None or rec["cost_usd_per_1m"] <= max_cost


def test_recommender_ranks_by_samples_served_not_requests(leader: Leader) -> None:
    """Batch 8 at 150 req/s serves 1,200 samples/s; batch 1 at 900 req/s serves 900: batch 8 is the better
    configuration, the recommender's first pick and the leaderboard's best under SLO."""
    leader.upload_model()

    def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
        return {"latency_ms": pct(15.0 if batch == 8 else 5.0), "achieved_rate": 150.0 if batch == 8 else 900.0}

    job = seed_job(leader, name="batches", backends=["onnxruntime"], batches=[1, 8], rates=[100], p99_slo=20,
                   follower_id="batches", metrics=metrics)  # fmt: skip
    answer = get(leader, "/api/v1/recommend", p99_ms=20, filter=f"job_id={job}")
    picks = [(r["batch_size"], r["throughput"], r["samples_per_s"]) for r in answer["recommendations"]]
    assert picks == [(8, 150.0, 1200.0), (1, 900.0, 900.0)]
    rows = get(leader, "/api/v1/leaderboard", filter=f"job_id={job}", limit=10)["rows"]
    assert [r["batch_size"] for r in rows if r["best"]] == [8]
    assert get(leader, "/api/v1/recommend", p99_ms=20, filter=f"job_id={job}", min_samples_per_s=1000)["considered"] == 1


def test_a_point_run_several_times_is_recommended_only_if_every_run_qualifies(leader: Leader) -> None:
    """Repeats: batch 8's second run misses the 20 ms SLO, so batch 8 is not recommended on its lucky first run;
    batch 1's two runs both qualify and the one that served less stands as the evidence."""
    leader.upload_model()
    runs = iter([(1, 8.0, 500.0), (8, 15.0, 200.0), (1, 9.0, 480.0), (8, 26.0, 190.0)])  # rounds: batch 1, 8, 1, 8

    def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
        got, p99, served = next(runs)
        assert got == batch
        return {"latency_ms": pct(p99), "achieved_rate": served}

    job = seed_job(leader, name="repeated", backends=["onnxruntime"], batches=[1, 8], rates=[100], p99_slo=20,
                   follower_id="rep", metrics=metrics, extra="repeats: 2\n")  # fmt: skip
    answer = get(leader, "/api/v1/recommend", p99_ms=20, filter=f"job_id={job}")
    assert [(r["batch_size"], r["throughput"], r["candidates"]) for r in answer["recommendations"]] == [(1, 480.0, 2)]
    assert answer["recommendations"][0]["evidence"]["repeat"] == 1 and answer["considered"] == 2
    # The leaderboard's best under the job's SLO (20 ms) is the same point, by the same run, not batch 8's lucky one.
    rows = get(leader, "/api/v1/leaderboard", filter=f"job_id={job}", limit=10)["rows"]
    assert [(r["batch_size"], r["repeat"]) for r in rows if r["best"]] == [(1, 1)]
    loose = get(leader, "/api/v1/recommend", p99_ms=30, filter=f"job_id={job}")["recommendations"]
    assert [(r["batch_size"], r["samples_per_s"]) for r in loose] == [(8, 8 * 190.0), (1, 480.0)]


def test_confident_recommendation_holds_the_slo_at_the_ci_upper_end(leader: Leader) -> None:
    """Batch 8 has the throughput and a p99 under 20 ms, but its p99's 95% CI reaches 26 ms: only batch 1 is sure."""
    leader.upload_model()

    def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
        p99, high, throughput = (18.0, 26.0, 900.0) if batch == 8 else (12.0, 15.0, 300.0)
        return {"latency_ms": pct(p99), "achieved_rate": throughput,
                "latency_ci_ms": {"p50": [p99 / 2 - 1, p99 / 2 + 1], "p99": [p99 * 0.9, high]}}  # fmt: skip

    job = seed_job(leader, name="confident", backends=["onnxruntime"], batches=[1, 8], rates=[100], p99_slo=20,
                   follower_id="conf", metrics=metrics)  # fmt: skip
    plain = get(leader, "/api/v1/recommend", p99_ms=20, filter=f"job_id={job}")
    assert not plain["query"]["confident"] and [r["batch_size"] for r in plain["recommendations"]] == [8, 1]
    assert plain["recommendations"][0]["p99_ci_high_ms"] == 26.0
    sure = get(leader, "/api/v1/recommend", p99_ms=20, filter=f"job_id={job}", confident="true")
    assert sure["query"]["confident"] and [r["batch_size"] for r in sure["recommendations"]] == [1]
    assert sure["recommendations"][0]["p99_ci_high_ms"] == 15.0 and sure["considered"] == 1
    # Nothing qualifies: the answer says which constraint no point met, the closest, and what to run.
    none = get(leader, "/api/v1/recommend", p99_ms=5, filter=f"job_id={job}")
    assert none["recommendations"] == [] and none["missing"].startswith("not enough evidence: none of 2 valid points")
    assert "run a search" in none["missing"] and "slo: {p99_ms: 5}" in none["missing"]
    asked_nothing = leader.client.get("/api/v1/recommend", headers=ADMIN, params={"min_throughput": 10})
    assert asked_nothing.status_code == 400 and "ttft_ms" in asked_nothing.json()["message"], asked_nothing.text
    bad = leader.client.get("/api/v1/recommend", headers=ADMIN, params={"ttft_ms": -1})
    assert bad.status_code == 400 and bad.json()["field"] == "ttft_ms", bad.text
    row = next(r for r in get(leader, "/api/v1/leaderboard", filter=f"job_id={job}", limit=10)["rows"] if r["batch_size"] == 8)
    assert row["p99_ci_high_ms"] == 26.0


def test_planted_regression_is_flagged_and_unchanged_rerun_is_not(leader: Leader) -> None:
    leader.upload_model()
    base = {("onnxruntime", 1): 5.0, ("onnxruntime", 8): 9.0}

    def run(name: str, seed: int, factor: float) -> str:
        def raw(backend: str, batch: int, rate: float) -> Any:
            # The planted change: every latency of batch 8 scaled, so its p99 grows by `factor`.
            scale = base[(backend, batch)] * (factor if batch == 8 else 1.0)
            return latencies(3000, scale_ms=scale, seed=seed * 10 + batch)

        def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
            lat = raw(backend, batch, rate)
            import numpy as np

            return {"latency_ms": pct(float(np.quantile(lat, 0.99))), "achieved_rate": rate}

        return seed_job(
            leader,
            name=name,
            backends=["onnxruntime"],
            batches=[1, 8],
            rates=[100],
            p99_slo=50,
            follower_id="cmp",
            metrics=metrics,
            raw=raw,
        )

    a = run("reg", 1, 1.0)
    rerun = run("reg", 2, 1.0)
    slower = run("reg", 3, 1.15)
    pin = leader.client.put("/api/v1/baselines/reg", headers=ADMIN, json={"job_id": a})
    assert pin.status_code == 200, pin.text
    unchanged = get(leader, "/api/v1/compare", a="baseline:reg", b=rerun)
    assert unchanged["regressions"] == 0
    assert all(p["test"] == "bootstrap+mannwhitney" and p["verdict"] == "unchanged" for p in unchanged["points"])
    flagged = get(leader, "/api/v1/compare", a=a, b=slower)
    verdicts = {p["key"].split("|")[1]: p for p in flagged["points"]}
    assert verdicts["b8"]["verdict"] == "regression" and verdicts["b8"]["ci_low"] > 0
    assert verdicts["b8"]["change"] == pytest.approx(0.15, abs=0.08)
    assert verdicts["b1"]["verdict"] == "unchanged" and flagged["regressions"] == 1
    missing = leader.client.get("/api/v1/compare", headers=ADMIN, params={"a": "baseline:none", "b": a})
    assert missing.status_code == 404 and missing.json()["field"] == "a"
    # A shared baseline is its pinner's: another submitter cannot repoint it (they may pin their own).
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "mal", "role": "submitter"}).json()
    mal = {"Authorization": f"Bearer {made['token']}"}
    hijack = leader.client.put("/api/v1/baselines/reg", headers=mal, json={"job_id": slower})
    assert hijack.status_code == 403 and hijack.json()["field"] == "name"
    assert get(leader, "/api/v1/compare", a="baseline:reg", b=rerun)["regressions"] == 0  # still pinned to `a`
    assert leader.client.put("/api/v1/baselines/mine", headers=mal, json={"job_id": slower}).status_code == 200
    assert leader.client.put("/api/v1/baselines/mine", headers=mal, json={"job_id": a}).status_code == 200


def test_outlier_follower_is_flagged(leader: Leader) -> None:
    leader.upload_model()
    for i, follower in enumerate(["n1", "n2", "n3", "n4"]):
        p99 = 20.0 if follower == "n3" else 10.0 + i * 0.3

        def metrics(backend: str, batch: int, rate: float, p99: float = p99) -> dict[str, Any]:
            return {"latency_ms": pct(p99)}

        seed_job(
            leader,
            name="fleetcheck",
            backends=["onnxruntime"],
            batches=[1],
            rates=[50],
            p99_slo=50,
            follower_id=follower,
            metrics=metrics,
        )
    report = get(leader, "/api/v1/outliers", name="fleetcheck")
    assert report["outliers"] == ["n3"] and report["followers"] == ["n1", "n2", "n3", "n4"]


def test_exports(leader: Leader, seeded: dict[str, Any]) -> None:
    job = seeded["jobs"][0]
    csv_text = leader.client.get(f"/api/v1/jobs/{job}/export", headers=ADMIN, params={"format": "csv"}).text
    assert csv_text.splitlines()[0].startswith("id,job_id") and len(csv_text.splitlines()) == 19
    rows = json.loads(leader.client.get(f"/api/v1/jobs/{job}/export", headers=ADMIN, params={"format": "json"}).content)
    assert len(rows) == 18 and rows[0]["job_id"] == job
    table = pq.read_table(
        io.BytesIO(leader.client.get(f"/api/v1/jobs/{job}/export", headers=ADMIN, params={"format": "parquet"}).content)
    )
    assert table.num_rows == 18 and "p99_ms" in table.column_names
    bad = leader.client.get(f"/api/v1/jobs/{job}/export", headers=ADMIN, params={"format": "xls"})
    assert bad.status_code == 400 and bad.json()["field"] == "format"
    report = leader.client.get(f"/api/v1/jobs/{job}/report.html", headers=ADMIN)
    assert report.status_code == 200 and 'id="chart-data"' in report.text and "/static/" not in report.text
    # Self-contained: the chart library and the data are inline; nothing is loaded from anywhere.
    assert re.search(r"""<(script|link|img)[^>]+(src|href)=""", report.text) is None
    assert "function" in report.text.split('id="chart-data"')[-1]  # the charts' script follows the data


def test_meets_slo_uses_the_jobs_own_slo() -> None:
    assert meets_slo({"valid": True, "p99_ms": 5.0, "slo_p99_ms": 10.0})
    assert not meets_slo({"valid": True, "p99_ms": 15.0, "slo_p99_ms": 10.0})
    assert not meets_slo({"valid": False, "p99_ms": 1.0, "slo_p99_ms": 10.0})


def test_compare_reads_the_measured_requests_only(leader: Leader) -> None:
    """Two runs of one point with the same measured latencies and very different warm-ups: Compare judges the measured
    requests, as every other view does (it once judged warm-up too, and called such runs an improvement)."""
    import numpy as np

    leader.upload_model()
    measured = {seed: latencies(3000, scale_ms=3.0, seed=seed) for seed in (1, 2)}

    def run(name: str, seed: int, warmup_ms: float) -> str:
        def raw(backend: str, batch: int, rate: float) -> Any:
            return measured[seed]

        def warm(backend: str, batch: int, rate: float) -> Any:
            return np.full(400, warmup_ms)  # 400 warm-up answers: 12% of the run, all of its p99 if counted

        def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
            return {"latency_ms": pct(quantile(measured[seed], 0.99)), "achieved_rate": rate}

        return seed_job(leader, name=name, backends=["onnxruntime"], batches=[1], rates=[100], p99_slo=50,
                        follower_id="warm", metrics=metrics, raw=raw, warmup_s=0.5, warmup_raw=warm)  # fmt: skip

    cold_warmup, quiet_warmup = run("warm-a", 1, 80.0), run("warm-b", 2, 1.0)
    compared = get(leader, "/api/v1/compare", a=cold_warmup, b=quiet_warmup)
    (point,) = compared["points"]
    assert point["test"] == "bootstrap+mannwhitney", point
    # The nearest rank, the estimator every figure uses (common/stats.py).
    assert point["a_p99_ms"] == pytest.approx(quantile(measured[1], 0.99), rel=1e-6)
    assert point["b_p99_ms"] == pytest.approx(quantile(measured[2], 0.99), rel=1e-6)
    assert point["verdict"] == "unchanged" and compared["regressions"] == 0, point


def test_recommender_honours_an_accuracy_floor_over_the_api(leader: Leader) -> None:
    """Batch 8 serves more but its answers score 96.3% (a kernel that changes answers, say); batch 1 scores 98.3%: a
    floor of 97.5% leaves batch 1 alone, and the leaderboard rows carry each accuracy with its interval."""
    leader.upload_model()

    def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
        top1 = share(520 if batch == 8 else 531, 540).model_dump()
        return {
            "latency_ms": pct(15.0 if batch == 8 else 5.0),
            "achieved_rate": 150.0 if batch == 8 else 900.0,
            "quality": {"accuracy": {"top1": top1, "k": 1}, "not_run": [], "seconds": 0.4},
        }

    one_job: dict[str, Any] = {"backends": ["onnxruntime"], "batches": [1, 8], "rates": [100], "p99_slo": 20}
    job = seed_job(leader, name="floor", follower_id="floor", metrics=metrics, **one_job)
    loose = get(leader, "/api/v1/recommend", p99_ms=20, filter=f"job_id={job}")
    assert [r["batch_size"] for r in loose["recommendations"]] == [8, 1]
    tight = get(leader, "/api/v1/recommend", p99_ms=20, filter=f"job_id={job}", min_accuracy=0.975)
    assert [(r["batch_size"], r["accuracy"]) for r in tight["recommendations"]] == [(1, 531 / 540)]
    assert "top-1 accuracy >= 97.5%" in RecommendQuery.model_validate(tight["query"]).describe()
    rows = get(leader, "/api/v1/leaderboard", filter=[f"job_id={job}", "accuracy>=0.97"], limit=10)["rows"]
    assert [(r["batch_size"], r["accuracy_samples"]) for r in rows] == [(1, 540)]
    bad = leader.client.get("/api/v1/recommend", headers=ADMIN, params={"p99_ms": 20, "min_accuracy": 2})
    assert bad.status_code == 400 and bad.json()["field"] == "min_accuracy", bad.text
