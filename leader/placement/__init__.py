"""Placement (tier 1 load balancing) and follower liveness."""
