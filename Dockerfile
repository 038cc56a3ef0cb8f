# syntax=docker/dockerfile:1
#
# dirichlet-release: build with `docker build -t dirichlet-release .`, run with
#   docker run -p 8080:8080 -e DIRICHLET_ADMIN_TOKEN=... -e DIRICHLET_FINGERPRINT_KEY=... \
#              -e DIRICHLET_DATABASE_URL=postgres://USER:PASSWORD@HOST:5432/DB dirichlet-release
# Without DIRICHLET_DATABASE_URL the service keeps a SQLite file in /var/lib/dirichlet-release
# (mount a volume there to keep it). config/default.toml and migrations/ are compiled into the
# binary, so the runtime image holds the binary only.
# scripts/docker-cmd-on-host.sh reads the ENV and ENTRYPOINT lines of the last stage below and runs
# the same command on the host (CI): keep them single key=value pairs and exec form.

############################ builder ############################
FROM rust:1-bookworm AS builder
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /build
ENV CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0 \
    SQLX_OFFLINE=true

# Dependency layer: compile every dependency against stub targets, so that a change to the
# sources alone reuses this layer. Targets declared in Cargo.toml ([[bench]], [[test]],
# [[example]]) get stubs too, since cargo refuses a manifest whose declared files are missing.
# .cargo/config.toml carries build flags (chacha20's AVX-512 backend): the dependency layer
# must be built with them too, or the second build would recompile everything.
COPY .cargo .cargo
COPY Cargo.toml Cargo.lock ./
RUN set -eux; \
    mkdir -p src; \
    echo 'fn main() {}' > src/main.rs; \
    : > src/lib.rs; \
    awk -F'"' '/^\[\[bench\]\]/ { d = "benches"; next } \
               /^\[\[test\]\]/ { d = "tests"; next } \
               /^\[\[example\]\]/ { d = "examples"; next } \
               /^\[/ { d = ""; next } \
               d != "" && /^name[ \t]*=/ { print d "/" $2 ".rs" }' Cargo.toml \
      | while read -r stub; do mkdir -p "$(dirname "$stub")"; echo 'fn main() {}' > "$stub"; done; \
    cargo build --release --locked --bin dirichlet-release; \
    rm -rf src target/release/.fingerprint/dirichlet-release-* \
           target/release/deps/dirichlet_release-* target/release/deps/libdirichlet_release-*

# The real sources (.dockerignore keeps target/, .git and database files out).
COPY . .
RUN set -eux; \
    touch src/main.rs src/lib.rs; \
    cargo build --release --locked --bin dirichlet-release; \
    install -D -m 0755 target/release/dirichlet-release /out/dirichlet-release

############################ runtime ############################
FROM debian:bookworm-slim AS runtime

# Unpinned on purpose: bookworm only ships security fixes for these, and the exact versions it
# carries change with each fix (a pin would break the build the day one lands).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10001 dirichlet \
    && useradd --system --uid 10001 --gid dirichlet --no-create-home \
       --home-dir /var/lib/dirichlet-release --shell /usr/sbin/nologin dirichlet \
    && install -d -o dirichlet -g dirichlet -m 0750 /var/lib/dirichlet-release

COPY --from=builder /out/dirichlet-release /usr/local/bin/dirichlet-release

WORKDIR /var/lib/dirichlet-release
USER 10001:10001

# Set DIRICHLET_DATABASE_URL, DIRICHLET_ADMIN_TOKEN and DIRICHLET_FINGERPRINT_KEY at run time;
# every other key of config/default.toml can be overridden as DIRICHLET_<KEY>.
ENV DIRICHLET_LISTEN=0.0.0.0:8080
ENV DIRICHLET_DATABASE_URL=sqlite:///var/lib/dirichlet-release/dirichlet-release.db
ENV DIRICHLET_LOG_FORMAT=json

EXPOSE 8080

# The port comes from DIRICHLET_LISTEN, so overriding it at run time keeps the check working.
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["/bin/sh", "-c", "curl -fsS -o /dev/null \"http://127.0.0.1:${DIRICHLET_LISTEN##*:}/healthz\" || exit 1"]

ENTRYPOINT ["/usr/local/bin/dirichlet-release"]
