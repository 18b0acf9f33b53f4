"""Celery wiring for mailguard: the app, the ``send_mail`` task, the brokers, the promoter, the
``mailguard`` command, Django's backend and the demo.

Of the installed packages, this is the only one that imports Celery: ``mailer/`` never does.
"""
