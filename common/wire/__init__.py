"""The contracts that cross between leader, followers and clients: jobs, results, records, progress, followers,
models, tokens, secrets, analyses and the shard barrier's messages."""
