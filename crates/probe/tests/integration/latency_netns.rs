//! Latency engines inside network namespaces this test creates: path-MTU refusal
//! (loopback MTU lowered to 1500), all three protocols across a veth pair, and the
//! ICMP socket fallback (datagram ping socket vs raw, via a per-namespace
//! ping_group_range and a thread that drops CAP_NET_RAW).
//! RTT accuracy against ping and irtt is bench/latency's job. Needs root (CI runs as root); fails with the reason otherwise.

use crate::common;

use std::fs::File;
use std::process::Command;

use common::{no_progress, sh, spec, TestEndpoint};
use nix::sched::{setns, CloneFlags};
use vantage_model::latency::{LatencyProtocol, SandwichSpec};
use vantage_probe::latency::{run_latency, LatencyError};
use vantage_probe::sandwich::run_sandwich;

/// Network namespaces named with a per-test prefix, deleted on drop (also on failure).
struct Namespaces(Vec<String>);

impl Namespaces {
    fn create(test: &str, count: usize) -> Self {
        let prefix = format!("a2{test}{}", std::process::id());
        let names: Vec<String> = (0..count).map(|i| format!("{prefix}n{i}")).collect();
        let mut guard = Namespaces(Vec::new());
        for name in &names {
            sh(&["ip", "netns", "add", name]);
            guard.0.push(name.clone());
            sh(&["ip", "-n", name, "link", "set", "lo", "up"]);
        }
        guard
    }

    /// Runs `f` on a thread that has entered namespace `index`.
    fn run_in<T: Send + 'static>(&self, index: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.0[index]);
        std::thread::spawn(move || {
            let netns = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            setns(netns, CloneFlags::CLONE_NEWNET).unwrap_or_else(|e| panic!("setns {path}: {e}"));
            f()
        })
        .join()
        .expect("namespace thread")
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

#[test]
fn sizes_beyond_the_path_mtu_are_refused_unless_allowed() {
    let namespaces = Namespaces::create("mtu", 1);
    sh(&[
        "ip",
        "-n",
        &namespaces.0[0],
        "link",
        "set",
        "lo",
        "mtu",
        "1500",
    ]);
    namespaces.run_in(0, || {
        let endpoint = TestEndpoint::start(None, |_| {});
        // (target, protocol, largest unfragmented size): 1500 - IP header - 8.
        let cases = [
            ("127.0.0.1", LatencyProtocol::Udp, 1472),
            ("::1", LatencyProtocol::Udp, 1452),
            ("127.0.0.1", LatencyProtocol::Icmp, 1472),
            ("::1", LatencyProtocol::Icmp, 1452),
        ];
        for (ip, protocol, largest) in cases {
            let target = if protocol == LatencyProtocol::Icmp {
                ip.to_string()
            } else {
                endpoint.at(ip)
            };
            let mut probe = spec(target, protocol, 2);
            probe.size_bytes = largest;
            let fits = run_latency(&probe, &mut no_progress)
                .unwrap_or_else(|e| panic!("{ip} {protocol:?} {largest}: {e}"));
            assert_eq!(fits.summary.received, 2);

            probe.size_bytes = largest + 1;
            match run_latency(&probe, &mut no_progress) {
                Err(LatencyError::WouldFragment(refusal)) => {
                    assert_eq!(
                        (refusal.mtu_bytes, refusal.max_payload_bytes),
                        (1500, largest)
                    );
                    let text = refusal.to_string();
                    assert!(
                        text.contains(&format!("{}", largest + 1))
                            && text.contains("--allow-fragmentation")
                    );
                }
                other => panic!("{ip} {protocol:?}: expected a refusal, got {other:?}"),
            }

            probe.size_bytes = 4096;
            probe.allow_fragmentation = true;
            let fragmented = run_latency(&probe, &mut no_progress).unwrap();
            assert_eq!(
                fragmented.summary.received, 2,
                "{ip} {protocol:?} fragmented"
            );
        }
    });
}

#[test]
fn all_protocols_work_across_a_veth_pair() {
    let namespaces = Namespaces::create("veth", 2);
    let (a, b) = (namespaces.0[0].clone(), namespaces.0[1].clone());
    let (veth_a, veth_b) = (
        format!("a2v{}a", std::process::id()),
        format!("a2v{}b", std::process::id()),
    );
    sh(&[
        "ip", "link", "add", &veth_a, "netns", &a, "type", "veth", "peer", "name", &veth_b,
        "netns", &b,
    ]);
    sh(&[
        "ip",
        "-n",
        &a,
        "addr",
        "add",
        "10.201.0.1/24",
        "dev",
        &veth_a,
    ]);
    sh(&[
        "ip",
        "-n",
        &b,
        "addr",
        "add",
        "10.201.0.2/24",
        "dev",
        &veth_b,
    ]);
    sh(&["ip", "-n", &a, "link", "set", &veth_a, "up"]);
    sh(&["ip", "-n", &b, "link", "set", &veth_b, "up"]);

    let endpoint = namespaces.run_in(1, || TestEndpoint::start(None, |_| {}));
    let port = endpoint.addr.port();
    let results = namespaces.run_in(0, move || {
        [
            LatencyProtocol::Udp,
            LatencyProtocol::Tcp,
            LatencyProtocol::Icmp,
        ]
        .map(|protocol| {
            let mut probe = spec(format!("10.201.0.2:{port}"), protocol, 10);
            probe.interval_us = 10_000;
            run_latency(&probe, &mut no_progress).unwrap_or_else(|e| panic!("{protocol:?}: {e}"))
        })
    });
    for result in results {
        let s = &result.summary;
        assert_eq!((s.sent, s.received), (10, 10), "{:?}", result.spec.protocol);
        assert!(s.rtt_us.expect("rtt").min > 0.0);
    }
    // 10 UDP probes plus the two bracket probes.
    assert_eq!(endpoint.stop().udp_reflected, 12);
}

/// Drops CAP_NET_RAW from the calling thread's effective capabilities (capabilities
/// are per thread, so the rest of the test process keeps it).
fn drop_net_raw_for_this_thread() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    const CAP_NET_RAW: u32 = 13;
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget/capset with a version-3 header and the two data words it expects.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    assert_eq!(rc, 0, "capget: {}", std::io::Error::last_os_error());
    data[0].effective &= !(1 << CAP_NET_RAW);
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    assert_eq!(rc, 0, "capset: {}", std::io::Error::last_os_error());
}

#[test]
fn icmp_uses_ping_sockets_when_allowed_and_explains_when_nothing_is() {
    let namespaces = Namespaces::create("icmp", 2);
    // Namespace 0 lets every group open ping sockets; namespace 1 lets none.
    sh(&[
        "ip",
        "netns",
        "exec",
        &namespaces.0[0],
        "sysctl",
        "-qw",
        "net.ipv4.ping_group_range=0 2147483647",
    ]);
    sh(&[
        "ip",
        "netns",
        "exec",
        &namespaces.0[1],
        "sysctl",
        "-qw",
        "net.ipv4.ping_group_range=1 0",
    ]);
    let allowed = namespaces.run_in(0, || {
        drop_net_raw_for_this_thread();
        ["127.0.0.1", "::1"]
            .map(|ip| run_latency(&spec(ip.into(), LatencyProtocol::Icmp, 3), &mut no_progress))
    });
    for result in allowed {
        let result = result.expect("ping socket without CAP_NET_RAW");
        assert_eq!(result.summary.received, 3, "{}", result.target_addr);
    }
    let refused = namespaces.run_in(1, || {
        drop_net_raw_for_this_thread();
        run_latency(
            &spec("127.0.0.1".into(), LatencyProtocol::Icmp, 1),
            &mut no_progress,
        )
    });
    match refused {
        Err(LatencyError::Permission(message)) => {
            assert!(
                message.contains("ping_group_range") && message.contains("CAP_NET_RAW"),
                "{message}"
            );
        }
        other => panic!("expected a permission error, got {other:?}"),
    }
}

#[test]
fn endpoint_answers_from_the_address_it_was_asked_on() {
    // The endpoint's host has two addresses; the client reaches the second one through
    // the first. A reply sourced from the routing default (the veth address) would be
    // dropped by the client's connected socket.
    let namespaces = Namespaces::create("src", 2);
    let (a, b) = (namespaces.0[0].clone(), namespaces.0[1].clone());
    let (veth_a, veth_b) = (
        format!("a2s{}a", std::process::id()),
        format!("a2s{}b", std::process::id()),
    );
    sh(&[
        "ip", "link", "add", &veth_a, "netns", &a, "type", "veth", "peer", "name", &veth_b,
        "netns", &b,
    ]);
    sh(&[
        "ip",
        "-n",
        &a,
        "addr",
        "add",
        "10.203.0.1/24",
        "dev",
        &veth_a,
    ]);
    sh(&[
        "ip",
        "-n",
        &b,
        "addr",
        "add",
        "10.203.0.2/24",
        "dev",
        &veth_b,
    ]);
    sh(&["ip", "-n", &b, "addr", "add", "10.203.9.9/32", "dev", "lo"]);
    sh(&["ip", "-n", &a, "link", "set", &veth_a, "up"]);
    sh(&["ip", "-n", &b, "link", "set", &veth_b, "up"]);
    sh(&[
        "ip",
        "-n",
        &a,
        "route",
        "add",
        "10.203.9.9/32",
        "via",
        "10.203.0.2",
    ]);

    let endpoint = namespaces.run_in(1, || TestEndpoint::start(None, |_| {}));
    let port = endpoint.addr.port();
    let result = namespaces
        .run_in(0, move || {
            let mut probe = spec(format!("10.203.9.9:{port}"), LatencyProtocol::Udp, 5);
            probe.timeout_us = 300_000;
            run_latency(&probe, &mut no_progress)
        })
        .unwrap();
    assert_eq!(result.summary.received, 5);
}

#[test]
fn sandwich_sees_the_queueing_a_large_packet_causes_behind_a_rate_limit() {
    // Client egress shaped by tbf at 1 Mbit/s with a one-frame bucket. The bucket is
    // full when L (1472 B payload = 1514 B frame) leaves, L empties it, and B (64 B
    // payload = 106 B frame) waits for its own tokens: 106 B * 8 us/B = 848 us.
    // Without L in front, B would leave at once: d' - d is L's doing.
    let namespaces = Namespaces::create("sand", 2);
    let (a, b) = (namespaces.0[0].clone(), namespaces.0[1].clone());
    let (veth_a, veth_b) = (
        format!("a2w{}a", std::process::id()),
        format!("a2w{}b", std::process::id()),
    );
    sh(&[
        "ip", "link", "add", &veth_a, "netns", &a, "type", "veth", "peer", "name", &veth_b,
        "netns", &b,
    ]);
    sh(&[
        "ip",
        "-n",
        &a,
        "addr",
        "add",
        "10.204.0.1/24",
        "dev",
        &veth_a,
    ]);
    sh(&[
        "ip",
        "-n",
        &b,
        "addr",
        "add",
        "10.204.0.2/24",
        "dev",
        &veth_b,
    ]);
    sh(&["ip", "-n", &a, "link", "set", &veth_a, "up"]);
    sh(&["ip", "-n", &b, "link", "set", &veth_b, "up"]);
    sh(&[
        "tc", "-n", &a, "qdisc", "add", "dev", &veth_a, "root", "tbf", "rate", "1mbit", "burst",
        "1514", "limit", "10000",
    ]);

    let endpoint = namespaces.run_in(1, || TestEndpoint::start(None, |_| {}));
    let port = endpoint.addr.port();
    let result = namespaces
        .run_in(0, move || {
            run_sandwich(
                &SandwichSpec {
                    target: format!("10.204.0.2:{port}"),
                    port,
                    count: 10,
                    gap_us: 2_000,
                    // Long enough for the bucket to refill between rounds.
                    interval_us: 50_000,
                    timeout_us: 1_000_000,
                    small_size_bytes: 64,
                    large_size_bytes: None,
                    dscp: 0,
                    allow_fragmentation: false,
                },
                &mut |_| {},
            )
        })
        .unwrap();
    let s = &result.summary;
    assert_eq!(
        (s.completed_rounds, s.large_size_bytes, s.path_mtu_bytes),
        (10, 1472, 1500)
    );
    let median = s.queuing_delay_us.expect("queuing delay").median;
    assert!(
        (650.0..1100.0).contains(&median),
        "d' - d median {median} us, expected about 848"
    );
}
