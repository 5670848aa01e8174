"""The bound on one request's values (common/tensors.py), where the follower meets it: an endpoint whose metadata
declares an input past it is refused naming the tensor before any body is built, and a batch that takes a request
past it is refused by build_bodies itself; big bodies come in fewer variants, all within the bound together."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from common.tensors import MAX_REQUEST_ELEMENTS
from common.wire.models import TensorSpec
from follower.loadgen.bodies import build_bodies
from follower.protocols import PROTOCOLS, Endpoint
from follower.protocols.calls import EndpointError
from tests.http_stub import answering


@pytest.fixture
def metadata_server() -> Iterator[str]:
    """A KServe v2 endpoint whose model metadata declares an input of [-1, 30000000] (the attack's 146-byte model)."""
    inputs = [{"name": "x", "datatype": "FP32", "shape": [-1, 30000000]}]
    outputs = [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}]
    with answering(json.dumps({"name": "m", "inputs": inputs, "outputs": outputs}).encode()) as url:
        yield url


def test_an_endpoint_declaring_an_input_past_the_bound_is_refused_naming_it(metadata_server: str) -> None:
    with pytest.raises(EndpointError, match=r"tensor 'x' of shape \[-1, 30000000\] holds 30,000,000 values per sample"):
        PROTOCOLS["kserve-http"].signature(Endpoint("kserve-http", metadata_server, "m"))


def test_build_bodies_refuses_a_batch_past_the_bound_and_keeps_big_variants_within_it() -> None:
    wide = TensorSpec(name="x", datatype="FP32", shape=[-1, 1_000_000])  # 1 M values a sample: declarable
    with pytest.raises(ValueError, match=r"a request of batch 9 holds 9,000,000 values; a request may hold at most 8,388,608"):
        build_bodies([wide], batch_size=9, seed=0)
    bodies = build_bodies([TensorSpec(name="x", datatype="FP32", shape=[-1, 2_000_000])], batch_size=1, seed=0)
    assert len(bodies) == MAX_REQUEST_ELEMENTS // 2_000_000 == 4  # not 16 bodies of 2 M values
    assert len(build_bodies([TensorSpec(name="x", datatype="FP32", shape=[-1, 4])], batch_size=8, seed=0)) == 16
