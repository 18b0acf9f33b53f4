"""What the ``mailguard`` command prints when stdout is not a terminal (a pipe, a CI log):
tables whole, and values as ``--json`` gives them (``<[recipient]>`` is not taken for markup).
A real worker, an aiosmtpd server that refuses the recipient with a long reply."""

from __future__ import annotations

import json

import pytest

from tests.workers.cli.test_cli import run
from tests.workers.conftest import StackFactory

#: The server's reply: the address in brackets (masked in the outcome), longer than 100 columns.
REPLY = "550 5.1.1 <ada@example.com> mailbox unknown here: " + "no such user " * 8 + "(end)"


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_refused_mails_outcome_table_is_whole_and_masked_as_its_json(
    stack: StackFactory,
) -> None:
    """The refused mail's ``smtp_reply`` in the outcome table is the one ``--json`` shows,
    ``<[recipient]>`` included, on one line however long; the address is not printed."""
    s = stack()
    s.smtp.fail_rcpt_for("ada@example.com", REPLY)
    sent = run(["send", "ada@example.com", "--subject", "s", "--body", "b", "--wait"], s.env)
    mail_id = sent.stdout.splitlines()[0]
    as_json = run(["outcome", mail_id, "--json"], s.env)
    assert as_json.returncode == 0, as_json.stderr
    reply = json.loads(as_json.stdout)["outcome"]["smtp_reply"]
    assert reply.startswith("5.1.1 <[recipient]> mailbox unknown") and reply.endswith("(end)")
    for shown in (sent.stdout, run(["outcome", mail_id], s.env).stdout):
        assert "ada@" not in shown
        row = next(line for line in shown.splitlines() if "smtp_reply" in line)
        assert row.split("smtp_reply", 1)[1].strip() == reply, shown
