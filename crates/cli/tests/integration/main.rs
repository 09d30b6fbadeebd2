//! The `vantage` command's integration tests, one binary (each module runs the built
//! command, VANTAGE_BIN or target/release/vantage, as a user would).
//! One binary rather than one per file: each links the whole workspace, and
//! building them dominated the test suite's time.

#[allow(dead_code)] // the server's harness, of which these tests use a part
#[path = "../../../server/tests/integration/common/mod.rs"]
mod common;
mod control_faults;
mod counters_cli;
mod demo;
mod demo_lab;
mod diagnose_cli;
mod ib_cli;
mod lab;
mod latency_cli;
mod logging;
mod mos_cli;
mod pcap_archive;
mod pcap_cli;
mod pcap_lab;
mod qoe_cli;
mod sim_cli;
mod support;
mod throughput_cli;
mod trace_cli;
mod transfers_lab;
