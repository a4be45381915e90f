"""Fixtures for the frozen-binary smoke test: dist/gantry inside a distroless-like root.

Skipped with a reason when dist/gantry is missing or this host cannot build/enter the rootfs;
with GANTRY_REQUIRE_BINARY=1 (the `nox -s binary` session, CI) those become failures.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.binary.rootfs import RootfsUnavailable, Sandbox, ensure_base_rootfs

ROOT = Path(__file__).resolve().parents[2]
BINARY = ROOT / "dist" / "gantry"
BUILD_JSON = ROOT / "dist" / "gantry-build.json"


def _unavailable(reason: str) -> None:
    if os.environ.get("GANTRY_REQUIRE_BINARY") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def binary() -> Path:
    if not BINARY.exists():
        _unavailable(f"{BINARY} does not exist: build it with `nox -s build` "
                     "(python build/build.py)")
    return BINARY


@pytest.fixture(scope="session")
def build_record(binary: Path) -> dict[str, str]:
    if not BUILD_JSON.exists():
        _unavailable(f"{BUILD_JSON} missing: dist/ was not produced by build/build.py")
    record: dict[str, str] = json.loads(BUILD_JSON.read_text())
    return record


@pytest.fixture(scope="session")
def sandbox(binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    if os.geteuid() != 0:
        _unavailable("the distroless-like sandbox needs root (unshare -m, mount, chroot)")
    for tool in ("unshare", "mount", "apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            _unavailable(f"{tool} not found; the sandbox needs util-linux, mount, apt, dpkg")
    try:
        base = ensure_base_rootfs()
    except RootfsUnavailable as exc:
        _unavailable(f"cannot assemble the distroless-like rootfs: {exc}")
    sb = Sandbox.create(tmp_path_factory.mktemp("distroless"), binary, base)
    probe = subprocess.run(sb.command(["/usr/local/bin/gantry", "--help"]),
                           capture_output=True, text=True, timeout=120)
    if "mount:" in probe.stderr or "unshare:" in probe.stderr:
        _unavailable(f"this host does not allow the mount-namespace sandbox: {probe.stderr}")
    return sb


@dataclass(frozen=True)
class PKI:
    ca_pem: str
    cert_file: Path
    key_file: Path


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gantry smoke-test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, encipher_only=False,
                          decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    d = tmp_path_factory.mktemp("pki")
    cert_file, key_file = d / "server.pem", d / "server.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                          serialization.NoEncryption())
    )
    return PKI(ca.public_bytes(serialization.Encoding.PEM).decode(), cert_file, key_file)


@pytest.fixture(scope="session")
def persona_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("persona")
    (d / "PERSONA.md").write_text("You are the distroless smoke-test persona.\n")
    d.chmod(0o755)
    return d


@pytest.fixture
def fake_openai() -> Iterator[object]:
    from tests.fakes.openai import FakeOpenAI

    server = FakeOpenAI(api_key="sk-binary-smoke")
    server.start_in_thread()
    try:
        yield server
    finally:
        server.stop()
