"""Watching a child process's output: both pipes drained on daemon threads, with waits.

Shared by the end-to-end tests that run `gantry run` as a subprocess (source or binary).
"""

from __future__ import annotations

import codecs
import os
import signal
import subprocess
import threading
import time
from typing import IO

import pytest


class ChildIO:
    """stdout/stderr of `proc` (opened with PIPEs, bytes), readable while it runs."""

    default_wait = 30.0

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self._cond = threading.Condition()
        self._out = ""
        self._err = ""
        self._cursor = 0
        self._open = 2
        assert proc.stdout is not None and proc.stderr is not None
        self._threads = [
            threading.Thread(target=self._drain, args=(proc.stdout, "_out"), daemon=True),
            threading.Thread(target=self._drain, args=(proc.stderr, "_err"), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _drain(self, pipe: IO[bytes], attr: str) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            while chunk := pipe.read1(65536):  # type: ignore[attr-defined]
                with self._cond:
                    setattr(self, attr, getattr(self, attr) + decoder.decode(chunk))
                    self._cond.notify_all()
        finally:
            with self._cond:
                setattr(self, attr, getattr(self, attr) + decoder.decode(b"", final=True))
                self._open -= 1
                self._cond.notify_all()

    @property
    def stdout(self) -> str:
        with self._cond:
            return self._out

    @property
    def stderr(self) -> str:
        with self._cond:
            return self._err

    def _diag(self) -> str:
        with self._cond:
            out, err = self._out[self._cursor :], self._err[-3000:]
        return f"\nunconsumed stdout: {out!r}\nstderr tail:\n{err}\nexit: {self.proc.poll()}"

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()

    def expect(self, needle: str, timeout: float | None = None) -> str:
        """Wait for `needle` on stdout past the last match; return the text consumed."""
        timeout = self.default_wait if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                at = self._out.find(needle, self._cursor)
                if at >= 0:
                    chunk = self._out[self._cursor : at + len(needle)]
                    self._cursor = at + len(needle)
                    return chunk
                left = deadline - time.monotonic()
                if left <= 0 or self._open == 0:
                    break
                self._cond.wait(min(left, 0.5))
        pytest.fail(f"no {needle!r} on stdout within {timeout} s{self._diag()}")

    def wait_stderr(self, needle: str, timeout: float | None = None) -> None:
        timeout = self.default_wait if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._cond:
            while needle not in self._err:
                left = deadline - time.monotonic()
                if left <= 0 or self._open == 0:
                    pytest.fail(f"no {needle!r} on stderr within {timeout} s{self._diag()}")
                self._cond.wait(min(left, 0.5))

    def wait_exit(self, timeout: float | None = None) -> int:
        """The exit code of a process ending by itself; output is complete afterwards."""
        return self._wait(timeout, "exit")

    def stop(self, sig: int = signal.SIGTERM, timeout: float | None = None) -> int:
        """Send `sig` by PID (if still running) and return the exit code."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        return self._wait(timeout, f"stop after signal {sig}")

    def kill(self) -> None:
        """Teardown: SIGKILL by PID if still running, then release the pipes."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.join()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()

    def _wait(self, timeout: float | None, what: str) -> int:
        timeout = self.default_wait if timeout is None else timeout
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"gantry did not {what} within {timeout} s{self._diag()}")
        self.join()
        return code

    def join(self) -> None:
        for t in self._threads:
            t.join(5)
