"""The words of `/prompt SERVER NAME arg=value …`, pure: split like a shell line (quotes keep
spaces in a value), then bound to a prompt's arguments by name or by position."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

MAX_WORDS = 64
MAX_VALUE = 4_000  # characters of one argument's value
# Phones and word processors type curly double quotes: they quote like straight ones. (A
# curly single quote is left alone: it is an apostrophe far more often than a quote.)
_CURLY = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"'})
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


class LineError(ValueError):
    """A line that cannot be read; `str()` says why, for the user."""


def split_words(text: str) -> list[str]:
    """The line's words: split on whitespace; '…' and "…" keep what they hold as it is
    (spaces too); a backslash takes the next character literally outside single quotes."""
    lexer = shlex.shlex(text.translate(_CURLY), posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    words: list[str] = []
    try:
        for word in lexer:
            words.append(word)
            if len(words) > MAX_WORDS:
                raise LineError(f"too many words (at most {MAX_WORDS})")
    except ValueError as exc:
        if isinstance(exc, LineError):
            raise
        raise LineError("a quote is not closed (put a value with spaces in \"…\")") from None
    return words


def bind(words: Sequence[str], names: Sequence[str]) -> dict[str, str]:
    """Values for the arguments `names` (in the prompt's order): `name=value` sets one by
    name, any other word fills the next argument not yet set. LineError names a word that
    fits no argument, an argument set twice, or a value too long."""
    values: dict[str, str] = {}
    loose: list[str] = []
    for word in words:
        key, eq, value = word.partition("=")
        if eq and key in names:
            if key in values:
                raise LineError(f"{key} is given twice")
            values[key] = value
        elif eq and _KEY.fullmatch(key):
            known = ", ".join(names) or "none"
            raise LineError(f"the prompt has no argument {key!r} (its arguments: {known})")
        else:
            loose.append(word)
    free = [n for n in names if n not in values]
    if len(loose) > len(free):
        extra = loose[len(free)]
        raise LineError(f"{extra!r} fits no argument (its arguments: "
                        f"{', '.join(names) or 'none'}; quote a value with spaces)")
    values.update(zip(free, loose, strict=False))
    for key, value in values.items():
        if len(value) > MAX_VALUE:
            raise LineError(f"the value of {key} is too long (at most {MAX_VALUE} characters)")
    return {n: values[n] for n in names if n in values}
