# One image for every Hookline process in docker-compose.yml: the worker (default command),
# Flower, the Flask example (web) and the demo receiver.
FROM python:3.11-slim

# HOOKLINE_DLQ_SPOOL: where dead letters are spooled when Redis itself is unreachable (moved into
# Redis by the next successful write). The directory belongs to the unprivileged user;
# docker-compose gives each worker replica its own volume there.
# MALLOC_ARENA_MAX=2: glibc's malloc gives each of a worker's threads an arena of its own (up
# to 8 per core), which fragment; two keep the free bytes flat (the soak, docs/operations/
# fault-runs.md), as Sidekiq's docs advise for the same symptom. GLIBC_TUNABLES: no per-thread
# caches and a fixed mmap threshold, which kept malloc's bytes in use flat too (`hookline
# worker` sets both where the environment does not; this image's bare `celery` command too).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MALLOC_ARENA_MAX=2 \
    GLIBC_TUNABLES=glibc.malloc.tcache_count=0:glibc.malloc.mmap_threshold=65536 \
    HOOKLINE_DLQ_SPOOL=/var/lib/hookline/dlq-spool.jsonl

# Run as an unprivileged user: a worker sends HTTP requests to URLs that users configure.
# A fixed numeric id, so `runAsNonRoot`-style checks and volume ownership can rely on it.
RUN groupadd --system --gid 10001 hookline \
    && useradd --system --uid 10001 --gid hookline --home-dir /srv/hookline --no-create-home \
       --shell /usr/sbin/nologin hookline \
    && install -d -o hookline -g hookline -m 0750 /var/lib/hookline

# The distribution, installed as a host project installs it: the one package `hookline`, its
# dependencies, the `hookline` console script, and the extras the services below need (flask
# and flask-sqlalchemy for `web`, the Flask example; flower for `flower`). Built from a copy of
# the sources that is removed afterwards, so every process imports the installed package,
# never a source tree beside it.
# pyproject's `readme` and `license-files` name README.md and LICENSE: both are part of the build.
WORKDIR /tmp/hookline-dist
COPY pyproject.toml README.md LICENSE ./
COPY hookline/ hookline/
RUN pip install --no-cache-dir ".[flask,flask-sqlalchemy,flower]" && cd / && rm -rf /tmp/hookline-dist

WORKDIR /srv/hookline

# The checkout's entry points, which the wheel does not ship (a host project has modules named
# app, tasks and celeryconfig of its own): `celery -A app worker` and `celery -A app flower`
# import app/ from this working directory (Celery puts the working directory on sys.path to
# find -A); tasks/ and celeryconfig.py only point into the installed package.
# examples/ (not installed either): `python -m examples.receiver` and
# `flask --app examples.flask_app.app` import it from the working directory too.
# Owned by root, read-only for the user below.
COPY celeryconfig.py ./
COPY app/ app/
COPY tasks/ tasks/
COPY examples/ examples/

USER 10001:10001

# A node name unique per container (%h is the container's hostname), so replicas started with
# `docker compose up --scale worker=N` do not clash.
CMD ["celery", "-A", "app", "worker", "-l", "info", "-n", "hookline@%h"]
