-- Token lifecycle (expiry, revocation, last use) and the tamper-evident release log
-- (src/ledger/audit.rs has the link encoding).

ALTER TABLE tokens
    ADD COLUMN expires_at   TIMESTAMPTZ,
    ADD COLUMN last_used_at TIMESTAMPTZ,
    ADD COLUMN revoked_at   TIMESTAMPTZ;

-- chain_head: the hash of the newest release (32 zero bytes before the first).
-- log_chained_after: releases up to this seq were stored before this migration and carry no hash.
ALTER TABLE datasets
    ADD COLUMN chain_head BYTEA NOT NULL DEFAULT '\x0000000000000000000000000000000000000000000000000000000000000000',
    ADD COLUMN log_chained_after BIGINT NOT NULL DEFAULT 0,
    ADD CONSTRAINT datasets_chain_head_length CHECK (octet_length(chain_head) = 32);

UPDATE datasets SET log_chained_after = release_count;

ALTER TABLE releases
    ADD COLUMN chain_hash BYTEA,
    ADD CONSTRAINT releases_chain_hash_length CHECK (octet_length(chain_hash) = 32);
