"""A wrong password against a real Postfix (STARTTLS + SMTP AUTH, cyrus sasldb): Postfix's own
``535 5.7.8 Error: authentication failed`` holds the transport, no mail fails, the worker logs
one ERROR line; the password fixed in the environment and the worker restarted, every kept
mail arrives in its Maildir once."""

from __future__ import annotations

import pytest

from devservers.celery_worker import CeleryWorker
from devservers.postfix import PostfixRelay
from devservers.smtp_server import TestCertificate
from tests.relay.stack import LOGIN, PASSWORD, message_ids, relay_stack
from tests.waiting import poll

pytestmark = [pytest.mark.server, pytest.mark.slow]

USERS = ["dee", "u8", "u9"]


def _url(relay: PostfixRelay, password: str) -> str:
    return f"smtp://{LOGIN}:{password}@127.0.0.1:{relay.port}?starttls=1&timeout=10"


def test_a_wrong_password_keeps_every_mail_and_the_right_one_delivers_each_once(
    tls_relay: PostfixRelay, test_certificate: TestCertificate
) -> None:
    """Three mails with a wrong password: each deferred / held with hold transport and
    Postfix's 535, none failed, nothing in a Maildir, one ERROR line; the worker restarted with
    the right password: each mail ``sent`` and in its Maildir once, the hold lifted."""
    trust = {"SSL_CERT_FILE": str(test_certificate.cert)}
    with relay_stack(
        tls_relay,
        _url(tls_relay, "not-the-" + PASSWORD),
        process_env=trust,
        MAILGUARD_THROTTLE_HOLD="1s",
        MAILGUARD_THROTTLE_HOLD_MAX="2s",
    ) as stack:
        results = [stack.send(tls_relay.address(user)) for user in USERS]
        poll(lambda: all(r.state == "DEFERRED" for r in results), 30, "every mail held")
        infos = [dict(r.info) for r in results]
        assert {i["hold"] for i in infos} == {"transport"}, infos
        assert {i["smtp_code"] for i in infos} == {535}, infos
        assert all("5.7.8" in i["smtp_reply"] for i in infos), infos
        tls_relay.logged("authentication failed", 2)  # a probe after the first refusals
        stack.worker.stop()
        log = stack.worker.log()
        errors = [line for line in log.splitlines() if " ERROR" in line or "ERROR/" in line]
        assert len([e for e in errors if "transport held" in e]) == 1, errors
        assert PASSWORD not in log
        assert not any(tls_relay.maildir(user) for user in USERS)
        fixed = {**stack.env, "MAILGUARD_SMTP_URL": _url(tls_relay, PASSWORD), **trust}
        worker = CeleryWorker(fixed, name="fixed").start()
        try:
            outcomes = stack.settled(results, timeout=60)
        finally:
            worker.kill()
        assert [o["status"] for o in outcomes] == ["sent"] * len(USERS), outcomes
        for user, outcome in zip(USERS, outcomes, strict=True):
            poll(lambda u=user: tls_relay.maildir(u), 15, f"{user}'s mail")  # type: ignore[misc]
            assert message_ids(tls_relay, user) == [outcome["message_id"]]
        assert "transport hold lifted" in worker.log()
