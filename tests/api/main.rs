//! Integration tests, in one binary: each test gets its own fresh, migrated
//! database (`support::TestDatabase`) on a real PostgreSQL, the embedded one
//! unless `DATABASE_URL` is set.

mod database_harness;
mod support;
