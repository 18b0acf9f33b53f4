"""The limiter: policies, the exact multi-tier algorithms, decisions and their stores.

- :mod:`~mailer.limits.limiter`: :class:`~mailer.limits.limiter.Limiter`, the one front for
  every policy (``from mailer import Limiter``); :mod:`~mailer.limits.aio` its asyncio twin,
  :mod:`~mailer.limits.precheck` a web form's "may I send now?", :mod:`~mailer.limits.multi`
  one slot for several recipients.
- :mod:`~mailer.limits.policy` (tiers and scopes), :mod:`~mailer.limits.decision` (the answer),
  :mod:`~mailer.limits.checks` (argument checks), :mod:`~mailer.limits.keys` (hashed keys),
  :mod:`~mailer.limits.scopes` (a policy's scopes and their subjects).
- Pure algorithms: :mod:`~mailer.limits.sliding_log` (one key, sliding tiers),
  :mod:`~mailer.limits.algorithm` (every scope and tier kind), with
  :mod:`~mailer.limits.insertion`, :mod:`~mailer.limits.gcra_log` (a gcra tier's floor and
  bookings; :mod:`~mailer.limits.gcra_pages` keeps them in pages with summaries
  (:mod:`~mailer.limits.gcra_runs`: a page's and a group's) and :mod:`~mailer.limits.gcra_search`
  searches them), :mod:`~mailer.limits.windows`.
- :mod:`~mailer.limits.stores`: memory and Redis stores, chosen by URL scheme and policy shape.
"""

from mailer.limits.checks import check_tenant
from mailer.limits.policy import MAX_LIMIT, PROVIDER
from mailer.limits.scopes import SENDER_KEY, single_key

__all__ = ["MAX_LIMIT", "PROVIDER", "SENDER_KEY", "check_tenant", "single_key"]
