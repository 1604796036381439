//! chartgen: placeholder until the chartgen issue lands.
fn main() {}
