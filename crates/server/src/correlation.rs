//! App–network correlation over the archive: an app metric (matched by name and
//! tags) against a kind metric of one agent pair, Pearson and Spearman at each lag
//! of a window (`vantage_analysis::correlation`). [`correlate`] answers
//! `GET /api/v1/correlate`; [`watch`] recomputes it for a subscriber whenever new
//! data of either series arrives ("subscribe returns correlated data").

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use serde::Serialize;
use tokio::sync::broadcast::error::RecvError;
use vantage_analysis::correlation::{
    self, Correlation, CorrelationError, CorrelationSettings, Sample,
};

use crate::archive::{now_us, to_us, Archive, ArchiveError, ResultFilter};
use crate::events::{Event, EventBus};

/// Most samples of either series one correlation reads.
pub const MAX_SAMPLES: i64 = 100_000;
/// Default window when a request gives no `from`: the last day.
pub const DEFAULT_WINDOW_US: i64 = 24 * 3_600_000_000;
/// A subscriber's correlation is recomputed at most this often.
pub const MIN_RECOMPUTE: Duration = Duration::from_secs(1);

/// Which two series to correlate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CorrelationQuery {
    pub app_metric: String,
    /// Tags an app metric must carry (all of them).
    pub app_tags: BTreeMap<String, String>,
    pub client: String,
    pub server: String,
    /// A test kind, when the metric name alone is ambiguous.
    pub test: Option<String>,
    /// A kind metric such as `received_bps` or `rtt_median_us`.
    pub metric: String,
    #[serde(flatten)]
    pub settings: CorrelationSettings,
}

/// The answer: the query, the window read and the coefficients.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CorrelationAnswer {
    #[serde(flatten)]
    pub query: CorrelationQuery,
    pub from_us: i64,
    pub to_us: i64,
    /// True when either series had more samples in the window than were read.
    pub truncated: bool,
    pub correlation: Correlation,
}

#[derive(Debug, thiserror::Error)]
pub enum CorrelateError {
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error(transparent)]
    Settings(#[from] CorrelationError),
}

/// Correlates the two series over `[start_us, end_us)`.
pub async fn correlate(
    archive: &Archive,
    query: &CorrelationQuery,
    start_us: i64,
    end_us: i64,
) -> Result<CorrelationAnswer, CorrelateError> {
    let app: Vec<Sample> = archive
        .app_metrics(
            Some(&query.app_metric),
            start_us,
            end_us,
            &query.app_tags,
            MAX_SAMPLES,
        )
        .await?
        .iter()
        .map(|stored| Sample {
            time_us: to_us(stored.metric.timestamp),
            value: stored.metric.value,
        })
        .collect();
    let results = archive
        .results(&ResultFilter {
            client: Some(query.client.clone()),
            server: Some(query.server.clone()),
            test: query.test.clone(),
            from_us: Some(start_us),
            to_us: Some(end_us),
            limit: MAX_SAMPLES,
            include_raw: false,
        })
        .await?;
    let truncated = app.len() as i64 >= MAX_SAMPLES || results.len() as i64 >= MAX_SAMPLES;
    let network: Vec<Sample> = results
        .iter()
        .filter_map(|stored| {
            Some(Sample {
                time_us: to_us(stored.start_time),
                value: *stored.metrics.get(&query.metric)?,
            })
        })
        .collect();
    let correlation = correlation::correlate(&app, &network, &query.settings)?;
    Ok(CorrelationAnswer {
        query: query.clone(),
        from_us: start_us,
        to_us: end_us,
        truncated,
        correlation,
    })
}

impl CorrelationQuery {
    /// Whether a live event adds a sample to either series.
    fn is_fed_by(&self, event: &Event) -> bool {
        match event {
            Event::AppMetric { metric, .. } => {
                metric.name == self.app_metric
                    && self
                        .app_tags
                        .iter()
                        .all(|(key, value)| metric.tags.get(key) == Some(value))
            }
            Event::Result { result, .. } => {
                result.client == self.client
                    && result.server == self.server
                    && result.metrics.contains_key(&self.metric)
                    && self.test.as_ref().is_none_or(|test| &result.test == test)
            }
            _ => false,
        }
    }
}

/// A subscriber's correlation events: one at once over the trailing `window_us`,
/// then one after each arrival of new data (at most every [`MIN_RECOMPUTE`]).
/// Ends when the bus closes; a computation that fails gives its message instead
/// (a `correlation_error` event) and the watch goes on.
pub fn watch(
    archive: Archive,
    events: Arc<EventBus>,
    query: CorrelationQuery,
    window_us: i64,
) -> impl Stream<Item = Result<CorrelationAnswer, String>> {
    let receiver = events.subscribe();
    futures_util::stream::unfold(
        (archive, receiver, query, true),
        move |(archive, mut receiver, query, first)| async move {
            if !first {
                // Wait for new data of either series; lagging means some arrived.
                loop {
                    match receiver.recv().await {
                        Ok(event) if query.is_fed_by(&event) => break,
                        Ok(_) => continue,
                        Err(RecvError::Lagged(_)) => break,
                        Err(RecvError::Closed) => return None,
                    }
                }
                tokio::time::sleep(MIN_RECOMPUTE).await;
                // Whatever else arrived meanwhile is in this computation.
                receiver = receiver.resubscribe();
            }
            let to = now_us();
            let answer = correlate(&archive, &query, to - window_us, to)
                .await
                .map_err(|error| error.to_string());
            Some((answer, (archive, receiver, query, false)))
        },
    )
}
