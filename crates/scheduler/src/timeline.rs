//! Reservations per resource and the earliest-fit slot search over them.
//!
//! Times are integer milliseconds since the Unix epoch; intervals are
//! half-open `[start, end)`, so back-to-back runs do not overlap.

use std::collections::{BTreeMap, HashMap};

use crate::claims::ClaimMode;

/// Index of an interned resource name.
pub(crate) type ResourceId = usize;

/// Reservations of one mode on one resource, searchable by time.
#[derive(Default)]
struct IntervalSet {
    /// (start, owner) → end; the owner makes equal starts distinct.
    by_start: BTreeMap<(i64, usize), i64>,
    /// Longest interval stored: bounds how far back an overlapping one can start.
    longest_ms: i64,
}

impl IntervalSet {
    fn insert(&mut self, start_ms: i64, end_ms: i64, owner: usize) {
        self.longest_ms = self.longest_ms.max(end_ms - start_ms);
        self.by_start.insert((start_ms, owner), end_ms);
    }

    /// The overlapping interval of `[start, end)` that ends last, as (end, owner).
    fn latest_overlap(&self, start_ms: i64, end_ms: i64) -> Option<(i64, usize)> {
        let earliest_relevant_start = start_ms.saturating_sub(self.longest_ms);
        self.by_start
            .range((earliest_relevant_start, 0)..(end_ms, 0))
            .filter(|(_, &other_end)| other_end > start_ms)
            .map(|(&(_, owner), &other_end)| (other_end, owner))
            .max()
    }
}

#[derive(Default)]
struct ResourceTimeline {
    exclusive: IntervalSet,
    shared: IntervalSet,
}

/// Why a slot search failed: the reservation that was in the way last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Blocker {
    pub resource: ResourceId,
    pub owner: usize,
}

/// Every reservation known to one planning call.
#[derive(Default)]
pub(crate) struct Timeline {
    index: HashMap<String, ResourceId>,
    names: Vec<String>,
    resources: Vec<ResourceTimeline>,
}

impl Timeline {
    pub fn intern(&mut self, resource: &str) -> ResourceId {
        if let Some(&id) = self.index.get(resource) {
            return id;
        }
        let id = self.names.len();
        self.index.insert(resource.to_string(), id);
        self.names.push(resource.to_string());
        self.resources.push(ResourceTimeline::default());
        id
    }

    pub fn name(&self, id: ResourceId) -> &str {
        &self.names[id]
    }

    pub fn reserve(
        &mut self,
        claims: &[(ResourceId, ClaimMode)],
        start_ms: i64,
        end_ms: i64,
        owner: usize,
    ) {
        for &(resource, mode) in claims {
            let timeline = &mut self.resources[resource];
            match mode {
                ClaimMode::Exclusive => timeline.exclusive.insert(start_ms, end_ms, owner),
                ClaimMode::Shared => timeline.shared.insert(start_ms, end_ms, owner),
            }
        }
    }

    /// The conflicting reservation that ends last, if `claims` cannot be held over `[start, end)`.
    fn latest_conflict(
        &self,
        claims: &[(ResourceId, ClaimMode)],
        start_ms: i64,
        end_ms: i64,
    ) -> Option<(i64, Blocker)> {
        claims
            .iter()
            .filter_map(|&(resource, mode)| {
                let timeline = &self.resources[resource];
                // Exclusive conflicts with everything; shared only with exclusive.
                let exclusive = timeline.exclusive.latest_overlap(start_ms, end_ms);
                let shared = match mode {
                    ClaimMode::Exclusive => timeline.shared.latest_overlap(start_ms, end_ms),
                    ClaimMode::Shared => None,
                };
                exclusive
                    .max(shared)
                    .map(|(end, owner)| (end, Blocker { resource, owner }))
            })
            .max_by_key(|(end, _)| *end)
    }

    /// Earliest start in `[from, latest_start]` where `claims` can be held for
    /// `duration_ms`. The first feasible start is always `from` or the end of
    /// some conflicting reservation, so jumping to the latest conflicting end
    /// never skips a feasible slot.
    pub fn earliest_fit(
        &self,
        claims: &[(ResourceId, ClaimMode)],
        duration_ms: i64,
        from_ms: i64,
        latest_start_ms: i64,
    ) -> Result<i64, Option<Blocker>> {
        let mut start = from_ms;
        let mut last_blocker = None;
        while start <= latest_start_ms {
            match self.latest_conflict(claims, start, start + duration_ms) {
                None => return Ok(start),
                Some((conflict_end, blocker)) => {
                    start = conflict_end;
                    last_blocker = Some(blocker);
                }
            }
        }
        Err(last_blocker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_waits_for_shared_and_shared_overlaps_shared() {
        let mut timeline = Timeline::default();
        let link = timeline.intern("agent:a");
        timeline.reserve(&[(link, ClaimMode::Shared)], 0, 100, 0);
        assert_eq!(
            timeline.earliest_fit(&[(link, ClaimMode::Shared)], 50, 10, 1000),
            Ok(10)
        );
        assert_eq!(
            timeline.earliest_fit(&[(link, ClaimMode::Exclusive)], 50, 10, 1000),
            Ok(100)
        );
        timeline.reserve(&[(link, ClaimMode::Exclusive)], 100, 150, 1);
        assert_eq!(
            timeline.earliest_fit(&[(link, ClaimMode::Shared)], 10, 95, 1000),
            Ok(150)
        );
    }

    #[test]
    fn search_fails_past_latest_start_naming_the_blocker() {
        let mut timeline = Timeline::default();
        let link = timeline.intern("segment:uplink");
        timeline.reserve(&[(link, ClaimMode::Exclusive)], 0, 500, 7);
        let result = timeline.earliest_fit(&[(link, ClaimMode::Shared)], 10, 0, 499);
        assert_eq!(
            result,
            Err(Some(Blocker {
                resource: link,
                owner: 7
            }))
        );
    }

    #[test]
    fn a_gap_exactly_as_long_as_the_run_is_used() {
        let mut timeline = Timeline::default();
        let link = timeline.intern("agent:a");
        timeline.reserve(&[(link, ClaimMode::Exclusive)], 0, 100, 0);
        timeline.reserve(&[(link, ClaimMode::Exclusive)], 130, 200, 1);
        assert_eq!(
            timeline.earliest_fit(&[(link, ClaimMode::Exclusive)], 30, 0, 1000),
            Ok(100)
        );
        assert_eq!(
            timeline.earliest_fit(&[(link, ClaimMode::Exclusive)], 31, 0, 1000),
            Ok(200)
        );
    }
}
