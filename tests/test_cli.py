"""CLI surface: help, usage errors, version output and the import-times diagnostic."""

from __future__ import annotations

import json

import pytest

from gantry.cli import main


def test_version_json_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"version", "commit", "build_date", "python", "sqlite", "platform"} <= set(data)
    assert main(["version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gantry ") and "sqlite" in out


def test_import_times(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version", "--json", "--import-times", "json,no_such_module_xyz"]) == 0
    times = json.loads(capsys.readouterr().out)["import_ms"]
    assert isinstance(times["json"], float)
    assert times["no_such_module_xyz"].startswith("not importable")


@pytest.mark.parametrize("argv", [["bogus"], ["status", "--max-age", "x"], ["version", "--nope"]])
def test_usage_errors_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2


@pytest.mark.parametrize("cmd", [[], ["run"], ["status"], ["version"]])
def test_help_for_each_command(cmd: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*cmd, "--help"])
    assert exc.value.code == 0
    assert "usage: gantry" in capsys.readouterr().out
