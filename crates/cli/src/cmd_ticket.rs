//! `vantage ticket`: signing keys and test tickets for standalone endpoints
//! (`vantage endpoint --authorized-keys`), outside a fleet, where no vantage server
//! issues them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use vantage_model::ticket::{TestTicket, TicketClaims, TicketSigner};

use crate::cmd_latency::duration_arg;

/// Longest test time one ticket may cover.
const MAX_TEST_TIME: Duration = Duration::from_secs(24 * 3600);
/// Longest a ticket may stay valid.
const MAX_VALIDITY: Duration = Duration::from_secs(366 * 24 * 3600);

#[derive(Args)]
pub struct TicketArgs {
    #[command(subcommand)]
    command: TicketCommand,
}

#[derive(Subcommand)]
enum TicketCommand {
    /// Make a signing key: the secret goes to FILE (readable by you only), the public
    /// key to stdout, as a line for an endpoint's --authorized-keys file.
    Key {
        /// Where to write the secret key (refused if the file exists).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Sign a ticket for throughput, capacity and iperf3 tests at one standalone
    /// endpoint; prints it as JSON (pass the file to `vantage throughput --ticket`).
    Issue(IssueArgs),
}

#[derive(Args)]
struct IssueArgs {
    /// Secret key file made by `vantage ticket key`.
    #[arg(long, value_name = "FILE")]
    key: PathBuf,
    /// Name of the endpoint the ticket is for (its `vantage endpoint --name`).
    #[arg(long, value_name = "NAME")]
    endpoint: String,
    /// Who the ticket is for (recorded in it, for the endpoint's logs).
    #[arg(long, value_name = "NAME", default_value = "vantage-cli")]
    client: String,
    /// Test time the ticket covers in total, over all its tests (DUR, at most 24h).
    #[arg(long, value_name = "DUR", default_value = "10m", value_parser = duration_arg)]
    test_time: Duration,
    /// How long the ticket is accepted from now (DUR, at most 366 days).
    #[arg(long, value_name = "DUR", default_value = "24h", value_parser = duration_arg)]
    valid_for: Duration,
}

pub fn run(args: TicketArgs) -> ExitCode {
    let outcome = match args.command {
        TicketCommand::Key { out } => make_key(&out),
        TicketCommand::Issue(args) => issue(&args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("vantage ticket: {message}");
            ExitCode::FAILURE
        }
    }
}

fn make_key(out: &Path) -> Result<(), String> {
    let signer = TicketSigner::from_secret(rand::random());
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(out).map_err(|err| {
        if err.kind() == std::io::ErrorKind::AlreadyExists {
            format!(
                "{} exists; a key is never overwritten (remove it or choose another --out)",
                out.display()
            )
        } else {
            format!("cannot create {}: {err}", out.display())
        }
    })?;
    writeln!(file, "{}", signer.secret_hex())
        .map_err(|err| format!("cannot write {}: {err}", out.display()))?;
    println!("{}", signer.public_key_hex());
    eprintln!(
        "secret key written to {} (keep it private); its public key, above, goes in the \
         endpoint's --authorized-keys file",
        out.display()
    );
    Ok(())
}

fn issue(args: &IssueArgs) -> Result<(), String> {
    if args.test_time.is_zero() || args.test_time > MAX_TEST_TIME {
        return Err(format!(
            "--test-time must be more than 0 and at most {} s",
            MAX_TEST_TIME.as_secs()
        ));
    }
    if args.valid_for.is_zero() || args.valid_for > MAX_VALIDITY {
        return Err(format!(
            "--valid-for must be more than 0 and at most {} days",
            MAX_VALIDITY.as_secs() / 86_400
        ));
    }
    let secret = std::fs::read_to_string(&args.key)
        .map_err(|err| format!("cannot read {}: {err}", args.key.display()))?;
    let signer =
        TicketSigner::from_hex(&secret).map_err(|err| format!("{}: {err}", args.key.display()))?;
    let now = chrono::Utc::now();
    let not_after =
        now + chrono::Duration::from_std(args.valid_for).expect("bounded above by MAX_VALIDITY");
    let claims = TicketClaims {
        // Test time is counted per run id, so every ticket gets its own.
        run_id: format!("ticket/{}/{}", args.endpoint, now.timestamp_micros()),
        test: "throughput".into(),
        client: args.client.clone(),
        server: args.endpoint.clone(),
        max_duration_ms: u64::try_from(args.test_time.as_millis()).unwrap_or(u64::MAX),
        not_after_us: not_after.timestamp_micros(),
    };
    let ticket = signer.sign(&claims);
    println!(
        "{}",
        serde_json::to_string(&ticket).expect("tickets serialise")
    );
    eprintln!(
        "ticket for endpoint '{}': {} s of test time, valid until {}",
        args.endpoint,
        args.test_time.as_secs_f64(),
        not_after.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    Ok(())
}

/// `--ticket FILE` of the test commands: a ticket as `vantage ticket issue` prints it.
pub fn ticket_file_arg(path: &str) -> Result<TestTicket, String> {
    let text = std::fs::read_to_string(path).map_err(|err| format!("cannot read it: {err}"))?;
    serde_json::from_str(text.trim())
        .map_err(|err| format!("not a ticket as `vantage ticket issue` writes it ({err})"))
}
