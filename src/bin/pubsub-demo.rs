//! The demo binary.
fn main() {}
