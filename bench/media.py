"""Media in: what a photo turn costs gantry itself, beside a text turn, and peak RSS while a
20 MB document is read.

Prints figures; never pass/fail. Everything is real except the far ends: aiogram downloads
from the loopback fake Bot API (getFile, then the file URL), the agent calls the loopback
fake model, which answers at once. Per turn it times, apart:

  media     getFile + the streamed download to DATA_DIR/media + conversion (for a photo: the
            magic check, reading the file, base64 into a data URL)
  turn      the agent's turn minus the time inside Provider.complete (history load, prompt
            assembly, recording the turn: an image makes the stored row ~1.33× its bytes)

The session is reset between turns (outside the timings), so every turn is measured with
the same history. Peak RSS (VmHWM, reset through /proc/self/clear_refs) runs each kind in a
fresh child process:
the baseline is the RSS after a warm-up text turn has imported everything, then one file
is read — a 20 MB binary document (streamed to disk, kept), a 20 MB text document (read
only up to the 50,000-character cap), a 4 MB image document (held in memory as base64).

Usage: python bench/media.py [--turns 30]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio

TOKEN = "123456789:AAE_bench-token-for-media_xyz"
USER = 4242
MB = 1_000_000


def _row(media: str, text: str = "what is this?") -> Any:
    from gantry.channel.telegram.store import Pending

    return Pending(update_id=1, chat_id=USER, user_id=USER, message_id=1, text=text,
                   reply=None, sent_parts=0, stream_msgs=[], media=media)


def _media_json(kind: str, file_id: str, unique: str, size: int, name: str, mime: str) -> str:
    from gantry.media.kinds import Media, dump

    extra: dict[str, Any] = {"width": 1280, "height": 960} if kind == "photo" else {}
    return dump([Media(kind=kind, ref=file_id, key=unique, name=name, mime=mime, size=size,
                       **extra)])


def _telegram_media(api: str, data_dir: str, cap: int) -> Any:
    from gantry.channel.telegram.media import TelegramMedia  # first: aiogram's lazy models
    from gantry.media.build import MediaReader

    from aiogram import Bot  # isort: skip
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer

    bot = Bot(TOKEN, session=AiohttpSession(api=TelegramAPIServer.from_base(api)))
    return bot, TelegramMedia(bot, MediaReader(data_dir, cap))


class TimedModel:
    """The real Provider, with the time inside `complete` summed (to be subtracted)."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.model = provider.model
        self.spent = 0.0

    async def complete(self, messages: Any, tools: Any = None) -> Any:
        started = time.perf_counter()
        try:
            return await self.provider.complete(messages, tools)
        finally:
            self.spent += time.perf_counter() - started

    def stream(self, messages: Any, tools: Any = None) -> Any:
        return self.provider.stream(messages, tools)


async def _turns(api: str, llm_url: str, cases: dict[str, str], turns: int,
                 tmp: Path) -> dict[str, tuple[list[float], list[float]]]:
    from gantry import db
    from gantry.agent import Agent
    from gantry.channel.base import Inbound
    from gantry.model.client import Provider
    from gantry.session import SessionStore
    from gantry.tools import Registry

    provider = Provider(llm_url, "sk-bench-0123456789", "fake-model")
    model = TimedModel(provider)
    sessions = SessionStore(db.connect(tmp / "g.db"))
    agent = Agent(model=model, sessions=sessions, tools=Registry(),  # type: ignore[arg-type]
                  persona=lambda: "You are Bench.")
    bot, media = _telegram_media(api, str(tmp / "data"), 25 * MB)
    out: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in cases}
    try:
        for i in range(turns + 3):  # the first three warm up connections and imports
            for kind, media_json in cases.items():
                sessions.reset("telegram:bench")
                t0 = time.perf_counter()
                text, images = await media.read(_row(media_json))
                t1 = time.perf_counter()
                model.spent = 0.0
                await agent(Inbound(channel="telegram", chat_id="bench", user_id="u",
                                    text=text, images=images))
                t2 = time.perf_counter()
                if i >= 3:
                    out[kind][0].append((t1 - t0) * 1000)
                    out[kind][1].append((t2 - t1 - model.spent) * 1000)
    finally:
        await bot.session.close()
        await provider.aclose()
    return out


async def _child(api: str, media_json: str, data_dir: str) -> dict[str, Any]:
    bot, media = _telegram_media(api, data_dir, 25 * MB)
    try:
        await media.read(_row("[]"))  # a text turn: imports done, nothing downloaded
        base = _status_kib("VmRSS")
        # reset the peak (VmHWM) to the current RSS: ru_maxrss would carry the parent's,
        # which survives exec
        Path("/proc/self/clear_refs").write_text("5")
        t0 = time.perf_counter()
        text, images = await media.read(_row(media_json))
        ms = (time.perf_counter() - t0) * 1000
        peak = _status_kib("VmHWM")
        return {"base_kib": base, "peak_kib": peak, "ms": ms, "text_chars": len(text),
                "image_chars": sum(len(i.image_url.url) for i in images)}
    finally:
        await bot.session.close()


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--child", nargs=2, metavar=("API", "MEDIA_JSON"))
    args = parser.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory() as d:
            print(json.dumps(anyio.run(_child, args.child[0], args.child[1], d)))
        return

    from tests.fakes.media_samples import jpeg
    from tests.fakes.openai import FakeOpenAI
    from tests.fakes.telegram import FakeTelegram

    tg, llm = FakeTelegram(token=TOKEN), FakeOpenAI()
    api, llm_url = tg.start_in_thread(), llm.start_in_thread()
    try:
        def file(kind: str, data: bytes, name: str, mime: str) -> str:
            f = tg.add_file(data)
            return _media_json(kind, f.file_id, f.unique_id, len(data), name, mime)

        cases = {
            "text": "[]",
            "photo 150 KB": file("photo", jpeg(150_000), "", "image/jpeg"),
            "photo 1 MB": file("photo", jpeg(1_000_000, seed=3), "", "image/jpeg"),
        }
        with tempfile.TemporaryDirectory() as d:
            timings = anyio.run(_turns, api, llm_url, cases, args.turns, Path(d))
        print(f"media turns: Python {platform.python_version()}, {args.turns} turns each, "
              "fake Bot API and model on loopback (ms; median / p95)")
        print(f"{'turn':<14} {'media':>16} {'turn (no model)':>18} {'total':>16}")
        for kind, (media_ms, turn_ms) in timings.items():
            total = [a + b for a, b in zip(media_ms, turn_ms, strict=True)]
            cols = [f"{statistics.median(v):7.2f} / {_pct(v, 0.95):6.2f}"
                    for v in (media_ms, turn_ms, total)]
            print(f"{kind:<14} {cols[0]:>16} {cols[1]:>18} {cols[2]:>16}")

        big = {
            "20 MB binary document": file("document", os.urandom(20 * MB), "backup.tar",
                                          "application/x-tar"),
            "20 MB text document": file("document", b"log line 0123456789\n" * MB,
                                        "app.log", "text/plain"),
            "4 MB image document": file("image", jpeg(4 * MB, seed=9), "scan.jpg",
                                        "image/jpeg"),
        }
        print("\npeak RSS while one file is read (fresh process each; KiB)")
        print(f"{'file':<24} {'baseline':>10} {'peak':>10} {'added':>9} {'ms':>8}  model input")
        for label, media_json in big.items():
            done = subprocess.run([sys.executable, __file__, "--child", api, media_json],
                                  capture_output=True, text=True, check=True, timeout=300)
            r = json.loads(done.stdout.strip().splitlines()[-1])
            shown = (f"{r['image_chars']:,} chars of data URL" if r["image_chars"]
                     else f"{r['text_chars']:,} chars of text")
            print(f"{label:<24} {r['base_kib']:>10,} {r['peak_kib']:>10,} "
                  f"{r['peak_kib'] - r['base_kib']:>9,} {r['ms']:>8.1f}  {shown}")
    finally:
        tg.stop()
        llm.stop()


if __name__ == "__main__":
    main()
