//! A controller-managed broker's topic creation (KIP-590): Kafka's `ForwardingManager` sends CreateTopics
//! to the controller and the controller's answer back to the client that asked, and
//! `AutoTopicCreationManager` creates through it the topics a lookup finds missing (Metadata's
//! auto-creation, `__consumer_offsets` on the first FindCoordinator for a group).

use crate::error::KafkaError;
use crate::protocol::metadata::{MetadataMessage, NewTopic};
use crate::protocol::{Effects, Message, NodeId};
use crate::rename::{Names, Rename};
use crate::topic::{GROUP_METADATA_TOPIC, OFFSETS_TOPIC_NUM_PARTITIONS};
use std::collections::BTreeMap;

/// CreateTopics requests forwarded to the controller, by correlation id: who asked, under which id.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ForwardingManager {
    forwarded: BTreeMap<u64, (NodeId, u64)>,
}

impl Rename for ForwardingManager {
    fn rename(&mut self, names: Names<'_>) {
        for (client, _) in self.forwarded.values_mut() {
            client.rename(names);
        }
    }
}

impl ForwardingManager {
    /// Whether a forwarded request still waits for the controller.
    pub fn is_empty(&self) -> bool {
        self.forwarded.is_empty()
    }

    /// Sends CreateTopics to the controller under `corr`, `num.partitions` filled in where the request left
    /// it to the broker; the answer goes back to `asker`, or nowhere for an auto-creation.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_create_topics(
        &mut self,
        (me, controller): (&NodeId, &NodeId),
        corr: u64,
        asker: Option<(NodeId, u64)>,
        mut topics: Vec<NewTopic>,
        validate_only: bool,
        num_partitions: u32,
        effects: &mut Effects,
    ) {
        for t in &mut topics {
            t.num_partitions = t.num_partitions.or(Some(num_partitions as i32));
        }
        if let Some(asker) = asker {
            self.forwarded.insert(corr, asker);
        }
        let request = MetadataMessage::CreateTopicsRequest { topics, validate_only };
        effects.send(me, controller, corr, Message::Metadata(request));
    }

    /// The controller's answer to a forwarded CreateTopics; an auto-creation's has nobody waiting.
    pub fn handle_response(
        &mut self,
        me: &NodeId,
        corr: u64,
        results: Vec<(String, Result<u32, KafkaError>)>,
        effects: &mut Effects,
    ) {
        let answer = Message::Metadata(MetadataMessage::CreateTopicsResponse { results });
        if let Some((client, client_corr)) = self.forwarded.remove(&corr) {
            effects.send(me, &client, client_corr, answer);
        }
    }
}

/// `__consumer_offsets` as a broker asks the controller for it, with `offsets.topic.num.partitions`.
pub fn offsets_topic() -> NewTopic {
    NewTopic {
        name: GROUP_METADATA_TOPIC.into(),
        num_partitions: Some(OFFSETS_TOPIC_NUM_PARTITIONS as i32),
        replication_factor: None,
    }
}

/// `AutoTopicCreationManager`: the topics a Metadata answer has as LEADER_NOT_AVAILABLE are created by the
/// controller.
pub fn auto_created_topics(reply: &Option<MetadataMessage>) -> Vec<NewTopic> {
    let Some(MetadataMessage::MetadataResponse { topics, .. }) = reply else { return Vec::new() };
    topics
        .iter()
        .filter(|(_, r)| *r == Err(KafkaError::LeaderNotAvailable))
        .map(|(name, _)| NewTopic { name: name.clone(), num_partitions: None, replication_factor: None })
        .collect()
}
