"""Proxy variables: gantry's boot verdict is httpx's own, and never shows a proxy login.

The oracle is the model client itself: httpx.AsyncClient(trust_env=True) made with
os.environ patched to the case. Only loopback and reserved (.invalid) hosts; nothing is sent.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.util import find_spec

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gantry import proxyenv

SECRET = "Zq9"  # every generated password starts with it; nothing else contains it
SOCKS = find_spec("socksio") is not None
_CTX = ssl.create_default_context()  # made once: the client's own would load certifi each time


@contextmanager
def patched(env: Mapping[str, str]) -> Iterator[None]:
    """os.environ with every proxy variable (and CGI's REQUEST_METHOD) replaced by `env`."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.lower().endswith("_proxy") or name == "REQUEST_METHOD":
                mp.delenv(name)
        for name, value in env.items():
            mp.setenv(name, value)
        yield


def httpx_accepts(env: Mapping[str, str]) -> bool:
    """Whether the model client can be made under `env` (as gantry's Provider makes it:
    trust_env on, an SSL context of gantry's own)."""
    with patched(env):
        try:
            httpx.AsyncClient(trust_env=True, verify=_CTX)
        except Exception:
            return False
    return True


def assert_agrees(env: Mapping[str, str]) -> list[str]:
    found = proxyenv.problems(env)
    assert (found == []) == httpx_accepts(env), (env, found)
    text = "\n".join(found)
    assert SECRET not in text and "secret" not in text, found
    for line in found:  # one line per variable, naming it as it was spelt, saying what to do
        assert line.split("=")[0].split(" ")[0] in env, line
        assert line.endswith("or unset it") and "\n" not in line, line
    assert len({line.split("=")[0].split(" ")[0] for line in found}) == len(found)
    return found


ACCEPTED = [
    {"HTTPS_PROXY": "http://127.0.0.1:3128"},
    {"https_proxy": "127.0.0.1:3128"},  # no scheme: httpx prefixes http://
    {"HTTP_PROXY": "http://user:pa%2Fsecret@127.0.0.1:3128"},
    {"HTTP_PROXY": "http://user:p@ss secret@127.0.0.1:3128"},  # httpx takes the last @
    {"ALL_PROXY": "https://[::1]:3128"},
    {"HTTPS_PROXY": "HTTP://127.0.0.1:3128"},
    {"NO_PROXY": "localhost,127.0.0.1,::1,.internal,10.0.0.0/8, proxy.invalid ,"},
    {"HTTPS_PROXY": "proxy:3128:bad", "NO_PROXY": "*"},  # `*` bypasses every proxy
    {"HTTPS_PROXY": "proxy:3128:bad", "NO_PROXY": "localhost, *"},
    {"HTTPS_PROXY": "proxy:3128:bad", "https_proxy": ""},  # lower case wins, empty unsets
    {"HTTPS_PROXY": "proxy:3128:bad", "https_proxy": "http://127.0.0.1:3128"},
    {"HTTP_PROXY": "proxy:3128:bad", "REQUEST_METHOD": "GET"},  # CGI: HTTP_PROXY ignored
    {"HTTPS_PROXY": "http://127.0.0.1:3128:bad", "NO_PROXY": "https://"},  # replaced by a bypass
    {"FTP_PROXY": "proxy:3128:bad", "MY_PROXY_URL": "::::"},  # not variables httpx reads
    {"HTTPS_PROXY": "", "ALL_PROXY": ""},
]
REJECTED = [
    {"HTTPS_PROXY": "proxy:3128:bad"},
    {"HTTP_PROXY": "ftp://127.0.0.1:21"},
    {"Https_Proxy": "://127.0.0.1:3128"},
    {"https_proxy": "http://user:se/cret@127.0.0.1:3128"},  # unencoded / ? # in a password
    {"HTTPS_PROXY": "http://user:se#cret@127.0.0.1:3128"},
    {"HTTPS_PROXY": "http://user:se?cret@127.0.0.1:3128"},
    {"HTTPS_PROXY": "http://user:Zq9\udcff@127.0.0.1:3128"},  # a byte that is not UTF-8
    {"HTTPS_PROXY": "http://user:secret@127.0.0.1:3128:bad"},
    {"HTTPS_PROXY": "http://[::1:3128"},
    {"NO_PROXY": "localhost,[::1"},
    {"no_proxy": "bad\x01host"},
    {"HTTPS_PROXY": "http://127.0.0.1:3128", "NO_PROXY": "http://[bad, ok.invalid, x\x7fy"},
    {"HTTP_PROXY": "proxy:1:2", "HTTPS_PROXY": "ftp://127.0.0.1", "ALL_PROXY": "http://[::1"},
    {"https_proxy": "http://user:se/cret@127.0.0.1:3128", "HTTPS_PROXY": "http://127.0.0.1:1"},
]
SOCKS_CASES = [
    {"ALL_PROXY": "socks5://127.0.0.1:1080"},
    {"all_proxy": "socks5h://user:secret@127.0.0.1:1080"},
]


@pytest.mark.parametrize("env", ACCEPTED, ids=repr)
def test_accepted_values_boot(env: dict[str, str]) -> None:
    assert httpx_accepts(env)
    assert assert_agrees(env) == []


@pytest.mark.parametrize("env", REJECTED, ids=repr)
def test_rejected_values_fail_boot_naming_each_variable(env: dict[str, str]) -> None:
    assert not httpx_accepts(env)
    found = assert_agrees(env)
    assert found


@pytest.mark.parametrize("env", SOCKS_CASES, ids=repr)
def test_socks_needs_socksio(env: dict[str, str]) -> None:
    found = assert_agrees(env)
    assert bool(found) is not SOCKS
    if found:
        assert "socksio" in found[0]


def test_messages() -> None:
    (line,) = proxyenv.problems({"HTTPS_PROXY": "proxy:3128:bad"})
    assert line == ("HTTPS_PROXY='proxy:3128:bad' is not a proxy URL the model client can use "
                    "(Invalid port: '3128:bad'); set it to http://host:port "
                    "(a proxy login goes before the host, as user:password@), or unset it")
    # a fault outside the login is named; one inside it is not quoted
    (line,) = proxyenv.problems({"HTTPS_PROXY": "http://u:secret@127.0.0.1:3128:bad"})
    assert "'http://[REDACTED]@127.0.0.1:3128:bad'" in line and "Invalid port" in line
    (line,) = proxyenv.problems({"https_proxy": "u:se/cret@127.0.0.1:3128"})
    assert line.startswith("https_proxy='[REDACTED]@127.0.0.1:3128' is not")
    assert "the part before @, not shown, cannot be parsed" in line
    (line,) = proxyenv.problems({"http_proxy": "ftp://127.0.0.1:21"})
    assert "scheme 'ftp'; a proxy must be http, https, socks5 or socks5h" in line
    (line,) = proxyenv.problems({"NO_PROXY": "[::1, ok, a b\x01, localhost"})
    assert line.startswith("NO_PROXY has entries the model client cannot read: '[::1' (")
    assert "'a b\\x01' (" in line and "'ok'" not in line


def test_provider_client_agrees() -> None:
    """The Provider's own client, made as at the first model call, fails exactly when
    problems() says it will."""
    from gantry.model.client import Provider

    for env in [*ACCEPTED, *REJECTED]:
        provider = Provider("http://127.0.0.1:9/v1", "k", "m", verify=_CTX)
        with patched(env):
            try:
                assert provider._client is not None
                made = True
            except Exception:
                made = False
        assert made == (proxyenv.problems(env) == []), env


def test_no_proxy_variable_no_httpx() -> None:
    """Commands that check no proxies, or run where none is set, never import httpx here."""
    code = ("import sys; from gantry import proxyenv; "
            "print(proxyenv.problems({'PATH': '/bin', 'FTP_PROXY': 'x:1:2', 'HTTPS_PROXY': ''}),"
            " 'httpx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out == ["[]", "False"]


# ----------------------------------------------------------------------------- properties

SCHEMES = st.sampled_from(["http://", "https://", "HTTP://", "socks5://", "socks5h://",
                           "ftp://", "", "://", "http:/", "htt p://"])
PASSWORD = st.lists(st.sampled_from([*"ab09%/?#@:[] .-_~é", "://", "%zz", "\udcff"]),
                    max_size=5).map(lambda s: SECRET + "".join(s))
LOGINS = st.one_of(st.just(""), st.just("user@"),
                   st.builds(lambda u, p: f"{u}:{p}@",
                             st.sampled_from(["user", "", "u s", "us://er", "u@"]), PASSWORD))
HOSTS = st.sampled_from(["127.0.0.1", "localhost", "[::1]", "::1", "[::1", "10.255.255.1",
                         "proxy.invalid", "", "bad host", "ex\x01", "xn--", "ü.invalid",
                         "[fe80::1%eth0]", "256.1.1.1", "a..b"])
PORTS = st.sampled_from(["", ":3128", ":0", ":bad", ":3128:bad", ":99999", ":", ":-1"])
PATHS = st.sampled_from(["", "/", "/x?y#z", "/@x"])
TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)
PROXYISH = st.one_of(st.builds(lambda *p: "".join(p), SCHEMES, LOGINS, HOSTS, PORTS, PATHS),
                     TEXT.filter(lambda s: SECRET not in s))
NO_ENTRIES = st.one_of(HOSTS, st.builds(lambda *p: "".join(p), SCHEMES, LOGINS, HOSTS, PORTS),
                       st.just("*"), st.just(" .internal "), st.just(""),
                       TEXT.filter(lambda s: SECRET not in s))
NO_PROXY = st.lists(NO_ENTRIES, max_size=4).map(",".join)


def _spellings(base: str) -> st.SearchStrategy[str]:
    return st.sampled_from([base.lower(), base.upper(), base.title(), base.upper().title()])


VARIABLE = st.one_of(
    st.tuples(st.sampled_from(["http_proxy", "https_proxy", "all_proxy", "ftp_proxy"])
              .flatmap(_spellings), st.one_of(st.just(""), PROXYISH)),
    st.tuples(_spellings("no_proxy"), NO_PROXY),
    st.tuples(st.just("REQUEST_METHOD"), st.just("GET")),
)
ENVS = st.lists(VARIABLE, max_size=5).map(dict)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ENVS)
def test_verdict_is_httpx_own(env: dict[str, str]) -> None:
    with patched(env):  # the reading mirrors urllib's and httpx's exactly
        proxies = urllib.request.getproxies_environment()
        mounts = httpx._utils.get_environment_proxies()
    assert {k: v for k, (_name, v) in proxyenv.read(env).items()} == proxies
    assert {k: u for k, (_n, _e, u) in proxyenv.mounts(env).items()} == mounts
    assert list(proxyenv.mounts(env)) == list(mounts)
    assert_agrees(env)


@settings(max_examples=200, deadline=None)
@given(SCHEMES, LOGINS, HOSTS, PORTS, PATHS, st.sampled_from(["HTTPS_PROXY", "all_proxy"]))
def test_logins_never_shown(scheme: str, login: str, host: str, port: str, path: str,
                            name: str) -> None:
    env = {name: f"{scheme}{login}{host}{port}{path}"}
    assert SECRET not in "\n".join(assert_agrees(env))
