//! Result ingest: check and store each upload exactly once (the archive), then hand
//! every newly stored result to a list of consumers — the event bus, the file and
//! HTTP archivers, and analyses — in the order they were registered. A duplicate
//! upload reaches no consumer.

use futures_util::future::BoxFuture;
use vantage_model::control::ResultUpload;

use std::collections::BTreeMap;
use std::sync::Arc;

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
}

impl IngestPipeline {
    pub fn new(archive: Archive, consumers: Vec<Box<dyn ResultConsumer>>) -> IngestPipeline {
        IngestPipeline {
            archive,
            consumers,
            slots: Arc::new(Semaphore::new(INGEST_SLOTS)),
        }
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
