-- Populations: the SQLite twin of migrations/postgres/0007_populations.sql.
CREATE TABLE populations (
    id           TEXT PRIMARY KEY NOT NULL,
    name         TEXT NOT NULL,
    budget_order REAL NOT NULL,
    total_units  INTEGER NOT NULL,
    spent_units  INTEGER NOT NULL DEFAULT 0,
    dp_epsilon   REAL,
    dp_delta     REAL,
    parent_id    TEXT REFERENCES populations (id),
    children     TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    created_by   TEXT NOT NULL,
    CONSTRAINT populations_order_valid CHECK (budget_order > 1 AND budget_order < 9e999),
    CONSTRAINT populations_total_range CHECK (total_units BETWEEN 0 AND 9007199254740992),
    CONSTRAINT populations_spent_nonnegative CHECK (spent_units >= 0),
    CONSTRAINT populations_spent_within_total CHECK (spent_units <= total_units),
    CONSTRAINT populations_dp_target_pair CHECK ((dp_epsilon IS NULL) = (dp_delta IS NULL)),
    CONSTRAINT populations_children_known CHECK (children IN ('shared', 'disjoint')),
    CONSTRAINT populations_not_own_parent CHECK (parent_id <> id)
) STRICT;
CREATE INDEX populations_parent ON populations (parent_id);

ALTER TABLE datasets ADD COLUMN population_id TEXT REFERENCES populations (id);
