"""What the REPL prints besides replies: the start line, a push's mark, a streamed reply."""

from __future__ import annotations

from typing import NamedTuple, TextIO

MARK_MAX = 48  # characters of a push's origin shown in its [mark]
RESTART_MARK = "[the reply above was cut off; here it is again, in full]"


def mark(origin: str) -> str:
    """A push's origin as its one-line mark: controls and line breaks out, bounded (a watch's
    label is the model's text)."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in origin).split())
    return (flat[: MARK_MAX - 1] + "…" if len(flat) > MARK_MAX else flat) or "scheduled"


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

    async def restart(self) -> None:
        """A terminal cannot take printed text back: a marker line says that the text
        above it was cut, and the reply starts again below it."""
        if self.shown:
            self.out.write(("" if self.shown.endswith("\n") else "\n") + RESTART_MARK + "\n")
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
