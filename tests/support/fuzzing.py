"""What the fuzz targets of tests/fuzz/ and their bounded runs in the unit suite share:
loading a target module by path (tests/fuzz is not a package: atheris runs its files as
scripts) and the seeded byte-level mutator."""

from __future__ import annotations

import importlib.util
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_target(name: str) -> ModuleType:
    """``tests/fuzz/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "fuzz" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mutate(
    rng: random.Random,
    data: bytes,
    other: bytes,
    *,
    numbers: Sequence[int],
    inserts: Sequence[bytes],
) -> bytes:
    """One to four mutations of ``data``: a bit flip, random octets, a deletion, a
    repeat, a number rewritten to one of ``numbers`` (where most checks live), a splice
    of ``other``, or one of ``inserts`` (the protocol's own tokens)."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(7)
        pos = rng.randrange(len(buf) + 1)
        if choice == 0 and buf:
            buf[min(pos, len(buf) - 1)] ^= 1 << rng.randrange(8)
        elif choice == 1:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif choice == 2:
            del buf[pos : pos + rng.randint(1, 16)]
        elif choice == 3:
            end = min(len(buf), pos + rng.randint(1, 64))
            buf[pos:pos] = buf[pos:end]
        elif choice == 4:
            digits = [i for i, b in enumerate(buf) if 48 <= b <= 57]
            if digits:
                i = rng.choice(digits)
                buf[i : i + 1] = str(rng.choice(numbers)).encode()
        elif choice == 5:
            start = rng.randrange(len(other) + 1)
            buf[pos:] = other[start : start + rng.randint(0, 200)]
        else:
            buf[pos:pos] = rng.choice(inserts)
    return bytes(buf)


def fuzz_main(
    name: str, run: Callable[[float], int], fuzz_one: Callable[[bytes], None]
) -> None:  # pragma: no cover - a long run, by hand
    """A target's command line: ``--seconds N`` runs its seeded mutator for N seconds;
    anything else goes to atheris, when it is installed."""
    if len(sys.argv) >= 3 and sys.argv[1] == "--seconds":
        started = time.monotonic()
        count = run(float(sys.argv[2]))
        print(f"{name}: {count} inputs in {time.monotonic() - started:.0f} s, no failure")
        return
    try:
        import atheris  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        sys.exit(
            "atheris is not installed: pip install atheris, or run the seeded mutator "
            "with --seconds N"
        )
    atheris.Setup(sys.argv, fuzz_one)
    atheris.Fuzz()
