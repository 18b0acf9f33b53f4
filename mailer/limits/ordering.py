"""A recipient's booked order: the mails that wait for a slot leave in the order they were sent.

Every mail carries an *order* stamp (:func:`order_key`): its kind's priority, then when its
``send_mail.delay`` was called (microseconds on the caller's clock, strictly increasing within
one process), as one fixed-width string of 18 digits that sorts as it should (highest priority
first, then earliest). A log of recipient sliding tiers keeps the stamp beside each of its
bookings (:mod:`mailer.limits.stores.memory`; on Redis ``stores/lua/sliding_order.lua``, a hash
``<key>:o`` beside the log, in its hash slot, with its TTL).

When a stamped mail is booked, :func:`keep_order` exchanges slots: the future bookings of mails
stamped *after* it that hold earlier slots (and none before a hold's ``not_before``) each move
one place back, and this mail takes the first of their slots. Only which mail holds which slot
changes, never the slots themselves: the log's times are the same before and after, so the
policy ("never over") is untouched; a mail moved back finds its later slot when its run comes
at the old one and waits for it ("never early"); only the mail being booked moves forward, to
a slot still ahead. A booking without a stamp (a library call without ``order``, a message
published without ``_order``) is never moved and moves none.

A booking reached on time does not go while a booking before it, stamped before it, has been
reached less than :data:`ORDER_GRACE_MS` ago and its run has not come yet (an outage, a killed
worker: :func:`waits_behind`): it is judged again behind that booking's place (``sliding_log.
_judged``), so the earlier mail goes first when its run comes; a mail not in the log is booked
behind those places (``sliding_log.behind``). Only calls that judge lateness (``late_ms``) wait
so, and they keep such bookings in the log (and the log alive) that long past the longest
window. The grace bounds what a booking whose run never comes (its mail dropped by a gate)
costs the mails after it.

What it does not order: a mail that finds its recipient with room now is sent at once (a mail
enqueued before it whose run has not reached the limiter yet books the next slot); slots
already admitted or sent are not exchanged; a mail whose run comes more than the grace after
its slot takes the next slot there is.
"""

from __future__ import annotations

from mailer.limits.sliding_log import BOOKED, TAG_BITS

#: Digits of an order stamp: one for the priority rank, 17 for microseconds since the epoch.
ORDER_WIDTH = 18
#: The highest kind priority (:data:`mailer.mail.kinds.MAX_PRIORITY`): rank 0.
_TOP_PRIORITY = 9
_MICROS = 10**17
#: How long a reached booking whose run has not come holds back the bookings stamped after it,
#: in ms after its slot (compiled into ``stores/lua/sliding_order.lua``).
ORDER_GRACE_MS = 600_000


def order_key(priority: int, sent_us: int) -> str:
    """The order stamp of a mail of kind ``priority`` (0-9, higher first) sent at ``sent_us``
    (epoch microseconds): "" (no stamp) for ``sent_us`` 0. Compare stamps as strings."""
    if not sent_us:
        return ""
    if not 0 <= priority <= _TOP_PRIORITY or not 0 < sent_us < _MICROS:
        raise ValueError(f"order stamp out of range: priority {priority}, {sent_us} µs")
    return f"{_TOP_PRIORITY - priority}{sent_us:017d}"


def check_order(order: object) -> str:
    """``order`` if it is "" or a stamp of :func:`order_key`, else ``ValueError``."""
    if order == "":
        return ""
    if not isinstance(order, str) or len(order) != ORDER_WIDTH or not order.isdigit():
        raise ValueError(f"order must be a stamp of {ORDER_WIDTH} digits, got {order!r}")
    if not order.isascii():
        raise ValueError(f"order must be ASCII digits, got {order!r}")
    return order


def keep_order(  # noqa: PLR0917 - the memory store's call, positional like sliding_log's
    ts: list[int],
    tags: list[int],
    orders: dict[int, str],
    i: int,
    order: str,
    hi: int,
    not_before_ms: int = 0,
) -> int:
    """Record ``order`` for the booking at ``i`` (flagged :data:`BOOKED`, after ``hi``: now
    rounded up, ms) and exchange slots with the future bookings stamped after it that hold
    earlier slots (at or after ``not_before_ms``); returns the index this mail's booking holds
    then. ``orders`` (tag without the flag -> stamp) is pruned to the bookings (entries
    flagged :data:`BOOKED`: future, or reached and waiting for their run)."""
    named = tags[i] & TAG_BITS
    orders[named] = order
    booked = {tag & TAG_BITS for tag in tags if tag & BOOKED}
    for stale in [tag for tag in orders if tag not in booked]:
        del orders[stale]
    at = ts[i]
    ahead = [
        j
        for j in range(i)
        if hi < ts[j] < at
        and ts[j] >= not_before_ms
        and tags[j] & BOOKED
        and orders.get(tags[j] & TAG_BITS, "") > order
    ]
    if not ahead:
        return i
    moved = [tags[i], *(tags[j] for j in ahead)]
    for j, tag in zip([*ahead, i], moved, strict=True):
        tags[j] = tag
    return ahead[0]


def waits_behind(  # noqa: PLR0917 - the memory store's call, positional like sliding_log's
    ts: list[int],
    tags: list[int],
    orders: dict[int, str],
    i: int,
    order: str,
    now_ms: int,
) -> bool:
    """Whether booking ``i`` (reached, on time) waits for a booking before it stamped before
    ``order`` and reached less than :data:`ORDER_GRACE_MS` ago, its run not come yet."""
    for j in range(i):
        if tags[j] & BOOKED and ts[j] >= now_ms - ORDER_GRACE_MS:
            earlier = orders.get(tags[j] & TAG_BITS)
            if earlier is not None and earlier < order:
                return True
    return False
