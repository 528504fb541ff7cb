//! `txnsim serve`: sockets and the wall clock around the sans-io `Driver`. One thread per broker accepts
//! on that broker's port, one thread per connection reads frames, and the main thread owns the driver: it
//! applies each frame, fires timers when they fall due and writes the answers, so the engine is only ever
//! touched by one thread.

use crate::api::TRANSACTION_VERSION;
use crate::driver::{ConnId, Driver, Output};
use crate::frame::{self, FrameError};
use clap::Args;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use txnsim_engine::protocol::MAX_BROKERS;
use txnsim_engine::{EngineConfig, Mutation, Mutations};

/// Connections served at once (Kafka's `max.connections`, unbounded by default there). A new connection
/// past it closes the one idle the longest, as Kafka's selector closes its least recently used idle
/// connection (`connections.max.idle.ms`, KIP-402): clients that hold connections open without using
/// them cannot lock a working client out.
pub const MAX_CONNECTIONS: usize = 256;
/// Sockets accepted at once, served or waiting to be: a bound on the reader threads while idle ones close.
const MAX_SOCKETS: usize = 2 * MAX_CONNECTIONS;
/// A client that does not read its responses for this long is dropped, so it cannot stall the others.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest the main loop sleeps, so a stop signal is noticed.
const MAX_IDLE: Duration = Duration::from_millis(100);

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Where to listen: a loopback address, or host name and port (`localhost:0`); port 0 picks a free port
    /// (the chosen one is printed). Broker
    /// `i` listens on this port + `i` (with port 0, each on a free port of its own).
    #[arg(long, default_value = "127.0.0.1:9092", value_parser = parse_listen_addr)]
    pub addr: SocketAddr,
    /// Brokers in the cluster (1 to 5): one keeps its own metadata; more replicate through the engine's
    /// controller, which stripes the partitions' leaders over the brokers; broker 0 leads
    /// `__transaction_state` first.
    #[arg(long, default_value_t = 1)]
    pub brokers: u32,
    /// `default.replication.factor`: replicas of a topic created without a count (Kafka's default 1), at
    /// most `--brokers`.
    #[arg(long, default_value_t = 1)]
    pub default_replication_factor: u32,
    /// `min.insync.replicas` (Kafka's default 1): an acks=all write needs this many replicas in the ISR
    /// (capped by the topic's replication factor).
    #[arg(long, default_value_t = 1)]
    pub min_insync_replicas: u32,
    /// `eligible.leader.replicas.version` (KIP-966): 1, the default of a cluster Kafka 4.1 or later
    /// formats, keeps each partition's eligible leader replicas; 0 turns them off.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub eligible_leader_replicas_version: u8,
    /// `num.partitions`: partitions of a topic created without a count (auto-created or CreateTopics -1).
    #[arg(long, default_value_t = 1)]
    pub partitions: u32,
    /// `group.initial.rebalance.delay.ms`: how long a new consumer group waits for more members before
    /// its first generation (Kafka's default 3000).
    #[arg(long, default_value_t = 3_000)]
    pub group_initial_rebalance_delay_ms: u64,
    /// `group.min.session.timeout.ms`: the shortest session timeout a JoinGroup may ask for (Kafka's
    /// default 6000); `sweep --target --profile eos` asks for the profile's 1500.
    #[arg(long, default_value_t = txnsim_engine::EngineConfig::default().group_min_session_timeout_ms)]
    pub group_min_session_timeout_ms: u64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`: how often the coordinator looks for
    /// transactions open past their `transaction.timeout.ms` and aborts them (Kafka's default 10000).
    #[arg(long, default_value_t = 10_000)]
    pub transaction_abort_timed_out_transaction_cleanup_interval_ms: u64,
    /// Run with one injected historical bug (see `txnsim mutations`).
    #[arg(long, value_parser = txnsim_sim::cli::parse_mutation)]
    pub mutation: Option<Mutation>,
    /// Write every event (requests, broker steps, markers, index entries, violations) to this file.
    #[arg(long)]
    pub timeline: Option<PathBuf>,
}

enum Event {
    /// A connection accepted by this broker's listener.
    Open(ConnId, u32, TcpStream),
    Frame(ConnId, bytes::Bytes),
    Closed(ConnId, Option<String>),
    /// A line of stdin: `crash N` or `restart N`.
    Command(String),
}

/// `--addr`: an address, or a host name and port as `explore --addr` takes them (`localhost:0`), resolved
/// to its first IPv4 address (else its first).
fn parse_listen_addr(s: &str) -> Result<SocketAddr, String> {
    let resolved: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(s).map_err(|e| e.to_string())?.collect();
    resolved
        .iter()
        .find(|a| a.is_ipv4())
        .or(resolved.first())
        .copied()
        .ok_or_else(|| format!("{s} resolves to no address"))
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Serves until SIGINT or SIGTERM. Exit 0, or 1 if any state invariant was violated (each violation is
/// printed to stderr the moment it is found), or 2 on bad arguments.
pub fn run_serve(args: &ServeArgs) -> ExitCode {
    if !args.addr.ip().is_loopback() {
        eprintln!("error: --addr {} is not a loopback address; serve listens on loopback only", args.addr);
        return ExitCode::from(2);
    }
    if args.partitions == 0 || args.partitions > txnsim_engine::metadata::MAX_PARTITIONS_PER_TOPIC {
        eprintln!("error: --partitions must be 1..={}", txnsim_engine::metadata::MAX_PARTITIONS_PER_TOPIC);
        return ExitCode::from(2);
    }
    if !(1..=MAX_BROKERS).contains(&args.brokers) {
        eprintln!("error: --brokers must be 1..={MAX_BROKERS}, got {}", args.brokers);
        return ExitCode::from(2);
    }
    if !(1..=args.brokers).contains(&args.default_replication_factor) {
        eprintln!(
            "error: --default-replication-factor must be 1..={} (the broker count), got {}",
            args.brokers, args.default_replication_factor
        );
        return ExitCode::from(2);
    }
    if args.min_insync_replicas == 0 {
        eprintln!("error: --min-insync-replicas must be at least 1");
        return ExitCode::from(2);
    }
    if args.transaction_abort_timed_out_transaction_cleanup_interval_ms == 0 {
        eprintln!("error: --transaction-abort-timed-out-transaction-cleanup-interval-ms must be at least 1");
        return ExitCode::from(2);
    }
    let mut timeline = match args.timeline.as_ref().map(File::create).transpose() {
        Ok(f) => f.map(BufWriter::new),
        Err(e) => {
            eprintln!(
                "error: --timeline {}: {e}",
                args.timeline.as_ref().map_or(String::new(), |p| p.display().to_string())
            );
            return ExitCode::from(2);
        }
    };
    let mut addrs = Vec::new();
    for i in 0..args.brokers {
        let port = match args.addr.port() {
            0 => Some(0),
            p => u16::try_from(p as u32 + i).ok(),
        };
        let Some(port) = port else {
            eprintln!("error: --addr {} leaves no port for broker {i} (port + {i} > 65535)", args.addr);
            return ExitCode::from(2);
        };
        addrs.push(SocketAddr::new(args.addr.ip(), port));
    }
    let mut listeners = Vec::new();
    for (i, addr) in addrs.into_iter().enumerate() {
        match TcpListener::bind(addr) {
            Ok(l) => listeners.push(l),
            Err(e) => {
                eprintln!("error: cannot listen on {addr} (broker {i}): {e}");
                return ExitCode::from(2);
            }
        }
    }
    let locals: Vec<SocketAddr> =
        listeners.iter().map(|l| l.local_addr().expect("a bound listener has an address")).collect();
    // SAFETY: the handler only stores to an atomic (async-signal-safe); no other thread exists yet.
    unsafe {
        libc::signal(libc::SIGINT, on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t);
    }
    let config = EngineConfig {
        num_partitions: args.partitions,
        group_initial_rebalance_delay_ms: args.group_initial_rebalance_delay_ms,
        group_min_session_timeout_ms: args.group_min_session_timeout_ms,
        abort_timed_out_cleanup_interval_ms: args.transaction_abort_timed_out_transaction_cleanup_interval_ms,
        mutations: args.mutation.map(Mutations::one).unwrap_or_default(),
        min_insync_replicas: args.min_insync_replicas,
        eligible_leader_replicas: args.eligible_leader_replicas_version == 1,
        ..EngineConfig::default()
    };
    let start = Instant::now();
    let now_ms = || start.elapsed().as_millis() as u64;
    let addresses: Vec<(String, u16)> = locals.iter().map(|a| (a.ip().to_string(), a.port())).collect();
    let mut driver = Driver::cluster(config, &addresses, args.default_replication_factor, now_ms());
    if timeline.is_some() {
        driver.timeline.enable();
    }
    if args.brokers == 1 {
        println!(
            "txnsim serve: listening on {} (transaction.version {TRANSACTION_VERSION}, one broker, id 0)",
            locals[0]
        );
    } else {
        let each: Vec<String> = locals.iter().enumerate().map(|(i, a)| format!("broker {i} on {a}")).collect();
        println!(
            "txnsim serve: listening as {} brokers: {} (transaction.version {TRANSACTION_VERSION}, \
             default.replication.factor {}, \
             min.insync.replicas {})",
            args.brokers,
            each.join(" / "),
            args.default_replication_factor,
            args.min_insync_replicas
        );
    }
    std::io::stdout().flush().ok();

    serve_loop(&mut driver, listeners, &STOP, true, &mut timeline, &now_ms);
    let violations = driver.violations().len();
    eprintln!("txnsim serve: stopped; {violations} invariant(s) violated");
    if violations > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Serves `driver` on `listeners` (broker `i` on `listeners[i]`) until `stop` is set, at the time
/// `now_ms` tells; with `stdin_commands`, lines of stdin are `crash N` and `restart N`.
fn serve_loop(
    driver: &mut Driver,
    listeners: Vec<TcpListener>,
    stop: &AtomicBool,
    stdin_commands: bool,
    timeline: &mut Option<BufWriter<File>>,
    now_ms: &dyn Fn() -> u64,
) {
    let (events, inbox) = mpsc::channel();
    let (open, next_id) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicU64::new(0)));
    for (broker, listener) in (0..).zip(listeners) {
        let (events, open, next_id) = (events.clone(), open.clone(), next_id.clone());
        std::thread::spawn(move || accept_loop(listener, broker, events, open, next_id));
    }
    // Commands on stdin (`crash N`, `restart N`), one a line; at end of input serve goes on serving.
    if stdin_commands {
        let commands = events.clone();
        std::thread::spawn(move || {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { return };
                if commands.send(Event::Command(line)).is_err() {
                    return;
                }
            }
        });
    }
    drop(events);
    let mut streams: BTreeMap<ConnId, TcpStream> = BTreeMap::new();
    // When each served connection last sent a frame (or opened), for closing the idlest at the cap.
    let mut last_active: BTreeMap<ConnId, Instant> = BTreeMap::new();
    while !stop.load(Ordering::Relaxed) {
        let wait = driver
            .next_deadline_ms()
            .map(|due| Duration::from_millis(due.saturating_sub(now_ms())))
            .unwrap_or(MAX_IDLE)
            .min(MAX_IDLE);
        let mut outputs = match inbox.recv_timeout(wait) {
            Ok(Event::Open(id, broker, stream)) => {
                if driver.is_down(broker) {
                    // A crashed broker's port: the connection is closed at once, as by a dead host.
                    stream.shutdown(Shutdown::Both).ok();
                } else {
                    if streams.len() >= MAX_CONNECTIONS {
                        let idlest = last_active.iter().min_by_key(|(_, at)| **at).map(|(id, _)| *id);
                        if let Some(idle) = idlest {
                            last_active.remove(&idle);
                            if let Some(s) = streams.remove(&idle) {
                                s.shutdown(Shutdown::Both).ok();
                            }
                            driver.on_disconnect(idle);
                            let why = format!("closed as the idlest of {MAX_CONNECTIONS} connections");
                            driver.timeline.event(now_ms(), &format!("conn-{idle}"), || why);
                        }
                    }
                    streams.insert(id, stream);
                    last_active.insert(id, Instant::now());
                    driver.on_connect(id, broker);
                }
                Vec::new()
            }
            Ok(Event::Command(line)) => match command(driver, now_ms(), &line) {
                Ok((outputs, done)) => {
                    println!("txnsim serve: {done}");
                    std::io::stdout().flush().ok();
                    outputs
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    Vec::new()
                }
            },
            Ok(Event::Frame(id, body)) => {
                if let Some(at) = last_active.get_mut(&id) {
                    *at = Instant::now();
                }
                driver.on_frame(now_ms(), id, body)
            }
            Ok(Event::Closed(id, reason)) => {
                if let Some(reason) = reason {
                    driver.timeline.event(now_ms(), &format!("conn-{id}"), || format!("closed: {reason}"));
                }
                streams.remove(&id);
                if last_active.remove(&id).is_some() {
                    driver.on_disconnect(id);
                }
                Vec::new()
            }
            Err(RecvTimeoutError::Timeout) => Vec::new(),
            Err(RecvTimeoutError::Disconnected) => break,
        };
        outputs.extend(driver.on_tick(now_ms()));
        for output in outputs {
            match output {
                Output::Send(id, bytes) => {
                    let ok = streams.get_mut(&id).is_some_and(|s| s.write_all(&bytes).is_ok());
                    if !ok {
                        if let Some(s) = streams.remove(&id) {
                            s.shutdown(Shutdown::Both).ok();
                        }
                        driver.on_disconnect(id);
                    }
                }
                Output::Close(id, reason) => {
                    driver.timeline.event(now_ms(), &format!("conn-{id}"), || format!("closing: {reason}"));
                    if let Some(s) = streams.remove(&id) {
                        s.shutdown(Shutdown::Both).ok();
                    }
                }
            }
        }
        for v in driver.take_new_violations() {
            eprintln!("VIOLATION {v}");
        }
        if let Some(out) = timeline.as_mut() {
            for line in driver.timeline.take_lines() {
                writeln!(out, "{line}").ok();
            }
            out.flush().ok();
        }
    }
}

/// Serves `driver` on `listener` (one broker) on this thread while `work` runs on another, for a command
/// that built the cluster it serves (`txnsim conform`); the driver is not `Send`, so the work moves
/// instead. The clock starts at `base_ms` (the built cluster's time: its timers stay due when they were).
/// Returns `work`'s result and the state invariants violated meanwhile.
pub fn serve_while<R: Send>(
    mut driver: Driver,
    listener: TcpListener,
    base_ms: u64,
    work: impl FnOnce() -> R + Send,
) -> (R, Vec<String>) {
    /// Stops the loop when the work ends, even by a panic.
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let stop = AtomicBool::new(false);
    let result = std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let _stop = StopOnDrop(&stop);
            work()
        });
        let start = Instant::now();
        let now_ms = || base_ms + start.elapsed().as_millis() as u64;
        serve_loop(&mut driver, vec![listener], &stop, false, &mut None, &now_ms);
        worker.join()
    });
    let violations = driver.violations().iter().map(|v| v.to_string()).collect();
    match result {
        Ok(r) => (r, violations),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// One stdin command: `crash N` (the broker crashes: `Driver::crash_broker`) or `restart N`. What the
/// sockets must do and the line to print, or why not.
fn command(driver: &mut Driver, now_ms: u64, line: &str) -> Result<(Vec<Output>, String), String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let (verb, id) = match words.as_slice() {
        [verb @ ("crash" | "restart"), id] => {
            (*verb, id.parse::<u32>().map_err(|_| format!("{line:?}: {id:?} is not a broker id"))?)
        }
        [] => return Ok((Vec::new(), "ready".to_string())),
        _ => return Err(format!("{line:?}: commands are `crash N` and `restart N`")),
    };
    if verb == "crash" {
        Ok((driver.crash_broker(now_ms, id)?, format!("broker {id} crashed")))
    } else {
        Ok((driver.restart_broker(now_ms, id)?, format!("broker {id} restarted")))
    }
}

/// Accepts broker `broker`'s connections; ids are unique across the brokers' listeners, and
/// `MAX_SOCKETS` bounds all of them together (the main loop keeps `MAX_CONNECTIONS` served).
fn accept_loop(
    listener: TcpListener,
    broker: u32,
    events: Sender<Event>,
    open: Arc<AtomicUsize>,
    next_id: Arc<AtomicU64>,
) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if open.load(Ordering::Relaxed) >= MAX_SOCKETS {
            stream.shutdown(Shutdown::Both).ok();
            eprintln!("txnsim serve: refused a connection to broker {broker}: {MAX_SOCKETS} are open already");
            continue;
        }
        let id: ConnId = next_id.fetch_add(1, Ordering::Relaxed);
        stream.set_nodelay(true).ok();
        stream.set_write_timeout(Some(WRITE_TIMEOUT)).ok();
        let Ok(writer) = stream.try_clone() else { continue };
        if events.send(Event::Open(id, broker, writer)).is_err() {
            return;
        }
        open.fetch_add(1, Ordering::Relaxed);
        let (events, open) = (events.clone(), open.clone());
        std::thread::spawn(move || {
            let mut reader = std::io::BufReader::new(stream);
            let reason = loop {
                match frame::read_frame(&mut reader) {
                    Ok(Some(body)) => {
                        if events.send(Event::Frame(id, body)).is_err() {
                            break None;
                        }
                    }
                    Ok(None) => break None,
                    Err(e @ FrameError::BadSize(_)) => {
                        let s = reader.get_ref();
                        s.shutdown(Shutdown::Both).ok();
                        break Some(e.to_string());
                    }
                    Err(FrameError::Io(e)) => break Some(e.to_string()),
                }
            };
            open.fetch_sub(1, Ordering::Relaxed);
            events.send(Event::Closed(id, reason)).ok();
        });
    }
}
