# syntax=docker/dockerfile:1
#
# dirichlet-release: build with `docker build -t dirichlet-release .` (or scripts/ci/container-test.sh,
# which also builds where no registry is reachable, and tests the image), run with
#   docker run -p 8080:8080 -e DIRICHLET_ADMIN_TOKEN=... -e DIRICHLET_FINGERPRINT_KEY=... \
#              -e DATABASE_URL=postgres://USER:PASSWORD@HOST:5432/DB dirichlet-release
# (DIRICHLET_DATABASE_URL works too, and wins when both are set.) Without either, the service
# keeps a SQLite file in /var/lib/dirichlet-release (mount a volume there to keep it).
# config/default.toml and migrations/ are compiled into the binary, so the runtime image holds
# the binary only.
# scripts/ci/docker-cmd-on-host.sh reads the ENV and ENTRYPOINT lines of the last stage below and runs
# the same command on the host (CI): keep them single key=value pairs and exec form.
#
# The base images are arguments so that scripts/ci/container-test.sh can substitute equivalents
# bootstrapped from the Debian archive when no registry is reachable; by default they are the
# official images.
ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

############################ builder ############################
# hadolint ignore=DL3006
FROM ${RUST_IMAGE} AS builder
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /build
# The shipped binary carries no debug info (13.9 MB; 78 MB with the release profile's line tables,
# BENCHMARKS.md "The image"); its symbols stay,
# so a backtrace (RUST_BACKTRACE=1) still names functions, and a panic's message and source
# location (compiled in as data) are printed whatever the debug info.
ENV CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0 \
    SQLX_OFFLINE=true \
    CARGO_PROFILE_RELEASE_DEBUG=false \
    CARGO_PROFILE_RELEASE_STRIP=debuginfo

# Dependency layer: compile every dependency against stub targets, so that a change to the
# sources alone reuses this layer. Targets declared in Cargo.toml ([[bench]], [[test]],
# [[example]]) get stubs too, since cargo refuses a manifest whose declared files are missing.
# .cargo/config.toml carries build flags (chacha20's AVX-512 backend): the dependency layer
# must be built with them too, or the second build would recompile everything.
#
# Fetching crates may need the build host's CA bundle (a network that inspects TLS) and cargo
# settings: scripts/ci/container-test.sh passes them as build secrets, mounted read-only for the
# fetching step alone and never stored in a layer (`--secret id=cargo_cainfo,src=…` and
# `--secret id=cargo_config,src=…`); without them cargo uses the image's own CA bundle and
# crates.io.
COPY .cargo .cargo
COPY Cargo.toml Cargo.lock ./
RUN --mount=type=secret,id=cargo_cainfo \
    --mount=type=secret,id=cargo_config,target=/.cargo/config.toml \
    set -eux; \
    if [ -s /run/secrets/cargo_cainfo ]; then export CARGO_HTTP_CAINFO=/run/secrets/cargo_cainfo; fi; \
    mkdir -p src; \
    echo 'fn main() {}' > src/main.rs; \
    : > src/lib.rs; \
    awk -F'"' '/^\[\[bench\]\]/ { d = "benches"; next } \
               /^\[\[test\]\]/ { d = "tests"; next } \
               /^\[\[example\]\]/ { d = "examples"; next } \
               /^\[/ { d = ""; next } \
               d != "" && /^name[ \t]*=/ { print d "/" $2 ".rs" }' Cargo.toml \
      | while read -r stub; do mkdir -p "$(dirname "$stub")"; echo 'fn main() {}' > "$stub"; done; \
    cargo fetch --locked; \
    cargo build --release --locked --offline --bin dirichlet-release; \
    rm -rf src target/release/.fingerprint/dirichlet-release-* \
           target/release/deps/dirichlet_release-* target/release/deps/libdirichlet_release-*

# The real sources (.dockerignore keeps target/, .git and database files out).
COPY . .
RUN set -eux; \
    touch src/main.rs src/lib.rs; \
    cargo build --release --locked --offline --bin dirichlet-release; \
    install -D -m 0755 target/release/dirichlet-release /out/dirichlet-release

############################ runtime ############################
# hadolint ignore=DL3006
FROM ${RUNTIME_IMAGE} AS runtime

# The version is the crate's (Cargo.toml) and the API's (openapi.yaml): tests/it/repository.rs
# checks that the three agree.
LABEL org.opencontainers.image.title="dirichlet-release" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0"

# No package is added: the HEALTHCHECK is the binary's own subcommand (no curl), and the binary
# carries its own TLS stack (rustls) for PostgreSQL. No CA bundle either: a verifying connection
# (sslmode=verify-full) trusts exactly the certificate the URL's sslrootcert names, mounted at
# run time (SECURITY.md, "TLS to PostgreSQL"); HTTPS is a proxy's job.
RUN groupadd --system --gid 10001 dirichlet \
    && useradd --system --uid 10001 --gid dirichlet --no-create-home \
       --home-dir /var/lib/dirichlet-release --shell /usr/sbin/nologin dirichlet \
    && install -d -o dirichlet -g dirichlet -m 0750 /var/lib/dirichlet-release

COPY --from=builder /out/dirichlet-release /usr/local/bin/dirichlet-release

WORKDIR /var/lib/dirichlet-release
USER 10001:10001

# Set DATABASE_URL (or DIRICHLET_DATABASE_URL), DIRICHLET_ADMIN_TOKEN and
# DIRICHLET_FINGERPRINT_KEY at run time; every other key of config/default.toml can be overridden
# as DIRICHLET_<KEY>. The image sets no database URL: one here would shadow DATABASE_URL (the
# DIRICHLET_ name wins) and a DIRICHLET_CONFIG file's database_url (the environment wins). The
# default, sqlite://dirichlet-release.db, is relative to the WORKDIR above. The two variables
# below shadow only the same keys of a DIRICHLET_CONFIG file; scripts/docker-cmd-on-host.sh
# checks that every variable README lists works here as on the host.
ENV DIRICHLET_LISTEN=0.0.0.0:8080
ENV DIRICHLET_LOG_FORMAT=json

EXPOSE 8080

# `healthcheck` GETs /healthz on the port of DIRICHLET_LISTEN (so overriding it at run time keeps
# the check working) and exits 0 on 200: liveness, not readiness, so that a container waiting for
# its database is not restarted for it (`healthcheck --ready` checks /readyz instead).
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["/usr/local/bin/dirichlet-release", "healthcheck"]

ENTRYPOINT ["/usr/local/bin/dirichlet-release"]
