//! Measurement engines and the test endpoint.
//!
//! - [`endpoint`]: the `vantage endpoint` service (TWAMP-Light reflector, TCP service).
//! - [`latency`]: the latency engines (UDP TWAMP-Light sender, TCP, ICMP echo).
//! - [`sandwich`]: sandwich probing (Chard et al., FGCS 2015).
//! - [`health`]: the health probe bundle of the same paper (every indicator towards one peer).
//! - [`throughput`], [`capacity`], [`iperf3`]: TCP/UDP throughput with the `limited_by`
//!   verdict, the capacity method of Rufini et al. (Fotonica 2014), the iperf3 protocol both ways.
//! - [`tcp_info`], [`cpu`], [`pacing`]: TCP_INFO decoding, measuring-thread CPU
//!   self-check, packet pacing.
//! - [`timestamp`], [`clock`], [`mtu`]: kernel stamps, clock sync state, path MTU.
//! - [`infiniband`]: live `PortXmitWait` reads of InfiniBand ports from sysfs, in the
//!   rounds of Alali (PhD dissertation, University of Virginia, 2019, ch. 2).
//! - [`deadline`]: one deadline for a whole setup exchange (trickling peers are cut off).

pub mod capacity;
pub mod capture;
pub mod clock;
pub mod counters;
pub mod cpu;
pub mod deadline;
pub mod diagnose;
pub mod endpoint;
pub mod health;
pub mod infiniband;
pub mod iperf3;
pub mod latency;
pub mod mtu;
pub mod pacing;
pub mod sandwich;
pub mod source_policy;
pub mod subprocess;
pub mod sysfs;
pub mod tcp_info;
pub mod throughput;
pub mod tickets;
pub mod timestamp;
pub mod trace;
pub mod transfer;
pub mod twamp;
