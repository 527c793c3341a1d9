//! Attacks on the node's fairness: control-slot starvation, silent subscribers, huge records.

#[allow(unused_imports)]
use super::*;
