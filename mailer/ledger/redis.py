"""The ledger in Redis: one ``EVALSHA`` of a script in ``lua/`` per method (``GET`` for
:meth:`RedisLedger.recorded`).

Keys, both with the mail id as ``{hash tag}`` so that one mail's keys share a Cluster slot:

- ``<ns>:claim:{<mail id>}``: the owner of the claim, expiring after the lease (``PX``)
- ``<ns>:sent:{<mail id>}``: the recorded outcome as JSON, expiring after
  :data:`~mailer.ledger.base.SENT_TTL` (``EX``)

Expiry is Redis's own clock: the ledger takes no clock. The scripts' headers name every key and
argument.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from mailer.backends.redis_errors import REDIS_DOWN
from mailer.errors import BackendUnavailable
from mailer.ledger.base import SENT_TTL, Begun
from mailer.outcomes import Outcome


def _script(name: str) -> str:
    return resources.files("mailer.ledger").joinpath(f"lua/{name}.lua").read_text()


#: The scripts' texts, read once from the package files.
BEGIN_SCRIPT = _script("begin")
UNCLAIM_SCRIPT = _script("unclaim")
RECORD_SCRIPT = _script("record")


class RedisLedger:
    """The ledger in Redis: ``<ns>:claim:{id}`` (owner, PX lease) and ``<ns>:sent:{id}`` (JSON).

    One round trip per method. Both keys of a mail share its id as hash tag (Cluster-safe).
    Raises :class:`mailer.errors.BackendUnavailable` with ``backend="ledger"`` when the server
    cannot be reached.
    """

    def __init__(self, client: Any, url: str, namespace: str = "mailguard") -> None:
        self._client = client
        self._url = url
        self._ns = namespace
        self._begin = client.register_script(BEGIN_SCRIPT)
        self._unclaim = client.register_script(UNCLAIM_SCRIPT)
        self._record = client.register_script(RECORD_SCRIPT)

    def _keys(self, mail_id: str) -> list[str]:
        return [f"{self._ns}:claim:{{{mail_id}}}", f"{self._ns}:sent:{{{mail_id}}}"]

    def begin(
        self, mail_id: str, owner: str, lease: float, *, takeover: str | None = None
    ) -> Begun:
        args = [owner, int(lease * 1000), takeover or ""]
        try:
            answer = self._begin(keys=self._keys(mail_id), args=args)
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self._url, exc, backend="ledger") from exc
        if isinstance(answer, bytes | str):
            return Outcome.from_dict(json.loads(answer))
        return bool(answer)

    def unclaim(self, mail_id: str, owner: str) -> None:
        try:
            self._unclaim(keys=self._keys(mail_id)[:1], args=[owner])
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self._url, exc, backend="ledger") from exc

    def record(self, outcome: Outcome) -> None:
        try:
            self._record(
                keys=self._keys(outcome.mail_id), args=[json.dumps(outcome.as_dict()), SENT_TTL]
            )
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self._url, exc, backend="ledger") from exc

    def recorded(self, mail_id: str) -> Outcome | None:
        try:
            raw = self._client.get(self._keys(mail_id)[1])
        except REDIS_DOWN as exc:
            raise BackendUnavailable(self._url, exc, backend="ledger") from exc
        return None if raw is None else Outcome.from_dict(json.loads(raw))
