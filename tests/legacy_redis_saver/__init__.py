"""The ``redis`` saver as released before format 2 (commit da0f40c), frozen: do not edit.

``saver.py``, ``base.py`` and ``cache.py`` are that release's ``checkpoint/redis.py``,
``checkpoint/base.py`` and ``checkpoint/cache.py`` with only their imports pointed here. The
upgrade tests run it next to today's saver on one Redis (a rolling update), and
``make_fixture.py`` used it to write ``format1_thread.json``: a thread as that release stored
it.
"""
