//! A discrete Bayesian network's parameters through the service, as in the seed paper's §5.2
//! (000, Fig. 7).
//!
//! Reads a CSV with a header, splits it 70/30 with a fixed seed, cuts numeric columns into 10
//! quantile bins on the training rows, and estimates one conditional probability table (CPT)
//! per node of a network given as a parent list: for node k, one row per configuration of its
//! parents, one cell per value of k. Rows count disjoint groups of records, so a whole CPT costs
//! one vector. The K CPTs are released with `dirichlet`, `gaussian` and `laplace` at ε/K each
//! under one dataset budget of ε, and the mean test log-likelihood per record is printed against
//! ε, beside the non-private (maximum-likelihood) parameters and uniform CPTs. The same ε is also
//! split by the service's planner for one common KL target (`planned:*`, the baselines smoothed
//! as it chooses), and the baselines are fitted with its smoothing at the even split
//! (`smoothed:*`): see `common::kl_split` and EXPERIMENTS.md.
//!
//! A parent configuration with no training record is an all-zero CPT row (an empty group): the
//! service releases it like any other row, so the published CPTs have the same shape whichever
//! configurations are empty. `--short` adds a node with two parents to the default network, so
//! that CI's run has such rows.
//!
//! ```sh
//! cargo run --release --example bayes_net                    # full grid, 10 repetitions
//! cargo run --example bayes_net -- --short                   # 3 values of ε, once (CI)
//! cargo run --release --example bayes_net -- --network 'a:; b: a; c: a,b' --data my.csv
//! ```

mod common;

use clap::Arg;
use common::{label, ln_clipped, Args, CountTable, Encoded, Fitted, Frame, Result, Scores};

/// The default network on `examples/data/breast_cancer.csv`: a tree rooted at the diagnosis,
/// which drives three "worst" and "mean" measurements; each of those drives measurements of
/// the same nucleus property. Every parent set is one column, so every CPT row (a diagnosis or
/// a quantile bin of the training data) has training records.
const BREAST_CANCER_NETWORK: &str = "diagnosis: ; \
     worst_concave_points: diagnosis; \
     worst_radius: diagnosis; \
     mean_texture: diagnosis; \
     worst_area: worst_radius; \
     mean_radius: worst_radius; \
     mean_concavity: worst_concave_points; \
     worst_compactness: worst_concave_points; \
     worst_texture: mean_texture";

/// `--short`'s network: the default tree plus one node with two parents. Its 10 × 10 parent
/// configurations outnumber what 398 training records fill, so some CPT rows are empty groups
/// (CI releases them like any other row).
const SHORT_NETWORK_EXTRA: &str = "worst_smoothness: worst_radius, mean_texture";

/// Node k with its parents, as column indices.
struct Node {
    column: usize,
    parents: Vec<usize>,
}

/// `child: parent, parent; child: ; …`, nodes in an order where parents come first (checked).
fn parse_network(text: &str, frame: &Frame) -> Result<Vec<Node>> {
    let mut nodes: Vec<Node> = Vec::new();
    for entry in text.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (child, parents) = entry
            .split_once(':')
            .ok_or_else(|| format!("network entry `{entry}` is not `child: parents`"))?;
        let column = frame.column(child.trim())?;
        if nodes.iter().any(|n| n.column == column) {
            return Err(format!("node `{}` is listed twice", child.trim()).into());
        }
        let parents = parents
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                let parent = frame.column(p)?;
                if !nodes.iter().any(|n| n.column == parent) {
                    return Err(format!(
                        "parent `{p}` of `{}` must be listed before it (the network must be acyclic)",
                        child.trim()
                    )
                    .into());
                }
                Ok(parent)
            })
            .collect::<Result<Vec<_>>>()?;
        nodes.push(Node { column, parents });
    }
    if nodes.is_empty() {
        return Err("the network has no nodes".into());
    }
    Ok(nodes)
}

/// The CPT row of a record: its parents' cells in mixed radix.
fn parent_row(data: &Encoded, node: &Node, record: &[usize]) -> usize {
    node.parents
        .iter()
        .fold(0, |row, &p| row * data.cells(p) + record[p])
}

fn count_tables(data: &Encoded, nodes: &[Node]) -> Vec<CountTable> {
    nodes
        .iter()
        .enumerate()
        .map(|(k, node)| {
            let configurations: usize = node.parents.iter().map(|&p| data.cells(p)).product();
            let mut rows = vec![vec![0.0; data.cells(node.column)]; configurations];
            for record in &data.train {
                rows[parent_row(data, node, record)][record[node.column]] += 1.0;
            }
            let parents: Vec<&str> = node
                .parents
                .iter()
                .map(|&p| data.names[p].as_str())
                .collect();
            CountTable {
                label: label(format!(
                    "BN {}/{} {} | {}",
                    k + 1,
                    nodes.len(),
                    data.names[node.column],
                    if parents.is_empty() {
                        "-".to_string()
                    } else {
                        parents.join(", ")
                    }
                )),
                rows,
            }
        })
        .collect()
}

/// Mean over test records of Σ_k ln θ_k(x_k | x_parents(k)), in nats.
fn score(data: &Encoded, nodes: &[Node], fitted: &Fitted) -> Scores {
    let total: f64 = data
        .test
        .iter()
        .map(|record| {
            nodes
                .iter()
                .zip(fitted)
                .map(|(node, cpt)| {
                    ln_clipped(cpt[parent_row(data, node, record)][record[node.column]])
                })
                .sum::<f64>()
        })
        .sum();
    vec![("log_likelihood", total / data.test.len() as f64)]
}

#[tokio::main]
async fn main() -> Result<()> {
    let matches = common::command(
        "bayes_net",
        "Bayesian-network parameters fitted through the service: test log-likelihood against ε",
    )
    .arg(
        Arg::new("network")
            .long("network")
            .default_value(BREAST_CANCER_NETWORK)
            .hide_default_value(true)
            .help("Parent list `child: p1, p2; child2: ; …`, parents before children (default: a 9-node tree on the breast-cancer data)"),
    )
    .get_matches();
    let args = Args::from_matches(&matches)?;
    let frame = Frame::read(&args.data)?;
    let mut network = matches
        .get_one::<String>("network")
        .expect("has a default")
        .clone();
    if args.short
        && matches.value_source("network") == Some(clap::parser::ValueSource::DefaultValue)
    {
        network = format!("{network}; {SHORT_NETWORK_EXTRA}");
    }
    let nodes = parse_network(&network, &frame)?;
    // Only the network's columns are encoded as categories by name; the rest decide by content.
    let data = Encoded::new(&frame, args.seed, &[])?;
    let tables = count_tables(&data, &nodes);
    eprintln!(
        "{}: {} training and {} test records, {} nodes, {} CPT rows in all",
        args.data.display(),
        data.train.len(),
        data.test.len(),
        nodes.len(),
        tables.iter().map(|t| t.rows.len()).sum::<usize>(),
    );
    common::run_experiment("bayes_net", &args, &tables, |fitted| {
        score(&data, &nodes, fitted)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::Encoding;

    fn frame() -> Frame {
        Frame {
            columns: vec!["a".into(), "b".into(), "c".into()],
            rows: vec![],
        }
    }

    fn levels(n: usize) -> Encoding {
        Encoding::Levels((0..n).map(|i| i.to_string()).collect())
    }

    #[test]
    fn the_parent_list_is_parsed_and_must_be_in_order() {
        let nodes = parse_network("a: ; b: a; c: a, b", &frame()).unwrap();
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[2].parents, vec![0, 1]);
        assert!(parse_network("b: a; a:", &frame()).is_err());
        assert!(parse_network("a:; a:", &frame()).is_err());
        assert!(parse_network("a:; z: a", &frame()).is_err());
        assert!(parse_network(" ; ", &frame()).is_err());
    }

    #[test]
    fn cpt_rows_are_parent_configurations_in_mixed_radix() {
        // a has 2 values, b has 3; c has 2 and parents (a, b): 6 rows.
        let data = Encoded {
            names: vec!["a".into(), "b".into(), "c".into()],
            encodings: vec![levels(2), levels(3), levels(2)],
            train: vec![vec![1, 2, 0], vec![1, 2, 1], vec![0, 1, 1]],
            test: vec![vec![1, 2, 1]],
        };
        let nodes = parse_network("a: ; b: a; c: a, b", &frame()).unwrap();
        let tables = count_tables(&data, &nodes);
        assert_eq!(tables[0].rows, vec![vec![1.0, 2.0]]);
        assert_eq!(
            tables[1].rows,
            vec![vec![0.0, 1.0, 0.0], vec![0.0, 0.0, 2.0]]
        );
        assert_eq!(tables[2].rows.len(), 6);
        assert_eq!(tables[2].rows[5], vec![1.0, 1.0]); // a = 1, b = 2
        assert_eq!(tables[2].rows[1], vec![0.0, 1.0]); // a = 0, b = 1
        assert_eq!(tables[2].label, "BN 3/3 c | a, b");
        // The test record (1, 2, 1) under the maximum-likelihood parameters:
        // ln(2/3) + ln(1) + ln(1/2).
        let fitted = common::maximum_likelihood(&tables, 0.0);
        let ll = score(&data, &nodes, &fitted)[0].1;
        assert!(
            (ll - ((2.0f64 / 3.0).ln() + 0.5f64.ln())).abs() < 1e-12,
            "{ll}"
        );
    }

    #[test]
    fn the_default_network_fits_the_shipped_data_without_empty_rows() {
        let frame = Frame::read(std::path::Path::new("examples/data/breast_cancer.csv")).unwrap();
        let nodes = parse_network(BREAST_CANCER_NETWORK, &frame).unwrap();
        assert_eq!(nodes.len(), 9);
        let data = Encoded::new(&frame, 2024, &[]).unwrap();
        let tables = count_tables(&data, &nodes);
        for t in &tables {
            for row in &t.rows {
                assert!(row.iter().sum::<f64>() > 0.0, "{}", t.label);
            }
        }
    }

    /// `--short`'s network has empty CPT rows on the shipped split: the two-parent node's.
    #[test]
    fn the_short_network_has_empty_parent_configurations() {
        let frame = Frame::read(std::path::Path::new("examples/data/breast_cancer.csv")).unwrap();
        let network = format!("{BREAST_CANCER_NETWORK}; {SHORT_NETWORK_EXTRA}");
        let nodes = parse_network(&network, &frame).unwrap();
        assert_eq!(nodes.len(), 10);
        let data = Encoded::new(&frame, 2024, &[]).unwrap();
        let tables = count_tables(&data, &nodes);
        let empty = common::empty_rows(&tables);
        println!("{empty} empty rows of {}", tables[9].rows.len());
        assert!(empty > 0);
        assert_eq!(common::empty_rows(&tables[..9]), 0);
    }
}
