//! What agents' long polls look at every second, read for the whole fleet at once: the
//! planner's marks (how far each agent's light runs are placed, how far light runs may
//! be placed, the plan's basis) and, per agent, the earliest start among the runs
//! stored for it and not handed out yet (its waiting runs). A thousand agents asking
//! each second were two reads each: 2 000 statements a second through the archive's
//! reading connections, each a hand-over between threads. Read here at most four times
//! a second instead, in two statements, a fleet of 1 000 idle agents costs the server
//! 17 % of a core instead of 49 % (`bench/scale`'s fleet with no tasks).
//!
//! A hint only decides whether a poll looks closer. What a poll hands out is read again
//! and claimed in the archive as before, so a hint that is behind costs at most a poll
//! that finds nothing, or a run handed out up to [`MAX_AGE`] later. Only long polls,
//! which look again every second, use hints ([`Freshness`]).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::archive::{Archive, ArchiveError};

/// How old the hints may be when a poll reads them; runs stored by this replica make
/// them stale at once.
pub const MAX_AGE: Duration = Duration::from_millis(250);

/// How current what a poll looks at must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// A long poll, which looks again every second: hints up to [`MAX_AGE`] old do.
    Hinted,
    /// An answer now (a poll that does not wait): read from the archive.
    Exact,
}

#[derive(Default)]
pub struct PollHints {
    known: Mutex<Known>,
    /// Held while the hints are read again: the polls that find them stale together
    /// wait for one read.
    refreshing: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Known {
    /// When the last read began: what was stored before then is in it.
    read_at: Option<Instant>,
    /// When this replica last stored runs: hints read before then are stale.
    runs_stored_at: Option<Instant>,
    marks: HashMap<String, i64>,
    /// Each agent's earliest planned start among its waiting runs.
    waiting_from_us: HashMap<String, i64>,
}

impl Known {
    fn fresh(&self) -> bool {
        self.read_at.is_some_and(|read_at| {
            read_at.elapsed() < MAX_AGE && self.runs_stored_at.is_none_or(|stored| stored < read_at)
        })
    }
}

impl PollHints {
    /// The planner marks `names` (each `None` where unset), as of at most [`MAX_AGE`] ago
    /// when `Hinted`.
    pub async fn marks<const N: usize>(
        &self,
        archive: &Archive,
        names: [&str; N],
        freshness: Freshness,
    ) -> Result<[Option<i64>; N], ArchiveError> {
        if freshness == Freshness::Exact {
            return archive.planner_marks_named(names).await;
        }
        self.refresh_when_stale(archive).await?;
        let known = self.known();
        Ok(names.map(|name| known.marks.get(name).copied()))
    }

    /// Whether `agent` may have a waiting run that starts before `until_us` (always when
    /// `Exact`: the claim that follows reads it).
    pub async fn may_have_waiting(
        &self,
        archive: &Archive,
        agent: &str,
        until_us: i64,
        freshness: Freshness,
    ) -> Result<bool, ArchiveError> {
        if freshness == Freshness::Exact {
            return Ok(true);
        }
        self.refresh_when_stale(archive).await?;
        Ok(self
            .known()
            .waiting_from_us
            .get(agent)
            .is_some_and(|&from_us| from_us < until_us))
    }

    /// This replica set planner mark `name` to `value`.
    pub fn mark_set(&self, name: &str, value: i64) {
        self.known().marks.insert(name.to_string(), value);
    }

    /// `agent`'s waiting runs were claimed up to its horizon: none is known to wait
    /// until the hints are read again.
    pub fn waiting_claimed(&self, agent: &str) {
        self.known().waiting_from_us.remove(agent);
    }

    /// This replica stored runs: the next poll reads the hints again.
    pub fn runs_stored(&self) {
        self.known().runs_stored_at = Some(Instant::now());
    }

    async fn refresh_when_stale(&self, archive: &Archive) -> Result<(), ArchiveError> {
        if self.known().fresh() {
            return Ok(());
        }
        let _refreshing = self.refreshing.lock().await;
        if self.known().fresh() {
            return Ok(());
        }
        let read_at = Instant::now();
        let marks = archive.planner_marks("").await?.into_iter().collect();
        let waiting_from_us = archive.earliest_waiting_starts().await?;
        let mut known = self.known();
        known.read_at = Some(read_at);
        known.marks = marks;
        known.waiting_from_us = waiting_from_us;
        Ok(())
    }

    fn known(&self) -> MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
