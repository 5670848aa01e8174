"""The web pages in a real browser: Playwright driving Debian's chromium against a real leader HTTP server."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from benchfleet.generate.modelgen import mlp_onnx
from leader.web.render import HERE
from tests.e2e.web.browser import NEEDS_CHROMIUM, fresh_page, logged_in, serve
from tests.integration.leader.analysis_seed import pct, seed_job
from tests.integration.leader.conftest import ADMIN_TOKEN, Leader

UPLOT = HERE / "static" / "vendor" / "uplot" / "uPlot.iife.min.js"  # vendored by scripts/vendor_web.sh

pytestmark = [pytest.mark.e2e, NEEDS_CHROMIUM]


@pytest.fixture
def server(leader: Leader, chromium: Any) -> Iterator[dict[str, Any]]:
    """Seeded PerfDB (through the API) and the leader served over real HTTP by uvicorn on a free port."""
    leader.upload_model()
    jobs = []
    for i, (backends, p99s) in enumerate([(["onnxruntime", "triton"], [3.0, 7.0, 12.0, 30.0]), (["onnxruntime"], [5.0, 9.0])]):
        values = iter(p99s * 2)

        def metrics(backend: str, batch: int, rate: float, values: Any = values) -> dict[str, Any]:
            p99 = next(values)
            return {
                "latency_ms": pct(p99),
                "latency_ci_ms": {"p50": [p99 / 2 - 0.1, p99 / 2 + 0.1], "p99": [p99 * 0.9, p99 * 1.3]},
                "achieved_rate": rate * 0.98,
                "windows": [
                    {"t_s": t, "duration_s": 1.0, "requests": 50, "ok": 50, "throughput": rate, "p99_ms": 3.0 + t}
                    for t in range(3)
                ],
                "stages_ms": {"serialize": 0.2, "network": 0.5, "inference": 1.5},
            }

        jobs.append(
            seed_job(
                leader,
                name=f"web{i}",
                backends=backends,
                batches=[1, 8],
                rates=[50, 100],
                p99_slo=10,
                follower_id=f"host{i}",
                metrics=metrics,
            )
        )
    with serve(leader.settings) as url:
        yield {"url": url, "jobs": jobs, "browser": chromium}


@contextmanager
def job_page(server: dict[str, Any], job_id: str) -> Iterator[Any]:
    """Chromium logged in as the admin, on a job's page."""
    with logged_in(server["browser"], server["url"], ADMIN_TOKEN, height=900) as page:
        page.goto(f"{server['url']}/jobs/{job_id}")
        yield page


# What each uPlot chart under a selector holds: its title, series labels, non-empty values and non-white pixels drawn.
CHARTS_JS = """sel => (window.benchfleetCharts || []).filter(c => c.root.closest(sel)).map(c => {
  const canvas = c.root.querySelector('canvas');
  const px = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let inked = 0;
  for (let i = 0; i < px.length; i += 4) if (px[i + 3] > 0 && (px[i] < 240 || px[i + 1] < 240 || px[i + 2] < 240)) inked++;
  return {title: c.benchfleetSpec.title, series: c.series.slice(1).map(s => s.label), inked,
          values: c.data.slice(1).reduce((n, col) => n + col.filter(v => v !== null).length, 0)};
})"""


def drawn_charts(page: Any, selector: str) -> list[dict[str, Any]]:
    """The charts drawn under selector (see CHARTS_JS); skips, with the reason, where uPlot was not vendored."""
    if not UPLOT.is_file():
        pytest.skip("uPlot is not vendored here (scripts/vendor_web.sh needs npm)")
    page.wait_for_selector(f"{selector} .uplot canvas")
    return list(page.evaluate(CHARTS_JS, selector))


def test_leaderboard_job_and_recommendation_in_chromium(server: dict[str, Any], artifacts_dir: Path) -> None:
    shots = artifacts_dir / "web"
    shots.mkdir(exist_ok=True)
    with fresh_page(server["browser"], height=900) as page:
        page.goto(server["url"] + "/leaderboard")
        assert "/login" in page.url  # pages need a login
        page.fill("#token", "wrong-token-000000000")
        page.click("#login-submit")
        assert page.locator("#login-error").is_visible()
        page.fill("#token", ADMIN_TOKEN)
        page.click("#login-submit")
        page.wait_for_selector("#leaderboard tbody tr")
        cookie = next(c for c in page.context.cookies() if c["name"] == "benchfleet_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert ADMIN_TOKEN not in cookie["value"]  # a server-side session's id, never the API token itself
        assert page.locator("#leaderboard tbody tr").count() == 12
        page.screenshot(path=str(shots / "leaderboard.png"), full_page=True)

        page.click("a.sort[data-col=p99_ms]")  # p99 was the default ascending: one click sorts descending
        page.wait_for_url("**order=desc**")
        p99 = [float(t) for t in page.locator("#leaderboard td.p99").all_inner_texts()]
        assert p99 == sorted(p99, reverse=True) and len(p99) == 12
        page.click("a.sort[data-col=p99_ms]")
        page.wait_for_url("**order=asc**")
        p99 = [float(t) for t in page.locator("#leaderboard td.p99").all_inner_texts()]
        assert p99 == sorted(p99)
        assert page.locator("#leaderboard tr.best").count() >= 1

        page.fill("#f_backend", "triton")
        page.click("#filter-submit")
        page.wait_for_url("**f_backend=triton**")
        backends = page.locator("#leaderboard td.backend").all_inner_texts()
        assert backends and set(backends) == {"triton"} and len(backends) == 4
        page.screenshot(path=str(shots / "leaderboard-triton.png"), full_page=True)

        page.fill("#f_backend", "")
        page.fill("#rec-p99", "10")
        page.click("#rec-submit")
        page.wait_for_selector("#recommendations li.rec")
        recs = page.locator("#recommendations li.rec").all_inner_texts()
        assert 1 <= len(recs) <= 3 and all("p99" in r for r in recs)
        page.screenshot(path=str(shots / "recommendation.png"), full_page=True)
        # Sure mode: the 9 ms points (CI up to 11.7 ms) no longer qualify under 10 ms; every pick's CI ends below.
        plain_highs = [float(t) for t in page.locator("#recommendations .ci-high").all_inner_texts()]
        page.check("#rec-confident")
        page.click("#rec-submit")
        page.wait_for_url("**confident=true**")
        page.wait_for_selector("#recommendations li.rec")
        highs = [float(t) for t in page.locator("#recommendations .ci-high").all_inner_texts()]
        assert highs and all(h <= 10 for h in highs) and max(plain_highs) > 10, (plain_highs, highs)
        assert page.is_checked("#rec-confident")

        page.goto(f"{server['url']}/jobs/{server['jobs'][0]}")
        assert page.locator("#points tbody tr").count() == 8
        charts = {c["title"]: c for c in drawn_charts(page, "#charts")}
        # CDF, ladder, timeline and stage bars, each with its values and ink on its canvas.
        stage_title = next(t for t in charts if t.startswith("Stage breakdown"))
        for title in ("Latency CDF per point", "Timeline: p99 per window", stage_title):
            assert charts[title]["values"] >= 8 and charts[title]["inked"] > 500, charts[title]
        ladder = next(c for t, c in charts.items() if "throughput" in t)
        configs = ["onnxruntime b1", "onnxruntime b8", "triton b1", "triton b8"]
        assert ladder["series"] == [*configs, "Pareto front"] and ladder["values"] > 8
        page.screenshot(path=str(shots / "job.png"), full_page=True)

        page.goto(f"{server['url']}/analysis?metric=p99_ms&x=batch_size&y=rate")
        page.wait_for_selector("#analysis-charts table.heat")
        assert page.locator("#analysis-charts table.heat td.cell").count() >= 4  # heat-map cells
        page.screenshot(path=str(shots / "analysis.png"), full_page=True)

        # Compare from the Jobs list: the later job's Compare offers the earlier finished job of its model as A.
        a, b = server["jobs"]
        page.goto(f"{server['url']}/jobs")
        page.click(f'tr[data-job="{b}"] [data-action="compare"]')
        page.wait_for_selector("#compare-earlier")
        offered = page.locator("#compare-earlier a")
        assert offered.count() == 1 and a[:8] in offered.inner_text(), page.inner_text("#compare-earlier")
        page.screenshot(path=str(shots / "compare-from-jobs.png"))
        offered.click()
        page.wait_for_selector("#comparison tbody tr")
        assert page.input_value("#compare-form input[name=a]") == a and page.input_value("#compare-form input[name=b]") == b
        page.screenshot(path=str(shots / "compare.png"), full_page=True)
        page.goto(f"{server['url']}/compare?b=0123456789abcdef")  # an unknown B: said, with the form to give another
        assert "does not exist" in page.inner_text("p.err") and page.locator("#compare-earlier").count() == 0


def test_a_job_with_repeats_shows_each_configurations_spread_and_verdict(server: dict[str, Any], leader: Leader) -> None:
    """Three runs per configuration: the 100 req/s runs agree; one 50 req/s run is 40% slower, far outside the runs'
    CIs: the job page names that configuration's machine as changed and the other as repeatable."""
    p99s = iter([10.0, 20.0, 10.2, 20.1, 14.0, 19.9])  # rounds interleave: 50, 100, 50, 100, 50, 100 req/s

    def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
        p99 = next(p99s)
        return {"latency_ms": pct(p99), "achieved_rate": rate,
                "latency_ci_ms": {"p50": [p99 / 2 - 0.2, p99 / 2 + 0.2], "p99": [p99 * 0.97, p99 * 1.03]}}  # fmt: skip

    job = seed_job(leader, name="web-repeats", backends=["onnxruntime"], batches=[1], rates=[50, 100], p99_slo=30,
                   follower_id="host-r", metrics=metrics, extra="repeats: 3\n")  # fmt: skip
    with job_page(server, job) as page:
        page.wait_for_selector("#repeats tbody tr")
        rows = page.locator("#repeats tr.repeat")
        assert rows.count() == 2 and page.locator("#points tbody tr").count() == 6
        verdicts = dict(zip(rows.locator("td:nth-child(3)").all_inner_texts(),
                            rows.locator("td.verdict b").all_inner_texts(), strict=True))  # fmt: skip
        assert verdicts == {"50 req/s": "machine changed", "100 req/s": "repeatable"}, verdicts
        assert "10.00 [9.70–10.30], 10.20 [9.89–10.51], 14.00 [13.58–14.42]" in rows.nth(0).inner_text()


def test_a_language_model_job_shows_its_token_figures(server: dict[str, Any], leader: Leader, artifacts_dir: Path) -> None:
    def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
        figures = {"ttft_ms": pct(40.0), "ttft_ci_ms": {"p99": [38.0, 43.5]}, "ttft_sent_ms": pct(30.0), "itl_ms": pct(5.0),
                   "itl_request_ms": pct(4.0),
                   "tpot_ms": pct(4.5), "e2e_sent_ms": pct(200.0), "output_tokens_per_s": 16 * rate,
                   "input_tokens_per_s": 48 * rate, "user_tokens_per_s_p50": 200.0, "goodput_rps": rate * 0.9,
                   "goodput_share": 0.9, "output_tokens_asked": 3200, "output_tokens_server": 3200,
                   "output_tokens_client": 3550, "token_events": 3100,
                   "server": {"requests": 220, "prompt_tokens": 10560, "generation_tokens": 3520, "ttft_ms_mean": 12.5,
                              "prefix_cache_hit_share": 0.625, "cache_reset": True,
                              "quantiles": {"ttft_p50": {"ms": 11.25, "low_ms": 10.0, "high_ms": 20.0},
                                            "ttft_p99": {"ms": 31.5, "low_ms": 20.0, "high_ms": 40.0}}}}
        windows = [
            {"t_s": t, "duration_s": 1.0, "requests": int(rate), "ok": int(rate), "throughput": 0.9 * rate, "ttft_p99_ms": 40 + t,
             "itl_p50_ms": 5 + t, "server_running": 2 + t, "server_waiting": t, "kv_cache_usage": 0.1 * (t + 1)}
            for t in range(3)
        ]
        if rate == 20:  # the second point ran sessions: its turns and sessions
            turns = [{"turn": k, "requests": 12 - k, "prompt_tokens_mean": 48.0 + 40 * k, "ttft_ms": pct(30.0 + 5 * k)}
                     for k in range(4)]
            figures["sessions"] = {"started": 12, "completed": 9, "cut": 3, "failed": 0, "turns_mean": 3.5, "by_turn": turns,
                                   "session_ms": pct(4000.0), "tokens_mean": 612.0, "goodput": 0.4, "goodput_share": 0.75}
        return {"latency_ms": pct(200.0), "achieved_rate": rate, "offered_rate": rate, "llm": figures, "windows": windows}

    job = seed_job(leader, name="web-llm", backends=["onnxruntime"], batches=[1], rates=[10, 20], p99_slo=300,
                   follower_id="host-l", metrics=metrics)  # fmt: skip
    with job_page(server, job) as page:
        page.wait_for_selector("#llm tbody tr.llm-point")
        rows = page.locator("#llm tr.llm-point").all_inner_texts()
        assert len(rows) == 2 and "3200 / 3200 / 3550" in rows[0] and "11.25 / 31.50" in rows[0], rows
        assert page.locator("#llm tr.llm-point td.prefix-hits").all_inner_texts() == ["62.5%", "62.5%"]  # beside TTFT
        assert "[38.00–43.50]" in rows[0]  # the TTFT p99's CI beside it
        assert "20 req/s" in rows[1] and "320.0" in rows[1]  # 16 output tokens x 20 req/s
        assert page.evaluate(OVERFLOW_JS) <= 0  # the token table fits a 1,400 px window too
        curves = {c["title"].split(" (")[0]: c for c in drawn_charts(page, "#charts")}
        for name in ("Output tokens/s vs TPOT p99", "Output tokens/s vs TTFT p99"):
            assert curves[name]["series"] == ["onnxruntime b1"] and curves[name]["values"] == 2, curves[name]
        ttft = curves["Timeline: TTFT p99 per window"]
        assert ttft["series"] == ["#0", "#1"] and ttft["values"] == 6 and ttft["inked"] > 100, ttft
        assert curves["Timeline: offered and answered req/s per window"]["values"] == 12
        # The server's gauges per window: its batch and queue, its KV cache in use, each window's ITL against its batch.
        batch = curves["Timeline: the server's running batch and queue per window"]
        assert batch["series"] == ["#0 running", "#0 waiting", "#1 running", "#1 waiting"] and batch["values"] == 12, batch
        assert curves["Timeline: KV-cache use per window"]["values"] == 6
        itl = curves["ITL p50 against the server's running batch"]
        assert itl["values"] == 6 and itl["inked"] > 20, itl
        goodput = curves["Goodput: share of requests meeting the SLO against offered load"]
        assert goodput["series"] == ["onnxruntime b1"] and goodput["values"] == 2, goodput
        assert page.evaluate(OVERFLOW_JS) <= 0
        (artifacts_dir / "web").mkdir(exist_ok=True)
        page.screenshot(path=str(artifacts_dir / "web" / "llm-job.png"), full_page=True)
        # The sessions point's page: a row per turn (its context and TTFT), and what its sessions came to.
        page.goto(f"{server['url']}/jobs/{job}/points/1")
        turns = [row.split("\t") for row in page.locator("#sessions tr.turn").all_inner_texts()]
        expected = [[str(k), str(12 - k), f"{48 + 40 * k}", f"{(30 + 5 * k) / 2:.2f}", f"{30 + 5 * k:.2f}"] for k in range(4)]
        assert turns == expected, turns
        summary = page.locator("#sessions-summary").inner_text()
        assert "12 sessions arrived in the measured window: 9 completed, 3 cut" in summary, summary
        assert "75.0% of the sessions met the SLO" in summary and "prefix cache found 62.5%" in summary, summary
        assert page.locator("#sessions").count() == 1
        assert page.locator("#cache-reset").inner_text() == "the server's prefix cache emptied before the point"
        page.goto(f"{server['url']}/jobs/{job}/points/0")
        assert page.locator("#sessions").count() == 0  # a point without sessions has no such table


def test_a_sweep_a_search_and_a_language_models_recommendation_in_chromium(
    server: dict[str, Any], leader: Leader, artifacts_dir: Path
) -> None:
    """A sweep's curves, one line per server configuration with a legend that reads at 1,400 px; a search point's
    answer, probes and chart with the limit and the load found; the recommender form taking TTFT and TPOT limits and
    an output-token target, and saying what to run when nothing carries it."""
    shots = artifacts_dir / "web"
    shots.mkdir(exist_ok=True)
    p99s = iter([4.0, 9.0, 3.0, 6.0])  # threads=1 at 50 and 100 req/s, then threads=2

    def swept(backend: str, batch: int, rate: float) -> dict[str, Any]:
        return {"latency_ms": pct(next(p99s)), "achieved_rate": rate}

    sweep = seed_job(leader, name="web-sweep", backends=["onnxruntime"], batches=[1], rates=[50, 100], p99_slo=10,
                     follower_id="host-s", metrics=swept, extra="sweep: {threads: [1, 2]}\n")
    probes = [{"load": 20.0, "valid": True, "passed": True, "margin": 0.8, "p99_ms": 4.0, "achieved_rate": 20.0},
              {"load": 240.0, "valid": True, "passed": False, "margin": -2.0, "p99_ms": 60.0, "achieved_rate": 230.0},
              {"load": 69.3, "valid": True, "passed": True, "margin": 0.6, "p99_ms": 8.0, "achieved_rate": 69.0},
              {"load": 186.0, "valid": True, "passed": True, "margin": 0.05, "p99_ms": 19.0, "p99_ci_ms": [17.0, 21.5],
               "uncertain": True, "achieved_rate": 185.0},
              {"load": 195.0, "valid": True, "passed": False, "margin": -0.3, "p99_ms": 26.0, "achieved_rate": 194.0}]
    answer = {"criterion": "p99 <= 20 ms", "found": 186.0, "lowest_fail": 195.0, "precision": 0.05, "width": 0.046,
              "stopped": "resolved", "chosen": 3, "probes": probes,
              "notes": ["the verdict at 186 req/s is uncertain: both runs together still straddle the limit"]}

    def searched(backend: str, batch: int, rate: float) -> dict[str, Any]:
        return {"latency_ms": pct(19.0), "achieved_rate": 185.0, "search": answer}

    search = seed_job(leader, name="web-search", backends=["onnxruntime"], batches=[1], rates=[186], p99_slo=20,
                      follower_id="host-q", metrics=searched)

    def tokens(backend: str, batch: int, rate: float) -> dict[str, Any]:
        figures = {"ttft_ms": pct(40.0 * rate / 10), "ttft_sent_ms": pct(30.0), "itl_ms": pct(5.0), "itl_request_ms": pct(4.0),
                   "tpot_ms": pct(4.5), "e2e_sent_ms": pct(200.0), "output_tokens_per_s": 16 * rate,
                   "input_tokens_per_s": 48 * rate, "user_tokens_per_s_p50": 200.0}
        return {"latency_ms": pct(200.0), "achieved_rate": rate, "llm": figures}

    seed_job(leader, name="web-llm-rec", backends=["onnxruntime"], batches=[1], rates=[10, 20, 40], p99_slo=300,
             follower_id="host-t", metrics=tokens)
    with job_page(server, sweep) as page:
        charts = {c["title"]: c for c in drawn_charts(page, "#charts")}
        ladder = next(c for t, c in charts.items() if "throughput" in t)
        assert ladder["series"] == ["onnxruntime b1 threads=1", "onnxruntime b1 threads=2", "Pareto front"]
        # threads=2 serves 50 and 100 req/s at 3 and 6 ms, better than threads=1 at both: it is the front.
        assert ladder["values"] == 4 + 2
        cells = page.locator("#points td.t").all_inner_texts()
        assert cells == ["onnxruntime threads=1", "onnxruntime threads=1", "onnxruntime threads=2", "onnxruntime threads=2"]
        legend = page.locator("#charts figure", has_text="throughput").locator(".u-legend")
        assert legend.is_visible() and "threads=1" in legend.inner_text() and "threads=2" in legend.inner_text()
        assert page.evaluate(OVERFLOW_JS) <= 0
        page.screenshot(path=str(shots / "sweep.png"), full_page=True)

        page.goto(f"{server['url']}/jobs/{search}")
        page.wait_for_selector("#search-0")
        card = page.locator("#search-0").inner_text()
        assert "186 req/s (fails at 195), p99 <= 20 ms; 5 probes, resolved to the asked precision" in card
        assert "the verdict at 186 req/s is uncertain" in card and page.locator("#search-0 tr.probe").count() == 5
        chart = next(c for c in drawn_charts(page, "#charts") if c["title"].startswith("Search #0"))
        assert chart["series"][:3] == ["p99 at each probe", "the SLO's limit", "found: 186 req/s"]
        assert chart["inked"] > 300 and chart["values"] == 5 + 2 + 1 + 2  # probes, the limit's ends, found, 2 rings
        page.screenshot(path=str(shots / "search.png"), full_page=True)

        page.goto(f"{server['url']}/leaderboard")
        page.fill("#rec-ttft", "100")
        page.fill("#rec-tpot", "10")
        page.fill("#rec-tokens", "200")
        page.click("#rec-submit")
        page.wait_for_selector("#recommendations li.rec")
        recs = page.locator("#recommendations li.rec").all_inner_texts()
        # 40 req/s's TTFT p99 (160 ms) is over 100 ms; 10 req/s carries 160 tokens/s, under 200: only 20 req/s.
        assert len(recs) == 1 and "320.0 output tokens/s" in recs[0] and "TTFT p99 80.00 ms" in recs[0], recs
        assert page.locator("#rec-query").inner_text() == "TTFT p99 <= 100 ms, TPOT p99 <= 10 ms, >= 200 output tokens/s"
        page.screenshot(path=str(shots / "recommend-llm.png"), full_page=True)
        page.fill("#rec-tokens", "1000")
        page.click("#rec-submit")
        page.wait_for_selector("#no-recommendation")
        missing = page.locator("#no-recommendation").inner_text()
        assert "none carries the traffic asked; the most, 320.0 output tokens/s" in missing, missing


def test_api_docs_render_offline(server: dict[str, Any], artifacts_dir: Path) -> None:
    """/docs draws every operation with every request to anywhere but the leader refused (an air-gapped cluster)."""
    from leader.web.apidocs import ASSETS, VENDOR

    if not all((VENDOR / name).is_file() for name in ASSETS):
        pytest.skip("Swagger UI is not vendored here (scripts/vendor_web.sh needs npm)")
    outside: list[str] = []

    def only_the_leader(route: Any) -> None:
        if route.request.url.startswith(server["url"]) or route.request.url.startswith("data:"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    with fresh_page(server["browser"], height=1000) as page:
        page.route("**/*", only_the_leader)
        page.goto(server["url"] + "/docs")
        page.wait_for_selector("#swagger-ui .opblock")
        assert page.locator("#swagger-ui .opblock").count() >= 30
        page.screenshot(path=str(artifacts_dir / "web" / "docs.png"))
    assert outside == [], outside


OVERFLOW_JS = "() => document.documentElement.scrollWidth - window.innerWidth"
# Legend entries whose box meets the plot area of their chart (they once covered the curves), and charts wider than
# their box.
LEGEND_OVER_PLOT_JS = """() => {
  const bad = [];
  for (const chart of document.querySelectorAll('.uplot')) {
    const p = chart.querySelector('.u-over').getBoundingClientRect();
    for (const entry of chart.querySelectorAll('.u-legend .u-series')) {
      const r = entry.getBoundingClientRect();
      if (r.top < p.bottom && r.bottom > p.top && r.left < p.right && r.right > p.left) bad.push(entry.textContent);
    }
    const box = chart.closest('figure').getBoundingClientRect();
    if (p.right > box.right + 1) bad.push('plot wider than its figure: ' + chart.closest('figure').textContent.slice(0, 40));
  }
  return bad;
}"""


def test_pages_fit_1400_wide_with_legends_outside_the_plots(server: dict[str, Any], leader: Leader,
                                                            artifacts_dir: Path) -> None:  # fmt: skip
    """At 1,400 × 1,000 no page scrolls sideways, no legend covers a plot, an invalid point is marked on the job page
    and its chart, and the point page reads as a page (verdict, reasons, tables) with the raw document folded."""

    def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
        if rate < 80:
            return {"latency_ms": pct(4.0), "achieved_rate": rate}
        reason = {"code": "rate_missed", "text": f"achieved 50 req/s, below 95% of the offered {rate:g} req/s"}
        return {"latency_ms": pct(40.0), "achieved_rate": 50.0, "valid": False, "reasons": [reason]}

    bad = seed_job(leader, name="half-invalid", backends=["onnxruntime"], batches=[1], rates=[50, 100], p99_slo=10,
                   follower_id="host9", metrics=metrics)  # fmt: skip
    def all_valid(backend: str, batch: int, rate: float) -> dict[str, Any]:
        return {"latency_ms": pct(4.0), "achieved_rate": rate}

    one = {"backends": ["onnxruntime"], "batches": [1], "rates": [50, 100], "p99_slo": 10, "follower_id": "host9"}
    reference = seed_job(leader, name="all-valid", metrics=all_valid, **one)
    good, other = server["jobs"]
    shots = artifacts_dir / "web"
    shots.mkdir(exist_ok=True)
    pages = {
        "leaderboard": "/leaderboard", "job": f"/jobs/{good}", "job-invalid": f"/jobs/{bad}",
        "point-invalid": f"/jobs/{bad}/points/1", "point": f"/jobs/{good}/points/0", "compare": f"/compare?a={good}&b={other}",
        "compare-invalid": f"/compare?a={reference}&b={bad}", "analysis": "/analysis",
    }  # fmt: skip
    with fresh_page(server["browser"], height=1000) as page:
        page.goto(server["url"] + "/login")
        assert "benchfleet tokens create" in page.inner_text("#login-help")  # which token to paste
        page.fill("#token", ADMIN_TOKEN)
        page.click("#login-submit")
        page.wait_for_selector("#leaderboard")
        for name, path in pages.items():
            page.goto(server["url"] + path)
            page.wait_for_load_state("load")
            page.screenshot(path=str(shots / f"fit-{name}.png"), full_page=True)
            assert page.evaluate(OVERFLOW_JS) <= 0, f"{name} scrolls sideways"
            assert page.evaluate(LEGEND_OVER_PLOT_JS) == [], name
            if name == "job-invalid":
                assert page.locator("#points tr.invalid").count() == 1 and page.locator("#points tr.valid").count() == 1
                if UPLOT.is_file():
                    ladder = next(c for c in drawn_charts(page, "#charts") if "throughput" in c["title"])
                    assert ladder["series"][-1] == "invalid point" and ladder["values"] == 2 + 1  # ringed red
                else:  # without the chart library the page says so, and the tables still hold every figure
                    assert "chart library is not installed" in page.inner_text("#charts")
            if name == "point-invalid":
                assert page.inner_text("#verdict").startswith("invalid")
                assert "below 95% of the offered 100 req/s" in page.inner_text("#reasons")
                assert page.locator("#latency tbody tr").count() >= 1 and "95% confidence" not in page.content()
                assert not page.is_visible("#point-json")  # the raw document is folded away
                page.click("#raw summary")
                assert page.is_visible("#point-json")
            if name == "compare-invalid":  # B's 100 req/s point is invalid: shown with its reason, judged nothing
                assert page.locator("#comparison tr.invalid").count() == 1, page.inner_text("#comparison")
                assert page.locator("#comparison tr.unchanged").count() == 1  # the 50 req/s points, both valid
                shown = page.inner_text("#comparison tr.invalid")
                assert "B's point is invalid: achieved 50 req/s, below 95% of the offered 100 req/s" in shown, shown
                assert "1 point not judged" in page.inner_text("#compare-summary")
            if name == "analysis":  # one model's map by default, never a mean over different models
                assert page.input_value("#heatmap-model") == "ident:1"
            if name == "point":
                assert page.inner_text("#verdict").startswith("valid") and page.locator("#stages tbody tr").count() == 3
                assert "p99 " in page.inner_text("#cis")
                doc_height = page.evaluate("() => document.documentElement.scrollHeight")
                assert doc_height < 3000, doc_height  # the raw dump once made it 5,000 px


# Where each series of a line chart is drawn: per series, its pairs and how many have the series' own colour on the
# canvas within 3 px of where the pair sits (a mark, or a line through it); and each bar chart's stack tops as drawn
# (uPlot's data holds the running totals: the tallest column is the top).
MARKS_JS = """sel => (window.benchfleetCharts || []).filter(c => c.root.closest(sel)).map(c => {
  const ctx = c.root.querySelector('canvas').getContext('2d');
  const near = (x, y, rgb) => {
    const px = ctx.getImageData(Math.round(x) - 3, Math.round(y) - 3, 7, 7).data;
    for (let i = 0; i < px.length; i += 4)
      if (Math.abs(px[i] - rgb[0]) + Math.abs(px[i + 1] - rgb[1]) + Math.abs(px[i + 2] - rgb[2]) < 60) return true;
    return false;
  };
  const series = c.series.slice(1).map((s, k) => {
    const hex = s.stroke(c, k + 1), rgb = [1, 3, 5].map(i => parseInt(hex.slice(i, i + 2), 16));
    let pairs = 0, inked = 0;
    c.data[k + 1].forEach((y, i) => {
      if (y === null) return;
      pairs++;
      if (near(c.valToPos(c.data[0][i], 'x', true), c.valToPos(y, 'y', true), rgb)) inked++;
    });
    return {label: s.label, pairs, inked};
  });
  const bar = c.benchfleetSpec.kind === 'bar';
  const tops = bar ? c.data[0].map((_, i) => Math.max(...c.data.slice(1).map(col => col[i] ?? 0))) : [];
  return {title: c.benchfleetSpec.title, series, tops};
})"""


def test_a_one_rate_job_marks_every_configuration_and_stacks_its_stages_to_the_mean_latency(
    server: dict[str, Any], leader: Leader, artifacts_dir: Path
) -> None:
    """The README's first job measures each configuration at one rate: both points valid, the same achieved rate. The
    p99-vs-throughput chart draws a mark for each (it drew nothing), and each stage bar stops at the point's mean
    latency (the service total was once stacked on its own parts: bars twice the latency)."""
    stages = {"queue": 0.5, "infer": 2.0, "encode": 0.3, "transmission": 0.67, "service": 3.47}

    def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
        p99 = 6.0 if backend == "triton" else 3.0
        return {"latency_ms": {**pct(p99), "mean": 4.0}, "achieved_rate": rate, "stages_ms": stages}

    backends = ["onnxruntime", "triton"]
    job = seed_job(leader, name="one-rate", backends=backends, batches=[1], rates=[50], p99_slo=10, follower_id="host1",
                   metrics=metrics)
    shots = artifacts_dir / "web"
    shots.mkdir(exist_ok=True)
    with job_page(server, job) as page:
        drawn_charts(page, "#charts")
        charts = {c["title"]: c for c in page.evaluate(MARKS_JS, "#charts")}
        cdf_ticks = page.evaluate(TICKS_JS, "Latency CDF")
        page.locator("#charts figure.chart", has_text="throughput").screenshot(path=str(shots / "job-one-rate-ladder.png"))
        page.screenshot(path=str(shots / "job-one-rate.png"), full_page=True)
    ladder = next(c for t, c in charts.items() if "throughput" in t)
    marked = {s["label"]: (s["pairs"], s["inked"]) for s in ladder["series"]}
    assert marked["onnxruntime b1"] == (1, 1) and marked["triton b1"] == (1, 1), ladder
    bars = next(c for t, c in charts.items() if t.startswith("Stage breakdown"))
    assert bars["tops"] == pytest.approx([4.0, 4.0], abs=1e-9), bars
    # Latencies from 1.5 to 7.8 ms hold no whole decade but 10's neighbours: the log axis is labelled at 2 and 5 (its
    # labels were all blanked by uPlot's own filter, which keeps only 1×10^k).
    assert cdf_ticks[0] == ["2", "5"], cdf_ticks


def test_the_roofline_is_a_roof_ticked_at_decades_and_the_heat_map_has_its_scale(
    server: dict[str, Any], leader: Leader, artifacts_dir: Path
) -> None:
    """An MLP (dense layers whose FLOPs are counted) on the roofline: each device's roof is its bandwidth slope to the
    ridge and its compute flat (three corners, no markers), its log axes ticked at whole decades (they read 1.02e+11);
    the heat map shows its colour scale from the lowest value to the highest."""
    leader.upload_model(name="mlp", data=mlp_onnx(inputs=64, hidden=128))

    def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
        return {"latency_ms": pct(2.0 * batch), "achieved_rate": rate}

    grid = {"backends": ["onnxruntime"], "batches": [1, 8], "rates": [50, 100], "p99_slo": 50, "follower_id": "host1"}
    seed_job(leader, name="mlp-roof", metrics=metrics, model="mlp:1", **grid)
    shots = artifacts_dir / "web"
    shots.mkdir(exist_ok=True)
    with logged_in(server["browser"], server["url"], ADMIN_TOKEN, height=1000) as page:
        page.goto(f"{server['url']}/analysis?metric=p99_ms&x=batch_size&y=rate&model=mlp:1")
        drawn_charts(page, "#analysis-charts")
        roof = page.evaluate(ROOF_JS)
        scale = page.locator("#analysis-charts .heat-scale")
        low, high = scale.locator(".heat-low").inner_text(), scale.locator(".heat-high").inner_text()
        page.screenshot(path=str(shots / "analysis-roofline.png"), full_page=True)
    ceilings = [s for s in roof["series"] if s["label"].startswith("ceiling")]
    assert ceilings and all(s["pairs"] == 3 and not s["marked"] for s in ceilings), roof
    for axis in roof["ticks"]:
        assert len(axis) >= 2 and all(re.fullmatch(r"1e-?\d+|0\.0*1|1|10+", t) for t in axis), roof["ticks"]
    assert (low, high) == ("2", "16"), (low, high)  # p99 2 ms at batch 1 to 16 ms at batch 8


# Each axis's tick labels as drawn (uPlot's own, after its filter: a blank is no label) of the chart titled so.
TICKS_JS = """(title) => {
  const c = (window.benchfleetCharts || []).find(c => c.benchfleetSpec.title.startsWith(title));
  return c.axes.map(a => (a._values || []).filter(v => v !== null && v !== ''));
}"""

# The roofline chart as drawn: per series its pairs and whether uPlot draws its marks; each axis's tick labels.
ROOF_JS = """() => {
  const c = (window.benchfleetCharts || []).find(c => c.benchfleetSpec.title.startsWith('Roofline'));
  const series = c.series.slice(1).map((s, k) => ({label: s.label, pairs: c.data[k + 1].filter(v => v !== null).length,
                                                    marked: s.points.show(c, k + 1) === true}));
  return {series, ticks: c.axes.map(a => (a._values || []).filter(v => v !== null && v !== ''))};
}"""


def test_charts_answer_hover_zoom_and_legend_clicks(server: dict[str, Any]) -> None:
    """Hovering shows the values under the cursor in the legend, dragging zooms the x axis and a double click resets
    it, and clicking a legend entry hides its series (and brings it back)."""
    with job_page(server, server["jobs"][0]) as page:
        drawn_charts(page, "#charts")
        ladder = page.locator("#charts figure.chart", has_text="throughput").locator(".uplot")
        over = ladder.locator(".u-over").bounding_box()
        assert over is not None
        page.mouse.move(over["x"] + over["width"] * 0.5, over["y"] + over["height"] * 0.5)
        values = ladder.locator(".u-legend .u-series .u-value").all_inner_texts()
        assert re.fullmatch(r"[\d.]+", values[0]), values  # the x under the cursor: an achieved rate
        assert any(re.fullmatch(r"[\d.]+", v) for v in values[1:]), values  # and a p99 of a series there

        x_range = "i => [window.benchfleetCharts[i].scales.x.min, window.benchfleetCharts[i].scales.x.max]"
        cdf = 0  # the first chart on the page
        box = page.locator("#charts .uplot").nth(cdf).locator(".u-over").bounding_box()
        assert box is not None
        full = page.evaluate(x_range, cdf)
        page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] / 2)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2, steps=5)
        page.mouse.up()
        zoomed = page.evaluate(x_range, cdf)
        assert full[0] < zoomed[0] < zoomed[1] < full[1], (full, zoomed)
        page.mouse.dblclick(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        assert page.evaluate(x_range, cdf) == full

        entry = ladder.locator(".u-legend .u-series").nth(1)  # entry 0 is the x value
        shown = "() => window.benchfleetCharts[1].series[1].show"
        entry.click()
        assert "u-off" in (entry.get_attribute("class") or "") and page.evaluate(shown) is False
        entry.click()
        assert page.evaluate(shown) is True


def test_the_html_report_draws_its_charts_offline(server: dict[str, Any], leader: Leader, tmp_path: Path) -> None:
    """The downloaded report, opened from a file with every request refused, draws the same charts: the chart library
    and the data are inside it."""
    if not UPLOT.is_file():
        pytest.skip("uPlot is not vendored here (scripts/vendor_web.sh needs npm)")
    job = server["jobs"][0]
    response = leader.client.get(f"/api/v1/jobs/{job}/report.html", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert response.status_code == 200
    report = tmp_path / "report.html"
    report.write_text(response.text)
    refused: list[str] = []

    def nothing_but_the_file(route: Any) -> None:
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    with fresh_page(server["browser"], height=1000) as page:
        page.route("**/*", nothing_but_the_file)
        page.goto(report.as_uri())
        charts = drawn_charts(page, "#charts")
    assert refused == []
    assert len(charts) >= 4 and all(c["inked"] > 500 for c in charts if c["values"]), charts


def test_a_co_location_job_shows_its_interference_matrix(server: dict[str, Any], leader: Leader) -> None:
    """Each model alone and beside the other: the job page's matrix has a row per model, its p99 and rate alone, and
    beside the other with the ratio to alone."""
    leader.upload_model(name="ident2", version="1")
    p99s = iter([4.0, 2.0, 10.0, 3.0])  # a alone, b alone, a beside b, b beside a

    def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
        return {"latency_ms": pct(next(p99s)), "achieved_rate": rate}

    job = seed_job(leader, name="web-colocate", backends=["onnxruntime"], batches=[1], rates=[50], p99_slo=100,
                   follower_id="host-c", metrics=metrics, extra="colocate: {models: [ident2:1], cpus: shared}\n")  # fmt: skip
    with job_page(server, job) as page:
        page.wait_for_selector("#interference tbody tr")
        rows = page.locator("#interference tbody tr").all_inner_texts()
        assert len(rows) == 2 and rows[0].startswith("ident:1") and rows[1].startswith("ident2:1"), rows
        assert "4.00 ms" in rows[0] and "10.00 ms" in rows[0] and "[×2.50, ×1.00]" in rows[0], rows[0]
        assert "2.00 ms" in rows[1] and "[×1.50, ×1.00]" in rows[1], rows[1]


def test_quality_is_drawn_on_the_job_leaderboard_recommendation_and_compare_pages(leader: Leader, chromium: Any) -> None:
    """Two jobs whose points scored their answers (`quality:`): the job page's quality table, the leaderboard's top-1
    accuracy column (and its filter), the recommender's accuracy floor from the form, and the compare page's top-1
    accuracy row with its regression, each as drawn in the browser."""
    from follower.point.quality import share

    leader.upload_model()

    def scoring(hits: int) -> Any:
        def metrics(backend: str, batch: int, rate: float) -> dict[str, Any]:
            top1, top3 = share(hits, 540), share(min(hits + 6, 540), 540)
            quality = {"accuracy": {"top1": top1.model_dump(), "k": 3, "topk": top3.model_dump()}, "not_run": [], "seconds": 0.5}
            return {"latency_ms": pct(5.0), "achieved_rate": rate * 0.98, "quality": quality}

        return metrics

    one_point: dict[str, Any] = {"backends": ["onnxruntime"], "batches": [1], "rates": [100], "p99_slo": 10}
    good = seed_job(leader, name="fp32", follower_id="q0", metrics=scoring(531), **one_point)
    worse = seed_job(leader, name="int8", follower_id="q1", metrics=scoring(486), **one_point)
    with serve(leader.settings) as url, logged_in(chromium, url, ADMIN_TOKEN, height=900) as page:
        page.goto(f"{url}/jobs/{good}")
        assert page.locator("#quality tr.quality-point td.top1").all_inner_texts() == [share(531, 540).points()]
        assert "top-3 " + share(537, 540).points() in page.locator("#quality tr.quality-point").inner_text()

        page.goto(f"{url}/leaderboard?sort=p99_ms&f_accuracy=%3E%3D0.95")
        cells = page.locator("#leaderboard td.accuracy").all_inner_texts()
        assert cells == ["98.3% [96.9, 99.1]"], cells  # the 90.0% job's row is filtered out
        assert page.locator("#leaderboard th:has-text('top-1 accuracy') a.sort").count() == 0  # not a whole-board sort

        page.fill("#rec-p99", "10")
        page.fill("#rec-accuracy", "0.95")
        page.click("#rec-submit")
        page.wait_for_selector("#recommendations li.rec")
        assert page.locator("#recommendations li.rec").count() == 1
        assert "top-1 accuracy 98.3% [96.9, 99.1]" in page.locator("#recommendations li.rec").inner_text()
        assert "top-1 accuracy >= 95%" in page.locator("#rec-query").inner_text()

        page.goto(f"{url}/compare?a={good}&b={worse}")
        row = page.locator("#comparison tr.quality-metric")
        assert row.count() == 1 and "regression" in row.inner_text() and "-8.33 pt" in row.inner_text()
