-- Populations: budgets that span datasets (src/ledger/population.rs). Each node keeps one running
-- figure, spent_units, at the ledger order it shares with every dataset and population under it;
-- a release on a dataset under a population charges every node on the path to the root in the
-- transaction that records it (src/store/postgres.rs, commit_with_population). Nothing is ever
-- deleted and spent_units never decreases: a child that moves away leaves its charge behind.
CREATE TABLE populations (
    id           UUID PRIMARY KEY,
    name         TEXT NOT NULL,
    budget_order DOUBLE PRECISION NOT NULL,
    total_units  BIGINT NOT NULL,
    spent_units  BIGINT NOT NULL DEFAULT 0,
    dp_epsilon   DOUBLE PRECISION,
    dp_delta     DOUBLE PRECISION,
    parent_id    UUID REFERENCES populations (id),
    children     TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_by   TEXT NOT NULL,
    CONSTRAINT populations_order_valid CHECK (budget_order > 1 AND budget_order < 'Infinity'),
    CONSTRAINT populations_total_range CHECK (total_units BETWEEN 0 AND 9007199254740992),
    CONSTRAINT populations_spent_nonnegative CHECK (spent_units >= 0),
    CONSTRAINT populations_spent_within_total CHECK (spent_units <= total_units),
    CONSTRAINT populations_dp_target_pair CHECK ((dp_epsilon IS NULL) = (dp_delta IS NULL)),
    CONSTRAINT populations_children_known CHECK (children IN ('shared', 'disjoint')),
    CONSTRAINT populations_not_own_parent CHECK (parent_id <> id)
);
CREATE INDEX populations_parent ON populations (parent_id);

-- The one population a dataset belongs to (NULL: none).
ALTER TABLE datasets ADD COLUMN population_id UUID REFERENCES populations (id);
