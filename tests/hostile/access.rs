//! Attacks on topic access: subscribers without (or with a wrong) credential.

#[allow(unused_imports)]
use super::*;
