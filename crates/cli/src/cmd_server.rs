//! `vantage server`: the control plane (archive, REST API, scheduler loop).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use vantage_model::units::parse_duration;
use vantage_server::http::HttpLimits;
use vantage_server::planner::PlannerOptions;
use vantage_server::service::{self, ServerOptions};
use vantage_server::tls::TlsFiles;
use vantage_server::transfers::TransferOptions;
use vantage_sim::calibers::Policy;

#[derive(Args, Debug)]
pub struct ServerArgs {
    /// Address and port of the HTTP API.
    #[arg(long, default_value = "127.0.0.1:8470")]
    pub listen: SocketAddr,
    /// Archive: sqlite://PATH (default, created if missing) or postgres://USER@HOST/DB.
    #[arg(long, default_value = "sqlite://vantage.db")]
    pub database: String,
    /// Admin bearer token to install; a random one is generated and printed when absent.
    #[arg(long, env = "VANTAGE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// How far ahead runs are planned (DUR).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub horizon: std::time::Duration,
    /// A run whose result is this late after its planned end is recorded as missed (DUR);
    /// longer by the results' wait while uploads queue for the archive.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub miss_grace: std::time::Duration,
    /// Delete results and app metrics older than this (DUR, e.g. 720h); keep everything when absent.
    #[arg(long, value_parser = parse_duration)]
    pub retention: Option<std::time::Duration>,
    /// HTTP connections served at once; more wait in the kernel's backlog.
    #[arg(long, value_name = "N", default_value_t = HttpLimits::default().max_connections)]
    pub max_connections: usize,
    /// A request's headers must arrive within this (DUR); cuts off slow-header clients.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_duration)]
    pub header_timeout: std::time::Duration,
    /// A request must be answered within this (DUR); long polls and subscriptions excepted.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_duration)]
    pub request_timeout: std::time::Duration,
    /// Largest request body (BYTES); larger ones are refused with 413.
    #[arg(long, value_name = "BYTES", default_value = "32MiB", value_parser = parse_bytes)]
    pub max_body: u64,
    /// Serve HTTPS with this certificate chain (PEM, server certificate first); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Deadline transfers (Calibers, Alali 2019): how often measured progress is turned
    /// into a new plan (DUR).
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = parse_epoch)]
    pub transfer_epoch: std::time::Duration,
    /// Deadline transfers: how capacity is handed out when a transfer ends or needs more:
    /// global-ljf, global-sjf, local-ljf, local-sjf or fixed (never changes a rate).
    #[arg(long, value_name = "POLICY", default_value = "global-ljf", value_parser = parse_policy)]
    pub transfer_policy: Policy,
}

fn parse_epoch(input: &str) -> Result<std::time::Duration, String> {
    let epoch = parse_duration(input).map_err(|error| error.to_string())?;
    if epoch < std::time::Duration::from_millis(100) || epoch > std::time::Duration::from_secs(3600)
    {
        return Err("must be 100ms to 1h".into());
    }
    Ok(epoch)
}

fn parse_policy(input: &str) -> Result<Policy, String> {
    Policy::from_name(input).ok_or_else(|| {
        let names: Vec<&str> = Policy::ALL.iter().map(|policy| policy.name()).collect();
        format!("'{input}' is not one of {}", names.join(", "))
    })
}

fn parse_bytes(input: &str) -> Result<u64, String> {
    vantage_model::units::parse_bytes(input).map_err(|error| error.to_string())
}

pub fn run(args: ServerArgs) -> ExitCode {
    crate::daemon::init_logging();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("vantage server: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("vantage server: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: ServerArgs) -> anyhow::Result<()> {
    let generated = args.admin_token.is_none();
    let server = service::start(ServerOptions {
        database_url: args.database.clone(),
        listen: args.listen,
        admin_token: args.admin_token,
        planner: PlannerOptions {
            horizon: args.horizon,
            miss_grace: args.miss_grace,
            retention: args.retention,
            ..PlannerOptions::default()
        },
        http: HttpLimits {
            max_connections: args.max_connections,
            header_timeout: args.header_timeout,
            request_timeout: args.request_timeout,
            max_body_bytes: usize::try_from(args.max_body).unwrap_or(usize::MAX),
        },
        tls: args
            .tls_cert
            .zip(args.tls_key)
            .map(|(cert, key)| TlsFiles { cert, key }),
        transfers: TransferOptions {
            epoch: args.transfer_epoch,
            policy: args.transfer_policy,
        },
    })
    .await?;
    eprintln!(
        "vantage server: API on {} (archive {})",
        server.url(),
        args.database
    );
    if generated {
        eprintln!(
            "vantage server: admin token {} (replaces the one generated at the previous start)",
            server.admin_token
        );
    }
    crate::daemon::wait_for_stop_signal().await;
    eprintln!("vantage server: stopping");
    server.shutdown().await
}
