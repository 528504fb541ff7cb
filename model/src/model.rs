//! The `ActorModel`: one broker (partition leader for every partition and the transaction coordinator,
//! hosting a read_committed and a read_uncommitted reader) and the transactional producers; an unordered
//! network, lossy or duplicating as the bounds say. One `always` property per invariant of
//! `txnsim_properties::Invariant::ALL`, named as the catalogue names it, and one `sometimes` property per
//! `Fact`.

use crate::actors::{Ctx, ModelTimer, Msg, Node, NodeKind, RetriedApi, Role};
use crate::bounds::Bounds;
use crate::describe;
use crate::reductions;
use crate::state::{losses, InFlight, TxnAction, TxnState};
use crate::symmetry;
use crate::verdict::{verdict, Fact};
use stateright::actor::{ActorModel, ActorModelAction, LossyNetwork, Network};
use stateright::{Model, Path, Property};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use txnsim_engine::protocol::{Message, NodeId, Timer};
use txnsim_properties::Invariant;

/// The engine's actors on stateright's network, with the reductions of `Bounds::reduced` on top.
#[derive(Clone)]
pub struct TxnModel {
    pub cfg: ModelCfg,
    /// Under `Bounds::symmetry`, `next_state` returns canonical states, unless a checker applies
    /// `symmetry::representative` itself (`without_canonical_states`).
    canonical_states: bool,
    actors: ActorModel<Node, ModelCfg, InFlight>,
    properties: Vec<Property<TxnModel>>,
}

impl TxnModel {
    /// The states as stepped, for a checker that reduces symmetry itself.
    pub fn without_canonical_states(mut self) -> Self {
        self.canonical_states = false;
        self
    }
}

impl Model for TxnModel {
    type State = TxnState;
    type Action = TxnAction;

    fn init_states(&self) -> Vec<TxnState> {
        let states = self.actors.init_states();
        if self.canonical_states {
            states.into_iter().map(symmetry::canonical).collect()
        } else {
            states
        }
    }

    fn actions(&self, state: &TxnState, actions: &mut Vec<TxnAction>) {
        self.actors.actions(state, actions);
        if self.cfg.ctx.bounds.replicated_cluster() {
            // Only clients' connections lose messages. Metadata comes from the controller's log, which a
            // broker reads until it has it (the sim's controller traffic is reliable too), and a broker's
            // requests to another are retried after `replica.socket.timeout.ms` or a disconnect, timers
            // the model does not fire.
            let between_brokers = |m: &Msg| matches!((&m.from, &m.to), (NodeId::Broker(_), NodeId::Broker(_)));
            actions.retain(|a| !matches!(a, ActorModelAction::Drop(env) if between_brokers(&env.msg)));
        }
        if self.cfg.ctx.bounds.reduced {
            actions.retain(|a| reductions::explored(state, a));
        }
        if self.cfg.ctx.bounds.por {
            reductions::stubborn_set(state, actions);
        }
    }

    fn next_state(&self, last: &TxnState, action: TxnAction) -> Option<TxnState> {
        let note = lost_answer_note(last, &action);
        let mut next = self.actors.next_state(last, action)?;
        if let Some((actor, note)) = note {
            let mut node = (*next.actor_states[actor]).clone();
            node.update(|k| {
                if let NodeKind::Producer(p) = k {
                    match note {
                        LostAnswerNote::Lost(corr, api) => p.lost_answer = Some((corr, api)),
                        LostAnswerNote::Retried(api) => {
                            p.lost_answer = None;
                            p.retried_after_lost.insert(api);
                        }
                    }
                }
            });
            next.actor_states[actor] = Arc::new(node);
        }
        Some(if self.canonical_states { symmetry::canonical(next) } else { next })
    }

    /// The Explorer's label of a next step, in the counterexamples' words (describe.rs); a timer names
    /// its actor by index, as the action alone does not say which producer that is.
    fn format_action(&self, action: &TxnAction) -> String {
        let envelope = |msg: &Msg| {
            format!("{} → {}: {}", describe::node_name(&msg.from), describe::node_name(&msg.to), msg.message)
        };
        match action {
            ActorModelAction::Deliver { msg, .. } => envelope(msg),
            ActorModelAction::Drop(env) => format!("network loses {}", envelope(&env.msg)),
            ActorModelAction::Timeout(id, timer) => format!("actor {id}: {}", describe::timer_text(timer)),
            other => self.actors.format_action(other),
        }
    }

    /// The Explorer's state view: what the step did, then the partition logs with HW and LSO, the
    /// coordinator's transactions and each reader's deliveries, one per line, instead of a Debug dump.
    fn format_step(&self, last: &TxnState, action: TxnAction) -> Option<String> {
        let next = self.next_state(last, action.clone())?;
        let what = describe::step(last, &action, &next);
        Some(format!("{what}\n\n{}", describe::snapshot(&next).replace(" | ", "\n")))
    }

    fn as_svg(&self, path: Path<TxnState, TxnAction>) -> Option<String> {
        self.actors.as_svg(path)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        self.properties.clone()
    }

    fn within_boundary(&self, state: &TxnState) -> bool {
        Model::within_boundary(&self.actors, state)
    }
}

enum LostAnswerNote {
    Lost(u64, RetriedApi),
    Retried(RetriedApi),
}

/// Drops and request timeouts are the model's own actions, invisible to the actors: a dropped answer to
/// InitProducerId or EndTxn, then the request timeout of that request (its retry), are noted on the
/// producer for the `*-answer-lost-then-retried` facts.
fn lost_answer_note(last: &TxnState, action: &TxnAction) -> Option<(usize, LostAnswerNote)> {
    match action {
        ActorModelAction::Drop(env) => {
            let api = match env.msg.message {
                Message::InitProducerIdResponse { .. } => RetriedApi::InitProducerId,
                Message::EndTxnResponse { .. } => RetriedApi::EndTxn,
                _ => return None,
            };
            Some((usize::from(env.dst), LostAnswerNote::Lost(env.msg.correlation_id, api)))
        }
        ActorModelAction::Timeout(id, ModelTimer::Engine(Timer::RequestTimeout { correlation_id })) => {
            let p = last.actor_states[usize::from(*id)].producer()?;
            let (corr, api) = p.lost_answer?;
            (corr == *correlation_id).then_some((usize::from(*id), LostAnswerNote::Retried(api)))
        }
        _ => None,
    }
}

type PropFn = fn(&TxnModel, &TxnState) -> bool;

const INVARIANTS: usize =
    Invariant::ALL.len() + Invariant::REPLICA.len() + Invariant::GROUP.len() + Invariant::EOS.len();
/// The latch slot of `ENGINE_ASSERTIONS`, after the invariants and the facts.
const ASSERTIONS: usize = INVARIANTS + Fact::ALL.len();
const PROPERTIES: usize = ASSERTIONS + 1;

/// The one property that is not from the catalogue: no engine `assert!` failed on the way here (the
/// engine guards its own invariants with assertions; a failing one is an engine bug with a path).
pub const ENGINE_ASSERTIONS: &str = "engine-assertions";

#[derive(Clone)]
pub struct ModelCfg {
    pub ctx: Arc<Ctx>,
    /// Set once a property has its discovery. stateright keeps evaluating discovered properties and
    /// overwrites the stored path with later (longer) ones; the latch keeps the first, which BFS makes
    /// the shortest.
    latch: Arc<[AtomicBool; PROPERTIES]>,
}

impl ModelCfg {
    fn latched(&self, i: usize) -> bool {
        self.latch[i].load(Ordering::Relaxed)
    }
    fn set_latch(&self, i: usize) {
        self.latch[i].store(true, Ordering::Relaxed);
    }
}

fn invariant_holds<const I: usize>(m: &TxnModel, s: &TxnState) -> bool {
    if m.cfg.latched(I) {
        return true;
    }
    let holds = verdict(&m.cfg.ctx, s).violated & (1 << I) == 0;
    if !holds {
        m.cfg.set_latch(I);
    }
    holds
}

fn fact_seen<const J: usize>(m: &TxnModel, s: &TxnState) -> bool {
    if m.cfg.latched(INVARIANTS + J) {
        return false;
    }
    let seen = verdict(&m.cfg.ctx, s).facts & (1 << J) != 0;
    if seen {
        m.cfg.set_latch(INVARIANTS + J);
    }
    seen
}

fn assertions_hold(m: &TxnModel, s: &TxnState) -> bool {
    if m.cfg.latched(ASSERTIONS) {
        return true;
    }
    let holds = s.actor_states.iter().all(|a| a.panic_message().is_none());
    if !holds {
        m.cfg.set_latch(ASSERTIONS);
    }
    holds
}

macro_rules! table {
    ($f:ident; $($i:literal)*) => { [$($f::<$i> as PropFn),*] };
}

const INVARIANT_FNS: [PropFn; INVARIANTS] = table!(invariant_holds; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37);
const FACT_FNS: [PropFn; 13] = table!(fact_seen; 0 1 2 3 4 5 6 7 8 9 10 11 12);

/// Builds the model for `bounds`; panics on bounds `Bounds::validate` rejects.
pub fn build(bounds: &Bounds) -> TxnModel {
    bounds.validate().expect("valid bounds");
    let ctx = Arc::new(Ctx::new(bounds));
    let cfg = ModelCfg { ctx: Arc::clone(&ctx), latch: Arc::new(std::array::from_fn(|_| AtomicBool::new(false))) };
    let node = |role| Node { role, ctx: Arc::clone(&ctx) };
    let network = if bounds.ordered {
        Network::new_ordered([])
    } else if bounds.duplicating {
        Network::new_unordered_duplicating([])
    } else {
        Network::new_unordered_nonduplicating([])
    };
    let actors = ActorModel::new(cfg.clone(), 0)
        .actor(node(Role::Broker))
        .actors((0..bounds.producers).map(|i| node(Role::Producer(i))))
        .actors((0..bounds.processors).map(|i| node(Role::Processor(i))))
        .init_network(network)
        .lossy_network(if bounds.lossy { LossyNetwork::Yes } else { LossyNetwork::No })
        // On a duplicating network a delivery leaves the message in place: nothing to count there.
        .record_msg_out(|cfg: &ModelCfg, sent: &InFlight, _| (!cfg.ctx.bounds.duplicating).then(|| sent + 1))
        .record_msg_in(|cfg: &ModelCfg, sent: &InFlight, _| {
            (!cfg.ctx.bounds.duplicating).then(|| sent.saturating_sub(1))
        })
        // Crashes and losses are budgeted over the whole run: states past a budget are outside the model.
        .within_boundary(|cfg, s| {
            let b = &cfg.ctx.bounds;
            s.actor_states.iter().map(|a| a.restarts()).sum::<usize>() <= b.crashes
                && (b.duplicating || losses(s) <= b.losses)
        });
    assert_eq!(actors.actors.len(), ctx.actor_count());
    let mut properties = vec![Property::always(ENGINE_ASSERTIONS, assertions_hold)];
    let replica = Invariant::ALL.len()..Invariant::ALL.len() + Invariant::REPLICA.len();
    for (i, inv) in crate::verdict::model_invariants().enumerate() {
        let judged = if i < replica.start {
            true
        } else if replica.contains(&i) {
            bounds.replicated_cluster()
        } else {
            bounds.processors > 0
        };
        if judged {
            properties.push(Property::always(inv.name(), INVARIANT_FNS[i]));
        }
    }
    for (j, fact) in Fact::ALL.iter().enumerate() {
        if (!fact.needs_replicas() || bounds.replicated_cluster())
            && (!fact.needs_processors() || bounds.processors > 0)
        {
            properties.push(Property::sometimes(fact.name(), FACT_FNS[j]));
        }
    }
    TxnModel { canonical_states: bounds.symmetry, cfg, actors, properties }
}
