"""The README's Python section and the examples run, verbatim, against the real service."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from .conftest import REPO, Server

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def readme_block() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("<!-- python-walkthrough:start -->", 1)[1]
    section = section.split("<!-- python-walkthrough:end -->", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "no ```python block between the python-walkthrough markers"
    return match.group(1)


def run(args: list[str], server: Server, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DIRICHLET_URL=server.base, DIRICHLET_TOKEN=server.admin)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_readme_block_is_the_walkthrough_example() -> None:
    assert readme_block() == (EXAMPLES / "walkthrough.py").read_text()


def test_the_readme_python_section_runs(server: Server, tmp_path: Path) -> None:
    script = tmp_path / "readme_walkthrough.py"
    script.write_text(readme_block())
    done = run([str(script)], server, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "refused (409 budget-exhausted)" in out
    assert "age_band" in out and "diagnosis" in out  # the DataFrame's labels came back
    assert "in 1 release" in out


def test_the_naive_bayes_example_runs_short(server: Server, tmp_path: Path) -> None:
    out_csv = tmp_path / "nb.csv"
    done = run(
        [str(EXAMPLES / "naive_bayes.py"), "--short", "--out", str(out_csv)], server, tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = out_csv.read_text().splitlines()
    # 3 references + 3 mechanisms × 3 ε, two metrics each.
    assert len(lines) == 1 + 2 * (3 + 9)
    assert "398 training and 171 test records" in done.stderr
