"""aiogram start-up cost in source: the installed aiogram vs the binary's lean copies (issue 14).

A lean copy is the installed aiogram with build/aiogram_lean.py's replacements written, put
first on sys.path, as the binary has it: "lean-methods" with the lazy aiogram.methods and
bot.py importing methods where used (aiogram.types stock), "lean-types" with aiogram.types lazy
as well (no rebuild loop; each type class created when first needed) and Update's, Message's
and Chat's unread fields typed Any (build/aiogram_trim.py; "lean-untrimmed" without that).
Three stages, each in fresh interpreters: the shim's import; what the Telegram channel does
before its first getUpdates (gantry.channel.telegram, Bot, Dispatcher, a getMe response
validated, the getUpdates request dumped); and then the first getUpdates response (an Update
with a Message) validated and a SendMessage dumped. Figures: median of N runs (wall time in the
child, RssAnon at its end) and the aiogram type classes created by then; never pass/fail.
Usage: python bench/aiogram_import.py [N]
"""

from __future__ import annotations

import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "build"))

import aiogram_lean  # noqa: E402

IMPORT = """
import time
t0 = time.perf_counter()
import gantry.channel.telegram.lazy_aiogram
"""
BEFORE_GET_UPDATES = IMPORT + """
import gantry.channel.telegram.channel
from aiogram import Bot, Dispatcher
from aiogram.methods import GetMe, GetUpdates
from aiogram.methods.base import Response
bot = Bot("123456789:AAE_fake-token-for-bench-only_xyz")
dp = Dispatcher()
me = Response[GetMe.__returning__].model_validate_json(
    '{"ok": true, "result": {"id": 1, "is_bot": true, "first_name": "b", "username": "b"}}')
GetUpdates(offset=1, timeout=25, allowed_updates=["message"]).model_dump(
    mode="json", exclude_none=True)
"""
FIRST_UPDATE = BEFORE_GET_UPDATES + """
from aiogram.methods import SendMessage
message = {"message_id": 7, "date": 1_700_000_000, "text": "héllo *world*",
           "chat": {"id": 4242, "type": "private", "first_name": "Ann"},
           "from": {"id": 4242, "is_bot": False, "first_name": "Ann", "language_code": "en"},
           "entities": [{"type": "bold", "offset": 6, "length": 7}]}
updates = Response[GetUpdates.__returning__].model_validate_json(
    json.dumps({"ok": True, "result": [{"update_id": 10, "message": message}]}))
update = updates.result[0]
send = SendMessage.model_validate({"chat_id": 4242, "text": update.message.text,
                                   "entities": message["entities"]})
send.model_dump(mode="json", exclude_defaults=True)
"""
REPORT = """
import json, sys
seconds = time.perf_counter() - t0
anon = next(int(line.split()[1]) for line in open("/proc/self/status")
            if line.startswith("RssAnon:"))
from aiogram.types.base import TelegramObject
seen, stack = set(), [TelegramObject]
while stack:
    for sub in stack.pop().__subclasses__():
        if sub not in seen and sub.__module__.startswith("aiogram.types."):
            seen.add(sub)
            stack.append(sub)
lazy_state = gantry.channel.telegram.lazy_aiogram.state
print(json.dumps({"s": seconds, "anon_kib": anon, "state": lazy_state,
                  "types": len(seen)}))
"""


def run(code: str, pythonpath: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    r = subprocess.run([sys.executable, "-c", "import json\n" + code + REPORT], env=env,
                       cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    out: dict[str, float] = json.loads(r.stdout.splitlines()[-1])
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory() as d:
        paths = {"installed": str(ROOT)}
        for flavour, types, trim in (("lean-methods", False, False),
                                     ("lean-untrimmed", True, False),
                                     ("lean-types", True, True)):
            lean = aiogram_lean.write_lean_copy(Path(d) / flavour, types=types, trim=trim)
            compileall.compile_dir(str(lean), quiet=1)  # as site-packages has its .pyc files
            paths[flavour] = f"{lean}{os.pathsep}{ROOT}"
        print(f"median of {n} fresh interpreters; {sys.executable}")
        print(f"{'stage':<34} {'aiogram':<13} {'seconds':>8} {'RssAnon MiB':>12} "
              f"{'type classes':>13} shim")
        for label, code in (("import gantry.channel.telegram.lazy_aiogram", IMPORT),
                            ("ready for the first getUpdates", BEFORE_GET_UPDATES),
                            ("+ first Update, SendMessage", FIRST_UPDATE)):
            for flavour, path in paths.items():
                run(code, path)  # warm the page cache
                runs = [run(code, path) for _ in range(n)]
                seconds = statistics.median(r["s"] for r in runs)
                anon = statistics.median(r["anon_kib"] for r in runs) / 1024
                classes = {r["types"] for r in runs}
                states = {r["state"] for r in runs}
                print(f"{label:<34} {flavour:<13} {seconds:>8.3f} {anon:>12.1f} "
                      f"{'/'.join(map(str, sorted(classes))):>13} {','.join(sorted(states))}")


if __name__ == "__main__":
    main()
