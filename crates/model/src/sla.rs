//! Service-level agreements: a contract's committed figures for the paths some
//! tasks measure, and the verdict one result gives against them.
//!
//! The method is the multi-service SLA verification of Rufini et al. (Fotonica
//! 2014): the committed rate is checked against the effective capacity a scheduled
//! `capacity` run verified (UDP at the capacity less ε with loss at most 0.1 %) or
//! the rate a `throughput` run received; delay, loss and jitter against the latency
//! runs of the same tasks. How a verdict is reached is
//! `vantage_analysis::sla::judge`; the server stores each one and alerts on failure.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::config_error::{check_name, ConfigError};
use crate::kinds::{capacity, latency, throughput, Metric};
use crate::units::{format_rate_bps, format_us, parse_duration, parse_rate_bps};

/// A contract as written in a configuration's `[[contracts]]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContractConfig {
    pub name: String,
    /// The tasks whose results the contract judges (their groups are the paths it
    /// covers); each committed figure needs one task whose test measures it.
    pub tasks: Vec<String>,
    /// Committed rate, a BPS such as `100M`: the least a run may measure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    /// Largest median round-trip time, a DUR such as `30ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt: Option<String>,
    /// Largest packet loss ratio (0.001 is 0.1 %).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// Largest jitter (RFC 3550 interarrival jitter), a DUR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
}

/// One committed figure of a contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Clause {
    /// A floor: measured at least the limit (bits per second).
    Rate,
    /// A ceiling on the median RTT (microseconds).
    Rtt,
    /// A ceiling on the loss ratio.
    Loss,
    /// A ceiling on the jitter (microseconds).
    Jitter,
}

impl Clause {
    pub const ALL: [Clause; 4] = [Clause::Rate, Clause::Rtt, Clause::Loss, Clause::Jitter];

    pub fn name(self) -> &'static str {
        match self {
            Clause::Rate => "rate",
            Clause::Rtt => "rtt",
            Clause::Loss => "loss",
            Clause::Jitter => "jitter",
        }
    }

    /// Whether the limit is a floor (rate) rather than a ceiling.
    pub fn is_floor(self) -> bool {
        self == Clause::Rate
    }

    /// Which kind metric measures the clause, per test kind.
    pub fn sources(self) -> &'static [(&'static str, Metric)] {
        match self {
            Clause::Rate => &[
                ("capacity", capacity::CAPACITY),
                ("throughput", throughput::RECEIVED),
            ],
            Clause::Rtt => &[("latency", latency::RTT_MEDIAN)],
            Clause::Loss => &[("latency", latency::LOSS)],
            Clause::Jitter => &[("latency", latency::JITTER)],
        }
    }

    /// The metric of a result of `kind` that measures this clause, if any.
    pub fn metric_for(self, kind: &str) -> Option<Metric> {
        self.sources()
            .iter()
            .find(|(source_kind, _)| *source_kind == kind)
            .map(|(_, metric)| *metric)
    }
}

/// A validated contract: limits in base units (bits per second, microseconds, ratio).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Contract {
    pub name: String,
    pub tasks: Vec<String>,
    /// The committed figures.
    pub limits: BTreeMap<Clause, f64>,
}

impl Contract {
    pub fn judges_task(&self, task: &str) -> bool {
        self.tasks.iter().any(|name| name == task)
    }
}

/// One clause of one verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClauseVerdict {
    pub clause: Clause,
    /// The kind metric that measured it, such as `capacity_bps`.
    pub metric: String,
    pub measured: f64,
    pub limit: f64,
    /// Headroom relative to the limit: (measured − limit) / limit for the rate,
    /// (limit − measured) / limit for ceilings; negative when the clause fails.
    pub margin: f64,
    pub pass: bool,
}

impl Clause {
    /// A figure of this clause in its unit: `42.1 Mbit/s`, `12.3 ms`, `0.100 %`.
    pub fn format(self, figure: f64) -> String {
        match self {
            Clause::Rate => format_rate_bps(figure),
            Clause::Rtt | Clause::Jitter => format_us(figure),
            Clause::Loss => format!("{:.3} %", figure * 100.0),
        }
    }

    /// `rate >= 50.0 Mbit/s`, `rtt <= 30.0 ms`.
    pub fn describe_limit(self, limit: f64) -> String {
        let relation = if self.is_floor() { ">=" } else { "<=" };
        format!("{} {relation} {}", self.name(), self.format(limit))
    }
}

/// `rate 42.1 Mbit/s, committed at least 50.0 Mbit/s (margin -15.8 %) FAIL`.
impl fmt::Display for ClauseVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}, committed {} {} (margin {:+.1} %){}",
            self.clause.name(),
            self.clause.format(self.measured),
            if self.clause.is_floor() {
                "at least"
            } else {
                "at most"
            },
            self.clause.format(self.limit),
            self.margin * 100.0,
            if self.pass { "" } else { " FAIL" }
        )
    }
}

/// A contract's verdict on one result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlaVerdict {
    pub contract: String,
    pub run_id: String,
    pub task: String,
    pub client: String,
    pub server: String,
    /// When the judged run started.
    pub time: DateTime<Utc>,
    /// Every clause the result measured passed.
    pub pass: bool,
    pub clauses: Vec<ClauseVerdict>,
}

/// Checks one `[[contracts]]` entry; `task_kinds` maps each valid task to its test kind.
pub(crate) fn validate_contract(
    path: &str,
    contract: &ContractConfig,
    task_kinds: &BTreeMap<&str, &str>,
    errors: &mut Vec<ConfigError>,
) -> Option<Contract> {
    let before = errors.len();
    check_name(path, &contract.name, errors);
    let mut push = |field: &str, message: String| {
        errors.push(ConfigError::new(format!("{path}.{field}"), message));
    };
    if contract.tasks.is_empty() {
        push(
            "tasks",
            "a contract needs at least one task whose results it judges".into(),
        );
    }
    // The kinds the contract's tasks run, for checking that each clause is measured.
    let mut kinds = BTreeSet::new();
    for (index, name) in contract.tasks.iter().enumerate() {
        match task_kinds.get(name.as_str()) {
            None => push(
                &format!("tasks[{index}]"),
                format!("no task named '{name}' (or its test is invalid)"),
            ),
            Some(kind) => {
                kinds.insert(*kind);
            }
        }
    }
    let mut limits = BTreeMap::new();
    for clause in Clause::ALL {
        let field = clause.name();
        let parsed: Option<Result<f64, String>> = match clause {
            Clause::Rate => contract.rate.as_deref().map(|text| {
                parse_rate_bps(text)
                    .map(|bps| bps as f64)
                    .map_err(|e| e.to_string())
            }),
            Clause::Rtt => contract.rtt.as_deref().map(parse_us),
            Clause::Jitter => contract.jitter.as_deref().map(parse_us),
            Clause::Loss => contract.loss.map(|ratio| {
                if ratio > 0.0 && ratio < 1.0 {
                    Ok(ratio)
                } else {
                    Err(format!("{ratio} is not a ratio above 0 and below 1"))
                }
            }),
        };
        let Some(parsed) = parsed else { continue };
        match parsed {
            Ok(limit) if limit > 0.0 => {
                let measured_by: Vec<&str> = clause.sources().iter().map(|(k, _)| *k).collect();
                // No kinds means every task was unknown, which is reported already.
                if !kinds.is_empty() && !measured_by.iter().any(|kind| kinds.contains(kind)) {
                    push(
                        field,
                        format!(
                            "none of the contract's tasks measures '{field}': add a task whose test is {}",
                            measured_by.join(" or ")
                        ),
                    );
                }
                limits.insert(clause, limit);
            }
            Ok(_) => push(field, "must be above zero".into()),
            Err(message) => push(field, message),
        }
    }
    let commits_to_nothing = contract.rate.is_none()
        && contract.rtt.is_none()
        && contract.loss.is_none()
        && contract.jitter.is_none();
    if commits_to_nothing {
        push(
            "rate",
            "a contract commits to at least one of rate, rtt, loss, jitter".into(),
        );
    }
    (errors.len() == before).then(|| Contract {
        name: contract.name.clone(),
        tasks: contract.tasks.clone(),
        limits,
    })
}

fn parse_us(text: &str) -> Result<f64, String> {
    parse_duration(text)
        .map(|duration| duration.as_secs_f64() * 1e6)
        .map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_config;
    use crate::kinds;

    #[test]
    fn every_clause_source_is_a_registered_kind_metric() {
        for clause in Clause::ALL {
            for (kind, metric) in clause.sources() {
                let registered = kinds::find(kind).unwrap_or_else(|| panic!("kind {kind}"));
                assert!(
                    registered.metrics.iter().any(|m| m.name == metric.name),
                    "{kind} exports {}",
                    metric.name
                );
            }
        }
    }

    const BASE: &str = r#"
[[groups]]
name = "g"
kind = "mesh"
members = ["*"]

[[tests]]
name = "rtt"
type = "latency"

[[tests]]
name = "cap"
type = "capacity"

[[tasks]]
name = "mesh-rtt"
test = "rtt"
group = "g"
every = "60s"

[[tasks]]
name = "mesh-capacity"
test = "cap"
group = "g"
every = "6h"
"#;

    fn errors_of(contract: &str) -> Vec<String> {
        match load_config("c.toml", &format!("{BASE}\n[[contracts]]\n{contract}")) {
            Ok(_) => Vec::new(),
            Err(errors) => errors.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn a_contract_validates_into_base_units() {
        let (_, config) = load_config(
            "c.toml",
            &format!(
                "{BASE}\n[[contracts]]\nname = \"gold\"\ntasks = [\"mesh-rtt\", \"mesh-capacity\"]\n\
                 rate = \"50M\"\nrtt = \"30ms\"\nloss = 0.001\njitter = \"2ms\"\n"
            ),
        )
        .unwrap();
        let contract = &config.contracts[0];
        assert_eq!(contract.name, "gold");
        assert_eq!(
            contract.limits,
            BTreeMap::from([
                (Clause::Rate, 50e6),
                (Clause::Rtt, 30_000.0),
                (Clause::Loss, 0.001),
                (Clause::Jitter, 2_000.0)
            ])
        );
        assert_eq!(
            serde_json::to_value(contract).unwrap()["limits"],
            serde_json::json!({"rate": 50e6, "rtt": 30_000.0, "loss": 0.001, "jitter": 2_000.0})
        );
        assert!(contract.judges_task("mesh-capacity"));
        assert!(!contract.judges_task("other"));
    }

    #[test]
    fn bad_contracts_say_what_and_where() {
        assert_eq!(
            errors_of("name = \"c\"\ntasks = [\"mesh-rtt\"]\nrate = \"10M\""),
            vec!["contracts[0].rate: none of the contract's tasks measures 'rate': add a task whose test is capacity or throughput"]
        );
        assert_eq!(
            errors_of("name = \"c\"\ntasks = [\"nope\"]\nrtt = \"10ms\""),
            vec!["contracts[0].tasks[0]: no task named 'nope' (or its test is invalid)"]
        );
        assert_eq!(
            errors_of("name = \"c\"\ntasks = [\"mesh-rtt\"]"),
            vec![
                "contracts[0].rate: a contract commits to at least one of rate, rtt, loss, jitter"
            ]
        );
        assert_eq!(
            errors_of("name = \"c\"\ntasks = [\"mesh-rtt\"]\nloss = 1.5"),
            vec!["contracts[0].loss: 1.5 is not a ratio above 0 and below 1"]
        );
        assert_eq!(
            errors_of("name = \"c\"\ntasks = []\nrtt = \"0s\""),
            vec![
                "contracts[0].tasks: a contract needs at least one task whose results it judges",
                "contracts[0].rtt: must be above zero"
            ]
        );
        assert!(
            errors_of("name = \"c\"\ntasks = [\"mesh-rtt\"]\nrtt = \"soon\"")[0]
                .starts_with("contracts[0].rtt: ")
        );
    }
}
