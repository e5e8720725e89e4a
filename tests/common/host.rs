//! What the machine has: a program on PATH, and whether a binary is static. Shared by
//! `cargo xtask` (which installs what is missing) and the runtime suite (which says what is),
//! so both judge the machine alike; xtask includes this file by path.

use std::path::{Path, PathBuf};

/// The first file named `name` in a PATH directory.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Whether `path` is a 64-bit little-endian ELF executable without a program interpreter
/// (PT_INTERP): one that runs in a root filesystem holding nothing else.
pub fn is_static_elf(path: &Path) -> bool {
    let Ok(data) = std::fs::read(path) else {
        return false;
    };
    if data.len() < 64 || &data[..4] != b"\x7fELF" || data[4] != 2 || data[5] != 1 {
        return false;
    }
    let u16_at = |at: usize| u16::from_le_bytes([data[at], data[at + 1]]) as usize;
    let u64_at =
        |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes")) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    const PT_INTERP: u32 = 3;
    (0..phnum).all(|i| {
        let at = phoff + i * phentsize;
        data.get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .is_some_and(|kind| kind != PT_INTERP)
    })
}
