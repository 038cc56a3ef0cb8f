//! Populations: budgets that span datasets (the people in them), arranged in a tree.
//!
//! A dataset joins at most one population; a population has at most one parent. Each node keeps
//! one running figure, `spent`, at the ledger order it shares with everything under it, and is
//! charged by its direct children (datasets and populations) under one of two rules:
//!
//! - `shared`: a person may be in several children, so their losses add up (sequential
//!   composition): the node is charged the *sum* of what its children were charged;
//! - `disjoint`: each person is in at most one child, so only the worst child counts (parallel
//!   composition): the node is charged the *maximum* of what its children were charged.
//!
//! Both rules are kept incrementally, so that admitting a charge reads and writes one row per
//! node on the path: a child whose spend rose from `s` to `s + d` raises a shared node by `d`,
//! and a disjoint one to `max(spent, s + d)` (its other children's figures are all ≤ its own).
//! A charge is admitted only if every node on the path stays within its total; [`charge_path`]
//! is the rule, and both stores apply it under the rows' locks in the transaction that records
//! the charge. A child that leaves a node (a dataset or population moved elsewhere) leaves its
//! charge behind: budget is never given back. One that joins brings its whole spend so far.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{DpTarget, Units};
use crate::privacy::Order;

/// The most populations on one path (a dataset's population and its ancestors): a longer chain
/// is refused where it would be made, so that every walk up the tree is bounded.
pub const MAX_DEPTH: usize = 32;

/// How a population composes its children's charges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Children {
    Shared,
    Disjoint,
}

impl Children {
    pub fn as_str(self) -> &'static str {
        match self {
            Children::Shared => "shared",
            Children::Disjoint => "disjoint",
        }
    }

    pub fn parse(s: &str) -> Option<Children> {
        match s {
            "shared" => Some(Children::Shared),
            "disjoint" => Some(Children::Disjoint),
            _ => None,
        }
    }
}

/// A stored population.
#[derive(Debug, Clone, PartialEq)]
pub struct Population {
    pub id: Uuid,
    pub name: String,
    pub order: Order,
    pub total: Units,
    pub dp_target: Option<DpTarget>,
    pub parent: Option<Uuid>,
    pub children: Children,
    pub spent: Units,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
}

impl Population {
    pub fn remaining(&self) -> Units {
        self.total.saturating_sub(self.spent)
    }

    pub fn node(&self) -> Node {
        Node {
            id: self.id,
            total: self.total,
            spent: self.spent,
            children: self.children,
        }
    }
}

/// A population about to be created.
#[derive(Debug, Clone)]
pub struct NewPopulation {
    pub id: Uuid,
    pub name: super::DatasetName,
    pub order: Order,
    pub total: Units,
    pub dp_target: Option<DpTarget>,
    pub parent: Option<Uuid>,
    pub children: Children,
    pub created_by: String,
}

/// A node's ledger figures, as read under its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    pub id: Uuid,
    pub total: Units,
    pub spent: Units,
    pub children: Children,
}

/// The refusal of a charge by a population node: its figures when it refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeRefusal {
    pub id: Uuid,
    pub total: Units,
    pub spent: Units,
}

/// The rule: a child (dataset or population) directly under `path[0]` whose spend rose by
/// `delta` to `child_spent` charges `path[0]`, which charges `path[1]`, and so on up to the root
/// (`path` is leaf to root). Returns every node's new `spent`, in `path` order, or the first
/// node (from the leaf) that the charge would take past its total; nothing is to be written
/// then.
pub fn charge_path(
    path: &[Node],
    child_spent: Units,
    delta: Units,
) -> Result<Vec<Units>, NodeRefusal> {
    let mut after = Vec::with_capacity(path.len());
    let (mut child_spent, mut delta) = (child_spent, delta);
    for node in path {
        let spent = match node.children {
            Children::Shared => node.spent.checked_add(delta),
            Children::Disjoint => Some(node.spent.max(child_spent)),
        };
        let refusal = NodeRefusal {
            id: node.id,
            total: node.total,
            spent: node.spent,
        };
        let spent = spent.filter(|s| *s <= node.total).ok_or(refusal)?;
        delta = spent.saturating_sub(node.spent);
        child_spent = spent;
        after.push(spent);
    }
    Ok(after)
}

/// One node of a path as the budget views show it.
#[derive(Debug, Clone, PartialEq)]
pub struct PathEntry {
    /// `"dataset"` or `"population"`.
    pub kind: &'static str,
    pub id: Uuid,
    pub name: String,
    pub total: Units,
    pub spent: Units,
}

impl PathEntry {
    pub fn remaining(&self) -> Units {
        self.total.saturating_sub(self.spent)
    }
}

/// The index of every entry with the least remaining budget: what limits the next charge.
pub fn binding(path: &[PathEntry]) -> Vec<usize> {
    let Some(least) = path.iter().map(PathEntry::remaining).min() else {
        return Vec::new();
    };
    (0..path.len())
        .filter(|&i| path[i].remaining() == least)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn u(raw: i64) -> Units {
        Units::from_raw(raw).unwrap()
    }

    #[test]
    fn shared_adds_disjoint_takes_the_maximum() {
        let a = Uuid::from_u128(1);
        let b = Uuid::from_u128(2);
        let shared = Node {
            id: a,
            total: u(100),
            spent: u(10),
            children: Children::Shared,
        };
        let disjoint = Node {
            id: b,
            total: u(100),
            spent: u(30),
            children: Children::Disjoint,
        };
        // The dataset went from 15 to 20 under `shared`, which goes from 10 to 15 under
        // `disjoint` (still below its 30).
        assert_eq!(
            charge_path(&[shared, disjoint], u(20), u(5)),
            Ok(vec![u(15), u(30)])
        );
        assert_eq!(charge_path(&[disjoint], u(40), u(5)), Ok(vec![u(40)]));
        let refused = charge_path(
            &[
                shared,
                Node {
                    total: u(14),
                    ..disjoint
                },
            ],
            u(20),
            u(5),
        );
        assert_eq!(refused.unwrap_err().id, b);
        assert_eq!(
            charge_path(
                &[Node {
                    total: u(14),
                    ..shared
                }],
                u(20),
                u(5)
            )
            .unwrap_err()
            .id,
            a
        );
    }

    #[test]
    fn binding_is_the_least_remaining() {
        let entry = |total, spent| PathEntry {
            kind: "population",
            id: Uuid::nil(),
            name: String::new(),
            total: u(total),
            spent: u(spent),
        };
        assert_eq!(
            binding(&[entry(10, 2), entry(10, 5), entry(8, 3)]),
            vec![1, 2]
        );
        assert_eq!(binding(&[]), Vec::<usize>::new());
    }

    /// A random tree: node i > 0 has a parent below i; datasets hang under random nodes.
    #[derive(Debug, Clone)]
    struct Forest {
        parents: Vec<Option<usize>>,
        rules: Vec<Children>,
        totals: Vec<i64>,
        datasets: Vec<usize>,
        charges: Vec<(usize, i64)>,
    }

    fn forest() -> impl Strategy<Value = Forest> {
        (1usize..6, 1usize..5).prop_flat_map(|(nodes, datasets)| {
            (
                proptest::collection::vec(any::<prop::sample::Index>(), nodes),
                proptest::collection::vec(any::<bool>(), nodes),
                proptest::collection::vec(5i64..60, nodes),
                proptest::collection::vec(0..nodes, datasets),
                proptest::collection::vec((0..datasets, 1i64..12), 0..40),
            )
                .prop_map(move |(parents, rules, totals, datasets, charges)| Forest {
                    parents: parents
                        .iter()
                        .enumerate()
                        .map(|(i, ix)| (i > 0 && ix.index(2) == 1).then(|| ix.index(i)))
                        .collect(),
                    rules: rules
                        .into_iter()
                        .map(|d| {
                            if d {
                                Children::Disjoint
                            } else {
                                Children::Shared
                            }
                        })
                        .collect(),
                    totals,
                    datasets,
                    charges,
                })
        })
    }

    /// What a node was charged, recomputed from scratch from the committed charges: a dataset's
    /// spend is the sum of its charges; a shared node's the sum of its children's, a disjoint
    /// one's their maximum.
    fn recompute(f: &Forest, committed: &[(usize, i64)], node: usize) -> i64 {
        let dataset_spent = |d: usize| {
            committed
                .iter()
                .filter(|(c, _)| *c == d)
                .map(|(_, x)| x)
                .sum::<i64>()
        };
        let mut children: Vec<i64> = (0..f.datasets.len())
            .filter(|&d| f.datasets[d] == node)
            .map(dataset_spent)
            .collect();
        children.extend(
            (0..f.parents.len())
                .filter(|&n| f.parents[n] == Some(node))
                .map(|n| recompute(f, committed, n)),
        );
        match f.rules[node] {
            Children::Shared => children.iter().sum(),
            Children::Disjoint => children.into_iter().max().unwrap_or(0),
        }
    }

    proptest! {
        /// Applying `charge_path` charge by charge (refusals writing nothing) leaves every node
        /// exactly at its brute-force recomputation over the admitted charges, never above its
        /// total; and every refused charge would have taken some node past its total.
        #[test]
        fn incremental_matches_recomputation(f in forest()) {
            let id = |n: usize| Uuid::from_u128(n as u128 + 1);
            let mut spent: HashMap<usize, i64> = HashMap::new();
            let mut dataset_spent = vec![0i64; f.datasets.len()];
            let mut committed = Vec::new();
            for &(d, cost) in &f.charges {
                let mut path = Vec::new();
                let mut at = Some(f.datasets[d]);
                while let Some(n) = at {
                    path.push((n, Node {
                        id: id(n),
                        total: u(f.totals[n]),
                        spent: u(*spent.get(&n).unwrap_or(&0)),
                        children: f.rules[n],
                    }));
                    at = f.parents[n];
                }
                let nodes: Vec<Node> = path.iter().map(|(_, n)| *n).collect();
                let after = dataset_spent[d] + cost;
                match charge_path(&nodes, u(after), u(cost)) {
                    Ok(new) => {
                        for ((n, _), s) in path.iter().zip(new) {
                            spent.insert(*n, s.raw());
                        }
                        dataset_spent[d] = after;
                        committed.push((d, cost));
                    }
                    Err(refusal) => {
                        let mut with = committed.clone();
                        with.push((d, cost));
                        let n = (0..f.parents.len()).find(|&n| id(n) == refusal.id).unwrap();
                        prop_assert!(recompute(&f, &with, n) > f.totals[n]);
                    }
                }
                for n in 0..f.parents.len() {
                    let expected = recompute(&f, &committed, n);
                    prop_assert_eq!(*spent.get(&n).unwrap_or(&0), expected);
                    prop_assert!(expected <= f.totals[n]);
                }
            }
        }
    }
}
