# The relay service (services/relay): the BEEP edge (apex-edge 10288,
# apex-mesh 10289), pod-to-pod gRPC 7401, admin HTTP 8401.
#
#   docker build -f docker/relay.Dockerfile --build-arg BASE_IMAGE=apex-mesh/base:0.1.0 \
#     -t apex-mesh/relay:0.1.0 docker/
#
# Settings come from APEXMESH_* variables (services/relay/settings.py); the image binds
# loopback by default, so a deployment sets the bind hosts (the pod's address).
ARG BASE_IMAGE=apex-mesh/base:0.1.0
FROM ${BASE_IMAGE}
EXPOSE 10288 10289 7401 8401
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-m", "apexmesh.ops.probe", "relay", "/readyz"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "python", "-m", "services.relay"]
