//! Nothing but the proptest suites under `tests/`.
