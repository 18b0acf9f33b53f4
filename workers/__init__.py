"""Celery wiring for mailguard: the app and the ``send_mail`` task. The only place Celery is used."""
