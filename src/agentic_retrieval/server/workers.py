"""Serve one app from several processes sharing a listening socket (``serve --workers N``).

The parent binds the socket, then forks N workers; each builds its own app (its own SQLite
connections: nothing opened before the fork is used after it) and runs uvicorn on the shared
socket, and the kernel hands each new connection to one of them. The workers share the data
directory through SQLite, which serialises writers and gives readers consistent snapshots
(see :mod:`agentic_retrieval.kb.service`). A worker that dies is replaced; SIGINT or SIGTERM
stops them all.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import socket
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any

logger = logging.getLogger(__name__)

AppFactory = Callable[[], Any]
"""Builds the ASGI app in a worker process."""
MAX_RESTARTS_PER_MINUTE = 10


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``, inheritable by forked workers."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def run_workers(
    build_app: AppFactory,
    sock: socket.socket,
    *,
    workers: int,
    log_level: str = "info",
) -> None:
    """Run ``workers`` processes serving ``build_app()`` on ``sock`` until a stop signal.

    Args:
        build_app: Called once in each worker to build its app.
        sock: The listening socket (see :func:`bind`).
        workers: How many processes.
        log_level: uvicorn's log level in the workers.
    """
    if workers < 1:
        raise ValueError("workers must be at least 1")
    supervisor = _Supervisor(build_app, sock, log_level)

    def stop(signum: int, frame: Any) -> None:
        supervisor.stopping = True

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        supervisor.run(workers)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class _Supervisor:
    """Starts the workers, replaces dead ones, stops them all."""

    def __init__(self, build_app: AppFactory, sock: socket.socket, log_level: str) -> None:
        self.context = multiprocessing.get_context("fork")
        self.args = (build_app, sock, log_level)
        self.stopping = False
        self.restarts: list[float] = []

    def run(self, workers: int) -> None:
        processes = [self._start() for _ in range(workers)]
        try:
            while not self.stopping:
                time.sleep(0.2)
                self._replace_dead(processes)
        finally:
            for process in processes:
                if process.is_alive():
                    process.terminate()
            for process in processes:
                process.join(30)

    def _start(self) -> BaseProcess:
        process = self.context.Process(target=_serve_one, args=self.args, daemon=False)
        process.start()
        return process

    def _replace_dead(self, processes: list[BaseProcess]) -> None:
        for n, process in enumerate(processes):
            if process.is_alive() or self.stopping:
                continue
            now = time.monotonic()
            self.restarts = [t for t in self.restarts if now - t < 60] + [now]
            if len(self.restarts) > MAX_RESTARTS_PER_MINUTE:
                logger.error("workers keep dying (exit code %s); stopping", process.exitcode)
                self.stopping = True
                return
            logger.warning("worker %d exited with %s; starting another", n, process.exitcode)
            processes[n] = self._start()


def _serve_one(build_app: AppFactory, sock: socket.socket, log_level: str) -> None:
    import uvicorn

    from agentic_retrieval.server.serving import uvicorn_config

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)  # uvicorn installs its own graceful handlers
    # the header limits of a single-process server apply in every worker
    config = uvicorn_config(build_app(), log_level=log_level, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
