//! Framing shared by every message: a version byte, a kind byte, then the bincode 2 body
//! (`config::standard()`: little-endian varints) decoded under a size limit. Trailing zero
//! bytes (the padding the connection manager adds to private data) are accepted; other
//! trailing bytes are not.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::error::ProtocolError;
use super::PROTOCOL_VERSION;

/// Bytes before the body: version and kind.
pub const FRAME_HEADER_LEN: usize = 2;

/// Message kinds (second byte of every message).
pub mod kind {
    /// [`super::super::ConnectData`].
    pub const CONNECT: u8 = 1;
    /// [`super::super::AcceptData`].
    pub const ACCEPT: u8 = 2;
    /// [`super::super::RejectData`].
    pub const REJECT: u8 = 3;
    /// [`super::super::Control`].
    pub const CONTROL: u8 = 4;
    /// [`super::super::Announcement`].
    pub const ANNOUNCEMENT: u8 = 5;
    /// [`super::super::Announcement`] sealed with the domain secret (`Announcement::seal`).
    pub const SEALED_ANNOUNCEMENT: u8 = 6;
    /// [`super::super::ListingAccept`].
    pub const LISTING_ACCEPT: u8 = 7;
    /// The body of a [`super::super::TopicListing`].
    pub const TOPIC_LISTING: u8 = 8;
}

/// Encodes `msg` as `[version, kind, body]`, refusing more than `max` bytes.
pub(crate) fn encode<T: Serialize>(
    what: &'static str,
    kind: u8,
    msg: &T,
    max: usize,
) -> Result<Vec<u8>, ProtocolError> {
    let body = bincode::serde::encode_to_vec(msg, bincode::config::standard())
        .map_err(|e| ProtocolError::Malformed { what, detail: e.to_string() })?;
    let len = FRAME_HEADER_LEN + body.len();
    if len > max {
        return Err(ProtocolError::TooLarge { what, len, max });
    }
    let mut out = Vec::with_capacity(len);
    out.push(PROTOCOL_VERSION);
    out.push(kind);
    out.extend_from_slice(&body);
    Ok(out)
}

/// Bound on what bincode may allocate while decoding one message (a length prefix larger
/// than the input is refused before allocating).
const DECODE_LIMIT: usize = 128 * 1024;

/// Decodes a message framed by [`encode`] from at most `max` bytes (padding included).
pub(crate) fn decode<T: DeserializeOwned>(
    what: &'static str,
    kind: u8,
    bytes: &[u8],
    max: usize,
) -> Result<T, ProtocolError> {
    if bytes.len() > max {
        return Err(ProtocolError::TooLarge { what, len: bytes.len(), max });
    }
    // All zeros is no message: the connection manager pads absent private data with zeros
    // (version 0 is never valid).
    let [version, got, body @ ..] = bytes else {
        return Err(ProtocolError::Truncated { what, len: bytes.len() });
    };
    if bytes.iter().all(|&b| b == 0) {
        return Err(ProtocolError::Truncated { what, len: 0 });
    }
    if *version != PROTOCOL_VERSION {
        return Err(ProtocolError::VersionMismatch { what, got: *version, expected: PROTOCOL_VERSION });
    }
    if *got != kind {
        return Err(ProtocolError::WrongKind { what, got: *got, expected: kind });
    }
    let config = bincode::config::standard().with_limit::<DECODE_LIMIT>();
    let (msg, used) = bincode::serde::decode_from_slice::<T, _>(body, config)
        .map_err(|e| ProtocolError::Malformed { what, detail: e.to_string() })?;
    if body[used..].iter().any(|&b| b != 0) {
        return Err(ProtocolError::Malformed {
            what,
            detail: format!("{} trailing bytes are not padding", body.len() - used),
        });
    }
    Ok(msg)
}
