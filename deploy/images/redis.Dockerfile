# Redis from Debian's package, for clusters that cannot pull redis:7 (the chart and compose take any Redis 7 image;
# both pass the password with --requirepass and keep the append-only file in /data).
ARG BASE=debian:bookworm-slim
FROM ${BASE}
RUN apt-get update && apt-get install -y --no-install-recommends redis-server redis-tools \
    && rm -rf /var/lib/apt/lists/* && mkdir -p /data && chown redis:redis /data
WORKDIR /data
USER redis
EXPOSE 6379
CMD ["redis-server", "--appendonly", "yes", "--dir", "/data", "--protected-mode", "no"]
