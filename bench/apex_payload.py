"""Benchmark of APEX payload parsing (``apexmesh.apex.content.parse_payload``).

Run: ``.venv/bin/python bench/apex_payload.py [--quick]``

Times a 256-octet multipart/related payload (control document and one binary part) and a
plain application/beep+xml payload. Each figure is printed beside a baseline measured in
the same run over the same buffer, ``bytes.split`` on the CRLF ``--boundary`` delimiter
(resp. on the empty line), the least any splitter must do, so the ratio is comparable
across machines.

The last line of output is JSON: a list of {name, value, unit, baseline, ratio}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from apexmesh.apex.content import parse_payload

Result = dict[str, Any]

CONTROL = b"<data content='cid:2@x'><originator identity='a@x'/><recipient identity='b@x'/></data>"


def multipart_256() -> bytes:
    """256 octets: the control document (named by ``start``) and a binary part."""
    head = (
        b'Content-Type: multipart/related; boundary="B"; start="<1@x>"\r\n\r\n'
        b"--B\r\nContent-Type: application/beep+xml\r\nContent-ID: <1@x>\r\n\r\n"
        + CONTROL
        + b"\r\n--B\r\nContent-ID: <2@x>\r\n\r\n"
    )
    tail = b"\r\n--B--\r\n"
    payload = head + b"GIF89a\x00\xff\r\n"[: 256 - len(head) - len(tail)] + tail
    assert len(payload) == 256, len(payload)
    return payload


def per_call_us(fn: Callable[[], object], number: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / number * 1e6


def result(name: str, value: float, baseline: float) -> Result:
    return {
        "name": name,
        "value": round(value, 3),
        "unit": "us/payload",
        "baseline": round(baseline, 3),
        "ratio": round(value / baseline, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke test)")
    args = parser.parse_args(argv)
    number = 2_000 if args.quick else 20_000
    repeats = 3 if args.quick else 7
    multipart = multipart_256()
    plain = b"Content-Type: application/beep+xml\r\n\r\n" + CONTROL
    assert parse_payload(multipart).parts["2@x"].body.startswith(b"GIF")
    assert parse_payload(plain).control == CONTROL
    results: list[Result] = []
    for name, payload, separator in (
        ("parse_payload_multipart_256B", multipart, b"\r\n--B"),
        ("parse_payload_beep_xml", plain, b"\r\n\r\n"),
    ):
        value = per_call_us(lambda p=payload: parse_payload(p), number, repeats)
        base = per_call_us(lambda p=payload, s=separator: p.split(s), number, repeats)
        results.append(result(name, value, base))
        print(
            f"{name}: {value:.2f} us/payload ({1e6 / value:,.0f}/s), "
            f"bytes.split baseline {base:.3f} us, ratio {value / base:.1f}"
        )
    sys.stdout.flush()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
