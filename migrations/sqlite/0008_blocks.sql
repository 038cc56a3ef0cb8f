-- Data blocks (src/ledger/blocks.rs). A blocked dataset keeps its lifetime spend in
-- datasets.spent_units (what its populations and its release log see) under the ledger's maximum
-- as total_units, and holds each block to block_total_units. SQLite adds constraints only with a
-- column, hence the column CHECKs.
ALTER TABLE datasets ADD COLUMN block_period TEXT
    CONSTRAINT datasets_block_period_known CHECK (block_period IN ('hour', 'day', 'week', 'month'));
ALTER TABLE datasets ADD COLUMN block_total_units INTEGER
    CONSTRAINT datasets_block_total_range CHECK (block_total_units BETWEEN 0 AND 9007199254740992);

-- One row per block ever charged, created by its first charge.
CREATE TABLE dataset_blocks (
    dataset_id  TEXT NOT NULL REFERENCES datasets (id),
    -- Periods since the Unix epoch (src/ledger/blocks.rs).
    block       INTEGER NOT NULL,
    spent_units INTEGER NOT NULL,
    CONSTRAINT dataset_blocks_spent_range CHECK (spent_units BETWEEN 0 AND 9007199254740992),
    PRIMARY KEY (dataset_id, block)
) WITHOUT ROWID;

-- The blocks a release read, as keys (first and last, inclusive).
ALTER TABLE releases ADD COLUMN block_from TEXT;
ALTER TABLE releases ADD COLUMN block_to TEXT;
