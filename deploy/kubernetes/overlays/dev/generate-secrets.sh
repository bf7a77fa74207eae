#!/usr/bin/env bash
# The dev overlay's secret files, made on this machine and never committed (see .gitignore):
#   certs/    a development CA and one certificate per service (adk-mesh-dev-certs, which is
#             adk_mesh.mesh.pki as `adk-mesh up` uses it), naming <service>.adk-mesh.svc;
#   secrets/  database.env (url=...) and postgres.env (POSTGRES_PASSWORD=...) with a random
#             password for the dev PostgreSQL.
# Run again, it keeps what is there and still valid. PYTHON: a Python with adk-mesh installed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}
"$PYTHON" "$here/../../../container/bin/adk-mesh-dev-certs" "$here/certs" \
    concierge=concierge-front,concierge-front.adk-mesh.svc planner logistics writer tools \
    --namespace adk-mesh >/dev/null
mkdir -p "$here/secrets"
if [ ! -s "$here/secrets/postgres.env" ] || [ ! -s "$here/secrets/database.env" ]; then
    password=$("$PYTHON" -c 'import secrets; print(secrets.token_urlsafe(24))')
    (umask 077
     printf 'POSTGRES_PASSWORD=%s\n' "$password" > "$here/secrets/postgres.env"
     printf 'url=postgresql://adk:%s@postgres.adk-mesh.svc:5432/adk_mesh\n' "$password" \
         > "$here/secrets/database.env")
fi
echo "dev secrets in $here/certs and $here/secrets"
