//! Symmetry reduction over the producers (`Bounds::symmetry`, `--symmetry`). Producers run the same script and
//! differ only in their names: client id `p0'`, transactional id `tx-p0`, record values `p0':1.0`. A
//! state with the producers permuted (names, actor slots, connections and timers alike) has the same
//! futures, permuted, and every property is blind to the names (each invariant and fact asks "some
//! producer", "some record"). So the model keeps one state per class: `next_state` returns `canonical`
//! states, and any checker (breadth-first, depth-first, the Explorer) sees one state per class.
//!
//! It is the permuted copy with the least digest, over every permutation: canonical (a state and its
//! permutations pick the same copy) without sorting the producers by a name-blind key.
//!
//! With `--por` too: the stubborn set picks a producer by slot, so the reduced graph is not symmetric,
//! but its argument holds from every state (a violation or fact reachable in the full graph from `t` is
//! reachable in the reduced one from `t`). A state skipped because a permutation of it was visited
//! reaches, in the full graph, the permutations of what that one reaches, at the same distances; and
//! the induction at `stubborn_set` runs on measures a permutation keeps (path length, messages waiting
//! for producers). So it goes through the skipped state's visited permutation, and the checker still
//! finds a violation of each invariant and a witness of each fact that the full graph has.

use crate::actors::{ModelTimer, Msg, NodeKind, NodeState, ProducerNode};
use crate::bounds::MAX_PRODUCERS;
use crate::shared::{digest, DigestMap, Shared};
use crate::state::{TxnAction, TxnState};
use stateright::actor::{ActorModelAction, Envelope, Id, Network, Timers};
use stateright::{Model, Path};
use std::cell::RefCell;
use std::sync::{Arc, OnceLock};
use txnsim_engine::Rename;

/// The state of `s`'s class that the model keeps in its place.
pub fn canonical(s: TxnState) -> TxnState {
    let producers = s.actor_states.len() - 1;
    assert!(producers <= MAX_PRODUCERS, "symmetry reduction takes at most {MAX_PRODUCERS} producers");
    let mut best = (digest(&s), None);
    for (i, perm) in permutations(producers).iter().enumerate().skip(1) {
        let copy = permuted_with(&s, perm, i);
        let d = digest(&copy);
        if d < best.0 {
            best = (d, Some(copy));
        }
    }
    best.1.unwrap_or(s)
}

/// `canonical` for stateright's depth-first checker, which takes a representative function and keeps
/// the states as stepped on its stack: there, the renamed nodes' cache hits more often than when the
/// model keeps canonical states (3.8 s against 5.8 s on the 2 x 1 lossy crash config).
pub fn representative(s: &TxnState) -> TxnState {
    canonical(s.clone())
}

/// A path of the symmetric model as `plain` (the same bounds without symmetry or partial-order
/// reduction) takes it: each action renamed by the permutation that the steps so far have applied, so
/// the producers keep their names from the first step to the last. The symmetric model's own states are
/// representatives, in which producers can swap names between steps.
pub fn unpermuted<M>(plain: &M, path: &Path<TxnState, TxnAction>) -> Path<TxnState, TxnAction>
where
    M: Model<State = TxnState, Action = TxnAction>,
{
    let steps = path.clone().into_vec();
    let producers = steps[0].0.actor_states.len() - 1;
    // `raw` is `permuted(state, perm)` for the symmetric path's state at each step.
    let mut perm: Vec<usize> = (0..producers).collect();
    let mut raw = steps[0].0.clone();
    let mut actions = Vec::new();
    for (k, (_, action)) in steps.iter().enumerate() {
        let Some(action) = action else { break };
        let renamed = permuted_action(action, &perm);
        raw = plain.next_state(&raw, renamed.clone()).expect("a renamed action is enabled in the renamed state");
        actions.push(renamed);
        let next = &steps[k + 1].0;
        perm = permutations(producers)
            .iter()
            .find(|p| digest(&permuted(next, p)) == digest(&raw))
            .expect("each step's state is a permutation of the plain model's")
            .clone();
    }
    Path::from_actions(plain, steps[0].0.clone(), &actions).expect("the renamed actions are the plain model's")
}

/// `action` with producer `i` moved to slot `perm[i]`, names included.
fn permuted_action(action: &TxnAction, perm: &[usize]) -> TxnAction {
    let slot = |id: Id| slot_of(id, perm);
    let names = |name: &mut String| rename_producer(name, perm);
    match action {
        ActorModelAction::Deliver { src, dst, msg } => {
            ActorModelAction::Deliver { src: slot(*src), dst: slot(*dst), msg: renamed(msg, &names) }
        }
        ActorModelAction::Drop(e) => {
            ActorModelAction::Drop(Envelope { src: slot(e.src), dst: slot(e.dst), msg: renamed(&e.msg, &names) })
        }
        ActorModelAction::Timeout(id, timer) => ActorModelAction::Timeout(slot(*id), renamed_timer(timer, perm)),
        ActorModelAction::Crash(id) => ActorModelAction::Crash(slot(*id)),
        ActorModelAction::Recover(id) => ActorModelAction::Recover(slot(*id)),
        ActorModelAction::SelectRandom { actor, key, random } => {
            ActorModelAction::SelectRandom { actor: slot(*actor), key: key.clone(), random: *random }
        }
    }
}

/// Every permutation of `0..n`, the identity first; made once per `n`, as every state asks.
fn permutations(n: usize) -> &'static [Vec<usize>] {
    static ALL: OnceLock<Vec<Vec<Vec<usize>>>> = OnceLock::new();
    &ALL.get_or_init(|| {
        let mut all = vec![vec![Vec::new()]];
        for n in 1..=MAX_PRODUCERS {
            let mut out = Vec::new();
            for shorter in &all[n - 1] {
                for at in (0..n).rev() {
                    let mut p: Vec<usize> = shorter.clone();
                    p.insert(at, n - 1);
                    out.push(p);
                }
            }
            all.push(out);
        }
        all
    })[n]
}

/// Renamed nodes and messages by digest, one map per permutation: a broker or producer state recurs in
/// the states a depth-first search visits next, so each is renamed once (per thread) and the rest are
/// lookups.
struct Renamed {
    nodes: Vec<DigestMap<NodeState>>,
    messages: Vec<DigestMap<Msg>>,
}

/// Bounds each map: a renamed broker is kilobytes, and the search comes back to recent ones soon. A
/// map of 2^10 ran the 2 x 1 lossy crash config (690,519 classes) as fast as 2^8 and faster than 2^14
/// (3.8 s against 4.6 s), in 66 MB against 366 MB; 2^20 exceeded 8 GiB on the medium config.
const RENAMED_ENTRIES_MAX: usize = 1 << 10;

thread_local! {
    static RENAMED: RefCell<Renamed> = const { RefCell::new(Renamed { nodes: Vec::new(), messages: Vec::new() }) };
}

/// `s` with producer `i` moved to slot `perm[i]`, names included.
pub fn permuted(s: &TxnState, perm: &[usize]) -> TxnState {
    let index = permutations(perm.len()).iter().position(|p| p == perm).expect("a permutation");
    permuted_with(s, perm, index)
}

/// `permuted`, with `index` naming `perm` in the caches.
fn permuted_with(s: &TxnState, perm: &[usize], index: usize) -> TxnState {
    let slot = |id: Id| slot_of(id, perm);
    let names = |name: &mut String| rename_producer(name, perm);
    // `moved[j]` is the actor that lands in slot `j`.
    let mut moved: Vec<usize> = vec![0; s.actor_states.len()];
    for a in 0..s.actor_states.len() {
        moved[usize::from(slot(Id::from(a)))] = a;
    }
    RENAMED.with(|cell| {
        let mut guard = cell.borrow_mut();
        let c = &mut *guard;
        if c.nodes.len() <= index {
            c.nodes.resize_with(index + 1, DigestMap::default);
            c.messages.resize_with(index + 1, DigestMap::default);
        }
        let (nodes, messages) = (&mut c.nodes[index], &mut c.messages[index]);
        if nodes.len() > RENAMED_ENTRIES_MAX {
            nodes.clear();
        }
        if messages.len() > RENAMED_ENTRIES_MAX {
            messages.clear();
        }
        let mut node = |n: &NodeState| nodes.entry(n.digest()).or_insert_with(|| renamed_node(n, &names)).clone();
        let mut msg = |m: &Msg| messages.entry(m.digest()).or_insert_with(|| renamed(m, &names)).clone();
        let actor_states = moved.iter().map(|&a| Arc::new(node(&s.actor_states[a]))).collect();
        let mut envelope = |e: &Envelope<Msg>| Envelope { src: slot(e.src), dst: slot(e.dst), msg: msg(&e.msg) };
        let network = match &s.network {
            Network::Ordered(flows) => Network::Ordered(
                flows
                    .iter()
                    .map(|((src, dst), queue)| ((slot(*src), slot(*dst)), queue.iter().map(&mut msg).collect()))
                    .collect(),
            ),
            Network::UnorderedNonDuplicating(set) => {
                Network::UnorderedNonDuplicating(set.iter().map(|(e, n)| (envelope(e), *n)).collect())
            }
            Network::UnorderedDuplicating(set, last) => {
                let set = set.iter().map(&mut envelope).collect();
                Network::UnorderedDuplicating(set, last.as_ref().map(&mut envelope))
            }
        };
        TxnState {
            actor_states,
            network,
            timers_set: moved
                .iter()
                .map(|&a| {
                    let mut timers = Timers::new();
                    for t in s.timers_set[a].iter() {
                        timers.set(renamed_timer(t, perm));
                    }
                    timers
                })
                .collect(),
            random_choices: moved.iter().map(|&a| s.random_choices[a].clone()).collect(),
            crashed: moved.iter().map(|&a| s.crashed[a]).collect(),
            history: s.history,
            actor_storages: moved.iter().map(|&a| s.actor_storages[a]).collect(),
        }
    })
}

/// Actor `id`'s slot after moving producer `i` to slot `perm[i]` (the broker stays in slot 0).
fn slot_of(id: Id, perm: &[usize]) -> Id {
    match usize::from(id) {
        0 => id,
        a => Id::from(1 + perm[a - 1]),
    }
}

/// A timer under `perm`: only the coordinator's timeout timers name a producer (its transactional id).
fn renamed_timer(timer: &ModelTimer, perm: &[usize]) -> ModelTimer {
    let mut timer = timer.clone();
    if let ModelTimer::TxnTimeout(tid) = &mut timer {
        rename_producer(tid, perm);
    }
    timer
}

fn renamed<T: Rename + Clone + std::hash::Hash>(value: &Shared<T>, names: &dyn Fn(&mut String)) -> Shared<T> {
    let mut copy = (**value).clone();
    copy.rename(names);
    Shared::new(copy)
}

fn renamed_node(node: &NodeState, names: &dyn Fn(&mut String)) -> NodeState {
    Shared::new(match &**node {
        NodeKind::Processor(_) => unreachable!("symmetry reduction runs without processors (`Bounds::validate`)"),
        NodeKind::Broker(b) => {
            let mut b = b.clone();
            b.broker = renamed(&b.broker, names);
            if let Some(r) = &mut b.replication {
                r.update(|r| r.peers.iter_mut().for_each(|peer| peer.rename(names)));
            }
            let mut readers = (*b.readers).clone();
            for r in &mut readers.list {
                r.consumer.rename(names);
                r.polls.rename(names);
            }
            b.readers = Shared::new(readers);
            NodeKind::Broker(b)
        }
        NodeKind::Producer(p) => {
            let mut p: ProducerNode = p.clone();
            p.producer.rename(names);
            p.events = renamed(&p.events, names);
            NodeKind::Producer(p)
        }
        NodeKind::Panicked { message, last } => {
            NodeKind::Panicked { message: message.clone(), last: renamed_node(last, names) }
        }
    })
}

/// Renames a producer-owned string: `p<i>` followed by nothing, `'` (a later instance) or `:` (a record
/// value), or `tx-p<i>`, becomes the same with `perm[i]`. Every other string is not a producer's. The
/// forms are `actors::producer_name`'s, `actors::transactional_id`'s and the script's record values.
fn rename_producer(name: &mut String, perm: &[usize]) {
    let start = if name.starts_with("tx-p") {
        4
    } else if name.starts_with('p') {
        1
    } else {
        return;
    };
    let digits = name[start..].bytes().take_while(u8::is_ascii_digit).count();
    let rest = &name[start + digits..];
    if digits == 0 || !(rest.is_empty() || rest.starts_with('\'') || rest.starts_with(':')) {
        return;
    }
    let Some(&image) = name[start..start + digits].parse::<usize>().ok().and_then(|i| perm.get(i)) else { return };
    name.replace_range(start..start + digits, &image.to_string());
}
