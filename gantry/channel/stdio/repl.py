"""The stdio REPL: the development channel. Lines in on stdin, replies out on stdout.

Logs go to stderr, so stdout carries nothing but replies. On a terminal (stdin and stdout
both TTYs) it is a small line editor instead: a start line, a `> ` prompt redrawn around
scheduled messages, and Ctrl-C as a key that stops the running reply (the terminal sends no
SIGINT for it, so a signal stays a shutdown request). On a pipe it reads plain lines.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import suppress
from functools import partial
from typing import Any, TextIO

import anyio
import anyio.from_thread
import anyio.lowlevel
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gantry.channel.base import (
    NOTHING_TO_STOP,
    Inbound,
    Progress,
    Responder,
    Stoppable,
    TurnAborted,
    TurnStopped,
    is_command,
    is_stop,
)
from gantry.channel.reply import Attachment, unpack
from gantry.channel.stdio.editor import LineEditor, keystroke_mode, width
from gantry.channel.stdio.elicit import StdioDialog
from gantry.channel.stdio.output import Intro, StdioStream, intro_line, mark
from gantry.channel.stdio.voice import VOICE_HELP, is_voice, speak_last
from gantry.log import around_terminal_lines
from gantry.media.build import compose
from gantry.media.files import MediaError
from gantry.media.local import ATTACH_HELP, fetch_local, local_item, parse_attach
from gantry.steer import MAX_PER_ROUND, FollowUp
from gantry.store.space import StorageFull

CHAT_ID = "local"
SESSION_ID = f"stdio:{CHAT_ID}"
PROMPT = "> "
ATTACHED = "[attachment] "
STOPPED = "(stopped)"
KEYS_HELP = "Ctrl-C stops a reply (at an empty prompt it exits) · Ctrl-D exits"


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
        followups: str = "steer",
        speech: Any = None,
    ) -> None:
        self.stream_replies = stream_replies
        self.followups = followups  # "steer": a line typed during a reply joins its turn
        self.media = media  # gantry.media.build.MediaReader for /attach (None: /attach is refused)
        self.speech = speech  # gantry.media.speech.Speaker for /voice (None: not set up)
        self._last_reply: str | None = None  # what /voice speaks
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
        self._loop_thread = 0  # the event loop's thread: only it draws the prompt
        self._relog = False  # the prompt was taken off for a log line: draw it again
        self.dialog = StdioDialog(self.out)  # MCP servers' questions (gantry/elicit.py)
        self._ahead: list[str] = []  # typed during a reply, before anything queued: may join it

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
        with around_terminal_lines(self._before_log, self._after_log):
            await self._run_terminal(keys_out, respond, ready, reapply)

    async def _run_terminal(
        self, keys_out: MemoryObjectReceiveStream[bytes], respond: Responder,
        ready: Callable[[], None], reapply: Callable[[], None],
    ) -> None:
        lines_in, lines_out = anyio.create_memory_object_stream[tuple[str, bool]](math.inf)
        self._loop_thread = threading.get_ident()
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
                    while self._ahead:  # typed while the answer was written: turns of their own
                        self._redraw()
                        self.out.write(self._ahead[0] + "\n")
                        self._prompt_shown = False
                        await self._one(respond, self._ahead.pop(0))
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
                        self._drawn += width(text)
                    elif event == "redraw" and self._prompt_shown:
                        self._redraw()
                    elif event in ("submit", "interrupt") and self.dialog.asking:
                        self._editor.clear()  # the answer to a server's question
                        self.out.write("\n")
                        self._prompt_shown = False
                        self.dialog.answer(text if event == "submit" else "/cancel")
                    elif event == "submit" and is_stop(text) and self._current is not None:
                        self._interrupt(respond)  # typed /stop: what Ctrl-C does
                    elif event == "submit" and self._steers(text, lines):
                        self._ahead.append(text)  # taken by the running turn (_take_ahead)
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

    def _steers(self, text: str, queued: MemoryObjectSendStream[tuple[str, bool]]) -> bool:
        """Whether a line typed now may join the running reply's turn (FOLLOWUPS=steer): plain
        text, with nothing queued before it (a command keeps its place in line)."""
        return (self.followups == "steer" and self._current is not None
                and bool(text.strip()) and not is_command(text)
                and queued.statistics().current_buffer_used == 0)

    async def _take_ahead(self) -> list[FollowUp]:
        """The running turn's Steer (gantry.steer): the lines typed since it began, each
        shown as it joins the turn."""
        await anyio.lowlevel.checkpoint()  # a stopped turn ends here, having taken nothing
        return [FollowUp(text, consume=partial(self._joined, text))
                for text in self._ahead[:MAX_PER_ROUND]]

    def _joined(self, text: str) -> None:
        self._ahead.remove(text)
        cut = "\n" if self._stream is not None and self._stream.mid_line else ""
        self.out.write(f"{cut}{PROMPT}{text}\n")
        self.out.flush()

    def _before_log(self) -> None:
        """A log line is coming to this terminal: the prompt off the screen first."""
        self._relog = threading.get_ident() == self._loop_thread and self._prompt_shown
        if self._relog:
            self._clear()

    def _after_log(self) -> None:
        if self._relog:
            self._redraw()

    def _interrupt(self, respond: Responder) -> bool:
        """Ctrl-C: stop the running reply (what was typed ahead stays, drawn again after
        it), else drop the typed line; False means exit."""
        if self._current is not None:
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
        self._drawn = width(PROMPT + self._editor.buffer)

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
        if is_voice(text):  # the last reply spoken into a file: no model call
            data_dir = self.media.data_dir if self.media is not None else "."
            self.out.write(await speak_last(self.speech, self._last_reply, data_dir) + "\n")
            self.out.flush()
            return
        attached = await self._attached(text)
        if isinstance(attached, str):  # refused: say why, no model call
            self.out.write(attached + "\n")
            self.out.flush()
            return
        msg = (Inbound(channel=self.name, chat_id=CHAT_ID, user_id=self.user, text=text)
               if attached is None else attached)
        if self.terminal and self.followups == "steer":
            msg = msgspec.structs.replace(msg, steer=self._take_ahead)
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
            reply += "\n" + ATTACH_HELP + "\n" + VOICE_HELP + (
                "\n" + KEYS_HELP if self.terminal else "")
        elif attached is not None or not text.strip().startswith("/"):
            self._last_reply = reply  # a model's answer, not a command's
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
        self, chat_id: str, text: str, sent: int = 0, progress: Progress | None = None,
        origin: str = "scheduled",
    ) -> None:
        """A scheduled reply, as one part. On a terminal it is marked with its origin
        (`[scheduled]`, `[watch #3 parcel]`) and the prompt (with whatever was being typed)
        is drawn again below it; on a pipe it is a plain line like any reply."""
        if sent < 1:
            packed = unpack(text)
            if self.terminal:
                redraw = self._prompt_shown
                self._clear()
                if self._stream is not None and self._stream.mid_line:
                    self.out.write("\n")
                self.out.write(f"[{mark(origin)}] " + packed.text + "\n")
                self._attachments(packed.attachments)
                if redraw:
                    self._redraw()
            else:
                self.out.write(packed.text + "\n")
                self._attachments(packed.attachments)
            self.out.flush()
        if progress is not None:
            progress(1, 1)
