"""The newest azure-search-documents beside the pinned one: where it lives, how it gets there.

The ``azure`` extra pins the GA release (12.0.0), which the suite imports. The newest release
on the registry (:data:`NEWEST`) is installed without its dependencies (the pinned release's
azure-core, isodate and typing-extensions serve it) into a directory of its own inside the
virtualenv, and ``tests/integration/test_sdk_versions.py`` runs the SDK test modules again in
a subprocess with that directory first on ``PYTHONPATH``. ``make test`` installs it up front
(``python -m tests.newest_sdk``); the test installs it on first use otherwise. Raise
:data:`NEWEST` when Azure publishes a newer release.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

NEWEST = "12.1.0b2"
REQUIREMENT = f"azure-search-documents=={NEWEST}"
INSTALL_SECONDS = 600


def directory() -> Path:
    """Where :data:`NEWEST` is installed: ``<virtualenv>/sdk-newest/<version>``."""
    return Path(sys.prefix) / "sdk-newest" / NEWEST


def installed() -> bool:
    """Whether :data:`NEWEST` is installed in :func:`directory`."""
    return (directory() / "azure" / "search" / "documents" / "_version.py").is_file()


def install() -> Path:
    """Install :data:`NEWEST` once (pip, from the registry); return its directory.

    Raises:
        subprocess.CalledProcessError: pip could not install it.
    """
    target = directory()
    if installed():
        return target
    staging = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
    command += ["--target", str(staging), REQUIREMENT]
    subprocess.run(command, check=True, timeout=INSTALL_SECONDS)
    try:
        staging.rename(target)  # whole or not at all, also when two runs race
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not installed():
            raise
    return target


if __name__ == "__main__":
    print(f"{REQUIREMENT} in {install()}")
