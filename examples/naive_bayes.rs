//! Naive Bayes through the service, as in the seed paper's §5.1 (000, Figs. 4 and 5).
//!
//! Reads a CSV with a header, splits it 70/30 with a fixed seed, cuts numeric columns into 10
//! quantile bins on the training rows, and fits a categorical naive Bayes model from K + 1
//! count tables: the class counts (one row), and for every feature a table with one row per
//! class (the rows count disjoint groups of records, so a whole table costs one vector). The
//! tables are released with `dirichlet`, `gaussian` and `laplace` at ε/(K+1) each under one
//! dataset budget of ε, and the test cross-entropy and accuracy are printed against ε, beside
//! the non-private (maximum-likelihood) model and uniform guessing.
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
    .get_matches();
    let args = Args::from_matches(&matches)?;
    let class_name = matches.get_one::<String>("class").expect("has a default");
    let frame = Frame::read(&args.data)?;
    let class = frame.column(class_name)?;
    let data = Encoded::new(&frame, args.seed, &[class_name.as_str()])?;
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
    common::run_experiment("naive_bayes", &args, &tables, |fitted| {
        score(&data, &model, fitted)
    })
    .await
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
