//! Archivers besides the server's own archive (pScheduler's vocabulary): every newly
//! stored result is also appended to a file (`file`: one JSON document per line) or
//! POSTed as JSON (`http`), as its task's `archivers` list says.
//!
//! Delivery runs off the request path, on one background task fed by a bounded queue,
//! so a slow HTTP receiver never slows result uploads. The archive stays the system of
//! record: a delivery that fails after its retries (or that finds the queue full) is
//! counted per archiver (`/metrics`, `vantage_archiver_deliveries_total`) and logged;
//! the result itself is never lost.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch, Semaphore};
use vantage_model::config::{ArchiverTarget, ValidatedConfig};

use crate::archive::{Archive, StoredResult};
use crate::ingest::{NewResult, ResultConsumer};

/// Results waiting for delivery; beyond this they are counted as dropped.
const QUEUE_CAPACITY: usize = 10_000;
/// HTTP deliveries in flight at once.
const HTTP_CONCURRENCY: usize = 16;
/// HTTP attempts per result (then it counts as failed), with doubling pauses.
const HTTP_ATTEMPTS: u32 = 3;
const HTTP_FIRST_RETRY: Duration = Duration::from_millis(500);
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the worker reuses the applied configuration before reading it again.
const CONFIG_REFRESH: Duration = Duration::from_secs(2);

/// One stored result on its way to its task's archivers.
#[derive(Debug)]
pub struct Delivery {
    pub task: String,
    /// The stored result with its raw document.
    pub result: StoredResult,
}

/// Per-archiver delivery counts since the server started.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeliveryCounts {
    pub delivered: u64,
    pub failed: u64,
    /// Not attempted: the queue was full.
    pub dropped: u64,
}

/// The sending side: an ingest consumer, and the counts `/metrics` reports.
#[derive(Clone)]
pub struct ArchiverQueue {
    sender: mpsc::Sender<Delivery>,
    counts: Arc<Mutex<BTreeMap<String, DeliveryCounts>>>,
}

impl ArchiverQueue {
    pub fn new() -> (ArchiverQueue, mpsc::Receiver<Delivery>) {
        let (sender, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let queue = ArchiverQueue {
            sender,
            counts: Arc::default(),
        };
        (queue, receiver)
    }

    /// Queues a delivery without waiting; a full queue counts it as dropped.
    pub fn offer(&self, delivery: Delivery) {
        if let Err(mpsc::error::TrySendError::Full(delivery)) = self.sender.try_send(delivery) {
            tracing::warn!(
                run_id = %delivery.result.run_id,
                "archiver queue full ({QUEUE_CAPACITY}); result not delivered to archivers"
            );
            record(&self.counts, "(queue)", |c| c.dropped += 1);
        }
    }

    pub fn counts(&self) -> BTreeMap<String, DeliveryCounts> {
        self.counts.lock().expect("archiver counts lock").clone()
    }
}

/// Each newly stored result is queued for its task's file and HTTP archivers.
impl ResultConsumer for ArchiverQueue {
    fn name(&self) -> &'static str {
        "archivers"
    }

    fn consume<'a>(&'a self, result: &'a NewResult<'a>) -> BoxFuture<'a, ()> {
        self.offer(Delivery {
            task: result.run.task.clone(),
            result: StoredResult {
                result: result.upload.result.clone(),
                ..result.summary.clone()
            },
        });
        Box::pin(std::future::ready(()))
    }
}

fn record(
    counts: &Mutex<BTreeMap<String, DeliveryCounts>>,
    archiver: &str,
    update: impl FnOnce(&mut DeliveryCounts),
) {
    update(
        counts
            .lock()
            .expect("archiver counts lock")
            .entry(archiver.to_string())
            .or_default(),
    );
}

/// Delivers queued results until `stopped` turns true.
/// The receiver is shared so that a restarted worker (after a panic) takes it over.
pub async fn run(
    archive: Archive,
    queue: ArchiverQueue,
    receiver: Arc<tokio::sync::Mutex<mpsc::Receiver<Delivery>>>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut receiver = receiver.lock().await;
    let http = reqwest::Client::builder()
        .timeout(HTTP_TIMEOUT)
        .build()
        .expect("an HTTP client with a timeout builds");
    let http_slots = Arc::new(Semaphore::new(HTTP_CONCURRENCY));
    let mut config: Option<(Instant, Option<ValidatedConfig>)> = None;
    loop {
        let delivery = tokio::select! {
            delivery = receiver.recv() => match delivery {
                Some(delivery) => delivery,
                None => return,
            },
            _ = stopped.wait_for(|stop| *stop) => return,
        };
        if config
            .as_ref()
            .is_none_or(|(read_at, _)| read_at.elapsed() >= CONFIG_REFRESH)
        {
            let current = match crate::config_store::current(&archive).await {
                Ok(current) => current.map(|(_, validated)| validated),
                Err(error) => {
                    tracing::warn!("archivers cannot read the configuration: {error}");
                    None
                }
            };
            config = Some((Instant::now(), current));
        }
        let Some((_, Some(validated))) = &config else {
            continue;
        };
        // On-demand runs and runs of tasks since removed have no archivers here.
        let Some(task) = validated.tasks.iter().find(|t| t.name == delivery.task) else {
            continue;
        };
        // The server's own archive already holds the result: only file and http
        // archivers need the document.
        let targets: Vec<_> = task
            .archivers
            .iter()
            .filter_map(|name| validated.archivers.iter().find(|a| &a.name == name))
            .filter(|archiver| archiver.target != ArchiverTarget::Database)
            .collect();
        if targets.is_empty() {
            continue;
        }
        let document = match serde_json::to_vec(&delivery.result) {
            Ok(document) => Bytes::from(document),
            Err(error) => {
                tracing::error!("cannot serialise result for archivers: {error}");
                continue;
            }
        };
        for archiver in targets {
            let name = &archiver.name;
            match &archiver.target {
                ArchiverTarget::Database => {} // filtered out above
                ArchiverTarget::File { path } => {
                    let outcome = append_line(path, &document).await;
                    finish(&queue, name, &delivery.result.run_id, outcome);
                }
                ArchiverTarget::Http { url } => {
                    let Ok(slot) = Arc::clone(&http_slots).acquire_owned().await else {
                        return;
                    };
                    let (queue, http, url, name, document) = (
                        queue.clone(),
                        http.clone(),
                        url.clone(),
                        name.clone(),
                        document.clone(),
                    );
                    let run_id = delivery.result.run_id.clone();
                    tokio::spawn(async move {
                        let outcome = post_with_retries(&http, &url, document).await;
                        finish(&queue, &name, &run_id, outcome);
                        drop(slot);
                    });
                }
            }
        }
    }
}

fn finish(queue: &ArchiverQueue, archiver: &str, run_id: &str, outcome: Result<(), String>) {
    match outcome {
        Ok(()) => record(&queue.counts, archiver, |c| c.delivered += 1),
        Err(error) => {
            tracing::warn!(archiver, run_id, "archiver delivery failed: {error}");
            record(&queue.counts, archiver, |c| c.failed += 1);
        }
    }
}

async fn append_line(path: &str, document: &[u8]) -> Result<(), String> {
    let mut file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .await
        .map_err(|error| format!("opening {path}: {error}"))?;
    // One write per line: O_APPEND keeps concurrent writers' lines whole.
    let mut line = Vec::with_capacity(document.len() + 1);
    line.extend_from_slice(document);
    line.push(b'\n');
    file.write_all(&line)
        .await
        .map_err(|error| format!("writing {path}: {error}"))
}

async fn post_with_retries(
    http: &reqwest::Client,
    url: &str,
    document: Bytes,
) -> Result<(), String> {
    let mut pause = HTTP_FIRST_RETRY;
    let mut last_error = String::new();
    for attempt in 1..=HTTP_ATTEMPTS {
        let sent = http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(document.clone())
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => return Ok(()),
            // A client error will not change on retry.
            Ok(response) if response.status().is_client_error() => {
                return Err(format!("POST {url}: HTTP {}", response.status()))
            }
            Ok(response) => last_error = format!("POST {url}: HTTP {}", response.status()),
            Err(error) => last_error = format!("POST {url}: {error}"),
        }
        if attempt < HTTP_ATTEMPTS {
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
    }
    Err(format!("{last_error} (after {HTTP_ATTEMPTS} attempts)"))
}
