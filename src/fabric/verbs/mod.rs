//! The verbs provider: libibverbs and librdmacm through `rdma-sys`.

use super::{Error, Fabric, FabricConfig, Result};

/// Opens a verbs device.
pub fn open(_config: &FabricConfig) -> Result<Fabric> {
    Err(Error::NoDevice { provider: "verbs", detail: "not written yet".into() })
}

/// The devices present, or why there are none.
pub fn probe() -> std::result::Result<Vec<String>, String> {
    Err("not written yet".into())
}
