# The Loopwork worker: python worker.py against TEMPORAL_ADDRESS, LOOP_HOME=/loop.
#
# Only git and the Python project are in it. Agents of the `command` backend
# (claude, codex, aider, ...) and whatever your gates run (pytest and your
# projects' dependencies) are not: build your own image FROM this one and add them.
FROM python:3.11-slim

# The worker's user; docker-compose.yml passes the host owner of the repositories.
ARG UID=1000
ARG GID=1000

RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/* \
    # Bind-mounted repositories may belong to another uid than the worker's.
    && git config --system safe.directory '*' \
    && groupadd --gid "${GID}" loop \
    && useradd --uid "${UID}" --gid "${GID}" --create-home --shell /usr/sbin/nologin loop \
    && mkdir -p /loop \
    && chown loop:loop /loop

WORKDIR /app
COPY pyproject.toml README.md ./
COPY loop ./loop
COPY workflows ./workflows
COPY activities ./activities
COPY worker.py ./
# The project and its runtime dependencies only (no dev extras).
RUN pip install --no-cache-dir .

ENV LOOP_HOME=/loop \
    LOOP_TASK_QUEUE=loop \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

USER loop
VOLUME ["/loop"]

# SIGTERM drains (running activities get 10 s); give it stop_grace_period >= 15 s.
STOPSIGNAL SIGTERM
CMD ["python", "worker.py"]
