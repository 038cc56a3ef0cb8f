#!/usr/bin/env bash
# Builds the image from the Dockerfile and tests it as a user runs it:
#   1. the image: built with docker, or with podman in Docker format (podman's default OCI format
#      silently drops SHELL and HEALTHCHECK); it runs as uid 10001 and has the HEALTHCHECK;
#   2. SQLite: the service in a container with a named volume answers /readyz, serves a release,
#      reports healthy (`healthcheck run`), stops promptly with status 0 on SIGTERM (`stop`), and
#      a new container on the same volume still holds the ledger;
#   3. PostgreSQL: the same image against a fresh database on the host's server
#      (DIRICHLET_TEST_POSTGRES_URL, default postgres://postgres@127.0.0.1:5432/postgres), named
#      by DATABASE_URL as `docker run -e DATABASE_URL=…` does;
#   4. compose: `compose up` of the repository's compose.yaml (the service and a PostgreSQL), a
#      release through the published port, the service up without a restart, `compose down`.
#      How this differs from `docker compose up` on a machine with a registry: postgres:15 is the
#      stand-in below; Debian's podman-compose 1.0.3 does not implement `condition:
#      service_healthy` (it starts the services in dependency order) and podman without systemd
#      runs health checks only on request, so the service starts beside a PostgreSQL that is
#      still initialising and waits for it (the test counts its retries and checks that it was
#      not restarted); if port 8080 is taken on this machine, a copy of compose.yaml publishes a
#      free port instead.
#
# Where no container registry is reachable (BASES=auto finds out; BASES=bootstrap forces it), the
# base images are bootstrapped from the Debian archive with mmdebstrap instead of pulled:
#   - for debian:bookworm-slim, a minbase bookworm with debuerreotype's slim exclusions (what the
#     official image is built with), bookworm-updates and bookworm-security included;
#   - for rust:1-bookworm, the same plus Debian's rustc-web and cargo-web (bookworm-security
#     carries a current Rust for the browsers' sake; bookworm's own rustc 1.63 is older than the
#     crate's rust-version): a Debian-built toolchain from the archive, nothing copied from this
#     host;
#   - for postgres:15 (compose.yaml), Debian's postgresql-15 on that slim base with
#     scripts/ci/container/postgres-entrypoint.sh, tagged docker.io/library/postgres:15 in this
#     script's private image store so that compose.yaml's service uses it unchanged.
# The bootstrapped tarballs are cached under target/container/bases for a week (security fixes),
# keyed by their recipe; REFRESH_BASES=1 rebuilds them.
#
# Fetching crates inside the build may need this host's CA bundle (networks that inspect TLS) and
# its cargo configuration: they are passed as build secrets, read-only, never stored in the image
# (the bundle of CARGO_HTTP_CAINFO, else SSL_CERT_FILE, else /etc/ssl/certs/ca-certificates.crt;
# $CARGO_HOME/config.toml if there is one); HTTP(S)_PROXY/NO_PROXY are passed as build arguments,
# which are not kept in the image either.
#
# podman runs with its own store and settings under target/container (CONTAINERS_STORAGE_CONF,
# CONTAINERS_CONF), so that nothing here touches the machine's images and containers, and with
# what a sandboxed root needs (each setting says why). Installs what is missing with apt-get
# (podman, runc, iptables, uidmap, mmdebstrap, podman-compose, curl, jq, postgresql-client).
#
# Usage: scripts/ci/container-test.sh          (ENGINE=docker|podman, BASES=auto|bootstrap|official,
#                                            IMAGE=name:tag, KEEP=1 keeps the test containers)
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
work=$repo/target/container
mkdir -p "$work/bases"
image=${IMAGE:-localhost/dirichlet-release:test}
bases=${BASES:-auto}
started=$(date +%s)
phase_started=$started
timings=()
phase() {
  local now
  now=$(date +%s)
  if [[ -n ${phase_name:-} ]]; then timings+=("$(printf '%5ss  %s' $((now - phase_started)) "$phase_name")"); fi
  phase_name=$1
  phase_started=$now
  printf '\n=== [%4ss] %s\n' $((now - started)) "$1"
}
fail() {
  echo "container-test: FAIL: $*" >&2
  exit 1
}
run_id="dr-ct-$$-$(date +%s)"

# ------------------------------------------------------------------ tools
phase "tools"
need=()
command -v curl >/dev/null || need+=(curl)
command -v jq >/dev/null || need+=(jq)
command -v psql >/dev/null || need+=(postgresql-client)
engine=${ENGINE:-}
if [[ -z $engine ]]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then engine=docker; else engine=podman; fi
fi
if [[ $engine == podman ]]; then
  # runc: crun 1.8 refuses hosts with a hybrid cgroup v1/v2 hierarchy. iptables: netavark's
  # firewall rules.
  for tool in podman runc iptables podman-compose newuidmap; do
    command -v "$tool" >/dev/null || need+=("$tool")
  done
  [[ -x /usr/lib/podman/netavark || -x /usr/libexec/podman/netavark ]] || need+=(netavark)
  [[ -x /usr/lib/podman/aardvark-dns || -x /usr/libexec/podman/aardvark-dns ]] || need+=(aardvark-dns)
fi
[[ $bases == official ]] || command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
if ((${#need[@]})); then
  # Package names where they differ from the command's.
  packages=("${need[@]/#newuidmap/uidmap}")
  echo "installing: ${packages[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi

if [[ $engine == podman ]]; then
  cat >"$work/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$work/storage"
runroot = "$work/run"
EOF
  # default_ulimits: podman's defaults raise RLIMIT_NOFILE and RLIMIT_NPROC, which a root
  # without CAP_SYS_RESOURCE (a sandbox) may not do; these are ample for the service.
  cat >"$work/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=16384:16384", "nproc=32768:32768"]
[network]
network_backend = "netavark"
[engine]
runtime = "runc"
EOF
  export CONTAINERS_STORAGE_CONF=$work/storage.conf CONTAINERS_CONF=$work/containers.conf
  compose=(podman-compose)
  format=(--format docker)
else
  compose=(docker compose)
  format=()
fi
"$engine" --version
"${compose[@]}" version 2>/dev/null | grep -iv "^exit code" | head -2 || true

image_exists() { "$engine" image inspect "$1" >/dev/null 2>&1; }
if [[ $engine == podman ]]; then
  # podman 4.3 schedules health checks with systemd timers and reports, as errors, that there is
  # no systemd to ask (a container without it): health checks are run on request instead
  # (`healthy` below). Those lines alone are dropped.
  podman() {
    command podman "$@" 2> >(grep -v 'unable to get systemd connection' >&2)
  }
  podman-compose() {
    command podman-compose "$@" 2> >(grep -v 'unable to get systemd connection' >&2)
  }
fi

# ------------------------------------------------------------------ base images
phase "base images ($bases)"
if [[ $bases == auto ]]; then
  if timeout 60 "$engine" pull -q docker.io/library/debian:bookworm-slim >/dev/null 2>&1; then
    bases=official
  else
    echo "no registry answers: bootstrapping the base images from the Debian archive"
    bases=bootstrap
  fi
fi
build_args=()
if [[ $bases == bootstrap ]]; then
  mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
  security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
  sources=("deb $mirror bookworm main" "deb $mirror bookworm-updates main"
           "deb $security bookworm-security main")
  # debuerreotype-slimify's exclusions, as in the official slim images.
  slim=()
  for dir in doc groff info linda lintian/overrides locale man; do
    slim+=("--dpkgopt=path-exclude=/usr/share/$dir/*")
  done
  slim+=("--dpkgopt=path-include=/usr/share/doc/*/copyright")
  week=$(date -u +%G-W%V)
  # bootstrap NAME TAG [mmdebstrap options...]: the tarball (cached) imported as TAG.
  bootstrap() {
    local name=$1 tag=$2 key tar
    shift 2
    key=$(printf '%s\n' "$week" "$@" "${sources[@]}" | sha256sum | cut -c1-12)
    tar=$work/bases/$name-$key.tar
    if [[ ${REFRESH_BASES:-0} == 1 || ! -s $tar ]]; then
      echo "mmdebstrap $name ($key)"
      rm -f "$work/bases/$name"-*.tar
      mmdebstrap --variant=minbase --mode=auto --format=tar --quiet \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr "$@" bookworm "$tar.part" "${sources[@]}"
      mv "$tar.part" "$tar"
    fi
    if ! image_exists "$tag-$key"; then
      "$engine" import -q "${IMPORT_CHANGES[@]}" "$tar" "$tag-$key" >/dev/null
    fi
    "$engine" tag "$tag-$key" "$tag"
    echo "$tag: $(du -m "$tar" | cut -f1) MB tarball"
  }
  IMPORT_CHANGES=(--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' --change 'CMD ["bash"]')
  bootstrap slim localhost/dirichlet-bootstrap/debian:bookworm-slim "${slim[@]}"
  bootstrap rust localhost/dirichlet-bootstrap/rust:bookworm \
    --include=ca-certificates,libc6-dev,rustc-web,cargo-web
  rust_version=$(sed -n 's/^rust-version *= *"\(.*\)"/\1/p' Cargo.toml)
  have=$("$engine" run --rm localhost/dirichlet-bootstrap/rust:bookworm rustc --version | cut -d' ' -f2)
  if [[ $(printf '%s\n' "$rust_version" "$have" | sort -V | head -n1) != "$rust_version" ]]; then
    fail "the archive's rustc-web is $have, older than the crate's rust-version $rust_version"
  fi
  echo "builder: rustc $have (rust-version $rust_version)"
  # The stand-in for postgres:15: no cluster from the package (the entry point makes one in the
  # volume), PATH and PGDATA as in the official image.
  IMPORT_CHANGES=(--change 'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
                  --change 'ENV PGDATA=/var/lib/postgresql/data' --change 'EXPOSE 5432'
                  --change 'STOPSIGNAL SIGINT' --change 'CMD ["postgres"]'
                  --change 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]')
  # mmdebstrap runs the hooks with the root directory as $1.
  # shellcheck disable=SC2016
  bootstrap postgres docker.io/library/postgres:15 "${slim[@]}" --include=postgresql-15 \
    --essential-hook='mkdir -p "$1/etc/postgresql-common/createcluster.d" && echo "create_main_cluster = false" > "$1/etc/postgresql-common/createcluster.d/no-main-cluster.conf"' \
    --customize-hook="copy-in $repo/scripts/ci/container/postgres-entrypoint.sh /usr/local/bin" \
    --customize-hook='mv "$1/usr/local/bin/postgres-entrypoint.sh" "$1/usr/local/bin/docker-entrypoint.sh"'
  build_args=(--pull=never
              --build-arg RUST_IMAGE=localhost/dirichlet-bootstrap/rust:bookworm
              --build-arg RUNTIME_IMAGE=localhost/dirichlet-bootstrap/debian:bookworm-slim)
fi

# ------------------------------------------------------------------ build
phase "build ($engine)"
secrets=()
cainfo=${CARGO_HTTP_CAINFO:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
[[ -s $cainfo ]] && secrets+=(--secret "id=cargo_cainfo,src=$cainfo")
cargo_config=${CARGO_HOME:-$HOME/.cargo}/config.toml
[[ -s $cargo_config ]] && secrets+=(--secret "id=cargo_config,src=$cargo_config")
for var in HTTP_PROXY HTTPS_PROXY NO_PROXY http_proxy https_proxy no_proxy; do
  [[ -n ${!var:-} ]] && build_args+=(--build-arg "$var=${!var}")
done
build_started=$(date +%s)
"$engine" build "${format[@]}" "${build_args[@]}" "${secrets[@]}" -t "$image" .
build_secs=$(($(date +%s) - build_started))
# compose.yaml names the image dirichlet-release:latest: it is this one.
"$engine" tag "$image" localhost/dirichlet-release:latest

inspect=$("$engine" image inspect "$image")
user=$(jq -r '.[0].Config.User' <<<"$inspect")
[[ $user == 10001:10001 ]] || fail "the image runs as '$user', not 10001:10001"
# docker keeps the health check in .Config, podman beside it.
health=$(jq -c '.[0] | (.Config.Healthcheck // .Healthcheck).Test // empty' <<<"$inspect")
[[ $health == '["CMD","/usr/local/bin/dirichlet-release","healthcheck"]' ]] \
  || fail "the image has no HEALTHCHECK running the healthcheck subcommand (found: '$health'); podman needs --format docker"
size=$("$engine" image inspect "$image" --format '{{.Size}}')
binary=$("$engine" run --rm --entrypoint /bin/sh "$image" -c 'stat -c %s /usr/local/bin/dirichlet-release')
"$engine" run --rm --entrypoint /bin/sh "$image" -c '! command -v curl' >/dev/null \
  || fail "curl is in the runtime image"
echo "image $image: $((size / 1000000)) MB, binary $((binary / 1000000)) MB, user $user, HEALTHCHECK $health"

# ------------------------------------------------------------------ helpers
containers=()
volumes=()
pg_admin=${DIRICHLET_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}
pg_db=
compose_file=
cleanup() {
  local status=$?
  if [[ ${KEEP:-0} != 1 ]]; then
    if [[ -n $compose_file ]]; then
      (cd "$repo" && "${compose[@]}" -p "$run_id" -f "$compose_file" down -v >/dev/null 2>&1) || true
    fi
    for c in "${containers[@]}"; do "$engine" rm -f "$c" >/dev/null 2>&1 || true; done
    for v in "${volumes[@]}"; do "$engine" volume rm -f "$v" >/dev/null 2>&1 || true; done
    [[ -n $pg_db ]] && psql "$pg_admin" -qc "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null 2>&1
  fi
  exit "$status"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
token() { python3 -c 'import secrets; print(secrets.token_hex(24))'; }
admin=$(token)
fingerprint=$(python3 -c 'import secrets; print(secrets.token_hex(32))')

# wait_ready BASE CONTAINER: /readyz answers 200 within 120 s (the container still running).
wait_ready() {
  local base=$1 container=$2 deadline=$((SECONDS + 120))
  until curl -sf -o /dev/null --max-time 2 "$base/readyz"; do
    if [[ $("$engine" inspect -f '{{.State.Running}}' "$container" 2>/dev/null) != true ]]; then
      "$engine" logs "$container" 2>&1 | tail -n 20 >&2
      fail "$container exited before it was ready"
    fi
    ((SECONDS < deadline)) || { "$engine" logs "$container" 2>&1 | tail -n 20 >&2; fail "$container not ready in 120 s"; }
    sleep 0.5
  done
  echo "ok: $container ready: $(curl -s "$base/readyz")"
}

# release BASE: a dataset and one release; prints the dataset id.
release() {
  local base=$1 id status
  id=$(curl -sf -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' \
    -d '{"name": "container-test", "budget": {"order": 2, "epsilon": 4}}' "$base/v1/datasets" | jq -r .id)
  [[ -n $id && $id != null ]] || fail "cannot create a dataset on $base"
  status=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $admin" \
    -H 'Content-Type: application/json' -d '{"counts": [5, 3, 2], "epsilon": 1}' \
    "$base/v1/datasets/$id/releases")
  [[ $status == 201 ]] || fail "a release on $base answered $status"
  echo "$id"
}

# healthy CONTAINER: the image's HEALTHCHECK passes, run by the engine.
healthy() {
  local container=$1
  if [[ $engine == podman ]]; then
    # podman schedules health checks with systemd timers; without systemd it runs them on request.
    podman healthcheck run "$container" || fail "podman healthcheck run $container: unhealthy"
  else
    local deadline=$((SECONDS + 60))
    until [[ $(docker inspect -f '{{.State.Health.Status}}' "$container") == healthy ]]; do
      ((SECONDS < deadline)) || fail "$container not healthy in 60 s"
      sleep 1
    done
  fi
  echo "ok: $container healthy"
}

# stop_clean CONTAINER: SIGTERM (`stop`), stopped within 10 s with exit status 0.
stop_clean() {
  local container=$1 t0 t1 code
  t0=$(date +%s%N)
  "$engine" stop -t 10 "$container" >/dev/null
  t1=$(date +%s%N)
  code=$("$engine" inspect -f '{{.State.ExitCode}}' "$container")
  [[ $code == 0 ]] || fail "$container exited with $code after SIGTERM"
  (((t1 - t0) / 1000000 < 10000)) || fail "$container took $(((t1 - t0) / 1000000)) ms to stop"
  echo "ok: $container stopped by SIGTERM in $(((t1 - t0) / 1000000)) ms, exit status 0"
}

# ------------------------------------------------------------------ SQLite, a volume, a new container
phase "SQLite: a volume kept across containers, non-root, healthcheck, graceful stop"
volume=$run_id-data
"$engine" volume create "$volume" >/dev/null
volumes+=("$volume")
port=$(free_port)
run_sqlite() {
  "$engine" run -d --name "$1" -p "127.0.0.1:$port:8080" -v "$volume:/var/lib/dirichlet-release" \
    -e DIRICHLET_ADMIN_TOKEN="$admin" -e DIRICHLET_FINGERPRINT_KEY="$fingerprint" "$image" >/dev/null
  containers+=("$1")
}
run_sqlite "$run_id-sqlite-1"
base=http://127.0.0.1:$port
wait_ready "$base" "$run_id-sqlite-1"
uid=$("$engine" exec "$run_id-sqlite-1" id -u)
[[ $uid == 10001 ]] || fail "the service runs as uid $uid"
echo "ok: the service runs as uid $uid"
dataset=$(release "$base")
healthy "$run_id-sqlite-1"
stop_clean "$run_id-sqlite-1"
run_sqlite "$run_id-sqlite-2"
wait_ready "$base" "$run_id-sqlite-2"
kept=$(curl -sf -H "Authorization: Bearer $admin" "$base/v1/datasets/$dataset" | jq -r '.releases')
[[ $kept == 1 ]] || fail "a new container on the volume sees $kept releases of the dataset, not 1"
echo "ok: a new container on the same volume holds the ledger (1 release)"
stop_clean "$run_id-sqlite-2"

# ------------------------------------------------------------------ PostgreSQL on the host
phase "PostgreSQL: a fresh database on the host's server"
pg_db=dr_ct_$(date +%s)_$$
psql "$pg_admin" -qc "CREATE DATABASE $pg_db"
port=$(free_port)
base=http://127.0.0.1:$port
# The host's server listens on loopback: the container shares the host's network.
"$engine" run -d --name "$run_id-pg" --network host -e DIRICHLET_LISTEN="127.0.0.1:$port" \
  -e DATABASE_URL="${pg_admin%/*}/$pg_db" -e DIRICHLET_ADMIN_TOKEN="$admin" \
  -e DIRICHLET_FINGERPRINT_KEY="$fingerprint" "$image" >/dev/null
containers+=("$run_id-pg")
wait_ready "$base" "$run_id-pg"
[[ $(curl -s "$base/readyz" | jq -r .database) == postgres ]] || fail "not on PostgreSQL"
release "$base" >/dev/null
echo "ok: a release on PostgreSQL"
healthy "$run_id-pg"
stop_clean "$run_id-pg"

# ------------------------------------------------------------------ compose
phase "compose up/down (${compose[*]})"
compose_file=compose.yaml
if curl -s -o /dev/null --max-time 2 http://127.0.0.1:8080/ 2>/dev/null; then
  # compose.yaml publishes 8080, which something on this machine answers: a copy publishing a
  # free port instead (the only change).
  port=$(free_port)
  compose_file=$work/compose-$run_id.yaml
  sed "s/\"8080:8080\"/\"$port:8080\"/" compose.yaml >"$compose_file"
  echo "port 8080 is taken here: $compose_file publishes $port instead"
else
  port=8080
fi
base=http://127.0.0.1:$port
export DIRICHLET_ADMIN_TOKEN=$admin DIRICHLET_FINGERPRINT_KEY=$fingerprint
POSTGRES_PASSWORD=$(token)
export POSTGRES_PASSWORD
compose_up_started=$(date +%s)
"${compose[@]}" -p "$run_id" -f "$compose_file" up -d
app=$("$engine" ps -a --filter "label=com.docker.compose.project=$run_id" \
  --filter "label=com.docker.compose.service=dirichlet-release" --format '{{.Names}}' | head -n1)
db=$("$engine" ps -a --filter "label=com.docker.compose.project=$run_id" \
  --filter "label=com.docker.compose.service=postgres" --format '{{.Names}}' | head -n1)
[[ -n $app && -n $db ]] || fail "compose did not create both services"
wait_ready "$base" "$app"
echo "compose: ready $(($(date +%s) - compose_up_started)) s after up"
release "$base" >/dev/null
echo "ok: a release through compose's published port"
restarts=$("$engine" inspect -f '{{.RestartCount}}' "$app")
[[ $restarts == 0 ]] || fail "the service was restarted $restarts times before it came up"
waits=$("$engine" logs "$app" 2>&1 | grep -c 'database unreachable at start-up' || true)
echo "ok: the service came up without a restart (it waited through $waits retries for PostgreSQL)"
healthy "$db"
healthy "$app"
"${compose[@]}" -p "$run_id" -f "$compose_file" down
[[ -z $("$engine" ps -a --filter "label=com.docker.compose.project=$run_id" --format '{{.Names}}') ]] \
  || fail "compose down left containers behind"
echo "ok: compose down removed the containers"

phase "done"
echo
echo "container-test: passed in $(($(date +%s) - started)) s (image build $build_secs s, bases: $bases, engine: $engine)"
printf '%s\n' "${timings[@]}"
echo "image $image: $((size / 1000000)) MB, binary $((binary / 1000000)) MB"
