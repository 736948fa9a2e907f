"""Assistants: one built-in per served graph, and the ones clients create, each a graph with
its own configuration, kept in versions.

A built-in assistant is addressable by graph id or by ``uuid5(NAMESPACE_GRAPH, graph_id)``,
the scheme langgraph-api uses for the assistant it makes of each graph, so a client that stored
an assistant id keeps it across servers and restarts. Built-ins are the deployment's
``langgraph.json``: the same for every principal, and no client may change or delete them.

A created assistant belongs to its principal, as a thread does, and lives in the record stores
(:mod:`threadline.runs.assistant_records`): on Redis every replica sees it at once. A change
(``PATCH``) makes a new version; ``set latest`` makes an older one current again. A run takes
its assistant's config and context when it is created (:meth:`Assistants.run_payload`), so a
later change, or a takeover on another replica, runs it as it was asked for.

One assistant (:class:`~threadline.runs.assistant.Assistant`), the built-ins' ids and how a
graph is opened are :mod:`threadline.runs.assistant`'s. A graph of ``langgraph.json`` may be a
factory (ADR 0018): :meth:`Assistant.opened` is the one place a run, a schema or a drawing gets
its graph, the factory's for that call (a plain graph's at no cost); what needs only the
graph's shape reads :attr:`Assistant.graph`.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import orjson
from langgraph.graph.state import CompiledStateGraph

from threadline import access
from threadline.access import Filters
from threadline.agent.factories import GraphFactory
from threadline.quotas import ASSISTANT_BYTES, ASSISTANTS, QuotaExceeded
from threadline.runs.assistant import BUILTIN_TIME, Assistant, assistant_id_of, synced
from threadline.runs.assistant_records import AssistantRecords, LocalAssistantRecords
from threadline.runs.errors import Conflict, Invalid, NotFound
from threadline.runs.graph_schemas import graph_drawing, graph_schemas
from threadline.runs.records import RunRecord, now_iso

# The run kwarg naming the graph and version of a created assistant a run was created with.
ASSISTANT_KWARG = "assistant"
# The fields a version holds (the current record adds version, created_at, updated_at).
_VERSIONED = ("graph_id", "config", "context", "metadata", "name", "description")
# Attempts at a change racing changes from other replicas before it is refused.
_CHANGE_ATTEMPTS = 8


def _builtin_time(n: int) -> str:
    return (BUILTIN_TIME + timedelta(seconds=n)).isoformat()


class Assistants:
    """The served graphs' built-in assistants and the ones principals create.

    Args:
        graphs: graph id → graph compiled with threadline's checkpointer.
        records: where created assistants are kept (in this process if None).
        factories: graph id → the factory of that graph, when ``langgraph.json`` names one.
        per_principal: ``QUOTA_ASSISTANTS_PER_PRINCIPAL`` (0: no limit).
        versions_kept: ``QUOTA_ASSISTANT_VERSIONS``, versions kept per assistant.
        max_bytes: ``QUOTA_ASSISTANT_BYTES``, JSON bytes of one assistant (0: no limit).
        default_graph_id: the graph whose state a thread without a ``graph_id`` is read with
            (``/v1`` threads are chat threads).
    """

    def __init__(
        self,
        graphs: dict[str, CompiledStateGraph],
        records: AssistantRecords | None = None,
        *,
        per_principal: int = 0,
        versions_kept: int = 10,
        max_bytes: int = 0,
        default_graph_id: str = "chat",
        factories: dict[str, GraphFactory] | None = None,
    ) -> None:
        if not graphs:
            raise ValueError("at least one graph is needed")
        self._graphs = graphs
        self._factories = factories or {}
        self._by_graph: dict[str, Assistant] = {}
        for n, (gid, g) in enumerate(graphs.items()):
            made, factory = _builtin_time(n), self._factories.get(gid)
            self._by_graph[gid] = Assistant(
                assistant_id_of(gid), gid, g, created_at=made, updated_at=made, factory=factory
            )
        self._by_uuid = {a.assistant_id: a for a in self._by_graph.values()}
        self.default_graph_id = default_graph_id if default_graph_id in graphs else next(iter(graphs))
        self.records = records if records is not None else LocalAssistantRecords()
        self.per_principal, self.versions_kept, self.max_bytes = (
            per_principal,
            max(1, versions_kept),
            max_bytes,
        )

    # -- the graphs and the built-ins --

    def graph_ids(self) -> list[str]:
        return list(self._graphs)

    def _graph(self, graph_id: str) -> CompiledStateGraph:
        """Raises NotFound (as langgraph-api's 404) naming the graphs served."""
        if graph_id not in self._graphs:
            raise NotFound("graph", f"graph {graph_id!r} is not served (served: {', '.join(self._graphs)})")
        return self._graphs[graph_id]

    def _builtin(self, assistant_id: str) -> Assistant | None:
        return self._by_uuid.get(assistant_id) or self._by_graph.get(assistant_id)

    def for_thread(self, metadata: dict[str, Any]) -> Assistant:
        """The assistant whose graph reads a thread with ``metadata`` (its ``graph_id``)."""
        return self._by_graph.get(str(metadata.get("graph_id")), self._by_graph[self.default_graph_id])

    def graph_id_of(self, run: RunRecord) -> str:
        """The graph a run was created with."""
        made = run.kwargs.get(ASSISTANT_KWARG)
        if made is not None:
            return made["graph_id"]
        builtin = self._builtin(run.assistant_id)
        return builtin.graph_id if builtin is not None else run.assistant_id

    def graph_of(self, run: RunRecord) -> CompiledStateGraph:
        """The graph a run was created with. Raises NotFound: not served here."""
        return self._graph(self.graph_id_of(run))

    async def for_run(self, run: RunRecord) -> Assistant:
        """The assistant a run executes with: a built-in, or the version of its owner's assistant
        the run was created with (the current one if that version is no longer kept).

        Raises:
            NotFound: the assistant was deleted, or this replica does not serve its graph (a
                mixed rollout).
        """
        made = run.kwargs.get(ASSISTANT_KWARG)
        if made is None:
            builtin = self._builtin(run.assistant_id)
            if builtin is None:
                raise NotFound("assistant")
            return builtin
        self._graph(made["graph_id"])
        raw = await self.records.version(run.owner, run.assistant_id, made["version"])
        if raw is None:
            raw = await self.records.current(run.owner, run.assistant_id)
        found = self._decoded(raw) if raw is not None else None
        if found is None:
            raise NotFound("assistant", "the run's assistant was deleted")
        return found

    # -- what a principal sees --

    async def get(self, owner: str, assistant_id: str, filters: Filters | None = None) -> Assistant:
        """By UUID (a built-in or one of ``owner``'s) or graph id.

        Raises:
            NotFound: no such assistant for ``owner``, or one ``filters`` exclude.
            Invalid: neither a UUID nor a graph id (langgraph-api answers that 422, naming
                the graphs).
        """
        builtin = self._builtin(assistant_id)
        if builtin is not None:
            if not access.matches(builtin.metadata, filters):
                raise NotFound("assistant")
            return builtin
        try:
            uuid.UUID(assistant_id)
        except ValueError:
            graphs = ", ".join(self._by_graph)
            raise Invalid(f"assistant_id: neither an assistant UUID nor a graph id ({graphs})") from None
        raw = await self.records.current(owner, assistant_id)
        found = self._decoded(raw) if raw is not None else None
        if found is None or not access.matches(found.metadata, filters):
            raise NotFound("assistant")
        return found

    async def search(
        self,
        owner: str,
        graph_id: str | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
        filters: Filters | None = None,
    ) -> list[Assistant]:
        """The built-ins, then ``owner``'s assistants (at most the quota's count), that match."""
        if graph_id is not None:
            self._graph(graph_id)
        # In the order they were made (a Redis hash has none), which ties in a sort keep.
        mine = sorted(
            (a for raw in await self.records.all(owner) if (a := self._decoded(raw)) is not None),
            key=lambda a: a.created_at,
        )
        return [
            a
            for a in [*self._by_graph.values(), *mine]
            if (graph_id is None or a.graph_id == graph_id)
            and (name is None or name.lower() in (a.name or a.graph_id).lower())
            and access.holds(a.metadata, metadata)
            and access.matches(a.metadata, filters)
        ]

    # -- changes --

    async def create(
        self, owner: str, body: dict[str, Any], if_exists: str = "raise", assistant_id: str | None = None
    ) -> Assistant:
        """Store a new assistant of ``owner`` at version 1; ``body`` holds the versioned fields.

        Raises:
            NotFound: no such graph.
            Conflict: ``assistant_id`` is taken (and ``if_exists`` is ``raise``), or a built-in's.
            Invalid: both ``config.configurable`` and ``context``; past ``QUOTA_ASSISTANT_BYTES``.
            QuotaExceeded: past ``QUOTA_ASSISTANTS_PER_PRINCIPAL``.
        """
        assistant_id = assistant_id or str(uuid.uuid4())
        if self._builtin(assistant_id) is not None:
            raise Conflict("assistant_exists", "assistant_id: a built-in assistant has it")
        version = self._checked({"description": None, **body, "name": body.get("name") or "Untitled"})
        now = now_iso()
        current = {
            **version,
            "assistant_id": assistant_id,
            "version": 1,
            "created_at": now,
            "updated_at": now,
        }
        stored = await self.records.create(
            owner,
            assistant_id,
            orjson.dumps(current),
            orjson.dumps({**version, "assistant_id": assistant_id, "version": 1, "created_at": now}),
            self.per_principal,
        )
        if stored == -1:
            raise QuotaExceeded(ASSISTANTS, self.per_principal)
        if stored == 0:
            if if_exists == "do_nothing":
                return await self.get(owner, assistant_id)
            raise Conflict("assistant_exists", "an assistant with this assistant_id exists")
        return self._decoded(orjson.dumps(current))  # type: ignore[return-value]

    async def patch(
        self, owner: str, assistant_id: str, changes: dict[str, Any], filters: Filters | None = None
    ) -> Assistant:
        """A new version of ``owner``'s assistant with ``changes`` (``metadata`` merged into the
        current one's, the other fields replacing theirs), made current.

        Raises:
            NotFound, Conflict (a built-in; too many concurrent changes), Invalid.
        """
        synced(changes.get("config") or {}, changes.get("context"))  # refused before any read

        def changed(current: dict[str, Any], last: int) -> tuple[dict[str, Any], int]:
            config, context = synced(changes.get("config") or {}, changes.get("context"))
            version = {
                "graph_id": changes.get("graph_id") or current["graph_id"],
                "config": config or current["config"],
                "context": context if context is not None else current["context"],
                "metadata": {**current["metadata"], **(changes.get("metadata") or {})},
                "name": changes["name"] if changes.get("name") is not None else current["name"],
                "description": changes["description"]
                if changes.get("description") is not None
                else current["description"],
            }
            return self._checked(version, in_step=True), last + 1

        return await self._change(owner, assistant_id, filters, changed)

    async def set_latest(
        self, owner: str, assistant_id: str, version: int, filters: Filters | None = None
    ) -> Assistant:
        """Make ``version`` of ``owner``'s assistant current again.

        Raises:
            NotFound: no such assistant, or no such version kept.
        """

        def chosen(current: dict[str, Any], last: int, kept: dict[int, bytes]) -> dict[str, Any]:
            if version not in kept:
                raise NotFound("assistant_version", f"no version {version} of this assistant is kept")
            return {k: v for k, v in orjson.loads(kept[version]).items() if k in _VERSIONED}

        return await self._change(owner, assistant_id, filters, None, chosen, version)

    async def _change(self, owner, assistant_id, filters, changed, chosen=None, number=None) -> Assistant:
        """Compare-and-set the current record, again while other replicas change it meanwhile."""
        if self._builtin(assistant_id) is not None:
            raise Conflict(
                "builtin_assistant", "built-in assistants follow langgraph.json; create one instead"
            )
        for _ in range(_CHANGE_ATTEMPTS):
            raw = await self.records.current(owner, assistant_id)
            found = self._decoded(raw) if raw is not None else None
            if raw is None or found is None or not access.matches(found.metadata, filters):
                raise NotFound("assistant")
            current = orjson.loads(raw)
            last, kept = await self.records.versions(owner, assistant_id)
            now = now_iso()
            if chosen is not None:
                fields, new_version = chosen(current, last, kept), None
                current.update(fields, version=number, updated_at=now)
            else:
                fields, number = changed(current, last)
                current.update(fields, version=number, updated_at=now)
                body = {**fields, "assistant_id": assistant_id, "version": number, "created_at": now}
                new_version = (number, orjson.dumps(body), self.versions_kept)
            record = orjson.dumps(current)
            if await self.records.replace(owner, assistant_id, raw, record, new_version):
                return self._decoded(record)  # type: ignore[return-value]
        raise Conflict("assistant_busy", "the assistant changed too often meanwhile; retry")

    async def delete(self, owner: str, assistant_id: str, filters: Filters | None = None) -> None:
        """Raises NotFound (none for ``owner`` or excluded by ``filters``), Conflict (a built-in)."""
        if self._builtin(assistant_id) is not None:
            raise Conflict(
                "builtin_assistant", "built-in assistants follow langgraph.json; they cannot be deleted"
            )
        await self.get(owner, assistant_id, filters)
        if not await self.records.delete(owner, assistant_id):
            raise NotFound("assistant")

    async def versions(
        self, owner: str, assistant_id: str, metadata: dict[str, Any] | None, filters: Filters | None = None
    ) -> list[dict[str, Any]]:
        """The kept versions of an assistant, newest first, that match ``metadata``."""
        builtin = self._builtin(assistant_id)
        if builtin is not None:
            await self.get(owner, assistant_id, filters)
            found = [{k: v for k, v in builtin.as_dict().items() if k != "updated_at"}]
        else:
            await self.get(owner, assistant_id, filters)
            _, kept = await self.records.versions(owner, assistant_id)
            found = [orjson.loads(kept[n]) for n in sorted(kept, reverse=True)]
        return [
            v
            for v in found
            if access.holds(v["metadata"], metadata) and access.matches(v["metadata"], filters)
        ]

    # -- runs --

    @staticmethod
    def run_payload(assistant: Assistant, payload: dict[str, Any]) -> dict[str, Any]:
        """The run's body plus, for a created assistant, the graph and version it is run with
        (:data:`ASSISTANT_KWARG`: its config is applied when it executes, not copied into
        each run, which counts toward its thread's ``QUOTA_THREAD_BYTES``)."""
        if assistant.builtin:
            return payload
        return {**payload, ASSISTANT_KWARG: {"graph_id": assistant.graph_id, "version": assistant.version}}

    # -- records --

    def _checked(self, version: dict[str, Any], in_step: bool = False) -> dict[str, Any]:
        """The versioned fields, config and context in step; raises NotFound (graph), Invalid."""
        self._graph(version["graph_id"])
        if not in_step:
            version["config"], version["context"] = synced(
                version.get("config") or {}, version.get("context")
            )
        version["context"] = version["context"] or {}
        version["metadata"] = version.get("metadata") or {}
        checked = {k: version.get(k) for k in _VERSIONED}
        if self.max_bytes and len(orjson.dumps(checked)) > self.max_bytes:
            raise Invalid(f"assistant: larger than {ASSISTANT_BYTES}={self.max_bytes} bytes of JSON", 413)
        return checked

    def _decoded(self, raw: bytes) -> Assistant | None:
        """The assistant of a stored record; None if its graph is no longer served."""
        fields = orjson.loads(raw)
        graph = self._graphs.get(fields["graph_id"])
        if graph is None:
            return None
        fields.setdefault("updated_at", fields["created_at"])  # a version's record has no update time
        return Assistant(
            graph=graph,
            factory=self._factories.get(fields["graph_id"]),
            **{k: fields[k] for k in Assistant.__dataclass_fields__ if k not in ("graph", "factory")},
        )

    # -- the graph's drawing and schemas (a factory called as for "assistants.read") --

    @staticmethod
    async def graph_json(
        assistant: Assistant, xray: bool | int, user: Any = None, store: Any = None
    ) -> dict[str, Any]:
        async with assistant.opened(
            "assistants.read", assistant.read_config(user), user=user, store=store
        ) as graph:
            return await graph_drawing(graph, xray)

    @staticmethod
    async def schemas(assistant: Assistant, user: Any = None, store: Any = None) -> dict[str, Any]:
        async with assistant.opened(
            "assistants.read", assistant.read_config(user), user=user, store=store
        ) as graph:
            return graph_schemas(assistant.graph_id, graph)

    @staticmethod
    async def subgraphs(
        assistant: Assistant, namespace: str | None, recurse: bool, user: Any = None, store: Any = None
    ) -> dict[str, Any]:
        async with assistant.opened(
            "assistants.read", assistant.read_config(user), user=user, store=store
        ) as graph:
            return {
                ns: graph_schemas(assistant.graph_id, sub)
                for ns, sub in graph.get_subgraphs(namespace=namespace, recurse=recurse)
            }
