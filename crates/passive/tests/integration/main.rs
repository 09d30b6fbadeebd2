//! Passive analysis over captures built frame by frame, one binary.
//! One binary rather than one per file: each links the whole workspace, and
//! building them dominated the test suite's time.

mod display;
mod flows;
mod support;
