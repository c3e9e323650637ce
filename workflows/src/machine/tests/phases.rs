//! Inputs that arrive in a phase that cannot take them: each is an explicit branch that
//! changes nothing but what it says it does (see the table in `machine/mod.rs`).
