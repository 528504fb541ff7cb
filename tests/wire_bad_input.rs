//! Bad input over real sockets: oversized size prefixes, garbage frames, unknown API keys, clients that
//! hang up mid-request, all at once on many connections. Each bad connection is closed, the server
//! keeps serving well-behaved clients, and no log changes (the timeline shows no append and no marker).

mod common;

use common::Server;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Connections per kind of bad input, all open at the same time.
const PER_KIND: usize = 16;
const IO_TIMEOUT: Duration = Duration::from_secs(10);

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect to serve");
    s.set_read_timeout(Some(IO_TIMEOUT)).expect("read timeout");
    s
}

/// A request frame: size, then header v1 (api key, version, correlation id, client id "t"), then `body`.
fn frame(api_key: i16, version: i16, correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let mut inner = Vec::new();
    inner.extend_from_slice(&api_key.to_be_bytes());
    inner.extend_from_slice(&version.to_be_bytes());
    inner.extend_from_slice(&correlation_id.to_be_bytes());
    inner.extend_from_slice(&1i16.to_be_bytes());
    inner.push(b't');
    inner.extend_from_slice(body);
    [&(inner.len() as i32).to_be_bytes()[..], &inner].concat()
}

/// True once the server has closed the connection (end of stream or reset) within the timeout.
fn closed_by_server(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => return !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
        }
    }
}

/// An ApiVersions v0 round trip: (correlation id, error code) of the answer.
fn api_versions(addr: &str, version: i16) -> (i32, i16) {
    let mut s = connect(addr);
    s.write_all(&frame(18, version, 77, &[])).expect("send ApiVersions");
    let mut head = [0u8; 10];
    s.read_exact(&mut head).expect("an ApiVersions answer");
    let correlation_id = i32::from_be_bytes(head[4..8].try_into().unwrap());
    (correlation_id, i16::from_be_bytes(head[8..10].try_into().unwrap()))
}

/// `MAX_CONNECTIONS` (256) idle connections fill serve's cap; a working client's connection still gets
/// its answer, and the connection idle the longest is the one closed for it (Kafka closes its least
/// recently used idle connection).
#[test]
fn idle_connections_at_the_cap_do_not_lock_a_client_out() {
    let server = Server::start("connection-cap", &[]);
    let addr = &server.addresses[0];
    let mut idle: Vec<TcpStream> = (0..256).map(|_| connect(addr)).collect();
    // The first idle one has surely been accepted and served before the others arrive.
    assert_eq!(api_versions(addr, 0), (77, 0), "a client beyond the cap is answered");
    assert!(closed_by_server(&mut idle[0]), "the connection idle the longest was closed for it");
    idle[255].set_read_timeout(Some(Duration::from_millis(200))).expect("read timeout");
    assert!(!closed_by_server(&mut idle[255]), "the newest idle connection is still open");
    drop(idle);
    server.stop_clean();
}

#[test]
fn bad_clients_are_closed_and_the_rest_are_served() {
    let server = Server::start("bad-input", &[]);
    let addr = &server.addresses[0];
    let mut bad: Vec<(&str, TcpStream)> = Vec::new();
    for _ in 0..PER_KIND {
        let mut s = connect(addr);
        // 0x7fffffff: above socket.request.max.bytes, refused before any body is read.
        s.write_all(&i32::MAX.to_be_bytes()).unwrap();
        bad.push(("oversized", s));
        let mut s = connect(addr);
        s.write_all(&[0, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef]).unwrap();
        bad.push(("garbage", s));
        let mut s = connect(addr);
        s.write_all(&frame(0x7f00, 0, 1, &[0xff, 0xff])).unwrap();
        bad.push(("unknown api key", s));
        let mut s = connect(addr);
        // Metadata v1 whose topic array claims 0x7fffffff entries.
        s.write_all(&frame(3, 1, 1, &[0x7f, 0xff, 0xff, 0xff])).unwrap();
        bad.push(("huge array count", s));
        // Says 100 bytes, sends 10, hangs up.
        let mut s = connect(addr);
        s.write_all(&[&100i32.to_be_bytes()[..], &[0u8; 10]].concat()).unwrap();
        drop(s);
    }
    // While the bad connections are open, good clients are answered.
    assert_eq!(api_versions(addr, 0), (77, 0), "ApiVersions v0 is answered with no error");
    assert_eq!(api_versions(addr, 99), (77, 35), "an unknown ApiVersions version gets UNSUPPORTED_VERSION at v0");
    for (what, s) in &mut bad {
        assert!(closed_by_server(s), "the server closes a connection that sent {what}");
    }
    assert_eq!(api_versions(addr, 2), (77, 0), "still serving after closing them");
    let timeline = server.stop_clean();
    assert!(
        !timeline.contains(" appends ") && !timeline.contains(" marker for "),
        "bad input must not change any log:\n{timeline}"
    );
}

/// `txnsim serve FLAGS` is refused before it listens: exit 2 and one line of stderr containing `want`.
fn assert_serve_refuses(flags: &[&str], want: &str) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_txnsim"))
        .arg("serve")
        .args(flags)
        .output()
        .expect("run txnsim serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{flags:?}: bad arguments exit 2: {err}");
    assert_eq!(err.lines().count(), 1, "{flags:?}: one line: {err}");
    assert!(err.contains(want), "{flags:?}: want {want:?} in {err}");
}

/// An unwritable `--timeline` names the path in one line (exit 2).
#[test]
fn serve_names_a_timeline_it_cannot_write() {
    assert_serve_refuses(
        &["--addr", "127.0.0.1:0", "--timeline", "/nonexistent/t.txt"],
        "--timeline /nonexistent/t.txt: ",
    );
}

/// `--addr` takes a host name as `explore --addr` does: `localhost:0` listens on a free loopback port.
#[test]
fn serve_listens_on_a_host_name() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_txnsim"))
        .args(["serve", "--addr", "localhost:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run txnsim serve");
    let stdout = child.stdout.take().expect("piped");
    let first = std::io::BufRead::lines(std::io::BufReader::new(stdout)).next();
    child.kill().ok();
    child.wait().ok();
    let first = first.expect("a line").expect("utf-8");
    assert!(first.starts_with("txnsim serve: listening on 127.0.0.1:"), "{first}");
}

/// serve listens on loopback only, and says so in one line (exit 2) rather than binding elsewhere.
#[test]
fn serve_refuses_a_non_loopback_address() {
    assert_serve_refuses(&["--addr", "0.0.0.0:0"], "not a loopback address");
}

/// A cleanup interval of 0 would make the coordinator's timeout scan spin: refused in one line (exit 2).
#[test]
fn serve_refuses_a_zero_timeout_scan_interval() {
    let flags = ["--addr", "127.0.0.1:0", "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "0"];
    assert_serve_refuses(&flags, "must be at least 1");
}

/// `--brokers` is 1..=5, the default replication factor 1..=brokers, `min.insync.replicas` at least 1,
/// and every broker needs a port: each refused in one line (exit 2) before anything listens (the default
/// address is never bound).
#[test]
fn serve_refuses_bad_broker_counts_replication_factors_and_ports() {
    for (flags, want) in [
        (&["--brokers", "0"][..], "--brokers must be 1..=5"),
        (&["--brokers", "6"][..], "--brokers must be 1..=5"),
        (&["--brokers", "3", "--default-replication-factor", "4"][..], "--default-replication-factor must be 1..=3"),
        (&["--default-replication-factor", "0"][..], "--default-replication-factor must be 1..=1"),
        (&["--min-insync-replicas", "0"][..], "--min-insync-replicas must be at least 1"),
        (&["--addr", "127.0.0.1:65535", "--brokers", "2"][..], "leaves no port for broker 1"),
    ] {
        assert_serve_refuses(flags, want);
    }
}
