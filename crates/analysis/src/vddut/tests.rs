use super::*;

const MS: i64 = 1_000_000;
const T0_NS: i64 = 10_000 * MS;

fn packet(time_ns: i64, size_bytes: u32) -> Packet {
    Packet {
        time_ns,
        size_bytes,
    }
}

/// The idle stream of the dissertation's trace: 110-B packets every 300 ms for 2 min.
fn idle_stream() -> Vec<Packet> {
    (0..400).map(|k| packet(k * 300 * MS, 110)).collect()
}

#[test]
fn an_update_inside_the_idle_stream_is_recovered_exactly() {
    let mut packets = idle_stream();
    // Before the marker: not part of the update.
    packets.push(packet(T0_NS - 5 * MS, 1400));
    // The update: gaps up to 490 ms, last packet 1.234 s after the marker.
    let update_offsets_ms = [20, 25, 40, 530, 744, 1_234];
    for offset in update_offsets_ms {
        packets.push(packet(T0_NS + offset * MS, 1_000));
    }
    // An idle keep-alive pair a minute later.
    packets.push(packet(T0_NS + 60_000 * MS, 300));
    packets.push(packet(T0_NS + 60_001 * MS, 500));
    packets.reverse(); // any order
    let update = display_update(&packets, T0_NS, VddutParams::default()).unwrap();
    assert_eq!(update.vddut_ns, 1_234 * MS);
    assert_eq!(update.first_packet_ns, T0_NS + 20 * MS);
    assert_eq!(update.packets, 6);
    assert_eq!(update.update_bytes, 6_000);
    assert!((update.vddut_s() - 1.234).abs() < 1e-12);
}

#[test]
fn a_gap_of_exactly_the_limit_continues_the_update_and_one_ns_more_ends_it() {
    let at_limit = [
        packet(T0_NS + 10 * MS, 1_000),
        packet(T0_NS + 510 * MS, 1_000),
    ];
    let update = display_update(&at_limit, T0_NS, VddutParams::default()).unwrap();
    assert_eq!((update.vddut_ns, update.packets), (510 * MS, 2));
    let past_limit = [
        packet(T0_NS + 10 * MS, 1_000),
        packet(T0_NS + 510 * MS + 1, 1_000),
    ];
    let update = display_update(&past_limit, T0_NS, VddutParams::default()).unwrap();
    assert_eq!((update.vddut_ns, update.packets), (10 * MS, 1));
}

#[test]
fn no_large_packet_after_the_marker_is_no_display_update() {
    let mut packets = idle_stream();
    packets.push(packet(T0_NS - MS, 1_400));
    packets.push(packet(T0_NS, 1_400)); // at the marker, not after it
    assert_eq!(
        display_update(&packets, T0_NS, VddutParams::default()),
        Err(VddutError::NoDisplayUpdate {
            min_size_bytes: 110
        })
    );
    let params = VddutParams {
        min_size_bytes: 100,
        ..VddutParams::default()
    };
    // 110 B is larger than a 100-B threshold: the idle stream now counts.
    let update = display_update(&packets, T0_NS, params).unwrap();
    assert_eq!(update.first_packet_ns, 10_200 * MS);
}

#[test]
fn eq_5_1_splits_the_update() {
    let update = DisplayUpdate {
        t0_ns: 0,
        first_packet_ns: 10 * MS,
        last_packet_ns: 500 * MS,
        vddut_ns: 500 * MS,
        update_bytes: 1_250_000,
        packets: 900,
    };
    let parts = decompose(&update, Some(0.3), 1e9).unwrap();
    assert!((parts.t_trans_s - 0.01).abs() < 1e-12);
    assert!((parts.t_retrans_s.unwrap() - 0.19).abs() < 1e-12);
    let parts = decompose(&update, None, 1e9).unwrap();
    assert_eq!(parts.t_retrans_s, None);
    assert!(decompose(&update, Some(-1.0), 1e9).is_err());
    assert!(decompose(&update, None, 0.0).is_err());
}

#[test]
fn geometric_mean_of_a_run() {
    assert!((geometric_mean(&[1.0, 4.0, 16.0]).unwrap() - 4.0).abs() < 1e-12);
    assert_eq!(geometric_mean(&[]), Err(VddutError::Empty));
    assert!(geometric_mean(&[1.0, 0.0]).is_err());
}

#[test]
fn slow_motion_video_quality() {
    // Reference: 1000 B over 100 s at 1 fps (10 B per frame-second); test: 700 B
    // over 10 s at 10 fps (7).
    let reference = Playback {
        data_bytes: 1_000.0,
        playback_s: 100.0,
        ideal_fps: 1.0,
    };
    let test = Playback {
        data_bytes: 700.0,
        playback_s: 10.0,
        ideal_fps: 10.0,
    };
    assert!((slow_motion_vq(&test, &reference).unwrap() - 0.7).abs() < 1e-12);
    let empty = Playback {
        data_bytes: 0.0,
        ..reference
    };
    assert!(slow_motion_vq(&test, &empty).is_err());
}
