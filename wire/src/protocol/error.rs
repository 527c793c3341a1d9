//! Errors of the wire protocol.

/// Why a protocol message could not be encoded or decoded. Decoding never panics: every bad
/// input is one of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// Fewer bytes than the message header.
    #[error("{what}: truncated ({len} bytes)")]
    Truncated {
        /// Which message.
        what: &'static str,
        /// Bytes received.
        len: usize,
    },
    /// A protocol version this build does not speak.
    #[error("{what}: protocol version {got}, this build speaks {expected}")]
    VersionMismatch {
        /// Which message.
        what: &'static str,
        /// The version received.
        got: u8,
        /// The version of this build.
        expected: u8,
    },
    /// A message of another kind (e.g. a control message where private data was expected).
    #[error("{what}: message kind {got}, expected {expected}")]
    WrongKind {
        /// Which message.
        what: &'static str,
        /// The kind received.
        got: u8,
        /// The kind expected.
        expected: u8,
    },
    /// The body does not decode, or decodes to values out of range.
    #[error("{what}: malformed: {detail}")]
    Malformed {
        /// Which message.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// The encoded message exceeds what its carrier allows.
    #[error("{what}: {len} bytes exceed the limit of {max}")]
    TooLarge {
        /// Which message.
        what: &'static str,
        /// The encoded length.
        len: usize,
        /// The limit.
        max: usize,
    },
}
