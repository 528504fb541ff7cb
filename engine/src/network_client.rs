//! What becomes of a message its receiver cannot take: one policy for every driver (the in-process
//! `Cluster`, the model, the sim, the wire), as Kafka's `NetworkClient` has it. A request whose connection
//! fails is completed as disconnected (`ClientResponse.wasDisconnected`); anything else is lost with the
//! connection. Drivers decide when a receiver is down or restarted; this decides what the sender hears.

use crate::protocol::{Envelope, NodeId, CONTROLLER_ID};
use crate::types::TimeMs;

/// `reconnect.backoff.ms` (default 50): a connection to a dead broker is refused, and the sender's
/// `NetworkClient` fails the request it waited to send once its backoff passes (`ClusterConnectionStates`).
pub const RECONNECT_BACKOFF_MS: TimeMs = 50;

/// Why a message's receiver cannot take it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receiver {
    /// Down: the sender's connection to it is refused.
    Down,
    /// A later instance than the one the sender's connection reached: that connection was reset when the
    /// old instance died, and the sender learns it at once.
    Restarted,
}

/// What the network does with a message its receiver cannot take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Undelivered {
    /// The sender hears `back` after `after_ms`: a broker's request comes back as its disconnected answer
    /// (`Message::disconnected_answer`), a client's as the request itself, which the client takes as a
    /// disconnect of that request's connection (`Producer::on_message`, `Consumer::on_message`).
    Refused { after_ms: TimeMs, back: Envelope },
    /// Nobody hears: an answer (its receiver's connection died with it) or the controller's word (a broker
    /// loads the controller's image when it starts).
    Lost,
}

/// What `env` becomes when `receiver` cannot take it.
pub fn undelivered(env: Envelope, receiver: Receiver) -> Undelivered {
    let after_ms = match receiver {
        Receiver::Down => RECONNECT_BACKOFF_MS,
        Receiver::Restarted => 0,
    };
    if !env.message.is_request() {
        return Undelivered::Lost;
    }
    let message = match &env.from {
        NodeId::Broker(CONTROLLER_ID) => return Undelivered::Lost,
        NodeId::Broker(_) => match env.message.disconnected_answer() {
            Some(answer) => answer,
            None => return Undelivered::Lost,
        },
        NodeId::Client(_) => env.message,
    };
    let back = Envelope { from: env.to, to: env.from, correlation_id: env.correlation_id, message };
    Undelivered::Refused { after_ms, back }
}

/// Whether `env` is a client's own request come back to it: its connection failed (`undelivered`).
pub fn is_refused_request(env: &Envelope) -> bool {
    matches!(env.to, NodeId::Client(_)) && env.message.is_request()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Message;
    use crate::types::TopicPartition;

    fn env(from: NodeId, to: NodeId, message: Message) -> Envelope {
        Envelope { from, to, correlation_id: 7, message }
    }

    #[test]
    fn a_brokers_request_to_a_dead_broker_comes_back_disconnected_after_the_backoff() {
        let tp = TopicPartition::new("t", 0);
        let request = Message::WriteTxnMarkersRequest { markers: vec![] };
        let got = undelivered(env(NodeId::Broker(0), NodeId::Broker(1), request.clone()), Receiver::Down);
        let Undelivered::Refused { after_ms, back } = got else { panic!("a broker's request is refused: {got:?}") };
        assert_eq!(after_ms, RECONNECT_BACKOFF_MS, "refused after the reconnect backoff");
        assert_eq!((back.from, back.to, back.correlation_id), (NodeId::Broker(1), NodeId::Broker(0), 7));
        assert_eq!(Some(back.message), request.disconnected_answer(), "as its disconnected answer");
        let fetch = Message::FetchRequest { partition: tp, fetch_offset: 0, isolation: None, client_metadata: false };
        let got = undelivered(env(NodeId::Broker(0), NodeId::Broker(1), fetch), Receiver::Restarted);
        assert_eq!(got, Undelivered::Lost, "a request no broker answers disconnected (a client's Fetch) is lost");
    }

    #[test]
    fn a_clients_request_comes_back_as_itself_at_once_from_a_restarted_broker() {
        let tp = TopicPartition::new("t", 0);
        let request = Message::FetchRequest { partition: tp, fetch_offset: 3, isolation: None, client_metadata: false };
        let client = NodeId::Client("p".into());
        let got = undelivered(env(client.clone(), NodeId::Broker(2), request.clone()), Receiver::Restarted);
        let Undelivered::Refused { after_ms, back } = got else { panic!("a client's request is refused: {got:?}") };
        assert_eq!(after_ms, 0, "the reset connection is heard at once");
        assert_eq!((back.to.clone(), back.message.clone()), (client, request));
        assert!(is_refused_request(&back), "the client reads it as refused");
    }

    #[test]
    fn answers_and_the_controllers_word_are_lost() {
        let answer = Message::EndTxnResponse { result: Ok(None) };
        let got = undelivered(env(NodeId::Broker(0), NodeId::Client("p".into()), answer), Receiver::Down);
        assert_eq!(got, Undelivered::Lost, "an answer to a dead receiver is lost");
        let from_controller = Message::WriteTxnMarkersRequest { markers: vec![] };
        let got = undelivered(env(NodeId::Broker(CONTROLLER_ID), NodeId::Broker(1), from_controller), Receiver::Down);
        assert_eq!(got, Undelivered::Lost, "the controller's word to a dead broker is lost");
    }
}
