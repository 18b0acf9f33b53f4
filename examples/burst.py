"""A burst of mails to one recipient through the limiter: what it sends, books and refuses.

Runs on embedded defaults (memory backend, a simulated clock): no Redis, no waiting.
``python -m examples.burst [--policy "1/60s, 5/1h, 10/24h"] [--mails 12] [--max-wait 86400]``
"""

from __future__ import annotations

import argparse
import datetime as dt

from mailer import REFERENCE_POLICY, Limiter, ManualClock, Policy


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default=REFERENCE_POLICY, help="tiers, e.g. '1/60s, 5/1h'")
    parser.add_argument("--mails", type=int, default=12, help="how many mails in the burst")
    parser.add_argument(
        "--max-wait", type=float, default=86_400.0, help="longest wait a mail accepts, seconds"
    )
    args = parser.parse_args(argv)
    try:
        policy = Policy.parse(args.policy, name="recipient")
    except ValueError as exc:
        parser.error(str(exc))
    clock = ManualClock(dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.timezone.utc).timestamp())
    limiter = Limiter.from_url("memory://", policy, clock=clock, secret="demo")  # noqa: S106 - demo
    print(
        f"policy {policy}; {args.mails} mails to one recipient on Mon 09:00, "
        f"max wait {args.max_wait:g} s"
    )
    print(
        f"{'mail':>4}  {'decision':8}  {'goes at':11}  {'wait':>9}  {'binding tier':12}  room left"
    )
    for i in range(args.mails):
        d = limiter.acquire("ada@example.com", mail_id=f"mail-{i}", max_wait=args.max_wait)
        verdict = "send" if d.allowed else "booked" if d.booked else "refused"
        at = dt.datetime.fromtimestamp(d.at, tz=dt.timezone.utc).strftime("%a %H:%M")
        shown_at = at if not d.refused else f"({at})"
        print(
            f"{i:>4}  {verdict:8}  {shown_at:11}  {d.wait:>8.0f}s  {d.tier or '-'!s:12}"
            f"  {d.remaining}"
        )


if __name__ == "__main__":
    main()
