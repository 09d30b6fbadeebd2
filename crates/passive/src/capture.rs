//! Reading pcap and pcapng files frame by frame, with what the file says about its own
//! quality: each frame's captured and original length, and drops an interface reported.

use std::io::Read;

use pcap_parser::pcapng::Block;
use pcap_parser::{create_reader, PcapBlockOwned, PcapError};

use crate::PassiveError;

/// One captured frame, borrowed from the reader's buffer for the length of a callback.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// Capture time, nanoseconds since the Unix epoch.
    pub time_ns: i64,
    pub link_type: i32,
    /// The bytes captured (at most the snapshot length).
    pub data: &'a [u8],
    /// The frame's length on the wire.
    pub original_len: u32,
}

/// Per-file facts gathered while reading.
#[derive(Debug, Default, Clone)]
pub struct FileFacts {
    pub format: &'static str,
    /// Snapshot length from the pcap header or the interfaces' descriptions (largest).
    pub snaplen: Option<u32>,
    /// Packets the capturing interfaces said they dropped (pcapng statistics blocks);
    /// `None` when the file carries no such statement (pcap never does).
    pub dropped_by_interface: Option<u64>,
}

struct Interface {
    link_type: i32,
    units_per_second: u64,
    offset_s: i64,
    /// The interface's latest statistics block's drop count: a running total.
    dropped: Option<u64>,
}

/// Adds the drops the interfaces reported to `total` (which stays `None` while none did).
fn add_drops(total: &mut Option<u64>, interfaces: &[Interface]) {
    for dropped in interfaces.iter().filter_map(|interface| interface.dropped) {
        *total = Some(total.unwrap_or(0).saturating_add(dropped));
    }
}

/// Reads `input` and calls `on_frame` for every frame in file order.
pub fn read_frames<R: Read + Send>(
    input: R,
    mut on_frame: impl FnMut(Frame<'_>) -> Result<(), PassiveError>,
) -> Result<FileFacts, PassiveError> {
    const BUFFER_BYTES: usize = 1 << 20;
    const MAX_BUFFER_BYTES: usize = 16 << 20;
    let mut buffer_bytes = BUFFER_BYTES;
    let mut reader = create_reader(BUFFER_BYTES, input).map_err(|error| match error {
        PcapError::Eof => PassiveError::Format("the file is empty".into()),
        PcapError::HeaderNotRecognized => {
            PassiveError::Format("not a pcap or pcapng file (no known header)".into())
        }
        other => PassiveError::Format(format!("cannot read the file's header: {other:?}")),
    })?;
    let mut facts = FileFacts::default();
    let mut interfaces: Vec<Interface> = Vec::new();
    // pcap: one link type and resolution for the whole file.
    let mut legacy: Option<(i32, u64)> = None;
    let mut offset_bytes: u64 = 0;
    loop {
        match reader.next() {
            Ok((consumed, block)) => {
                match block {
                    PcapBlockOwned::LegacyHeader(header) => {
                        facts.format = "pcap";
                        facts.snaplen = Some(header.snaplen);
                        let units = if header.is_nanosecond_precision() {
                            1_000_000_000
                        } else {
                            1_000_000
                        };
                        legacy = Some((header.network.0, units));
                    }
                    PcapBlockOwned::Legacy(packet) => {
                        let (link_type, units) = legacy.ok_or_else(|| {
                            PassiveError::Format("a packet before the pcap header".into())
                        })?;
                        let time_ns = capture_time_ns(
                            i128::from(packet.ts_sec),
                            i128::from(packet.ts_usec) * i128::from(1_000_000_000 / units),
                            offset_bytes,
                        )?;
                        on_frame(Frame {
                            time_ns,
                            link_type,
                            data: clip(packet.data, packet.caplen),
                            original_len: packet.origlen,
                        })?;
                    }
                    PcapBlockOwned::NG(Block::SectionHeader(_)) => {
                        facts.format = "pcapng";
                        // Interface numbers restart in each section.
                        add_drops(&mut facts.dropped_by_interface, &interfaces);
                        interfaces.clear();
                    }
                    PcapBlockOwned::NG(Block::InterfaceDescription(description)) => {
                        let units_per_second = description.ts_resolution().ok_or_else(|| {
                            PassiveError::Format(format!(
                                "interface {} has an invalid timestamp resolution",
                                interfaces.len()
                            ))
                        })?;
                        if description.snaplen > 0 {
                            facts.snaplen =
                                Some(facts.snaplen.unwrap_or(0).max(description.snaplen));
                        }
                        interfaces.push(Interface {
                            link_type: description.linktype.0,
                            units_per_second,
                            offset_s: description.ts_offset(),
                            dropped: None,
                        });
                    }
                    PcapBlockOwned::NG(Block::EnhancedPacket(packet)) => {
                        let interface = interfaces.get(packet.if_id as usize).ok_or_else(|| {
                            PassiveError::Format(format!(
                                "a packet on interface {} that the file never described",
                                packet.if_id
                            ))
                        })?;
                        let ticks = ((packet.ts_high as u64) << 32) | packet.ts_low as u64;
                        let units = interface.units_per_second;
                        let time_ns = capture_time_ns(
                            i128::from(ticks / units) + i128::from(interface.offset_s),
                            i128::from(ticks % units) * 1_000_000_000 / i128::from(units),
                            offset_bytes,
                        )?;
                        on_frame(Frame {
                            time_ns,
                            link_type: interface.link_type,
                            data: clip(packet.data, packet.caplen),
                            original_len: packet.origlen,
                        })?;
                    }
                    PcapBlockOwned::NG(Block::InterfaceStatistics(statistics)) => {
                        // Each statistics block states a running total for its interface; the
                        // last one of each interface is its figure, and the capture's is their sum.
                        let interface = interfaces.get_mut(statistics.if_id as usize);
                        if let (Some(interface), Some(Ok(dropped))) =
                            (interface, statistics.isb_ifdrop())
                        {
                            interface.dropped = Some(dropped);
                        }
                    }
                    _ => {}
                }
                offset_bytes += consumed as u64;
                reader.consume(consumed);
            }
            Err(PcapError::Eof) => break,
            Err(PcapError::UnexpectedEof) => return Err(ends_inside_a_block(offset_bytes)),
            Err(PcapError::Incomplete(needed)) => {
                if reader.reader_exhausted() {
                    return Err(ends_inside_a_block(offset_bytes));
                }
                // A block larger than the buffer: grow it (bounded: pcapng blocks of a
                // capture hold one frame, and frames are at most 256 KiB).
                let buffered = reader.data().len();
                if needed > 0 && buffered + needed > buffer_bytes {
                    if buffered + needed > MAX_BUFFER_BYTES || !reader.grow(buffered + needed) {
                        return Err(PassiveError::Format(format!(
                            "a block at byte {offset_bytes} is larger than {MAX_BUFFER_BYTES} bytes"
                        )));
                    }
                    buffer_bytes = buffered + needed;
                }
                reader
                    .refill()
                    .map_err(|error| PassiveError::Format(format!("reading: {error:?}")))?;
            }
            Err(error) => {
                return Err(PassiveError::Format(format!(
                    "malformed block at byte {offset_bytes}: {error:?}"
                )))
            }
        }
    }
    add_drops(&mut facts.dropped_by_interface, &interfaces);
    Ok(facts)
}

/// Latest capture time accepted: 2^62 ns after 1970 (the year 2116), so that any two
/// times' difference fits the analysis's signed nanoseconds.
const LATEST_TIME_NS: i128 = 1 << 62;

fn capture_time_ns(
    seconds: i128,
    fraction_ns: i128,
    offset_bytes: u64,
) -> Result<i64, PassiveError> {
    let time_ns = seconds * 1_000_000_000 + fraction_ns;
    if (0..=LATEST_TIME_NS).contains(&time_ns) {
        Ok(time_ns as i64)
    } else {
        Err(PassiveError::Format(format!(
            "the packet at byte {offset_bytes} has a timestamp outside 1970 to 2116 ({seconds} s)"
        )))
    }
}

fn ends_inside_a_block(offset_bytes: u64) -> PassiveError {
    PassiveError::Format(format!(
        "the file ends inside a block at byte {offset_bytes} (cut short while copying or capturing?)"
    ))
}

/// pcapng pads packet data to 32 bits; the captured length says where the frame ends.
fn clip(data: &[u8], captured_len: u32) -> &[u8] {
    &data[..data.len().min(captured_len as usize)]
}
