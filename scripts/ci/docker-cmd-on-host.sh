#!/usr/bin/env bash
# Runs the container's start command on the host, against PostgreSQL, without a Docker engine.
#
# What it checks: the ENV, WORKDIR and ENTRYPOINT (and CMD, if any) of the Dockerfile's last stage
# are read from the Dockerfile itself, so this cannot drift from the image. The binary is started
# with exactly that argv (the ENTRYPOINT's /usr/local/bin/dirichlet-release replaced by the host
# build), in a temporary directory standing in for the WORKDIR, in an environment holding only the
# image's ENV plus what `docker run -e` adds (DATABASE_URL = the URL given, as a user of a managed
# database passes it, a random DIRICHLET_ADMIN_TOKEN and DIRICHLET_FINGERPRINT_KEY). Then:
#   - GET /healthz answers 200 {"status":"ok"};
#   - the start line reports the postgres backend and GET /readyz answers 200
#     {"status":"ready","database":"postgres"} (DATABASE_URL was used, not shadowed by the image,
#     and the migrations ran);
#   - GET /v1/datasets answers 401 without a token and 200 with the admin token from the environment;
#   - SIGTERM (what `docker stop` sends) stops the process within STOP_SECS; a non-zero exit
#     status is reported as a warning (as PID 1 in a container, a process without a SIGTERM
#     handler ignores it and is killed after docker's grace period);
#   - every variable of README's configuration table (the table headed `| variable | default |
#     meaning |`, in README.md or docs/*.md) works in the image's environment as on the host:
#     set to a value the binary refuses, it is refused the same way (exit status and message)
#     in both; a log filter (which refuses nothing) set to `error` silences the `listening` event
#     in both. A variable shadowed by the image's ENV (as DATABASE_URL once was by an image's
#     DIRICHLET_DATABASE_URL) fails this. A variable that neither probe shows an effect of is
#     listed and must not be set by the image.
# Exits non-zero on any failure and prints the server's log.
#
# Usage: scripts/ci/docker-cmd-on-host.sh POSTGRES_URL [BINARY]
#   BINARY (or env BIN) defaults to target/release/dirichlet-release, else target/debug/dirichlet-release.
#   HOST_LISTEN=ADDR:PORT overrides the image's DIRICHLET_LISTEN (0.0.0.0:8080) when that port is taken.
#   WAIT_SECS (default 60) bounds the wait for /healthz and /readyz; STOP_SECS (default 15) the stop.
# Needs python3 (to read the Dockerfile) and curl.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
dockerfile=${DOCKERFILE:-$repo/Dockerfile}
pg_url=${1:-}
if [[ ! $pg_url =~ ^postgres(ql)?:// ]]; then
  echo "usage: $0 postgres://USER[:PASSWORD]@HOST[:PORT]/DB [BINARY]" >&2
  exit 2
fi
bin=${2:-${BIN:-}}
if [[ -z $bin ]]; then
  for candidate in "$repo/target/release/dirichlet-release" "$repo/target/debug/dirichlet-release"; do
    if [[ -x $candidate ]]; then bin=$candidate; break; fi
  done
fi
if [[ -z $bin || ! -x $bin ]]; then
  echo "no executable binary: build with 'cargo build --release' or pass BIN=/path/to/dirichlet-release" >&2
  exit 2
fi
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
for tool in python3 curl; do
  command -v "$tool" >/dev/null || { echo "$tool is required" >&2; exit 2; }
done

# ------------------------------------------------------------------ read the Dockerfile
# Records, NUL-terminated: "E:KEY=VALUE" for each ENV of the last stage, "A:ARG" for the argv.
spec=$(mktemp)
workdir=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$spec" "$workdir"
}
trap cleanup EXIT

python3 - "$dockerfile" >"$spec" <<'PY'
import json, re, shlex, sys

text = open(sys.argv[1], encoding="utf-8").read()
# Docker drops comment lines (also inside a continuation), then joins lines ending in a backslash.
lines = [l for l in text.splitlines() if not l.lstrip().startswith("#")]
instructions, buf = [], ""
for line in lines:
    if line.rstrip().endswith("\\"):
        buf += line.rstrip()[:-1] + " "
        continue
    buf += line
    if buf.strip():
        instructions.append(buf.strip())
    buf = ""
stages = []
for ins in instructions:
    op = ins.split(None, 1)[0].upper()
    if op == "FROM":
        stages.append([])
    elif stages:
        stages[-1].append(ins)
if not stages:
    sys.exit("no FROM in the Dockerfile")

env, entrypoint, cmd, workdir = {}, None, None, "/"

def substitute(value):
    # ${VAR}, $VAR, ${VAR:-default}, ${VAR:+alternative} from earlier ENV lines, as Docker does.
    def one(m):
        name = m.group(1) or m.group(4)
        op, arg = m.group(2), m.group(3)
        current = env.get(name, "")
        if op == ":-":
            return current or arg
        if op == ":+":
            return arg if current else ""
        return current
    return re.sub(r"\$\{(\w+)(?:(:[-+])([^}]*))?\}|\$(\w+)", one, value)

for ins in stages[-1]:
    op, _, rest = ins.partition(" ")
    op, rest = op.upper(), rest.strip()
    if op == "ENV":
        if "=" not in rest.split(None, 1)[0]:
            key, _, value = rest.partition(" ")  # legacy form: ENV KEY VALUE
            env[key] = substitute(value.strip())
        else:
            for word in shlex.split(rest, posix=True):
                key, eq, value = word.partition("=")
                if not eq:
                    sys.exit(f"cannot read ENV {rest!r}")
                env[key] = substitute(value)
    elif op == "WORKDIR":
        workdir = substitute(rest)
    elif op in ("ENTRYPOINT", "CMD"):
        try:
            argv = json.loads(rest)
        except ValueError:
            sys.exit(f"{op} must be in exec form (a JSON array): {rest!r}")
        if op == "ENTRYPOINT":
            entrypoint, cmd = argv, None  # a new ENTRYPOINT resets CMD
        else:
            cmd = argv
if not entrypoint:
    sys.exit("the last stage has no ENTRYPOINT")
out = sys.stdout
for key, value in env.items():
    out.write(f"E:{key}={value}\0")
for arg in entrypoint + (cmd or []):
    out.write(f"A:{arg}\0")
out.write(f"W:{workdir}\0")
PY

image_env=()
argv=()
image_workdir=/
while IFS= read -r -d '' record; do
  case $record in
    E:*) image_env+=("${record#E:}") ;;
    A:*) argv+=("${record#A:}") ;;
    W:*) image_workdir=${record#W:} ;;
  esac
done <"$spec"

if [[ $(basename "${argv[0]}") != dirichlet-release ]]; then
  echo "the ENTRYPOINT starts ${argv[0]}, not dirichlet-release: update this script" >&2
  exit 1
fi
argv[0]=$bin

# ------------------------------------------------------------------ the environment
admin_token=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
fingerprint_key=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
listen=
for kv in "${image_env[@]}"; do
  [[ $kv == DIRICHLET_LISTEN=* ]] && listen=${kv#DIRICHLET_LISTEN=}
done
if [[ -n ${HOST_LISTEN:-} ]]; then
  listen=$HOST_LISTEN
fi
[[ -n $listen ]] || { echo "the image sets no DIRICHLET_LISTEN" >&2; exit 1; }
run_env=(
  "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  "HOME=$workdir"
  "${image_env[@]}"
  "DIRICHLET_LISTEN=$listen"
  "DATABASE_URL=$pg_url"
  "DIRICHLET_ADMIN_TOKEN=$admin_token"
  "DIRICHLET_FINGERPRINT_KEY=$fingerprint_key"
)

port=${listen##*:}
host=${listen%:*}
case $host in
  0.0.0.0 | "" | "*") host=127.0.0.1 ;;
  "[::]") host="[::1]" ;;
esac
base="http://$host:$port"

if curl -s -o /dev/null --max-time 2 "$base/" 2>/dev/null; then
  echo "something already answers on $base: free the port or set HOST_LISTEN=127.0.0.1:PORT" >&2
  exit 1
fi

echo "image ENV:  ${image_env[*]}"
echo "WORKDIR:    $image_workdir (here a temporary directory)"
echo "start:      ${argv[*]}"
echo "            (with DIRICHLET_LISTEN=$listen, DATABASE_URL=<given>, DIRICHLET_ADMIN_TOKEN, DIRICHLET_FINGERPRINT_KEY)"

log=$workdir/server.log
out=$workdir/server.out
mkdir -p "$workdir/wd"
(cd "$workdir/wd" && exec env -i "${run_env[@]}" "${argv[@]}") >"$out" 2>"$log" &
server_pid=$!

fail() {
  echo "FAIL: $*" >&2
  echo "---- server log (last 60 lines) ----" >&2
  tail -n 60 "$log" >&2 || true
  exit 1
}

# GET $1 with optional extra curl args; prints "STATUS BODY".
get() {
  local path=$1 out
  shift
  out=$(curl -s --max-time 5 -w '\n%{http_code}' "$@" "$base$path" 2>/dev/null) || out=$'\n000'
  printf '%s %s\n' "${out##*$'\n'}" "${out%$'\n'*}"
}

# wait_for PATH EXPECTED_STATUS PYTHON_CHECK_ON_BODY
wait_for() {
  local path=$1 want=$2 check=$3 deadline=$((SECONDS + ${WAIT_SECS:-60})) reply status body
  while :; do
    kill -0 "$server_pid" 2>/dev/null || fail "the server exited before $path answered"
    reply=$(get "$path")
    status=${reply%% *}
    body=${reply#* }
    if [[ $status == "$want" ]] && python3 -c "import json,sys; b=json.loads(sys.argv[1]); sys.exit(0 if ($check) else 1)" "$body" 2>/dev/null; then
      echo "ok:         GET $path -> $status $body"
      return 0
    fi
    ((SECONDS < deadline)) || fail "GET $path: wanted $want, last answer: $status $body"
    sleep 0.5
  done
}

wait_for /healthz 200 'b == {"status": "ok"}'
grep -q '^dirichlet-release listening on .* (postgres backend)$' "$out" \
  || fail "the start line does not report the postgres backend: $(head -n 1 "$out")"
echo "ok:         $(head -n 1 "$out")"
wait_for /readyz 200 'b == {"status": "ready", "database": "postgres"}'

reply=$(get /v1/datasets)
[[ ${reply%% *} == 401 ]] || fail "GET /v1/datasets without a token: wanted 401, got $reply"
echo "ok:         GET /v1/datasets without a token -> 401"
reply=$(get /v1/datasets -H "Authorization: Bearer $admin_token")
[[ ${reply%% *} == 200 ]] || fail "GET /v1/datasets with the admin token from the environment: wanted 200, got ${reply%% *}"
echo "ok:         GET /v1/datasets with DIRICHLET_ADMIN_TOKEN -> 200"

# ------------------------------------------------------------------ stop it like `docker stop`
kill -TERM "$server_pid"
deadline=$((SECONDS + ${STOP_SECS:-15}))
while kill -0 "$server_pid" 2>/dev/null; do
  ((SECONDS < deadline)) || fail "still running ${STOP_SECS:-15} s after SIGTERM"
  sleep 0.2
done
status=0
wait "$server_pid" || status=$?
server_pid=
if [[ $status == 0 ]]; then
  echo "ok:         stopped by SIGTERM, exit status 0"
else
  echo "WARNING:    exit status $status after SIGTERM (143 = no SIGTERM handler: as PID 1 in the container it would ignore docker stop)" >&2
fi

# ------------------------------------------------------------------ README's variables
python3 - "$repo" "$bin" "$workdir" "$listen" "${image_env[@]}" <<'PY' || exit 1
import glob, os, re, subprocess, sys, tempfile, threading, time

repo, binary, scratch, listen = sys.argv[1:5]
image_env = dict(kv.split("=", 1) for kv in sys.argv[5:])
HEADER = re.compile(r"^\|\s*variable\s*\|\s*default\s*\|")
names, sources = [], []
for path in [os.path.join(repo, "README.md")] + sorted(glob.glob(os.path.join(repo, "docs", "*.md"))):
    in_table = False
    for line in open(path, encoding="utf-8"):
        if HEADER.match(line):
            in_table = True
            sources.append(os.path.relpath(path, repo))
            continue
        if in_table and not line.startswith("|"):
            in_table = False
        if in_table:
            for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1]):
                if name not in names:
                    names.append(name)
if not names:
    sys.exit("FAIL: no configuration table (| variable | default | meaning |) in README.md or docs/*.md")


def run(env, probed=None):
    """The binary in `env` (plus PATH and HOME; DIRICHLET_LISTEN is this script's unless it is the
    `probed` variable), in a fresh directory: (exit status, or None if still running once ready
    or after 10 s; the last line of standard error; standard error)."""
    full = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": scratch,
            "DIRICHLET_LISTEN": listen}
    full.update(env)
    if probed != "DIRICHLET_LISTEN":
        full["DIRICHLET_LISTEN"] = listen
    with tempfile.TemporaryDirectory(dir=scratch) as cwd:
        p = subprocess.Popen([binary], env=full, cwd=cwd, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        err = []
        drain = threading.Thread(target=lambda: err.extend(p.stderr), daemon=True)
        drain.start()
        ready = threading.Event()
        threading.Thread(target=lambda: [ready.set() for line in p.stdout if "ready" in line],
                         daemon=True).start()
        deadline = time.time() + 10
        while p.poll() is None and not ready.is_set() and time.time() < deadline:
            time.sleep(0.05)
        status = p.poll()
        if status is None:
            p.terminate()
            p.wait(10)
        drain.join(5)
    text = "".join(err)
    last = text.strip().splitlines()[-1] if text.strip() else ""
    return status, last, text


# Short (admin tokens are at least 16 characters), not hex, not a number, not a URL or address.
BAD = "!bad"
failures, unprobed = [], []
baseline = run(dict(image_env))
for name in names:
    host = run({name: BAD}, name)
    image = run({**image_env, name: BAD}, name)
    if host[0] not in (None, 0):
        if (host[0], host[1]) != (image[0], image[1]):
            failures.append(f"{name}: refused on the host (status {host[0]}: {host[1]}) but not alike in the "
                            f"image's environment (status {image[0]}: {image[1]}): the image shadows it")
        else:
            print(f"ok:         {name}={BAD} refused alike (status {host[0]})")
        continue
    # A log filter refuses nothing: `error` must silence the info event "listening".
    host = run({name: "error"}, name)
    image = run({**image_env, name: "error"}, name)
    # Only a run that came up (still running once ready) tells: an exit is no silence.
    if baseline[0] is None and "listening" in baseline[2] and host[0] is None and "listening" not in host[2]:
        if image[0] is not None or "listening" in image[2]:
            failures.append(f"{name}=error silences the log on the host but not in the image's environment")
        else:
            print(f"ok:         {name}=error silences the info log alike")
        continue
    unprobed.append(name)
    if name in image_env:
        failures.append(f"{name}: set by the image, and no probe shows that a run-time value wins")
if unprobed:
    print(f"note:       no probe shows an effect of {', '.join(unprobed)} (the image does not set them)")
for failure in failures:
    print(f"FAIL: {failure}", file=sys.stderr)
if failures:
    sys.exit(1)
print(f"ok:         the {len(names)} variables of {', '.join(sources)} work in the image's environment as on the host")
PY
echo "docker-cmd-on-host: the image's start command runs on the PostgreSQL of DATABASE_URL; README's variables work in its environment"
