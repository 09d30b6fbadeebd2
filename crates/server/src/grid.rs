//! The dashboard's mesh grid: every measured ordered pair's state for one metric
//! (`vantage_analysis::grid`: thresholds, the pair's baseline, hysteresis), with the
//! agents it spans. Cells are columns of one array each, indexed by agent, so 90 000
//! pairs stay a few megabytes of JSON.

use std::collections::BTreeMap;

use serde::Serialize;
use vantage_analysis::grid::{is_stale, Cell, MetricScale};

use crate::archive::{from_us, now_us, Archive, ArchiveError};
use crate::recent::Recent;

/// Longest window a grid may read: a day (the in-memory view keeps that much).
pub const MAX_WINDOW_US: i64 = 86_400_000_000;

/// Which grid to compute.
#[derive(Debug, Clone)]
pub struct GridQuery {
    pub scale: MetricScale,
    /// Only results of this test kind.
    pub test: Option<String>,
    /// How far back values are read (the baseline is their median).
    pub window_us: i64,
    /// Consecutive results that must agree before a cell changes state.
    pub hysteresis: usize,
}

/// The grid as the API answers it.
#[derive(Debug, Serialize)]
pub struct GridAnswer {
    pub computed_at: chrono::DateTime<chrono::Utc>,
    pub metric: &'static str,
    pub scale: MetricScale,
    pub hysteresis: usize,
    pub window_s: f64,
    /// Registered agents and any other name a pair in the window has, sorted.
    pub agents: Vec<GridAgent>,
    pub cells: Cells,
}

#[derive(Debug, Serialize)]
pub struct GridAgent {
    pub name: String,
    pub tags: BTreeMap<String, String>,
}

/// One entry per measured pair in each column; `client`/`server` index `agents`.
#[derive(Debug, Default, Serialize)]
pub struct Cells {
    pub client: Vec<usize>,
    pub server: Vec<usize>,
    pub value: Vec<f64>,
    pub baseline: Vec<Option<f64>>,
    /// `ok`, `warning` or `critical`, after hysteresis.
    pub state: Vec<&'static str>,
    /// What the newest value alone says.
    pub latest_state: Vec<&'static str>,
    /// Seconds since the newest result started.
    pub age_s: Vec<f64>,
    /// The newest result is overdue: it is older than three of the pair's usual
    /// spacings (or than the window, with a single result).
    pub stale: Vec<bool>,
    /// Values judged: those in the window, at most the newest
    /// `vantage_analysis::grid::MAX_JUDGED_VALUES`.
    pub results: Vec<usize>,
}

pub async fn grid(
    archive: &Archive,
    recent: &Recent,
    query: &GridQuery,
) -> Result<GridAnswer, ArchiveError> {
    let mut agents: BTreeMap<String, BTreeMap<String, String>> = archive
        .agents()
        .await?
        .into_iter()
        .map(|agent| (agent.registration.name, agent.registration.tags))
        .collect();
    let view = recent
        .metric(archive, query.scale.metric, MAX_WINDOW_US)
        .await?;
    let now = now_us();
    let since_us = now - query.window_us;
    // Each measured pair's cell, with when its newest result started.
    let mut judged: Vec<(&str, &str, Cell, i64)> = Vec::new();
    let mut values: Vec<(i64, f64)> = Vec::new();
    for ((client, server), samples) in view.pairs(query.test.as_deref()) {
        values.clear();
        values.extend(
            samples
                .filter(|sample| sample.start_us >= since_us)
                .map(|sample| (sample.start_us, sample.value)),
        );
        let Some(cell) = query.scale.judge(&values, query.hysteresis) else {
            continue;
        };
        let newest_us = values.last().map_or(now, |&(start_us, _)| start_us);
        judged.push((client, server, cell, newest_us));
    }
    for (client, server, ..) in &judged {
        for name in [client, server] {
            if !agents.contains_key(*name) {
                agents.insert(name.to_string(), BTreeMap::new());
            }
        }
    }
    let index: BTreeMap<&str, usize> = agents
        .keys()
        .enumerate()
        .map(|(position, name)| (name.as_str(), position))
        .collect();
    let mut cells = Cells::default();
    for (client, server, cell, newest_us) in judged {
        cells.client.push(index[client]);
        cells.server.push(index[server]);
        cells.value.push(cell.value);
        cells.baseline.push(cell.baseline);
        cells.state.push(cell.state.as_str());
        cells.latest_state.push(cell.latest_state.as_str());
        cells.age_s.push((now - newest_us) as f64 / 1e6);
        cells
            .stale
            .push(is_stale(newest_us, cell.spacing_us, now, query.window_us));
        cells.results.push(cell.values);
    }
    Ok(GridAnswer {
        computed_at: from_us(now),
        metric: query.scale.metric,
        scale: query.scale,
        hysteresis: query.hysteresis,
        window_s: query.window_us as f64 / 1e6,
        agents: agents
            .into_iter()
            .map(|(name, tags)| GridAgent { name, tags })
            .collect(),
        cells,
    })
}
