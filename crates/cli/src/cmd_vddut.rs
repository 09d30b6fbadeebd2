//! `vantage vddut`: display update times of a thin-client session from its capture
//! (VD-DUT, Alali, PhD dissertation, University of Virginia, 2019, ch. 5).

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use vantage_analysis::vddut::VddutParams;
use vantage_model::units::format_rate_bps;
use vantage_passive::display::{display_updates, DisplayOptions, DisplayReport};

use crate::cmd_latency::{duration_arg, print_json, print_stdout};
use crate::cmd_pcap::read_capture;
use crate::cmd_throughput::rate_arg;

#[derive(Args, Debug)]
pub struct VddutArgs {
    /// The capture (pcap or pcapng) of the desktop host's traffic to the client,
    /// markers included; `-` reads stdin.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// UDP destination port of the start markers the desktop host sends before each task.
    #[arg(long, value_name = "PORT")]
    marker_port: u16,
    /// The desktop host's address (default: the markers' sender).
    #[arg(long, value_name = "ADDR")]
    server: Option<IpAddr>,
    /// Frames longer than this (bytes on the wire) can be display updates; the idle
    /// session's frames are 110 bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 110)]
    min_size: u32,
    /// A gap between large frames longer than this ends an update (DUR).
    #[arg(long, value_name = "DUR", value_parser = duration_arg, default_value = "500ms")]
    max_gap: Duration,
    /// Link rate for the transmission time of Eq. 5.1 (BPS).
    #[arg(long, value_name = "BPS", value_parser = rate_arg, default_value = "1G")]
    rate: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: VddutArgs) -> ExitCode {
    let options = DisplayOptions {
        marker_port: args.marker_port,
        server: args.server,
        params: VddutParams {
            min_size_bytes: args.min_size,
            max_gap_ns: args.max_gap.as_nanos().min(i64::MAX as u128) as i64,
        },
        rate_bps: args.rate as f64,
    };
    let Some(report) = read_capture("vddut", &args.file, |input| {
        display_updates(input, &options)
    }) else {
        return ExitCode::FAILURE;
    };
    if report.tasks.is_empty() {
        eprintln!(
            "vantage vddut: {}: no start marker (UDP to port {}) in the capture",
            args.file.display(),
            args.marker_port
        );
        return ExitCode::FAILURE;
    }
    if args.json {
        print_json("vddut", &report)
    } else {
        print_stdout("vddut", &render(&report))
    }
}

fn render(report: &DisplayReport) -> String {
    let mut out = format!(
        "desktop host {}, markers to UDP port {}; update frames > {} B, gaps ≤ {:.3} s (Alali 2019, ch. 5)\n\n",
        report.server.as_deref().unwrap_or("?"),
        report.marker_port,
        report.min_size_bytes,
        report.max_gap_s
    );
    out += &format!(
        "{:<32} {:>10} {:>12} {:>8} {:>14}\n",
        "marker",
        "VD-DUT (s)",
        "bytes",
        "frames",
        format!("T_trans @ {}", format_rate_bps(report.rate_bps))
    );
    for task in &report.tasks {
        match (&task.update, &task.decomposition) {
            (Some(update), Some(decomposition)) => {
                out += &format!(
                    "{:<32} {:>10.3} {:>12} {:>8} {:>12.6} s\n",
                    task.marker_time,
                    update.vddut_s(),
                    update.update_bytes,
                    update.packets,
                    decomposition.t_trans_s
                )
            }
            _ => {
                out += &format!(
                    "{:<32} {}\n",
                    task.marker_time,
                    task.error.as_deref().unwrap_or("no update")
                )
            }
        }
    }
    if let (Some(vddut_s), Some(bytes)) = (
        report.geometric_mean_vddut_s,
        report.geometric_mean_update_bytes,
    ) {
        out +=
            &format!("\ngeometric mean over the tasks: VD-DUT {vddut_s:.3} s, {bytes:.0} bytes\n");
    }
    out
}
