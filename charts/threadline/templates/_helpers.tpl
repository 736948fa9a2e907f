{{/*
threadline.name: the chart name, or nameOverride.
*/}}
{{- define "threadline.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
threadline.fullname: the prefix of every resource name (fullnameOverride, else release name,
plus the chart name unless the release name already contains it).
*/}}
{{- define "threadline.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
threadline.chart: chart name and version for the helm.sh/chart label.
*/}}
{{- define "threadline.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
threadline.selectorLabels: the labels that select the service's pods (immutable once installed).
*/}}
{{- define "threadline.selectorLabels" -}}
app.kubernetes.io/name: {{ include "threadline.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end }}

{{/*
threadline.labels: common labels of every object of the service component.
*/}}
{{- define "threadline.labels" -}}
helm.sh/chart: {{ include "threadline.chart" . }}
{{ include "threadline.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: threadline
{{- end }}

{{/*
threadline.redis.selectorLabels: the labels that select the in-chart Redis pod.
*/}}
{{- define "threadline.redis.selectorLabels" -}}
app.kubernetes.io/name: {{ include "threadline.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end }}

{{/*
threadline.redis.labels: common labels of the in-chart Redis objects.
*/}}
{{- define "threadline.redis.labels" -}}
helm.sh/chart: {{ include "threadline.chart" . }}
{{ include "threadline.redis.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: threadline
{{- end }}

{{/*
threadline.test.labels: labels of the helm test pod and its key Secret.
*/}}
{{- define "threadline.test.labels" -}}
helm.sh/chart: {{ include "threadline.chart" . }}
app.kubernetes.io/name: {{ include "threadline.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: test
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: threadline
{{- end }}

{{/*
threadline.serviceAccountName: the ServiceAccount the pods run as.
*/}}
{{- define "threadline.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "threadline.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
threadline.image: repository:tag of the service image (tag defaults to appVersion).
*/}}
{{- define "threadline.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
threadline.secretName: the Secret the service reads API_KEYS (and Redis/Postgres secrets) from:
secret.existingSecret, the ExternalSecret's target, or the chart's own Secret.
*/}}
{{- define "threadline.secretName" -}}
{{- if .Values.secret.existingSecret }}
{{- .Values.secret.existingSecret }}
{{- else }}
{{- include "threadline.fullname" . }}
{{- end }}
{{- end }}

{{/*
threadline.redis.host: the Redis host (the in-chart Redis Service when enabled).
*/}}
{{- define "threadline.redis.host" -}}
{{- if .Values.redis.inChart.enabled }}
{{- printf "%s-redis" (include "threadline.fullname" .) }}
{{- else }}
{{- .Values.redis.host }}
{{- end }}
{{- end }}

{{/*
threadline.redis.port: the Redis port (6379 for the in-chart Redis).
*/}}
{{- define "threadline.redis.port" -}}
{{- if .Values.redis.inChart.enabled }}6379{{ else }}{{ .Values.redis.port }}{{ end }}
{{- end }}

{{/*
threadline.redis.url: a Redis URL of `redis.mode`; call with (dict "root" $ "db" N) and, for a
URL with a password, "password" (inserted verbatim after the user, e.g. an ESO template that
percent-encodes it). Without one the password arrives separately as REDIS_PASSWORD.
  standalone redis[s]://[user[:password]@]host:port/db
  sentinel   redis[s]+sentinel://[user[:password]@]host:port,…/serviceName/db
  cluster    redis[s]+cluster://[user[:password]@]host:port,…   (db 0 only: no db)
*/}}
{{- define "threadline.redis.url" -}}
{{- $root := .root }}
{{- $r := $root.Values.redis }}
{{- $scheme := ternary "rediss" "redis" (and $r.tls (not $r.inChart.enabled)) }}
{{- $userinfo := "" }}
{{- if .password }}
{{- $userinfo = printf "%s:%s@" ($r.username | urlquery) .password }}
{{- else if $r.username }}
{{- $userinfo = printf "%s@" ($r.username | urlquery) }}
{{- end }}
{{- if eq $r.mode "sentinel" }}
{{- printf "%s+sentinel://%s%s/%s/%d" $scheme $userinfo (join "," $r.sentinel.hosts) ($r.sentinel.serviceName | urlquery) (int .db) }}
{{- else if eq $r.mode "cluster" }}
{{- printf "%s+cluster://%s%s" $scheme $userinfo (join "," $r.cluster.hosts) }}
{{- else }}
{{- printf "%s://%s%s:%s/%d" $scheme $userinfo (include "threadline.redis.host" $root) (include "threadline.redis.port" $root) (int .db) }}
{{- end }}
{{- end }}

{{/*
threadline.redis.waitReplicas: CHECKPOINT_REDIS_WAIT_REPLICAS; unset means 1 with replicas
(sentinel, cluster), else 0.
*/}}
{{- define "threadline.redis.waitReplicas" -}}
{{- if kindIs "invalid" .Values.config.checkpointRedisWaitReplicas }}
{{- ternary 0 1 (eq .Values.redis.mode "standalone") }}
{{- else }}
{{- .Values.config.checkpointRedisWaitReplicas | int }}
{{- end }}
{{- end }}

{{/*
threadline.redis.ports: the TCP ports the service reaches Redis on (NetworkPolicy): the nodes'
port, and the ports of the sentinels or cluster seeds listed; one per line.
*/}}
{{- define "threadline.redis.ports" -}}
{{- $ports := list (include "threadline.redis.port" . | int) }}
{{- $hosts := list }}
{{- if eq .Values.redis.mode "sentinel" }}{{ $hosts = .Values.redis.sentinel.hosts }}{{ end }}
{{- if eq .Values.redis.mode "cluster" }}{{ $hosts = .Values.redis.cluster.hosts }}{{ end }}
{{- range $hosts }}
{{- $parts := splitList ":" . }}
{{- $port := ternary (last $parts | int) (ternary 26379 6379 (eq $.Values.redis.mode "sentinel")) (gt (len $parts) 1) }}
{{- $ports = append $ports $port }}
{{- end }}
{{- range ($ports | uniq) }}
{{ . }}
{{- end }}
{{- end }}

{{/*
threadline.usesRedis: "true" when a backend needs Redis (sessions or checkpoints).
*/}}
{{- define "threadline.usesRedis" -}}
{{- if or (eq .Values.config.sessionBackend "redis") (has .Values.config.checkpointBackend (list "redis" "redis-stack")) }}true{{ end }}
{{- end }}

{{/*
threadline.redisAuth: where the Redis password comes from, one of
  urls     REDIS_URL and CHECKPOINT_REDIS_URL (password encoded) are keys of the service Secret
  password REDIS_PASSWORD is a key of the service Secret
  inchart  REDIS_PASSWORD comes from the in-chart Redis password Secret
  none     Redis without a password
*/}}
{{- define "threadline.redisAuth" -}}
{{- if .Values.redis.inChart.enabled }}inchart
{{- else if .Values.externalSecret.enabled }}
{{- if eq .Values.externalSecret.redisPasswordAs "url" }}urls{{ else if eq .Values.externalSecret.redisPasswordAs "env" }}password{{ else }}none{{ end }}
{{- else if .Values.secret.existingSecret }}
{{- if eq .Values.secret.existingSecretRedis "urls" }}urls{{ else if eq .Values.secret.existingSecretRedis "password" }}password{{ else }}none{{ end }}
{{- else if .Values.secret.redisPassword }}password
{{- else }}none
{{- end }}
{{- end }}

{{/*
threadline.redis.passwordSecretName: the Secret holding the in-chart Redis password.
*/}}
{{- define "threadline.redis.passwordSecretName" -}}
{{- default (printf "%s-redis" (include "threadline.fullname" .)) .Values.redis.inChart.auth.existingSecret }}
{{- end }}

{{/*
threadline.redis.passwordSecretKey: the key of the in-chart Redis password.
*/}}
{{- define "threadline.redis.passwordSecretKey" -}}
{{- if .Values.redis.inChart.auth.existingSecret }}{{ .Values.redis.inChart.auth.existingSecretKey }}{{ else }}redis-password{{ end }}
{{- end }}

{{/*
threadline.generated: a value generated once per render and kept across upgrades. Call with
(dict "root" $ "secret" NAME "key" KEY): the existing Secret's value (lookup) when there is one,
else 32 random alphanumerics. Memoised on the root context so every template of one render sees
the same value (the test key's hash in API_KEYS must match the key the test pod sends).
*/}}
{{- define "threadline.generated" -}}
{{- $root := .root }}
{{- $cacheKey := printf "_threadline_%s_%s" .secret .key }}
{{- if not (hasKey $root $cacheKey) }}
{{- $value := "" }}
{{- $existing := lookup "v1" "Secret" $root.Release.Namespace .secret }}
{{- if and $existing (hasKey ($existing.data | default dict) .key) }}
{{- $value = index $existing.data .key | b64dec }}
{{- else }}
{{- $value = randAlphaNum 32 }}
{{- end }}
{{- $_ := set $root $cacheKey $value }}
{{- end }}
{{- index $root $cacheKey }}
{{- end }}

{{/*
threadline.testSecretName: the Secret with the helm test's raw API key.
*/}}
{{- define "threadline.testSecretName" -}}
{{- printf "%s-test" (include "threadline.fullname" .) }}
{{- end }}

{{/*
threadline.testHasKey: "true" when the helm test has an API key (its own Secret or a generated
one); empty otherwise.
*/}}
{{- define "threadline.testHasKey" -}}
{{- if or .Values.tests.existingSecret .Values.tests.generateKey }}true{{ end }}
{{- end }}

{{/*
threadline.testKey: the raw API key of the helm test (generated, stable across upgrades).
*/}}
{{- define "threadline.testKey" -}}
{{- include "threadline.generated" (dict "root" . "secret" (include "threadline.testSecretName" .) "key" "THREADLINE_API_KEY") }}
{{- end }}

{{/*
threadline.redis.password: the in-chart Redis password (value, or generated and kept).
*/}}
{{- define "threadline.redis.password" -}}
{{- if .Values.redis.inChart.auth.password }}
{{- .Values.redis.inChart.auth.password }}
{{- else }}
{{- include "threadline.generated" (dict "root" . "secret" (include "threadline.redis.passwordSecretName" .) "key" "redis-password") }}
{{- end }}
{{- end }}

{{/*
threadline.terminationGracePeriodSeconds: preStop sleep + DRAIN_SECONDS + margin, derived so the
three cannot drift apart.
*/}}
{{- define "threadline.terminationGracePeriodSeconds" -}}
{{- add (int .Values.lifecycle.preStopSleepSeconds) (int (ceil .Values.config.drainSeconds)) (int .Values.lifecycle.terminationMarginSeconds) }}
{{- end }}

{{/*
threadline.validate: rules across values that the schema cannot express; each failure names
the values key to change.
*/}}
{{- define "threadline.validate" -}}
{{- $v := .Values }}
{{- if and $v.externalSecret.enabled $v.secret.existingSecret }}
{{- fail "externalSecret.enabled and secret.existingSecret exclude each other: the ExternalSecret creates the service Secret; unset secret.existingSecret" }}
{{- end }}
{{- if $v.externalSecret.enabled }}
{{- if not $v.externalSecret.secretStoreName }}
{{- fail "externalSecret.secretStoreName is required when externalSecret.enabled=true" }}
{{- end }}
{{- if not $v.externalSecret.remoteRefs.apiKeys.key }}
{{- fail "externalSecret.remoteRefs.apiKeys.key is required when externalSecret.enabled=true (API_KEYS; auth cannot be turned off)" }}
{{- end }}
{{- if and (ne $v.externalSecret.redisPasswordAs "none") (not $v.redis.inChart.enabled) (not $v.externalSecret.remoteRefs.redisPassword.key) }}
{{- fail "externalSecret.remoteRefs.redisPassword.key is required unless externalSecret.redisPasswordAs=none" }}
{{- end }}
{{- if and (eq $v.config.checkpointBackend "postgres") (not $v.externalSecret.remoteRefs.postgresUrl.key) }}
{{- fail "externalSecret.remoteRefs.postgresUrl.key is required when config.checkpointBackend=postgres" }}
{{- end }}
{{- if and $v.secret.modelApiKeyEnv (not $v.externalSecret.remoteRefs.modelApiKey.key) }}
{{- fail "externalSecret.remoteRefs.modelApiKey.key is required when secret.modelApiKeyEnv is set (the provider's API key)" }}
{{- end }}
{{- end }}
{{- include "threadline.validateModel" . }}
{{- if not (or $v.secret.existingSecret $v.externalSecret.enabled) }}
{{- if and (not $v.secret.apiKeys) (not $v.tests.enabled) }}
{{- fail "secret.apiKeys is required (principal:sha256hex entries; `python -m threadline hash-key KEY`), or set secret.existingSecret or externalSecret.enabled" }}
{{- end }}
{{- if and (eq $v.config.checkpointBackend "postgres") (not $v.secret.postgresUrl) }}
{{- fail "secret.postgresUrl is required when config.checkpointBackend=postgres (or use secret.existingSecret / externalSecret)" }}
{{- end }}
{{- end }}
{{- if and $v.graphs.config $v.graphs.langgraphJson }}
{{- fail "graphs.config and graphs.langgraphJson exclude each other: set the path of a langgraph.json in the image, or its content" }}
{{- end }}
{{- if and $v.graphs.files (not $v.graphs.langgraphJson) }}
{{- fail "graphs.files needs graphs.langgraphJson (the langgraph.json that names them)" }}
{{- end }}
{{- if and $v.redis.inChart.enabled $v.secret.redisPassword }}
{{- fail "secret.redisPassword must be empty when redis.inChart.enabled=true: set redis.inChart.auth.password instead" }}
{{- end }}
{{- if and (eq $v.config.checkpointBackend "redis-stack") (ne (int $v.redis.checkpointDb) 0) }}
{{- fail "redis.checkpointDb must be 0 when config.checkpointBackend=redis-stack (RediSearch indexes exist only in db 0)" }}
{{- end }}
{{- if and (ne $v.redis.mode "standalone") $v.redis.inChart.enabled }}
{{- fail (printf "redis.mode=%s needs an external Redis: set redis.inChart.enabled=false (the in-chart Redis is a single node)" $v.redis.mode) }}
{{- end }}
{{- if and (eq $v.redis.mode "sentinel") (not $v.redis.sentinel.hosts) }}
{{- fail "redis.sentinel.hosts is required when redis.mode=sentinel (host:port of each sentinel)" }}
{{- end }}
{{- if and (eq $v.redis.mode "cluster") (not $v.redis.cluster.hosts) }}
{{- fail "redis.cluster.hosts is required when redis.mode=cluster (host:port of some cluster nodes)" }}
{{- end }}
{{- if and (ne $v.redis.mode "standalone") (eq $v.config.checkpointBackend "redis-stack") }}
{{- fail "config.checkpointBackend=redis-stack supports redis.mode=standalone only: use config.checkpointBackend=redis with Sentinel or Cluster" }}
{{- end }}
{{- if and (eq $v.config.checkpointBackend "redis") (ne $v.redis.mode "cluster") (eq (int $v.redis.checkpointDb) (int $v.redis.sessionDb)) }}
{{- fail "redis.checkpointDb must differ from redis.sessionDb (sessions db 0, checkpoints db 1; see adr/0003)" }}
{{- end }}
{{- $multi := or $v.autoscaling.enabled (gt (int $v.replicaCount) 1) }}
{{- if and $multi (has $v.config.checkpointBackend (list "memory" "sqlite")) }}
{{- fail (printf "config.checkpointBackend=%s keeps state in one pod: set replicaCount=1 and autoscaling.enabled=false, or use redis" $v.config.checkpointBackend) }}
{{- end }}
{{- /* The turn lease (one turn at a time per thread, fenced) lives in the checkpoint Redis;
       other backends serialize turns only within one process (adr/0002). */}}
{{- if and $multi (eq $v.config.checkpointBackend "postgres") }}
{{- fail "config.checkpointBackend=postgres serializes turns only within one process (the cross-replica turn lease needs the redis backends): set replicaCount=1 and autoscaling.enabled=false" }}
{{- end }}
{{- /* redis-stack shares the lease but its saver cannot check the fencing token, so a paused
       replica could fork a thread: one replica only (adr/0002). */}}
{{- if and $multi (eq $v.config.checkpointBackend "redis-stack") }}
{{- fail "config.checkpointBackend=redis-stack cannot fence checkpoint writes across replicas: set replicaCount=1 and autoscaling.enabled=false, or use redis" }}
{{- end }}
{{- if and $multi (eq $v.config.sessionBackend "memory") }}
{{- fail "config.sessionBackend=memory keeps sessions in one pod: set replicaCount=1 and autoscaling.enabled=false, or use redis" }}
{{- end }}
{{- if and $v.autoscaling.enabled (gt (int $v.autoscaling.minReplicas) (int $v.autoscaling.maxReplicas)) }}
{{- fail "autoscaling.minReplicas must not exceed autoscaling.maxReplicas" }}
{{- end }}
{{- end }}

{{/*
threadline.env: the service container's environment beyond the ConfigMap: pod name, API keys
(the user's entries plus the helm test key's hash), Redis password or URLs, Postgres DSN.
*/}}
{{- define "threadline.env" -}}
{{- $secret := include "threadline.secretName" . }}
{{- $auth := include "threadline.redisAuth" . }}
- name: REPLICA_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- if and .Values.tests.enabled .Values.tests.generateKey (not .Values.tests.existingSecret) }}
# The user's API_KEYS followed by the helm test key's hash ($(VAR) expands earlier entries).
- name: THREADLINE_USER_API_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: API_KEYS
- name: API_KEYS
  value: {{ printf "$(THREADLINE_USER_API_KEYS),helm-test:%s" (include "threadline.testKey" . | sha256sum) | quote }}
{{- else }}
- name: API_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: API_KEYS
{{- end }}
{{- if include "threadline.usesRedis" . }}
{{- if eq $auth "urls" }}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: REDIS_URL
- name: CHECKPOINT_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: CHECKPOINT_REDIS_URL
{{- else if eq $auth "password" }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: REDIS_PASSWORD
{{- else if eq $auth "inchart" }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "threadline.redis.passwordSecretName" . }}
      key: {{ include "threadline.redis.passwordSecretKey" . }}
{{- end }}
{{- if eq .Values.redis.mode "sentinel" }}
{{- /* The sentinels' own password: optional, so an existingSecret without it is fine. */}}
- name: REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: REDIS_SENTINEL_PASSWORD
      optional: true
{{- end }}
{{- end }}
{{- if eq .Values.config.checkpointBackend "postgres" }}
- name: CHECKPOINT_POSTGRES_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: CHECKPOINT_POSTGRES_URL
{{- end }}
{{- /* Optional: a Secret without it sends webhooks unsigned. */}}
- name: WEBHOOK_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: WEBHOOK_SECRET
      optional: true
{{- with .Values.secret.modelApiKeyEnv }}
# The model provider's API key (read by its client library, not by threadline's settings).
- name: {{ . }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ . }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
threadline.graphs.mountPath: where `graphs.langgraphJson` and `graphs.files` are mounted.
*/}}
{{- define "threadline.graphs.mountPath" -}}
/etc/threadline/graphs
{{- end }}

{{/*
threadline.graphs.configPath: LANGGRAPH_CONFIG, or empty to leave the image's own value.
*/}}
{{- define "threadline.graphs.configPath" -}}
{{- if .Values.graphs.langgraphJson }}
{{- printf "%s/langgraph.json" (include "threadline.graphs.mountPath" .) }}
{{- else }}
{{- .Values.graphs.config }}
{{- end }}
{{- end }}

{{/*
threadline.validateModel: the model provider's key: named, and given where the chart makes the
Secret; names a reserved variable never.
*/}}
{{- define "threadline.validateModel" -}}
{{- $v := .Values }}
{{- $env := $v.secret.modelApiKeyEnv }}
{{- if and $env (has $env (list "API_KEYS" "REDIS_PASSWORD" "REDIS_SENTINEL_PASSWORD" "REDIS_URL" "CHECKPOINT_REDIS_URL" "CHECKPOINT_POSTGRES_URL" "REPLICA_NAME")) }}
{{- fail (printf "secret.modelApiKeyEnv=%s is one of the service's own variables: name the provider's (e.g. OPENAI_API_KEY)" $env) }}
{{- end }}
{{- if and $env (not (or $v.secret.existingSecret $v.externalSecret.enabled)) (not $v.secret.modelApiKey) }}
{{- fail (printf "secret.modelApiKey is required when secret.modelApiKeyEnv is set (the raw %s), or keep it in secret.existingSecret / externalSecret" $env) }}
{{- end }}
{{- if and $v.secret.modelApiKey (not $env) }}
{{- fail "secret.modelApiKeyEnv is required with secret.modelApiKey (the variable the provider reads, e.g. OPENAI_API_KEY)" }}
{{- end }}
{{- end }}

{{/*
threadline.modelEgress: "true" when the NetworkPolicy lets the pods reach the model provider
(`networkPolicy.modelEgress.enabled`, by default when `config.model` is not `builtin`).
*/}}
{{- define "threadline.modelEgress" -}}
{{- $enabled := .Values.networkPolicy.modelEgress.enabled }}
{{- if kindIs "invalid" $enabled }}
{{- $enabled = ne .Values.config.model "builtin" }}
{{- end }}
{{- if $enabled }}true{{ end }}
{{- end }}
