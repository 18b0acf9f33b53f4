"""Gates: the concerns a mail passes between its claim and its send, as small hook objects.

A gate (:class:`Gate`) plugs into two hook points of the pipeline
(:mod:`mailer.guard.engine`):

- ``before_admit(mail, progress, raws)``: before the limiter is asked. Answers the mail to go
  on with (the same, or changed: fewer recipients), :class:`~mailer.guard.data.Admitted` (the
  gate booked the mail itself and its slot is now), or a step to answer instead.
- ``on_send_error(mail, refused)``: after the transport refused the mail. Answers None (not
  this gate's business; the next gate, then the default retry rule, answer), a step, or
  :class:`~mailer.guard.data.Admitted` (the gate booked the mail again and its slot is now:
  the engine sends again).

The gates are :class:`~mailer.guard.gates.suppression.SuppressionGate`, the bulk kinds' and
warm-up plans' gates when on (:mod:`~mailer.guard.gates.bulk`) and
:class:`~mailer.guard.gates.holds.HoldsGate`, in that order. A new concern adds a gate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from mailer.guard.data import Admitted, Prepared, Refused
from mailer.steps import Progress, Step
from mailer.storage import REDIS_DOWN

__all__ = ["Gate", "Reads", "read_together", "shared_reads", "split"]

#: A Redis client and the keys a gate reads before admission (see :meth:`Gate.reads`).
Reads = tuple[Any, list[str]]


class Gate(Protocol):
    """A concern of the pipeline with its hooks. Thread-safe: one guard serves every thread."""

    def reads(self, mail: Prepared) -> Reads | None:
        """The redis-py client and keys ``before_admit`` reads for ``mail``, so that the gates
        that share one client are read in one ``MGET`` (:func:`read_together`); None when the
        gate reads on its own (memory, Cluster, several recipients)."""
        ...

    def before_admit(
        self, mail: Prepared, progress: Progress, raws: list[Any] | None
    ) -> Prepared | Admitted | Step:
        """``raws``: the values at :meth:`reads`'s keys when they were read together, else
        None (the gate reads them itself)."""
        ...

    def on_send_error(self, mail: Prepared, refused: Refused) -> Admitted | Step | None: ...


def read_together(gates: Sequence[Gate], mail: Prepared) -> list[list[Any] | None]:
    """Each gate's raw values read in one ``MGET`` (one round trip instead of one per gate)
    when every gate reads through the same Redis client; all None when they do not, or when
    that read fails (each gate then reads on its own, with its own outage rule). The guard's
    first round trip reads them with the claim instead, where it can
    (:mod:`mailer.guard.front`)."""
    alone: list[list[Any] | None] = [None] * len(gates)
    if len(gates) < 2:
        return alone
    reads = shared_reads(gates, mail)
    if reads is None:
        return alone
    try:
        raws = reads[0][0].mget([key for _, keys in reads for key in keys])
    except REDIS_DOWN:
        return alone
    return split(reads, raws)


def shared_reads(gates: Sequence[Gate], mail: Prepared, client: Any = None) -> list[Reads] | None:
    """Each gate's :meth:`Gate.reads` when every gate reads through one Redis client (``client``
    when given); else None."""
    reads: list[Reads] = []
    for gate in gates:
        read = gate.reads(mail)
        if read is None or read[0] is not (client if client is not None else read[0]):
            return None
        if reads and read[0] is not reads[0][0]:
            return None
        reads.append(read)
    return reads


def split(reads: Sequence[Reads], raws: Sequence[Any]) -> list[list[Any] | None]:
    """The values of ``reads``' keys, read in that order, cut back into one list per gate."""
    cut: list[list[Any] | None] = []
    start = 0
    for _, keys in reads:
        cut.append(list(raws[start : start + len(keys)]))
        start += len(keys)
    return cut
