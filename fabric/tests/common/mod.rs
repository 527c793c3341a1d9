//! Helpers shared by the integration tests: which provider a generic test runs against
//! ([`provider`]), opened nodes, connected pairs and bounded waits ([`fabric`]), process resource
//! counters ([`resources`]), running one test alone in a child process ([`isolate`]) and peers in
//! processes to kill ([`child`]).
//!
//! Each test binary uses only part of it, hence `dead_code` is allowed here.
#![allow(dead_code)]

pub mod child;
pub mod fabric;
pub mod isolate;
pub mod provider;
pub mod resources;
