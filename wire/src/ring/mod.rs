//! The publisher's ring: one memory region registered remote-read-only, written by a single
//! [`RingProducer`] and pulled by subscribers with one-sided RDMA READs that may race the
//! producer; each subscriber validates what it read with a [`RingReader`].
//!
//! Layout ([`layout`]): a 4096-byte control block (magic, version, capacity, epoch, tail,
//! tail_seq, head, head_seq, max record payload) then `capacity` data bytes. Records start at
//! 32-byte aligned absolute positions and carry their own position (hence their lap), the
//! message sequence, flags, and a checksum over header and payload (CRC-32C or XXH64, see
//! [`checksum`]). Messages larger than the
//! largest record are split into FIRST..LAST fragments sharing one sequence. A record never
//! crosses the end of the data area: a PADDING record fills the rest of the lap first.
//!
//! The producer never waits: it writes as far as the `limit` its caller gives (the slowest
//! subscriber's acknowledged position plus the capacity, or `u64::MAX` to overwrite), and
//! before it overwrites old records it advances `head`/`head_seq` past whole messages, so a
//! lapped reader learns exactly which messages it lost.

pub mod checksum;
pub mod error;
pub mod layout;
pub mod producer;
pub mod reader;

#[cfg(test)]
mod sim_tests;

pub use checksum::Checksum;
pub use error::RingError;
pub use layout::{ControlSnapshot, CONTROL_READ_LEN};
pub use producer::{Append, Claim, RingConfig, RingProducer, StartPoint, NO_LIMIT};
pub use reader::{ControlOutcome, ReadPlan, ReaderConfig, RingReader, Stop, PROBE_LEN};

// What only the tests and the fuzz targets name.
pub use checksum::RecordCrc;
pub use layout::{RecordHeader, CONTROL_SIZE, HEADER_LEN};
pub use producer::InProgress;
pub use reader::{Parsed, ReaderStats};
