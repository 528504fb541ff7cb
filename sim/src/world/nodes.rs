//! The hosts' lifecycle: node names and addresses, starting and restarting a node as a new incarnation,
//! a broker's crash and restart (`Cluster::crash_broker`, `Cluster::start_broker`), and each node's step
//! on a message or a timer.

use super::{lock, send_all, Held, Outgoing, Shared, Wire, World, BROKER, CONTROLLER};
use crate::describe::message_fields;
use crate::trace::{timer_name, IDLE_TIMER};
use madsim::net::Endpoint;
use madsim::runtime::Handle;
use madsim::time::Duration;
use serde_json::{json, Value};
use std::net::SocketAddr;
use txnsim_engine::protocol::{NodeId, Timer};
use txnsim_engine::protocol::{CONTROLLER_ID, NO_LEADER};
use txnsim_engine::{EngineConfig, Producer, ProducerKind, TimeMs};

pub const PORT: u16 = 9092;

/// A broker's timed work the sim wakes it for: the replica manager's (`tick_replication`) and the group
/// coordinator's join phases and member sessions (`tick_groups`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Deadline {
    Replication,
    Groups,
}

pub struct NodeSlot {
    pub id: Option<madsim::task::NodeId>,
    pub addr: SocketAddr,
    pub incarnation: u32,
    pub endpoint: Option<Endpoint>,
}

pub(super) fn ip_of(index: usize) -> SocketAddr {
    let ip = std::net::Ipv4Addr::new(10, 0, (index / 200) as u8, (index % 200 + 1) as u8);
    SocketAddr::new(ip.into(), PORT)
}

pub fn broker_name(id: u32) -> String {
    NodeId::Broker(id).to_string()
}

const BROKER_NAMES: [&str; 5] = ["broker-0", "broker-1", "broker-2", "broker-3", "broker-4"];

/// Broker nodes are named `broker-<id>` (NodeId's display), clients by their own name.
pub fn is_broker(name: &str) -> bool {
    name.starts_with("broker-")
}

/// The id of broker node `name`.
pub fn broker_id(name: &str) -> u32 {
    name["broker-".len()..].parse().expect("a broker node's name")
}

/// Producers and consumers: their requests travel under run-wide correlation ids.
pub(super) fn is_client(name: &str) -> bool {
    !is_broker(name) && name != CONTROLLER
}

/// The node name an engine id travels to, without allocating for clients.
pub fn node_key(id: &NodeId) -> std::borrow::Cow<'_, str> {
    match id {
        NodeId::Client(name) => std::borrow::Cow::Borrowed(name.as_str()),
        NodeId::Broker(CONTROLLER_ID) => std::borrow::Cow::Borrowed(CONTROLLER),
        NodeId::Broker(b) => broker_key(*b),
    }
}

/// `broker_name`, without allocating for the first brokers (a lookup at every replication step).
pub(super) fn broker_key(id: u32) -> std::borrow::Cow<'static, str> {
    match BROKER_NAMES.get(id as usize) {
        Some(name) => std::borrow::Cow::Borrowed(name),
        None => std::borrow::Cow::Owned(broker_name(id)),
    }
}

impl World {
    /// Ends `name`'s pause, if it is paused; returns whether it was.
    pub fn resume(&mut self, name: &str) -> bool {
        let now = self.now_ms();
        if let Some(p) = self.pauses.iter_mut().rev().find(|p| p.process == name && p.to_ms == TimeMs::MAX) {
            p.to_ms = now;
        }
        self.paused.remove(name)
    }

    /// When broker `id` must next run `kind`'s tick.
    fn deadline_ms(&self, id: u32, kind: Deadline) -> Option<u64> {
        let b = &self.brokers[&id];
        match kind {
            Deadline::Replication => b.next_replication_deadline_ms(),
            Deadline::Groups => b.groups.next_deadline_ms(),
        }
    }

    /// A task on the broker's node that runs `kind`'s tick when its next deadline falls due (one task per
    /// distinct deadline; they die with the node).
    pub(super) fn schedule_deadline(&mut self, shared: &Shared, id: u32, kind: Deadline) {
        let Some(due) = self.deadline_ms(id, kind) else { return };
        if !self.wakeups.entry((id, kind)).or_default().insert(due) {
            return;
        }
        let slot = &self.nodes[broker_key(id).as_ref()];
        let Some(handle) = slot.id.and_then(|n| self.runtime().get_node(n)) else { return };
        let incarnation = slot.incarnation;
        let at = self.start + Duration::from_millis(due);
        let shared = shared.clone();
        handle.spawn(async move {
            madsim::time::sleep_until(at).await;
            let out = {
                let mut w = lock(&shared);
                w.on_deadline_due(&shared, (id, kind), incarnation, due)
            };
            Box::pin(send_all(&shared, out)).await;
        });
    }

    fn on_deadline_due(
        &mut self,
        shared: &Shared,
        (id, kind): (u32, Deadline),
        incarnation: u32,
        due: u64,
    ) -> Vec<Outgoing> {
        if let Some(set) = self.wakeups.get_mut(&(id, kind)) {
            set.remove(&due);
        }
        let name = broker_key(id);
        if self.nodes[name.as_ref()].incarnation != incarnation || self.brokers_down.contains(&id) {
            return Vec::new();
        }
        let now = self.now_ms();
        if self.deadline_ms(id, kind).is_none_or(|d| d > now) {
            self.schedule_deadline(shared, id, kind);
            return Vec::new();
        }
        let ends = self.log_ends(id);
        let before = self.trace.is_some().then(|| self.fingerprint().collect::<Vec<u64>>());
        let effects = self.step_broker(id, |b| match kind {
            Deadline::Replication => b.tick_replication(now),
            Deadline::Groups => b.tick_groups(now),
        });
        let idle = effects.sends.is_empty() && before.is_some_and(|fp| self.fingerprint().eq(fp));
        let trace_kind = if idle { IDLE_TIMER } else { "timer" };
        let what = match kind {
            Deadline::Replication => "replication deadline",
            Deadline::Groups => "group coordinator deadline",
        };
        self.trace_broker(id, trace_kind, || (what.to_string(), Value::Null));
        self.after_broker_step(shared, id, &ends);
        self.dispatch(shared, &name, effects)
    }

    /// A broker dies (its log survives): the controller fences it at once (its session timeout, taken as
    /// instant, as `Cluster::crash_broker` does) and every producer's connection to it breaks.
    pub fn crash_broker(&mut self, shared: &Shared, id: u32) -> Vec<Outgoing> {
        let name = broker_name(id);
        Handle::current().kill(self.nodes[&name].id.expect("built"));
        self.brokers_down.insert(id);
        self.wakeups.retain(|(broker, _), _| *broker != id);
        self.nodes.get_mut(&name).expect("known").endpoint = None;
        let mut out = match &mut self.controller_outage {
            Some(held) => {
                held.push(Held::Fenced(id));
                Vec::new()
            }
            None => self.controller_do(shared, |c| c.broker_fenced(id)),
        };
        let now = self.now_ms();
        let names: Vec<String> = self.producers.keys().cloned().collect();
        for p in names {
            let Some(producer) = self.producers.get_mut(&p).and_then(|s| s.producer.as_mut()) else { continue };
            let effects = producer.on_disconnect(now, &NodeId::Broker(id));
            self.collect_completions(&p);
            out.extend(self.dispatch(shared, &p, effects));
        }
        out
    }

    /// Restarts dead broker `id`, or holds its restart for the next controller while none is active.
    pub fn restart_broker(&mut self, id: u32) {
        match &mut self.controller_outage {
            Some(held) => {
                if !held.iter().any(|h| matches!(h, Held::Restart(b) if *b == id)) {
                    held.push(Held::Restart(id));
                }
            }
            None => Handle::current().restart(self.nodes[&broker_name(id)].id.expect("built")),
        }
    }

    pub(super) fn spawn_timer(&mut self, shared: &Shared, node: &str, due_ms: u64, timer: Timer) {
        let slot = &self.nodes[node];
        let Some(id) = slot.id else { return };
        let Some(handle) = self.runtime().get_node(id) else { return };
        let incarnation = slot.incarnation;
        let at = self.start + Duration::from_millis(due_ms);
        let shared = shared.clone();
        let node = node.to_string();
        handle.spawn(async move {
            madsim::time::sleep_until(at).await;
            let out = {
                let mut w = lock(&shared);
                w.on_timer(&shared, &node, incarnation, timer)
            };
            Box::pin(send_all(&shared, out)).await;
        });
    }

    /// A node (re)started: a new incarnation with a fresh endpoint.
    pub fn on_node_start(&mut self, shared: &Shared, name: &str, endpoint: Endpoint) -> Vec<Outgoing> {
        let now = self.now_ms();
        let slot = self.nodes.get_mut(name).expect("known node");
        slot.incarnation += 1;
        slot.endpoint = Some(endpoint);
        let incarnation = slot.incarnation;
        if is_broker(name) {
            let id = broker_id(name);
            let ends = self.log_ends(id);
            let mut out = Vec::new();
            let effects = if self.brokers_started.contains(&id) {
                assert!(self.controller_outage.is_none(), "broker {id} restarted with no controller to unfence it");
                self.brokers_down.remove(&id);
                // `Cluster::start_broker`: the controller unfences it, and it loads its logs and the
                // controller's current image.
                out = self.controller_do(shared, |c| c.broker_restarted(id));
                let image = self.controller.as_ref().map(|c| c.partitions.clone());
                let e = self.step_broker(id, |broker| match image {
                    Some(image) => broker.restart_with_image(now, &image),
                    None => broker.restart(now),
                });
                let b = &self.brokers[&id];
                let text = if b.txn_manager.loaded_at.is_some() || id == BROKER && self.controller.is_none() {
                    format!(
                        "restarted (instance {incarnation}); coordinator reloaded at epoch {}",
                        b.coordinator.coordinator_epoch
                    )
                } else {
                    format!("restarted (instance {incarnation})")
                };
                self.trace_broker(id, "restart", || (text, Value::Null));
                e
            } else {
                self.brokers_started.insert(id);
                self.step_broker(id, |b| b.start_loaded(now))
            };
            self.after_broker_step(shared, id, &ends);
            out.extend(self.dispatch(shared, name, effects));
            return out;
        }
        if name == CONTROLLER {
            return Vec::new();
        }
        if incarnation > 1 && self.processor_of_member(name).is_some() {
            let processor = self.processor_of_member(name).expect("checked");
            let consumer = self.new_member(&processor);
            self.consumers.get_mut(name).expect("a member").consumer = consumer;
            self.trace(name, "restart", || format!("started instance {incarnation}, a new member"));
            return Vec::new();
        }
        if let Some(slot) = self.producers.get_mut(name) {
            let config = if slot.spec.kind == ProducerKind::Plain {
                // `retries=0`, `max.in.flight.requests.per.connection=1`: a send that times out or loses its
                // connection fails, never resent (a resend could write it twice: `duplicate` holds it to once).
                EngineConfig { retries: 0, max_in_flight_requests_per_connection: 1, ..self.config.clone() }
            } else {
                self.config.clone()
            };
            let mut p = Producer::new(name, slot.spec.kind.clone(), NodeId::Broker(BROKER), config);
            if let Some(c) = &self.controller {
                // `Cluster::bootstrap`: every broker, and the leaders of the producer's first metadata.
                p.set_bootstrap(self.brokers.keys().copied().collect());
                let leaders = c.partitions.iter().filter(|(_, r)| r.state.leader != NO_LEADER);
                p.learn_leaders(leaders.map(|(tp, r)| (tp.clone(), r.state.leader)));
            }
            slot.producer = Some(p);
            slot.plan = None;
            slot.stall_until_ms = 0;
            if incarnation > 1 {
                self.trace_with(name, "restart", || {
                    (format!("started instance {incarnation}"), json!({"instance": incarnation}))
                });
            }
        }
        Vec::new()
    }

    pub fn on_wire(&mut self, shared: &Shared, name: &str, wire: Wire) -> Vec<Outgoing> {
        let incarnation = self.nodes[name].incarnation;
        if wire.dst_incarnation != incarnation {
            if self.trace.is_none() {
                return self.reset_connection(name, wire.env).into_iter().collect();
            }
            let text =
                format!("drop {} from {} (sent to instance {})", wire.env.message, wire.env.from, wire.dst_incarnation);
            let fields = message_fields(&wire.env);
            self.trace_with(name, "drop", || (text, fields));
            return self.reset_connection(name, wire.env).into_iter().collect();
        }
        let mut env = wire.env;
        let now = self.now_ms();
        if name == CONTROLLER {
            if self.trace.is_some() {
                let text = format!("recv {} from {}", env.message, env.from);
                let fields = message_fields(&env);
                self.trace_with(name, "recv", || (text, fields));
            }
            if let Some(held) = &mut self.controller_outage {
                let incarnation = self.nodes[node_key(&env.from).as_ref()].incarnation;
                held.push(Held::Request { env, incarnation });
                return Vec::new();
            }
            return self.controller_do(shared, |c| c.on_message(env));
        }
        if is_client(name) {
            // An answer to a client: back to the asking instance's own correlation id.
            match self.wire_requests.remove(&env.correlation_id) {
                Some((client, inc, corr)) if client == name && inc == incarnation => env.correlation_id = corr,
                _ => {
                    if self.trace.is_some() {
                        let text = format!("drop {} (asked on a closed connection)", env.message);
                        let fields = message_fields(&env);
                        self.trace_with(name, "drop", || (text, fields));
                    }
                    return Vec::new();
                }
            }
        }
        if is_broker(name) {
            let text = self.trace.is_some().then(|| {
                let what = env.message.with_markers(&|tp, o| self.marker_kind(tp, o)).to_string();
                (format!("recv {what} from {}", env.from), message_fields(&env))
            });
            let id = broker_id(name);
            let ends = self.log_ends(id);
            let effects = self.step_broker(id, |b| b.on_message(now, env));
            self.trace_broker(id, "recv", || text.unwrap_or_default());
            self.after_broker_step(shared, id, &ends);
            return self.dispatch(shared, name, effects);
        }
        if self.producers.contains_key(name) {
            let text = self.trace.is_some().then(|| (format!("recv {}", env.message), message_fields(&env)));
            let slot = self.producers.get_mut(name).expect("checked");
            let Some(p) = slot.producer.as_mut() else { return Vec::new() };
            let effects = p.on_message(now, env);
            if let Some(t) = text {
                self.trace_with(name, "recv", || t);
            }
            self.collect_completions(name);
            return self.dispatch(shared, name, effects);
        }
        let effects = self.consumer_message(name, env);
        self.dispatch(shared, name, effects)
    }

    fn on_timer(&mut self, shared: &Shared, name: &str, incarnation: u32, timer: Timer) -> Vec<Outgoing> {
        if self.nodes[name].incarnation != incarnation {
            return Vec::new();
        }
        let now = self.now_ms();
        if is_broker(name) {
            let id = broker_id(name);
            if self.brokers_down.contains(&id) {
                return Vec::new();
            }
            let text = self.trace.is_some().then(|| format!("timer: {}", timer_name(&timer)));
            let before = self.trace.is_some().then(|| self.fingerprint().collect::<Vec<u64>>());
            let ends = self.log_ends(id);
            let loads = matches!(timer, Timer::LoadTransactionLog { .. });
            let effects = self.step_broker(id, |b| b.on_timer(now, timer));
            // A scan that sent nothing and changed nothing is noise in a long replay: it folds.
            let idle = effects.sends.is_empty() && before.is_some_and(|fp| self.fingerprint().eq(fp));
            let kind = if idle { IDLE_TIMER } else { "timer" };
            self.trace_broker(id, kind, || (text.unwrap_or_default(), Value::Null));
            self.after_broker_step(shared, id, &ends);
            if loads {
                self.observe_load(id);
            }
            return self.dispatch(shared, name, effects);
        }
        if let Some(slot) = self.producers.get_mut(name) {
            let Some(p) = slot.producer.as_mut() else { return Vec::new() };
            let effects = p.on_timer(now, timer);
            if !effects.sends.is_empty() && self.trace.is_some() {
                let text = format!(
                    "timer: resend {}",
                    effects.sends.iter().map(|e| e.message.to_string()).collect::<Vec<_>>().join(", ")
                );
                self.trace(name, "resend", || text);
            }
            self.collect_completions(name);
            return self.dispatch(shared, name, effects);
        }
        if let Some(slot) = self.consumers.get_mut(name) {
            if let Timer::RequestTimeout { correlation_id } = &timer {
                slot.polls.remove(correlation_id);
            }
            let effects = slot.consumer.on_timer(now, timer);
            return self.dispatch(shared, name, effects);
        }
        Vec::new()
    }
}
