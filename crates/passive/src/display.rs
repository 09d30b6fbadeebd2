//! Display update times of a thin-client session from its capture: VD-DUT (Alali, PhD
//! dissertation, University of Virginia, 2019, ch. 5) for every task a start marker
//! announces.
//!
//! A marker is a UDP datagram to a known port that the desktop's host sends just
//! before a task; the desktop host's other packets to the client carry the display.
//! Each marker's update is found among the packets up to the next marker by
//! [`vantage_analysis::vddut::display_update`]. Packet sizes are frame lengths on the
//! wire (what tcpdump prints as the length); the dissertation does not say which size
//! it used, and its 110-byte idle packets are the reason for the threshold.

use std::io::Read;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use vantage_analysis::vddut::{self, Decomposition, DisplayUpdate, VddutParams};

use crate::decode::{self, Transport};
use crate::{capture, format_time, PassiveError};

#[derive(Debug, Clone, Copy)]
pub struct DisplayOptions {
    /// UDP destination port of the start markers.
    pub marker_port: u16,
    /// The desktop host; by default the markers' sender.
    pub server: Option<IpAddr>,
    pub params: VddutParams,
    /// Link rate for Eq. 5.1's transmission time.
    pub rate_bps: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DisplayReport {
    pub server: Option<String>,
    pub marker_port: u16,
    pub min_size_bytes: u32,
    pub max_gap_s: f64,
    pub rate_bps: f64,
    pub tasks: Vec<TaskUpdate>,
    /// Over the tasks with an update, as the dissertation aggregates a run.
    pub geometric_mean_vddut_s: Option<f64>,
    pub geometric_mean_update_bytes: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskUpdate {
    /// The start marker's capture time.
    pub marker_time: String,
    pub update: Option<DisplayUpdate>,
    /// Eq. 5.1 without the processing time (unknown from a capture).
    pub decomposition: Option<Decomposition>,
    /// Why there is no update.
    pub error: Option<String>,
}

/// Reads a capture and measures the display update after each start marker.
pub fn display_updates<R: Read + Send>(
    input: R,
    options: &DisplayOptions,
) -> Result<DisplayReport, PassiveError> {
    let mut markers: Vec<(i64, IpAddr)> = Vec::new();
    // (time, size, source): the desktop host is known only once a marker is seen.
    let mut frames: Vec<(i64, u32, IpAddr)> = Vec::new();
    capture::read_frames(input, |frame| {
        if let Ok(packet) = decode::decode(frame.link_type, frame.data, frame.original_len) {
            if packet.transport == Transport::Udp
                && packet.destination.port() == options.marker_port
            {
                markers.push((frame.time_ns, packet.source.ip()));
            } else {
                frames.push((frame.time_ns, frame.original_len, packet.source.ip()));
            }
        }
        Ok(())
    })?;
    let server = options
        .server
        .or(markers.first().map(|&(_, source)| source));
    markers.sort_by_key(|&(time_ns, _)| time_ns);
    let mut packets: Vec<vddut::Packet> = frames
        .iter()
        .filter(|&&(_, _, source)| Some(source) == server)
        .map(|&(time_ns, size_bytes, _)| vddut::Packet {
            time_ns,
            size_bytes,
        })
        .collect();
    packets.sort_by_key(|packet| packet.time_ns);
    let mut tasks = Vec::with_capacity(markers.len());
    for (index, &(t0_ns, _)) in markers.iter().enumerate() {
        // This task's packets: after its marker, before the next one.
        let next_marker_ns = markers
            .get(index + 1)
            .map_or(i64::MAX, |&(time_ns, _)| time_ns);
        let start = packets.partition_point(|packet| packet.time_ns <= t0_ns);
        let end = packets.partition_point(|packet| packet.time_ns < next_marker_ns);
        let window = &packets[start..end.max(start)];
        let (update, decomposition, error) =
            match vddut::display_update(window, t0_ns, options.params) {
                Ok(update) => {
                    let decomposition = vddut::decompose(&update, None, options.rate_bps)
                        .map_err(|error| PassiveError::Format(error.to_string()))?;
                    (Some(update), Some(decomposition), None)
                }
                Err(error) => (None, None, Some(error.to_string())),
            };
        tasks.push(TaskUpdate {
            marker_time: format_time(t0_ns),
            update,
            decomposition,
            error,
        });
    }
    let updates: Vec<&DisplayUpdate> = tasks
        .iter()
        .filter_map(|task| task.update.as_ref())
        .collect();
    let geometric = |values: Vec<f64>| vddut::geometric_mean(&values).ok();
    Ok(DisplayReport {
        server: server.map(|address| address.to_string()),
        marker_port: options.marker_port,
        min_size_bytes: options.params.min_size_bytes,
        max_gap_s: options.params.max_gap_ns as f64 / 1e9,
        rate_bps: options.rate_bps,
        geometric_mean_vddut_s: geometric(updates.iter().map(|update| update.vddut_s()).collect()),
        geometric_mean_update_bytes: geometric(
            updates
                .iter()
                .map(|update| update.update_bytes as f64)
                .collect(),
        ),
        tasks,
    })
}
