//! The soft provider: verbs semantics in user space over TCP (RC) and UDP multicast (UD).

use super::{Error, Fabric, FabricConfig, Result};

/// Opens a soft device.
pub fn open(_config: &FabricConfig) -> Result<Fabric> {
    Err(Error::ProviderUnavailable { provider: "soft", hint: "not written yet" })
}
