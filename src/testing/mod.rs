//! Test support shared by the unit tests.

pub mod peak;
