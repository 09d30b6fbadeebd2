//! The deadline transfers this agent sends (Calibers, Alali, PhD dissertation, University
//! of Virginia, 2019, ch. 4): it long-polls the server for them, carries each to the
//! destination's endpoint paced at the rate the server allocates (re-paced whenever the
//! plan changes), and reports how much the destination has received.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use vantage_model::transfers::{TransferAssignment, TransferProgress};

use crate::client::{CallError, ServerClient};

/// How long one poll waits for a change of plan.
const POLL_WAIT: Duration = Duration::from_secs(25);
/// How often progress is reported while a transfer runs: each report is the server's
/// measure of whether it is behind its plan.
const REPORT_EVERY: Duration = Duration::from_secs(1);
/// The sender gives up this long after the deadline (the server has stopped planning
/// it by then).
const PAST_DEADLINE: Duration = Duration::from_secs(10);
/// Attempts to deliver the final report.
const FINAL_REPORT_TRIES: u32 = 5;

struct Carrying {
    rate_bps: watch::Sender<f64>,
    task: JoinHandle<()>,
}

/// Follows the plan until the task is dropped.
pub(crate) async fn follow_plan(client: ServerClient, agent: String) {
    let mut version = None;
    let mut carrying: HashMap<String, Carrying> = HashMap::new();
    loop {
        let assignments = match client
            .transfer_assignments(&agent, version, POLL_WAIT)
            .await
        {
            Ok(assignments) => assignments,
            Err(error) => {
                tracing::warn!("cannot fetch transfers: {error}");
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
        };
        version = Some(assignments.version);
        for assignment in &assignments.transfers {
            match carrying.get(&assignment.id) {
                Some(running) => {
                    running.rate_bps.send_if_modified(|rate| {
                        let changed = *rate != assignment.rate_bps;
                        *rate = assignment.rate_bps;
                        changed
                    });
                }
                None => {
                    let (rate_bps, rate) = watch::channel(assignment.rate_bps);
                    let task = tokio::spawn(carry(
                        client.clone(),
                        agent.clone(),
                        assignment.clone(),
                        rate,
                    ));
                    carrying.insert(assignment.id.clone(), Carrying { rate_bps, task });
                }
            }
        }
        // A transfer the plan no longer holds is stopped (its deadline passed); one that
        // ended here stays known while the plan still lists it, so it is not restarted.
        carrying.retain(|id, running| {
            let planned = assignments.transfers.iter().any(|a| &a.id == id);
            if !planned {
                running.task.abort();
            }
            planned
        });
    }
}

async fn resolve(address: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = address.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    tokio::net::lookup_host((address, port))
        .await
        .map_err(|error| format!("cannot resolve '{address}': {error}"))?
        .next()
        .ok_or_else(|| format!("'{address}' has no address"))
}

/// Carries one transfer and reports its progress, then its end.
async fn carry(
    client: ServerClient,
    agent: String,
    assignment: TransferAssignment,
    rate_bps: watch::Receiver<f64>,
) {
    let (delivered_tx, delivered) = watch::channel(0u64);
    let left = (assignment.deadline - chrono::Utc::now())
        .to_std()
        .unwrap_or_default();
    let give_up_at = tokio::time::Instant::now() + left + PAST_DEADLINE;
    tracing::info!(transfer = %assignment.id, destination = %assignment.destination, bytes = assignment.bytes, rate_bps = assignment.rate_bps, "transfer starting");
    let outcome = async {
        let peer = resolve(&assignment.address, assignment.port).await?;
        let sending = vantage_probe::transfer::send(
            peer,
            assignment.ticket.clone(),
            assignment.bytes,
            rate_bps,
            delivered_tx,
            give_up_at,
        );
        tokio::pin!(sending);
        let mut reports = tokio::time::interval(REPORT_EVERY);
        loop {
            tokio::select! {
                outcome = &mut sending => return outcome.map_err(|error| error.to_string()),
                _ = reports.tick() => {
                    let progress = TransferProgress {
                        delivered_bytes: *delivered.borrow(),
                        done: false,
                        error: None,
                    };
                    if let Err(error) = client.report_transfer(&agent, &assignment.id, &progress).await {
                        tracing::debug!(transfer = %assignment.id, "progress not reported: {error}");
                    }
                }
            }
        }
    }
    .await;
    let progress = TransferProgress {
        delivered_bytes: *delivered.borrow(),
        done: true,
        error: outcome.err(),
    };
    match &progress.error {
        None => tracing::info!(transfer = %assignment.id, "transfer delivered"),
        Some(error) => tracing::warn!(transfer = %assignment.id, "transfer failed: {error}"),
    }
    for _ in 0..FINAL_REPORT_TRIES {
        match client
            .report_transfer(&agent, &assignment.id, &progress)
            .await
        {
            Ok(_) | Err(CallError::Refused { .. }) => return,
            Err(error) => {
                tracing::warn!(transfer = %assignment.id, "final report failed, retrying: {error}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
