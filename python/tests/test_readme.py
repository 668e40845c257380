"""The README's Python examples run as written.

Each ```python block of README.md is a program of its own: it is written to a file in an empty
directory and run there by this Python, as a newcomer would paste it, and then what it stored is
checked against what its comments say. An example that needs a name it does not define, or
a process pool without its ``if __name__ == "__main__":`` guard, fails here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import runstore

README = Path(__file__).resolve().parents[2] / "README.md"


def examples() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", README.read_text(), flags=re.S | re.M)


def run_example(code: str, where: Path) -> None:
    script = where / "example.py"
    script.write_text(code)
    r = subprocess.run(
        [sys.executable, str(script)], cwd=where, capture_output=True, text=True, timeout=900
    )
    assert r.returncode == 0, f"the README's example failed:\n{code}\n{r.stderr}"


def example(first_code_line: str) -> str:
    found = [e for e in examples() if first_code_line in e]
    assert len(found) == 1, f"the README has {len(found)} examples with {first_code_line!r}"
    return found[0]


def test_every_example_is_checked_below():
    assert len(examples()) == 3


def test_quick_start_logs_the_steps_its_scan_asks_for(tmp_path):
    run_example(example('store = runstore.open("results/sweep")'), tmp_path)
    store = runstore.open(str(tmp_path / "results" / "sweep"))
    assert store.names() == ["curve", "loss", "lr"]
    steps = store.scan("loss", runs=[17], steps=(500, 600))
    assert list(steps["step"]) == list(range(500, 600))
    assert len(store.scan("loss")["value"]) == 20 * 1000
    assert store.get(17, "curve").shape == (100,)


def test_experiments_example_defines_its_function_and_guards_its_pool(tmp_path):
    code = example("def train(lr, seed):")
    assert 'if __name__ == "__main__":' in code
    run_example(code, tmp_path)
    experiments, outcomes = runstore.load_results(
        runstore.open(str(tmp_path / "results/experiments"))
    )
    assert len(experiments) == 20 and set(experiments["state"]) == {"done"}
    assert outcomes["curve"].shape == (20, 100)
    assert (tmp_path / "sweep.tar.gz").stat().st_size > 0


def test_checkpoint_example_resumes_to_one_record_per_step(tmp_path):
    code = example("def load_checkpoint():")
    run_example(code, tmp_path)
    # A second attempt starts from the checkpoint of the first (step 4000) and logs the steps
    # after it again: the store still has one record per step, equal to the first attempt's.
    first = runstore.open(str(tmp_path / "results" / "run-1")).scan("loss")
    run_example(code, tmp_path)
    again = runstore.open(str(tmp_path / "results" / "run-1")).scan("loss")
    assert list(again["step"]) == list(range(5000))
    assert again["value"].tolist() == pytest.approx(first["value"].tolist())
