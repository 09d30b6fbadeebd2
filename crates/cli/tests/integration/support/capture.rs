//! Packet captures written by the tests: frames and pcap files built byte by byte.

/// An Ethernet/IPv4/UDP frame of `frame_len` bytes (checksums left zero: the readers
/// do not check them, as tshark does not by default).
pub fn udp_frame(
    source: [u8; 4],
    destination: [u8; 4],
    destination_port: u16,
    frame_len: u16,
) -> Vec<u8> {
    let ip_len = frame_len - 14;
    let mut frame = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
    frame.extend_from_slice(&[0x45, 0]);
    frame.extend_from_slice(&ip_len.to_be_bytes());
    frame.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    frame.extend_from_slice(&source);
    frame.extend_from_slice(&destination);
    frame.extend_from_slice(&4172u16.to_be_bytes());
    frame.extend_from_slice(&destination_port.to_be_bytes());
    frame.extend_from_slice(&(ip_len - 20).to_be_bytes());
    frame.extend_from_slice(&[0, 0]);
    frame.resize(usize::from(frame_len), 0);
    frame
}

/// A pcap file (microsecond timestamps) of `(time_us, frame)` records.
pub fn pcap(records: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    bytes.extend_from_slice(&2u16.to_le_bytes());
    bytes.extend_from_slice(&4u16.to_le_bytes());
    for word in [0u32, 0, 65535, 1] {
        bytes.extend_from_slice(&word.to_le_bytes());
    }
    for (time_us, frame) in records {
        for word in [
            (time_us / 1_000_000) as u32,
            (time_us % 1_000_000) as u32,
            frame.len() as u32,
            frame.len() as u32,
        ] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        bytes.extend_from_slice(frame);
    }
    bytes
}
