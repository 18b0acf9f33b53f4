"""Celery wiring for mailguard: the Celery app and the ``send_mail`` task.

This package is the only place that imports Celery.
"""
