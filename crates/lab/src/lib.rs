//! Network emulation lab: topologies of hosts, routers and switches built from network
//! namespaces and veth pairs, with per-direction impairments applied by the kernel (rate) and by
//! a user-space forwarder (delay, jitter, loss, duplication, reordering, corruption).
//! See docs/lab.md.

pub mod addr;
mod coalesce;
pub mod forwarder;
pub mod impairment;
pub mod lab;
pub mod management;
pub mod netns;
pub mod routing;
pub mod state;
pub mod topology;
