"""The Azure SDK test modules also run against the newest azure-search-documents.

The suite imports the pinned GA release (12.0.0); a service the newest client cannot drive is
a bug all the same. This test installs the newest release beside it (``tests/newest_sdk.py``)
and runs the SDK test modules again in a pytest subprocess with it first on ``PYTHONPATH``:
nothing may fail, and every module must have run tests (a module skipped whole, as
``test_sdk_newest.py`` is under 12.0.0, would prove nothing).
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

import pytest
from tests import newest_sdk

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
MODULES = [
    "tests/integration/test_sdk_newest.py",  # what only the newest release can do
    "tests/integration/test_azure_sdk_client.py",
    "tests/integration/test_service_sdk.py",
    "tests/integration/test_service_files.py",
    "tests/integration/test_newest_contract.py",
    "tests/integration/test_service_statistics.py",
    "tests/integration/test_azure_source.py",  # the SDK as our Azure source's client
    "tests/integration/test_azure_permissions.py",
    "tests/unit/test_models.py",  # our wire models against the SDK's
]
RUN_SECONDS = 900


def test_the_sdk_tests_pass_against_the_newest_release(tmp_path):
    target = newest_sdk.install()
    path = os.pathsep.join([str(target), str(REPO)])
    env = {**os.environ, "PYTHONPATH": path}
    show = "from azure.search.documents._version import VERSION; print(VERSION)"
    version = subprocess.run(
        [sys.executable, "-c", show], env=env, capture_output=True, text=True, timeout=60
    )
    assert version.stdout.strip() == newest_sdk.NEWEST
    report = tmp_path / "report.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += [f"--junitxml={report}", *MODULES]
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=RUN_SECONDS
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    ran: Counter[str] = Counter()
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        if case.find("skipped") is None:
            ran[case.get("classname", "")] += 1
    for module in MODULES:
        dotted = module.removesuffix(".py").replace("/", ".")
        count = sum(n for name, n in ran.items() if name == dotted or name.startswith(f"{dotted}."))
        assert count > 0, f"{module}: no test ran against {newest_sdk.REQUIREMENT}"
