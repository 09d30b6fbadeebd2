//! Archivers besides the server's own archive (pScheduler's vocabulary): every newly
//! stored result is also appended to a file (`file`: one JSON document per line) or
//! POSTed as JSON (`http`), as its task's `archivers` list says.
//!
//! Deliveries go through a durable outbox in the archive (`archiver_outbox`): the
//! ingest consumer queues one row per result and archiver, and a background worker
//! delivers them off the request path, so a slow HTTP receiver never slows uploads.
//! A row is removed once its delivery succeeded; a failed one is retried with backoff
//! (1 s doubling to 5 min) for up to a day, across server restarts, and then given up
//! and counted. Delivery is at least once: a crash between a delivery and the removal
//! of its row repeats it, so receivers should key documents by `run_id`. Counts per
//! archiver are exported in `/metrics` (`vantage_archiver_deliveries_total`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::sync::{watch, Notify};
use vantage_model::config::ArchiverTarget;

use crate::archive::{now_us, Archive, OutboxEntry};
use crate::config_store::CachedConfig;
use crate::ingest::{NewResult, ResultConsumer};

/// HTTP deliveries in flight at once.
const HTTP_CONCURRENCY: usize = 16;
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed attempt, doubling per attempt up to [`LONGEST_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LONGEST_RETRY: Duration = Duration::from_secs(300);
/// A delivery still failing this long after its result was stored is given up.
const GIVE_UP_AFTER: Duration = Duration::from_secs(24 * 3600);
/// Deliveries read from the outbox per pass.
const BATCH: i64 = 256;
/// The worker looks at the outbox at least this often (retries fall due).
const IDLE_POLL: Duration = Duration::from_secs(1);
/// The name counts use when a delivery could not even be queued.
const OUTBOX: &str = "(outbox)";

/// Per-archiver delivery counts since the server started.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeliveryCounts {
    pub delivered: u64,
    /// Failed attempts (each is retried until the delivery is given up).
    pub failed: u64,
    /// Deliveries abandoned: a day of failures, a receiver's 4xx, a result or
    /// archiver no longer there, or a queueing error.
    pub given_up: u64,
}

/// The queueing side (an ingest consumer) and the counts `/metrics` reports; the
/// worker ([`run`]) shares it.
#[derive(Clone)]
pub struct ArchiverQueue {
    archive: Archive,
    counts: Arc<Mutex<BTreeMap<String, DeliveryCounts>>>,
    queued: Arc<Notify>,
    config: CachedConfig,
}

impl ArchiverQueue {
    pub fn new(archive: Archive) -> ArchiverQueue {
        ArchiverQueue {
            config: CachedConfig::new(archive.clone()),
            archive,
            counts: Arc::default(),
            queued: Arc::default(),
        }
    }

    pub fn counts(&self) -> BTreeMap<String, DeliveryCounts> {
        self.counts.lock().expect("archiver counts lock").clone()
    }

    fn record(&self, archiver: &str, update: impl FnOnce(&mut DeliveryCounts)) {
        update(
            self.counts
                .lock()
                .expect("archiver counts lock")
                .entry(archiver.to_string())
                .or_default(),
        );
    }
}

/// Each newly stored result is queued for its task's file and HTTP archivers.
impl ResultConsumer for ArchiverQueue {
    fn name(&self) -> &'static str {
        "archivers"
    }

    fn consume<'a>(&'a self, result: &'a NewResult<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some(config) = self.config.get().await else {
                return;
            };
            // On-demand runs and runs of tasks since removed have no archivers here;
            // the archive itself already holds every result.
            let Some(task) = config.tasks.iter().find(|t| t.name == result.run.task) else {
                return;
            };
            let archivers: Vec<String> = task
                .archivers
                .iter()
                .filter(|name| {
                    config.archivers.iter().any(|archiver| {
                        &&archiver.name == name && archiver.target != ArchiverTarget::Database
                    })
                })
                .cloned()
                .collect();
            if archivers.is_empty() {
                return;
            }
            match self
                .archive
                .enqueue_deliveries(&result.summary.run_id, &archivers)
                .await
            {
                Ok(()) => self.queued.notify_one(),
                Err(error) => {
                    tracing::error!(
                        run_id = %result.summary.run_id,
                        "cannot queue archiver deliveries: {error}"
                    );
                    self.record(OUTBOX, |c| c.given_up += 1);
                }
            }
        })
    }
}

/// Delivers queued results until `stopped` turns true; a restarted worker (after a
/// panic or a server restart) resumes from the outbox.
pub async fn run(queue: ArchiverQueue, mut stopped: watch::Receiver<bool>) {
    let http = reqwest::Client::builder()
        .timeout(HTTP_TIMEOUT)
        .build()
        .expect("an HTTP client with a timeout builds");
    loop {
        let due = match queue.archive.due_deliveries(now_us(), BATCH).await {
            Ok(due) => due,
            Err(error) => {
                tracing::warn!("archivers cannot read the outbox: {error}");
                Vec::new()
            }
        };
        if due.is_empty() {
            tokio::select! {
                _ = queue.queued.notified() => {}
                _ = tokio::time::sleep(IDLE_POLL) => {}
                _ = stopped.wait_for(|stop| *stop) => return,
            }
            continue;
        }
        // Stopping mid-batch is safe: unfinished deliveries stay in the outbox.
        tokio::select! {
            _ = deliver_batch(&queue, &http, due) => {}
            _ = stopped.wait_for(|stop| *stop) => return,
        }
    }
}

/// File deliveries one at a time (a file's lines stay in result order), HTTP ones
/// concurrently.
async fn deliver_batch(queue: &ArchiverQueue, http: &reqwest::Client, due: Vec<OutboxEntry>) {
    let config = queue.config.get().await;
    let mut posts = Vec::new();
    for entry in due {
        let target = config.as_ref().and_then(|config| {
            config
                .archivers
                .iter()
                .find(|archiver| archiver.name == entry.archiver)
                .map(|archiver| archiver.target.clone())
        });
        match target {
            Some(ArchiverTarget::Http { url }) => posts.push((entry, url)),
            Some(ArchiverTarget::File { path }) => {
                let outcome = match document(queue, &entry).await {
                    Ok(document) => append_line(&path, &document).await.map_err(Failure::Retry),
                    Err(failure) => Err(failure),
                };
                finish(queue, &entry, outcome).await;
            }
            Some(ArchiverTarget::Database) | None => {
                let reason = "the archiver is no longer configured".to_string();
                finish(queue, &entry, Err(Failure::GiveUp(reason))).await;
            }
        }
    }
    futures_util::stream::iter(posts)
        .for_each_concurrent(HTTP_CONCURRENCY, |(entry, url)| async move {
            let outcome = match document(queue, &entry).await {
                Ok(document) => post(http, &url, document).await,
                Err(failure) => Err(failure),
            };
            finish(queue, &entry, outcome).await;
        })
        .await;
}

/// Why an attempt failed, and whether another could succeed.
enum Failure {
    Retry(String),
    GiveUp(String),
}

/// The stored result with its raw document, as archivers receive it.
async fn document(queue: &ArchiverQueue, entry: &OutboxEntry) -> Result<Bytes, Failure> {
    match queue.archive.stored_result(&entry.run_id).await {
        Ok(Some(result)) => serde_json::to_vec(&result)
            .map(Bytes::from)
            .map_err(|error| Failure::GiveUp(format!("cannot serialise the result: {error}"))),
        // Retention removed it while its delivery waited.
        Ok(None) => Err(Failure::GiveUp("the result is no longer stored".into())),
        Err(error) => Err(Failure::Retry(error.to_string())),
    }
}

async fn finish(queue: &ArchiverQueue, entry: &OutboxEntry, outcome: Result<(), Failure>) {
    let archiver = entry.archiver.as_str();
    let run_id = entry.run_id.as_str();
    let stored = match outcome {
        Ok(()) => {
            queue.record(archiver, |c| c.delivered += 1);
            queue.archive.delivery_finished(run_id, archiver).await
        }
        Err(Failure::Retry(error)) => {
            queue.record(archiver, |c| c.failed += 1);
            let age =
                Duration::from_micros(u64::try_from(now_us() - entry.created_us).unwrap_or(0));
            if age >= GIVE_UP_AFTER {
                tracing::error!(
                    archiver,
                    run_id,
                    "archiver delivery given up after {} attempts: {error}",
                    entry.attempts + 1
                );
                queue.record(archiver, |c| c.given_up += 1);
                queue.archive.delivery_finished(run_id, archiver).await
            } else {
                let pause = retry_pause(entry.attempts);
                tracing::warn!(
                    archiver,
                    run_id,
                    "archiver delivery failed, retrying in {pause:?}: {error}"
                );
                let next_attempt_us =
                    now_us() + i64::try_from(pause.as_micros()).unwrap_or(i64::MAX);
                queue
                    .archive
                    .delivery_failed(entry, next_attempt_us, &error)
                    .await
            }
        }
        Err(Failure::GiveUp(reason)) => {
            tracing::error!(archiver, run_id, "archiver delivery given up: {reason}");
            queue.record(archiver, |c| c.given_up += 1);
            queue.archive.delivery_finished(run_id, archiver).await
        }
    };
    if let Err(error) = stored {
        // The row stays as it was: the delivery is attempted again.
        tracing::warn!(
            archiver,
            run_id,
            "archivers cannot update the outbox: {error}"
        );
    }
}

/// The pause after `attempts` failed attempts: 1 s doubling, at most 5 min.
fn retry_pause(attempts: i64) -> Duration {
    let doublings = u32::try_from(attempts.clamp(0, 16)).unwrap_or(16);
    (FIRST_RETRY * 2u32.pow(doublings)).min(LONGEST_RETRY)
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

async fn post(http: &reqwest::Client, url: &str, document: Bytes) -> Result<(), Failure> {
    let sent = http
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(document)
        .send()
        .await;
    match sent {
        Ok(response) if response.status().is_success() => Ok(()),
        // A client error will not change on retry (but a timeout or a rate limit may).
        Ok(response)
            if response.status().is_client_error()
                && !matches!(response.status().as_u16(), 408 | 429) =>
        {
            Err(Failure::GiveUp(format!(
                "POST {url}: HTTP {}",
                response.status()
            )))
        }
        Ok(response) => Err(Failure::Retry(format!(
            "POST {url}: HTTP {}",
            response.status()
        ))),
        Err(error) => Err(Failure::Retry(format!("POST {url}: {error}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_from_a_second_to_five_minutes() {
        let pauses: Vec<u64> = (0..12).map(|n| retry_pause(n).as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(retry_pause(i64::MAX), LONGEST_RETRY);
    }
}
