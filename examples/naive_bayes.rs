//! Naive Bayes through the service, as in the seed paper's §5.1 (000, Figs. 4 and 5).
//!
//! Reads a CSV with a header, splits it 70/30 with a fixed seed, cuts numeric columns into 10
//! quantile bins on the training rows, and fits a categorical naive Bayes model from K + 1
//! count tables: the class counts (one row), and for every feature a table with one row per
//! class (the rows count disjoint groups of records, so a whole table costs one vector). The
//! tables are released with `dirichlet`, `gaussian` and `laplace` at ε/(K+1) each under one
//! dataset budget of ε, and the test cross-entropy and accuracy are printed against ε, beside
//! the non-private (maximum-likelihood) model and uniform guessing. The same ε is also split by
//! the service's planner for one common KL target (`planned:*`, the baselines smoothed as it
//! chooses), and the baselines are fitted with its smoothing at the even split (`smoothed:*`):
//! see `common::kl_split` and EXPERIMENTS.md.
//!
//! A class with no training record leaves an all-zero row in every feature table (an empty
//! group): the service releases it like any other row, so the published model has the same shape
//! whichever groups are empty. `--short` fits a second model where that happens: the class is
//! `worst_area` cut at public edges every 500 (`--class worst_area --class-edges 500,1000,…`),
//! and on the shipped split no training record falls in 3500–4000.
//!
//! ```sh
//! cargo run --release --example naive_bayes                  # full grid, 10 repetitions
//! cargo run --example naive_bayes -- --short                 # 3 values of ε, once (CI)
//! cargo run --release --example naive_bayes -- --url http://127.0.0.1:8080 --admin-token …
//! ```

mod common;

use clap::Arg;
use common::{label, ln_clipped, Args, CountTable, Encoded, Fitted, Frame, Result, Scores};

struct Model {
    class: usize,
    features: Vec<usize>,
}

/// Table 0: class counts; table 1 + f: counts of feature f's cells, one row per class.
fn count_tables(data: &Encoded, model: &Model) -> Vec<CountTable> {
    let classes = data.cells(model.class);
    let total = model.features.len() + 1;
    let mut class_counts = vec![0.0; classes];
    for record in &data.train {
        class_counts[record[model.class]] += 1.0;
    }
    let mut tables = vec![CountTable {
        label: label(format!("NB 1/{total} class {}", data.names[model.class])),
        rows: vec![class_counts],
    }];
    for (i, &f) in model.features.iter().enumerate() {
        let mut rows = vec![vec![0.0; data.cells(f)]; classes];
        for record in &data.train {
            rows[record[model.class]][record[f]] += 1.0;
        }
        tables.push(CountTable {
            label: label(format!(
                "NB {}/{total} {} | {}",
                i + 2,
                data.names[f],
                data.names[model.class]
            )),
            rows,
        });
    }
    tables
}

/// Test cross-entropy (mean −ln p(true class | features), nats) and accuracy.
fn score(data: &Encoded, model: &Model, fitted: &Fitted) -> Scores {
    let prior = &fitted[0][0];
    let mut cross_entropy = 0.0;
    let mut correct = 0usize;
    for record in &data.test {
        let log_joint: Vec<f64> = (0..prior.len())
            .map(|c| {
                ln_clipped(prior[c])
                    + model
                        .features
                        .iter()
                        .enumerate()
                        .map(|(i, &f)| ln_clipped(fitted[i + 1][c][record[f]]))
                        .sum::<f64>()
            })
            .collect();
        let max = log_joint.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let log_evidence = max + log_joint.iter().map(|l| (l - max).exp()).sum::<f64>().ln();
        let truth = record[model.class];
        let posterior = (log_joint[truth] - log_evidence).exp();
        cross_entropy -= ln_clipped(posterior);
        // Ties go to the lowest class index.
        let predicted = (0..log_joint.len()).fold(0, |best, c| {
            if log_joint[c] > log_joint[best] {
                c
            } else {
                best
            }
        });
        correct += usize::from(predicted == truth);
    }
    let n = data.test.len() as f64;
    vec![
        ("cross_entropy", cross_entropy / n),
        ("accuracy", correct as f64 / n),
    ]
}

/// `--short`'s second model: the tumour's worst area in classes cut every 500 (public edges,
/// not quantiles of the data), one of which has no training record on the shipped split.
const SHORT_EMPTY_CLASS: &str = "worst_area";
const SHORT_EMPTY_EDGES: [f64; 8] = [
    500.0, 1000.0, 1500.0, 2000.0, 2500.0, 3000.0, 3500.0, 4000.0,
];

/// Encode the data for `class` (cut at `edges` when given, else categorical) and fit and score
/// the model through the service.
async fn experiment(
    name: &str,
    args: &Args,
    frame: &Frame,
    class_name: &str,
    edges: Option<Vec<f64>>,
) -> Result<()> {
    let class = frame.column(class_name)?;
    let data = match edges {
        Some(edges) => Encoded::with_edges(frame, args.seed, &[], &[(class_name, edges)])?,
        None => Encoded::new(frame, args.seed, &[class_name])?,
    };
    let model = Model {
        class,
        features: (0..data.names.len()).filter(|&j| j != class).collect(),
    };
    eprintln!(
        "{}: {} training and {} test records, {} classes, {} features",
        args.data.display(),
        data.train.len(),
        data.test.len(),
        data.cells(class),
        model.features.len()
    );
    let tables = count_tables(&data, &model);
    common::run_experiment(name, args, &tables, |fitted| score(&data, &model, fitted)).await
}

#[tokio::main]
async fn main() -> Result<()> {
    let matches = common::command(
        "naive_bayes",
        "Naive Bayes fitted through the service: test cross-entropy and accuracy against ε",
    )
    .arg(
        Arg::new("class")
            .long("class")
            .default_value("diagnosis")
            .help("The class column"),
    )
    .arg(
        Arg::new("class-edges")
            .long("class-edges")
            .value_delimiter(',')
            .value_parser(clap::value_parser!(f64))
            .help("Cut a numeric class column at these public edges (increasing) instead of taking its values as categories"),
    )
    .get_matches();
    let args = Args::from_matches(&matches)?;
    let class_name = matches.get_one::<String>("class").expect("has a default");
    let edges: Option<Vec<f64>> = matches
        .get_many::<f64>("class-edges")
        .map(|e| e.copied().collect());
    let defaults = edges.is_none()
        && matches.value_source("class") == Some(clap::parser::ValueSource::DefaultValue);
    let frame = Frame::read(&args.data)?;
    experiment("naive_bayes", &args, &frame, class_name, edges).await?;
    if args.short && defaults {
        // A split with an empty group, so CI releases one.
        let mut args = args.clone();
        args.out = args.out.map(|p| p.with_extension("empty-groups.csv"));
        experiment(
            "naive_bayes (worst_area classes, one with no training record)",
            &args,
            &frame,
            SHORT_EMPTY_CLASS,
            Some(SHORT_EMPTY_EDGES.to_vec()),
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::Encoding;

    /// Feature 0 with 2 cells, class in column 1 with 2 classes.
    fn data(train: Vec<Vec<usize>>, test: Vec<Vec<usize>>) -> Encoded {
        Encoded {
            names: vec!["x".into(), "y".into()],
            encodings: vec![
                Encoding::Levels(vec!["a".into(), "b".into()]),
                Encoding::Levels(vec!["no".into(), "yes".into()]),
            ],
            train,
            test,
        }
    }

    #[test]
    fn tables_are_the_class_vector_and_one_row_per_class() {
        let d = data(vec![vec![0, 0], vec![0, 0], vec![1, 0], vec![1, 1]], vec![]);
        let tables = count_tables(
            &d,
            &Model {
                class: 1,
                features: vec![0],
            },
        );
        assert_eq!(tables.len(), 2);
        assert_eq!(tables[0].rows, vec![vec![3.0, 1.0]]);
        assert_eq!(tables[1].rows, vec![vec![2.0, 1.0], vec![0.0, 1.0]]);
        assert_eq!(tables[1].label, "NB 2/2 x | y");
    }

    #[test]
    fn cross_entropy_and_accuracy_by_hand() {
        let d = data(vec![], vec![vec![0, 0], vec![1, 0]]);
        let model = Model {
            class: 1,
            features: vec![0],
        };
        let fitted: Fitted = vec![vec![vec![0.5, 0.5]], vec![vec![0.9, 0.1], vec![0.2, 0.8]]];
        let scores = score(&d, &model, &fitted);
        // p(no | a) = 0.45 / 0.55; p(no | b) = 0.05 / 0.45, predicted yes (wrong).
        let expected = -((0.45f64 / 0.55).ln() + (0.05f64 / 0.45).ln()) / 2.0;
        assert_eq!(scores[0].0, "cross_entropy");
        assert!((scores[0].1 - expected).abs() < 1e-12, "{scores:?}");
        assert_eq!(scores[1], ("accuracy", 0.5));
    }

    /// A class with no training record gives an all-zero row in every feature table;
    /// the tables keep it (the model's shape never depends on which groups are empty).
    #[test]
    fn a_class_without_training_records_is_an_empty_row() {
        // Class column 1 has three levels; "maybe" (2) occurs only in the test set.
        let mut d = data(vec![vec![0, 0], vec![1, 1], vec![1, 0]], vec![vec![0, 2]]);
        d.encodings[1] = Encoding::Levels(vec!["no".into(), "yes".into(), "maybe".into()]);
        let model = Model {
            class: 1,
            features: vec![0],
        };
        let tables = count_tables(&d, &model);
        assert_eq!(tables[0].rows, vec![vec![2.0, 1.0, 0.0]]);
        assert_eq!(tables[1].rows.len(), 3);
        assert_eq!(tables[1].rows[2], vec![0.0, 0.0]);
        assert_eq!(common::empty_rows(&tables), 1);
    }

    /// `--short`'s second model: on the shipped data and split, the worst-area classes cut every
    /// 500 leave 3500–4000 without a training record, so every feature table has an empty row.
    #[test]
    fn the_short_runs_second_model_has_an_empty_class() {
        let frame = Frame::read(std::path::Path::new("examples/data/breast_cancer.csv")).unwrap();
        let class = frame.column(SHORT_EMPTY_CLASS).unwrap();
        let d = Encoded::with_edges(
            &frame,
            2024,
            &[],
            &[(SHORT_EMPTY_CLASS, SHORT_EMPTY_EDGES.to_vec())],
        )
        .unwrap();
        assert_eq!(d.cells(class), 9);
        let model = Model {
            class,
            features: (0..d.names.len()).filter(|&j| j != class).collect(),
        };
        let tables = count_tables(&d, &model);
        assert_eq!(tables[0].rows[0][7], 0.0, "{:?}", tables[0].rows[0]);
        assert_eq!(common::empty_rows(&tables), tables.len() - 1);
        assert!(tables[1..]
            .iter()
            .all(|t| t.rows[7].iter().all(|&c| c == 0.0)));
    }

    #[test]
    fn an_impossible_record_is_clipped_not_infinite() {
        let d = data(vec![], vec![vec![1, 0]]);
        let model = Model {
            class: 1,
            features: vec![0],
        };
        let fitted: Fitted = vec![vec![vec![0.5, 0.5]], vec![vec![1.0, 0.0], vec![0.5, 0.5]]];
        let ce = score(&d, &model, &fitted)[0].1;
        // θ(b | no) = 0 enters as machine epsilon: p(no | b) = ε·½ / (ε·½ + ½·½) ≈ 2ε.
        let eps = f64::EPSILON;
        let expected = -(eps * 0.5 / (eps * 0.5 + 0.25)).ln();
        assert!(
            (ce - expected).abs() < 1e-9 && ce.is_finite(),
            "{ce} vs {expected}"
        );
    }
}
