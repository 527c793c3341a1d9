//! Device discovery and selection, and the opened device's context ([`Device`]): the bottom of
//! the provider, which every object holds.

use std::ffi::CStr;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use rdma_sys::*;

use super::addr::CSockAddr;
use super::cm_id::{CmId, IdCtx, RawChannel};
use super::events::AsyncEvents;
use super::os::errno;
use crate::{DeviceAttributes, Error, FabricConfig, Result};

/// The character device RDMA-CM needs.
const RDMA_CM_DEVICE: &str = "/dev/infiniband/rdma_cm";

/// The verbs devices present, or why there are none.
///
/// # Errors
/// Why there is no usable device, in words: the device list cannot be read, it is empty, or
/// the RDMA-CM device file is missing.
pub fn probe() -> std::result::Result<Vec<String>, String> {
    let mut n: i32 = 0;
    // SAFETY: `n` is a valid out-pointer; the list is freed below.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        let err = std::io::Error::last_os_error();
        return Err(format!("no RDMA device (ibv_get_device_list failed: {err})"));
    }
    let mut names = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds `n` valid device pointers while it is not freed.
        let name = unsafe { CStr::from_ptr(ibv_get_device_name(*list.add(i))) };
        names.push(name.to_string_lossy().into_owned());
    }
    // SAFETY: `list` came from ibv_get_device_list and is freed once.
    unsafe { ibv_free_device_list(list) };
    if names.is_empty() {
        return Err("no RDMA device (ibv_get_device_list returned 0 devices)".into());
    }
    if !Path::new(RDMA_CM_DEVICE).exists() {
        return Err(format!("{RDMA_CM_DEVICE} is missing (load rdma_ucm)"));
    }
    Ok(names)
}

/// An opened device: librdmacm's device context, kept open by holding librdmacm's device
/// list, so that CM ids bound to the device share its context (their queue pairs must use
/// protection domains of the same context).
pub(super) struct Device {
    list: *mut *mut ibv_context,
    ctx: *mut ibv_context,
    name: String,
    port: u8,
    /// The address the device was selected by, used as the source of outgoing connections.
    pub(super) bind: Option<IpAddr>,
    pub(super) attributes: DeviceAttributes,
    /// The reader of the context's async events (stopped before the list is freed).
    events: Option<AsyncEvents>,
}

// SAFETY: libibverbs contexts are thread-safe (the library serialises where needed); the
// device list is only read after creation and freed once in Drop.
unsafe impl Send for Device {}
// SAFETY: see Send; no interior mutation from Rust.
unsafe impl Sync for Device {}

impl Drop for Device {
    fn drop(&mut self) {
        drop(self.events.take());
        // SAFETY: the list came from rdma_get_devices; every object created on the context
        // holds an Arc of this device, so none is alive any more.
        unsafe { rdma_free_devices(self.list) };
    }
}

impl Device {
    /// The raw context.
    pub(super) fn ctx(&self) -> *mut ibv_context {
        self.ctx
    }
    /// The device name.
    pub(super) fn name(&self) -> &str {
        &self.name
    }
    /// The port it was opened on (the one behind the address it was selected by, else 1).
    pub(super) fn port(&self) -> u8 {
        self.port
    }

    /// Opens the device `config` selects.
    pub(super) fn open(config: &FabricConfig) -> Result<Device> {
        let no_device = |detail: String| Error::NoDevice { provider: "verbs", detail };
        probe().map_err(no_device)?;
        let mut n: i32 = 0;
        // SAFETY: `n` is a valid out-pointer; the list is owned by the returned Device (or
        // freed on the error paths below through `ListGuard`).
        let list = unsafe { rdma_get_devices(&mut n) };
        if list.is_null() || n <= 0 {
            if !list.is_null() {
                // SAFETY: from rdma_get_devices, freed once.
                unsafe { rdma_free_devices(list) };
            }
            return Err(no_device("rdma_get_devices found no device usable through RDMA-CM".into()));
        }
        let guard = ListGuard(list);
        // SAFETY: the list holds `n` open contexts while it is not freed.
        let contexts: Vec<*mut ibv_context> = (0..n as usize).map(|i| unsafe { *list.add(i) }).collect();
        let name_of = |ctx: *mut ibv_context| {
            // SAFETY: ctx is an open context of the list; its device outlives it.
            unsafe { CStr::from_ptr(ibv_get_device_name((*ctx).device)) }.to_string_lossy().into_owned()
        };
        let (ctx, port, bind) = match &config.device {
            Some(wanted) => {
                let ctx = contexts.iter().copied().find(|c| name_of(*c) == *wanted).ok_or_else(|| {
                    let present: Vec<String> = contexts.iter().map(|c| name_of(*c)).collect();
                    no_device(format!("no device named {wanted} (present: {})", present.join(", ")))
                })?;
                (ctx, 1u8, None)
            }
            None => {
                let (verbs, port) = device_behind(config.bind)?;
                let ctx = contexts
                    .iter()
                    .copied()
                    .find(|c| *c == verbs)
                    .ok_or_else(|| no_device(format!("{} is on a device librdmacm did not list", config.bind)))?;
                (ctx, port, Some(config.bind))
            }
        };
        let name = name_of(ctx);
        // SAFETY: plain old data, filled by the call.
        let mut dev: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; dev is a valid out-pointer.
        let rc = unsafe { ibv_query_device(ctx, &mut dev) };
        if rc != 0 {
            return Err(errno("ibv_query_device", rc));
        }
        // SAFETY: plain old data, filled by the call.
        let mut port_attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; port_attr is a valid out-pointer of the size the call is told.
        let rc = unsafe { ___ibv_query_port(ctx, port, &mut port_attr) };
        if rc != 0 {
            return Err(errno("ibv_query_port", rc));
        }
        let clamp = |v: i32| v.clamp(0, i32::MAX) as u32;
        let max_sge = match dev.max_sge_rd {
            0 => clamp(dev.max_sge),
            rd => clamp(dev.max_sge.min(rd)),
        };
        let to_u8 = |v: i32| v.clamp(0, 255) as u8;
        let attributes = DeviceAttributes {
            max_qp_wr: clamp(dev.max_qp_wr),
            max_sge,
            max_cqe: clamp(dev.max_cqe),
            max_mr_size: dev.max_mr_size,
            max_srq_wr: if dev.max_srq > 0 { clamp(dev.max_srq_wr) } else { 0 },
            ud_mtu: mtu_bytes(port_attr.active_mtu),
            max_msg_size: u64::from(port_attr.max_msg_sz),
            max_qp_rd_atom: to_u8(dev.max_qp_rd_atom),
            max_qp_init_rd_atom: to_u8(dev.max_qp_init_rd_atom),
            // Soft-RoCE (rxe) copies in the kernel, on this host's CPUs too, but in softirq
            // context: the scheduler does not share it out among threads.
            copies_on_host_cpus: false,
        };
        let events = AsyncEvents::start(ctx, &name)?;
        std::mem::forget(guard);
        let device = Device { list, ctx, name, port, bind, attributes, events: Some(events) };
        tracing::info!("verbs: opened {} port {} ({:?})", device.name, device.port, device.attributes);
        Ok(device)
    }
}

/// Frees librdmacm's device list on early returns.
struct ListGuard(*mut *mut ibv_context);

impl Drop for ListGuard {
    fn drop(&mut self) {
        // SAFETY: from rdma_get_devices, freed once (the success path forgets the guard).
        unsafe { rdma_free_devices(self.0) };
    }
}

/// The context and port behind `ip`, found by binding a temporary CM id to it.
fn device_behind(ip: IpAddr) -> Result<(*mut ibv_context, u8)> {
    let no_device = |detail: String| Error::NoDevice { provider: "verbs", detail };
    let channel = Arc::new(RawChannel::new()?);
    let id = CmId::new(&channel, rdma_port_space::RDMA_PS_TCP, IdCtx::new(0, false, 0))?;
    let mut sa = CSockAddr::new(SocketAddr::new(ip, 0));
    // SAFETY: id is a live CM id; sa is a valid socket address for the call's duration.
    if unsafe { rdma_bind_addr(id.raw(), sa.as_mut_ptr()) } != 0 {
        let err = std::io::Error::last_os_error();
        return Err(no_device(format!(
            "rdma_bind_addr({ip}) failed: {err}: {ip} is not an address of an RDMA interface"
        )));
    }
    // SAFETY: the id is live; after a successful bind its verbs/port fields are set.
    let (verbs, port) = unsafe { ((*id.raw()).verbs, (*id.raw()).port_num) };
    if verbs.is_null() {
        return Err(no_device(format!(
            "{ip} is not an address of an RDMA interface (set `device`, or bind to the address of an RDMA netdev)"
        )));
    }
    Ok((verbs, port.max(1)))
}

/// Bytes of an `ibv_mtu` value.
pub(super) fn mtu_bytes(mtu: ibv_mtu::Type) -> usize {
    match mtu {
        1..=5 => 128usize << mtu,
        _ => 256,
    }
}
