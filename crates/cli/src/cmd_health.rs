//! `vantage health matrix|select|fit`: the network health system of Chard,
//! Bubendorfer and Ng (FGCS 2015) over a server's archive — the pair matrix, the
//! healthiest hosts relative to a reference, and refitted score weights.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::connection::ServerConnection;

#[derive(Args, Debug)]
pub struct HealthArgs {
    #[command(subcommand)]
    pub command: HealthCommand,
}

/// Where the server is, and how to print its answer.
#[derive(Args, Debug)]
pub struct Query {
    #[command(flatten)]
    connection: ServerConnection,
    /// Print the server's JSON answer instead of a table.
    #[arg(long)]
    json: bool,
}

/// Which pairs and how they are scored.
#[derive(Args, Debug)]
pub struct Scoring {
    /// Only the agents of this configured group.
    #[arg(long)]
    group: Option<String>,
    /// H_ALL weights THROUGHPUT,ICMP,UDP,TCP (default 0.4,0.2,0.2,0.2).
    #[arg(long)]
    weights: Option<String>,
    /// Rounds older than this are stale: their pairs are unknown (default 3h).
    #[arg(long)]
    max_age: Option<String>,
}

impl Scoring {
    fn query(&self) -> Vec<(&'static str, String)> {
        [
            ("group", &self.group),
            ("weights", &self.weights),
            ("max_age", &self.max_age),
        ]
        .into_iter()
        .filter_map(|(name, value)| value.clone().map(|value| (name, value)))
        .collect()
    }
}

#[derive(Subcommand, Debug)]
pub enum HealthCommand {
    /// Health score of every agent pair (higher = healthier) and of every host.
    Matrix {
        #[command(flatten)]
        connection: Query,
        #[command(flatten)]
        scoring: Scoring,
    },
    /// The K hosts whose worst pairwise score, and score to REFERENCE, is highest.
    Select {
        #[command(flatten)]
        connection: Query,
        #[command(flatten)]
        scoring: Scoring,
        /// The reference host (e.g. the shared file server).
        #[arg(long)]
        reference: String,
        /// How many hosts to select.
        #[arg(long, short)]
        k: usize,
    },
    /// Refit the score's weights over archived rounds: forward step-wise selection by
    /// AIC against the pair's throughput in its next round.
    Fit {
        #[command(flatten)]
        connection: Query,
        /// Start of the rounds to use (RFC 3339).
        #[arg(long)]
        from: Option<String>,
        /// End of the rounds to use (RFC 3339).
        #[arg(long)]
        to: Option<String>,
        /// One client's results starting within this span are one round (default 30m).
        #[arg(long)]
        round_span: Option<String>,
    },
}

pub fn run(args: HealthArgs) -> ExitCode {
    match execute(args.command) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("vantage health: {message}");
            ExitCode::FAILURE
        }
    }
}

fn execute(command: HealthCommand) -> Result<String, String> {
    let (connection, path, query, render): (_, _, _, fn(&Value) -> String) = match command {
        HealthCommand::Matrix {
            connection,
            scoring,
        } => (connection, "matrix", scoring.query(), render_matrix),
        HealthCommand::Select {
            connection,
            scoring,
            reference,
            k,
        } => {
            let mut query = scoring.query();
            query.push(("reference", reference));
            query.push(("k", k.to_string()));
            (connection, "select", query, render_selection)
        }
        HealthCommand::Fit {
            connection,
            from,
            to,
            round_span,
        } => {
            let query = [("from", from), ("to", to), ("round_span", round_span)]
                .into_iter()
                .filter_map(|(name, value)| value.map(|value| (name, value)))
                .collect();
            (connection, "fit", query, render_fit)
        }
    };
    let runtime = tokio::runtime::Runtime::new()
        .map_err(|error| format!("cannot start the runtime: {error}"))?;
    let answer = runtime.block_on(get(&connection.connection, path, &query))?;
    Ok(if connection.json {
        format!("{answer:#}\n")
    } else {
        render(&answer)
    })
}

async fn get(
    connection: &ServerConnection,
    path: &str,
    query: &[(&str, String)],
) -> Result<Value, String> {
    let url = connection.url(&format!("/api/v1/health/{path}"));
    connection
        .call(connection.client()?.get(&url).query(query), &url)
        .await
}

fn score(value: &Value) -> String {
    value
        .as_f64()
        .map_or_else(|| "  ?  ".to_string(), |score| format!("{score:.2}"))
}

/// Hosts at most this many are drawn as a grid; more as lists.
const GRID_HOSTS: usize = 16;
/// Pairs listed worst first when the grid would be too wide.
const WORST_PAIRS: usize = 20;

fn render_matrix(answer: &Value) -> String {
    let empty = Vec::new();
    let hosts = answer["hosts"].as_array().unwrap_or(&empty);
    let pairs = answer["pairs"].as_array().unwrap_or(&empty);
    // Zone first (the paper's Fig. 9 order), then name.
    let mut order: Vec<(&str, &str)> = hosts
        .iter()
        .map(|host| {
            (
                host["zone"].as_str().unwrap_or(""),
                host["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    order.sort();
    let mut out = format!(
        "health at {} (higher = healthier; ? = unknown, * = a marker fired)\n",
        answer["computed_at"].as_str().unwrap_or("?")
    );
    let cell = |client: &str, server: &str| {
        pairs
            .iter()
            .find(|pair| pair["client"] == client && pair["server"] == server)
            .map(|pair| {
                let fired = pair["markers"].as_array().is_some_and(|m| !m.is_empty());
                format!("{}{}", score(&pair["score"]), if fired { "*" } else { " " })
            })
            .unwrap_or_default()
    };
    let width = order
        .iter()
        .map(|(_, name)| name.len())
        .max()
        .unwrap_or(4)
        .max(6);
    if order.len() <= GRID_HOSTS {
        out.push_str(&format!("{:width$}  client \\ server\n", ""));
        out.push_str(&format!("{:width$}", ""));
        for (_, server) in &order {
            out.push_str(&format!(" {:>7}", truncate(server, 7)));
        }
        out.push('\n');
        for (_, client) in &order {
            out.push_str(&format!("{client:width$}"));
            for (_, server) in &order {
                let text = if client == server {
                    "   -   ".to_string()
                } else {
                    cell(client, server)
                };
                out.push_str(&format!(" {text:>7}"));
            }
            out.push('\n');
        }
    } else {
        let mut known: Vec<&Value> = pairs.iter().filter(|p| p["score"].is_number()).collect();
        known.sort_by(|a, b| {
            a["score"]
                .as_f64()
                .unwrap_or(0.0)
                .total_cmp(&b["score"].as_f64().unwrap_or(0.0))
        });
        out.push_str(&format!(
            "{} pairs, {} unknown; the {} worst:\n",
            pairs.len(),
            pairs.len() - known.len(),
            WORST_PAIRS.min(known.len())
        ));
        for pair in known.iter().take(WORST_PAIRS) {
            out.push_str(&format!(
                "  {} -> {}  {}  {}\n",
                pair["client"].as_str().unwrap_or("?"),
                pair["server"].as_str().unwrap_or("?"),
                score(&pair["score"]),
                pair["state"].as_str().unwrap_or("?")
            ));
        }
    }
    out.push_str("\nhosts:\n");
    for (zone, name) in &order {
        let host = hosts.iter().find(|h| h["name"] == *name).expect("listed");
        out.push_str(&format!(
            "  {name:width$}  {}  {}\n",
            score(&host["score"]),
            if zone.is_empty() {
                String::new()
            } else {
                format!("zone {zone}")
            }
        ));
    }
    out
}

fn truncate(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

fn render_selection(answer: &Value) -> String {
    let mut out =
        String::from("selected (worst score within the selection and to the reference):\n");
    for name in answer["selected"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap_or("?");
        out.push_str(&format!("  {name}  {}\n", score(&answer["scores"][name])));
    }
    let runners_up = answer["runners_up"].as_array().cloned().unwrap_or_default();
    if !runners_up.is_empty() {
        out.push_str("runners-up:\n");
        for entry in &runners_up {
            out.push_str(&format!(
                "  {}  {}\n",
                entry[0].as_str().unwrap_or("?"),
                score(&entry[1])
            ));
        }
    }
    for reason in answer["reasons"].as_array().into_iter().flatten() {
        out.push_str(&format!("note: {}\n", reason.as_str().unwrap_or("?")));
    }
    out
}

fn number(value: &Value, decimals: usize) -> String {
    value
        .as_f64()
        .map_or_else(|| "-inf".to_string(), |n| format!("{n:.decimals$}"))
}

fn render_fit(answer: &Value) -> String {
    let fit = &answer["fit"];
    let mut out = format!(
        "forward step-wise selection by AIC: {} rows from {} rounds ({} left out), target {}\n",
        answer["rows"],
        answer["rounds"],
        answer["incomplete_rows"],
        answer["target"].as_str().unwrap_or("?")
    );
    out.push_str(&format!(
        "{:<5} {:<8} {:>12} {:>10} {:>8}\n",
        "step", "metric", "AIC", "p-value", "adj R²"
    ));
    out.push_str(&format!(
        "{:<5} {:<8} {:>12}\n",
        0,
        "(none)",
        number(&fit["null_aic"], 3)
    ));
    for step in fit["steps"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{:<5} {:<8} {:>12} {:>10} {:>8}\n",
            step["step"].as_u64().unwrap_or(0),
            step["added"].as_str().unwrap_or("?"),
            number(&step["aic"], 3),
            number(&step["p_value"], 5),
            number(&step["adjusted_r2"], 4)
        ));
    }
    match answer["proposed_weights"].as_object() {
        Some(weights) => {
            out.push_str("proposed weights:");
            for (name, weight) in weights {
                out.push_str(&format!(" {name} {}", number(weight, 3)));
            }
            out.push('\n');
        }
        None => {
            out.push_str("no metric predicts the target positively: keep the current weights\n")
        }
    }
    out
}
