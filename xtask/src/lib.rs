//! Library side of xtask, shared by the `cargo xtask` binary and by test
//! targets that need a real cluster.

pub mod bench;
pub mod cargo;
pub mod cluster;
pub mod timing;
pub mod wire_scan;
