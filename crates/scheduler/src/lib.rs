//! Conflict-free measurement scheduler (pure: no I/O, no clock reads).
//!
//! Given a validated configuration, the registered agents, a planning window
//! and the runs already planned, [`plan`] decides when each run of each task
//! happens so that no two runs hold a resource in incompatible modes at once:
//!
//! - every run claims its two agents' measurement interfaces and the declared
//!   segments it crosses, **exclusively** (throughput, capacity) or **shared**
//!   (latency), or nothing (`background`);
//! - a run may start anywhere within its task's slip after its nominal time;
//!   its preferred start is a deterministic pseudo-random point in that range
//!   (so meshes do not fire in lockstep), and the earliest conflict-free start
//!   from there is taken;
//! - exclusive tasks run as **campaigns**: the pairs are packed into rounds of
//!   disjoint pairs (round-robin tournament), so a full mesh of N agents takes
//!   N−1 rounds (N for odd N) per direction instead of N(N−1) serial runs;
//! - the agent that cannot accept inbound connections is always the client
//!   (throughput then runs in reverse mode to keep the direction);
//! - anything that cannot be placed is returned as a [`NonStart`] with the reason.
//!
//! At scale, [`plan_reserved`] plans only what must be reserved ahead (exclusive
//! runs), and [`LightTasks::runs_for`] places a client's light runs (latency
//! meshes) when it fetches them, with the same result as [`plan`].
//!
//! [`place_request`] places an app's on-demand run, preempting lower-priority
//! runs that have not started when it cannot fit otherwise. [`find_overlaps`]
//! checks any set of runs (planned or as recorded) for conflicts.
//! Ideas from perfSONAR pScheduler (exclusive/normal/background classes, slip)
//! and Narada Metrics (Bazan-Antequera et al.) / Chard et al. (FGCS 2015); see docs/scheduler.md.

mod claims;
mod light;
mod ondemand;
mod plan;
pub mod rounds;
mod time;
mod timeline;
mod types;
mod verify;

pub use claims::{agent_resource, segment_resource, target_resource, Claim, ClaimMode};
pub use light::LightTasks;
pub use ondemand::{place_request, OnDemandRequest, Placement, RequestOutcome, ON_DEMAND_TASK};
pub use plan::{current_run_id, is_light, plan, plan_reserved, reserved_reach, PlanWindow};
pub use types::{AgentInfo, CampaignOverload, CampaignSummary, NonStart, Plan, PlannedRun};
pub use verify::{find_overlaps, Occupancy, Overlap};
