"""Media in, inside the frozen binary (issue 28): a Telegram photo with its caption reaches the
model as the exact bytes, a PDF's text is extracted by pypdf (frozen in), a voice note is
transcribed through /audio/transcriptions, and the REPL's /attach reads a local file. The
fixtures are tests/binary/test_binary.py's."""

from __future__ import annotations

import base64
import os
import signal
from typing import Any

import pytest

from tests.binary.rootfs import NONROOT_UID, Sandbox
from tests.binary.test_binary import STOP_WAIT, WAIT, _run_env, binds, etc_gantry, start
from tests.fakes.media_samples import jpeg, ogg, pdf

pytestmark = [pytest.mark.binary, pytest.mark.slow]
__all__ = ["binds", "etc_gantry", "start"]  # fixtures used through pytest


def test_telegram_photo_pdf_and_voice_in_the_frozen_binary(
    sandbox: Sandbox, start: Any, fake_openai: Any
) -> None:
    from tests.fakes.telegram import FakeTelegram

    tg = FakeTelegram()
    tg_url = tg.start_in_thread()
    photo = jpeg(60_000)
    try:
        data = sandbox.new_data_dir("data-media")
        run = start(
            _run_env(fake_openai.base_url, CHANNEL="telegram", TELEGRAM_BOT_TOKEN="123456:media",
                     TELEGRAM_ALLOWED_USERS="7", TELEGRAM_API_URL=tg_url,
                     LLM_TRANSCRIBE_MODEL="whisper-1"),
            data=data,
        )
        run.wait_stderr('"receiving"')
        fake_openai.transcript = "call the plumber"
        tg.push_photo(7, photo, caption="what is this?")
        tg.push_document(7, pdf("Invoice 4711", "Total 99 EUR"), "invoice.pdf",
                         "application/pdf")
        tg.push_voice(7, ogg(5_000), duration=3)
        sent = tg.wait_sent_sync(chat_id=7, count=3, timeout=WAIT)
        assert sent[0].startswith("echo: [photo: 1280×960") and sent[0].endswith("what is this?")
        photo_request, pdf_request, voice_request = fake_openai.requests[-3:]
        assert photo_request.image_urls == [
            "data:image/jpeg;base64," + base64.b64encode(photo).decode()]
        assert "Invoice 4711\n\nTotal 99 EUR" in pdf_request.last_user_text
        assert voice_request.last_user_text == (
            "[voice message, 0:03, transcribed]\ncall the plumber")
        assert fake_openai.transcriptions[0].model == "whisper-1"
        assert run.stop(signal.SIGTERM) == 0, run.stderr[-3000:]
        assert "Traceback" not in run.stderr and "123456:media" not in run.stderr
    finally:
        tg.stop()


def test_attach_reads_a_pdf_in_the_frozen_binary(
    sandbox: Sandbox, start: Any, fake_openai: Any
) -> None:
    data = sandbox.new_data_dir("data-attach")
    inbox = data / "inbox"
    inbox.mkdir()
    (inbox / "lease.pdf").write_bytes(pdf("Lease ends 2027-03-31"))
    os.chown(inbox, NONROOT_UID, NONROOT_UID)
    os.chown(inbox / "lease.pdf", NONROOT_UID, NONROOT_UID)
    run = start(_run_env(fake_openai.base_url), data=data)
    run.send("/attach /data/inbox/lease.pdf when does it end?")
    run.expect("when does it end?\n")
    text = fake_openai.last_request.last_user_text
    assert text.startswith("[document: lease.pdf, PDF, 1 page]\n```\nLease ends 2027-03-31")
    run.close_stdin()
    assert run.wait(STOP_WAIT) == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
