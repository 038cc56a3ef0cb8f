-- The dataset's spent right after each release was charged, written by commit_release in the
-- transaction that charges it, so that a replay (a retry with the release's Idempotency-Key)
-- answers the budget of the original 201 rather than the ledger at the time of the retry.
ALTER TABLE releases ADD COLUMN spent_after_units INTEGER
    CONSTRAINT releases_spent_after_range
    CHECK (spent_after_units BETWEEN cost_units AND 9007199254740992);

-- Releases stored before: the running sum of the costs in commit order, which is exactly what
-- spent was after each of them (spent only ever grows by a stored release's cost, on the integer
-- grid of src/ledger/charge.rs). A row still written without it (by a replica that predates this
-- migration) is read with the same sum (src/store/sqlite.rs, RELEASE_COLUMNS).
UPDATE releases SET spent_after_units = running.spent
  FROM (SELECT id, SUM(cost_units) OVER (PARTITION BY dataset_id ORDER BY seq) AS spent
          FROM releases) AS running
 WHERE releases.id = running.id;
