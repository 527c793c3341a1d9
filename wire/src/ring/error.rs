//! Errors of the ring layer.

/// An error of the ring producer or reader.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RingError {
    /// A capacity, payload limit or start point that the layout does not allow.
    #[error("invalid ring configuration: {0}")]
    InvalidConfig(String),
    /// A message larger than a record header can describe (`u32::MAX` bytes) or than the
    /// reader accepts.
    #[error("message of {len} bytes exceeds the limit of {max} bytes")]
    MessageTooLarge {
        /// The message length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A record header at the reader's position claims a payload larger than the ring's
    /// records may be, READ twice (so not a READ torn by a concurrent write): the publisher is
    /// broken or hostile, and READing the record would take more memory than allowed.
    #[error("record at position {position} claims {len} bytes, over the limit of {max}")]
    RecordTooLarge {
        /// Absolute position of the record.
        position: u64,
        /// The payload length its header claims.
        len: u64,
        /// The largest record payload the reader accepts.
        max: u64,
    },
    /// `append` was given a payload that is not the message whose fragments are being written.
    #[error("a {in_progress_len}-byte message (seq {seq}) is partly written; append got {len} bytes")]
    MessageInProgress {
        /// Sequence of the partly written message.
        seq: u64,
        /// Its length.
        in_progress_len: u64,
        /// The length given to `append`.
        len: u64,
    },
    /// A claim is outstanding (or the claim given is not the producer's current one): it must
    /// be committed or abandoned first.
    #[error("a claimed record is outstanding: commit or abandon it first")]
    ClaimOutstanding,
    /// The control block read from the publisher is not a ring of this layout, or is not the
    /// ring this reader was set up for.
    #[error("bad ring control block: {0}")]
    BadControl(String),
    /// A record whose checksum is valid but which breaks the layout rules: the publisher is
    /// broken (or not this protocol). The subscription cannot continue.
    #[error("corrupt ring record at position {position}: {detail}")]
    Corrupt {
        /// Absolute position of the record.
        position: u64,
        /// The rule it breaks.
        detail: String,
    },
    /// The registered buffer refused an access (a bug: the ring checks its own bounds).
    #[error(transparent)]
    Memory(#[from] rdma_fabric::Error),
}
