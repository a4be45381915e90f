"""`gantry memory list|search|forget|flagged|export|import` (distroless has no sqlite3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gantry import db
from gantry.cli import main
from gantry.memory.store import MemoryStore


@pytest.fixture
def data(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    store = MemoryStore(db.connect(d / "gantry.db"))
    store.add("person", "mom", "prefers calls over texts")
    old, _ = store.add("fact", "chris", "lives in Berlin")
    new, _ = store.add("fact", "chris", "lives in Berlin, Kreuzberg")
    store.supersede([int(old.id)], int(new.id))
    store.flag("chris eats meat", "USER.md: Chris is vegetarian", [int(new.id)])
    store.conn.close()
    return d


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_kind_and_all(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "memory", "list", "--data-dir", str(data))
    assert code == 0
    assert out.splitlines()[0].startswith("#3 (fact) chris: lives in Berlin, Kreuzberg")
    assert "#2" not in out
    _, out, _ = run(capsys, "memory", "list", "--all", "--kind", "fact", "--data-dir", str(data))
    assert "#2 (fact) chris: lives in Berlin · chat" in out and "superseded by #3" in out
    assert "mom" not in out


def test_search_forget_flagged(
    data: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATA_DIR", str(data))
    code, out, _ = run(capsys, "memory", "search", 'mom AND "texts')
    assert code == 0 and out.startswith("#1 (person) mom: prefers calls over texts (")
    code, out, _ = run(capsys, "memory", "forget", "3")
    assert code == 0 and out.startswith("deleted 2:")  # the row and the one it superseded
    code, _, err = run(capsys, "memory", "forget", "3")
    assert code == 1 and "no memory #3" in err
    code, out, _ = run(capsys, "memory", "flagged")
    assert "flag #1" in out and "chris eats meat" in out and "Chris is vegetarian" in out
    assert run(capsys, "memory", "flagged", "--resolve", "1")[0] == 0
    assert run(capsys, "memory", "flagged")[1].strip() == "no contradictions waiting"
    assert run(capsys, "memory", "flagged", "--resolve", "1")[0] == 1


def test_export_import(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    persona = tmp_path / "persona"
    persona.mkdir()
    (persona / "SOUL.md").write_text("You are Tim.")
    out_dir = tmp_path / "atproto"
    code, out, _ = run(capsys, "memory", "export", "--atproto", str(out_dir), "--did", "did:plc:x",
                       "--data-dir", str(data), "--persona-dir", str(persona))
    assert code == 0 and out.startswith("exported 2 memories")
    fresh = tmp_path / "fresh"
    code, out, _ = run(capsys, "memory", "import", "--atproto", str(out_dir), "--did", "did:plc:x",
                       "--data-dir", str(fresh))
    assert code == 0 and "imported 2 memories" in out and "core record found (12 chars)" in out
    code, _, err = run(capsys, "memory", "import", "--atproto", str(out_dir), "--did", "did:plc:y",
                       "--data-dir", str(fresh))
    assert code == 1 and "check DIR and --did" in err


def test_missing_database_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "memory", "list", "--data-dir", str(tmp_path / "nope"))
    assert code == 1 and "no database at" in err and "DATA_DIR" in err


def test_memory_needs_a_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["memory"])
    assert exc.value.code == 2


@pytest.mark.parametrize("cmd", [["mcp-memory"], ["memory"], ["memory", "list"],
                                 ["memory", "export"], ["memory", "import"]])
def test_help(cmd: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*cmd, "--help"])
    assert exc.value.code == 0 and "usage: gantry" in capsys.readouterr().out
