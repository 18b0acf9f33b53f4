"""Where :data:`REDIS_DOWN` lived; it is :data:`mailer.storage.REDIS_DOWN` now."""

from mailer.storage import REDIS_DOWN

__all__ = ["REDIS_DOWN"]
