//! `vantage mos`: a subjective study's ratings per condition as MOS with 95 %
//! confidence intervals, pairwise t-tests, and the agreement of an objective metric
//! (Pearson r, slopes per condition unit), the pipeline of Alali (PhD dissertation,
//! University of Virginia, 2019, ch. 5).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use vantage_model::csv_table::CsvTable;
use vantage_stats::{LinearFit, MeanCi, Pearson, TTest, TTestKind};

use crate::cmd_latency::{print_json, print_stdout, read_input};

/// The p-value below which a pair's means differ.
const SIGNIFICANCE: f64 = 0.05;

#[derive(Args, Debug)]
pub struct MosArgs {
    /// The ratings: CSV with a header naming `condition` and `rating` (other columns
    /// ignored; `-` reads stdin), e.g. condition = packet loss in percent.
    #[arg(value_name = "FILE")]
    ratings: PathBuf,
    /// An objective metric per condition: CSV with `condition` and `value` columns
    /// (values of one condition are averaged).
    #[arg(long, value_name = "FILE")]
    objective: Option<PathBuf>,
    /// Student's t-test with a pooled variance instead of Welch's.
    #[arg(long)]
    pooled: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct MosReport {
    conditions: Vec<ConditionMos>,
    t_test: TTestKind,
    significance: f64,
    pairs: Vec<PairTest>,
    #[serde(skip_serializing_if = "Option::is_none")]
    objective: Option<ObjectiveAgreement>,
}

#[derive(Serialize)]
struct ConditionMos {
    condition: String,
    n: usize,
    mos: f64,
    /// The 95 % interval; absent for a single rating.
    #[serde(skip_serializing_if = "Option::is_none")]
    ci95: Option<MeanCi>,
}

#[derive(Serialize)]
struct PairTest {
    a: String,
    b: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    test: Option<TTest>,
    #[serde(skip_serializing_if = "Option::is_none")]
    significant: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
struct ObjectiveAgreement {
    /// Conditions present in both files, in the ratings' order.
    conditions: Vec<String>,
    objective_means: Vec<f64>,
    /// Between the conditions' MOS and the objective means.
    pearson: Pearson,
    /// Least squares over the conditions' means against the condition as a number;
    /// absent when a condition is not a number.
    #[serde(skip_serializing_if = "Option::is_none")]
    mos_slope: Option<LinearFit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    objective_slope: Option<LinearFit>,
}

/// Values grouped by condition, conditions in numeric order when all are numbers,
/// else in order of appearance.
type Groups = Vec<(String, Vec<f64>)>;

/// `condition` and `value_column` of a CSV with a header.
fn parse_groups(text: &str, value_column: &str) -> Result<Groups, String> {
    let table = CsvTable::parse(text).map_err(|e| e.to_string())?;
    let column = |name: &str| table.column(name).map_err(|e| e.to_string());
    let (condition, value) = (column("condition")?, column(value_column)?);
    let mut groups: Groups = Vec::new();
    for row in &table.rows {
        let text = &row.fields[value];
        let number = text
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or(format!(
                "line {}, column {value_column}: '{text}' is not a number",
                row.line
            ))?;
        let name = &row.fields[condition];
        match groups.iter_mut().find(|(known, _)| known == name) {
            Some((_, values)) => values.push(number),
            None => groups.push((name.clone(), vec![number])),
        }
    }
    if groups.is_empty() {
        return Err("no ratings".to_string());
    }
    if let Some(numbers) = numeric(&groups) {
        let mut order: Vec<usize> = (0..groups.len()).collect();
        order.sort_by(|&a, &b| numbers[a].total_cmp(&numbers[b]));
        groups = order.into_iter().map(|i| groups[i].clone()).collect();
    }
    Ok(groups)
}

/// Each condition as a number, when all are.
fn numeric(groups: &Groups) -> Option<Vec<f64>> {
    groups
        .iter()
        .map(|(name, _)| name.parse::<f64>().ok().filter(|v| v.is_finite()))
        .collect()
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

fn read_groups(path: &Path, value_column: &str) -> Result<Groups, String> {
    parse_groups(&read_input(path)?, value_column).map_err(|e| format!("{}: {e}", path.display()))
}

fn agreement(ratings: &Groups, objective: &Groups) -> Result<ObjectiveAgreement, String> {
    let matched: Groups = ratings
        .iter()
        .filter(|(name, _)| objective.iter().any(|(other, _)| other == name))
        .cloned()
        .collect();
    let objective_means: Vec<f64> = matched
        .iter()
        .map(|(name, _)| {
            objective
                .iter()
                .find(|(other, _)| other == name)
                .map_or(f64::NAN, |(_, values)| mean(values))
        })
        .collect();
    let mos: Vec<f64> = matched.iter().map(|(_, values)| mean(values)).collect();
    let pearson = vantage_stats::pearson(&mos, &objective_means)
        .map_err(|e| format!("objective metric against MOS: {e}"))?;
    let slopes = numeric(&matched)
        .map(|x| -> Result<_, String> {
            let fit = |y: &[f64]| vantage_stats::least_squares(&x, y).map_err(|e| e.to_string());
            Ok((fit(&mos)?, fit(&objective_means)?))
        })
        .transpose()?;
    Ok(ObjectiveAgreement {
        conditions: matched.into_iter().map(|(name, _)| name).collect(),
        objective_means,
        pearson,
        mos_slope: slopes.map(|(mos, _)| mos),
        objective_slope: slopes.map(|(_, objective)| objective),
    })
}

fn report(args: &MosArgs) -> Result<MosReport, String> {
    let groups = read_groups(&args.ratings, "rating")?;
    let kind = if args.pooled {
        TTestKind::Pooled
    } else {
        TTestKind::Welch
    };
    let conditions = groups
        .iter()
        .map(|(name, values)| ConditionMos {
            condition: name.clone(),
            n: values.len(),
            mos: mean(values),
            ci95: vantage_stats::mean_ci(values, 0.95).ok(),
        })
        .collect();
    let mut pairs = Vec::new();
    for (i, (a, a_values)) in groups.iter().enumerate() {
        for (b, b_values) in &groups[i + 1..] {
            let test = vantage_stats::t_test(a_values, b_values, kind);
            pairs.push(PairTest {
                a: a.clone(),
                b: b.clone(),
                significant: test.as_ref().ok().map(|t| t.p_value < SIGNIFICANCE),
                error: test.as_ref().err().map(ToString::to_string),
                test: test.ok(),
            });
        }
    }
    let objective = args
        .objective
        .as_deref()
        .map(|path| agreement(&groups, &read_groups(path, "value")?))
        .transpose()?;
    Ok(MosReport {
        conditions,
        t_test: kind,
        significance: SIGNIFICANCE,
        pairs,
        objective,
    })
}

fn human(report: &MosReport) -> String {
    let mut text = format!(
        "{:<12} {:>5} {:>6} {:>17}\n",
        "condition", "n", "MOS", "95 % CI"
    );
    for condition in &report.conditions {
        let ci = condition.ci95.map_or_else(
            || "-".to_string(),
            |ci| format!("{:.3}–{:.3}", ci.low, ci.high),
        );
        text += &format!(
            "{:<12} {:>5} {:>6.3} {:>17}\n",
            condition.condition, condition.n, condition.mos, ci
        );
    }
    let kind = match report.t_test {
        TTestKind::Welch => "Welch",
        TTestKind::Pooled => "Student, pooled variance",
    };
    text += &format!(
        "\npairwise t-tests ({kind}, two-sided; * p < {})\n",
        report.significance
    );
    for pair in &report.pairs {
        let pair_name = format!("{} – {}", pair.a, pair.b);
        text += &match (&pair.test, &pair.error) {
            (Some(test), _) => format!(
                "{pair_name:<20} t {:>8.3}  df {:>6.2}  p {:<10.3e} {}\n",
                test.t,
                test.df,
                test.p_value,
                if pair.significant == Some(true) {
                    "*"
                } else {
                    ""
                }
            ),
            (None, error) => format!("{pair_name:<20} {}\n", error.as_deref().unwrap_or_default()),
        };
    }
    if let Some(objective) = &report.objective {
        text += &format!(
            "\nobjective metric over {} conditions: Pearson r = {:.3}{}\n",
            objective.conditions.len(),
            objective.pearson.r,
            objective
                .pearson
                .p_value
                .map_or_else(String::new, |p| format!(" (p {p:.3})"))
        );
        if let (Some(mos), Some(metric)) = (objective.mos_slope, objective.objective_slope) {
            text += &format!(
                "slope per condition unit: MOS {:.4}, objective {:.4}\n",
                mos.slope, metric.slope
            );
        }
    }
    text
}

pub fn run(args: MosArgs) -> ExitCode {
    match report(&args) {
        Ok(report) if args.json => print_json("mos", &report),
        Ok(report) => print_stdout("mos", &human(&report)),
        Err(error) => {
            eprintln!("vantage mos: {error}");
            ExitCode::FAILURE
        }
    }
}
