"""A relay whose certificate the worker does not trust (a real Postfix with STARTTLS and SMTP
AUTH, the suite's self-signed certificate, no ``MAILGUARD_SMTP_CA_FILE``): the TLS verification
failure holds the transport, no mail fails, one ERROR line, ``mailguard health`` exits 1; the
worker restarted with ``MAILGUARD_SMTP_CA_FILE`` naming the certificate delivers each kept mail
once. On the way: ``MAILGUARD_SMTP_EHLO`` is the name Postfix records, and a ``.test`` recipient
domain is admitted by ``MAILGUARD_ALLOW_RESERVED_DOMAINS=test``."""

from __future__ import annotations

import pytest

from devservers.celery_worker import CeleryWorker
from devservers.postfix import PostfixRelay
from devservers.smtp_server import TestCertificate
from mailer.settings import Settings
from tests.relay.conftest import USERS
from tests.relay.stack import LOGIN, PASSWORD, message_ids, parsed, relay_stack
from tests.waiting import poll
from tests.workers.cli.test_cli import run
from workers import tasks

pytestmark = [pytest.mark.server, pytest.mark.slow]

MAILBOXES = ["ada", "bob"]
EHLO = "mail.example.test"


def test_an_untrusted_certificate_holds_and_the_ca_file_delivers_each_once(
    test_certificate: TestCertificate,
) -> None:
    """Two mails to ``example.test``: each deferred / held with hold transport, none failed,
    nothing delivered, one ``transport held`` ERROR line, ``mailguard health`` exits 1; the
    worker restarted with the CA file: each ``sent``, once in its Maildir, with Postfix's
    ``Received: from mail.example.test (...)`` header (the EHLO name it was given)."""
    with PostfixRelay(
        USERS, domain="example.test", cert=test_certificate, logins={LOGIN: PASSWORD}
    ) as relay:
        url = f"smtp://{LOGIN}:{PASSWORD}@127.0.0.1:{relay.port}?starttls=1&timeout=10"
        with relay_stack(
            relay,
            url,
            process_env={"SSL_CERT_FILE": "", "SSL_CERT_DIR": ""},
            MAILGUARD_SMTP_EHLO=EHLO,
            MAILGUARD_ALLOW_RESERVED_DOMAINS="test",
            MAILGUARD_THROTTLE_HOLD="1s",
            MAILGUARD_THROTTLE_HOLD_MAX="2s",
        ) as stack:
            # The client checks addresses at ``delay()`` with its own settings: the same env.
            previous = tasks.use_settings(Settings.from_env(stack.env))
            try:
                results = [stack.send(relay.address(user)) for user in MAILBOXES]
            finally:
                tasks.use_settings(previous)
            poll(lambda: all(r.state == "DEFERRED" for r in results), 30, "every mail held")
            infos = [dict(r.info) for r in results]
            assert {i["hold"] for i in infos} == {"transport"}, infos
            assert not any(r.state == "FAILURE" for r in results)
            health = run(["health"], stack.env)
            assert health.returncode == 1, health.stdout
            assert "transport is held" in health.stderr, health.stderr
            assert PASSWORD not in health.stderr
            stack.worker.stop()
            log = stack.worker.log()
            errors = [line for line in log.splitlines() if " ERROR" in line or "ERROR/" in line]
            assert len(errors) == 1 and "transport held" in errors[0], errors
            assert PASSWORD not in log
            assert not any(relay.maildir(user) for user in MAILBOXES)
            trusted = {**stack.env, "MAILGUARD_SMTP_CA_FILE": str(test_certificate.cert)}
            worker = CeleryWorker(trusted, name="trusted").start()
            try:
                outcomes = stack.settled(results, timeout=60)
            finally:
                worker.kill()
            assert [o["status"] for o in outcomes] == ["sent"] * len(MAILBOXES), outcomes
            for user, outcome in zip(MAILBOXES, outcomes, strict=True):
                poll(lambda u=user: relay.maildir(u), 15, f"{user}'s mail")  # type: ignore[misc]
                assert message_ids(relay, user) == [outcome["message_id"]]
            assert "transport hold lifted" in worker.log()
            # Postfix records the EHLO name in the Received header it adds: "from NAME (...)".
            for user in MAILBOXES:
                received = str(parsed(relay.maildir(user)[0])["Received"])
                assert received.startswith(f"from {EHLO} ("), received
