"""The lifecycle both fake servers share: an aiohttp app on an ephemeral 127.0.0.1 port,
run either in the caller's event loop (`async with`) or on its own loop in a daemon thread
(`with`, or `start_in_thread()`/`stop()`) for tests that drive gantry as a subprocess."""

from __future__ import annotations

import asyncio
import ssl
import threading
from typing import Self

from aiohttp import web


class LoopbackServer:
    """Subclasses add their routes in `_routes` and may set `url_suffix` (e.g. "/v1")."""

    name = "fake server"
    url_suffix = ""
    max_body = 64 * 1024 * 1024  # aiohttp's default (1 MiB) is less than a photo's data URL

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context  # serve HTTPS with it (tests.fakes.pki)
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._server_loop: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _routes(self, app: web.Application) -> None:
        raise NotImplementedError

    @property
    def base_url(self) -> str:
        if self._port is None:
            raise RuntimeError(
                f"{type(self).__name__} is not started: use `async with` or start_in_thread()"
            )
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self._port}{self.url_suffix}"

    async def start(self) -> str:
        """Listen on an ephemeral loopback port in the running loop; return the base URL."""
        app = web.Application(client_max_size=self.max_body)
        self._routes(app)
        runner = web.AppRunner(app, shutdown_timeout=0.5, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self.ssl_context)
        await site.start()
        self._port = int(runner.addresses[0][1])
        self._runner = runner
        self._server_loop = asyncio.get_running_loop()
        return self.base_url

    async def close(self) -> None:
        """Stop listening; in-flight handlers (hangs, long polls) are cancelled."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._server_loop = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def start_in_thread(self) -> str:
        """Run the server on its own loop in a daemon thread (for subprocess tests)."""
        loop = asyncio.new_event_loop()
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:
                failure.append(exc)
                started.set()
                return
            started.set()
            loop.run_forever()

        self._loop = loop
        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        if not started.wait(10) or failure:
            raise RuntimeError(f"{self.name} did not start: {failure}")
        return self.base_url

    def stop(self) -> None:
        """Stop a server started with start_in_thread()."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> Self:
        self.start_in_thread()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
