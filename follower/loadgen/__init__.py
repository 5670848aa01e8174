"""The open-loop load generator: seeded schedules, a precise async driver, and the validity verdict."""
