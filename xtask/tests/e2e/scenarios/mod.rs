//! The scenarios, grouped by what they exercise.

pub mod admission;
pub mod api_faults;
pub mod archiving;
pub mod backup_failures;
pub mod backups;
pub mod cluster;
pub mod crash_points;
pub mod databases;
pub mod demo;
pub mod disk_full;
pub mod emptied;
pub mod failover;
pub mod helm;
pub mod lifecycle;
pub mod operator;
pub mod plugin;
pub mod process_nodes;
pub mod replica_faults;
pub mod reseed;
pub mod rotation;
pub mod s3_faults;
pub mod safety;
pub mod scaling;
pub mod stale_leader;
pub mod storage;
pub mod upgrades;
