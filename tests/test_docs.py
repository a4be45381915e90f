"""docs/configuration.md lists exactly the Config fields, with their real defaults."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from gantry.config import REQUIRED, Config, defaults, env_name

DOC = Path(__file__).parent.parent / "docs" / "configuration.md"


def _rows() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\| `([A-Z][A-Z0-9_]*)` \| ([^|]+) \| ([^|]+) \|", line)
        if m:
            rows[m.group(1)] = (m.group(2).strip(), m.group(3).strip())
    return rows


def _doc_default(value: object) -> str:
    if value is None:  # an optional limit (BUDGET_*): no default, no limit
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`{value}`' if value else '`""`'
    return f"`{value}`"


def test_doc_lists_exactly_the_config_fields() -> None:
    fields = {env_name(f.name) for f in msgspec.structs.fields(Config)}
    assert set(_rows()) == fields


def test_doc_defaults_match() -> None:
    rows = _rows()
    for name, value in defaults().items():
        assert rows[env_name(name)][1] == _doc_default(value), name
    for name in REQUIRED:
        assert rows[env_name(name)] == ("yes", "—")


def test_readme_names_every_variable() -> None:
    readme = (DOC.parent.parent / "README.md").read_text()
    for f in msgspec.structs.fields(Config):
        assert env_name(f.name) in readme


def test_manifest_examples_in_the_docs_decode() -> None:
    """Every ```toml block in the docs is an MCP manifest the parser's schema accepts (the
    commands themselves need not exist on this machine)."""
    import tomllib

    from gantry.mcp.manifest import ServerSpec

    root = DOC.parent.parent
    blocks = [(path.name, block)
              for path in [root / "README.md", *sorted(DOC.parent.glob("*.md"))]
              for block in re.findall(r"```toml\n(.*?)```", path.read_text(), re.S)]
    assert blocks
    for name, block in blocks:
        doc = tomllib.loads(block)
        assert set(doc) <= {"server"}, (name, block)
        assert isinstance(doc.get("server"), list), (name, block)
        for raw in doc["server"]:
            msgspec.convert(raw, ServerSpec)
