"""`gantry usage`: read-only, lean (no client stacks), clear about every bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gantry import db
from gantry.model.ledger import Meter, attributed
from gantry.model.wire import PromptDetails, Usage
from gantry.prices import Price

HEAVY = {"aiogram", "mcp", "mcp_types", "jsonschema", "httpx", "pydantic", "aiohttp", "anyio",
         "httpcore"}


def run(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    code = (f"import sys; from gantry.cli import main; rc = main({list(argv)!r}); "
            f"top = {{m.split('.')[0] for m in sys.modules}}; "
            f"print('HEAVY', sorted(top & {HEAVY!r}), file=sys.stderr); "
            "print('DB', 'gantry.db' in sys.modules, file=sys.stderr); sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env})


def seeded(tmp_path: Path) -> Path:
    conn = db.connect(tmp_path / "gantry.db")
    meter = Meter(conn, {"m": Price(1, 0.5, 2)}, clock=lambda: 1_800_000_000.0)
    for source, chat in (("chat", "telegram:1"), ("cron:3", "telegram:1"), ("chat", None)):
        with attributed(source, chat):
            meter.record_call("m", "http://x/v1", usage=Usage(
                1000, 100, prompt_tokens_details=PromptDetails(250)))
    with attributed("transcription"):
        meter.record_call("whisper", "http://x/v1", completion_chars=40)
    conn.close()
    return tmp_path


def test_usage_json_is_one_object_and_the_import_stays_lean(tmp_path: Path) -> None:
    seeded(tmp_path)
    r = run("usage", "--json", "--since", "all", "--data-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stderr and "DB False" in r.stderr
    data = json.loads(r.stdout)
    total = data["total"]
    assert {k: total[k] for k in ("calls", "prompt_tokens", "completion_tokens",
                                  "cached_tokens")} == {
        "calls": 4, "prompt_tokens": 3000, "completion_tokens": 310, "cached_tokens": 750}
    assert total["cost"] == round(3 * (750 + 250 * 0.5 + 200) / 1e6, 6)
    assert total["cache_hit_rate"] == 0.25 and total["estimated"] == 1
    keys = {b["key"]: b["calls"] for b in data["breakdown"]}
    assert keys == {"chat": 2, "cron:3": 1, "transcription": 1}
    whisper = next(b for b in data["breakdown"] if b["key"] == "transcription")
    assert whisper["cost"] is None  # no price for the model: no cost, still counted


def test_usage_by_chat_and_day_and_text(tmp_path: Path) -> None:
    seeded(tmp_path)
    r = run("usage", "--since", "all", "--by", "chat", "--data-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "total: 4 calls" in r.stdout and "telegram:1" in r.stdout and "hit rate 25%" in r.stdout
    assert "1 call(s) estimated" in r.stdout
    r = run("usage", "--json", "--since", "2027-01-14", "--by", "day", "--data-dir",
            str(tmp_path), CRON_TZ="Pacific/Honolulu")
    days = json.loads(r.stdout)["breakdown"]
    assert [(d["key"], d["calls"]) for d in days] == [("2027-01-14", 4)]  # 08:00Z is 22:00 HST
    r = run("usage", "--json", "--since", "2027-01-15", "--data-dir", str(tmp_path),
            CRON_TZ="Pacific/Honolulu")
    assert json.loads(r.stdout)["total"]["calls"] == 0


def test_usage_refuses_bad_input_plainly(tmp_path: Path) -> None:
    r = run("usage", "--data-dir", str(tmp_path / "nowhere"))
    assert r.returncode == 1 and "no database at" in r.stderr and "Traceback" not in r.stderr
    seeded(tmp_path)
    r = run("usage", "--since", "yesterday-ish", "--data-dir", str(tmp_path))
    assert r.returncode == 2 and "--since 'yesterday-ish'" in r.stderr
    old = tmp_path / "old"
    old.mkdir()
    import apsw

    apsw.Connection(str(old / "gantry.db")).execute("CREATE TABLE t (x)")
    r = run("usage", "--data-dir", str(old))
    assert r.returncode == 1 and "no usage table" in r.stderr
