//! What the providers share below the handles: the settings of a new queue pair with the
//! provider's own objects ([`QpInitAttr`]), and the types a provider's verbs take.
//!
//! There is no provider trait: each handle holds a closed enum of the providers' objects (its
//! flavor, e.g. `QpFlavor`) and matches on it, so every call reaches the provider's own type
//! statically. Where two objects meet (a queue pair and its CQs, a work request and the regions
//! its SGEs name), the handle matches on the pair: objects of one provider proceed, a mixed pair
//! is [`Error::ProviderMismatch`](crate::Error::ProviderMismatch). A provider checks that the
//! objects it is given come from its own device ([`Error::DeviceMismatch`](crate::Error::DeviceMismatch)).
//!
//! Objects keep what they depend on alive through `Arc`s (a queue pair holds its CQs, PD and
//! event channel), so teardown always runs in the reverse order of creation, on error paths too.

use std::sync::Arc;
use std::time::Duration;

use super::types::QpCaps;

// What the providers' verbs take that lives in modules below this one, so that a provider
// finds it here.
pub use super::region::Sge;
pub use super::types::ConnId;
pub use super::work_request::SendRequest;

/// What a provider needs to create a queue pair (as `ibv_qp_init_attr`): a
/// [`QpInit`](crate::QpInit) checked against the device's limits, with the provider's own
/// protection domain (`Pd`), completion queues (`Cq`) and shared receive queue (`Srq`).
pub struct QpInitAttr<Pd, Cq, Srq> {
    /// Protection domain.
    pub pd: Arc<Pd>,
    /// CQ for send-queue completions.
    pub send_cq: Arc<Cq>,
    /// CQ for receive completions.
    pub recv_cq: Arc<Cq>,
    /// Shared receive queue, if any.
    pub srq: Option<Arc<Srq>>,
    /// Queue capacities.
    pub caps: QpCaps,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// How long the responder asks the requester to wait before an RNR retry.
    pub min_rnr_timer: Duration,
    /// RDMA READs this queue pair may have outstanding (at most the peer's responder
    /// resources, negotiated in the connect).
    pub initiator_depth: u8,
    /// RDMA READs of the peer this queue pair serves at once.
    pub responder_resources: u8,
}
