//! Counting on the per-message paths, where one thread at a time writes a counter.

/// Adds `n` to a counter that only one thread at a time writes (under a lock, or through
/// `&mut`): a load and a store instead of a locked read-modify-write on the per-message
/// paths; readers still see whole values.
pub(crate) fn add_single_writer(counter: &std::sync::atomic::AtomicU64, n: u64) {
    use std::sync::atomic::Ordering::Relaxed;
    counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
}
