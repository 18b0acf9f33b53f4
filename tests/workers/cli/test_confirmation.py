"""The commands that ask first (``unsuppress``, ``reset``, ``cancel``, ``policy set``) without
a terminal: an answer piped in is read; no answer at all (stdin closed, as in a script or a CI
job) is one line naming ``--yes``, exit 2, nothing changed; ``--yes`` does it. Real Redis."""

from __future__ import annotations

from mailer.factory import build_suppressions
from mailer.settings import Settings
from tests.workers.cli.test_cli import invoke, limiter_env, limiter_for, one_line_error


def test_unsuppress_without_an_answer_names_yes_and_lifts_nothing(redis_url: str) -> None:
    """As bulk.md writes it: without ``--yes`` and nothing to read, refused naming ``--yes``
    (was click's bare ``Aborted!``); with ``--yes`` the suppression is lifted."""
    env = limiter_env(redis_url)
    store = build_suppressions(Settings.from_env(env))
    store.suppress("ada@example.com", seconds=3600, cause="test", source="hand")
    unanswered = invoke(["unsuppress", "ada@example.com"], env)
    assert unanswered.exit_code == 2, unanswered.output
    line = one_line_error(unanswered.stderr.split("[y/N]: ", 1)[1])
    assert line.startswith("mailguard: error: not lifted: no answer to 'Lift the suppression")
    assert line.endswith("(no terminal to ask on): add --yes")
    assert store.suppressed("ada@example.com") is not None
    lifted = invoke(["unsuppress", "ada@example.com", "--yes"], env)
    assert lifted.exit_code == 0, lifted.output
    assert store.suppressed("ada@example.com") is None


def test_reset_without_an_answer_names_yes_and_keeps_the_budget(redis_url: str) -> None:
    """``reset`` with stdin closed: exit 2 naming ``--yes``; the budget is kept."""
    limiter = limiter_for(redis_url)
    try:
        limiter.acquire("bob@example.com")
        unanswered = invoke(["reset", "bob@example.com"], limiter_env(redis_url))
        assert unanswered.exit_code == 2 and "add --yes" in unanswered.stderr
        assert limiter.peek("bob@example.com").refused
    finally:
        limiter.close()
