//! The planner's integration tests, one binary: worked plans and properties.
//! One binary rather than one per file: each links the whole workspace, and
//! building them dominated the test suite's time.

mod plan;
mod properties;
