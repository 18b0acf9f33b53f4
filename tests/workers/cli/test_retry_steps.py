""":mod:`workers.waiting.failed` on memory stores: the new mail id, a payload given back when the
enqueue fails, nothing kept with the retention ``off``, a dropped mail refused."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest

from mailer.outcomes import Outcome
from mailer.records.ledger import ledger_from_url
from mailer.settings import Settings
from workers.waiting import failed

SETTINGS = Settings.from_env({"MAILGUARD_SECRET": "s"})


def _request(mail_id: str) -> Any:
    kwargs = {"subject": "s", "body": "b", "mail_id": mail_id, "_progress": "sealed"}
    return SimpleNamespace(id=mail_id, args=["ada@example.com"], kwargs=kwargs)


def test_new_ids_link_to_the_old_one() -> None:
    assert failed.retry_id("order-1") == "order-1.retry1"
    assert failed.retry_id("order-1.retry1") == "order-1.retry2"
    assert failed.retry_id("a.retry9") == "a.retry10"
    long = failed.retry_id("x" * 128)
    assert long.endswith(".retry1") and len(long) <= 128 and long == failed.retry_id("x" * 128)


def test_a_failed_enqueue_gives_the_payload_back() -> None:
    """The publish raises: one line saying the mail is still kept; the next retry enqueues
    it, with the call as it was made and the new id, without the run's progress."""
    ledger = ledger_from_url("memory://")
    assert failed.keep(SETTINGS, _request("steps-1"), "steps-1")
    assert not failed.keep(SETTINGS, _request("steps-1"), "steps-1")  # a copy's failed end

    def broker_down(args: list[Any], kwargs: dict[str, Any], task_id: str) -> object:
        raise ConnectionError("broker down")

    with pytest.raises(failed.NotRetried, match="not retried, still kept: broker down"):
        failed.retry(SETTINGS, "steps-1", ledger, broker_down)
    published: list[tuple[list[Any], dict[str, Any], str]] = []
    new_id = failed.retry(SETTINGS, "steps-1", ledger, lambda *call: published.append(call))
    assert new_id == "steps-1.retry1"
    assert published == [
        (["ada@example.com"], {"subject": "s", "body": "b", "mail_id": new_id}, new_id)
    ]
    with pytest.raises(failed.NotRetried, match=re.escape("retried already, as steps-1.retry1")):
        failed.retry(SETTINGS, "steps-1", ledger, lambda *call: published.append(call))
    assert len(published) == 1


def test_retention_off_keeps_nothing() -> None:
    off = Settings.from_env({"MAILGUARD_SECRET": "s", "MAILGUARD_FAILED_RETENTION": "off"})
    assert not failed.keep(off, _request("steps-2"), "steps-2")
    with pytest.raises(failed.NotRetried, match="MAILGUARD_FAILED_RETENTION is off"):
        failed.retry(off, "steps-2", ledger_from_url("memory://"), lambda *call: None)


def test_a_dropped_mail_is_refused() -> None:
    ledger = ledger_from_url("memory://")
    ledger.record(Outcome(status="dropped", mail_id="steps-3", kind="default", reason="expired"))
    with pytest.raises(failed.NotRetried, match="ended dropped/expired: only a failed mail"):
        failed.retry(SETTINGS, "steps-3", ledger, lambda *call: None)
