//! On-demand runs requested by apps (the programmability of Narada Metrics,
//! Bazan-Antequera et al.): "run this
//! test between these agents within this window at this priority".

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use vantage_model::config::{Segment, TestDef};

use crate::plan::{reserve_ms, Planner, RunIdentity, RunPlacement};
use crate::time::{from_ms, to_ms, to_ms_ceil};
use crate::types::{AgentInfo, NonStart, PlannedRun};
use crate::verify::{find_overlaps, Occupancy};

/// Task name recorded on on-demand runs.
pub const ON_DEMAND_TASK: &str = "on-demand";

/// An app's request for one run outside the configured schedules.
#[derive(Debug, Clone, PartialEq)]
pub struct OnDemandRequest {
    /// Chosen by the caller (e.g. from the request id); placing the same id
    /// again returns the run already planned.
    pub run_id: String,
    pub test: TestDef,
    /// Intended initiator / sender and target; the NAT rule may swap the
    /// client and server roles (with reverse mode for throughput).
    pub from: String,
    pub to: String,
    pub not_before: DateTime<Utc>,
    /// Latest acceptable start.
    pub not_after: DateTime<Utc>,
    pub priority: i32,
}

/// What became of a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestOutcome {
    Placed(Placement),
    /// Not placed; record the non-start with its reason.
    NonStart(NonStart),
}

/// A placed on-demand run and the planned runs it displaced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    pub run: PlannedRun,
    /// Lower-priority runs not yet started at `now` that must be cancelled;
    /// each is a non-start naming the request.
    pub preempted: Vec<NonStart>,
}

/// Places the request at the earliest conflict-free start in
/// `[max(now, not_before), not_after]`. When none exists, runs of lower
/// priority that have not started by `now` may be preempted: the request then
/// takes the earliest start where only such runs are in the way.
pub fn place_request(
    now: DateTime<Utc>,
    request: &OnDemandRequest,
    agents: &[AgentInfo],
    segments: &[Segment],
    existing: &[PlannedRun],
) -> RequestOutcome {
    if let Some(run) = existing.iter().find(|run| run.run_id == request.run_id) {
        return RequestOutcome::Placed(Placement {
            run: run.clone(),
            preempted: Vec::new(),
        });
    }
    let from_ms_bound = to_ms_ceil(now.max(request.not_before));
    let latest_ms = to_ms(request.not_after);
    let duration_ms = reserve_ms(&request.test);

    let attempt = |runs: &[PlannedRun]| -> Result<PlannedRun, Box<NonStart>> {
        let mut planner = Planner::new(agents, segments, runs, from_ms_bound);
        let from = planner.slot_by_name(&request.from);
        let to = planner.slot_by_name(&request.to);
        let identity = RunIdentity {
            run_id: request.run_id.clone(),
            task: ON_DEMAND_TASK,
            test: &request.test.name,
            from,
            to,
            nominal_ms: from_ms_bound,
        };
        if latest_ms < from_ms_bound {
            planner.non_start(
                identity,
                "the requested window has already passed".to_string(),
            );
            return Err(Box::new(planner.non_starts.remove(0)));
        }
        let orientation = match planner.orient(from, to, &request.test) {
            Ok(orientation) => orientation,
            Err(reason) => {
                planner.non_start(identity, reason);
                return Err(Box::new(planner.non_starts.remove(0)));
            }
        };
        let claims = planner.claims(
            orientation.client,
            orientation.server,
            request.test.scheduling,
        );
        match planner
            .timeline
            .earliest_fit(&claims, duration_ms, from_ms_bound, latest_ms)
        {
            Ok(start_ms) => {
                planner.commit(RunPlacement {
                    run_id: identity.run_id,
                    task: ON_DEMAND_TASK,
                    test: &request.test,
                    priority: request.priority,
                    orientation,
                    claims,
                    start_ms,
                    campaign_round: None,
                });
                Ok(planner.runs.remove(0))
            }
            Err(blocker) => {
                let reason = format!(
                    "no conflict-free start between {} and {}: {}",
                    from_ms(from_ms_bound).to_rfc3339(),
                    request.not_after.to_rfc3339(),
                    planner.blocker_text(blocker)
                );
                planner.non_start(identity, reason);
                Err(Box::new(planner.non_starts.remove(0)))
            }
        }
    };

    let blocked = match attempt(existing) {
        Ok(run) => {
            return RequestOutcome::Placed(Placement {
                run,
                preempted: Vec::new(),
            })
        }
        Err(non_start) => *non_start,
    };
    let preemptible = |run: &PlannedRun| run.priority < request.priority && run.start > now;
    if !existing.iter().any(preemptible) {
        return RequestOutcome::NonStart(blocked);
    }
    let kept: Vec<PlannedRun> = existing
        .iter()
        .filter(|run| !preemptible(run))
        .cloned()
        .collect();
    let Ok(run) = attempt(&kept) else {
        return RequestOutcome::NonStart(blocked);
    };
    let candidates: Vec<&PlannedRun> = existing.iter().filter(|run| preemptible(run)).collect();
    let mut occupancies: Vec<Occupancy> =
        candidates.iter().map(|run| Occupancy::from(*run)).collect();
    occupancies.push(Occupancy::from(&run));
    let mut displaced: Vec<&str> = find_overlaps(&occupancies)
        .into_iter()
        .filter_map(|overlap| {
            if overlap.first_run == run.run_id {
                Some(overlap.second_run)
            } else if overlap.second_run == run.run_id {
                Some(overlap.first_run)
            } else {
                None
            }
        })
        .filter_map(|id| {
            candidates
                .iter()
                .find(|run| run.run_id == id)
                .map(|run| run.run_id.as_str())
        })
        .collect();
    displaced.sort_unstable();
    displaced.dedup();
    let preempted = displaced
        .into_iter()
        .filter_map(|id| candidates.iter().find(|run| run.run_id == id))
        .map(|victim| {
            let (from, to) = if victim.reverse {
                (&victim.server, &victim.client)
            } else {
                (&victim.client, &victim.server)
            };
            NonStart {
                run_id: victim.run_id.clone(),
                task: victim.task.clone(),
                test: victim.test.clone(),
                from: from.clone(),
                to: to.clone(),
                nominal_start: victim.start,
                reason: format!(
                    "preempted by on-demand run {} (priority {} over {})",
                    run.run_id, request.priority, victim.priority
                ),
            }
        })
        .collect();
    RequestOutcome::Placed(Placement { run, preempted })
}
