"""`gantry check`: every validation `run` does, then real probes, one line per check.

Distroless has no shell to poke around with, so this is how an operator asks "is it wired
right?". It never sends a Telegram message, never creates or writes a file (not even the
database: it checks that `run` could), and never prints a secret (every line passes through
the same redactor as the logs).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from gantry.config import Config, Endpoint

MODEL_TIMEOUT = 30.0
TELEGRAM_TIMEOUT = 15.0
PROBE = "Reply with the single word: ok"


@dataclass
class Result:
    """One check: `status` is ok, warn (worth knowing, not a failure), FAIL or skip."""

    name: str
    status: str
    detail: str
    hint: str = ""
    ms: float | None = None

    @property
    def failed(self) -> bool:
        return self.status == "FAIL"


def _ok(name: str, detail: str, ms: float | None = None) -> Result:
    return Result(name, "ok", detail, ms=ms)


def _fail(name: str, detail: str, hint: str, ms: float | None = None) -> Result:
    return Result(name, "FAIL", detail, hint, ms)


def _elapsed(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 1)


# ---------------------------------------------------------------------------- local checks


def check_env_file(path: str) -> Result:
    """The env file holds the model key and bot token: only its owner should read it."""
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError as exc:
        return Result("env file", "warn", f"cannot stat {path}: {exc.strerror}")
    if mode & 0o077:
        who = " and ".join(w for w, bits in (("group", 0o070), ("others", 0o007)) if mode & bits)
        return Result("env file", "warn", f"{path} is readable by {who} (mode {mode:04o}); it "
                      "holds LLM_API_KEY and TELEGRAM_BOT_TOKEN", f"chmod 600 {path}")
    return _ok("env file", f"{path} (mode {mode:04o})")


def check_persona(cfg: Config) -> Result:
    from gantry.persona import PersonaError, load

    if not os.path.isdir(cfg.persona_dir):
        return Result("persona", "warn", f"{cfg.persona_dir} is missing: running without a "
                      "persona", "mount the persona directory or set PERSONA_DIR")
    try:
        persona = load(cfg.persona_dir)
    except PersonaError as exc:
        return _fail("persona", str(exc), "fix or remove the file named")
    if not persona.files:
        return Result("persona", "warn", f"no *.md files in {cfg.persona_dir}",
                      "write PERSONA.md there (gantry init writes a sample)")
    note = " (over the size cap: the rest is left out)" if persona.truncated else ""
    return _ok("persona", f"{len(persona.files)} files, {len(persona.text)} chars from "
               f"{cfg.persona_dir}: {', '.join(persona.files)}{note}")


def check_skills(cfg: Config) -> list[Result]:
    """PERSONA_DIR/skills/ as `run` loads it: each broken skill FAILs by name (run leaves it
    out with a warning), fields gantry ignores warn; nothing without the folder."""
    from pathlib import Path

    from gantry.session import est_tokens
    from gantry.skills.catalog import FOLDER, block, scan

    directory = Path(cfg.persona_dir) / FOLDER
    if not directory.is_dir():
        return []
    catalog = scan(directory)
    text, left = block(catalog.visible(False))
    names = ", ".join(s.name for s in catalog.skills) or "none"
    results = [_ok("skills", f"{len(catalog.skills)} loaded from {directory}: {names}; "
                   f"~{est_tokens(len(text))} tokens in the system prompt (est.)")]
    if left:
        results.append(Result("skills", "warn", f"over the prompt's cap, not listed: "
                              f"{', '.join(left)}", "shorten descriptions or remove skills"))
    results += [Result(f"skill {s.name}", "warn", note, "see docs/skills.md")
                for s in catalog.skills for note in s.warnings]
    results += [_fail(f"skill {folder}", why, "fix the SKILL.md named (docs/skills.md); "
                      "`gantry run` leaves it out and loads the others")
                for folder, why in catalog.errors]
    return results


def check_database(cfg: Config) -> Result:
    """Whether `run` can open and migrate the database; creates and writes nothing."""
    from gantry import db

    started = time.monotonic()
    try:
        detail = db.inspect(cfg.data_dir, cfg.db_path)
    except db.DatabaseError as exc:
        hint = ("run that newer gantry, or restore a backup" if "newer" in str(exc) else
                "DATA_DIR must be a writable directory owned by the user gantry runs as")
        return _fail("database", str(exc), hint)
    return _ok("database", detail, _elapsed(started))


def check_extraction() -> Result:
    """The frozen binary runs from its unpacked payload: show where, and that exec worked."""
    from gantry.buildinfo import info

    if not info()["frozen"].startswith("yes"):
        return Result("binary", "skip", "running from source: no payload to unpack")
    where = os.path.dirname(os.path.abspath(sys.executable))
    st = os.statvfs(where)
    free_mb = st.f_bavail * st.f_frsize // 1_000_000
    return _ok("binary", f"payload unpacked in {where} (writable and exec allowed: this check "
               f"runs from it), {free_mb} MB free there")


def check_tls(environ: Mapping[str, str]) -> tuple[Result, Any]:
    from gantry.tls import TLSConfigError, ca_context, ca_source

    kind, where = ca_source(environ)
    try:
        context = ca_context(environ)
    except TLSConfigError as exc:
        return _fail("tls", str(exc), "point SSL_CERT_FILE at a PEM CA bundle, or unset it"), None
    label = {"file": "SSL_CERT_FILE", "dir": "SSL_CERT_DIR", "certifi": "certifi's bundle"}[kind]
    return _ok("tls", f"trusting {label} ({where})"), context


# ---------------------------------------------------------------------------- probes


async def check_model(cfg: Config, context: Any) -> list[Result]:
    """The primary and each fallback model probed alike, one line each (named by the
    settings' prefix in hints; keys never shown)."""
    return [await _probe_model(e, context) for e in cfg.endpoints]


async def _probe_model(endpoint: Endpoint, context: Any) -> Result:
    from gantry.model.client import Provider
    from gantry.model.errors import ProviderError
    from gantry.model.messages import UserMessage
    from gantry.model.retry import RetryPolicy

    name = "model" if endpoint.prefix == "LLM_" else f"model {endpoint.label}"
    retry = RetryPolicy(max_attempts=1, deadline=MODEL_TIMEOUT)
    started = time.monotonic()
    provider = Provider(endpoint.base_url, endpoint.api_key, endpoint.model,
                        timeout=MODEL_TIMEOUT, retry=retry,
                        verify=context if context is not None else True)
    try:
        done = await provider.complete([UserMessage(PROBE)], None, max_tokens=16)
    except ProviderError as exc:
        return _model_failure(name, endpoint, exc, _elapsed(started))
    finally:
        await provider.aclose()
    reply = " ".join(done.text.split())[:40] or "(empty)"
    where = "" if endpoint.prefix == "LLM_" else f" at {_host(endpoint.base_url)}"
    return _ok(name, f"{endpoint.model}{where} answered {reply!r}", _elapsed(started))


def _model_failure(name: str, endpoint: Endpoint, exc: Any, ms: float) -> Result:
    status = exc.status
    url, key, model = (f"{endpoint.prefix}{part}" for part in ("BASE_URL", "API_KEY", "MODEL"))
    if endpoint.prefix != "LLM_":  # a fallback's URL and key may be the primary's
        url, key = f"{url} (or LLM_BASE_URL)", f"{key} (or LLM_API_KEY)"
    if status in (401, 403):
        return _fail(name, f"the endpoint rejected the key (HTTP {status})",
                     f"check {key} (and that it may use this model)", ms)
    if status == 404:
        return _fail(name, f"HTTP 404 for model {endpoint.model!r}",
                     f"check {model}, and that {url} is the OpenAI-compatible root "
                     "(e.g. .../v1)", ms)
    text = str(exc)
    if status is None and "CERTIFICATE_VERIFY_FAILED" in text:
        return _fail(name, "TLS: the endpoint's certificate is not trusted",
                     "trust its CA via SSL_CERT_FILE (see the tls line)", ms)
    if status is None and not exc.hint:  # the provider's mark of a transport failure is a hint
        return _fail(name, f"{url} answered, but not with a chat completion: "
                     f"{exc.message}", f"{url} must be the OpenAI-compatible root "
                     "(e.g. .../v1) of a server that speaks /chat/completions", ms)
    if status is None:
        from gantry.tls import handshake_hint

        return _fail(name, f"cannot reach {url}: {exc.message}",
                     handshake_hint(text) or "check the URL, DNS and that the server is up", ms)
    return _fail(name, text, "see the provider's message above", ms)


async def check_telegram(cfg: Config, context: Any) -> list[Result]:
    """getMe and getWebhookInfo only: nothing is sent to any chat."""
    import httpx

    users = len(cfg.telegram_allowed_users)
    out = [_ok("telegram allowlist", f"{users} allowed user id(s)")]
    base = f"{cfg.telegram_api_url.rstrip('/')}/bot{cfg.telegram_bot_token}"
    started = time.monotonic()
    verify = context if context is not None else True
    # trust_env off, as in the channel's aiohttp session: proxy variables are the model
    # client's alone, so the probe goes where `gantry run` will.
    async with httpx.AsyncClient(timeout=TELEGRAM_TIMEOUT, verify=verify,
                                 trust_env=False) as client:
        try:
            me = await client.get(f"{base}/getMe")
        except httpx.HTTPError as exc:
            hint = ("trust its CA via SSL_CERT_FILE" if "CERTIFICATE_VERIFY_FAILED" in str(exc)
                    else "check TELEGRAM_API_URL and outbound network")
            return [*out, _fail("telegram", f"cannot reach {cfg.telegram_api_url}: "
                                f"{type(exc).__name__}: {exc}", hint, _elapsed(started))]
        ms = _elapsed(started)
        if me.status_code in (401, 404):
            return [*out, _fail("telegram", f"Telegram rejected the bot token (HTTP "
                                f"{me.status_code})", "check TELEGRAM_BOT_TOKEN from "
                                "@BotFather", ms)]
        user, problem, hint = bot_api_result(me, "getMe", "a User object", "username")
        if problem:
            return [*out, _fail("telegram", problem, hint, ms)]
        out.append(_ok("telegram", f"bot @{user['username']}", ms))
        try:
            hook_response = await client.get(f"{base}/getWebhookInfo")
        except httpx.HTTPError as exc:
            return [*out, _fail("telegram webhook", f"getWebhookInfo failed: "
                                f"{type(exc).__name__}: {exc}", "check TELEGRAM_API_URL")]
        hook, problem, hint = bot_api_result(hook_response, "getWebhookInfo",
                                             "a WebhookInfo object", "url")
        if problem:
            return [*out, _fail("telegram webhook", problem, hint)]
        if hook["url"]:
            out.append(Result("telegram webhook", "warn", f"a webhook is set (to "
                              f"{_host(hook['url'])})", "gantry run deletes it at start and "
                              "long-polls; another service that sets it again will fight gantry"))
    return out


def bot_api_result(response: Any, method: str, expected: str, key: str
                   ) -> tuple[dict[str, Any], str, str]:
    """(result, "", "") when `response` is a Bot API success whose result is an object with
    a string `key`; else ({}, a line naming `method` and what came back, a hint).

    A self-hosted or proxy Bot API can answer anything: each shape gets its own line.
    """
    not_bot_api = ("TELEGRAM_API_URL must be a Bot API server (api.telegram.org or "
                   "telegram-bot-api): gantry run needs these answers")
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        return {}, (f"{method} answered HTTP {status} with a body that is not JSON: "
                    f"{_clip(response.text) or '(empty)'}"), not_bot_api
    if not isinstance(body, dict) or not isinstance(body.get("ok"), bool):
        return {}, f"{method} answered HTTP {status} with {_shown(body)}, not a Bot API reply", \
            not_bot_api
    if not body["ok"] or status != 200:
        said = body.get("description")
        return {}, (f"{method} answered HTTP {status}: "
                    f"{_clip(said) if isinstance(said, str) else _shown(body)}"), \
            "try again later; check TELEGRAM_API_URL"
    result = body.get("result")
    if not isinstance(result, dict) or not isinstance(result.get(key), str):
        shown = "no result" if "result" not in body else _shown(result)
        return {}, f"{method} answered HTTP {status} with {shown}, not {expected}", not_bot_api
    return result, "", ""


def _host(url: str) -> str:
    import httpx

    try:
        return httpx.URL(url).host or _shown(url)
    except httpx.InvalidURL:
        return _shown(url)


def _shown(value: Any) -> str:
    """A decoded JSON value fit for one report line, as JSON (so `true` and `"x"` differ)."""
    return _clip(json.dumps(value, ensure_ascii=False))


def _clip(text: str) -> str:
    """One line of at most 120 characters."""
    from gantry.clip import clip

    return clip(text, 120)


async def check_mcp(cfg: Config, environ: Mapping[str, str]) -> list[Result]:
    """The manifest, then each server on its own: start, initialize, list tools, stop."""
    from gantry.mcp.manifest import ManifestError, load

    try:
        specs = load(cfg.mcp_manifest, environ)
    except ManifestError as exc:
        return [_fail("mcp manifest", str(exc), "fix the servers and keys named (docs/mcp.md)")]
    if not specs:
        return [_ok("mcp manifest", f"no MCP servers ({cfg.mcp_manifest})")]
    out = [_ok("mcp manifest", f"{len(specs)} server(s) in {cfg.mcp_manifest}")]
    for spec in specs:
        out.append(await _probe_server(spec, environ, cfg.db_path))
    return out


async def _probe_server(spec: Any, environ: Mapping[str, str], db_path: Any = None) -> Result:
    import anyio

    from gantry.mcp.elicitation import Elicitor
    from gantry.mcp.host import Host, ServerStartError
    from gantry.tools import Registry

    name = f"mcp {spec.name}"
    started = time.monotonic()
    auth = None
    if getattr(spec, "auth", None) == "oauth":
        from gantry.mcp.auth import oauth_hook
        from gantry.mcp.tokens import login_check

        verdict = login_check(spec, db_path, time.time())
        if verdict is not None and not verdict[0]:
            return _fail(name, verdict[1], f"log in: gantry mcp login {spec.name} (docs/mcp.md)")
        if verdict is not None:
            return _ok(name, verdict[1])
        auth = oauth_hook([spec], db_path, read_only=True)
    # Capabilities as `gantry run` declares them: some servers list tools by them.
    host = Host([spec], Registry(), environ, auth=auth, elicitor=Elicitor())
    failed: str | None = None
    tools = 0
    async with anyio.create_task_group() as tg:
        try:
            await host.start(tg)
            tools = len(host.tools(spec.name))
            down = host.unavailable()  # an optional server starts "up" even when it is not
            failed = down[0][1] if down else None
        except ServerStartError as exc:
            failed = str(exc)
        ms = _elapsed(started)
        tg.cancel_scope.cancel()  # the supervisor stops and reaps the child on its way out
    login = host.servers[spec.name].login
    if login is not None and login.reason:  # the server refused the stored token
        return _fail(name, login.reason, f"log in: gantry mcp login {spec.name} (docs/mcp.md)",
                     ms)
    hint = ("check its url, headers and the network (HTTPS_PROXY/NO_PROXY, SSL_CERT_FILE)"
            if spec.remote else
            "check its command, args and env in the manifest; distroless needs static binaries")
    if failed is not None and not spec.required:
        return Result(name, "warn", "optional, not connected (gantry runs without it and "
                      f"keeps retrying): {failed}".replace("\n", " | "), hint, ms)
    if failed is not None:
        return _fail(name, failed.replace("\n", " | "), hint, ms)
    what = "connected, {} tools, disconnected again" if spec.remote else \
        "started, {} tools, stopped again"
    from gantry.mcp.era import describe as era

    speaks = era(host.servers[spec.name].protocol)
    return _ok(name, what.format(tools) + (f"; speaks {speaks}" if speaks else ""), ms)


# ---------------------------------------------------------------------------- driver


def check_backups(cfg: Config, now: float | None = None) -> Result:
    """BACKUP_DIR usable, and its newest backup no older than twice BACKUP_EVERY: `run`
    logs each failed scheduled backup, and this is where a run of them shows."""
    from pathlib import Path

    from gantry.store.schedule import newest

    if not cfg.backup_dir:
        return Result("backups", "skip", "BACKUP_DIR is not set: no scheduled backups")
    directory = cfg.backup_dir
    existing = next(p for p in (Path(directory).absolute(), *Path(directory).absolute().parents)
                    if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        return _fail("backups", f"BACKUP_DIR {directory!r} cannot be written by uid "
                     f"{os.getuid()} ({existing} is not a writable directory)",
                     "make it a directory the user gantry runs as may write")
    last = newest(Path(directory))
    if last is None:
        return _ok("backups", f"every {cfg.backup_every} to {directory}; none written yet")
    age = (time.time() if now is None else now) - last.stat().st_mtime
    if age > 2 * cfg.backup_every_seconds:
        return _fail("backups", f"the newest backup, {last.name}, is {age / 3600:.1f} h old "
                     f"but BACKUP_EVERY is {cfg.backup_every}: scheduled backups are failing",
                     "see gantry's log (\"scheduled backup failed\") and /status")
    return _ok("backups", f"every {cfg.backup_every} to {directory}; newest {last.name}")


async def run_checks(cfg: Config, environ: Mapping[str, str]) -> list[Result]:
    results = [check_persona(cfg), *check_skills(cfg), check_database(cfg),
               check_extraction(), check_backups(cfg)]
    tls, context = check_tls(environ)
    results.append(tls)
    results += await check_model(cfg, context)
    if cfg.channel == "telegram":
        results += await check_telegram(cfg, context)
    results += await check_mcp(cfg, environ)
    return results


def render(results: list[Result], redact: Callable[[str], str]) -> str:
    width = max(len(r.name) for r in results)
    lines = []
    for r in results:
        ms = f" ({r.ms:.0f} ms)" if r.ms is not None else ""
        lines.append(redact(f"{r.status:<4} {r.name:<{width}}  {r.detail}{ms}"))
        if r.hint and r.status in ("FAIL", "warn"):
            lines.append(redact(f"     {'':<{width}}  → {r.hint}"))
    failed = sum(r.failed for r in results)
    lines.append(f"{'all checks passed' if not failed else f'{failed} check(s) failed'}")
    return "\n".join(lines)


def main(env_file: str | None, as_json: bool) -> int:
    import logging

    import anyio

    from gantry import config
    from gantry.log import Redactor, url_secrets

    logging.disable(logging.CRITICAL)  # the lines below are the report; logs would repeat them
    try:
        environ = config.merged_environ(env_file)
        cfg = config.load(environ, proxy_env=os.environ)
    except config.ConfigError as exc:
        results = [_fail("config", "; ".join(exc.problems) if exc.problems else str(exc),
                         "see docs/configuration.md")]
        return _report(results, as_json, Redactor().text)
    redact = Redactor([*cfg.model_secrets, cfg.telegram_bot_token,
                       *(s for e in cfg.endpoints for s in url_secrets(e.base_url))]).text
    fallbacks = len(cfg.endpoints) - 1
    more = f" (+{fallbacks} fallback model{'s' if fallbacks > 1 else ''})" if fallbacks else ""
    results = [_ok("config", f"channel {cfg.channel}, model {cfg.llm_model}{more}")]
    if env_file:
        results.append(check_env_file(env_file))
    try:
        results += anyio.run(run_checks, cfg, environ)
    except Exception as exc:  # a probe bug must still end in a report, not a traceback
        results.append(_fail("check", f"{type(exc).__name__}: {exc}", "report this as a bug"))
    return _report(results, as_json, redact)


def _report(results: list[Result], as_json: bool, redact: Callable[[str], str]) -> int:
    failed = any(r.failed for r in results)
    if as_json:
        checks = [{k: redact(v) if isinstance(v, str) else v for k, v in asdict(r).items()}
                  for r in results]
        print(json.dumps({"ok": not failed, "checks": checks}, ensure_ascii=False))
    else:
        print(render(results, redact))
    return 1 if failed else 0
