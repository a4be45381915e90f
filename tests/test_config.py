"""Config: every invalid environment names each offending variable; valid ones round-trip."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gantry import config
from gantry.config import INT_BOUNDS, Config, ConfigError

BASE = {
    "LLM_BASE_URL": "http://127.0.0.1:11434/v1",
    "LLM_API_KEY": "sk-test-secret-value-123",
    "LLM_MODEL": "llama3",
    "CHANNEL": "stdio",
}
TG = {
    "CHANNEL": "telegram",
    "TELEGRAM_BOT_TOKEN": "123456:ABCdef_ghi-JKL",
    "TELEGRAM_ALLOWED_USERS": "42",
}


def test_defaults_match_spec() -> None:
    cfg = config.load(BASE)
    assert cfg.channel == "stdio"
    assert (cfg.persona_dir, cfg.data_dir, cfg.mcp_manifest) == (
        "/persona", "/data", "/etc/gantry/mcp.toml")
    assert (cfg.history_max_messages, cfg.history_max_tokens) == (200, 128000)
    assert (cfg.tool_result_max_chars, cfg.tool_max_iterations) == (16000, 20)
    assert cfg.memory_enabled is True and cfg.memory_backend == "builtin"
    assert cfg.memory_consolidate_minutes == 30
    assert cfg.cron_enabled is True and cfg.cron_tz == "UTC"
    assert (cfg.cron_max_jobs, cfg.cron_tick_seconds) == (50, 15)
    assert cfg.stream_replies is False and cfg.log_level == "info"
    assert cfg.telegram_groups == "off" and cfg.followups == "steer"
    assert cfg.log_format == "auto"
    assert cfg.elicitation_timeout_seconds == 300
    assert config.load({**BASE, **TG}).telegram_allowed_users == (42,)


def test_field_names_are_the_spec_variables() -> None:
    names = {config.env_name(f.name) for f in msgspec.structs.fields(Config)}
    assert names == {
        "LLM_BASE_URL", "LLM_API_KEY", "LLM_MODEL", "TELEGRAM_BOT_TOKEN",
        "TELEGRAM_ALLOWED_USERS", "TELEGRAM_API_URL", "TELEGRAM_GROUPS", "CHANNEL",
        "PERSONA_DIR", "DATA_DIR", "MCP_MANIFEST",
        "HISTORY_MAX_MESSAGES", "HISTORY_MAX_TOKENS", "TOOL_RESULT_MAX_CHARS",
        "TOOL_MAX_ITERATIONS", "TOOLS_MAX_PER_TURN", "TOOLS_ALWAYS", "MEMORY_ENABLED",
        "MEMORY_BACKEND",
        "MEMORY_CONSOLIDATE_MINUTES", "CRON_ENABLED", "CRON_TZ", "CRON_MAX_JOBS",
        "CRON_TICK_SECONDS", "WATCH_MAX", "WATCH_MIN_INTERVAL_SECONDS", "STREAM_REPLIES",
        "LOG_LEVEL", "LOG_FORMAT", "ELICITATION_TIMEOUT_SECONDS",
        "MEDIA_MAX_BYTES", "MEDIA_KEEP_DAYS", "MEDIA_MAX_TOTAL_BYTES", "DOCUMENT_TIMEOUT_SECONDS",
        "LLM_TRANSCRIBE_MODEL", "LLM_TRANSCRIBE_BASE_URL", "LLM_TRANSCRIBE_API_KEY",
        "BACKUP_DIR", "BACKUP_EVERY", "BACKUP_KEEP", "LLM_FALLBACK_NOTICE", "FOLLOWUPS",
        *(f"LLM_FALLBACK_{n}_{part}" for n in range(1, 6)
          for part in ("MODEL", "BASE_URL", "API_KEY")),
        "LLM_SPEECH_MODEL", "LLM_SPEECH_VOICE", "LLM_SPEECH_BASE_URL", "LLM_SPEECH_API_KEY",
        "SPEECH_MAX_CHARS", "TELEGRAM_REACTIONS",
        "LLM_PRICES",
        "BUDGET_DAILY_TOKENS", "BUDGET_DAILY_COST", "BUDGET_MONTHLY_TOKENS",
        "BUDGET_MONTHLY_COST", "BUDGET_AUTO_DAILY_TOKENS", "BUDGET_AUTO_DAILY_COST",
        "BUDGET_AUTO_MONTHLY_TOKENS", "BUDGET_AUTO_MONTHLY_COST", "BUDGET_WARN_PERCENT",
        "BUDGET_OWNER_THROUGH",
    }


def test_telegram_vars_only_required_for_telegram() -> None:
    with pytest.raises(ConfigError) as err:
        config.load({**BASE, "CHANNEL": "telegram"})
    assert "TELEGRAM_BOT_TOKEN" in str(err.value) and "TELEGRAM_ALLOWED_USERS" in str(err.value)
    config.load(BASE)


def test_every_problem_reported_at_once() -> None:
    env = {"CHANNEL": "fax", "HISTORY_MAX_MESSAGES": "lots", "TOOL_MAX_ITERATIONS": "0",
           "STREAM_REPLIES": "maybe", "CRON_TZ": "Mars/Olympus", "MEMORY_BACKEND": "mcp:",
           "LOG_LEVEL": "loud"}
    with pytest.raises(ConfigError) as err:
        config.load(env)
    msg = str(err.value)
    for name in ["LLM_BASE_URL", "LLM_API_KEY", "LLM_MODEL", *env]:
        assert name in msg, name


def test_secret_values_never_echoed() -> None:
    with pytest.raises(ConfigError) as err:
        config.load({**BASE, **TG, "TELEGRAM_BOT_TOKEN": "not a token at all"})
    assert "not a token at all" not in str(err.value)
    assert "TELEGRAM_BOT_TOKEN" in str(err.value)


def test_login_in_llm_base_url_is_refused_without_echoing_it() -> None:
    """A user:password@ in LLM_BASE_URL would replace the Bearer key: boot says where a
    login goes instead, and neither the login nor a bad URL's login is ever echoed."""
    for url in ("http://gantry:pr0xy-Secret@127.0.0.1:8080/v1",
                "https://gantry:pr0xy-Secret@api.example/v1", "ftp://gantry:pr0xy-Secret@x/v1",
                "gantry:pr0xy-Secret@127.0.0.1:8080/v1"):
        with pytest.raises(ConfigError) as err:
            config.load({**BASE, "LLM_BASE_URL": url})
        msg = str(err.value)
        assert len(err.value.problems) == 1 and "LLM_BASE_URL" in msg, msg
        assert "pr0xy-Secret" not in msg and "gantry:p" not in msg, msg
    assert "HTTPS_PROXY" in msg or "[REDACTED]@" in msg
    with pytest.raises(ConfigError, match="HTTPS_PROXY"):
        config.load({**BASE, "LLM_BASE_URL": "http://u:p@127.0.0.1/v1"})
    assert config.load({**BASE, "LLM_BASE_URL": "http://127.0.0.1/v1/@team"}).llm_model


def test_proxy_variables_are_checked_where_the_model_client_reads_them() -> None:
    """`proxy_env` (the process environment, for `run` and `check`) is checked with the rest,
    one problem per bad variable, its proxy login never echoed; None skips the check."""
    bad = {"HTTPS_PROXY": "http://user:pr0xy-Secret@127.0.0.1:3128:bad",
           "http_proxy": "ftp://127.0.0.1:21", "NO_PROXY": "localhost"}
    with pytest.raises(ConfigError) as err:
        config.load({**BASE, "HISTORY_MAX_MESSAGES": "lots"}, proxy_env=bad)
    msg = str(err.value)
    assert len(err.value.problems) == 3 and "HISTORY_MAX_MESSAGES" in msg
    assert "HTTPS_PROXY='http://[REDACTED]@127.0.0.1:3128:bad' is not a proxy URL" in msg
    assert "http_proxy='ftp://127.0.0.1:21' is not a proxy URL" in msg
    assert "pr0xy-Secret" not in msg and "unset it" in msg
    good = {"HTTPS_PROXY": "http://user:pw@127.0.0.1:3128", "NO_PROXY": "localhost,127.0.0.1"}
    assert config.load(BASE, proxy_env=good).llm_model == "llama3"
    config.load({**BASE, **bad})


def test_allowed_users_parsing() -> None:
    cfg = config.load({**BASE, **TG, "TELEGRAM_ALLOWED_USERS": " 1, 2,2 ,3 "})
    assert cfg.telegram_allowed_users == (1, 2, 3)
    for bad in (" , ", "abc", "12,-3", "1.5"):
        with pytest.raises(ConfigError) as err:
            config.load({**BASE, **TG, "TELEGRAM_ALLOWED_USERS": bad})
        assert "TELEGRAM_ALLOWED_USERS" in str(err.value)


def test_empty_optional_falls_back_to_default() -> None:
    assert config.load({**BASE, "HISTORY_MAX_MESSAGES": ""}).history_max_messages == 200


def test_env_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "gantry.env"
    f.write_text("# comment\nexport LLM_MODEL='from-file'\nLLM_API_KEY=\"k-file-123456\"\n\n")
    monkeypatch.setenv("LLM_MODEL", "from-env")
    env = config.merged_environ(str(f))
    assert env["LLM_MODEL"] == "from-env" and env["LLM_API_KEY"] == "k-file-123456"
    f.write_text("NOT A LINE\n")
    with pytest.raises(ConfigError, match=r"gantry\.env:1"):
        config.read_env_file(f)


# --- property tests -----------------------------------------------------------------

int_value = {name: st.integers(lo, hi) for name, (lo, hi) in INT_BOUNDS.items()}
valid_env = st.fixed_dictionaries(
    {
        "LLM_BASE_URL": st.sampled_from(["http://127.0.0.1:8080/v1", "https://x.example/v1"]),
        "LLM_API_KEY": st.text("abcdefXYZ0123-_", min_size=8, max_size=40),
        "LLM_MODEL": st.text("abcdefgh-.:0123", min_size=1, max_size=20),
        "CHANNEL": st.just("stdio"),
    },
    optional={
        **{k.upper(): v.map(str) for k, v in int_value.items()},
        "STREAM_REPLIES": st.sampled_from(["true", "False", "1", "0", "yes", "off"]),
        "MEMORY_ENABLED": st.sampled_from(["true", "false"]),
        "CRON_TZ": st.sampled_from(["UTC", "America/Los_Angeles", "Europe/Berlin"]),
        "MEMORY_BACKEND": st.sampled_from(["builtin", "mcp:aigpt", "mcp:mem_1"]),
        "LOG_LEVEL": st.sampled_from(["debug", "INFO", "warning", "error"]),
        "TELEGRAM_GROUPS": st.sampled_from(["off", "mention", "Mention", "OFF"]),
        "FOLLOWUPS": st.sampled_from(["steer", "queue", "Queue", "STEER"]),
        "LOG_FORMAT": st.sampled_from(["auto", "JSON", "text"]),
    },
)


@given(valid_env)
@settings(max_examples=150, deadline=None)
def test_valid_environments_round_trip(env: dict[str, str]) -> None:
    cfg = config.load(env)
    for key, raw in env.items():
        value = getattr(cfg, key.lower())
        if isinstance(value, bool):
            assert value == (raw.lower() in {"true", "1", "yes", "on"})
        elif isinstance(value, int):
            assert value == int(raw)
        elif key in ("LOG_LEVEL", "TELEGRAM_GROUPS", "LOG_FORMAT", "FOLLOWUPS"):
            assert value == raw.lower()
        else:
            assert value == raw
    assert msgspec.convert(msgspec.to_builtins(cfg), Config) == cfg


bad_value = {
    **{k.upper(): st.one_of(st.integers(max_value=lo - 1), st.integers(min_value=hi + 1)).map(str)
       | st.sampled_from(["x", "1.5", "ten", "0x10"])
       for k, (lo, hi) in INT_BOUNDS.items()},
    "STREAM_REPLIES": st.sampled_from(["maybe", "2", "tru", "enabled"]),
    "MEMORY_ENABLED": st.sampled_from(["nope", "-1"]),
    "CHANNEL": st.sampled_from(["fax", "discord", "TELEGRAM!"]),
    "CRON_TZ": st.sampled_from(["Mars/Olympus", "Not/AZone", "../etc/passwd"]),
    "MEMORY_BACKEND": st.sampled_from(["mcp:", "sqlite", "mcp:bad name", "vector"]),
    "LOG_LEVEL": st.sampled_from(["loud", "trace"]),
    "TELEGRAM_GROUPS": st.sampled_from(["on", "all", "mentions", "true"]),
    "FOLLOWUPS": st.sampled_from(["fold", "merge", "true"]),
    "LOG_FORMAT": st.sampled_from(["yaml", "pretty"]),
    "LLM_BASE_URL": st.sampled_from(["ftp://x", "localhost:11434", "http://"]),
}


@given(st.dictionaries(st.sampled_from(sorted(bad_value)), st.none(), min_size=1).flatmap(
    lambda keys: st.fixed_dictionaries({k: bad_value[k] for k in keys})))
@settings(max_examples=150, deadline=None)
def test_invalid_environments_name_every_offender(bad: dict[str, str]) -> None:
    env = {**BASE, **bad}
    with pytest.raises(ConfigError) as err:
        config.load(env)
    msg = str(err.value)
    for name in bad:
        assert name in msg
    assert BASE["LLM_API_KEY"] not in msg


@pytest.mark.slow
def test_boot_failure_is_one_message_exit_1_no_traceback(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = {"PATH": "/usr/bin:/bin", "LLM_API_KEY": "sk-supersecret-999", "CHANNEL": "telegram",
           "TELEGRAM_BOT_TOKEN": "zzz", "HISTORY_MAX_TOKENS": "-5", "DATA_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "gantry", "run"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    for name in ("LLM_BASE_URL", "LLM_MODEL", "TELEGRAM_BOT_TOKEN", "TELEGRAM_ALLOWED_USERS",
                 "HISTORY_MAX_TOKENS"):
        assert name in proc.stderr
    assert "sk-supersecret-999" not in proc.stderr + proc.stdout
    assert "zzz" not in proc.stderr


def test_backup_every_parses_units_and_refuses_nonsense() -> None:
    """Issue 39 item 2: BACKUP_EVERY is a number and one unit, within 5 s … 366 d."""
    from gantry.config import ConfigError, duration_seconds, load

    assert [duration_seconds(t) for t in ("1d", "12h", "30m", "90s", "2w", " 3 D ")] == [
        86400, 43200, 1800, 90, 1209600, 259200]
    assert duration_seconds("1.5d") is None and duration_seconds("d") is None
    base = {"LLM_BASE_URL": "http://x", "LLM_API_KEY": "k", "LLM_MODEL": "m",
            "CHANNEL": "stdio"}
    assert load(base).backup_every_seconds == 86400
    for bad in ("1s", "400d", "daily", "-1d"):
        with pytest.raises(ConfigError, match="BACKUP_EVERY must be"):
            load({**base, "BACKUP_EVERY": bad})
