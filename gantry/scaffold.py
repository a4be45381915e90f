"""`gantry init`: write a starting persona, MCP manifest and env file, never overwriting.

The templates ship inside the package (so the frozen binary carries them); the env file is
generated from the Config struct, so it lists exactly the variables gantry reads, and records
the absolute paths init wrote the persona and manifest to (so `check --env-file` finds them
from any working directory).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

import msgspec

from gantry.config import REQUIRED, REQUIRED_FOR_TELEGRAM, Config, env_name

PERSONA_FILES = ("PERSONA.md", "USER.md", "TOOLS.md")

# One line per Config field: what it means. tests/test_scaffold.py checks this covers every
# field, so a new variable cannot be added without its line in the env template.
MEANINGS: dict[str, str] = {
    "llm_base_url": "OpenAI-compatible root URL, e.g. http://127.0.0.1:11434/v1 (Ollama)",
    "llm_api_key": "bearer key for the model endpoint (secret; never logged)",
    "llm_model": "model name, e.g. llama3.2",
    "telegram_bot_token": "bot token from @BotFather, <digits>:<key> (secret; never logged)",
    "telegram_allowed_users": "comma-separated numeric Telegram user ids; everyone else is ignored",
    "telegram_api_url": "Bot API server root; change only for a self-hosted Bot API server",
    "telegram_groups": "off: private chats only; mention: answer in groups when addressed",
    "channel": "telegram, or stdio for a local REPL",
    "persona_dir": "directory of persona *.md files",
    "data_dir": "directory holding gantry.db (created if missing; must be writable)",
    "mcp_manifest": "the MCP server manifest (mcp.toml)",
    "history_max_messages": "hard cap on history messages sent to the model",
    "history_max_tokens": "prompt budget in estimated tokens (chars/4)",
    "tool_result_max_chars": "each tool result is cut to this many characters",
    "tool_max_iterations": "tool-call rounds per turn before a final answer is forced",
    "tools_max_per_turn": "above this many tools, each model call is offered the most relevant",
    "tools_always": "tools always offered: names or server__* prefixes, comma-separated",
    "memory_enabled": "long-term memory on or off",
    "memory_backend": "builtin (SQLite) or mcp:<server-name> from mcp.toml",
    "memory_consolidate_minutes": "memory consolidation interval; 0 = off",
    "cron_enabled": "scheduled turns on or off",
    "cron_tz": "your IANA time zone, e.g. America/Los_Angeles: the local time every turn is "
               "told, and schedules' wall times",
    "cron_max_jobs": "maximum active scheduled jobs",
    "cron_tick_seconds": "how often due jobs are checked",
    "watch_max": "maximum active watches (0 = no watch tools)",
    "watch_min_interval_seconds": "test-only: the shortest watch interval accepted; keep 60",
    "stream_replies": "stream tokens (stdio) / edit the Telegram message in place",
    "elicitation_timeout_seconds": "seconds one question of an MCP server waits for an answer",
    "log_level": "debug, info, warning or error",
    "log_format": "auto (text on a terminal, else JSON lines), json or text",
    "media_max_bytes": "largest photo, document or voice note read, in bytes",
    "media_keep_days": "days a file kept in DATA_DIR/media stays (one the model cannot read)",
    "media_max_total_bytes": "all files kept in DATA_DIR/media, at most; the oldest go first",
    "document_timeout_seconds": "seconds a PDF's text may take; past it the file is kept",
    "llm_transcribe_model": "set (e.g. whisper-1) to transcribe voice notes and audio",
    "llm_transcribe_base_url": "transcription endpoint root URL; empty: LLM_BASE_URL",
    "llm_transcribe_api_key": "transcription key (secret); empty: LLM_API_KEY",
    "llm_speech_model": "set (e.g. tts-1) to answer voice notes, or after /voice on, in voice too",
    "llm_speech_voice": "the voice the speech endpoint is asked for",
    "llm_speech_base_url": "speech endpoint root URL; empty: LLM_BASE_URL",
    "llm_speech_api_key": "speech key (secret); empty: LLM_API_KEY",
    "speech_max_chars": "characters of one reply spoken at most; the rest stays text",
    "telegram_reactions": "a reaction on messages being answered; users' reactions as feedback",
    "llm_prices": "USD per 1M tokens per model, model=input/cached/output; ... (docs/models.md)",
    "backup_dir": "set: gantry run writes a backup of gantry.db here every BACKUP_EVERY",
    "backup_every": "how often: a number and s, m, h, d or w (5s to 366d)",
    "backup_keep": "how many scheduled backups to keep (the oldest are deleted)",
    "followups": "steer: a message sent while a reply is written joins it; queue: its own turn",
    "budget_daily_tokens": "tokens a day, all sources (unset: no limit; docs/models.md Budgets)",
    "budget_daily_cost": "USD a day, all sources (needs LLM_PRICES; unset: no limit)",
    "budget_monthly_tokens": "tokens a month, all sources (unset: no limit)",
    "budget_monthly_cost": "USD a month, all sources (unset: no limit)",
    "budget_auto_daily_tokens": "tokens a day for cron, watches, consolidation (unset: no limit)",
    "budget_auto_daily_cost": "USD a day for cron, watches and consolidation (unset: no limit)",
    "budget_auto_monthly_tokens": "tokens a month for the autonomous sources (unset: no limit)",
    "budget_auto_monthly_cost": "USD a month for the autonomous sources (unset: no limit)",
    "budget_warn_percent": "the owner is warned once a period at this share of a limit",
    "budget_owner_through": "true: the owner's own chat is answered past a limit",
    "llm_fallback_notice": "true: a reply a fallback model wrote says so in a last line",
    **{f"llm_fallback_{n}_{part}": meaning.format(n=n, nth=nth) for n, nth in enumerate(
        ("first", "second", "third", "fourth", "fifth"), start=1) for part, meaning in (
        ("model", "the {nth} fallback model, used while the ones before it fail"),
        ("base_url", "fallback {n}'s root URL; empty: LLM_BASE_URL"),
        ("api_key", "fallback {n}'s key (secret; never logged); empty: LLM_API_KEY"))},
}


def _default_text(value: object) -> str:
    if value is None:  # unset (a budget): no limit
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def env_template(chosen: Mapping[str, str] | None = None) -> str:
    """Every Config variable with its meaning and default; required ones left to fill in.

    `chosen` (field name → value) are set, not commented: the paths `init` wrote to.
    """
    chosen = chosen or {}
    lines = [
        "# gantry configuration (generated by `gantry init` from the variables gantry reads).",
        "# Fill in the lines without '#'. A commented line keeps its default; remove the '#'",
        "# to change it. Used by `gantry run --env-file .env`, compose's env_file and",
        "# systemd's EnvironmentFile. Check it with `gantry check --env-file .env`.",
    ]
    for f in msgspec.structs.fields(Config):
        name = env_name(f.name)
        lines.append("")
        if f.name in REQUIRED:
            lines.append(f"# {MEANINGS[f.name]} (required)")
            lines.append(f"{name}=")
        elif f.name in REQUIRED_FOR_TELEGRAM:
            lines.append(f"# {MEANINGS[f.name]} (required when CHANNEL=telegram)")
            lines.append(f"{name}=")
        elif f.name in chosen:
            what = "chosen by gantry init" if f.name == "data_dir" else "where gantry init wrote it"
            lines.append(f"# {MEANINGS[f.name]} ({what}; default {_default_text(f.default)})")
            lines.append(f"{name}={chosen[f.name]}")
        else:
            lines.append(f"# {MEANINGS[f.name]}")
            lines.append(f"#{name}={_default_text(f.default)}")
    return "\n".join(lines) + "\n"


def template(name: str) -> str:
    """A shipped template file's text (persona files, mcp.toml)."""
    return resources.files("gantry.templates").joinpath(name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Target:
    path: str
    text: str
    secret: bool = False  # will hold keys: created 0600 whatever its name or the umask


LOCAL_DATA_DIR = ".gantry-data"


def data_dir_for(persona_dir: str, manifest: str) -> str | None:
    """A local set-up (both paths inside the working directory, which is not /) keeps its
    database beside them in ./.gantry-data rather than in /data at the root; None (the
    default /data, as containers and the systemd unit set it) otherwise."""
    here = os.path.abspath(os.getcwd())
    if here == os.sep:
        return None
    inside = all(os.path.commonpath([here, os.path.abspath(p)]) == here
                 for p in (persona_dir, manifest))
    return os.path.join(here, LOCAL_DATA_DIR) if inside else None


def targets(persona_dir: str, manifest: str, env_file: str,
            data_dir: str | None = None) -> list[Target]:
    """The files to write; the env file records the other two paths (and DATA_DIR, when one
    was chosen), made absolute."""
    out = [Target(os.path.join(persona_dir, n), template(n)) for n in PERSONA_FILES]
    out.append(Target(manifest, template("mcp.toml")))
    chosen = {"persona_dir": os.path.abspath(persona_dir),
              "mcp_manifest": os.path.abspath(manifest)}
    if data_dir:
        chosen["data_dir"] = os.path.abspath(data_dir)
    out.append(Target(env_file, env_template(chosen), secret=True))
    return out


class InitError(Exception):
    """A target directory that cannot be created or written; `str()` names it."""


def write(target: Target) -> bool:
    """Create `target` unless something is already there; True if it was written.

    O_EXCL refuses any existing name, a symlink (even a dangling one) included, so nothing is
    ever overwritten or written through a link. A secret target is created 0600 in the same
    call, so there is no moment at which it is readable by others.
    """
    directory = os.path.dirname(target.path) or "."
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise InitError(f"cannot create directory {directory}: {exc.strerror}") from None
    mode = 0o600 if target.secret else 0o644
    try:
        fd = os.open(target.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return False
    except OSError as exc:
        raise InitError(f"cannot write in directory {directory}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        if target.secret:
            os.fchmod(fd, mode)  # exactly rw for the owner, even under a umask such as 0277
        fh.write(target.text)
    return True


def main(persona_dir: str, manifest: str, env_file: str, data_dir: str | None = None) -> int:
    """Write each target, one line per file; exit 1 at the first directory it cannot write."""
    for target in targets(persona_dir, manifest, env_file, data_dir):
        try:
            wrote = write(target)
        except InitError as exc:
            print(f"gantry init: {exc}; pass another path (see gantry init --help)",
                  file=sys.stderr)
            return 1
        print(f"{'wrote' if wrote else 'skip (exists)'} {target.path}")
    return 0
