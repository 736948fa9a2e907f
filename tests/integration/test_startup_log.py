"""The start-up log names the graphs served (and the model and checkpointer), and a service
with no API key says loudly that it will refuse every request — as it then does (401)."""

from __future__ import annotations

import httpx
import pytest

from client import API_KEYS

pytestmark = pytest.mark.integration

REFUNDS = "examples/refunds/langgraph.json"
WARNING = "no API keys configured (API_KEYS is empty): every request will be refused with 401"


def local_env(tmp_path, **extra: str) -> dict[str, str]:
    return {
        "CHECKPOINT_BACKEND": "sqlite",
        "CHECKPOINT_SQLITE_PATH": str(tmp_path / "checkpoints.sqlite"),
        "SESSION_BACKEND": "memory",
        **extra,
    }


def test_the_start_up_log_lists_the_graphs_served(tmp_path, start_replica) -> None:
    from pathlib import Path

    config = Path(__file__).resolve().parents[2] / REFUNDS
    replica = start_replica(local_env(tmp_path, API_KEYS=API_KEYS, LANGGRAPH_CONFIG=str(config)))
    logs = replica.logs()
    assert "serving graphs: chat, refunds" in logs
    assert '"model": "builtin"' in logs and '"checkpoint_backend": "sqlite"' in logs
    assert WARNING not in logs


def test_no_api_keys_warns_at_start_up_and_refuses_requests(tmp_path, start_replica) -> None:
    replica = start_replica(local_env(tmp_path, API_KEYS=""))
    logs = replica.logs()
    assert WARNING in logs and '"level": "WARNING"' in logs[logs.index("no API keys") - 200 :]
    assert "serving graphs: chat" in logs
    assert httpx.post(f"{replica.url}/v1/threads", timeout=10).status_code == 401
