//! KIP-966's eligible leader replicas in the controller (`eligible.leader.replicas.version=1`, the default
//! of a cluster Kafka 4.1 or later formats): ports of `ReplicationControlManagerTest`'s ELR cases @ 4.3.1,
//! driven through the controller's own events (fence, unclean-shutdown registration, unfence, AlterPartition),
//! and the mutations each catches.

use std::collections::BTreeMap;
use txnsim_engine::protocol::metadata::MetadataMessage;
use txnsim_engine::protocol::metadata::PartitionRegistration;
use txnsim_engine::protocol::NO_LEADER;
use txnsim_engine::protocol::{Envelope, Message, NodeId};
use txnsim_engine::{Controller, EngineConfig, Mutation, Mutations, TopicPartition, Topology};

fn foo_0() -> TopicPartition {
    TopicPartition::new("foo", 0)
}

/// A controller of `brokers` brokers with topic `foo` on every one of them (`foo-0` on replicas 0, 1, ...,
/// led by 0) and `min.insync.replicas` at `min_isr`.
fn controller(brokers: u32, min_isr: u32, mutations: Mutations) -> Controller {
    let topics: BTreeMap<String, u32> = [("foo".to_string(), 1)].into_iter().collect();
    let config = EngineConfig { min_insync_replicas: min_isr, mutations, ..EngineConfig::default() };
    let c = Controller::new(&topics, &Topology::new(brokers, brokers), &config);
    assert_eq!(c.partitions[&foo_0()].state.leader, 0, "broker 0 leads foo-0");
    c
}

fn foo(c: &Controller) -> &PartitionRegistration {
    &c.partitions[&foo_0()]
}

/// (leader, ISR, ELR, last known ELR) of a partition.
type Registration = (u32, Vec<u32>, Vec<u32>, Vec<u32>);

/// (leader, ISR, ELR, last known ELR) of `foo-0`.
fn state(c: &Controller) -> Registration {
    let p = foo(c);
    (p.state.leader, p.state.isr.clone(), p.elr.clone(), p.last_known_elr.clone())
}

/// `foo-0`'s leader asks for `new_isr` at the current epochs; the controller's answer must commit it.
fn alter_isr(c: &mut Controller, new_isr: Vec<u32>) {
    let p = foo(c);
    let leader = p.state.leader;
    let request = MetadataMessage::AlterPartitionRequest {
        broker: leader,
        partition: foo_0(),
        leader_epoch: p.state.leader_epoch,
        partition_epoch: p.state.partition_epoch,
        new_isr: new_isr.clone(),
    };
    let env = Envelope {
        from: NodeId::Broker(leader),
        to: c.id.clone(),
        correlation_id: 1,
        message: Message::Metadata(request),
    };
    let answer = c.on_message(env).sends.pop().expect("an answer");
    match answer.message {
        Message::Metadata(MetadataMessage::AlterPartitionResponse { result: Ok(s), .. }) => {
            assert_eq!(s.isr, new_isr, "AlterPartition commits the ISR asked")
        }
        other => panic!("AlterPartition to {new_isr:?} is committed: {other:?}"),
    }
}

/// ReplicationControlManagerTest#testEligibleLeaderReplicas_ShrinkAndExpandIsr: min ISR 2 on three
/// replicas; the leader shrinks the ISR to {0}: "assertArrayEquals(new int[]{1, 2}, partition.elr)"; it
/// grows back to {0, 1}: the ELR is empty again.
#[test]
fn an_isr_shrinking_below_min_isr_keeps_its_leavers_as_elr_until_it_grows_back() {
    let mut c = controller(3, 2, Mutations::none());
    alter_isr(&mut c, vec![0]);
    assert_eq!(state(&c), (0, vec![0], vec![1, 2], vec![]), "(leader, ISR, ELR, last known ELR)");
    alter_isr(&mut c, vec![0, 1]);
    assert_eq!(state(&c), (0, vec![0, 1], vec![], vec![]), "back at min ISR: no ELR");
}

/// ReplicationControlManagerTest#testEligibleLeaderReplicas_ShrinkToEmptyIsr: min ISR 3; brokers 1 and 2
/// fenced: ELR {1, 2}; the leader shut down (fenced, as the clean shutdown the test runs): the ISR is
/// empty, "new int[]{0, 1, 2}, partition.elr", and the last known ELR holds the last leader, 0.
#[test]
fn with_elr_the_isr_may_empty_and_the_last_leader_is_remembered() {
    let mut c = controller(3, 3, Mutations::none());
    c.broker_fenced(1);
    c.broker_fenced(2);
    assert_eq!(state(&c), (0, vec![0], vec![1, 2], vec![]));
    c.broker_fenced(0);
    assert_eq!(state(&c), (NO_LEADER, vec![], vec![0, 1, 2], vec![0]), "(leader, ISR, ELR, last known ELR)");
}

/// ReplicationControlManagerTest#testEligibleLeaderReplicas_BrokerFence: min ISR 3 on four replicas;
/// fencing 2 and 3 leaves ELR {3} (2 left while the ISR still held three); fencing 1 too: ELR {1, 3};
/// unfencing them all changes no ELR (the leader stands).
#[test]
fn members_leaving_an_isr_at_min_isr_are_not_eligible() {
    let mut c = controller(4, 3, Mutations::none());
    c.broker_fenced(2);
    c.broker_fenced(3);
    assert_eq!(foo(&c).elr, vec![3]);
    c.broker_fenced(1);
    assert_eq!(foo(&c).elr, vec![1, 3]);
    for b in 1..4 {
        c.broker_unfenced(b);
    }
    assert_eq!(state(&c), (0, vec![0], vec![1, 3], vec![]), "(leader, ISR, ELR, last known ELR)");
}

/// The clean election of ReplicationControlManagerTest#testEligibleLeaderReplicas_CleanElection under
/// `mutations` (min ISR 3, four replicas): 1, 2 and 3 fenced (ELR {2, 3}), 2 unfenced, then 0 and 1
/// fenced. (leader, ISR, ELR, last known ELR) at the end.
fn clean_election(mutations: Mutations) -> Registration {
    let mut c = controller(4, 3, mutations);
    for b in 1..4 {
        c.broker_fenced(b);
    }
    c.broker_unfenced(2);
    c.broker_fenced(0);
    c.broker_fenced(1);
    state(&c)
}

/// ReplicationControlManagerTest#testEligibleLeaderReplicas_CleanElection: with the ISR empty, the live
/// ELR member 2 is elected, alone in the ISR: "assertEquals(2, partition.leader)", ISR {2}, ELR {0, 3}.
#[test]
fn an_empty_isr_elects_a_live_elr_member() {
    assert_eq!(clean_election(Mutations::none()), (2, vec![2], vec![0, 3], vec![]));
}

/// Under `elr-not-kept` nobody is eligible: the partition has no leader (the port above catches it).
#[test]
fn elr_not_kept_is_caught_by_the_clean_election_port() {
    let (leader, isr, elr, _) = clean_election(Mutations::one(Mutation::ElrNotKept));
    assert_eq!((leader, isr, elr), (NO_LEADER, vec![], vec![]), "no eligible replica, no leader");
}

/// ReplicationControlManagerTest#testEligibleLeaderReplicas_UncleanShutdown: min ISR 3, four replicas, 1,
/// 2 and 3 fenced (ELR {2, 3}); broker 3 registers after an unclean shutdown: "kicked out of ELR", ELR
/// {2}; then the leader 0's unclean shutdown: ELR {2}, and 0 is the last known leader.
#[test]
fn an_unclean_shutdown_leaves_the_elr() {
    let mut c = controller(4, 3, Mutations::none());
    for b in 1..4 {
        c.broker_fenced(b);
    }
    assert_eq!(foo(&c).elr, vec![2, 3]);
    c.broker_registered(3);
    assert_eq!((foo(&c).elr.clone(), foo(&c).last_known_elr.clone()), (vec![2], vec![]));
    c.broker_registered(0);
    assert_eq!(state(&c), (NO_LEADER, vec![], vec![2], vec![0]), "(leader, ISR, ELR, last known ELR)");
}

/// Every replica of `foo-0` dies (min ISR 3 on three, so each joins the ELR) and restarts after its
/// unclean shutdown, 1 and 2 first, then the last leader 0: the state after each restart.
fn everyone_dies_and_comes_back(mutations: Mutations) -> Vec<Registration> {
    let mut c = controller(3, 3, mutations);
    for b in [1, 2, 0] {
        c.broker_fenced(b);
    }
    assert_eq!(state(&c), (NO_LEADER, vec![], vec![0, 1, 2], vec![0]));
    [1, 2, 0]
        .into_iter()
        .map(|b| {
            c.broker_restarted(b);
            state(&c)
        })
        .collect()
}

/// Derived from PartitionChangeBuilderTest#testEligibleLeaderReplicas_ElectLastKnownLeader and
/// #testEligibleLeaderReplicas_UncleanShutdown, through the restarts: each returning replica leaves the
/// ELR (unclean shutdown) and none is elected while the ELR still names the others; once the ISR and ELR
/// are empty, the last known leader 0 is elected on its return, alone in the ISR (an unclean election:
/// Kafka marks it RECOVERING), and the last known ELR is cleared.
#[test]
fn the_last_known_leader_is_elected_when_the_isr_and_elr_are_empty() {
    let states = everyone_dies_and_comes_back(Mutations::none());
    let expected = vec![
        (NO_LEADER, vec![], vec![0, 2], vec![0]),
        (NO_LEADER, vec![], vec![0], vec![0]),
        (0, vec![0], vec![], vec![]),
    ];
    assert_eq!(states, expected, "(leader, ISR, ELR, last known ELR) after restarting 1, 2, then 0");
}

/// Under `last-known-leader-not-elected` the partition stays without a leader for good (caught above).
#[test]
fn last_known_leader_not_elected_is_caught_by_the_restarts() {
    let states = everyone_dies_and_comes_back(Mutations::one(Mutation::LastKnownLeaderNotElected));
    assert_eq!(states[2], (NO_LEADER, vec![], vec![], vec![0]), "no leader after everyone returned");
}

/// Under `unclean-shutdown-stays-in-elr` broker 1, back from a crash, is elected from the ELR (caught
/// above, where it is not).
#[test]
fn unclean_shutdown_stays_in_elr_is_caught_by_the_restarts() {
    let states = everyone_dies_and_comes_back(Mutations::one(Mutation::UncleanShutdownStaysInElr));
    assert_eq!(states[0], (1, vec![1], vec![0, 2], vec![]), "broker 1 leads from the ELR after its crash");
}

/// `eligible.leader.replicas.version=0`: the ISR never empties (the last member stays), no ELR is kept,
/// and a partition whose ISR died waits for that member.
#[test]
fn without_elr_the_last_isr_member_stays_and_no_elr_is_kept() {
    let topics: BTreeMap<String, u32> = [("foo".to_string(), 1)].into_iter().collect();
    let config = EngineConfig { min_insync_replicas: 3, eligible_leader_replicas: false, ..EngineConfig::default() };
    let mut c = Controller::new(&topics, &Topology::new(3, 3), &config);
    for b in [1, 2, 0] {
        c.broker_fenced(b);
    }
    assert_eq!(state(&c), (NO_LEADER, vec![0], vec![], vec![]), "(leader, ISR, ELR, last known ELR)");
    c.broker_restarted(1);
    assert_eq!(state(&c).0, NO_LEADER, "1 is not in the ISR");
    c.broker_restarted(0);
    assert_eq!(state(&c), (0, vec![0], vec![], vec![]), "the last ISR member leads again");
}
