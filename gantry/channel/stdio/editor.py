"""The terminal REPL's keyboard: keystrokes into a line, the key mode, text's column width."""

from __future__ import annotations

import codecs
import os
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def width(text: str) -> int:
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
