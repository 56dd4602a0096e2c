//! The database: migrations, the connection pool and the embedded PostgreSQL default.

pub mod embedded;

/// The schema migrations in `migrations/`, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!();
