//! `vantage config check FILE` and `vantage config apply FILE`: the declarative
//! measurement configuration (docs/config.md), validated locally before it is sent.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use vantage_model::config::load_config;

use crate::connection::ServerConnection;

#[derive(Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub command: ConfigCommand,
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Validate a configuration file (TOML or JSON) without sending it.
    Check { file: PathBuf },
    /// Validate a configuration file and apply it on a server.
    Apply {
        file: PathBuf,
        #[command(flatten)]
        connection: ServerConnection,
    },
}

pub fn run(args: ConfigArgs) -> ExitCode {
    match execute(args.command) {
        Ok(message) => {
            println!("{message}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("vantage config: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Reads and validates a file; every problem is listed with its path.
fn load(file: &PathBuf) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|error| format!("cannot read '{}': {error}", file.display()))?;
    let name = file.to_string_lossy();
    let (config, validated) = load_config(&name, &text).map_err(|errors| {
        let listed: Vec<String> = errors.iter().map(ToString::to_string).collect();
        format!("'{name}' is invalid: {}", listed.join("; "))
    })?;
    tracing::debug!(tasks = validated.tasks.len(), "configuration valid");
    serde_json::to_value(&config)
        .map_err(|error| format!("cannot encode '{name}' as JSON: {error}"))
}

fn execute(command: ConfigCommand) -> Result<String, String> {
    match command {
        ConfigCommand::Check { file } => {
            load(&file)?;
            Ok(format!("{}: valid", file.display()))
        }
        ConfigCommand::Apply { file, connection } => {
            let document = load(&file)?;
            let runtime = tokio::runtime::Runtime::new()
                .map_err(|error| format!("cannot start the runtime: {error}"))?;
            let version = runtime.block_on(apply(&connection, &document))?;
            Ok(format!("{}: applied as version {version}", file.display()))
        }
    }
}

async fn apply(connection: &ServerConnection, document: &serde_json::Value) -> Result<i64, String> {
    let url = connection.url("/api/v1/config");
    let body = connection
        .call(connection.client()?.put(&url).json(document), &url)
        .await?;
    body["version"]
        .as_i64()
        .ok_or_else(|| format!("answer from {url} has no version: {body}"))
}
