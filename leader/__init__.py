"""The benchfleet leader: REST API, PerfDB stores, placement and liveness."""
