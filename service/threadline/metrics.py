"""Prometheus series. Names are part of the contract (product brief, "Metrics").

Labels carry only bounded, non-secret values: a backend name, an operation name, a route
template, a status code. Never a thread id, a URL or a principal.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Checkpoint I/O is sub-millisecond on loopback Redis and ~100 ms when something is wrong:
# buckets from 0.25 ms to 2.5 s.
_IO_BUCKETS = (0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

CHECKPOINT_READ_SECONDS = Histogram(
    "threadline_checkpoint_read_duration_seconds",
    "Time of one checkpoint read (get_tuple, list).",
    ["backend"],
    buckets=_IO_BUCKETS,
)
CHECKPOINT_WRITE_SECONDS = Histogram(
    "threadline_checkpoint_write_duration_seconds",
    "Time of one checkpoint write (put, put_writes, delete).",
    ["backend"],
    buckets=_IO_BUCKETS,
)
CHECKPOINT_OPERATIONS = Counter(
    "threadline_checkpoint_operations_total",
    "Checkpoint operations, by backend and operation.",
    ["backend", "op"],
)
# Like iostat's %util: wall time with at least one checkpoint operation in flight. LangGraph
# runs put_writes in the background, overlapping the next put, so the histograms' sums count
# overlapping time twice; rate() of this counter is the share of time the checkpointer is busy.
CHECKPOINT_BUSY_SECONDS = Counter(
    "threadline_checkpoint_busy_seconds_total",
    "Wall time with at least one checkpoint operation in flight.",
    ["backend"],
)
# Bytes a checkpoint write sent to its store (the redis backend counts them; the others do not
# report it). Divided by threadline_checkpoint_operations_total{op=...}: bytes per put, per
# put_writes, which stay flat with conversation length when each message is stored once.
CHECKPOINT_WRITTEN_BYTES = Counter(
    "threadline_checkpoint_written_bytes_total",
    "Serialized bytes sent to the checkpoint store by writes, by backend and operation.",
    ["backend", "op"],
)
CHECKPOINT_ERRORS = Counter(
    "threadline_checkpoint_errors_total",
    "Checkpoint operations that raised, by backend and operation.",
    ["backend", "op"],
)

TURN_SECONDS = Histogram(
    "threadline_turn_duration_seconds",
    "Time of one turn from lease to stored reply, by outcome.",
    ["outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
LEASE_WAIT_SECONDS = Histogram(
    "threadline_turn_lease_wait_seconds",
    "Time spent waiting for a thread's turn lease.",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
LEASE_CONFLICTS = Counter(
    "threadline_turn_lease_conflicts_total",
    "Requests that could not get a thread's turn lease in time (answered 409).",
)
LEASE_LOST = Counter(
    "threadline_turn_lease_lost_total",
    "Turns whose lease was lost while running (renewal failed or the write was fenced).",
)
NOT_REPLICATED = Counter(
    "threadline_turn_not_replicated_total",
    "Turns answered 503 because their writes were not confirmed by CHECKPOINT_REDIS_WAIT_REPLICAS replicas.",
)
MODEL_CANCELLED = Counter(
    "threadline_model_cancelled_total",
    "Model calls cancelled before they finished (client gone, drain, lease lost).",
)
ACTIVE_STREAMS = Gauge("threadline_active_streams", "SSE replies being streamed now.")
HTTP_REQUESTS = Counter(
    "threadline_http_requests_total",
    "HTTP requests, by method, route template and status code.",
    ["method", "route", "status"],
)
HTTP_SECONDS = Histogram(
    "threadline_http_request_duration_seconds",
    "HTTP request time, by method and route template.",
    ["method", "route"],
)
RUNS = Counter(
    "threadline_runs_total",
    "LangGraph API runs ended, by final status (success, error, interrupted).",
    ["status"],
)
RUN_TAKEOVERS = Counter(
    "threadline_run_takeovers_total",
    "LangGraph API runs this replica took over from an executor that stopped (ADR 0010).",
)
WEBHOOK_DELIVERIES = Counter(
    "threadline_webhook_deliveries_total",
    "Run webhooks by outcome: delivered, failed (attempts used up or refused), dropped "
    "(WEBHOOK_MAX_PENDING reached).",
    ["outcome"],
)
WEBHOOK_ATTEMPT_FAILURES = Counter(
    "threadline_webhook_attempt_failures_total",
    "Run webhook attempts that failed, by reason: timeout, network, unresolved, refused, 3xx, 4xx, 5xx.",
    ["reason"],
)
WEBHOOKS_IN_FLIGHT = Gauge("threadline_webhooks_in_flight", "Run webhook POSTs under way now.")
