"""Convert one file in a child process, so what it costs never lands on the caller.

The server converts every upload here: a parser that loops, recurses or allocates without
end (a zip bomb the checks did not catch, a PDF's compressed streams, a converter's bug)
exhausts a child bounded in time and memory, which is killed, and the server answers 413.
A conversion killed from outside (the OOM killer, a signal) is no fault of the file: it is a
:class:`~agentic_retrieval.errors.ConversionInterruptedError` (503, retry), told apart by the
child, which converts in a worker it forks and reports how that worker ended.

Children are forked by a *zygote*: a helper process started once (``python -c``, so it never
re-runs the caller's main script, as :mod:`multiprocessing`'s fork server would), which
imports the converters and then forks one child per conversion. A child thus starts in
milliseconds instead of the seconds a fresh interpreter takes to import them, and is forked
from a single-threaded process, never from the multi-threaded caller. In the child:

- its address space may grow by ``memory_mb`` (``RLIMIT_AS`` over what it starts with; an
  allocation beyond fails: a ``MemoryError``, or the child's death),
- its CPU time is capped at ``seconds`` (``RLIMIT_CPU``), and the caller kills it once
  ``seconds`` of wall-clock time have passed,
- it runs at a lower priority (``nice`` 10), so queries keep the CPU while it works,
- it splits the text into chunks too when asked (``chunking``): that is most of the CPU
  time storing a large file takes, and the caller (the server) answers queries meanwhile,
- its result comes back as JSON (never pickle), no longer than ``text_chars`` allows.

:meth:`ChildConversion.cancel` kills the child from any thread: the server calls it when the
client that uploaded the file hangs up. The zygote exits when its caller does (its control
socket closes), and a child when its answer can no longer be delivered or its CPU time ends.
Unix only (``fork``, ``resource``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agentic_retrieval.errors import (
    ConversionInterruptedError,
    ConversionLimitError,
    LoaderError,
    MissingConverterError,
)
from agentic_retrieval.sources.local.chunking import SPLIT_GROWTH_LIMIT, SplitText, split_ahead
from agentic_retrieval.sources.local.conversion_limits import MIB, ConversionLimits
from agentic_retrieval.sources.local.loaders import LoadedDocument, Section, load_file

PRELOAD = (
    "agentic_retrieval.sources.local.formats",
    "agentic_retrieval.sources.local.spreadsheets",
    "agentic_retrieval.sources.local.archives",
)
"""Imported once by the zygote, so each child starts with them loaded."""
OPTIONAL_PRELOAD = ("markitdown.converters", "pypdf", "openpyxl.styles.numbers")
"""The converters' libraries, imported too where installed (markitdown alone takes ~1 s)."""
CHILD_NICENESS = 10
_FRAME = struct.Struct("!Q")
_PID = struct.Struct("!i")
_HEADER_LIMIT = 64 * 1024
_PR_SET_PDEATHSIG = 1
_KILLED_FROM_OUTSIDE = {
    signal.SIGKILL,
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
}
"""Signals no limit sends (the CPU limit's SIGKILL comes past ``seconds`` of CPU): the OOM
killer's, an operator's."""


def convert_in_child(
    file_name: str,
    data: bytes,
    limits: ConversionLimits,
    chunking: tuple[int, int] | None = None,
) -> LoadedDocument:
    """Convert ``data`` (named ``file_name``) in a bounded child process.

    ``chunking`` (chunk size, overlap): the child also splits each section's text so
    (:attr:`Section.split <agentic_retrieval.sources.local.loaders.Section.split>`).

    Raises:
        ConversionLimitError: A content limit, or the time (``seconds``) or memory
            (``memory_mb``) limit of the child.
        MissingConverterError: The format needs an extra that is not installed.
        LoaderError: The file cannot be read, or the converter died on it.
    """
    return ChildConversion(file_name, data, limits, chunking).run()


class ChildConversion:
    """One conversion in a child process; :meth:`cancel` stops it from any thread.

    Args:
        file_name: The file's name (its extension chooses the converter).
        data: The file's bytes.
        limits: What the conversion may cost.
        chunking: (chunk size, overlap) to split the text with in the child, if any.
    """

    def __init__(
        self,
        file_name: str,
        data: bytes,
        limits: ConversionLimits,
        chunking: tuple[int, int] | None = None,
    ) -> None:
        self.file_name = file_name
        self.data = data
        self.limits = limits
        self.chunking = chunking
        self.pid: int | None = None
        """The child's process id while it runs."""
        self._cancelled = False
        self._finished = False
        self._lock = threading.Lock()

    def cancel(self) -> None:
        """Kill the child (or keep it from starting); :meth:`run` then raises."""
        with self._lock:
            self._cancelled = True
            if self.pid is not None and not self._finished:
                _kill(self.pid)

    def run(self) -> LoadedDocument:
        """Start the child, send it the file, wait for its answer (at most ``seconds``).

        Raises:
            ConversionLimitError, MissingConverterError, LoaderError: As
                :func:`convert_in_child`.
        """
        if self._cancelled:
            raise LoaderError("the conversion was cancelled")
        try:
            channel, pid = zygote().fork()
        except LoaderError:  # the zygote died (killed?): start another, once
            channel, pid = zygote(restart=True).fork()
        with self._lock:
            self.pid = pid
            if self._cancelled:  # cancel() came while the child was being forked
                _kill(pid)
        try:
            with channel:
                return self._exchange(channel, pid)
        finally:
            with self._lock:
                self._finished = True  # cancel() no longer signals it: it may be gone

    def _exchange(self, channel: socket.socket, pid: int) -> LoadedDocument:
        deadline = time.monotonic() + self.limits.seconds
        header = {
            "file_name": self.file_name,
            "limits": asdict(self.limits),
            "chunking": self.chunking,
        }
        try:
            _send_frame(channel, json.dumps(header).encode())
            _send_frame(channel, self.data)
            limit = _largest_answer(self.limits, split=self.chunking is not None)
            answer = _receive_frame(channel, limit, deadline)
        except TimeoutError:
            _kill(pid)
            raise ConversionLimitError(
                f"converting it took longer than {self.limits.seconds:g} s (limit seconds="
                f"{self.limits.seconds:g})",
                "seconds",
            ) from None
        except OverflowError:
            _kill(pid)
            raise ConversionLimitError(
                f"its text is longer than the limit text_chars={self.limits.text_chars}",
                "text_chars",
            ) from None
        except (ConnectionError, EOFError) as exc:  # the child is gone: nothing to kill
            raise self._death(None) from exc
        payload = json.loads(answer)
        if payload.get("error") == "died":
            raise self._death(payload)
        return _document(payload, self.chunking)

    def _death(self, report: dict[str, Any] | None) -> LoaderError:
        """Why the conversion ended without an answer.

        Args:
            report: How the worker ended (its ``signal`` and ``cpu`` seconds), from the
                child that waited for it; ``None`` when the child itself is gone, which
                nothing but a kill from outside does.
        """
        if self._cancelled:
            return LoaderError("the conversion was cancelled")
        signal_number = report.get("signal") if report is not None else signal.SIGKILL
        cpu = float(report.get("cpu") or 0.0) if report is not None else 0.0
        if signal_number == signal.SIGXCPU or cpu >= self.limits.seconds:
            return ConversionLimitError(
                f"converting it took more than {self.limits.seconds:g} s of CPU (limit "
                f"seconds={self.limits.seconds:g})",
                "seconds",
            )
        if signal_number in _KILLED_FROM_OUTSIDE:
            name = signal.Signals(signal_number).name
            return ConversionInterruptedError(
                f"its conversion process was killed by {name} after {cpu:.1f} s of CPU, by "
                "something other than this service's limits (the system's out-of-memory "
                "killer, or an operator)"
            )
        return ConversionLimitError(
            f"the converter died on it: it needed more than {self.limits.memory_mb} MiB "
            f"(limit memory_mb={self.limits.memory_mb}) or {self.limits.seconds:g} s of CPU "
            f"(limit seconds={self.limits.seconds:g}), or the file crashed it",
            "memory_mb",
        )


class Zygote:
    """The helper process that forks conversion children (one per caller process)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        code = (
            "from agentic_retrieval.sources.local.conversion import zygote_main; "
            f"zygote_main({theirs.fileno()})"
        )
        # BLAS thread pools of numpy (imported by markitdown) are neither needed nor safe
        # to fork from
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-c", code],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            env=env,
        )
        theirs.close()
        self.control = ours
        self._lock = threading.Lock()

    @property
    def alive(self) -> bool:
        """Whether the zygote still runs."""
        return self.process.poll() is None

    def fork(self) -> tuple[socket.socket, int]:
        """A new child: the socket to talk to it and its process id.

        Raises:
            LoaderError: The zygote is gone.
        """
        ours, theirs = socket.socketpair()
        try:
            with self._lock:
                socket.send_fds(self.control, [b"f"], [theirs.fileno()])
                (pid,) = _PID.unpack(_receive_exactly(self.control, _PID.size, None))
        except (OSError, EOFError) as exc:
            ours.close()
            raise LoaderError("the conversion helper process is gone") from exc
        finally:
            theirs.close()
        return ours, pid

    def close(self) -> None:
        """Stop the zygote (its children finish or die with their callers)."""
        self.control.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


_ZYGOTE: Zygote | None = None
_ZYGOTE_LOCK = threading.Lock()


def zygote(*, restart: bool = False) -> Zygote:
    """This process's zygote, started on first use (again if it died, or with ``restart``)."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _ZYGOTE is not None and (restart or not _ZYGOTE.alive):
            _ZYGOTE.close()
            _ZYGOTE = None
        if _ZYGOTE is None:
            _ZYGOTE = Zygote()
        return _ZYGOTE


def zygote_main(control_fd: int) -> None:
    """The zygote: import the converters, then fork a child for each socket received."""
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    for module in OPTIONAL_PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    control = socket.socket(fileno=control_fd)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1, 1)
        except OSError:
            return
        if not message or not fds:
            return  # the caller closed the socket: it has exited or closed us
        pid = os.fork()
        if pid == 0:
            control.close()
            _child_main(fds[0])  # never returns
        with contextlib.suppress(OSError):  # (the child does too: whichever runs first)
            os.setpgid(pid, pid)
        os.close(fds[0])
        control.sendall(_PID.pack(pid))


def _child_main(fd: int) -> None:
    """A child: receive the file, convert it in a worker it forks, say how the worker died.

    The worker converts under the limits; this process only waits for it, so when the worker
    ends without answering, the caller learns how (its signal, exit code and CPU time) and
    tells a limit (its CPU time, a crash at its memory ceiling) from a kill from outside (the
    OOM killer, a signal), which is no fault of the file.
    """
    code = 0
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote's auto-reaping is its own
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # the caller kills the group: this process and its worker
    try:
        with socket.socket(fileno=fd) as channel:
            header = json.loads(_receive_frame(channel, _HEADER_LIMIT, None))
            data = _receive_frame(channel, 1 << 40, None)
            worker = os.fork()
            if worker == 0:
                _worker_main(channel, header, data)  # never returns
            del data
            _, status, usage = os.wait4(worker, 0)
            if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
                report = {
                    "error": "died",
                    "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                    "cpu": usage.ru_utime + usage.ru_stime,
                }
                _send_frame(channel, json.dumps(report).encode())
    except BaseException:  # the caller gets no answer and says the conversion was killed
        code = 1
    finally:
        os._exit(code)


def _worker_main(channel: socket.socket, header: dict[str, Any], data: bytes) -> None:
    code = 0
    try:
        _die_with_parent()
        limits = ConversionLimits(**header["limits"])
        _bound_resources(limits)
        chunking = header.get("chunking")
        payload = _convert(header["file_name"], data, limits, chunking and tuple(chunking))
        _send_frame(channel, json.dumps(payload, ensure_ascii=False).encode())
    except BaseException:  # no answer: the child reports how this process ended
        code = 1
    finally:
        os._exit(code)


def _convert(
    file_name: str,
    data: bytes,
    limits: ConversionLimits,
    chunking: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The document, or the error, as JSON-able data.

    With ``chunking``, each section carries its chunks too (or ``None``: see
    :func:`~agentic_retrieval.sources.local.chunking.split_ahead`).
    """
    try:
        document = load_file(Path(file_name), data, limits)
    except ConversionLimitError as exc:
        return {"error": "limit", "limit": exc.limit, "message": str(exc)}
    except MissingConverterError as exc:
        return {"error": "extra", "message": str(exc)}
    except LoaderError as exc:
        return {"error": "unreadable", "message": str(exc)}
    except MemoryError:
        message = (
            f"converting it needs more than {limits.memory_mb} MiB (limit memory_mb="
            f"{limits.memory_mb})"
        )
        return {"error": "limit", "limit": "memory_mb", "message": message}
    except RecursionError:
        return {"error": "unreadable", "message": "it nests too deeply to be converted"}
    sections = []
    for section in document.sections:
        split = split_ahead(section.text, *chunking) if chunking else None
        sections.append([section.text, section.page, split and split.chunks])
    return {"title": document.title, "sections": sections}


def _die_with_parent() -> None:
    """End this worker when its child dies (Linux): no conversion outlives its reporter."""
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the request was made
        os._exit(1)


def _bound_resources(limits: ConversionLimits) -> None:
    import resource

    with contextlib.suppress(OSError):
        os.nice(CHILD_NICENESS)
    seconds = int(limits.seconds) + 1
    started = _address_space()
    ceiling = started + limits.memory_mb * MIB if started is not None else None
    # where a platform refuses one (RLIMIT_AS on macOS), the wall-clock limit still holds
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if ceiling is not None:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))


def _address_space() -> int | None:
    """This process's virtual memory size in bytes (``None`` off Linux)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def _largest_answer(limits: ConversionLimits, *, split: bool) -> int:
    # UTF-8 takes up to 4 bytes a character, JSON escapes up to 6 (a chunk's quotes and comma
    # too: a chunk has a character at least); split, the chunks at most SPLIT_GROWTH_LIMIT
    # times the text beside it; plus the sections' framing
    copies = 1 + SPLIT_GROWTH_LIMIT if split else 1
    return limits.text_chars * 6 * copies + 16 * MIB


def _document(payload: dict[str, Any], chunking: tuple[int, int] | None) -> LoadedDocument:
    error = payload.get("error")
    if error == "limit":
        raise ConversionLimitError(payload["message"], payload["limit"])
    if error == "extra":
        raise MissingConverterError(payload["message"])
    if error is not None:
        raise LoaderError(payload["message"])
    sections = tuple(
        Section(text, page, _split(chunking, chunks)) for text, page, chunks in payload["sections"]
    )
    return LoadedDocument(payload["title"], sections)


def _split(chunking: tuple[int, int] | None, chunks: list[str] | None) -> SplitText | None:
    if chunking is None or chunks is None:
        return None
    return SplitText(*chunking, tuple(chunks))


def _kill(pid: int) -> None:
    """Kill a child and its worker (its process group; the child itself before it has one)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _send_frame(channel: socket.socket, data: bytes) -> None:
    channel.sendall(_FRAME.pack(len(data)))
    channel.sendall(data)


def _receive_frame(channel: socket.socket, limit: int, deadline: float | None) -> bytes:
    """One length-prefixed frame.

    Raises:
        TimeoutError: ``deadline`` passed first.
        OverflowError: The frame is longer than ``limit``.
        EOFError: The other end closed first.
    """
    (size,) = _FRAME.unpack(_receive_exactly(channel, _FRAME.size, deadline))
    if size > limit:
        raise OverflowError(f"a frame of {size} bytes (limit {limit})")
    return _receive_exactly(channel, size, deadline)


def _receive_exactly(channel: socket.socket, size: int, deadline: float | None) -> bytes:
    buffer = bytearray()
    while len(buffer) < size:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            channel.settimeout(remaining)
        chunk = channel.recv(min(size - len(buffer), 1 << 20))
        if not chunk:
            raise EOFError
        buffer += chunk
    return bytes(buffer)
