use super::*;

fn spec(bitrate_bps: f64, video_s: f64, buffer_s: f64) -> PlaybackSpec {
    PlaybackSpec {
        bitrate_bps,
        video_s,
        initial_buffer_s: buffer_s,
        rebuffer_s: buffer_s,
        loop_series: false,
    }
}

fn steps(pairs: &[(f64, f64)]) -> Vec<RateStep> {
    pairs
        .iter()
        .map(|&(duration_s, rate_bps)| RateStep {
            duration_s,
            rate_bps,
        })
        .collect()
}

fn close(actual: f64, expected: f64) -> bool {
    (actual - expected).abs() < 1e-9
}

#[test]
fn mos_guideline_rows_and_their_edges() {
    assert_eq!(mos_from_stalls(&[]).0, 5);
    assert_eq!(mos_from_stalls(&[0.49]).0, 4);
    assert_eq!(mos_from_stalls(&[0.5]).0, 3);
    assert_eq!(mos_from_stalls(&[3.0]).0, 3);
    assert_eq!(mos_from_stalls(&[3.1]).0, 2);
    assert_eq!(mos_from_stalls(&[8.0]).0, 2);
    assert_eq!(mos_from_stalls(&[8.1]).0, 1);
    assert_eq!(mos_from_stalls(&[0.1, 3.9]).0, 2);
    assert_eq!(mos_from_stalls(&[0.1, 4.0]).0, 1);
    assert_eq!(mos_from_stalls(&[0.1, 0.1, 0.1]).0, 1);
}

#[test]
fn a_rate_above_the_bitrate_never_stalls() {
    // 2 s of video buffered at twice real time takes 1 s; the 10 s video is in by
    // 5 s and plays out from 1 s to 11 s.
    let outcome = play(&spec(1e6, 10.0, 2.0), &steps(&[(20.0, 2e6)])).unwrap();
    assert!(close(outcome.startup_delay_s, 1.0), "{outcome:?}");
    assert!(outcome.stalls.is_empty());
    assert!(close(outcome.finished_at_s, 11.0), "{outcome:?}");
    assert_eq!((outcome.mos, outcome.series_passes), (5, 1));
}

#[test]
fn a_rate_below_the_bitrate_stalls_when_the_buffer_drains() {
    // 0.8 Mbit/s for a 1 Mbit/s, 20 s video: start-up 2 / 0.8 = 2.5 s. The 2 s buffer
    // drains at 0.2 s/s and empties at 12.5 s (10 s played, 10 s downloaded);
    // re-buffering 2 s takes 2.5 s; the remaining 8 s arrive by 25 s exactly as the
    // buffer runs out at the end of the video.
    let outcome = play(&spec(1e6, 20.0, 2.0), &steps(&[(30.0, 0.8e6)])).unwrap();
    assert!(close(outcome.startup_delay_s, 2.5), "{outcome:?}");
    assert_eq!(outcome.stalls.len(), 1, "{outcome:?}");
    let stall = outcome.stalls[0];
    assert!(
        close(stall.start_s, 12.5) && close(stall.duration_s, 2.5),
        "{stall:?}"
    );
    assert!(close(stall.video_position_s, 10.0), "{stall:?}");
    assert!(close(outcome.finished_at_s, 25.0), "{outcome:?}");
    assert_eq!(outcome.mos, 3);
}

#[test]
fn an_outage_gives_stalls_by_its_length() {
    // 1 s buffers at 1 Mbit/s: playback starts at 1 s with 1 s of video ahead and
    // holds it. A 1.3 s outage at 4 s drains it at 5 s; at 5.3 s the rate returns,
    // 1 s of video takes 1 s to buffer: one 1.3 s stall (MOS 3).
    let series = steps(&[(4.0, 1e6), (1.3, 0.0), (30.0, 1e6)]);
    let outcome = play(&spec(1e6, 10.0, 1.0), &series).unwrap();
    assert_eq!(outcome.stalls.len(), 1, "{outcome:?}");
    assert!(close(outcome.stalls[0].start_s, 5.0), "{outcome:?}");
    assert!(close(outcome.stalls[0].duration_s, 1.3), "{outcome:?}");
    assert_eq!(outcome.mos, 3);
    // Two outages: two stalls of 1.3 s → MOS 2.
    let series = steps(&[(4.0, 1e6), (1.3, 0.0), (4.0, 1e6), (1.3, 0.0), (30.0, 1e6)]);
    let outcome = play(&spec(1e6, 20.0, 1.0), &series).unwrap();
    let durations: Vec<f64> = outcome.stalls.iter().map(|s| s.duration_s).collect();
    assert_eq!(durations.len(), 2, "{outcome:?}");
    assert!(durations.iter().all(|&d| close(d, 1.3)), "{durations:?}");
    assert_eq!(outcome.mos, 2);
}

#[test]
fn a_short_series_is_an_error_unless_looped() {
    let series = steps(&[(5.0, 2e6)]);
    let error = play(&spec(1e6, 20.0, 2.0), &series).unwrap_err();
    assert_eq!(
        error,
        QoeError::SeriesTooShort {
            series_s: 5.0,
            downloaded_s: 10.0,
            video_s: 20.0
        }
    );
    let looped = PlaybackSpec {
        loop_series: true,
        ..spec(1e6, 20.0, 2.0)
    };
    let outcome = play(&looped, &series).unwrap();
    assert_eq!((outcome.series_passes, outcome.mos), (2, 5));
    assert!(close(outcome.finished_at_s, 21.0), "{outcome:?}");
}

#[test]
fn a_video_downloaded_before_the_series_ends_plays_out_of_the_buffer() {
    // Downloaded by 7.5 s, started at 0.5 s: playback ends at 30.5 s, after the series.
    let outcome = play(&spec(1e6, 30.0, 2.0), &steps(&[(10.0, 4e6)])).unwrap();
    assert!(close(outcome.finished_at_s, 30.5), "{outcome:?}");
    assert_eq!((outcome.mos, outcome.series_passes), (5, 1));
}

#[test]
fn bad_input_names_what_and_where() {
    let error = play(&spec(1e6, 10.0, 2.0), &[]).unwrap_err();
    assert_eq!(error, QoeError::EmptySeries);
    let error = play(&spec(1e6, 10.0, 2.0), &steps(&[(1.0, 1e6), (1.0, -3.0)])).unwrap_err();
    assert_eq!(
        error.to_string(),
        "series step 1: rate_bps must be a finite number ≥ 0 (got -3)"
    );
    let error = play(&spec(f64::NAN, 10.0, 2.0), &steps(&[(1.0, 1e6)])).unwrap_err();
    assert!(
        error.to_string().starts_with("bitrate_bps must be"),
        "{error}"
    );
    let error = play(&spec(1e6, 10.0, 2.0), &steps(&[(1.0, 0.0)])).unwrap_err();
    assert_eq!(error, QoeError::NoData);
}

#[test]
fn series_from_intervals_keeps_one_direction() {
    use vantage_model::throughput::StreamInterval;
    let stream = |stream, direction, bytes| StreamInterval {
        stream,
        direction,
        bytes,
        bps: 0.0,
        tcp: None,
        udp: None,
    };
    let intervals = vec![Interval {
        start_s: 0.0,
        end_s: 0.5,
        bps: 0.0,
        omitted: true,
        streams: vec![
            stream(1, Direction::Forward, 1_000),
            stream(2, Direction::Reverse, 250),
            stream(3, Direction::Reverse, 250),
        ],
    }];
    let reverse = series_from_intervals(&intervals, Some(Direction::Reverse));
    assert_eq!(reverse, steps(&[(0.5, 8_000.0)]));
    let all = series_from_intervals(&intervals, None);
    assert_eq!(all, steps(&[(0.5, 24_000.0)]));
}

#[test]
fn every_profile_is_found_by_name() {
    for profile in PROFILES {
        assert_eq!(super::profile(profile.name), Some(profile));
    }
    assert_eq!(profile("8k"), None);
}
