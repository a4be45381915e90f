"""The stdio REPL: the development channel. Lines in on stdin, replies out on stdout.

Logs go to stderr, so stdout carries nothing but replies. On a terminal (stdin and stdout
both TTYs) it is a small line editor instead: a start line, a `> ` prompt redrawn around
scheduled messages, and Ctrl-C as a key that stops the running reply (the terminal sends no
SIGINT for it, so a signal stays a shutdown request). On a pipe it reads plain lines.
"""

from __future__ import annotations

import codecs
import math
import os
import signal
import sys
import threading
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, NamedTuple, TextIO

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gantry.channel.base import (
    NOTHING_TO_STOP,
    Inbound,
    Progress,
    Responder,
    Stoppable,
    TurnAborted,
    TurnStopped,
    is_stop,
    unknown_command,
)
from gantry.channel.reply import Attachment, unpack
from gantry.channel.stdio_elicit import StdioDialog
from gantry.media.build import compose
from gantry.media.files import MediaError
from gantry.media.local import ATTACH_HELP, fetch_local, local_item, parse_attach
from gantry.store.space import StorageFull

CHAT_ID = "local"
SESSION_ID = f"stdio:{CHAT_ID}"
PROMPT = "> "
SCHEDULED = "[scheduled] "
ATTACHED = "[attachment] "
STOPPED = "(stopped)"
KEYS_HELP = "Ctrl-C stops a reply (at an empty prompt it exits) · Ctrl-D exits"


class Intro(NamedTuple):
    """What the start line tells: the model, the tools, and the history carried over."""

    model: str
    tools: int
    history: int
    summary: bool = False


def intro_line(intro: Intro) -> str:
    """The one line a terminal REPL starts with."""
    if intro.history or intro.summary:
        summary = " and a summary" if intro.summary else ""
        carried = (f"continuing: {intro.history} earlier message(s){summary} carried over "
                   "(/new starts fresh)")
    else:
        carried = "new conversation"
    return (f"gantry · model {intro.model} · {intro.tools} tool(s) · {carried} · "
            "/help lists commands")


def _width(text: str) -> int:
    """Terminal columns `text` takes (wide East Asian characters two, combining marks none)."""
    total = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        total += 2 if unicodedata.east_asian_width(ch) in "WF" else 1
    return total


class LineEditor:
    """Keystrokes → the line being typed and what they mean. Pure: no terminal, no I/O.

    `feed` returns events: ("insert", text) echo it, ("redraw", "") the line changed,
    ("submit", line), ("interrupt", "") Ctrl-C, ("eof", "") Ctrl-D on an empty line.
    Escape sequences (arrows, function keys) are swallowed, other control keys ignored.
    """

    def __init__(self) -> None:
        self.buffer = ""
        self._escape = ""  # an escape sequence being read
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        events: list[tuple[str, str]] = []
        for ch in self._decoder.decode(data):
            self._key(ch, events)
        return events

    def _key(self, ch: str, events: list[tuple[str, str]]) -> None:
        if self._escape:
            self._escape += ch
            # ESC [ params final / ESC O final / ESC x: ends at a byte in @..~ after the intro
            n = len(self._escape)
            if (n == 2 and ch not in "[O") or (n > 2 and "@" <= ch <= "~") or n > 32:
                self._escape = ""
            return
        if ch == "\x1b":
            self._escape = ch
        elif ch in "\r\n":
            line, self.buffer = self.buffer, ""
            events.append(("submit", line))
        elif ch == "\x03":
            events.append(("interrupt", ""))
        elif ch == "\x04":
            if not self.buffer:
                events.append(("eof", ""))
        elif ch in "\x7f\x08":
            if self.buffer:
                self.buffer = self.buffer[:-1]
                events.append(("redraw", ""))
        elif ch == "\x15":  # Ctrl-U: the whole line
            self.buffer = ""
            events.append(("redraw", ""))
        elif ch == "\x17":  # Ctrl-W: the last word
            self.buffer = self.buffer.rstrip()
            self.buffer = self.buffer[: len(self.buffer) - len(self.buffer.split(" ")[-1])]
            events.append(("redraw", ""))
        elif ch == "\t" or ch >= " ":
            text = " " if ch == "\t" else ch
            self.buffer += text
            events.append(("insert", text))

    def clear(self) -> None:
        self.buffer = ""


@contextmanager
def keystroke_mode(fd: int) -> Iterator[Callable[[], None]]:
    """The terminal unbuffered and unechoed, with its interrupt key (Ctrl-C) made an
    ordinary key, restored on the way out. Yields a function that re-applies the mode
    (after a Ctrl-Z and `fg` the shell may have put its own back)."""
    import termios

    saved = termios.tcgetattr(fd)
    mode = termios.tcgetattr(fd)
    mode[3] &= ~(termios.ICANON | termios.ECHO)
    mode[6][termios.VMIN] = 1
    mode[6][termios.VTIME] = 0
    try:
        disabled = os.fpathconf(fd, "PC_VDISABLE")
    except (OSError, ValueError):
        disabled = 0
    mode[6][termios.VINTR] = bytes([disabled & 0xFF])

    def apply() -> None:
        termios.tcsetattr(fd, termios.TCSANOW, mode)

    apply()
    try:
        yield apply
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


class StdioStream:
    """Prints deltas as they arrive; finish() reconciles with the final text."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.shown = ""

    async def write(self, delta: str) -> None:
        self.shown += delta
        self.out.write(delta)
        self.out.flush()

    async def discard(self) -> None:
        if self.shown:
            self.out.write("\n")
            self.out.flush()
        self.shown = ""

    async def finish(self, final_text: str) -> None:
        if self.shown and final_text.startswith(self.shown):
            self.out.write(final_text[len(self.shown):] + "\n")
        else:
            if self.shown:
                self.out.write("\n")
            self.out.write(final_text + "\n")
        self.out.flush()
        self.shown = ""

    @property
    def mid_line(self) -> bool:
        return bool(self.shown) and not self.shown.endswith("\n")


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class StdioChannel:
    name = "stdio"

    def __init__(
        self,
        stream_replies: bool = False,
        inp: TextIO | None = None,
        out: TextIO | None = None,
        intro: Callable[[str], Intro] | None = None,
        media: Any = None,
    ) -> None:
        self.stream_replies = stream_replies
        self.media = media  # gantry.media.MediaReader for /attach (None: /attach is refused)
        self.inp = inp or sys.stdin
        self.out = out or sys.stdout
        self.interactive = _isatty(self.inp)
        self.terminal = self.interactive and _isatty(self.out)
        self.intro = intro
        self.user = os.environ.get("USER", "local")
        self._editor = LineEditor()
        self._prompt_shown = False
        self._drawn = 0  # columns of prompt + line on screen
        self._current: Inbound | None = None
        self._stream: StdioStream | None = None
        self.dialog = StdioDialog(self.out)  # MCP servers' questions (gantry/elicit.py)

    async def serve(self, respond: Responder, ready: Callable[[], None]) -> None:
        if self.terminal:
            try:
                fd = self.inp.fileno()
                mode = keystroke_mode(fd)
                reapply = mode.__enter__()
            except (OSError, ValueError, ImportError):
                self.terminal = False  # not a terminal we can drive: read lines
            else:
                try:
                    await self._serve_terminal(fd, respond, ready, reapply)
                finally:
                    if self._prompt_shown:
                        self.out.write("\n")
                        self.out.flush()
                    mode.__exit__(None, None, None)
                return
        await self._serve_lines(respond, ready)

    # ------------------------------------------------------------------ a pipe

    async def _serve_lines(self, respond: Responder, ready: Callable[[], None]) -> None:
        send, receive = anyio.create_memory_object_stream[str](1)
        token = anyio.lowlevel.current_token()

        def read_lines() -> None:
            # A daemon thread: a blocked readline must never keep the process alive at exit.
            try:
                for line in iter(self.inp.readline, ""):
                    anyio.from_thread.run(send.send, line, token=token)
                anyio.from_thread.run_sync(send.close, token=token)
            except (RuntimeError, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return  # the event loop is gone or stopped listening: shutting down

        threading.Thread(target=read_lines, name="stdin", daemon=True).start()

        async def next_line() -> str:
            return (await receive.receive()).rstrip("\r\n")

        self.dialog.next_line = next_line
        ready()
        with receive:
            while True:
                if self.interactive:
                    self.out.write(PROMPT)
                    self.out.flush()
                try:
                    line = await receive.receive()
                except anyio.EndOfStream:
                    if self.interactive:  # Ctrl-D: the shell's prompt on a line of its own
                        self.out.write("\n")
                        self.out.flush()
                    return  # EOF: a clean exit
                text = line.rstrip("\r\n")
                if text.strip():
                    await self._one(respond, text)

    # ------------------------------------------------------------------ a terminal

    async def _serve_terminal(
        self, fd: int, respond: Responder, ready: Callable[[], None], reapply: Callable[[], None]
    ) -> None:
        keys_in, keys_out = anyio.create_memory_object_stream[bytes](math.inf)
        lines_in, lines_out = anyio.create_memory_object_stream[tuple[str, bool]](math.inf)
        token = anyio.lowlevel.current_token()

        def read_keys() -> None:
            try:
                while data := os.read(fd, 1024):
                    anyio.from_thread.run(keys_in.send, data, token=token)
                anyio.from_thread.run_sync(keys_in.close, token=token)
            except (OSError, RuntimeError, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return

        threading.Thread(target=read_keys, name="stdin", daemon=True).start()

        self.dialog.next_line = self.dialog.typed_line
        self.dialog.on_prompt = self._redraw
        ready()
        if self.intro is not None:
            self.out.write(intro_line(self.intro(SESSION_ID)) + "\n")
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._keys, keys_out, lines_in, respond)
            tg.start_soon(self._resume_after_suspend, reapply)
            with lines_out:
                self._redraw()
                async for text, echoed in lines_out:
                    if not echoed:  # typed ahead while a reply ran: show what is answered now
                        self.out.write(text + "\n")
                        self._prompt_shown = False
                    if text.strip():
                        await self._one(respond, text)
                    self._redraw()
            tg.cancel_scope.cancel()

    async def _keys(
        self,
        keys: MemoryObjectReceiveStream[bytes],
        lines: MemoryObjectSendStream[tuple[str, bool]],
        respond: Responder,
    ) -> None:
        with lines, keys:
            async for data in keys:
                for event, text in self._editor.feed(data):
                    if event == "insert" and self._prompt_shown:
                        self.out.write(text)
                        self._drawn += _width(text)
                    elif event == "redraw" and self._prompt_shown:
                        self._redraw()
                    elif event in ("submit", "interrupt") and self.dialog.asking:
                        self._editor.clear()  # the answer to a server's question
                        self.out.write("\n")
                        self._prompt_shown = False
                        self.dialog.answer(text if event == "submit" else "/cancel")
                    elif event == "submit" and is_stop(text) and self._current is not None:
                        self._interrupt(respond)  # typed /stop: what Ctrl-C does
                    elif event == "submit":
                        idle = self._prompt_shown
                        if idle:
                            self.out.write("\n")
                            self._prompt_shown = False
                        lines.send_nowait((text, idle))
                    elif event == "interrupt":
                        if not self._interrupt(respond):
                            return  # Ctrl-C at an empty prompt: leave
                    elif event == "eof" and self._current is None:
                        return
                self.out.flush()

    def _interrupt(self, respond: Responder) -> bool:
        """Ctrl-C: stop the running reply, else drop the typed line; False means exit."""
        if self._current is not None:
            self._editor.clear()
            if isinstance(respond, Stoppable):
                respond.stop(self._current)
            return True
        if self._editor.buffer:
            self._editor.clear()
            self._redraw()
            return True
        return False

    async def _resume_after_suspend(self, reapply: Callable[[], None]) -> None:
        """After Ctrl-Z and `fg`: the keystroke mode again, and the prompt redrawn."""
        with anyio.open_signal_receiver(signal.SIGCONT) as signals:
            async for _ in signals:
                with suppress(OSError):
                    reapply()
                if self._prompt_shown:
                    self._prompt_shown = False
                    self.out.write("\n")
                    self._redraw()

    def _clear(self) -> None:
        """Take the prompt and the typed line off the screen (they may wrap)."""
        if not self._prompt_shown:
            return
        columns = max(1, self._columns())
        rows_above = max(0, self._drawn - 1) // columns
        self.out.write("\r" + "\x1b[A" * rows_above + "\x1b[J")
        self._prompt_shown = False
        self._drawn = 0

    def _redraw(self) -> None:
        self._clear()
        self.out.write(PROMPT + self._editor.buffer)
        self.out.flush()
        self._prompt_shown = True
        self._drawn = _width(PROMPT + self._editor.buffer)

    def _columns(self) -> int:
        try:
            return os.get_terminal_size(self.out.fileno()).columns
        except (OSError, ValueError):
            return 80

    # ------------------------------------------------------------------ one message

    async def _one(self, respond: Responder, text: str) -> None:
        if is_stop(text):  # a running reply was stopped as the line was typed (_keys)
            self.out.write(NOTHING_TO_STOP + "\n")
            self.out.flush()
            return
        attached = await self._attached(text)
        if isinstance(attached, str):  # refused: say why, no model call
            self.out.write(attached + "\n")
            self.out.flush()
            return
        unknown = None if attached is not None else unknown_command(text)
        if unknown is not None:  # a typo'd command is not a message for the model
            self.out.write(unknown + "\n")
            self.out.flush()
            return
        msg = (Inbound(channel=self.name, chat_id=CHAT_ID, user_id=self.user, text=text)
               if attached is None else attached)
        stream = StdioStream(self.out) if self.stream_replies else None
        self._current, self._stream = msg, stream
        try:
            reply = await respond(msg, stream)
        except TurnAborted:
            return
        except TurnStopped:
            cut = "\n" if stream is not None and stream.mid_line else ""
            self.out.write(cut + STOPPED + "\n")
            self.out.flush()
            return
        except StorageFull as exc:  # nothing was stored: the line must be typed again
            self.out.write(f"(not answered: {exc}; send it again then)\n")
            self.out.flush()
            return
        finally:
            self._current = self._stream = None
        packed = unpack(reply)
        reply = packed.text
        if text.strip().lower() == "/help":
            reply += "\n" + ATTACH_HELP + ("\n" + KEYS_HELP if self.terminal else "")
        if stream is not None:
            await stream.finish(reply)
        else:
            self.out.write(reply + "\n")
        self._attachments(packed.attachments)
        self.out.flush()

    def _attachments(self, files: list[Attachment]) -> None:
        """A file the reply sends is already saved under DATA_DIR (gantry.outbox): its path."""
        for f in files:
            note = f" — {f.caption}" if f.caption else ""
            self.out.write(f"{ATTACHED}{f.path} ({f.mime}, {f.size} B){note}\n")

    async def _attached(self, text: str) -> Inbound | str | None:
        """`/attach PATH [caption]` read through gantry.media into a message (its text and
        images), or the reason it cannot be sent; None for any other line."""
        parsed = parse_attach(text)
        if parsed is None:
            return None
        path, caption = parsed
        if not path:
            return "Usage: " + ATTACH_HELP
        if self.media is None:
            return "Attaching files is not available here."
        try:
            item = local_item(path)
            built = await self.media.read([item], fetch_local)
        except MediaError as exc:
            return exc.reply
        except Exception as exc:  # the transcription service down, a disk error: say so
            return f"Could not read {path}: {type(exc).__name__}: {exc}"
        return Inbound(channel=self.name, chat_id=CHAT_ID, user_id=self.user,
                       text=compose(*built.blocks, caption), images=tuple(built.images))

    def can_push(self, chat_id: str) -> bool:
        return True

    async def push(
        self, chat_id: str, text: str, sent: int = 0, progress: Progress | None = None
    ) -> None:
        """A scheduled reply, as one part. On a terminal it is marked as scheduled and the
        prompt (with whatever was being typed) is drawn again below it; on a pipe it is a
        plain line like any reply."""
        if sent < 1:
            packed = unpack(text)
            if self.terminal:
                redraw = self._prompt_shown
                self._clear()
                if self._stream is not None and self._stream.mid_line:
                    self.out.write("\n")
                self.out.write(SCHEDULED + packed.text + "\n")
                self._attachments(packed.attachments)
                if redraw:
                    self._redraw()
            else:
                self.out.write(packed.text + "\n")
                self._attachments(packed.attachments)
            self.out.flush()
        if progress is not None:
            progress(1, 1)
