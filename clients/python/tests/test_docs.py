"""The README's Python section and the examples run, verbatim, against the real service."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import HERE, REPO, Server

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
    # Step 8: the analyst's 0.4 is refused by the allocation of 0.3, and 0.25 of it is spent.
    assert "refused (409 allocation-exhausted): 0.3000 of it left" in out
    assert "analyst charged 0.25" in out
    assert re.search(r"Allocation\(token_id='\w+', epsilon=0\.29999\d*, spent=0\.25,", out), out
    assert "allocation change:" in out
    # Step 9: the histogram is planned within the budget and charged exactly its planned cost.
    histogram = r"^planned \w+ ε [0-9.e-]+ cost [0-9.e-]+ AccuracyForecast\(l2=0\.0"
    assert re.search(histogram, out, re.M), out
    assert re.search(r"^planned dirichlet ε 0\.0999", out, re.M), out
    assert "fits: True" in out
    charged = re.search(r"^planned ([0-9.e-]+) charged ([0-9.e-]+)$", out, re.M)
    assert charged and charged.group(1) == charged.group(2), out


def non_private_rows(printed: str) -> list[str]:
    return [
        " ".join(line.split()[:4])
        for line in printed.splitlines()
        if line.startswith(("non-private", "uniform"))
    ]


def test_the_naive_bayes_port_agrees_with_the_rust_example(server: Server, tmp_path: Path) -> None:
    """Same split, bins and scoring: the non-private and uniform rows are the Rust example's."""
    rust = Path(
        os.environ.get("DIRICHLET_RUST_NAIVE_BAYES", REPO / "target/debug/examples/naive_bayes")
    )
    assert rust.exists(), f"{rust} is missing: cargo build --example naive_bayes"
    args = ["--epsilon", "10", "--repetitions", "1"]
    rust_run = subprocess.run(
        [str(rust), "--url", server.base, "--admin-token", server.admin, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rust_run.returncode == 0, rust_run.stdout + rust_run.stderr
    python_run = run([str(EXAMPLES / "naive_bayes.py"), *args], server, tmp_path)
    assert python_run.returncode == 0, python_run.stdout + python_run.stderr
    expected = non_private_rows(rust_run.stdout)
    assert len(expected) == 6
    assert non_private_rows(python_run.stdout) == expected


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


def test_the_client_readme_populations_block_runs(
    server: Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("dp_accounting")
    readme = (HERE.parent / "README.md").read_text()
    start = readme.index("## Populations and external charges")
    block = readme[readme.index("```python\n", start) + len("```python\n") :]
    block = block[: block.index("```\n")]
    monkeypatch.setenv("DIRICHLET_URL", server.base)
    monkeypatch.setenv("DIRICHLET_TOKEN", server.admin)
    exec(compile(block, "README.md (populations)", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("dataset visits, north ") and out[0].endswith("binding")
    assert out[1].startswith("population patients by region ")
    assert out[2].startswith("population hospital patients ")
    assert out[3].startswith("PopulationBudget(order=2.0, total=1.5,")
    assert out[4].startswith("True PopulationBudget(order=2.0, total=1.0,")
