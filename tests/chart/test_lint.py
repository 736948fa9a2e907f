"""`helm lint --strict` and the values schema."""

from __future__ import annotations

import pytest

from chart.bundle import CHART, CI_VALUES, helm, helm_template

pytestmark = pytest.mark.chart


def test_ci_values_files_cover_the_configurations() -> None:
    names = {p.name for p in CI_VALUES}
    for wanted in (
        "default-values.yaml",
        "external-secrets-values.yaml",
        "existing-secret-values.yaml",
        "inchart-redis-values.yaml",
        "kind-values.yaml",
        "postgres-values.yaml",
    ):
        assert wanted in names


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda p: p.name if p else "defaults")
def test_lint_strict(values) -> None:
    args = ["lint", "--strict", str(CHART)]
    if values:
        args += ["-f", str(values)]
    proc = helm(*args, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["autoscaling.minReplicas=three"], "/autoscaling/minReplicas"),
        (["nosuchkey=1"], "additional properties 'nosuchkey' not allowed"),
        (["config.checkpointBackend=mongo"], "/config/checkpointBackend"),
        (["redis.port=redis"], "/redis/port"),
        (["redis.mode=replicated"], "/redis/mode"),
        (["redis.sentinel.hosts={a/b}"], "/redis/sentinel/hosts"),
        (["secret.apiKeys=alice:not-a-hash"], "/secret/apiKeys"),
        (["config.drainSeconds=-1"], "/config/drainSeconds"),
    ],
)
def test_schema_rejects(sets: list[str], message: str) -> None:
    proc = helm_template(sets=sets, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr


@pytest.mark.parametrize(
    ("sets", "key"),
    [
        (["externalSecret.enabled=true"], "externalSecret.secretStoreName"),
        (
            ["externalSecret.enabled=true", "externalSecret.secretStoreName=s"],
            "externalSecret.remoteRefs.apiKeys.key",
        ),
        (
            ["externalSecret.enabled=true", "secret.existingSecret=x"],
            "secret.existingSecret",
        ),
        (["tests.enabled=false"], "secret.apiKeys"),
        (
            [
                "config.checkpointBackend=postgres",
                "autoscaling.enabled=false",
                "replicaCount=1",
            ],
            "secret.postgresUrl",
        ),
        (
            [
                "config.checkpointBackend=postgres",
                "secret.postgresUrl=postgresql://db/x",
            ],
            "config.checkpointBackend=postgres",
        ),
        (["config.checkpointBackend=redis-stack"], "redis.checkpointDb"),
        (["redis.checkpointDb=0"], "redis.checkpointDb"),
        (["redis.mode=sentinel"], "redis.sentinel.hosts"),
        (["redis.mode=cluster"], "redis.cluster.hosts"),
        (
            ["redis.mode=cluster", "redis.cluster.hosts={c:6379}", "redis.inChart.enabled=true"],
            "redis.inChart.enabled",
        ),
        (
            ["config.checkpointBackend=redis-stack", "redis.checkpointDb=0", "redis.sessionDb=1"],
            "config.checkpointBackend=redis-stack",
        ),
        (
            [
                "redis.mode=sentinel",
                "redis.sentinel.hosts={s:26379}",
                "config.checkpointBackend=redis-stack",
                "redis.checkpointDb=0",
                "replicaCount=1",
                "autoscaling.enabled=false",
            ],
            "config.checkpointBackend=redis-stack",
        ),
        (["config.checkpointBackend=sqlite"], "config.checkpointBackend=sqlite"),
        (["config.sessionBackend=memory"], "config.sessionBackend=memory"),
        (["autoscaling.minReplicas=11"], "autoscaling.minReplicas"),
        (
            ["redis.inChart.enabled=true", "secret.redisPassword=x"],
            "redis.inChart.auth.password",
        ),
    ],
)
def test_guards_name_the_values_key(sets: list[str], key: str) -> None:
    proc = helm_template(sets=sets, check=False)
    assert proc.returncode != 0, f"{sets} rendered"
    assert key in proc.stderr


def test_single_replica_redis_stack_renders() -> None:
    docs = helm_template(
        sets=[
            "config.checkpointBackend=redis-stack",
            "redis.checkpointDb=0",
            "redis.sessionDb=1",
            "autoscaling.enabled=false",
            "replicaCount=1",
        ]
    )
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 1


@pytest.mark.parametrize(
    "sets",
    [
        ["redis.mode=sentinel", "redis.sentinel.hosts={s1:26379,s2}"],
        ["redis.mode=cluster", "redis.cluster.hosts={c1:6379}", "redis.checkpointDb=0"],  # dbs unused
    ],
)
def test_each_guard_has_a_passing_case(sets: list[str]) -> None:
    """…and with replicas the chart has every turn confirmed by one (WAIT 1) unless told."""
    (cm,) = [d for d in helm_template(sets=sets) if d["kind"] == "ConfigMap"]
    assert cm["data"]["CHECKPOINT_REDIS_WAIT_REPLICAS"] == "1"
    assert cm["data"]["REDIS_URL"].startswith(
        ("redis+sentinel://s1:26379,s2/mymaster/0", "redis+cluster://c1:6379")
    )
    (cm,) = [
        d
        for d in helm_template(sets=[*sets, "config.checkpointRedisWaitReplicas=0"])
        if d["kind"] == "ConfigMap"
    ]
    assert cm["data"]["CHECKPOINT_REDIS_WAIT_REPLICAS"] == "0"


def test_single_replica_sqlite_renders() -> None:
    docs = helm_template(
        sets=[
            "config.checkpointBackend=sqlite",
            "config.sessionBackend=memory",
            "autoscaling.enabled=false",
            "replicaCount=1",
        ]
    )
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    mounts = {m["mountPath"] for m in deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert mounts == {"/tmp", "/data"}
