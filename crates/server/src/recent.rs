//! In-memory views of the archive's newest results, for what the dashboard reads on
//! every refresh at fleet scale (300 agents make 89 700 ordered pairs): each metric's
//! newest values per pair (the mesh grid, `crate::grid`) and each pair's latest
//! health round reduced to its Eq. 1 features (the health matrix, `crate::health`).
//!
//! A view is loaded from the archive on first use. Every later read first catches
//! up with the results the archive *received* since the previous read (an indexed
//! query on `results.received_us`), so results stored by another server sharing the
//! database show as well as this server's, and nothing hooks into ingest. A catch-up
//! re-reads [`CATCH_UP_OVERLAP_US`] before the previous read began, so a transaction
//! that committed a little late, another server's clock a little behind, and health
//! markers derived just after their round are seen; a value read twice is recognised
//! and kept once. Whatever arrives later than that still shows within
//! [`REBUILD_EVERY_US`], when the view is loaded afresh.
//!
//! Memory is bounded: a metric view keeps per pair and test at most
//! `MAX_JUDGED_VALUES` values, none older than the longest grid window; the health
//! view keeps one round per pair, none older than the longest age a matrix may ask.

use std::collections::{BTreeMap, VecDeque};

use serde::Deserialize;
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};
use vantage_analysis::grid::MAX_JUDGED_VALUES;
use vantage_analysis::health::{MarkerKind, RoundFeatures};
use vantage_model::health::HealthResult;
use vantage_model::kinds::health::KIND as HEALTH;

use crate::archive::{now_us, to_us, Archive, ArchiveError, MetricValue, Since, StoredResult};

/// How far before the previous read a catch-up reads again.
pub const CATCH_UP_OVERLAP_US: i64 = 10_000_000;
/// A view this old is loaded afresh from the archive instead of caught up.
pub const REBUILD_EVERY_US: i64 = 15 * 60_000_000;

/// The in-memory views one server keeps.
#[derive(Default)]
pub struct Recent {
    metrics: Mutex<BTreeMap<&'static str, MetricView>>,
    health: Mutex<Option<HealthView>>,
}

impl Recent {
    /// `metric`'s view, caught up with the archive, holding values that started
    /// within `keep_us` of now.
    pub async fn metric(
        &self,
        archive: &Archive,
        metric: &'static str,
        keep_us: i64,
    ) -> Result<MappedMutexGuard<'_, MetricView>, ArchiveError> {
        let mut views = self.metrics.lock().await;
        let now = now_us();
        let oldest_us = now - keep_us;
        let values = match views.get(metric).filter(|view| view.reads.fresh(now)) {
            None => {
                let values = archive
                    .metric_values(metric, Since::Started(oldest_us))
                    .await?;
                views.insert(
                    metric,
                    MetricView {
                        reads: Reads::loaded_at(now),
                        ..MetricView::default()
                    },
                );
                values
            }
            Some(view) => {
                archive
                    .metric_values(metric, Since::Received(view.reads.catch_up_since()))
                    .await?
            }
        };
        let view = views.get_mut(metric).expect("loaded above");
        view.forget_before(oldest_us);
        for value in values
            .into_iter()
            .filter(|value| value.start_us >= oldest_us)
        {
            view.insert(value);
        }
        view.reads.read_at_us = now;
        Ok(MutexGuard::map(views, |views| {
            views.get_mut(metric).expect("inserted above")
        }))
    }

    /// The health view, caught up with the archive, holding rounds that started
    /// within `keep_us` of now.
    pub async fn health(
        &self,
        archive: &Archive,
        keep_us: i64,
    ) -> Result<MappedMutexGuard<'_, HealthView>, ArchiveError> {
        let mut slot = self.health.lock().await;
        let now = now_us();
        let oldest_us = now - keep_us;
        let stored = match slot.as_ref().filter(|view| view.reads.fresh(now)) {
            None => {
                let stored = archive.latest_of_test(HEALTH.name, oldest_us).await?;
                *slot = Some(HealthView {
                    reads: Reads::loaded_at(now),
                    ..HealthView::default()
                });
                stored
            }
            Some(view) => {
                archive
                    .completed_received_after(HEALTH.name, view.reads.catch_up_since())
                    .await?
            }
        };
        let view = slot.as_mut().expect("loaded above");
        view.rounds.retain(|_, round| round.start_us >= oldest_us);
        for result in stored {
            view.insert(result, oldest_us);
        }
        view.reads.read_at_us = now;
        Ok(MutexGuard::map(slot, |slot| {
            slot.as_mut().expect("inserted above")
        }))
    }
}

/// When a view was loaded and last read from the archive (µs since the Unix epoch).
#[derive(Debug, Default, Clone, Copy)]
struct Reads {
    loaded_at_us: i64,
    read_at_us: i64,
}

impl Reads {
    fn loaded_at(now_us: i64) -> Reads {
        Reads {
            loaded_at_us: now_us,
            read_at_us: now_us,
        }
    }

    /// Young enough to catch up rather than load afresh.
    fn fresh(&self, now_us: i64) -> bool {
        now_us - self.loaded_at_us < REBUILD_EVERY_US
    }

    /// Where a catch-up starts reading: a little before the previous read.
    fn catch_up_since(&self) -> i64 {
        self.read_at_us - CATCH_UP_OVERLAP_US
    }
}

/// One value as a metric view holds it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub start_us: i64,
    pub value: f64,
    /// Index into the view's test names.
    test: u16,
}

/// One metric's newest values per ordered pair.
#[derive(Debug, Default)]
pub struct MetricView {
    reads: Reads,
    /// The test kinds seen, indexed by `Sample::test`.
    tests: Vec<String>,
    /// Each pair's values, oldest first; at most `MAX_JUDGED_VALUES` per test.
    pairs: BTreeMap<(String, String), VecDeque<Sample>>,
}

impl MetricView {
    fn test_index(&mut self, test: String) -> u16 {
        match self.tests.iter().position(|known| *known == test) {
            Some(index) => index as u16,
            None => {
                self.tests.push(test);
                (self.tests.len() - 1) as u16
            }
        }
    }

    fn insert(&mut self, value: MetricValue) {
        let sample = Sample {
            start_us: value.start_us,
            value: value.value,
            test: self.test_index(value.test),
        };
        let samples = self.pairs.entry((value.client, value.server)).or_default();
        // Usually the newest: look from the back.
        let position = samples
            .iter()
            .rposition(|held| held.start_us <= sample.start_us)
            .map_or(0, |index| index + 1);
        if samples
            .range(..position)
            .rev()
            .take_while(|held| held.start_us == sample.start_us)
            .any(|held| *held == sample)
        {
            return;
        }
        samples.insert(position, sample);
        let same_test = samples
            .iter()
            .filter(|held| held.test == sample.test)
            .count();
        if same_test > MAX_JUDGED_VALUES {
            let oldest = samples
                .iter()
                .position(|held| held.test == sample.test)
                .expect("counted above");
            samples.remove(oldest);
        }
    }

    /// Drops values that started before `oldest_us`, and pairs left with none.
    fn forget_before(&mut self, oldest_us: i64) {
        self.pairs.retain(|_, samples| {
            while samples
                .front()
                .is_some_and(|held| held.start_us < oldest_us)
            {
                samples.pop_front();
            }
            !samples.is_empty()
        });
    }

    /// Each pair's values (oldest first) of `test`, or of every test when `None`.
    pub fn pairs<'a>(
        &'a self,
        test: Option<&str>,
    ) -> impl Iterator<Item = (&'a (String, String), impl Iterator<Item = &'a Sample>)> {
        // A test this view never saw matches nothing.
        let wanted = test.map(|name| self.tests.iter().position(|known| known == name));
        self.pairs.iter().map(move |(pair, samples)| {
            (
                pair,
                samples.iter().filter(move |held| match wanted {
                    None => true,
                    Some(index) => index == Some(usize::from(held.test)),
                }),
            )
        })
    }
}

/// A pair's latest health round, as much as the matrix needs of it.
#[derive(Debug, Clone)]
pub struct LatestRound {
    pub run_id: String,
    pub start_us: i64,
    pub features: RoundFeatures,
    /// The markers the server derived for the round (stored as `health_marker_*`).
    pub markers: Vec<MarkerKind>,
}

/// Each ordered pair's latest health round.
#[derive(Debug, Default)]
pub struct HealthView {
    reads: Reads,
    pub rounds: BTreeMap<(String, String), LatestRound>,
}

impl HealthView {
    /// Keeps `stored` if it is the pair's newest round (a round read again replaces
    /// itself: its markers may have been derived since).
    fn insert(&mut self, stored: StoredResult, oldest_us: i64) {
        let start_us = to_us(stored.start_time);
        if start_us < oldest_us {
            return;
        }
        let Some(result) = stored
            .result
            .as_ref()
            .and_then(|document| HealthResult::deserialize(document).ok())
        else {
            return;
        };
        let key = (stored.client, stored.server);
        if self
            .rounds
            .get(&key)
            .is_some_and(|held| held.start_us > start_us)
        {
            return;
        }
        let markers = MarkerKind::ALL
            .into_iter()
            .filter(|kind| stored.metrics.get(kind.metric_name()) == Some(&1.0))
            .collect();
        self.rounds.insert(
            key,
            LatestRound {
                run_id: stored.run_id,
                start_us,
                features: RoundFeatures::of(&result),
                markers,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(client: &str, test: &str, start_us: i64, value: f64) -> MetricValue {
        MetricValue {
            client: client.into(),
            server: "s".into(),
            test: test.into(),
            start_us,
            value,
        }
    }

    fn held(view: &MetricView, test: Option<&str>) -> Vec<(i64, f64)> {
        view.pairs(test)
            .flat_map(|(_, samples)| samples.map(|s| (s.start_us, s.value)))
            .collect()
    }

    #[test]
    fn values_are_kept_in_start_order_once_and_bounded_per_test() {
        let mut view = MetricView::default();
        // Out of order (an agent's spool uploaded late), and read twice.
        for start_us in [3, 1, 2, 2, 3] {
            view.insert(value("c", "latency", start_us, start_us as f64));
        }
        view.insert(value("c", "rtt", 2, 20.0));
        assert_eq!(held(&view, Some("latency")), [(1, 1.0), (2, 2.0), (3, 3.0)]);
        assert_eq!(held(&view, Some("rtt")), [(2, 20.0)]);
        assert_eq!(held(&view, None), [(1, 1.0), (2, 2.0), (2, 20.0), (3, 3.0)]);
        assert!(held(&view, Some("throughput")).is_empty());
        // Past the bound the oldest of the same test goes; the other test stays.
        for start_us in 10..10 + MAX_JUDGED_VALUES as i64 {
            view.insert(value("c", "latency", start_us, 0.0));
        }
        let latency = held(&view, Some("latency"));
        assert_eq!(latency.len(), MAX_JUDGED_VALUES);
        assert_eq!(latency[0].0, 10);
        assert_eq!(held(&view, Some("rtt")), [(2, 20.0)]);
        // Forgetting drops old values and empty pairs.
        view.insert(value("old", "latency", 1, 1.0));
        view.forget_before(5);
        assert_eq!(view.pairs.len(), 1);
        assert!(held(&view, Some("rtt")).is_empty());
    }
}
