-- Cells of output stored per dataset, kept by commit_release in the transaction that stores a
-- release, so that the per-dataset output quota (max_stored_cells) is one comparison there.
ALTER TABLE datasets ADD COLUMN stored_cells INTEGER NOT NULL DEFAULT 0
    CONSTRAINT datasets_stored_cells_nonnegative CHECK (stored_cells >= 0);
UPDATE datasets SET stored_cells = COALESCE(
    (SELECT SUM(dimension) FROM releases WHERE releases.dataset_id = datasets.id), 0);
