//! The model's state and action types (stateright's actor state and action over the engine's nodes): a
//! leaf beside the actors, so that the checks, the reductions and the descriptions need not import the
//! model that uses them.

use crate::actors::{ModelTimer, Msg, Node};
use stateright::actor::{ActorModelAction, ActorModelState};
use txnsim_engine::TransactionResult;

/// The model's auxiliary history: messages sent and not (yet) delivered. Less the messages still in the
/// network, that is how many were lost, which `Bounds::losses` bounds.
pub type InFlight = u16;

pub type TxnState = ActorModelState<Node, InFlight>;
pub type TxnAction = ActorModelAction<Msg, ModelTimer, TransactionResult>;

/// Messages the lossy network has dropped on the way to this state.
pub fn losses(s: &TxnState) -> usize {
    (s.history as usize).saturating_sub(s.network.len())
}
