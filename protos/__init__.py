"""gRPC definitions and their generated stubs (follower→leader telemetry, the own model server's KServe v2 API).

telemetry.proto: live progress, follower → leader (leader.telemetry serves it, follower.telemetry reports to it).
Stubs are generated and committed (see the .proto's header); tests/unit/protos checks they are current.
"""
