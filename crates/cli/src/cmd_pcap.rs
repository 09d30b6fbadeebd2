//! `vantage pcap`: flow records from a packet capture (pcap or pcapng).

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use vantage_model::units::format_rate_bps;
use vantage_passive::{analyse, CaptureReport, CaptureSide, FlowRecord, Options, PassiveError};

use vantage_server::imports::CaptureImport;

use crate::cmd_latency::{duration_arg, print_json, print_stdout};
use crate::connection::{OptionalServer, ServerConnection};

#[derive(Args, Debug)]
#[command(
    mut_arg("server", |arg| arg.help("Also store the flow records in this server's archive (URL), as a completed capture run of `--agent`; the packets stay here")),
    mut_arg("token", |arg| arg.help("Bearer token for `--server` (role agent, for its own captures, or admin)")),
)]
pub struct PcapArgs {
    /// The capture: pcap or pcapng, link types Ethernet (VLAN tags included), Linux
    /// cooked (SLL, SLL2), raw IP and BSD loopback; `-` reads stdin.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Where the capture was taken, for the handshake RTT (Miravalls-Sierra et al.,
    /// 2018): `t_ACK − t_SYN` near the server, `t_SYNACK − t_SYN` near the client.
    /// Detected per connection from its handshake when not given.
    #[arg(long, value_enum)]
    side: Option<SideArg>,
    /// Throughput series interval (DUR).
    #[arg(long, value_name = "DUR", value_parser = duration_arg, default_value = "1s")]
    interval: Duration,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: OptionalServer,
    /// With `--server`: the host the capture was taken on, whose capture run the flow
    /// records are stored as (an agent's name; an agent's token may store only its own).
    #[arg(long, value_name = "NAME", requires = "server")]
    agent: Option<String>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum SideArg {
    Client,
    Server,
}

pub fn run(args: PcapArgs) -> ExitCode {
    let options = Options {
        interval_ns: args.interval.as_nanos().clamp(1_000_000, i64::MAX as u128) as i64,
        side: args.side.map(|side| match side {
            SideArg::Client => CaptureSide::Client,
            SideArg::Server => CaptureSide::Server,
        }),
        ..Options::default()
    };
    let connection = args.server.connection();
    if connection.is_some() && args.agent.is_none() {
        eprintln!("vantage pcap: --server needs --agent NAME, the host the capture was taken on");
        return ExitCode::FAILURE;
    }
    let Some(report) = read_capture("pcap", &args.file, |input| analyse(input, &options)) else {
        return ExitCode::FAILURE;
    };
    let printed = if args.json {
        print_json("pcap", &report)
    } else {
        print_stdout("pcap", &render(&args.file.display().to_string(), &report))
    };
    match (connection, args.agent) {
        (Some(connection), Some(agent)) => {
            let import = CaptureImport {
                agent,
                file: file_name(&args.file),
                report,
            };
            match store(&connection, &import) {
                Ok(stored) => {
                    eprintln!("vantage pcap: {stored}");
                    printed
                }
                Err(message) => {
                    eprintln!("vantage pcap: not stored: {message}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => printed,
    }
}

/// The name the capture is stored under: the file's own name, without its directory.
fn file_name(file: &Path) -> String {
    if file.as_os_str() == "-" {
        return "stdin".to_string();
    }
    file.file_name().map_or_else(
        || file.display().to_string(),
        |name| name.to_string_lossy().into_owned(),
    )
}

/// Sends the flow records to the server's archive; what it did, in words.
fn store(connection: &ServerConnection, import: &CaptureImport) -> Result<String, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the runtime: {error}"))?;
    let url = connection.url("/api/v1/captures");
    let answer = runtime.block_on(async {
        let client = connection.client()?;
        connection.call(client.post(&url).json(import), &url).await
    })?;
    let run_id = answer["run_id"].as_str().unwrap_or("?");
    Ok(if answer["duplicate"] == true {
        format!(
            "{} already holds this capture as run {run_id}; nothing changed",
            connection.server
        )
    } else {
        format!(
            "stored {} flow records in {} as run {run_id} of {}",
            import.report.flows.len(),
            connection.server,
            import.agent
        )
    })
}

/// Opens FILE (`-`: stdin) and hands it to `analysis`; on failure says what and where on
/// stderr, as `vantage COMMAND: FILE: reason`, and returns `None`.
pub(crate) fn read_capture<T>(
    command: &str,
    file: &Path,
    analysis: impl FnOnce(Box<dyn Read + Send>) -> Result<T, PassiveError>,
) -> Option<T> {
    let source = file.display();
    let input: Box<dyn Read + Send> = if file.as_os_str() == "-" {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        match File::open(file) {
            Ok(opened) => Box::new(BufReader::new(opened)),
            Err(error) => {
                eprintln!("vantage {command}: cannot open {source}: {error}");
                return None;
            }
        }
    };
    analysis(input)
        .map_err(|error| eprintln!("vantage {command}: {source}: {error}"))
        .ok()
}

pub(crate) fn render(source: &str, report: &CaptureReport) -> String {
    let capture = &report.capture;
    let mut out = format!(
        "{source}: {}, {} frames, {} TCP/UDP packets in {} flow{} over {:.3} s\n",
        capture.format,
        capture.frames,
        capture.packets,
        report.flows.len(),
        if report.flows.len() == 1 { "" } else { "s" },
        capture.duration_s
    );
    for note in &capture.quality {
        out += &format!("  note: {note}\n");
    }
    if report.flows.is_empty() {
        return out;
    }
    out += &format!(
        "\n{:<4} {:<47} {:>9} {:>12} {:>12} {:>7} {:>10}  {}\n",
        "", "client -> server", "dur (s)", "c->s", "s->c", "retx", "hs RTT", "limited by"
    );
    for flow in &report.flows {
        out += &flow_line(flow);
    }
    out
}

fn flow_line(flow: &FlowRecord) -> String {
    let rate = |bps: Option<f64>| bps.map_or("-".to_string(), format_rate_bps);
    let handshake = flow.handshake_rtt_us.map_or("-".to_string(), |us| {
        if us >= 1000.0 {
            format!("{:.3} ms", us / 1000.0)
        } else {
            format!("{us:.0} µs")
        }
    });
    let limited = flow.limited_by_share.map_or(String::new(), |share| {
        format!(
            "rwnd {:.0} % / cong {:.0} % / app {:.0} %",
            share.receive_window * 100.0,
            share.congestion * 100.0,
            share.application * 100.0
        )
    });
    format!(
        "{:<4} {:<47} {:>9.3} {:>12} {:>12} {:>7} {:>10}  {}\n",
        flow.protocol,
        format!("{} -> {}", flow.client, flow.server),
        flow.duration_s,
        rate(flow.client_to_server.throughput_bps),
        rate(flow.server_to_client.throughput_bps),
        flow.client_to_server.retransmits + flow.server_to_client.retransmits,
        handshake,
        limited
    )
}
