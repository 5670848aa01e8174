"""What to change when a point is invalid: one sentence per reason code, naming the job's fields a user can act on.

The reasons say what went wrong (follower/loadgen/verdict.py); these say what to do next. Shown under the CLI's results
table (and so at the end of `benchfleet demo`), so that a first screen that reads `valid NO` also says how to get a yes.
"""

from __future__ import annotations

from common.wire.results import ReasonCode

QUIETER = "run it where the follower has a core to itself (stop what else runs on its host)"

REMEDY: dict[ReasonCode, str] = {
    "no_requests": "nothing was sent: check load.duration and load.warmup, and the follower's log",
    "send_lag": f"the load generator's host could not send on time: {QUIETER}, or lower load.rate",
    "cap_reached": "requests waited for an in-flight slot: raise load.max_concurrency (or leave it unset), or lower load.rate",
    "server_saturated": "the server is past its capacity at this rate: that is the answer for this configuration; "
    "lower load.rate to find what it carries (load.search finds it for you)",
    "rate_missed": f"the offered rate was not reached: lower load.rate, or {QUIETER}",
    "too_few": "too few answers for a p99: raise load.duration (the preview names the shortest that gives one)",
    "generator_saturated": f"the load generator's core was busy: {QUIETER}, or lower load.rate",
    "generator_capacity": "the rate needs more generator cores than this host has: lower load.rate, or use a follower "
    "with more cores (an endpoint target may also be driven by several: target.shards)",
    "dropped": "requests were dropped at the in-flight cap: raise load.max_concurrency, or use cap_policy: wait",
    "errors": "the server failed requests: read the point's errors on its page and the server's log",
    "unanswered": "requests were still unanswered at the end: lower load.rate, or see the server's log",
    "server_not_running": "the server was gone before the point began: read the server's log on the point's page",
    "server_died": "the server died during the point: read the server's log on the point's page",
    "unstable": f"the windows disagreed: run longer (load.duration), {QUIETER}, or repeat it (repeats.count: 3)",
    "unsteady": f"one window stood out (a stall): {QUIETER}, or repeat it (repeats.count: 3)",
    "search_failed": "no rate was valid and within the SLO: widen load.search (low, high) or relax the SLO",
    "token_mismatch": "token counts disagree: check that the prompt set's tokenizer is the served model's",
    "buffered_stream": "the answers were not streamed as they were made: turn off buffering in the server or proxy",
    "shard_lost": "a shard's follower stopped during the point: check the Fleet page, then run it again",
    "shard_absent": "a shard's follower was not ready in time: check the Fleet page, then run it again",
    "shard_skew": "the shards' clocks or starts were too far apart: synchronise the followers' clocks (chrony)",
    "gpu_foreign": "another process used the GPU: stop it, or run on a follower whose GPU is its own",
    "backlog": "the server was still working off the previous probe: widen the search's range or run longer probes",
    "not_judged": "imported from another tool, whose run benchfleet did not watch: compare it with include_imported "
    "where you accept that tool's own account, or run the same load as a benchfleet job for a verdict",
    "other": "read the reason's text: it was stored before reasons had codes",
}
