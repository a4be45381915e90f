"""CLI surface: help, usage errors, version output and the import-times diagnostic."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gantry.cli import _parser, main, quick_parse


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


TOKENS = [
    "status", "version", "run", "--max-age", "--max", "--data-dir", "--data", "--json",
    "--import-times", "--json=1", "--max-age=5", "--data-dir=", "--import-times=a,b", "-h",
    "--help", "--", "5", "-5", "0", "nan", "1e3", " 7 ", "x", "", "a=b", "/data", "aiogram,mcp",
]


@settings(max_examples=600, deadline=None)
@given(
    st.one_of(
        st.lists(st.sampled_from(TOKENS), max_size=6),
        st.tuples(st.sampled_from(["status", "version"]),
                  st.lists(st.sampled_from(TOKENS), max_size=5)).map(lambda t: [t[0], *t[1]]),
    )
)
def test_quick_parse_agrees_with_argparse(argv: list[str]) -> None:
    """Whatever the fast path accepts, argparse parses to exactly the same values."""
    quick = quick_parse(argv)
    if quick is None:
        return
    try:
        parsed = vars(_parser().parse_args(argv))
    except SystemExit:  # argparse rejects what the fast path accepted
        pytest.fail(f"fast path accepted {argv!r}, argparse rejects it")
    assert quick == parsed


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["status", "--max-age", "30"],
        ["status", "--data-dir=/data", "--max-age=90"],
        ["version"],
        ["version", "--json"],
        ["version", "--json", "--import-times", "aiogram,mcp"],
    ],
)
def test_healthcheck_forms_take_the_fast_path(argv: list[str]) -> None:
    """The forms deploy files and benchmarks use never load argparse."""
    quick = quick_parse(argv)
    assert quick is not None and quick == vars(_parser().parse_args(argv))


@pytest.mark.parametrize(
    "argv", [[], ["run"], ["status", "--help"], ["status", "--max", "5"], ["version", "--json=1"],
             ["status", "--max-age"], ["status", "--max-age", "x"], ["status", "--max-age", "-5"]],
)
def test_everything_else_goes_to_argparse(argv: list[str]) -> None:
    assert quick_parse(argv) is None


def test_the_version_has_one_source() -> None:
    """gantry/VERSION is read by pyproject.toml (setuptools), gantry.__version__, the build and
    the image label's check; nothing else spells the version out."""
    import tomllib
    from pathlib import Path

    import gantry

    root = Path(__file__).resolve().parents[1]
    version = (root / "gantry" / "VERSION").read_text().strip()
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"file": "gantry/VERSION"}
    assert "VERSION" in pyproject["tool"]["setuptools"]["package-data"]["gantry"]
    assert gantry.__version__ == version
    assert "__version__ =" not in (root / "gantry" / "__init__.py").read_text()
    assert 'cat gantry/VERSION' in (root / "Dockerfile.distroless").read_text()
