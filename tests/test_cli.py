"""CLI surface: help, usage errors, version output and the import-times diagnostic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import example, given, settings
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
    "--env-file", "--env-file=.env", "--env", ".env",
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
@example(["status", "--max-age", "nan"])
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


# Every command that reads configuration, with the arguments it needs besides --env-file.
CONFIG_COMMANDS = [
    ["run"], ["check"], ["status"], ["tools", "list"], ["tools", "search", "q"],
    ["cron", "list"], ["mcp-memory"], ["memory", "list"], ["memory", "search", "q"],
    ["memory", "forget", "1"], ["memory", "flagged"],
    ["memory", "export", "--atproto", "d", "--did", "did:x"],
    ["memory", "import", "--atproto", "d", "--did", "did:x"],
]


@pytest.mark.parametrize("argv", CONFIG_COMMANDS, ids=" ".join)
def test_every_configuration_command_takes_env_file(argv: list[str]) -> None:
    """The same option, in the same place (after the subcommand), with the same meaning."""
    for form in (["--env-file", "x.env"], ["--env-file=x.env"]):
        assert _parser().parse_args([*argv, *form]).env_file == "x.env"
    assert _parser().parse_args(argv).env_file is None


ENV_FILE_READERS = [["status"], ["cron", "list"], ["memory", "list"], ["memory", "flagged"],
                    ["memory", "search", "x"]]


@pytest.mark.parametrize("argv", ENV_FILE_READERS, ids=" ".join)
def test_env_file_data_dir_reaches_the_command(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DATA_DIR from the file is the directory the command looks in; the environment wins."""
    monkeypatch.delenv("DATA_DIR", raising=False)
    env_file = tmp_path / ".env"
    env_file.write_text(f"DATA_DIR={tmp_path / 'from-file'}\n")
    assert main([*argv, "--env-file", str(env_file)]) == 1
    out = capsys.readouterr()
    assert f"no database at {tmp_path / 'from-file' / 'gantry.db'}" in out.out + out.err
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "from-env"))
    assert main([*argv, "--env-file", str(env_file)]) == 1
    out = capsys.readouterr()
    assert f"no database at {tmp_path / 'from-env' / 'gantry.db'}" in out.out + out.err


@pytest.mark.parametrize("argv", ENV_FILE_READERS, ids=" ".join)
def test_an_unreadable_env_file_is_one_line(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--env-file", str(tmp_path / "missing.env")]) == 1
    err = capsys.readouterr().err
    assert f"gantry {argv[0]}: --env-file {str(tmp_path / 'missing.env')!r} cannot be read" in err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
def test_status_refuses_a_max_age_that_is_not_finite(value: str) -> None:
    """`--max-age nan` passed the `<= 0` check and made every comparison false."""
    assert quick_parse(["status", "--max-age", value]) is None
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["status", "--max-age", value])
    assert exc.value.code == 2
