//! Wire protocol (in progress).
