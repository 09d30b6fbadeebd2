//! Flow-level simulation, pure and seeded: a discrete-event simulator of flows sharing
//! the links of a topology max-min fairly, the Calibers deadline-transfer scheduler, and
//! the static and dynamic headroom services (SH/DH) with their M/G/1 model, after Alali
//! (PhD dissertation, University of Virginia, 2019, ch. 3 and 4).
//!
//! Nothing here reads a clock, a file or a socket: a run is a function of its
//! configuration and seed, so a figure can be reproduced exactly and tested on cases
//! solvable by hand. Long runs report progress through a callback the caller draws.

pub mod calibers;
pub mod distributions;
mod error;
pub mod fair_share;
pub mod flow_sim;
pub mod headroom;
pub mod topology;

pub use error::SimError;
pub(crate) use error::{check, positive};
