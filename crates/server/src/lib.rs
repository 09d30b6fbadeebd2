//! vantage control plane: archive (SQLite / PostgreSQL), REST API, scheduler loop,
//! publish/subscribe. See docs/control-plane.md and docs/api.md.

pub mod api;
pub mod archive;
pub mod archivers;
pub mod events;
pub mod openapi;
pub mod openmetrics;
pub mod planner;
pub mod service;

/// A fresh random bearer token (256 bits, hex).
pub fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    hex::encode(bytes)
}
