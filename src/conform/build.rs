//! Plays a catalogue through the engine in-process: one cluster holds every layout's topics, the layouts'
//! producers are the engine's own (`engine/src/producer`) and run their calls through the one interpreter
//! of client ops (`txnsim_properties::client::exec`) until the cluster is quiet, as the scenario runner
//! does; then the reference reads the built log with the engine's consumer (`CompletedFetch`, ported
//! from Kafka's Java client).

use super::layouts::{cluster_topic, transactional_id, Layout, Step};
use std::collections::BTreeMap;
use txnsim_engine::TransactionVersion;
use txnsim_engine::{Cluster, EngineConfig, IsolationLevel, Offset, Producer, ProducerKind, TopicPartition};
use txnsim_properties::client::exec;
use txnsim_properties::history::ProducerCall;

/// Kafka's `transaction.max.timeout.ms` default (15 min), every producer's `transaction.timeout.ms` here:
/// an open transaction must outlast every read of a run (the coordinator aborts it only after this).
pub const TRANSACTION_TIMEOUT_MS: u64 = 900_000;

/// One read a client makes, at one isolation level, and what Kafka's rules deliver.
#[derive(Clone, Debug)]
pub struct Reference {
    pub layout: String,
    /// The topic as it is on the cluster (`conform-LAYOUT-T`).
    pub topic: String,
    pub partition: u32,
    pub from: Offset,
    pub isolation: IsolationLevel,
    /// (offset, value) in delivery order.
    pub records: Vec<(Offset, String)>,
    /// The consumer's position after its last poll: the adapter's `stop_offset`.
    pub position: Offset,
}

/// The built cluster, and the reference of every read of every layout at both isolation levels.
pub fn build(layouts: &[Layout], file: &str) -> Result<(Cluster, Vec<Reference>), String> {
    let mut topics = BTreeMap::new();
    for l in layouts {
        for (_, step) in &l.steps {
            if let Step::Topic { topic, partitions, .. } = step {
                topics.insert(cluster_topic(&l.name, topic), *partitions);
            }
        }
    }
    let config = EngineConfig {
        // A Kafka 4.3.1 cluster finalizes transaction.version 2; a producer may still speak TV1.
        transaction_version: TransactionVersion::V2,
        transaction_timeout_ms: TRANSACTION_TIMEOUT_MS,
        ..EngineConfig::default()
    };
    let mut cluster = Cluster::new(&topics, config);
    for l in layouts {
        for (line, step) in &l.steps {
            play(&mut cluster, &l.name, step).map_err(|e| format!("{file}:{line}: layout {}: {e}", l.name))?;
        }
    }
    let mut references = Vec::new();
    for l in layouts {
        for r in &l.reads {
            let tp = TopicPartition::new(&cluster_topic(&l.name, &r.topic), r.partition);
            for isolation in [IsolationLevel::ReadCommitted, IsolationLevel::ReadUncommitted] {
                let (records, position) = cluster
                    .read(isolation, &tp, r.from)
                    .map_err(|e| format!("{file}:{}: layout {}: read {tp} from {}: {e:?}", l.line, l.name, r.from))?;
                references.push(Reference {
                    layout: l.name.clone(),
                    topic: tp.topic.clone(),
                    partition: r.partition,
                    from: r.from,
                    isolation,
                    records: records.into_iter().map(|c| (c.offset, c.value)).collect(),
                    position,
                });
            }
        }
    }
    Ok((cluster, references))
}

/// One step of a layout on the cluster, or why the engine refused it.
fn play(cluster: &mut Cluster, layout: &str, step: &Step) -> Result<(), String> {
    let name = |p: &str| transactional_id(layout, p);
    let tp = |t: &str, p: u32| TopicPartition::new(&cluster_topic(layout, t), p);
    let call = |cluster: &mut Cluster, p: &str, call: ProducerCall| match exec(cluster, &name(p), &call) {
        // `begin` answers locally; a request answered is done.
        Ok(_) if matches!(call, ProducerCall::Begin) => Ok(()),
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(format!("{call:?} by {p} never completed")),
        Err(e) => Err(format!("{call:?} by {p}: the engine answered {e:?}")),
    };
    match step {
        // Created with the cluster; the engine keeps no topic configs (`roll` makes its segments).
        Step::Topic { .. } => Ok(()),
        Step::Producer { producer, spec } => {
            let kind = match spec.transactional {
                true => ProducerKind::Transactional { transactional_id: name(producer) },
                false => ProducerKind::Idempotent,
            };
            // The producer's own compression.type: the codec of every data batch it sends.
            let mut config = cluster.config.clone();
            config.compression_type = spec.compression;
            let mut p = Producer::new(&name(producer), kind, cluster.broker_id(), config);
            cluster.bootstrap(&mut p);
            p.client_transaction_version =
                TransactionVersion::from_number(spec.transaction_version).expect("parsed as 1 or 2");
            cluster.producers.insert(name(producer), p);
            // An idempotent producer gets its id before its first send (`Sender.maybeWaitForProducerId`).
            match spec.transactional {
                true => Ok(()),
                false => call(cluster, producer, ProducerCall::Init),
            }
        }
        Step::Init(p) => call(cluster, p, ProducerCall::Init),
        Step::Begin(p) => call(cluster, p, ProducerCall::Begin),
        Step::Commit(p) => call(cluster, p, ProducerCall::Commit),
        Step::Abort(p) => call(cluster, p, ProducerCall::Abort),
        // The direct layer completes every send before the next step: nothing is left to flush.
        Step::Flush(_) => Ok(()),
        Step::Send { producer, topic, partition, value } => {
            let send = ProducerCall::Send { partition: tp(topic, *partition), values: vec![value.clone()] };
            call(cluster, producer, send)
        }
        Step::Roll { topic, partition } => {
            log_of(cluster, &tp(topic, *partition)).roll_segment();
            Ok(())
        }
        Step::DeleteRecords { topic, partition, offset } => {
            let mutations = cluster.config.mutations.clone();
            let log = log_of(cluster, &tp(topic, *partition));
            log.delete_records(*offset, &mutations).map(|_| ()).map_err(|e| format!("delete-records: {e:?}"))
        }
    }
}

/// The partition's log on broker 0, its leader in a one-broker cluster.
fn log_of<'a>(cluster: &'a mut Cluster, tp: &TopicPartition) -> &'a mut txnsim_engine::PartitionLog {
    cluster.broker.partition_mut(tp).expect("the parser checked the topic and partition")
}
