"""Shared fixtures of the runstore Python tests.

Randomness: tests that use numpy's generator take the `rng` fixture, seeded from
RUNSTORE_TEST_SEED (default: a fresh seed, one for the whole session and its parallel workers),
which the session header prints. Hypothesis
prints the falsifying example and how to reproduce it; the profile is chosen with
RUNSTORE_HYPOTHESIS_PROFILE (default "dev": 100 examples per test; "thorough": 500).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import runstore

SEED = int(os.environ.get("RUNSTORE_TEST_SEED", random.SystemRandom().randrange(2**32)))
# One seed for the session: the processes that run tests in parallel (pytest -n, scripts/
# test.sh) inherit it, so that they collect the same tests and a failure replays with it.
os.environ["RUNSTORE_TEST_SEED"] = str(SEED)

_common = dict(
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, **_common)
settings.register_profile("thorough", max_examples=500, **_common)
settings.load_profile(os.environ.get("RUNSTORE_HYPOTHESIS_PROFILE", "dev"))


def pytest_itemcollected(item):
    """Under pytest-xdist (scripts/test.sh runs `pytest -n 2 --dist loadgroup`), the tests that
    share a module- or session-scoped fixture (a cluster, a browser, a killed sweep) run in one
    process, which makes the fixture once; the other tests go to whichever process is free. Marked
    as each item is collected: xdist names the groups in its own pytest_collection_modifyitems,
    which may run before a conftest's."""
    if not item.config.pluginmanager.hasplugin("xdist"):
        return
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.items() if info is not None else ()
    # pytest's own session fixtures (tmp_path_factory, behind tmp_path) are no reason to group.
    shared = {"tmp_path_factory", "monkeypatch", "capsys", "recwarn", "pytestconfig"}
    if any(
        d.scope in ("module", "package", "session") and name not in shared
        for name, ds in defs
        for d in ds
    ):
        item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def pytest_report_header(config):
    return (
        f"runstore {runstore.__version__} from {Path(runstore.__file__).parent}; "
        f"RUNSTORE_TEST_SEED={SEED}; hypothesis profile "
        f"{os.environ.get('RUNSTORE_HYPOTHESIS_PROFILE', 'dev')}"
    )


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(store_path: Path) -> runstore.Store:
    return runstore.open(store_path)
