"""Where ``send_mail`` goes: ``MAILGUARD_QUEUE``, on whichever app runs it, and who consumes it.

- :func:`queue_option`: the ``queue`` a ``send_mail`` message is published to on a project's
  app: the settings' queue, unless the app's ``task_routes`` route the task (the project chose)
  or the caller named a queue; a mailguard app's default queue is that queue already. Used
  at enqueue (:meth:`workers.tasks.GuardedTask.apply_async`) and by the promoter, so a
  promoted mail goes where its first run went.
- :func:`consume_mail_queue`: at worker start, any app's worker that runs ``send_mail``
  consumes that queue: added when the worker was started without ``-Q``; a ``-Q`` (or ``-X``)
  that leaves it out is refused with one line naming the queue.

Duck-typed on Celery's app and worker objects: no Celery import.
"""

from __future__ import annotations

from typing import Any

#: Set in the configuration of the apps :func:`workers.app.create_app` makes: their default
#: queue is the settings' queue already (``mailguard demo`` points it at a queue of its own).
MARK = "mailguard_app"
#: On a mailguard app with quorum lanes (:mod:`workers.brokers.quorum`): the settings' queue, and
#: the names of its lane queues, highest first.
LOGICAL = "mailguard_queue"
LANES = "mailguard_lanes"


def mail_queue(app: Any, queue: str) -> str:
    """The queue ``send_mail`` goes to on ``app``: a mailguard app's default queue (its lanes'
    common name with quorum lanes), or the settings' ``queue`` (``MAILGUARD_QUEUE``) on a
    project's app."""
    if app.conf.get(MARK):
        return str(app.conf.get(LOGICAL) or app.conf.task_default_queue)
    return queue


def mail_queues(app: Any, queue: str) -> tuple[str, ...]:
    """The broker queues the mail of ``queue`` waits in on ``app``: its lanes, or the one."""
    return tuple(app.conf.get(LANES) or ()) or (mail_queue(app, queue),)


def queue_option(app: Any, task_name: str, queue: str) -> dict[str, str]:
    """``{"queue": queue}`` on a project's app, or nothing when ``app`` is a mailguard app
    (its default queue is the one) or its ``task_routes`` route ``task_name``."""
    if app.conf.get(MARK):
        return {}
    router = app.amqp.router
    if router.routes and router.lookup_route(task_name, (), {}, {}, None):
        return {}
    return {"queue": queue}


def consume_mail_queue(worker: Any, task_name: str, queue: str) -> None:
    """Make ``worker`` consume ``queue`` if its app runs ``task_name``; SystemExit (one line)
    when the worker's ``-Q``/``-X`` options leave it out."""
    app = getattr(worker, "app", None)
    if app is None or task_name not in app.tasks:
        return
    names = mail_queues(app, queue)
    if not app.conf.get(MARK) and queue_option(app, task_name, names[0]) == {}:
        return  # the project routes send_mail itself: its -Q is its own business
    queues = app.amqp.queues
    missing = [name for name in names if name not in queues.consume_from]
    if not missing:
        return
    selected = getattr(queues, "_consume_from", None) is not None  # -Q was given
    if selected or any(name in queues for name in missing):  # left out by -Q, or -X
        shown = ", ".join(repr(name) for name in missing)
        wanted = ",".join([*queues.consume_from, *missing])
        raise SystemExit(
            f"mailguard: this worker does not consume the queue {shown} (MAILGUARD_QUEUE) "
            f"that send_mail is published to; add it: -Q {wanted}"
        )
    queue = names[0]
    # The queue as the caller's app makes it for a name it does not know (Celery's
    # create_missing): the same exchange and arguments on both sides.
    queues.select_add(queues.new_missing(queue))
