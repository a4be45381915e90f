"""A PDF's text from a child process of gantry's own executable (gantry.media.pdf), within a
deadline: killed when it passes, or when the caller is cancelled (a /stop, shutdown), so no
document holds a chat, a /stop or an exit for longer than DOCUMENT_TIMEOUT_SECONDS."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream

from gantry.buildinfo import frozen
from gantry.media.pdf import CHILD_COMMAND, CPU_GRACE, MEMORY_BYTES, PdfUnreadable

log = logging.getLogger("gantry.media")

STDERR_KEPT = 2_000  # bytes of the child's stderr kept for the log
KILL_WAIT = 5.0  # after SIGKILL, the most we wait to reap it (the kernel is quick)


def program() -> list[str]:
    """How to run gantry itself. Frozen, the unpacked program (what /proc/self/exe names: not
    the onefile bootstrap, which would sit between us and the child a kill must reach); from
    source, this interpreter with `-m gantry`."""
    if not frozen():
        return [sys.executable, "-m", "gantry"]
    try:
        return [os.readlink("/proc/self/exe")]
    except OSError:  # no /proc: the bootstrap, which starts the same program
        return [sys.argv[0]]


def child_env() -> dict[str, str]:
    """Nothing of ours (no keys, no tokens): from source only where the package is."""
    if frozen():
        return {}
    root = Path(__file__).resolve().parent.parent.parent
    return {"PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}


async def extract(path: Path, max_chars: int, timeout: float,
                  memory: int = MEMORY_BYTES) -> tuple[str, bool, int]:
    """(text, cut, pages) of the PDF at `path`; PdfUnreadable saying why when it cannot be
    read, needs more than the child's CPU or `memory` bytes, or takes longer than `timeout`."""
    cpu = math.ceil(timeout) + CPU_GRACE
    argv = [*program(), CHILD_COMMAND, str(path), str(max_chars), str(cpu), str(memory)]
    out_max = max_chars * 6 + 4_096  # JSON of max_chars characters at their most escaped
    out = bytearray()
    err = bytearray()
    code: int | None = None  # None: its answer was too big, it was killed
    with anyio.move_on_after(timeout) as deadline:
        process = await anyio.open_process(argv, stdin=subprocess.DEVNULL, env=child_env(),
                                           cwd="/", start_new_session=True)
        try:
            assert process.stdout is not None and process.stderr is not None
            async with anyio.create_task_group() as tg:
                tg.start_soon(_collect, process.stderr, err, STDERR_KEPT, False)
                if await _collect(process.stdout, out, out_max):
                    tg.cancel_scope.cancel()  # too much: no more waiting for its stderr
                else:
                    code = await process.wait()
        finally:  # also on a /stop or shutdown: the child never outlives its reader
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    process.kill()
                with anyio.move_on_after(KILL_WAIT):
                    await process.aclose()
    if deadline.cancelled_caught:
        log.warning("PDF text not extracted in time; the child was killed",
                    extra={"path": str(path), "timeout_s": timeout})
        raise PdfUnreadable(f"its text could not be extracted within {timeout:g} s (the PDF "
                            "takes too much work to read: damaged, or built to be heavy)")
    return _result(path, code, bytes(out), bytes(err))


async def _collect(stream: ByteReceiveStream, into: bytearray, limit: int,
                   stop: bool = True) -> bool:
    """Read the stream to its end keeping `limit` bytes. Past them, True at once if `stop`
    (the answer is refused), else the rest is read and dropped."""
    async for chunk in stream:
        room = limit - len(into)
        into += chunk[:max(room, 0)]
        if stop and len(chunk) > room:
            return True
    return False


def _result(path: Path, code: int | None, out: bytes, err: bytes) -> tuple[str, bool, int]:
    """The child's answer, or PdfUnreadable for its error, its death or an answer too big."""
    where = {"path": str(path), "code": code}
    if code == -signal.SIGXCPU or code == -signal.SIGKILL:
        log.warning("PDF text child ran out of CPU time", extra=where)
        raise PdfUnreadable("reading it needs more CPU time than a document may use")
    if code != 0:
        log.warning("PDF text child failed", extra={
            **where, "stderr": err.decode("utf-8", "replace")[-STDERR_KEPT:]})
        raise PdfUnreadable("the PDF reader stopped with an error")
    try:
        answer = json.loads(out)
        error = answer.get("error")
        result = None if error else (str(answer["text"]), bool(answer["cut"]),
                                     int(answer["pages"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("PDF text child answered nonsense", extra=where)
        raise PdfUnreadable("the PDF reader stopped with an error") from None
    if result is None:
        if answer.get("detail"):
            log.info("pypdf failed on a PDF", extra={**where, "error": str(answer["detail"])})
        raise PdfUnreadable(str(error))
    return result
