"""The records' Lua scripts as shipped: every file under ``mailer/records/*/lua/`` opens with a
header that names each key and argument its code reads."""

from __future__ import annotations

import re
from importlib import resources

import pytest

#: The record kinds that ship scripts (the suppression list needs none: one command a method).
KINDS = ("ledger", "schedule", "holds", "reputation")

SCRIPTS = sorted(
    (kind, entry.name)
    for kind in KINDS
    for entry in resources.files(f"mailer.records.{kind}").joinpath("lua").iterdir()
    if entry.name.endswith(".lua")
)


def test_every_kind_ships_scripts() -> None:
    """Each kind with a Redis script has its ``lua/`` files (package data)."""
    assert {kind for kind, _ in SCRIPTS} == set(KINDS)


@pytest.mark.parametrize(("kind", "name"), SCRIPTS)
def test_each_script_header_documents_its_keys_and_arguments(kind: str, name: str) -> None:
    """``--[[ mailguard <kind>, <name>: ...`` then every KEYS[i] / ARGV[i] (or plain ARGV, for
    a list of arguments) the code reads, each at the start of a header line."""
    text = resources.files(f"mailer.records.{kind}").joinpath(f"lua/{name}").read_text()
    assert text.startswith(f"--[[\nmailguard {kind}, {name.removesuffix('.lua')}: ")
    header, _, code = text.partition("]]")
    used = set(re.findall(r"(?:KEYS|ARGV)\[\d+\]", code))
    if re.search(r"\bARGV\b(?!\[)", code):
        used.add("ARGV")
    assert used, "the code reads its keys and arguments"
    for name_used in sorted(used):
        pattern = rf"^{re.escape(name_used)}\s"
        assert re.search(pattern, header, re.MULTILINE), f"{name_used} is undocumented"
