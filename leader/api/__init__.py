"""The leader's REST API."""

# Every API route lives under this prefix (the pages and /metrics do not).
API_PREFIX = "/api/v1"
