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

use crate::actors::ModelTimer;
use crate::model::{TxnAction, TxnState};
use crate::verdict::broker_of;
use stateright::actor::{ActorModelAction, Network};
use txnsim_engine::protocol::{Envelope, Message, NodeId, Timer};

/// Whether the reduced model explores `action` from `s`.
pub fn explored(s: &TxnState, action: &TxnAction) -> bool {
    match action {
        ActorModelAction::Timeout(id, ModelTimer::Engine(Timer::RequestTimeout { correlation_id })) => {
            let Some(p) = s.actor_states[usize::from(*id)].producer() else { return true };
            let me = &p.producer.id;
            // A request the broker holds (waiting on its own verification) is not lost either: wait for
            // the broker's messages to itself to land first.
            !in_flight(s, |m| {
                (m.correlation_id == *correlation_id && (m.from == *me || m.to == *me))
                    || (matches!(m.from, NodeId::Broker(_)) && matches!(m.to, NodeId::Broker(_)))
            })
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

fn in_flight(s: &TxnState, matches: impl Fn(&Envelope) -> bool) -> bool {
    // Not `Network::iter_all`: for an ordered network it repeats a flow's head forever (stateright 0.31).
    match &s.network {
        Network::Ordered(flows) => flows.values().flatten().any(|m| matches(m)),
        Network::UnorderedNonDuplicating(set) => set.keys().any(|e| matches(&e.msg)),
        Network::UnorderedDuplicating(set, _) => set.iter().any(|e| matches(&e.msg)),
    }
}
