//! A loopback relay in front of the cluster, for the drop-connections fault: librdkafka offers no call
//! that closes its connections, so when a seed switches the fault on its clients reach every broker
//! through a relay that can cut them all at once (each client then reconnects, as after a broker's
//! `connections.max.idle.ms` or a network blip). Broker addresses in Metadata and FindCoordinator
//! answers are rewritten to the relay's, so no client goes around it; every other frame passes as is.

use crate::frame;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, FindCoordinatorResponse, MetadataResponse, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

#[derive(Default)]
pub struct Relay {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Upstream `host:port` -> the relay's local port for it.
    routes: Mutex<BTreeMap<String, u16>>,
    /// Open connections: id -> (client side, broker side).
    live: Mutex<BTreeMap<u64, (TcpStream, TcpStream)>>,
    next_id: AtomicU64,
    stop: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Relay {
    /// The loopback address that stands for `upstream` (`host:port`), listening from now on.
    pub fn route(&self, upstream: &str) -> Result<String, String> {
        route(&self.inner, upstream).map(|port| format!("127.0.0.1:{port}"))
    }

    /// Closes every connection through the relay; the clients reconnect through it.
    pub fn cut(&self) {
        for (_, (a, b)) in std::mem::take(&mut *lock(&self.inner.live)) {
            a.shutdown(Shutdown::Both).ok();
            b.shutdown(Shutdown::Both).ok();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Relaxed);
        self.cut();
    }
}

fn route(inner: &Arc<Inner>, upstream: &str) -> Result<u16, String> {
    let mut routes = lock(&inner.routes);
    if let Some(port) = routes.get(upstream) {
        return Ok(*port);
    }
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("relay: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| format!("relay: {e}"))?;
    let port = listener.local_addr().map_err(|e| format!("relay: {e}"))?.port();
    routes.insert(upstream.to_string(), port);
    let (inner, upstream) = (inner.clone(), upstream.to_string());
    std::thread::spawn(move || {
        // Non-blocking accepts, so the listener closes once the relay is dropped.
        while !inner.stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((client, _)) => {
                    let (inner, upstream) = (inner.clone(), upstream.clone());
                    std::thread::spawn(move || connection(&inner, client, &upstream));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => return,
            }
        }
    });
    Ok(port)
}

/// Relays one client connection: requests as they come (noting which ones answer with broker
/// addresses), answers rewritten where they name brokers.
fn connection(inner: &Arc<Inner>, client: TcpStream, upstream: &str) {
    let Ok(server) = TcpStream::connect(upstream) else {
        client.shutdown(Shutdown::Both).ok();
        return;
    };
    client.set_nonblocking(false).ok();
    client.set_nodelay(true).ok();
    server.set_nodelay(true).ok();
    let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) =
        (client.try_clone(), server.try_clone(), client.try_clone(), server.try_clone())
    else {
        return;
    };
    let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
    lock(&inner.live).insert(id, (c3, s3));
    // Correlation id -> (api key, version) of requests whose answers name brokers.
    let asked: Arc<Mutex<BTreeMap<i32, (i16, i16)>>> = Arc::new(Mutex::new(BTreeMap::new()));
    let asked2 = asked.clone();
    let requests = std::thread::spawn(move || {
        let (mut from, mut to) = (client, server);
        while let Ok(Some(body)) = frame::read_frame(&mut from) {
            // Every request header starts with api key, api version and correlation id.
            if body.len() >= 8 {
                let key = i16::from_be_bytes([body[0], body[1]]);
                if key == ApiKey::Metadata as i16 || key == ApiKey::FindCoordinator as i16 {
                    let version = i16::from_be_bytes([body[2], body[3]]);
                    let corr = i32::from_be_bytes([body[4], body[5], body[6], body[7]]);
                    lock(&asked2).insert(corr, (key, version));
                }
            }
            if to.write_all(&frame::frame(&body)).is_err() {
                break;
            }
        }
        from.shutdown(Shutdown::Both).ok();
        to.shutdown(Shutdown::Both).ok();
    });
    let (mut from, mut to) = (s2, c2);
    while let Ok(Some(body)) = frame::read_frame(&mut from) {
        // Every response header starts with the correlation id.
        let corr = (body.len() >= 4).then(|| i32::from_be_bytes([body[0], body[1], body[2], body[3]]));
        let asked_for = corr.and_then(|c| lock(&asked).remove(&c));
        let body = match asked_for {
            Some((key, version)) => rewrite(inner, key, version, &body).unwrap_or(body),
            None => body,
        };
        if to.write_all(&frame::frame(&body)).is_err() {
            break;
        }
    }
    from.shutdown(Shutdown::Both).ok();
    to.shutdown(Shutdown::Both).ok();
    requests.join().ok();
    lock(&inner.live).remove(&id);
}

/// Points every broker address of a Metadata or FindCoordinator answer at the relay; `None` leaves the
/// answer as it was (one the codec cannot read is the client's to judge).
fn rewrite(inner: &Arc<Inner>, key: i16, version: i16, body: &Bytes) -> Option<Bytes> {
    let local = |host: &StrBytes, port: i32| route(inner, &format!("{}:{port}", host.as_str())).ok();
    let loopback = StrBytes::from_static_str("127.0.0.1");
    let mut buf = body.clone();
    let mut out = BytesMut::new();
    if key == ApiKey::Metadata as i16 {
        let header_version = MetadataResponse::header_version(version);
        let header = ResponseHeader::decode(&mut buf, header_version).ok()?;
        let mut r = MetadataResponse::decode(&mut buf, version).ok()?;
        for b in &mut r.brokers {
            b.port = local(&b.host, b.port)? as i32;
            b.host = loopback.clone();
        }
        header.encode(&mut out, header_version).ok()?;
        r.encode(&mut out, version).ok()?;
    } else {
        let header_version = FindCoordinatorResponse::header_version(version);
        let header = ResponseHeader::decode(&mut buf, header_version).ok()?;
        let mut r = FindCoordinatorResponse::decode(&mut buf, version).ok()?;
        if version < 4 {
            if r.error_code == 0 {
                r.port = local(&r.host, r.port)? as i32;
                r.host = loopback.clone();
            }
        } else {
            for c in r.coordinators.iter_mut().filter(|c| c.error_code == 0) {
                c.port = local(&c.host, c.port)? as i32;
                c.host = loopback.clone();
            }
        }
        header.encode(&mut out, header_version).ok()?;
        r.encode(&mut out, version).ok()?;
    }
    Some(out.freeze())
}
