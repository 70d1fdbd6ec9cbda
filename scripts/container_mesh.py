"""The README's demo against the mesh run from the container images (scripts/containers).

The same plan as ``scripts/run`` (apexmesh/ops/localmesh.py: redis-server, three relay
pods in two domains, access, report, presence and pubsub per domain, TLS and SASL made
for this run, nothing in development mode), but every process is a container started
from its image with ``docker run --network host``: read-only root filesystem, every
capability dropped, no new privileges, the image's own non-root user. The run's files
(certificates, SASL credentials, access seeds) are mounted read-only at the same path.

Usage (scripts/containers sets these up): ``python scripts/container_mesh.py --tag TAG
--exit-after-demo [--workdir DIR]`` with ``DOCKER_HOST`` naming the engine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from functools import partial
from pathlib import Path

from apexmesh.ops.localmesh import Child, LocalMesh

sys.path.insert(0, str(Path(__file__).resolve().parent))
import demo

#: The images' user (docker/base.Dockerfile) and Redis's (docker/redis.Dockerfile).
APEX_UID = 10001
REDIS_UID = 999

#: What every container gets: the hardening the Helm chart's securityContext applies.
HARDENING = (
    "--network=host",
    "--read-only",
    "--tmpfs=/tmp",
    "--cap-drop=ALL",
    "--security-opt=no-new-privileges",
)


class ContainerMesh(LocalMesh):
    """LocalMesh whose processes are containers (see the module docstring)."""

    def __init__(self, workdir: Path, *, tag: str, run_id: str) -> None:
        super().__init__(workdir)
        self.tag = tag
        self.run_id = run_id

    def _name(self, name: str) -> str:
        return f"apexmesh-{self.run_id}-{name}".replace(".", "-")

    def _write_files(self) -> dict[str, Path]:
        files = super()._write_files()
        # The services run as the image's user: give it the run's files (0600 stays).
        for path in self.workdir.iterdir():
            if path.is_file():
                os.chown(path, APEX_UID, APEX_UID)
        return files

    def _write_context(self, redis_url: str) -> None:
        super()._write_context(redis_url)
        # Written after _write_files: the dashboard's container reads it as that user.
        os.chown(self.context_file, APEX_UID, APEX_UID)

    def command(self, child: Child) -> list[str]:
        image = f"apex-mesh/{child.module.removeprefix('services.')}:{self.tag}"
        return [
            "docker",
            "run",
            "--rm",
            f"--name={self._name(child.name)}",
            *HARDENING,
            f"--volume={self.workdir}:{self.workdir}:ro",
            # -e NAME without a value: docker takes it from its own environment, which is
            # the child's (LocalMesh starts this command with child.env).
            *(f"--env={name}" for name in sorted(child.env)),
            image,
        ]

    def redis_binary(self) -> str:
        return "redis-server"  # inside the image

    def redis_command(self, binary: str, data: Path) -> list[str]:
        os.chown(data, REDIS_UID, REDIS_UID)
        return [
            "docker",
            "run",
            "--rm",
            f"--name={self._name('redis')}",
            *HARDENING,
            f"--volume={data}:{data}",
            f"apex-mesh/redis:{self.tag}",
            *super().redis_command(binary, data),
        ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", required=True, help="the images' tag")
    parser.add_argument("--run-id", default=str(os.getpid()), help="container name part")
    args, rest = parser.parse_known_args(argv)
    make = partial(ContainerMesh, tag=args.tag, run_id=args.run_id)
    return asyncio.run(demo.main(rest, make))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
