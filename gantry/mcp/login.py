"""`gantry mcp login NAME`: the OAuth authorization-code flow with PKCE, headless.

gantry prints the authorization URL; the operator opens it in any browser, consents, and
pastes back the address the browser was sent to (or just the code). No browser and no
listening port on the box, so it works in distroless over `docker compose run`. The flow
itself is the SDK's (`LoginProvider` in gantry/mcp/oauth.py); this module is the terminal
side and the bookkeeping: on success, everything the login learnt goes into gantry.db in one
transaction, and the daemon picks it up at its next connection.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO
from urllib.parse import parse_qs, urlsplit

LOGIN_TIMEOUT = 900.0  # seconds for the whole login; an authorization code lives ~10 min
_ISSUER = re.compile(r"\biss(uer)?\b")  # the SDK's RFC 9207 / RFC 8414 §3.3 refusals
MAX_TRIES = 3  # pasted answers that are not an address or a code, before giving up


class LoginError(Exception):
    """The login failed; `str()` is the sentence for the operator (no token in it)."""


@dataclass(frozen=True)
class Pasted:
    """What the operator pasted: a code (with the state and issuer of the redirect, if a
    whole address was pasted), or `retry` with why it is not usable."""

    code: str | None = None
    state: str | None = None
    iss: str | None = None
    retry: str | None = None


def parse_pasted(text: str, expected_state: str, needs_iss: bool = False) -> Pasted:
    """The redirect address (or its query) or a bare code → Pasted; raise LoginError if the
    authorization server sent an error instead of a code.

    A bare code carries no state: the state gantry sent is used, as the operator copied the
    code from the redirect gantry asked for. A server that sends `iss` needs the address.
    """
    text = text.strip()
    if not text:
        return Pasted(retry="nothing pasted")
    if "://" in text or text.startswith("?") or "code=" in text or "error=" in text:
        query = urlsplit(text).query if "://" in text else text.lstrip("?")
        params = {k: v[0] for k, v in parse_qs(query).items() if v}
        if "error" in params:
            detail = params.get("error_description", "")
            raise LoginError(f"the authorization server refused: {params['error']}"
                             + (f" ({detail[:300]})" if detail else ""))
        if "code" not in params:
            return Pasted(retry="that address has no code= in it; paste the address the "
                          "browser shows after you approved")
        return Pasted(code=params["code"], state=params.get("state"), iss=params.get("iss"))
    if any(c.isspace() for c in text):
        return Pasted(retry="that is neither an address nor a code")
    if needs_iss:
        return Pasted(retry="this authorization server sends its name with the code: paste "
                      "the whole address, not just the code")
    return Pasted(code=text, state=expected_state)


class Terminal:
    """The operator's side: print to `out`, read lines from `inp` (in a thread)."""

    def __init__(self, inp: TextIO, out: TextIO) -> None:
        self.inp = inp
        self.out = out

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    async def ask(self, prompt: str) -> str:
        import anyio

        print(prompt, end="", file=self.out, flush=True)
        line = await anyio.to_thread.run_sync(self.inp.readline, abandon_on_cancel=True)
        if not line:
            raise LoginError("no input (stdin is closed); run it with a terminal: "
                             "`docker compose run --rm gantry mcp login NAME` (not with -T)")
        return str(line)


def handlers(term: Terminal, redirect: str, needs_iss: Callable[[], bool],
             metadata_url: str | None = None
             ) -> tuple[Callable[[str], Awaitable[None]], Callable[[], Awaitable[Any]]]:
    """The SDK provider's redirect and callback handlers for the paste-back flow."""
    from mcp.client.auth import AuthorizationCodeResult

    sent: dict[str, str] = {}

    async def show(url: str) -> None:
        query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
        sent["state"] = query.get("state", "")
        if metadata_url is not None and query.get("client_id") == metadata_url:
            term.say(f"\ngantry names itself by its client metadata document, {metadata_url}; "
                     f"the authorization server fetches it, and its redirect_uris must list "
                     f"{redirect} (docs/mcp.md, \"OAuth\").")
        term.say("\nOpen this address in a browser, on any machine, and approve:\n\n"
                 f"  {url}\n\n"
                 f"Your browser is then sent to {redirect}?code=… — nothing needs to answer "
                 "there, the page may fail to load. Copy that whole address from the "
                 "browser's address bar (or just the code) and paste it here.")

    async def read() -> AuthorizationCodeResult:
        for _ in range(MAX_TRIES):
            pasted = parse_pasted(await term.ask("\nAddress or code: "), sent.get("state", ""),
                                  needs_iss())
            if pasted.code is not None:
                return AuthorizationCodeResult(code=pasted.code, state=pasted.state,
                                               iss=pasted.iss)
            term.say(f"Not usable: {pasted.retry}.")
        raise LoginError(f"no usable answer after {MAX_TRIES} tries")

    return show, read


class MemoryStorage:
    """The SDK's TokenStorage for one login, seeded with a registration to reuse; written to
    gantry.db only once the login has worked."""

    def __init__(self, client_info: Any = None) -> None:
        self.tokens: Any = None
        self.client_info: Any = client_info

    def __repr__(self) -> str:
        return "MemoryStorage()"

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        from gantry.mcp.oauth import hide

        hide(tokens)
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client_info

    async def set_client_info(self, client_info: Any) -> None:
        from gantry.log import share_secrets

        if client_info.client_secret:
            share_secrets(client_info.client_secret)
        self.client_info = client_info


def _explain(exc: BaseException, spec: Any) -> str:
    """One sentence for a failed login, from the SDK's exception (tokens never in it)."""
    from mcp.client.auth import OAuthFlowError, OAuthRegistrationError

    from gantry.mcp.trouble import cause

    exc = cause(exc)
    if isinstance(exc, LoginError):
        return str(exc)
    if isinstance(exc, OAuthRegistrationError):
        hint = ("; register gantry with the provider yourself and set client_id (and "
                "client_secret, if it gives one) in the manifest" if spec.client_id is None
                else "")
        return f"client registration failed: {str(exc)[:300]}{hint}"
    if isinstance(exc, OAuthFlowError) and _ISSUER.search(str(exc).split(":")[0]):
        return (f"refused: the answer does not come from the authorization server gantry "
                f"asked ({str(exc)[:300]}); nothing was stored")
    if isinstance(exc, OAuthFlowError):
        return f"the OAuth flow failed: {str(exc)[:300]}"
    if isinstance(exc, TimeoutError):
        return f"no login within {LOGIN_TIMEOUT:g} s"
    return f"{type(exc).__name__}: {str(exc)[:300]}"


async def login(spec: Any, store: Any, term: Terminal, environ: Mapping[str, str],
                new_client: bool = False) -> int:
    """Run the flow against `spec`, store the result; 0 on success, 1 (said why) otherwise.
    `new_client`: register anew instead of reusing the stored registration (the provider
    forgot it: its authorization page says the client is unknown)."""
    import logging
    import time

    import anyio
    from mcp.client.auth import OAuthClientProvider

    from gantry.mcp import cimd, issuer, oauth

    record = store.get(spec.name)
    old_issuer = issuer.stored(record.as_metadata) if record is not None else None
    reuse = None
    if spec.client_id is None and record is not None and record.url == spec.url \
            and record.client_info and not new_client:
        from mcp.shared.auth import OAuthClientInformationFull

        reuse = OAuthClientInformationFull.model_validate_json(record.client_info)
        if not cimd.reusable(reuse.client_id, spec.oauth_client_metadata_url):
            reuse = None
        elif reuse.issuer is None:  # so the SDK re-registers if the issuer is another now
            reuse.issuer = old_issuer
    storage = MemoryStorage(oauth.manifest_client(spec) or reuse)
    provider: OAuthClientProvider

    def needs_iss() -> bool:
        meta = provider.context.oauth_metadata
        return bool(meta and meta.authorization_response_iss_parameter_supported)

    show, read = handlers(term, oauth.redirect_uri(spec), needs_iss,
                          spec.oauth_client_metadata_url)
    provider = OAuthClientProvider(server_url=spec.url, client_metadata=oauth.client_metadata(spec),
                                   storage=storage, redirect_handler=show, callback_handler=read,
                                   client_metadata_url=spec.oauth_client_metadata_url)
    # The SDK logs a failed flow with its traceback; the operator gets one sentence instead.
    logging.getLogger("mcp.client.auth").setLevel(logging.CRITICAL)
    term.say(f"Logging in to MCP server {spec.name!r} ({spec.where}).")
    try:
        with anyio.fail_after(LOGIN_TIMEOUT):
            tools = await _session(spec, provider, environ)
    except Exception as exc:
        term.say(f"\ngantry mcp login: {spec.name}: {_explain(exc, spec)}")
        return 1
    if storage.tokens is None:  # the server never asked for a token
        term.say(f"\nMCP server {spec.name!r} answered without asking for a login "
                 f"({tools} tools): nothing to store. Is auth = \"oauth\" right for it?")
        return 1
    ctx = provider.context
    store.save_login(
        spec.name, spec.url,
        client_info=(storage.client_info.model_dump_json(exclude_none=True)
                     if storage.client_info is not None and spec.client_id is None else None),
        tokens=oauth.token_json(storage.tokens),
        expires_at=oauth.expires_at(storage.tokens, time.time()),
        as_metadata=ctx.oauth_metadata.model_dump_json(exclude_none=True)
        if ctx.oauth_metadata else None,
        resource_metadata=ctx.protected_resource_metadata.model_dump_json(exclude_none=True)
        if ctx.protected_resource_metadata else None,
    )
    new_issuer = str(ctx.oauth_metadata.issuer) if ctx.oauth_metadata else None
    if old_issuer and new_issuer and not issuer.same(old_issuer, new_issuer):
        term.say(f"\nThe server's authorization server changed from {old_issuer} to "
                 f"{new_issuer}: the old login is replaced, and its registration was not "
                 "used there.")
    refresh = "it refreshes" if storage.tokens.refresh_token else \
        "no refresh token was given: log in again when it expires"
    term.say(f"\nLogged in to {spec.name!r}: {tools} tools. The tokens are in the database; "
             f"gantry uses them at its next connection ({refresh}).")
    return 0


async def _session(spec: Any, auth: Any, environ: Mapping[str, str]) -> int:
    """initialize + tools/list through `auth` over the daemon's own transport (its TLS trust,
    proxies, headers): the 401 starts the flow, the rest proves it works."""
    from mcp.client.session import ClientSession

    from gantry.mcp.remote import open_remote

    async with open_remote(spec, environ, auth) as (_remote, read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        return len((await session.list_tools()).tools)


def main(args: Any) -> int:
    """The command: load the manifest and DATA_DIR, find NAME, log in."""
    import os

    import anyio

    from gantry import config, db
    from gantry import log as logsetup
    from gantry.mcp.manifest import ManifestError, load
    from gantry.mcp.tokens import TokenStore

    try:
        environ = config.merged_environ(args.env_file)
        cfg = config.load(environ, offline=True)
    except config.ConfigError as exc:
        print(f"gantry mcp login: {logsetup.strip_url_credentials(str(exc))}", file=sys.stderr)
        return 1
    logsetup.setup(environ.get("LOG_LEVEL", "warning").strip().lower() or "warning",
                   [environ.get(k, "") for k in config.SECRETS])
    try:
        specs = load(cfg.mcp_manifest, environ)
    except ManifestError as exc:
        print(f"gantry mcp login: {exc}", file=sys.stderr)
        return 1
    spec = next((s for s in specs if s.name == args.name), None)
    if spec is None or spec.auth != "oauth":
        oauth_names = [s.name for s in specs if s.auth == "oauth"]
        why = "no server of that name" if spec is None else "it has no auth = \"oauth\""
        print(f"gantry mcp login: {args.name!r}: {why} in {cfg.mcp_manifest}; OAuth servers "
              f"there: {', '.join(oauth_names) or 'none'}", file=sys.stderr)
        return 1
    try:
        db.ensure_data_dir(cfg.data_dir)
        db.connect(cfg.db_path).close()  # created and migrated, as `run` would
    except db.DatabaseError as exc:
        print(f"gantry mcp login: {exc}", file=sys.stderr)
        return 1
    store = TokenStore(os.fspath(cfg.db_path))
    return anyio.run(login, spec, store, Terminal(sys.stdin, sys.stdout), environ,
                     args.new_client)
