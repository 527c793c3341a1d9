//! The handles callers use: thin owners of provider objects that check arguments once, the
//! same way for every provider, before delegating to it. Each handle holds a closed enum of the
//! providers' objects, its flavor (`QpFlavor`, `CqFlavor`, ...), and matches on it: every call
//! reaches the provider's own type statically. Where two objects meet (a queue pair created with
//! a PD, CQs and an SRQ, an SGE naming a region), the handle matches on the pair, and a mixed
//! pair is [`Error::ProviderMismatch`](crate::Error::ProviderMismatch).
//!
//! One file per object, with its whole impl: `device.rs` (`Fabric`, which creates every other
//! object, and `ProtectionDomain`, which registers memory and creates shared receive queues),
//! `cq.rs`, `srq.rs`, `qp.rs` (`QpInit`, `QueuePair`), `cm.rs` (`EventChannel`, `Listener`,
//! `ConnectRequest`), `ud.rs`, `faults.rs`.

/// Evaluates `$body` with `$object` bound to the provider object inside `$flavor`, a value (or
/// reference) of the flavor enum `$enum`: one `match` arm per provider, each a static call.
macro_rules! dispatch {
    ($enum:ident, $flavor:expr, $object:ident => $body:expr) => {
        match $flavor {
            $enum::Soft($object) => $body,
            #[cfg(feature = "verbs")]
            $enum::Verbs($object) => $body,
        }
    };
}

mod cm;
mod cq;
mod device;
mod faults;
mod qp;
mod srq;
mod ud;

pub use cm::{CmEvent, ConnectRequest, EventChannel, Listener};
pub use cq::CompletionQueue;
pub use device::{Fabric, ProtectionDomain};
pub use faults::FaultInjector;
pub use qp::{QpInit, QueuePair};
pub use srq::SharedReceiveQueue;
pub use ud::UdEndpoint;
