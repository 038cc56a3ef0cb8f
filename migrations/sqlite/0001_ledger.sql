-- The ledger schema; the SQLite twin of migrations/postgres. Amounts of privacy loss are integers on
-- the 2^-40 grid (src/ledger/charge.rs), never floats, so that spent_units is exactly the sum of the
-- charges. No table has a column for raw counts: a release stores only its output.
-- STRICT makes SQLite refuse values of the wrong type instead of silently storing them. UUIDs are
-- hyphenated TEXT, timestamps RFC 3339 TEXT (as sqlx encodes chrono values).

CREATE TABLE datasets (
    id            TEXT PRIMARY KEY NOT NULL,
    name          TEXT NOT NULL,
    budget_order  REAL NOT NULL,
    total_units   INTEGER NOT NULL,
    spent_units   INTEGER NOT NULL DEFAULT 0,
    release_count INTEGER NOT NULL DEFAULT 0,
    dp_epsilon    REAL,
    dp_delta      REAL,
    l2_squared    REAL NOT NULL,
    linf          REAL NOT NULL,
    neighbouring  TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    created_by    TEXT NOT NULL,
    CONSTRAINT datasets_order_valid CHECK (budget_order > 1 AND budget_order < 9e999),
    -- 2^53 units = the ledger's maximum of 8192 (Units::from_raw refuses more).
    CONSTRAINT datasets_total_range CHECK (total_units BETWEEN 0 AND 9007199254740992),
    CONSTRAINT datasets_spent_nonnegative CHECK (spent_units >= 0),
    CONSTRAINT datasets_spent_within_total CHECK (spent_units <= total_units),
    CONSTRAINT datasets_release_count_nonnegative CHECK (release_count >= 0),
    CONSTRAINT datasets_dp_target_pair CHECK ((dp_epsilon IS NULL) = (dp_delta IS NULL)),
    CONSTRAINT datasets_dp_target_range CHECK (dp_epsilon > 0 AND dp_epsilon < 9e999 AND dp_delta > 0 AND dp_delta < 1),
    CONSTRAINT datasets_sensitivity_valid CHECK (linf > 0 AND l2_squared >= linf * linf AND l2_squared < 9e999),
    CONSTRAINT datasets_neighbouring_known CHECK (neighbouring IN ('replace_one', 'add_remove_one', 'custom'))
) STRICT;

CREATE TABLE releases (
    id              TEXT PRIMARY KEY NOT NULL,
    dataset_id      TEXT NOT NULL REFERENCES datasets (id),
    -- 1, 2, ... per dataset: the dataset's release_count right after this release's charge.
    seq             INTEGER NOT NULL,
    created_at      TEXT NOT NULL,
    created_by      TEXT NOT NULL,
    mechanism       TEXT NOT NULL,
    cost_units      INTEGER NOT NULL,
    -- Little-endian f64s (src/store/codec.rs).
    distribution    BLOB NOT NULL,
    dimension       INTEGER NOT NULL,
    idempotency_key TEXT,
    -- HMAC-SHA-256 of the canonical request, to tell a retry from a different request.
    fingerprint     BLOB,
    CONSTRAINT releases_seq_positive CHECK (seq >= 1),
    CONSTRAINT releases_mechanism_json CHECK (json_valid(mechanism)),
    CONSTRAINT releases_cost_range CHECK (cost_units BETWEEN 0 AND 9007199254740992),
    CONSTRAINT releases_distribution_length CHECK (length(distribution) = 8 * dimension),
    CONSTRAINT releases_fingerprint_length CHECK (length(fingerprint) = 32),
    CONSTRAINT releases_idempotency_pair CHECK ((idempotency_key IS NULL) = (fingerprint IS NULL)),
    -- Also the index behind "newest first" pages.
    CONSTRAINT releases_dataset_seq_unique UNIQUE (dataset_id, seq),
    CONSTRAINT releases_idempotency_unique UNIQUE (dataset_id, idempotency_key)
) STRICT;

CREATE TABLE tokens (
    id          TEXT PRIMARY KEY NOT NULL,
    secret_hash BLOB NOT NULL,
    role        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    CONSTRAINT tokens_secret_hash_length CHECK (length(secret_hash) = 32),
    CONSTRAINT tokens_role_known CHECK (role IN ('admin', 'analyst'))
) STRICT;

CREATE TABLE token_datasets (
    token_id   TEXT NOT NULL REFERENCES tokens (id) ON DELETE CASCADE,
    dataset_id TEXT NOT NULL REFERENCES datasets (id),
    PRIMARY KEY (token_id, dataset_id)
) STRICT;

CREATE TABLE server_secrets (
    name  TEXT PRIMARY KEY NOT NULL,
    value BLOB NOT NULL
) STRICT;
