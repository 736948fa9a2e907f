"""The ``memory`` backend: LangGraph's ``InMemorySaver`` plus ``delete_for_runs``.

``InMemorySaver`` (langgraph-checkpoint 4.3) leaves ``delete_for_runs`` to the base class,
which raises; rollback (``multitask_strategy=rollback``, ``cancel?action=rollback``) needs it.
"""

from __future__ import annotations

from collections.abc import Sequence

from langgraph.checkpoint.memory import InMemorySaver


class RollbackInMemorySaver(InMemorySaver):
    """``InMemorySaver`` that also deletes what given runs wrote."""

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint whose metadata ``run_id`` is one of ``run_ids``, with the
        pending writes stored on it (its channel blobs stay: versions carry a random part, so
        no later checkpoint reuses them, and ``delete_thread`` removes them)."""
        runs = {str(r) for r in run_ids}
        if not runs:
            return
        for thread_id, namespaces in self.storage.items():
            for ns, checkpoints in namespaces.items():
                doomed = [
                    cid
                    for cid, (_, metadata, _) in checkpoints.items()
                    if str(self.serde.loads_typed(metadata).get("run_id")) in runs
                ]
                for cid in doomed:
                    del checkpoints[cid]
                    self.writes.pop((thread_id, ns, cid), None)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs` (all in memory: nothing to await)."""
        self.delete_for_runs(run_ids)
