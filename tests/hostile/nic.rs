//! Attacks on the soft NIC: READ floods, rkey guessing, handshake floods.

#[allow(unused_imports)]
use super::*;
