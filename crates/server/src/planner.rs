//! The scheduler loop: every tick the leader replica plans the next window with
//! `vantage-scheduler` from the applied configuration and the registered agents,
//! stores the runs and the non-starts (with reasons), applies retention, and on a
//! PostgreSQL without autovacuum vacuums the busiest tables; beside the passes, at the
//! same pace, the leader records overdue runs as missed ([`record_overdue`]).
//!
//! Leadership: replicas sharing one database hold a lease row (`leases`) renewed
//! every tick; only the holder plans. Run ids are derived from the task, the pair
//! and the nominal time, and inserted with ON CONFLICT DO NOTHING, so even two
//! planners racing (a lease taken over mid-tick) cannot duplicate a run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sha2::Digest;
use tokio::sync::watch;
use vantage_model::config::{validate, MeasurementConfig, TestConfig, TestDef, ValidatedConfig};
use vantage_model::control::RunRequest;
use vantage_model::kinds::KindRef;
use vantage_scheduler::{
    place_request, plan_reserved, reserved_reach, AgentInfo, CampaignOverload, ClaimMode,
    LightTasks, NonStart, OnDemandRequest, PlanWindow, PlannedRun, RequestOutcome,
};

use crate::archive::{
    from_us, now_us, to_us, Archive, ArchiveError, RunRecord, RunState, EXCLUSIVE_EPOCH,
};
use crate::config_store;
use crate::events::Alert;
use crate::poll_hints::Freshness;
use crate::state::{LightPlan, ReservedRuns, ServerState};

#[derive(Debug, Clone)]
pub struct PlannerOptions {
    /// Pause between ticks.
    pub tick: Duration,
    /// How far ahead runs are planned.
    pub horizon: Duration,
    /// A run still without result this long after its planned end is recorded as missed.
    pub miss_grace: Duration,
    /// Delete results and app metrics older than this, when set.
    pub retention: Option<Duration>,
    /// Identity of this replica in the leader lease.
    pub instance: String,
}

impl Default for PlannerOptions {
    fn default() -> Self {
        PlannerOptions {
            tick: Duration::from_secs(2),
            horizon: Duration::from_secs(120),
            miss_grace: Duration::from_secs(30),
            retention: None,
            instance: format!(
                "server-{}-{}",
                std::process::id(),
                crate::new_token().get(..8).unwrap_or_default()
            ),
        }
    }
}

const LEASE: &str = "scheduler";

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// Runs ticks until `stopped` turns true, and beside them, while this replica leads,
/// [`record_overdue`] at the same pace. Errors are logged and retried next tick (a
/// database outage must not kill the server).
pub async fn run(state: Arc<ServerState>, options: PlannerOptions, stopped: watch::Receiver<bool>) {
    // Set by each pass: whether this replica holds the lease, so that only the leader
    // records overdue runs (two replicas briefly both doing it store nothing twice).
    let leading = AtomicBool::new(false);
    tokio::join!(
        planning_loop(&state, &options, &leading, stopped.clone()),
        overdue_loop(&state, &options, &leading, stopped),
    );
}

async fn planning_loop(
    state: &ServerState,
    options: &PlannerOptions,
    leading: &AtomicBool,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let began = std::time::Instant::now();
        match tick(state, options).await {
            // Each pass's wall time, for operators and bench/scale
            // (RUST_LOG=vantage_server::planner=debug).
            Ok(led) => {
                leading.store(led, Ordering::Relaxed);
                if led {
                    tracing::debug!(
                        pass_us = began.elapsed().as_micros() as u64,
                        "planning pass"
                    );
                }
            }
            Err(error) => tracing::warn!("scheduler tick failed: {error}"),
        }
        tokio::select! {
            _ = tokio::time::sleep(options.tick) => {}
            _ = state.request_submitted.notified() => {}
            _ = stopped.wait_for(|stop| *stop) => return,
        }
    }
}

/// Records overdue runs apart from the planning passes: at a thousand agents a sweep of
/// the hand-outs stores thousands of missed runs through the writer, in turn with the
/// fleet's uploads, and took seconds that the pass, which plans the runs ahead, waited
/// for. What it writes is about runs that have ended, which no pass plans around.
async fn overdue_loop(
    state: &ServerState,
    options: &PlannerOptions,
    leading: &AtomicBool,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        if leading.load(Ordering::Relaxed) {
            if let Err(error) = record_overdue(state, options).await {
                tracing::warn!("recording overdue runs failed: {error}");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(options.tick) => {}
            _ = stopped.wait_for(|stop| *stop) => return,
        }
    }
}

/// Most a backlog of uploads defers the recording of overdue runs (see
/// [`record_overdue`]).
const MOST_BACKLOG_DEFERRAL: Duration = Duration::from_secs(600);

/// Records the runs still without a result `miss_grace` after their planned end as
/// missed (rows not fetched or not reported, and the runs of hand-outs whose every run
/// is overdue), and warns of them. While uploads queue for the archive, the grace grows
/// by the results' wait (the ingest pipeline's backlog, up to
/// [`MOST_BACKLOG_DEFERRAL`]): a run whose result is queued has not missed. Logs its
/// time and each step's at debug level.
pub async fn record_overdue(
    state: &ServerState,
    options: &PlannerOptions,
) -> Result<(), ArchiveError> {
    let began = std::time::Instant::now();
    let since = || began.elapsed().as_micros() as u64;
    let archive = &state.archive;
    let backlog = state.ingest.backlog().min(MOST_BACKLOG_DEFERRAL);
    let overdue_before_us = now_us() - micros(options.miss_grace) - micros(backlog);
    let mut missed = archive.mark_missed(overdue_before_us).await?;
    let marked_missed_us = since();
    missed.extend(archive.sweep_handouts(overdue_before_us).await?);
    let swept_us = since();
    let recorded = missed.len();
    missed_alerts(state, missed).await?;
    tracing::debug!(
        marked_missed_us,
        swept_us,
        recorded,
        backlog_us = micros(backlog),
        overdue_us = since(),
        "overdue runs recorded (each the time since it began)"
    );
    Ok(())
}

/// One planning pass; returns whether this replica was the leader.
pub async fn tick(state: &ServerState, options: &PlannerOptions) -> Result<bool, ArchiveError> {
    let archive = &state.archive;
    if !archive
        .acquire_lease(LEASE, &options.instance, micros(options.tick) * 3)
        .await?
    {
        return Ok(false);
    }
    // Each phase's time, logged with the pass at debug level: what a slow pass waited for.
    let began = std::time::Instant::now();
    let since = || began.elapsed().as_micros() as u64;
    state.refresh_agent_tags().await?;
    let config = config_store::current(&state.archive).await?;
    let agents = registered_agents(archive).await?;
    let read_us = since();
    let locked_us;
    // Most passes store no run that light placements must see (a campaign's occurrence
    // is hourly): those hold the scheduler's lock for reading, beside the agents'
    // fetches placing their light runs, rather than waiting for them all.
    let stored = if needs_exclusive_pass(state, options, config.as_ref(), &agents).await? {
        let _planning = state.planning.write().await;
        locked_us = since();
        plan_window(state, options, config.as_ref(), &agents, Lock::Exclusive).await?
            + place_requests(state, options, config.as_ref(), &agents).await?
    } else {
        let _planning = state.planning.read().await;
        locked_us = since();
        plan_window(state, options, config.as_ref(), &agents, Lock::Shared).await?
    };
    if stored > 0 {
        state.runs_were_stored();
    }
    tracing::debug!(
        read_us,
        locked_us,
        planned_us = since(),
        stored,
        "planning pass phases (each the time since the pass began)"
    );
    if let Some(retention) = options.retention {
        let report = archive
            .apply_retention(now_us() - micros(retention))
            .await?;
        if report.results + report.runs + report.app_metrics > 0 {
            tracing::info!(?report, "retention applied");
        }
    }
    // Beside the pass, not in it: a vacuum of a thousand agents' runs takes longer
    // than a pass may.
    let vacuuming = archive.clone();
    tokio::spawn(async move {
        if let Err(error) = vacuuming.vacuum_when_autovacuum_is_off().await {
            tracing::warn!("vacuuming the archive failed: {error}");
        }
    });
    Ok(true)
}

/// The registered agents as the scheduler sees them.
async fn registered_agents(archive: &Archive) -> Result<Vec<AgentInfo>, ArchiveError> {
    Ok(archive
        .agents()
        .await?
        .iter()
        .map(|agent| AgentInfo::from(&agent.registration))
        .collect())
}

/// How far back an on-demand request looks for a run it already placed (a retried
/// request finds its run, even one that has ended).
const REQUEST_LOOKBACK_US: i64 = 3_600_000_000;

/// Runs are planned at least this far ahead, so agents fetch them before they are due.
const LEAD_US: i64 = 2_000_000;

const PLANNED_UNTIL: &str = "planned_until_us";
const PLAN_BASIS: &str = "plan_basis";
/// Light runs (see [`LightTasks`]) whose nominal start is before this may be placed.
const LIGHT_UNTIL: &str = "light_until_us";
/// Every light run placed ends by this: no exclusive run is planned to start before it.
const LIGHT_FRONTIER: &str = "light_frontier_us";
/// `light_placed:AGENT`: the agent's light runs are placed up to this nominal start.
const LIGHT_PLACED: &str = "light_placed:";
/// Light runs are placed at least this far ahead, however short the horizon.
const LIGHT_LEAD_US: i64 = 5_000_000;

/// Fingerprint of what a plan depends on besides time: the configuration version and
/// each agent's name, tags and reachability (not its address or port, which runs
/// resolve when they are handed out).
fn plan_basis(version: i64, agents: &[AgentInfo]) -> i64 {
    let mut sorted: Vec<&AgentInfo> = agents.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let text = serde_json::to_string(&(version, sorted)).expect("agent info serialises");
    digest_u64(&text) as i64
}

/// The first 8 bytes of `text`'s SHA-256: a hash that stays the same across replicas
/// and versions.
fn digest_u64(text: &str) -> u64 {
    let digest = sha2::Sha256::digest(text.as_bytes());
    u64::from_le_bytes(
        digest[..8]
            .try_into()
            .expect("a SHA-256 digest has 8 bytes"),
    )
}

/// Runs already stored that may hold resources in `[from_us, to_us)`, as the scheduler
/// sees them: the exclusive ones, and the others that end after `others_after_us`.
/// Runs already handed to agents cannot be moved or cancelled, so they are given the
/// highest priority (on-demand requests never preempt them).
async fn existing_runs(
    state: &ServerState,
    window_start_us: i64,
    window_end_us: i64,
    others_after_us: i64,
) -> Result<Vec<PlannedRun>, ArchiveError> {
    Ok(state
        .archive
        .runs_overlapping(window_start_us, window_end_us, others_after_us)
        .await?
        .into_iter()
        .filter_map(|run| {
            let kind: KindRef =
                serde_json::from_value(serde_json::Value::String(run.test.clone())).ok()?;
            Some(PlannedRun {
                run_id: run.id,
                task: run.task,
                test: run.test_name,
                kind,
                client: run.client,
                external: run.target.is_some(),
                server: run.server,
                reverse: run.reverse,
                start: from_us(run.planned_start_us),
                // A run that has reported holds its hosts no longer: an on-demand
                // request (a diagnosis's next step) may start right after it.
                end: from_us(match (run.state, run.actual_end_us) {
                    (RunState::Completed | RunState::Failed, Some(end_us)) => {
                        end_us.clamp(run.planned_start_us, run.planned_end_us)
                    }
                    _ => run.planned_end_us,
                }),
                priority: if run.state == RunState::Scheduled {
                    i32::try_from(run.priority).unwrap_or(i32::MAX)
                } else {
                    i32::MAX
                },
                claims: run.claims,
                spec: run.spec,
                campaign_round: None,
            })
        })
        .collect())
}

fn planned_record(run: PlannedRun) -> RunRecord {
    RunRecord {
        exclusive: run
            .claims
            .iter()
            .any(|claim| claim.mode == ClaimMode::Exclusive),
        id: run.run_id,
        task: run.task,
        test: run.kind.as_str().to_string(),
        test_name: run.test,
        client: run.client,
        target: run.external.then(|| run.server.clone()),
        server: run.server,
        spec: run.spec,
        reverse: run.reverse,
        priority: i64::from(run.priority),
        claims: run.claims,
        planned_start_us: to_us(run.start),
        planned_end_us: to_us(run.end),
        actual_start_us: None,
        actual_end_us: None,
        state: RunState::Scheduled,
        reason: None,
    }
}

fn non_start_record(non_start: NonStart, test_type: &str) -> RunRecord {
    let nominal_us = to_us(non_start.nominal_start);
    RunRecord {
        id: non_start.run_id,
        task: non_start.task,
        test: test_type.to_string(),
        test_name: non_start.test,
        client: non_start.from,
        server: non_start.to,
        target: None,
        spec: serde_json::Value::Null.into(),
        exclusive: false,
        reverse: false,
        priority: 0,
        claims: Vec::new(),
        planned_start_us: nominal_us,
        planned_end_us: nominal_us,
        actual_start_us: None,
        actual_end_us: None,
        state: RunState::NonStart,
        reason: Some(non_start.reason),
    }
}

/// A warning that `run` (of test `test`) missed or will not start, with its reason.
fn run_warning(run: &RunRecord, test: &str, what: &str) -> Alert {
    let message = format!(
        "run {} ({test} {} -> {}) {what}: {}",
        run.id,
        run.client,
        run.server,
        run.reason.as_deref().unwrap_or_default()
    );
    warning(message, vec![run.client.clone(), run.server.clone()])
}

/// Warns of the runs recorded as missed at once: each run of an agent that missed one,
/// and for an agent that missed several (a dense mesh misses a thousand a minute when
/// an agent goes away) one warning with how many and the first few. Stored as one set:
/// a fleet behind its uploads misses runs of every agent at once, and a warning each
/// through the archive's writer, in turn with the fleet's uploads, took 40 s.
async fn missed_alerts(state: &ServerState, missed: Vec<RunRecord>) -> Result<(), ArchiveError> {
    const NAMED: usize = 3;
    let mut by_agent: std::collections::BTreeMap<(String, Option<String>), Vec<RunRecord>> =
        Default::default();
    for run in missed {
        by_agent
            .entry((run.client.clone(), run.reason.clone()))
            .or_default()
            .push(run);
    }
    let mut alerts = Vec::with_capacity(by_agent.len());
    for ((client, reason), runs) in by_agent {
        if let [run] = runs.as_slice() {
            alerts.push(run_warning(run, &run.test, "missed"));
            continue;
        }
        let named: Vec<&str> = runs.iter().take(NAMED).map(|run| run.id.as_str()).collect();
        let more = runs.len().saturating_sub(NAMED);
        let message = format!(
            "{} runs of agent '{client}' missed ({}{}): {}",
            runs.len(),
            named.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            },
            reason.unwrap_or_default()
        );
        alerts.push(warning(message, vec![client]));
    }
    crate::alerts::raise_all(&state.archive, &state.events, alerts).await
}

/// A planner's warning about `agents` (none when it is about a task).
fn warning(message: String, agents: Vec<String>) -> Alert {
    Alert {
        severity: "warning".into(),
        message,
        agents,
        tags: Default::default(),
        time: Utc::now(),
    }
}

/// Says once per configuration and agent set (not every occurrence) that a task's
/// campaign does not fit its period and what runs instead.
async fn overload_alert(
    state: &ServerState,
    task: &str,
    overload: &CampaignOverload,
    basis: i64,
) -> Result<(), ArchiveError> {
    let mark = format!("overload:{task}");
    if state.archive.planner_mark(&mark).await? == Some(basis) {
        return Ok(());
    }
    let message = overload.describe(task);
    tracing::warn!("{message}");
    crate::alerts::raise(&state.archive, &state.events, warning(message, Vec::new())).await?;
    state.archive.set_planner_mark(&mark, basis).await
}

/// How a pass holds the scheduler's lock.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lock {
    /// For writing: the pass may replan, reserve runs and place on-demand requests.
    Exclusive,
    /// For reading, beside agents' fetches: the pass only advances the light marks
    /// and stores non-starts, and leaves anything more to the next pass.
    Shared,
}

/// Where a pass at `now` starts planning: where the last one stopped. Occurrences
/// that fell due while no server was planning are not planned late.
async fn window_start_us(archive: &Archive, now: i64) -> Result<i64, ArchiveError> {
    Ok(archive
        .planner_mark(PLANNED_UNTIL)
        .await?
        .unwrap_or(0)
        .max(now + LEAD_US))
}

/// Whether the next pass may store runs that light placements must not run beside:
/// it replans, a reserved task has an occurrence in its window, or an app asked for a
/// run.
async fn needs_exclusive_pass(
    state: &ServerState,
    options: &PlannerOptions,
    config: Option<&(i64, ValidatedConfig)>,
    agents: &[AgentInfo],
) -> Result<bool, ArchiveError> {
    if !state.archive.pending_requests().await?.is_empty() {
        return Ok(true);
    }
    let Some((version, config)) = config else {
        return Ok(false);
    };
    let archive = &state.archive;
    if archive.planner_mark(PLAN_BASIS).await? != Some(plan_basis(*version, agents)) {
        return Ok(true);
    }
    let now = now_us();
    let start_us = window_start_us(archive, now).await?;
    // A little past this pass's window: the pass itself starts a moment later.
    let end_us = now + micros(options.horizon) + micros(options.tick);
    Ok(start_us < end_us
        && reserved_reach(
            config,
            PlanWindow {
                start: from_us(start_us),
                end: from_us(end_us),
            },
        )
        .is_some())
}

/// Plans the configured tasks from where the last pass stopped up to `now + horizon`.
/// Under a [`Lock::Shared`] pass it plans nothing that needs the exclusive lock (a
/// replan, a reserved task's occurrence), leaving the window to the next pass.
async fn plan_window(
    state: &ServerState,
    options: &PlannerOptions,
    config: Option<&(i64, ValidatedConfig)>,
    agents: &[AgentInfo],
    lock: Lock,
) -> Result<u64, ArchiveError> {
    let Some((version, config)) = config else {
        return Ok(0);
    };
    let archive = &state.archive;
    let now = now_us();
    let mut start_us = window_start_us(archive, now).await?;
    // A new configuration or a changed agent set makes the forecast stale: replan
    // from now on (runs already handed to agents are kept and respected).
    let basis = plan_basis(*version, agents);
    if archive.planner_mark(PLAN_BASIS).await? != Some(basis) {
        if lock == Lock::Shared {
            return Ok(0);
        }
        start_us = now + LEAD_US;
        let discarded = archive.discard_forecast(start_us).await?;
        // Light runs placed but not yet handed out were discarded too: place them again.
        archive.lower_planner_marks(LIGHT_PLACED, start_us).await?;
        archive.lower_planner_marks(LIGHT_UNTIL, start_us).await?;
        // Exclusive runs are replanned from `start_us` on too, not from the end of the
        // stale forecast: the light runs handed out beyond it are then loaded instead.
        archive
            .lower_planner_marks(LIGHT_FRONTIER, start_us)
            .await?;
        archive.set_planner_mark(PLAN_BASIS, basis).await?;
        tracing::info!(version, agents = agents.len(), discarded, "replanning");
    }
    let end_us = now + micros(options.horizon);
    if start_us >= end_us {
        return Ok(0);
    }
    let light = light_plan(state, basis, *version, config, agents).tasks;
    // Light runs already handed out end by the frontier: no exclusive run starts
    // before it, so they need not be loaded (at a thousand agents they are most of
    // the runs stored).
    let light_frontier_us = archive.planner_mark(LIGHT_FRONTIER).await?;
    // Runs of this window may be placed well after its end (pushed along their slip, or a
    // campaign spread over its period), where earlier passes have placed runs too: every
    // stored run from the window's start on is in the way, not only those starting in it.
    // Runs that end before the window cannot be in its way (the scheduler ignores
    // them), so none are loaded: the cost of a pass does not grow with history. One
    // millisecond of margin covers the scheduler's rounding to milliseconds.
    let window = PlanWindow {
        start: from_us(start_us),
        end: from_us(end_us),
    };
    // Only as far as what this window's occurrences may reach: an hourly campaign of a
    // thousand agents is a hundred thousand stored runs, which the passes between its
    // occurrences need not read.
    let existing = match reserved_reach(config, window) {
        Some(_) if lock == Lock::Shared => return Ok(0),
        Some(reach) => {
            existing_runs(
                state,
                start_us - 1_000,
                to_us(reach) + 1_000,
                light_frontier_us.unwrap_or(i64::MIN),
            )
            .await?
        }
        None => Vec::new(),
    };
    let exclusive_not_before = light_frontier_us.map_or(window.start, from_us);
    let planned = plan_reserved(
        config,
        agents,
        window,
        &existing,
        *version as u64,
        &light,
        exclusive_not_before,
    );
    for campaign in &planned.campaigns {
        if let Some(overload) = &campaign.overload {
            overload_alert(state, &campaign.task, overload, basis).await?;
        }
    }
    // Light runs may now be handed out up to where every run in their way is planned,
    // less their holdback; but at least a few seconds ahead, so that agents get them
    // before they are due, however short the horizon.
    let tail_us = micros(light.tail());
    let light_until_us = (end_us - micros(light.holdback()))
        .max(now + LIGHT_LEAD_US)
        .min(end_us)
        .max(archive.planner_mark(LIGHT_UNTIL).await?.unwrap_or(i64::MIN));
    let new_frontier_us = light_frontier_us
        .unwrap_or(i64::MIN)
        .max(light_until_us + tail_us);
    // The runs and the marks saying how far they reach in one transaction: one wait
    // for the archive's writer, which a fleet's uploads and fetches keep busy.
    let stored = store_plan(
        state,
        config,
        planned,
        &[
            (PLANNED_UNTIL, end_us),
            (LIGHT_FRONTIER, new_frontier_us),
            (LIGHT_UNTIL, light_until_us),
        ],
    )
    .await?
    .len() as u64;
    let unfetched = record_unfetched_light_runs(state, options, config, &light, (now, *version));
    Ok(stored + unfetched.await?)
}

/// Stores a plan's runs and non-starts (raising an alert for each non-start), and
/// `marks` in the same transaction; returns those that were new.
async fn store_plan(
    state: &ServerState,
    config: &ValidatedConfig,
    planned: vantage_scheduler::Plan,
    marks: &[(&str, i64)],
) -> Result<Vec<RunRecord>, ArchiveError> {
    store_plan_as(state, config, planned, marks, RunState::Scheduled).await
}

/// [`store_plan`], its runs stored as `run_state`.
async fn store_plan_as(
    state: &ServerState,
    config: &ValidatedConfig,
    planned: vantage_scheduler::Plan,
    marks: &[(&str, i64)],
    run_state: RunState,
) -> Result<Vec<RunRecord>, ArchiveError> {
    let (mut records, non_starts) = plan_records(config, planned, run_state);
    records.extend(non_starts.iter().cloned());
    let inserted = state.archive.insert_runs_and_marks(&records, marks).await?;
    non_start_alerts(state, &non_starts).await?;
    records.retain(|record| inserted.contains(&record.id));
    Ok(records)
}

async fn non_start_alerts(
    state: &ServerState,
    non_starts: &[RunRecord],
) -> Result<(), ArchiveError> {
    let alerts = non_starts
        .iter()
        .map(|record| run_warning(record, &record.test_name, "will not start"))
        .collect();
    crate::alerts::raise_all(&state.archive, &state.events, alerts).await
}

/// A plan's runs, as `run_state`, and its non-starts, as records.
fn plan_records(
    config: &ValidatedConfig,
    planned: vantage_scheduler::Plan,
    run_state: RunState,
) -> (Vec<RunRecord>, Vec<RunRecord>) {
    let type_of = |test_name: &str| {
        config
            .test(test_name)
            .map_or("unknown", |test| test.kind.as_str())
    };
    let non_starts: Vec<RunRecord> = planned
        .non_starts
        .into_iter()
        .map(|non_start| {
            let test_type = type_of(&non_start.test);
            non_start_record(non_start, test_type)
        })
        .collect();
    let records: Vec<RunRecord> = planned
        .runs
        .into_iter()
        .map(|run| RunRecord {
            state: run_state,
            ..planned_record(run)
        })
        .collect();
    (records, non_starts)
}

/// The light tasks of the configuration and agent set with plan basis `basis`,
/// worked out once per basis.
fn light_plan(
    state: &ServerState,
    basis: i64,
    version: i64,
    config: &ValidatedConfig,
    agents: &[AgentInfo],
) -> LightPlan {
    let mut cached = state
        .light_plan
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match &*cached {
        Some(plan) if plan.basis == basis => plan.clone(),
        _ => {
            let plan = LightPlan {
                basis,
                version,
                config: Arc::new(config.clone()),
                tasks: Arc::new(LightTasks::new(config, agents)),
            };
            *cached = Some(plan.clone());
            plan
        }
    }
}

/// The light tasks of the plan the planner last made (plan basis `basis`): the copy
/// worked out already, or else worked out from the configuration and agent set as
/// they are now (another replica may be the one planning). `None` when those no
/// longer match that basis: the planner replans on its next pass, and places nothing
/// of the old plan meanwhile. An agent set that changed since the last pass is
/// likewise replanned on the next one, which discards what was placed of the old plan
/// and not yet handed out.
async fn planned_light_plan(
    state: &ServerState,
    basis: i64,
) -> Result<Option<LightPlan>, ArchiveError> {
    let cached = state
        .light_plan
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    if let Some(plan) = cached.filter(|plan| plan.basis == basis) {
        return Ok(Some(plan));
    }
    let Some((version, config)) = config_store::current(&state.archive).await? else {
        return Ok(None);
    };
    let agents = registered_agents(&state.archive).await?;
    if plan_basis(version, &agents) != basis {
        return Ok(None);
    }
    Ok(Some(light_plan(state, basis, version, &config, &agents)))
}

/// How much further than a placement needs the exclusive runs are read at once: the
/// next placements of the fleet's agents, a few seconds later each, find them read.
const RESERVED_READ_AHEAD_US: i64 = 120_000_000;

/// The exclusive runs stored that may overlap `[from_us, to_us)`, sorted by start
/// (with some before and after it): read once and kept while the archive's exclusive
/// runs stay as they are ([`EXCLUSIVE_EPOCH`]), so a fleet's fetches do not each
/// read the same few thousand runs.
async fn reserved_runs_over(
    state: &ServerState,
    from_us: i64,
    to_us: i64,
) -> Result<Arc<Vec<PlannedRun>>, ArchiveError> {
    // The epoch is read before the runs: a change in between makes the next
    // placement read them again, never keeps a read older than its epoch.
    let epoch = state
        .archive
        .planner_mark(EXCLUSIVE_EPOCH)
        .await?
        .unwrap_or(0);
    // A read by another fetch at this epoch or a later one will do.
    let current = |cached: &ReservedRuns| {
        cached.epoch >= epoch && cached.from_us <= from_us && to_us <= cached.to_us
    };
    // Held across the read: when the exclusive runs change (an hourly throughput plan
    // stores 100 000 of them), the fetches that find the copy stale wait for one read
    // instead of each reading the same runs at once.
    let mut cached = state.reserved_runs.lock().await;
    if let Some(kept) = cached.as_ref().filter(|kept| current(kept)) {
        return Ok(kept.runs.clone());
    }
    let read_until_us = to_us.saturating_add(RESERVED_READ_AHEAD_US);
    let mut runs = existing_runs(state, from_us, read_until_us, i64::MAX).await?;
    runs.sort_by(|a, b| (a.start, &a.run_id).cmp(&(b.start, &b.run_id)));
    let runs = Arc::new(runs);
    *cached = Some(ReservedRuns {
        epoch,
        from_us,
        to_us: read_until_us,
        runs: runs.clone(),
    });
    Ok(runs)
}

/// Places `client`'s light runs whose nominal start lies in `[from_us, until_us)` and
/// stores them (and their non-starts) as `run_state`, around the exclusive runs stored
/// in their way; returns those that were new (dispatched: the runs handed out, their
/// non-starts stored but not returned). A window with none of the client's
/// occurrences in it stores nothing, not even the mark: most fetches have none, and
/// need no write.
async fn place_light_window(
    state: &ServerState,
    (config, light): (&ValidatedConfig, &LightTasks),
    client: &str,
    (start_us, until_us): (i64, i64),
    (seed, run_state): (u64, RunState),
) -> Result<Vec<RunRecord>, ArchiveError> {
    if start_us >= until_us {
        return Ok(Vec::new());
    }
    let window = PlanWindow {
        start: from_us(start_us),
        end: from_us(until_us),
    };
    if !light.has_runs_in(client, window) {
        return Ok(Vec::new());
    }
    let placed_mark = format!("{LIGHT_PLACED}{client}");
    let reach_us = until_us + micros(light.tail()) + 1_000;
    let reserved = reserved_runs_over(state, start_us - 1_000, reach_us).await?;
    // Sorted by start: the runs starting after the placement's reach are not in its way.
    let in_the_way = &reserved[..reserved.partition_point(|run| to_us(run.start) < reach_us)];
    let placed = light.runs_for(client, window, in_the_way, seed);
    let marks = [(placed_mark.as_str(), until_us)];
    if run_state != RunState::Dispatched {
        return store_plan_as(state, config, placed, &marks, run_state).await;
    }
    // Handed out at the agent's fetch: one hand-out, not a row per run (see
    // `Archive::hand_out_light_runs`); the non-starts are rows as ever.
    let (runs, non_starts) = plan_records(config, placed, run_state);
    let handed = state
        .archive
        .hand_out_light_runs(client, (start_us, until_us), runs, &non_starts, &marks)
        .await?;
    state.poll_hints.mark_set(&placed_mark, until_us);
    non_start_alerts(state, &non_starts).await?;
    Ok(handed)
}

/// Light runs are placed up to this much further ahead than a fetch asks, by an
/// amount drawn per agent (see [`stagger_us`]).
const LIGHT_STAGGER_US: i64 = 30_000_000;

/// How much further ahead than its fetch asks `agent`'s light runs are placed: a
/// mesh's occurrence is one instant for every agent, and a fleet's fetches all placing,
/// storing and signing their runs of it in the same second stalled the server's other
/// work for seconds; staggered, they spread over half a minute.
fn stagger_us(agent: &str) -> i64 {
    (digest_u64(agent) % LIGHT_STAGGER_US.unsigned_abs()) as i64
}

/// Places the light runs `agent` has not been given yet whose nominal start is before
/// `until_us` (its fetch's horizon, plus the agent's [`stagger_us`]) and before where
/// the planner has planned every run in their way, and hands them out: they are stored
/// as one hand-out (one row for the fetch, not a row per run; each run gets its row with
/// its result) and returned. Called when the agent fetches its runs. Nothing is placed
/// while the planner has not yet planned the current configuration and agent set (it
/// replans on its next tick). With [`Freshness::Hinted`] whether anything is due is
/// first judged from the fleet's poll hints.
pub async fn place_light_runs(
    state: &ServerState,
    agent: &str,
    until_us: i64,
    freshness: Freshness,
) -> Result<Vec<RunRecord>, ArchiveError> {
    let until_us = until_us.saturating_add(stagger_us(agent));
    let archive = &state.archive;
    let placed_mark = format!("{LIGHT_PLACED}{agent}");
    let names = [LIGHT_UNTIL, placed_mark.as_str(), PLAN_BASIS];
    let window = |light_until_us: Option<i64>, from_us: Option<i64>| {
        let until_us = light_until_us?.min(until_us);
        let from_us = from_us.unwrap_or_else(now_us);
        (from_us < until_us).then_some((from_us, until_us))
    };
    let cached_light = || {
        state
            .light_plan
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    };
    // Agents ask every second: most often nothing new is due, which the fleet's hints
    // of the marks tell without a read (a hint that is behind only sends the fetch on
    // to read them below).
    let [light_until_us, placed_us, basis] =
        state.poll_hints.marks(archive, names, freshness).await?;
    let Some((start_us, until_us)) = window(light_until_us, placed_us) else {
        return Ok(Vec::new());
    };
    // Checked against the light tasks in memory first: between an agent's occurrences
    // (a minute, in a mesh every minute) its fetches place nothing, and store nothing
    // either. Only those of the plan's current basis: a replica that does not plan has
    // them from an earlier basis until a fetch works them out again below.
    if let Some(plan) = cached_light().filter(|plan| Some(plan.basis) == basis) {
        let span = PlanWindow {
            start: from_us(start_us),
            end: from_us(until_us),
        };
        if !plan.tasks.has_runs_in(agent, span) {
            return Ok(Vec::new());
        }
    }
    let _planning = state.planning.read().await;
    let [light_until_us, placed_us, basis] = archive.planner_marks_named(names).await?;
    let (Some((start_us, until_us)), Some(basis)) = (window(light_until_us, placed_us), basis)
    else {
        return Ok(Vec::new());
    };
    let Some(plan) = planned_light_plan(state, basis).await? else {
        return Ok(Vec::new());
    };
    if !plan.tasks.is_client(agent) {
        return Ok(Vec::new());
    }
    place_light_window(
        state,
        (&plan.config, &plan.tasks),
        agent,
        (start_us, until_us),
        (plan.version as u64, RunState::Dispatched),
    )
    .await
}

/// How far back the planner records the light runs of an agent that fetched nothing
/// (older ones fell due while no server was planning, and are not recorded late).
const UNFETCHED_LOOKBACK_US: i64 = 60_000_000;

/// Light runs exist once their client fetches them. For agents that have fetched
/// nothing for longer than the miss grace, the planner stores their light runs up to
/// then, and [`record_overdue`] records them as missed, as it does reserved runs.
async fn record_unfetched_light_runs(
    state: &ServerState,
    options: &PlannerOptions,
    config: &ValidatedConfig,
    light: &LightTasks,
    (now, version): (i64, i64),
) -> Result<u64, ArchiveError> {
    let archive = &state.archive;
    let placed: std::collections::HashMap<String, i64> = archive
        .planner_marks(LIGHT_PLACED)
        .await?
        .into_iter()
        .collect();
    let overdue_us = now - micros(options.miss_grace);
    let mut stored = 0;
    for client in light.clients() {
        match placed.get(client) {
            // An agent new to the light tasks is given them from now on.
            None => {
                archive
                    .set_planner_mark(&format!("{LIGHT_PLACED}{client}"), now)
                    .await?
            }
            Some(&from_us) if from_us < overdue_us => {
                let from_us = from_us.max(overdue_us - UNFETCHED_LOOKBACK_US);
                stored += place_light_window(
                    state,
                    (config, light),
                    client,
                    (from_us, overdue_us),
                    (version as u64, RunState::Scheduled),
                )
                .await?
                .len() as u64;
            }
            Some(_) => {}
        }
    }
    Ok(stored)
}

/// The test definition an on-demand request names: a test of the applied
/// configuration, or else a test type (`latency`, `throughput`, `capacity`) whose
/// parameters are the request's `spec`, validated like a configured test.
pub fn request_test(
    request: &RunRequest,
    config: Option<&ValidatedConfig>,
) -> Result<TestDef, String> {
    if let Some(test) = config.and_then(|config| config.test(&request.test)) {
        return Ok(test.clone());
    }
    let spec = match &request.spec {
        serde_json::Value::Object(map) => map.clone(),
        serde_json::Value::Null => Default::default(),
        _ => return Err("field 'spec': expected an object".to_string()),
    };
    let single = MeasurementConfig {
        tests: vec![TestConfig {
            name: request.test.clone(),
            test_type: request.test.clone(),
            spec,
            scheduling: None,
        }],
        ..MeasurementConfig::default()
    };
    let validated = validate(&single).map_err(|errors| {
        errors
            .iter()
            .map(|error| {
                let path = error
                    .path
                    .strip_prefix("tests[0].")
                    .unwrap_or(&error.path)
                    .replace("type", "test");
                format!("field '{path}': {}", error.message)
            })
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    validated.tests.into_iter().next().ok_or_else(|| {
        format!(
            "field 'test': '{}' is neither a configured test nor a test type",
            request.test
        )
    })
}

/// Why an app's run request was refused.
#[derive(Debug, thiserror::Error)]
pub enum RequestRefusal {
    #[error("field 'not_after': must not be before 'not_before'")]
    EndsBeforeStart,
    #[error("field '{field}': agent '{name}' is not registered")]
    UnknownAgent { field: &'static str, name: String },
    #[error("{0}")]
    InvalidTest(String),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

/// Checks an app's run request and stores it for the planner, which it wakes; returns
/// its id (which is also the id of the run it becomes).
pub async fn submit_request(
    state: &ServerState,
    request: &RunRequest,
) -> Result<String, RequestRefusal> {
    if let (Some(not_before), Some(not_after)) = (request.not_before, request.not_after) {
        if not_after < not_before {
            return Err(RequestRefusal::EndsBeforeStart);
        }
    }
    let agents = state.archive.agents().await?;
    for (field, name) in [("client", &request.client), ("server", &request.server)] {
        if !agents.iter().any(|agent| &agent.registration.name == name) {
            return Err(RequestRefusal::UnknownAgent {
                field,
                name: name.clone(),
            });
        }
    }
    let config = config_store::current(&state.archive).await?;
    request_test(request, config.as_ref().map(|(_, config)| config))
        .map_err(RequestRefusal::InvalidTest)?;
    let id = format!("req-{}", crate::new_token().get(..16).unwrap_or_default());
    let document = serde_json::to_value(request).expect("request serialises");
    state.archive.add_request(&id, &document).await?;
    // A permit kept if the planner is mid-pass: its next pass follows at once. On a
    // replica that does not lead, the leader places it on its own tick.
    state.request_submitted.notify_one();
    Ok(id)
}

/// Places pending on-demand requests (each once: placed, or a non-start with reason).
async fn place_requests(
    state: &ServerState,
    options: &PlannerOptions,
    config: Option<&(i64, ValidatedConfig)>,
    agents: &[AgentInfo],
) -> Result<u64, ArchiveError> {
    let archive = &state.archive;
    let config = config.map(|(_, config)| config);
    let segments = config
        .map(|config| config.segments.as_slice())
        .unwrap_or_default();
    let mut stored = 0;
    for (id, document) in archive.pending_requests().await? {
        let request: RunRequest = match serde_json::from_value(document) {
            Ok(request) => request,
            Err(error) => {
                tracing::error!(request = %id, "stored request unreadable: {error}");
                archive.close_request(&id).await?;
                continue;
            }
        };
        let now = Utc::now();
        let not_before = request
            .not_before
            .unwrap_or(now)
            .max(now + chrono::Duration::microseconds(LEAD_US));
        let not_after: DateTime<Utc> = request
            .not_after
            .unwrap_or(now + chrono::Duration::microseconds(micros(options.horizon)));
        let record = match request_test(&request, config) {
            Ok(test) => {
                let test_type = test.kind.as_str();
                let on_demand = OnDemandRequest {
                    run_id: id.clone(),
                    test,
                    from: request.client.clone(),
                    to: request.server.clone(),
                    not_before,
                    not_after,
                    priority: request.priority,
                };
                let existing = existing_runs(
                    state,
                    to_us(not_before) - REQUEST_LOOKBACK_US,
                    to_us(not_after) + REQUEST_LOOKBACK_US,
                    i64::MIN,
                )
                .await?;
                match place_request(now, &on_demand, agents, segments, &existing) {
                    RequestOutcome::Placed(placement) => {
                        for displaced in placement.preempted {
                            if archive
                                .cancel_run(&displaced.run_id, &displaced.reason)
                                .await?
                            {
                                let cancelled = non_start_record(displaced, "unknown");
                                non_start_alerts(state, std::slice::from_ref(&cancelled)).await?;
                            }
                        }
                        planned_record(placement.run)
                    }
                    RequestOutcome::NonStart(non_start) => non_start_record(non_start, test_type),
                }
            }
            Err(reason) => non_start_record(
                NonStart {
                    run_id: id.clone(),
                    task: vantage_scheduler::ON_DEMAND_TASK.to_string(),
                    test: request.test.clone(),
                    from: request.client.clone(),
                    to: request.server.clone(),
                    nominal_start: not_before,
                    reason,
                },
                "unknown",
            ),
        };
        if record.state == RunState::NonStart {
            non_start_alerts(state, std::slice::from_ref(&record)).await?;
        }
        stored += archive.insert_runs(std::slice::from_ref(&record)).await?;
        archive.close_request(&id).await?;
    }
    Ok(stored)
}
