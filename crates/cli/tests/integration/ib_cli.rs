//! `vantage ib` as users run it: class statistics of a CSV of PortXmitWait reads
//! (Table 2.3's worked example of Alali 2019 inside), and live sampling of a fake sysfs
//! tree, with the refusal when no InfiniBand port exists.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use support::vantage_bin;

fn ib(args: &[&str]) -> Output {
    Command::new(vantage_bin())
        .arg("ib")
        .args(args)
        .output()
        .expect("run vantage ib")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Round 1: a Leaf down port, Table 2.3's two reads (FITF 1.1792) then an idle
/// interval; round 2: a ToR up port that never waits.
const READS: &str = "\
round,switch,port,class,t_query_ns,t_turnaround_ns,xmit_wait
1,417,3,\"Leaf,down\",1456400000000000000,18000000,2426695474
1,417,3,\"Leaf,down\",1456400000120699424,25000000,2433352285
1,417,3,\"Leaf,down\",1456400000220699424,25000000,2433352285
2,12,1,\"ToR,up\",1456400001000000000,20000000,77
2,12,1,\"ToR,up\",1456400001100000000,20000000,77
";

#[test]
fn fitf_of_a_csv_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reads.csv");
    std::fs::write(&path, READS).unwrap();
    let output = ib(&["fitf", path.to_str().unwrap(), "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["tick_ns"], 22.0);
    assert_eq!(
        (report["reads"].clone(), report["rounds"].clone()),
        (5.into(), 2.into())
    );
    let leaf = &report["classes"][0];
    assert_eq!(leaf["class"], "Leaf,down");
    assert_eq!(leaf["intervals"], 2);
    assert_eq!(leaf["nonzero_intervals"], 1);
    assert_eq!(leaf["rounds_max_at_least_one"], 1);
    let max = leaf["round_max"]["median"].as_f64().unwrap();
    assert_eq!(format!("{max:.4}"), "1.1792");
    let tor = &report["classes"][1];
    assert_eq!(tor["class"], "ToR,up");
    assert_eq!(
        (tor["zero_intervals"].clone(), tor["nonzero_rounds"].clone()),
        (1.into(), 0.into())
    );
    assert!(tor["round_max"].is_null());

    let output = ib(&["fitf", path.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("tick 22 ns: 5 reads, 2 rounds"), "{text}");
    assert!(text.contains("1.179"), "{text}");

    std::fs::write(&path, READS.replace("2433352285\n1", "24333x2285\n1")).unwrap();
    let output = ib(&["fitf", path.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(
        stderr(&output)
            .ends_with("line 3, column xmit_wait: '24333x2285' is not an unsigned integer\n"),
        "{}",
        stderr(&output)
    );
}

/// `vantage ib ARGS --json --csv CSV`, which must succeed: its report.
fn sample_json(args: &[&str], csv: &Path) -> serde_json::Value {
    let output = ib(&[args, &["--json", "--csv", csv.to_str().unwrap()]].concat());
    assert!(output.status.success(), "{}", stderr(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn fake_port(root: &Path, device: &str, rate: &str, wait: u64) {
    let dir = root.join(device).join("ports/1");
    std::fs::create_dir_all(dir.join("counters")).unwrap();
    std::fs::write(dir.join("counters/port_xmit_wait"), format!("{wait}\n")).unwrap();
    std::fs::write(dir.join("state"), "4: ACTIVE\n").unwrap();
    std::fs::write(dir.join("rate"), format!("{rate}\n")).unwrap();
}

#[test]
fn sample_reads_a_sysfs_tree_and_never_invents_a_port() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("infiniband");
    fake_port(&root, "mlx4_0", "56 Gb/sec (4X FDR)", 5);
    let csv = dir.path().join("reads.csv");
    let root_arg = root.to_str().unwrap();
    let args = [
        "sample",
        "--sysfs-root",
        root_arg,
        "--reads",
        "3",
        "--interval",
        "1ms",
    ];
    let report = sample_json(&[&args[..], &["--rounds", "2"]].concat(), &csv);
    assert_eq!(report["tick_ns"], 22.0);
    assert_eq!(report["rounds"], 2);
    let class = &report["classes"][0];
    assert_eq!(class["class"], "unclassified");
    assert_eq!(
        (class["intervals"].clone(), class["zero_intervals"].clone()),
        (4.into(), 4.into())
    );
    let written = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(written.lines().count(), 7, "{written}");
    assert!(
        written.lines().nth(1).unwrap().starts_with("1,mlx4_0,1,,"),
        "{written}"
    );
    assert!(
        written.lines().all(|line| !line.ends_with(",0")),
        "{written}"
    );

    fake_port(&root, "mlx5_0", "100 Gb/sec (4X EDR)", 0);
    let output = ib(&args);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("mlx5_0 port 1 runs at 100 Gb/sec (4X EDR): its PortXmitWait tick is known only for FDR"),
        "{}",
        stderr(&output)
    );
    let output = ib(&[&args[..], &["--tick-ns", "10", "--csv", "-"]].concat());
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.starts_with("round,switch,port,class,t_query_ns,t_turnaround_ns,xmit_wait\n"));
    assert_eq!(text.lines().count(), 7);
    assert!(stderr(&output).contains("tick 10 ns"));

    let missing = dir.path().join("none");
    let output = ib(&["sample", "--sysfs-root", missing.to_str().unwrap()]);
    assert!(!output.status.success());
    assert_eq!(
        stderr(&output),
        format!(
            "vantage ib: no InfiniBand ports under {}\n",
            missing.display()
        )
    );
}

/// A stand-in for infiniband-diags' perfquery that answers `-x LID PORT` as the real one
/// does, with the next of `values` as PortXmitWait each time it runs.
fn fake_perfquery(dir: &Path, values: &[u64]) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let values_path = dir.join("values");
    let list: Vec<String> = values.iter().map(u64::to_string).collect();
    std::fs::write(&values_path, list.join("\n") + "\n").unwrap();
    let state = dir.join("calls");
    let script = dir.join("perfquery");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             [ \"$1\" = -x ] || exit 64\n\
             n=$(cat {state} 2>/dev/null || echo 0); echo $((n + 1)) > {state}\n\
             echo \"# Port extended counters: Lid $2 port $3 (CapMask: 0x5A00)\"\n\
             echo \"PortSelect:......................$3\"\n\
             echo \"PortXmitData:....................982451653\"\n\
             echo \"PortXmitWait:....................$(sed -n \"$((n + 1))p\" {values})\"\n",
            state = state.display(),
            values = values_path.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// A switch port read through perfquery -x: Table 2.3's two reads come back as FITF
/// 1.179 in the port's class, and the reads are kept in the CSV as taken.
#[test]
fn sample_reads_switch_ports_through_perfquery() {
    let dir = tempfile::tempdir().unwrap();
    let perfquery = fake_perfquery(dir.path(), &[2_426_695_474, 2_433_352_285, 2_433_352_285]);
    let csv = dir.path().join("reads.csv");
    let no_hca = dir.path().join("no-infiniband");
    let args = [
        "sample",
        "--sysfs-root",
        no_hca.to_str().unwrap(),
        "--switch-port",
        "417:3=Leaf,down",
        "--perfquery",
        perfquery.to_str().unwrap(),
        "--reads",
        "3",
        "--interval",
        "1ms",
    ];
    let report = sample_json(&[&args[..], &["--tick-ns", "22"]].concat(), &csv);
    let leaf = &report["classes"][0];
    assert_eq!(leaf["class"], "Leaf,down");
    assert_eq!(
        (leaf["intervals"].clone(), leaf["nonzero_intervals"].clone()),
        (2.into(), 1.into())
    );
    let written = std::fs::read_to_string(&csv).unwrap();
    let values: Vec<&str> = written
        .lines()
        .skip(1)
        .map(|line| line.rsplit(',').next().unwrap())
        .collect();
    assert_eq!(
        values,
        ["2426695474", "2433352285", "2433352285"],
        "{written}"
    );
    assert!(
        written
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("1,417,3,\"Leaf,down\","),
        "{written}"
    );
    // The FITF itself depends on the reads' real spacing; Table 2.3's is checked by
    // fitf_of_a_csv_fixture. Here: the one non-zero interval is the second read's.
    assert!(leaf["round_max"]["median"].as_f64().unwrap() > 0.0);

    let output = ib(&args);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("the speed of switch LID 417 port 3 is not read, so neither is its PortXmitWait tick: give --tick-ns"),
        "{}",
        stderr(&output)
    );
    let output = ib(&["sample", "--switch-port", "417", "--tick-ns", "22"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("'417' is not LID:PORT"),
        "{}",
        stderr(&output)
    );
    let absent = dir.path().join("absent");
    let output = ib(&[
        &args[..5],
        &["--perfquery", absent.to_str().unwrap(), "--tick-ns", "22"],
    ]
    .concat());
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains(&format!(
            "cannot run {} (infiniband-diags' perfquery reads a switch port's counters)",
            absent.display()
        )),
        "{}",
        stderr(&output)
    );
}
