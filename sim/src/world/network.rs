//! What a step sends and how it travels: `Outgoing` sends wait for the world's lock to be released, then
//! go over madsim's network (`send_all`). The per-message faults (`LoseAnswer`, the delays) are drawn
//! here as a step's sends leave it; what a request to a node that is down or restarted becomes is the
//! engine's transport policy (`network_client::undelivered`), applied by `refuse`, `reset_connection`
//! and `Outgoing::refused`.

use super::{broker_id, is_broker, is_client, lock, node_key, Shared, World};
use crate::profile::FaultKind;
use madsim::runtime::Handle;
use madsim::time::Duration;
use txnsim_engine::network_client::{undelivered, Receiver, Undelivered};
use txnsim_engine::protocol::CONTROLLER_ID;
use txnsim_engine::protocol::{Effects, Envelope, Message, NodeId};

pub const TAG: u64 = 7;

/// What travels over madsim's network: the engine's envelope, plus the incarnation of the receiver it was
/// sent to. A restarted node never sees messages addressed to its previous life (a TCP connection reset).
pub struct Wire {
    pub env: Envelope,
    pub dst_incarnation: u32,
}

/// A send waiting for the lock to be released; `delay` holds it in the network (a fault). The receiver's
/// incarnation is fixed when the message is sent: a held message never reaches the receiver's next life.
pub struct Outgoing {
    pub from: String,
    pub env: Envelope,
    pub dst_incarnation: u32,
    pub delay: Option<Duration>,
    /// A request to a broker that is down: its connection is refused, and the sender hears so as the
    /// engine's `network_client::undelivered` says, after the reconnect backoff.
    pub refused: bool,
}

/// Controller traffic's latency: it travels in order and is never lost (`send_all`).
const CONTROLLER_LATENCY: Duration = Duration::from_millis(1);

/// To or from the controller. KRaft brokers replicate the metadata log, and `AlterPartitionManager`
/// retries an unanswered request; the engine's controller sends each record once and its brokers
/// propose an ISR change once, so a lost or reordered message would stall a partition forever: this
/// traffic goes in order and is never lost or held by a fault.
fn is_controller_traffic(env: &Envelope) -> bool {
    env.from == NodeId::Broker(CONTROLLER_ID) || env.to == NodeId::Broker(CONTROLLER_ID)
}

/// Sends what a step produced, through the sender's endpoint on madsim's network. A spawned task awaits
/// it boxed: madsim copies a task's whole future as it spawns it, and this one is most of a timer's size.
pub async fn send_all(shared: &Shared, out: Vec<Outgoing>) {
    for o in out {
        if o.refused {
            refuse(shared, o);
            continue;
        }
        if is_controller_traffic(&o.env) {
            send_reliably(shared, o);
            continue;
        }
        if let Some(delay) = o.delay {
            let wire_node = lock(shared).wire_node;
            let Some(handle) = wire_node.and_then(|id| Handle::current().get_node(id)) else { continue };
            let shared = shared.clone();
            handle.spawn(async move {
                madsim::time::sleep(delay).await;
                Box::pin(send_one(&shared, &o.from, o.env, o.dst_incarnation)).await;
            });
            continue;
        }
        send_one(shared, &o.from, o.env, o.dst_incarnation).await;
    }
}

/// A refused connection: the reconnect backoff later the sender's request fails back to it, unless the
/// sender died meanwhile.
fn refuse(shared: &Shared, o: Outgoing) {
    let Undelivered::Refused { after_ms, back } = undelivered(o.env, Receiver::Down) else { return };
    later(shared, Duration::from_millis(after_ms), move |w, shared| {
        let sender = &w.nodes[o.from.as_str()];
        if sender.endpoint.is_none() {
            return Vec::new();
        }
        let dst_incarnation = sender.incarnation;
        w.on_wire(shared, &o.from, Wire { env: back, dst_incarnation })
    });
}

/// Runs `step` on the world `delay` from now on the network's host, and sends what it returns.
fn later(shared: &Shared, delay: Duration, step: impl FnOnce(&mut World, &Shared) -> Vec<Outgoing> + Send + 'static) {
    let handle = {
        let w = lock(shared);
        w.wire_node.and_then(|id| w.runtime().get_node(id))
    };
    let Some(handle) = handle else { return };
    let shared = shared.clone();
    handle.spawn(async move {
        madsim::time::sleep(delay).await;
        let out = step(&mut lock(&shared), &shared);
        Box::pin(send_all(&shared, out)).await;
    });
}

/// Controller traffic: delivered after `CONTROLLER_LATENCY` from the network's host, in the order sent,
/// unless its receiver died meanwhile (`is_controller_traffic`).
fn send_reliably(shared: &Shared, o: Outgoing) {
    later(shared, CONTROLLER_LATENCY, move |w, shared| {
        let to = node_key(&o.env.to).into_owned();
        if is_broker(&to) && w.brokers_down.contains(&broker_id(&to)) {
            return Vec::new();
        }
        w.stats.messages += 1;
        w.on_wire(shared, &to, Wire { env: o.env, dst_incarnation: o.dst_incarnation })
    });
}

async fn send_one(shared: &Shared, from: &str, env: Envelope, dst_incarnation: u32) {
    let (endpoint, dst, wire) = {
        let mut w = lock(shared);
        let Some(endpoint) = w.nodes[from].endpoint.clone() else { return };
        let Some(dst) = w.nodes.get(node_key(&env.to).as_ref()) else { return };
        let addr = dst.addr;
        w.stats.messages += 1;
        (endpoint, addr, Wire { env, dst_incarnation })
    };
    let _ = endpoint.send_to_raw(dst, TAG, Box::new(wire)).await;
}

/// The answers `LoseAnswer` and `DelayAnswer` act on: those of the transactional write path.
fn is_txn_answer(m: &Message) -> bool {
    matches!(
        m,
        Message::InitProducerIdResponse { .. }
            | Message::AddPartitionsToTxnResponse { .. }
            | Message::ProduceResponse { .. }
            | Message::EndTxnResponse { .. }
            | Message::WriteTxnMarkersResponse { .. }
    )
}

impl World {
    /// Timers start as tasks on the node that set them (so they die and pause with it); sends wait until
    /// the lock is released.
    pub fn dispatch(&mut self, shared: &Shared, from: &str, effects: Effects) -> Vec<Outgoing> {
        // The coordinator's `__transaction_state` appends go to its own broker at once (and, replicated,
        // so does their outcome): the sim's faults (loss, clogs) are for links between nodes, and a local
        // call is never lost; its window is the `network` scenarios' to explore.
        let appends = |e: &Effects| {
            e.sends.iter().any(|s| {
                matches!(s.message, Message::TxnLogAppendRequest { .. } | Message::TxnLogAppendResponse { .. })
            })
        };
        let effects = if is_broker(from) && appends(&effects) {
            let now = self.now_ms();
            self.step_broker(broker_id(from), |b| b.write_txn_log_now(now, effects))
        } else {
            effects
        };
        for (due_ms, timer) in effects.timers {
            self.spawn_timer(shared, from, due_ms, timer);
        }
        let client = is_client(from);
        let incarnation = if client { self.nodes[from].incarnation } else { 0 };
        effects
            .sends
            .into_iter()
            .filter_map(|mut env| {
                if is_controller_traffic(&env) {
                    let dst_incarnation = self.nodes[node_key(&env.to).as_ref()].incarnation;
                    return Some(Outgoing {
                        from: from.to_string(),
                        env,
                        dst_incarnation,
                        delay: None,
                        refused: false,
                    });
                }
                if !client && self.lose_answer(&env) {
                    return None;
                }
                if client {
                    self.next_wire_id += 1;
                    self.wire_requests.insert(self.next_wire_id, (from.to_string(), incarnation, env.correlation_id));
                    env.correlation_id = self.next_wire_id;
                }
                let delay = self.draw_delay(&env);
                if let Some(d) = delay {
                    self.delays_until_ms = self.delays_until_ms.max(self.now_ms() + d.as_millis() as u64);
                    let ms = d.as_millis();
                    self.trace("net", "fault", || format!("FAULT hold {} to {} for {ms} ms", env.message, env.to));
                }
                let dst_incarnation = self.nodes.get(node_key(&env.to).as_ref()).map(|n| n.incarnation).unwrap_or(0);
                let refused = matches!(env.to, NodeId::Broker(id) if self.brokers_down.contains(&id) || dst_incarnation == 0)
                    && matches!(undelivered(env.clone(), Receiver::Down), Undelivered::Refused { .. });
                Some(Outgoing { from: from.to_string(), env, dst_incarnation, delay, refused })
            })
            .collect()
    }

    /// `LoseAnswer`: the broker processed the request, and its answer never arrives.
    fn lose_answer(&mut self, env: &Envelope) -> bool {
        if self.healing
            || !is_txn_answer(&env.message)
            || !self.swarm.has(FaultKind::LoseAnswer)
            || !self.rng.chance(self.swarm.lose_answer_prob)
        {
            return false;
        }
        self.trace("net", "fault", || format!("FAULT lose {} to {}", env.message, env.to));
        self.count_fault(format!("{} {}", FaultKind::LoseAnswer.name(), env.message.api_name()));
        true
    }

    fn draw_delay(&mut self, env: &Envelope) -> Option<Duration> {
        if self.healing {
            return None;
        }
        if is_txn_answer(&env.message)
            && self.swarm.has(FaultKind::DelayAnswer)
            && self.rng.chance(self.swarm.delay_answer_prob)
        {
            // One to two request timeouts: a client's retry of the same request goes out first.
            let timeout = self.params.request_timeout_ms;
            self.count_fault(format!("{} {}", FaultKind::DelayAnswer.name(), env.message.api_name()));
            return Some(Duration::from_millis(self.rng.range(timeout, 2 * timeout)));
        }
        let txn_produce = matches!(&env.message, Message::ProduceRequest { batch, .. } if batch.is_transactional);
        if txn_produce && self.swarm.has(FaultKind::DelayProduce) && self.rng.chance(self.swarm.delay_produce_prob) {
            // Long enough to land after the transaction ended (and often after the next one began).
            let (lo, hi) =
                self.params.delay_produce_ms.unwrap_or((50, (self.params.txn_timeout_ms * 3 / 2).max(1_500)));
            self.count_fault(FaultKind::DelayProduce.name().to_string());
            return Some(Duration::from_millis(self.rng.range(lo, hi)));
        }
        if self.swarm.has(FaultKind::DelayMessage) && self.rng.chance(self.swarm.delay_message_prob) {
            self.count_fault(FaultKind::DelayMessage.name().to_string());
            return Some(Duration::from_millis(self.rng.range(20, 5_000)));
        }
        None
    }

    /// A message that reached a later instance of `name` than the one it was sent to: the connection it
    /// was sent on died with that instance, so a request's sender hears it failed, at once.
    pub(super) fn reset_connection(&self, name: &str, env: Envelope) -> Option<Outgoing> {
        let Undelivered::Refused { back, .. } = undelivered(env, Receiver::Restarted) else { return None };
        let dst_incarnation = self.nodes[node_key(&back.to).as_ref()].incarnation;
        Some(Outgoing { from: name.to_string(), env: back, dst_incarnation, delay: None, refused: false })
    }
}
