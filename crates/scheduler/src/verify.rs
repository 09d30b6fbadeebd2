//! Independent check of a schedule (planned or as actually run): which runs
//! held conflicting claims on the same resource at the same time.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::claims::{Claim, ClaimMode};
use crate::types::PlannedRun;

/// A run's time span and claims, e.g. from recorded actual start/end times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Occupancy {
    pub run_id: String,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub claims: Vec<Claim>,
}

impl From<&PlannedRun> for Occupancy {
    fn from(run: &PlannedRun) -> Occupancy {
        Occupancy {
            run_id: run.run_id.clone(),
            start: run.start,
            end: run.end,
            claims: run.claims.clone(),
        }
    }
}

/// Two runs that held one resource at the same time in incompatible modes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overlap {
    pub resource: String,
    pub first_run: String,
    pub first_mode: ClaimMode,
    pub second_run: String,
    pub second_mode: ClaimMode,
    pub overlap_start: DateTime<Utc>,
    pub overlap_end: DateTime<Utc>,
}

/// Every pair of runs whose claims conflict (at least one exclusive) while
/// their `[start, end)` spans intersect. Touching spans do not conflict.
pub fn find_overlaps(runs: &[Occupancy]) -> Vec<Overlap> {
    let mut by_resource: BTreeMap<&str, Vec<(&Occupancy, ClaimMode)>> = BTreeMap::new();
    for run in runs {
        for claim in &run.claims {
            by_resource
                .entry(claim.resource.as_str())
                .or_default()
                .push((run, claim.mode));
        }
    }
    let mut overlaps = Vec::new();
    for (resource, mut holders) in by_resource {
        holders.sort_by(|a, b| (a.0.start, &a.0.run_id).cmp(&(b.0.start, &b.0.run_id)));
        // Sweep: compare each run with the later-starting runs that begin before it ends.
        for (index, &(first, first_mode)) in holders.iter().enumerate() {
            for &(second, second_mode) in &holders[index + 1..] {
                if second.start >= first.end {
                    break;
                }
                let compatible =
                    first_mode == ClaimMode::Shared && second_mode == ClaimMode::Shared;
                if compatible || second.end <= second.start || first.end <= first.start {
                    continue;
                }
                overlaps.push(Overlap {
                    resource: resource.to_string(),
                    first_run: first.run_id.clone(),
                    first_mode,
                    second_run: second.run_id.clone(),
                    second_mode,
                    overlap_start: second.start,
                    overlap_end: first.end.min(second.end),
                });
            }
        }
    }
    overlaps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn occupancy(
        run_id: &str,
        start_s: i64,
        end_s: i64,
        claims: &[(&str, ClaimMode)],
    ) -> Occupancy {
        Occupancy {
            run_id: run_id.to_string(),
            start: DateTime::from_timestamp(start_s, 0).unwrap(),
            end: DateTime::from_timestamp(end_s, 0).unwrap(),
            claims: claims
                .iter()
                .map(|&(resource, mode)| Claim {
                    resource: resource.to_string(),
                    mode,
                })
                .collect(),
        }
    }

    #[test]
    fn reports_exclusive_overlaps_only() {
        use ClaimMode::{Exclusive, Shared};
        let runs = [
            occupancy(
                "tp1",
                0,
                10,
                &[("agent:a", Exclusive), ("agent:b", Exclusive)],
            ),
            occupancy("tp2", 10, 20, &[("agent:a", Exclusive)]),
            occupancy("lat1", 12, 14, &[("agent:a", Shared), ("agent:c", Shared)]),
            occupancy("lat2", 13, 30, &[("agent:c", Shared)]),
            occupancy(
                "tp3",
                5,
                6,
                &[("agent:c", Exclusive), ("agent:b", Exclusive)],
            ),
        ];
        let overlaps = find_overlaps(&runs);
        let found: Vec<_> = overlaps
            .iter()
            .map(|o| {
                (
                    o.resource.as_str(),
                    o.first_run.as_str(),
                    o.second_run.as_str(),
                )
            })
            .collect();
        assert_eq!(
            found,
            vec![("agent:a", "tp2", "lat1"), ("agent:b", "tp1", "tp3")]
        );
        assert_eq!(overlaps[0].overlap_start.timestamp(), 12);
        assert_eq!(overlaps[0].overlap_end.timestamp(), 14);
    }
}
