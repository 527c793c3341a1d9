//! What a queue pair connected by hand (without a CM id) has of its own: the endpoint of its
//! port it reports (LID, the RoCE v2 GID rxe needs, the active MTU, a random PSN), its state,
//! and the `ibv_modify_qp` sequence that moves it through INIT, RTR and RTS.

use std::io;
use std::net::SocketAddr;
use std::path::Path;

use parking_lot::Mutex;
use rdma_sys::*;

use super::cm_id::{ConnState, IdCtx};
use super::device::Device;
use super::gid::{choose_roce_v2, ip_of, sysfs_table, SYSFS_INFINIBAND};
use super::qp_attr::{modify_attr, path_mtu_of, qp_state_of, LocalPath};
use crate::provider::ConnId;
use crate::{Error, PathMtu, QpEndpoint, QpState, QpTransition, Result, MAX_24_BIT_FIELD};

/// `ibv_port_attr::link_layer` of an Ethernet (RoCE) port.
const LINK_LAYER_ETHERNET: u8 = 2;

/// A device port as a queue pair connected by hand uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PortInfo {
    /// The port number.
    pub(super) port: u8,
    /// Its LID (0 on RoCE).
    pub(super) lid: u16,
    /// Its active MTU.
    pub(super) mtu: PathMtu,
    /// The index of the source GID: RoCE v2 of the netdev's address on Ethernet, 0 on InfiniBand.
    pub(super) gid_index: u8,
    /// That GID.
    pub(super) gid: [u8; 16],
}

impl PortInfo {
    /// Queries the port `dev` was opened on (`ibv_query_port`, the GID table, `ibv_query_gid`).
    pub(super) fn query(dev: &Device) -> Result<PortInfo> {
        let port = dev.port();
        // SAFETY: plain old data, filled by the call.
        let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: the context is open while `dev` lives; attr is a valid out-pointer.
        let rc = unsafe { ___ibv_query_port(dev.ctx(), port, &mut attr) };
        if rc != 0 {
            return Err(super::os::errno("ibv_query_port", rc));
        }
        let mtu = path_mtu_of(attr.active_mtu).ok_or_else(|| {
            let detail = format!("{} port {port} reports active MTU code {}", dev.name(), attr.active_mtu);
            Error::os("ibv_query_port", None, io::Error::new(io::ErrorKind::InvalidData, detail))
        })?;
        let gid_index = if attr.link_layer == LINK_LAYER_ETHERNET {
            roce_v2_gid_index(dev, usize::try_from(attr.gid_tbl_len).unwrap_or(0))?
        } else {
            0
        };
        let mut gid = ibv_gid { raw: [0; 16] };
        // SAFETY: the context is open; gid is a valid out-pointer.
        let rc = unsafe { ibv_query_gid(dev.ctx(), port, i32::from(gid_index), &mut gid) };
        if rc != 0 {
            return Err(super::os::errno("ibv_query_gid", rc));
        }
        // SAFETY: every bit pattern is a valid raw GID.
        let gid = unsafe { gid.raw };
        Ok(PortInfo { port, lid: attr.lid, mtu, gid_index, gid })
    }
}

/// The index of the RoCE v2 GID of the device's address (see `gid`).
fn roce_v2_gid_index(dev: &Device, table_len: usize) -> Result<u8> {
    let table = sysfs_table(Path::new(SYSFS_INFINIBAND), dev.name(), dev.port(), table_len);
    match choose_roce_v2(table, dev.bind) {
        Some(entry) => Ok(entry.index),
        None => {
            let of = dev.bind.map_or_else(|| "an IPv4 address".to_owned(), |ip| ip.to_string());
            let detail = format!(
                "{} port {} has no RoCE v2 GID of {of} in {SYSFS_INFINIBAND}/{}/ports/{}/gid_attrs/types",
                dev.name(),
                dev.port(),
                dev.name(),
                dev.port()
            );
            Err(Error::os("create_qp", None, io::Error::new(io::ErrorKind::AddrNotAvailable, detail)))
        }
    }
}

/// What a queue pair connected by hand has instead of a CM id.
pub(super) struct HandLink {
    /// The connection id, and the gate of posting (as a CM id's context: receives from the
    /// start, sends once in RTS, nothing once in error).
    ctx: Box<IdCtx>,
    /// Its endpoint, sent to the peer.
    endpoint: QpEndpoint,
    /// The source GID index and PSN the moves use.
    path: LocalPath,
    /// The state of the last successful move; held during a move, so moves do not interleave.
    state: Mutex<QpState>,
    /// The peer, once RTR named it (its GID as an address; port 0).
    peer: Mutex<Option<SocketAddr>>,
}

impl HandLink {
    /// The link of queue pair `qp_num` on `port`, connection `conn`, with a random first PSN.
    pub(super) fn new(conn: ConnId, qp_num: u32, port: PortInfo) -> HandLink {
        let psn = rand::random::<u32>() & MAX_24_BIT_FIELD;
        HandLink {
            ctx: IdCtx::new(conn, true, 0),
            endpoint: QpEndpoint { qp_num, psn, port: port.port, lid: port.lid, gid: port.gid, mtu: port.mtu },
            path: LocalPath { port: port.port, gid_index: port.gid_index, psn },
            state: Mutex::new(QpState::Reset),
            peer: Mutex::new(None),
        }
    }

    /// The context posting checks.
    pub(super) fn ctx(&self) -> &IdCtx {
        &self.ctx
    }
    /// This end's endpoint.
    pub(super) fn endpoint(&self) -> QpEndpoint {
        self.endpoint
    }
    /// The local address: this end's GID as an address, port 0.
    pub(super) fn local_addr(&self) -> SocketAddr {
        SocketAddr::new(ip_of(self.endpoint.gid), 0)
    }
    /// The peer's address, once RTR named it.
    pub(super) fn peer_addr(&self) -> Option<SocketAddr> {
        *self.peer.lock()
    }

    /// The state of `qp` as the device reports it (it moves to ERROR by itself after a failed
    /// completion); the state of the last move when the query fails.
    pub(super) fn state(&self, qp: *mut ibv_qp) -> QpState {
        // SAFETY: plain old data filled by the call.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: plain old data filled by the call.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: the caller passes its live QP; both out-pointers are valid.
        let rc = unsafe { ibv_query_qp(qp, &mut attr, ibv_qp_attr_mask::IBV_QP_STATE.0 as i32, &mut init) };
        if rc != 0 {
            tracing::debug!("verbs: ibv_query_qp(state): {}", io::Error::from_raw_os_error(rc.abs()));
            return *self.state.lock();
        }
        qp_state_of(attr.qp_state)
    }

    /// Makes `transition` on `qp` (`ibv_modify_qp`), INIT, RTR or RTS (the owner moves to
    /// ERROR by disconnecting); the handle checked that it is legal and in range.
    pub(super) fn modify(&self, qp: *mut ibv_qp, transition: &QpTransition) -> Result<()> {
        self.check_port(transition)?;
        let mut state = self.state.lock();
        let mut m = modify_attr(transition, &self.path);
        // SAFETY: the caller passes its live QP; `m.attr` is valid for the call and only its
        // masked attributes are read.
        let rc = unsafe { ibv_modify_qp(qp, &mut m.attr, m.mask.0 as i32) };
        let peer = match transition {
            QpTransition::ReadyToReceive(a) => Some(SocketAddr::new(ip_of(a.remote.gid), 0)),
            _ => self.peer_addr(),
        };
        if rc != 0 {
            return Err(Error::os(modify_verb(transition), peer, io::Error::from_raw_os_error(rc.abs())));
        }
        *state = transition.target();
        match transition {
            QpTransition::ReadyToReceive(_) => *self.peer.lock() = peer,
            QpTransition::ReadyToSend(_) => {
                let mut conn = self.ctx.state.write();
                if *conn == ConnState::Connecting {
                    *conn = ConnState::Established;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Records that the queue pair was moved to ERROR (disconnected).
    pub(super) fn set_error(&self) {
        *self.state.lock() = QpState::Error;
    }

    /// Refuses a port other than the device's (INIT) and a path MTU above this port's (RTR).
    fn check_port(&self, transition: &QpTransition) -> Result<()> {
        let ep = &self.endpoint;
        match transition {
            QpTransition::Init(a) if a.port != ep.port => {
                Err(Error::invalid("modify_qp", format!("port {}: the device was opened on port {}", a.port, ep.port)))
            }
            QpTransition::ReadyToReceive(a) if a.path_mtu > ep.mtu => Err(Error::invalid(
                "modify_qp",
                format!("path MTU {} exceeds this port's active MTU {}", a.path_mtu.bytes(), ep.mtu.bytes()),
            )),
            _ => Ok(()),
        }
    }
}

/// The name of the verb a failed move reports.
fn modify_verb(transition: &QpTransition) -> &'static str {
    match transition {
        QpTransition::Init(_) => "ibv_modify_qp(INIT)",
        QpTransition::ReadyToReceive(_) => "ibv_modify_qp(RTR)",
        QpTransition::ReadyToSend(_) => "ibv_modify_qp(RTS)",
        QpTransition::Error => "ibv_modify_qp(ERR)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Access, InitAttr, RtrAttr};
    use std::time::Duration;

    const PORT: PortInfo = PortInfo {
        port: 1,
        lid: 0,
        mtu: PathMtu::Mtu1024,
        gid_index: 3,
        gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 2, 15],
    };

    fn rtr(path_mtu: PathMtu) -> QpTransition {
        QpTransition::ReadyToReceive(RtrAttr {
            remote: QpEndpoint { qp_num: 9, psn: 1, port: 1, lid: 0, gid: [0; 16], mtu: PathMtu::Mtu4096 },
            path_mtu,
            max_dest_rd_atomic: 1,
            min_rnr_timer: Duration::from_micros(640),
        })
    }

    #[test]
    fn the_endpoint_is_the_ports_with_a_24_bit_psn() {
        let link = HandLink::new(7, 0x42, PORT);
        let ep = link.endpoint();
        assert_eq!((ep.qp_num, ep.port, ep.lid, ep.gid, ep.mtu), (0x42, 1, 0, PORT.gid, PathMtu::Mtu1024));
        assert!(ep.psn <= MAX_24_BIT_FIELD);
        assert_eq!(link.path, LocalPath { port: 1, gid_index: 3, psn: ep.psn });
        assert_eq!(link.local_addr(), SocketAddr::from(([10, 0, 2, 15], 0)));
        assert_eq!((link.ctx().conn, *link.ctx().state.read()), (7, ConnState::Connecting));
        assert_eq!(link.peer_addr(), None);
        // PSNs are random: 16 links do not all start alike.
        let psns: std::collections::HashSet<u32> = (0..16).map(|_| HandLink::new(7, 1, PORT).endpoint().psn).collect();
        assert!(psns.len() > 1, "{psns:?}");
    }

    #[test]
    fn another_port_or_a_path_mtu_above_the_ports_is_refused() {
        let link = HandLink::new(7, 0x42, PORT);
        let init = |port| QpTransition::Init(InitAttr { port, access: Access::REMOTE_READ });
        assert!(link.check_port(&init(1)).is_ok());
        let r = link.check_port(&init(2));
        assert!(
            matches!(&r, Err(Error::InvalidArgument { verb: "modify_qp", detail }) if detail.contains("port 1")),
            "{r:?}"
        );
        assert!(link.check_port(&rtr(PathMtu::Mtu1024)).is_ok());
        let r = link.check_port(&rtr(PathMtu::Mtu2048));
        assert!(
            matches!(&r, Err(Error::InvalidArgument { verb: "modify_qp", detail }) if detail.contains("1024")),
            "{r:?}"
        );
    }
}
