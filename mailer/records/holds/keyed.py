"""The holds as the guard uses them: scopes, keyed recipient keys and the clock over a
:class:`~mailer.records.holds.base.HoldStore`, and :func:`holds_from_url`, which picks the store
by the URL's scheme."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mailer.clock import Clock, system_clock
from mailer.defaults import PACE_WINDOW, THROTTLE_HOLD_MAX
from mailer.limits.keys import KeyHasher, check_key
from mailer.mail.replies import RULED_PROVIDERS
from mailer.records.holds.base import SENDER, Hold, HoldStore, decode_hold
from mailer.records.holds.memory import MemoryHoldStore
from mailer.records.holds.pace import (
    PACE_START,
    PACE_STEP,
    MemoryPaceStore,
    Pace,
    PaceStore,
    SenderPace,
    decode_pace,
)
from mailer.records.holds.pace_redis import RedisPaceStore
from mailer.records.holds.redis import RedisHoldStore
from mailer.records.holds.transport import TransportHold
from mailer.storage import client_from_url, is_cluster, is_memory


@dataclass(frozen=True)
class Read:
    """What the guard reads before admitting a mail, as stored (in force or not; None: none):
    the sender's hold, the recipient's, the relay's pace, and each ruled provider's hold and
    pace (``providers``: name -> (hold, pace); empty with provider holds off)."""

    sender: Hold | None
    recipient: Hold | None
    pace: Pace | None
    providers: dict[str, tuple[Hold | None, Pace | None]]


class Holds:
    """Set and read holds. Thread-safe. Build with :func:`holds_from_url` (or :meth:`from_url`).

    **Provider holds** (on when ``providers``, a :class:`~mailer.providers.ProviderFinder`, is
    given): a rate reply that names a provider (:data:`~mailer.mail.replies.PROVIDER_RULES`)
    holds that provider's mail alone, ``<namespace>:hold:provider:<name>`` (the names are the
    ruled providers', ``google``, ``microsoft``, ``yahoo``: never a private domain), with its
    own pace after it, ``<pace key>:<name>`` (:meth:`provider_pace`).

    Raises :class:`~mailer.errors.BackendUnavailable` (``backend="limiter"``) when Redis is
    down: the guard then does what it does when the limiter is down (``fail_closed`` defers).
    """

    def __init__(
        self,
        store: HoldStore,
        *,
        secret: str | bytes | None = None,
        namespace: str = "mailguard",
        clock: Clock | None = None,
        max_hold: float = THROTTLE_HOLD_MAX,
        pace: SenderPace | None = None,
        providers: Any = None,
    ) -> None:
        if max_hold <= 0:
            raise ValueError(f"max_hold must be > 0 s, got {max_hold}")
        self._store = store
        self._hasher = KeyHasher(secret, f"{namespace}:hold", "hold")
        self._sender_key = f"{namespace}:hold:{SENDER}"
        self._evidence_key = f"{namespace}:hold:evidence"
        self._provider_keys = [f"{namespace}:hold:provider:{name}" for name in RULED_PROVIDERS]
        #: The finder of a recipient's provider (:class:`~mailer.providers.ProviderFinder`):
        #: provider holds are on with it, off (every rate reply holds the sender) without.
        self.providers = providers
        self._clock = clock or system_clock
        self.max_hold = max_hold
        #: The sender's pace after a hold (the slow start); in memory unless given.
        self.pace = pace or SenderPace(MemoryPaceStore(), namespace=namespace, clock=self._clock)
        #: The transport's hold (our own side refused), kept until lifted.
        self.transport = TransportHold(
            store, secret=secret, namespace=namespace, clock=self._clock, max_hold=max_hold
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        secret: str | bytes | None = None,
        namespace: str = "mailguard",
        clock: Clock | None = None,
        client: Any = None,
        max_hold: float = THROTTLE_HOLD_MAX,
    ) -> Holds:
        """The same as :func:`holds_from_url`."""
        return holds_from_url(
            url, secret=secret, namespace=namespace, clock=clock, client=client, max_hold=max_hold
        )

    def now(self) -> float:
        """The holds' clock, epoch seconds (a hold's ``since`` and ``until`` are on it)."""
        return self._clock()

    def key_of(self, key: str) -> str:
        """The storage key of the recipient hold of limit key ``key`` (a keyed hash)."""
        return self._hasher.storage_key(check_key(key))

    def hold_sender(
        self, seconds: float, cause: str, *, asked: float | None = None, stated: bool = False
    ) -> Hold:
        """Hold the sender for ``seconds`` (doubled while the throttling continues: see
        :func:`~mailer.records.holds.base.next_hold`, with ``asked`` and ``stated``); the hold
        now."""
        return self._hold(self._sender_key, seconds, cause, asked, stated)

    def hold_recipient(
        self,
        key: str,
        seconds: float,
        cause: str,
        *,
        asked: float | None = None,
        stated: bool = False,
    ) -> Hold:
        """Hold the recipient of limit key ``key`` alone, like :meth:`hold_sender`."""
        return self._hold(self.key_of(key), seconds, cause, asked, stated)

    def hold_provider(
        self,
        name: str,
        seconds: float,
        cause: str,
        *,
        asked: float | None = None,
        stated: bool = False,
    ) -> Hold:
        """Hold the sender at provider ``name`` (one of :data:`~mailer.mail.replies.
        RULED_PROVIDERS`) alone, like :meth:`hold_sender`."""
        return self._hold(self.provider_key(name), seconds, cause, asked, stated)

    def provider_key(self, name: str) -> str:
        """The storage key of provider ``name``'s hold; ``ValueError`` for another name."""
        if name not in RULED_PROVIDERS:
            raise ValueError(f"no provider hold for {name!r}: one of {', '.join(RULED_PROVIDERS)}")
        return self._provider_keys[RULED_PROVIDERS.index(name)]

    def provider_pace(self, name: str) -> SenderPace:
        """The pace after provider ``name``'s hold: the relay's pace key with ``:<name>`` (one
        Cluster slot with it), on the same store and settings."""
        self.provider_key(name)  # a ruled provider's
        return self.pace.beside(f"{self.pace.key}:{name}")

    def provider_holds(self) -> dict[str, Hold]:
        """Each provider's hold in force now, by name (one round trip)."""
        now = self._clock()
        found = self._store.get(self._provider_keys)
        return {
            name: hold
            for name, hold in zip(RULED_PROVIDERS, found, strict=True)
            if hold is not None and hold.until > now
        }

    def read(self, key: str) -> Read:
        """:class:`Read` for limit key ``key``, read on its own: the holds in one round trip,
        the paces (one relay's, one Cluster slot) in one more while a slow start is on."""
        held = [self._sender_key, self.key_of(key)]
        on = self.providers is not None
        found = self._store.get(held + self._provider_keys if on else held)
        paces: list[Pace | None] = [None] * (1 + len(RULED_PROVIDERS))
        if self.pace.rate is not None:
            paces = self._pace_store().get_many(self._pace_keys()) if on else [self.pace.current()]
        return self._read(found, paces)

    def read_raws(self, raws: list[Any]) -> Read:
        """:class:`Read` from the values at :meth:`plain_read`'s keys."""
        ruled = len(RULED_PROVIDERS)
        holds = [decode_hold(raw) for raw in [raws[0], raws[1], *raws[3 : 3 + ruled]]]
        paces = [decode_pace(raw) for raw in [raws[2], *raws[3 + ruled :]]]
        return self._read(holds, paces)

    def _read(self, holds: list[Hold | None], paces: list[Pace | None]) -> Read:
        providers: dict[str, tuple[Hold | None, Pace | None]] = {}
        if self.providers is not None:
            for n, name in enumerate(RULED_PROVIDERS):
                hold, pace = holds[2 + n], paces[1 + n]
                if hold is not None or pace is not None:
                    providers[name] = (hold, pace)
        return Read(holds[0], holds[1], paces[0] if paces else None, providers)

    def _pace_keys(self) -> list[str]:
        return [self.pace.key, *(f"{self.pace.key}:{name}" for name in RULED_PROVIDERS)]

    def _pace_store(self) -> PaceStore:
        return self.pace.store

    def witness(self, key: str, window: float, count: int) -> int:
        """The recipient of limit key ``key`` failed with a temporary error now: how many
        distinct recipients failed within the last ``window`` seconds (every worker's, by
        keyed hash). Reaching ``count`` starts the count over: one caller sees it reached."""
        if not window > 0 or count < 1:
            raise ValueError(f"evidence needs a window > 0 s and a count >= 1, got {count}")
        member = self.key_of(key).rsplit(":", 1)[-1]
        return self._store.witness(self._evidence_key, member, self._clock(), window, count)

    def active(self, key: str | None = None) -> tuple[Hold | None, Hold | None]:
        """The sender's hold and the recipient's (limit key ``key``) in force now, in one round
        trip; None for none."""
        return self.in_force(self.stored(key))

    def stored(self, key: str | None = None) -> tuple[Hold | None, Hold | None]:
        """The sender's hold and the recipient's (limit key ``key``) as stored, in force or
        not (one round trip); None for none. :meth:`in_force` keeps those in force."""
        keys = [self._sender_key] if key is None else [self._sender_key, self.key_of(key)]
        found = self._store.get(keys)
        return found[0], found[1] if key is not None else None

    def in_force(self, held: tuple[Hold | None, Hold | None]) -> tuple[Hold | None, Hold | None]:
        """Of the holds ``held`` (sender, recipient), those in force now (the others None)."""
        now = self._clock()
        sender, recipient = held
        return (
            sender if sender is not None and sender.until > now else None,
            recipient if recipient is not None and recipient.until > now else None,
        )

    def plain_read(self, key: str) -> tuple[Any, list[str]] | None:
        """The redis-py client and the keys that :meth:`active` (with ``key``) reads with one
        ``MGET``, for a caller that reads them together with other keys of the same client;
        None on memory and on Cluster. Answer with :meth:`from_raws`."""
        client = self._store.shared_client()
        keys = [self._sender_key, self.key_of(key), self.pace.key]
        if self.providers is not None:  # each ruled provider's hold, then its pace
            keys += self._provider_keys + self._pace_keys()[1:]
        return None if client is None else (client, keys)

    def from_raws(self, raws: list[Any]) -> tuple[Hold | None, Hold | None]:
        """What :meth:`active` answers for the values read at :meth:`plain_read`'s keys."""
        return self.in_force(self.stored_from_raws(raws))

    @staticmethod
    def stored_from_raws(raws: list[Any]) -> tuple[Hold | None, Hold | None]:
        """What :meth:`stored` answers for the values read at :meth:`plain_read`'s keys."""
        return decode_hold(raws[0]), decode_hold(raws[1])

    def sender(self) -> Hold | None:
        """The sender's hold in force now, or None."""
        return self.active()[0]

    def _hold(
        self, storage_key: str, seconds: float, cause: str, asked: float | None, stated: bool
    ) -> Hold:
        if not seconds > 0:
            raise ValueError(f"a hold lasts > 0 s, got {seconds}")
        now = self._clock()
        return self._store.put(
            storage_key, now, float(seconds), self.max_hold, cause, asked=asked, stated=stated
        )


def holds_from_url(
    url: str,
    *,
    secret: str | bytes | None = None,
    namespace: str = "mailguard",
    clock: Clock | None = None,
    client: Any = None,
    max_hold: float = THROTTLE_HOLD_MAX,
    pace_start: float | None = PACE_START,
    pace_step: float = PACE_STEP,
    pace_window: float = PACE_WINDOW,
    relay: str | None = None,
    providers: Any = None,
) -> Holds:
    """Holds on ``memory://`` or a Redis URL (the limiter's); ``client`` reuses a redis-py
    client. Times are ``clock``'s on both (a hold's JSON carries its own ``until``). The
    sender's pace after a hold (:mod:`mailer.records.holds.pace`) lives beside them, starting
    at ``pace_start`` mails/s (None: no slow start), growing by ``pace_step`` per second and
    learning a relay's count per ``pace_window`` seconds; one per ``relay`` (what names the
    relay, ``smtp:host:port:user``: its keyed hash is the key, ``<namespace>:pace:{<hash>}``;
    None: ``<namespace>:pace:{sender}``). ``providers``: the finder that turns provider holds
    on (:class:`Holds`)."""
    clock = clock or system_clock
    store: HoldStore
    pace_store: PaceStore
    if is_memory(url):
        store, pace_store = MemoryHoldStore(clock), MemoryPaceStore()
    else:
        client = client if client is not None else client_from_url(url)
        store = RedisHoldStore(client, url, cluster=is_cluster(url))
        pace_store = RedisPaceStore(client, url)
    key = None
    if relay is not None:
        key = KeyHasher(secret, f"{namespace}:pace", "relay").storage_key(check_key(relay))
    pace = SenderPace(
        pace_store,
        namespace=namespace,
        clock=clock,
        rate=pace_start,
        step=pace_step,
        window=pace_window,
        key=key,
    )
    return Holds(
        store,
        secret=secret,
        namespace=namespace,
        clock=clock,
        max_hold=max_hold,
        pace=pace,
        providers=providers,
    )
