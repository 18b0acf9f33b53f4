"""Warm-up plans: a day-by-day allowance of mails for a sender (an address or a sending domain),
the built-in ones from the published ramps and the custom tables of ``MAILGUARD_WARMUP``.

Built-in plans (each day's allowance, day 1 first; past the table's last day the sender is warm:
no allowance applies):

- ``sendgrid``: SendGrid's automated IP warm-up hourly send schedule (docs.sendgrid.com,
  "Warming Up an IP Address", the "Automated IP warmup hourly send schedule" table: 20 an hour
  on day 1, about x1.4 a day, 1000 an hour on day 13, 19 601 056 on day 42), each hour's limit
  times 24 as the day's allowance (mailguard counts days, not hours: pair it with a policy tier
  for the hour).
- ``sparkpost``: SparkPost's IP warm-up overview, week 1 per IP (200, 500, 1000, 2000, 5000,
  10 000, 20 000 a day); its later weeks are not a published table, so the plan ends with week
  1: write a custom table to go on.

Amazon SES warms dedicated IPs by itself over 45 days (no table published) and Mailgun
publishes no table either: no built-in plan for them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

#: SendGrid's automated warm-up, mails an hour on days 1-42 (the table's days 0-41).
_SENDGRID_HOURLY = (
    20, 28, 39, 55, 77, 108, 151, 211, 295, 413, 579, 810, 1_000, 1_587, 2_222, 3_111, 4_356,
    6_098, 8_583, 11_953, 16_734, 23_427, 32_798, 45_917, 64_284, 89_998, 125_997, 176_395,
    246_953, 345_735, 484_029, 677_640, 948_696, 1_328_175, 1_859_444, 2_603_222, 3_644_511,
    5_102_316, 7_143_242, 10_000_539, 14_000_754, 19_601_056,
)  # fmt: skip

#: SparkPost's week 1, mails a day per IP.
_SPARKPOST_DAILY = (200, 500, 1_000, 2_000, 5_000, 10_000, 20_000)

_NUMBER = re.compile(r"^\d{1,12}$")


@dataclass(frozen=True)
class Plan:
    """A named ramp: ``allowances[0]`` mails on day 1, ``allowances[1]`` on day 2, ...; past
    the last day, no allowance (the sender is warm)."""

    name: str
    allowances: tuple[int, ...]

    def allowance(self, day: int) -> int | None:
        """Mails allowed on ``day`` (1 is the first); None past the table (no limit)."""
        return self.allowances[day - 1] if 1 <= day <= len(self.allowances) else None

    def __str__(self) -> str:
        if self.name in BUILT_IN:
            return self.name
        return ", ".join(str(n) for n in self.allowances)


BUILT_IN: dict[str, tuple[int, ...]] = {
    "sendgrid": tuple(n * 24 for n in _SENDGRID_HOURLY),
    "sparkpost": _SPARKPOST_DAILY,
}


def parse_plan(text: str) -> Plan:
    """``sendgrid``, ``sparkpost`` or allowances ``50, 100, 200, 400`` (whole numbers >= 1);
    ``ValueError`` in one line for anything else."""
    word = text.strip().lower()
    if word in BUILT_IN:
        return Plan(word, BUILT_IN[word])
    parts = [part.strip().replace("_", "") for part in word.split(",")]
    if not parts or not all(_NUMBER.match(part) and int(part) >= 1 for part in parts):
        raise ValueError(
            f"{text.strip()[:40]!r} is not a plan: {' or '.join(BUILT_IN)}, or mails a day "
            "from day 1 (50, 100, 200, 400), each >= 1"
        )
    return Plan("custom", tuple(int(part) for part in parts))


def parse_plans(text: str) -> dict[str, Plan]:
    """``MAILGUARD_WARMUP``: entries ``<sender>: <plan>`` separated by ``;``, a sender being an
    address (``orders@example.org``) or a sending domain (``example.org``), lower case:
    ``"orders@example.org: sendgrid; example.org: 50, 100, 200"``. ``ValueError`` in one
    line."""
    plans: dict[str, Plan] = {}
    for entry in text.split(";"):
        if not entry.strip():
            continue
        sender, colon, plan = entry.partition(":")
        key = sender.strip().lower()
        if not colon or not key or " " in key or key.startswith("@") or key.endswith("@"):
            raise ValueError(
                f"{entry.strip()[:40]!r} is not '<address or domain>: <plan>' "
                "(orders@example.org: sendgrid)"
            )
        if key in plans:
            raise ValueError(f"{key[:40]!r} has two warm-up plans")
        plans[key] = parse_plan(plan)
    if not plans:
        raise ValueError("no '<address or domain>: <plan>' entry (orders@example.org: sendgrid)")
    return plans


def plan_for(plans: Mapping[str, Plan], address: str) -> tuple[str, Plan] | None:
    """The plan ``address`` (lower case) sends on, and the sender it is counted for: its own
    plan, else its domain's (``news@example.org`` on ``example.org``'s); None: no plan."""
    if address in plans:
        return address, plans[address]
    domain = address.rpartition("@")[2]
    if domain and domain in plans:
        return domain, plans[domain]
    return None
