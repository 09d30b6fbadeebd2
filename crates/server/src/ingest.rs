//! Result ingest: check and store each upload exactly once (the archive), then hand
//! every newly stored result to a list of consumers — the event bus, the file and
//! HTTP archivers, and analyses — in the order they were registered. A duplicate
//! upload reaches no consumer.

use futures_util::future::BoxFuture;
use vantage_model::control::ResultUpload;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::archive::{Archive, ArchiveError, Ingest, IngestOutcome, RunRecord, StoredResult};

/// A result that was just stored, as consumers see it.
pub struct NewResult<'a> {
    pub run: &'a RunRecord,
    pub upload: &'a ResultUpload,
    /// The stored row with its summary metrics, without the raw document (that is
    /// `upload.result`).
    pub summary: StoredResult,
}

/// Something that acts on every newly stored result (Vector's sinks are the model:
/// registered by name, each with its own state).
pub trait ResultConsumer: Send + Sync {
    fn name(&self) -> &'static str;
    /// Must not fail the ingest: a consumer logs its own problems.
    fn consume<'a>(&'a self, result: &'a NewResult<'a>) -> BoxFuture<'a, ()>;
}

/// Uploads read and stored at once; later ones wait, unread, for one of them to end
/// (see [`IngestPipeline::admit`]).
pub const INGEST_SLOTS: usize = 64;

pub struct IngestPipeline {
    archive: Archive,
    consumers: Vec<Box<dyn ResultConsumer>>,
    slots: Arc<Semaphore>,
    backlog: Mutex<Backlog>,
}

/// How long a backlog measured while every ingest slot was taken is taken as current.
const BACKLOG_FRESH: Duration = Duration::from_secs(10);

/// The upload round agents are asked to keep while uploads queue (see
/// [`IngestPipeline::upload_round`]): five times the agent's own second, so a dense
/// mesh's results come in a fifth as many requests.
pub const QUEUED_UPLOAD_ROUND: Duration = Duration::from_secs(5);

/// How long batches must keep being stored with every slot taken before agents are
/// paced: a fleet's agents start their rounds on the same second, and 100 of them
/// take the 64 slots for a moment every second without falling behind.
const PACE_AFTER_SATURATED: Duration = Duration::from_secs(5);

/// How long agents keep being asked for [`QUEUED_UPLOAD_ROUND`] after uploads last
/// queued: fewer, fuller batches are what let the archive keep up, and asking for them
/// only while every slot is taken would switch a fleet back to one-second rounds, and
/// into the queue again, as soon as it caught up.
const PACING_HOLD: Duration = Duration::from_secs(30);

/// How far behind its uploads the pipeline is (see [`IngestPipeline::backlog`]).
#[derive(Debug, Default)]
pub struct Backlog {
    /// When it was last measured behind, and by how much.
    behind: Option<(Instant, Duration)>,
    /// Since when every batch stored found every slot taken.
    saturated_since: Option<Instant>,
    /// When a batch was last stored after [`PACE_AFTER_SATURATED`] of them had been.
    paced_at: Option<Instant>,
}

impl Backlog {
    /// After a batch is stored: `lags`, each stored result's time from its measured
    /// end to now, count only while `saturated` (uploads were waiting for a slot).
    pub fn record(&mut self, saturated: bool, lags: &mut [Duration], at: Instant) {
        if !saturated {
            self.behind = None;
            self.saturated_since = None;
            return;
        }
        let since = *self.saturated_since.get_or_insert(at);
        if at.saturating_duration_since(since) >= PACE_AFTER_SATURATED {
            self.paced_at = Some(at);
        }
        if !lags.is_empty() {
            let middle = lags.len() / 2;
            let (_, median, _) = lags.select_nth_unstable(middle);
            self.behind = Some((at, *median));
        }
    }

    /// The backlog as of `now`: none once [`BACKLOG_FRESH`] has passed without a
    /// saturated batch.
    pub fn behind(&self, now: Instant) -> Duration {
        match self.behind {
            Some((at, lag)) if now.saturating_duration_since(at) < BACKLOG_FRESH => lag,
            _ => Duration::ZERO,
        }
    }

    /// The round agents are asked to keep as of `now`: [`QUEUED_UPLOAD_ROUND`] within
    /// [`PACING_HOLD`] of a batch stored after [`PACE_AFTER_SATURATED`] of batches
    /// finding every slot taken, none otherwise.
    pub fn upload_round(&self, now: Instant) -> Option<Duration> {
        self.paced_at
            .filter(|&at| now.saturating_duration_since(at) < PACING_HOLD)
            .map(|_| QUEUED_UPLOAD_ROUND)
    }
}

impl IngestPipeline {
    pub fn new(archive: Archive, consumers: Vec<Box<dyn ResultConsumer>>) -> IngestPipeline {
        IngestPipeline {
            archive,
            consumers,
            slots: Arc::new(Semaphore::new(INGEST_SLOTS)),
            backlog: Mutex::new(Backlog::default()),
        }
    }

    /// How long results wait to be stored while uploads queue for the archive: the
    /// median time from a run's measured end to its result's storing in the latest batch
    /// stored while every ingest slot was taken; zero when uploads do not queue. The
    /// planner waits this much longer before it records a run missed: a fleet whose
    /// results queued past the miss grace had each of them stored as missed first and
    /// then completed, two writes instead of one, and fell further behind for good.
    pub fn backlog(&self) -> Duration {
        self.backlog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .behind(Instant::now())
    }

    /// The least time between an agent's upload rounds the server asks for in its
    /// answers to batch uploads: once uploads have queued for the archive for a while
    /// (and for a while after), [`QUEUED_UPLOAD_ROUND`]. An upload's fixed costs (its
    /// request, its reads of the runs it names, its place in a group commit) are paid
    /// per request however few results it carries: a thousand agents each sending a
    /// second's results, some 25, spent them a thousand times a second.
    pub fn upload_round(&self) -> Option<Duration> {
        self.backlog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .upload_round(Instant::now())
    }

    /// Waits for one of the [`INGEST_SLOTS`], in arrival order, before an upload's body
    /// is read. A fleet that uploads faster than the archive stores then waits with its
    /// bodies unread in the connections rather than parsed in the server's memory: a
    /// thousand agents' uploads of 200 results each, all parsed and queued for the
    /// writer, took the server past 3 GiB.
    pub async fn admit(&self) -> OwnedSemaphorePermit {
        Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .expect("the ingest slots are never closed")
    }

    pub fn consumer_names(&self) -> Vec<&'static str> {
        self.consumers
            .iter()
            .map(|consumer| consumer.name())
            .collect()
    }

    /// Stores a batch in one transaction, then fans the new results out; each
    /// element answers one upload.
    pub async fn ingest(
        &self,
        uploads: &[ResultUpload],
    ) -> Result<Vec<IngestOutcome>, ArchiveError> {
        let outcomes = self.archive.ingest_batch(uploads).await?;
        // This upload holds a slot itself: none free means others wait. Lags are
        // measured only then.
        let saturated = self.slots.available_permits() == 0;
        let mut lags: Vec<Duration> = Vec::new();
        if saturated {
            let now = chrono::Utc::now();
            lags.extend(
                uploads
                    .iter()
                    .zip(&outcomes)
                    .filter(|(_, outcome)| matches!(outcome, Ok((Ingest::Stored(_), _))))
                    .map(|(upload, _)| (now - upload.actual_end).to_std().unwrap_or_default()),
            );
        }
        self.backlog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .record(saturated, &mut lags, Instant::now());
        for (upload, outcome) in uploads.iter().zip(&outcomes) {
            if let Ok((Ingest::Stored(metrics), run)) = outcome {
                let new = NewResult {
                    run,
                    upload,
                    summary: summary(run, upload, metrics),
                };
                for consumer in &self.consumers {
                    consumer.consume(&new).await;
                }
            }
        }
        Ok(outcomes)
    }
}

fn summary(
    run: &RunRecord,
    upload: &ResultUpload,
    metrics: &BTreeMap<String, f64>,
) -> StoredResult {
    StoredResult {
        run_id: run.id.clone(),
        test: run.test.clone(),
        client: run.client.clone(),
        server: run.server.clone(),
        start_time: upload.actual_start,
        end_time: upload.actual_end,
        outcome: run.state.as_str().to_string(),
        error: upload.error.clone(),
        metrics: metrics.clone(),
        result: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seconds(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|&s| Duration::from_secs(s)).collect()
    }

    #[test]
    fn a_backlog_is_the_median_lag_of_a_batch_stored_while_uploads_queue() {
        let at = Instant::now();
        let mut backlog = Backlog::default();
        backlog.record(true, &mut seconds(&[40, 2, 9, 11, 10]), at);
        assert_eq!(backlog.behind(at), Duration::from_secs(10));
        // Still current within BACKLOG_FRESH, gone after it.
        assert_eq!(
            backlog.behind(at + Duration::from_secs(9)),
            Duration::from_secs(10)
        );
        assert_eq!(backlog.behind(at + BACKLOG_FRESH), Duration::ZERO);
        // A batch that stored nothing keeps the last measure.
        backlog.record(true, &mut [], at);
        assert_eq!(backlog.behind(at), Duration::from_secs(10));
    }

    #[test]
    fn agents_are_paced_once_uploads_queue_for_a_while_until_the_hold_passes() {
        let at = Instant::now();
        let later = |ms: u64| at + Duration::from_millis(ms);
        let mut backlog = Backlog::default();
        // Never saturated: no pace, however long the lags.
        backlog.record(false, &mut seconds(&[300]), at);
        assert_eq!(backlog.upload_round(at), None);
        // Saturated for a moment, then a free slot: a burst, not a queue.
        backlog.record(true, &mut [], at);
        backlog.record(true, &mut [], later(4_999));
        assert_eq!(backlog.upload_round(later(4_999)), None);
        backlog.record(false, &mut [], later(5_000));
        backlog.record(true, &mut [], later(6_000));
        assert_eq!(backlog.upload_round(later(6_000)), None);
        // Saturated throughout PACE_AFTER_SATURATED, even by batches storing nothing new.
        backlog.record(true, &mut [], later(11_000));
        let paced = later(11_000);
        assert_eq!(backlog.upload_round(paced), Some(QUEUED_UPLOAD_ROUND));
        // A batch that finds a free slot ends the backlog at once, not the pace.
        backlog.record(false, &mut seconds(&[1]), later(12_000));
        assert_eq!(backlog.behind(later(12_000)), Duration::ZERO);
        assert_eq!(
            backlog.upload_round(paced + PACING_HOLD - Duration::from_millis(1)),
            Some(QUEUED_UPLOAD_ROUND)
        );
        assert_eq!(backlog.upload_round(paced + PACING_HOLD), None);
    }

    #[test]
    fn results_stored_without_queueing_are_no_backlog_however_old() {
        let at = Instant::now();
        let mut backlog = Backlog::default();
        // An agent's spool of last week, uploaded to an idle server.
        backlog.record(false, &mut seconds(&[604_800, 604_700]), at);
        assert_eq!(backlog.behind(at), Duration::ZERO);
        // And a server that caught up forgets its backlog at once.
        backlog.record(true, &mut seconds(&[30]), at);
        backlog.record(false, &mut seconds(&[1]), at);
        assert_eq!(backlog.behind(at), Duration::ZERO);
    }
}
