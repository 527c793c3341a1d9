//! The handles callers use: thin owners of provider objects that check arguments once, the
//! same way for every provider, before delegating to it. One file per object; each holds the
//! verb that creates its object (`Fabric::create_cq` in `cq.rs`, `ProtectionDomain::create_srq`
//! in `srq.rs`, ...), so that the device (`device.rs`) sits at the bottom and imports none of
//! them.

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
