"""The SMTP transport reads which recipients a real aiosmtpd server refused at RCPT while it
took the mail for the others: each one's address, code and reply (addresses masked) in the
receipt; the mail delivered once, to the others only, and the session kept for the next mail."""

from __future__ import annotations

from devservers.smtp_server import SmtpTestServer
from mailer.mail.envelope import envelope_of
from mailer.mail.message import Mail
from mailer.mail.transports import SmtpTransport
from mailer.mail.transports.base import RefusedRecipient

ADA, BOB, CY = "ada@example.com", "bob@example.com", "cy@example.com"
SENDER = "noreply@sender.example"


def test_refused_recipients_are_in_the_receipt(smtp_server: SmtpTestServer) -> None:
    """bob refused with 450, cy with 550: the receipt names both with their replies masked;
    ada alone got the mail, once; the next mail rides the same connection."""
    smtp_server.fail_rcpt_for(BOB, "450 4.2.0 <bob@example.com>: mailbox busy")
    smtp_server.fail_rcpt_for(CY, "550 5.1.1 <cy@example.com>: user unknown")
    transport = SmtpTransport("127.0.0.1", smtp_server.port, sleep=lambda _: None)
    mail = Mail(to=(ADA, BOB), cc=(CY,), subject="s", body="b\n", mail_id="m1", sender=SENDER)
    receipt = transport.send(envelope_of(mail))
    assert receipt.code == 250 and receipt.attempts == 1
    assert receipt.refused == (
        RefusedRecipient(BOB, 450, "4.2.0 <[recipient]>: mailbox busy"),
        RefusedRecipient(CY, 550, "5.1.1 <[recipient]>: user unknown"),
    )
    assert [d.rcpt_tos for d in smtp_server.delivered] == [(ADA,)]
    again = transport.send(
        envelope_of(Mail(to=BOB, subject="t", body="b\n", mail_id="m2", sender=SENDER))
    )
    assert again.refused == ()
    assert [d.rcpt_tos for d in smtp_server.delivered] == [(ADA,), (BOB,)]
    assert smtp_server.connections == 1
    transport.close()
