"""``serve --data`` may open a file for every store its limits allow, or says it cannot.

Each store is opened by every search thread (``benchmarks/bench_definition_limits.py``: 100
searched stores held 1,250 handles on 2 CPUs), past the 1,024 a Linux shell commonly gives.
Each check runs in a child process: the limits it changes are the process's own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

resource = pytest.importorskip("resource")


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_soft_limit_is_raised_to_what_the_stores_need_never_past_the_hard_one():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the hard open-file limit here is {hard}")
    out = run(
        """
        import resource
        from agentic_retrieval.server.open_files import ensure_open_files
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        print(ensure_open_files(2000), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        print(ensure_open_files(100), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        """
    )
    assert out.splitlines() == ["2000 2000", "2000 2000"]  # raised once, never lowered


def test_serve_warns_when_the_machine_cannot_open_that_many():
    out = run(
        """
        import resource
        from agentic_retrieval.cli.serving import check_open_files
        from agentic_retrieval.server import ServerSettings
        resource.setrlimit(resource.RLIMIT_NOFILE, (600, 600))
        print(check_open_files(ServerSettings()))
        print(check_open_files(ServerSettings(max_indexes=1, max_knowledge_sources=1)))
        """
    )
    warning, fine = out.splitlines()
    assert warning.startswith("this process may open 600 files, but 50 indexes and 50 ")
    assert "lower --max-indexes / --max-knowledge-sources" in warning
    assert fine == "None"
