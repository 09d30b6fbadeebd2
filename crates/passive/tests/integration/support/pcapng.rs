//! A pcapng writer for the tests that need pcapng's own blocks.

/// A pcapng file written block by block (little-endian, microsecond timestamps).
pub struct Pcapng {
    pub bytes: Vec<u8>,
}

impl Pcapng {
    fn block(&mut self, block_type: u32, body: &[u8]) {
        let total = (12 + body.len()) as u32;
        self.bytes.extend_from_slice(&block_type.to_le_bytes());
        self.bytes.extend_from_slice(&total.to_le_bytes());
        self.bytes.extend_from_slice(body);
        self.bytes.extend_from_slice(&total.to_le_bytes());
    }

    /// A file that starts with a section header.
    pub fn new() -> Self {
        let mut file = Pcapng { bytes: Vec::new() };
        file.section();
        file
    }

    /// A new section: interface numbers start again from 0.
    pub fn section(&mut self) {
        let mut body = Vec::new();
        body.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&(-1i64).to_le_bytes());
        self.block(0x0a0d_0d0a, &body);
    }

    pub fn interface(&mut self, link_type: u16, snaplen: u32) {
        let mut body = Vec::new();
        body.extend_from_slice(&link_type.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&snaplen.to_le_bytes());
        self.block(1, &body);
    }

    pub fn packet(&mut self, interface: u32, time_us: u64, frame: &[u8]) {
        let mut body = Vec::new();
        body.extend_from_slice(&interface.to_le_bytes());
        body.extend_from_slice(&((time_us >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(time_us as u32).to_le_bytes());
        body.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        body.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        body.extend_from_slice(frame);
        body.resize(body.len().next_multiple_of(4), 0);
        self.block(6, &body);
    }

    /// An interface statistics block whose `isb_ifdrop` (a running total) is `dropped`.
    pub fn statistics(&mut self, interface: u32, time_us: u64, dropped: u64) {
        let mut body = Vec::new();
        body.extend_from_slice(&interface.to_le_bytes());
        body.extend_from_slice(&((time_us >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(time_us as u32).to_le_bytes());
        body.extend_from_slice(&5u16.to_le_bytes());
        body.extend_from_slice(&8u16.to_le_bytes());
        body.extend_from_slice(&dropped.to_le_bytes());
        body.extend_from_slice(&[0; 4]);
        self.block(5, &body);
    }
}
