//! The server's integration tests, one binary: the HTTP API, agents against a real
//! server, archives on both backends.
//! One binary rather than one per file: each links the whole workspace, and
//! building them dominated the test suite's time.

mod api;
mod common;
mod dashboard;
mod every_kind;
mod example_config;
mod exposition;
mod fixtures;
mod health;
mod http_limits;
mod mesh;
mod replicas;
mod sla_correlation;
mod statistics;
mod ticket_rotation;
mod tls;
mod transfers;
