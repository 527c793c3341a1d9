//! The soft provider: verbs semantics in user space over TCP (RC) and UDP multicast (UD).
//!
//! Each opened device runs one NIC thread (`nic`) with a `mio` loop over its listeners and
//! connections. An RC queue pair is one TCP connection carrying the frames of `wire`; the NIC
//! serves remote READs and WRITEs straight from and into registered memory (checked against
//! the region table of the queue pair's protection domain) without the owner's threads, and
//! posting threads write their frames to the socket themselves when nothing is queued.
//!
//! Between devices of one host, READs, WRITEs and small SENDs take the same-host path instead
//! (`shm`): this end's threads copy between its buffers and a mapping of the peer's region
//! (read-only unless the region grants remote write), with the same checks, and write SENDs
//! into the peer's inbox.

mod cm;
mod conn;
mod connections;
mod cq;
mod device;
mod events;
mod handshakes;
mod mr;
mod nic;
mod open;
mod pd;
mod qp;
mod recv;
mod regions;
mod seg;
mod shm;
mod srq;
mod timers;
mod ud;
internal! { pub mod wire; }

#[cfg(test)]
mod tests;

// The NIC's limits, for the hostile tests (with the feature `internals`).
#[cfg(feature = "internals")]
pub use conn::{OUT_CAP, OUT_RESUME};
#[cfg(feature = "internals")]
pub use handshakes::{HANDSHAKE_TIMEOUT, MAX_PENDING_HANDSHAKES, MAX_PENDING_HANDSHAKES_PER_SOURCE};
#[cfg(feature = "internals")]
pub use nic::OUTPUT_STALL_TIMEOUT;

use super::{Fabric, FabricConfig, Result};

/// Opens a soft device (`soft0`) with its own NIC thread, which stops when the last handle
/// of the device is dropped.
///
/// # Errors
/// [`NoDevice`](super::Error::NoDevice) when `config.device` names another device than
/// `soft0`; [`Os`](super::Error::Os) when the NIC thread, its epoll instance or the same-host
/// endpoint cannot be created.
pub fn open(config: &FabricConfig) -> Result<Fabric> {
    open::open(config)
}
