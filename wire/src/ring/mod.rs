//! The publisher's ring: one memory region registered remote-read-only, written by a single
//! [`RingProducer`] and pulled by subscribers with one-sided RDMA READs that may race the
//! producer; each subscriber validates what it read with a [`RingReader`].
//!
//! Layout ([`layout`], with its byte diagrams): a 4096-byte control block (magic, version,
//! capacity, epoch, tail, tail_seq, head, head_seq, max record payload, floor) then `capacity`
//! data bytes. Records start at 32-byte aligned absolute positions and carry their own
//! position (hence their lap), the message sequence, flags, and a checksum over header and
//! payload. Messages larger than the largest record (default capacity/4) are split into
//! FIRST..LAST fragments sharing one sequence. A record never crosses the end of the data
//! area: a PADDING record fills the rest of the lap first. The first record is at position
//! `capacity` with sequence 1, so zeroed memory never looks like a record.
//!
//! The producer never waits: it writes as far as the `limit` its caller gives (the slowest
//! subscriber's acknowledged position plus the capacity, or [`NO_LIMIT`] to overwrite). It
//! writes the payload, then the header with its position word last (release), then publishes
//! `tail`/`tail_seq`. Before it overwrites anything it raises `floor` ("every byte below may be
//! overwritten") and advances `head`/`head_seq` past whole messages, so a lapped reader learns
//! exactly which messages it lost.
//!
//! The reader validates each record: its header position must be the expected one (an older
//! position means not written yet; a checksum-valid later one, lapped), the checksum must match
//! (otherwise the READ raced a write: read again), and sequence and flags must continue the
//! stream. After a lap it reads the control block and goes on from `head`, reporting how many
//! messages were lost (`head_seq - next_seq`). Under overwrite only the control block tells
//! "not written yet" from "overwritten", so the reader asks for it on every such stop. Every
//! length and position in a record is bounded by the geometry the publisher announced before
//! it is used: a hostile publisher's ring can mislead no reader into reading out of bounds.
//!
//! A reader that shares memory with the producer (a same-host subscriber mapping the ring)
//! reads it in place instead ([`RingReader::read_in_place`], over a [`RingMemory`]): seqlock
//! style, with no checksum. It finds the committed records by their commit word (a record's
//! `position` word, which the producer stores last, loaded with acquire ordering, as Aeron's
//! term reader does with a frame's length), copies them, then (after an acquire fence) loads
//! `floor`, which the producer raises, with a release fence, before it overwrites anything: a
//! copy the floor passed is discarded as a lap. A caught-up reader loads no `tail` on its way
//! (the producer's per-message `tail` stores then stay on a line only READers load); one that
//! walked 8 committed records is behind, and loads `tail` once to copy everything below it;
//! after a run of empty reads it checks that nothing below `tail` stays uncommitted. The same record walk then
//! checks positions, sequences, flags and lengths, and a committed record that breaks them is
//! an error (it cannot be torn). While every reader reads in place the
//! producer may leave the checksum out ([`RingProducer::set_checksums`], records flagged
//! [`layout::FLAG_NO_CHECKSUM`], which a reader of READs takes for torn); turning it back on
//! completes every retained record's first.
//!
//! The checksum ([`checksum`]) is the publisher's choice, carried in the accept: CRC-32C
//! (folded with carry-less multiplication, about 1 µs per 64 KiB) or the low 32 bits of XXH64
//! (plain multiplies: the faster in an emulated guest, where carry-less multiplication is
//! slow); by default the faster on this CPU, timed once per process
//! ([`Checksum::fastest_here`]). Either catches a READ that mixed two laps; property tests
//! check both against their reference crates.

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
pub use reader::{ControlOutcome, ReadPlan, ReaderConfig, RingMemory, RingReader, Stop, PROBE_LEN};

// What only the tests and the fuzz targets name.
pub use checksum::RecordCrc;
pub use layout::{RecordHeader, CONTROL_SIZE, HEADER_LEN};
pub use producer::InProgress;
pub use reader::{Parsed, ReaderStats};
