"""The stdio REPL: the development channel. Lines in on stdin, replies out on stdout.

Logs go to stderr, so stdout carries nothing but replies (and a prompt on a terminal).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import TextIO

import anyio
import anyio.from_thread
import anyio.lowlevel

from gantry.channel.base import Inbound, Progress, Responder, TurnAborted

CHAT_ID = "local"


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


class StdioChannel:
    name = "stdio"

    def __init__(
        self, stream_replies: bool = False, inp: TextIO | None = None, out: TextIO | None = None
    ) -> None:
        self.stream_replies = stream_replies
        self.inp = inp or sys.stdin
        self.out = out or sys.stdout
        self.interactive = self.inp.isatty() if hasattr(self.inp, "isatty") else False
        self.user = os.environ.get("USER", "local")

    async def serve(self, respond: Responder, ready: Callable[[], None]) -> None:
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
        ready()
        with receive:
            while True:
                if self.interactive:
                    self.out.write("> ")
                    self.out.flush()
                try:
                    line = await receive.receive()
                except anyio.EndOfStream:
                    return  # EOF: a clean exit
                text = line.rstrip("\r\n")
                if text.strip():
                    await self._one(respond, text)

    async def _one(self, respond: Responder, text: str) -> None:
        msg = Inbound(channel=self.name, chat_id=CHAT_ID, user_id=self.user, text=text)
        stream = StdioStream(self.out) if self.stream_replies else None
        try:
            reply = await respond(msg, stream)
        except TurnAborted:
            return
        if stream is not None:
            await stream.finish(reply)
        else:
            self.out.write(reply + "\n")
            self.out.flush()

    def can_push(self, chat_id: str) -> bool:
        return True

    async def push(
        self, chat_id: str, text: str, sent: int = 0, progress: Progress | None = None
    ) -> None:
        """A scheduled reply: printed like any reply, as one part."""
        if sent < 1:
            self.out.write(text + "\n")
            self.out.flush()
        if progress is not None:
            progress(1, 1)
