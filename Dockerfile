# The mailguard image: the worker (default target) and, with `--target flower`, Flower on the
# same app, so both read the same MAILGUARD_* variables. See docker-compose.yml.
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY mailer ./mailer
COPY workers ./workers
# The distribution celery-mailguard, from this checkout, with hiredis (the `fast` extra).
RUN pip install ".[fast]" \
    && useradd --create-home --uid 10001 --user-group mailguard
USER mailguard
# The queue is MAILGUARD_QUEUE (the app declares it): no -Q needed. --task-events feeds Flower.
CMD ["celery", "-A", "workers.app", "worker", "--loglevel", "INFO", "--task-events"]

FROM base AS flower
USER root
RUN pip install "flower>=2.0,<3"
USER mailguard
EXPOSE 5555
CMD ["celery", "-A", "workers.app", "flower", "--port=5555"]

# Last stage: what a plain `docker build .` produces.
FROM base AS worker
