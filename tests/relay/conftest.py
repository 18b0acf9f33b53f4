"""Real relays for the tests: Postfix 3.7 and postgrey from Debian's packages, each an instance
of its own on loopback ports (:mod:`devservers.postfix`), started once per module.

- ``tls_relay``: STARTTLS with the suite's throwaway certificate and SMTP AUTH (cyrus sasldb,
  ``LOGIN`` / ``PASSWORD`` of :mod:`tests.relay.stack`): mail only from a logged-in client;
- ``greylisting_relay``: plain SMTP, every new triplet greylisted by postgrey for
  ``GREYLIST_SECONDS``;
- ``anvil_relay``: plain SMTP, at most ``ANVIL_MESSAGES`` mails per client per
  ``ANVIL_UNIT`` (anvil's ``smtpd_client_message_rate_limit``, loopback not exempt);
- ``make_relay``: a relay of the test's own (stopped, restarted), removed after the test.

Each has mailboxes for ``USERS`` at ``example.com``; any other address there is refused at RCPT
with ``550 5.1.1``. If Postfix is not installed the fixtures fail the test; they never skip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from devservers.postfix import PostfixRelay
from devservers.smtp_server import TestCertificate
from tests.relay.stack import LOGIN, PASSWORD

#: The relays' mailbox users (local parts at ``example.com``).
USERS = ("ada", "bob", "cy", "dee", *(f"u{n}" for n in range(10)))
#: postgrey's ``--delay`` for ``greylisting_relay``, in seconds.
GREYLIST_SECONDS = 2
#: anvil's limit for ``anvil_relay``: this many mails per client per ``ANVIL_UNIT``.
ANVIL_MESSAGES = 3
ANVIL_UNIT = "5s"

RelayFactory = Callable[..., PostfixRelay]


@pytest.fixture(scope="module")
def tls_relay(test_certificate: TestCertificate) -> Iterator[PostfixRelay]:
    """Postfix with STARTTLS (the suite's certificate for 127.0.0.1) and SMTP AUTH."""
    with PostfixRelay(USERS, cert=test_certificate, logins={LOGIN: PASSWORD}) as relay:
        yield relay


@pytest.fixture(scope="module")
def greylisting_relay() -> Iterator[PostfixRelay]:
    """Postfix asking postgrey (``--delay=GREYLIST_SECONDS``) about each recipient."""
    with PostfixRelay(USERS, greylist_delay=GREYLIST_SECONDS) as relay:
        yield relay


@pytest.fixture(scope="module")
def anvil_relay() -> Iterator[PostfixRelay]:
    """Postfix accepting at most ``ANVIL_MESSAGES`` mails from 127.0.0.1 per ``ANVIL_UNIT``."""
    with PostfixRelay(USERS, message_rate_limit=ANVIL_MESSAGES, rate_time_unit=ANVIL_UNIT) as relay:
        yield relay


@pytest.fixture
def make_relay() -> Iterator[RelayFactory]:
    """``make_relay(**options)``: a started :class:`PostfixRelay` (mailboxes for ``USERS``),
    removed after the test whatever state it was left in."""
    made: list[PostfixRelay] = []

    def make(**options: object) -> PostfixRelay:
        relay = PostfixRelay(USERS, **options)  # type: ignore[arg-type]
        made.append(relay)
        return relay.start()

    yield make
    for relay in made:
        relay.cleanup()
