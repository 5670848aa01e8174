"""gRPC definitions and their generated stubs (follower→leader telemetry, the own model server's KServe v2 API).

Nothing speaks gRPC yet: the foundation's wire protocols are REST (leader API, KServe v2 over HTTP) and Celery.
The KServe v2 gRPC service and the live-telemetry stream land here with the backends and measurement-core issues.
"""
