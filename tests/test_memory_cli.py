"""`gantry memory add|list|search|forget|flagged|export|import` (distroless has no sqlite3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gantry import db
from gantry.cli import main
from gantry.memory import cli as memory_cli
from gantry.memory.store import KINDS, MemoryStore


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


@pytest.mark.parametrize("persona", ["missing", "empty"])
def test_export_without_a_persona_is_refused_on_stderr(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], persona: str
) -> None:
    """An empty core record would pass for the persona wherever it is imported."""
    where = tmp_path / "persona"
    if persona == "empty":
        where.mkdir()
    out_dir = tmp_path / "atproto"
    code, out, err = run(capsys, "memory", "export", "--atproto", str(out_dir), "--did",
                         "did:plc:x", "--data-dir", str(data), "--persona-dir", str(where))
    assert code == 1 and out == "" and not out_dir.exists()
    said = "does not exist" if persona == "missing" else "holds no *.md files"
    assert f"gantry memory export: the persona directory {where} {said}" in err
    assert "--no-core" in err and "{" not in err  # a sentence, not a JSON log record
    code, out, _ = run(capsys, "memory", "export", "--atproto", str(out_dir), "--did",
                       "did:plc:x", "--data-dir", str(data), "--persona-dir", str(where),
                       "--no-core")
    assert code == 0 and out.startswith("exported 2 memories") and "(no core record)" in out
    assert len(list((out_dir / "did:plc:x" / "ai.syui.gpt.memory").glob("*.json"))) == 2
    assert not (out_dir / "did:plc:x" / "ai.syui.gpt.core").exists()


def test_export_help_documents_the_persona_dir(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["memory", "export", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--persona-dir DIR" in text and "core record" in text and "--no-core" in text


def test_add_stores_an_operator_memory_once(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 36 item 11: the `operator` source without sqlite3."""
    code, out, _ = run(capsys, "memory", "add", "--kind", "person", "--subject", "Mom",
                       "calls", "on", "Sundays", "--data-dir", str(data))
    assert (code, out) == (0, "stored #4: (person) Mom: calls on Sundays\n")
    code, out, _ = run(capsys, "memory", "add", "--kind", "person", "--subject", "mom",
                       "calls on Sundays", "--data-dir", str(data))
    assert (code, out) == (0, "already stored as #4: (person) Mom: calls on Sundays\n")
    store = MemoryStore(db.connect(data / "gantry.db"))
    assert [(r.source, r.line()) for r in store.search("sundays")] == [
        ("operator", "(person) Mom: calls on Sundays")]
    _, out, _ = run(capsys, "memory", "add", "我的猫叫小白", "--data-dir", str(data))
    assert out == "stored #5: (fact) : 我的猫叫小白\n"
    assert [r.id for r in store.search("小白")] == ["5"]


def test_add_refuses_bad_input_clearly_and_stores_nothing(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "memory", "add", "--subject", "a:b", "x",
                         "--data-dir", str(data))
    assert (code, out) == (1, "") and err.startswith("gantry memory add: subject must not")
    code, _, err = run(capsys, "memory", "add", "y" * 501, "--data-dir", str(data))
    assert code == 1 and "content is 501 chars (max 500)" in err
    with pytest.raises(SystemExit) as exc:
        main(["memory", "add", "--kind", "mood", "x", "--data-dir", str(data)])
    assert exc.value.code == 2 and "invalid choice: 'mood'" in capsys.readouterr().err
    assert len(MemoryStore(db.connect(data / "gantry.db")).rows(include_inactive=True)) == 3


def test_add_creates_the_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "new"
    assert run(capsys, "memory", "add", "likes tea", "--data-dir", str(data))[0] == 0
    assert [r.line() for r in MemoryStore(db.connect(data / "gantry.db")).rows()] == [
        "(fact) : likes tea"]


def test_the_cli_kinds_are_the_stores() -> None:
    assert memory_cli.KINDS == KINDS


def test_missing_database_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "memory", "list", "--data-dir", str(tmp_path / "nope"))
    assert code == 1 and "no database at" in err and "DATA_DIR" in err


def test_memory_needs_a_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["memory"])
    assert exc.value.code == 2


@pytest.mark.parametrize("cmd", [["mcp-memory"], ["memory"], ["memory", "add"], ["memory", "list"],
                                 ["memory", "export"], ["memory", "import"]])
def test_help(cmd: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*cmd, "--help"])
    assert exc.value.code == 0 and "usage: gantry" in capsys.readouterr().out


def test_import_lists_and_skips_records_dated_outside_the_years_1_to_9999(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A createdAt that is valid RFC 3339 but year 10000 (or 0) in UTC used to stop the
    import with an OverflowError traceback; now it is listed and skipped, the rest imported,
    and an episode dated at the very end of 9999 gets an expiry that saturates."""
    did = "did:plc:dates"
    mem = tmp_path / "in" / did / "ai.syui.gpt.memory"
    mem.mkdir(parents=True)
    dated = {
        "2a.json": ("(fact) tea: likes sencha", "2026-03-01T12:00:00Z"),
        "2b.json": ("too late", "9999-12-31T23:30:00-01:00"),
        "2c.json": ("too early", "0001-01-01T00:30:00+01:00"),
        "2d.json": ("(episode) gym: last climb of the era", "9999-12-31T00:00:00Z"),
        "2e.json": ("(fact) rome: founded long ago", "0753-04-21T00:00:00Z"),
    }
    for name, (text, created) in dated.items():
        (mem / name).write_text(json.dumps({"value": {"content": {"text": text},
                                                      "createdAt": created}}))
    data = tmp_path / "data"
    code, out, err = run(capsys, "memory", "import", "--atproto", str(tmp_path / "in"),
                         "--did", did, "--data-dir", str(data))
    assert code == 0, err
    assert "imported 3 memories (0 already present, 2 skipped)" in out
    skipped = [line for line in err.splitlines() if line.startswith("skipped ")]
    assert [line.split(":")[0] for line in skipped] == ["skipped 2b.json", "skipped 2c.json"]
    assert all("outside the years 1-9999" in line for line in skipped), skipped
    store = MemoryStore(db.connect(data / "gantry.db"))
    rows = {r.content: r for r in store.rows(include_inactive=True)}
    assert rows["last climb of the era"].expires_at == "9999-12-31T23:59:59.999999Z"
    assert rows["founded long ago"].created_at == "0753-04-21T00:00:00.000000Z"  # fixed width
    store.conn.close()
