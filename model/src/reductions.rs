//! The interleavings a reduced model (`Bounds::reduced`) leaves out, each because another explored path
//! reaches the same node states, or because Kafka's transport cannot produce it:
//! - **Timeouts fire for lost requests only.** A client `request.timeout.ms` fires only when neither the
//!   request nor its answer is in flight and the broker has no message to itself in flight (a produce
//!   waiting on its KIP-890 verification is not lost); the coordinator's marker retry fires only when no
//!   marker request or answer of that decision is in flight. Kafka closes the connection on a request
//!   timeout, so a timed-out request that is merely slow is the same as a lost one; what this leaves out
//!   is the slow request processed after its retry, which the unreduced small config and the simulator
//!   explore.
//! - **Readers poll a partition right after the broker changed it** (`BrokerNode::fresh`). A poll reads one
//!   partition and changes no node but the readers, so it commutes with every step that leaves that
//!   partition alone: polling later, before the next change, delivers the same records.
//!
//! With `Bounds::por` (per-connection FIFO only), `stubborn_set` adds a partial-order reduction: when a
//! producer has an answer waiting at the head of its connection, only that producer's steps are explored
//! from the state. Why no violation and no fact is lost is argued at `stubborn_set`.

use crate::actors::ModelTimer;
use crate::state::{TxnAction, TxnState};
use crate::verdict::broker_of;
use stateright::actor::{ActorModelAction, Id, Network};
use txnsim_engine::producer::Producer;
use txnsim_engine::protocol::{Envelope, Message, NodeId, Timer};

/// Whether the reduced model explores `action` from `s`.
pub fn explored(s: &TxnState, action: &TxnAction) -> bool {
    match action {
        ActorModelAction::Timeout(id, ModelTimer::Engine(Timer::RequestTimeout { correlation_id })) => {
            let Some((producer, timers)) = client_producer(s, *id) else { return true };
            let me = &producer.id;
            let c = producer.config();
            // With `delivery.timeout.ms <= linger.ms + request.timeout.ms` a batch's delivery timeout, set
            // first, fires at or before its first request's timeout: that request timeout never matters.
            let delivery_first = c.delivery_timeout_ms <= c.linger_ms + c.request_timeout_ms;
            if let Some(op) = producer.batch_of_request(*correlation_id) {
                if delivery_first && timers(&Timer::DeliveryTimeout { op }) {
                    return false;
                }
            }
            // A request the broker holds (waiting on its own verification) is not lost either: wait for
            // the broker's messages to itself to land first.
            !in_flight(s, |m| {
                (m.correlation_id == *correlation_id && (m.from == *me || m.to == *me))
                    || (matches!(m.from, NodeId::Broker(_)) && matches!(m.to, NodeId::Broker(_)))
            })
        }
        ActorModelAction::Timeout(id, ModelTimer::Engine(Timer::DeliveryTimeout { op })) => {
            let Some((producer, _)) = client_producer(s, *id) else { return true };
            let me = &producer.id;
            let requests = producer.requests_of_batch(*op);
            // As for a request timeout: the batch's request is lost, not merely slow or held by the broker.
            !in_flight(s, |m| {
                (requests.contains(&m.correlation_id) && (m.from == *me || m.to == *me))
                    || (matches!(m.from, NodeId::Broker(_)) && matches!(m.to, NodeId::Broker(_)))
            })
        }
        // A processor's member: its request is lost, not merely slow, nor held by the group coordinator
        // until its join phase ends (a JoinGroup's timeout outlasts the rebalance timeout).
        ActorModelAction::Timeout(id, ModelTimer::Member(Timer::RequestTimeout { correlation_id })) => {
            let Some(p) = s.actor_states[usize::from(*id)].processor() else { return true };
            let me = &p.member.id;
            !broker_of(s).broker.groups.holds(&(me.clone(), *correlation_id))
                && !in_flight(s, |m| m.correlation_id == *correlation_id && (m.from == *me || m.to == *me))
        }
        ActorModelAction::Timeout(_, ModelTimer::Engine(Timer::ResendTxnMarkers { decision })) => {
            let coordinator = &broker_of(s).broker.coordinator;
            !in_flight(s, |m| {
                matches!(m.message, Message::WriteTxnMarkersRequest { .. } | Message::WriteTxnMarkersResponse { .. })
                    && matches!(m.from, NodeId::Broker(_))
                    && coordinator.marker_request_decision(m.correlation_id) == Some(*decision)
            })
        }
        ActorModelAction::Timeout(_, ModelTimer::Poll { partition }) => broker_of(s).fresh & (1 << partition) != 0,
        _ => true,
    }
}

/// Whether a client has an engine timer armed.
type HasTimer<'a> = Box<dyn Fn(&Timer) -> bool + 'a>;

/// A producer's or a processor's engine producer, and whether it has a timer armed.
fn client_producer(s: &TxnState, id: Id) -> Option<(&Producer, HasTimer<'_>)> {
    let node = &s.actor_states[usize::from(id)];
    if let Some(p) = node.producer() {
        return Some((&p.producer, Box::new(|t: &Timer| p.timers.contains(t))));
    }
    let p = node.processor()?;
    Some((&p.producer, Box::new(|t: &Timer| p.timers.contains(&ModelTimer::Engine(t.clone())))))
}

fn in_flight(s: &TxnState, matches: impl Fn(&Envelope) -> bool) -> bool {
    // Not `Network::iter_all`: for an ordered network it repeats a flow's head forever (stateright 0.31).
    match &s.network {
        Network::Ordered(flows) => flows.values().flatten().any(|m| matches(m)),
        Network::UnorderedNonDuplicating(set) => set.keys().any(|e| matches(&e.msg)),
        Network::UnorderedDuplicating(set, _) => set.iter().any(|e| matches(&e.msg)),
    }
}

/// Partial-order reduction by stubborn sets (Valmari). Picks the first producer `p` whose connection from
/// the broker has a message waiting and keeps only `p`'s enabled actions (`T`): deliveries and drops of
/// messages to `p`, `p`'s timers (crash included) and its commit-or-abort choice. Every other action
/// only touches other nodes, other connections' heads and tails, and the fault budgets, so:
/// - D1: an action of `T` taken after any path of other actions can be taken first, to the same state:
///   nothing else reads or writes `p`, `p`'s sends queue behind what the broker has not yet read, and new
///   answers to `p` queue behind the waiting one. A `p` timer disabled now must stay so: each armed
///   request timeout is either enabled (in `T`) or pinned shut by its answer waiting to `p`.
/// - D2: the key action, delivering the head of the broker-to-`p` connection, stays enabled on every
///   path of other actions.
/// - The key action never repairs a violation or hides a fact: it leaves the broker and the readers
///   alone and only appends to `p`'s history, over which every history invariant is monotone; at a
///   quiescent state the only waiting messages are for dead instances, which `p` ignores.
///
/// Then a violation or fact reachable in the full graph is reachable in the reduced one: induct on the
/// length of the path to it, and, where that path takes no action of `T`, on the messages waiting for
/// producers (prepending the key action consumes one and the path stays as long).
pub fn stubborn_set(s: &TxnState, actions: &mut Vec<TxnAction>) {
    let Network::Ordered(flows) = &s.network else { return };
    let owns = |i: usize, a: &TxnAction| match a {
        ActorModelAction::Deliver { dst, .. } => usize::from(*dst) == i,
        ActorModelAction::Drop(env) => usize::from(env.dst) == i,
        ActorModelAction::Timeout(id, _) => usize::from(*id) == i,
        ActorModelAction::SelectRandom { actor, .. } => usize::from(*actor) == i,
        _ => false,
    };
    let Some(i) = (1..s.actor_states.len()).find(|&i| {
        let Some(waiting) = flows.get(&(Id::from(0), Id::from(i))) else { return false };
        let Some(p) = s.actor_states[i].producer() else { return false };
        s.timers_set[i].iter().all(|t| {
            let enabled = actions
                .iter()
                .any(|a| matches!(a, ActorModelAction::Timeout(id, x) if usize::from(*id) == i && x == t));
            enabled
                || match t {
                    ModelTimer::Engine(Timer::RequestTimeout { correlation_id }) => {
                        waiting.iter().any(|m| m.correlation_id == *correlation_id && m.to == p.producer.id)
                    }
                    ModelTimer::Engine(Timer::DeliveryTimeout { op }) => {
                        let requests = p.producer.requests_of_batch(*op);
                        waiting.iter().any(|m| requests.contains(&m.correlation_id) && m.to == p.producer.id)
                    }
                    _ => false,
                }
        })
    }) else {
        return;
    };
    actions.retain(|a| owns(i, a));
}
