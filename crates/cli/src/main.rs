//! `vantage`: one binary, one subcommand per capability.

mod allocator;
mod cmd_agent;
mod cmd_capacity;
mod cmd_capture;
mod cmd_config;
mod cmd_counters;
mod cmd_demo;
mod cmd_diagnose;
mod cmd_endpoint;
mod cmd_health;
mod cmd_ib;
mod cmd_lab;
mod cmd_latency;
mod cmd_mos;
mod cmd_pcap;
mod cmd_qoe;
mod cmd_sandwich;
mod cmd_server;
mod cmd_sim;
mod cmd_sla;
mod cmd_throughput;
mod cmd_ticket;
mod cmd_trace;
mod cmd_vddut;
mod connection;
mod daemon;
mod demo_lab;
mod repeat;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "vantage",
    version,
    about = "Network performance measurement platform"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Emulated networks in namespaces: up, down, status, exec, set, incident, gc.
    Lab(cmd_lab::LabArgs),
    /// Serve the test endpoint (UDP TWAMP-Light and STAMP reflector, TCP service) until stopped.
    Endpoint(cmd_endpoint::EndpointArgs),
    /// Latency, jitter, loss (forward/reverse) and one-way delay to an endpoint.
    Latency(cmd_latency::LatencyArgs),
    /// Sandwich probing (Chard et al., FGCS 2015): queuing delay a large packet adds to a small one.
    Sandwich(cmd_sandwich::SandwichArgs),
    /// TCP or UDP throughput with per-interval TCP_INFO and a `limited_by` verdict
    /// (native endpoint or any iperf3 server).
    Throughput(cmd_throughput::ThroughputArgs),
    /// Line capacity by the SLA method of Rufini et al. (Fotonica 2014): TCP, UDP over-rate, verification at B_c − ε.
    Capacity(cmd_capacity::CapacityArgs),
    /// Control plane: archive (SQLite or PostgreSQL), REST API, scheduler.
    Server(cmd_server::ServerArgs),
    /// Measurement agent: connects out to a server, runs its assigned tests.
    Agent(cmd_agent::AgentArgs),
    /// Measurement configuration: check or apply a TOML/JSON file.
    Config(cmd_config::ConfigArgs),
    /// Path discovery with flow-stable probes (Paris traceroute, Augustin et al., IMC 2006).
    Trace(cmd_trace::TraceArgs),
    /// Server, three agents and a small mesh on this machine, with a live summary.
    Demo(cmd_demo::DemoArgs),
    /// Network health (Chard et al., FGCS 2015): pair matrix, healthiest hosts, weight refitting.
    Health(cmd_health::HealthArgs),
    /// Which suspect, which segment, which direction: the diagnostic bundle to an endpoint, weighed into a verdict with evidence (pathdiag, Mathis et al., PAM 2008).
    Diagnose(cmd_diagnose::DiagnoseArgs),
    /// SLA contracts (Rufini et al., Fotonica 2014): each pair's standing against its committed rate, delay, loss and jitter.
    Sla(cmd_sla::SlaArgs),
    /// Video QoE from a throughput series: playback-buffer stalls and MOS (Rufini et al., Fotonica 2014).
    Qoe(cmd_qoe::QoeArgs),
    /// Flow records from a packet capture: bytes, retransmissions, handshake RTT, what limited each transfer.
    Pcap(cmd_pcap::PcapArgs),
    /// InfiniBand congestion: forced idle time fraction from PortXmitWait (Alali, PhD dissertation, University of Virginia, 2019, ch. 2), from CSV reads or sampled live.
    Ib(cmd_ib::IbArgs),
    /// Interface counters each interval: bytes, packets, errors and drops each way, with rates across counter wraps and resets.
    Counters(cmd_counters::CountersArgs),
    /// Packet capture on an interface for a bounded time and filter (Wireshark's dumpcap), analysed into flow records as `vantage pcap` does.
    Capture(cmd_capture::CaptureArgs),
    /// Subjective ratings: MOS with 95 % CIs per condition, pairwise t-tests, Pearson r and slopes against an objective metric (Alali 2019, ch. 5).
    Mos(cmd_mos::MosArgs),
    /// Display update times of a thin-client session from its capture (VD-DUT, Alali 2019, ch. 5).
    Vddut(cmd_vddut::VddutArgs),
    /// Flow-level simulations: Calibers deadline transfers on G-scale and the SH/DH headroom services (Alali 2019, ch. 3–4).
    Sim(cmd_sim::SimArgs),
    /// Signing keys and test tickets for standalone endpoints (`vantage endpoint --authorized-keys`).
    Ticket(cmd_ticket::TicketArgs),
}

/// Commands that print a report and end take the default SIGPIPE action, as other Unix
/// tools do: `vantage health matrix | head -3` ends quietly when `head` does, where
/// Rust's ignored SIGPIPE would make the next `println!` panic. Services keep it
/// ignored, so a peer closing a socket or pipe is an error they handle.
fn end_quietly_on_a_closed_pipe(command: &Command) {
    let service = matches!(
        command,
        Command::Endpoint(_) | Command::Server(_) | Command::Agent(_) | Command::Demo(_)
    );
    if !service {
        // SAFETY: called first thing in main, before any other thread exists.
        let _ = unsafe {
            nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGPIPE,
                nix::sys::signal::SigHandler::SigDfl,
            )
        };
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    end_quietly_on_a_closed_pipe(&cli.command);
    match cli.command {
        Command::Lab(args) => cmd_lab::run(args),
        Command::Endpoint(args) => cmd_endpoint::run(args),
        Command::Latency(args) => cmd_latency::run(args),
        Command::Sandwich(args) => cmd_sandwich::run(args),
        Command::Throughput(args) => cmd_throughput::run(args),
        Command::Capacity(args) => cmd_capacity::run(args),
        Command::Server(args) => cmd_server::run(args),
        Command::Agent(args) => cmd_agent::run(args),
        Command::Config(args) => cmd_config::run(args),
        Command::Trace(args) => cmd_trace::run(args),
        Command::Demo(args) => cmd_demo::run(args),
        Command::Ticket(args) => cmd_ticket::run(args),
        Command::Health(args) => cmd_health::run(args),
        Command::Qoe(args) => cmd_qoe::run(args),
        Command::Diagnose(args) => cmd_diagnose::run(args),
        Command::Sla(args) => cmd_sla::run(args),
        Command::Pcap(args) => cmd_pcap::run(args),
        Command::Vddut(args) => cmd_vddut::run(args),
        Command::Ib(args) => cmd_ib::run(args),
        Command::Counters(args) => cmd_counters::run(args),
        Command::Capture(args) => cmd_capture::run(args),
        Command::Mos(args) => cmd_mos::run(args),
        Command::Sim(args) => cmd_sim::run(args),
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};
    use vantage_model::kinds;

    use super::Cli;

    /// The systemd unit docs/install.md offers runs a command line this binary takes.
    #[test]
    fn the_agent_unit_example_parses() {
        let unit = include_str!("../../../docs/examples/vantage-agent.service");
        let exec = unit
            .lines()
            .find_map(|line| line.strip_prefix("ExecStart="))
            .expect("an ExecStart line");
        // The token comes from the unit's EnvironmentFile (VANTAGE_TOKEN); %H is the host name.
        let args = exec
            .split_whitespace()
            .map(|word| word.replace("%H", "host-1"))
            .chain(["--token".to_string(), "t".to_string()]);
        let parsed = Cli::try_parse_from(args);
        assert!(parsed.is_ok(), "{exec}: {}", parsed.err().unwrap());
    }

    /// Every option a test kind also takes as a configuration parameter has the kind's
    /// one default, so `vantage latency` and a latency task measure the same way.
    #[test]
    fn cli_defaults_are_the_test_kinds_defaults() {
        // Options whose name differs from the parameter's (the CLI keeps short names).
        let renamed = [
            ("capacity", "epsilon", "epsilon_ratio"),
            ("capacity", "loss-threshold", "loss_threshold_ratio"),
            ("capacity", "probe-duration", "udp_probe_duration"),
            ("capacity", "streams", "tcp_streams"),
        ];
        let cli = Cli::command();
        let mut compared = 0;
        for kind in kinds::KINDS {
            let command = cli
                .find_subcommand(kind.name)
                .unwrap_or_else(|| panic!("no `vantage {}`", kind.name));
            for argument in command.get_arguments() {
                let Some(long) = argument.get_long() else {
                    continue;
                };
                let name = renamed
                    .iter()
                    .find(|(command, option, _)| *command == kind.name && *option == long)
                    .map_or_else(|| long.replace('-', "_"), |(_, _, param)| param.to_string());
                let Some(param) = kind.param(&name) else {
                    continue;
                };
                let cli_default: Vec<String> = argument
                    .get_default_values()
                    .iter()
                    .map(|value| value.to_string_lossy().into_owned())
                    .collect();
                if param.kind == kinds::ParamKind::Flag {
                    // A flag parameter off by default is an option that takes no value.
                    assert!(
                        param.default == Some("false") && !argument.get_action().takes_values(),
                        "vantage {} --{long}: the {} parameter '{name}' is a flag off by default",
                        kind.name,
                        kind.name
                    );
                    compared += 1;
                    continue;
                }
                let expected: Vec<String> = param.default.map(str::to_string).into_iter().collect();
                assert_eq!(
                    cli_default, expected,
                    "vantage {} --{long}: the CLI's default differs from the {} parameter '{name}'",
                    kind.name, kind.name
                );
                compared += 1;
            }
        }
        assert!(compared >= 25, "only {compared} options compared");
    }
}
