"""The in-process ``memory://`` broker, with priorities: a code mail is taken before a burst.

kombu's memory transport keeps one first-in-first-out queue per name, so the demo's worker
(and any in-process worker on embedded defaults) ran a code mail only after every bulk mail
enqueued before it. This transport is the same, except that each queue is ordered by the
message's ``priority`` (0-9, higher first, as on RabbitMQ: :func:`workers.brokers.priority.
message_priority` publishes the kind's priority as is for this broker), then by arrival.

:func:`workers.app.create_app` selects it for ``memory://`` broker URLs (``broker_transport``
wins over the URL's scheme in kombu). Like kombu's, it works between the threads of one process
only: never use it for workers in other processes.
"""

from __future__ import annotations

import itertools
from queue import PriorityQueue
from typing import Any, ClassVar

from kombu.transport import memory, virtual

_Entry = tuple[int, int, Any]


class Channel(memory.Channel):
    """kombu's memory channel with a priority queue per queue name."""

    #: The queues of every channel of the process (kombu keeps its FIFO ones in ``queues``).
    ordered: ClassVar[dict[str, PriorityQueue[_Entry]]] = {}
    _arrivals: ClassVar[itertools.count[int]] = itertools.count()

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return queue in self.ordered

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        self._ordered(queue)

    def _ordered(self, queue: str) -> PriorityQueue[_Entry]:
        if queue not in self.ordered:
            self.ordered[queue] = PriorityQueue()
        return self.ordered[queue]

    def _entry(self, message: Any) -> _Entry:
        priority = self._get_message_priority(message)  # 0-9, higher first; 0 when unset
        return (-priority, next(self._arrivals), message)

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        return self._ordered(queue).get(block=False)[2]

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        self._ordered(queue).put(self._entry(message))

    def _put_fanout(
        self, exchange: str, message: Any, routing_key: str | None = None, **kwargs: Any
    ) -> None:
        for queue in self._lookup(exchange, routing_key or ""):
            self._ordered(queue).put(self._entry(message))

    def _size(self, queue: str) -> int:
        return self._ordered(queue).qsize()

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        self.ordered.pop(queue, None)

    def _purge(self, queue: str) -> int:
        ordered = self._ordered(queue)
        with ordered.mutex:
            size = len(ordered.queue)
            ordered.queue.clear()
        return size


class Transport(memory.Transport):
    """kombu's memory transport, priorities honoured; see the module doc."""

    Channel = Channel
    global_state = virtual.BrokerState()
