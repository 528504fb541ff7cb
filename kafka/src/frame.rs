//! Kafka's framing: a 4-byte big-endian size, then that many bytes (`NetworkReceive`). The size is
//! checked against `socket.request.max.bytes` before a byte of the body is buffered, and the body is
//! read as it arrives, so a client cannot make the server allocate what it never sends.

use bytes::Bytes;
use std::io::{self, Read};

/// `socket.request.max.bytes` (Kafka's default, 100 MiB).
pub const MAX_REQUEST_BYTES: usize = 104_857_600;

#[derive(Debug)]
pub enum FrameError {
    /// The size prefix is negative or above `MAX_REQUEST_BYTES` (`InvalidReceiveException`).
    BadSize(i32),
    /// The connection ended inside a frame, or failed.
    Io(io::Error),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::BadSize(n) => {
                write!(f, "invalid frame size {n} (socket.request.max.bytes {MAX_REQUEST_BYTES})")
            }
            FrameError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Checks a size prefix: `NetworkReceive.readFrom` rejects negative sizes and sizes above the limit.
pub fn check_size(size: i32) -> Result<usize, FrameError> {
    if size < 0 || size as usize > MAX_REQUEST_BYTES {
        return Err(FrameError::BadSize(size));
    }
    Ok(size as usize)
}

/// Reads one frame's body. `Ok(None)` is a clean end of stream between frames.
pub fn read_frame(reader: &mut impl Read) -> Result<Option<Bytes>, FrameError> {
    let mut size = [0u8; 4];
    match reader.read_exact(&mut size) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(FrameError::Io(e)),
    }
    let size = check_size(i32::from_be_bytes(size))?;
    // `take` + `read_to_end` grows the buffer with the bytes that arrive, not with the claimed size.
    let mut body = Vec::new();
    reader.take(size as u64).read_to_end(&mut body).map_err(FrameError::Io)?;
    if body.len() < size {
        return Err(FrameError::Io(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed mid-frame")));
    }
    Ok(Some(Bytes::from(body)))
}

/// Prefixes a response body with its size.
pub fn frame(body: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as i32).to_be_bytes());
    out.extend_from_slice(body);
    Bytes::from(out)
}
