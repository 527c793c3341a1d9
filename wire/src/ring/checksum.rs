//! Record checksums: which function a ring's records carry, and the choice of the faster one
//! on this CPU.
//!
//! A checksum does not authenticate anything: it tells a subscriber whether the bytes a READ
//! brought are the bytes the producer committed, or a mix of two laps (a READ racing a
//! write). Both functions catch that; they differ in speed. CRC-32C through `crc-fast` folds
//! with carry-less multiplication, the fastest where the CPU runs that instruction at full
//! speed (x86-64 with PCLMULQDQ, aarch64 with PMULL). XXH64 uses plain 64-bit multiplies,
//! faster where carry-less multiplication is slow or emulated: measured here, 64 KiB takes
//! 1.0 µs with CRC-32C and 4.6 µs with XXH64 on the host, but 390 µs and 17 µs in the qemu
//! (TCG) guest that runs the Soft-RoCE tests.
//!
//! Neither is fast on the records small messages make: a 64-byte message's 96-byte record
//! costs CRC-32C about 20 ns, a chain of dependent CRC instructions plus the call, where
//! XXH3 takes about half. [`Checksum::Xxh3Crc32c`] therefore checks records of up to
//! [`XXH3_MAX`] bytes with XXH3 and longer ones with CRC-32C: the default where CRC-32C is
//! the faster function for long records.
//!
//! The publisher picks the function ([`Checksum::fastest_here`] unless its options name one)
//! and the accept private data tells each subscriber which one its ring uses.

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;
use xxhash_rust::xxh64::Xxh64;

/// The function a ring's record checksums are computed with. Either is 32 bits, over the
/// record header (its `crc` field taken as zero) followed by the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Checksum {
    /// CRC-32C (Castagnoli).
    #[default]
    Crc32c,
    /// The low 32 bits of XXH64 with seed 0.
    XxHash64,
    /// The low 32 bits of XXH3-64 (seed 0) for records of at most [`XXH3_MAX`] bytes (header
    /// and payload), CRC-32C for longer ones.
    Xxh3Crc32c,
}

/// Longest record (header and payload) [`Checksum::Xxh3Crc32c`] checks with XXH3.
pub const XXH3_MAX: usize = 256;

/// Longest header and payload [`Checksum::of_pair`] checksums in one pass over a stack copy
/// (a 64-byte message's record is 96 bytes).
pub const ONE_PASS_MAX: usize = 512;

/// The smaller stack copy, for records of up to 96 payload bytes: less to zero.
const ONE_PASS_SMALL: usize = 128;

/// Bytes from which CRC-32C is continued through crc-fast's folding (whose digest set-up then
/// pays) rather than the crc32c crate's word-at-a-time instructions.
const CRC_FAST_FROM: usize = 512;

/// The CRC-32C of the bytes whose CRC-32C is `crc`, followed by `bytes`.
fn crc32c_continue(crc: u32, bytes: &[u8]) -> u32 {
    if bytes.len() < CRC_FAST_FROM {
        return crc32c::crc32c_append(crc, bytes);
    }
    // crc-fast's register is the finished CRC inverted (initial value and final XOR all ones).
    let mut digest = crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    digest.update(bytes);
    digest.finalize() as u32
}

/// The stack copy of [`Checksum::of_pair`], word-aligned: the CRC instructions (or the hash)
/// then take whole words from the first byte.
#[repr(align(8))]
struct Joined<const N: usize>([u8; N]);

impl<const N: usize> Joined<N> {
    /// The checksum of `first` followed by `second` (at most `N` bytes in all), in one pass over
    /// a copy of both side by side.
    fn checksum(checksum: Checksum, first: &[u8], second: &[u8]) -> u32 {
        let len = first.len() + second.len();
        let mut joined = Joined([0u8; N]);
        match <&[u8; 32]>::try_from(first) {
            // A record header: a copy of known length, no call.
            Ok(header) => joined.0[..32].copy_from_slice(header),
            Err(_) => joined.0[..first.len()].copy_from_slice(first),
        }
        joined.0[first.len()..len].copy_from_slice(second);
        checksum.of(&joined.0[..len])
    }
}

/// Bytes [`Checksum::fastest_here`] times each function on.
const CALIBRATION_LEN: usize = 64 * 1024;

impl Checksum {
    /// Every function, in the order [`fastest_here`](Self::fastest_here) prefers them on a tie.
    pub const ALL: [Checksum; 3] = [Checksum::Xxh3Crc32c, Checksum::Crc32c, Checksum::XxHash64];

    /// Starts the checksum of a record of `record_len` bytes in all (header and payload), to
    /// be given in pieces.
    pub fn start(self, record_len: usize) -> RecordCrc {
        RecordCrc(match self.single(record_len) {
            // The CRC of nothing: the next bytes continue from it.
            Single::Crc32c => Digest::Crc32c(0),
            Single::XxHash64 => Digest::XxHash64(Xxh64::new(0)),
            Single::Xxh3 => Digest::Xxh3(Box::new(Xxh3::new())),
        })
    }

    /// The one function that checks a record of `record_len` bytes.
    fn single(self, record_len: usize) -> Single {
        match self {
            Checksum::Crc32c => Single::Crc32c,
            Checksum::XxHash64 => Single::XxHash64,
            Checksum::Xxh3Crc32c if record_len <= XXH3_MAX => Single::Xxh3,
            Checksum::Xxh3Crc32c => Single::Crc32c,
        }
    }

    /// The checksum of `bytes` (a whole record) in one go (no digest set up: the one-shot
    /// functions).
    pub fn of(self, bytes: &[u8]) -> u32 {
        match self.single(bytes.len()) {
            Single::Crc32c => crc_fast::crc32_iscsi(bytes),
            Single::XxHash64 => xxhash_rust::xxh64::xxh64(bytes, 0) as u32,
            Single::Xxh3 => xxhash_rust::xxh3::xxh3_64(bytes) as u32,
        }
    }

    /// The checksum of `first` followed by `second` (a record's header and payload) without
    /// setting a streaming digest up, which costs more than the whole computation for small
    /// records (measured: a 64-byte record's CRC-32C through crc-fast's digest was about 40 %
    /// of the publisher's CPU per message). Up to [`ONE_PASS_MAX`] bytes in all, both are
    /// copied side by side on the stack and checksummed in one call: each call of either
    /// CRC-32C crate costs about as much as a 64-byte record's CRC instructions (measured here:
    /// 96 bytes copied and checksummed in one call, 37 ns; the header's CRC continued over the
    /// payload in two calls, 59 ns). Longer, CRC-32C continues from the CRC of `first`, and
    /// XXH64 streams.
    pub fn of_pair(self, first: &[u8], second: &[u8]) -> u32 {
        let len = first.len() + second.len();
        if len <= ONE_PASS_SMALL {
            return Joined::<ONE_PASS_SMALL>::checksum(self, first, second);
        }
        if len <= ONE_PASS_MAX {
            return Joined::<ONE_PASS_MAX>::checksum(self, first, second);
        }
        match self.single(len) {
            Single::Crc32c => crc32c_continue(crc32c_continue(0, first), second),
            Single::Xxh3 => {
                let mut hash = Xxh3::new();
                hash.update(first);
                hash.update(second);
                hash.digest() as u32
            }
            Single::XxHash64 => {
                let mut hash = Xxh64::new(0);
                hash.update(first);
                hash.update(second);
                hash.digest() as u32
            }
        }
    }

    /// The faster function on this CPU, timed once per process (the best of three passes over
    /// 64 KiB each; about 10 µs on a native x86-64 core, a few ms under emulation). Where
    /// CRC-32C wins on long records, small records are checked with XXH3
    /// ([`Checksum::Xxh3Crc32c`]).
    pub fn fastest_here() -> Checksum {
        static FASTEST: OnceLock<Checksum> = OnceLock::new();
        *FASTEST.get_or_init(|| {
            let sample = vec![0x5a_u8; CALIBRATION_LEN];
            let timed = [Checksum::Crc32c, Checksum::XxHash64].map(|c| (c, c.time(&sample)));
            let chosen = Checksum::fastest_of(timed);
            tracing::debug!(?chosen, "record checksum chosen by timing 64 KiB with each function");
            chosen
        })
    }

    /// The function to use given the 64 KiB timings of CRC-32C and XXH64: XXH64 if it is
    /// faster, [`Checksum::Xxh3Crc32c`] otherwise (CRC-32C for long records, and on a tie).
    pub fn fastest_of(timings: [(Checksum, Duration); 2]) -> Checksum {
        let [first, second] = timings;
        let faster = if second.1 < first.1 { second.0 } else { first.0 };
        match faster {
            Checksum::Crc32c => Checksum::Xxh3Crc32c,
            other => other,
        }
    }

    fn time(self, sample: &[u8]) -> Duration {
        (0..3)
            .map(|_| {
                let started = Instant::now();
                black_box(self.of(black_box(sample)));
                started.elapsed()
            })
            .min()
            .unwrap_or(Duration::MAX)
    }
}

/// The one function a record is checked with (see [`Checksum::Xxh3Crc32c`]).
#[derive(Clone, Copy)]
enum Single {
    Crc32c,
    XxHash64,
    Xxh3,
}

/// A checksum in progress: CRC-32C as the CRC so far (continued by each update), XXH64 and
/// XXH3 as their streaming states.
#[derive(Clone)]
enum Digest {
    Crc32c(u32),
    XxHash64(Xxh64),
    Xxh3(Box<Xxh3>),
}

/// A record checksum being computed (see [`Checksum::start`]).
#[derive(Clone)]
pub struct RecordCrc(Digest);

impl std::fmt::Debug for RecordCrc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.0 {
            Digest::Crc32c(_) => "CRC-32C",
            Digest::XxHash64(_) => "XXH64",
            Digest::Xxh3(_) => "XXH3",
        };
        f.debug_tuple("RecordCrc").field(&kind).finish()
    }
}

impl RecordCrc {
    /// Adds the next bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        match &mut self.0 {
            Digest::Crc32c(crc) => *crc = crc32c_continue(*crc, bytes),
            Digest::XxHash64(d) => d.update(bytes),
            Digest::Xxh3(d) => d.update(bytes),
        }
    }

    /// The checksum of everything added.
    pub fn finish(&self) -> u32 {
        match &self.0 {
            Digest::Crc32c(crc) => *crc,
            Digest::XxHash64(d) => d.digest() as u32,
            Digest::Xxh3(d) => d.digest() as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Each function is the reference implementation's, whether the bytes come at once or
        /// in pieces.
        #[test]
        fn each_function_matches_its_reference_in_any_pieces(
            bytes in proptest::collection::vec(any::<u8>(), 0..5000),
            cut in 0usize..5000,
        ) {
            let cut = cut.min(bytes.len());
            let xxh3_or_crc = if bytes.len() <= XXH3_MAX {
                xxhash_rust::xxh3::xxh3_64(&bytes) as u32
            } else {
                crc32c::crc32c(&bytes)
            };
            for (checksum, reference) in [
                (Checksum::Crc32c, crc32c::crc32c(&bytes)),
                (Checksum::XxHash64, xxhash_rust::xxh64::xxh64(&bytes, 0) as u32),
                (Checksum::Xxh3Crc32c, xxh3_or_crc),
            ] {
                prop_assert_eq!(checksum.of(&bytes), reference);
                // Both implementations of CRC-32C (crc-fast's and the crc32c crate's) agree.
                if checksum == Checksum::Crc32c {
                    prop_assert_eq!(crc_fast::crc32_iscsi(&bytes), reference);
                }
                prop_assert_eq!(checksum.of_pair(&bytes[..cut], &bytes[cut..]), reference);
                let mut pieces = checksum.start(bytes.len());
                pieces.update(&bytes[..cut]);
                pieces.update(&bytes[cut..]);
                prop_assert_eq!(pieces.finish(), reference);
            }
        }
    }

    #[test]
    fn a_pair_is_checksummed_as_its_concatenation_on_each_side_of_the_stack_copy_limits() {
        let bytes: Vec<u8> = (0..2 * ONE_PASS_MAX).map(|i| (i * 31 + 7) as u8).collect();
        for first in [0, 5, 32, 33] {
            for second in [0, 64, 96, 97, ONE_PASS_MAX - 32, ONE_PASS_MAX - 31, ONE_PASS_MAX + 100] {
                let (a, b) = bytes[..first + second].split_at(first);
                let whole = &bytes[..first + second];
                assert_eq!(Checksum::Crc32c.of_pair(a, b), crc32c::crc32c(whole), "{first} + {second}");
                let xxh = xxhash_rust::xxh64::xxh64(whole, 0) as u32;
                assert_eq!(Checksum::XxHash64.of_pair(a, b), xxh, "{first} + {second}");
                let tiered = if whole.len() <= XXH3_MAX {
                    xxhash_rust::xxh3::xxh3_64(whole) as u32
                } else {
                    crc32c::crc32c(whole)
                };
                assert_eq!(Checksum::Xxh3Crc32c.of_pair(a, b), tiered, "{first} + {second}");
            }
        }
    }

    #[test]
    fn the_faster_function_is_chosen_and_small_records_get_xxh3_where_crc_wins() {
        let fast = Duration::from_micros(1);
        let slow = Duration::from_micros(400);
        let chosen = |crc, xxh| Checksum::fastest_of([(Checksum::Crc32c, crc), (Checksum::XxHash64, xxh)]);
        assert_eq!(chosen(fast, slow), Checksum::Xxh3Crc32c);
        assert_eq!(chosen(slow, fast), Checksum::XxHash64);
        assert_eq!(chosen(fast, fast), Checksum::Xxh3Crc32c);
        assert!(Checksum::ALL.contains(&Checksum::fastest_here()));
    }

    #[test]
    fn the_functions_differ() {
        let [a, b, c] = Checksum::ALL.map(|f| f.of(b"record"));
        assert!(a != b && b != c && a != c);
        // Past the XXH3 limit the tiered function is CRC-32C.
        let long = [7u8; XXH3_MAX + 1];
        assert_eq!(Checksum::Xxh3Crc32c.of(&long), Checksum::Crc32c.of(&long));
        assert_ne!(Checksum::Xxh3Crc32c.of(&long[..XXH3_MAX]), Checksum::Crc32c.of(&long[..XXH3_MAX]));
    }
}
