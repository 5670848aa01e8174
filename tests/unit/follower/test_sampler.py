"""Summaries of sampled resource series: window cut, energy integration, CO2 and cost arithmetic, absent fields."""

from __future__ import annotations

import numpy as np
import pytest

from follower.host.sampler import ResourceSampler, SamplerConfig, Samples, Window, summarize


def _samples(power: bool = True) -> Samples:
    t = np.arange(0, 11) * 100_000_000  # 0..1 s every 100 ms
    return Samples(
        t_ns=t,
        cpu_percent=np.linspace(50, 150, 11),
        rss_bytes=np.full(11, 100 * 2**20, dtype=np.float64),
        gpu_util_percent=np.full(11, 40.0) if power else None,
        gpu_memory_bytes=np.full(11, 2.0 * 2**30) if power else None,
        gpu_power_w=np.full(11, 200.0) if power else None,
    )


def test_summary_cuts_the_window_and_integrates_power() -> None:
    config = SamplerConfig(interval_s=0.1, grid_g_co2_per_kwh=500.0, instance_price_per_hour=7.2)
    res = summarize(_samples(), Window(0, 1_000_000_000, 1000), config)
    assert res.samples == 11 and res.interval_ms == pytest.approx(100.0)
    assert res.server_cpu_percent_mean == pytest.approx(100.0) and res.server_cpu_percent_max == pytest.approx(150.0)
    assert res.server_rss_mb_max == pytest.approx(100.0)
    assert res.gpu_memory_mb_max == pytest.approx(2048.0) and res.gpu_util_percent_mean == pytest.approx(40.0)
    assert res.energy_j == pytest.approx(200.0)  # 200 W for 1 s
    assert res.energy_per_request_j == pytest.approx(0.2)
    # 0.2 J × 1e6 = 2e5 J = 0.0556 kWh → × 500 g/kWh
    assert res.co2_g_per_1m_requests == pytest.approx(2e5 / 3.6e6 * 500)
    # 7.2 per hour for 1 s over 1000 requests, scaled to 1M
    assert res.cost_per_1m_requests == pytest.approx(7.2 / 3600 / 1000 * 1e6)
    half = summarize(_samples(), Window(0, 500_000_000, 500), config)
    assert half.samples == 6 and half.energy_j == pytest.approx(100.0)


def test_no_gpu_means_absent_fields_and_no_energy() -> None:
    res = summarize(_samples(power=False), Window(0, 1_000_000_000, 1000), SamplerConfig(grid_g_co2_per_kwh=500.0))
    assert res.server_cpu_percent_mean is not None
    assert res.gpu_util_percent_mean is None and res.gpu_memory_mb_max is None and res.gpu_power_w_mean is None
    assert res.energy_j is None and res.energy_per_request_j is None and res.co2_g_per_1m_requests is None
    assert res.cost_per_1m_requests is None  # no price configured


def test_cpu_energy_from_a_counter_series() -> None:
    s = _samples(power=False)
    s.cpu_energy_j = np.linspace(0.0, 30.0, 11)  # 30 W package
    res = summarize(s, Window(200_000_000, 700_000_000, 100), SamplerConfig(grid_g_co2_per_kwh=100.0))
    assert res.cpu_energy_j == pytest.approx(15.0) and res.energy_per_request_j == pytest.approx(0.15)


def test_sampler_without_a_process_reports_no_cpu_or_rss() -> None:
    sampler = ResourceSampler(None, SamplerConfig(interval_s=0.02)).start()
    samples = sampler.stop()
    assert samples.cpu_percent is None and samples.rss_bytes is None
    res = summarize(samples, Window(0, 1, 1), SamplerConfig())
    assert res.server_cpu_percent_mean is None and res.server_rss_mb_mean is None
