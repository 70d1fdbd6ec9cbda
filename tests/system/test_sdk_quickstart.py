"""docs/sdk.md's code, run against the mesh ``scripts/run`` starts (scripts/demo.py, TLS
and SASL on) with only what it prints, so the page cannot rot (issue #29):

- its first ``python`` block, the quickstart, as a program run as written (two
  endpoints on two relay pods: create, subscribe, publish, receive, cancel);
- every other ``python`` block after it, as the page says (the quickstart's
  definitions in scope, top-level ``await``), each in turn;
- ``apexctl topics access`` on a topic the SDK created.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Final

import pytest

from tests.support.demo_mesh import ROOT, DemoMesh
from tests.support.polling import scaled

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]

SDK_DOC: Final = ROOT / "docs" / "sdk.md"
_BLOCK: Final = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)

#: Runs the blocks after the first as docs/sdk.md says: the quickstart imported (its
#: ``main`` not run), then each block with top-level await, each within the deadline in
#: seconds its first argument gives (the test passes it scaled; the runner is a program
#: of its own, so it cannot import the test harness).
RUNNER: Final = textwrap.dedent(
    """
    import ast, asyncio, sys, types
    from pathlib import Path

    deadline = float(sys.argv[1])
    blocks = [Path(name).read_text() for name in sys.argv[2:]]
    quickstart = types.ModuleType("quickstart")
    exec(compile(blocks[0], "docs/sdk.md block 1", "exec"), quickstart.__dict__)

    async def run():
        for number, text in enumerate(blocks[1:], start=2):
            print(f"--- block {number}", flush=True)
            scope = dict(quickstart.__dict__)
            flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            code = compile(text, f"docs/sdk.md block {number}", "exec", flags=flags)
            pending = eval(code, scope)
            if pending is not None:
                async with asyncio.timeout(deadline):
                    await pending

    asyncio.run(run())
    print("--- all blocks ran", flush=True)
    """
)


def blocks() -> list[str]:
    return _BLOCK.findall(SDK_DOC.read_text(encoding="utf-8"))


def run_python(mesh: DemoMesh, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=scaled(240),
        check=False,
        cwd=tmp_path,
        env=mesh.env(),  # what the printed line sets: APEXCTL_CONTEXT, PATH
    )


def test_the_page_opens_with_a_complete_program() -> None:
    first = blocks()[0]
    assert 'os.environ["APEXCTL_CONTEXT"]' in first
    assert 'if __name__ == "__main__":' in first


def test_the_quickstart_runs_as_written(demo_mesh: DemoMesh, tmp_path: Path) -> None:
    program = tmp_path / "quickstart.py"
    program.write_text(blocks()[0], encoding="utf-8")
    done = run_python(demo_mesh, tmp_path, str(program))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "barney received b'hello, barney' on quickstart.news" in done.stdout


def test_every_other_block_runs_after_it(demo_mesh: DemoMesh, tmp_path: Path) -> None:
    names = []
    for number, text in enumerate(blocks(), start=1):
        path = tmp_path / f"block{number}.py"
        path.write_text(text, encoding="utf-8")
        names.append(str(path))
    assert len(names) >= 5, "the quickstart and its continuations"
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER, encoding="utf-8")
    done = run_python(demo_mesh, tmp_path, str(runner), str(scaled(60)), *names)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--- all blocks ran" in done.stdout
    assert "b'barney may publish'" in done.stdout


def apexctl(mesh: DemoMesh, *args: str, code: int = 0) -> Any:
    done = subprocess.run(
        ["apexctl", "--json", *args],
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=False,
        env=mesh.env(),
    )
    assert done.returncode == code, f"apexctl {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout) if code == 0 else done.stdout + done.stderr


def test_apexctl_topics_access(demo_mesh: DemoMesh) -> None:
    """The demo's topic (seeded: anyone subscribes and publishes) through ``apexctl
    topics access``: listed, a grant and a deny in words, a revoke."""
    topic = "demo.news@example.com"
    listed = apexctl(demo_mesh, "topics", "access", "ls", topic)
    assert {e["actor"] for e in listed} >= {"*@*"}
    assert all(e["owner"] == "apex=pubsub/demo.news@example.com" for e in listed)
    granted = apexctl(
        demo_mesh, "topics", "access", "grant", topic, "*@rubble.com", "subscribe", "publish"
    )
    assert granted["actions"] == ["core:data", "pubsub:cancel", "pubsub:subscribe"]
    denied = apexctl(demo_mesh, "topics", "access", "deny", topic, "*@rubble.com", "publish")
    assert denied["actions"] == ["pubsub:cancel", "pubsub:subscribe"]
    everything = apexctl(demo_mesh, "topics", "access", "deny", topic, "dino@example.com")
    assert everything["actions"] == []
    for actor in ("*@rubble.com", "dino@example.com"):
        assert apexctl(demo_mesh, "topics", "access", "revoke", topic, actor)["removed"] is True
    left = {e["actor"] for e in apexctl(demo_mesh, "topics", "access", "ls", topic)}
    assert left == {e["actor"] for e in listed}
    apexctl(demo_mesh, "topics", "access", "grant", topic, "x@y.com", "read", code=1)
    apexctl(demo_mesh, "topics", "access", "ls", "no-domain", code=1)
