//! The verbs provider: libibverbs and librdmacm through `rdma-sys`.
//!
//! Every verbs object is a Rust struct whose `Drop` releases it, and each holds `Arc`s of what
//! it depends on (a queue pair holds its CQs, PD, CM event channel and device), so teardown runs
//! in the reverse order of creation on every path: disconnect, destroy the QP, deregister
//! memory, destroy CQs and completion channels, destroy CM ids, destroy event channels, and
//! finally release the device list.
//!
//! Notes on the wire behaviour that callers must know:
//! - Private data received through the CM is padded by the transport (an InfiniBand/RoCE REQ
//!   carries 56 bytes, a REP 196, a REJ 148), so the receiver sees the sender's bytes followed
//!   by zeros: callers encode their own length (the protocol layer does).
//! - `min_rnr_timer` is applied with an RTS→RTS modify once the queue pair is connected (the
//!   kernel CM resets it to 0 = 655 ms during RTR): right after `rdma_accept` on the passive
//!   side and when `ESTABLISHED` is delivered on the active side. Post receives before
//!   connecting to avoid RNR during that window.
//! - A `Disconnected` event answers the peer's disconnect request (DREP) when it is delivered,
//!   so the initiating side sees its own `Disconnected` once the peer's channel was read (or
//!   after the CM's DREQ timeout when nobody reads it).
//! - Unicast UD: an endpoint's unicast address is the port of an RDMA_PS_UDP CM id listening
//!   for it; senders resolve it once through SIDR (see `sidr`). A received datagram names its
//!   sender by that address when the sender resolved the receiver (unicast senders always
//!   did), otherwise by its IP with port 0.

mod addr;
mod cm;
mod cq;
mod device;
mod events;
mod mr;
mod qp;
mod sidr;
mod stoppable;
mod ud;

use super::{Error, Fabric, FabricConfig, Result};

pub use device::probe;

/// Opens the verbs device named by `config.device`, or else the one behind `config.bind`.
///
/// # Errors
/// [`Error::NoDevice`] when no device matches; [`Error::Os`] when the device cannot be
/// opened or its helpers started.
pub fn open(config: &FabricConfig) -> Result<Fabric> {
    device::VerbsFabric::open(config).map(|f| Fabric::from_ops(std::sync::Arc::new(f)))
}

/// An [`Error::Os`] from `errno` (librdmacm and libibverbs calls that return -1 or NULL).
fn last_os(verb: &'static str) -> Error {
    Error::os(verb, None, std::io::Error::last_os_error())
}

/// An [`Error::Os`] from an errno returned by a libibverbs call.
fn errno(verb: &'static str, code: i32) -> Error {
    Error::os(verb, None, std::io::Error::from_raw_os_error(code.abs()))
}

/// Makes `fd` non-blocking (waits on it use poll(2)).
fn set_nonblocking(fd: i32, verb: &'static str) -> Result<()> {
    // SAFETY: fcntl on a descriptor the caller owns; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(last_os(verb));
    }
    Ok(())
}

/// Waits up to `timeout` for `fd` to become readable; returns whether it did.
fn poll_fd(fd: i32, timeout: std::time::Duration, verb: &'static str) -> Result<bool> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // Round up so that a short remaining time still waits instead of spinning.
    let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    if rc < 0 {
        let err = std::io::Error::last_os_error();
        if err.kind() == std::io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(Error::os(verb, None, err));
    }
    Ok(rc > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::FabricKind;
    use std::net::{IpAddr, Ipv4Addr};

    fn config() -> FabricConfig {
        let ip = std::env::var("RXE_IP").ok().and_then(|s| s.parse().ok()).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        FabricConfig { bind: ip, ..FabricConfig::new(FabricKind::Verbs) }
    }

    /// Without a device the open fails with `NoDevice` naming the cause; with one it succeeds.
    #[test]
    fn open_reports_missing_device_or_opens() {
        match probe() {
            Err(why) => {
                assert!(!why.is_empty());
                match open(&config()) {
                    Err(Error::NoDevice { provider, detail }) => {
                        assert_eq!(provider, "verbs");
                        assert!(detail.contains(&why), "detail {detail:?} does not name the cause {why:?}");
                    }
                    other => panic!("expected NoDevice, got {other:?}"),
                }
            }
            Ok(devices) => {
                assert!(!devices.is_empty());
                let fabric = open(&config()).expect("a device exists: open must succeed");
                assert!(devices.iter().any(|d| d == fabric.device_name()));
                assert!(fabric.attributes().max_qp_wr > 0);
                assert!(fabric.faults().is_none());
            }
        }
    }

    /// A device name that does not exist is refused with `NoDevice`, never a panic.
    #[test]
    fn unknown_device_name_is_no_device() {
        let cfg = FabricConfig { device: Some("no-such-dev9".into()), ..config() };
        match open(&cfg) {
            Err(Error::NoDevice { detail, .. }) => assert!(!detail.is_empty()),
            other => panic!("expected NoDevice, got {other:?}"),
        }
    }
}
