-- Token lifecycle (expiry, revocation, last use) and the tamper-evident release log; the SQLite
-- twin of migrations/postgres (src/ledger/audit.rs has the link encoding).

ALTER TABLE tokens ADD COLUMN expires_at TEXT;
ALTER TABLE tokens ADD COLUMN last_used_at TEXT;
ALTER TABLE tokens ADD COLUMN revoked_at TEXT;

-- chain_head: the hash of the newest release (32 zero bytes before the first).
-- log_chained_after: releases up to this seq were stored before this migration and carry no hash.
ALTER TABLE datasets ADD COLUMN chain_head BLOB NOT NULL
    DEFAULT x'0000000000000000000000000000000000000000000000000000000000000000'
    CONSTRAINT datasets_chain_head_length CHECK (length(chain_head) = 32);
ALTER TABLE datasets ADD COLUMN log_chained_after INTEGER NOT NULL DEFAULT 0;

UPDATE datasets SET log_chained_after = release_count;

ALTER TABLE releases ADD COLUMN chain_hash BLOB
    CONSTRAINT releases_chain_hash_length CHECK (chain_hash IS NULL OR length(chain_hash) = 32);
