//! Downcasting of provider objects: the one helper every provider trait builds on.

use std::any::Any;

/// Downcasting support: a provider recovers its own concrete types from the handles it is given.
pub trait AsAny: Any + Send + Sync {
    /// `self` as `Any`, to downcast a borrowed handle.
    fn as_any(&self) -> &dyn Any;
}

impl<T: Any + Send + Sync> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}
