use super::*;

fn read(round: u64, port: u32, class: &str, t_query_ns: u64, xmit_wait: u64) -> XmitWaitRead {
    XmitWaitRead {
        round,
        switch: "10".to_string(),
        port,
        class: Some(class.to_string()),
        t_query_ns,
        t_turnaround_ns: 0,
        xmit_wait,
    }
}

/// A round of reads 100 ms apart whose counter grows by `deltas`.
fn round(round_id: u64, port: u32, class: &str, deltas: &[u64]) -> Vec<XmitWaitRead> {
    let mut value = 1_000;
    let mut reads = vec![read(round_id, port, class, 1_000_000_000, value)];
    for (index, delta) in deltas.iter().enumerate() {
        value += delta;
        let t_query_ns = 1_000_000_000 + (index as u64 + 1) * 100_000_000;
        reads.push(read(round_id, port, class, t_query_ns, value));
    }
    reads
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

/// Table 2.3 of the dissertation: a Leaf down port, ΔW = 6,656,811 ticks over
/// Δt = 124,199,424 ns between the reads' mid-points gives 1.179.
#[test]
fn the_worked_example_of_table_2_3() {
    let t_query_ns = 1_456_400_000_000_000_000;
    let reads = vec![
        XmitWaitRead {
            t_turnaround_ns: 18_000_000,
            xmit_wait: 2_426_695_474,
            ..read(1, 3, "Leaf,down", t_query_ns, 0)
        },
        // Mid-points 124,199,424 ns apart: tq + 124,199,424 − (25 − 18)/2 ms.
        XmitWaitRead {
            t_turnaround_ns: 25_000_000,
            xmit_wait: 2_433_352_285,
            ..read(1, 3, "Leaf,down", t_query_ns + 124_199_424 - 3_500_000, 0)
        },
    ];
    let rounds = fitf_rounds(&reads, FDR_TICK_NS).unwrap();
    assert_eq!(rounds.len(), 1);
    let fitf = rounds[0].fitf[0];
    assert!(close(fitf, 22.0 * 6_656_811.0 / 124_199_424.0), "{fitf}");
    assert_eq!(format!("{fitf:.3}"), "1.179");
    assert_eq!(format!("{fitf:.4}"), "1.1792");
}

#[test]
fn a_decrease_below_2_pow_32_is_a_wrap_and_above_it_a_reset() {
    let reads = vec![
        read(1, 1, "ToR,up", 0, 4_294_967_000),
        // 296 ticks to the wrap, 705 after it.
        read(1, 1, "ToR,up", 100_000_000, 705),
        read(1, 1, "ToR,up", 200_000_000, 5_000_000_000),
        // A 64-bit value falling: someone reset the counter.
        read(1, 1, "ToR,up", 300_000_000, 10),
        read(1, 1, "ToR,up", 400_000_000, 10),
    ];
    let rounds = fitf_rounds(&reads, 10.0).unwrap();
    let round = &rounds[0];
    assert_eq!(round.wrapped, 1);
    assert_eq!(round.reset, 1);
    assert_eq!(round.saturated, 0);
    let expected_growth = (5_000_000_000u64 - 705) as f64 * 10.0 / 1e8;
    assert_eq!(round.fitf.len(), 3);
    assert!(
        close(round.fitf[0], 1001.0 * 10.0 / 1e8),
        "{:?}",
        round.fitf
    );
    assert!(close(round.fitf[1], expected_growth), "{:?}", round.fitf);
    assert_eq!(round.fitf[2], 0.0);
    let stats = class_stats(&rounds);
    assert_eq!(stats[0].wrapped_intervals, 1);
    assert_eq!(stats[0].reset_intervals, 1);
    assert_eq!(stats[0].intervals, 3);
}

#[test]
fn a_saturated_counter_is_flagged_not_read_as_zero() {
    let reads = vec![
        read(1, 1, "Spine,down", 0, 4_294_000_000),
        read(1, 1, "Spine,down", 100_000_000, COUNTER32_MAX),
        read(1, 1, "Spine,down", 200_000_000, COUNTER32_MAX),
        read(1, 1, "Spine,down", 300_000_000, COUNTER32_MAX),
    ];
    let rounds = fitf_rounds(&reads, FDR_TICK_NS).unwrap();
    assert_eq!(rounds[0].saturated, 3);
    assert!(rounds[0].fitf.is_empty());
    let stats = &class_stats(&rounds)[0];
    assert_eq!(stats.saturated_intervals, 3);
    assert_eq!((stats.intervals, stats.zero_intervals), (0, 0));
    assert_eq!(stats.nonzero_share, None);
    assert_eq!(stats.round_max, None);
}

/// Tick 10 ns, reads 100 ms apart: FITF = ΔW / 10⁷.
/// Leaf,down: [0, 0.1, 0.5], [0, 0, 0], [0.2, 0, 1.2]; ToR,up: [0.3, 0.3, 0.3].
#[test]
fn class_statistics_on_a_hand_worked_set() {
    let reads: Vec<XmitWaitRead> = [
        round(1, 1, "Leaf,down", &[0, 1_000_000, 5_000_000]),
        round(2, 2, "Leaf,down", &[0, 0, 0]),
        round(3, 1, "Leaf,down", &[2_000_000, 0, 12_000_000]),
        round(4, 7, "ToR,up", &[3_000_000; 3]),
    ]
    .concat();
    let rounds = fitf_rounds(&reads, 10.0).unwrap();
    assert_eq!(rounds.len(), 4);
    let stats = class_stats(&rounds);
    assert_eq!(stats.len(), 2);
    let leaf = &stats[0];
    assert_eq!(leaf.class, "Leaf,down");
    assert_eq!((leaf.rounds, leaf.intervals), (3, 9));
    assert_eq!((leaf.zero_intervals, leaf.nonzero_intervals), (5, 4));
    assert!(close(leaf.nonzero_share.unwrap(), 4.0 / 9.0));
    assert_eq!(leaf.nonzero_rounds, 2);
    assert_eq!(leaf.rounds_max_at_least_one, 1);
    // Maxima 0.5 and 1.2: type-7 quartiles 0.675, 0.85, 1.025.
    let max = leaf.round_max.as_ref().unwrap();
    assert_eq!(max.n, 2);
    assert!(close(max.q1, 0.675) && close(max.median, 0.85) && close(max.q3, 1.025));
    assert_eq!((max.whisker_low, max.whisker_high), (0.5, 1.2));
    assert_eq!(max.outliers, 0);
    // Means over the non-zero entries: (0.1 + 0.5)/2 and (0.2 + 1.2)/2.
    let mean = leaf.round_nonzero_mean.as_ref().unwrap();
    assert!(close(mean.whisker_low, 0.3) && close(mean.whisker_high, 0.7));
    let tor = &stats[1];
    assert_eq!(tor.class, "ToR,up");
    assert_eq!(
        (tor.rounds, tor.nonzero_intervals, tor.zero_intervals),
        (1, 3, 0)
    );
    assert!(close(tor.round_max.as_ref().unwrap().median, 0.3));
}

#[test]
fn boxplot_outliers_beyond_one_and_a_half_iqr() {
    // Quartiles 2 and 4, fences −1 and 7.
    let plot = boxplot(&[3.0, 1.0, 100.0, 2.0, 4.0, f64::NAN]).unwrap();
    assert_eq!((plot.n, plot.q1, plot.median, plot.q3), (5, 2.0, 3.0, 4.0));
    assert_eq!((plot.whisker_low, plot.whisker_high), (1.0, 4.0));
    assert_eq!(plot.outliers, 1);
    assert_eq!(
        (plot.outlier_min, plot.outlier_max),
        (Some(100.0), Some(100.0))
    );
    assert_eq!(boxplot(&[]), None);
}

#[test]
fn bad_rounds_are_refused() {
    let reads = vec![read(1, 1, "a", 100, 0), read(1, 1, "a", 100, 5)];
    assert_eq!(
        fitf_rounds(&reads, 22.0).unwrap_err().to_string(),
        "round 1 of 10 port 1: read 1 is not later than the read before it"
    );
    let reads = vec![read(1, 1, "a", 100, 0), read(1, 1, "b", 200, 5)];
    assert!(matches!(
        fitf_rounds(&reads, 22.0),
        Err(FitfError::ClassChanged { .. })
    ));
    assert_eq!(fitf_rounds(&[], 0.0), Err(FitfError::InvalidTick(0.0)));
}

#[test]
fn csv_round_trips_and_errors_name_line_and_column() {
    let reads = [
        round(1, 1, "Leaf,down", &[5, 0]),
        vec![XmitWaitRead {
            class: None,
            ..read(2, 4, "", 7, 9)
        }],
    ]
    .concat();
    let text = to_csv(&reads);
    assert!(text.starts_with("round,switch,port,class,t_query_ns,t_turnaround_ns,xmit_wait\n"));
    assert!(text.contains(",\"Leaf,down\","), "{text}");
    assert_eq!(parse_csv(&text).unwrap(), reads);

    let text =
        "# reads\nxmit_wait,round,switch,port,t_query_ns,t_turnaround_ns\n12,1,sw1,3,100,20\n";
    let parsed = parse_csv(text).unwrap();
    assert_eq!(parsed[0].xmit_wait, 12);
    assert_eq!(parsed[0].class, None);

    let error =
        parse_csv("round,switch,port,t_query_ns,t_turnaround_ns,xmit_wait\n1,s,1,100,20,x\n");
    assert_eq!(
        error.unwrap_err().to_string(),
        "line 2, column xmit_wait: 'x' is not an unsigned integer"
    );
    let error = parse_csv("round,switch,port,t_query_ns,xmit_wait\n");
    assert_eq!(
        error.unwrap_err().to_string(),
        "line 1: the header has no column 't_turnaround_ns'"
    );
    let error = parse_csv("round,switch,port,t_query_ns,t_turnaround_ns,xmit_wait\n1,s,1\n");
    assert_eq!(
        error.unwrap_err().to_string(),
        "line 2: 3 fields where the header has 6"
    );
    assert_eq!(parse_csv("\n# nothing\n"), Err(FitfError::NoReads));
}

#[test]
fn perfquery_output_basic_and_extended() {
    let basic = "# Port counters: Lid 1719 port 2\nPortSelect:......................2\n\
                 VL15Dropped:.....................0\nPortXmitWait:....................22730501\n";
    assert_eq!(
        parse_perfquery(basic).unwrap(),
        PerfqueryRead {
            lid: Some(1719),
            port: Some(2),
            xmit_wait: 22_730_501,
            extended: false
        }
    );
    let both = format!(
        "{basic}# Port extended counters: Lid 1719 port 2 (CapMask: 0x5300 CapMask2: 0x0000002)\n\
         PortXmitData:....................26006570014026\n\
         PortXmitWait:....................123456789012\n"
    );
    let read = parse_perfquery(&both).unwrap();
    assert_eq!((read.xmit_wait, read.extended), (123_456_789_012, true));
    assert_eq!(
        parse_perfquery("PortXmitData:....1\n"),
        Err(FitfError::NoXmitWait)
    );
    assert_eq!(
        parse_perfquery("PortXmitWait:.....12a\n")
            .unwrap_err()
            .to_string(),
        "perfquery output line 1: '12a' is not a counter value"
    );
}

#[test]
fn only_fdr_has_a_known_tick() {
    assert_eq!(tick_ns_for_rate("56 Gb/sec (4X FDR)"), Some(22.0));
    assert_eq!(tick_ns_for_rate("100 Gb/sec (4X EDR)"), None);
}
