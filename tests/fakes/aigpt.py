"""A stdio MCP server that behaves like aigpt (seed 001): `python -m tests.fakes.aigpt DIR DID`.

Like aigpt it is a bare line-by-line JSON-RPC loop: it answers protocol 2024-11-05 whatever
the client asks for, answers *every* message including notifications (with a "Method not
found" error carrying the notification's missing id), never sets isError (failures are
`{"error": ...}` text), keeps one JSON file per memory under DIR/{did}/ai.syui.gpt.memory/
named by a microsecond TID, and sends core + all memories as the initialize instructions.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ALPHABET = "234567abcdefghijklmnopqrstuvwxyz"


def tid() -> str:
    v = time.time_ns() // 1000
    out = []
    for _ in range(13):
        out.append(ALPHABET[v & 31])
        v >>= 5
    time.sleep(0.000002)  # the next call gets a later microsecond
    return "".join(reversed(out))


class Aigpt:
    def __init__(self, root: Path, did: str) -> None:
        self.did = did
        self.mem = root / did / "ai.syui.gpt.memory"
        self.core = root / did / "ai.syui.gpt.core" / "self.json"
        self.mem.mkdir(parents=True, exist_ok=True)

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted(self.mem.glob("*.json"))]

    def save(self, text: str) -> None:
        t = tid()
        record = {
            "uri": f"at://{self.did}/ai.syui.gpt.memory/{t}",
            "value": {"$type": "ai.syui.gpt.memory", "did": self.did,
                      "content": {"$type": "ai.syui.gpt.memory#markdown", "text": text},
                      "createdAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")},
        }
        (self.mem / f"{t}.json").write_text(json.dumps(record, indent=2, ensure_ascii=False))

    def instructions(self) -> str:
        parts = []
        if self.core.exists():
            parts.append(json.loads(self.core.read_text())["value"]["content"]["text"])
        parts += [r["value"]["content"]["text"] for r in self.records()]
        return "\n\n".join(p for p in parts if p)

    def tool(self, name: str, args: dict[str, Any]) -> Any:
        if name == "read_core":
            return json.loads(self.core.read_text()) if self.core.exists() else {
                "error": "core not found"}
        if name == "read_memory":
            return self.records()
        if name == "save_memory":
            self.save(str(args.get("content", "")))
            return {"success": True}
        if name == "compress":
            items = args.get("items")
            if not isinstance(items, list):
                return {"error": "items must be an array"}
            for p in self.mem.glob("*.json"):
                p.unlink()
            for item in items:
                self.save(str(item))
            return {"success": True}
        return {"error": f"Unknown tool: {name}"}

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        method, rid = req.get("method", ""), req.get("id")
        if method == "initialize":
            result: Any = {"protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "aigpt", "version": "0.3.0"},
                           "instructions": self.instructions()}
        elif method == "tools/list":
            empty = {"type": "object", "properties": {}}
            result = {"tools": [
                {"name": "read_core", "description": "core", "inputSchema": empty},
                {"name": "read_memory", "description": "all memories", "inputSchema": empty},
                {"name": "save_memory", "description": "add one",
                 "inputSchema": {"type": "object", "properties": {"content": {"type": "string"}},
                                 "required": ["content"]}},
                {"name": "compress", "description": "replace all",
                 "inputSchema": {"type": "object", "properties": {
                     "items": {"type": "array", "items": {"type": "string"}}},
                     "required": ["items"]}},
            ]}
        elif method == "tools/call":
            params = req.get("params") or {}
            out = self.tool(params.get("name", ""), params.get("arguments") or {})
            result = {"content": [{"type": "text", "text": json.dumps(out, ensure_ascii=False)}]}
        else:  # including notifications: aigpt answers them too
            return {"jsonrpc": "2.0", "id": rid,
                    "error": {"code": -32601, "message": "Method not found"}}
        return {"jsonrpc": "2.0", "id": rid, "result": result}


def main() -> None:
    server = Aigpt(Path(sys.argv[1]), sys.argv[2])
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
        except ValueError:
            continue
        sys.stdout.write(json.dumps(server.handle(req), ensure_ascii=False) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
