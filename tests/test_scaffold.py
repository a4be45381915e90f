"""`gantry init`: every file written once, never overwritten; the env template tracks Config."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from gantry import scaffold
from gantry.config import Config, defaults, env_name, load, read_env_file
from gantry.persona import load as load_persona


def _init(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gantry", "init", "--persona-dir", str(tmp_path / "persona"),
         "--manifest", str(tmp_path / "etc" / "mcp.toml"), "--env-file",
         str(tmp_path / ".env"), *extra],
        capture_output=True, text=True, timeout=60,
    )


def test_init_writes_every_file_then_skips_them(tmp_path: Path) -> None:
    first = _init(tmp_path)
    assert first.returncode == 0, first.stderr
    written = [line.split(" ", 1)[1] for line in first.stdout.splitlines()]
    assert all(line.startswith("wrote ") for line in first.stdout.splitlines())
    assert sorted(written) == sorted([
        *(str(tmp_path / "persona" / n) for n in scaffold.PERSONA_FILES),
        str(tmp_path / "etc" / "mcp.toml"), str(tmp_path / ".env"),
    ])
    (tmp_path / "persona" / "USER.md").write_text("mine")
    second = _init(tmp_path)
    assert second.returncode == 0
    assert all(line.startswith("skip (exists) ") for line in second.stdout.splitlines())
    assert len(second.stdout.splitlines()) == len(written)
    assert (tmp_path / "persona" / "USER.md").read_text() == "mine"
    assert os.stat(tmp_path / ".env").st_mode & 0o077 == 0  # it will hold secrets


@pytest.mark.parametrize("name", ["etc/gantry/gantry.env", "gantry.env", "secrets", ".env.prod"])
@pytest.mark.parametrize("umask", [0o022, 0o000, 0o277], ids=oct)
def test_init_writes_any_env_file_owner_only(tmp_path: Path, name: str, umask: int) -> None:
    """The README's systemd quick start: `--env-file /etc/gantry/gantry.env`, then the keys."""
    env_file = tmp_path / name
    result = _init_env(tmp_path, env_file, umask)
    assert result.returncode == 0, result.stderr
    assert f"wrote {env_file}" in result.stdout.splitlines()
    assert os.stat(env_file).st_mode & 0o777 == 0o600
    assert env_file.read_text() == scaffold.env_template(
        {"persona_dir": str(tmp_path / "persona"), "mcp_manifest": str(tmp_path / "mcp.toml")})
    manifest = os.stat(tmp_path / "mcp.toml").st_mode & 0o777
    assert manifest == 0o644 & ~umask  # the files without secrets keep the umask


def test_env_file_is_created_owner_only_in_the_create_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No window: the mode is given to open(O_CREAT | O_EXCL), not set by a later chmod."""
    seen: list[tuple[int, int]] = []
    real_open = os.open

    def recording_open(path: str, flags: int, mode: int = 0o777) -> int:
        seen.append((flags, mode))
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", recording_open)
    assert scaffold.write(scaffold.Target(str(tmp_path / "gantry.env"), "K=v\n", secret=True))
    (flags, mode), = seen
    assert flags & os.O_EXCL and flags & os.O_CREAT and mode == 0o600


def test_init_never_writes_through_a_symlink(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.env"
    link = tmp_path / "gantry.env"
    link.symlink_to(elsewhere)  # dangling: following it would create `elsewhere`
    result = _init_env(tmp_path, link)
    assert result.returncode == 0, result.stderr
    assert f"skip (exists) {link}" in result.stdout.splitlines()
    assert not elsewhere.exists() and link.is_symlink()


def _init_env(tmp_path: Path, env_file: Path, umask: int = 0o022
              ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gantry", "init", "--persona-dir", str(tmp_path / "persona"),
         "--manifest", str(tmp_path / "mcp.toml"), "--env-file", str(env_file)],
        capture_output=True, text=True, timeout=60, umask=umask,
    )


def test_init_names_a_directory_it_cannot_write(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    cmd = [sys.executable, "-m", "gantry", "init", "--persona-dir", str(locked / "p"),
           "--manifest", str(tmp_path / "m.toml"), "--env-file", str(tmp_path / ".env")]
    if os.getuid() == 0:  # root writes through any mode bits: make it a read-only mount
        if shutil.which("unshare") is None:
            pytest.skip("root without unshare(1): cannot make an unwritable directory")
        script = f"mount -t tmpfs -o ro tmpfs {shlex.quote(str(locked))} && exec {shlex.join(cmd)}"
        cmd = ["unshare", "-m", "sh", "-c", script]
    else:
        locked.chmod(0o555)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout
    assert f"cannot create directory {locked / 'p'}" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_init_refuses_a_file_where_a_directory_should_be(tmp_path: Path) -> None:
    (tmp_path / "persona").write_text("not a directory")
    result = _init(tmp_path)
    assert result.returncode == 1
    assert "persona" in result.stderr and "Traceback" not in result.stderr


def test_env_template_lists_exactly_the_config_fields() -> None:
    fields = [f.name for f in msgspec.structs.fields(Config)]
    assert set(scaffold.MEANINGS) == set(fields)
    text = scaffold.env_template()
    named = [line.lstrip("#").split("=", 1)[0] for line in text.splitlines()
             if "=" in line and not line.startswith("# ")]
    assert named == [env_name(f) for f in fields]
    for name, value in defaults().items():
        if name in ("telegram_bot_token", "telegram_allowed_users"):
            continue
        shown = "" if value is None else str(value).lower() if isinstance(value, bool) else str(
            value)
        assert f"#{env_name(name)}={shown}\n" in text, name


def test_env_template_round_trips_through_config(tmp_path: Path) -> None:
    """Filling in the required lines of the template gives a valid config with the defaults."""
    path = tmp_path / ".env"
    path.write_text(scaffold.env_template())
    env = read_env_file(path)
    env.update(LLM_BASE_URL="http://127.0.0.1:9/v1", LLM_API_KEY="k", LLM_MODEL="m",
               CHANNEL="stdio")
    cfg = load(env)
    assert cfg.history_max_messages == defaults()["history_max_messages"]


def test_templates_are_usable(tmp_path: Path) -> None:
    import tomllib

    assert tomllib.loads(scaffold.template("mcp.toml")) == {}  # every example commented out
    for name in scaffold.PERSONA_FILES:
        (tmp_path / name).write_text(scaffold.template(name))
    persona = load_persona(tmp_path)
    assert persona.files == scaffold.PERSONA_FILES
    assert "<!--" not in persona.text and "gantry init" not in persona.text


def test_env_file_records_the_paths_init_wrote(tmp_path: Path) -> None:
    """`check --env-file` then reads the persona and manifest init wrote, from any directory."""
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "gantry", "init", "--persona-dir", "persona", "--manifest",
         "./conf/mcp.toml", "--env-file", ".env"],
        capture_output=True, text=True, timeout=60, cwd=work, env=_clean_env(),
    )
    assert result.returncode == 0, result.stderr
    env = read_env_file(work / ".env")
    assert env["PERSONA_DIR"] == str(work / "persona")  # absolute: no working-directory games
    assert env["MCP_MANIFEST"] == str(work / "conf" / "mcp.toml")
    # a local set-up keeps its database beside it, not in /data at the root
    assert env["DATA_DIR"] == str(work / ".gantry-data")
    assert not (work / ".gantry-data").exists()  # run creates it, init only records it
    assert "CRON_TZ" not in env  # the rest keep their defaults
    assert os.stat(work / ".env").st_mode & 0o777 == 0o600
    env.update(LLM_BASE_URL="http://127.0.0.1:9/v1", LLM_API_KEY="k", LLM_MODEL="m",
               CHANNEL="stdio")
    cfg = load(env)
    assert load_persona(cfg.persona_dir).files == scaffold.PERSONA_FILES
    assert Path(cfg.mcp_manifest).read_text() == scaffold.template("mcp.toml")


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("PERSONA_DIR", "MCP_MANIFEST", "DATA_DIR")}


def test_init_records_the_data_dir_it_is_given_and_only_defaults_outside(tmp_path: Path) -> None:
    """--data-dir, else $DATA_DIR; paths outside the working directory (/etc/gantry, as the
    systemd unit sets its own DATA_DIR) leave DATA_DIR at its default."""
    work = tmp_path / "work"
    work.mkdir()
    base = [sys.executable, "-m", "gantry", "init", "--persona-dir", "p", "--manifest", "m.toml"]
    run = [(["--data-dir", "db", "--env-file", "a.env"], {}),
           (["--env-file", "b.env"], {"DATA_DIR": str(tmp_path / "from-env")})]
    for extra, env in run:
        done = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=60,
                              cwd=work, env={**_clean_env(), **env})
        assert done.returncode == 0, done.stderr
    assert read_env_file(work / "a.env")["DATA_DIR"] == str(work / "db")
    assert read_env_file(work / "b.env")["DATA_DIR"] == str(tmp_path / "from-env")
    outside = subprocess.run(
        [sys.executable, "-m", "gantry", "init", "--persona-dir", str(tmp_path / "etc" / "p"),
         "--manifest", str(tmp_path / "etc" / "mcp.toml"), "--env-file", "c.env"],
        capture_output=True, text=True, timeout=60, cwd=work, env=_clean_env())
    assert outside.returncode == 0, outside.stderr
    assert "DATA_DIR" not in read_env_file(work / "c.env")
    assert "#DATA_DIR=/data" in (work / "c.env").read_text()


def test_bare_init_names_the_default_paths_and_writes_nothing(tmp_path: Path) -> None:
    """Not only in --help: /persona and /etc/gantry are said before anything is written."""
    cmd = [sys.executable, "-m", "gantry", "init", "--env-file", str(tmp_path / ".env")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                            env=_clean_env())
    assert result.returncode == 2 and result.stdout == ""
    assert "would write /persona/*.md and /etc/gantry/mcp.toml" in result.stderr
    assert "--default-paths" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / ".env").exists()
    only_manifest = subprocess.run([*cmd, "--persona-dir", str(tmp_path / "p")],
                                   capture_output=True, text=True, timeout=60, env=_clean_env())
    assert only_manifest.returncode == 2
    assert "would write /etc/gantry/mcp.toml (" in only_manifest.stderr
    from_env = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                              env={**_clean_env(), "PERSONA_DIR": str(tmp_path / "p"),
                                   "MCP_MANIFEST": str(tmp_path / "m.toml")})
    assert from_env.returncode == 0, from_env.stderr  # the environment named them
    assert (tmp_path / "m.toml").is_file()


def test_default_paths_flag_writes_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --default-paths init goes ahead with /persona and /etc/gantry/mcp.toml."""
    from gantry.cli import main

    seen: list[tuple[object, ...]] = []
    monkeypatch.setattr(scaffold, "main", lambda *a: seen.append(a) or 0)
    monkeypatch.delenv("PERSONA_DIR", raising=False)
    monkeypatch.delenv("MCP_MANIFEST", raising=False)
    monkeypatch.delenv("DATA_DIR", raising=False)
    assert main(["init", "--default-paths", "--env-file", str(tmp_path / ".env")]) == 0
    assert seen == [("/persona", "/etc/gantry/mcp.toml", str(tmp_path / ".env"), None)]
