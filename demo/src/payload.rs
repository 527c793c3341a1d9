//! Deterministic, self-describing payloads: a 24-byte header (sequence, send time, length,
//! stream) followed by bytes that are a function of (stream, sequence), so a receiver checks
//! every byte without the sender keeping copies.

/// Bytes of the header; the smallest payload.
pub const HEADER: usize = 24;

/// What a payload's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The message's sequence number.
    pub seq: u64,
    /// Send time in nanoseconds on the sender's clock (0: not stamped).
    pub stamp_ns: u64,
}

/// Why a payload is not the one expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// Shorter than a header.
    Short(usize),
    /// The header's length or stream is not the message's.
    Header(&'static str),
    /// The body differs at this offset.
    Body(usize),
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

fn seed(stream: u32, seq: u64) -> u64 {
    mix(((stream as u64) << 40) ^ seq ^ 0x9e37_79b9_7f4a_7c15)
}

/// Writes the header of message `seq` of `stream` into `buf` (at least [`HEADER`] bytes).
pub fn write_header(buf: &mut [u8], stream: u32, seq: u64, stamp_ns: u64) {
    buf[0..8].copy_from_slice(&seq.to_le_bytes());
    buf[8..16].copy_from_slice(&stamp_ns.to_le_bytes());
    let len = buf.len() as u32;
    buf[16..20].copy_from_slice(&len.to_le_bytes());
    buf[20..24].copy_from_slice(&stream.to_le_bytes());
}

/// Fills `buf` (at least [`HEADER`] bytes) with message `seq` of `stream`.
pub fn fill(buf: &mut [u8], stream: u32, seq: u64, stamp_ns: u64) {
    write_header(buf, stream, seq, stamp_ns);
    let mut x = seed(stream, seq);
    for chunk in buf[HEADER..].chunks_mut(8) {
        x = mix(x);
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// Reads the header, checking length and stream.
pub fn header(data: &[u8], stream: u32) -> Result<Header, Damage> {
    if data.len() < HEADER {
        return Err(Damage::Short(data.len()));
    }
    let word = |r: std::ops::Range<usize>| {
        let mut b = [0u8; 8];
        b[..r.len()].copy_from_slice(&data[r]);
        u64::from_le_bytes(b)
    };
    if word(16..20) != data.len() as u64 {
        return Err(Damage::Header("length"));
    }
    if word(20..24) != stream as u64 {
        return Err(Damage::Header("stream"));
    }
    Ok(Header { seq: word(0..8), stamp_ns: word(8..16) })
}

/// Checks a whole payload; returns its header.
pub fn check(data: &[u8], stream: u32) -> Result<Header, Damage> {
    let h = header(data, stream)?;
    let mut x = seed(stream, h.seq);
    for (i, chunk) in data[HEADER..].chunks(8).enumerate() {
        x = mix(x);
        if chunk != &x.to_le_bytes()[..chunk.len()] {
            return Err(Damage::Body(HEADER + i * 8));
        }
    }
    Ok(h)
}

/// The stream number of a topic name (FNV-1a, 32 bits).
pub fn stream_of(topic: &str) -> u32 {
    topic.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ b as u32).wrapping_mul(0x0100_0193))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filled_payload_checks_and_any_flipped_byte_is_found() {
        for len in [HEADER, HEADER + 1, 100, 4096 + 3] {
            let mut buf = vec![0u8; len];
            fill(&mut buf, 7, 42, 1234);
            assert_eq!(check(&buf, 7), Ok(Header { seq: 42, stamp_ns: 1234 }));
            assert!(check(&buf, 8).is_err(), "another stream");
            for i in (0..len).filter(|i| !(8..16).contains(i)) {
                buf[i] ^= 1;
                // A flipped sequence byte is caught by the body (when there is one) or by the
                // receiver comparing the sequence with the one it expects.
                let caught = check(&buf, 7).map_or(true, |h| h.seq != 42);
                assert!(caught, "byte {i} of {len} flipped");
                buf[i] ^= 1;
            }
            assert!(check(&buf[..len - 1], 7).is_err(), "truncated");
        }
        assert_eq!(check(&[0u8; 10], 7), Err(Damage::Short(10)));
    }
}
