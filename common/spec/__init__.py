"""The job-spec language: what a user writes (job, load, LLM workload, target, network, co-location, repeats),
how it is parsed, and the grid of points it expands to."""
