//! The network health system over the fleet (Chard, Bubendorfer and Ng, FGCS 2015).
//!
//! - [`HealthMarkers`], an ingest consumer: each stored `health` round is compared
//!   with the pair's previous round and throughput history; every marker's state is
//!   stored as a derived metric (`health_marker_*`, 0 or 1) and each firing is
//!   published as an alert on the event stream.
//! - [`health_matrix`], [`healthy_selection`], [`refit_weights`]: what the API's
//!   `/api/v1/health/*` routes answer, computed from the archive by the pure
//!   functions of `vantage_analysis::health`.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};
use vantage_analysis::fit::{self, Candidate, Fit, FitError};
use vantage_analysis::health::{
    self, Archived, Host, MarkerKind, MarkerSettings, Matrix, Observation, Scored, Selection,
    Weights,
};
use vantage_model::config::ValidatedConfig;
use vantage_model::health::HealthResult;
use vantage_model::kinds::health::{KIND as HEALTH, THROUGHPUT_BPS};

use crate::archive::{to_us, Archive, ArchiveError, ResultFilter, StoredResult};
use crate::events::{Alert, EventBus};
use crate::ingest::{NewResult, ResultConsumer};
use crate::recent::{HealthView, Recent};

/// The tag that groups hosts into zones in the matrix (the paper's availability zones).
pub const ZONE_TAG: &str = "zone";
/// Rounds older than this are stale: their pairs count as unknown.
pub const DEFAULT_MAX_AGE_US: i64 = 3 * 3_600_000_000;
/// The longest age a matrix may ask for: 30 days (the in-memory view keeps
/// each pair's latest round that long).
pub const LONGEST_MAX_AGE_US: i64 = 30 * 86_400_000_000;
/// How far apart one client's results may start and still be one round (for refitting).
pub const DEFAULT_ROUND_SPAN_US: i64 = 30 * 60_000_000;
/// At most this many archived rounds are read for a refit.
pub const MAX_FIT_RESULTS: i64 = 200_000;

pub struct HealthMarkers {
    pub archive: Archive,
    pub events: Arc<EventBus>,
    pub settings: MarkerSettings,
}

impl ResultConsumer for HealthMarkers {
    fn name(&self) -> &'static str {
        "health_markers"
    }

    fn consume<'a>(&'a self, result: &'a NewResult<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if result.run.test != HEALTH.name {
                return;
            }
            if let Err(error) = self.evaluate(result).await {
                tracing::warn!(run_id = %result.run.id, "health markers failed: {error}");
            }
        })
    }
}

fn parse(document: &serde_json::Value) -> Option<HealthResult> {
    HealthResult::deserialize(document).ok()
}

/// The stored results whose documents are health rounds, with the rounds parsed.
fn parse_stored(stored: Vec<StoredResult>) -> Vec<(StoredResult, HealthResult)> {
    stored
        .into_iter()
        .filter_map(|stored| {
            let result = parse(stored.result.as_ref()?)?;
            Some((stored, result))
        })
        .collect()
}

impl HealthMarkers {
    async fn evaluate(&self, result: &NewResult<'_>) -> Result<(), ArchiveError> {
        let Some(current) = result.upload.result.as_ref().and_then(parse) else {
            return Ok(());
        };
        let (run, start_us) = (result.run, to_us(result.upload.actual_start));
        let previous = self
            .archive
            .previous_result(&run.client, &run.server, HEALTH.name, start_us)
            .await?
            .and_then(|(_, document)| parse(&document));
        let history_bps: Vec<f64> = self
            .archive
            .results(&ResultFilter {
                client: Some(run.client.clone()),
                server: Some(run.server.clone()),
                test: Some(HEALTH.name.to_string()),
                from_us: None,
                to_us: Some(start_us),
                limit: self.settings.long_term_rounds as i64,
                include_raw: false,
            })
            .await?
            .iter()
            .filter_map(|stored| stored.metrics.get(THROUGHPUT_BPS.name).copied())
            .collect();
        let verdicts = health::markers(&current, previous.as_ref(), &history_bps, &self.settings);
        for verdict in &verdicts {
            self.archive
                .add_metric(
                    run,
                    verdict.kind.metric_name(),
                    f64::from(u8::from(verdict.fired)),
                )
                .await?;
            if verdict.fired {
                crate::alerts::raise(
                    &self.archive,
                    &self.events,
                    Alert {
                        severity: if verdict.kind == MarkerKind::Timeout {
                            "critical".into()
                        } else {
                            "warning".into()
                        },
                        message: format!(
                            "health marker {} fired for {} -> {} (run {}): {}",
                            verdict.kind.name(),
                            run.client,
                            run.server,
                            run.id,
                            verdict.detail
                        ),
                        agents: vec![run.client.clone(), run.server.clone()],
                        tags: BTreeMap::from([(
                            "marker".to_string(),
                            verdict.kind.name().to_string(),
                        )]),
                        time: result.upload.actual_end,
                    },
                )
                .await?;
            }
        }
        Ok(())
    }
}

/// Why a health question cannot be answered.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error("no group named '{0}' in the current configuration")]
    UnknownGroup(String),
    #[error("no agent named '{0}'")]
    UnknownHost(String),
    #[error("cannot refit: {0}")]
    Fit(#[from] FitError),
    #[error("cannot refit: {0}")]
    NotEnoughData(String),
}

/// The hosts a question is about: every registered agent, or a group's agents.
async fn hosts(
    archive: &Archive,
    config: Option<&ValidatedConfig>,
    group: Option<&str>,
) -> Result<Vec<Host>, HealthError> {
    let members = match group {
        None => None,
        Some(name) => Some(
            &config
                .and_then(|config| config.group(name))
                .ok_or_else(|| HealthError::UnknownGroup(name.to_string()))?
                .members,
        ),
    };
    Ok(archive
        .agents()
        .await?
        .iter()
        .filter(|agent| {
            members.is_none_or(|members| {
                members.includes_agent(&agent.registration.name, &agent.registration.tags)
            })
        })
        .map(|agent| Host {
            name: agent.registration.name.clone(),
            zone: agent.registration.tags.get(ZONE_TAG).cloned(),
        })
        .collect())
}

/// The matrix as the API answers it.
#[derive(Debug, Serialize)]
pub struct MatrixAnswer {
    pub computed_at: chrono::DateTime<chrono::Utc>,
    pub weights: Weights,
    pub max_age_s: f64,
    #[serde(flatten)]
    pub matrix: Matrix,
}

/// The matrix in columns, for a heat map of hundreds of hosts: one array per
/// field, one entry per pair that is not unknown (a pair absent is unknown);
/// `client` and `server` index `hosts`. A pair's parts, run and peers are in the
/// default layout.
#[derive(Debug, Serialize)]
pub struct MatrixColumns<'a> {
    pub computed_at: chrono::DateTime<chrono::Utc>,
    pub weights: Weights,
    pub max_age_s: f64,
    pub hosts: &'a [health::HostHealth],
    pub pairs: PairColumns<'a>,
}

#[derive(Debug, Default, Serialize)]
pub struct PairColumns<'a> {
    pub client: Vec<usize>,
    pub server: Vec<usize>,
    pub score: Vec<Option<f64>>,
    pub state: Vec<health::PairState>,
    pub markers: Vec<&'a [MarkerKind]>,
    pub age_s: Vec<f64>,
}

impl<'a> PairColumns<'a> {
    fn of(scored: &Scored<'a>) -> PairColumns<'a> {
        let n = scored.names.len();
        let mut columns = PairColumns::default();
        for (position, pair) in scored.cells.iter().enumerate() {
            let Some(pair) = pair else {
                continue;
            };
            columns.client.push(position / n);
            columns.server.push(position % n);
            columns.score.push(pair.score);
            columns.state.push(pair.state);
            columns.markers.push(pair.markers);
            columns.age_s.push(pair.age_s);
        }
        columns
    }
}

/// The latest rounds of pairs between `hosts`.
fn observations<'a>(view: &'a HealthView, hosts: &[Host]) -> Vec<Observation<'a>> {
    let names: FxHashSet<&str> = hosts.iter().map(|host| host.name.as_str()).collect();
    view.rounds
        .iter()
        .filter(|((client, server), _)| {
            names.contains(client.as_str()) && names.contains(server.as_str())
        })
        .map(|((client, server), round)| Observation {
            client,
            server,
            run_id: &round.run_id,
            start_us: round.start_us,
            features: &round.features,
            markers: &round.markers,
        })
        .collect()
}

/// Which hosts a health question is about and how pairs are scored.
#[derive(Debug, Clone, Copy)]
pub struct HealthQuery<'a> {
    /// The configuration that defines `group`.
    pub config: Option<&'a ValidatedConfig>,
    /// Only this group's agents; every agent when `None`.
    pub group: Option<&'a str>,
    pub weights: Weights,
    /// Rounds that started longer ago are stale (their pairs unknown).
    pub max_age_us: i64,
}

/// Scores the pairs between the hosts `query` names and hands the scored matrix,
/// with the instant it was computed at, to `answer`.
async fn score<R>(
    archive: &Archive,
    recent: &Recent,
    query: &HealthQuery<'_>,
    answer: impl FnOnce(Scored<'_>, chrono::DateTime<chrono::Utc>) -> R,
) -> Result<R, HealthError> {
    let hosts = hosts(archive, query.config, query.group).await?;
    let view = recent.health(archive, LONGEST_MAX_AGE_US).await?;
    let now = chrono::Utc::now();
    let scored = health::scored(
        &hosts,
        &observations(&view, &hosts),
        &query.weights,
        to_us(now),
        query.max_age_us,
    );
    Ok(answer(scored, now))
}

pub async fn health_matrix(
    archive: &Archive,
    recent: &Recent,
    query: &HealthQuery<'_>,
) -> Result<MatrixAnswer, HealthError> {
    score(archive, recent, query, |scored, now| MatrixAnswer {
        computed_at: now,
        weights: query.weights,
        max_age_s: query.max_age_us as f64 / 1e6,
        matrix: scored.into_matrix(),
    })
    .await
}

/// The matrix in columns, serialised (it borrows from the in-memory view, so it is
/// written out while the view is held).
pub async fn health_columns(
    archive: &Archive,
    recent: &Recent,
    query: &HealthQuery<'_>,
) -> Result<Vec<u8>, HealthError> {
    score(archive, recent, query, |scored, now| {
        serde_json::to_vec(&MatrixColumns {
            computed_at: now,
            weights: query.weights,
            max_age_s: query.max_age_us as f64 / 1e6,
            hosts: &scored.hosts,
            pairs: PairColumns::of(&scored),
        })
        .expect("the matrix serialises")
    })
    .await
}

pub async fn healthy_selection(
    archive: &Archive,
    recent: &Recent,
    query: &HealthQuery<'_>,
    reference: &str,
    k: usize,
) -> Result<Selection, HealthError> {
    let answer = health_matrix(archive, recent, query).await?;
    if !answer
        .matrix
        .hosts
        .iter()
        .any(|host| host.name == reference)
    {
        return Err(HealthError::UnknownHost(reference.to_string()));
    }
    Ok(health::select(&answer.matrix, reference, k))
}

/// A refit as the API answers it: the step table, every subset's adjusted R², and
/// the proposed weights.
#[derive(Debug, Serialize)]
pub struct FitAnswer {
    pub target: &'static str,
    pub rounds: usize,
    pub rows: usize,
    pub incomplete_rows: usize,
    pub fit: Fit,
    pub subsets: Vec<(Vec<String>, f64)>,
    /// `None` when no selected metric predicts the target positively.
    pub proposed_weights: Option<BTreeMap<String, f64>>,
}

pub async fn refit_weights(
    archive: &Archive,
    since_us: Option<i64>,
    until_us: Option<i64>,
    round_span_us: i64,
) -> Result<FitAnswer, HealthError> {
    let stored = archive
        .results(&ResultFilter {
            client: None,
            server: None,
            test: Some(HEALTH.name.to_string()),
            from_us: since_us,
            to_us: until_us,
            limit: MAX_FIT_RESULTS,
            include_raw: true,
        })
        .await?;
    let parsed = parse_stored(
        stored
            .into_iter()
            .filter(|stored| stored.outcome == "completed")
            .collect(),
    );
    let archived: Vec<Archived<'_>> = parsed
        .iter()
        .map(|(stored, result)| Archived {
            client: &stored.client,
            server: &stored.server,
            start_us: to_us(stored.start_time),
            result,
        })
        .collect();
    let table = health::fit_table(&archived, round_span_us);
    if table.names.is_empty() {
        return Err(HealthError::NotEnoughData(format!(
            "{} health rounds in the range, none followed by a round of the same pair that measured throughput (the fit predicts each pair's next throughput: keep the bundle's throughput part on)",
            parsed.len()
        )));
    }
    let candidates: Vec<Candidate<'_>> = table
        .names
        .iter()
        .zip(&table.columns)
        .map(|(name, values)| Candidate { name, values })
        .collect();
    let fit = fit::forward_select(&table.target, &candidates)?;
    let subsets = fit::subsets_adjusted_r2(&table.target, &candidates)?;
    let proposed_weights =
        fit::proposed_weights(&fit, &table.names).map(|weights| weights.into_iter().collect());
    Ok(FitAnswer {
        target: "next_throughput",
        rounds: table.rounds,
        rows: table.target.len(),
        incomplete_rows: table.incomplete_rows,
        fit,
        subsets,
        proposed_weights,
    })
}
