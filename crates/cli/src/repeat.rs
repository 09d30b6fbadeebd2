//! `--repeat N`: a one-shot test command run N times, a gap apart, and its kind's
//! summary metrics reported across the runs — mean ± σ and median with IQR, the good
//! practice of Miravalls-Sierra et al. (2018), who repeat 10 runs of 10 s, 1 s apart.

use std::fmt::Display;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde::Serialize;
use vantage_analysis::repeat::{across_runs, MetricAcrossRuns};
use vantage_model::kinds;
use vantage_model::units::{format_rate_bps, format_us};

use crate::cmd_latency::{duration_arg, micros_u64, print_json, print_stdout};

#[derive(Args, Debug)]
pub struct RepeatArgs {
    /// Run the test N times and report each metric across the runs: mean ± σ, median
    /// and IQR, min and max (Miravalls-Sierra et al., 2018: 10 runs, 1 s apart).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: u32,
    /// Pause between repeated runs (DUR).
    #[arg(long, value_name = "DUR", value_parser = duration_arg, default_value = "1s")]
    pub repeat_gap: Duration,
}

/// Several runs of one kind and their metrics across the runs (`--repeat N --json`).
#[derive(Serialize)]
struct RepeatedReport<R> {
    test: &'static str,
    repeat: u32,
    gap_us: u64,
    runs: Vec<R>,
    across_runs: Vec<MetricAcrossRuns>,
}

/// How a command prints one result or several.
pub struct Repeated<'a> {
    pub command: &'static str,
    /// The test kind whose metrics are summarised.
    pub kind: &'static str,
    pub json: bool,
    pub args: &'a RepeatArgs,
}

impl Repeated<'_> {
    /// Runs `once` `--repeat` times, `--repeat-gap` apart. One run prints as the
    /// command always has; several print every run and the table across them. A failed
    /// run stops the series: the runs before it are still printed, then the error.
    pub fn run<R: Serialize, E: Display>(
        &self,
        mut once: impl FnMut() -> Result<R, E>,
        human: impl Fn(&R) -> String,
    ) -> ExitCode {
        let mut runs = Vec::new();
        let mut failure = None;
        for index in 0..self.args.repeat {
            if index > 0 {
                std::thread::sleep(self.args.repeat_gap);
            }
            if self.args.repeat > 1 && !self.json {
                eprintln!(
                    "vantage {}: run {} of {}",
                    self.command,
                    index + 1,
                    self.args.repeat
                );
            }
            match once() {
                Ok(result) => runs.push(result),
                Err(error) => {
                    failure = Some(if self.args.repeat > 1 {
                        format!("run {} of {}: {error}", index + 1, self.args.repeat)
                    } else {
                        error.to_string()
                    });
                    break;
                }
            }
        }
        let printed = match runs.as_slice() {
            [] => ExitCode::SUCCESS,
            [only] if self.args.repeat == 1 && self.json => print_json(self.command, only),
            [only] if self.args.repeat == 1 => print_stdout(self.command, &human(only)),
            _ => self.print_several(runs, &human),
        };
        match failure {
            Some(error) => {
                eprintln!("vantage {}: {error}", self.command);
                ExitCode::FAILURE
            }
            None => printed,
        }
    }

    fn print_several<R: Serialize>(&self, runs: Vec<R>, human: impl Fn(&R) -> String) -> ExitCode {
        let documents: Vec<serde_json::Value> = runs
            .iter()
            .filter_map(|run| serde_json::to_value(run).ok())
            .collect();
        let kind = kinds::find(self.kind).expect("a registered test kind");
        let across = across_runs(kind, &documents);
        if self.json {
            return print_json(
                self.command,
                &RepeatedReport {
                    test: self.kind,
                    repeat: self.args.repeat,
                    gap_us: micros_u64(self.args.repeat_gap),
                    runs,
                    across_runs: across,
                },
            );
        }
        let mut text = String::new();
        for (index, run) in runs.iter().enumerate() {
            text += &format!("== run {} of {}\n{}", index + 1, runs.len(), human(run));
            if !text.ends_with('\n') {
                text.push('\n');
            }
        }
        text += &across_runs_table(runs.len(), &across);
        print_stdout(self.command, &text)
    }
}

/// A value in its metric's unit, as people read it.
fn format_metric(metric: &str, value: f64) -> String {
    if metric.ends_with("_bps") {
        format_rate_bps(value)
    } else if metric.ends_with("_us") {
        format_us(value)
    } else if metric.ends_with("_ratio") {
        format!("{:.3} %", value * 100.0)
    } else {
        format!("{value:.3}")
    }
}

fn across_runs_table(runs: usize, rows: &[MetricAcrossRuns]) -> String {
    let mut text = format!("== across {runs} runs (mean ± σ; median, IQR; min – max)\n");
    for row in rows {
        let f = |value| format_metric(&row.metric, value);
        let spread = &row.spread;
        text += &format!(
            "{:<22} {} ± {}; median {}, IQR {}; {} – {}{}\n",
            row.metric,
            f(spread.mean),
            f(spread.stddev),
            f(spread.median),
            f(spread.iqr),
            f(spread.min),
            f(spread.max),
            if row.runs < runs {
                format!(" ({} runs)", row.runs)
            } else {
                String::new()
            }
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_formats_each_metric_in_its_unit() {
        let row = |metric: &str, value: f64, runs| MetricAcrossRuns {
            metric: metric.to_string(),
            runs,
            spread: vantage_analysis::repeat::Spread {
                mean: value,
                stddev: value / 10.0,
                median: value,
                iqr: value / 5.0,
                min: value / 2.0,
                max: value * 2.0,
            },
        };
        let text = across_runs_table(
            3,
            &[row("received_bps", 100e6, 3), row("loss_ratio", 0.01, 2)],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "== across 3 runs (mean ± σ; median, IQR; min – max)"
        );
        assert!(lines[1].starts_with("received_bps"), "{text}");
        assert!(lines[1].contains("100.0 Mbit/s ± 10.0 Mbit/s"), "{text}");
        assert!(lines[2].contains("1.000 % ± 0.100 %"), "{text}");
        assert!(lines[2].ends_with("(2 runs)"), "{text}");
    }
}
