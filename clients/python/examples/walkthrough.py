import numpy as np
import pandas as pd

from dirichlet_release import AllocationExhausted, BudgetExhausted, Client, PlanItem, Target

# DIRICHLET_URL (e.g. http://127.0.0.1:8080) and DIRICHLET_TOKEN (the admin token) name the server.
with Client.from_env() as client:
    # 1. Register a dataset: ε = 1 of Rényi DP at order λ₀ = 2, neighbours differ by replacing
    #    one record (the default). The cell names are public, fixed in advance: every release
    #    then has these six cells, and a pandas input is aligned to them by name.
    diagnoses = ["flu", "asthma", "measles", "scurvy", "sprain", "other"]
    dataset = client.create_dataset("visits per diagnosis", epsilon=1.0, order=2, cells=diagnoses)
    print("dataset", dataset.id, "cells", dataset.cells)

    # 2. Preview a release at ε = 0.4: its cost and a utility forecast; nothing is spent. A
    #    Series' index names the cells (in any order; a missing or unknown name is refused
    #    before anything is sent), and the output comes back labelled with the cells.
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
    #    charge. A crosstab lists only the age bands and diagnoses that occur in the data:
    #    released as it is, its shape and labels would tell which groups are empty, which the
    #    privacy guarantee does not cover. So reindex it to the public lists (fill_value=0),
    #    register the dataset with those cells, and name the rows (row_names=True sends the
    #    index) only because the index is now the public list of age bands.
    age_bands = ["0-17", "18-64", "65+"]
    rng = np.random.default_rng(2026)
    records = pd.DataFrame(
        {
            "age_band": rng.choice(age_bands, size=300, p=[0.2, 0.5, 0.3]),
            "diagnosis": rng.choice(diagnoses, size=300),
        }
    )
    table = pd.crosstab(records["age_band"], records["diagnosis"]).reindex(
        index=age_bands, columns=diagnoses, fill_value=0
    )
    by_age = client.create_dataset(
        "visits per diagnosis by age band", epsilon=1.0, order=2, cells=diagnoses
    )
    released = client.release(
        by_age.id, table, epsilon=0.5, row_names=True, label="diagnosis | by age band"
    )
    print(released.distributions)  # a DataFrame: age bands × diagnoses
    print("charged", released.cost.epsilon, "in", client.budget(by_age.id).releases, "release")

    # 8. Share a budget within a team: the admin gives an analyst an allocation (RDP at the
    #    dataset's order), and the analyst's releases must fit both it and the dataset's
    #    budget (which still binds when allocations add up to more). A refusal by the
    #    allocation is AllocationExhausted, a kind of BudgetExhausted.
    member = client.create_token([by_age.id])
    print(client.set_allocation(by_age.id, member.id, 0.3))
    with Client(client.base_url, member.token) as analyst:
        children = table.loc["0-17"]  # a Series over the diagnoses
        try:
            analyst.release(by_age.id, children, epsilon=0.4)
        except AllocationExhausted as refused:
            print(f"refused ({refused.status} {refused.slug}): {refused.remaining:.4f} of it left")
        else:
            raise SystemExit("a release of 0.4 should not fit an allocation of 0.3")
        print("analyst charged", analyst.release(by_age.id, children, epsilon=0.25).cost.epsilon)
        print(analyst.budget(by_age.id).allocation)  # the analyst's own allocation
    for change in client.allocations(by_age.id).changes:
        print("allocation change:", change)

    # 9. Plan before you spend: which mechanism reaches an l2 error of 0.02 (95 % confidence)
    #    on a 40-cell histogram of about 5,000 records, and what does it cost? Only public
    #    figures are sent: the shape and a public total, or a public lower bound of it (never
    #    one computed from the counts: choosing ε by looking at private counts would itself
    #    leak). Nothing is charged; "auto" compares every mechanism. The second item is a table
    #    of 3 rows of at least 50 records, at ε = 0.1. A dataset without cell names takes both.
    survey = client.create_dataset("answers to a 40-option question", epsilon=1.0, order=2)
    plan = client.plan(
        survey.id,
        [
            PlanItem(d=40, n_lower_bound=5000, mechanism="auto", target=Target(l2=0.02)),
            PlanItem(d=6, rows=3, n_lower_bound=50, mechanism="dirichlet", epsilon=0.1),
        ],
    )
    for item in plan.items:
        print(item.status, item.mechanism, "ε", item.epsilon, "cost", item.cost, item.forecast)
    print("total cost", plan.total_cost, "of", plan.remaining, "remaining; fits:", plan.fits)
    if not (plan.items[0].planned and plan.fits):
        raise SystemExit("the histogram's target should be reachable within the budget")
    #    Release the histogram as planned: release_kwargs() carries the chosen mechanism, its ε
    #    and its own fields, so the release is charged exactly the planned cost.
    answers = np.bincount(rng.integers(0, 40, size=5_212), minlength=40)
    histogram = client.release(survey.id, answers, **plan.items[0].release_kwargs())
    print("planned", plan.items[0].cost, "charged", histogram.cost.epsilon)
