//! Real Apache Kafka 4.3.1 on loopback: the broker the engine claims to be, for the tests that hold the
//! engine against it. Maven resolves the broker, Kafka's Java client and its tools from the pinned POM in
//! `kafka/apache-kafka/` into a cache folder; each node is a KRaft process in combined mode
//! (`process.roles=broker,controller`, a static quorum of every node), formatted and started in its own
//! folder, which keeps its `server.log`. Readiness is asked of the cluster (Metadata lists every broker),
//! never slept on. The harness can kill -9, stop (SIGTERM), pause (SIGSTOP), resume and restart a node,
//! and, for a cluster started in network namespaces of its own (`ClusterSpec::netns`, root only), cut and
//! heal the link between two nodes; every process it starts dies with the harness: on drop, and through
//! `PR_SET_PDEATHSIG` when the test process itself dies.

use crate::remote::wire::Conn;
use kafka_protocol::messages::MetadataRequest;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The Kafka release the harness runs, as the POM pins it.
pub const KAFKA_VERSION: &str = "4.3.1";
const POM: &str = include_str!("../apache-kafka/pom.xml");
const LOG4J2: &str = include_str!("../apache-kafka/log4j2.properties");
/// A cold resolve downloads about 60 MB of jars (BENCHMARKS.md); a stuck one fails the caller.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(300);
/// Three JVMs starting on two cores took about 15 s; anything past this is a failure.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Heap per node (Kafka's scripts default to 1 GiB; the tests' logs are small).
pub const DEFAULT_HEAP_MB: u32 = 512;
/// The JDK the broker needs (Kafka 4.x's brokers run on Java 17 and newer).
const MIN_JAVA: u32 = 17;
/// JVM options for the harness's short-lived brokers, tools and clients: the C1 compiler alone and the
/// serial collector. Their loads are tiny, and C2's compiles and G1's threads were half the real-Kafka
/// tests' CPU on two cores (BENCHMARKS.md, Gate); neither changes what Kafka does.
pub const QUICK_JVM: [&str; 2] = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"];
/// `broker.session.timeout.ms` of the harness's clusters (Kafka's default is 9000): a node silent this
/// long is fenced by the controller, so a killed or paused node's partitions move within seconds.
pub const BROKER_SESSION_TIMEOUT_MS: u64 = 4_000;
/// Metadata v12: the first version every Kafka 4.x broker and `txnsim serve` answer with the brokers.
const METADATA_VERSION: i16 = 12;

/// The resolved jars of Kafka 4.3.1 (broker, client, tools and their dependencies).
#[derive(Clone, Debug)]
pub struct Distribution {
    pub lib: PathBuf,
}

impl Distribution {
    /// Resolves the pinned POM with `mvn` into `cache/apache-kafka-4.3.1-<pom hash>/lib`, once: a later call
    /// finds the folder marked complete and runs nothing. A missing `mvn` or JDK, or a failed resolve, is
    /// an error that says why.
    pub fn resolve(cache: &Path) -> Result<Distribution, String> {
        java_major().and_then(|v| {
            if v >= MIN_JAVA {
                Ok(())
            } else {
                Err(format!("java is version {v}: Kafka {KAFKA_VERSION} needs a JDK {MIN_JAVA} or newer on PATH"))
            }
        })?;
        let dir = cache.join(format!("apache-kafka-{KAFKA_VERSION}-{:016x}", fnv1a(POM.as_bytes())));
        let lib = dir.join("lib");
        let done = dir.join(".resolved");
        if done.exists() {
            return Ok(Distribution { lib });
        }
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let pom = dir.join("pom.xml");
        std::fs::write(&pom, POM).map_err(|e| format!("{}: {e}", pom.display()))?;
        let mut mvn = Command::new("mvn");
        mvn.args(["-B", "-q", "-f"])
            .arg(&pom)
            .arg("dependency:copy-dependencies")
            .arg(format!("-DoutputDirectory={}", lib.display()))
            .current_dir(&dir);
        let (status, out, err) = run_bounded(mvn, RESOLVE_TIMEOUT).map_err(|e| {
            format!("cannot run mvn ({e}): the real-Kafka tests need Maven and a JDK {MIN_JAVA}+ on PATH")
        })?;
        if !status.success() {
            let output = out + &err;
            let tail: Vec<&str> = output.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect();
            return Err(format!(
                "mvn could not resolve Kafka {KAFKA_VERSION} from {}:\n{}",
                pom.display(),
                tail.join("\n")
            ));
        }
        if !lib.join(format!("kafka_2.13-{KAFKA_VERSION}.jar")).exists() {
            return Err(format!("mvn finished but {} has no kafka_2.13-{KAFKA_VERSION}.jar", lib.display()));
        }
        std::fs::write(&done, POM).map_err(|e| format!("{}: {e}", done.display()))?;
        Ok(Distribution { lib })
    }

    /// Every resolved jar, `:`-joined, in a stable order.
    pub fn classpath(&self) -> Result<String, String> {
        self.jars(|_| true)
    }

    /// Kafka's Java client alone: `kafka-clients` and what its producer and consumer load (the codecs
    /// and slf4j's API, which without a binding logs nothing), so a client program's stdout is its own.
    pub fn client_classpath(&self) -> Result<String, String> {
        const CLIENT: [&str; 5] = ["kafka-clients-", "slf4j-api-", "lz4-java-", "snappy-java-", "zstd-jni-"];
        let cp = self.jars(|name| CLIENT.iter().any(|p| name.starts_with(p)))?;
        match cp.matches(".jar").count() {
            5 => Ok(cp),
            n => Err(format!("{} holds {n} of the client's 5 jars ({CLIENT:?})", self.lib.display())),
        }
    }

    fn jars(&self, keep: impl Fn(&str) -> bool) -> Result<String, String> {
        let mut jars: Vec<PathBuf> = std::fs::read_dir(&self.lib)
            .map_err(|e| format!("{}: {e}", self.lib.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jar"))
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(&keep))
            .collect();
        jars.sort();
        Ok(jars.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(":"))
    }
}

/// The cluster to start: `nodes` combined broker-controllers (1 or 3; the seed document's cluster is 3),
/// and settings that differ from Kafka's defaults.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    pub nodes: usize,
    pub heap_mb: u32,
    /// `server.properties` lines added after the harness's own, in order (a later line wins).
    pub overrides: Vec<(String, String)>,
    /// Each node in a network namespace of its own on a private bridge (10.77.K.0/24), so that links
    /// between nodes can be cut; needs root and `ip`. Otherwise every node is on 127.0.0.1.
    pub netns: bool,
}

impl ClusterSpec {
    /// The seed document's cluster: 3 nodes, replication factor 3 for every topic, `min.insync.replicas` 2.
    pub fn seed() -> ClusterSpec {
        ClusterSpec { nodes: 3, heap_mb: DEFAULT_HEAP_MB, overrides: Vec::new(), netns: false }
    }

    /// The settings the harness changes from Kafka's defaults, each with its reason (README, "Real Kafka").
    pub fn settings(&self) -> Vec<(String, String)> {
        let rf = self.nodes.to_string();
        let min_isr = self.nodes.min(2).to_string();
        let session_timeout = BROKER_SESSION_TIMEOUT_MS.to_string();
        let mut s: Vec<(String, String)> = [
            // Every topic, and both internal topics, replicated to every node, as in the seed document.
            ("default.replication.factor", rf.as_str()),
            ("offsets.topic.replication.factor", rf.as_str()),
            ("transaction.state.log.replication.factor", rf.as_str()),
            ("transaction.state.log.min.isr", min_isr.as_str()),
            ("min.insync.replicas", min_isr.as_str()),
            // A new group's first rebalance waits 3 s by default; the tests make many fresh groups, and
            // `txnsim serve` runs with the same 0 (`--group-initial-rebalance-delay-ms`).
            ("group.initial.rebalance.delay.ms", "0"),
            // The coordinator looks for transactions open past their timeout every 10 s by default; the
            // differential's timeout scripts wait 1 s plus a scan, and serve runs with the same 1000.
            ("transaction.abort.timed.out.transaction.cleanup.interval.ms", "1000"),
            // A killed node is fenced once its controller session lapses, 9 s by default: 4 s keeps the
            // fault scripts short, with heartbeats every second (2 s by default) to keep a busy node in.
            ("broker.session.timeout.ms", session_timeout.as_str()),
            ("broker.heartbeat.interval.ms", "1000"),
            // Sessions of 6 s at least by default; the eos profile's processors ask for 1.5 s, so a
            // zombie's pause past its poll interval fits a seed of seconds (`txnsim serve` takes the same
            // `--group-min-session-timeout-ms 500`).
            ("group.min.session.timeout.ms", "500"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        s.extend(self.overrides.iter().cloned());
        s
    }
}

/// One node's process and where it lives.
struct Node {
    id: usize,
    dir: PathBuf,
    /// 127.0.0.1, or the node's address on the namespaces' bridge.
    host: String,
    port: u16,
    child: Option<Child>,
}

/// A running Kafka 4.3.1 cluster on loopback or in namespaces of its own. Dropping it kills every node
/// (and removes its namespaces).
pub struct KafkaCluster {
    nodes: Vec<Node>,
    classpath: String,
    heap_mb: u32,
    /// Dropped after `drop` killed the nodes, so the namespaces go last.
    netns: Option<Netns>,
}

impl KafkaCluster {
    /// Formats and starts `spec.nodes` nodes under `dir` (emptied first) and waits until every node's
    /// Metadata lists every broker.
    pub fn start(dist: &Distribution, dir: &Path, spec: &ClusterSpec) -> Result<KafkaCluster, String> {
        if !(spec.nodes == 1 || spec.nodes == 3) {
            return Err(format!("a cluster of {} nodes: the harness starts 1 or 3", spec.nodes));
        }
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let netns = if spec.netns { Some(Netns::create(spec.nodes)?) } else { None };
        // In namespaces every node has an address of its own and Kafka's usual ports; on loopback, free ones.
        let (hosts, client, controller): (Vec<String>, Vec<u16>, Vec<u16>) = match &netns {
            Some(ns) => {
                ((0..spec.nodes).map(|id| ns.address(id)).collect(), vec![9092; spec.nodes], vec![9093; spec.nodes])
            }
            None => {
                let ports = free_ports(spec.nodes * 2)?;
                let (client, controller) = ports.split_at(spec.nodes);
                (vec!["127.0.0.1".to_string(); spec.nodes], client.to_vec(), controller.to_vec())
            }
        };
        let voters: Vec<String> = controller.iter().enumerate().map(|(i, p)| format!("{i}@{}:{p}", hosts[i])).collect();
        let classpath = dist.classpath()?;
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        std::fs::write(dir.join("log4j2.properties"), LOG4J2).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut nodes = Vec::new();
        for id in 0..spec.nodes {
            let node_dir = dir.join(format!("node-{id}"));
            std::fs::create_dir_all(&node_dir).map_err(|e| format!("{}: {e}", node_dir.display()))?;
            let mut props = vec![
                ("process.roles".to_string(), "broker,controller".to_string()),
                ("node.id".to_string(), id.to_string()),
                ("controller.quorum.voters".to_string(), voters.join(",")),
                (
                    "listeners".to_string(),
                    format!("PLAINTEXT://{h}:{},CONTROLLER://{h}:{}", client[id], controller[id], h = hosts[id]),
                ),
                ("advertised.listeners".to_string(), format!("PLAINTEXT://{}:{}", hosts[id], client[id])),
                ("controller.listener.names".to_string(), "CONTROLLER".to_string()),
                ("inter.broker.listener.name".to_string(), "PLAINTEXT".to_string()),
                ("listener.security.protocol.map".to_string(), "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT".to_string()),
                ("log.dirs".to_string(), node_dir.join("data").display().to_string()),
            ];
            props.extend(spec.settings());
            let text: String = props.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
            std::fs::write(node_dir.join("server.properties"), text)
                .map_err(|e| format!("{}: {e}", node_dir.display()))?;
            format_storage(&classpath, &node_dir)?;
            nodes.push(Node { id, dir: node_dir, host: hosts[id].clone(), port: client[id], child: None });
        }
        let mut cluster = KafkaCluster { nodes, classpath, heap_mb: spec.heap_mb, netns };
        for id in 0..spec.nodes {
            cluster.spawn(id)?;
        }
        cluster.wait_ready(READY_TIMEOUT)?;
        Ok(cluster)
    }

    /// Every node's client address, node 0 first.
    pub fn addresses(&self) -> Vec<String> {
        self.nodes.iter().map(|n| format!("{}:{}", n.host, n.port)).collect()
    }

    /// `bootstrap.servers` for a client: every node.
    pub fn bootstrap(&self) -> String {
        self.addresses().join(",")
    }

    /// The classpath of the resolved distribution (Kafka's Java client and tools run from it).
    pub fn classpath(&self) -> &str {
        &self.classpath
    }

    /// The folder holding node `id`'s `server.properties`, `server.log`, `stdout.log` and data.
    pub fn node_dir(&self, id: usize) -> &Path {
        &self.nodes[id].dir
    }

    /// Node `id`'s process id while it runs.
    pub fn pid(&self, id: usize) -> Option<u32> {
        self.nodes[id].child.as_ref().map(Child::id)
    }

    /// kill -9 of node `id`; it stays down until `restart`.
    pub fn kill(&mut self, id: usize) {
        if let Some(mut child) = self.nodes[id].child.take() {
            child.kill().ok();
            child.wait().ok();
        }
    }

    /// SIGSTOP: the node stops answering but keeps its sockets, as a long GC pause or a stalled host.
    pub fn pause(&self, id: usize) -> Result<(), String> {
        self.signal(id, libc::SIGSTOP)
    }

    /// SIGCONT after `pause`.
    pub fn resume(&self, id: usize) -> Result<(), String> {
        self.signal(id, libc::SIGCONT)
    }

    /// SIGTERM and a wait (up to `limit`) for the node to exit: Kafka's own clean shutdown, in which a
    /// broker asks the controller to move its leaderships first (KRaft's controlled shutdown). It stays
    /// down until `restart` or `launch`.
    pub fn stop(&mut self, id: usize, limit: Duration) -> Result<ExitStatus, String> {
        self.signal(id, libc::SIGTERM)?;
        let deadline = Instant::now() + limit;
        let child = self.nodes[id].child.as_mut().ok_or_else(|| format!("node {id} is not running"))?;
        loop {
            if let Some(status) = child.try_wait().map_err(|e| format!("wait for node {id}: {e}"))? {
                self.nodes[id].child = None;
                return Ok(status);
            }
            if Instant::now() > deadline {
                return Err(format!("node {id} did not exit within {limit:?} of SIGTERM"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts a stopped or killed node `id` again on its own data without waiting for the cluster:
    /// `wait_ready` wants every broker listed, which a cluster with a node down never gives.
    pub fn launch(&mut self, id: usize) -> Result<(), String> {
        if self.nodes[id].child.is_some() {
            return Err(format!("node {id} is running"));
        }
        self.spawn(id)
    }

    /// Drops every packet between nodes `a` and `b`, both ways; other links and the clients' traffic
    /// pass. Only for a cluster started in namespaces (`ClusterSpec::netns`).
    pub fn cut_link(&self, a: usize, b: usize) -> Result<(), String> {
        self.links()?.route("add", a, b)
    }

    /// Undoes `cut_link`.
    pub fn heal_link(&self, a: usize, b: usize) -> Result<(), String> {
        self.links()?.route("del", a, b)
    }

    fn links(&self) -> Result<&Netns, String> {
        self.netns
            .as_ref()
            .ok_or_else(|| "links between nodes can be cut only in a cluster started in network namespaces".to_string())
    }

    /// The number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Starts node `id` again on its own data (killing it first if it runs) and waits for the cluster.
    pub fn restart(&mut self, id: usize) -> Result<(), String> {
        self.restart_within(id, READY_TIMEOUT)
    }

    /// `restart`, with the cluster ready within `limit`.
    pub fn restart_within(&mut self, id: usize, limit: Duration) -> Result<(), String> {
        self.kill(id);
        self.spawn(id)?;
        self.wait_ready(limit)
    }

    /// Waits until every running node answers Metadata listing every node as a broker.
    pub fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        let want = self.nodes.len();
        let mut last = String::from("no answer yet");
        loop {
            self.check_alive()?;
            let mut ready = 0;
            for node in self.nodes.iter().filter(|n| n.child.is_some()) {
                match brokers_listed(&node.host, node.port) {
                    Ok(n) if n == want => ready += 1,
                    Ok(n) => last = format!("node {} lists {n} of {want} brokers", node.id),
                    Err(e) => last = e,
                }
            }
            if ready == self.nodes.iter().filter(|n| n.child.is_some()).count() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("Kafka was not ready within {limit:?}: {last} (logs under {})", self.log_hint()));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log_hint(&self) -> String {
        self.nodes.first().and_then(|n| n.dir.parent()).map(|p| p.display().to_string()).unwrap_or_default()
    }

    /// A node that exited by itself is an error naming the end of its log.
    fn check_alive(&mut self) -> Result<(), String> {
        for node in &mut self.nodes {
            let Some(child) = node.child.as_mut() else { continue };
            if let Ok(Some(status)) = child.try_wait() {
                node.child = None;
                let log = std::fs::read_to_string(node.dir.join("stdout.log")).unwrap_or_default()
                    + &std::fs::read_to_string(node.dir.join("server.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect();
                return Err(format!("Kafka node {} exited ({status}):\n{}", node.id, tail.join("\n")));
            }
        }
        Ok(())
    }

    fn signal(&self, id: usize, signal: libc::c_int) -> Result<(), String> {
        let child = self.nodes[id].child.as_ref().ok_or_else(|| format!("node {id} is not running"))?;
        // SAFETY: kill(2) on our own child's pid, which `child` has not reaped.
        let rc = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        if rc == 0 {
            Ok(())
        } else {
            Err(format!("signal {signal} to node {id}: {}", std::io::Error::last_os_error()))
        }
    }

    fn spawn(&mut self, id: usize) -> Result<(), String> {
        let node = &self.nodes[id];
        let stdout =
            std::fs::File::create(node.dir.join("stdout.log")).map_err(|e| format!("{}: {e}", node.dir.display()))?;
        let stderr = stdout.try_clone().map_err(|e| e.to_string())?;
        let log4j2 = node.dir.parent().expect("a node folder has a parent").join("log4j2.properties");
        let mut java = Command::new("java");
        java.arg(format!("-Xms{}m", self.heap_mb))
            .arg(format!("-Xmx{}m", self.heap_mb))
            .args(QUICK_JVM)
            .args(["-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true"])
            .arg(format!("-Dkafka.logs.dir={}", node.dir.display()))
            .arg(format!("-Dlog4j2.configurationFile={}", log4j2.display()))
            .args(["-cp", &self.classpath, "kafka.Kafka"])
            .arg(node.dir.join("server.properties"))
            .current_dir(&node.dir)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        if let Some(ns) = &self.netns {
            ns.enter(&mut java, id)?;
        }
        let child = spawn_tied(java).map_err(|e| format!("cannot start java for Kafka node {id}: {e}"))?;
        self.nodes[id].child = Some(child);
        Ok(())
    }
}

impl Drop for KafkaCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                // A paused node must be killed too: SIGKILL works on a stopped process.
                child.kill().ok();
                child.wait().ok();
            }
        }
    }
}

/// The network namespaces of a cluster's nodes: node ID runs in `txnsim-K-nID` at 10.77.K.(ID+1), one
/// end of a veth pair whose other end is on the bridge `txnsim-brK` (10.77.K.254/24, the clients' way in
/// from the host). K is the first bridge number no other cluster on the machine holds. A link is cut
/// with a blackhole route in each end's namespace, which `ip` alone can add (no nft or iptables needed).
struct Netns {
    k: u8,
    /// Namespaces made so far (all of them once `create` returns).
    made: usize,
    /// `/var/run/netns/txnsim-K-nID`, held open for `setns` between fork and exec.
    fds: Vec<std::fs::File>,
}

impl Netns {
    fn create(nodes: usize) -> Result<Netns, String> {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            return Err(format!("cutting links needs network namespaces, which need root (running as uid {euid})"));
        }
        ip(&["-V"])?;
        let k = (1..=250u8)
            .find(|k| ip(&["link", "add", &Netns::bridge(*k), "type", "bridge"]).is_ok())
            .ok_or("no free bridge txnsim-br1..250 for the cluster's namespaces")?;
        // From here on, dropping `ns` removes whatever was made.
        let mut ns = Netns { k, made: 0, fds: Vec::new() };
        let bridge = Netns::bridge(k);
        ip(&["addr", "add", &format!("10.77.{k}.254/24"), "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        for id in 0..nodes {
            let name = ns.name(id);
            // A namespace of this name outlived a run that was killed; its bridge number is ours now.
            ip(&["netns", "del", &name]).ok();
            ip(&["netns", "add", &name])?;
            ns.made += 1;
            let veth = format!("txnsim{k}v{id}");
            ip(&["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &name])?;
            ip(&["link", "set", &veth, "master", &bridge, "up"])?;
            ip(&["-n", &name, "addr", "add", &format!("{}/24", ns.address(id)), "dev", "eth0"])?;
            ip(&["-n", &name, "link", "set", "eth0", "up"])?;
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
            let path = format!("/var/run/netns/{name}");
            ns.fds.push(std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?);
        }
        Ok(ns)
    }

    fn bridge(k: u8) -> String {
        format!("txnsim-br{k}")
    }

    fn name(&self, id: usize) -> String {
        format!("txnsim-{}-n{id}", self.k)
    }

    fn address(&self, id: usize) -> String {
        format!("10.77.{}.{}", self.k, id + 1)
    }

    /// Makes `command` start inside node `id`'s namespace.
    fn enter(&self, command: &mut Command, id: usize) -> Result<(), String> {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let fd = self.fds.get(id).ok_or_else(|| format!("node {id} has no namespace"))?.as_raw_fd();
        // SAFETY: setns(2) is async-signal-safe, and `fd` stays open in the parent until the child execs.
        unsafe {
            command.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        Ok(())
    }

    /// `ip route add|del blackhole` of each end's address in the other's namespace.
    fn route(&self, verb: &str, a: usize, b: usize) -> Result<(), String> {
        if a == b || a >= self.made || b >= self.made {
            return Err(format!("no link between nodes {a} and {b}"));
        }
        for (from, to) in [(a, b), (b, a)] {
            ip(&["-n", &self.name(from), "route", verb, "blackhole", &format!("{}/32", self.address(to))])?;
        }
        Ok(())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self.fds.clear();
        for id in 0..self.made {
            // Deleting a namespace deletes its end of the veth pair, and with it the bridge's end.
            ip(&["netns", "del", &self.name(id)]).ok();
        }
        ip(&["link", "del", &Netns::bridge(self.k)]).ok();
    }
}

/// Runs `ip ARGS`; its failure, or a missing `ip`, is an error of one line that says which.
fn ip(args: &[&str]) -> Result<(), String> {
    let mut command = Command::new("ip");
    command.args(args);
    let (status, _, err) = run_bounded(command, Duration::from_secs(10))
        .map_err(|e| format!("cannot run ip ({e}): network namespaces need iproute2's ip"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), err.trim().replace('\n', "; ")))
    }
}

/// `kafka-storage.sh format` for one node: a fixed cluster id, the static quorum from its properties.
fn format_storage(classpath: &str, node_dir: &Path) -> Result<(), String> {
    let mut java = Command::new("java");
    java.args(QUICK_JVM)
        .args(["-cp", classpath, "kafka.tools.StorageTool", "format", "-t", "dHhuc2ltLWFwYWNoZS1rYQ", "-c"])
        .arg(node_dir.join("server.properties"));
    let (status, out, err) = run_bounded(java, Duration::from_secs(60)).map_err(|e| format!("cannot run java: {e}"))?;
    let (ok, output) = (status.success(), out + &err);
    if ok {
        Ok(())
    } else {
        Err(format!("kafka-storage format of {} failed:\n{output}", node_dir.display()))
    }
}

/// How many brokers the node on `port` lists in its Metadata answer.
fn brokers_listed(host: &str, port: u16) -> Result<usize, String> {
    let mut conn = Conn::connect(&format!("{host}:{port}"))?;
    let mut request = MetadataRequest::default();
    request.topics = Some(Vec::new());
    let answer = conn.call(METADATA_VERSION, &request)?;
    Ok(answer.brokers.len())
}

/// `n` distinct free loopback ports, all held until every one is chosen.
fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free loopback port: {e}")))
        .collect::<Result<_, _>>()?;
    listeners.iter().map(|l| l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())).collect()
}

/// The major version `java -version` reports.
fn java_major() -> Result<u32, String> {
    let output = Command::new("java")
        .arg("-version")
        .output()
        .map_err(|e| format!("cannot run java ({e}): the real-Kafka tests need a JDK {MIN_JAVA}+ on PATH"))?;
    let text = String::from_utf8_lossy(&output.stderr);
    let quoted = text.split('"').nth(1).ok_or_else(|| format!("java -version printed no version: {text}"))?;
    let major = quoted.split('.').next().unwrap_or_default();
    major.parse().map_err(|_| format!("java -version printed {quoted:?}"))
}

/// Runs `command` to its end within `limit`: its exit status, stdout and stderr (drained while it runs,
/// so a chatty program cannot block on a full pipe). Past the limit it is killed and that is the error.
pub fn run_bounded(mut command: Command, limit: Duration) -> Result<(ExitStatus, String, String), String> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            r.read_to_string(&mut s).ok();
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped")));
    let err = drain(Box::new(child.stderr.take().expect("piped")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            return Err(format!("{:?} did not finish within {limit:?}", command.get_program()));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Ok((status, out.join().unwrap_or_default(), err.join().unwrap_or_default()))
}

/// A request to the spawner thread: a command to start, and where to send the child.
type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Starts `command` with `PR_SET_PDEATHSIG(SIGKILL)`, from a thread that lives as long as the process: the
/// kernel kills the child when the thread that forked it ends, so a child forked by a test's own thread
/// would die with that test, and one forked here dies only with the process (a panic, a kill, or exit).
pub fn spawn_tied(command: Command) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("kafka-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    use std::os::unix::process::CommandExt;
                    // SAFETY: prctl and getppid are async-signal-safe; nothing else runs between fork and exec.
                    unsafe {
                        command.pre_exec(|| {
                            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                            Ok(())
                        });
                    }
                    reply.send(command.spawn()).ok();
                }
            })
            .expect("start the spawner thread");
        Mutex::new(tx)
    });
    let (tx, rx) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((command, tx))
        .map_err(|_| std::io::Error::other("spawner gone"))?;
    rx.recv().map_err(|_| std::io::Error::other("spawner gone"))?
}

/// FNV-1a, to name the cache folder after the POM it was resolved from.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}
