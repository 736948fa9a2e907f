"""The LangGraph API below HTTP: assistants (one per graph), threads with records and status,
runs executed under the thread's turn lease with their events in the record store.

Nothing here knows HTTP; :mod:`threadline.api.langgraph` translates requests into calls on
:class:`~threadline.runs.threads.Threads` and :class:`~threadline.runs.runs.Runs`
(whose :class:`~threadline.runs.executor.Executor` runs them).
"""
