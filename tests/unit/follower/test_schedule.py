"""Arrival schedules: reproducible, correctly distributed, monotonic."""

from __future__ import annotations

import numpy as np
import pytest

from follower.loadgen.schedule import arrival_offsets_ns


def test_same_seed_same_offsets_and_different_seeds_differ() -> None:
    a = arrival_offsets_ns("poisson", 300.0, 5.0, seed=7)
    b = arrival_offsets_ns("poisson", 300.0, 5.0, seed=7)
    c = arrival_offsets_ns("poisson", 300.0, 5.0, seed=8)
    assert a.dtype == np.int64
    np.testing.assert_array_equal(a, b)
    assert len(a) != len(c) or not np.array_equal(a, c)


@pytest.mark.parametrize("pattern", ["poisson", "constant"])
def test_offsets_monotonic_and_inside_the_duration(pattern: str) -> None:
    offsets = arrival_offsets_ns(pattern, 1000.0, 3.0, seed=1)  # type: ignore[arg-type]
    assert offsets[0] >= 0
    assert offsets[-1] < 3_000_000_000
    assert np.all(np.diff(offsets) >= 0)


def test_poisson_mean_rate_and_exponential_gaps() -> None:
    rate, duration = 2000.0, 50.0  # 100k arrivals: the mean is within ~0.3% (1 sigma)
    offsets = arrival_offsets_ns("poisson", rate, duration, seed=3)
    assert len(offsets) / duration == pytest.approx(rate, rel=0.02)
    gaps = np.diff(offsets).astype(np.float64)
    assert gaps.mean() == pytest.approx(1e9 / rate, rel=0.02)
    # Exponential gaps have a coefficient of variation of 1.
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)


def test_constant_spacing_is_exact() -> None:
    offsets = arrival_offsets_ns("constant", 250.0, 2.0, seed=0)
    assert len(offsets) == 500
    assert offsets[0] == 0
    np.testing.assert_array_equal(np.diff(offsets), 4_000_000)


def test_constant_non_integer_period_does_not_drift() -> None:
    offsets = arrival_offsets_ns("constant", 3.0, 10.0, seed=0)
    assert len(offsets) == 30
    # i / rate rounded per request: no accumulated error.
    assert offsets[-1] == round(29 * 1e9 / 3)


@pytest.mark.parametrize(("pattern", "rate", "duration"), [("zipf", 1.0, 1.0), ("poisson", 0.0, 1.0), ("constant", 1.0, 0.0)])
def test_bad_arguments_are_refused(pattern: str, rate: float, duration: float) -> None:
    with pytest.raises(ValueError):
        arrival_offsets_ns(pattern, rate, duration, seed=0)  # type: ignore[arg-type]


@pytest.mark.parametrize(("rate", "duration"), [(200.0, 3.0), (200.0, 10.0), (37.5, 4.0), (5000.0, 1.0)])
def test_poisson_offers_exactly_the_target_count(rate: float, duration: float) -> None:
    # Conditioned on its count, so the offered rate is the target for every seed, not just on average.
    for seed in range(5):
        assert len(arrival_offsets_ns("poisson", rate, duration, seed=seed)) == round(rate * duration)


def test_poisson_gaps_pass_a_kolmogorov_smirnov_test_against_the_exponential() -> None:
    rate = 500.0
    gaps = np.diff(arrival_offsets_ns("poisson", rate, 20.0, seed=11)).astype(np.float64) / 1e9
    gaps.sort()
    cdf = 1.0 - np.exp(-rate * gaps)
    n = len(gaps)
    d = max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(n) / n))
    assert d < 1.63 / np.sqrt(n), f"KS distance {d:.4f} rejects exponential gaps at the 1% level"


# -- the other open-loop patterns ------------------------------------------------------------------------------

from common.spec.job import PointSpec  # noqa: E402
from follower.loadgen.schedule import point_offsets_ns  # noqa: E402


def _point(pattern: str, rate: float = 1000.0, **shape: object) -> PointSpec:
    return PointSpec(
        index=0, backend="onnxruntime", batch_size=1, pattern=pattern, rate=rate,  # type: ignore[arg-type]
        duration_s=10.0, warmup_s=0.0, max_concurrency=64, seed=5, **shape,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_mean_and_cv_over_10k_samples(cv: float) -> None:
    offsets = point_offsets_ns(_point("gamma", cv=cv), 10.0, seed=11)
    assert len(offsets) == 10_000
    gaps = np.diff(offsets).astype(np.float64)
    assert gaps.mean() == pytest.approx(1e6, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)
    np.testing.assert_array_equal(offsets, point_offsets_ns(_point("gamma", cv=cv), 10.0, seed=11))


def test_poisson_cv_and_mean_over_10k() -> None:
    gaps = np.diff(point_offsets_ns(_point("poisson"), 10.0, seed=2)).astype(np.float64)
    assert gaps.mean() == pytest.approx(1e6, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)


def _rate_in(offsets: np.ndarray, a_s: float, b_s: float) -> float:
    return float(((offsets >= a_s * 1e9) & (offsets < b_s * 1e9)).sum() / (b_s - a_s))


def test_ramp_rises_linearly() -> None:
    offsets = point_offsets_ns(_point("ramp", rate=200.0, rate_end=1800.0), 10.0, seed=3)
    assert len(offsets) == 10_000  # mean rate 1000 over 10 s
    assert _rate_in(offsets, 0, 1) == pytest.approx(280, rel=0.15)
    assert _rate_in(offsets, 9, 10) == pytest.approx(1720, rel=0.08)
    assert np.all(np.diff(offsets) >= 0)


def test_step_holds_each_level() -> None:
    offsets = point_offsets_ns(_point("step", rate=500.0, rate_end=2000.0, steps=4), 10.0, seed=3)
    for k, level in enumerate([500, 1000, 1500, 2000]):
        assert _rate_in(offsets, 2.5 * k + 0.1, 2.5 * (k + 1) - 0.1) == pytest.approx(level, rel=0.08)


def test_spike_and_onoff() -> None:
    spike = point_offsets_ns(_point("spike", rate=500.0, spike_rate=3000.0, spike_at_s=4.0, spike_duration_s=1.0), 10.0, 1)
    assert _rate_in(spike, 4.0, 5.0) == pytest.approx(3000, rel=0.08)
    assert _rate_in(spike, 0.0, 4.0) == pytest.approx(500, rel=0.08)
    onoff = point_offsets_ns(_point("onoff", rate=2000.0, on_s=0.5, off_s=1.5), 10.0, 1)
    phase = np.mod(onoff, 2_000_000_000)
    assert np.all(phase < 500_000_000), "nothing is sent while off"
    assert len(onoff) == pytest.approx(5 * 0.5 * 2000, abs=1)


def test_trace_replays_offsets_inside_the_run() -> None:
    offsets = point_offsets_ns(_point("trace", trace_s=[0.0, 0.25, 0.2505, 3.0, 12.0]), 10.0, seed=0)
    np.testing.assert_array_equal(offsets, [0, 250_000_000, 250_500_000, 3_000_000_000])


def test_uploaded_trace_schedule_keeps_offsets_exact_after_the_warm_up() -> None:
    from common.formats.traces import Trace
    from follower.point.plan import trace_schedule as _trace_schedule

    trace = Trace(np.array([0, 100, 250, 900, 1500], dtype=np.int64) * 1_000_000, np.array([4, 3, 2, 1, 0]),
                  np.array([10, 20, 30, 40, 50]), np.array([1, 2, 3, 4, 5]))  # fmt: skip
    run = _trace_schedule(trace, warmup_s=0.3, max_s=1.0)
    # Warm-up replays the trace's first 0.3 s; the measured part is the trace itself, shifted by the warm-up.
    assert run.offsets_ns.tolist() == [0, 100_000_000, 250_000_000, 300_000_000, 400_000_000, 550_000_000, 1_200_000_000]
    assert run.inputs is not None and run.inputs.tolist() == [4, 3, 2, 4, 3, 2, 1]
    # A language model's per-request lengths follow their entries the same way.
    assert run.prompt_tokens is not None and run.prompt_tokens.tolist() == [10, 20, 30, 10, 20, 30, 40]
    assert run.output_tokens is not None and run.output_tokens.tolist() == [1, 2, 3, 1, 2, 3, 4]
    plain = _trace_schedule(Trace(trace.offsets_ns), warmup_s=0.0, max_s=2.0)
    assert plain.offsets_ns.tolist() == trace.offsets_ns.tolist() and plain.inputs is None and plain.prompt_tokens is None
