"""aiogram start-up cost in source: the installed aiogram vs the binary's lean copy (issue 14).

The lean copy is the installed aiogram with build/aiogram_lean.py's two replacements (lazy
aiogram.methods, client/bot.py importing methods where used), put first on sys.path, as the
binary has it. Each figure is the median of N fresh interpreters (wall time in the child,
RssAnon at its end); prints figures, never pass/fail. Usage: python bench/aiogram_import.py [N]
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
import gantry.channel.aiogram_lazy
"""
# Then what the Telegram channel does before its first getUpdates, without the network: a Bot
# and a Dispatcher, one realistic Update validated, one SendMessage validated and dumped.
FIRST_USE = IMPORT + """
from aiogram import Bot, Dispatcher
from aiogram.methods import SendMessage
from aiogram.types import Update
bot = Bot("123456789:AAE_fake-token-for-bench-only_xyz")
dp = Dispatcher()
message = {"message_id": 7, "date": 1_700_000_000, "text": "héllo *world*",
           "chat": {"id": 4242, "type": "private", "first_name": "Ann"},
           "from": {"id": 4242, "is_bot": False, "first_name": "Ann", "language_code": "en"},
           "entities": [{"type": "bold", "offset": 6, "length": 7}]}
update = Update.model_validate({"update_id": 10, "message": message})
send = SendMessage.model_validate({"chat_id": 4242, "text": update.message.text,
                                   "entities": message["entities"]})
send.model_dump(mode="json", exclude_defaults=True)
"""
REPORT = """
import json, sys
seconds = time.perf_counter() - t0
anon = next(int(line.split()[1]) for line in open("/proc/self/status")
            if line.startswith("RssAnon:"))
print(json.dumps({"s": seconds, "anon_kib": anon, "state": gantry.channel.aiogram_lazy.state,
                  "methods": sum(m.startswith("aiogram.methods.") for m in sys.modules)}))
"""


def run(code: str, pythonpath: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    r = subprocess.run([sys.executable, "-c", code + REPORT], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=300, check=True)
    out: dict[str, float] = json.loads(r.stdout.splitlines()[-1])
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory() as d:
        lean = aiogram_lean.write_lean_copy(Path(d))
        compileall.compile_dir(str(lean), quiet=1)  # as site-packages has its .pyc files
        paths = {"stock": str(ROOT), "lean": f"{lean}{os.pathsep}{ROOT}"}
        print(f"median of {n} fresh interpreters; {sys.executable}")
        print(f"{'case':<48} {'seconds':>8} {'RssAnon MiB':>12} {'method modules':>15} shim")
        for label, code in (("import gantry.channel.aiogram_lazy", IMPORT),
                            ("+ Bot, Dispatcher, Update, SendMessage", FIRST_USE)):
            for flavour, path in paths.items():
                run(code, path)  # warm the page cache
                runs = [run(code, path) for _ in range(n)]
                seconds = statistics.median(r["s"] for r in runs)
                anon = statistics.median(r["anon_kib"] for r in runs) / 1024
                methods = {r["methods"] for r in runs}
                states = {r["state"] for r in runs}
                print(f"{label + ' [' + flavour + ']':<48} {seconds:>8.3f} {anon:>12.1f} "
                      f"{'/'.join(map(str, sorted(methods))):>15} {','.join(sorted(states))}")


if __name__ == "__main__":
    main()
