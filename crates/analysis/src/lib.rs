//! Analyses over measurement results. Pure functions over the result types of
//! `vantage-model`: no sockets, no clocks, no archive, so each is tested on
//! hand-worked numbers. The server runs them from its ingest pipeline and API.
//!
//! - [`health`]: the network health system of Chard, Bubendorfer and Ng (FGCS
//!   2015): markers per round, normalised metrics, the health score, the healthy
//!   subset relative to a reference host.
//! - [`fit`]: forward step-wise selection by AIC over ordinary least squares,
//!   with adjusted R² and p-values, to refit the health score's weights.
//! - [`qoe`]: video QoE from a throughput series, the playback-buffer model and
//!   MOS guideline of Rufini et al. (Fotonica 2014).
//! - [`repeat`]: a test's summary metrics across repeated runs (mean ± σ, median
//!   and IQR; Miravalls-Sierra et al., 2018).
//! - [`sla`]: a service-level contract's committed rate, delay, loss and jitter
//!   against one result, with margins (Rufini et al., Fotonica 2014).
//! - [`correlation`]: an app metric against a network metric of the same path,
//!   Pearson and Spearman (1904) over binned series at each lag of a window, and
//!   the best lag.
//! - [`fitf`]: InfiniBand congestion as the forced idle time fraction from
//!   `PortXmitWait` (Alali, PhD dissertation, University of Virginia, 2019, ch. 2),
//!   per round and per port class.
//! - [`vddut`]: the display update time of a virtual desktop from its server→client
//!   packets, VD-DUT (Alali 2019, ch. 5), its Eq. 5.1 decomposition and the video
//!   quality of slow-motion benchmarking (Nieh et al.).
//! - [`grid`]: a mesh grid cell's state from a pair's recent values, against
//!   thresholds and the pair's own baseline, with MaDDash-style hysteresis.

pub mod correlation;
pub mod diagnosis;
pub mod fit;
pub mod fitf;
pub mod grid;
pub mod health;
pub mod qoe;
pub mod repeat;
pub mod sla;
pub mod vddut;
