import numpy as np
import pandas as pd

from dirichlet_release import BudgetExhausted, Client

# DIRICHLET_URL (e.g. http://127.0.0.1:8080) and DIRICHLET_TOKEN (the admin token) name the server.
with Client.from_env() as client:
    # 1. Register a dataset: ε = 1 of Rényi DP at order λ₀ = 2, neighbours differ by replacing
    #    one record (the default).
    dataset = client.create_dataset("visits per diagnosis", epsilon=1.0, order=2)
    print("dataset", dataset.id)

    # 2. Preview a release at ε = 0.4: its cost and a utility forecast; nothing is spent. A
    #    Series' index names the cells, and the output comes back with it.
    diagnoses = ["flu", "asthma", "measles", "scurvy", "sprain", "other"]
    visits = pd.Series([120, 45, 3, 0, 17, 9], index=diagnoses, name="visits")
    preview = client.preview(dataset.id, visits, epsilon=0.4)
    print(preview.cost, "admissible:", preview.admissible, "forecast:", preview.forecast)

    # 3. Release it. Every release carries an Idempotency-Key (here our own; a fresh UUID when
    #    none is given) and every retry reuses it, so a retried release is charged once.
    release = client.release(dataset.id, visits, epsilon=0.4, idempotency_key="visits-2026-11")
    print(release.distribution)  # a Series indexed by diagnosis

    # 4. What is left?
    print(client.budget(dataset.id))

    # 5. A second release of 0.4 fits (0.8 spent); a third would overspend and is refused. The
    #    refusal charges nothing and reveals nothing.
    client.release(dataset.id, visits, epsilon=0.4)
    try:
        client.release(dataset.id, visits, epsilon=0.4)
    except BudgetExhausted as refused:
        print(f"refused ({refused.status} {refused.slug}): remaining {refused.remaining:.4f}")
    else:
        raise SystemExit("a third release of 0.4 should have been refused")

    # 6. Give an analyst a token that can release from, and read, only this dataset.
    token = client.create_token([dataset.id])
    print("analyst token", token.id, "for", token.datasets)

    # 7. A table from pandas.crosstab: one row per age band (disjoint groups of records), one
    #    column per diagnosis. Each row is drawn independently and the whole table costs ONE
    #    charge; the DataFrame comes back with the crosstab's index and columns.
    rng = np.random.default_rng(2026)
    records = pd.DataFrame(
        {
            "age_band": rng.choice(["0-17", "18-64", "65+"], size=300, p=[0.2, 0.5, 0.3]),
            "diagnosis": rng.choice(diagnoses, size=300),
        }
    )
    table = pd.crosstab(records["age_band"], records["diagnosis"])
    by_age = client.create_dataset("visits per diagnosis by age band", epsilon=1.0, order=2)
    released = client.release(by_age.id, table, epsilon=0.5, label="diagnosis | by age band")
    print(released.distributions)  # a DataFrame: age bands × diagnoses
    print("charged", released.cost.epsilon, "in", client.budget(by_age.id).releases, "release")
