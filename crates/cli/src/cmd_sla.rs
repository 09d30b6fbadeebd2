//! `vantage sla`: each SLA contract's pairs with their standing, compliance and
//! closest calls, from a server's verdicts (the multi-service SLA verification of
//! Rufini et al., Fotonica 2014). Exit status 0 when every pair meets its
//! contracts, 2 when one is breached, 1 on an error.

use std::process::ExitCode;

use clap::Args;
use serde::Deserialize;
use vantage_model::sla::{Clause, ClauseVerdict};

use crate::connection::ServerConnection;

#[derive(Args, Debug)]
pub struct SlaArgs {
    #[command(flatten)]
    connection: ServerConnection,
    /// Only this contract.
    #[arg(long)]
    contract: Option<String>,
    /// Verdicts from (RFC 3339; default: all stored).
    #[arg(long)]
    from: Option<String>,
    /// Verdicts before (RFC 3339).
    #[arg(long)]
    to: Option<String>,
    /// Print the server's JSON answer instead of a table.
    #[arg(long)]
    json: bool,
}

/// The parts of `GET /api/v1/sla` the table shows.
#[derive(Deserialize)]
struct Answer {
    contracts: Vec<ContractAnswer>,
}

#[derive(Deserialize)]
struct ContractAnswer {
    name: String,
    limits: std::collections::BTreeMap<Clause, f64>,
    pairs: Vec<PairAnswer>,
    truncated: bool,
}

#[derive(Deserialize)]
struct PairAnswer {
    client: String,
    server: String,
    verdicts: usize,
    passed: usize,
    compliance_ratio: f64,
    pass: bool,
    standing: Vec<ClauseVerdict>,
}

/// Exit status when a pair breaches its contract.
const BREACHED: u8 = 2;

pub fn run(args: SlaArgs) -> ExitCode {
    match execute(&args) {
        Ok((text, breached)) => {
            print!("{text}");
            if breached {
                ExitCode::from(BREACHED)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(message) => {
            eprintln!("vantage sla: {message}");
            ExitCode::FAILURE
        }
    }
}

fn execute(args: &SlaArgs) -> Result<(String, bool), String> {
    let query: Vec<(&str, &String)> = [
        ("contract", &args.contract),
        ("from", &args.from),
        ("to", &args.to),
    ]
    .into_iter()
    .filter_map(|(name, value)| value.as_ref().map(|value| (name, value)))
    .collect();
    let runtime = tokio::runtime::Runtime::new()
        .map_err(|error| format!("cannot start the runtime: {error}"))?;
    let connection = &args.connection;
    let url = connection.url("/api/v1/sla");
    let value =
        runtime.block_on(connection.call(connection.client()?.get(&url).query(&query), &url))?;
    let answer = Answer::deserialize(&value)
        .map_err(|error| format!("unreadable answer from {url}: {error}"))?;
    let breached = answer
        .contracts
        .iter()
        .any(|contract| contract.pairs.iter().any(|pair| !pair.pass));
    let text = if args.json {
        format!("{value:#}\n")
    } else {
        render(&answer)
    };
    Ok((text, breached))
}

fn render(answer: &Answer) -> String {
    if answer.contracts.is_empty() {
        return "no SLA contracts in the current configuration (see [[contracts]] in docs/config.md)\n"
            .to_string();
    }
    let mut out = String::new();
    for contract in &answer.contracts {
        let limits: Vec<String> = contract
            .limits
            .iter()
            .map(|(clause, limit)| clause.describe_limit(*limit))
            .collect();
        let breached = contract.pairs.iter().filter(|pair| !pair.pass).count();
        out.push_str(&format!(
            "SLA {} ({}): {} pair(s), {breached} breached{}\n",
            contract.name,
            limits.join(", "),
            contract.pairs.len(),
            if contract.truncated {
                " (only the newest verdicts were read)"
            } else {
                ""
            }
        ));
        if contract.pairs.is_empty() {
            out.push_str("  no verdicts yet: the contract's tasks have not reported\n");
        }
        for pair in &contract.pairs {
            out.push_str(&format!(
                "  {} -> {}: {}, {}/{} verdicts passed ({:.1} %)\n",
                pair.client,
                pair.server,
                if pair.pass { "met" } else { "BREACHED" },
                pair.passed,
                pair.verdicts,
                pair.compliance_ratio * 100.0
            ));
            for clause in &pair.standing {
                out.push_str(&format!("      {clause}\n"));
            }
        }
    }
    out
}
