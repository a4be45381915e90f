"""Shared fixtures: anyio backend, and a throwaway PKI for TLS fakes."""

from __future__ import annotations

import pytest

from tests.fakes.pki import PKI, make_pki


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    """A CA (PEM text only) and a 127.0.0.1 server certificate signed by it."""
    return make_pki(tmp_path_factory.mktemp("pki"))
