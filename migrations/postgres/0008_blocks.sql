-- Data blocks (src/ledger/blocks.rs). A blocked dataset keeps its lifetime spend in
-- datasets.spent_units (what its populations and its release log see) under the ledger's maximum
-- as total_units, and holds each block to block_total_units.
ALTER TABLE datasets
    ADD COLUMN block_period TEXT
        CONSTRAINT datasets_block_period_known CHECK (block_period IN ('hour', 'day', 'week', 'month')),
    ADD COLUMN block_total_units BIGINT
        CONSTRAINT datasets_block_total_range CHECK (block_total_units BETWEEN 0 AND 9007199254740992),
    ADD CONSTRAINT datasets_block_pair CHECK ((block_period IS NULL) = (block_total_units IS NULL));

-- One row per block ever charged, created by its first charge. Written only under the dataset's
-- row lock, so the dataset's lock orders every block's writers.
CREATE TABLE dataset_blocks (
    dataset_id  UUID NOT NULL REFERENCES datasets (id),
    -- Periods since the Unix epoch (src/ledger/blocks.rs).
    block       BIGINT NOT NULL,
    spent_units BIGINT NOT NULL,
    CONSTRAINT dataset_blocks_spent_range CHECK (spent_units BETWEEN 0 AND 9007199254740992),
    PRIMARY KEY (dataset_id, block)
);

-- The blocks a release read, as keys (first and last, inclusive).
ALTER TABLE releases
    ADD COLUMN block_from TEXT,
    ADD COLUMN block_to TEXT,
    ADD CONSTRAINT releases_block_pair CHECK ((block_from IS NULL) = (block_to IS NULL));
