//! VD-DUT from a synthetic thin-client capture whose display updates are known.

use crate::support;

use etherparse::PacketBuilder;
use support::Pcap;
use vantage_analysis::vddut::VddutParams;
use vantage_passive::display::{display_updates, DisplayOptions};

const DESKTOP: [u8; 4] = [10, 1, 0, 1];
const CLIENT: [u8; 4] = [10, 1, 0, 2];
const OTHER: [u8; 4] = [10, 1, 0, 9];
const MARKER_PORT: u16 = 9999;
const DISPLAY_PORT: u16 = 4172;
const MS: u64 = 1_000_000;
/// Ethernet + IPv4 + UDP headers.
const HEADERS: usize = 14 + 20 + 8;

/// A UDP frame of `frame_len` bytes on the wire.
fn udp_frame(
    source: [u8; 4],
    destination: [u8; 4],
    destination_port: u16,
    frame_len: usize,
) -> Vec<u8> {
    let mut frame = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
    PacketBuilder::ipv4(source, destination, 64)
        .udp(DISPLAY_PORT, destination_port)
        .write(&mut frame, &vec![0u8; frame_len - HEADERS])
        .expect("frame");
    assert_eq!(frame.len(), frame_len);
    frame
}

/// A session: the idle stream of 110-byte packets every 300 ms throughout; two tasks,
/// each announced by a marker, whose updates are bursts of large packets with gaps up
/// to 490 ms; a keep-alive pair of 400-byte packets 1.5 s after the second update;
/// large packets from another host, which are not the desktop's.
fn session() -> (Vec<u8>, [(u64, u64, u64); 2]) {
    let mut frames: Vec<(u64, Vec<u8>)> = Vec::new();
    for tick in 0..40u64 {
        frames.push((
            tick * 300 * MS + 7 * MS,
            udp_frame(DESKTOP, CLIENT, 50_000, 110),
        ));
    }
    // (marker, last update packet, update bytes) per task.
    let mut truth = [(0, 0, 0); 2];
    for (task, marker_ms) in [(0usize, 1_000u64), (1, 6_000)] {
        let marker = marker_ms * MS;
        frames.push((marker, udp_frame(DESKTOP, CLIENT, MARKER_PORT, 60)));
        // The update: packets at +20 ms, then gaps of 5, 175 and 490 ms between bursts.
        let offsets_ms = [20u64, 21, 22, 27, 202, 203, 693, 694];
        let mut bytes = 0;
        for (index, offset) in offsets_ms.iter().enumerate() {
            let len = 1000 + 50 * index;
            frames.push((
                marker + offset * MS,
                udp_frame(DESKTOP, CLIENT, 50_000, len),
            ));
            bytes += len as u64;
        }
        truth[task] = (marker, marker + 694 * MS, bytes);
    }
    frames.push((
        6_000 * MS + 2_194 * MS,
        udp_frame(DESKTOP, CLIENT, 50_000, 400),
    ));
    frames.push((
        6_000 * MS + 2_195 * MS,
        udp_frame(DESKTOP, CLIENT, 50_000, 400),
    ));
    frames.push((1_300 * MS, udp_frame(OTHER, CLIENT, 50_000, 1400)));
    frames.sort_by_key(|(time, _)| *time);
    let mut pcap = Pcap::new(1, 65535);
    for (time, frame) in &frames {
        pcap.record(*time, frame, 65535);
    }
    (pcap.bytes, truth)
}

fn options() -> DisplayOptions {
    DisplayOptions {
        marker_port: MARKER_PORT,
        server: None,
        params: VddutParams::default(),
        rate_bps: 1e9,
    }
}

#[test]
fn every_task_s_update_time_and_bytes_are_recovered_exactly() {
    let (capture, truth) = session();
    let report = display_updates(&capture[..], &options()).expect("report");
    assert_eq!(report.server.as_deref(), Some("10.1.0.1"));
    assert_eq!(report.tasks.len(), 2);
    for (task, (marker, last, bytes)) in report.tasks.iter().zip(truth) {
        let update = task.update.expect("an update");
        assert_eq!(update.t0_ns, marker as i64);
        assert_eq!(update.vddut_ns, (last - marker) as i64, "{task:?}");
        assert_eq!(update.update_bytes, bytes);
        assert_eq!(update.packets, 8);
        let decomposition = task.decomposition.expect("Eq. 5.1");
        assert_eq!(decomposition.t_trans_s, bytes as f64 * 8.0 / 1e9);
    }
    assert!((report.geometric_mean_vddut_s.unwrap() - 0.694).abs() < 1e-12);
}

#[test]
fn a_shorter_gap_limit_ends_the_update_at_the_490_ms_gap() {
    let (capture, truth) = session();
    let mut options = options();
    options.params.max_gap_ns = 400 * MS as i64;
    let report = display_updates(&capture[..], &options).expect("report");
    let update = report.tasks[0].update.expect("an update");
    assert_eq!(update.vddut_ns, 203 * MS as i64);
    assert_eq!(update.t0_ns, truth[0].0 as i64);
}

#[test]
fn a_marker_without_an_update_says_so() {
    let mut pcap = Pcap::new(1, 65535);
    pcap.record(0, &udp_frame(DESKTOP, CLIENT, MARKER_PORT, 60), 65535);
    pcap.record(100 * MS, &udp_frame(DESKTOP, CLIENT, 50_000, 110), 65535);
    let report = display_updates(&pcap.bytes[..], &options()).expect("report");
    assert!(report.tasks[0].update.is_none());
    assert!(report.tasks[0]
        .error
        .as_deref()
        .unwrap()
        .contains("no display update"));
    assert_eq!(report.geometric_mean_vddut_s, None);
}
