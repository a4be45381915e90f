"""The configuration contract (spec §5.1): every setting is an environment variable.

Parsing collects *every* problem before failing, so one boot attempt tells the operator
everything that is wrong. Values of secrets are never echoed back.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from gantry.prices import Price, PricesError, parse_prices

FALLBACK_MAX = 5  # LLM_FALLBACK_1_* … LLM_FALLBACK_5_*
SECRETS = ("LLM_API_KEY", "TELEGRAM_BOT_TOKEN", "LLM_TRANSCRIBE_API_KEY", "LLM_SPEECH_API_KEY",
           *(f"LLM_FALLBACK_{n}_API_KEY" for n in range(1, FALLBACK_MAX + 1)))
CHANNELS = ("telegram", "stdio")
LOG_LEVELS = ("debug", "info", "warning", "error")
TELEGRAM_GROUP_MODES = ("off", "mention")
FOLLOWUP_MODES = ("steer", "queue")  # FOLLOWUPS: see gantry/steer.py
LOG_FORMATS = ("auto", "json", "text")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_MCP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_BOT_TOKEN = re.compile(r"[0-9]+:[A-Za-z0-9_-]+")
# `user:password@` before the host: after an optional scheme, with no / before the @.
_LOGIN = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.-]*://)?)[^/@]*@")
URL_LOGIN_PROBLEM = (
    "LLM_BASE_URL must not hold a user:password@ (not shown): gantry sends LLM_API_KEY as the "
    "Authorization: Bearer header, and a login in the URL would replace it. A forward proxy's "
    "login goes in HTTPS_PROXY (http://user:password@proxy:port); a gateway in front of the "
    "model must take its token as LLM_API_KEY"
)
_FALLBACK_NAME = re.compile(r"LLM_FALLBACK_([0-9]+)_(MODEL|BASE_URL|API_KEY)")


class Endpoint(NamedTuple):
    """One model endpoint as the operator named it: the primary (`LLM_*`) or a fallback
    (`LLM_FALLBACK_<n>_*`, whose URL and key default to the primary's)."""

    label: str  # "primary", "fallback 1", …
    prefix: str  # the settings' prefix, for messages: "LLM_", "LLM_FALLBACK_1_"
    base_url: str
    api_key: str
    model: str


class Config(msgspec.Struct, frozen=True, kw_only=True, rename="upper"):
    """Every runtime setting. Field `x` is read from the environment variable `X`."""

    llm_base_url: str
    llm_api_key: str
    llm_model: str
    telegram_bot_token: str = ""
    telegram_allowed_users: tuple[int, ...] = ()
    telegram_api_url: str = "https://api.telegram.org"
    telegram_groups: str = "off"
    channel: str = "telegram"
    persona_dir: str = "/persona"
    data_dir: str = "/data"
    mcp_manifest: str = "/etc/gantry/mcp.toml"
    history_max_messages: int = 200
    history_max_tokens: int = 128000
    tool_result_max_chars: int = 16000
    tool_max_iterations: int = 20
    tools_max_per_turn: int = 24
    tools_always: str = ""
    memory_enabled: bool = True
    memory_backend: str = "builtin"
    memory_consolidate_minutes: int = 30
    cron_enabled: bool = True
    cron_tz: str = "UTC"
    cron_max_jobs: int = 50
    cron_tick_seconds: int = 15
    watch_max: int = 20
    watch_min_interval_seconds: int = 60
    stream_replies: bool = False
    followups: str = "steer"  # a message sent while a turn runs: folded into it, or queued
    elicitation_timeout_seconds: int = 300
    log_level: str = "info"
    log_format: str = "auto"
    media_max_bytes: int = 20_000_000  # Telegram's bot download limit (20 MB)
    media_keep_days: int = 7  # files kept in DATA_DIR/media are pruned after this many days
    media_max_total_bytes: int = 1_000_000_000  # all kept media, at most (oldest go first)
    document_timeout_seconds: int = 20  # a PDF's text takes at most this, or it is kept as a file
    llm_transcribe_model: str = ""  # set: voice notes and audio are transcribed (gantry.media)
    llm_transcribe_base_url: str = ""  # default: LLM_BASE_URL
    llm_transcribe_api_key: str = ""  # default: LLM_API_KEY
    # Fallback models, tried in order when the one before fails (gantry.model.fallback);
    # each URL and key default to LLM_BASE_URL and LLM_API_KEY.
    llm_fallback_1_model: str = ""
    llm_fallback_1_base_url: str = ""
    llm_fallback_1_api_key: str = ""
    llm_fallback_2_model: str = ""
    llm_fallback_2_base_url: str = ""
    llm_fallback_2_api_key: str = ""
    llm_fallback_3_model: str = ""
    llm_fallback_3_base_url: str = ""
    llm_fallback_3_api_key: str = ""
    llm_fallback_4_model: str = ""
    llm_fallback_4_base_url: str = ""
    llm_fallback_4_api_key: str = ""
    llm_fallback_5_model: str = ""
    llm_fallback_5_base_url: str = ""
    llm_fallback_5_api_key: str = ""
    llm_fallback_notice: bool = False  # true: a reply a fallback model wrote says so
    llm_speech_model: str = ""  # set: replies to voice notes (or after /voice on) are spoken too
    llm_speech_voice: str = "alloy"
    llm_speech_base_url: str = ""  # default: LLM_BASE_URL
    llm_speech_api_key: str = ""  # default: LLM_API_KEY
    speech_max_chars: int = 1000  # characters of one reply spoken at most; the rest stays text
    telegram_reactions: bool = True  # 👀 on a message being answered; users' reactions as feedback
    llm_prices: str = ""  # model=input/cached/output USD per 1M tokens (gantry.prices)
    backup_dir: str = ""  # set: `gantry run` writes a backup there every BACKUP_EVERY
    backup_every: str = "1d"
    backup_keep: int = 7
    # Budgets (gantry.model.budget, docs/models.md "Budgets"): unset is no limit; 0 allows none.
    budget_daily_tokens: int | None = None
    budget_daily_cost: float | None = None  # USD
    budget_monthly_tokens: int | None = None
    budget_monthly_cost: float | None = None
    budget_auto_daily_tokens: int | None = None  # cron, watches, consolidation only
    budget_auto_daily_cost: float | None = None
    budget_auto_monthly_tokens: int | None = None
    budget_auto_monthly_cost: float | None = None
    budget_warn_percent: int = 80
    budget_owner_through: bool = False  # the owner's private chat passes the overall limits

    @property
    def tools_always_list(self) -> tuple[str, ...]:
        """TOOLS_ALWAYS split: tool names or `server__*` prefixes, always offered."""
        return tuple(p.strip() for p in self.tools_always.split(",") if p.strip())

    @property
    def backup_every_seconds(self) -> float:
        """BACKUP_EVERY in seconds (load() has checked it parses)."""
        return float(duration_seconds(self.backup_every) or 0)

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        """The primary, then each configured fallback in order (load() checked there is no
        gap), the fallbacks' empty URL and key filled from the primary's."""
        out = [Endpoint("primary", "LLM_", self.llm_base_url, self.llm_api_key, self.llm_model)]
        for n in range(1, FALLBACK_MAX + 1):
            model = getattr(self, f"llm_fallback_{n}_model")
            if not model:
                break
            out.append(Endpoint(f"fallback {n}", f"LLM_FALLBACK_{n}_",
                                getattr(self, f"llm_fallback_{n}_base_url") or self.llm_base_url,
                                getattr(self, f"llm_fallback_{n}_api_key") or self.llm_api_key,
                                model))
        return tuple(out)

    @property
    def model_secrets(self) -> list[str]:
        """Every model key, for the log redactor (a fallback's may differ from the primary's)."""
        return [e.api_key for e in self.endpoints if e.api_key]

    @property
    def prices(self) -> dict[str, Price]:
        """LLM_PRICES parsed (load() has checked it parses)."""
        return parse_prices(self.llm_prices)

    @property
    def db_path(self) -> Path:
        return Path(self.data_dir) / "gantry.db"


MAX_BUDGET_TOKENS = 10**13

# Inclusive bounds for integer settings: wide enough for any sane deployment,
# narrow enough to catch typos such as an extra zero or a negative number.
INT_BOUNDS: dict[str, tuple[int, int]] = {
    "history_max_messages": (2, 100_000),
    "history_max_tokens": (1_000, 10_000_000),
    "tool_result_max_chars": (100, 10_000_000),
    "tool_max_iterations": (1, 1_000),
    "tools_max_per_turn": (1, 1_000),
    "memory_consolidate_minutes": (0, 10_080),
    "cron_max_jobs": (1, 10_000),
    "cron_tick_seconds": (1, 3_600),
    "elicitation_timeout_seconds": (10, 86_400),
    "watch_max": (0, 1_000),
    "watch_min_interval_seconds": (1, 3_600),
    "media_max_bytes": (1_000, 2_000_000_000),
    "media_keep_days": (1, 3_650),
    "media_max_total_bytes": (1_000, 10_000_000_000_000),
    "document_timeout_seconds": (1, 600),
    "backup_keep": (1, 10_000),
    "speech_max_chars": (50, 100_000),
    "budget_daily_tokens": (0, MAX_BUDGET_TOKENS),
    "budget_monthly_tokens": (0, MAX_BUDGET_TOKENS),
    "budget_auto_daily_tokens": (0, MAX_BUDGET_TOKENS),
    "budget_auto_monthly_tokens": (0, MAX_BUDGET_TOKENS),
    "budget_warn_percent": (1, 100),
}
BUDGET_COSTS = ("budget_daily_cost", "budget_monthly_cost", "budget_auto_daily_cost",
                "budget_auto_monthly_cost")
MAX_BUDGET_COST = 1_000_000.0  # USD a period: anything above is a typo
_DURATION = re.compile(r"([0-9]+)\s*([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
BACKUP_EVERY_BOUNDS = (5, 366 * 86400)


def duration_seconds(text: str) -> int | None:
    """"1d" → 86400, "12h", "30m", "90s", "2w"; None unless it is one number and one unit."""
    m = _DURATION.fullmatch(text.strip().lower())
    return int(m.group(1)) * _UNIT_SECONDS[m.group(2)] if m else None


REQUIRED = ("llm_base_url", "llm_api_key", "llm_model")
REQUIRED_FOR_TELEGRAM = ("telegram_bot_token", "telegram_allowed_users")


class ConfigError(Exception):
    """Raised with every problem found; `str()` is the operator-facing message."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        lines = [f"gantry: configuration has {len(problems)} problem(s):"]
        lines += [f"  - {p}" for p in problems]
        lines.append("See docs/configuration.md for every variable and its default.")
        super().__init__("\n".join(lines))


def env_name(field: str) -> str:
    return field.upper()


def defaults() -> dict[str, Any]:
    """Field name → default, for docs and tests (required fields are absent)."""
    out: dict[str, Any] = {}
    for f in msgspec.structs.fields(Config):
        if f.required:
            continue
        out[f.name] = f.default
    return out


def _show(name: str, raw: str) -> str:
    """A value fit for an error message: secrets are never echoed."""
    return "(value hidden)" if name in SECRETS else repr(raw[:80])


def _parse_int(name: str, raw: str, problems: list[str]) -> int | None:
    try:
        value = int(raw.strip(), 10)
    except ValueError:
        problems.append(f"{name} must be a whole number, got {_show(name, raw)}")
        return None
    lo, hi = INT_BOUNDS[name.lower()]
    if not lo <= value <= hi:
        problems.append(f"{name} must be between {lo} and {hi}, got {value}")
        return None
    return value


def _parse_bool(name: str, raw: str, problems: list[str]) -> bool | None:
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    problems.append(f"{name} must be true or false, got {_show(name, raw)}")
    return None


def _parse_users(name: str, raw: str, problems: list[str]) -> tuple[int, ...] | None:
    items = [p.strip() for p in raw.split(",") if p.strip()]
    if not items:
        problems.append(f"{name} must list at least one numeric Telegram user id")
        return None
    bad = [p for p in items if not p.isdecimal() or int(p) <= 0]
    if bad:
        problems.append(
            f"{name} must be comma-separated numeric user ids, not {', '.join(map(repr, bad[:5]))}"
        )
        return None
    return tuple(dict.fromkeys(int(p) for p in items))


def _parse_cost(name: str, raw: str, problems: list[str]) -> float | None:
    try:
        value = float(raw.strip().removeprefix("$"))
    except ValueError:
        value = -1.0
    if not 0 <= value <= MAX_BUDGET_COST:  # also NaN
        problems.append(f"{name} must be an amount of USD between 0 and "
                        f"{MAX_BUDGET_COST:,.0f}, e.g. 2.50, got {raw[:40]!r}")
        return None
    return value


_FALLBACK_MODEL = re.compile(r"LLM_FALLBACK_[0-9]+_MODEL")


def _unpriced_budgets(values: dict[str, Any], prices: Mapping[str, Price],
                      env: Mapping[str, str]) -> list[str]:
    """A cost budget only holds if every chat model has a price: an unpriced call costs 0,
    so the budget would never be reached. Refused at boot rather than silently unenforced."""
    costs = [env_name(f) for f in BUDGET_COSTS if values.get(f) is not None]
    if not costs:
        return []
    models = [values.get("llm_model", "")]
    models += [v.strip() for k, v in env.items() if _FALLBACK_MODEL.fullmatch(k) and v.strip()]
    missing = [m for m in dict.fromkeys(models) if m and m not in prices]
    if not missing:
        return []
    return [f"{', '.join(costs)} set, but LLM_PRICES has no price for "
            f"{', '.join(map(repr, missing))}: its calls would cost nothing and the budget "
            "would never be reached. Add e.g. LLM_PRICES='model=0.15/0.075/0.60' (USD per 1M "
            "tokens: input/cached/output), or use a BUDGET_…_TOKENS limit instead"]


def _check_tz(raw: str, problems: list[str]) -> None:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(raw)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        problems.append(
            f"CRON_TZ {raw!r} is not a known IANA time zone (e.g. UTC, America/Los_Angeles)"
        )


def load(
    environ: Mapping[str, str] | None = None, *, proxy_env: Mapping[str, str] | None = None,
    offline: bool = False,
) -> Config:
    """Build a Config from `environ` (default: os.environ) or raise ConfigError.

    An empty variable counts as unset, so compose's `X=` falls back to the default.
    `proxy_env` is where the model client will read its proxy variables (httpx reads the
    process environment, never an env file); None skips that check for commands that make
    no model call. `offline`: for commands that reach neither the model nor Telegram
    (`gantry tools list`), whose settings may then be absent (left empty).
    """
    env = os.environ if environ is None else environ
    problems: list[str] = []
    values: dict[str, Any] = {}
    for f in msgspec.structs.fields(Config):
        name = env_name(f.name)
        raw = env.get(name, "")
        if raw.strip() == "":
            continue
        if f.name == "telegram_allowed_users":
            parsed: Any = _parse_users(name, raw, problems)
        elif f.name in INT_BOUNDS:
            parsed = _parse_int(name, raw, problems)
        elif f.name in BUDGET_COSTS:
            parsed = _parse_cost(name, raw, problems)
        elif isinstance(f.default, bool):
            parsed = _parse_bool(name, raw, problems)
        else:
            parsed = raw.strip()
        if parsed is not None:
            values[f.name] = parsed

    for field in REQUIRED:
        if offline:
            values.setdefault(field, "")
        elif field not in values and env_name(field) not in _reported(problems):
            problems.append(f"{env_name(field)} is required but not set")

    api = values.get("telegram_api_url")
    if api is not None and not re.match(r"https?://[^/\s]+", api):
        problems.append(f"TELEGRAM_API_URL must start with http:// or https://, got {api[:80]!r}")

    url = values.get("llm_base_url")
    if url and not re.match(r"https?://[^/\s]+", url):
        problems.append(
            f"LLM_BASE_URL must start with http:// or https://, got {hide_login(url)[:80]!r}"
        )
    elif url and _LOGIN.match(url):
        problems.append(URL_LOGIN_PROBLEM)

    for name in ("LLM_TRANSCRIBE_BASE_URL", "LLM_SPEECH_BASE_URL",
                 *(f"LLM_FALLBACK_{n}_BASE_URL" for n in range(1, FALLBACK_MAX + 1))):
        _check_url(name, values.get(name.lower()), problems)
    problems += _fallback_problems(env, values)

    channel = values.get("channel", "telegram")
    if channel not in CHANNELS:
        problems.append(f"CHANNEL must be one of {', '.join(CHANNELS)}, got {channel[:40]!r}")
    if channel == "telegram" and not offline:
        for field in REQUIRED_FOR_TELEGRAM:
            name = env_name(field)
            if field not in values and name not in _reported(problems):
                problems.append(f"{name} is required when CHANNEL=telegram")
        token = values.get("telegram_bot_token")
        if token is not None and not _BOT_TOKEN.fullmatch(token):
            problems.append("TELEGRAM_BOT_TOKEN does not look like a bot token (<digits>:<key>)")

    groups = values.get("telegram_groups", "off").lower()
    if groups not in TELEGRAM_GROUP_MODES:
        problems.append(
            f"TELEGRAM_GROUPS must be one of {', '.join(TELEGRAM_GROUP_MODES)}, "
            f"got {groups[:40]!r}"
        )
    else:
        values["telegram_groups"] = groups

    followups = values.get("followups", "steer").lower()
    if followups not in FOLLOWUP_MODES:
        problems.append(
            f"FOLLOWUPS must be one of {', '.join(FOLLOWUP_MODES)}, got {followups[:40]!r}")
    else:
        values["followups"] = followups

    level = values.get("log_level", "info").lower()
    if level not in LOG_LEVELS:
        problems.append(f"LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got {level[:40]!r}")
    else:
        values["log_level"] = level

    fmt = values.get("log_format", "auto").lower()
    if fmt not in LOG_FORMATS:
        problems.append(f"LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}, got {fmt[:40]!r}")
    else:
        values["log_format"] = fmt

    backend = values.get("memory_backend", "builtin")
    if backend != "builtin" and not (
        backend.startswith("mcp:") and _MCP_NAME.fullmatch(backend[4:])
    ):
        problems.append(
            f"MEMORY_BACKEND must be 'builtin' or 'mcp:<server-name>', got {backend[:60]!r}"
        )

    if "cron_tz" in values:
        _check_tz(values["cron_tz"], problems)

    every = duration_seconds(values.get("backup_every", "1d"))
    lo, hi = BACKUP_EVERY_BOUNDS
    if every is None or not lo <= every <= hi:
        problems.append("BACKUP_EVERY must be a number and a unit (s, m, h, d, w) between 5s "
                        f"and 366d, e.g. 1d or 12h, got {values.get('backup_every', '')[:40]!r}")

    try:
        prices = parse_prices(values.get("llm_prices", ""))
    except PricesError as exc:
        problems.append(str(exc))
    else:
        problems += _unpriced_budgets(values, prices, env)

    if proxy_env is not None:
        from gantry import proxyenv

        problems += proxyenv.problems(proxy_env)

    if problems:
        raise ConfigError(problems)
    return Config(**values)


def _check_url(name: str, url: str | None, problems: list[str]) -> None:
    """An optional endpoint URL: http(s), with no login in it (see URL_LOGIN_PROBLEM)."""
    if url and not re.match(r"https?://[^/\s]+", url):
        problems.append(f"{name} must start with http:// or https://, got "
                        f"{hide_login(url)[:80]!r}")
    elif url and _LOGIN.match(url):
        problems.append(URL_LOGIN_PROBLEM.replace("LLM_BASE_URL", name, 1))


def _fallback_problems(env: Mapping[str, str], values: dict[str, Any]) -> list[str]:
    """The fallback list must be numbered 1…FALLBACK_MAX with no gap, each entry naming its
    model: a typo'd or out-of-range name would otherwise be ignored in silence."""
    problems: list[str] = []
    for name in sorted(env):
        if not name.startswith("LLM_FALLBACK_") or not env[name].strip():
            continue
        m = _FALLBACK_NAME.fullmatch(name)
        if name == "LLM_FALLBACK_NOTICE":
            continue
        if m is None:
            problems.append(f"{name} is not a setting: fallback models are named "
                            "LLM_FALLBACK_<n>_MODEL, LLM_FALLBACK_<n>_BASE_URL and "
                            f"LLM_FALLBACK_<n>_API_KEY, n from 1 to {FALLBACK_MAX}")
        elif not 1 <= int(m.group(1)) <= FALLBACK_MAX or m.group(1).startswith("0"):
            problems.append(f"{name}: fallback models are numbered 1 to {FALLBACK_MAX} "
                            f"(at most {FALLBACK_MAX} fallbacks)")
    for n in range(1, FALLBACK_MAX + 1):
        model = values.get(f"llm_fallback_{n}_model")
        if not model:
            for part in ("base_url", "api_key"):
                if values.get(f"llm_fallback_{n}_{part}"):
                    problems.append(f"LLM_FALLBACK_{n}_{part.upper()} is set but "
                                    f"LLM_FALLBACK_{n}_MODEL is not: name the model too")
        elif n > 1 and not values.get(f"llm_fallback_{n - 1}_model"):
            problems.append(f"LLM_FALLBACK_{n}_MODEL is set but LLM_FALLBACK_{n - 1}_MODEL is "
                            "not: number the fallback models from 1, with no gap")
    return problems


def hide_login(url: str) -> str:
    """`url` fit for a message: a `user:password@` before its host replaced by a marker."""
    from gantry.log import REDACTED

    return _LOGIN.sub(lambda m: m.group(1) + REDACTED + "@", url, count=1)


def _reported(problems: list[str]) -> set[str]:
    """Names already complained about, so a bad value is not also called 'missing'."""
    return {p.split(" ", 1)[0] for p in problems}


def read_env_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """Parse a dotenv-style file (gantry.envfile); ConfigError names the file and line."""
    from gantry import envfile

    try:
        return envfile.read(path)
    except envfile.EnvFileError as exc:
        raise ConfigError(exc.problems) from None


def merged_environ(env_file: str | None) -> dict[str, str]:
    """The process environment over an optional env file: real env vars win."""
    base = read_env_file(env_file) if env_file else {}
    base.update(os.environ)
    return base
