"""Where the pytest suite over the Python API finds its data and the CLI.

LMHEAD_TEST_DATA: tests/data (default: the source tree's). LMHEAD_CLI: the lmhead tool, for the
checks against `lmhead run --out` (skipped without it).
"""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def data_dir():
    return pathlib.Path(os.environ.get("LMHEAD_TEST_DATA", ROOT / "tests" / "data"))


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("LMHEAD_CLI")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("LMHEAD_CLI is not set to the lmhead tool")
    return path
