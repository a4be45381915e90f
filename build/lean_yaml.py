"""One helper the build/*_lean.py package configurations share."""

from __future__ import annotations

import json
import re


def yaml_string(text: str) -> str:
    """`text` as a YAML double-quoted scalar. JSON's escapes are YAML's, except that YAML
    readers do not join JSON's surrogate pairs: characters beyond U+FFFF (the emoji in
    aiogram's bot.py docstrings) are written as YAML's \\UXXXXXXXX instead."""
    parts = re.split("([\U00010000-\U0010ffff])", text)
    return '"' + "".join(f"\\U{ord(p):08x}" if i % 2 else json.dumps(p)[1:-1]
                         for i, p in enumerate(parts)) + '"'
