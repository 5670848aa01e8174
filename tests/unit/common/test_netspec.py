"""A job's network conditions: profiles, overrides, what they need of a follower, and how placement says no."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from common.spec.needs import offered_backends, placement_backends
from common.spec.network import NETEM, TBF, NetworkSpec
from leader.domain import Candidate, QueuedJob
from leader.placement.placer import explain_unplaceable, unable_reason


def test_a_profile_gives_its_figures_and_a_given_figure_replaces_one() -> None:
    four_g = NetworkSpec(profile="4g", loss_pct=1)
    assert (four_g.effective_delay_ms(), four_g.effective_loss_pct(), four_g.effective_rate_mbit()) == (85.0, 1, 9.0)
    assert NetworkSpec(delay_ms=50).describe() == "custom: 50 ms ±0 each way, 0% loss, unlimited"
    with pytest.raises(ValidationError, match="jitter_ms cannot exceed delay_ms"):
        NetworkSpec(delay_ms=5, jitter_ms=10)
    with pytest.raises(ValidationError, match="profile"):
        NetworkSpec.model_validate({"profile": "5g"})


def test_the_conditions_need_the_qdiscs_that_make_them() -> None:
    assert placement_backends(["onnxruntime"], trusted=False) == {"onnxruntime"}
    assert placement_backends(["onnxruntime"], trusted=False, network={"rate_mbit": 5}) == {"onnxruntime", TBF}
    assert placement_backends(["onnxruntime"], trusted=False, network={"profile": "4g"}) == {"onnxruntime", NETEM, TBF}
    assert placement_backends(["onnxruntime"], trusted=False, network={"delay_ms": 50}) == {"onnxruntime", NETEM}


def test_placement_sends_shaped_jobs_only_where_they_can_be_shaped_and_says_why() -> None:
    job = QueuedJob("j1", 1, placement_backends(["onnxruntime"], trusted=False, network={"delay_ms": 50}), 10.0)
    rate_only = Candidate("f-tbf", offered_backends(["onnxruntime"], [], shaping=["tbf"]))
    both = Candidate("f-both", offered_backends(["onnxruntime"], [], shaping=["netem", "tbf"]))
    assert unable_reason(job, both) is None
    why = unable_reason(job, rate_only)
    assert why == "needs a follower that can shape its servers' links with delay, jitter or loss (netem)"
    assert "netem" in explain_unplaceable(job, [rate_only])
