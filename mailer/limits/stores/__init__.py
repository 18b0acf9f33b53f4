"""Limiter storage backends: ``memory`` (one process) and ``redis`` (many workers and hosts)."""

from mailer.limits.stores.base import Backend

__all__ = ["Backend"]
