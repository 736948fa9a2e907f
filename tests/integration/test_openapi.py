"""The OpenAPI document is the truth about every operation (issue 10): schemathesis generates
requests for every operation the running app documents at the time (routes added later are
covered without touching this file) against a real replica over a socket, and checks that no
answer is a 5xx, every status is documented, and every body matches its documented schema.

Bounded: ``TOTAL_CASES`` spread over the operations, the same ones every run (9 operations
today: 1306 cases, 10-25 s here; about a minute at worst on a loaded 2-core machine). Half
the cases carry a valid API key, so they get past authentication into the routes; the rest
exercise it.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from client import API_KEY
from servers import ServiceProcess, redis_env

pytestmark = pytest.mark.integration

# The whole run is bounded, however many operations the app grows: ~1500 cases took ~10 s here.
TOTAL_CASES = 1500


def _operation_count() -> int:
    """Operations the app documents now (built in-process; nothing is started)."""
    from threadline.app import create_app
    from threadline.config import Settings

    return sum(len(item) for item in create_app(Settings.load()).openapi()["paths"].values())


MAX_EXAMPLES = max(10, TOTAL_CASES // _operation_count())
CASES: list[str] = []


@pytest.fixture(scope="module")
def replica(redis_server, tmp_path_factory):
    env = redis_env(redis_server, MAX_MESSAGE_BYTES="1024", QUOTA_THREADS_PER_PRINCIPAL="0")
    proc = ServiceProcess(env, name="openapi", log_dir=tmp_path_factory.mktemp("openapi")).start()
    yield proc
    proc.kill()
    print(f"\nschemathesis: {len(CASES)} cases")


@pytest.fixture(scope="module")
def api_schema(replica):
    return schemathesis.openapi.from_url(f"{replica.url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,  # a loaded machine is slow, never wrong
    suppress_health_check=list(HealthCheck),
    derandomize=True,  # the same cases every run
)
def test_every_operation_conforms(case, replica):
    if len(CASES) % 2 == 0:
        case.headers = {**(case.headers or {}), "X-API-Key": API_KEY}
    CASES.append(case.operation.label)
    case.call_and_validate(
        base_url=replica.url,
        checks=[not_a_server_error, status_code_conformance, response_schema_conformance],
    )
