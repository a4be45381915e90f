"""A hand-written MCP stdio server that writes exactly the bytes a test asks for.

Run as `python tests/fakes/mcp_raw.py` (stdlib only, so it starts in milliseconds). It writes
what the SDK would never write: lone surrogate escapes (what Node's `JSON.stringify` makes of
a string cut inside an emoji), raw non-UTF-8 bytes, lines that are not JSON. Tools:
  echo {text}   → the text back
  surrogate     → text with a lone `\\ud83d` escape in it
  badbyte       → text with a raw 0xff byte in it
  truncated     → a reply cut off before its end (not JSON; its id is recoverable)
  shapeless     → `{"jsonrpc": "2.0", "id": N}`: JSON, but no result and no error
  noise         → a non-JSON line on stdout first, then "ok"
  hold          → no answer until a `release` call (the server keeps answering the rest)
  release       → answers every held call with "released", then itself with how many
  held          → how many calls it holds
  calls         → how many tools/call requests it has received so far
  freeze        → stops reading and answering anything, pings included
  crash         → exits at once, answering nothing
Environment: RAW_LIST=surrogate|badbyte puts that in a tool description of tools/list.
"""

from __future__ import annotations

import json
import os
import sys
import time

TOOLS = ["echo", "surrogate", "badbyte", "truncated", "shapeless", "noise", "hold", "release",
         "held", "calls", "freeze",
         "crash"]
SPOILERS = {"surrogate": b"\\ud83d", "badbyte": b"\xff"}


def write(raw: bytes) -> None:
    sys.stdout.buffer.write(raw + b"\n")
    sys.stdout.buffer.flush()


def reply(rid: object, result: object) -> None:
    write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode())


def text_reply(rid: object, text: bytes) -> None:
    """A tools/call result whose text is `text`, spliced in as raw bytes."""
    head = json.dumps({"jsonrpc": "2.0", "id": rid}).encode()[:-1]
    write(head + b', "result": {"content": [{"type": "text", "text": "' + text + b'"}]}}')


def tools_list(rid: object) -> None:
    spoiler = SPOILERS.get(os.environ.get("RAW_LIST", ""), b"")
    tools = b", ".join(
        b'{"name": "%s", "description": "the %s tool%s", "inputSchema": {"type": "object"}}'
        % (name.encode(), name.encode(), spoiler if name == "echo" else b"")
        for name in TOOLS)
    head = json.dumps({"jsonrpc": "2.0", "id": rid}).encode()[:-1]
    write(head + b', "result": {"tools": [' + tools + b"]}}")


def main() -> None:
    held: list[object] = []
    calls = 0
    for line in sys.stdin.buffer:
        msg = json.loads(line)
        method, rid = msg.get("method"), msg.get("id")
        if rid is None:
            continue  # notifications: initialized, cancelled
        if method == "initialize":
            reply(rid, {"protocolVersion": msg["params"]["protocolVersion"],
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "raw", "version": "1"}})
        elif method == "tools/list":
            tools_list(rid)
        elif method == "ping":
            reply(rid, {})
        elif method == "tools/call":
            calls += 1
            name = msg["params"]["name"]
            args = msg["params"].get("arguments") or {}
            if name == "echo":
                text_reply(rid, json.dumps(args.get("text", ""))[1:-1].encode())
            elif name in SPOILERS:
                text_reply(rid, b"cut here: " + SPOILERS[name])
            elif name == "truncated":
                write(json.dumps({"jsonrpc": "2.0", "id": rid}).encode()[:-1]
                      + b', "result": {"content": [{"type": "text", "text": "cut')
            elif name == "shapeless":
                write(json.dumps({"jsonrpc": "2.0", "id": rid}).encode())
            elif name == "noise":
                write(b"listening on stdout, which is a mistake")
                text_reply(rid, b"ok")
            elif name == "hold":
                held.append(rid)
            elif name == "release":
                for other in held:
                    text_reply(other, b"released")
                text_reply(rid, str(len(held)).encode())
                held.clear()
            elif name == "held":
                text_reply(rid, str(len(held)).encode())
            elif name == "calls":
                text_reply(rid, str(calls).encode())
            elif name == "freeze":
                time.sleep(3600)
            elif name == "crash":
                os._exit(5)
        else:
            write(json.dumps({"jsonrpc": "2.0", "id": rid,
                              "error": {"code": -32601, "message": "no such method"}}).encode())


if __name__ == "__main__":
    main()
