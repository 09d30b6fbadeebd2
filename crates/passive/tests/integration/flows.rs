//! Flow analysis over captures built frame by frame, where every figure is known.

use crate::support;

use etherparse::{PacketBuilder, TcpOptionElement};
use support::pcapng::Pcapng;
use support::Pcap;
use vantage_passive::{analyse, CaptureReport, CaptureSide, Options};

const CLIENT: [u8; 4] = [10, 0, 0, 1];
const SERVER: [u8; 4] = [10, 0, 0, 2];
const CLIENT_PORT: u16 = 40_000;
const SERVER_PORT: u16 = 5201;
const MSS: u32 = 1448;

#[derive(Clone, Copy)]
enum Link {
    Ethernet,
    Vlan,
    Sll,
    Sll2,
}

impl Link {
    fn link_type(self) -> u32 {
        match self {
            Link::Ethernet | Link::Vlan => 1,
            Link::Sll => 113,
            Link::Sll2 => 276,
        }
    }
}

#[derive(Clone, Copy, Default)]
struct Segment {
    from_client: bool,
    seq: u32,
    ack: u32,
    syn: bool,
    fin: bool,
    window: u16,
    payload: u32,
}

/// Builds one TCP/IPv4 (or IPv6) frame on the given link.
fn frame(link: Link, ipv6: bool, segment: Segment) -> Vec<u8> {
    let (source, destination, source_port, destination_port) = if segment.from_client {
        (CLIENT, SERVER, CLIENT_PORT, SERVER_PORT)
    } else {
        (SERVER, CLIENT, SERVER_PORT, CLIENT_PORT)
    };
    let v6 = |address: [u8; 4]| {
        let mut bytes = [0u8; 16];
        bytes[0] = 0xfd;
        bytes[12..].copy_from_slice(&address);
        bytes
    };
    let payload = vec![0x5au8; segment.payload as usize];
    let mut ip = Vec::new();
    let builder = if ipv6 {
        PacketBuilder::ipv6(v6(source), v6(destination), 64)
    } else {
        PacketBuilder::ipv4(source, destination, 64)
    };
    let mut tcp = builder.tcp(source_port, destination_port, segment.seq, segment.window);
    if segment.syn {
        tcp = tcp.syn();
        tcp = tcp
            .options(&[
                TcpOptionElement::MaximumSegmentSize(MSS as u16),
                TcpOptionElement::WindowScale(7),
            ])
            .expect("options fit");
    }
    if segment.fin {
        tcp = tcp.fin();
    }
    if segment.ack != 0 {
        tcp = tcp.ack(segment.ack);
    }
    tcp.write(&mut ip, &payload).expect("packet");
    let ether_type: u16 = if ipv6 { 0x86dd } else { 0x0800 };
    let mut out = Vec::new();
    match link {
        Link::Ethernet => {
            out.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
            out.extend_from_slice(&ether_type.to_be_bytes());
        }
        Link::Vlan => {
            out.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
            out.extend_from_slice(&0x8100u16.to_be_bytes());
            out.extend_from_slice(&42u16.to_be_bytes());
            out.extend_from_slice(&ether_type.to_be_bytes());
        }
        Link::Sll => {
            out.extend_from_slice(&[0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
            out.extend_from_slice(&ether_type.to_be_bytes());
        }
        Link::Sll2 => {
            out.extend_from_slice(&ether_type.to_be_bytes());
            out.extend_from_slice(&[0, 0, 0, 0, 0, 3, 0, 1, 0, 6]);
            out.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0, 0]);
        }
    }
    out.extend_from_slice(&ip);
    out
}

const MS: u64 = 1_000_000;
/// The client's and server's sequence numbers after their SYNs in [`transfer`]'s handshake.
const CLIENT_DATA_SEQ: u32 = 1001;
const SERVER_DATA_SEQ: u32 = 5001;

/// Full data segment number `index` from the client, sent at `time` ns.
fn data(time: u64, index: u32) -> (u64, Segment) {
    (
        time,
        Segment {
            from_client: true,
            seq: CLIENT_DATA_SEQ + index * MSS,
            ack: SERVER_DATA_SEQ,
            window: 512,
            payload: MSS,
            ..Default::default()
        },
    )
}

/// A handshake (10 ms RTT, captured at the client), then data segments 0 to 3 sent 1 µs
/// apart from `base`, the time it returns.
fn four_segments_in_flight() -> (Vec<(u64, Segment)>, u64) {
    let mut segments = transfer(true, 0, 4);
    let base = 20 * MS;
    segments.extend((0..4).map(|index| data(base + u64::from(index) * 1000, index)));
    (segments, base)
}

/// The server's ACK of the client's first `segments` data segments, sent at `time` ns.
fn ack(time: u64, segments: u32) -> (u64, Segment) {
    (
        time,
        Segment {
            from_client: false,
            seq: SERVER_DATA_SEQ,
            ack: CLIENT_DATA_SEQ + segments * MSS,
            window: 1000,
            ..Default::default()
        },
    )
}

/// A transfer of `segments` full segments from client to server, captured `at_client`
/// (SYN-ACK 10 ms after the SYN) or at the server (ACK 10 ms after the SYN-ACK), each
/// data segment acknowledged 10 ms after it is sent, with a receive window of
/// `window_segments` segments (scaled by 2^7).
fn transfer(at_client: bool, segments: u32, window_segments: u32) -> Vec<(u64, Segment)> {
    let window = ((window_segments * MSS) >> 7) as u16;
    let (syn_ack_at, ack_at) = if at_client {
        (10 * MS, 10 * MS + 50_000)
    } else {
        (50_000, 10 * MS + 50_000)
    };
    let client_isn = CLIENT_DATA_SEQ - 1;
    let server_isn = SERVER_DATA_SEQ - 1;
    let mut out = vec![
        (
            0,
            Segment {
                from_client: true,
                seq: client_isn,
                syn: true,
                window: 65535,
                ..Default::default()
            },
        ),
        (
            syn_ack_at,
            Segment {
                from_client: false,
                seq: server_isn,
                ack: client_isn + 1,
                syn: true,
                window: 65535,
                ..Default::default()
            },
        ),
        (
            ack_at,
            Segment {
                from_client: true,
                seq: client_isn + 1,
                ack: server_isn + 1,
                window: 512,
                ..Default::default()
            },
        ),
    ];
    // Data leaves in windows: a full window each 10 ms (the RTT), acknowledged as a whole.
    let mut sent = 0;
    let mut time = ack_at + 100_000;
    while sent < segments {
        let burst = window_segments.min(segments - sent);
        for index in 0..burst {
            out.push((
                time + u64::from(index) * 1000,
                Segment {
                    from_client: true,
                    seq: client_isn + 1 + (sent + index) * MSS,
                    ack: server_isn + 1,
                    window: 512,
                    payload: MSS,
                    ..Default::default()
                },
            ));
        }
        sent += burst;
        time += 10 * MS;
        out.push((
            time - 1000,
            Segment {
                from_client: false,
                seq: server_isn + 1,
                ack: client_isn + 1 + sent * MSS,
                window,
                ..Default::default()
            },
        ));
    }
    out
}

fn capture(link: Link, ipv6: bool, snaplen: usize, segments: &[(u64, Segment)]) -> Vec<u8> {
    let mut pcap = Pcap::new(link.link_type(), snaplen as u32);
    let start = 1_700_000_000 * 1_000_000_000u64;
    for &(time, segment) in segments {
        pcap.record(start + time, &frame(link, ipv6, segment), snaplen);
    }
    pcap.bytes
}

fn report(bytes: &[u8], options: &Options) -> CaptureReport {
    analyse(bytes, options).expect("analysis")
}

#[test]
fn counts_each_direction_and_names_the_syn_sender_the_client() {
    let segments = transfer(true, 40, 10);
    let report = report(
        &capture(Link::Ethernet, false, 65535, &segments),
        &Options::default(),
    );
    assert_eq!(report.flows.len(), 1);
    let flow = &report.flows[0];
    assert_eq!(flow.protocol, "tcp");
    assert_eq!(flow.client, "10.0.0.1:40000");
    assert_eq!(flow.server, "10.0.0.2:5201");
    assert_eq!(flow.client_identified_by, "syn");
    assert_eq!(flow.client_to_server.payload_bytes, 40 * u64::from(MSS));
    assert_eq!(flow.client_to_server.packets, 2 + 40);
    assert_eq!(flow.server_to_client.packets, 1 + 4);
    assert_eq!(flow.server_to_client.payload_bytes, 0);
    assert_eq!(flow.client_to_server.retransmits, 0);
    assert_eq!(flow.data_direction.as_deref(), Some("client_to_server"));
    assert!(
        report.capture.quality.is_empty(),
        "{:?}",
        report.capture.quality
    );
}

#[test]
fn handshake_rtt_follows_the_capture_side() {
    let near_client = report(
        &capture(Link::Ethernet, false, 65535, &transfer(true, 4, 4)),
        &Options::default(),
    );
    let flow = &near_client.flows[0];
    assert_eq!(flow.capture_side, Some(CaptureSide::Client));
    assert_eq!(flow.capture_side_source.as_deref(), Some("detected"));
    // Near the client: t_SYNACK − t_SYN.
    assert_eq!(flow.handshake_rtt_us, Some(10_000.0));

    let near_server = report(
        &capture(Link::Ethernet, false, 65535, &transfer(false, 4, 4)),
        &Options::default(),
    );
    let flow = &near_server.flows[0];
    assert_eq!(flow.capture_side, Some(CaptureSide::Server));
    // Near the server: t_ACK − t_SYN.
    assert_eq!(flow.handshake_rtt_us, Some(10_050.0));

    let given = Options {
        side: Some(CaptureSide::Client),
        ..Options::default()
    };
    let flow = &report(
        &capture(Link::Ethernet, false, 65535, &transfer(false, 4, 4)),
        &given,
    )
    .flows[0];
    assert_eq!(flow.capture_side_source.as_deref(), Some("given"));
    assert_eq!(flow.handshake_rtt_us, Some(50.0));
}

#[test]
fn a_retransmitted_syn_starts_the_handshake_rtt_again() {
    // The first SYN (or its SYN-ACK) was lost: the client sends it again 1 s later, and the
    // handshake completes from there. Timing from the first SYN would report the
    // retransmission timeout as the RTT; from the last, as Karn's rule and Wireshark's
    // initial RTT have it, the path's 10 ms.
    for at_client in [true, false] {
        let mut segments = transfer(at_client, 4, 4);
        let retransmission_ns = 1_000 * MS;
        for (time, _) in segments.iter_mut() {
            *time += retransmission_ns;
        }
        let first_syn = (0, segments[0].1);
        segments.insert(0, first_syn);
        if !at_client {
            // Near the server the lost SYN-ACK was sent; it answered the first SYN.
            let lost_syn_ack = (50_000, segments[2].1);
            segments.insert(1, lost_syn_ack);
        }
        let flow = &report(
            &capture(Link::Ethernet, false, 65535, &segments),
            &Options::default(),
        )
        .flows[0];
        let expected_us = if at_client { 10_000.0 } else { 10_050.0 };
        assert_eq!(
            flow.handshake_rtt_us,
            Some(expected_us),
            "captured at the {}",
            if at_client { "client" } else { "server" }
        );
    }
}

#[test]
fn every_link_type_and_ipv6_give_the_same_record() {
    let segments = transfer(true, 12, 6);
    let reference = report(
        &capture(Link::Ethernet, false, 65535, &segments),
        &Options::default(),
    );
    for (link, ipv6) in [
        (Link::Vlan, false),
        (Link::Sll, false),
        (Link::Sll2, false),
        (Link::Sll2, true),
        (Link::Ethernet, true),
    ] {
        let other = report(&capture(link, ipv6, 65535, &segments), &Options::default());
        assert_eq!(other.flows.len(), 1);
        let (a, b) = (&reference.flows[0], &other.flows[0]);
        assert_eq!(
            a.client_to_server.payload_bytes,
            b.client_to_server.payload_bytes
        );
        assert_eq!(a.client_to_server.packets, b.client_to_server.packets);
        assert_eq!(a.server_to_client.packets, b.server_to_client.packets);
        assert_eq!(a.handshake_rtt_us, b.handshake_rtt_us);
        if ipv6 {
            assert_eq!(b.client, "[fd00::a00:1]:40000");
        }
    }
}

#[test]
fn a_short_snapshot_length_still_counts_whole_payloads() {
    let segments = transfer(true, 12, 6);
    // 14 Ethernet + 20 IP + 20 TCP + 10 payload bytes captured of each frame.
    let cut = report(
        &capture(Link::Ethernet, false, 64, &segments),
        &Options::default(),
    );
    let flow = &cut.flows[0];
    assert_eq!(flow.client_to_server.payload_bytes, 12 * u64::from(MSS));
    assert_eq!(cut.capture.truncated_frames, 12);
    assert_eq!(flow.truncated_packets, 12);
    assert!(
        cut.capture.quality[0].contains("snapshot length"),
        "{:?}",
        cut.capture.quality
    );
    // The SYN's options lie beyond 54 bytes: cut there, the handshake still counts.
    let header_cut = report(
        &capture(Link::Ethernet, false, 54, &segments),
        &Options::default(),
    );
    assert_eq!(
        header_cut.flows[0].client_to_server.payload_bytes,
        12 * u64::from(MSS)
    );
}

#[test]
fn a_window_limited_transfer_is_reported_as_such() {
    // Ten segments a round trip, and the window holds exactly ten: the window binds.
    let limited = report(
        &capture(Link::Ethernet, false, 65535, &transfer(true, 200, 10)),
        &Options::default(),
    );
    let share = limited.flows[0].limited_by_share.expect("a share");
    assert!(share.receive_window > 0.9, "{share:?}");
    assert!((share.receive_window + share.congestion + share.application - 1.0).abs() < 1e-9);
}

#[test]
fn a_transfer_below_its_window_is_not_window_limited() {
    // Same bursts, but the receiver offers four times the window.
    let mut segments = transfer(true, 200, 10);
    let open = ((40 * MSS) >> 7) as u16;
    for (_, segment) in &mut segments {
        if !segment.from_client && !segment.syn {
            segment.window = open;
        }
    }
    let share = report(
        &capture(Link::Ethernet, false, 65535, &segments),
        &Options::default(),
    )
    .flows[0]
        .limited_by_share
        .expect("a share");
    assert!(share.receive_window < 0.1, "{share:?}");
    assert!(share.congestion > 0.8, "{share:?}");
}

#[test]
fn retransmissions_are_classified_by_kind() {
    let (mut segments, base) = four_segments_in_flight();
    segments.extend([
        // Segment 1 lost: three duplicate ACKs for it, then its fast retransmission.
        ack(base + 10 * MS, 1),
        ack(base + 10 * MS + 100, 1),
        ack(base + 10 * MS + 200, 1),
        ack(base + 10 * MS + 300, 1),
        data(base + 10 * MS + 400, 1),
        ack(base + 20 * MS, 4),
        // Segment 4 sent, then resent 300 ms later (a timeout): plain.
        data(base + 21 * MS, 4),
        data(base + 321 * MS, 4),
        ack(base + 331 * MS, 5),
        // Segment 2 again, long after it was acknowledged: spurious.
        data(base + 400 * MS, 2),
    ]);
    let flow = &report(
        &capture(Link::Ethernet, false, 65535, &segments),
        &Options::default(),
    )
    .flows[0];
    let kinds = &flow.client_to_server.retransmits_by_kind;
    assert_eq!(
        (kinds.fast, kinds.plain, kinds.spurious),
        (1, 1, 1),
        "{kinds:?}"
    );
    assert_eq!(flow.client_to_server.retransmits, 3);
    assert_eq!(flow.client_to_server.out_of_order, 0);
}

#[test]
fn a_segment_overtaken_within_the_rtt_is_out_of_order_not_retransmitted() {
    let mut segments = transfer(true, 0, 4);
    let base = 20 * MS;
    // Segment 1 arrives 1 µs after segment 2: well within the 10 ms handshake RTT.
    segments.extend([data(base, 0), data(base + 1000, 2), data(base + 2000, 1)]);
    let flow = &report(
        &capture(Link::Ethernet, false, 65535, &segments),
        &Options::default(),
    )
    .flows[0];
    assert_eq!(flow.client_to_server.out_of_order, 1);
    assert_eq!(flow.client_to_server.retransmits, 0);
}

#[test]
fn udp_flows_take_the_first_sender_as_client() {
    let mut pcap = Pcap::new(1, 65535);
    for (index, from_a) in [true, false, true].into_iter().enumerate() {
        let (source, destination, sport, dport) = if from_a {
            ([10, 0, 0, 9], [10, 0, 0, 8], 5000, 53)
        } else {
            ([10, 0, 0, 8], [10, 0, 0, 9], 53, 5000)
        };
        let mut frame = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
        PacketBuilder::ipv4(source, destination, 64)
            .udp(sport, dport)
            .write(&mut frame, &[0u8; 100])
            .unwrap();
        pcap.record(index as u64 * MS, &frame, 65535);
    }
    let report = report(&pcap.bytes, &Options::default());
    let flow = &report.flows[0];
    assert_eq!(
        (flow.protocol.as_str(), flow.client.as_str()),
        ("udp", "10.0.0.9:5000")
    );
    assert_eq!(flow.client_identified_by, "first_packet");
    assert_eq!(
        (flow.client_to_server.packets, flow.server_to_client.packets),
        (2, 1)
    );
    assert_eq!(flow.client_to_server.payload_bytes, 200);
    assert_eq!(report.bandwidth_ecdf.per_port[0].key, "udp/53");
}

#[test]
fn bad_files_are_refused_with_the_reason() {
    let error = analyse(
        &b"hello, this is not a capture at all"[..],
        &Options::default(),
    )
    .unwrap_err();
    assert!(
        error.to_string().contains("not a pcap or pcapng file"),
        "{error}"
    );
    let error = analyse(&b""[..], &Options::default()).unwrap_err();
    assert!(error.to_string().contains("empty"), "{error}");
    let mut whole = capture(Link::Ethernet, false, 65535, &transfer(true, 4, 4));
    whole.truncate(whole.len() - 7);
    let error = analyse(&whole[..], &Options::default()).unwrap_err();
    assert!(error.to_string().contains("ends inside a block"), "{error}");
}

#[test]
fn a_frame_stamped_before_the_one_it_follows_is_not_a_fast_retransmission() {
    // `-i any` merges interfaces: the resent segment can carry a timestamp a few µs
    // before the duplicate ACK written ahead of it. Wireshark then calls it out of order.
    let (mut segments, base) = four_segments_in_flight();
    segments.extend([
        ack(base + 10 * MS, 1),
        ack(base + 10 * MS + 100, 1),
        ack(base + 10 * MS + 200, 1),
        data(base + 10 * MS + 150, 1),
    ]);
    let flow = &report(
        &capture(Link::Ethernet, false, 65535, &segments),
        &Options::default(),
    )
    .flows[0];
    assert_eq!(flow.client_to_server.retransmits_by_kind.fast, 0);
    assert_eq!(flow.client_to_server.out_of_order, 1);
}

#[test]
fn a_port_s_flows_years_apart_give_its_ecdf_without_listing_every_silent_second() {
    let mut pcap = Pcap::new(1, 65535);
    let year_ns = 365 * 86_400 * 1_000_000_000u64;
    for (index, time) in [0, 1_000_000_000, 3 * year_ns].into_iter().enumerate() {
        let mut frame = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
        PacketBuilder::ipv4([10, 0, 0, 9], [10, 0, 0, 8], 64)
            .udp(5000 + index as u16, 53)
            .write(&mut frame, &[0u8; 125])
            .unwrap();
        pcap.record(time, &frame, 65535);
    }
    let report = report(&pcap.bytes, &Options::default());
    let port = &report.bandwidth_ecdf.per_port[0];
    assert_eq!(port.intervals, 3 * 365 * 86_400 + 1);
    // Three busy seconds of 1000 bits among ~95 million silent ones.
    assert_eq!(port.rates_bps.first(), Some(&0.0));
    assert_eq!(port.rates_bps[19], 0.0);
    assert_eq!(port.rates_bps.last(), Some(&1000.0));
}

/// `-i any` or several `-i` give one interface per capturing device, and a merged file one
/// section per source: the capture's drops are each interface's last running total, summed.
#[test]
fn interface_drops_are_summed_over_interfaces_and_sections() {
    let frames = transfer(true, 4, 4);
    let mut file = Pcapng::new();
    file.interface(1, 65535);
    file.interface(1, 65535);
    for (index, (time_us, segment)) in frames.iter().enumerate() {
        let frame = frame(Link::Ethernet, false, *segment);
        file.packet((index % 2) as u32, *time_us / 1_000, &frame);
    }
    file.statistics(0, 10_000, 3);
    file.statistics(1, 10_000, 7);
    file.statistics(0, 20_000, 5);
    file.section();
    file.interface(1, 65535);
    file.statistics(0, 30_000, 11);
    let summary = report(&file.bytes, &Options::default()).capture;
    assert_eq!(summary.format, "pcapng");
    assert_eq!(summary.dropped_by_interface, Some(5 + 7 + 11));
    assert_eq!(summary.packets, frames.len() as u64);

    let mut quiet = Pcapng::new();
    quiet.interface(1, 65535);
    quiet.packet(0, 1, &frame(Link::Ethernet, false, frames[0].1));
    let summary = report(&quiet.bytes, &Options::default()).capture;
    assert_eq!(summary.dropped_by_interface, None);
}
