//! `vantage endpoint`: serves the test endpoint until SIGINT / SIGTERM.

use std::net::IpAddr;
use std::process::ExitCode;

use clap::Args;
use vantage_model::ticket::TicketVerifier;
use vantage_probe::endpoint::{Endpoint, EndpointConfig, DEFAULT_PORT};
use vantage_probe::source_policy::{IpNet, SourceLimits, DEFAULT_CONNECTIONS_PER_SOURCE};
use vantage_probe::tickets::TicketGate;

#[derive(Args)]
pub struct EndpointArgs {
    /// Address to listen on (default: dual-stack `::`, or `0.0.0.0` without IPv6).
    #[arg(long, value_name = "ADDR")]
    listen: Option<IpAddr>,
    /// UDP (TWAMP-Light and STAMP reflector) and TCP (vantage service) port; 0 picks a free one.
    #[arg(long, short, value_name = "P", default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Most distinct UDP senders whose sequence counters are kept at once.
    #[arg(long, value_name = "N", default_value_t = EndpointConfig::default().max_udp_senders)]
    max_udp_senders: usize,
    /// UDP requests per second answered from one source address (0 = unlimited).
    #[arg(long, value_name = "PPS", default_value_t = EndpointConfig::default().udp_rate_limit_pps)]
    udp_rate_limit: u32,
    /// Most TCP connections served at once.
    #[arg(long, value_name = "N", default_value_t = EndpointConfig::default().max_tcp_connections)]
    max_tcp_connections: usize,
    /// Port of the iperf3-compatible listener (TCP and UDP, for stock `iperf3 -c`);
    /// default 5201, skipped with a warning when that port is taken.
    #[arg(long, value_name = "P")]
    iperf3_port: Option<u16>,
    /// Do not start the iperf3-compatible listener.
    #[arg(long)]
    no_iperf3: bool,
    /// Longest throughput test the endpoint accepts (DUR).
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = crate::cmd_latency::duration_arg)]
    max_duration: std::time::Duration,
    /// Highest rate per direction a throughput test may use (BPS); unlimited by default.
    #[arg(long, value_name = "BPS", value_parser = rate_arg)]
    max_rate: Option<u64>,
    /// Serve only these source networks (CIDR such as 10.0.0.0/8, or one address);
    /// repeatable; applies to the reflector, the TCP service and the iperf3 listener.
    /// Everyone is served when absent.
    #[arg(long, value_name = "NET", value_parser = network_arg)]
    allow: Vec<IpNet>,
    /// TCP connections one source address may hold at once (0 = unlimited).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_CONNECTIONS_PER_SOURCE)]
    max_connections_per_source: usize,
    /// Throughput-test time one source address may use per hour (DUR; 0s = unlimited),
    /// so no single client keeps the one-test-at-a-time slot to itself.
    #[arg(long, value_name = "DUR", default_value = "30m", value_parser = crate::cmd_latency::duration_arg)]
    source_quota: std::time::Duration,
    /// Serve throughput, capacity and iperf3 tests only under a ticket signed by one of
    /// the public keys in FILE (one per line, `#` comments; `vantage ticket key` makes
    /// keys, `vantage ticket issue` tickets). Latency probes stay open to all.
    #[arg(long, value_name = "FILE", requires = "name")]
    authorized_keys: Option<std::path::PathBuf>,
    /// This endpoint's name, which tickets must carry (with --authorized-keys).
    #[arg(long, value_name = "NAME", requires = "authorized_keys")]
    name: Option<String>,
}

/// The ticket gate of `--authorized-keys FILE --name NAME`.
fn ticket_gate(args: &EndpointArgs) -> Result<Option<TicketGate>, String> {
    let (Some(path), Some(name)) = (&args.authorized_keys, &args.name) else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    let verifier = TicketVerifier::from_authorized_keys(&text)
        .map_err(|err| format!("{}: {err}", path.display()))?;
    println!(
        "throughput tests need a ticket for '{name}' signed by one of the {} key(s) in {}",
        verifier.key_count(),
        path.display()
    );
    Ok(Some(TicketGate::standalone(name, verifier)))
}

fn rate_arg(input: &str) -> Result<u64, String> {
    vantage_model::units::parse_rate_bps(input).map_err(|e| e.to_string())
}

/// A network in CIDR notation, or a single address (a /32 or /128).
fn network_arg(input: &str) -> Result<IpNet, String> {
    input
        .parse::<IpNet>()
        .or_else(|_| input.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("'{input}' is neither a network (10.0.0.0/8) nor an address"))
}

pub fn run(args: EndpointArgs) -> ExitCode {
    // RUST_LOG=debug shows each malformed packet the endpoint drops.
    crate::daemon::init_logging();
    match serve(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("vantage endpoint: {message}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: EndpointArgs) -> Result<(), String> {
    let tickets = ticket_gate(&args)?.map(std::sync::Arc::new);
    let runtime =
        tokio::runtime::Runtime::new().map_err(|e| format!("cannot start runtime: {e}"))?;
    runtime.block_on(async {
        let config = EndpointConfig {
            listen: args.listen,
            port: args.port,
            max_udp_senders: args.max_udp_senders,
            udp_rate_limit_pps: args.udp_rate_limit,
            max_tcp_connections: args.max_tcp_connections,
            iperf3_port: (!args.no_iperf3).then_some(
                args.iperf3_port
                    .unwrap_or(vantage_probe::iperf3::IPERF3_DEFAULT_PORT),
            ),
            throughput_limits: vantage_probe::throughput::server::ServiceLimits {
                max_duration: args.max_duration,
                max_rate_bps: args.max_rate,
            },
            sources: SourceLimits {
                allow: args.allow.clone(),
                connections_per_source: args.max_connections_per_source,
                test_time_per_hour: (!args.source_quota.is_zero()).then_some(args.source_quota),
            },
            tickets,
            ..EndpointConfig::default()
        };
        let endpoint = match Endpoint::bind(config.clone()) {
            // The default iperf3 port may be taken (e.g. by a real iperf3 -s): serve
            // without the listener rather than not at all. An explicit port is binding.
            Err(vantage_probe::endpoint::EndpointError::Bind { addr, source })
                if args.iperf3_port.is_none() && config.iperf3_port == Some(addr.port()) =>
            {
                eprintln!(
                    "vantage endpoint: no iperf3 listener ({addr}: {source}); use --iperf3-port P"
                );
                Endpoint::bind(EndpointConfig {
                    iperf3_port: None,
                    ..config
                })
            }
            other => other,
        }
        .map_err(|e| e.to_string())?;
        // Scripts and tests read the port from this line (it matters with --port 0).
        println!(
            "vantage endpoint listening on {} (UDP: TWAMP-Light and STAMP reflector, TCP: vantage service)",
            endpoint.local_addr()
        );
        if let Some(addr) = endpoint.iperf3_addr() {
            println!("iperf3-compatible listener on {addr} (TCP and UDP)");
        }
        let stats = endpoint
            .run(crate::daemon::wait_for_stop_signal())
            .await
            .map_err(|e| e.to_string())?;
        eprintln!("vantage endpoint stopped; {stats}");
        Ok(())
    })
}
