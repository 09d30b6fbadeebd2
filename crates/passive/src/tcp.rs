//! TCP sequence analysis of one connection as seen at one point of its path:
//! retransmissions by kind, zero windows, the handshake's timing, RTT samples from the
//! timestamps option, and what limited the sender over time.
//!
//! Retransmissions are classified as Wireshark's TCP analysis classifies them, so the
//! counts can be checked against `tshark`'s `tcp.analysis.retransmission` field (which
//! covers plain, fast and spurious retransmissions, not out-of-order segments).

use crate::decode::{TcpFlags, TcpSegment};

/// A segment that repeats sequence space, by how it came about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetransmitKind {
    /// After at least two duplicate ACKs for its start, within 20 ms of the last one.
    Fast,
    /// Data the receiver had already acknowledged.
    Spurious,
    /// Any other segment below the highest sequence number sent (typically after a
    /// retransmission timeout).
    Plain,
    /// Below the highest sequence sent, yet so soon after it (within the handshake's
    /// RTT, or 3 ms without one) that it was reordered rather than sent again. Not a
    /// retransmission.
    OutOfOrder,
}

const FAST_RETRANSMIT_WINDOW_NS: i64 = 20_000_000;
const OUT_OF_ORDER_DEFAULT_NS: i64 = 3_000_000;
/// RTT samples kept per direction: enough for a distribution, bounded for long flows.
const MAX_RTT_SAMPLES: usize = 100_000;
/// A sender is window-limited when less than a tenth of the window (or one segment) is
/// left unused.
const WINDOW_MARGIN_DIVISOR: u64 = 10;
/// TSvals awaiting their echo per direction; older ones are dropped first.
const MAX_PENDING_TSVALS: usize = 4_096;

/// One direction's sending state, from the sender's segments and the peer's ACKs.
#[derive(Debug, Default, Clone)]
pub struct SenderState {
    /// Highest sequence number sent + 1 (SYN and FIN count one).
    next_seq: Option<u32>,
    next_seq_time_ns: i64,
    /// The ACK number this side last sent, and when.
    last_ack: Option<u32>,
    last_ack_time_ns: i64,
    /// Duplicate ACKs this side has sent in a row.
    duplicate_acks: u32,
    /// The raw window field this side last advertised.
    window: Option<u16>,
    /// Window scale this side announced in its SYN; applied once both sides did.
    window_scale: Option<u8>,
    /// MSS this side announced in its SYN.
    pub announced_mss: Option<u16>,
    /// Largest payload this side sent in one wire-sized segment (at most the MSS its
    /// peer announced): the sender's full segment. Super-segments captured above TSO
    /// are larger and do not count.
    full_segment: u32,
    /// The last data segment was not a whole number of full segments: the application
    /// had no more to give at that moment.
    last_segment_short: bool,
    /// TSvals this side sent, in order, with the time each was first seen.
    pending_tsvals: std::collections::VecDeque<(u32, i64)>,
    /// Capture point to this side's peer and back, from the peer's echoes (µs).
    pub echo_rtt_us: Vec<f64>,
    pub retransmits_plain: u64,
    pub retransmits_fast: u64,
    pub retransmits_spurious: u64,
    pub out_of_order: u64,
    pub zero_windows: u64,
}

impl SenderState {
    /// Retransmissions as `tshark` counts `tcp.analysis.retransmission`.
    pub fn retransmits(&self) -> u64 {
        self.retransmits_plain + self.retransmits_fast + self.retransmits_spurious
    }
}

/// What held the data sender back at an instant (the states T-RAT names, Zhang et al.,
/// SIGCOMM 2002, judged from one capture point).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    ReceiveWindow,
    Congestion,
    Application,
}

/// Time spent in each limit, nanoseconds.
#[derive(Debug, Default, Clone, Copy)]
pub struct LimitTime {
    pub receive_window_ns: i64,
    pub congestion_ns: i64,
    pub application_ns: i64,
}

/// The three-way handshake's times, as captured.
#[derive(Debug, Default, Clone, Copy)]
pub struct Handshake {
    pub syn_ns: Option<i64>,
    pub syn_ack_ns: Option<i64>,
    pub ack_ns: Option<i64>,
    /// Sequence number the handshake's ACK must carry as its acknowledgement.
    expected_ack: Option<u32>,
}

/// A TCP connection's analysis; side 0 sent the first segment seen (the SYN, when the
/// capture has it).
#[derive(Debug, Default, Clone)]
pub struct TcpConnection {
    pub sides: [SenderState; 2],
    pub handshake: Handshake,
    /// Time-weighted limits of each side as a data sender.
    limits: [LimitTime; 2],
    last_event_ns: Option<i64>,
}

fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

fn seq_gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

fn seq_le(a: u32, b: u32) -> bool {
    !seq_gt(a, b)
}

impl TcpConnection {
    /// Analyses one segment sent by `side` at `time_ns` with `payload_len` bytes.
    pub fn segment(
        &mut self,
        side: usize,
        time_ns: i64,
        segment: &TcpSegment,
        payload_len: u32,
    ) -> Option<RetransmitKind> {
        self.account_limits(time_ns);
        self.handshake_step(side, time_ns, segment);
        let [first, second] = &mut self.sides;
        let (sender, receiver) = if side == 0 {
            (first, second)
        } else {
            (second, first)
        };
        let flags = segment.flags;
        if flags.syn {
            sender.window_scale = segment.window_scale;
            sender.announced_mss = segment.mss.or(sender.announced_mss);
        }
        if segment.window == 0 && !(flags.syn || flags.fin || flags.rst) {
            sender.zero_windows += 1;
        }
        // Zero window probe: one byte at the next sequence number into a closed window.
        let zero_window_probe =
            payload_len == 1 && sender.next_seq == Some(segment.seq) && receiver.window == Some(0);
        let kind = classify(
            sender,
            receiver,
            time_ns,
            segment,
            payload_len,
            zero_window_probe,
            self.handshake,
        );
        match kind {
            Some(RetransmitKind::Fast) => sender.retransmits_fast += 1,
            Some(RetransmitKind::Spurious) => sender.retransmits_spurious += 1,
            Some(RetransmitKind::Plain) => sender.retransmits_plain += 1,
            Some(RetransmitKind::OutOfOrder) => sender.out_of_order += 1,
            None => {}
        }
        let peer_mss = receiver.announced_mss;
        update_sequence_state(
            sender,
            time_ns,
            segment,
            payload_len,
            zero_window_probe,
            peer_mss,
        );
        echo_rtt(sender, receiver, time_ns, segment);
        kind
    }

    fn handshake_step(&mut self, side: usize, time_ns: i64, segment: &TcpSegment) {
        let flags = segment.flags;
        let handshake = &mut self.handshake;
        if flags.syn && !flags.ack && side == 0 && handshake.ack_ns.is_none() {
            // A retransmitted SYN starts the handshake's timing again (Karn's rule, and
            // Wireshark's initial RTT): the SYN-ACK that follows may answer it, and
            // timing from the first SYN would count the retransmission timeout as RTT.
            *handshake = Handshake {
                syn_ns: Some(time_ns),
                ..Handshake::default()
            };
        } else if flags.syn && flags.ack && side == 1 && handshake.syn_ns.is_some() {
            if handshake.syn_ack_ns.is_none() {
                handshake.syn_ack_ns = Some(time_ns);
                handshake.expected_ack = Some(segment.seq.wrapping_add(1));
            }
        } else if side == 0
            && flags.ack
            && !flags.syn
            && handshake.ack_ns.is_none()
            && handshake.expected_ack == Some(segment.ack)
        {
            handshake.ack_ns = Some(time_ns);
        }
    }

    /// The handshake's RTT as the SYN-to-ACK time (Wireshark's initial RTT), used as the
    /// out-of-order threshold.
    fn initial_rtt_ns(handshake: Handshake) -> Option<i64> {
        Some(handshake.ack_ns? - handshake.syn_ns?)
    }

    /// Charges the time since the previous segment to what limited each data sender in
    /// the state that segment left.
    fn account_limits(&mut self, now_ns: i64) {
        if let Some(previous_ns) = self.last_event_ns {
            let elapsed_ns = (now_ns - previous_ns).max(0);
            for side in 0..2 {
                if let Some(limit) = self.limit(side) {
                    let time = &mut self.limits[side];
                    match limit {
                        Limit::ReceiveWindow => time.receive_window_ns += elapsed_ns,
                        Limit::Congestion => time.congestion_ns += elapsed_ns,
                        Limit::Application => time.application_ns += elapsed_ns,
                    }
                }
            }
        }
        self.last_event_ns = Some(now_ns);
    }

    /// What limits `side` as a sender now; `None` before it has sent data or once
    /// everything it sent is acknowledged after its last byte (its FIN).
    fn limit(&self, side: usize) -> Option<Limit> {
        let sender = &self.sides[side];
        let receiver = &self.sides[1 - side];
        if sender.full_segment == 0 {
            return None;
        }
        let next_seq = sender.next_seq?;
        let acked = receiver.last_ack?;
        let in_flight = next_seq.wrapping_sub(acked);
        if in_flight as i32 <= 0 {
            return Some(Limit::Application);
        }
        let window = receiver.scaled_window(sender)?;
        // Window-limited when what is left of the window is under one segment or a tenth
        // of the window: senders that coalesce writes (TSO autosizing) wait for room for
        // a larger chunk than one segment before sending.
        let margin = u64::from(sender.full_segment).max(window / WINDOW_MARGIN_DIVISOR);
        if u64::from(in_flight) + margin > window {
            Some(Limit::ReceiveWindow)
        } else if sender.last_segment_short {
            Some(Limit::Application)
        } else {
            Some(Limit::Congestion)
        }
    }

    /// Share of a sender's data phase spent in each limit.
    pub fn limit_time(&self, side: usize) -> LimitTime {
        self.limits[side]
    }
}

impl SenderState {
    /// This side's advertised receive window in bytes, scaled once both sides announced
    /// scaling in their SYNs (RFC 7323); `None` before it advertised one.
    fn scaled_window(&self, peer: &SenderState) -> Option<u64> {
        let raw = u64::from(self.window?);
        let shift = match (self.window_scale, peer.window_scale) {
            (Some(own), Some(_)) => own.min(14),
            _ => 0,
        };
        Some(raw << shift)
    }
}

fn classify(
    sender: &mut SenderState,
    receiver: &SenderState,
    time_ns: i64,
    segment: &TcpSegment,
    payload_len: u32,
    zero_window_probe: bool,
    handshake: Handshake,
) -> Option<RetransmitKind> {
    let flags: TcpFlags = segment.flags;
    let seq = segment.seq;
    let control = flags.syn || flags.fin || flags.rst;
    // Keep-alive: zero or one byte one below the next expected sequence number.
    let keep_alive = payload_len <= 1
        && sender
            .next_seq
            .is_some_and(|next| seq == next.wrapping_sub(1))
        && !control;
    // Duplicate ACK: no data, same ACK, window and sequence number as before.
    let duplicate_ack = payload_len == 0
        && !control
        && segment.window != 0
        && sender.window == Some(segment.window)
        && sender.next_seq == Some(seq)
        && sender.last_ack == Some(segment.ack);
    if duplicate_ack && !zero_window_probe {
        sender.duplicate_acks += 1;
    }
    if sender.last_ack != Some(segment.ack) {
        sender.duplicate_acks = 0;
    }
    if zero_window_probe || keep_alive || !(payload_len > 0 || flags.syn || flags.fin) {
        return None;
    }
    // Data the receiver had already acknowledged: spurious, whatever else it looks like
    // (Wireshark 4.0 checks this first).
    if payload_len > 0
        && receiver
            .last_ack
            .is_some_and(|acked| acked != 0 && seq_le(seq.wrapping_add(payload_len), acked))
    {
        return Some(RetransmitKind::Spurious);
    }
    let next_seq = sender.next_seq?;
    let mut not_advanced = seq_lt(seq, next_seq);
    // More than one byte starting one below the expected: it follows a window probe.
    if payload_len > 1 && next_seq.wrapping_sub(1) == seq {
        not_advanced = false;
    }
    if not_advanced
        && receiver.duplicate_acks >= 2
        && receiver.last_ack == Some(seq)
        && within(
            time_ns - receiver.last_ack_time_ns,
            FAST_RETRANSMIT_WINDOW_NS,
        )
    {
        return Some(RetransmitKind::Fast);
    }
    let out_of_order_ns =
        TcpConnection::initial_rtt_ns(handshake).unwrap_or(OUT_OF_ORDER_DEFAULT_NS);
    let end = seq
        .wrapping_add(payload_len)
        .wrapping_add(u32::from(flags.syn || flags.fin));
    if not_advanced && within(time_ns - sender.next_seq_time_ns, out_of_order_ns) && next_seq != end
    {
        return Some(RetransmitKind::OutOfOrder);
    }
    not_advanced.then_some(RetransmitKind::Plain)
}

/// Whether `elapsed_ns` is in [0, limit). Captures merged from several interfaces (`-i any`)
/// can put a frame before the one it follows; a negative interval is "not within", as in
/// Wireshark's unsigned arithmetic.
fn within(elapsed_ns: i64, limit_ns: i64) -> bool {
    (0..limit_ns).contains(&elapsed_ns)
}

/// Probes into a closed window do not advance the sequence space (as in Wireshark).
fn update_sequence_state(
    sender: &mut SenderState,
    time_ns: i64,
    segment: &TcpSegment,
    payload_len: u32,
    zero_window_probe: bool,
    peer_mss: Option<u16>,
) {
    let flags = segment.flags;
    let mut end = segment.seq.wrapping_add(payload_len);
    if flags.syn || flags.fin {
        end = end.wrapping_add(1);
    }
    let advances = sender.next_seq.is_none_or(|next| seq_gt(end, next));
    if advances && !zero_window_probe {
        sender.next_seq = Some(end);
        sender.next_seq_time_ns = time_ns;
    }
    if payload_len > 0 {
        if peer_mss.is_none_or(|mss| payload_len <= u32::from(mss)) {
            sender.full_segment = sender.full_segment.max(payload_len);
        }
        sender.last_segment_short = payload_len % sender.full_segment.max(1) != 0;
    }
    if flags.ack {
        sender.last_ack = Some(segment.ack);
        sender.last_ack_time_ns = time_ns;
    }
    sender.window = Some(segment.window);
}

/// RTT from the timestamps option, as passive ping (pping, Nichols) takes it: the time from this side's first segment carrying
/// TSval v to the peer's first segment echoing v is the path from the capture point to
/// the peer and back (plus the peer's ACK delay).
fn echo_rtt(
    sender: &mut SenderState,
    receiver: &mut SenderState,
    time_ns: i64,
    segment: &TcpSegment,
) {
    let Some((value, echo)) = segment.timestamps else {
        return;
    };
    if sender
        .pending_tsvals
        .back()
        .is_none_or(|&(last, _)| seq_gt(value, last))
    {
        if sender.pending_tsvals.len() == MAX_PENDING_TSVALS {
            sender.pending_tsvals.pop_front();
        }
        sender.pending_tsvals.push_back((value, time_ns));
    }
    if segment.flags.ack && echo != 0 {
        // The peer's TSvals up to the one echoed are answered; the echoed one gives a sample.
        while let Some(&(pending, sent_ns)) = receiver.pending_tsvals.front() {
            if seq_gt(pending, echo) {
                break;
            }
            receiver.pending_tsvals.pop_front();
            if pending == echo && receiver.echo_rtt_us.len() < MAX_RTT_SAMPLES {
                receiver.echo_rtt_us.push((time_ns - sent_ns) as f64 / 1e3);
            }
        }
    }
}
