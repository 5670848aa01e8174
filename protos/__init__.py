"""gRPC definitions and their generated stubs (follower→leader telemetry, the own model server's KServe v2 API).

telemetry.proto: live progress, follower → leader (leader.telemetry serves it, follower.link.progress reports to it).
grpc_predict_v2.proto: the standard KServe v2 inference API (follower.servers.kserve_grpc serves it; the load
generator's follower.protocols.transports.grpc_client calls it on our servers and on Triton's gRPC port).
Stubs are generated and committed (scripts/gen_protos.sh regenerates them all); tests/unit/protos checks they are current.
"""
