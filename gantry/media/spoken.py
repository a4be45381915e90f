"""What of a reply is read aloud (pure): the model's Markdown as plain sentences, without code
blocks, links' addresses or formatting marks, cut to the characters spoken per reply.

A voice reply goes with its text, so nothing is lost by leaving out what cannot be listened to:
a code block or a URL read out character by character helps no one.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n.*?(?:^[ \t]*\1[ \t]*$|\Z)", re.M | re.S)
_IMAGE = re.compile(r"!\[[^\]\n]*\]\([^)\n]*\)")
_LINK = re.compile(r"\[([^\]\n]*)\]\([^)\n]*\)")
_ADDRESS = re.compile(r"<?\S*://\S*>?|<?\bwww\.\S+>?|<[^>\s]+@[^>\s]+>")
_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t]+", re.M)
_QUOTE = re.compile(r"^[ \t]*(?:>[ \t]?)+", re.M)
_BULLET = re.compile(r"^[ \t]*[-*+][ \t]+", re.M)
_RULE = re.compile(r"^[ \t]*(?:[-*_][ \t]*){3,}$", re.M)
_MARKS = re.compile(r"\*+|~~|__|`+")
_PIPES = re.compile(r"\|")
_SPACES = re.compile(r"[^\S\n]+")
_BLANKS = re.compile(r"\n\s*\n\s*")
_SENTENCE_END = re.compile(r"[.!?…](?=\s)|\n")


def spoken_text(markdown: str, cap: int) -> str:
    """The reply as it is spoken: at most `cap` characters, cut after a sentence when one ends
    in the second half of the cap, else between words. "" when nothing is left to say."""
    text = _FENCE.sub("\n", markdown)
    text = _IMAGE.sub("", text)
    text = _LINK.sub(lambda m: m.group(1), text)
    text = _ADDRESS.sub("", text)
    text = _RULE.sub("", text)
    text = _HEADING.sub("", text)
    text = _QUOTE.sub("", text)
    text = _BULLET.sub("", text)
    text = _MARKS.sub("", text)
    text = _PIPES.sub(" ", text)
    text = _ADDRESS.sub("", text)  # marks taken out may have joined an address's pieces
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    text = _BLANKS.sub("\n", "\n".join(lines)).strip()
    return cut(text, cap)


def cut(text: str, cap: int) -> str:
    """`text` within `cap` characters, at a sentence's end or a word's when it must be cut."""
    if len(text) <= cap:
        return text
    head = text[:cap]
    ends = [m.end() for m in _SENTENCE_END.finditer(head)]
    if ends and ends[-1] >= cap // 2:
        return head[: ends[-1]].strip()
    space = head.rfind(" ")
    return (head[:space] if space >= cap // 2 else head).strip()
