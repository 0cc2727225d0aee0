"""Activity option presets shared by the workflows (DESIGN: fast recovery, classified errors).

A short first retry and heartbeats of a few seconds make a dead worker cost
seconds, not minutes; permanent failures and policy violations are never retried.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

from loop.contracts import PERMANENT, POLICY_VIOLATION

STEP_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=6,
    non_retryable_error_types=[PERMANENT, POLICY_VIOLATION],
)
"""Git, gates, agents, files: transient failures are short-lived or not transient."""

MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=8,
    non_retryable_error_types=[PERMANENT, POLICY_VIOLATION],
)
"""Model endpoints rate-limit and have outages: more patience, a server's Retry-After wins."""

NOTIFY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=6,
)
"""A webhook: about a minute of tries, then the failure is recorded."""

HEARTBEAT = timedelta(seconds=5)
SHORT = timedelta(seconds=120)
