"""`gantry cron list`: the operator's read-only view of jobs."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from gantry import cli, db
from gantry.cron.store import CronStore

NOW = 1_772_712_000.0  # 2026-03-05T12:00:00Z


def test_lists_active_jobs_and_all_with_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conn = db.connect(tmp_path / "gantry.db")
    store = CronStore(conn)
    common = {"kind": "cron", "spec": "30 7 * * 1-5", "label": "every weekday at 07:30",
              "tz": "Europe/Berlin", "anchor_at": NOW, "max_jobs": 10, "now": NOW}
    store.add(session_id="telegram:42", prompt="Morning digest", next_at=NOW + 66600, **common)
    store.add(session_id="telegram:42", prompt="old", next_at=NOW + 60, **common)
    store.cancel(2, "telegram:42", NOW)
    conn.close()

    assert cli.main(["cron", "list", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "1 active job(s); --all shows ended ones too",
        "#1 [active] telegram:42 · every weekday at 07:30 · next 2026-03-06 07:30 CET "
        "(2026-03-06T06:30Z) · 'Morning digest'",
    ]
    assert cli.main(["cron", "list", "--all", "--data-dir", str(tmp_path)]) == 0
    assert "#2 [cancelled] telegram:42 · every weekday at 07:30 · next -" in (
        capsys.readouterr().out)


def test_missing_or_unmigrated_database_is_a_clear_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["cron", "list", "--data-dir", str(tmp_path / "nope")]) == 1
    assert "no database at" in capsys.readouterr().err
    apsw.Connection(str(tmp_path / "gantry.db")).execute("CREATE TABLE x (y)")
    assert cli.main(["cron", "list", "--data-dir", str(tmp_path)]) == 1
    assert "start `gantry run` once to migrate" in capsys.readouterr().err
