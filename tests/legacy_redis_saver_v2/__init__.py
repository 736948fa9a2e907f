"""The ``redis`` saver as released with format 2 (commit 05b61a6), frozen: do not edit.

``saver.py``, ``records.py``, ``scripts.py`` and ``cache.py`` are that release's
``checkpoint/redis/`` modules with only their imports pointed here. The upgrade tests run it
next to today's saver on one Redis: a rolling update with ``CHECKPOINT_REDIS_FORMAT=2``, a
format-2 thread continuing in format 3, and the previous release failing loudly on format 3.
"""
