//! `vantage agent`: connects out to the server (works behind NAT), registers,
//! heartbeats, serves the test endpoint in-process, executes the runs assigned to it
//! at their planned start and uploads the results through a durable spool.
//!
//! Guarantees (docs/control-plane.md): a result is fsync'd to the spool before any
//! upload and deleted only after the server's acknowledgement; uploads are idempotent
//! by run id, so restarts and outages neither lose nor duplicate results.

pub mod client;
pub mod execute;
pub mod hold;
pub mod spool;
mod transfers;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use tokio::sync::{watch, Notify};
use vantage_model::control::{AgentRegistration, AssignedRun, BatchItemAck, ResultUpload};
use vantage_model::ticket::TicketVerifier;
use vantage_probe::endpoint::{Endpoint, EndpointConfig};
use vantage_probe::latency::SharedProber;
use vantage_probe::source_policy::SourceLimits;
use vantage_probe::tickets::TicketGate;

use crate::client::{CallError, ServerClient};
use crate::hold::MemoryHold;
use crate::spool::{Spool, SpoolQuota};

#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The server's URL, or several: replicas sharing one database, the first that
    /// answers used and the next ones in turn when it stops answering.
    pub server_urls: Vec<String>,
    /// PEM CA certificate(s) trusted for an https:// server besides the system's roots.
    pub ca_cert: Option<PathBuf>,
    pub token: String,
    pub name: String,
    pub tags: BTreeMap<String, String>,
    /// False behind NAT: the scheduler then only makes this agent a client.
    pub accepts_inbound: bool,
    /// Where the in-process endpoint listens (`None`: all addresses).
    pub endpoint_listen: Option<IpAddr>,
    /// Endpoint port; 0 picks a free one.
    pub endpoint_port: u16,
    /// Port of the iperf3-compatible listener, for runs with `tool = "iperf3"`
    /// towards this agent; 0 picks a free one, `None` serves none.
    pub iperf3_port: Option<u16>,
    /// Addresses to advertise; empty: the local address that routes to the server.
    pub advertise: Vec<String>,
    pub spool_dir: PathBuf,
    /// Most the spool may hold; a result beyond it is uploaded without spooling.
    pub spool_quota: SpoolQuota,
    /// Most bytes of results kept in memory while neither the spool (full) nor the
    /// server (unreachable) can take them.
    pub memory_hold_bytes: u64,
    pub heartbeat_interval: Duration,
    /// Runs are fetched this far ahead of their start.
    pub horizon: Duration,
    /// A run whose start was missed by more than this is not started (it could overlap
    /// the next exclusive run); it is reported failed with the reason instead. Kept well
    /// below the scheduler's 1 s setup guard, the slack each reservation has beyond its
    /// test time, so a late start still ends inside the reservation.
    pub start_tolerance: Duration,
}

impl AgentOptions {
    pub fn new(server_url: &str, token: &str, name: &str, spool_dir: PathBuf) -> AgentOptions {
        AgentOptions {
            server_urls: vec![server_url.to_string()],
            ca_cert: None,
            token: token.to_string(),
            name: name.to_string(),
            tags: BTreeMap::new(),
            accepts_inbound: true,
            endpoint_listen: None,
            endpoint_port: 0,
            iperf3_port: Some(0),
            advertise: Vec::new(),
            spool_dir,
            spool_quota: SpoolQuota::default(),
            memory_hold_bytes: hold::DEFAULT_MAX_BYTES,
            heartbeat_interval: Duration::from_secs(5),
            horizon: Duration::from_secs(30),
            start_tolerance: Duration::from_millis(500),
        }
    }
}

/// The local source address the kernel would use towards `server_url`'s host.
fn route_source(server_url: &str) -> Option<IpAddr> {
    let host_port = server_url.split("://").nth(1)?.split('/').next()?;
    let target: SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(&host_port)
        .ok()?
        .next()
        .or_else(|| {
            std::net::ToSocketAddrs::to_socket_addrs(&(host_port, 80))
                .ok()?
                .next()
        })?;
    let bind: SocketAddr = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
    .parse()
    .ok()?;
    let socket = UdpSocket::bind(bind).ok()?;
    // connect() on UDP sends nothing; it only asks the kernel for a route.
    socket.connect(target).ok()?;
    Some(socket.local_addr().ok()?.ip())
}

/// Exponential backoff between failed calls: 0.5 s doubling up to 30 s.
struct Backoff(Duration);

impl Backoff {
    fn new() -> Backoff {
        Backoff(Duration::from_millis(500))
    }

    fn next(&mut self) -> Duration {
        let current = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(30));
        current
    }

    fn reset(&mut self) {
        self.0 = Duration::from_millis(500);
    }
}

/// Most results one upload request carries (a backlog after an outage goes 200 at a
/// time).
pub const UPLOAD_BATCH: usize = 200;

/// Least time between the starts of two upload rounds, in seconds.
pub const UPLOAD_ROUND_S: u64 = 1;

/// The longest upload round a server's pace is followed to: results wait in the spool
/// meanwhile, and a server asking for more (or a faulty answer) would have them reach
/// it ever later.
pub const MAX_UPLOAD_ROUND: Duration = Duration::from_secs(10);

/// The time between the starts of two upload rounds: the server's pace from its last
/// answer to a batch (`next_round_ms`, sent while its uploads queue), within
/// [`UPLOAD_ROUND_S`] and [`MAX_UPLOAD_ROUND`].
pub fn upload_round(next_round_ms: Option<u64>) -> Duration {
    next_round_ms
        .map(Duration::from_millis)
        .unwrap_or_default()
        .clamp(Duration::from_secs(UPLOAD_ROUND_S), MAX_UPLOAD_ROUND)
}

/// How long past its planned end a run accepted for execution is remembered, so that a
/// copy of it in a late answer to a fetch is not run twice. From its end on, its result
/// is in the spool (or held) until the server has it, and from then on the server hands
/// it out no more: minutes cover an answer that was under way. An hour's worth was
/// 60 000 runs (7 MiB) for an agent in a 1 000-agent mesh.
const KNOWN_RUN_KEEP: chrono::Duration = chrono::Duration::minutes(5);

/// How long one fetch of runs waits at the server (long poll) when none is due.
pub const FETCH_WAIT: Duration = Duration::from_secs(20);

/// How the server answered an upload it did not refuse for the operator to fix.
enum Delivery {
    Acknowledged,
    /// Refused for the result itself (status and message).
    Refused(String),
}

/// Whether an upload refused with `status` stays spooled (retried) rather than parked:
/// a bad or revoked token (401), a token of another agent (403) and a body over the
/// server's limit (413) are the operator's to fix, not the result's fault.
fn refusal_is_retried(status: u16) -> bool {
    matches!(status, 401 | 403 | 413)
}

/// Runs the agent until `shutdown` completes. Fails only on unrecoverable problems
/// (bad token, unusable spool, endpoint port taken); a server outage is waited out.
pub async fn run(options: AgentOptions, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let spool = Spool::open_with_quota(&options.spool_dir, options.spool_quota)?;
    let client = ServerClient::new(
        &options.server_urls,
        &options.token,
        options.ca_cert.as_deref(),
    )?;
    // Throughput tests at this agent's endpoint need the server's tickets; the key
    // arrives with the registration, and until then every test is refused.
    let tickets = Arc::new(TicketGate::new(&options.name));
    let endpoint = Endpoint::bind(EndpointConfig {
        listen: options.endpoint_listen,
        port: options.endpoint_port,
        iperf3_port: options.iperf3_port,
        // The fleet's schedule decides how much each peer tests; an hourly quota per
        // source would fail scheduled runs of a busy mesh.
        sources: SourceLimits {
            test_time_per_hour: None,
            ..SourceLimits::default()
        },
        tickets: Some(Arc::clone(&tickets)),
        ..EndpointConfig::default()
    })?;
    let endpoint_port = endpoint.local_addr().port();
    let iperf3_port = endpoint.iperf3_addr().map(|addr| addr.port());
    let advertise = if !options.advertise.is_empty() {
        options.advertise.clone()
    } else if let Some(ip) = options.endpoint_listen.filter(|ip| !ip.is_unspecified()) {
        vec![ip.to_string()]
    } else {
        // Replicas of one server are reached the same way: the first one's route.
        let first = &options.server_urls[0];
        let ip = route_source(first).ok_or_else(|| {
            anyhow::anyhow!("cannot tell which local address reaches {first}; pass --advertise")
        })?;
        vec![ip.to_string()]
    };
    let registration = AgentRegistration {
        name: options.name.clone(),
        addresses: advertise,
        endpoint_port,
        iperf3_port,
        tags: options.tags.clone(),
        capabilities: execute::capabilities(),
        accepts_inbound: options.accepts_inbound,
        version: Some(env!("CARGO_PKG_VERSION").to_string()),
    };

    let (stop, stopped) = watch::channel(false);
    let endpoint_task = {
        let mut stopped = stopped.clone();
        tokio::spawn(endpoint.run(async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }))
    };
    let hold = MemoryHold::new(options.memory_hold_bytes);
    let agent = Arc::new(AgentTasks {
        options,
        client,
        spool,
        hold,
        registration,
        tickets,
        trusted_keys: Mutex::new(Vec::new()),
        spooled: Notify::new(),
        next_round_ms: Mutex::new(None),
        known_runs: Mutex::new(HashMap::new()),
        prober: SharedProber::start()
            .map_err(|error| anyhow::anyhow!("starting the latency prober's thread: {error}"))?,
    });
    tracing::info!(agent = %agent.options.name, endpoint_port, "agent starting");

    let outcome = tokio::select! {
        result = agent.clone().serve(stopped.clone()) => result,
        _ = shutdown => Ok(()),
    };
    let _ = stop.send(true);
    let _ = endpoint_task.await;
    let held = agent.hold.run_ids();
    if !held.is_empty() {
        tracing::error!(
            "RESULT LOST: stopping with {} results held in memory (spool full, server unreachable): runs {}",
            held.len(),
            held.join(", ")
        );
    }
    outcome
}

struct AgentTasks {
    options: AgentOptions,
    client: ServerClient,
    spool: Spool,
    /// Results neither the spool nor the server could take yet.
    hold: MemoryHold,
    registration: AgentRegistration,
    /// The endpoint's ticket check; learns the server's keys at registration and from
    /// every heartbeat.
    tickets: Arc<TicketGate>,
    /// The keys `tickets` trusts (hex), to notice when the server's change.
    trusted_keys: Mutex<Vec<String>>,
    /// Signalled when a new result is in the spool.
    spooled: Notify,
    /// The server's pace from its last answer to a batch (see [`upload_round`]).
    next_round_ms: Mutex<Option<u64>>,
    /// Runs already accepted for execution, with their planned end (for pruning).
    known_runs: Mutex<HashMap<String, chrono::DateTime<Utc>>>,
    /// Runs the UDP latency runs, all on one thread (a dense mesh has hundreds open).
    prober: SharedProber,
}

impl AgentTasks {
    async fn serve(self: Arc<Self>, stopped: watch::Receiver<bool>) -> anyhow::Result<()> {
        self.register().await?;
        let uploader = tokio::spawn(self.clone().upload_loop());
        let heartbeat = tokio::spawn(self.clone().heartbeat_loop());
        let transfers = tokio::spawn(transfers::follow_plan(
            self.client.clone(),
            self.options.name.clone(),
        ));
        let fetched = self.clone().fetch_loop(stopped).await;
        uploader.abort();
        heartbeat.abort();
        transfers.abort();
        fetched
    }

    /// Registers, waiting out outages; a refusal (bad token, bad name) is fatal.
    async fn register(&self) -> anyhow::Result<()> {
        let mut backoff = Backoff::new();
        loop {
            match self.client.register(&self.registration).await {
                Ok(ack) => return self.trust_ticket_keys(&ack.trusted_keys()),
                Err(CallError::Refused { status, message }) => {
                    anyhow::bail!(
                        "server refused registration of '{}' ({status}): {message}",
                        self.registration.name
                    )
                }
                Err(error) => {
                    tracing::warn!("registration failed, retrying: {error}");
                    tokio::time::sleep(backoff.next()).await;
                }
            }
        }
    }

    /// Heartbeats, learning the server's ticket keys from each answer (how a key
    /// rotation reaches a running agent).
    async fn heartbeat_loop(self: Arc<Self>) {
        loop {
            tokio::time::sleep(self.options.heartbeat_interval).await;
            match self.client.heartbeat(&self.options.name).await {
                Ok(ack) if !ack.ticket_keys.is_empty() => {
                    if let Err(error) = self.trust_ticket_keys(&ack.ticket_keys) {
                        tracing::error!("{error}");
                    }
                }
                Ok(_) => {}
                // The server forgot us (a new database, with new keys): register again.
                Err(CallError::Refused { status: 404, .. }) => {
                    match self.client.register(&self.registration).await {
                        Ok(ack) => {
                            if let Err(error) = self.trust_ticket_keys(&ack.trusted_keys()) {
                                tracing::error!("{error}");
                            }
                        }
                        Err(error) => tracing::warn!("re-registration failed: {error}"),
                    }
                }
                Err(error) => tracing::warn!("heartbeat failed: {error}"),
            }
        }
    }

    /// Makes the endpoint accept tickets signed by `keys` (the server's public keys,
    /// hex) and no others, logging when they change.
    fn trust_ticket_keys(&self, keys: &[String]) -> anyhow::Result<()> {
        let mut trusted = self.trusted_keys.lock().expect("trusted keys lock");
        if *trusted == keys {
            return Ok(());
        }
        let verifier = TicketVerifier::from_hex_keys(keys.iter().map(String::as_str))
            .map_err(|error| anyhow::anyhow!("the server's {error}"))?;
        self.tickets.trust(verifier);
        tracing::info!(keys = %keys.join(","), "trusting the server's ticket keys");
        *trusted = keys.to_vec();
        Ok(())
    }

    /// Uploads everything in the spool, deleting each file once acknowledged. Rounds
    /// start at most [`UPLOAD_ROUND_S`] apart: a result after a quiet spell goes at
    /// once, and the results of a dense mesh, which finish every few milliseconds, go
    /// together rather than one request each. While the server's uploads queue it asks
    /// for longer rounds, and so fuller batches (see [`upload_round`]).
    async fn upload_loop(self: Arc<Self>) {
        let mut backoff = Backoff::new();
        loop {
            let round_began = tokio::time::Instant::now();
            let pause = match self.upload_pending().await {
                Ok(()) => {
                    backoff.reset();
                    Duration::from_secs(5)
                }
                Err(error) => {
                    tracing::warn!("upload paused: {error}");
                    backoff.next()
                }
            };
            tokio::select! {
                _ = self.spooled.notified() => {}
                _ = tokio::time::sleep(pause) => {}
            }
            let round = upload_round(*self.next_round_ms.lock().expect("pace lock"));
            tokio::time::sleep_until(round_began + round).await;
        }
    }

    /// Delivers what the memory hold keeps, then the spool, [`UPLOAD_BATCH`] results per
    /// request. A refusal that only the operator can fix (401 bad token, 403 wrong
    /// agent, 413 too large for the server's limit) keeps the result and pauses uploads
    /// with backoff, logging the error each time; a refusal of the result itself (any
    /// other 4xx) parks a spooled one under `rejected/`.
    async fn upload_pending(&self) -> anyhow::Result<()> {
        self.release_held().await?;
        for files in self.spool.pending_files()?.chunks(UPLOAD_BATCH) {
            let mut uploads = Vec::with_capacity(files.len());
            for path in files {
                match self.spool.read(path) {
                    Ok(upload) => uploads.push(upload),
                    Err(error @ spool::SpoolError::Corrupt { .. }) => {
                        tracing::error!("{error}");
                    }
                    // Gone meanwhile (uploaded by a direct upload, say).
                    Err(spool::SpoolError::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::NotFound => {}
                    Err(error) => return Err(error.into()),
                }
            }
            for (upload, delivery) in uploads.iter().zip(self.deliver_batch(&uploads).await?) {
                match delivery {
                    Delivery::Acknowledged => self.spool.remove(&upload.run_id)?,
                    Delivery::Refused(reason) => {
                        tracing::error!(run = %upload.run_id, %reason, "server refused a result; kept under rejected/");
                        self.spool.reject(&upload.run_id, &reason)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Uploads several results in one request; answers one delivery per upload. A
    /// refused batch (too large together, say, or one upload the server cannot read)
    /// is sent again one result at a time, so that each is answered on its own.
    async fn deliver_batch(&self, uploads: &[ResultUpload]) -> anyhow::Result<Vec<Delivery>> {
        if uploads.len() > 1 {
            match self.client.upload_batch(uploads).await {
                Ok(answer) if answer.results.len() == uploads.len() => {
                    *self.next_round_ms.lock().expect("pace lock") = answer.next_round_ms;
                    return Ok(answer
                        .results
                        .into_iter()
                        .map(|ack| match ack {
                            BatchItemAck::Stored(_) => Delivery::Acknowledged,
                            BatchItemAck::Refused { error, .. } => Delivery::Refused(error),
                        })
                        .collect());
                }
                Ok(answer) => anyhow::bail!(
                    "the server answered {} of {} uploads in a batch",
                    answer.results.len(),
                    uploads.len()
                ),
                Err(CallError::Refused { status, message }) => tracing::warn!(
                    status,
                    %message,
                    results = uploads.len(),
                    "server refused a batch upload; sending its results one at a time"
                ),
                Err(error) => return Err(error.into()),
            }
        }
        let mut deliveries = Vec::with_capacity(uploads.len());
        for upload in uploads {
            deliveries.push(self.deliver(upload).await?);
        }
        Ok(deliveries)
    }

    /// Moves results held in memory to the spool once it has room (durable again), or
    /// uploads them, oldest first.
    async fn release_held(&self) -> anyhow::Result<()> {
        while let Some(upload) = self.hold.oldest() {
            if self.spool.store(&upload).is_ok() {
                tracing::info!(run = %upload.run_id, "result held in memory is spooled now");
            } else {
                match self.deliver(&upload).await? {
                    Delivery::Acknowledged => {
                        tracing::info!(run = %upload.run_id, "result held in memory uploaded")
                    }
                    // No room on disk to park it: the log keeps it for the operator.
                    Delivery::Refused(reason) => tracing::error!(
                        run = %upload.run_id,
                        %reason,
                        result = %serde_json::to_string(&upload).unwrap_or_default(),
                        "server refused a result held in memory; dropped"
                    ),
                }
            }
            self.hold.remove(&upload.run_id);
        }
        Ok(())
    }

    /// Uploads one result. Errors are what pauses uploads: the server unreachable, or
    /// refusing for a reason the operator must fix.
    async fn deliver(&self, upload: &ResultUpload) -> anyhow::Result<Delivery> {
        match self.client.upload(upload).await {
            Ok(ack) => {
                tracing::debug!(run = %ack.run_id, duplicate = ack.duplicate, "result acknowledged");
                Ok(Delivery::Acknowledged)
            }
            Err(CallError::Refused { status, message }) if refusal_is_retried(status) => {
                tracing::error!(run = %upload.run_id, status, %message, "server refused a result for a reason the operator must fix; it is kept and retried");
                anyhow::bail!("server refused a result ({status}): {message}");
            }
            Err(CallError::Refused { status, message }) => {
                Ok(Delivery::Refused(format!("{status}: {message}")))
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Spools a finished run's result; when the spool is full or failing, uploads it
    /// directly instead, and with the server unreachable too holds it in memory until
    /// either has room (saying loudly if even the memory hold is full).
    async fn keep_result(&self, upload: ResultUpload) {
        let error = match self.spool.store(&upload) {
            Ok(()) => {
                self.spooled.notify_one();
                return;
            }
            Err(error) => error,
        };
        tracing::error!(run = %upload.run_id, "cannot spool result, uploading it directly: {error}");
        let upload_error = match self.client.upload(&upload).await {
            Ok(_) => {
                tracing::warn!(run = %upload.run_id, "result uploaded without spooling");
                return;
            }
            Err(upload_error) => upload_error,
        };
        let run_id = upload.run_id.clone();
        match self.hold.push(upload) {
            Ok(usage) => {
                tracing::warn!(
                    run = %run_id,
                    held_results = usage.results,
                    held_bytes = usage.bytes,
                    "result held in memory until the spool has room or the server answers ({upload_error})"
                );
                self.spooled.notify_one();
            }
            Err(full) => tracing::error!(
                run = %run_id,
                "RESULT LOST: not spooled ({error}), not uploaded ({upload_error}) and {full}"
            ),
        }
    }

    async fn fetch_loop(self: Arc<Self>, stopped: watch::Receiver<bool>) -> anyhow::Result<()> {
        let mut backoff = Backoff::new();
        // Ask for already-dispatched runs too at start and after any failed call: the
        // server may have handed runs out in an answer that never arrived.
        let mut resync = true;
        while !*stopped.borrow() {
            let fetched = self
                .client
                .fetch_runs(&self.options.name, FETCH_WAIT, self.options.horizon, resync)
                .await;
            resync = fetched.is_err();
            match fetched {
                Ok(runs) => {
                    backoff.reset();
                    for run in runs {
                        self.accept(run);
                    }
                }
                Err(CallError::Refused { status: 404, .. }) => self.register().await?,
                Err(CallError::Refused { status, message }) => {
                    anyhow::bail!("server refused to hand out runs ({status}): {message}")
                }
                Err(error) => {
                    tracing::warn!("fetching runs failed: {error}");
                    tokio::time::sleep(backoff.next()).await;
                }
            }
        }
        Ok(())
    }

    /// Measures `run`: a UDP latency run on the shared prober's thread beside the others
    /// in progress, any other run on a thread of its own.
    async fn measure(self: &Arc<Self>, run: &AssignedRun) -> ResultUpload {
        let name = &self.options.name;
        let Some(spec) = execute::shared_latency_spec(run) else {
            let (to_execute, agent) = (run.clone(), name.clone());
            return match tokio::task::spawn_blocking(move || execute::execute(&to_execute, &agent))
                .await
            {
                Ok(upload) => upload,
                Err(error) => execute::failed(run, name, format!("engine crashed: {error}")),
            };
        };
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let actual_start = Utc::now();
        let agent = self.clone();
        // Off the runtime's threads: resolving a host name blocks (an address does not).
        let submitted = tokio::task::spawn_blocking(move || {
            agent.prober.submit(spec, move |measured| {
                let _ = sender.send((measured, Utc::now()));
            })
        })
        .await;
        match (submitted, receiver.await) {
            (Ok(()), Ok((measured, actual_end))) => {
                execute::latency_upload(run, name, actual_start, actual_end, measured)
            }
            _ => execute::failed(
                run,
                name,
                "the latency prober stopped before the run ended".into(),
            ),
        }
    }

    /// Schedules a run for execution unless it is already scheduled or spooled.
    fn accept(self: &Arc<Self>, run: AssignedRun) {
        {
            let mut known = self.known_runs.lock().expect("known runs lock");
            let horizon = Utc::now() - KNOWN_RUN_KEEP;
            known.retain(|_, planned_end| *planned_end > horizon);
            if known.contains_key(&run.run_id)
                || self.spool.contains(&run.run_id)
                || self.hold.contains(&run.run_id)
            {
                return;
            }
            known.insert(run.run_id.clone(), run.planned_end);
        }
        let agent = self.clone();
        tokio::spawn(async move {
            let wait = (run.planned_start - Utc::now())
                .to_std()
                .unwrap_or_default();
            tokio::time::sleep(wait).await;
            let late = (Utc::now() - run.planned_start)
                .to_std()
                .unwrap_or_default();
            let upload = if late > agent.options.start_tolerance {
                execute::failed(
                    &run,
                    &agent.options.name,
                    format!("could not start the run until {:.1} s after its planned start; not started, to keep the schedule conflict-free", late.as_secs_f64()),
                )
            } else {
                // Boxed: a task waiting for its start (an agent in a dense mesh holds
                // hundreds) then holds the run, not room for the measurement's state.
                Box::pin(agent.measure(&run)).await
            };
            let overrun = (upload.actual_end - run.planned_end)
                .to_std()
                .unwrap_or_default();
            if overrun > Duration::ZERO {
                tracing::warn!(run = %run.run_id, overrun_s = overrun.as_secs_f64(), "run ended after its reservation");
            }
            tracing::debug!(run = %run.run_id, outcome = ?upload.outcome, "run finished");
            agent.keep_result(upload).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;
    use vantage_model::control::{ResultUpload, RunOutcome};

    use super::*;

    #[test]
    fn the_servers_pace_is_followed_within_the_agents_bounds() {
        assert_eq!(upload_round(None), Duration::from_secs(1));
        assert_eq!(upload_round(Some(5_000)), Duration::from_secs(5));
        // Never faster than the agent's own round, never past the longest.
        assert_eq!(upload_round(Some(0)), Duration::from_secs(1));
        assert_eq!(upload_round(Some(250)), Duration::from_secs(1));
        assert_eq!(upload_round(Some(3_600_000)), MAX_UPLOAD_ROUND);
        assert_eq!(upload_round(Some(u64::MAX)), MAX_UPLOAD_ROUND);
    }

    /// A small result (fixed times, so its size is too) for spool and hold tests.
    pub(crate) fn failed_upload(run_id: &str) -> ResultUpload {
        ResultUpload {
            run_id: run_id.into(),
            agent: "a".into(),
            outcome: RunOutcome::Failed,
            actual_start: DateTime::UNIX_EPOCH,
            actual_end: DateTime::UNIX_EPOCH,
            result: None,
            error: Some("x".into()),
        }
    }
}
