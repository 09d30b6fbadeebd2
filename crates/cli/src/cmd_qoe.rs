//! `vantage qoe`: video stalls and MOS from a throughput series, by the
//! playback-buffer model and MOS guideline of Rufini et al. (Fotonica 2014).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;
use vantage_analysis::qoe::{
    self, PlaybackOutcome, PlaybackSpec, RateStep, VideoProfile, PROFILES,
};
use vantage_model::throughput::{Direction, ThroughputResult};
use vantage_model::units::format_rate_bps;

use crate::cmd_latency::{duration_arg, print_json, print_stdout, read_input};
use crate::cmd_throughput::rate_arg;

#[derive(Args, Debug)]
pub struct QoeArgs {
    /// The series: a `vantage throughput --json` result, a JSON array of
    /// `{"duration_s", "rate_bps"}` steps, or CSV lines `duration_s,rate_bps`; `-` reads stdin.
    #[arg(value_name = "FILE")]
    series: PathBuf,
    /// Video profiles to play (repeatable; default: all). `--list-profiles` names them.
    #[arg(long, value_name = "NAME")]
    profile: Vec<String>,
    /// A video at this constant bitrate (BPS, e.g. 6M) instead of the named profiles.
    #[arg(long, value_name = "BPS", value_parser = rate_arg, conflicts_with = "profile")]
    bitrate: Option<u64>,
    /// The video's length (DUR, e.g. 4m); default: as long as the series.
    #[arg(long, value_name = "DUR", value_parser = duration_arg)]
    video: Option<Duration>,
    /// Video buffered before playback starts (DUR; 2 s is a common player default).
    #[arg(long, value_name = "DUR", value_parser = duration_arg, default_value = "2s")]
    initial_buffer: Duration,
    /// Video buffered before playback resumes after a stall (DUR).
    #[arg(long, value_name = "DUR", value_parser = duration_arg, default_value = "2s")]
    rebuffer: Duration,
    /// Repeat the series until the video has downloaded (a steady path measured for
    /// less time than the video lasts).
    #[arg(long = "loop")]
    loop_series: bool,
    /// For a throughput result: the direction the player downloads in (default: the
    /// result's own; required for a `--bidir` result).
    #[arg(long, value_enum)]
    direction: Option<DirectionArg>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum DirectionArg {
    Forward,
    Reverse,
}

#[derive(Serialize)]
struct QoeReport {
    series: SeriesSummary,
    video_s: f64,
    initial_buffer_s: f64,
    rebuffer_s: f64,
    loop_series: bool,
    profiles: Vec<ProfileVerdict>,
}

#[derive(Serialize)]
struct SeriesSummary {
    source: String,
    steps: usize,
    duration_s: f64,
    mean_rate_bps: f64,
}

#[derive(Serialize)]
struct ProfileVerdict {
    profile: String,
    bitrate_bps: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<PlaybackOutcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The series in `text`, and what it was read as.
fn parse_series(
    text: &str,
    direction: Option<DirectionArg>,
) -> Result<(Vec<RateStep>, String), String> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        let result: ThroughputResult =
            serde_json::from_str(text).map_err(|e| format!("not a throughput result: {e}"))?;
        let wanted = match (direction, result.summary.direction) {
            (Some(DirectionArg::Forward), _) => Direction::Forward,
            (Some(DirectionArg::Reverse), _) => Direction::Reverse,
            (None, Direction::Bidir) => {
                return Err("a --bidir result: choose the player's --direction".to_string())
            }
            (None, own) => own,
        };
        let steps = qoe::series_from_intervals(&result.intervals, Some(wanted));
        let named = if wanted == Direction::Forward {
            "forward (upload)"
        } else {
            "reverse (download)"
        };
        return Ok((steps, format!("throughput result, {named}")));
    }
    if trimmed.starts_with('[') {
        let steps: Vec<RateStep> =
            serde_json::from_str(text).map_err(|e| format!("not a JSON array of steps: {e}"))?;
        return Ok((steps, "JSON steps".to_string()));
    }
    let mut steps = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || (index == 0 && line.contains("duration")) {
            continue;
        }
        let number = |field: Option<&str>, name: &str| -> Result<f64, String> {
            let field = field.map(str::trim).unwrap_or_default();
            field
                .parse::<f64>()
                .map_err(|_| format!("line {}: {name} '{field}' is not a number", index + 1))
        };
        let mut fields = line.split(',');
        let duration_s = number(fields.next(), "duration_s")?;
        let rate_bps = number(fields.next(), "rate_bps")?;
        if fields.next().is_some() {
            return Err(format!(
                "line {}: expected two fields, duration_s,rate_bps",
                index + 1
            ));
        }
        steps.push(RateStep {
            duration_s,
            rate_bps,
        });
    }
    Ok((steps, "CSV steps".to_string()))
}

fn profiles(args: &QoeArgs) -> Result<Vec<VideoProfile>, String> {
    if let Some(bitrate_bps) = args.bitrate {
        return Ok(vec![VideoProfile {
            name: "custom",
            bitrate_bps: bitrate_bps as f64,
            description: "the --bitrate given",
        }]);
    }
    if args.profile.is_empty() {
        return Ok(PROFILES.to_vec());
    }
    args.profile
        .iter()
        .map(|name| {
            qoe::profile(name).copied().ok_or_else(|| {
                let known: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
                format!("unknown profile '{name}' (known: {})", known.join(", "))
            })
        })
        .collect()
}

fn report(args: &QoeArgs) -> Result<QoeReport, String> {
    let profiles = profiles(args)?;
    let text = read_input(&args.series)?;
    let (series, source) = parse_series(&text, args.direction)
        .and_then(|(series, source)| {
            qoe::check_series(&series).map_err(|e| e.to_string())?;
            Ok((series, source))
        })
        .map_err(|e| format!("{}: {e}", args.series.display()))?;
    let duration_s = qoe::series_duration_s(&series);
    let video_s = args.video.map_or(duration_s, |video| video.as_secs_f64());
    let verdicts = profiles
        .iter()
        .map(|profile| {
            let spec = PlaybackSpec {
                bitrate_bps: profile.bitrate_bps,
                video_s,
                initial_buffer_s: args.initial_buffer.as_secs_f64(),
                rebuffer_s: args.rebuffer.as_secs_f64(),
                loop_series: args.loop_series,
            };
            let played = qoe::play(&spec, &series);
            ProfileVerdict {
                profile: profile.name.to_string(),
                bitrate_bps: profile.bitrate_bps,
                error: played.as_ref().err().map(ToString::to_string),
                outcome: played.ok(),
            }
        })
        .collect();
    Ok(QoeReport {
        series: SeriesSummary {
            source,
            steps: series.len(),
            duration_s,
            mean_rate_bps: qoe::mean_rate_bps(&series),
        },
        video_s,
        initial_buffer_s: args.initial_buffer.as_secs_f64(),
        rebuffer_s: args.rebuffer.as_secs_f64(),
        loop_series: args.loop_series,
        profiles: verdicts,
    })
}

fn human(report: &QoeReport) -> String {
    let mut text = format!(
        "series: {} ({} step{}, {:.1} s, mean {})\nvideo {:.1} s, start-up buffer {:.1} s, \
         re-buffer {:.1} s{}\nMOS by stalls (Rufini et al., Fotonica 2014)\n\n",
        report.series.source,
        report.series.steps,
        if report.series.steps == 1 { "" } else { "s" },
        report.series.duration_s,
        format_rate_bps(report.series.mean_rate_bps),
        report.video_s,
        report.initial_buffer_s,
        report.rebuffer_s,
        if report.loop_series {
            ", series looped"
        } else {
            ""
        },
    );
    text += &format!(
        "{:<14} {:>12} {:>4} {:>7} {:>9} {:>9}  {}\n",
        "profile", "bitrate", "MOS", "stalls", "stalled", "start-up", "rule"
    );
    for verdict in &report.profiles {
        let bitrate = format_rate_bps(verdict.bitrate_bps);
        match (&verdict.outcome, &verdict.error) {
            (Some(outcome), _) => {
                text += &format!(
                    "{:<14} {:>12} {:>4} {:>7} {:>7.2} s {:>7.2} s  {}\n",
                    verdict.profile,
                    bitrate,
                    outcome.mos,
                    outcome.stalls.len(),
                    outcome.total_stall_s,
                    outcome.startup_delay_s,
                    outcome.mos_rule
                )
            }
            (None, error) => {
                text += &format!(
                    "{:<14} {:>12}    -  {}\n",
                    verdict.profile,
                    bitrate,
                    error.as_deref().unwrap_or_default()
                )
            }
        }
    }
    text
}

pub fn run(args: QoeArgs) -> ExitCode {
    let report = match report(&args) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("vantage qoe: {error}");
            return ExitCode::FAILURE;
        }
    };
    if report
        .profiles
        .iter()
        .all(|verdict| verdict.outcome.is_none())
    {
        eprint!("{}", human(&report));
        eprintln!("vantage qoe: no profile could be played over this series");
        return ExitCode::FAILURE;
    }
    if args.json {
        print_json("qoe", &report)
    } else {
        print_stdout("qoe", &human(&report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_series_with_header_and_comments() {
        let (steps, source) = parse_series(
            "duration_s,rate_bps\n# warm-up\n1,5e6\n0.5, 2000000\n",
            None,
        )
        .unwrap();
        assert_eq!(source, "CSV steps");
        assert_eq!(
            steps,
            vec![
                RateStep {
                    duration_s: 1.0,
                    rate_bps: 5e6
                },
                RateStep {
                    duration_s: 0.5,
                    rate_bps: 2e6
                }
            ]
        );
    }

    #[test]
    fn malformed_csv_names_the_line_and_field() {
        let error = parse_series("1,5e6\n2,fast\n", None).unwrap_err();
        assert_eq!(error, "line 2: rate_bps 'fast' is not a number");
        let error = parse_series("1,5e6,3\n", None).unwrap_err();
        assert_eq!(error, "line 1: expected two fields, duration_s,rate_bps");
    }

    #[test]
    fn json_steps_and_bad_json() {
        let (steps, _) = parse_series(r#"[{"duration_s": 2, "rate_bps": 1e6}]"#, None).unwrap();
        assert_eq!(steps.len(), 1);
        let error = parse_series(r#"{"intervals": 3}"#, None).unwrap_err();
        assert!(error.starts_with("not a throughput result:"), "{error}");
    }
}
