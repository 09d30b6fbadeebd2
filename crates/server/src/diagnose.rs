//! Diagnosis jobs (`POST /api/v1/diagnose`): an on-demand campaign among the agents on
//! a path, weighed by the pure `vantage_analysis::diagnosis`.
//!
//! A job traces the path from the source agent to the destination agent, finds the
//! measurement points on it (agents that answer at a hop's address), then places one
//! `diagnose` run end to end and one per segment between consecutive points, one at a
//! time so no two transfers share the path (each placed to start where the one before
//! it is reserved to end, so they follow each other without a gap), and weighs them
//! with the trace and the pair's previous trace. The job document is stored after
//! every step (so any replica answers `GET /api/v1/diagnose/{id}`) and each step is
//! published as a `diagnosis` event on the subscription stream.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use vantage_analysis::diagnosis::{diagnose, Observations, SegmentObservation, Traced};
use vantage_model::control::RunRequest;
use vantage_model::diagnosis::{DiagnoseRequest, Diagnosis, DiagnosticResult, TestRun};
use vantage_model::kinds::{self, Spec};
use vantage_model::trace::TraceResult;

use crate::archive::{from_us, ArchiveError, RunRecord, RunState, StoredResult};
use crate::events::Event;
use crate::planner::{self, RequestRefusal};
use crate::state::ServerState;

/// How long past its test time a placed run may take to report (planning lead,
/// dispatch, setup guard, upload).
const RESULT_SLACK: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(250);
/// Traces of the path at most, while hops stay silent (a lossy segment's bursts can
/// swallow every probe of a hop and hide the measurement point behind it).
const TRACE_ATTEMPTS: u32 = 3;
/// How long a step may wait for its agents to be free.
const QUEUE_LIMIT: Duration = Duration::from_secs(120);
/// The path's trace: three probes per hop (a lossy segment must not hide the
/// measurement points behind it), each given up after 0.5 s.
fn trace_spec() -> serde_json::Value {
    serde_json::json!({"max_ttl": 16, "queries": 3, "timeout": "500ms"})
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Running,
    Done,
    Failed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }
}

/// A diagnosis job as stored and served.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagnosisJob {
    pub id: String,
    pub state: JobState,
    pub request: DiagnoseRequest,
    pub created_at: DateTime<Utc>,
    /// One line per step, oldest first.
    pub progress: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Diagnosis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Why a diagnosis could not start.
#[derive(Debug, thiserror::Error)]
pub enum DiagnoseRefusal {
    #[error("field '{field}': agent '{name}' is not registered")]
    UnknownAgent { field: &'static str, name: String },
    #[error("fields 'source' and 'destination' name the same agent")]
    SamePair,
    #[error("field 'app': {0}")]
    UnknownApp(#[from] vantage_analysis::diagnosis::apps::UnknownApp),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

/// Checks the request, stores the job and starts it; returns the job as stored.
pub async fn start(
    state: &Arc<ServerState>,
    mut request: DiagnoseRequest,
) -> Result<DiagnosisJob, DiagnoseRefusal> {
    vantage_analysis::diagnosis::apps::apply(&mut request)?;
    if request.source == request.destination {
        return Err(DiagnoseRefusal::SamePair);
    }
    let agents = state.archive.agents().await?;
    for (field, name) in [
        ("source", &request.source),
        ("destination", &request.destination),
    ] {
        if !agents.iter().any(|agent| &agent.registration.name == name) {
            return Err(DiagnoseRefusal::UnknownAgent {
                field,
                name: name.clone(),
            });
        }
    }
    let job = DiagnosisJob {
        id: format!("diag-{}", crate::new_token().get(..16).unwrap_or_default()),
        state: JobState::Running,
        request,
        created_at: Utc::now(),
        progress: Vec::new(),
        result: None,
        error: None,
    };
    put(state, &job).await?;
    let running = Arc::new(tokio::sync::Mutex::new(job.clone()));
    let state = state.clone();
    tokio::spawn(async move {
        let outcome = campaign(&state, &running).await;
        let mut job = running.lock().await;
        match outcome {
            Ok(diagnosis) => {
                job.state = JobState::Done;
                let verdict = serde_json::to_value(diagnosis.verdict).unwrap_or_default();
                job.progress.push(format!(
                    "verdict {}, {} suspect(s)",
                    verdict.as_str().unwrap_or("?"),
                    diagnosis.suspects.len()
                ));
                job.result = Some(diagnosis);
            }
            Err(error) => {
                job.state = JobState::Failed;
                job.progress.push(format!("failed: {error}"));
                job.error = Some(error);
            }
        }
        store(&state, &job).await;
    });
    Ok(job)
}

async fn put(state: &ServerState, job: &DiagnosisJob) -> Result<(), ArchiveError> {
    let document = serde_json::to_value(job).expect("a job serialises");
    state
        .archive
        .put_diagnosis(
            &job.id,
            &job.request.source,
            &job.request.destination,
            job.state.as_str(),
            job.created_at.timestamp_micros(),
            &document,
        )
        .await
}

/// Stores the job and publishes its latest step.
async fn store(state: &ServerState, job: &DiagnosisJob) {
    if let Err(error) = put(state, job).await {
        tracing::error!(job = %job.id, "storing a diagnosis job failed: {error}");
    }
    state.publish(Event::Diagnosis {
        id: job.id.clone(),
        state: job.state.as_str().to_string(),
        message: job.progress.last().cloned().unwrap_or_default(),
        agents: vec![job.request.source.clone(), job.request.destination.clone()],
    });
}

async fn step(state: &ServerState, job: &tokio::sync::Mutex<DiagnosisJob>, line: String) {
    let mut job = job.lock().await;
    job.progress.push(line);
    store(state, &job).await;
}

/// An on-demand run asked of the planner, its result not yet in.
struct Requested {
    test: String,
    client: String,
    server: String,
    run_id: String,
    /// When to give up on its result.
    deadline: tokio::time::Instant,
}

impl Requested {
    fn named(&self) -> String {
        format!("{} {} → {}", self.test, self.client, self.server)
    }

    /// `run` (this request's), or why it will not run.
    fn not_running(&self, run: RunRecord) -> Result<RunRecord, String> {
        if matches!(run.state, RunState::NonStart | RunState::Missed) {
            return Err(format!(
                "{} did not run: {}",
                self.named(),
                run.reason.unwrap_or_else(|| format!("{:?}", run.state))
            ));
        }
        Ok(run)
    }
}

/// Asks the planner for one on-demand run starting no earlier than `not_before` (now
/// when `None`).
async fn ask_for(
    state: &ServerState,
    (test, spec): (&str, &serde_json::Value),
    (client, server): (&str, &str),
    not_before: Option<DateTime<Utc>>,
) -> Result<Requested, String> {
    let queue_until = not_before.unwrap_or_else(Utc::now)
        + chrono::Duration::from_std(QUEUE_LIMIT).expect("fits");
    let request = RunRequest {
        test: test.to_string(),
        client: client.to_string(),
        server: server.to_string(),
        spec: spec.clone(),
        not_before,
        // Queued behind whatever holds the agents now, rather than refused.
        not_after: Some(queue_until),
        // Above scheduled tasks: a diagnosis is asked for now.
        priority: 100,
    };
    let run_id = planner::submit_request(state, &request)
        .await
        .map_err(|error| match error {
            RequestRefusal::Archive(error) => error.to_string(),
            refusal => format!("{test} {client} → {server}: {refusal}"),
        })?;
    let empty = serde_json::Map::new();
    let given = spec.as_object().unwrap_or(&empty);
    let test_time = kinds::find(test)
        .and_then(|kind| {
            let values = kind.normalise("spec", given).ok()?;
            (kind.estimate)(&Spec::new(kind, &values))
        })
        .unwrap_or_default();
    let wait = (queue_until - Utc::now()).to_std().unwrap_or_default() + test_time + RESULT_SLACK;
    Ok(Requested {
        test: test.to_string(),
        client: client.to_string(),
        server: server.to_string(),
        run_id,
        deadline: tokio::time::Instant::now() + wait,
    })
}

/// The stored run of `requested` once the planner has placed it; an error when it
/// will not run.
async fn placed(state: &ServerState, requested: &Requested) -> Result<RunRecord, String> {
    loop {
        if let Some(run) = state
            .archive
            .run(&requested.run_id)
            .await
            .map_err(|e| e.to_string())?
        {
            return requested.not_running(run);
        }
        if tokio::time::Instant::now() > requested.deadline {
            return Err(format!("{}: never placed", requested.named()));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits for the result of `requested`, noting the run in `tests_run`.
async fn result_of(
    state: &ServerState,
    requested: Requested,
    tests_run: &mut Vec<TestRun>,
) -> Result<StoredResult, String> {
    let outcome = loop {
        if let Some(result) = state
            .archive
            .stored_result(&requested.run_id)
            .await
            .map_err(|e| e.to_string())?
        {
            break Ok(result);
        }
        if let Some(run) = state
            .archive
            .run(&requested.run_id)
            .await
            .map_err(|e| e.to_string())?
        {
            if let Err(refusal) = requested.not_running(run) {
                break Err(refusal);
            }
        }
        if tokio::time::Instant::now() > requested.deadline {
            break Err(format!("{}: no result in time", requested.named()));
        }
        tokio::time::sleep(POLL).await;
    };
    tests_run.push(TestRun {
        test: requested.test.clone(),
        client: requested.client.clone(),
        server: requested.server.clone(),
        run_id: requested.run_id.clone(),
        outcome: match &outcome {
            Ok(result) => result.outcome.clone(),
            Err(_) => "not_run".to_string(),
        },
    });
    let result = outcome?;
    if result.outcome != "completed" {
        return Err(format!(
            "{} failed: {}",
            requested.named(),
            result.error.unwrap_or_default()
        ));
    }
    Ok(result)
}

/// Places one on-demand run and waits for its result.
async fn run(
    state: &ServerState,
    test: &str,
    spec: &serde_json::Value,
    (client, server): (&str, &str),
    tests_run: &mut Vec<TestRun>,
) -> Result<StoredResult, String> {
    let requested = ask_for(state, (test, spec), (client, server), None).await?;
    result_of(state, requested, tests_run).await
}

fn parse<T: serde::de::DeserializeOwned>(result: &StoredResult) -> Result<T, String> {
    let raw = result
        .result
        .clone()
        .ok_or_else(|| format!("run {} stored no document", result.run_id))?;
    serde_json::from_value(raw).map_err(|e| format!("run {}: {e}", result.run_id))
}

/// The measurement points in trace order: the agents answering at each hop.
fn points_on(
    trace: &TraceResult,
    agent_addresses: &BTreeMap<String, String>,
    source: &str,
    destination: &str,
) -> Vec<String> {
    let mut path = vec![source.to_string()];
    for hop in &trace.hops {
        let Some(agent) = hop
            .addresses
            .iter()
            .find_map(|address| agent_addresses.get(address))
        else {
            continue;
        };
        if agent != destination && !path.contains(agent) {
            path.push(agent.clone());
        }
    }
    path.push(destination.to_string());
    path
}

async fn campaign(
    state: &ServerState,
    job: &tokio::sync::Mutex<DiagnosisJob>,
) -> Result<Diagnosis, String> {
    let request = job.lock().await.request.clone();
    let (source, destination) = (request.source.as_str(), request.destination.as_str());
    let mut tests_run = Vec::new();
    let agents = state.archive.agents().await.map_err(|e| e.to_string())?;
    let agent_addresses: BTreeMap<String, String> = agents
        .iter()
        .flat_map(|agent| {
            agent
                .registration
                .addresses
                .iter()
                .map(|address| (address.clone(), agent.registration.name.clone()))
        })
        .collect();

    step(state, job, format!("tracing {source} → {destination}")).await;
    let mut trace: Option<Traced> = None;
    let mut first_start_us = 0;
    for attempt in 1..=TRACE_ATTEMPTS {
        let traced = run(
            state,
            "trace",
            &trace_spec(),
            (source, destination),
            &mut tests_run,
        )
        .await?;
        let result: TraceResult = parse(&traced)?;
        let merged = match trace.take() {
            Some(mut merged) => {
                merged.result.fill_silent_hops(&result);
                merged
            }
            None => {
                first_start_us = traced.start_time.timestamp_micros();
                Traced {
                    run_id: traced.run_id.clone(),
                    result,
                }
            }
        };
        let silent = merged.result.silent_hops();
        trace = Some(merged);
        if silent.is_empty() || attempt == TRACE_ATTEMPTS {
            break;
        }
        step(
            state,
            job,
            format!("no answer at TTL {silent:?}: tracing again ({attempt} of {TRACE_ATTEMPTS})"),
        )
        .await;
    }
    let trace = trace.expect("at least one trace ran");
    let previous_trace = state
        .archive
        .previous_result(source, destination, "trace", first_start_us)
        .await
        .map_err(|e| e.to_string())?
        .and_then(|(run_id, raw)| {
            serde_json::from_value(raw)
                .ok()
                .map(|result| Traced { run_id, result })
        });
    let path = points_on(&trace.result, &agent_addresses, source, destination);
    step(
        state,
        job,
        format!("measurement points on the path: {}", path.join(" → ")),
    )
    .await;

    let mut pairs = vec![(source.to_string(), destination.to_string(), true)];
    if request.segments && path.len() > 2 {
        pairs.extend(
            path.windows(2)
                .map(|pair| (pair[0].clone(), pair[1].clone(), false)),
        );
    }
    // Each measurement is asked for as soon as the one before it is placed, to start
    // where that one's reservation ends: one after another, as the path allows, without
    // the wait for a result, the planner and the lead before the next start between them.
    let diagnose_spec = serde_json::json!({});
    let diagnostic = ("diagnose", &diagnose_spec);
    let mut next = match pairs.first() {
        Some((from, to, _)) => Some(ask_for(state, diagnostic, (from, to), None).await?),
        None => None,
    };
    let mut segments = Vec::new();
    for (index, (from, to, end_to_end)) in pairs.iter().enumerate() {
        let requested = next.take().expect("asked for before its turn");
        step(
            state,
            job,
            format!(
                "measuring {from} ⇄ {to}{} ({} of {})",
                if *end_to_end { " end to end" } else { "" },
                index + 1,
                pairs.len()
            ),
        )
        .await;
        if let Some((next_from, next_to, _)) = pairs.get(index + 1) {
            let run = placed(state, &requested).await?;
            let not_before = Some(from_us(run.planned_end_us));
            next = Some(ask_for(state, diagnostic, (next_from, next_to), not_before).await?);
        }
        let stored = match result_of(state, requested, &mut tests_run).await {
            Ok(stored) => stored,
            Err(error) => {
                if let Some(unneeded) = next.take() {
                    // Not run for nothing, unless its agent has it already (or, rarely,
                    // the planner has not placed it yet: then it runs all the same).
                    let reason = "the diagnosis it was part of failed";
                    if let Err(error) = state.archive.cancel_run(&unneeded.run_id, reason).await {
                        tracing::warn!("cancelling {}: {error}", unneeded.named());
                    }
                }
                return Err(error);
            }
        };
        let result: DiagnosticResult = parse(&stored)?;
        segments.push(SegmentObservation {
            from: from.clone(),
            to: to.clone(),
            end_to_end: *end_to_end,
            run_id: Some(stored.run_id.clone()),
            result,
        });
    }
    let observations = Observations {
        request,
        path,
        segments,
        trace: Some(trace),
        previous_trace,
        agent_addresses,
        tests_run,
    };
    Ok(diagnose(&observations))
}
