"""Enough file handles for every store the service may hold, checked before it serves.

Each index and each file knowledge source of ``serve --data`` is a SQLite store, and every
thread that searches or writes it keeps a connection: the database and its write-ahead log
(two handles per thread), plus the shared memory (one per process). Searches run on the query
threads, writes on asyncio's default pool, so a store searched and written by all of them
holds ``2 × (query threads + pool threads) + 1`` handles (measured:
``benchmarks/bench_definition_limits.py``). The limits on indexes and knowledge sources bound
the stores; this makes sure the process may open that many handles. Linux shells commonly
start programs with a soft limit of 1,024 and a hard one far above: the soft limit is raised
to what the limits need (never above the hard one, never lowered); ``serve`` warns at
start-up when a machine cannot give as many.
"""

from __future__ import annotations

import logging
import os

from agentic_retrieval.sources.local.query_threads import QUERY_THREADS

logger = logging.getLogger(__name__)

POOL_THREADS = min(32, (os.cpu_count() or 1) + 4)
"""asyncio's default pool size (where store writes run)."""
HEADROOM = 256
"""Handles for everything else: the interpreter, logs, conversions' pipes."""


def handles_needed(stores: int, max_in_flight: int) -> int:
    """File handles a process may need with ``stores`` stores (plus the service's own).

    Args:
        stores: Most stores the service holds (indexes plus knowledge sources).
        max_in_flight: Most requests at once (a socket each, and as many waiting).
    """
    per_store = 2 * (QUERY_THREADS + POOL_THREADS) + 1
    return (stores + 1) * per_store + 2 * max_in_flight + HEADROOM


def ensure_open_files(needed: int) -> int:
    """Raise this process's soft open-file limit to ``needed`` where the hard one allows.

    Returns:
        How many files the process may open now (at least ``needed`` when it sufficed).
    """
    try:
        import resource
    except ImportError:  # not on this platform (Windows): nothing to raise
        return needed
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return needed if soft == resource.RLIM_INFINITY else soft
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:  # e.g. macOS caps it below RLIM_INFINITY
        logger.debug("could not raise the open-file limit to %d: %s", target, exc)
        return soft
    return target
