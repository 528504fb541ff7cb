//! The engine's own tests, one binary (each file was its own, and each linked the engine at opt-level 2):
//! client rules, coordinator failover, a group coordinator's load, the leader-epoch cache, replication in the in-process cluster, and the group
//! coordinator's transactional offsets.

mod client_rules;
mod consumer_coordinator;
mod coordinator_failover;
mod eligible_leader_replicas;
mod group_load;
mod leader_epoch;
mod replication;
mod txn_offsets;
