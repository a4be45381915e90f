"""What of a streamed reply may be shown yet: never reasoning, never a printed tool call (pure)."""

from __future__ import annotations

import re
from collections.abc import Collection

from gantry.model.salvage import FENCE_LANGS, MARKERS, THINK_CLOSE, THINK_OPEN, resolve_name

__all__ = ["HOLD_MAX", "StreamGate"]

HOLD_MAX = 2_000  # chars held back at most while undecided, then shown anyway
_CALL_KEYS = frozenset({"name", "function", "type", "id"})
_FIRST_KEY = re.compile(r'\A\[?\s*\{\s*"([^"\\]*)"\s*:\s*(?:"([^"\\]*)(")?)?')
_PARTIAL_KEY = re.compile(r'\[?\s*(\{\s*("[^"\\]*("\s*(:\s*"?[^"\\]*)?)?)?)?')
_PY_NAME = re.compile(r"\A([A-Za-z_][A-Za-z0-9_.-]*)\s*(\()?")


def _opens(body: str, marker: str) -> bool:
    """Whether `body` starts with `marker`, or is its beginning (the rest not streamed yet)."""
    return body.startswith(marker) or marker.startswith(body)


class StreamGate:
    """Decides, as a streamed reply grows, how much of it may be shown: never reasoning,
    never a printed tool call. A reply whose start could still be a call is held back, at
    most HOLD_MAX chars; once it is prose, only a `<think>` stops it (a call can no longer
    follow). The caller takes back what was shown if the end says otherwise."""

    def __init__(self, names: Collection[str]) -> None:
        self.names = names
        self.text = ""
        self._out = ""
        self._prose = False  # the reply's start was decided: no printed call (stays so)
        self._cut: int | None = None  # where a <think> stopped the shown text

    def feed(self, delta: str) -> tuple[str, bool]:
        """Add streamed text: (what may be shown now, whether what was shown so far must be
        taken back first — it was reasoning whose opening tag the template sent)."""
        self.text += delta
        if THINK_CLOSE in delta or THINK_CLOSE in self.text[-len(delta) - 8 :]:
            self._prose, self._cut = False, None  # reasoning ended: decide afresh after it
        safe = self._safe()
        restart = bool(self._out) and not safe.startswith(self._out)
        if restart:
            self._out = ""
        if len(safe) <= len(self._out):
            return "", restart
        out, self._out = safe[len(self._out) :], safe
        return out, restart

    def _visible(self) -> str:
        """The text after any leading reasoning blocks."""
        text = self.text
        while THINK_CLOSE in text:
            head, _, rest = text.partition(THINK_CLOSE)
            if THINK_OPEN in head and not head.lstrip().startswith(THINK_OPEN):
                return text
            text = rest
        return text

    def _safe(self) -> str:
        """The longest prefix of the visible text that cannot become a call or reasoning."""
        text = self._visible()
        if self._cut is not None:
            return text[: self._cut]
        body = text.lstrip()
        lead = len(text) - len(body)
        if not body:
            return ""
        if not self._prose:
            if _opens(body, THINK_OPEN):
                return ""
            if len(body) < HOLD_MAX and self._maybe_call(body):
                return ""
            self._prose = True
        # Prose: a tool-call tag further on is text (printed_calls), but reasoning is not.
        start = max(0, len(self._out) - lead - len(THINK_OPEN))  # earlier text was scanned
        found = body.find(THINK_OPEN, start)
        if found >= 0:
            self._cut = lead + found
            return text[: self._cut]
        at = body.rfind("<", max(0, len(body) - len(THINK_OPEN)))
        if at >= 0 and THINK_OPEN.startswith(body[at:]):
            return text[: lead + at]  # a <think> may be starting
        return text

    def _maybe_call(self, body: str) -> bool:
        """Whether `body` (the reply so far) could still be a printed call."""
        if "```".startswith(body):
            return True  # one or two backticks: a fence may be opening
        if body.startswith("```"):
            first, nl, rest = body.partition("\n")
            if not nl:
                return True
            if first[3:].strip().lower() not in FENCE_LANGS:
                return False
            body = rest.lstrip()
            if not body:
                return True
        if any(_opens(body, marker) for marker in MARKERS):
            return True
        if body[0] in "{[":
            m = _FIRST_KEY.match(body)
            if m is None:  # the first key is not complete yet, or this is no call object
                return bool(_PARTIAL_KEY.fullmatch(body)) or (
                    body[0] == "[" and self._maybe_pythonic(body[1:].lstrip()))
            key, value, closed = m[1], m[2], m[3]
            if key not in _CALL_KEYS:
                return False
            if key == "name" and closed:
                return resolve_name(value or "", self.names) is not None
            return True
        return self._maybe_pythonic(body)

    def _maybe_pythonic(self, body: str) -> bool:
        m = _PY_NAME.match(body)
        if m is None:
            return not body  # "[" alone: still open
        name = m[1].removesuffix(".call")
        if m[2]:
            return resolve_name(name, self.names) is not None
        if m.end() < len(body):
            return False  # the word ended without a "(": prose
        return any(n.startswith(name) for n in self.names)
