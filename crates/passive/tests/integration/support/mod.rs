//! Captures written by hand for the tests.

pub mod pcapng;

/// A pcap file (nanosecond timestamps) written record by record.
pub struct Pcap {
    pub bytes: Vec<u8>,
}

impl Pcap {
    pub fn new(link_type: u32, snaplen: u32) -> Self {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
        bytes.extend_from_slice(&2u16.to_le_bytes());
        bytes.extend_from_slice(&4u16.to_le_bytes());
        bytes.extend_from_slice(&0i32.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&snaplen.to_le_bytes());
        bytes.extend_from_slice(&link_type.to_le_bytes());
        Self { bytes }
    }

    pub fn record(&mut self, time_ns: u64, frame: &[u8], snaplen: usize) {
        let captured = &frame[..frame.len().min(snaplen)];
        self.bytes
            .extend_from_slice(&((time_ns / 1_000_000_000) as u32).to_le_bytes());
        self.bytes
            .extend_from_slice(&((time_ns % 1_000_000_000) as u32).to_le_bytes());
        self.bytes
            .extend_from_slice(&(captured.len() as u32).to_le_bytes());
        self.bytes
            .extend_from_slice(&(frame.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(captured);
    }
}
