//! The KRaft controller's steps (ISR and leader changes counted) and its failover: while no controller is
//! active, what the next one must act on waits in order (`NodeToControllerChannelManager` resends a
//! broker's request; `ClusterControlManager.activate` fences the brokers that died).

use super::{broker_key, lock, send_all, Outgoing, Shared, World, CONTROLLER};
use madsim::runtime::Handle;
use madsim::time::Duration;
use std::collections::BTreeMap;
use txnsim_engine::controller::Controller;
use txnsim_engine::protocol::metadata::PartitionRegistration;
use txnsim_engine::protocol::NO_LEADER;
use txnsim_engine::protocol::{Effects, Envelope, NodeId};
use txnsim_engine::topic::transaction_state_partition;
use txnsim_engine::TopicPartition;

/// What waits for the next controller while none is active (`World::controller_outage`).
pub(super) enum Held {
    /// A broker's request (AlterPartition), with the sending broker's instance: its channel to the
    /// controller (`NodeToControllerChannelManager`) resends it to the new one unless that broker died.
    Request { env: Envelope, incarnation: u32 },
    /// A broker died: the new controller's fresh heartbeat manager fences it
    /// (`ClusterControlManager.activate`).
    Fenced(u32),
    /// A dead broker's restart: it registers with the new controller and serves only once unfenced.
    Restart(u32),
}

impl World {
    /// Counts what a controller step changed (ISR shrinks and expands, leaders) and sends its records.
    fn controller_step(
        &mut self,
        shared: &Shared,
        before: BTreeMap<TopicPartition, PartitionRegistration>,
        effects: Effects,
    ) -> Vec<Outgoing> {
        let after = &self.controller.as_ref().expect("a replicated cluster").partitions;
        for (tp, old) in &before {
            let new = &after[tp].state;
            if new.leader != old.state.leader {
                self.stats.leader_changes += 1;
                if *tp == transaction_state_partition() && new.leader != NO_LEADER {
                    self.stats.coordinator_moves += 1;
                }
            }
            match new.isr.len().cmp(&old.state.isr.len()) {
                std::cmp::Ordering::Less => self.stats.isr_shrinks += 1,
                std::cmp::Ordering::Greater => self.stats.isr_expands += 1,
                std::cmp::Ordering::Equal => {}
            }
        }
        self.dispatch(shared, CONTROLLER, effects)
    }

    /// Runs the controller's `f` (fencing or unfencing a broker) and sends what it decided.
    pub fn controller_do(&mut self, shared: &Shared, f: impl FnOnce(&mut Controller) -> Effects) -> Vec<Outgoing> {
        let Some(c) = self.controller.as_mut() else { return Vec::new() };
        let before = c.partitions.clone();
        let effects = f(c);
        self.controller_step(shared, before, effects)
    }

    /// A failover starts from a whole cluster: a restart already on its way could not wait for it.
    pub fn can_fail_over_controller(&self) -> bool {
        self.controller.is_some() && self.controller_outage.is_none() && self.brokers_down.is_empty()
    }

    /// The active controller dies; `election_ms` later its successor, whose state is the committed
    /// metadata log (all the engine's controller holds), takes over what waited.
    pub fn fail_over_controller(&mut self, shared: &Shared, election_ms: u64) {
        assert!(self.can_fail_over_controller(), "a controller failover during another or with a broker down");
        self.controller_outage = Some(Vec::new());
        self.trace(CONTROLLER, "fault", || format!("FAULT controller fails over; next elected in {election_ms} ms"));
        // Spawned here, not through `later`, which locks the world this step already holds.
        let Some(handle) = self.wire_node.and_then(|id| Handle::current().get_node(id)) else { return };
        let shared = shared.clone();
        handle.spawn(async move {
            madsim::time::sleep(Duration::from_millis(election_ms)).await;
            let out = lock(&shared).controller_elected(&shared);
            send_all(&shared, out).await;
        });
    }

    /// The new controller acts on what waited, in order: requests of brokers still on the instance that
    /// sent them, fencings, then held restarts.
    fn controller_elected(&mut self, shared: &Shared) -> Vec<Outgoing> {
        let held = self.controller_outage.take().expect("an election ends an outage");
        self.stats.controller_failovers += 1;
        self.trace(CONTROLLER, "recover", || format!("controller elected; {} held", held.len()));
        let mut out = Vec::new();
        for h in held {
            match h {
                Held::Request { env, incarnation } => {
                    let NodeId::Broker(from) = env.from else { unreachable!("only brokers ask the controller") };
                    let current = self.nodes[broker_key(from).as_ref()].incarnation;
                    if !self.brokers_down.contains(&from) && current == incarnation {
                        out.extend(self.controller_do(shared, |c| c.on_message(env)));
                    }
                }
                Held::Fenced(id) => out.extend(self.controller_do(shared, |c| c.broker_fenced(id))),
                Held::Restart(id) => self.restart_broker(id),
            }
        }
        out
    }
}
