-- Budgets for teams (issue 22). Each analyst token already has one row per dataset of its scope
-- (token_datasets, written with the token); that row now also keeps the token's spend on the
-- dataset, added to by every release the token makes there in the transaction that charges it,
-- and its optional allocation, the most those releases may cost in all (src/store/sqlite.rs).
--
-- A replica that predates this migration neither checks allocations nor keeps the spend: upgrade
-- every replica before setting allocations (README, "Deploying").
ALTER TABLE token_datasets ADD COLUMN spent_units INTEGER NOT NULL DEFAULT 0
    CONSTRAINT token_datasets_spent_range CHECK (spent_units BETWEEN 0 AND 9007199254740992);
ALTER TABLE token_datasets ADD COLUMN allocation_units INTEGER
    CONSTRAINT token_datasets_allocation_range CHECK (allocation_units BETWEEN 0 AND 9007199254740992);

-- What each token spent before: its releases' costs (created_by is the token's id).
UPDATE token_datasets SET spent_units = spent.units
  FROM (SELECT dataset_id, created_by, SUM(cost_units) AS units
          FROM releases GROUP BY dataset_id, created_by) AS spent
 WHERE spent.dataset_id = token_datasets.dataset_id AND spent.created_by = token_datasets.token_id;

-- The audit trail of allocations: who changed which, when, from what to what (NULL: none).
CREATE TABLE allocation_changes (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset_id TEXT NOT NULL REFERENCES datasets (id),
    token_id   TEXT NOT NULL,
    changed_at TEXT NOT NULL,
    changed_by TEXT NOT NULL,
    old_units  INTEGER,
    new_units  INTEGER,
    CONSTRAINT allocation_changes_change CHECK (old_units IS NOT NULL OR new_units IS NOT NULL)
) STRICT;
CREATE INDEX allocation_changes_dataset ON allocation_changes (dataset_id, id);

-- Named cells: a dataset's public cell names (a JSON array of strings), and a table release's
-- public row names. NULL when not given; rows stored before read back unchanged.
ALTER TABLE datasets ADD COLUMN cells TEXT;
ALTER TABLE releases ADD COLUMN row_names TEXT;
