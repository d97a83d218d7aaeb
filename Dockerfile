# One image for every Hookline process in docker-compose.yml: the worker (default command),
# Flower, the Flask example (web) and the demo receiver.
FROM python:3.11-slim

# HOOKLINE_DLQ_SPOOL: where dead letters are spooled when Redis itself is unreachable (moved into
# Redis by the next successful write). The directory belongs to the unprivileged user;
# docker-compose gives each worker replica its own volume there.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOOKLINE_DLQ_SPOOL=/var/lib/hookline/dlq-spool.jsonl

# Run as an unprivileged user: a worker sends HTTP requests to URLs that users configure.
# A fixed numeric id, so `runAsNonRoot`-style checks and volume ownership can rely on it.
RUN groupadd --system --gid 10001 hookline \
    && useradd --system --uid 10001 --gid hookline --home-dir /srv/hookline --no-create-home \
       --shell /usr/sbin/nologin hookline \
    && install -d -o hookline -g hookline -m 0750 /var/lib/hookline

WORKDIR /srv/hookline

# pyproject's `readme` field names README.md, so it is part of the build.
COPY pyproject.toml README.md celeryconfig.py ./
COPY app/ app/
COPY tasks/ tasks/
# Installs the packages app, hookline.store.lua and tasks, the celeryconfig module, the dependencies and
# the `hookline` console script, plus Flask for the `web` example service. The sources stay in
# the image, owned by root, read-only.
RUN pip install --no-cache-dir . "flask>=3.0,<4" && rm -rf build ./*.egg-info

# examples/ is not an installed package: `python -m examples.receiver` imports it from the
# working directory, which is why it is copied into WORKDIR.
COPY examples/ examples/

USER 10001:10001

# A node name unique per container (%h is the container's hostname), so replicas started with
# `docker compose up --scale worker=N` do not clash.
CMD ["celery", "-A", "app", "worker", "-l", "info", "-n", "hookline@%h"]
