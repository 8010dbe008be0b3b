//! The `pushgate` binary.

fn main() {}
