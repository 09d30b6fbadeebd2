//! How runs claim resources (pScheduler's convention: bulk transfers hold their
//! hosts alone; light probes share).

use serde::{Deserialize, Serialize};

/// How a run claims the interfaces of its two agents and the segments it crosses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchedulingClass {
    /// Holds its resources alone: overlaps no other exclusive or shared run.
    Exclusive,
    /// Overlaps other shared runs, never an exclusive one.
    Shared,
    /// Claims nothing: runs alongside anything (light, long-running probes
    /// whose results are meant to include the effect of other tests).
    Background,
}
