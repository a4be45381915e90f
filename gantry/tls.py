"""The CA certificates every outbound TLS connection trusts: the model endpoint and Telegram.

The OpenSSL convention first — ``$SSL_CERT_FILE``, then ``$SSL_CERT_DIR`` (distroless sets the
former to the image's bundle) — else certifi's bundle, which the binary carries. One context,
built once at boot, for httpx and aiogram alike: left alone, aiogram always uses certifi and
httpx stops boot with a traceback when ``$SSL_CERT_FILE`` names a missing file.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping


class TLSConfigError(Exception):
    """``$SSL_CERT_FILE``/``$SSL_CERT_DIR`` is set but unusable; ``str()`` is for the operator."""


def ca_source(environ: Mapping[str, str]) -> tuple[str, str]:
    """(kind, location) of the CA certificates: ("file"|"dir", path) or ("certifi", path)."""
    cafile = environ.get("SSL_CERT_FILE", "").strip()
    if cafile:
        return "file", cafile
    capath = environ.get("SSL_CERT_DIR", "").strip()
    if capath:
        return "dir", capath
    import certifi

    return "certifi", certifi.where()


def ca_context(environ: Mapping[str, str] | None = None) -> ssl.SSLContext:
    """A verifying client context trusting exactly the CA certificates chosen by ca_source()."""
    kind, where = ca_source(os.environ if environ is None else environ)
    name = "SSL_CERT_DIR" if kind == "dir" else "SSL_CERT_FILE"
    if kind == "dir":
        if not os.path.isdir(where):
            raise TLSConfigError(
                f"{name}={where} is not a directory; point it at hashed CA certificates "
                "or unset it"
            )
        return ssl.create_default_context(capath=where)
    try:
        return ssl.create_default_context(cafile=where)
    except ssl.SSLError as exc:  # before OSError: SSLError is one
        raise TLSConfigError(
            f"{name}={where} holds no usable CA certificates ({exc.reason or exc}); point it "
            "at a PEM bundle or unset it"
        ) from None
    except OSError as exc:
        raise TLSConfigError(
            f"{name}={where} cannot be read ({exc.strerror or exc}); point it at a PEM "
            "bundle of CA certificates or unset it"
        ) from None


NOT_TLS_HINT = "the endpoint does not speak TLS: use http:// or check the port"
UNTRUSTED_HINT = ("the endpoint's certificate is not trusted: add its CA to the bundle "
                  "SSL_CERT_FILE names")
# OpenSSL's reasons for a peer that answered a ClientHello with something that is not TLS
# (a plain-HTTP port): 1.1/3.0 say WRONG_VERSION_NUMBER, 3.2+ RECORD_LAYER_FAILURE.
_NOT_TLS = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG",
            "UNKNOWN_PROTOCOL", "HTTP_REQUEST")


def handshake_hint(error_text: str) -> str:
    """What to do about a failed TLS handshake, read from the error's text ("" if the text
    is not one): the provider's errors and `gantry check`'s probes carry only the text."""
    reason = error_text.upper().replace(" ", "_")
    if any(marker in reason for marker in _NOT_TLS):
        return NOT_TLS_HINT
    if "CERTIFICATE_VERIFY_FAILED" in reason:
        return UNTRUSTED_HINT
    return ""
