//! vantage control plane: archive (SQLite / PostgreSQL), REST API, scheduler loop,
//! publish/subscribe. See docs/control-plane.md and docs/api.md.

pub mod alerts;
pub mod api;
pub mod archive;
pub mod archivers;
pub mod capture_packets;
pub mod config_store;
pub mod correlation;
pub mod diagnose;
pub mod dispatch;
pub mod events;
pub mod exposition;
pub mod grid;
pub mod health;
pub mod http;
pub mod imports;
pub mod ingest;
pub mod interface_counters;
pub mod notices;
pub mod openapi;
pub mod path_changes;
pub mod planner;
pub mod poll_hints;
pub mod recent;
pub mod replicas;
pub mod service;
pub mod sla;
pub mod state;
pub mod supervisor;
pub mod ticket_keys;
pub mod tls;
pub mod transfers;

/// A fresh random bearer token (256 bits, hex).
pub fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    hex::encode(bytes)
}
