"""Development secrets for docker-compose.yml: ``scripts/dev-secrets [--dir .dev-secrets]``.

Writes, for this machine only (nothing here is ever committed):

- ``public/ca.pem``: a CA made for this run; endpoints verify the relays with it;
- ``relay-cert.pem`` / ``relay-key.pem``: the relays' certificate for localhost,
  relay-1, relay-2 and example.com, signed by that CA;
- ``sasl-credentials``: ``identity:password`` lines for the demo's endpoints, random
  passwords (also printed once, so you can attach);
- ``redis.env``: the Redis password and the services' ``APEXMESH_REDIS_URL``;
- ``redis-cluster.env``: the same, with the URL of the ``redis-cluster`` profile's three
  nodes (``redis+cluster://``, docs/redis.md);
- ``public/access-example.com.xml``: the access entries the access service seeds.

The services run as UID 10001 in their images; run as root, the files are given to that
UID (mode 0600 kept); otherwise they are made readable (0644) with a warning.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

import trustme

from apexmesh.ops.localmesh import pubsub_access_entries

DOMAIN = "example.com"
ENDPOINTS = ("fred@example.com", "barney@example.com", "dino@example.com")
#: The images' user (docker/base.Dockerfile).
APEX_UID = 10001


def write(path: Path, text: str | bytes, *, secret: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode() if isinstance(text, str) else text
    path.write_bytes(data)
    if not secret:
        path.chmod(0o644)
    elif os.geteuid() == 0:
        path.chmod(0o600)
        os.chown(path, APEX_UID, APEX_UID)
    else:
        path.chmod(0o644)
        sys.stderr.write(
            f"warning: {path} is world-readable (run as root to give it to UID {APEX_UID})\n"
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(".dev-secrets"))
    args = parser.parse_args(argv)
    out: Path = args.dir
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1", "relay-1", "relay-2", DOMAIN)
    write(out / "public" / "ca.pem", ca.cert_pem.bytes(), secret=False)
    write(out / "relay-cert.pem", b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    write(out / "relay-key.pem", cert.private_key_pem.bytes())
    passwords = {endpoint: secrets.token_urlsafe(18) for endpoint in ENDPOINTS}
    write(out / "sasl-credentials", "".join(f"{who}:{pw}\n" for who, pw in passwords.items()))
    redis_password = secrets.token_urlsafe(24)
    # One file for Redis (REDIS_PASSWORD) and the services (APEXMESH_REDIS_URL): compose
    # reads it (env_file) and hands the values to the containers, so it stays on the host
    # (0644 like any compose .env file).
    write(
        out / "redis.env",
        f"REDIS_PASSWORD={redis_password}\n"
        f"APEXMESH_REDIS_URL=redis://:{redis_password}@redis:6379/0\n",
        secret=False,
    )
    nodes = ",".join(f"redis-cluster-{n}:6379" for n in (1, 2, 3))
    write(
        out / "redis-cluster.env",
        f"REDIS_PASSWORD={redis_password}\nAPEXMESH_REDIS_URL=redis+cluster://:{redis_password}@{nodes}\n",
        secret=False,
    )
    entries = "".join(
        f"<access owner='{endpoint}' actor='*@*' actions='core:data presence:subscribe' />"
        for endpoint in ENDPOINTS
    )
    entries += f"<access owner='apex=presence@{DOMAIN}' actor='*@*' actions='core:data' />"
    entries += pubsub_access_entries(DOMAIN)
    write(
        out / "public" / f"access-{DOMAIN}.xml",
        f"<access-entries>{entries}</access-entries>\n",
        secret=False,
    )
    sys.stdout.write(f"wrote {out}/ (development only; never commit it)\n")
    for who, password in passwords.items():
        sys.stdout.write(f"  {who}  password {password}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
