//! Placeholder until the wheel benchmark lands.
fn main() {}
