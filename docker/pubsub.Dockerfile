# The pubsub service (services/pubsub): gRPC 7414, admin HTTP 8414.
#
#   docker build -f docker/pubsub.Dockerfile --build-arg BASE_IMAGE=apex-mesh/base:0.1.0 \
#     -t apex-mesh/pubsub:0.1.0 docker/
#
# Settings come from APEXMESH_* variables (services/pubsub/settings.py); the image binds
# loopback by default, so a deployment sets the bind hosts (the pod's address).
ARG BASE_IMAGE=apex-mesh/base:0.1.0
FROM ${BASE_IMAGE}
EXPOSE 7414 8414
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-m", "apexmesh.ops.probe", "pubsub", "/readyz"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "python", "-m", "services.pubsub"]
