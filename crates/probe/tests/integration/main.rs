//! The measurement engines' integration tests, one binary: loopback, network namespaces
//! and interoperability with reference tools.
//! One binary rather than one per file: each links the whole workspace, and
//! building them dominated the test suite's time.

mod common;
mod endpoint_robustness;
mod health_bundle;
mod iperf3_interop;
mod latency_loopback;
mod latency_netns;
mod reflector_abuse;
mod shared_prober;
mod stamp_interop;
mod throughput_native;
mod throughput_netns;
mod tickets;
mod trace_loopback;
mod twamp_interop;
