# The embedded PerfDB: SecantusDB (a MongoDB wire-protocol server, GPL, run as its own process, never imported) in an
# image that starts like mongo:7 — `mongod`-style flags are not needed; MONGO_INITDB_ROOT_USERNAME and
# MONGO_INITDB_ROOT_PASSWORD create the root user on first start and the server then requires authentication
# (SCRAM-SHA-256). For a small install or a cluster with no MongoDB image; a production PerfDB is MongoDB 7.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
ENV DEBIAN_FRONTEND=noninteractive PATH=/opt/perfdb/bin:$PATH
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* && python3 -m venv /opt/perfdb \
    && pip install -q "SecantusDB>=0.7.0b3" "pymongo>=4.13" \
    && useradd --uid 10002 --user-group --create-home perfdb && mkdir -p /data/db && chown perfdb:perfdb /data/db
COPY deploy/images/perfdb-entrypoint.py /opt/perfdb/entrypoint.py
USER 10002
EXPOSE 27017
ENTRYPOINT ["python3", "/opt/perfdb/entrypoint.py"]
