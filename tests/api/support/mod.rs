//! Shared helpers of the integration tests.

pub mod database;

pub use database::TestDatabase;
