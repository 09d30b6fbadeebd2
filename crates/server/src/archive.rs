//! The archive: one schema on SQLite (default, WAL) or PostgreSQL (fleets).
//!
//! All SQL goes through sqlx's `Any` driver with `$N` placeholders, which both
//! backends accept, so there is one code path (set statements built at run time
//! use `?` on SQLite: see [`placeholders`]). Times are stored as microseconds
//! since the Unix epoch (`*_us` columns) and JSON documents as text; that keeps
//! the schema identical and lets ranges use plain integer indexes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};
use tokio::sync::{mpsc, oneshot};
use vantage_model::control::{AgentRegistration, AppMetric, ResultUpload, Role, RunOutcome};
use vantage_model::shared_spec::SharedSpec;
use vantage_model::sla::SlaVerdict;
use vantage_model::ticket::TicketSigner;
use vantage_scheduler::{Claim, ClaimMode};

use crate::notices::{stored_payloads, Channels};

/// Why an archive operation failed; the message names the operation.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("database URL '{0}' is not supported: use sqlite://PATH or postgres://…")]
    UnsupportedUrl(String),
    #[error("database error while {context}: {source}")]
    Sql {
        context: &'static str,
        #[source]
        source: sqlx::Error,
    },
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("the stored ticket key is unusable: {0}")]
    TicketKey(#[from] vantage_model::ticket::TicketError),
    #[error("the archive's writer stopped")]
    WriterStopped,
    #[error("starting the archive's writer thread: {0}")]
    WriterThread(#[source] std::io::Error),
    #[error("ingesting results: {written} of {expected} rows written to {table}, the others conflicted with stored rows")]
    IngestConflict {
        table: &'static str,
        expected: usize,
        written: u64,
    },
    #[error("stored {what} is not valid JSON: {source}")]
    Json {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("stored light hand-out of agent '{client}' is inconsistent: {what}")]
    CorruptHandOut { client: String, what: String },
}

mod checkpoints;
mod handouts;
mod seen;

fn sql(context: &'static str) -> impl FnOnce(sqlx::Error) -> ArchiveError {
    move |source| ArchiveError::Sql { context, source }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub fn to_us(time: DateTime<Utc>) -> i64 {
    time.timestamp_micros()
}

pub fn from_us(time_us: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(time_us).unwrap_or_default()
}

pub fn now_us() -> i64 {
    to_us(Utc::now())
}

/// Tokens are stored hashed so that a leaked database does not leak credentials.
/// Hex digits of a token's SHA-256 that identify it in listings and revocations.
pub const TOKEN_ID_LEN: usize = 16;

/// What a bearer token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenGrant {
    pub name: String,
    pub role: Role,
    /// The token is refused from this time on; `None`: it does not expire.
    pub expires_us: Option<i64>,
}

/// A token as admins see it: its id, never its value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenInfo {
    /// The first [`TOKEN_ID_LEN`] hex digits of the token's SHA-256.
    pub id: String,
    pub name: String,
    pub role: String,
    pub created: DateTime<Utc>,
    pub expires: Option<DateTime<Utc>>,
    pub revoked: Option<DateTime<Utc>>,
}

/// The id of `token` in listings (see [`TokenInfo::id`]).
pub fn token_id(token: &str) -> String {
    token_digest(token)[..TOKEN_ID_LEN].to_string()
}

fn token_digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A registered agent as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentRecord {
    #[serde(flatten)]
    pub registration: AgentRegistration,
    pub registered_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
}

/// Life cycle of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Planned; the agent has not fetched it yet.
    Scheduled,
    /// The client agent fetched it.
    Dispatched,
    /// A result was stored.
    Completed,
    /// The agent reported that the measurement could not be made.
    Failed,
    /// The scheduler could not place it; `reason` says why.
    NonStart,
    /// No result arrived in time; `reason` says why. A late result still completes it.
    Missed,
}

impl RunState {
    /// Every state, in the order of a run's life; a new state belongs here too.
    pub const ALL: [RunState; 6] = [
        RunState::Scheduled,
        RunState::Dispatched,
        RunState::Completed,
        RunState::Failed,
        RunState::NonStart,
        RunState::Missed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Scheduled => "scheduled",
            RunState::Dispatched => "dispatched",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
            RunState::NonStart => "non_start",
            RunState::Missed => "missed",
        }
    }

    fn parse(text: &str) -> RunState {
        match text {
            "dispatched" => RunState::Dispatched,
            "completed" => RunState::Completed,
            "failed" => RunState::Failed,
            "non_start" => RunState::NonStart,
            "missed" => RunState::Missed,
            _ => RunState::Scheduled,
        }
    }
}

/// A run as stored (planned, non-started, or finished).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRecord {
    pub id: String,
    pub task: String,
    /// Test type (`latency`, `throughput`, `capacity`): what the agent runs.
    pub test: String,
    /// Name of the test definition in the configuration.
    pub test_name: String,
    pub client: String,
    /// The server agent's name, or the external host as written in the group.
    pub server: String,
    /// The external host (HOST or HOST:PORT) when the server side is not an agent.
    pub target: Option<String>,
    /// Shared by the runs of one test definition or hand-out.
    pub spec: SharedSpec,
    /// Holds both agents (and any declared segment) exclusively.
    pub exclusive: bool,
    /// Throughput: the server agent sends (NAT orientation).
    pub reverse: bool,
    pub priority: i64,
    /// Resources the run holds, as the scheduler claimed them.
    pub claims: Vec<Claim>,
    pub planned_start_us: i64,
    pub planned_end_us: i64,
    pub actual_start_us: Option<i64>,
    pub actual_end_us: Option<i64>,
    pub state: RunState,
    pub reason: Option<String>,
}

/// The summary metrics of a result document, by its test kind's declaration
/// (`vantage_model::kinds`); stored one row per run and name, queried by name.
fn summary_metrics(test: &str, result: &serde_json::Value) -> BTreeMap<String, f64> {
    vantage_model::kinds::find(test)
        .map(|kind| kind.summary(result))
        .unwrap_or_default()
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect()
}

/// A stored result with its indexed metrics and (optionally) the raw document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredResult {
    pub run_id: String,
    pub test: String,
    pub client: String,
    pub server: String,
    pub start_time: DateTime<Utc>,
    pub end_time: DateTime<Utc>,
    pub outcome: String,
    pub error: Option<String>,
    pub metrics: BTreeMap<String, f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
}

/// One value of one metric of one result (`Archive::metric_values`).
#[derive(Debug, Clone, PartialEq)]
pub struct MetricValue {
    pub client: String,
    pub server: String,
    pub test: String,
    pub start_us: i64,
    pub value: f64,
}

/// Which results a read covers, by when they started or when they arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// Results that started at or after this instant (µs).
    Started(i64),
    /// Results the archive received after this instant (µs).
    Received(i64),
}

impl Since {
    /// The WHERE condition on `results r`, with the instant bound as `$2`.
    fn condition(self) -> (&'static str, i64) {
        match self {
            Since::Started(instant_us) => ("r.start_us >= $2", instant_us),
            Since::Received(instant_us) => ("r.received_us > $2", instant_us),
        }
    }
}

/// One generation of the key test tickets are signed with.
#[derive(Debug, Clone)]
pub struct TicketKey {
    pub generation: i64,
    pub signer: TicketSigner,
    pub created_us: i64,
    /// When it starts signing (0: from the start).
    pub signs_from_us: i64,
    /// When agents stop trusting it (`None`: not retired).
    pub retired_us: Option<i64>,
}

/// One queued delivery of a stored result to a file or HTTP archiver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    pub run_id: String,
    pub archiver: String,
    /// Failed attempts so far.
    pub attempts: i64,
    pub created_us: i64,
}

/// Which results a query selects; `None` fields do not filter.
#[derive(Debug, Clone, Default)]
pub struct ResultFilter {
    pub client: Option<String>,
    pub server: Option<String>,
    pub test: Option<String>,
    pub from_us: Option<i64>,
    pub to_us: Option<i64>,
    pub limit: i64,
    pub include_raw: bool,
}

/// One downsampling bucket of a metric series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesBucket {
    pub start_time: DateTime<Utc>,
    pub count: i64,
    pub avg: f64,
    pub min: f64,
    pub max: f64,
}

/// Outcome of ingesting one upload.
#[derive(Debug, Clone, PartialEq)]
pub enum Ingest {
    /// Stored, with the summary metrics stored for it.
    Stored(BTreeMap<String, f64>),
    Duplicate,
}

/// Why an upload was refused (the client's fault, reported as HTTP 4xx).
#[derive(Debug, thiserror::Error)]
pub enum IngestRefusal {
    #[error("run '{0}' does not exist")]
    UnknownRun(String),
    #[error("run '{run_id}' belongs to client '{client}', not to agent '{agent}'")]
    WrongAgent {
        run_id: String,
        client: String,
        agent: String,
    },
    #[error("upload for run '{0}' says completed but has no result document")]
    MissingResult(String),
    #[error("upload for run '{run_id}': {refusal}")]
    Packets {
        run_id: String,
        refusal: crate::capture_packets::PacketsRefusal,
    },
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredAppMetric {
    #[serde(flatten)]
    pub metric: AppMetric,
    pub publisher: String,
}

/// How many rows retention removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RetentionReport {
    pub results: u64,
    /// Rows of `runs`: scheduled, failed to start, missed, and runs that are not light.
    pub runs: u64,
    /// Swept hand-outs: the plans of a fetch's light runs that reported.
    pub light_handouts: u64,
    pub app_metrics: u64,
    pub sla_verdicts: u64,
    pub diagnoses: u64,
    pub alerts: u64,
}

/// Which alerts to read ([`Archive::alerts`]).
#[derive(Debug, Clone, Default)]
pub struct AlertFilter {
    /// Alerts naming this agent.
    pub agent: Option<String>,
    pub severity: Option<String>,
    pub from_us: Option<i64>,
    pub to_us: Option<i64>,
    pub limit: i64,
}

/// A stored alert with its id.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredAlert {
    pub id: String,
    #[serde(flatten)]
    pub alert: crate::events::Alert,
}

/// Which SLA verdicts to read ([`Archive::sla_verdicts`]).
#[derive(Debug, Clone, Default)]
pub struct SlaFilter {
    pub contract: Option<String>,
    pub client: Option<String>,
    pub server: Option<String>,
    pub from_us: Option<i64>,
    pub to_us: Option<i64>,
    pub limit: i64,
}

#[derive(Clone)]
pub struct Archive {
    pool: AnyPool,
    backend: Backend,
    /// Where every write runs, a transaction or a single statement: on SQLite one
    /// connection of its own (see [`Archive::write_transaction`]), where writers queue
    /// in order instead of polling SQLite's busy handler beside it; on PostgreSQL the
    /// pool itself.
    writer: AnyPool,
    /// On PostgreSQL, how replicas sharing the database reach each other (see
    /// [`crate::notices`]): the URL a listener connects to and this archive's channels.
    replicas: Option<Arc<Replicas>>,
    /// Where result batches queue to be stored together (see [`group_commits`]); None
    /// only in the writers' own handles.
    group_commit: Option<mpsc::Sender<IngestJob>>,
    /// Where agents seen queue to be recorded together (see [`seen::record_seen`]);
    /// None only in the writers' own handles.
    seen: Option<mpsc::Sender<seen::Seen>>,
    /// On a PostgreSQL whose autovacuum is off, when this archive last vacuumed the
    /// tables every run rewrites (see [`Archive::vacuum_when_autovacuum_is_off`]).
    self_vacuum: Option<Arc<tokio::sync::Mutex<Option<std::time::Instant>>>>,
    /// On PostgreSQL, how many runs this archive stored as `scheduled` since it last
    /// analysed `runs` (see [`Archive::insert_runs_and_marks`]).
    scheduled_since_analyze: Option<Arc<std::sync::atomic::AtomicUsize>>,
    /// Hand-outs read for uploads' checks, kept indexed (see [`handouts`]).
    handouts: Arc<handouts::HandOutCache>,
}

/// The tables that every run, upload, heartbeat and planning pass rewrites or adds
/// to: a reserved run's row is written three times (placed, handed out, completed), a
/// light run's hand-out is inserted and deleted, and
/// index-only scans of `results` need its visibility map kept current.
const VACUUMED_TABLES: &str = "runs, light_handouts, results, agents, planner_state, leases";

/// Once this archive has stored this many runs as `scheduled`, PostgreSQL analyses
/// `runs` (see [`Archive::insert_runs_and_marks`]).
const ANALYZE_AFTER_SCHEDULING: usize = 1_000;

/// How often an archive vacuums [`VACUUMED_TABLES`] itself when autovacuum is off.
const SELF_VACUUM_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// The outcome of one upload of an ingest batch.
pub type IngestOutcome = Result<(Ingest, RunRecord), IngestRefusal>;

/// Checked uploads handed back by the writer with, for each, whether it was stored
/// (false: its run already had a result).
type Written = (Vec<Accepted>, Vec<bool>);

/// One caller's checked uploads waiting for a group commit.
struct IngestJob {
    accepted: Vec<Accepted>,
    reply: oneshot::Sender<Result<Written, ArchiveError>>,
}

/// Most uploads one group commit stores: a transaction holds SQLite's write lock
/// throughout, so this bounds how long other writers (the planner) wait.
const GROUP_COMMIT_UPLOADS: usize = 2_000;

/// Group commits PostgreSQL writes at once (SQLite has one writer, see
/// [`spawn_sqlite_writer`]). PostgreSQL writes transactions side by side, but each
/// commit waits for the log's flush and every transaction that notifies other replicas
/// takes one lock at its commit: a few concurrent groups keep its connections busy
/// without queueing a fleet's uploads one commit each behind that lock.
const POSTGRES_GROUP_COMMIT_WRITERS: usize = 4;

/// Runs SQLite's one group-commit writer on a thread of its own. Its work between
/// statements (building a group's statements, binding 2 000 results' values) is
/// the archive's throughput on SQLite; as one task among the server's others it waited
/// behind a fleet's fetches and uploads in the runtime's queue each time, and the write
/// lock sat idle meanwhile. Ends, like the writer, with the last archive handle.
fn spawn_sqlite_writer(
    archive: Archive,
    jobs: Arc<tokio::sync::Mutex<mpsc::Receiver<IngestJob>>>,
) -> Result<(), ArchiveError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ArchiveError::WriterThread)?;
    std::thread::Builder::new()
        .name("archive-writer".to_string())
        .spawn(move || runtime.block_on(group_commits(archive, jobs)))
        .map_err(ArchiveError::WriterThread)?;
    Ok(())
}

/// Batches waiting for the writer; callers wait to enqueue beyond it.
const GROUP_COMMIT_QUEUE: usize = 256;

/// Group commit: batches that arrive while a transaction is being written are
/// stored together in the next one, so concurrent uploads (a fleet's agents, each
/// sending a few results) share one transaction's fixed cost (its commit, its
/// notice to other replicas, and on SQLite the pages every batch touches) instead of
/// queueing for the write lock one by one. Each writer
/// takes what is waiting when it is free. A combined transaction that fails is
/// retried batch by batch, so each caller gets its own batch's outcome. Ends when
/// the last archive handle is dropped.
async fn group_commits(archive: Archive, jobs: Arc<tokio::sync::Mutex<mpsc::Receiver<IngestJob>>>) {
    loop {
        let mut group = Vec::new();
        {
            let mut jobs = jobs.lock().await;
            let Some(first) = jobs.recv().await else {
                return;
            };
            let mut uploads = first.accepted.len();
            group.push(first);
            while uploads < GROUP_COMMIT_UPLOADS {
                let Ok(job) = jobs.try_recv() else { break };
                uploads += job.accepted.len();
                group.push(job);
            }
        }
        let lengths: Vec<usize> = group.iter().map(|job| job.accepted.len()).collect();
        let mut all: Vec<Accepted> = group
            .iter_mut()
            .flat_map(|job| std::mem::take(&mut job.accepted))
            .collect();
        match archive.store_accepted(&all).await {
            Ok(stored) => {
                let mut stored = stored.into_iter();
                for (job, count) in group.into_iter().zip(lengths) {
                    let mine = all.drain(..count).collect();
                    let _ = job
                        .reply
                        .send(Ok((mine, stored.by_ref().take(count).collect())));
                }
            }
            Err(error) if group.len() == 1 => {
                let _ = group.pop().expect("one job").reply.send(Err(error));
            }
            Err(error) => {
                tracing::debug!("a group commit failed ({error}); storing its batches one by one");
                for (job, count) in group.into_iter().zip(lengths) {
                    let mine: Vec<Accepted> = all.drain(..count).collect();
                    let outcome = archive.store_accepted(&mine).await;
                    let _ = job.reply.send(outcome.map(|stored| (mine, stored)));
                }
            }
        }
    }
}

/// What an archive on PostgreSQL needs to tell other replicas what it stored.
pub struct Replicas {
    pub url: String,
    pub channels: Channels,
    /// This archive's name in its notices, so that it ignores its own.
    pub origin: String,
}

impl Archive {
    /// Opens (creating if needed) and migrates the database at `url`.
    pub async fn open(url: &str) -> Result<Archive, ArchiveError> {
        sqlx::any::install_default_drivers();
        let (backend, url, max_connections) = if let Some(rest) = url.strip_prefix("sqlite://") {
            let with_mode = if rest.contains("mode=") {
                url.to_string()
            } else if rest.contains('?') {
                format!("{url}&mode=rwc")
            } else {
                format!("{url}?mode=rwc")
            };
            // SQLite has one writer; a small pool avoids lock convoys.
            (Backend::Sqlite, with_mode, 4)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (Backend::Postgres, url.to_string(), 16)
        } else {
            return Err(ArchiveError::UnsupportedUrl(url.to_string()));
        };
        let options = |writer: bool| {
            AnyPoolOptions::new().after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        // WAL lets readers (queries, SSE) run beside the ingest writer.
                        sqlx::query("PRAGMA journal_mode = WAL")
                            .execute(&mut *conn)
                            .await?;
                        sqlx::query("PRAGMA busy_timeout = 10000")
                            .execute(&mut *conn)
                            .await?;
                        sqlx::query("PRAGMA foreign_keys = ON")
                            .execute(&mut *conn)
                            .await?;
                        // A checkpoint copies each page once however often the log
                        // rewrote it; at SQLite's default of 1 000 pages the ingest
                        // writer copied the same index pages every few commits. The
                        // log now grows to about 200 MiB between checkpoints: at
                        // 10 000 pages a fleet of 1 000 agents checkpointed every
                        // second or so, inside the ingest writer's commit (p90 of a
                        // group commit's commit 120 ms, 26 ms at 50 000). Set on
                        // every connection: whichever commits past it checkpoints.
                        sqlx::query("PRAGMA wal_autocheckpoint = 50000")
                            .execute(&mut *conn)
                            .await?;
                        // Page cache per connection (SQLite's default is 2 MiB): a
                        // fleet's results land all over the pair-ordered indexes, and
                        // with 2 MiB nearly every insert and run lookup read its page
                        // from the file again. The writer's cache holds the indexes'
                        // pages it keeps returning to.
                        sqlx::query(if writer {
                            "PRAGMA cache_size = -65536"
                        } else {
                            "PRAGMA cache_size = -16384"
                        })
                        .execute(&mut *conn)
                        .await?;
                        if writer {
                            // A set statement inside a transaction keeps a statement
                            // journal; past 64 KiB SQLite spills it to a temporary
                            // file, whose writes took a third of the ingest writer's
                            // time. In memory it is the few pages one statement
                            // changes.
                            sqlx::query("PRAGMA temp_store = MEMORY")
                                .execute(&mut *conn)
                                .await?;
                        }
                    }
                    Ok(())
                })
            })
        };
        let pool = options(false)
            .max_connections(max_connections)
            .connect(&url)
            .await
            .map_err(sql("connecting"))?;
        match backend {
            Backend::Sqlite => sqlx::migrate!("migrations/sqlite").run(&pool).await?,
            Backend::Postgres => sqlx::migrate!("migrations/postgres").run(&pool).await?,
        }
        let writer = match backend {
            Backend::Sqlite => options(true)
                .max_connections(1)
                .connect(&url)
                .await
                .map_err(sql("connecting"))?,
            Backend::Postgres => pool.clone(),
        };
        let (replicas, self_vacuum) = match backend {
            Backend::Sqlite => (None, None),
            Backend::Postgres => {
                let (schema, autovacuum): (String, String) =
                    sqlx::query_as("SELECT current_schema()::text, current_setting('autovacuum')")
                        .fetch_one(&pool)
                        .await
                        .map_err(sql("reading the schema and the autovacuum setting"))?;
                let replicas = Arc::new(Replicas {
                    url: url.clone(),
                    channels: Channels::for_schema(&schema),
                    origin: crate::new_token()[..16].to_string(),
                });
                let self_vacuum = (autovacuum == "off").then(|| {
                    tracing::warn!(
                        "PostgreSQL's autovacuum is off: the leading server vacuums and analyses \
                         its busiest tables ({VACUUMED_TABLES}) itself every {} s, without which \
                         a fleet's dead rows slow every fetch and upload within minutes",
                        SELF_VACUUM_EVERY.as_secs()
                    );
                    Arc::new(tokio::sync::Mutex::new(None))
                });
                (Some(replicas), self_vacuum)
            }
        };
        let mut archive = Archive {
            pool,
            backend,
            writer,
            replicas,
            group_commit: None,
            seen: None,
            self_vacuum,
            scheduled_since_analyze: (backend == Backend::Postgres).then(Default::default),
            handouts: Arc::new(handouts::HandOutCache::new(handouts::HANDOUT_CACHE_BYTES)),
        };
        // The writers' handles have no senders, so they end with the last of the others.
        let (sender, jobs) = mpsc::channel(GROUP_COMMIT_QUEUE);
        let jobs = Arc::new(tokio::sync::Mutex::new(jobs));
        match backend {
            Backend::Sqlite => {
                checkpoints::copy_log(&url, sender.downgrade()).await?;
                spawn_sqlite_writer(archive.clone(), jobs)?;
            }
            Backend::Postgres => {
                for _ in 0..POSTGRES_GROUP_COMMIT_WRITERS {
                    tokio::spawn(group_commits(archive.clone(), jobs.clone()));
                }
            }
        }
        let (seen_sender, seen_jobs) = mpsc::channel(seen::SEEN_QUEUE);
        tokio::spawn(seen::record_seen(archive.clone(), seen_jobs));
        archive.group_commit = Some(sender);
        archive.seen = Some(seen_sender);
        Ok(archive)
    }

    /// On PostgreSQL, how this archive reaches the other replicas sharing its database.
    pub fn replicas(&self) -> Option<&Arc<Replicas>> {
        self.replicas.as_ref()
    }

    /// Tells the other replicas an event (a [`crate::notices`] payload) on `channel`.
    pub async fn notify(&self, channel: &str, payload: &str) -> Result<(), ArchiveError> {
        notify_on(&self.pool, channel, payload).await
    }

    /// The columns of `results` [`result_from_row`] reads, qualified by `table` (`r.`
    /// in a join), with the raw document when `raw`.
    fn result_columns(&self, table: &str, raw: bool) -> String {
        let metrics = match self.backend {
            Backend::Sqlite => format!("{table}metrics"),
            Backend::Postgres => format!("CAST({table}metrics AS text) AS metrics"),
        };
        let raw = if raw {
            format!(", {table}raw")
        } else {
            String::new()
        };
        format!(
            "{table}run_id, {table}test, {table}client, {table}server, {table}start_us, \
             {table}end_us, {table}outcome, {table}error, {metrics}{raw}"
        )
    }

    /// The SQL value of the metric named by bound parameter `$n` in a result's
    /// metrics (NULL where the result has none of that name).
    fn metric_value(&self, table: &str, n: usize) -> String {
        match self.backend {
            // `->>` with a text label reads that key of the object (SQLite 3.38).
            Backend::Sqlite => format!("({table}metrics ->> ${n})"),
            Backend::Postgres => format!("CAST({table}metrics ->> ${n} AS double precision)"),
        }
    }

    /// Starts a transaction that will write. On SQLite it runs on the writer's own
    /// connection, so writers queue for it in order, each woken as soon as the one
    /// before commits (not in SQLite's busy handler, which polls with sleeps of up to
    /// 100 ms), and its page cache stays warm (another connection's write would void
    /// it); and it takes the write lock up front (BEGIN IMMEDIATE): a deferred
    /// transaction that reads first and then writes gets SQLITE_BUSY at once, without
    /// waiting, when another connection committed meanwhile.
    async fn write_transaction(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
        match self.backend {
            // In a task of its own, which runs to the end even when the caller is dropped
            // (an agent hanging up on a slow answer): sqlx's SQLite driver has a wait
            // after a custom BEGIN has run, and a caller dropped there left the writer's
            // one connection inside a transaction for good; every later write failed
            // ("begin_with at non-zero transaction depth"). Run to the end, the
            // transaction is dropped, and so rolled back, with the task's output.
            Backend::Sqlite => {
                let writer = self.writer.clone();
                tokio::spawn(async move { writer.begin_with("BEGIN IMMEDIATE").await })
                    .await
                    .map_err(|_| sqlx::Error::WorkerCrashed)?
            }
            Backend::Postgres => self.writer.begin().await,
        }
    }

    /// Takes the sweep lock as `lock` says until `tx` ends, on PostgreSQL. A group
    /// commit stores the results of handed-out runs, which have no row, while the sweep
    /// stores the runs of its hand-outs that have no result as missed: each decides
    /// from what the other has committed, and two transactions side by side would each
    /// miss the other's (a run stored missed that has its result). Group commits share
    /// the lock, so they do not wait for each other, and a sweep's writing holds it
    /// alone. SQLite's one writer runs them one at a time already. The lock is one of
    /// PostgreSQL's advisory locks, named by the schema: other archives in the same
    /// database do not wait for it.
    async fn lock_against_sweeps(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        lock: SweepLock,
    ) -> Result<(), ArchiveError> {
        if self.backend != Backend::Postgres {
            return Ok(());
        }
        let function = match lock {
            SweepLock::Shared => "pg_advisory_xact_lock_shared",
            SweepLock::Exclusive => "pg_advisory_xact_lock",
        };
        // Read through a subquery: the function's own result (void) is not a type
        // the driver reads.
        sqlx::query(&format!(
            "SELECT 1 AS held FROM (SELECT {function}(hashtext(current_schema()))) AS taken"
        ))
        .execute(&mut **tx)
        .await
        .map_err(sql("taking the sweep lock"))?;
        Ok(())
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub async fn close(&self) {
        self.writer.close().await;
        self.pool.close().await;
    }

    // ---- tokens -------------------------------------------------------------

    pub async fn add_token(&self, token: &str, name: &str, role: Role) -> Result<(), ArchiveError> {
        self.add_expiring_token(token, name, role, None).await
    }

    /// Stores `token` (by its digest), valid until `expires_us` when given.
    pub async fn add_expiring_token(
        &self,
        token: &str,
        name: &str,
        role: Role,
        expires_us: Option<i64>,
    ) -> Result<(), ArchiveError> {
        sqlx::query(
            "INSERT INTO tokens (token_sha256, name, role, created_us, expires_us) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (token_sha256) DO UPDATE SET name = excluded.name, role = excluded.role, \
             expires_us = excluded.expires_us, revoked_us = NULL",
        )
        .bind(token_digest(token))
        .bind(name)
        .bind(role.as_str())
        .bind(now_us())
        .bind(expires_us)
        .execute(&self.writer)
        .await
        .map_err(sql("storing a token"))?;
        Ok(())
    }

    /// Every ticket key, oldest generation first; the first is created on first use.
    /// Servers sharing the archive race to insert it; the first row wins and all of
    /// them read it back.
    pub async fn ticket_keys(&self) -> Result<Vec<TicketKey>, ArchiveError> {
        let keys = self.read_ticket_keys().await?;
        if !keys.is_empty() {
            return Ok(keys);
        }
        let fresh = TicketSigner::from_secret(rand::random());
        sqlx::query(
            "INSERT INTO ticket_keys (id, secret_hex, created_us, signs_from_us) \
             VALUES (1, $1, $2, 0) ON CONFLICT (id) DO NOTHING",
        )
        .bind(fresh.secret_hex())
        .bind(now_us())
        .execute(&self.writer)
        .await
        .map_err(sql("creating the ticket key"))?;
        self.read_ticket_keys().await
    }

    async fn read_ticket_keys(&self) -> Result<Vec<TicketKey>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT id, secret_hex, created_us, signs_from_us, retired_us \
             FROM ticket_keys ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(sql("reading the ticket keys"))?;
        rows.iter()
            .map(|row| {
                Ok(TicketKey {
                    generation: row.get("id"),
                    signer: TicketSigner::from_hex(row.get("secret_hex"))?,
                    created_us: row.get("created_us"),
                    signs_from_us: row.get("signs_from_us"),
                    retired_us: row.get("retired_us"),
                })
            })
            .collect()
    }

    /// Adds a new ticket key that signs from `signs_from_us` and retires every older
    /// key at `retire_previous_us` (a key already due to retire earlier keeps its
    /// time); deletes keys retired before `forget_retired_before_us`. Returns the new
    /// key's generation.
    pub async fn rotate_ticket_key(
        &self,
        signs_from_us: i64,
        retire_previous_us: i64,
        forget_retired_before_us: i64,
    ) -> Result<i64, ArchiveError> {
        self.ticket_keys().await?;
        let mut transaction = self
            .write_transaction()
            .await
            .map_err(sql("rotating the ticket key"))?;
        let newest: i64 = sqlx::query("SELECT MAX(id) AS newest FROM ticket_keys")
            .fetch_one(&mut *transaction)
            .await
            .map_err(sql("rotating the ticket key"))?
            .get("newest");
        let generation = newest + 1;
        let fresh = TicketSigner::from_secret(rand::random());
        sqlx::query(
            "INSERT INTO ticket_keys (id, secret_hex, created_us, signs_from_us) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(generation)
        .bind(fresh.secret_hex())
        .bind(now_us())
        .bind(signs_from_us)
        .execute(&mut *transaction)
        .await
        .map_err(sql("rotating the ticket key"))?;
        sqlx::query(
            "UPDATE ticket_keys SET retired_us = $1 \
             WHERE id < $2 AND (retired_us IS NULL OR retired_us > $1)",
        )
        .bind(retire_previous_us)
        .bind(generation)
        .execute(&mut *transaction)
        .await
        .map_err(sql("rotating the ticket key"))?;
        sqlx::query("DELETE FROM ticket_keys WHERE retired_us < $1")
            .bind(forget_retired_before_us)
            .execute(&mut *transaction)
            .await
            .map_err(sql("rotating the ticket key"))?;
        transaction
            .commit()
            .await
            .map_err(sql("rotating the ticket key"))?;
        Ok(generation)
    }

    /// Every token, newest first, by id (never by value), revoked ones included.
    pub async fn tokens(&self) -> Result<Vec<TokenInfo>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT token_sha256, name, role, created_us, expires_us, revoked_us FROM tokens \
             ORDER BY created_us DESC, token_sha256",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(sql("listing tokens"))?;
        Ok(rows
            .iter()
            .map(|row| {
                let digest: String = row.get("token_sha256");
                TokenInfo {
                    id: digest[..TOKEN_ID_LEN].to_string(),
                    name: row.get("name"),
                    role: row.get("role"),
                    created: from_us(row.get("created_us")),
                    expires: row.get::<Option<i64>, _>("expires_us").map(from_us),
                    revoked: row.get::<Option<i64>, _>("revoked_us").map(from_us),
                }
            })
            .collect())
    }

    /// Revokes the token with id `id` (see [`TokenInfo::id`]); false when no live
    /// token has that id.
    pub async fn revoke_token(&self, id: &str) -> Result<bool, ArchiveError> {
        if id.len() != TOKEN_ID_LEN || !id.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            return Ok(false);
        }
        let revoked = sqlx::query(
            "UPDATE tokens SET revoked_us = $1 WHERE substr(token_sha256, 1, 16) = $2 \
             AND revoked_us IS NULL",
        )
        .bind(now_us())
        .bind(id.to_ascii_lowercase())
        .execute(&self.writer)
        .await
        .map_err(sql("revoking a token"))?;
        Ok(revoked.rows_affected() > 0)
    }

    /// Installs `token` as the only token named `name` (earlier tokens of that name are
    /// deleted in the same transaction): a server restarted without `--admin-token`
    /// replaces the admin token it generated last time instead of adding another.
    pub async fn replace_tokens_named(
        &self,
        token: &str,
        name: &str,
        role: Role,
    ) -> Result<(), ArchiveError> {
        let mut transaction = self
            .write_transaction()
            .await
            .map_err(sql("replacing a token"))?;
        sqlx::query("DELETE FROM tokens WHERE name = $1")
            .bind(name)
            .execute(&mut *transaction)
            .await
            .map_err(sql("replacing a token"))?;
        sqlx::query(
            "INSERT INTO tokens (token_sha256, name, role, created_us) VALUES ($1, $2, $3, $4)",
        )
        .bind(token_digest(token))
        .bind(name)
        .bind(role.as_str())
        .bind(now_us())
        .execute(&mut *transaction)
        .await
        .map_err(sql("replacing a token"))?;
        transaction.commit().await.map_err(sql("replacing a token"))
    }

    /// How many tokens have `name` (tests and diagnostics).
    pub async fn count_tokens_named(&self, name: &str) -> Result<i64, ArchiveError> {
        sqlx::query_scalar("SELECT COUNT(*) FROM tokens WHERE name = $1")
            .bind(name)
            .fetch_one(&self.pool)
            .await
            .map_err(sql("counting tokens"))
    }

    /// What a bearer token grants, if it is known and not revoked (expired tokens are
    /// returned with their expiry, so the caller can say why they are refused).
    pub async fn token(&self, token: &str) -> Result<Option<TokenGrant>, ArchiveError> {
        let row = sqlx::query(
            "SELECT name, role, expires_us FROM tokens WHERE token_sha256 = $1 AND revoked_us IS NULL",
        )
        .bind(token_digest(token))
        .fetch_optional(&self.pool)
        .await
        .map_err(sql("looking up a token"))?;
        Ok(row.and_then(|row| {
            let role = Role::parse(&row.get::<String, _>("role"))?;
            Some(TokenGrant {
                name: row.get("name"),
                role,
                expires_us: row.get("expires_us"),
            })
        }))
    }

    // ---- agents -------------------------------------------------------------

    /// Stores a registration (new or changed) and moves the [`AGENTS_EPOCH`].
    pub async fn register_agent(&self, agent: &AgentRegistration) -> Result<(), ArchiveError> {
        let now = now_us();
        let mut tx = self
            .write_transaction()
            .await
            .map_err(sql("registering an agent"))?;
        sqlx::query(
            "INSERT INTO agents (name, addresses, endpoint_port, tags, capabilities, accepts_inbound, \
             registered_us, last_seen_us, iperf3_port, version) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (name) DO UPDATE SET addresses = excluded.addresses, version = excluded.version, \
             endpoint_port = excluded.endpoint_port, iperf3_port = excluded.iperf3_port, tags = excluded.tags, \
             capabilities = excluded.capabilities, accepts_inbound = excluded.accepts_inbound, \
             last_seen_us = excluded.last_seen_us",
        )
        .bind(&agent.name)
        .bind(to_json_text(&agent.addresses))
        .bind(i64::from(agent.endpoint_port))
        .bind(to_json_text(&agent.tags))
        .bind(to_json_text(&agent.capabilities))
        .bind(i64::from(agent.accepts_inbound))
        .bind(now)
        .bind(now)
        .bind(agent.iperf3_port.map(i64::from))
        .bind(agent.version.as_deref())
        .execute(&mut *tx)
        .await
        .map_err(sql("registering an agent"))?;
        bump_counter(&mut tx, AGENTS_EPOCH).await?;
        tx.commit().await.map_err(sql("registering an agent"))?;
        Ok(())
    }

    /// The registered agents, by name.
    pub async fn agents(&self) -> Result<Vec<AgentRecord>, ArchiveError> {
        let rows = sqlx::query(&format!("SELECT {AGENT_COLUMNS} FROM agents ORDER BY name"))
            .fetch_all(&self.pool)
            .await
            .map_err(sql("listing agents"))?;
        rows.iter().map(agent_from_row).collect()
    }

    /// The registered agents among `names` (in no particular order): an agent's fetch
    /// reads its own registration, not the whole fleet's.
    pub async fn agents_named(&self, names: &[&str]) -> Result<Vec<AgentRecord>, ArchiveError> {
        self.rows_matching(
            &format!("SELECT {AGENT_COLUMNS} FROM agents WHERE name IN"),
            names,
            "reading agents",
        )
        .await?
        .iter()
        .map(agent_from_row)
        .collect()
    }

    /// The rows `select` (a query ending in `… IN`) finds for `keys` (see
    /// [`rows_matching_on`]), all on one connection: taken from the pool
    /// for each statement, a sweep's 64 000 run ids on PostgreSQL (2 000 statements)
    /// queued behind a fleet's uploads and fetches 2 000 times, and took 19 s.
    async fn rows_matching(
        &self,
        select: &str,
        keys: &[&str],
        doing: &'static str,
    ) -> Result<Vec<AnyRow>, ArchiveError> {
        let mut connection = self.pool.acquire().await.map_err(sql(doing))?;
        rows_matching_on(&mut connection, self.backend, select, keys, doing).await
    }

    // ---- configuration and requests ----------------------------------------

    /// Stores a validated configuration document as the new current version.
    pub async fn store_config(&self, document: &serde_json::Value) -> Result<i64, ArchiveError> {
        let mut tx = self
            .write_transaction()
            .await
            .map_err(sql("storing a config"))?;
        let latest: Option<i64> = sqlx::query("SELECT MAX(version) AS v FROM configs")
            .fetch_one(&mut *tx)
            .await
            .map_err(sql("storing a config"))?
            .try_get("v")
            .ok();
        let version = latest.unwrap_or(0) + 1;
        sqlx::query("INSERT INTO configs (version, applied_us, document) VALUES ($1, $2, $3)")
            .bind(version)
            .bind(now_us())
            .bind(document.to_string())
            .execute(&mut *tx)
            .await
            .map_err(sql("storing a config"))?;
        tx.commit().await.map_err(sql("storing a config"))?;
        Ok(version)
    }

    pub async fn current_config(&self) -> Result<Option<(i64, serde_json::Value)>, ArchiveError> {
        let row =
            sqlx::query("SELECT version, document FROM configs ORDER BY version DESC LIMIT 1")
                .fetch_optional(&self.pool)
                .await
                .map_err(sql("reading the config"))?;
        row.map(|row| {
            let document = parse_json("config", &row.get::<String, _>("document"))?;
            Ok((row.get("version"), document))
        })
        .transpose()
    }

    pub async fn add_request(
        &self,
        id: &str,
        document: &serde_json::Value,
    ) -> Result<(), ArchiveError> {
        sqlx::query(
            "INSERT INTO requests (id, document, state, created_us) VALUES ($1, $2, 'pending', $3)",
        )
        .bind(id)
        .bind(document.to_string())
        .bind(now_us())
        .execute(&self.writer)
        .await
        .map_err(sql("storing a run request"))?;
        Ok(())
    }

    /// Requests the planner has not placed yet, oldest first.
    pub async fn pending_requests(&self) -> Result<Vec<(String, serde_json::Value)>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT id, document FROM requests WHERE state = 'pending' ORDER BY created_us",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(sql("reading run requests"))?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.get("id"),
                    parse_json("request", &row.get::<String, _>("document"))?,
                ))
            })
            .collect()
    }

    pub async fn close_request(&self, id: &str) -> Result<(), ArchiveError> {
        sqlx::query("UPDATE requests SET state = 'planned' WHERE id = $1")
            .bind(id)
            .execute(&self.writer)
            .await
            .map_err(sql("closing a run request"))?;
        Ok(())
    }

    // ---- runs ----------------------------------------------------------------

    /// Inserts planned runs and non-starts; ids already present are left alone, so two
    /// planners (or a re-plan after restart) never duplicate a run. Returns how many were new.
    pub async fn insert_runs(&self, runs: &[RunRecord]) -> Result<u64, ArchiveError> {
        let inserted = self.insert_runs_and_marks(runs, &[]).await?;
        Ok(inserted.len() as u64)
    }

    /// Stores runs as [`Archive::insert_runs`] does and sets planner marks (see
    /// [`Archive::set_planner_marks`]) in the same transaction: one wait for the writer,
    /// and no mark that says runs are placed without them stored. Returns the ids of
    /// the runs that were new. Storing an exclusive run moves the [`EXCLUSIVE_EPOCH`].
    pub async fn insert_runs_and_marks(
        &self,
        runs: &[RunRecord],
        marks: &[(&str, i64)],
    ) -> Result<HashSet<String>, ArchiveError> {
        if runs.is_empty() && marks.is_empty() {
            return Ok(HashSet::new());
        }
        let doing = if runs.is_empty() {
            "storing planner state"
        } else {
            "storing runs"
        };
        let mut tx = self.write_transaction().await.map_err(sql(doing))?;
        for &(name, value) in marks {
            set_mark(&mut tx, name, value).await?;
        }
        if runs
            .iter()
            .any(|run| run.exclusive && run.state != RunState::NonStart)
        {
            bump_exclusive_epoch(&mut tx).await?;
        }
        let inserted = insert_run_rows(&mut tx, self.backend, runs, now_us()).await?;
        tx.commit().await.map_err(sql(doing))?;
        let scheduled = runs
            .iter()
            .filter(|run| run.state == RunState::Scheduled && inserted.contains(&run.id))
            .count();
        self.analyze_after_scheduling(scheduled).await?;
        Ok(inserted)
    }

    /// On PostgreSQL, analyses `runs` once [`ANALYZE_AFTER_SCHEDULING`] runs have been
    /// stored as `scheduled` since the last time. Its statistics otherwise count none
    /// of them until the next analyse (autovacuum's waits for a tenth of the table to
    /// change), and it plans the searches for an agent's waiting runs (the poll hints,
    /// a fetch's claim) as a scan of every scheduled run: at a thousand agents, the
    /// light runs of agents that had not fetched, stored as scheduled, made the poll
    /// hints' read 1.4-16 s instead of 2 ms, and the fleet's uploads fell minutes
    /// behind. An analyse of `runs` costs about 80 ms.
    async fn analyze_after_scheduling(&self, scheduled: usize) -> Result<(), ArchiveError> {
        use std::sync::atomic::Ordering;
        let Some(since) = &self.scheduled_since_analyze else {
            return Ok(());
        };
        if since.fetch_add(scheduled, Ordering::Relaxed) + scheduled < ANALYZE_AFTER_SCHEDULING {
            return Ok(());
        }
        since.store(0, Ordering::Relaxed);
        sqlx::query("ANALYZE runs")
            .execute(&self.pool)
            .await
            .map_err(sql("analysing the runs table"))?;
        Ok(())
    }

    /// Each agent's earliest planned start among its runs not handed out yet
    /// (`scheduled`), for the agents that have one: a seek per agent in
    /// `runs_client_state`, in one statement (see [`crate::poll_hints`]).
    ///
    /// Planned at each read, not prepared once per connection: PostgreSQL keeps the
    /// first plan of a prepared statement without parameters until the table's
    /// statistics change, and one made while `runs` was still empty (a new server's
    /// first polls) scans the whole table once per agent: 24 s for a thousand agents
    /// once the mesh had stored 300 000 runs, during which the fleet's uploads fell
    /// minutes behind. Planning it costs well under a millisecond.
    pub async fn earliest_waiting_starts(&self) -> Result<HashMap<String, i64>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT name, (SELECT MIN(planned_start_us) FROM runs \
             WHERE client = agents.name AND state = 'scheduled') AS start_us FROM agents",
        )
        .persistent(false)
        .fetch_all(&self.pool)
        .await
        .map_err(sql("reading assigned runs"))?;
        Ok(rows
            .iter()
            .filter_map(|row| Some((row.get("name"), row.get::<Option<i64>, _>("start_us")?)))
            .collect())
    }

    /// Runs for client `agent` starting before `until_us` that it has not fetched yet
    /// (plus, with `include_dispatched`, those it fetched before and that have not
    /// ended, however far ahead: an agent that restarted, or whose answer was lost,
    /// asks for them again). Returned runs are marked dispatched. A write: agents'
    /// polls ask only when [`Archive::earliest_waiting_starts`] says a run may wait.
    pub async fn take_runs_for(
        &self,
        agent: &str,
        until_us: i64,
        include_dispatched: bool,
    ) -> Result<Vec<RunRecord>, ArchiveError> {
        // One statement both claims and reads the runs. A replan discarding the forecast
        // meanwhile either finds them dispatched (and keeps them) or deleted them first
        // (and they are not handed out); reading, then marking, could hand out a run the
        // replan had just deleted and planned again elsewhere, and an agent would run two
        // exclusive tests at once.
        let claim = format!(
            "UPDATE runs SET state = 'dispatched' WHERE client = $1 AND state = 'scheduled' \
             AND planned_start_us < $2 RETURNING {RUN_COLUMNS}"
        );
        if !include_dispatched {
            // The claim alone, as one statement with no transaction around it: on
            // PostgreSQL a transaction's BEGIN and COMMIT are two more round trips, and
            // between the claim and the COMMIT its row locks are held while the server
            // is elsewhere (a fleet's fetches then queue behind each other's locks).
            let rows = sqlx::query(&claim)
                .bind(agent)
                .bind(until_us)
                .fetch_all(&self.writer)
                .await
                .map_err(sql("marking runs dispatched"))?;
            return runs_by_start(&rows);
        }
        let mut tx = self
            .write_transaction()
            .await
            .map_err(sql("reading assigned runs"))?;
        let mut rows = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE client = $1 AND state = 'dispatched' \
             AND planned_end_us > $2"
        ))
        .bind(agent)
        .bind(now_us())
        .fetch_all(&mut *tx)
        .await
        .map_err(sql("reading assigned runs"))?;
        rows.extend(
            sqlx::query(&claim)
                .bind(agent)
                .bind(until_us)
                .fetch_all(&mut *tx)
                .await
                .map_err(sql("marking runs dispatched"))?,
        );
        tx.commit().await.map_err(sql("marking runs dispatched"))?;
        let mut runs = runs_by_start(&rows)?;
        runs.extend(self.handed_out_not_ended(agent, now_us()).await?);
        sort_by_start(&mut runs);
        Ok(runs)
    }

    /// All runs whose planned start lies in `[from_us, to_us)`.
    pub async fn runs_between(
        &self,
        from_us: i64,
        to_us: i64,
    ) -> Result<Vec<RunRecord>, ArchiveError> {
        let rows = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE planned_start_us >= $1 AND planned_start_us < $2 \
             ORDER BY planned_start_us, id"
        ))
        .bind(from_us)
        .bind(to_us)
        .fetch_all(&self.pool)
        .await
        .map_err(sql("listing runs"))?;
        let mut runs = rows
            .iter()
            .map(run_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        runs.extend(
            self.handed_out_between(from_us, to_us)
                .await?
                .into_iter()
                .filter(|run| run.planned_start_us >= from_us),
        );
        sort_by_start(&mut runs);
        Ok(runs)
    }

    /// Runs (not non-starts) that may hold resources in `[from_us, to_us)`: every
    /// one with an exclusive claim, and the others only when they end after
    /// `others_after_us` (light runs end before what a planning pass places can
    /// reach, and at a thousand agents they are most of the runs stored).
    pub async fn runs_overlapping(
        &self,
        from_us: i64,
        to_us: i64,
        others_after_us: i64,
    ) -> Result<Vec<RunRecord>, ArchiveError> {
        // Two searches, each along an index (one condition with OR would scan every run
        // stored): exclusive runs by end (runs_exclusive_end), the others by state and
        // end (runs_state_end, one range for each state but non_start).
        let mut rows = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE exclusive <> 0 AND planned_end_us > $1 \
             AND planned_start_us < $2 AND state <> 'non_start'"
        ))
        .bind(from_us)
        .bind(to_us)
        .fetch_all(&self.pool)
        .await
        .map_err(sql("listing planned runs"))?;
        let others_from_us = from_us.max(others_after_us);
        if others_from_us < i64::MAX {
            rows.extend(
                sqlx::query(&format!(
                    "SELECT {RUN_COLUMNS} FROM runs WHERE exclusive = 0 \
                     AND state IN ('scheduled', 'dispatched', 'completed', 'failed', 'missed') \
                     AND planned_end_us > $1 AND planned_start_us < $2"
                ))
                .bind(others_from_us)
                .bind(to_us)
                .fetch_all(&self.pool)
                .await
                .map_err(sql("listing planned runs"))?,
            );
        }
        let mut runs = runs_by_start(&rows)?;
        if others_from_us < i64::MAX {
            runs.extend(self.handed_out_between(others_from_us, to_us).await?);
            sort_by_start(&mut runs);
        }
        Ok(runs)
    }

    /// Planner marks whose name starts with `prefix`, as (rest of the name, value).
    pub async fn planner_marks(&self, prefix: &str) -> Result<Vec<(String, i64)>, ArchiveError> {
        let rows =
            sqlx::query("SELECT name, value FROM planner_state WHERE name LIKE $1 ESCAPE '\\'")
                .bind(format!("{}%", like_literal(prefix)))
                .fetch_all(&self.pool)
                .await
                .map_err(sql("reading planner state"))?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                let name: String = row.get("name");
                Some((name.strip_prefix(prefix)?.to_string(), row.get("value")))
            })
            .collect())
    }

    /// Lowers every planner mark named `prefix…` that is above `value` to it.
    pub async fn lower_planner_marks(&self, prefix: &str, value: i64) -> Result<(), ArchiveError> {
        sqlx::query(
            "UPDATE planner_state SET value = $1 WHERE name LIKE $2 ESCAPE '\\' AND value > $1",
        )
        .bind(value)
        .bind(format!("{}%", like_literal(prefix)))
        .execute(&self.writer)
        .await
        .map_err(sql("storing planner state"))?;
        Ok(())
    }

    /// Removes the forecast from `from_us` on: periodic runs not yet handed to an agent
    /// and the non-starts predicted for them. Used before replanning when the
    /// configuration or the set of agents changed; on-demand runs and anything an agent
    /// already fetched stay.
    pub async fn discard_forecast(&self, from_us: i64) -> Result<u64, ArchiveError> {
        let mut tx = self
            .write_transaction()
            .await
            .map_err(sql("discarding the forecast"))?;
        let done = sqlx::query(
            "DELETE FROM runs WHERE planned_start_us >= $1 AND state IN ('scheduled', 'non_start') \
             AND task <> $2",
        )
        .bind(from_us)
        .bind(vantage_scheduler::ON_DEMAND_TASK)
        .execute(&mut *tx)
        .await
        .map_err(sql("discarding the forecast"))?;
        bump_exclusive_epoch(&mut tx).await?;
        tx.commit().await.map_err(sql("discarding the forecast"))?;
        Ok(done.rows_affected())
    }

    /// Cancels a run nobody fetched yet, recording why; false if it was already
    /// handed to its agent (or finished) and so cannot be cancelled.
    pub async fn cancel_run(&self, run_id: &str, reason: &str) -> Result<bool, ArchiveError> {
        let mut tx = self
            .write_transaction()
            .await
            .map_err(sql("cancelling a run"))?;
        let done = sqlx::query("UPDATE runs SET state = 'non_start', reason = $1 WHERE id = $2 AND state = 'scheduled'")
            .bind(reason)
            .bind(run_id)
            .execute(&mut *tx)
            .await
            .map_err(sql("cancelling a run"))?;
        let cancelled = done.rows_affected() > 0;
        if cancelled {
            bump_exclusive_epoch(&mut tx).await?;
        }
        tx.commit().await.map_err(sql("cancelling a run"))?;
        Ok(cancelled)
    }

    /// Marks runs whose result is overdue as missed and returns them. One statement
    /// however many: after an outage a fleet's overdue runs are thousands, and a write
    /// each queued them all behind the archive's one writer. Most passes find none,
    /// which a read finds out without the writer.
    pub async fn mark_missed(
        &self,
        overdue_before_us: i64,
    ) -> Result<Vec<RunRecord>, ArchiveError> {
        const OVERDUE: &str = "state IN ('scheduled', 'dispatched') AND planned_end_us < $1";
        // No LIMIT: PostgreSQL's generic plan for a LIMIT 1 with the bound unknown
        // scanned the whole table when nothing matched (9 ms a pass at 100 agents).
        let any = sqlx::query(&format!("SELECT id FROM runs WHERE {OVERDUE}"))
            .bind(overdue_before_us)
            .fetch_optional(&self.pool)
            .await
            .map_err(sql("finding overdue runs"))?;
        if any.is_none() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(&format!(
            "UPDATE runs SET state = 'missed', reason = CASE state \
             WHEN 'scheduled' THEN 'agent ''' || client || ''' never fetched the run before it was due' \
             ELSE 'agent ''' || client || ''' fetched the run but reported no result in time' END \
             WHERE {OVERDUE} RETURNING {RUN_COLUMNS}"
        ))
        .bind(overdue_before_us)
        .fetch_all(&self.writer)
        .await
        .map_err(sql("marking overdue runs missed"))?;
        runs_by_start(&rows)
    }

    // ---- results -------------------------------------------------------------

    /// Stores one upload exactly once: a retry of an already stored run id is a no-op.
    pub async fn ingest(
        &self,
        upload: &ResultUpload,
    ) -> Result<(Ingest, RunRecord), IngestRefusal> {
        let mut outcomes = self.ingest_batch(std::slice::from_ref(upload)).await?;
        outcomes.pop().expect("one outcome per upload")
    }

    /// Stores a batch of uploads in one transaction, shared with the batches of
    /// concurrent callers (see [`group_commits`]); each element answers one upload.
    pub async fn ingest_batch(
        &self,
        uploads: &[ResultUpload],
    ) -> Result<Vec<IngestOutcome>, ArchiveError> {
        // Read and checked before the write transaction, by any connection: what the
        // checks use of a run (its id, agent and test) never changes once it is handed
        // out, and whether a result is new is decided in the transaction. On SQLite
        // this keeps the read and the checks out of the one writer's critical path.
        let runs = self.runs_by_id(uploads).await?;
        let (steps, accepted) = check_batch(uploads, runs);
        let queue = self
            .group_commit
            .as_ref()
            .ok_or(ArchiveError::WriterStopped)?;
        let (reply, outcome) = oneshot::channel();
        queue
            .send(IngestJob { accepted, reply })
            .await
            .map_err(|_| ArchiveError::WriterStopped)?;
        let (accepted, stored) = outcome.await.map_err(|_| ArchiveError::WriterStopped)??;
        // Each accepted upload is answered once: its record moves into the answer.
        let mut accepted: Vec<Option<Accepted>> = accepted.into_iter().map(Some).collect();
        Ok(steps
            .into_iter()
            .map(|step| match step {
                Step::Done(outcome) => *outcome,
                Step::Accepted(index) => {
                    let mut candidate = accepted[index]
                        .take()
                        .expect("a step names each accepted upload once");
                    if stored[index] {
                        let metrics = std::mem::take(&mut candidate.metrics);
                        Ok((Ingest::Stored(metrics), candidate.into_completed_run()))
                    } else {
                        Ok((Ingest::Duplicate, candidate.run))
                    }
                }
            })
            .collect())
    }

    /// Stores checked uploads in one transaction; answers for each whether it was
    /// stored (false: its run already had a result). The batch costs a fixed number of
    /// statements whatever its size (the results with their metrics, and the runs' new
    /// states, each as one set), so the database's round trips do not grow with it.
    async fn store_accepted(&self, accepted: &[Accepted]) -> Result<Vec<bool>, ArchiveError> {
        let received = now_us();
        let mut tx = self
            .write_transaction()
            .await
            .map_err(sql("ingesting results"))?;
        self.lock_against_sweeps(&mut tx, SweepLock::Shared).await?;
        let stored_ids = self.insert_results(&mut tx, accepted, received).await?;
        // A run that two uploads of the set carry is stored once, for the first.
        let mut claimed = HashSet::with_capacity(stored_ids.len());
        let stored: Vec<bool> = accepted
            .iter()
            .map(|candidate| {
                stored_ids.contains(&candidate.run.id) && claimed.insert(candidate.run.id.as_str())
            })
            .collect();
        let new: Vec<&Accepted> = accepted
            .iter()
            .zip(&stored)
            .filter_map(|(candidate, stored)| stored.then_some(candidate))
            .collect();
        for candidate in &new {
            if let Some(pcapng) = &candidate.packets {
                sqlx::query(
                    "INSERT INTO capture_packets (run_id, start_us, pcapng) VALUES ($1, $2, $3)",
                )
                .bind(&candidate.run.id)
                .bind(candidate.start_us)
                .bind(pcapng.as_slice())
                .execute(&mut *tx)
                .await
                .map_err(sql("storing a capture's packets"))?;
            }
        }
        // A handed-out light run has no row to complete (see [`handouts`]), unless a
        // sweep stored it as missed since its upload was checked: updated by id,
        // whichever it is.
        self.complete_runs(&mut tx, &new).await?;
        if let Some(replicas) = &self.replicas {
            // Inside the transaction: PostgreSQL delivers it on commit, so the other
            // replicas hear of exactly the results that were stored.
            let run_ids: Vec<&str> = new.iter().map(|c| c.run.id.as_str()).collect();
            for payload in stored_payloads(&replicas.origin, &run_ids) {
                notify_on(&mut *tx, &replicas.channels.stored, &payload).await?;
            }
        }
        tx.commit().await.map_err(sql("ingesting results"))?;
        Ok(stored)
    }

    /// The runs the uploads name, by id: their rows, or else their hand-outs (see
    /// [`handouts`]).
    async fn runs_by_id(
        &self,
        uploads: &[ResultUpload],
    ) -> Result<HashMap<String, RunRecord>, ArchiveError> {
        let ids: Vec<&str> = uploads
            .iter()
            .map(|upload| upload.run_id.as_str())
            .collect();
        let mut runs = self.run_rows(&ids).await?;
        let rowless: Vec<&ResultUpload> = uploads
            .iter()
            .filter(|upload| !runs.contains_key(&upload.run_id))
            .collect();
        if !rowless.is_empty() {
            runs.extend(self.handed_out_for(&rowless).await?);
            // A sweep that committed between the two reads above moved these runs from
            // their hand-out to rows of their own (missed), which a read now sees: without
            // it, their results were refused as naming no run (128 in a PostgreSQL fleet
            // of 1 000 agents whose sweeps took 19 s).
            let unfound: Vec<&str> = rowless
                .iter()
                .map(|upload| upload.run_id.as_str())
                .filter(|id| !runs.contains_key(*id))
                .collect();
            if !unfound.is_empty() {
                runs.extend(self.run_rows(&unfound).await?);
            }
        }
        Ok(runs)
    }

    /// The rows of `runs` with these ids, by id.
    async fn run_rows(&self, ids: &[&str]) -> Result<HashMap<String, RunRecord>, ArchiveError> {
        let rows = self
            .rows_matching(
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id IN"),
                ids,
                "ingesting results",
            )
            .await?;
        let mut runs = HashMap::with_capacity(rows.len());
        for row in &rows {
            let run = run_from_row(row)?;
            runs.insert(run.id.clone(), run);
        }
        Ok(runs)
    }

    /// Inserts the accepted results; answers the run ids that were new (a run id
    /// already stored is left as it is: uploads are idempotent).
    ///
    /// On PostgreSQL concurrent transactions may store the same run, so the insert
    /// itself decides (`ON CONFLICT DO NOTHING RETURNING`). On SQLite this transaction
    /// is the only writer, so the results already stored are looked up first, a run
    /// that two batches of one group commit carry is stored for the first, and the rest
    /// inserted without returning a row each (a row back from SQLite costs a copy of
    /// its values and a hand-over between threads; the lookup usually finds none).
    async fn insert_results(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        accepted: &[Accepted],
        received_us: i64,
    ) -> Result<HashSet<String>, ArchiveError> {
        let (fresh, insert, on_conflict): (Vec<&Accepted>, &str, &str) = match self.backend {
            // In one order of run ids in every transaction: the group commit's writers
            // insert concurrently, and two of them carrying the same runs in different
            // orders each waited for the other's row of the unique index (deadlock).
            Backend::Postgres => (
                {
                    let mut by_id: Vec<&Accepted> = accepted.iter().collect();
                    by_id.sort_by(|a, b| a.run.id.cmp(&b.run.id));
                    by_id
                },
                "INSERT",
                " ON CONFLICT (run_id) DO NOTHING RETURNING run_id",
            ),
            Backend::Sqlite => {
                let mut stored_before: HashSet<String> = HashSet::new();
                for chunk in row_chunks(self.backend, accepted) {
                    let text = format!(
                        "SELECT run_id FROM results WHERE run_id IN ({})",
                        placeholders(self.backend, chunk.len())
                    );
                    let mut query = sqlx::query_scalar(&text);
                    for candidate in chunk {
                        query = query.bind(&candidate.run.id);
                    }
                    stored_before.extend(
                        query
                            .fetch_all(&mut **tx)
                            .await
                            .map_err(sql("ingesting results"))?,
                    );
                }
                let mut seen: HashSet<&str> = HashSet::with_capacity(accepted.len());
                let fresh = accepted
                    .iter()
                    .filter(|candidate| {
                        !stored_before.contains(&candidate.run.id)
                            && seen.insert(candidate.run.id.as_str())
                    })
                    .collect();
                (fresh, SQLITE_INSERT, "")
            }
        };
        // The metrics object is the last column: jsonb on PostgreSQL, bound as text.
        let mut columns = [None; 11];
        columns[10] = Some("jsonb");
        let mut stored = HashSet::with_capacity(fresh.len());
        for chunk in row_chunks(self.backend, &fresh) {
            let text = format!(
                "{insert} INTO results (run_id, test, client, server, start_us, end_us, received_us, \
                 outcome, error, raw, metrics) VALUES {}{on_conflict}",
                typed_value_rows(self.backend, &columns, chunk.len())
            );
            let mut query = sqlx::query(&text);
            for candidate in chunk {
                query = query
                    .bind(&candidate.run.id)
                    .bind(&candidate.run.test)
                    .bind(&candidate.run.client)
                    .bind(&candidate.run.server)
                    .bind(candidate.start_us)
                    .bind(candidate.end_us)
                    .bind(received_us)
                    .bind(candidate.outcome)
                    .bind(candidate.error.as_deref())
                    .bind(&candidate.raw)
                    .bind(to_json_text(&candidate.metrics));
            }
            match self.backend {
                Backend::Postgres => {
                    for row in query
                        .fetch_all(&mut **tx)
                        .await
                        .map_err(sql("ingesting results"))?
                    {
                        stored.insert(row.try_get(0).map_err(sql("ingesting results"))?);
                    }
                }
                Backend::Sqlite => {
                    let done = query
                        .execute(&mut **tx)
                        .await
                        .map_err(sql("ingesting results"))?;
                    all_written("results", chunk.len(), done.rows_affected())?;
                    stored.extend(chunk.iter().map(|candidate| candidate.run.id.clone()));
                }
            }
        }
        Ok(stored)
    }

    /// Marks the runs of newly stored results completed or failed, with their times.
    async fn complete_runs(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        new: &[&Accepted],
    ) -> Result<(), ArchiveError> {
        for chunk in row_chunks(self.backend, new) {
            let text = format!(
                "WITH x (id, state, start_us, end_us, reason) AS (VALUES {}) \
                 {update} runs SET state = x.state, actual_start_us = x.start_us, \
                 actual_end_us = x.end_us, reason = x.reason FROM x WHERE runs.id = x.id",
                value_rows(self.backend, 5, chunk.len()),
                update = match self.backend {
                    Backend::Postgres => "UPDATE",
                    Backend::Sqlite => SQLITE_UPDATE,
                }
            );
            let mut query = sqlx::query(&text);
            for candidate in chunk {
                query = query
                    .bind(&candidate.run.id)
                    .bind(candidate.outcome)
                    .bind(candidate.start_us)
                    .bind(candidate.end_us)
                    .bind(candidate.error.as_deref());
            }
            query
                .execute(&mut **tx)
                .await
                .map_err(sql("ingesting results"))?;
        }
        Ok(())
    }

    pub async fn results(&self, filter: &ResultFilter) -> Result<Vec<StoredResult>, ArchiveError> {
        let (clause, binds) = result_where(filter, "");
        let text = format!(
            "SELECT {columns} FROM results {clause} ORDER BY start_us DESC LIMIT {limit}",
            columns = self.result_columns("", filter.include_raw),
            limit = filter.limit.max(1)
        );
        self.read_results(&text, binds, filter.include_raw, "querying results")
            .await
    }

    /// The results `text` selects (their [`Archive::result_columns`]), `binds` bound in
    /// order; `doing` names the read in its error.
    async fn read_results(
        &self,
        text: &str,
        binds: Vec<Bind>,
        raw: bool,
        doing: &'static str,
    ) -> Result<Vec<StoredResult>, ArchiveError> {
        let mut query = sqlx::query(text);
        for bind in binds {
            query = bind.apply(query);
        }
        let rows = query.fetch_all(&self.pool).await.map_err(sql(doing))?;
        rows.iter().map(|row| result_from_row(row, raw)).collect()
    }

    /// Stored results by run id, with their metrics and without raw documents, in the
    /// order asked (ids not stored are left out).
    pub async fn results_by_run_ids(
        &self,
        run_ids: &[String],
    ) -> Result<Vec<StoredResult>, ArchiveError> {
        let mut found = HashMap::with_capacity(run_ids.len());
        for chunk in row_chunks(self.backend, run_ids) {
            let text = format!(
                "SELECT {} FROM results WHERE run_id IN ({})",
                self.result_columns("", false),
                placeholders(self.backend, chunk.len())
            );
            let mut query = sqlx::query(&text);
            for run_id in chunk {
                query = query.bind(run_id);
            }
            for row in query
                .fetch_all(&self.pool)
                .await
                .map_err(sql("reading results"))?
            {
                let result = result_from_row(&row, false)?;
                found.insert(result.run_id.clone(), result);
            }
        }
        Ok(run_ids.iter().filter_map(|id| found.remove(id)).collect())
    }

    /// One stored result with its raw document and metrics.
    pub async fn stored_result(&self, run_id: &str) -> Result<Option<StoredResult>, ArchiveError> {
        let text = format!(
            "SELECT {} FROM results WHERE run_id = $1",
            self.result_columns("", true)
        );
        let row = sqlx::query(&text)
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(sql("reading a result"))?;
        let Some(row) = row else {
            return Ok(None);
        };
        result_from_row(&row, true).map(Some)
    }

    /// Queues the delivery of a stored result to each of `archivers` (once each: a
    /// delivery already queued is left as it is).
    pub async fn enqueue_deliveries(
        &self,
        run_id: &str,
        archivers: &[String],
    ) -> Result<(), ArchiveError> {
        let mut transaction = self
            .pool
            .begin()
            .await
            .map_err(sql("queueing archiver deliveries"))?;
        let now = now_us();
        for archiver in archivers {
            sqlx::query(
                "INSERT INTO archiver_outbox (run_id, archiver, attempts, next_attempt_us, created_us) \
                 VALUES ($1, $2, 0, $3, $4) ON CONFLICT (run_id, archiver) DO NOTHING",
            )
            .bind(run_id)
            .bind(archiver.as_str())
            .bind(now)
            .bind(now)
            .execute(&mut *transaction)
            .await
            .map_err(sql("queueing archiver deliveries"))?;
        }
        transaction
            .commit()
            .await
            .map_err(sql("queueing archiver deliveries"))
    }

    /// Deliveries due at `now_us`, oldest due first.
    pub async fn due_deliveries(
        &self,
        now_us: i64,
        limit: i64,
    ) -> Result<Vec<OutboxEntry>, ArchiveError> {
        let rows = sqlx::query(&format!(
            "SELECT run_id, archiver, attempts, created_us FROM archiver_outbox \
             WHERE next_attempt_us <= $1 ORDER BY next_attempt_us, created_us, run_id LIMIT {}",
            limit.max(1)
        ))
        .bind(now_us)
        .fetch_all(&self.pool)
        .await
        .map_err(sql("reading due archiver deliveries"))?;
        Ok(rows
            .iter()
            .map(|row| OutboxEntry {
                run_id: row.get("run_id"),
                archiver: row.get("archiver"),
                attempts: row.get("attempts"),
                created_us: row.get("created_us"),
            })
            .collect())
    }

    /// Removes a delivery that succeeded or was given up.
    pub async fn delivery_finished(
        &self,
        run_id: &str,
        archiver: &str,
    ) -> Result<(), ArchiveError> {
        sqlx::query("DELETE FROM archiver_outbox WHERE run_id = $1 AND archiver = $2")
            .bind(run_id)
            .bind(archiver)
            .execute(&self.writer)
            .await
            .map_err(sql("finishing an archiver delivery"))?;
        Ok(())
    }

    /// Records a failed attempt and when to try again.
    pub async fn delivery_failed(
        &self,
        entry: &OutboxEntry,
        next_attempt_us: i64,
        error: &str,
    ) -> Result<(), ArchiveError> {
        sqlx::query(
            "UPDATE archiver_outbox SET attempts = $1, next_attempt_us = $2, last_error = $3 \
             WHERE run_id = $4 AND archiver = $5",
        )
        .bind(entry.attempts + 1)
        .bind(next_attempt_us)
        .bind(error)
        .bind(entry.run_id.as_str())
        .bind(entry.archiver.as_str())
        .execute(&self.writer)
        .await
        .map_err(sql("recording a failed archiver delivery"))?;
        Ok(())
    }

    /// Deliveries waiting in the outbox.
    pub async fn outbox_len(&self) -> Result<i64, ArchiveError> {
        Ok(sqlx::query("SELECT COUNT(*) AS n FROM archiver_outbox")
            .fetch_one(&self.pool)
            .await
            .map_err(sql("counting archiver deliveries"))?
            .get("n"))
    }

    /// `metric` downsampled into `bucket_us`-wide buckets over `[from_us, to_us)`.
    /// `metric` is a metric name of some test kind (bound, not spliced).
    pub async fn series(
        &self,
        filter: &ResultFilter,
        metric: &str,
        bucket_us: i64,
    ) -> Result<Vec<SeriesBucket>, ArchiveError> {
        let origin_us = filter.from_us.unwrap_or(0);
        // One range scan of the index on (client, server, test, start), which carries
        // the metrics: the table is not read.
        let (clause, binds) = result_where(filter, "");
        let value = self.metric_value("", binds.len() + 1);
        let text = format!(
            "SELECT (start_us - {origin_us}) / {bucket} AS bucket, COUNT(value) AS n, AVG(value) AS avg_value, \
             MIN(value) AS min_value, MAX(value) AS max_value \
             FROM (SELECT start_us, {value} AS value FROM results {clause}) AS measured \
             WHERE value IS NOT NULL GROUP BY bucket ORDER BY bucket",
            bucket = bucket_us.max(1),
        );
        let mut query = sqlx::query(&text);
        for bind in binds {
            query = bind.apply(query);
        }
        let rows = query
            .bind(metric)
            .fetch_all(&self.pool)
            .await
            .map_err(sql("querying a series"))?;
        Ok(rows
            .iter()
            .map(|row| SeriesBucket {
                start_time: from_us(origin_us + row.get::<i64, _>("bucket") * bucket_us.max(1)),
                count: row.get("n"),
                avg: row.get("avg_value"),
                min: row.get("min_value"),
                max: row.get("max_value"),
            })
            .collect())
    }

    /// Values of `metric` for the in-memory views (`crate::recent`): from the results
    /// that started at or after an instant (a view's first load) or that the archive
    /// received after one (its catch-up; the caller filters by start).
    pub async fn metric_values(
        &self,
        metric: &str,
        since: Since,
    ) -> Result<Vec<MetricValue>, ArchiveError> {
        let (condition, instant_us) = since.condition();
        // Through the index on the results' start or arrival.
        let text = format!(
            "SELECT client, server, test, start_us, value FROM (SELECT r.client, r.server, r.test, \
             r.start_us, {value} AS value FROM results r WHERE {condition}) AS measured \
             WHERE value IS NOT NULL",
            value = self.metric_value("r.", 1)
        );
        let rows = sqlx::query(&text)
            .bind(metric)
            .bind(instant_us)
            .fetch_all(&self.pool)
            .await
            .map_err(sql("reading a metric's recent values"))?;
        Ok(rows
            .iter()
            .map(|row| MetricValue {
                client: row.get("client"),
                server: row.get("server"),
                test: row.get("test"),
                start_us: row.get("start_us"),
                value: row.get("value"),
            })
            .collect())
    }

    /// The completed results of `test` the archive received after `after_us`, with
    /// their documents and metrics.
    pub async fn completed_received_after(
        &self,
        test: &str,
        after_us: i64,
    ) -> Result<Vec<StoredResult>, ArchiveError> {
        let text = format!(
            "SELECT {} FROM results WHERE received_us > $1 AND test = $2 AND outcome = 'completed'",
            self.result_columns("", true)
        );
        let binds = vec![Bind::Int(after_us), Bind::Text(test.to_string())];
        self.read_results(&text, binds, true, "reading newly received results")
            .await
    }

    /// The raw document of the newest completed result of (client, server, test)
    /// that started before `before_us`, with its run id.
    pub async fn previous_result(
        &self,
        client: &str,
        server: &str,
        test: &str,
        before_us: i64,
    ) -> Result<Option<(String, serde_json::Value)>, ArchiveError> {
        let row = sqlx::query(
            "SELECT run_id, raw FROM results WHERE client = $1 AND server = $2 AND test = $3 \
             AND start_us < $4 AND outcome = 'completed' ORDER BY start_us DESC LIMIT 1",
        )
        .bind(client)
        .bind(server)
        .bind(test)
        .bind(before_us)
        .fetch_optional(&self.pool)
        .await
        .map_err(sql("reading the previous result"))?;
        row.map(|row| {
            Ok((
                row.get("run_id"),
                parse_json("result", &row.get::<String, _>("raw"))?,
            ))
        })
        .transpose()
    }

    /// One run by id.
    /// The pcapng file capture run `run_id` uploaded, if it uploaded one.
    pub async fn capture_packets(&self, run_id: &str) -> Result<Option<Vec<u8>>, ArchiveError> {
        sqlx::query("SELECT pcapng FROM capture_packets WHERE run_id = $1")
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(sql("reading a capture's packets"))?
            .map(|row| row.try_get::<Vec<u8>, _>(0))
            .transpose()
            .map_err(sql("reading a capture's packets"))
    }

    pub async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, ArchiveError> {
        let row = sqlx::query(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"))
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(sql("reading a run"))?;
        match row {
            Some(row) => run_from_row(&row).map(Some),
            // A handed-out light run that reported has no row (see [`handouts`]).
            None => self.reported_handed_out_run(run_id).await,
        }
    }

    /// Stores (or replaces) a diagnosis job's document.
    pub async fn put_diagnosis(
        &self,
        id: &str,
        source: &str,
        destination: &str,
        state: &str,
        created_us: i64,
        document: &serde_json::Value,
    ) -> Result<(), ArchiveError> {
        sqlx::query(
            "INSERT INTO diagnoses (id, source, destination, state, created_us, document) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO UPDATE \
             SET state = excluded.state, document = excluded.document",
        )
        .bind(id)
        .bind(source)
        .bind(destination)
        .bind(state)
        .bind(created_us)
        .bind(document.to_string())
        .execute(&self.writer)
        .await
        .map_err(sql("storing a diagnosis"))?;
        Ok(())
    }

    /// A diagnosis job's document.
    pub async fn diagnosis(&self, id: &str) -> Result<Option<serde_json::Value>, ArchiveError> {
        let row = sqlx::query("SELECT document FROM diagnoses WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(sql("reading a diagnosis"))?;
        row.map(|row| parse_json("diagnosis", &row.get::<String, _>("document")))
            .transpose()
    }

    /// Stores (or replaces) a contract's verdict on one run.
    pub async fn add_sla_verdict(&self, verdict: &SlaVerdict) -> Result<(), ArchiveError> {
        let document = serde_json::to_string(verdict).map_err(|source| ArchiveError::Json {
            what: "SLA verdict",
            source,
        })?;
        sqlx::query(
            "INSERT INTO sla_verdicts (contract, run_id, client, server, time_us, pass, document) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (contract, run_id) DO UPDATE \
             SET pass = excluded.pass, document = excluded.document",
        )
        .bind(&verdict.contract)
        .bind(&verdict.run_id)
        .bind(&verdict.client)
        .bind(&verdict.server)
        .bind(to_us(verdict.time))
        .bind(i64::from(verdict.pass))
        .bind(document)
        .execute(&self.writer)
        .await
        .map_err(sql("storing an SLA verdict"))?;
        Ok(())
    }

    /// SLA verdicts matching `filter`, newest first.
    pub async fn sla_verdicts(&self, filter: &SlaFilter) -> Result<Vec<SlaVerdict>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT document FROM sla_verdicts \
             WHERE ($1 = '' OR contract = $2) AND ($3 = '' OR client = $4) AND ($5 = '' OR server = $6) \
             AND time_us >= $7 AND time_us < $8 ORDER BY time_us DESC LIMIT $9",
        )
        .bind(filter.contract.as_deref().unwrap_or(""))
        .bind(filter.contract.as_deref().unwrap_or(""))
        .bind(filter.client.as_deref().unwrap_or(""))
        .bind(filter.client.as_deref().unwrap_or(""))
        .bind(filter.server.as_deref().unwrap_or(""))
        .bind(filter.server.as_deref().unwrap_or(""))
        .bind(filter.from_us.unwrap_or(i64::MIN))
        .bind(filter.to_us.unwrap_or(i64::MAX))
        .bind(filter.limit)
        .fetch_all(&self.pool)
        .await
        .map_err(sql("reading SLA verdicts"))?;
        rows.iter()
            .map(|row| decode(row, "SLA verdict", "document"))
            .collect()
    }

    /// Stores `alerts` in one transaction, a statement per [`chunk_rows`] of them.
    pub async fn add_alerts(&self, alerts: &[crate::events::Alert]) -> Result<(), ArchiveError> {
        const DOING: &str = "storing alerts";
        let mut tx = self.write_transaction().await.map_err(sql(DOING))?;
        for chunk in row_chunks(self.backend, alerts) {
            let text = format!(
                "INSERT INTO alerts (id, time_us, severity, agents, document) VALUES {}",
                value_rows(self.backend, 5, chunk.len())
            );
            let mut query = sqlx::query(&text);
            for alert in chunk {
                let document =
                    serde_json::to_string(alert).map_err(|source| ArchiveError::Json {
                        what: "alert",
                        source,
                    })?;
                query = query
                    .bind(crate::new_token()[..24].to_string())
                    .bind(to_us(alert.time))
                    .bind(alert.severity.clone())
                    .bind(format!(",{},", alert.agents.join(",")))
                    .bind(document);
            }
            query.execute(&mut *tx).await.map_err(sql(DOING))?;
        }
        tx.commit().await.map_err(sql(DOING))?;
        Ok(())
    }

    /// Alerts matching `filter`, newest first.
    pub async fn alerts(&self, filter: &AlertFilter) -> Result<Vec<StoredAlert>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT id, document FROM alerts \
             WHERE ($1 = '' OR agents LIKE $2 ESCAPE '\\') AND ($3 = '' OR severity = $4) \
             AND time_us >= $5 AND time_us < $6 ORDER BY time_us DESC, id LIMIT $7",
        )
        .bind(filter.agent.as_deref().unwrap_or(""))
        .bind(format!(
            "%,{},%",
            like_literal(filter.agent.as_deref().unwrap_or(""))
        ))
        .bind(filter.severity.as_deref().unwrap_or(""))
        .bind(filter.severity.as_deref().unwrap_or(""))
        .bind(filter.from_us.unwrap_or(i64::MIN))
        .bind(filter.to_us.unwrap_or(i64::MAX))
        .bind(filter.limit)
        .fetch_all(&self.pool)
        .await
        .map_err(sql("reading alerts"))?;
        rows.iter()
            .map(|row| {
                Ok(StoredAlert {
                    id: row.get("id"),
                    alert: decode(row, "alert", "document")?,
                })
            })
            .collect()
    }

    /// The newest diagnosis jobs, newest first.
    pub async fn diagnoses(&self, limit: i64) -> Result<Vec<serde_json::Value>, ArchiveError> {
        let rows = sqlx::query("SELECT document FROM diagnoses ORDER BY created_us DESC LIMIT $1")
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(sql("reading diagnosis jobs"))?;
        rows.iter()
            .map(|row| decode(row, "diagnosis job", "document"))
            .collect()
    }

    /// Stores a metric an analysis derived for a stored result (replacing an earlier
    /// value of the same name); a result not stored is left alone.
    pub async fn add_metric(
        &self,
        run: &RunRecord,
        name: &str,
        value: f64,
    ) -> Result<(), ArchiveError> {
        let (text, key) = match self.backend {
            // The key as a JSON path, quoted: a name is not read as a path.
            Backend::Sqlite => (
                "UPDATE results SET metrics = json_set(metrics, $1, $2) WHERE run_id = $3",
                format!("$.{}", serde_json::Value::from(name)),
            ),
            Backend::Postgres => (
                "UPDATE results SET metrics = metrics || jsonb_build_object(CAST($1 AS text), \
                 CAST($2 AS double precision)) WHERE run_id = $3",
                name.to_string(),
            ),
        };
        sqlx::query(text)
            .bind(key)
            .bind(value)
            .bind(&run.id)
            .execute(&self.writer)
            .await
            .map_err(sql("storing a derived metric"))?;
        Ok(())
    }

    /// The newest result of each (client, server, test).
    pub async fn latest_per_pair(&self) -> Result<Vec<StoredResult>, ArchiveError> {
        let text = format!(
            "SELECT {} FROM results r JOIN (SELECT client, server, test, MAX(start_us) AS newest FROM results \
             WHERE outcome = 'completed' GROUP BY client, server, test) n ON r.client = n.client AND \
             r.server = n.server AND r.test = n.test AND r.start_us = n.newest WHERE r.outcome = 'completed' \
             ORDER BY r.client, r.server, r.test",
            self.result_columns("r.", false)
        );
        self.read_results(&text, Vec::new(), false, "reading the latest results")
            .await
    }

    /// The newest completed result of each (client, server) for `test` that started
    /// at or after `since_us`, with its raw document and metrics.
    pub async fn latest_of_test(
        &self,
        test: &str,
        since_us: i64,
    ) -> Result<Vec<StoredResult>, ArchiveError> {
        let text = format!(
            "SELECT {} FROM results r JOIN (SELECT client, server, MAX(start_us) AS newest FROM results \
             WHERE test = $1 AND outcome = 'completed' AND start_us >= $2 GROUP BY client, server) n \
             ON r.client = n.client AND r.server = n.server AND r.start_us = n.newest \
             WHERE r.test = $1 AND r.outcome = 'completed' ORDER BY r.client, r.server",
            self.result_columns("r.", true)
        );
        let binds = vec![Bind::Text(test.to_string()), Bind::Int(since_us)];
        self.read_results(&text, binds, true, "reading the latest results of a test")
            .await
    }

    // ---- app metrics -----------------------------------------------------------

    pub async fn add_app_metrics(
        &self,
        metrics: &[AppMetric],
        publisher: &str,
    ) -> Result<(), ArchiveError> {
        let mut tx = self
            .write_transaction()
            .await
            .map_err(sql("storing app metrics"))?;
        for metric in metrics {
            sqlx::query(
                "INSERT INTO app_metrics (name, value, unit, time_us, tags, publisher) VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(&metric.name)
            .bind(metric.value)
            .bind(&metric.unit)
            .bind(to_us(metric.timestamp))
            .bind(serde_json::to_string(&metric.tags).expect("string map serialises"))
            .bind(publisher)
            .execute(&mut *tx)
            .await
            .map_err(sql("storing app metrics"))?;
        }
        tx.commit().await.map_err(sql("storing app metrics"))?;
        Ok(())
    }

    /// App metrics named `name` (any name when `None`) in `[from_us, to_us)` whose tags
    /// include every pair of `tags`, oldest first.
    pub async fn app_metrics(
        &self,
        name: Option<&str>,
        from_time_us: i64,
        to_time_us: i64,
        tags: &BTreeMap<String, String>,
        limit: i64,
    ) -> Result<Vec<StoredAppMetric>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT name, value, unit, time_us, tags, publisher FROM app_metrics \
             WHERE ($1 = '' OR name = $2) AND time_us >= $3 AND time_us < $4 ORDER BY time_us",
        )
        .bind(name.unwrap_or(""))
        .bind(name.unwrap_or(""))
        .bind(from_time_us)
        .bind(to_time_us)
        .fetch_all(&self.pool)
        .await
        .map_err(sql("querying app metrics"))?;
        let mut selected = Vec::new();
        for row in &rows {
            let metric_tags: BTreeMap<String, String> = decode(row, "app metric tags", "tags")?;
            if !tags
                .iter()
                .all(|(key, value)| metric_tags.get(key) == Some(value))
            {
                continue;
            }
            selected.push(StoredAppMetric {
                metric: AppMetric {
                    name: row.get("name"),
                    value: row.get("value"),
                    unit: row.get("unit"),
                    timestamp: from_us(row.get("time_us")),
                    tags: metric_tags,
                },
                publisher: row.get("publisher"),
            });
            if selected.len() as i64 >= limit {
                break;
            }
        }
        Ok(selected)
    }

    // ---- retention and leadership ---------------------------------------------

    /// On a PostgreSQL whose autovacuum is off, vacuums and analyses the tables every
    /// run rewrites when [`SELF_VACUUM_EVERY`] has passed since this archive last did
    /// and it is not vacuuming already; answers whether it did. The leading server
    /// calls it beside every planning pass.
    /// Measured with a fleet of 300 simulated agents (`bench/scale`): without it the
    /// runs table held more dead rows than live ones after two minutes, a fetch's claim
    /// of 25 runs took 11 ms instead of well under one, and planning passes 2–8 s
    /// instead of 7–16 ms.
    pub async fn vacuum_when_autovacuum_is_off(&self) -> Result<bool, ArchiveError> {
        let Some(last) = &self.self_vacuum else {
            return Ok(false);
        };
        let Ok(mut last) = last.try_lock() else {
            return Ok(false);
        };
        if last.is_some_and(|at| at.elapsed() < SELF_VACUUM_EVERY) {
            return Ok(false);
        }
        // VACUUM runs outside any transaction and cannot be prepared: the simple
        // query protocol, on a connection of the pool.
        sqlx::raw_sql(&format!("VACUUM (ANALYZE) {VACUUMED_TABLES}"))
            .execute(&self.pool)
            .await
            .map_err(sql("vacuuming"))?;
        if let Some(since) = &self.scheduled_since_analyze {
            since.store(0, std::sync::atomic::Ordering::Relaxed);
        }
        *last = Some(std::time::Instant::now());
        Ok(true)
    }

    /// Deletes results, finished runs (rows, and swept hand-outs), app metrics, SLA
    /// verdicts and diagnosis jobs older than `cutoff_us`.
    pub async fn apply_retention(&self, cutoff_us: i64) -> Result<RetentionReport, ArchiveError> {
        let delete = |text: &str| {
            let pool = self.pool.clone();
            let text = text.to_string();
            async move {
                sqlx::query(&text)
                    .bind(cutoff_us)
                    .execute(&pool)
                    .await
                    .map(|done| done.rows_affected())
                    .map_err(sql("applying retention"))
            }
        };
        Ok(RetentionReport {
            results: {
                delete("DELETE FROM capture_packets WHERE start_us < $1").await?;
                delete("DELETE FROM results WHERE start_us < $1").await?
            },
            runs: delete(
                "DELETE FROM runs WHERE planned_end_us < $1 AND state NOT IN ('scheduled', 'dispatched')",
            )
            .await?,
            light_handouts: delete(&format!(
                "DELETE FROM light_handouts WHERE reach_us < $1 AND reach_us <= {}",
                handouts::swept_until_sql()
            ))
            .await?,
            app_metrics: delete("DELETE FROM app_metrics WHERE time_us < $1").await?,
            sla_verdicts: delete("DELETE FROM sla_verdicts WHERE time_us < $1").await?,
            diagnoses: delete("DELETE FROM diagnoses WHERE created_us < $1").await?,
            alerts: delete("DELETE FROM alerts WHERE time_us < $1").await?,
        })
    }

    /// Takes or renews the lease `name` for `holder` until `now + ttl_us`; true when held.
    /// Server replicas sharing one database elect the scheduler leader this way; the
    /// conditional upsert is atomic on both backends.
    pub async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl_us: i64,
    ) -> Result<bool, ArchiveError> {
        let now = now_us();
        sqlx::query(
            "INSERT INTO leases (name, holder, expires_us) VALUES ($1, $2, $3) ON CONFLICT (name) DO UPDATE \
             SET holder = excluded.holder, expires_us = excluded.expires_us \
             WHERE leases.holder = excluded.holder OR leases.expires_us < $4",
        )
        .bind(name)
        .bind(holder)
        .bind(now + ttl_us)
        .bind(now)
        .execute(&self.writer)
        .await
        .map_err(sql("acquiring the scheduler lease"))?;
        let row = sqlx::query("SELECT holder FROM leases WHERE name = $1")
            .bind(name)
            .fetch_one(&self.pool)
            .await
            .map_err(sql("acquiring the scheduler lease"))?;
        Ok(row.get::<String, _>("holder") == holder)
    }

    pub async fn planner_mark(&self, name: &str) -> Result<Option<i64>, ArchiveError> {
        let [value] = self.planner_marks_named([name]).await?;
        Ok(value)
    }

    /// The planner marks `names` (each `None` where unset) in one read: an agent's
    /// fetch asks for three every second.
    pub async fn planner_marks_named<const N: usize>(
        &self,
        names: [&str; N],
    ) -> Result<[Option<i64>; N], ArchiveError> {
        let rows = self
            .rows_matching(
                "SELECT name, value FROM planner_state WHERE name IN",
                &names,
                "reading planner state",
            )
            .await?;
        Ok(names.map(|name| {
            rows.iter()
                .find(|row| row.get::<&str, _>("name") == name)
                .map(|row| row.get("value"))
        }))
    }

    pub async fn set_planner_mark(&self, name: &str, value: i64) -> Result<(), ArchiveError> {
        self.set_planner_marks(&[(name, value)]).await
    }

    /// Sets several planner marks in one transaction.
    pub async fn set_planner_marks(&self, marks: &[(&str, i64)]) -> Result<(), ArchiveError> {
        self.insert_runs_and_marks(&[], marks).await.map(drop)
    }
}

/// Planner mark counting the changes to the exclusive runs stored (runs stored,
/// cancelled or discarded): what was read of them is current while it stands still.
pub const EXCLUSIVE_EPOCH: &str = "exclusive_epoch";

/// Planner mark counting the registrations stored (new agents and changed ones): the
/// registrations read are current while it stands still.
pub const AGENTS_EPOCH: &str = "agents_epoch";

async fn bump_exclusive_epoch(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
) -> Result<(), ArchiveError> {
    bump_counter(tx, EXCLUSIVE_EPOCH).await
}

/// Adds one to the planner mark `name` (from nothing, to 1).
async fn bump_counter(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    name: &str,
) -> Result<(), ArchiveError> {
    sqlx::query(
        "INSERT INTO planner_state (name, value) VALUES ($1, 1) \
         ON CONFLICT (name) DO UPDATE SET value = planner_state.value + 1",
    )
    .bind(name)
    .execute(&mut **tx)
    .await
    .map_err(sql("storing planner state"))?;
    Ok(())
}

/// Inserts `runs` as rows, a set per statement; a run whose id is stored already is
/// left as it is. Returns the ids inserted.
async fn insert_run_rows(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    backend: Backend,
    runs: &[RunRecord],
    now: i64,
) -> Result<HashSet<String>, ArchiveError> {
    let mut inserted = HashSet::new();
    // In the order of their ids, whoever writes them: on PostgreSQL two transactions
    // storing some of the same runs, each in its own order, waited on each other's
    // rows ("deadlock detected").
    let mut ordered: Vec<&RunRecord> = runs.iter().collect();
    ordered.sort_unstable_by(|a, b| a.id.cmp(&b.id));
    // A set of rows per statement: a fetch places an agent's minute of a mesh (one
    // run per peer) and a statement per row was a round trip each, on PostgreSQL
    // while the fetch held the scheduler's lock the planning pass waits for.
    for chunk in row_chunks(backend, &ordered) {
        let text = format!(
            "INSERT INTO runs (id, task, test, test_name, client, server, spec, exclusive, reverse, priority, \
             claims, planned_start_us, planned_end_us, actual_start_us, actual_end_us, state, reason, created_us, target) \
             VALUES {} ON CONFLICT (id) DO NOTHING RETURNING id",
            value_rows(backend, 19, chunk.len()),
        );
        let mut query = sqlx::query(&text);
        for run in chunk {
            query = query
                .bind(&run.id)
                .bind(&run.task)
                .bind(&run.test)
                .bind(&run.test_name)
                .bind(&run.client)
                .bind(&run.server)
                .bind(run.spec.text())
                .bind(i64::from(run.exclusive))
                .bind(i64::from(run.reverse))
                .bind(run.priority)
                .bind(to_json_text(&run.claims))
                .bind(run.planned_start_us)
                .bind(run.planned_end_us)
                .bind(run.actual_start_us)
                .bind(run.actual_end_us)
                .bind(run.state.as_str())
                .bind(run.reason.as_deref())
                .bind(now)
                .bind(run.target.as_deref());
        }
        let rows = query
            .fetch_all(&mut **tx)
            .await
            .map_err(sql("storing runs"))?;
        inserted.extend(rows.iter().map(|row| row.get::<String, _>("id")));
    }
    Ok(inserted)
}

async fn set_mark(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    name: &str,
    value: i64,
) -> Result<(), ArchiveError> {
    sqlx::query(
        "INSERT INTO planner_state (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
    )
    .bind(name)
    .bind(value)
    .execute(&mut **tx)
    .await
    .map_err(sql("storing planner state"))?;
    Ok(())
}

/// Checks each upload of a batch against its run (`runs`, by id): what to answer for
/// each, and the uploads to store, which [`Step::Accepted`] indexes.
fn check_batch(
    uploads: &[ResultUpload],
    mut runs: HashMap<String, RunRecord>,
) -> (Vec<Step>, Vec<Accepted>) {
    let mut steps = Vec::with_capacity(uploads.len());
    let mut accepted: Vec<Accepted> = Vec::new();
    // The accepted upload of each run, by run id: the run's record moves into it.
    let mut first_of: HashMap<&str, usize> = HashMap::new();
    for upload in uploads {
        let first = first_of.get(upload.run_id.as_str()).copied();
        let Some(run) = first
            .map(|index| &accepted[index].run)
            .or_else(|| runs.get(&upload.run_id))
        else {
            steps.push(Step::Done(Box::new(Err(IngestRefusal::UnknownRun(
                upload.run_id.clone(),
            )))));
            continue;
        };
        if run.client != upload.agent {
            steps.push(Step::Done(Box::new(Err(IngestRefusal::WrongAgent {
                run_id: run.id.clone(),
                client: run.client.clone(),
                agent: upload.agent.clone(),
            }))));
            continue;
        }
        // The same run twice in one batch: the first upload is the one stored.
        if first.is_some() {
            steps.push(Step::Done(Box::new(Ok((Ingest::Duplicate, run.clone())))));
            continue;
        }
        match Accepted::document(&run.test, upload) {
            Ok(document) => {
                let run = runs.remove(&upload.run_id).expect("found above");
                first_of.insert(&upload.run_id, accepted.len());
                steps.push(Step::Accepted(accepted.len()));
                accepted.push(Accepted::new(run, upload, document));
            }
            Err(refusal) => steps.push(Step::Done(Box::new(Err(refusal)))),
        }
    }
    (steps, accepted)
}

/// Where an upload stands while its batch is checked.
enum Step {
    Done(Box<Result<(Ingest, RunRecord), IngestRefusal>>),
    /// Index into the batch's accepted uploads, stored unless already stored.
    Accepted(usize),
}

/// An upload that passed the checks, with what will be stored for it.
struct Accepted {
    run: RunRecord,
    /// "completed" or "failed".
    outcome: &'static str,
    start_us: i64,
    end_us: i64,
    error: Option<String>,
    raw: String,
    metrics: BTreeMap<String, f64>,
    packets: Option<Vec<u8>>,
}

/// What an upload stores: its result document as text, the document's summary metrics,
/// and the packets detached from it (a capture run's pcapng).
type StoredDocument = (String, BTreeMap<String, f64>, Option<Vec<u8>>);

impl Accepted {
    /// Checks an upload's document for its run's test `test`.
    fn document(test: &str, upload: &ResultUpload) -> Result<StoredDocument, IngestRefusal> {
        Ok(match (&upload.outcome, &upload.result) {
            (RunOutcome::Completed, Some(result)) => {
                match crate::capture_packets::detach(test, result) {
                    Ok(None) => (result.to_string(), summary_metrics(test, result), None),
                    Ok(Some((document, packets))) => (
                        document.to_string(),
                        summary_metrics(test, &document),
                        Some(packets),
                    ),
                    Err(refusal) => {
                        return Err(IngestRefusal::Packets {
                            run_id: upload.run_id.clone(),
                            refusal,
                        })
                    }
                }
            }
            (RunOutcome::Completed, None) => {
                return Err(IngestRefusal::MissingResult(upload.run_id.clone()))
            }
            (RunOutcome::Failed, result) => (
                result
                    .as_ref()
                    .map(|r| r.to_string())
                    .unwrap_or_else(|| "null".into()),
                BTreeMap::new(),
                None,
            ),
        })
    }

    fn new(
        run: RunRecord,
        upload: &ResultUpload,
        (raw, metrics, packets): StoredDocument,
    ) -> Accepted {
        Accepted {
            run,
            outcome: match upload.outcome {
                RunOutcome::Completed => "completed",
                RunOutcome::Failed => "failed",
            },
            start_us: to_us(upload.actual_start),
            end_us: to_us(upload.actual_end),
            error: upload.error.clone(),
            raw,
            metrics,
            packets,
        }
    }

    /// The run as it is once this result is stored.
    fn into_completed_run(self) -> RunRecord {
        Outcome {
            state: RunState::parse(self.outcome),
            start_us: self.start_us,
            end_us: self.end_us,
            error: self.error,
        }
        .applied_to(self.run)
    }
}

/// How a run's stored result went.
struct Outcome {
    /// Completed or failed.
    state: RunState,
    start_us: i64,
    end_us: i64,
    error: Option<String>,
}

impl Outcome {
    /// The outcome of a row of `results` read with its `outcome, start_us, end_us, error`.
    fn from_row(row: &AnyRow) -> Outcome {
        Outcome {
            state: RunState::parse(row.get("outcome")),
            start_us: row.get("start_us"),
            end_us: row.get("end_us"),
            error: row.get("error"),
        }
    }

    /// `run` as it stands with this result.
    fn applied_to(self, run: RunRecord) -> RunRecord {
        RunRecord {
            state: self.state,
            actual_start_us: Some(self.start_us),
            actual_end_us: Some(self.end_us),
            reason: self.error,
            ..run
        }
    }
}

/// The results stored for the runs `ids`, by run id, read on `connection`.
async fn outcomes_of(
    connection: &mut sqlx::AnyConnection,
    backend: Backend,
    ids: &[&str],
) -> Result<HashMap<String, Outcome>, ArchiveError> {
    let rows = rows_matching_on(
        connection,
        backend,
        "SELECT run_id, outcome, start_us, end_us, error FROM results WHERE run_id IN",
        ids,
        "reading the results of handed-out runs",
    )
    .await?;
    Ok(rows
        .iter()
        .map(|row| (row.get("run_id"), Outcome::from_row(row)))
        .collect())
}

/// Which of the runs `ids` have a stored result, read on `connection`: on SQLite from
/// the results' index of run ids alone, without reading each result's row (a sweep
/// asks about 64 000 runs at a time).
async fn reported_ids(
    connection: &mut sqlx::AnyConnection,
    backend: Backend,
    ids: &[&str],
) -> Result<HashSet<String>, ArchiveError> {
    let rows = rows_matching_on(
        connection,
        backend,
        "SELECT run_id FROM results WHERE run_id IN",
        ids,
        "reading which handed-out runs reported",
    )
    .await?;
    Ok(rows.iter().map(|row| row.get("run_id")).collect())
}

/// How the ingest writer writes on SQLite. A multi-row statement that may fail
/// part-way on a constraint keeps a statement journal, a copy of every page it
/// changes, so that it alone can be undone (about 7 % of the writer's time); one
/// that skips a conflicting row instead keeps none. The writer's rows cannot
/// conflict (results already stored are looked up first, and a run two uploads of
/// the set carry is inserted once), and [`all_written`] turns a skipped row into an error that fails the
/// transaction all the same. (`OR ROLLBACK` would also need no journal, but it ends
/// the transaction behind the driver's back.)
const SQLITE_INSERT: &str = "INSERT OR IGNORE";
/// A run's new state: a run removed meanwhile is simply not updated, as before.
const SQLITE_UPDATE: &str = "UPDATE OR IGNORE";

/// How a transaction takes the sweep lock (see [`Archive::lock_against_sweeps`]).
#[derive(Clone, Copy)]
enum SweepLock {
    /// A group commit's.
    Shared,
    /// A sweep's.
    Exclusive,
}

/// Fails when a set insert on SQLite skipped some of its `expected` rows.
fn all_written(table: &'static str, expected: usize, written: u64) -> Result<(), ArchiveError> {
    if written == expected as u64 {
        Ok(())
    } else {
        Err(ArchiveError::IngestConflict {
            table,
            expected,
            written,
        })
    }
}

/// `NOTIFY` on PostgreSQL (see [`crate::notices`]), in a transaction or not.
async fn notify_on<'e, E>(executor: E, channel: &str, payload: &str) -> Result<(), ArchiveError>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(executor)
        .await
        .map_err(sql("telling the other replicas"))?;
    Ok(())
}

/// Most rows one statement of a set writes or reads. SQLite statements are bigger:
/// a statement is a round trip to the connection's thread, which holds the write
/// lock meanwhile, while PostgreSQL plans each statement text once per connection.
fn chunk_rows(backend: Backend) -> usize {
    match backend {
        Backend::Sqlite => 256,
        Backend::Postgres => 32,
    }
}

/// `rows` cut into statements of [`chunk_rows`] rows, then the rest in powers of two:
/// a set of any size is then written with a handful of statement texts per kind,
/// each prepared once per connection, below either database's limit on bind
/// parameters, and with one statement per chunk rather than per row.
fn row_chunks<T>(backend: Backend, rows: &[T]) -> Vec<&[T]> {
    chunks_of(rows, chunk_rows(backend))
}

/// Most keys one statement of [`rows_matching_on`] looks up: a sweep looks up the
/// results of 64 000 runs, which at [`chunk_rows`] would be 2 000 statements on
/// PostgreSQL.
const KEYS_PER_LOOKUP: usize = 1024;

/// The rows `select` (a query ending in `… IN`) finds for `keys` on `connection`, a
/// set of at most [`KEYS_PER_LOOKUP`] keys per statement.
async fn rows_matching_on(
    connection: &mut sqlx::AnyConnection,
    backend: Backend,
    select: &str,
    keys: &[&str],
    doing: &'static str,
) -> Result<Vec<AnyRow>, ArchiveError> {
    let mut rows = Vec::with_capacity(keys.len());
    for chunk in chunks_of(keys, KEYS_PER_LOOKUP) {
        let text = format!("{select} ({})", placeholders(backend, chunk.len()));
        let mut query = sqlx::query(&text);
        for key in chunk {
            query = query.bind(*key);
        }
        rows.extend(
            query
                .fetch_all(&mut *connection)
                .await
                .map_err(sql(doing))?,
        );
    }
    Ok(rows)
}

/// `rows` cut into chunks of `most`, then the rest in powers of two (see
/// [`row_chunks`]).
fn chunks_of<T>(rows: &[T], most: usize) -> Vec<&[T]> {
    let mut chunks = Vec::new();
    let mut rest = rows;
    while !rest.is_empty() {
        let size = if rest.len() >= most {
            most
        } else {
            1 << rest.len().ilog2()
        };
        let (chunk, after) = rest.split_at(size);
        chunks.push(chunk);
        rest = after;
    }
    chunks
}

/// `count` positional placeholders, bound in order: `$1, $2, $3` on PostgreSQL,
/// `?, ?, ?` on SQLite, where a numbered (named) parameter costs a search of the
/// statement's parameter list at every bind, which grows with the square of a set
/// statement's size.
fn placeholders(backend: Backend, count: usize) -> String {
    let mut text = String::with_capacity(count * 5);
    push_placeholders(&mut text, backend, 1, count);
    text
}

/// Appends `count` placeholders numbered from `first`, into one buffer: a set statement
/// has thousands, and a string each was a twentieth of the server's time ingesting.
fn push_placeholders(text: &mut String, backend: Backend, first: usize, count: usize) {
    use std::fmt::Write;
    for n in first..first + count {
        if n > first {
            text.push_str(", ");
        }
        match backend {
            Backend::Postgres => write!(text, "${n}").expect("writing to a String"),
            Backend::Sqlite => text.push('?'),
        }
    }
}

/// `rows` parenthesised rows of `columns` [`placeholders`] each, bound row by row:
/// `($1, $2), ($3, $4)`.
fn value_rows(backend: Backend, columns: usize, rows: usize) -> String {
    typed_value_rows(backend, &vec![None; columns], rows)
}

/// [`value_rows`] with a type for some columns, which PostgreSQL casts the bound value
/// to (`CAST($2 AS jsonb)` for a JSON object bound as text); SQLite takes values as
/// they are bound.
fn typed_value_rows(backend: Backend, columns: &[Option<&str>], rows: usize) -> String {
    use std::fmt::Write;
    let mut text = String::with_capacity(rows * (columns.len() * 7 + 4));
    for row in 0..rows {
        if row > 0 {
            text.push_str(", ");
        }
        text.push('(');
        for (column, cast) in columns.iter().enumerate() {
            if column > 0 {
                text.push_str(", ");
            }
            let n = row * columns.len() + column + 1;
            match (backend, cast) {
                (Backend::Postgres, Some(kind)) => {
                    write!(text, "CAST(${n} AS {kind})").expect("writing to a String")
                }
                _ => push_placeholders(&mut text, backend, n, 1),
            }
        }
        text.push(')');
    }
    text
}

const AGENT_COLUMNS: &str = "name, addresses, endpoint_port, iperf3_port, tags, capabilities, \
                             accepts_inbound, registered_us, last_seen_us, version";

const RUN_COLUMNS: &str = "id, task, test, test_name, client, server, target, spec, exclusive, reverse, priority, claims, \
                           planned_start_us, planned_end_us, actual_start_us, actual_end_us, state, reason";

fn to_json_text(value: &impl Serialize) -> String {
    serde_json::to_string(value).expect("plain data serialises")
}

fn parse_json(what: &'static str, text: &str) -> Result<serde_json::Value, ArchiveError> {
    serde_json::Value::from_str(text).map_err(|source| ArchiveError::Json { what, source })
}

/// Runs read by more than one statement, in the order one `ORDER BY planned_start_us, id`
/// would give.
fn runs_by_start(rows: &[AnyRow]) -> Result<Vec<RunRecord>, ArchiveError> {
    let mut runs = rows
        .iter()
        .map(run_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    sort_by_start(&mut runs);
    Ok(runs)
}

fn sort_by_start(runs: &mut [RunRecord]) {
    runs.sort_by(|a, b| (a.planned_start_us, &a.id).cmp(&(b.planned_start_us, &b.id)));
}

fn run_from_row(row: &AnyRow) -> Result<RunRecord, ArchiveError> {
    Ok(RunRecord {
        id: row.get("id"),
        task: row.get("task"),
        test: row.get("test"),
        test_name: row.get("test_name"),
        client: row.get("client"),
        server: row.get("server"),
        target: row.get("target"),
        spec: parse_json("run spec", &row.get::<String, _>("spec"))?.into(),
        exclusive: row.get::<i64, _>("exclusive") != 0,
        reverse: row.get::<i64, _>("reverse") != 0,
        priority: row.get("priority"),
        claims: decode(row, "run claims", "claims")?,
        planned_start_us: row.get("planned_start_us"),
        planned_end_us: row.get("planned_end_us"),
        actual_start_us: row.get("actual_start_us"),
        actual_end_us: row.get("actual_end_us"),
        state: RunState::parse(&row.get::<String, _>("state")),
        reason: row.get("reason"),
    })
}

/// `text` matched literally by LIKE … ESCAPE '\': an agent named `lab_1` must not
/// match `lab-1`.
fn like_literal(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

/// A JSON text column of `row` as `T`; `what` names it in the error.
fn decode<T: serde::de::DeserializeOwned>(
    row: &AnyRow,
    what: &'static str,
    column: &str,
) -> Result<T, ArchiveError> {
    serde_json::from_str(&row.get::<String, _>(column))
        .map_err(|source| ArchiveError::Json { what, source })
}

fn agent_from_row(row: &AnyRow) -> Result<AgentRecord, ArchiveError> {
    Ok(AgentRecord {
        registration: AgentRegistration {
            name: row.get("name"),
            addresses: decode(row, "agent addresses", "addresses")?,
            endpoint_port: u16::try_from(row.get::<i64, _>("endpoint_port")).unwrap_or(0),
            iperf3_port: row
                .get::<Option<i64>, _>("iperf3_port")
                .and_then(|port| u16::try_from(port).ok()),
            tags: decode(row, "agent tags", "tags")?,
            capabilities: decode(row, "agent capabilities", "capabilities")?,
            accepts_inbound: row.get::<i64, _>("accepts_inbound") != 0,
            version: row.get("version"),
        },
        registered_at: from_us(row.get("registered_us")),
        last_seen_at: from_us(row.get("last_seen_us")),
    })
}

fn result_from_row(row: &AnyRow, with_raw: bool) -> Result<StoredResult, ArchiveError> {
    Ok(StoredResult {
        run_id: row.get("run_id"),
        test: row.get("test"),
        client: row.get("client"),
        server: row.get("server"),
        start_time: from_us(row.get("start_us")),
        end_time: from_us(row.get("end_us")),
        outcome: row.get("outcome"),
        error: row.get("error"),
        metrics: decode(row, "result metrics", "metrics")?,
        result: if with_raw {
            Some(parse_json("result", &row.get::<String, _>("raw"))?)
        } else {
            None
        },
    })
}

/// A value bound into a dynamically built WHERE clause.
enum Bind {
    Text(String),
    Int(i64),
}

impl Bind {
    fn apply<'q>(
        self,
        query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    ) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
        match self {
            Bind::Text(text) => query.bind(text),
            Bind::Int(value) => query.bind(value),
        }
    }
}

/// The WHERE clause of a result filter; `table` qualifies the columns (`r.`) when
/// the query joins.
fn result_where(filter: &ResultFilter, table: &str) -> (String, Vec<Bind>) {
    let mut conditions = Vec::new();
    let mut binds = Vec::new();
    let mut push = |condition: &str, bind: Bind| {
        binds.push(bind);
        conditions.push(format!("{table}{condition} ${}", binds.len()));
    };
    if let Some(client) = &filter.client {
        push("client =", Bind::Text(client.clone()));
    }
    if let Some(server) = &filter.server {
        push("server =", Bind::Text(server.clone()));
    }
    if let Some(test) = &filter.test {
        push("test =", Bind::Text(test.clone()));
    }
    if let Some(from_us) = filter.from_us {
        push("start_us >=", Bind::Int(from_us));
    }
    if let Some(to_us) = filter.to_us {
        push("start_us <", Bind::Int(to_us));
    }
    if conditions.is_empty() {
        (String::new(), binds)
    } else {
        (format!("WHERE {}", conditions.join(" AND ")), binds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_in_binding_order() {
        assert_eq!(placeholders(Backend::Postgres, 3), "$1, $2, $3");
        assert_eq!(placeholders(Backend::Sqlite, 3), "?, ?, ?");
        assert_eq!(placeholders(Backend::Postgres, 0), "");
        assert_eq!(
            value_rows(Backend::Postgres, 2, 3),
            "($1, $2), ($3, $4), ($5, $6)"
        );
        assert_eq!(value_rows(Backend::Sqlite, 3, 2), "(?, ?, ?), (?, ?, ?)");
        let typed = [None, Some("jsonb")];
        assert_eq!(
            typed_value_rows(Backend::Postgres, &typed, 2),
            "($1, CAST($2 AS jsonb)), ($3, CAST($4 AS jsonb))"
        );
        assert_eq!(
            typed_value_rows(Backend::Sqlite, &typed, 2),
            "(?, ?), (?, ?)"
        );
    }
}
