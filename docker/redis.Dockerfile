# Redis 7 from Debian 12, for runs that cannot pull images (scripts/containers builds the
# whole mesh from a locally made Debian base). The chart and docker-compose.yml use the
# official redis image by default; either works, with AOF on a volume at the --dir given.
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# A fixed UID before the package makes its user, so volumes can be prepared for it.
RUN groupadd --system --gid 999 redis \
 && useradd --system --uid 999 --gid redis --home-dir /var/lib/redis --shell /usr/sbin/nologin redis \
 && apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/*
USER 999:999
EXPOSE 6379
CMD ["redis-server", "--dir", "/var/lib/redis", "--appendonly", "yes"]
