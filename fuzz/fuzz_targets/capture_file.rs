//! Packet captures from anyone (`vantage pcap`, `vantage vddut`): any bytes are analysed
//! or refused with a reason, never a panic; what is analysed accounts for every frame
//! and gives finite, consistent figures.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vantage_analysis::vddut::VddutParams;
use vantage_passive::display::{display_updates, DisplayOptions};
use vantage_passive::{analyse, Options};

fuzz_target!(|bytes: &[u8]| {
    match analyse(bytes, &Options::default()) {
        Ok(report) => {
            let capture = &report.capture;
            let skipped = &capture.skipped;
            let not_analysed = skipped.not_ip
                + skipped.not_tcp_or_udp
                + skipped.fragments
                + skipped.header_truncated
                + skipped.malformed
                + skipped.unknown_link_type;
            assert_eq!(capture.packets + not_analysed, capture.frames);
            let packets: u64 = report
                .flows
                .iter()
                .map(|flow| flow.client_to_server.packets + flow.server_to_client.packets)
                .sum();
            assert_eq!(packets + capture.packets_beyond_flow_limit, capture.packets);
            for flow in &report.flows {
                if let Some(share) = flow.limited_by_share {
                    let total = share.receive_window + share.congestion + share.application;
                    assert!((total - 1.0).abs() < 1e-9, "shares add up to {total}");
                }
                for direction in [&flow.client_to_server, &flow.server_to_client] {
                    let kinds = &direction.retransmits_by_kind;
                    assert_eq!(
                        kinds.plain + kinds.fast + kinds.spurious,
                        direction.retransmits
                    );
                    assert!(direction
                        .throughput_bps
                        .is_none_or(|bps| bps.is_finite() && bps >= 0.0));
                }
            }
        }
        Err(error) => assert!(!error.to_string().is_empty()),
    }
    let options = DisplayOptions {
        marker_port: 9999,
        server: None,
        params: VddutParams::default(),
        rate_bps: 1e9,
    };
    if let Ok(report) = display_updates(bytes, &options) {
        for task in report.tasks {
            if let Some(update) = task.update {
                assert!(update.vddut_ns > 0 && update.packets > 0);
            }
        }
    }
});
