"""The leader's REST API."""
