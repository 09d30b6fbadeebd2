//! The server's shared state: the archive, the event bus, the ingest pipeline and
//! its consumers, and the signals the HTTP layer and the scheduler loop share. No
//! HTTP types here: handlers in `api/` and the loops in `planner` and `archivers`
//! both use it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use vantage_analysis::health::MarkerSettings;
use vantage_model::config::ValidatedConfig;
use vantage_scheduler::LightTasks;

use crate::archive::{now_us, AgentRecord, Archive, ArchiveError, TokenGrant, AGENTS_EPOCH};
use crate::archivers::ArchiverQueue;
use crate::config_store::CachedConfig;
use crate::events::{Event, EventBus};
use crate::health::HealthMarkers;
use crate::ingest::{IngestPipeline, ResultConsumer};
use crate::interface_counters::InterfaceCounters;
use crate::path_changes::PathChanges;
use crate::poll_hints::PollHints;
use crate::recent::Recent;
use crate::sla::SlaVerdicts;
use crate::supervisor::TaskHealth;
use crate::ticket_keys::{self, Keyring};
use crate::transfers::{TransferDesk, TransferOptions};

/// Agents' registrations by name.
pub type Registrations = Arc<HashMap<String, AgentRecord>>;

pub struct ServerState {
    pub archive: Archive,
    /// The dashboard's in-memory views of the newest results.
    pub recent: Recent,
    pub events: Arc<EventBus>,
    /// Stores uploads and hands new results to the consumers.
    pub ingest: IngestPipeline,
    /// Woken when new runs are stored, so long-polling agents answer at once (see
    /// [`ServerState::runs_were_stored`]).
    pub runs_stored: Notify,
    /// What agents' long polls look at every second, read for the whole fleet at once.
    pub poll_hints: PollHints,
    /// Woken when an on-demand request is submitted, so the planner places it at once
    /// rather than on its next tick (a diagnosis places one run after another).
    pub request_submitted: Notify,
    /// Known tokens by value with what they grant; revoking a token clears it (see
    /// [`ServerState::forget_tokens`]) and expiry is checked on every use.
    token_cache: RwLock<HashMap<String, TokenGrant>>,
    /// Turns true when the server stops: ends event streams and long polls.
    pub stopping: tokio::sync::watch::Sender<bool>,
    /// The file and HTTP archivers' queue (its counts are exported in `/metrics`).
    pub archivers: ArchiverQueue,
    /// States of the supervised background tasks, for `/healthz`.
    pub tasks: Arc<TaskHealth>,
    /// The keys that sign the tickets agents' endpoints require for throughput tests,
    /// as last read from the archive (another server sharing it may rotate them).
    ticket_keys: RwLock<(Arc<Keyring>, Instant)>,
    /// Deadline transfers and their Calibers plan.
    pub transfers: TransferDesk,
    /// The light tasks of the applied configuration and agent set, worked out once
    /// per plan basis (see [`crate::planner`]).
    pub light_plan: std::sync::Mutex<Option<LightPlan>>,
    /// A planning pass that replans, reserves runs or places on-demand requests holds it
    /// for writing while it reads and stores them: light runs placed in between would
    /// not be in its way (the other passes, which only advance the light marks, hold it
    /// for reading). Agents' fetches hold it for reading
    /// while they place their own light runs, side by side: light runs never compete
    /// with each other, and placing the same ones twice stores them once (their ids
    /// are deterministic).
    pub planning: tokio::sync::RwLock<()>,
    /// The exclusive runs light placement last read (see [`crate::planner`]); held
    /// while they are read again.
    pub reserved_runs: tokio::sync::Mutex<Option<ReservedRuns>>,
    /// Every agent's registration by name, with the archive's [`AGENTS_EPOCH`] when it
    /// was read (see [`ServerState::registrations`]).
    registrations: tokio::sync::Mutex<Option<(Option<i64>, Registrations)>>,
}

/// Exclusive runs stored over a stretch of time, sorted by start, as read while the
/// archive's [`EXCLUSIVE_EPOCH`](crate::archive::EXCLUSIVE_EPOCH) stood at `epoch`:
/// every agent's light runs are placed around the same few thousand runs, read once
/// rather than at each of a thousand agents' fetches.
pub struct ReservedRuns {
    pub epoch: i64,
    pub from_us: i64,
    pub to_us: i64,
    pub runs: Arc<Vec<vantage_scheduler::PlannedRun>>,
}

/// The light tasks of one plan basis (a configuration version and agent set), with
/// the configuration they were worked out from.
#[derive(Clone)]
pub struct LightPlan {
    pub basis: i64,
    pub version: i64,
    pub config: Arc<ValidatedConfig>,
    pub tasks: Arc<LightTasks>,
}

impl ServerState {
    pub async fn new(
        archive: Archive,
        transfers: TransferOptions,
    ) -> Result<Arc<ServerState>, ArchiveError> {
        let events = Arc::new(EventBus::default());
        let archivers = ArchiverQueue::new(archive.clone());
        // The consumers of every newly stored result, in order; an analysis is one
        // more line here.
        let consumers: Vec<Box<dyn ResultConsumer>> = vec![
            Box::new(Arc::clone(&events)),
            Box::new(archivers.clone()),
            Box::new(PathChanges {
                archive: archive.clone(),
                events: Arc::clone(&events),
            }),
            Box::new(HealthMarkers {
                archive: archive.clone(),
                events: Arc::clone(&events),
                settings: MarkerSettings::default(),
            }),
            Box::new(SlaVerdicts {
                archive: archive.clone(),
                events: Arc::clone(&events),
                config: CachedConfig::new(archive.clone()),
            }),
            Box::new(InterfaceCounters {
                archive: archive.clone(),
                events: Arc::clone(&events),
            }),
        ];
        let ticket_keys = RwLock::new((
            Arc::new(Keyring::new(archive.ticket_keys().await?)),
            Instant::now(),
        ));
        let state = Arc::new(ServerState {
            ticket_keys,
            ingest: IngestPipeline::new(archive.clone(), consumers),
            archive,
            recent: Recent::default(),
            events,
            runs_stored: Notify::new(),
            poll_hints: PollHints::default(),
            request_submitted: Notify::new(),
            token_cache: RwLock::new(HashMap::new()),
            stopping: tokio::sync::watch::channel(false).0,
            archivers,
            tasks: Arc::default(),
            transfers: TransferDesk::new(transfers),
            light_plan: std::sync::Mutex::new(None),
            planning: tokio::sync::RwLock::new(()),
            reserved_runs: tokio::sync::Mutex::new(None),
            registrations: tokio::sync::Mutex::new(None),
        });
        state.refresh_agent_tags().await?;
        Ok(state)
    }

    /// The ticket keys, re-read from the archive when the copy is older than
    /// [`ticket_keys::REFRESH_EVERY`].
    pub async fn keyring(&self) -> Result<Arc<Keyring>, ArchiveError> {
        {
            let (keyring, read_at) = &*self
                .ticket_keys
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if read_at.elapsed() < ticket_keys::REFRESH_EVERY {
                return Ok(Arc::clone(keyring));
            }
        }
        self.reload_keyring().await
    }

    async fn reload_keyring(&self) -> Result<Arc<Keyring>, ArchiveError> {
        let keyring = Arc::new(Keyring::new(self.archive.ticket_keys().await?));
        *self
            .ticket_keys
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) =
            (Arc::clone(&keyring), Instant::now());
        Ok(keyring)
    }

    /// Adds a ticket key that signs after `activate_in` and retires the older ones
    /// after `retire_previous_in` (see [`ticket_keys`]); returns its generation and the
    /// keys as they are now.
    pub async fn rotate_ticket_key(
        &self,
        activate_in: Duration,
        retire_previous_in: Duration,
    ) -> Result<(i64, Arc<Keyring>), ArchiveError> {
        let now = now_us();
        let generation = self
            .archive
            .rotate_ticket_key(
                now + activate_in.as_micros() as i64,
                now + retire_previous_in.as_micros() as i64,
                now - ticket_keys::KEEP_RETIRED.as_micros() as i64,
            )
            .await?;
        Ok((generation, self.reload_keyring().await?))
    }

    /// Every agent's registration by name, read again from the archive only when a
    /// registration was stored since (by any replica: the [`AGENTS_EPOCH`] moved). A
    /// fleet's fetches name their runs' peers, hundreds each, and reading them per
    /// fetch was a row read per run handed out (16 650 a second at 1 000 agents).
    pub async fn registrations(&self) -> Result<Registrations, ArchiveError> {
        let epoch = self.archive.planner_mark(AGENTS_EPOCH).await?;
        let mut cached = self.registrations.lock().await;
        if let Some((read_at, registrations)) = &*cached {
            if *read_at == epoch {
                return Ok(Arc::clone(registrations));
            }
        }
        // Read after the epoch: a registration stored in between is read too, and read
        // again at the next call, which finds the epoch moved.
        let registrations: Registrations = Arc::new(
            self.archive
                .agents()
                .await?
                .into_iter()
                .map(|agent| (agent.registration.name.clone(), agent))
                .collect(),
        );
        *cached = Some((epoch, Arc::clone(&registrations)));
        Ok(registrations)
    }

    pub async fn refresh_agent_tags(&self) -> Result<(), ArchiveError> {
        self.events.set_agents(&self.archive.agents().await?);
        Ok(())
    }

    /// Runs were stored here: long-polling agents look again at once, past hints that
    /// were read before.
    pub fn runs_were_stored(&self) {
        self.poll_hints.runs_stored();
        self.runs_stored.notify_waiters();
    }

    /// Publishes an event; having no subscriber is fine.
    pub fn publish(&self, event: Event) {
        self.events.publish(event);
    }

    /// What a bearer token grants, if it is known and not revoked. An expired token is
    /// returned too: the caller refuses it with its expiry.
    pub async fn authenticate(&self, token: &str) -> Result<Option<TokenGrant>, ArchiveError> {
        if let Some(known) = self
            .token_cache
            .read()
            .expect("token cache lock")
            .get(token)
        {
            return Ok(Some(known.clone()));
        }
        let found = self.archive.token(token).await?;
        if let Some(known) = &found {
            self.token_cache
                .write()
                .expect("token cache lock")
                .insert(token.to_string(), known.clone());
        }
        Ok(found)
    }

    /// Drops every cached token, so a revocation takes effect on the next request.
    pub fn forget_tokens(&self) {
        self.token_cache.write().expect("token cache lock").clear();
    }
}
