//! Zero-copy publishing: a [`Loan`] is a message's bytes in the ring itself, written by the
//! application (serialized straight into it, say) and then sent.
//!
//! A loan holds the publisher for its lifetime: the state lock (and, when it had to wait for
//! room, the publishing turn), so no other message interleaves with it. Keep it short-lived,
//! as a lock guard: accepts of new subscribers and other publishing threads wait meanwhile.

use std::ops::{Deref, DerefMut};

use parking_lot::MutexGuard;

use super::shared::{PubState, PublisherShared, Turn};
use crate::error::Result;
use rdma_wire::ring::Claim;

/// A message being written in place in the publisher's ring: `len` bytes, zeroed when the loan
/// is made, to fill through `&mut [u8]` and [`send`](Loan::send). Dropped without `send`,
/// nothing is published.
///
/// ```
/// use rdma_pubsub::{DiscoveryOptions, Node};
///
/// let node = Node::builder().discovery(DiscoveryOptions::disabled()).build()?;
/// let publisher = node.publisher("doc-loan").create()?;
/// let mut loan = publisher.loan(16)?;
/// loan[..8].copy_from_slice(&7u64.to_le_bytes());
/// loan[8..].copy_from_slice(&42u64.to_le_bytes());
/// assert_eq!(loan.send()?, 1);
/// # Ok::<(), rdma_pubsub::Error>(())
/// ```
pub struct Loan<'a> {
    shared: &'a PublisherShared,
    /// Declared before `turn`: the lock is released before the turn is given back.
    state: MutexGuard<'a, PubState>,
    claim: Option<Claim>,
    /// Held for its drop: the turn is given back after the lock.
    _turn: Option<Turn<'a>>,
}

impl std::fmt::Debug for Loan<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (len, seq) = self.claim.as_ref().map_or((0, 0), |c| (c.payload_len(), c.seq()));
        f.debug_struct("Loan").field("len", &len).field("seq", &seq).finish()
    }
}

impl<'a> Loan<'a> {
    /// Claims the record (room was checked under `state`).
    pub(super) fn new(
        shared: &'a PublisherShared,
        mut state: MutexGuard<'a, PubState>,
        turn: Option<Turn<'a>>,
        len: usize,
    ) -> Result<Loan<'a>> {
        let claim = state.claim(len)?;
        Ok(Loan { shared, state, claim: Some(claim), _turn: turn })
    }

    /// The message's sequence number once sent.
    pub fn seq(&self) -> u64 {
        self.claim.as_ref().map_or(0, Claim::seq)
    }

    /// Publishes the message; returns its sequence number.
    ///
    /// # Errors
    /// [`Error::Fabric`](crate::Error::Fabric) if the ring's memory cannot be written (never on a live publisher).
    pub fn send(mut self) -> Result<u64> {
        let claim = self.claim.take().expect("a loan holds its claim until sent");
        let len = claim.payload_len();
        let seq = self.state.commit(claim)?;
        self.shared.after_commit(&mut self.state, len);
        Ok(seq)
    }
}

impl Deref for Loan<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.claim.as_ref().map_or(&[], Claim::bytes)
    }
}

impl DerefMut for Loan<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.claim.as_mut().map_or(&mut [], Claim::bytes_mut)
    }
}

impl Drop for Loan<'_> {
    fn drop(&mut self) {
        if let Some(claim) = self.claim.take() {
            self.state.abandon(claim);
        }
        // Then `state` is released and `turn` given back, in field order.
    }
}
