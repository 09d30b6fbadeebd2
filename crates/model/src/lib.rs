//! Shared vocabulary of vantage: test specifications, results and units.
//!
//! This crate does no I/O. Every other layer depends on it, so it stays small
//! and stable: the JSON contracts of `docs/json-schema.md` are these types.

pub mod capacity;
pub mod config;
pub mod config_error;
pub mod control;
pub mod counters;
pub mod csv_table;
pub mod diagnosis;
pub mod health;
pub mod kinds;
pub mod latency;
pub mod scheduling;
pub mod shared_spec;
pub mod sla;
pub mod throughput;
pub mod ticket;
pub mod trace;
pub mod transfers;
pub mod units;
