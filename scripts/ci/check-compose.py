#!/usr/bin/env python3
"""Checks compose.yaml without a Docker engine (the structure; check-jsonschema checks the syntax
against the compose specification).

Asserts that:
- service `postgres` runs postgres:15 with POSTGRES_USER/PASSWORD/DB, keeps its data in a named
  volume declared at the top level, and has a pg_isready healthcheck for that user and database;
- service `dirichlet-release` is built from `.`, waits for `postgres` to be healthy, publishes
  8080:8080 (the port of the Dockerfile's EXPOSE and DIRICHLET_LISTEN), and gets
  DIRICHLET_DATABASE_URL, DIRICHLET_ADMIN_TOKEN and DIRICHLET_FINGERPRINT_KEY from the environment,
  the last two required (`${VAR:?message}`) and never given a literal value;
- after compose's variable interpolation (emulated here), the database URL is a postgres:// URL to
  the `postgres` service with the same user, password and database as the postgres service, and
  interpolation fails, as `docker compose` would, when a required variable is unset.

Usage: python3 scripts/ci/check-compose.py [compose.yaml [Dockerfile]]   (needs PyYAML)
"""

import re
import sys
from urllib.parse import urlsplit

import yaml

COMPOSE = sys.argv[1] if len(sys.argv) > 1 else "compose.yaml"
DOCKERFILE = sys.argv[2] if len(sys.argv) > 2 else "Dockerfile"
APP, DB = "dirichlet-release", "postgres"
REQUIRED_SECRETS = ("DIRICHLET_ADMIN_TOKEN", "DIRICHLET_FINGERPRINT_KEY")

failures = []


def expect(condition, message):
    if not condition:
        failures.append(message)
    return condition


class Unset(Exception):
    pass


VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])((?:[^{}]|\{[^{}]*\})*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(text, env):
    """Compose's interpolation: $$, $VAR, ${VAR}, ${VAR:-d}, ${VAR-d}, ${VAR:?e}, ${VAR?e}, ${VAR:+r}, ${VAR+r}."""

    def one(m):
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        op, arg = m.group(2), m.group(3) or ""
        value = env.get(name)
        empty = value is None or (op is not None and op.startswith(":") and value == "")
        if op in (":-", "-"):
            return interpolate(arg, env) if empty else value
        if op in (":?", "?"):
            if empty:
                raise Unset(f"{name}: {arg}")
            return value
        if op in (":+", "+"):
            return "" if empty else interpolate(arg, env)
        return value or ""

    return VAR.sub(one, text)


def as_dict(environment):
    """`environment:` as a mapping or a list of KEY=VALUE."""
    if isinstance(environment, dict):
        return {k: ("" if v is None else str(v)) for k, v in environment.items()}
    out = {}
    for item in environment or []:
        key, _, value = str(item).partition("=")
        out[key] = value
    return out


def walk_strings(node, env):
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, dict):
        return {k: walk_strings(v, env) for k, v in node.items()}
    if isinstance(node, list):
        return [walk_strings(v, env) for v in node]
    return node


def dockerfile_port(path):
    """The port of EXPOSE and of ENV DIRICHLET_LISTEN in the Dockerfile's last stage."""
    text = re.sub(r"\\\n", " ", open(path, encoding="utf-8").read())
    last = [line.strip() for line in text.split("FROM ")[-1].splitlines()]
    expose = [line.split()[1].split("/")[0] for line in last if line.upper().startswith("EXPOSE ")]
    listen = [m.group(1) for line in last for m in [re.match(r"ENV\s+DIRICHLET_LISTEN=\S*:(\d+)", line)] if m]
    return expose, listen


with open(COMPOSE, encoding="utf-8") as f:
    raw = yaml.safe_load(f)

services = raw.get("services") or {}
expect(set(services) >= {APP, DB}, f"services must include {APP} and {DB}, found {sorted(services)}")
db, app = services.get(DB, {}), services.get(APP, {})

# ---------------------------------------------------------------- postgres
expect(db.get("image") == "postgres:15", f"{DB}.image must be postgres:15, found {db.get('image')!r}")
db_env_raw = as_dict(db.get("environment"))
for key in ("POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"):
    expect(db_env_raw.get(key), f"{DB}.environment must set {key}")
named_volumes = raw.get("volumes") or {}
mounts = db.get("volumes") or []
data_mounts = [m for m in mounts if isinstance(m, str) and m.split(":")[1:2] == ["/var/lib/postgresql/data"]]
data_mounts += [m.get("source") + ":" + m.get("target") for m in mounts
                if isinstance(m, dict) and m.get("target") == "/var/lib/postgresql/data"]
if expect(data_mounts, f"{DB} must mount a volume at /var/lib/postgresql/data"):
    source = data_mounts[0].split(":")[0]
    expect(source in named_volumes, f"{DB}'s data volume {source!r} must be a named volume declared under top-level volumes:")
health = db.get("healthcheck") or {}
test = health.get("test")
test_text = " ".join(test) if isinstance(test, list) else str(test or "")
expect("pg_isready" in test_text, f"{DB}.healthcheck.test must run pg_isready, found {test!r}")

# ---------------------------------------------------------------- dirichlet-release
build = app.get("build")
context = build if isinstance(build, str) else (build or {}).get("context")
expect(context in (".", "./"), f"{APP}.build must be '.', found {build!r}")
depends = app.get("depends_on") or {}
expect(isinstance(depends, dict) and (depends.get(DB) or {}).get("condition") == "service_healthy",
       f"{APP}.depends_on.{DB}.condition must be service_healthy, found {depends!r}")
ports = [str(p) for p in app.get("ports") or []]
expect("8080:8080" in ports, f"{APP}.ports must publish 8080:8080, found {ports}")
expose, listen = dockerfile_port(DOCKERFILE)
expect(expose == ["8080"], f"{DOCKERFILE} must EXPOSE 8080 once in its last stage, found {expose}")
expect(listen == ["8080"], f"{DOCKERFILE} must set ENV DIRICHLET_LISTEN=…:8080 in its last stage, found {listen}")

app_env_raw = as_dict(app.get("environment"))
for key in ("DIRICHLET_DATABASE_URL",) + REQUIRED_SECRETS:
    expect(key in app_env_raw, f"{APP}.environment must set {key}")
for key in REQUIRED_SECRETS:
    value = app_env_raw.get(key, "")
    expect(re.fullmatch(r"\$\{" + key + r":\?[^}]+\}", value),
           f"{APP}.environment.{key} must be exactly ${{{key}:?message}} (required, no literal secret), found {value!r}")

# Interpolation with the secrets unset must fail, like `docker compose config` does.
for key in REQUIRED_SECRETS:
    env = {k: "x" * 64 for k in REQUIRED_SECRETS if k != key}
    try:
        walk_strings(raw, env)
        failures.append(f"interpolation succeeds without {key}; compose would start without it")
    except Unset:
        pass

# With them set, the database URL must point at the postgres service with its credentials.
env = {"DIRICHLET_ADMIN_TOKEN": "a" * 32, "DIRICHLET_FINGERPRINT_KEY": "0" * 64}
try:
    resolved = walk_strings(raw, env)
except Unset as unset:
    failures.append(f"interpolation fails with the required variables set: {unset}")
    resolved = None
if resolved is not None:
    db_env = as_dict(resolved["services"][DB].get("environment"))
    app_env = as_dict(resolved["services"][APP].get("environment"))
    url = urlsplit(app_env.get("DIRICHLET_DATABASE_URL", ""))
    expect(url.scheme in ("postgres", "postgresql"), f"DIRICHLET_DATABASE_URL must be postgres://…, found {url.geturl()!r}")
    expect(url.hostname == DB, f"DIRICHLET_DATABASE_URL must point at host {DB!r}, found {url.hostname!r}")
    expect(url.port in (None, 5432), f"DIRICHLET_DATABASE_URL port must be 5432, found {url.port}")
    expect(url.username == db_env.get("POSTGRES_USER"), "DIRICHLET_DATABASE_URL user differs from POSTGRES_USER")
    expect(url.password == db_env.get("POSTGRES_PASSWORD"), "DIRICHLET_DATABASE_URL password differs from POSTGRES_PASSWORD")
    expect(url.path.lstrip("/") == db_env.get("POSTGRES_DB"), "DIRICHLET_DATABASE_URL database differs from POSTGRES_DB")
    expect(app_env.get("DIRICHLET_ADMIN_TOKEN") == env["DIRICHLET_ADMIN_TOKEN"], "DIRICHLET_ADMIN_TOKEN is not passed through")
    expect(f"-U {db_env.get('POSTGRES_USER')}" in " ".join(resolved["services"][DB]["healthcheck"]["test"]),
           "the pg_isready healthcheck must use POSTGRES_USER")

if failures:
    print("\n".join(failures))
    print(f"check-compose: {len(failures)} failed")
    sys.exit(1)
print(f"check-compose: {COMPOSE} has the services, healthcheck, dependency, ports and environment required")
