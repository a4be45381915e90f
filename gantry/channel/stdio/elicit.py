"""The stdio REPL's side of elicitation: a server's questions as numbered choices or a typed
line, read from the REPL's own input while the turn waits (docs/mcp.md#elicitation)."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TextIO

import anyio

from gantry.elicit import Caller, Question

ANSWER_PROMPT = "> "


def render(q: Question) -> str:
    """The question as printed: choices numbered when they are the only answers; the
    question's shortcut (Skip, or the default), if it has one, is taken by an empty line."""
    lines = [q.text]
    if q.choices and not q.typed:
        lines += [f"  {i}. {c}" for i, c in enumerate(q.choices, 1)]
    if q.empty:
        lines.append(f"(an empty line: {q.empty})")
    return "\n".join(lines)


def read_answer(q: Question, line: str) -> str:
    """What a typed line means: a choice's number picks it; an empty line takes the
    question's shortcut; anything else is the answer as typed."""
    text = line.strip()
    if q.choices and not q.typed and text.isdecimal() and 1 <= int(text) <= len(q.choices):
        return q.choices[int(text) - 1]
    if q.empty and not text:
        return q.empty
    return text


class StdioDialog:
    """Asks on the REPL's output and reads the REPL's next input line (the REPL itself
    reads no line while a turn runs, so the answer is never taken for a message)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.next_line: Callable[[], Awaitable[str]] | None = None  # set while the REPL serves
        self.asking = False
        self.on_prompt: Callable[[], None] | None = None  # the terminal's prompt redraw
        # The terminal's lines typed while a question is open (lines typed ahead before it
        # stay messages): `answer` feeds them, `typed_line` is its `next_line`.
        self._typed_in, self._typed = anyio.create_memory_object_stream[str](math.inf)

    def answer(self, line: str) -> None:
        self._typed_in.send_nowait(line)

    async def typed_line(self) -> str:
        return await self._typed.receive()

    async def ask(self, caller: Caller, question: Question) -> str:
        if self.next_line is None:
            raise RuntimeError("the REPL is not reading input")
        self.out.write(render(question) + "\n")
        self.out.flush()
        self.asking = True
        try:
            if self.on_prompt is not None:
                self.on_prompt()
            return read_answer(question, await self.next_line())
        finally:
            self.asking = False

    async def tell(self, caller: Caller, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()
