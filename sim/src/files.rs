//! Reading the files a user names, bounded: a path to something endless (`/dev/zero`, a FIFO that never
//! closes its write end early) or huge is refused with the cap in the message, never read into memory.

use std::io::Read;
use std::path::Path;

/// The most a scenario or seed file may hold.
pub const INPUT_CAP: u64 = 64 << 20;
/// The most a saved target-sweep history (every seed's history and logs) may hold.
pub const HISTORY_CAP: u64 = 256 << 20;

/// The text of `path`, or why it cannot be had: unreadable, not UTF-8, or more than `cap` bytes.
pub fn read_capped(path: &Path, cap: u64) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut text = String::new();
    file.take(cap + 1).read_to_string(&mut text).map_err(|e| e.to_string())?;
    if text.len() as u64 > cap {
        return Err(format!("larger than the {} MiB such a file may hold", cap >> 20));
    }
    Ok(text)
}
