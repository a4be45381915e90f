"""Which CA certificates outbound TLS trusts, and clear errors when the operator's are unusable."""

from __future__ import annotations

import ssl
from pathlib import Path

import certifi
import pytest
from aiogram.exceptions import TelegramNetworkError

from gantry import db
from gantry.channel.telegram import TelegramChannel
from gantry.model.client import Provider
from gantry.model.errors import ProviderError
from gantry.model.messages import UserMessage
from gantry.model.retry import RetryPolicy
from gantry.tls import (
    NOT_TLS_HINT,
    UNTRUSTED_HINT,
    TLSConfigError,
    ca_context,
    ca_source,
    handshake_hint,
)
from tests.fakes.openai import FakeOpenAI
from tests.fakes.pki import PKI
from tests.fakes.telegram import FakeTelegram

TOKEN = "123456789:AAE_fake-token-for-tests-only_xyz"


def _first_cert(path: str) -> str:
    text = Path(path).read_text()
    end = "-----END CERTIFICATE-----"
    return text[: text.index(end) + len(end)] + "\n"


def test_source_order_file_then_dir_then_certifi(tmp_path: Path) -> None:
    assert ca_source({"SSL_CERT_FILE": "/a.pem", "SSL_CERT_DIR": "/d"}) == ("file", "/a.pem")
    assert ca_source({"SSL_CERT_DIR": "/d"}) == ("dir", "/d")
    assert ca_source({"SSL_CERT_FILE": "  ", "SSL_CERT_DIR": ""}) == ("certifi", certifi.where())
    assert ca_source({}) == ("certifi", certifi.where())


def test_cert_file_is_trusted_alone(tmp_path: Path) -> None:
    one = tmp_path / "one.pem"
    one.write_text(_first_cert(certifi.where()))
    ctx = ca_context({"SSL_CERT_FILE": str(one)})
    assert len(ctx.get_ca_certs()) == 1  # exactly the operator's bundle, not certifi's too
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname


def test_default_is_certifi() -> None:
    ctx = ca_context({})
    assert len(ctx.get_ca_certs()) > 50
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname


def test_cert_dir_is_used(tmp_path: Path) -> None:
    ctx = ca_context({"SSL_CERT_DIR": str(tmp_path)})
    assert ctx.verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize(
    ("content", "needle"),
    [(None, "cannot be read"), ("not a certificate\n", "no usable CA certificates"),
     ("", "no usable CA certificates")],
)
def test_bad_cert_file_is_a_clear_error(tmp_path: Path, content: str | None, needle: str) -> None:
    path = tmp_path / "ca.pem"
    if content is not None:
        path.write_text(content)
    with pytest.raises(TLSConfigError) as exc:
        ca_context({"SSL_CERT_FILE": str(path)})
    assert f"SSL_CERT_FILE={path}" in str(exc.value) and needle in str(exc.value)
    assert exc.value.__cause__ is None and exc.value.__suppress_context__


def test_cert_dir_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(TLSConfigError, match=r"SSL_CERT_DIR=.* is not a directory"):
        ca_context({"SSL_CERT_DIR": str(tmp_path / "missing")})


@pytest.mark.anyio
async def test_telegram_trusts_the_chosen_ca_not_certifi(tmp_path: Path, pki: PKI) -> None:
    """aiogram alone always trusts certifi; gantry hands it the context from $SSL_CERT_FILE."""
    bundle = tmp_path / "bundle.pem"
    bundle.write_text(pki.ca_pem)
    async with FakeTelegram(token=TOKEN, ssl_context=pki.server_context()) as tg:
        assert tg.base_url.startswith("https://127.0.0.1:")
        trusting = TelegramChannel(TOKEN, (42,), db.connect(tmp_path / "a.db"),
                                   api_url=tg.base_url,
                                   ssl_context=ca_context({"SSL_CERT_FILE": str(bundle)}))
        stock = TelegramChannel(TOKEN, (42,), db.connect(tmp_path / "b.db"), api_url=tg.base_url)
        try:
            await trusting.push("42", "over tls")
            with pytest.raises(TelegramNetworkError, match="CERTIFICATE_VERIFY_FAILED"):
                await stock.push("42", "not trusted")
        finally:
            await trusting.bot.session.close()
            await stock.bot.session.close()
        assert tg.sent_texts(42) == ["over tls"]


@pytest.mark.anyio
async def test_model_calls_trust_the_chosen_ca(tmp_path: Path, pki: PKI) -> None:
    bundle = tmp_path / "bundle.pem"
    bundle.write_text(pki.ca_pem)
    async with FakeOpenAI(ssl_context=pki.server_context()) as fake:
        trusting = Provider(fake.base_url, "sk-x", "fake-model",
                            verify=ca_context({"SSL_CERT_FILE": str(bundle)}))
        untrusting = Provider(fake.base_url, "sk-x", "fake-model", verify=ca_context({}),
                              retry=RetryPolicy(max_attempts=1))
        async with trusting, untrusting:
            assert await trusting.complete([UserMessage("hi")])
            with pytest.raises(ProviderError, match="CERTIFICATE_VERIFY_FAILED") as caught:
                await untrusting.complete([UserMessage("hi")])
    assert caught.value.hint == UNTRUSTED_HINT and not caught.value.retryable


@pytest.mark.anyio
async def test_https_to_a_plain_http_port_says_so_and_is_not_retried() -> None:
    """The OpenSSL reason (WRONG_VERSION_NUMBER) alone left the operator guessing; a wrong
    scheme is configuration, so it is not retried either."""
    async with FakeOpenAI() as fake:
        url = fake.base_url.replace("http://", "https://", 1)
        async with Provider(url, "sk-x", "fake-model") as provider:
            with pytest.raises(ProviderError) as caught:
                await provider.complete([UserMessage("hi")])
    assert caught.value.hint == NOT_TLS_HINT and not caught.value.retryable
    assert str(caught.value).endswith(f"({NOT_TLS_HINT})")
    assert fake.requests == []


@pytest.mark.parametrize(("text", "hint"), [
    ("ConnectError: [SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)",
     NOT_TLS_HINT),
    ("ConnectError: [SSL] record layer failure (_ssl.c:1020)", NOT_TLS_HINT),
    ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate",
     UNTRUSTED_HINT),
    ("ConnectError: [Errno 111] Connection refused", ""),
    ("ReadTimeout: ", ""),
])
def test_handshake_hint_reads_openssl_reasons(text: str, hint: str) -> None:
    assert handshake_hint(text) == hint


def test_a_pinned_server_certificate_is_accepted(pki: PKI) -> None:
    """A bundle holding only a (non-CA) server certificate is a valid OpenSSL trust anchor."""
    ctx = ca_context({"SSL_CERT_FILE": str(pki.cert_file)})
    assert ctx.verify_mode == ssl.CERT_REQUIRED
