//! Helpers shared by the integration tests. The process helpers are the fabric crate's own
//! (running one test alone in a child process, process resource counters); nodes for
//! explicit connections are this crate's.
#![allow(dead_code)]

#[path = "../../fabric/tests/common/isolate.rs"]
pub mod isolate;
#[path = "../../fabric/tests/common/resources.rs"]
pub mod resources;
