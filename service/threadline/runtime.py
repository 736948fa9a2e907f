"""The state of one running replica: settings, stores once open, the served graphs, the
``/v1`` conversations and the LangGraph API's threads and runs, draining flag."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from contextlib import AsyncExitStack

from threadline.agent import build_graph, make_model
from threadline.agent.registry import (
    CHAT,
    Deployment,
    bind_factories,
    bind_graphs,
    import_auth,
    import_graphs,
    import_object,
    read_deployment,
)
from threadline.auth import ApiKeys
from threadline.checkpoint import is_store_down
from threadline.config import ConfigError, Settings
from threadline.custom_auth import CustomAuth
from threadline.retry import delays
from threadline.runs.assistants import Assistants
from threadline.runs.crons import Crons, CronScheduler, fire_with
from threadline.runs.records import RunRecord
from threadline.runs.runs import Runs
from threadline.runs.thread_checkpoints import thread_config
from threadline.runs.thread_upkeep import ThreadUpkeep
from threadline.runs.threads import Threads
from threadline.store import StoreOptions, store_options
from threadline.store.tenant import Tenancy
from threadline.stores import Stores
from threadline.turns import Conversations
from threadline.webhooks import Webhooks, webhook_policy

log = logging.getLogger(__name__)

# Back-off between attempts to open the stores: from 0.2 s up to 5 s.
RETRY_FIRST, RETRY_MAX = 0.2, 5.0


def announce(settings: Settings, user_graphs: dict, has_identity: bool) -> None:
    """The start-up log: the graphs served, the model, the checkpointer; and a loud warning
    when neither API keys nor custom auth are configured, since every request would then be
    refused with 401."""
    graphs = ([] if CHAT in user_graphs else [CHAT]) + list(user_graphs)
    log.info(
        "serving graphs: %s",
        ", ".join(graphs),
        extra={
            "graphs": graphs,
            "langgraph_config": str(settings.graph.config_path) if settings.graph.config_path else None,
            "model": settings.model.name,
            "checkpoint_backend": settings.checkpoint.backend,
        },
    )
    if not has_identity:
        log.warning(
            "no API keys configured (API_KEYS is empty): every request will be refused with 401. "
            "Set API_KEYS=principal:sha256hex (`python -m threadline hash-key KEY` prints one; "
            "`make run` makes a dev key)"
        )


class Runtime:
    """What the routes need, reachable as ``request.app.state.runtime``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.replica = settings.server.replica_name
        key_hashes = settings.session.api_key_hashes()
        self.api_keys = ApiKeys(key_hashes)
        self.model = make_model(settings.model)
        # Read and imported now, so a broken config stops start-up before any store opens.
        path = settings.graph.config_path
        self.deployment = read_deployment(path) if path is not None else None
        self.user_graphs = import_graphs(self.deployment)
        self.custom_auth = _custom_auth(settings, self.deployment)
        self.store_options = _store_options(self.deployment)
        self.webhook_policy = webhook_policy(
            settings.webhook, self.deployment.webhooks if self.deployment else None
        )
        announce(settings, self.user_graphs, has_identity=bool(key_hashes) or self.custom_auth is not None)
        self.stores: Stores | None = None
        self.conversations: Conversations | None = None
        self.assistants: Assistants | None = None
        self.threads: Threads | None = None
        self.thread_upkeep: ThreadUpkeep | None = None
        self.runs: Runs | None = None
        self.webhooks: Webhooks | None = None
        self.crons: Crons | None = None
        self.tenancy: Tenancy | None = None
        # A misconfiguration found only once the stores open (threadline.app stops then).
        self.fatal: ConfigError | None = None
        self.draining = False
        self.streams = 0  # SSE replies and joins open now, at most settings.server.max_streams
        self.principal_streams: Counter[str] = Counter()  # of them, per principal

    def open_stream(self, principal: str) -> str | None:
        """Take one of the replica's stream slots for ``principal``: None when taken, else the
        setting that refuses it (``MAX_STREAMS`` or ``MAX_STREAMS_PER_PRINCIPAL``)."""
        server = self.settings.server
        if self.streams >= server.max_streams:
            return "MAX_STREAMS"
        if self.principal_streams[principal] >= server.max_streams_per_principal:
            return "MAX_STREAMS_PER_PRINCIPAL"
        self.streams += 1
        self.principal_streams[principal] += 1
        return None

    def close_stream(self, principal: str) -> None:
        """Give back a slot taken by :meth:`open_stream`."""
        self.streams -= 1
        self.principal_streams[principal] -= 1
        if self.principal_streams[principal] <= 0:
            del self.principal_streams[principal]

    async def connect(self, stack: AsyncExitStack) -> None:
        """Open the stores, retrying with back-off until they answer (or the app stops)."""
        waits = delays(RETRY_FIRST, RETRY_MAX)
        while True:
            attempt = AsyncExitStack()
            try:
                stores = await Stores.open(self.settings, attempt, self.store_options)
            except Exception as exc:
                await attempt.aclose()
                if not is_store_down(exc):
                    raise
                delay = next(waits)
                log.warning(
                    "stores not reachable; retrying", extra={"error": type(exc).__name__, "retry_in": delay}
                )
                await asyncio.sleep(delay)
                continue
            stack.push_async_callback(attempt.aclose)
            graphs = bind_graphs(self.user_graphs, self.model, stores.checkpointer)
            quota = self.settings.quota
            self.assistants = Assistants(
                graphs,
                stores.assistants,
                per_principal=quota.assistants_per_principal,
                versions_kept=quota.assistant_versions,
                max_bytes=quota.assistant_bytes,
                factories=bind_factories(self.user_graphs, stores.checkpointer),
            )
            self.threads = Threads(
                stores.records, self.assistants, stores.lease, stores.checkpointer, stores.quotas
            )
            self.thread_upkeep = ThreadUpkeep(self.threads)
            stack.push_async_callback(self.thread_upkeep.aclose)
            self.thread_upkeep.start_ttl_sweep(self.settings.server.thread_ttl_sweep_seconds)
            # Without custom auth each principal's items live under a namespace of its own; with
            # it, the @auth.on.store handlers decide (threadline.store.tenant).
            scoped = self.custom_auth is None
            assert stores.store is not None
            server = self.settings.server
            self.tenancy = Tenancy(
                stores.store, stores.quotas, quota.store_item_bytes, scoped, server.max_store_scan
            )
            # Closed after the runs (the stack unwinds in reverse): a run that ends as the
            # replica stops still has its webhook sent.
            webhooks = Webhooks(self.settings.webhook, self.webhook_policy, self._values_of)
            stack.push_async_callback(webhooks.aclose)
            self.runs = Runs(
                self.threads,
                self.assistants,
                stores.records,
                stores.lease,
                heartbeat_seconds=self.settings.turn.lease_seconds,
                timeout_seconds=self.settings.turn.timeout_seconds,
                quota=self.settings.quota,
                tenancy=self.tenancy,
            )
            stack.push_async_callback(self.runs.aclose)
            self.runs.executor.on_finish = webhooks.finished
            self.webhooks = webhooks
            self.runs.start_sweep()
            self.crons = Crons(self.assistants, stores.crons, per_principal=quota.crons_per_principal)
            scheduler = CronScheduler(
                self.crons,
                fire_with(self.runs),
                interval=server.cron_scheduler_sleep_time,
                claim_seconds=self.settings.turn.lease_seconds,
                paused=lambda: self.draining,
            )
            # Stopped before the runs (the exit stack runs callbacks in reverse): no tick is
            # fired into an executor that is closing; a claimed tick is re-claimed elsewhere.
            stack.push_async_callback(scheduler.aclose)
            scheduler.start()
            # /v1 is the built-in chat graph's API, even when the config defines its own `chat`.
            chat = (
                graphs[CHAT] if CHAT not in self.user_graphs else build_graph(self.model, stores.checkpointer)
            )
            self.conversations = Conversations(
                self.threads, chat, turn_timeout=self.settings.turn.timeout_seconds
            )
            self.stores = stores
            log.info("stores open", extra={"backend": self.settings.checkpoint.backend})
            return

    async def _values_of(self, run: RunRecord) -> object:
        """The values of the run's thread now (for its webhook)."""
        assert self.assistants is not None
        state = await self.assistants.graph_of(run).aget_state(thread_config(run.thread_id))
        return state.values

    async def drain(self, seconds: float) -> None:
        """Wait until no turn or run is in flight, at most ``seconds``."""
        waits = [x.idle.wait() for x in (self.conversations, self.runs) if x is not None]
        if waits:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waits), seconds)


def _store_options(deployment: Deployment | None) -> StoreOptions:
    """``langgraph.json``'s ``store``, checked now (an embedding function imported), so a bad one
    stops start-up before any store opens."""
    if deployment is None:
        return StoreOptions()
    return store_options(deployment.store, lambda path, where: import_object(deployment, path, where))


def _custom_auth(settings: Settings, deployment: Deployment | None) -> CustomAuth | None:
    """The handlers of the config's ``auth.path``, or None (``API_KEYS`` alone authenticates)."""
    auth = import_auth(deployment)
    if auth is None:
        return None
    if settings.session.api_keys.strip():
        log.info(
            "custom auth and API_KEYS: X-API-Key requests are API_KEYS principals, all others the handler's"
        )
    return CustomAuth(auth, settings.graph.auth_timeout_seconds)  # type: ignore[arg-type]
