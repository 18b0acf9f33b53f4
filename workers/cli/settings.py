"""``mailguard settings``: every ``MAILGUARD_*`` variable, its value in this environment and its
default, secrets masked; then whether the settings read as a worker reads them.

The variables are those :data:`mailer.settings_env.READERS` reads, in its order, then the
``MAILGUARD_KIND_*`` variables the environment sets. The defaults are the ``default`` column
of the one settings table (``mailer/settings.py``'s docstring, also the manual's reference).
Masked: ``MAILGUARD_SECRET`` and any variable named for a secret, password or token (``***``
when set), and the password of a URL (``redis://:***@host``, ``?password=***``).
"""

from __future__ import annotations

import json
import os
import re

import click
from rich import box
from rich.table import Table

from mailer import settings as settings_module
from mailer.errors import mask_url
from mailer.settings import Settings
from mailer.settings_env import PREFIX, READERS
from workers.cli import views
from workers.cli.errors import USAGE, fail

#: What a masked value is shown as.
MASK = "***"
_SECRET_NAME = re.compile(r"SECRET|PASSWORD|TOKEN|KEY", re.IGNORECASE)
_QUERY_PASSWORD = re.compile(r"((?:^|[?&;])password=)[^&;]*", re.IGNORECASE)


def masked(name: str, value: str) -> str:
    """``value`` of variable ``name`` as it may be shown: a secret's as :data:`MASK`, a URL's
    password replaced (in its user part and in a ``password=`` query parameter)."""
    if _SECRET_NAME.search(name[len(PREFIX) :]):
        return MASK
    if "://" in value:
        return _QUERY_PASSWORD.sub(rf"\g<1>{MASK}", mask_url(value))
    return value


def documented_defaults() -> dict[str, str]:
    """Each variable's default as the settings table writes it (``memory://``, ``the limiter
    URL``), by name; empty when the docstrings are stripped (``python -OO``)."""
    defaults: dict[str, str] = {}
    for line in (settings_module.__doc__ or "").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if not line.startswith("| ``MAILGUARD_") or len(cells) != 5:
            continue
        defaults[cells[0].strip("`")] = cells[2].replace("``", "")
    return defaults


def rows(env: dict[str, str]) -> list[dict[str, object]]:
    """One row a variable: its name, whether it is set, its value (masked) and its default."""
    defaults = documented_defaults()
    names = [PREFIX + name for name, _, _ in READERS]
    names += sorted(n for n in env if n.startswith(PREFIX + "KIND_"))
    kinds = defaults.get(next((d for d in defaults if d.startswith(PREFIX + "KIND_")), ""), "")
    out: list[dict[str, object]] = []
    for name in dict.fromkeys(names):
        value = env.get(name)
        default = defaults.get(name, kinds if name.startswith(PREFIX + "KIND_") else "")
        shown = None if value is None else masked(name, value)
        out.append({"variable": name, "set": value is not None, "value": shown, "default": default})
    return out


@click.command(short_help="List every MAILGUARD_* variable: value, default (secrets masked).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def settings(as_json: bool) -> None:
    """Every MAILGUARD_* variable with its value here (secrets and URL passwords masked) and
    its default; then the settings are read as a worker reads them (exit 2: one is refused,
    named on stderr)."""
    env = {k: v for k, v in os.environ.items() if k.startswith(PREFIX)}
    listed = rows(env)
    if as_json:
        click.echo(json.dumps(listed, indent=2))
    else:
        table = Table("variable", "value", "default", box=box.SIMPLE)
        for row in listed:
            table.add_row(
                str(row["variable"]),
                "(not set)" if not row["set"] else str(row["value"]),
                str(row["default"]),
            )
        views.print_whole(table)
    try:
        Settings.from_env(env)
    except ValueError as exc:
        fail(str(exc), USAGE)
