//! `vantage agent`: a measurement agent that connects out to a server.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use vantage_agent::AgentOptions;

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// Server URL, e.g. http://server:8470 or https://server:8470. Repeat it for
    /// replicas sharing one database: the agent uses the first that answers and fails
    /// over to the next when it stops answering.
    #[arg(long = "server", value_name = "URL", required = true)]
    pub servers: Vec<String>,
    /// CA certificate(s) (PEM) to trust for an https:// server, e.g. a private CA's.
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Bearer token with role agent.
    #[arg(long, env = "VANTAGE_TOKEN", hide_env_values = true)]
    pub token: String,
    /// Unique agent name.
    #[arg(long)]
    pub name: String,
    /// Tag as key=value (site, segment, zone …); repeatable.
    #[arg(long = "tag", value_parser = parse_tag)]
    pub tags: Vec<(String, String)>,
    /// This agent cannot accept inbound connections (behind NAT): it is only ever a client.
    #[arg(long)]
    pub no_inbound: bool,
    /// Port of the in-process test endpoint (0 picks a free one).
    #[arg(long, default_value_t = vantage_probe::endpoint::DEFAULT_PORT)]
    pub endpoint_port: u16,
    /// Port of the iperf3-compatible listener other agents' `tool = "iperf3"` runs
    /// use (0 picks a free one; it is advertised to the server).
    #[arg(
        long,
        value_name = "P",
        default_value_t = 0,
        conflicts_with = "no_iperf3"
    )]
    pub iperf3_port: u16,
    /// Serve no iperf3-compatible listener.
    #[arg(long)]
    pub no_iperf3: bool,
    /// Address the endpoint listens on (default: all).
    #[arg(long)]
    pub listen: Option<IpAddr>,
    /// Address other agents use to reach this one (default: the local address routing to the server).
    #[arg(long)]
    pub advertise: Vec<String>,
    /// Durable result spool directory.
    #[arg(long, default_value = "vantage-spool")]
    pub spool: PathBuf,
    /// Most bytes the spool holds (e.g. 256MiB); a result beyond it is uploaded directly
    /// or, with the server unreachable, held in memory (--memory-hold).
    #[arg(long, value_name = "BYTES", default_value = "256MiB", value_parser = bytes_arg)]
    pub spool_max_bytes: u64,
    /// Most result files the spool holds.
    #[arg(long, value_name = "N", default_value_t = vantage_agent::spool::SpoolQuota::default().max_files)]
    pub spool_max_files: u64,
    /// Most bytes of results kept in memory while the spool is full and the server
    /// unreachable; they move to the spool or the server as soon as either has room,
    /// and a result beyond this is lost with an error in the log.
    #[arg(long, value_name = "BYTES", default_value = "64MiB", value_parser = bytes_arg)]
    pub memory_hold: u64,
}

fn bytes_arg(input: &str) -> Result<u64, String> {
    vantage_model::units::parse_bytes(input).map_err(|error| error.to_string())
}

fn parse_tag(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.trim().to_string()))
        }
        _ => Err(format!("tag '{text}' is not key=value")),
    }
}

pub fn run(args: AgentArgs) -> ExitCode {
    crate::daemon::init_logging();
    let mut options = AgentOptions::new(&args.servers[0], &args.token, &args.name, args.spool);
    options.server_urls = args.servers;
    options.ca_cert = args.ca_cert;
    options.tags = args.tags.into_iter().collect::<BTreeMap<_, _>>();
    options.accepts_inbound = !args.no_inbound;
    options.endpoint_port = args.endpoint_port;
    options.iperf3_port = (!args.no_iperf3).then_some(args.iperf3_port);
    options.endpoint_listen = args.listen;
    options.advertise = args.advertise;
    options.spool_quota = vantage_agent::spool::SpoolQuota {
        max_bytes: args.spool_max_bytes,
        max_files: args.spool_max_files,
    };
    options.memory_hold_bytes = args.memory_hold;
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("vantage agent: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(vantage_agent::run(
        options,
        crate::daemon::wait_for_stop_signal(),
    )) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("vantage agent: {error:#}");
            ExitCode::FAILURE
        }
    }
}
