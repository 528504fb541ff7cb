//! The nemesis of `sweep --target apache-kafka:N`: faults of the cluster's own nodes, which only the
//! harness that started them can cause (`apache_kafka::KafkaCluster`'s kill -9, restart, SIGSTOP,
//! SIGCONT and link cuts). As the sim's faults, every choice (which kinds, their order, the nodes, the
//! waits and how long each fault holds) is drawn from the seed's `SimRng` before the workload starts;
//! only when each lands is the wall clock's. The faults run one after another on a thread of their own
//! while the workload and the closing of its transactions go on, and every one is healed, with the
//! cluster listing every broker again, before the partitions are read back.

use crate::apache_kafka::{KafkaCluster, BROKER_SESSION_TIMEOUT_MS};
use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use txnsim_sim::profile::{FaultKind, ProfileParams};
use txnsim_sim::rng::SimRng;

/// `replica.lag.time.max.ms` of a cluster `sweep --target apache-kafka:N` starts (Kafka's default is
/// 30000): a follower cut off from its leader leaves the ISR within a seed (`Partition.maybeShrinkIsr`).
pub const REPLICA_LAG_TIME_MAX_MS: u64 = 3_000;
/// A seed's faults are all healed, the cluster listing every broker again, within this of the seed's
/// start, or the sweep stops (a restart starts a JVM: about 5 s alone on two cores). The draw's waits and
/// holds take 16 s at most.
pub const NEMESIS_LIMIT: Duration = Duration::from_secs(90);

/// A fault of the cluster's nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NemesisKind {
    /// kill -9 of a node; after a while it restarts on its data (its log survives, as in the sim's crash).
    KillNode,
    /// SIGSTOP of a node past `broker.session.timeout.ms`, so the controller fences it
    /// (`BrokerHeartbeatManager`) and its followers leave the ISRs; then SIGCONT.
    PauseNode,
    /// Every packet between two nodes dropped, both ways, past `replica.lag.time.max.ms`: replication
    /// and the KRaft quorum's traffic between them stop; clients still reach both.
    CutLink,
}

impl NemesisKind {
    pub const ALL: [NemesisKind; 3] = [NemesisKind::KillNode, NemesisKind::PauseNode, NemesisKind::CutLink];

    pub fn name(self) -> &'static str {
        match self {
            NemesisKind::KillNode => "kill-node",
            NemesisKind::PauseNode => "pause-node",
            NemesisKind::CutLink => "cut-link",
        }
    }

    /// The sim's faults each stands for: `--nemesis auto` switches a kind on when the seed switches on
    /// any of them, each with its chance in the profile's fault mix.
    pub fn sim_kinds(self) -> &'static [FaultKind] {
        match self {
            NemesisKind::KillNode => {
                &[FaultKind::BrokerRestart, FaultKind::LeaderRestart, FaultKind::ControllerFailover]
            }
            // A stopped process keeps its sockets and answers nothing: every link of the node clogged.
            NemesisKind::PauseNode => &[FaultKind::ClogNode],
            NemesisKind::CutLink => &[FaultKind::ClogLink, FaultKind::IsolateFollower],
        }
    }
}

/// `--nemesis`: which kinds a seed may run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// No node faults.
    None,
    /// Each seed switches kinds on from the profile's fault mix (`sim_kinds`).
    Auto,
    /// Every seed runs each of these kinds once.
    List(Vec<NemesisKind>),
}

impl Choice {
    /// `none`, `auto`, or a comma-separated list of kinds.
    pub fn parse(s: &str) -> Result<Choice, String> {
        match s {
            "none" => return Ok(Choice::None),
            "auto" => return Ok(Choice::Auto),
            _ => {}
        }
        let mut kinds = Vec::new();
        for name in s.split(',') {
            let kind = NemesisKind::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| {
                let known: Vec<&str> = NemesisKind::ALL.iter().map(|k| k.name()).collect();
                format!("--nemesis: unknown kind {name:?}; known: {}, or auto or none", known.join(", "))
            })?;
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        Ok(Choice::List(kinds))
    }

    /// Whether a seed may cut a link (the cluster must then run in network namespaces).
    pub fn may_cut_links(&self) -> bool {
        match self {
            Choice::None => false,
            Choice::Auto => true,
            Choice::List(kinds) => kinds.contains(&NemesisKind::CutLink),
        }
    }
}

/// One fault as drawn: wait `wait_ms` after the previous one healed (or the seed started), hold it
/// `hold_ms`, heal it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub kind: NemesisKind,
    /// The node, or for a link its two ends.
    pub nodes: Vec<usize>,
    pub wait_ms: u64,
    pub hold_ms: u64,
}

/// Draws a seed's faults on a cluster of `nodes` nodes.
pub fn draw(choice: &Choice, params: &ProfileParams, nodes: usize, rng: &mut SimRng) -> Vec<Step> {
    let mut kinds: Vec<NemesisKind> = match choice {
        Choice::None => return Vec::new(),
        Choice::List(kinds) => kinds.clone(),
        Choice::Auto => NemesisKind::ALL
            .into_iter()
            .filter(|k| {
                // Every sim kind is drawn, so a kind's draws do not depend on the one before it.
                let on: Vec<bool> =
                    k.sim_kinds().iter().map(|s| rng.chance(params.fault_enable_prob[*s as usize])).collect();
                on.contains(&true)
            })
            .collect(),
    };
    // `auto` on a cluster of one node: it has no link to cut (a list naming cut-link is refused there).
    kinds.retain(|k| *k != NemesisKind::CutLink || nodes > 1);
    for i in (1..kinds.len()).rev() {
        let j = rng.index(i + 1);
        kinds.swap(i, j);
    }
    let mut steps = Vec::new();
    for kind in kinds {
        // The first lands while the workload runs (it lasts a second or two); the others follow.
        let wait_ms = if steps.is_empty() { rng.range(100, 1_000) } else { rng.range(0, 500) };
        let a = rng.index(nodes);
        let (nodes, hold_ms) = match kind {
            NemesisKind::KillNode => (vec![a], rng.range(500, 3_000)),
            NemesisKind::PauseNode => {
                (vec![a], rng.range(BROKER_SESSION_TIMEOUT_MS + 500, BROKER_SESSION_TIMEOUT_MS + 2_000))
            }
            NemesisKind::CutLink => {
                let b = (a + 1 + rng.index(nodes - 1)) % nodes;
                (vec![a.min(b), a.max(b)], rng.range(REPLICA_LAG_TIME_MAX_MS + 500, REPLICA_LAG_TIME_MAX_MS + 2_000))
            }
        };
        steps.push(Step { kind, nodes, wait_ms, hold_ms });
    }
    steps
}

/// One fault as it ran: when it began and when the cluster listed every broker again, in milliseconds
/// since the seed started (the history's clock).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFault {
    pub kind: NemesisKind,
    pub nodes: Vec<usize>,
    pub start_ms: u64,
    pub healed_ms: u64,
}

impl NodeFault {
    /// `kill-node 2 at 812..9345 ms`, `cut-link 0-1 at ...`.
    pub fn describe(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(|n| n.to_string()).collect();
        format!("{} {} at {}..{} ms", self.kind.name(), nodes.join("-"), self.start_ms, self.healed_ms)
    }
}

/// Runs `steps` on `cluster`, timed from `start`; each fault is healed before the next begins. A fault
/// that cannot be caused or healed is an error (the sweep stops: the cluster is no longer the one drawn).
pub fn run(cluster: &Mutex<KafkaCluster>, steps: &[Step], start: Instant) -> Result<Vec<NodeFault>, String> {
    let since = |start: Instant| start.elapsed().as_millis() as u64;
    let cluster = || cluster.lock().unwrap_or_else(|e| e.into_inner());
    let mut ran = Vec::new();
    for step in steps {
        std::thread::sleep(Duration::from_millis(step.wait_ms));
        let start_ms = since(start);
        let what = format!("{} {:?}", step.kind.name(), step.nodes);
        match step.kind {
            NemesisKind::KillNode => cluster().kill(step.nodes[0]),
            NemesisKind::PauseNode => cluster().pause(step.nodes[0])?,
            NemesisKind::CutLink => cluster().cut_link(step.nodes[0], step.nodes[1])?,
        }
        std::thread::sleep(Duration::from_millis(step.hold_ms));
        let mut c = cluster();
        let left = (start + NEMESIS_LIMIT).saturating_duration_since(Instant::now());
        match step.kind {
            NemesisKind::KillNode => c.restart_within(step.nodes[0], left),
            NemesisKind::PauseNode => c.resume(step.nodes[0]).and_then(|()| c.wait_ready(left)),
            NemesisKind::CutLink => c.heal_link(step.nodes[0], step.nodes[1]).and_then(|()| c.wait_ready(left)),
        }
        .map_err(|e| format!("healing {what} (every fault heals within {NEMESIS_LIMIT:?} of the seed's start): {e}"))?;
        ran.push(NodeFault { kind: step.kind, nodes: step.nodes.clone(), start_ms, healed_ms: since(start) });
    }
    Ok(ran)
}
