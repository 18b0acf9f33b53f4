"""The worker's side of the argument bounds: a message is checked before it reaches the pool.

A producer other than ``send_mail.delay`` (another client, an older version, a hand-written
message) can still put arguments on the queue that a worker would choke on: a prefork worker's
main process pickles them for its pool and a context nested 500 deep kills it. This request
class runs :func:`workers.tasks.check_call` in the main process, before the pool: a bad message
ends at once as the outcome ``dropped`` / ``invalid`` (state SUCCESS, like every dropped mail),
is acknowledged, and never reaches a pool process.
"""

from __future__ import annotations

import logging

from celery.worker.request import Request
from celery.worker.state import task_ready

from mailer import outcomes as why
from mailer.arguments import InvalidArguments
from mailer.metrics import UNKNOWN_KIND, default_metrics
from mailer.outcomes import Outcome

log = logging.getLogger("mailguard")


class GuardedRequest(Request):
    """A ``send_mail`` request whose raw arguments are bounded before the pool sees them.

    The check sits in :meth:`revoked`, which the worker asks right before it hands a request to
    the pool (``execute_using_pool`` itself is replaced by Celery's own fast subclass): a bad
    request is dropped and answers "revoked", Celery's path for a request that never reaches
    the pool.
    """

    _mailguard_dropped = False

    def revoked(self) -> bool:
        if super().revoked():
            return True
        if self._mailguard_dropped:
            return True
        from workers.tasks import check_call  # noqa: PLC0415 - tasks imports this module

        try:
            check_call(self.args, self.kwargs)
        except InvalidArguments as exc:
            self._mailguard_dropped = True
            self._drop_invalid(str(exc))
            return True
        return False

    def _drop_invalid(self, reason: str) -> None:
        """Store ``dropped`` / ``invalid`` as this task's result and acknowledge the message."""
        outcome = Outcome(
            status="dropped", mail_id=self.id, kind="?", reason=why.INVALID, detail=reason
        )
        try:
            self.task.backend.mark_as_done(self.id, outcome.as_dict(), request=self)
            default_metrics().record(outcome, UNKNOWN_KIND)
        finally:
            task_ready(self)
            self.acknowledge()
        log.warning("mail %s dropped on receipt: %s", self.id, reason, extra={"mail_id": self.id})
