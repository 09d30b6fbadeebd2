//! Path-change detection over the fleet: each stored trace is compared with the
//! previous trace of the same client and server. Flow-stable probes (Paris
//! traceroute, Augustin et al., IMC 2006) make two traces of one pair comparable hop
//! by hop; `vantage_model::trace::compare_paths` decides. The result gets the derived
//! metric `path_changed` (0 or 1; queryable as a series and in `/metrics`), and a
//! change raises a warning alert naming the first differing hop and the addresses.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use vantage_model::kinds::trace::{KIND as TRACE, PATH_CHANGED};
use vantage_model::trace::{compare_paths, PathComparison, TraceResult};

use crate::archive::{to_us, Archive, ArchiveError};
use crate::events::{Alert, EventBus};
use crate::ingest::{NewResult, ResultConsumer};

pub struct PathChanges {
    pub archive: Archive,
    pub events: Arc<EventBus>,
}

impl ResultConsumer for PathChanges {
    fn name(&self) -> &'static str {
        "path_changes"
    }

    fn consume<'a>(&'a self, result: &'a NewResult<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if result.run.test != TRACE.name {
                return;
            }
            if let Err(error) = self.compare(result).await {
                tracing::warn!(run_id = %result.run.id, "path comparison failed: {error}");
            }
        })
    }
}

impl PathChanges {
    async fn compare(&self, result: &NewResult<'_>) -> Result<(), ArchiveError> {
        let Some(current) = result
            .upload
            .result
            .as_ref()
            .and_then(|document| TraceResult::deserialize(document).ok())
        else {
            return Ok(());
        };
        let (run, start_us) = (result.run, to_us(result.upload.actual_start));
        let previous = self
            .archive
            .previous_result(&run.client, &run.server, &run.test, start_us)
            .await?;
        // The first trace of a pair has nothing to differ from: no value, not a 0.
        let Some((previous_run, previous)) = previous.and_then(|(id, document)| {
            Some((id, serde_json::from_value::<TraceResult>(document).ok()?))
        }) else {
            return Ok(());
        };
        let comparison = compare_paths(&previous, &current);
        self.archive
            .add_metric(
                run,
                PATH_CHANGED.name,
                f64::from(u8::from(comparison.changed)),
            )
            .await?;
        if comparison.changed {
            crate::alerts::raise(
                &self.archive,
                &self.events,
                Alert {
                    severity: "warning".into(),
                    message: describe(
                        &run.client,
                        &run.server,
                        &previous_run,
                        &run.id,
                        &comparison,
                    ),
                    agents: vec![run.client.clone(), run.server.clone()],
                    tags: std::collections::BTreeMap::from([(
                        "change".to_string(),
                        "path".to_string(),
                    )]),
                    time: result.upload.actual_end,
                },
            )
            .await?;
        }
        Ok(())
    }
}

fn describe(
    client: &str,
    server: &str,
    previous_run: &str,
    run: &str,
    comparison: &PathComparison,
) -> String {
    let list = |addresses: &[String]| {
        if addresses.is_empty() {
            "none".to_string()
        } else {
            addresses.join(", ")
        }
    };
    let hop = comparison
        .first_difference_ttl
        .map_or_else(|| "?".to_string(), |ttl| ttl.to_string());
    let distance =
        |ttl: Option<u8>| ttl.map_or_else(|| "not reached".to_string(), |t| t.to_string());
    format!(
        "path {client} -> {server} changed at hop {hop} (run {run}, previous {previous_run}): added {}; removed {}; destination at hop {} (was {})",
        list(&comparison.added),
        list(&comparison.removed),
        distance(comparison.current_destination_ttl),
        distance(comparison.previous_destination_ttl),
    )
}
