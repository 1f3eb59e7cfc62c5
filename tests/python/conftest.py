"""Shared fixtures for the Python package's tests, on the demo model.

QUIVER_TEST_DEVICE picks the engine device (cpu unless set; "cuda" on the GPU machine,
where every test skips with a message if this build or machine has no usable GPU).
ctest sets PYTHONPATH to build/python, QUIVER_BINARY and QUIVER_SOURCE_DIR."""

import os
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("QUIVER_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BASE = str(ROOT / "models/demo/base")
SQL = str(ROOT / "models/demo/adapters/sql")
PIRATE = str(ROOT / "models/demo/adapters/pirate")
DEVICE = os.environ.get("QUIVER_TEST_DEVICE", "cpu")
QUIVER_BINARY = os.environ.get("QUIVER_BINARY", str(ROOT / "build/quiver"))

# The demo's prompt format, from its chat template: the sql adapter answers this with
# "SELECT icao FROM table_name_74 WHERE airport = 'lilongwe'".
SQL_QUESTION = ("[user] Write a SQL query to answer the question based on the table schema.\n\n context: "
                "CREATE TABLE table_name_74 (icao VARCHAR, airport VARCHAR)\n\n question: Name the ICAO for "
                "lilongwe airport [/user] [assistant]")
SQL_ANSWER = " SELECT icao FROM table_name_74 WHERE airport = 'lilongwe' "


def engine_kwargs(**overrides):
    """EngineArgs for the demo with both adapters possible at once."""
    kw = dict(model=BASE, enable_lora=True, max_loras=2, max_lora_rank=16, device=DEVICE)
    kw.update(overrides)
    return kw


# Session scope: it runs once, before the module-scoped fixtures that start engines, and
# pytest re-raises its skip for every test.
@pytest.fixture(scope="session", autouse=True)
def device_available():
    if DEVICE != "cuda":
        return
    from quiver import EngineArgs, _quiver
    if not _quiver.has_cuda:
        pytest.skip("QUIVER_TEST_DEVICE=cuda, but this build has no CUDA backend")
    try:
        EngineArgs(model=BASE, device="cuda").create_native_engine()
    except ValueError as e:
        pytest.skip(f"QUIVER_TEST_DEVICE=cuda, but no GPU engine starts: {e}")


@pytest.fixture(scope="module")
def llm(device_available):
    """One engine per test file: starting one costs a second, tests share it."""
    from quiver import LLM
    return LLM(**engine_kwargs())


def sql_lora():
    from quiver.lora.request import LoRARequest
    return LoRARequest("sql", 1, SQL)


def pirate_lora():
    from quiver.lora.request import LoRARequest
    return LoRARequest("pirate", 2, PIRATE)


def run_to_completion(engine):
    """Steps until nothing is left; the finished RequestOutputs by request id."""
    done = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
    return done
