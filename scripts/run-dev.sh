#!/usr/bin/env bash
# `make run`: the service on its embedded default (SQLite checkpoints, memory sessions, the
# built-in model) with a local dev API key kept in .dev-api-key (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
KEY_FILE=.dev-api-key
[ -s "$KEY_FILE" ] || (umask 077 && $PY -c 'import secrets; print("tl-dev-" + secrets.token_urlsafe(24))' > "$KEY_FILE")
KEY=$(cat "$KEY_FILE")
export API_KEYS="${API_KEYS:-dev:$($PY -m threadline hash-key "$KEY")}"
export CHECKPOINT_BACKEND="${CHECKPOINT_BACKEND:-sqlite}"
export PORT="${PORT:-8080}"
# Browser apps on this machine (agent-chat-ui, a useStream app's dev server) on any port.
export CORS_ALLOW_ORIGINS="${CORS_ALLOW_ORIGINS:-http://localhost:*,http://127.0.0.1:*}"
cat <<MSG
threadline on http://127.0.0.1:${PORT}  (checkpoints: ${CHECKPOINT_BACKEND}, model: ${MODEL:-builtin})
dev API key (in ${KEY_FILE}):  export KEY=\$(cat ${KEY_FILE})
  curl -s -X POST localhost:${PORT}/v1/threads -H "X-API-Key: \$KEY"
  curl -s -X POST localhost:${PORT}/v1/threads/THREAD_ID/messages -H "X-API-Key: \$KEY" \\
       -H 'Content-Type: application/json' -d '{"content": "hello"}'
MSG
exec $PY -m threadline serve --host "${HOST:-127.0.0.1}"
