"""Chaos and continuity: the traffic driver and verdict (driver.py), local chaos and outage tests.

``driver`` is imported by the local chaos tests, the kind e2e suite and ``scripts/chaos.py``.
"""
