//! `vantage`: one binary, one subcommand per capability.

mod cmd_agent;
mod cmd_capacity;
mod cmd_config;
mod cmd_demo;
mod cmd_endpoint;
mod cmd_lab;
mod cmd_latency;
mod cmd_sandwich;
mod cmd_server;
mod cmd_throughput;
mod daemon;

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
    /// Serve the test endpoint (UDP TWAMP-Light reflector, TCP service) until stopped.
    Endpoint(cmd_endpoint::EndpointArgs),
    /// Latency, jitter, loss (forward/reverse) and one-way delay to an endpoint.
    Latency(cmd_latency::LatencyArgs),
    /// Sandwich probing (seed 003): queuing delay a large packet adds to a small one.
    Sandwich(cmd_sandwich::SandwichArgs),
    /// TCP or UDP throughput with per-interval TCP_INFO and a `limited_by` verdict
    /// (native endpoint or any iperf3 server).
    Throughput(cmd_throughput::ThroughputArgs),
    /// Line capacity by seed 002's SLA method: TCP, UDP over-rate, verification at B_c − ε.
    Capacity(cmd_capacity::CapacityArgs),
    /// Control plane: archive (SQLite or PostgreSQL), REST API, scheduler.
    Server(cmd_server::ServerArgs),
    /// Measurement agent: connects out to a server, runs its assigned tests.
    Agent(cmd_agent::AgentArgs),
    /// Measurement configuration: check or apply a TOML/JSON file.
    Config(cmd_config::ConfigArgs),
    /// Server, three agents and a small mesh on this machine, with a live summary.
    Demo(cmd_demo::DemoArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
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
        Command::Demo(args) => cmd_demo::run(args),
    }
}
