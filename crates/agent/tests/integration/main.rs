//! The agent's integration tests, one binary: failover between servers and refused uploads.
//! One binary rather than one per file: each links the whole workspace, and
//! building them dominated the test suite's time.

mod failover;
mod upload_refusals;
